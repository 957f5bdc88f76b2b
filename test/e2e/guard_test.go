package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := harness.FreeLoopbackAddr()
	require.NoError(t, err)
	return addr
}

// guardPolicyLive waits until the running guard's policy denies an admin's
// change of the target's failurePolicy: the guard's "registration" of its
// own admission rule is live in the apiserver.
func (s *breakerSetup) waitPolicyEnforced() {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		return admission.PolicyInPlace(context.Background(), env.Client, admission.Options{
			BreakerUsername: s.guardID.Username, Managed: map[string][]string{s.name: {s.hook}},
		}) == nil
	}, transition, 50*time.Millisecond, "the guard never put its ValidatingAdmissionPolicy in place")
}

// The user's view: kubectl apply of the original manifest is refused while
// the circuit is open, with an explanation; the override hands over.
func TestGuard_kubectlApplyExplainsAndOverrideHandsOff(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass", kubectl: true})
	s.startGuard("guard")
	s.waitPolicyEnforced()
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	_, open := s.waitOpen()
	openedAt := mustRecord(t, open)[s.hook].OpenedAt.UTC().Format(time.RFC3339)

	// The policy reaches the apiserver's admission chain asynchronously;
	// a server-side dry run (admission runs, nothing is stored) tells when.
	require.Eventually(t, func() bool {
		return env.Kubectl(ctx, "", s.manifest, "apply", "--dry-run=server", "-f", "-").Err != nil
	}, transition, 100*time.Millisecond, "a dry-run apply restoring Fail was never refused")
	r := env.Kubectl(ctx, "", s.manifest, "apply", "-f", "-")
	require.Error(t, r.Err, "kubectl apply restoring Fail was not refused")
	denied := r.Stderr
	t.Logf("$ kubectl apply -f %s.yaml\n%s", s.name, denied)
	for _, want := range []string{
		`mutatingwebhookconfiguration "` + s.name + `"`,
		"webhooks[name=" + s.hook + "].failurePolicy",
		"webhook-guard (" + s.guardID.Username + ")",
		"webhooks[name=" + s.hook + "]: circuit open since " + openedAt + ", original failurePolicy Fail",
		`kubectl annotate mutatingwebhookconfiguration ` + s.name + ` webhook-guard.io/override="<reason>"`,
	} {
		assert.Contains(t, denied, want)
	}
	assert.True(t, isOpen(s.get(), s.hook, "Bypass"), "a refused apply must change nothing")

	r = env.Kubectl(ctx, "", nil, "annotate", "mutatingwebhookconfiguration", s.name, circuit.OverrideAnnotation+"=INC-1234 vendor outage, paging oncall")
	require.NoError(t, r.Err, r.Stderr)
	t.Logf("$ kubectl annotate mutatingwebhookconfiguration %s webhook-guard.io/override=...\n%s%s", s.name, r.Stdout, r.Stderr)
	r = env.Kubectl(ctx, "", s.manifest, "apply", "-f", "-")
	require.NoError(t, r.Err, r.Stderr)
	t.Logf("$ kubectl apply -f %s.yaml\n%s%s", s.name, r.Stdout, r.Stderr)

	require.Eventually(t, func() bool {
		m := s.get()
		_, rec := m.Annotations[circuit.Annotation]
		return !rec
	}, transition, 20*time.Millisecond, "the breaker never handed off")
	m := s.get()
	assert.Equal(t, admissionregistrationv1.Fail, *findWebhook(m, s.hook).FailurePolicy, "the administrator's Fail must stand")
	assert.False(t, hasMarker(findWebhook(m, s.hook)))
	require.Eventually(t, func() bool { return contains(eventReasons(t, s.name), string(decide.HandedOff)) }, transition, 50*time.Millisecond)
	r = env.Kubectl(ctx, "", nil, "get", "events", "-n", circuit.EventsNamespace, "--field-selector", "involvedObject.name="+s.name, "-o", "custom-columns=REASON:.reason,MESSAGE:.message")
	t.Logf("$ kubectl get events -n default --field-selector involvedObject.name=%s\n%s", s.name, r.Stdout)
}

