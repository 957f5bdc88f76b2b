package helm

// These tests install the chart the way an operator does, with the real
// helm, and run the real guard as the chart's ServiceAccount with the
// chart's RBAC. No kubelet or kube-controller-manager runs here, so the
// Deployment never gets pods; the guard runs out of cluster as the
// installed ServiceAccount instead (as test/e2e/install_test.go does for
// the kustomize overlays).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// The chart's names with the example targets, installed as release
// "webhook-guard" into the default installation's namespace.
const (
	releaseNamespace  = circuit.DefaultNamespace
	releaseUser       = circuit.DefaultUsername
	mutatingTarget    = "slow-mutator"
	mutatingWebhook   = "slow-mutator.example.com"
	validatingTarget  = "policy-engine"
	validatingWebhook = "validate.policy-engine.example.com"
	// addedTarget is the target the upgrade adds.
	addedTarget  = "added-mutator"
	addedWebhook = "added-mutator.example.com"
	// The test webhook's paths, and what its validator says.
	mutatePath       = "/mutate"
	addedPath        = "/added"
	validatePath     = "/validate"
	validatingDenial = "e2e validator: this ConfigMap is not allowed"
)

// target is one webhook the guard manages in these tests.
type target struct {
	kind          circuit.Kind
	name, webhook string
	path          string
}

// TestHelm_installRunsTheGuardAndUpgradeAddsATarget installs the chart
// with the example targets; the real guard, as the chart's ServiceAccount,
// opens and closes both circuits with the chart's RBAC, and creates the
// guard policy itself. Then "helm upgrade" adds a target (its values,
// nothing else: the chart renders its marking policy): it completes with
// no other step, and a guard with the new configuration starts, finds the
// new marking policy in place and loaded (its canary answers with the
// digest the guard expects), and cycles the new target's circuit.
func TestHelm_installRunsTheGuardAndUpgradeAddsATarget(t *testing.T) {
	ctx := context.Background()
	ns := "helm-e2e"
	require.NoError(t, env.EnsureNamespace(ctx, ns))
	dumpOnFailure(t, ns)
	wh, err := harness.StartWebhook(harness.WebhookOptions{Host: "127.0.0.1"})
	require.NoError(t, err)
	t.Cleanup(wh.Close)
	for _, p := range []string{mutatePath, addedPath} {
		wh.SetBehaviour(p, harness.Allow())
	}
	wh.SetBehaviour(validatePath, harness.Deny(validatingDenial))

	install := runHelm(t, append([]string{"install", "webhook-guard", chartDir, "--namespace", releaseNamespace, "--create-namespace"}, exampleValues()...)...)
	require.NoError(t, install.err, "helm install:\n%s%s", install.stdout, install.stderr)
	// No kubelet runs the pre-delete hook's Job here: helm would wait for it.
	t.Cleanup(func() { runHelm(t, "uninstall", "webhook-guard", "--namespace", releaseNamespace, "--no-hooks") })

	example := []target{
		{circuit.KindMutating, mutatingTarget, mutatingWebhook, mutatePath},
		{circuit.KindValidating, validatingTarget, validatingWebhook, validatePath},
	}
	for _, tg := range example {
		createTarget(t, ns, wh, tg)
	}
	checksum := podChecksum(t, ctx)

	t.Run("the guard runs as the chart's ServiceAccount and cycles both circuits", func(t *testing.T) {
		g := startInstalledGuard(t, "installed")
		cycle(t, g, wh, ns, example...)

		// The chart leaves the guard policy to the service, which creates
		// it with its own labels.
		policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: "webhook-guard"}, policy))
		assert.Equal(t, "webhook-guard", policy.Labels["app.kubernetes.io/managed-by"])
		g.Stop()
		assert.NotContains(t, strings.ToLower(g.Logs()), "forbidden", "the guard was refused something by the chart's RBAC")
	})

	t.Run("helm upgrade adds a target with no other step", func(t *testing.T) {
		example, err := os.ReadFile(filepath.Join(root, exampleTargets, "config.yaml"))
		require.NoError(t, err)
		cfg := string(example) + fmt.Sprintf("- configuration: %s\n  webhook: %s\n  allowAdmissionWithoutMutation: true\n  mode: Bypass\n", addedTarget, addedWebhook)
		values := valuesFile(t, cfg)
		upgrade := runHelm(t, "upgrade", "webhook-guard", chartDir, "--namespace", releaseNamespace, "-f", values)
		require.NoError(t, upgrade.err, "helm upgrade:\n%s%s", upgrade.stdout, upgrade.stderr)

		assert.Contains(t, installedConfig(t, ctx), addedTarget)
		assert.NotEqual(t, checksum, podChecksum(t, ctx), "the pods must roll to the new configuration")
		require.Eventually(t, func() bool {
			return canI(ctx, "patch", "mutatingwebhookconfigurations/"+addedTarget)
		}, 30*time.Second, 200*time.Millisecond, "the upgraded RBAC never let the guard patch %s", addedTarget)
		assert.False(t, canI(ctx, "patch", "mutatingwebhookconfigurations/not-a-target"))

		added := target{circuit.KindMutating, addedTarget, addedWebhook, addedPath}
		createTarget(t, ns, wh, added)
		// policy-engine stays a target and is called for every ConfigMap
		// create; let it admit them, so that only the added target decides.
		wh.SetBehaviour(validatePath, harness.Allow())
		g := startInstalledGuard(t, "upgraded")
		cycle(t, g, wh, ns, added)
		g.Stop()
		assert.NotContains(t, strings.ToLower(g.Logs()), "forbidden", "the guard was refused something by the upgraded RBAC")
	})
}

