package e2e

// These tests pin the platform facts that webhook-guard's design rests on
// (see docs/platform-facts.md, "Platform facts it rests on", and the
// decisions they shape in docs/design/, first of all
// docs/design/20261130.enforcement-points.md). If Kubernetes ever changes one
// of them, a test here fails and tells us which.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

const propagation = 30 * time.Second

// createConfigMap creates a ConfigMap in ns and reports how long the call took.
func createConfigMap(ctx context.Context, c client.Client, ns string) (time.Duration, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-", Labels: map[string]string{"e2e": "true"}}}
	start := time.Now()
	err := c.Create(ctx, cm)
	return time.Since(start), err
}

func startWebhook(t *testing.T, opts harness.WebhookOptions) *harness.Webhook {
	t.Helper()
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	wh, err := harness.StartWebhook(opts)
	require.NoError(t, err)
	t.Cleanup(wh.Close)
	return wh
}

// Fact a: kube-apiserver never calls an API-registered admission webhook for
// writes to MutatingWebhookConfigurations (IsExemptAdmissionConfigurationResource).
func TestFact_apiRegisteredWebhookIsNeverCalledForMWCWrites(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns)
	wh := startWebhook(t, harness.WebhookOptions{})
	wh.SetBehaviour("/mwc", harness.Deny("fact a: this webhook must never be called"))
	wh.SetBehaviour("/control", harness.Allow())

	label := uniqueName(t, "fact-a")
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: label},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{
				Name:                    "mwc.fact-a.webhook-guard.io",
				AdmissionReviewVersions: []string{"v1"},
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(wh.URL("/mwc")), CABundle: wh.CA.CertPEM},
				ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"fact-a": label}},
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{
						APIGroups: []string{"admissionregistration.k8s.io"}, APIVersions: []string{"v1"},
						Resources: []string{"mutatingwebhookconfigurations"},
					},
				}},
			},
			{
				Name:                    "control.fact-a.webhook-guard.io",
				AdmissionReviewVersions: []string{"v1"},
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(wh.URL("/control")), CABundle: wh.CA.CertPEM},
				NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				}},
			},
		},
	}
	require.NoError(t, env.Client.Create(ctx, vwc))

	// Positive control: the same registration, served by the same server,
	// is live for ConfigMaps.
	require.Eventually(t, func() bool {
		_, err := createConfigMap(ctx, env.Client, ns)
		return err == nil && wh.Calls("/control") > 0
	}, propagation, 50*time.Millisecond, "the control webhook on configmaps was never called")

	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: label, Labels: map[string]string{"fact-a": label}},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{configMapWebhook("m.fact-a.webhook-guard.io", "nowhere-"+label, "https://127.0.0.1:1/never", nil, admissionregistrationv1.Fail)},
	}
	require.NoError(t, env.Client.Create(ctx, mwc), "an API-registered webhook denied an MWC create")
	mwc.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	require.NoError(t, env.Client.Update(ctx, mwc), "an API-registered webhook denied an MWC update")

	controlBefore := wh.Calls("/control")
	_, err := createConfigMap(ctx, env.Client, ns)
	require.NoError(t, err)
	assert.Greater(t, wh.Calls("/control"), controlBefore, "the control webhook must still be live after the MWC writes")
	assert.Equal(t, 0, wh.Calls("/mwc"), "kube-apiserver called an API-registered webhook for an MWC write")
}

