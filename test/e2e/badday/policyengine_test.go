package badday

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

const enginePath = "/mutate"

// engineWebhook is a webhook made the way Kyverno, Gatekeeper's mutation
// and Kubewarden install theirs: rules */* for every operation that
// writes, every namespace but kube-system and the engine's own, Fail, and
// kube-apiserver's default timeout of 10 s. The guard's own namespace,
// and "default" where its marking canary goes, are in scope.
func engineWebhook(name, engineNS string, wh *harness.Webhook) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name: name,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{
			Service:  &admissionregistrationv1.ServiceReference{Namespace: engineNS, Name: "engine", Path: ptr.To(enginePath), Port: ptr.To(wh.Port())},
			CABundle: wh.CA.CertPEM,
		},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"},
				Scope: ptr.To(admissionregistrationv1.AllScopes)},
		}},
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{metav1.NamespaceSystem, engineNS},
		}}},
		FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To[int32](10),
		AdmissionReviewVersions: []string{"v1"},
	}
}

// TestBadDay_policyEngineWebhookHangs: a policy engine's */* webhook
// hangs, with the guard's defaults (GuardConfiguration defaults, and the
// Deployment's lease timings). Its canary and its Events are refused
// while the webhook hangs, so the opening goes unconfirmed after its bound;
// the circuit opens within 15 s of the hang, the guard keeps leading, and
// it closes after recovery.
func TestBadDay_policyEngineWebhookHangs(t *testing.T) {
	for _, mode := range []string{"Bypass", "Ignore"} {
		t.Run(mode, func(t *testing.T) { policyEngineHangs(t, mode) })
	}
}

func policyEngineHangs(t *testing.T, mode string) {
	ctx := context.Background()
	name := uniqueName("engine-" + strings.ToLower(mode))
	engineNS := namespace(t, name+"-system")
	guardNS := namespace(t, name+"-guard")
	ip := harness.NextServiceIP()
	wh, err := harness.StartWebhook(harness.WebhookOptions{Host: ip, DNSNames: []string{"engine." + engineNS + ".svc"}})
	require.NoError(t, err)
	t.Cleanup(wh.Close)
	wh.SetBehaviour(enginePath, harness.Allow())
	require.NoError(t, env.ServiceFor(ctx, engineNS, "engine", ip, wh.Port()))

	// Everything cluster-scoped is created before the webhook hangs: */*
	// matches every cluster-scoped object, whatever the namespaceSelector.
	id, err := env.ServiceAccount(ctx, guardNS, "webhook-guard")
	require.NoError(t, err)
	require.NoError(t, env.GrantGuard(ctx, guardNS, id, []string{name}))
	hook := "mutate." + name + ".policy.example"
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{engineWebhook(hook, engineNS, wh)},
	}
	require.NoError(t, env.Client.Create(ctx, mwc))
	original := mwc.Webhooks[0]
	t.Cleanup(func() { removeEngine(t, mwc, wh, guardNS) })

	// Nothing but what a target must say: every other setting at its
	// default (probe every 1 s, its timeout 4 s, openAfter 3, closeAfter
	// 5, the apiserver signal read every 30 s).
	//
	// Leader election with the binary's lease timings, as the Deployment
	// runs it, on a Lease in kube-system as the shipped Deployment keeps
	// it: policy engines leave kube-system out. (In the guard's own
	// namespace, which this webhook intercepts, each renewal would wait
	// its 10 s, and in Ignore mode, whose calls still wait, cost the guard
	// its Lease; "guard webhooks" and the startup warning name that case.)
	g := startGuard(t, name, id, targetConfig(name, hook, mode), wh, enginePath)

	get := func() *admissionregistrationv1.MutatingWebhookConfiguration {
		got := &admissionregistrationv1.MutatingWebhookConfiguration{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: name}, got))
		return got
	}
	hung := time.Now()
	wh.SetBehaviour(enginePath, harness.Delayed(time.Minute, harness.Allow()))
	require.Eventually(t, func() bool { return harness.IsOpen(get(), hook, mode) }, 40*time.Second, 50*time.Millisecond,
		"the circuit never opened")
	opened := time.Since(hung)
	t.Logf("%s: opened %.2f s after the webhook hung", mode, opened.Seconds())
	assert.LessOrEqual(t, opened, 15*time.Second, "the circuit opened later than 15 s after the hang")
	assert.Contains(t, g.Logs(), "Opening without marking evidence", "the canary cannot pass a hanging */* webhook: the opening should have gone unconfirmed")

	// The CircuitOpened Event is recorded while the webhook still hangs:
	// it is in kube-system, which the engine leaves out (in default, where
	// client-go would put it, it would wait 10 s and be lost).
	var note string
	require.Eventually(t, func() bool {
		list := &eventsv1.EventList{}
		if env.Client.List(ctx, list, client.InNamespace(circuit.EventsNamespace)) != nil {
			return false
		}
		for _, e := range list.Items {
			if e.Reason == "CircuitOpened" && e.Regarding.Name == name {
				note = e.Note
				return true
			}
		}
		return false
	}, 10*time.Second, 100*time.Millisecond, "no CircuitOpened Event about %s in %s while the webhook hangs", name, circuit.EventsNamespace)
	assert.Contains(t, note, "marking not confirmed", "the Event says the opening went unconfirmed")

	if mode == "Bypass" {
		// Requests the webhook intercepted are admitted without waiting.
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "after-", Namespace: guardNS}}
		start := time.Now()
		require.Eventually(t, func() bool { return env.Client.Create(ctx, cm.DeepCopy()) == nil }, 20*time.Second, 100*time.Millisecond)
		t.Logf("%s: a create in an intercepted namespace admitted %.2f s after the opening", mode, time.Since(start).Seconds())
	}

	healed := time.Now()
	wh.SetBehaviour(enginePath, harness.Allow())
	require.Eventually(t, func() bool {
		got := get()
		_, record := got.Annotations[circuit.Annotation]
		return !record && equality.Semantic.DeepEqual(*harness.FindWebhook(got, hook), original)
	}, time.Minute, 100*time.Millisecond, "the circuit never closed after recovery")
	t.Logf("%s: closed and restored %.2f s after recovery", mode, time.Since(healed).Seconds())

	exited, _ := g.Exited()
	assert.False(t, exited, "the guard exited (lost its Lease?)")
	assert.NotContains(t, g.Logs(), "leader election lost")
}

// removeEngine deletes the engine's configuration and waits, for up to
// 10 s, until kube-apiserver no longer calls its webhook, before the
// webhook closes (a cleanup registered earlier runs later): kube-apiserver
// calls a deleted webhook until its informer sees the delete, and the next
// test's requests would be refused by a webhook that is gone.
func removeEngine(t *testing.T, mwc *admissionregistrationv1.MutatingWebhookConfiguration, wh *harness.Webhook, namespace string) {
	ctx := context.Background()
	_ = env.Client.Delete(ctx, mwc)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "gone-", Namespace: namespace}}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		before := wh.APIServerCalls(enginePath)
		if env.Client.Create(ctx, cm.DeepCopy()) == nil && wh.APIServerCalls(enginePath) == before {
			return
		}
	}
	t.Logf("kube-apiserver still called the engine's webhook 10 s after its configuration was deleted")
}