// dumpOnFailure prints the release, the admission objects and the events
// when t fails.
func dumpOnFailure(t *testing.T, ns string) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r := runHelm(t, "status", "webhook-guard", "--namespace", releaseNamespace, "--show-resources")
		t.Logf("helm status:\n%s%s", r.stdout, r.stderr)
		for _, args := range [][]string{
			{"get", "mutatingwebhookconfigurations,validatingwebhookconfigurations,validatingadmissionpolicies,mutatingadmissionpolicies", "-o", "yaml"},
			{"get", "events", "-A"},
			{"get", "all,configmaps,roles,rolebindings", "-n", releaseNamespace},
			{"get", "configmaps", "-n", ns},
		} {
			res := env.Kubectl(ctx, "", nil, args...)
			t.Logf("kubectl %s:\n%s%s", strings.Join(args, " "), res.Stdout, res.Stderr)
		}
	})
}

// createTarget creates tg's configuration with one webhook, failurePolicy
// Fail, for ConfigMap creates in ns, served by wh at tg.path.
func createTarget(t *testing.T, ns string, wh *harness.Webhook, tg target) {
	t.Helper()
	ctx := context.Background()
	hook := harness.ConfigMapWebhook(tg.webhook, ns, wh.URL(tg.path), wh.CA.CertPEM, admissionregistrationv1.Fail)
	var obj client.Object = &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: tg.name},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{hook},
	}
	if tg.kind == circuit.KindValidating {
		obj = &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: tg.name},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name: hook.Name, AdmissionReviewVersions: hook.AdmissionReviewVersions, SideEffects: hook.SideEffects,
				FailurePolicy: hook.FailurePolicy, TimeoutSeconds: hook.TimeoutSeconds, ClientConfig: hook.ClientConfig,
				NamespaceSelector: hook.NamespaceSelector, Rules: hook.Rules,
			}},
		}
	}
	require.NoError(t, env.Client.Create(ctx, obj))
	t.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", tg.name, err)
		}
	})
}

// installedConfig is the GuardConfiguration of the installed ConfigMap.
func installedConfig(t *testing.T, ctx context.Context) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "webhook-guard-config"}, cm))
	require.Contains(t, cm.Data, "config.yaml")
	return cm.Data["config.yaml"]
}

// podChecksum is the installed Deployment's checksum of its configuration.
func podChecksum(t *testing.T, ctx context.Context) string {
	t.Helper()
	dep := &appsv1.Deployment{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "webhook-guard"}, dep))
	sum := dep.Spec.Template.Annotations["checksum/config"]
	require.NotEmpty(t, sum)
	return sum
}

// fastConfig is harness.FastConfig for this test.
func fastConfig(t *testing.T, installed string) string {
	t.Helper()
	cfg, err := harness.FastConfig(installed)
	require.NoError(t, err)
	return cfg
}

// startInstalledGuard runs the real guard as the chart's ServiceAccount
// with the installed configuration (fastConfig), the Deployment's leader
// election flags, and without the webhook server and the certificate it
// needs (no pod network here). The marking policies are the chart's
// (WithoutMarking).
func startInstalledGuard(t *testing.T, name string) *harness.Guard {
	t.Helper()
	ctx := context.Background()
	id, err := env.ServiceAccount(ctx, releaseNamespace, circuit.DefaultServiceAccount)
	require.NoError(t, err)
	require.Equal(t, releaseUser, id.Username)
	// The chart's leaseNamespace, kube-system by default.
	args := []string{"--leader-elect", "--leader-election-namespace", metav1.NamespaceSystem}
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	if help, _ := exec.Command(bin, "run", "--help").CombinedOutput(); bytes.Contains(help, []byte("-cert-secret")) {
		args = append(args, "--cert-secret=")
	}
	g, err := env.StartGuard(harness.GuardOptions{Name: name, Kubeconfig: id.KubeconfigPath, Config: fastConfig(t, installedConfig(t, ctx)), Args: args, WithoutMarking: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("guard %s logs:\n%s", name, g.Logs())
		}
	})
	return g
}

