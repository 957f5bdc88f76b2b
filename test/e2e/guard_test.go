package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
		rec, err := circuit.Decode(s.get().Annotations)
		return err == nil && rec[s.hook].HandedOff()
	}, transition, 20*time.Millisecond, "the breaker never handed off")
	m := s.get()
	assert.Equal(t, admissionregistrationv1.Fail, *findWebhook(m, s.hook).FailurePolicy, "the administrator's Fail must stand")
	assert.False(t, hasMarker(findWebhook(m, s.hook)))
	require.Eventually(t, func() bool { return contains(eventReasons(t, s.name), string(decide.HandedOff)) }, transition, 50*time.Millisecond)
	r = env.Kubectl(ctx, "", nil, "get", "events", "-n", circuit.EventsNamespace, "--field-selector", "involvedObject.name="+s.name, "-o", "custom-columns=REASON:.reason,MESSAGE:.message")
	t.Logf("$ kubectl get events -n default --field-selector involvedObject.name=%s\n%s", s.name, r.Stdout)
}

// policyProbeInterval is the probe interval of
// TestGuard_reportsALoosenedOrMissingPolicyAndStillOpens: the guard
// reports a change of its policy within one.
const policyProbeInterval = time.Second

// TestGuard_reportsALoosenedOrMissingPolicyAndStillOpens: the guard only
// reads its policy. An administrator who loosens the binding to Audit, or
// deletes the policy, is reported within one probe interval (a Warning
// Event naming what is wrong, webhook_guard_policy_in_force 0), nothing
// puts the policy back, and a failing target still opens: the breaker's
// own writes need no policy.
func TestGuard_reportsALoosenedOrMissingPolicyAndStillOpens(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Ignore"})
	metricsAddr := freeAddr(t)
	cfg := strings.Replace(s.config(""), "interval: 100ms", "interval: "+policyProbeInterval.String(), 1)
	g := env.StartGuardT(t, harness.GuardOptions{Name: "guard", Kubeconfig: s.guardID.KubeconfigPath, Config: cfg,
		Args: []string{"--leader-elect", "--leader-election-namespace", s.ns, "--metrics-bind-address", metricsAddr}})
	reader := metricsReader(t, s.ns)
	inForce := func() float64 {
		body, err := scrape(metricsAddr, reader)
		if err != nil || !strings.Contains(body, "webhook_guard_policy_in_force ") {
			return -1
		}
		return metricValue(body, "\nwebhook_guard_policy_in_force")
	}
	require.Eventually(t, func() bool { return inForce() == 1 }, transition, 50*time.Millisecond, "the installed policy was never reported in force")

	// reported waits for the gauge to read 0 and for a GuardPolicyNotInForce
	// Event that says want, and returns how long after the change the
	// gauge read 0.
	reported := func(changed time.Time, want string) time.Duration {
		t.Helper()
		var took time.Duration
		require.Eventually(t, func() bool {
			if inForce() != 0 {
				return false
			}
			if took == 0 {
				took = time.Since(changed)
			}
			list := &eventsv1.EventList{}
			if env.Client.List(ctx, list, client.InNamespace(circuit.EventsNamespace)) != nil {
				return false
			}
			for _, e := range list.Items {
				if e.Reason == admission.ReasonPolicyNotInForce && e.CreationTimestamp.After(changed.Add(-time.Second)) && strings.Contains(e.Note, want) {
					return true
				}
			}
			return false
		}, transition, 20*time.Millisecond, "the guard never reported %q", want)
		return took
	}

	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, binding))
	binding.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
	changed := time.Now()
	require.NoError(t, env.Client.Update(ctx, binding))
	took := reported(changed, "validationActions [Audit], not [Deny]")
	t.Logf("binding loosened to Audit: reported after %s (probe interval %s)", took, policyProbeInterval)
	assert.LessOrEqual(t, took, policyProbeInterval, "reported later than one probe interval")

	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, policy))
	require.NoError(t, env.Client.Delete(ctx, policy))
	changed = time.Now()
	took = reported(changed, "ValidatingAdmissionPolicy webhook-guard is missing")
	t.Logf("policy deleted: reported after %s", took)

	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	_, open := s.waitOpen()
	assert.True(t, isOpen(open, s.hook, "Ignore"))
	err := env.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, &admissionregistrationv1.ValidatingAdmissionPolicy{})
	assert.True(t, apierrors.IsNotFound(err), "the guard put its policy back: %v", err)
	assert.Zero(t, g.CountLogLines("Restored"), "the guard wrote its policy")
}

// readyz reflects whether the guard's policy is in place: a guard started
// before its policy is installed is not ready until the installer applies
// it.
func TestGuard_readyzFailsUntilPolicyInPlace(t *testing.T) {
	s := newBreakerSetup(t, setupOptions{mode: "Ignore"})
	ctx := context.Background()
	for _, obj := range []client.Object{
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: admission.PolicyName}},
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: admission.PolicyName}},
	} {
		if err := env.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			require.NoError(t, err)
		}
	}
	probeAddr := freeAddr(t)
	cfg := s.config("")
	env.StartGuardT(t, harness.GuardOptions{Name: "guard", Kubeconfig: s.guardID.KubeconfigPath, Config: cfg, WithoutPolicy: true,
		Args: []string{"--leader-elect", "--leader-election-namespace", s.ns, "--health-probe-bind-address", probeAddr}})
	require.Eventually(t, func() bool {
		code, body := get(t, "http://"+probeAddr+"/readyz")
		return code == http.StatusInternalServerError && strings.Contains(body, "guard-policy")
	}, transition, 50*time.Millisecond, "readyz never said the policy is missing")

	bin, err := env.BuildGuard()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	require.NoError(t, env.InstallPolicy(ctx, bin, path, s.guardID.Username))
	require.Eventually(t, func() bool {
		code, _ := get(t, "http://"+probeAddr+"/readyz")
		return code == http.StatusOK
	}, transition, 100*time.Millisecond, "readyz never turned ready once the policy was installed")
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
