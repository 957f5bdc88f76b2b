package e2e

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

// Fact: kube-apiserver v1.37 accepts a MutatingAdmissionPolicy whose
// paramKind is MutatingWebhookConfiguration, bound to one configuration
// by name, and evaluates it against the configuration as it is now: a
// write to the configuration's annotations arms the marking policy within
// a bounded time, and the next write disarms it. The installed policy
// also answers a canary (a dry-run Event) with its digest, the evidence
// that this version of it is loaded, and says whether it is armed: by the
// record, or by the arming entries the breaker writes around a
// transition; once the canary says so, the next object is marked.
func TestFact_markingPolicyReadsTheWebhookConfigurationAsItsParam(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns)
	name := uniqueName(t, "fact-param")
	hook := "mark.example.com"
	mwc := markedConfiguration(t, ns, name, hook, admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}})

	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	keeper := &marking.Keeper{Reader: env.Client, Canary: cs.CoreV1().Events(marking.CanaryNamespace)}
	circuits := []marking.Circuit{{Configuration: name, Webhook: hook}}
	start := time.Now()
	require.Eventually(t, func() bool {
		review, err := cs.CoreV1().Events(marking.CanaryNamespace).Create(ctx, marking.CanaryEvent(circuits...), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err)
		return review.Annotations[marking.LoadedAnnotation(name, hook)] == marking.Digest(name, hook)
	}, propagation, 20*time.Millisecond, "the canary never showed the policy loaded")
	t.Logf("policy loaded %v after its creation", time.Since(start))
	// A policy answers only a canary that asks for its circuit: each
	// answer is a mutation kube-apiserver applies.
	unasked, err := cs.CoreV1().Events(marking.CanaryNamespace).Create(ctx, marking.CanaryEvent(marking.Circuit{Configuration: name, Webhook: "other." + hook}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err)
	assert.NotContains(t, unasked.Annotations, marking.LoadedAnnotation(name, hook), "a canary that does not ask for the circuit")

	create := func(labels map[string]string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "cm-", Labels: labels}}
		require.NoError(t, env.Client.Create(ctx, cm))
		return cm
	}
	assert.NotContains(t, create(nil).Labels, circuit.UnmutatedLabel, "dormant: no record")

	// Arm: the record gets an entry for the webhook, as the breaker's
	// opening write puts it.
	armedAt := time.Now()
	opened := openInRecord(t, mwc, hook)
	var marked *corev1.ConfigMap
	require.Eventually(t, func() bool {
		marked = create(nil)
		return marked.Labels[circuit.UnmutatedLabel] != ""
	}, propagation, 5*time.Millisecond, "the armed policy never marked")
	t.Logf("armed %v after the write", time.Since(armedAt))
	assert.Equal(t, marking.ID(name, hook), marked.Labels[circuit.UnmutatedLabel])
	assert.Equal(t, marking.Note(name, hook, opened.Time), marked.Annotations[circuit.UnmutatedAnnotation])

	// The webhook's own match criteria still apply: another namespace is
	// not marked.
	other := testNamespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "elsewhere"}}
	require.NoError(t, env.Client.Create(ctx, cm))
	assert.NotContains(t, cm.Labels, circuit.UnmutatedLabel, "outside the webhook's namespaceSelector")

	// A stale copy (another UID) does not arm it.
	stale := circuit.Record{hook: {UID: "00000000-0000-0000-0000-000000000000", Mode: circuit.ModeBypass, OpenedAt: opened, Reason: "timeout"}}
	text, err := stale.Text()
	require.NoError(t, err)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{circuit.Annotation: text}}})
	require.NoError(t, env.Client.Patch(ctx, mwc, client.RawPatch(types.MergePatchType, patch)))
	require.Eventually(t, func() bool { return create(nil).Labels[circuit.UnmutatedLabel] == "" }, propagation, 5*time.Millisecond,
		"a record with another configuration's UID armed the policy")
	notYet, err := keeper.Armed(ctx, circuits)
	require.NoError(t, err)
	assert.Equal(t, circuits, notYet, "the canary shows the policy disarmed")

	// The arming entries arm it too, as the breaker writes them before
	// it opens a circuit and after it closes one; the canary shows it.
	armed := circuit.Record{hook: {UID: mwc.UID, Mode: circuit.ModeBypass, OpenedAt: opened, Reason: "timeout", By: "someone"}}
	text, err = armed.Text()
	require.NoError(t, err)
	patch, _ = json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{circuit.ArmingAnnotation: text}}})
	armedAt = time.Now()
	require.NoError(t, env.Client.Patch(ctx, mwc, client.RawPatch(types.MergePatchType, patch)))
	require.Eventually(t, func() bool {
		notYet, err := keeper.Armed(ctx, circuits)
		require.NoError(t, err)
		return len(notYet) == 0
	}, propagation, 5*time.Millisecond, "the canary never showed the policy armed by the arming entries")
	t.Logf("the canary showed the arming entries %v after the write", time.Since(armedAt))
	marked = create(nil)
	assert.Equal(t, marking.ID(name, hook), marked.Labels[circuit.UnmutatedLabel], "marked once the canary showed it armed")
	assert.Equal(t, marking.Note(name, hook, opened.Time), marked.Annotations[circuit.UnmutatedAnnotation])
}

// markedConfiguration creates a configuration whose one webhook, hook,
// intercepts creates of rule in namespace ns and is never called (its
// bypass matchCondition is false, as in an open circuit of Bypass mode),
// and installs hook's marking policy.
func markedConfiguration(t *testing.T, ns, name, hook string, rule admissionregistrationv1.Rule) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	ctx := context.Background()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         hook,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/never")},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       rule,
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: circuit.BypassCondition, Expression: circuit.BypassExpression}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	require.NoError(t, env.Client.Create(ctx, mwc))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), mwc) })
	policy, binding := marking.Render(name, hook)
	require.NoError(t, env.Client.Create(ctx, policy))
	require.NoError(t, env.Client.Create(ctx, binding))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), binding)
		_ = env.Client.Delete(context.Background(), policy)
	})
	return mwc
}