// cycle makes the targets' webhooks slow until the guard has opened each
// circuit in Bypass mode and the apiserver admits without calling them,
// then healthy again until each is closed and restored.
func cycle(t *testing.T, g *harness.Guard, wh *harness.Webhook, ns string, targets ...target) {
	t.Helper()
	ctx := context.Background()
	const wait = 60 * time.Second
	notExited := func() {
		if exited, code := g.Exited(); exited {
			require.FailNow(t, "the guard exited", "exit code %d; logs:\n%s", code, g.Logs())
		}
	}
	for _, tg := range targets {
		require.Eventually(t, func() bool {
			notExited()
			return probedHealthy(ctx, g.StatusURL, tg)
		}, wait, 100*time.Millisecond, "the guard never probed %s healthy", tg.name)
	}
	slow := func(tg target) harness.Behaviour {
		if tg.kind == circuit.KindValidating {
			return harness.Delayed(2*time.Second, harness.Deny(validatingDenial))
		}
		return harness.Delayed(2*time.Second, harness.Allow())
	}
	for _, tg := range targets {
		wh.SetBehaviour(tg.path, slow(tg))
	}
	for _, tg := range targets {
		require.Eventually(t, func() bool {
			notExited()
			policy, marker, record, err := ownedFields(ctx, tg)
			return err == nil && policy == admissionregistrationv1.Ignore && marker && strings.Contains(record, tg.webhook)
		}, wait, 100*time.Millisecond, "the circuit never opened on %s", tg.name)
	}
	require.Eventually(t, func() bool {
		before := map[string]int{}
		for _, tg := range targets {
			before[tg.path] = wh.APIServerCalls(tg.path)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-"}}
		if err := env.Client.Create(ctx, cm); err != nil {
			return false
		}
		return !slices.ContainsFunc(targets, func(tg target) bool { return wh.APIServerCalls(tg.path) != before[tg.path] })
	}, wait, 50*time.Millisecond, "Bypass: admission never went through without calling the slow webhooks")

	for _, tg := range targets {
		if tg.kind == circuit.KindValidating {
			wh.SetBehaviour(tg.path, harness.Deny(validatingDenial))
		} else {
			wh.SetBehaviour(tg.path, harness.Allow())
		}
	}
	for _, tg := range targets {
		require.Eventually(t, func() bool {
			notExited()
			policy, marker, record, err := ownedFields(ctx, tg)
			return err == nil && policy == admissionregistrationv1.Fail && !marker && record == ""
		}, wait, 100*time.Millisecond, "the circuit never closed on %s", tg.name)
	}
}

// probedHealthy reports whether the guard's /status has two healthy
// probes in a row of tg.
func probedHealthy(ctx context.Context, url string, tg target) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var rows []struct {
		Configuration        string `json:"configuration"`
		Webhook              string `json:"webhook"`
		ConsecutiveSuccesses int    `json:"consecutiveSuccesses"`
	}
	if json.NewDecoder(resp.Body).Decode(&rows) != nil {
		return false
	}
	return slices.ContainsFunc(rows, func(r struct {
		Configuration        string `json:"configuration"`
		Webhook              string `json:"webhook"`
		ConsecutiveSuccesses int    `json:"consecutiveSuccesses"`
	}) bool {
		return r.Configuration == tg.name && r.Webhook == tg.webhook && r.ConsecutiveSuccesses >= 2
	})
}

// ownedFields reads tg's webhook: its failurePolicy, whether it carries
// the bypass matchCondition, and the configuration's circuit record.
func ownedFields(ctx context.Context, tg target) (admissionregistrationv1.FailurePolicyType, bool, string, error) {
	obj := tg.kind.New()
	if err := env.Client.Get(ctx, client.ObjectKey{Name: tg.name}, obj); err != nil {
		return "", false, "", err
	}
	view, err := circuit.View(obj)
	if err != nil {
		return "", false, "", err
	}
	for _, w := range view.Webhooks {
		if w.Name != tg.webhook {
			continue
		}
		marker := slices.ContainsFunc(w.MatchConditions, func(c admissionregistrationv1.MatchCondition) bool { return c.Name == circuit.BypassCondition })
		return ptr.Deref(w.FailurePolicy, ""), marker, view.Annotations[circuit.Annotation], nil
	}
	return "", false, "", fmt.Errorf("webhook %s not found in %s", tg.webhook, tg.name)
}

// canI asks the apiserver, as admin, whether the chart's ServiceAccount
// may do verb on resource.
func canI(ctx context.Context, verb, resource string) bool {
	r := env.Kubectl(ctx, "", nil, "auth", "can-i", verb, resource, "--as="+releaseUser)
	answer := strings.Fields(r.Stdout)
	return len(answer) > 0 && answer[0] == "yes"
}