// Fact b: a ValidatingAdmissionPolicy does see MWC writes. Its denial reaches
// the stderr of kubectl apply, and the exempted ServiceAccount's real token
// gets through.
func TestFact_validatingAdmissionPolicyGuardsMWCWrites(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns)
	name := uniqueName(t, "fact-b")

	sa, err := env.ServiceAccount(ctx, ns, "owner")
	require.NoError(t, err)
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"},
			Verbs: []string{"get", "list", "watch", "update", "patch"}, ResourceNames: []string{name},
		}},
	}
	require.NoError(t, env.Client.Create(ctx, role))
	require.NoError(t, env.Bind(ctx, name, name, ns, "owner"))

	manifest := func(policy string) []byte {
		return []byte(fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: %s
webhooks:
- name: m.fact-b.webhook-guard.io
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: %s
  timeoutSeconds: 1
  clientConfig:
    url: https://127.0.0.1:1/never
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: nowhere-%s
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["configmaps"]
`, name, policy, name))
	}
	r := env.Kubectl(ctx, "", manifest("Fail"), "apply", "-f", "-")
	require.NoError(t, r.Err, r.Stderr)

	message := "fact-b: failurePolicy of " + name + " is owned by " + sa.Username
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				ResourceNames: []string{name},
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{
						APIGroups: []string{"admissionregistration.k8s.io"}, APIVersions: []string{"v1"},
						Resources: []string{"mutatingwebhookconfigurations"},
					},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("request.userInfo.username == %q || object.webhooks.all(w, oldObject.webhooks.all(o, o.name != w.name || o.failurePolicy == w.failurePolicy))", sa.Username),
				Message:    message,
			}},
		},
	}
	require.NoError(t, env.Client.Create(ctx, vap))
	require.NoError(t, env.Client.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}))

	// The policy takes effect asynchronously. Until it does, an admin's
	// apply goes through, so each attempt flips the policy: once the policy
	// is live, the flip is denied, with the policy's message on stderr.
	current := func() admissionregistrationv1.FailurePolicyType {
		got := &admissionregistrationv1.MutatingWebhookConfiguration{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: name}, got))
		return *got.Webhooks[0].FailurePolicy
	}
	flip := func(p admissionregistrationv1.FailurePolicyType) admissionregistrationv1.FailurePolicyType {
		if p == admissionregistrationv1.Fail {
			return admissionregistrationv1.Ignore
		}
		return admissionregistrationv1.Fail
	}
	var denied harness.Result
	require.Eventually(t, func() bool {
		denied = env.Kubectl(ctx, "", manifest(string(flip(current()))), "apply", "-f", "-")
		return denied.Err != nil
	}, propagation, 100*time.Millisecond, "the admin's failurePolicy change was never denied: %s", denied.Stdout)
	assert.Contains(t, denied.Stderr, message)
	assert.Contains(t, denied.Stderr, "ValidatingAdmissionPolicy")

	// The owner's real token gets through the same policy.
	want := flip(current())
	r = env.Kubectl(ctx, sa.KubeconfigPath, manifest(string(want)), "apply", "-f", "-")
	require.NoError(t, r.Err, r.Stderr)
	assert.Equal(t, want, current())
}

// Fact c: a static (manifest-based) ValidatingWebhookConfiguration is called
// for MWC writes, and its denial is enforced.
func TestFact_staticManifestWebhookIsCalledForMWCWrites(t *testing.T) {
	ctx := context.Background()
	dumpOnFailure(t)
	name := uniqueName(t, harness.StaticPrefix+"fact-c")
	t.Cleanup(func() { env.Static.SetBehaviour(harness.StaticWebhookPath, harness.Allow()) })

	before := env.Static.Calls(harness.StaticWebhookPath)
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{configMapWebhook("m.fact-c.webhook-guard.io", "nowhere-"+name, "https://127.0.0.1:1/never", nil, admissionregistrationv1.Fail)},
	}
	require.NoError(t, env.Client.Create(ctx, mwc))
	assert.Greater(t, env.Static.Calls(harness.StaticWebhookPath), before, "the static webhook was not called for an MWC create")

	env.Static.SetBehaviour(harness.StaticWebhookPath, harness.Deny("fact c: denied by the static webhook"))
	before = env.Static.Calls(harness.StaticWebhookPath)
	mwc.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	err := env.Client.Update(ctx, mwc)
	require.Error(t, err, "the static webhook's denial was not enforced")
	assert.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
	assert.Contains(t, err.Error(), "fact c: denied by the static webhook")
	assert.Greater(t, env.Static.Calls(harness.StaticWebhookPath), before)

	reqs := env.Static.Requests(harness.StaticWebhookPath)
	require.NotEmpty(t, reqs)
	last := reqs[len(reqs)-1].Request
	assert.Equal(t, "mutatingwebhookconfigurations", last.Resource.Resource)
	assert.Equal(t, name, last.Name)
}

// Fact d: failurePolicy Ignore still calls a slow webhook and waits for the
// timeout; a matchCondition whose expression is false skips the call.
func TestFact_ignoreStillWaitsButFalseMatchConditionSkips(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns)
	wh := startWebhook(t, harness.WebhookOptions{})
	for _, p := range []string{"/fail", "/ignore", "/bypass"} {
		wh.SetBehaviour(p, harness.Delayed(2*time.Second, harness.Allow()))
	}
	name := uniqueName(t, "fact-d")
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{configMapWebhook("slow.fact-d.webhook-guard.io", ns, wh.URL("/fail"), wh.CA.CertPEM, admissionregistrationv1.Fail)},
	}
	require.NoError(t, env.Client.Create(ctx, mwc))

	// Fail: the create is rejected once the apiserver has the registration.
	var err error
	var took time.Duration
	require.Eventually(t, func() bool {
		took, err = createConfigMap(ctx, env.Client, ns)
		return err != nil
	}, propagation, 50*time.Millisecond, "a create was never rejected under Fail")
	assert.Contains(t, err.Error(), "slow.fact-d.webhook-guard.io")
	assert.Positive(t, wh.Calls("/fail"))
	t.Logf("slow+Fail: rejected after %s: %v", took, err)

	// Ignore: a new path tells us when the apiserver uses the new version.
	update(t, mwc, func(w *admissionregistrationv1.MutatingWebhook) {
		w.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		w.ClientConfig.URL = ptr.To(wh.URL("/ignore"))
	})
	require.Eventually(t, func() bool {
		before := wh.Calls("/ignore")
		took, err = createConfigMap(ctx, env.Client, ns)
		return err == nil && wh.Calls("/ignore") > before
	}, propagation, 50*time.Millisecond, "under Ignore, no create succeeded while calling the webhook")
	t.Logf("slow+Ignore: created after %s, and the webhook was called", took)

	// Ignore plus a false matchCondition: created, and never called.
	update(t, mwc, func(w *admissionregistrationv1.MutatingWebhook) {
		w.ClientConfig.URL = ptr.To(wh.URL("/bypass"))
		w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "webhook-guard.io/circuit-open", Expression: "false"}}
	})
	require.Eventually(t, func() bool {
		before := wh.Calls("/ignore")
		_, err = createConfigMap(ctx, env.Client, ns)
		return err == nil && wh.Calls("/ignore") == before
	}, propagation, 50*time.Millisecond, "the apiserver kept calling the webhook despite a false matchCondition")
	for i := 0; i < 3; i++ {
		took, err = createConfigMap(ctx, env.Client, ns)
		require.NoError(t, err)
		t.Logf("slow+Ignore+matchCondition false: created after %s", took)
	}
	assert.Equal(t, 0, wh.Calls("/bypass"), "a webhook whose matchCondition is false was called")
}

// Fact e: failurePolicy covers only invocation failures; allowed: false from
// a healthy webhook rejects under both Fail and Ignore.
func TestFact_allowedFalseRejectsUnderFailAndIgnore(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns)
	wh := startWebhook(t, harness.WebhookOptions{})
	wh.SetBehaviour("/fail", harness.Deny("fact e: denied under Fail"))
	wh.SetBehaviour("/ignore", harness.Deny("fact e: denied under Ignore"))
	name := uniqueName(t, "fact-e")
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{configMapWebhook("deny.fact-e.webhook-guard.io", ns, wh.URL("/fail"), wh.CA.CertPEM, admissionregistrationv1.Fail)},
	}
	require.NoError(t, env.Client.Create(ctx, mwc))

	for _, phase := range []struct {
		policy  admissionregistrationv1.FailurePolicyType
		path    string
		message string
	}{
		{admissionregistrationv1.Fail, "/fail", "fact e: denied under Fail"},
		{admissionregistrationv1.Ignore, "/ignore", "fact e: denied under Ignore"},
	} {
		update(t, mwc, func(w *admissionregistrationv1.MutatingWebhook) {
			w.FailurePolicy = ptr.To(phase.policy)
			w.ClientConfig.URL = ptr.To(wh.URL(phase.path))
		})
		// The path-specific message proves which version answered.
		var err error
		require.Eventually(t, func() bool {
			_, err = createConfigMap(ctx, env.Client, ns)
			return err != nil && strings.Contains(err.Error(), phase.message)
		}, propagation, 50*time.Millisecond, "under %s, allowed:false never rejected: last error %v", phase.policy, err)
		for i := 0; i < 3; i++ {
			_, err = createConfigMap(ctx, env.Client, ns)
			require.Error(t, err, "under %s a create got through a webhook answering allowed:false", phase.policy)
			assert.Contains(t, err.Error(), phase.message)
		}
	}
}

// update re-reads mwc, edits its first webhook and writes it back.
func update(t *testing.T, mwc *admissionregistrationv1.MutatingWebhookConfiguration, edit func(*admissionregistrationv1.MutatingWebhook)) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(mwc), mwc))
	edit(&mwc.Webhooks[0])
	require.NoError(t, env.Client.Update(ctx, mwc))
}

// Fact f: like MutatingWebhookConfigurations, writes to
// ValidatingWebhookConfigurations are seen by a ValidatingAdmissionPolicy
// and never by an API-registered webhook. The validating breaker's guard
// rests on both halves.
func TestFact_validatingWebhookConfigurationWritesSeenByPolicyNotByWebhooks(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns)
	name := uniqueName(t, "fact-f")
	wh := startWebhook(t, harness.WebhookOptions{})
	wh.SetBehaviour("/vwc", harness.Deny("fact f: this webhook must never be called"))
	wh.SetBehaviour("/control", harness.Allow())

	watcher := validatingWebhook("vwc.fact-f.webhook-guard.io", ns, wh.URL("/vwc"), wh.CA.CertPEM, admissionregistrationv1.Fail)
	watcher.NamespaceSelector = nil
	watcher.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"fact-f": name}}
	watcher.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	watcher.Rules[0].Rule = admissionregistrationv1.Rule{APIGroups: []string{"admissionregistration.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"validatingwebhookconfigurations"}}
	registration := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-watcher"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{watcher, validatingWebhook("control.fact-f.webhook-guard.io", ns, wh.URL("/control"), wh.CA.CertPEM, admissionregistrationv1.Fail)},
	}
	require.NoError(t, env.Client.Create(ctx, registration))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), registration) })
	require.Eventually(t, func() bool {
		_, err := createConfigMap(ctx, env.Client, ns)
		return err == nil && wh.Calls("/control") > 0
	}, propagation, 50*time.Millisecond, "control: the registration was never live for configmaps")

	message := "fact-f: failurePolicy of " + name + " is owned"
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				ResourceNames: []string{name},
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"admissionregistration.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"validatingwebhookconfigurations"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "object.webhooks.all(w, oldObject.webhooks.all(o, o.name != w.name || o.failurePolicy == w.failurePolicy))",
				Message:    message,
				Reason:     ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	require.NoError(t, env.Client.Create(ctx, vap))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), vap) })
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	require.NoError(t, env.Client.Create(ctx, binding))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), binding) })

	target := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"fact-f": name}},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{validatingWebhook("v.fact-f.webhook-guard.io", "nowhere-"+name, "https://127.0.0.1:1/never", nil, admissionregistrationv1.Fail)},
	}
	require.NoError(t, env.Client.Create(ctx, target), "an API-registered webhook denied a VWC create")
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), target) })

	// Until the policy is live an update goes through; each attempt flips
	// the policy, so once it is live the flip is denied with its message.
	var err error
	require.Eventually(t, func() bool {
		live := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: name}, live))
		p := admissionregistrationv1.Ignore
		if *live.Webhooks[0].FailurePolicy == p {
			p = admissionregistrationv1.Fail
		}
		live.Webhooks[0].FailurePolicy = &p
		err = env.Client.Update(ctx, live)
		return err != nil && !apierrors.IsConflict(err)
	}, propagation, 100*time.Millisecond, "the policy never denied a VWC failurePolicy change")
	require.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
	assert.Contains(t, err.Error(), message)
	assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy")
	assert.Equal(t, 0, wh.Calls("/vwc"), "kube-apiserver called an API-registered webhook for a VWC write")
}
