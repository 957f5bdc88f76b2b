package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// webhooksJSON is "guard webhooks -o json", as a platform team's script
// reads it.
type webhooksJSON struct {
	ConfigSource     string `json:"configSource"`
	Metrics          string `json:"metrics"`
	Window           string `json:"window"`
	APIServerStarted string `json:"apiserverStarted"`
	Webhooks         []struct {
		Risk           string   `json:"risk"`
		Kind           string   `json:"kind"`
		Configuration  string   `json:"configuration"`
		Webhook        string   `json:"webhook"`
		FailurePolicy  string   `json:"failurePolicy"`
		TimeoutSeconds int32    `json:"timeoutSeconds"`
		Calls          *float64 `json:"calls"`
		FailedCalls    *float64 `json:"failedCalls"`
		FailureRatio   *float64 `json:"failureRatio"`
		P99Seconds     *float64 `json:"p99Seconds"`
		Managed        *bool    `json:"managed"`
		Reasons        []string `json:"riskReasons"`
	} `json:"webhooks"`
	Unavailable []string `json:"unavailable"`
}

// runWebhooks runs the real binary's "guard webhooks" with kubeconfig.
func runWebhooks(t *testing.T, kubeconfig string, args ...string) (stdout, stderr string) {
	t.Helper()
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	cmd := exec.Command(bin, append([]string{"webhooks", "--kubeconfig", kubeconfig}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), "guard webhooks: %s", errb.String())
	return out.String(), errb.String()
}