// Deleting or editing the guard's policy or binding is repaired, with an
// Event and a count in webhook_guard_policy_repairs_total.
func TestGuard_tamperedPolicyIsRestored(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Ignore"})
	metricsAddr := freeAddr(t)
	s.startGuard("guard", "--metrics-bind-address", metricsAddr)
	s.waitPolicyEnforced()

	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, policy))
	require.NoError(t, env.Client.Delete(ctx, policy))
	require.Eventually(t, func() bool {
		got := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		return env.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, got) == nil && got.UID != policy.UID
	}, transition, 20*time.Millisecond, "the deleted policy was not re-created")

	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, binding))
	binding.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}
	require.NoError(t, env.Client.Update(ctx, binding))
	s.waitPolicyEnforced()

	require.Eventually(t, func() bool {
		list := &eventsv1.EventList{}
		if env.Client.List(ctx, list, client.InNamespace(circuit.EventsNamespace)) != nil {
			return false
		}
		kinds := map[string]bool{}
		for _, e := range list.Items {
			if e.Reason == "GuardPolicyRestored" && e.CreationTimestamp.After(policy.CreationTimestamp.Time) {
				kinds[e.Regarding.Kind] = true
			}
		}
		return kinds["ValidatingAdmissionPolicy"] && kinds["ValidatingAdmissionPolicyBinding"]
	}, transition, 50*time.Millisecond, "no GuardPolicyRestored Events for both objects")

	reader := metricsReader(t, s.ns)
	require.Eventually(t, func() bool {
		body, err := scrape(metricsAddr, reader)
		return err == nil &&
			metricValue(body, `webhook_guard_policy_repairs_total{action="created",object="ValidatingAdmissionPolicy"}`) >= 1 &&
			metricValue(body, `webhook_guard_policy_repairs_total{action="updated",object="ValidatingAdmissionPolicyBinding"}`) >= 1
	}, transition, 100*time.Millisecond, "webhook_guard_policy_repairs_total did not count the repairs")
}

// readyz reflects whether the guard's policy is in place.
func TestGuard_readyzFailsUntilPolicyInPlace(t *testing.T) {
	s := newBreakerSetup(t, setupOptions{mode: "Ignore", noRBAC: []string{"create-policy", "write-policy"}})
	probeAddr, metricsAddr := freeAddr(t), freeAddr(t)
	s.startGuard("guard", "--health-probe-bind-address", probeAddr, "--metrics-bind-address", metricsAddr)
	reader := metricsReader(t, s.ns)
	require.Eventually(t, func() bool {
		body, err := scrape(metricsAddr, reader)
		return err == nil && metricValue(body, `controller_runtime_reconcile_errors_total{controller="guard-policy"}`) >= 1
	}, transition, 50*time.Millisecond, "the guard never tried to apply its policy")
	code, body := get(t, "http://"+probeAddr+"/readyz")
	assert.Equal(t, http.StatusInternalServerError, code, body)
	assert.Contains(t, body, "guard-policy")

	ctx := context.Background()
	rules := harness.GuardRules([]string{s.name})
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "guard-policy-" + s.ns},
		Rules: []rbacv1.PolicyRule{rules["create-policy"], rules["write-policy"]}}
	require.NoError(t, env.Client.Create(ctx, role))
	require.NoError(t, env.Bind(ctx, role.Name, role.Name, s.ns, "webhook-guard"))
	require.Eventually(t, func() bool {
		code, _ := get(t, "http://"+probeAddr+"/readyz")
		return code == http.StatusOK
	}, transition, 100*time.Millisecond, "readyz never turned ready once the policy could be applied")
}

// A target the installed RBAC does not cover makes the service refuse to
// start, naming the gap, before it writes anything.
func TestGuard_refusesToStartWithoutPermissionOnATarget(t *testing.T) {
	s := newBreakerSetup(t, setupOptions{mode: "Ignore"})
	g, err := env.StartGuard(harness.GuardOptions{Name: "refused", Kubeconfig: s.guardID.KubeconfigPath, Config: s.config(`- configuration: not-granted
  webhook: x.example.com
  allowAdmissionWithoutMutation: true
`)})
	require.NoError(t, err)
	code, err := g.Wait(30 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, 1, code)
	assert.Contains(t, g.Logs(), "this identity may not patch mutatingwebhookconfigurations not-granted")
	assert.Empty(t, s.writes.modified())
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricsReader returns the token of a ServiceAccount allowed to GET
// /metrics, as Prometheus would have.
func metricsReader(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	id, err := env.ServiceAccount(ctx, ns, "metrics-reader")
	require.NoError(t, err)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader-" + ns},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	require.NoError(t, env.Client.Create(ctx, role))
	require.NoError(t, env.Bind(ctx, role.Name, role.Name, ns, "metrics-reader"))
	return id.Token
}

// scrape reads the guard's HTTPS metrics through its authentication and
// authorization filter, with a bearer token.
func scrape(addr, token string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// The metrics server's own self-signed certificate.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback test endpoint
	}}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("metrics: %s: %s", resp.Status, b)
	}
	return string(b), err
}

func metricValue(body, series string) float64 {
	m := regexp.MustCompile(regexp.QuoteMeta(series) + ` (\S+)`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