// openInRecord writes an entry for hook into mwc's record, as the
// breaker's opening write puts it, and returns its openedAt.
func openInRecord(t *testing.T, mwc *admissionregistrationv1.MutatingWebhookConfiguration, hook string) metav1.Time {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(mwc), mwc))
	opened := metav1.NewTime(time.Now().Truncate(time.Second))
	rec := circuit.Record{hook: {UID: mwc.UID, Mode: circuit.ModeBypass, OpenedAt: opened, Reason: "timeout", By: "someone"}}
	text, err := rec.Text()
	require.NoError(t, err)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{circuit.Annotation: text}}})
	require.NoError(t, env.Client.Patch(ctx, mwc, client.RawPatch(types.MergePatchType, patch)))
	return opened
}

// Fact: with the circuit of a webhook that intercepts every resource
// open, kube-apiserver marks what the webhook would have mutated, and not
// Events (core or events.k8s.io) nor Leases: the marking policy answers
// core Events only as canaries, and events.k8s.io Events and Leases are
// outside its matchConstraints.
func TestFact_markingLeavesEventsAndLeasesUnmarked(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns)
	name := uniqueName(t, "fact-unmarked")
	hook := "everything.example.com"
	mwc := markedConfiguration(t, ns, name, hook, admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}})
	openInRecord(t, mwc, hook)
	require.Eventually(t, func() bool {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "cm-"}}
		require.NoError(t, env.Client.Create(ctx, cm))
		return cm.Labels[circuit.UnmutatedLabel] != ""
	}, propagation, 5*time.Millisecond, "the armed policy never marked a ConfigMap")

	ref := corev1.ObjectReference{Kind: "ConfigMap", Namespace: ns, Name: "cm"}
	objects := []client.Object{
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "core-"}, InvolvedObject: ref, Reason: "Test", Type: corev1.EventTypeNormal},
		&eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "events-"}, Regarding: ref, Reason: "Test", Action: "Test", Type: corev1.EventTypeNormal,
			ReportingController: "webhook-guard.io/e2e", ReportingInstance: "e2e", EventTime: metav1.NowMicro()},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "lease-"}},
	}
	for _, o := range objects {
		require.NoError(t, env.Client.Create(ctx, o))
		assert.NotContains(t, o.GetLabels(), circuit.UnmutatedLabel, "%T marked", o)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "cm-"}}
	require.NoError(t, env.Client.Create(ctx, cm))
	assert.Equal(t, marking.ID(name, hook), cm.Labels[circuit.UnmutatedLabel], "still armed after them")
}

// Fact: kube-apiserver skips a marking policy for an events.k8s.io Event
// (the guard's own Events are such) before any of its CEL runs, by the
// resource rule in its matchConstraints, while a core/v1 Event (what the
// canary is) reaches its match condition: matchPolicy Exact keeps the rule
// from leaving out core Events, which kube-apiserver serves as the same
// resource. kube-apiserver's own count of the policy's match condition
// evaluations (apiserver_admission_match_condition_evaluation_seconds)
// tells the two apart.
func TestFact_markingPolicySkipsEventsK8sIOEventsBeforeItsCEL(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	name := uniqueName(t, "fact-exempt")
	hook := "everything.example.com"
	markedConfiguration(t, ns, name, hook, admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}})
	policy := marking.Name(name, hook)
	series := regexp.MustCompile(`(?m)^apiserver_admission_match_condition_evaluation_seconds_count\{([^}]*)\} (\S+)$`)
	evaluations := func() float64 {
		body, err := env.Clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		require.NoError(t, err)
		n := 0.0
		for _, m := range series.FindAllStringSubmatch(string(body), -1) {
			if strings.Contains(m[1], `name="`+policy+`"`) && strings.Contains(m[1], `operation="CREATE"`) {
				v, err := strconv.ParseFloat(m[2], 64)
				require.NoError(t, err)
				n += v
			}
		}
		return n
	}
	ref := corev1.ObjectReference{Kind: "ConfigMap", Namespace: ns, Name: "cm"}
	coreEvent := func() {
		require.NoError(t, env.Client.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "core-"},
			InvolvedObject: ref, Reason: "Test", Type: corev1.EventTypeNormal}))
	}
	// Loaded: a core Event reaches the policy's match condition.
	require.Eventually(t, func() bool {
		before := evaluations()
		coreEvent()
		return evaluations() > before
	}, propagation, 50*time.Millisecond, "kube-apiserver never evaluated the marking policy's match condition on a core Event")

	const n = 10
	before := evaluations()
	for range n {
		require.NoError(t, env.Client.Create(ctx, &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "events-"}, Regarding: ref,
			Reason: "Test", Action: "Test", Type: corev1.EventTypeNormal, ReportingController: "webhook-guard.io/e2e", ReportingInstance: "e2e", EventTime: metav1.NowMicro()}))
	}
	eventsK8sIO := evaluations() - before
	before = evaluations()
	for range n {
		coreEvent()
	}
	core := evaluations() - before
	t.Logf("match condition evaluations: %v for %d events.k8s.io Events, %v for %d core Events", eventsK8sIO, n, core, n)
	assert.GreaterOrEqual(t, core, float64(n), "core Events (the canary's kind) reach the policy's CEL")
	assert.Less(t, eventsK8sIO, float64(n), "events.k8s.io Events reached the policy's CEL")
}