// A platform team's inventory: an unmanaged webhook whose every call
// fails (a closed port, under Ignore so creates go on), an unmanaged
// validating webhook that answers after 0.9 s of its 1 s timeout, and a
// healthy managed target. kube-apiserver's own metrics tell them apart.
func TestWebhooks_inventoryFromTheApiserversOwnMetrics(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns)
	base := uniqueName(t, "inventory")
	failingCfg, slowCfg, managedCfg := base+"-failing", base+"-slow", base+"-managed"
	failingHook, slowHook, managedHook := "failing."+base+".webhook-guard.io", "slow."+base+".webhook-guard.io", "managed."+base+".webhook-guard.io"

	wh := startWebhook(t, harness.WebhookOptions{})
	wh.SetBehaviour("/slow", harness.Delayed(900*time.Millisecond, harness.Allow()))
	wh.SetBehaviour("/managed", harness.Allow())

	failing := configMapWebhook(failingHook, ns, "https://127.0.0.1:1/closed", nil, admissionregistrationv1.Ignore)
	managed := configMapWebhook(managedHook, ns, wh.URL("/managed"), wh.CA.CertPEM, admissionregistrationv1.Fail)
	slowM := configMapWebhook(slowHook, ns, wh.URL("/slow"), wh.CA.CertPEM, admissionregistrationv1.Ignore)
	slow := admissionregistrationv1.ValidatingWebhook{Name: slowM.Name, AdmissionReviewVersions: slowM.AdmissionReviewVersions, SideEffects: slowM.SideEffects,
		FailurePolicy: slowM.FailurePolicy, TimeoutSeconds: ptr.To[int32](1), ClientConfig: slowM.ClientConfig, NamespaceSelector: slowM.NamespaceSelector, Rules: slowM.Rules}
	objs := []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: failingCfg}, Webhooks: []admissionregistrationv1.MutatingWebhook{failing}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: managedCfg}, Webhooks: []admissionregistrationv1.MutatingWebhook{managed}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: slowCfg}, Webhooks: []admissionregistrationv1.ValidatingWebhook{slow}},
	}
	for _, o := range objs {
		require.NoError(t, env.Client.Create(ctx, o))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}

	// The installation as "guard status" finds it: the Deployment whose
	// volume "config" names the ConfigMap with the GuardConfiguration.
	guardConfig := fmt.Sprintf(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
apiserverScrapeInterval: 1s
targets:
- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
`, managedCfg, managedHook)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-guard-config-5f7c8d9b2k"}, Data: map[string]string{"config.yaml": guardConfig}}
	require.NoError(t, env.Client.Create(ctx, cm))
	labels := map[string]string{"app.kubernetes.io/name": "webhook-guard"}
	require.NoError(t, env.Client.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-guard"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "manager", Image: "webhook-guard:latest"}},
				Volumes:    []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}},
			},
		}},
	}))

	// A reader: the configurations and /metrics cluster-wide, the
	// installation in its namespace. Nothing else.
	reader := webhooksReader(t, ns, "inventory-reader", true)

	const creates = 8
	for i := range creates {
		start := time.Now()
		require.NoError(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("driven-%d", i)}}))
		t.Logf("create %d took %s", i, time.Since(start).Round(time.Millisecond))
	}
	require.GreaterOrEqual(t, wh.APIServerCalls("/slow"), creates)
	require.GreaterOrEqual(t, wh.APIServerCalls("/managed"), creates)

	out, stderr := runWebhooks(t, reader.KubeconfigPath, "--namespace", ns, "-o", "json")
	t.Logf("guard webhooks -o json:\n%s%s", out, stderr)
	var rep webhooksJSON
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Empty(t, rep.Unavailable, stderr)
	assert.Equal(t, "ConfigMap "+ns+"/"+cm.Name+" (mounted by Deployment webhook-guard)", rep.ConfigSource)
	assert.Contains(t, rep.Metrics, "cumulative since kube-apiserver started at "+rep.APIServerStarted)
	rows := map[string]int{}
	for i, r := range rep.Webhooks {
		rows[r.Webhook] = i
	}
	for _, h := range []string{failingHook, slowHook, managedHook} {
		require.Contains(t, rows, h, "every webhook of every configuration is listed")
	}

	f := rep.Webhooks[rows[failingHook]]
	assert.Equal(t, "Mutating", f.Kind)
	assert.Equal(t, failingCfg, f.Configuration)
	assert.Equal(t, "Ignore", f.FailurePolicy)
	assert.Equal(t, int32(1), f.TimeoutSeconds)
	require.NotNil(t, f.Calls)
	assert.GreaterOrEqual(t, *f.Calls, float64(creates))
	require.NotNil(t, f.FailureRatio)
	assert.InDelta(t, 1, *f.FailureRatio, 0.01, "every call to a closed port failed (fail-open)")
	assert.Equal(t, ptr.To(false), f.Managed)
	assert.Equal(t, "medium", f.Risk, "%v", f.Reasons)

	s := rep.Webhooks[rows[slowHook]]
	assert.Equal(t, "Validating", s.Kind)
	assert.Equal(t, slowCfg, s.Configuration)
	assert.Equal(t, int32(1), s.TimeoutSeconds)
	require.NotNil(t, s.P99Seconds)
	assert.GreaterOrEqual(t, *s.P99Seconds, 0.8, "0.9 s answers are in the apiserver's (0.5, 1] bucket")
	assert.LessOrEqual(t, *s.P99Seconds, 2.5, "close to its 1 s timeout: within the next bucket at worst")
	assert.Equal(t, ptr.To(false), s.Managed)
	assert.Equal(t, "medium", s.Risk, "%v", s.Reasons)
	assert.Contains(t, strings.Join(s.Reasons, ";"), "near its 1s timeout")

	m := rep.Webhooks[rows[managedHook]]
	assert.Equal(t, ptr.To(true), m.Managed)
	assert.Equal(t, "Fail", m.FailurePolicy)
	require.NotNil(t, m.FailureRatio)
	assert.Zero(t, *m.FailureRatio)
	require.NotNil(t, m.P99Seconds)
	assert.Less(t, *m.P99Seconds, 0.8)
	assert.Equal(t, "low", m.Risk, "%v", m.Reasons)
	assert.Less(t, rows[failingHook], rows[managedHook], "riskiest first")
	assert.Less(t, rows[slowHook], rows[managedHook], "riskiest first")

	// The table, with the configuration from a file.
	cfgPath := filepath.Join(t.TempDir(), "guard.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(guardConfig), 0o600))
	table, _ := runWebhooks(t, reader.KubeconfigPath, "--config", cfgPath)
	t.Logf("guard webhooks:\n%s", table)
	assert.Contains(t, table, "Guard configuration: file "+cfgPath)
	assert.Contains(t, table, "RISK")
	for _, line := range strings.Split(table, "\n") {
		if strings.Contains(line, " "+managedHook+" ") {
			assert.Contains(t, line, " yes ", "managed")
		}
		if strings.Contains(line, " "+failingHook+" ") {
			assert.Contains(t, line, " 1.00 (", "failure ratio 1")
			assert.Contains(t, line, " no ", "unmanaged")
		}
	}

	// --window: only the calls made between two scrapes.
	type result struct {
		out, stderr string
	}
	done := make(chan result, 1)
	go func() {
		bin, _ := env.BuildGuard()
		cmd := exec.Command(bin, "webhooks", "--kubeconfig", reader.KubeconfigPath, "--namespace", ns, "--window", "5s", "-o", "json")
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			e.WriteString(err.Error())
		}
		done <- result{o.String(), e.String()}
	}()
	time.Sleep(2 * time.Second) // after the first scrape
	for i := range 2 {
		require.NoError(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("windowed-%d", i)}}))
	}
	res := <-done
	t.Logf("guard webhooks --window 5s -o json:\n%s%s", res.out, res.stderr)
	var win webhooksJSON
	require.NoError(t, json.Unmarshal([]byte(res.out), &win), res.stderr)
	assert.Equal(t, "5s", win.Window)
	assert.Contains(t, win.Metrics, "calls in the last 5s")
	for _, r := range win.Webhooks {
		if r.Webhook == failingHook {
			require.NotNil(t, r.Calls)
			assert.Equal(t, 2.0, *r.Calls, "the window's creates only, not the %d before", creates)
			assert.Equal(t, ptr.To(1.0), r.FailureRatio)
		}
	}

	// Without get on /metrics it says which permission is missing and
	// still lists the webhooks.
	blind := webhooksReader(t, ns, "inventory-blind", false)
	out, stderr = runWebhooks(t, blind.KubeconfigPath, "--namespace", ns, "-o", "json")
	t.Logf("guard webhooks without /metrics:\n%s", stderr)
	assert.Contains(t, stderr, `unavailable: calls, failure ratios and p99 latencies: missing permission: get on the non-resource URL /metrics`)
	var partial webhooksJSON
	require.NoError(t, json.Unmarshal([]byte(out), &partial), out)
	found := false
	for _, r := range partial.Webhooks {
		if r.Webhook == failingHook {
			found = true
			assert.Nil(t, r.Calls)
			assert.Equal(t, ptr.To(false), r.Managed)
		}
	}
	assert.True(t, found, "the webhooks are still listed")
}

// webhooksReader is a ServiceAccount that may list webhook configurations
// and read the installation in ns, and get /metrics when metrics is set.
func webhooksReader(t *testing.T, ns, name string, metrics bool) *harness.Identity {
	t.Helper()
	ctx := context.Background()
	id, err := env.ServiceAccount(ctx, ns, name)
	require.NoError(t, err)
	rules := []rbacv1.PolicyRule{{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}, Verbs: []string{"list"}}}
	if metrics {
		rules = append(rules, rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}})
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + ns}, Rules: rules}
	require.NoError(t, env.Client.Create(ctx, role))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), role) })
	require.NoError(t, env.Bind(ctx, role.Name, role.Name, ns, name))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name}})
	})
	install := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
	}}
	require.NoError(t, env.Client.Create(ctx, install))
	require.NoError(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}}))
	require.Eventually(t, func() bool {
		return id.Client.List(ctx, &admissionregistrationv1.ValidatingWebhookConfigurationList{}) == nil &&
			id.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "webhook-guard"}, &appsv1.Deployment{}) == nil
	}, 30*time.Second, 50*time.Millisecond, "RBAC for %s never took effect", id.Username)
	return id
}

// interceptJSON is the section of "guard webhooks -o json" on the
// webhooks that intercept the guard's own requests.
type interceptJSON struct {
	InterceptBasis       string `json:"interceptBasis"`
	InterceptingTheGuard []struct {
		Kind           string `json:"kind"`
		Configuration  string `json:"configuration"`
		Webhook        string `json:"webhook"`
		TimeoutSeconds int32  `json:"timeoutSeconds"`
		Intercepts     []struct {
			What      string `json:"what"`
			Namespace string `json:"namespace"`
		} `json:"intercepts"`
		MatchConditions bool     `json:"matchConditions"`
		Managed         *bool    `json:"managed"`
		Advice          []string `json:"advice"`
	} `json:"interceptingTheGuard"`
}

// A policy engine's */* webhook (Kyverno's shape: every group, version,
// resource and subresource on CREATE and UPDATE, failurePolicy Fail,
// excluding only kube-system and its own namespace) intercepts a guard
// whose Lease is in its own namespace (leaseNamespace ""): its Lease,
// leader election's Events and its marking canary, but not its Events
// about webhook configurations, which are in kube-system (an
// events.k8s.io Event about a cluster-scoped object may be there, as
// kube-apiserver accepts below). "guard webhooks" names it with what it
// intercepts, and kube-apiserver agrees: the webhook is called for
// exactly those requests. Excluding the guard's namespace spares the
// Lease; excluding default as well spares the canary.
func TestWebhooks_namesAPolicyEngineThatInterceptsTheGuard(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t) // the guard's installation
	engineNS := uniqueName(t, "kyverno")
	dumpOnFailure(t, ns)
	cfgName := uniqueName(t, "policy-engine")
	hookName := "mutate." + cfgName + ".webhook-guard.io"

	// The engine answers, so the rest of the shared control plane goes on
	// while it intercepts everything.
	wh := startWebhook(t, harness.WebhookOptions{})
	wh.SetBehaviour("/mutate", harness.Allow())
	selector := func(excluded ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: excluded},
		}}
	}
	engine := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: cfgName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    hookName,
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](10),
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(wh.URL("/mutate")), CABundle: wh.CA.CertPEM},
			NamespaceSelector:       selector("kube-system", engineNS),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}},
			}},
		}},
	}
	require.NoError(t, env.Client.Create(ctx, engine))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), engine) })

	// The guard manages the engine's webhook: a target that intercepts
	// the guard's own requests is named all the same.
	cfgPath := filepath.Join(t.TempDir(), "guard.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
targets:
- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
`, cfgName, hookName)), 0o600))

	// seen reports whether kube-apiserver called the engine for a request
	// on resource (group/resource) in namespace, named name ("" for the
	// dry-run canary, whose name is generated).
	seen := func(group, resource, namespace, name string, dryRun bool) bool {
		for _, r := range wh.Requests("/mutate") {
			q := r.Request
			if q != nil && q.Resource.Group == group && q.Resource.Resource == resource && q.Namespace == namespace &&
				(name == "" || q.Name == name) && (q.DryRun != nil && *q.DryRun) == dryRun {
				return true
			}
		}
		return false
	}
	n := 0
	// sends makes the guard's requests as the guard makes them, and says
	// which the engine was called for.
	sends := func() (lease, eventsHere, eventsSystem, canary bool) {
		n++
		leaseName := fmt.Sprintf("%s-lease-%d", cfgName, n)
		require.NoError(t, env.Client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leaseName}}))
		here := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-event-%d", cfgName, n)},
			InvolvedObject: corev1.ObjectReference{Kind: "Lease", Namespace: ns, Name: leaseName}, Reason: "LeaderElection", Type: corev1.EventTypeNormal}
		require.NoError(t, env.Client.Create(ctx, here))
		sys := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: circuit.EventsNamespace, Name: fmt.Sprintf("%s-event-%d", cfgName, n)},
			EventTime: metav1.NowMicro(), ReportingController: "webhook-guard", ReportingInstance: "e2e", Action: "Update", Reason: "CircuitOpened", Type: corev1.EventTypeWarning,
			Regarding: corev1.ObjectReference{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration", Name: cfgName}}
		require.NoError(t, env.Client.Create(ctx, sys))
		before := len(wh.Requests("/mutate"))
		_, err := env.Clientset.CoreV1().Events(marking.CanaryNamespace).Create(ctx, marking.CanaryEvent(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err)
		canary = false
		for _, r := range wh.Requests("/mutate")[before:] {
			q := r.Request
			canary = canary || (q != nil && q.Resource.Group == "" && q.Namespace == marking.CanaryNamespace && q.DryRun != nil && *q.DryRun)
		}
		return seen("coordination.k8s.io", "leases", ns, leaseName, false), seen("", "events", ns, here.Name, false),
			seen("events.k8s.io", "events", circuit.EventsNamespace, sys.Name, false), canary
	}
	report := func() interceptJSON {
		out, stderr := runWebhooks(t, env.KubeconfigPath, "--namespace", ns, "--config", cfgPath, "-o", "json")
		var rep interceptJSON
		require.NoError(t, json.Unmarshal([]byte(out), &rep), "%s%s", out, stderr)
		return rep
	}
	// named returns what "guard webhooks" says the engine intercepts, as
	// "what in namespace", or nil when it does not name it.
	named := func(rep interceptJSON) []string {
		for _, r := range rep.InterceptingTheGuard {
			if r.Webhook != hookName {
				continue
			}
			assert.Equal(t, "Mutating", r.Kind)
			assert.Equal(t, cfgName, r.Configuration)
			assert.Equal(t, int32(10), r.TimeoutSeconds)
			assert.Equal(t, ptr.To(true), r.Managed, "a target is named too")
			assert.False(t, r.MatchConditions)
			var what []string
			for _, i := range r.Intercepts {
				what = append(what, i.What+" in "+i.Namespace)
			}
			return what
		}
		return nil
	}

	// kube-apiserver calls a new webhook only once its informer has the
	// configuration: wait until it calls the engine, so that the first
	// request below is not sent before.
	warm := 0
	require.Eventually(t, func() bool {
		warm++
		name := fmt.Sprintf("%s-warm-%d", cfgName, warm)
		require.NoError(t, env.Client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
		return seen("coordination.k8s.io", "leases", ns, name, false)
	}, 10*time.Second, 100*time.Millisecond, "kube-apiserver never called the engine")

	// 1. Kyverno's selector: everything of the guard's but its Events in
	// kube-system is intercepted.
	lease, here, sys, canary := sends()
	assert.True(t, lease && here && !sys && canary, "kube-apiserver calls the engine for the Lease %v, Events in %s %v, Events in kube-system %v, the canary %v", lease, ns, here, sys, canary)
	rep := report()
	t.Logf("guard webhooks -o json, interception basis: %s", rep.InterceptBasis)
	assert.Contains(t, rep.InterceptBasis, "namespace "+ns)
	assert.Contains(t, rep.InterceptBasis, "judged by the namespaces' labels", "an administrator may read namespaces")
	assert.Equal(t, []string{"Lease in " + ns, "Events in " + ns, "canary in default"}, named(rep))
	table, _ := runWebhooks(t, env.KubeconfigPath, "--namespace", ns, "--config", cfgPath)
	t.Logf("guard webhooks:\n%s", table)
	assert.Contains(t, table, "Webhooks with failurePolicy Fail that intercept the guard's own requests")
	assert.Contains(t, table, "Mutating "+cfgName+" webhook "+hookName+" (timeout 10s, managed by the guard) intercepts: Lease in "+ns+", Events in "+ns+", marking canary in default")
	assert.Contains(t, table, "fix: add {key: kubernetes.io/metadata.name, operator: NotIn, values: ["+ns+"]} to its namespaceSelector.matchExpressions")
	assert.Contains(t, table, "still opens circuits")

	// 2. The guard's namespace excluded: the Lease and its Events are
	// spared; the canary is not.
	setSelector := func(excluded ...string) {
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(engine), engine))
		engine.Webhooks[0].NamespaceSelector = selector(excluded...)
		require.NoError(t, env.Client.Update(ctx, engine))
	}
	setSelector("kube-system", engineNS, ns)
	require.Eventually(t, func() bool {
		lease, here, sys, canary = sends()
		return !lease && !here
	}, 30*time.Second, 200*time.Millisecond, "kube-apiserver still calls the engine for the guard's Lease")
	assert.True(t, !sys && canary, "called for the Events in kube-system %v and the canary %v", sys, canary)
	assert.Equal(t, []string{"canary in default"}, named(report()))

	// 3. default excluded as well: nothing of the guard's is intercepted.
	setSelector("kube-system", engineNS, ns, "default")
	require.Eventually(t, func() bool {
		lease, here, sys, canary = sends()
		return !lease && !here && !sys && !canary
	}, 30*time.Second, 200*time.Millisecond, "kube-apiserver still calls the engine for the guard's requests in default")
	assert.Nil(t, named(report()), "no longer named")
}
