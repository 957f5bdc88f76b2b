package helmnomap

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

const (
	releaseNamespace = circuit.DefaultNamespace
	mapKind          = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
	targetName       = "nomap-mutator"
	targetWebhook    = "nomap-mutator.example.com"
	mutatePath       = "/mutate"
)

// fromCRDs are the kinds the chart renders only when asked to, whose
// definitions the Prometheus Operator and cert-manager install.
var fromCRDs = []string{
	"monitoring.coreos.com/v1/ServiceMonitor",
	"monitoring.coreos.com/v1/PrometheusRule",
	"cert-manager.io/v1/Certificate",
	"cert-manager.io/v1/Issuer",
}

// values are the chart's values here: one mutating target, probed fast.
const values = `targets:
- configuration: ` + targetName + `
  webhook: ` + targetWebhook + `
  allowAdmissionWithoutMutation: true
  mode: Bypass
  openAfter: 2
  closeAfter: 2
  probe:
    interval: 100ms
`

func valuesFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// kindsOf is the apiVersion/kind of each object of a YAML stream.
func kindsOf(t *testing.T, stream string) []string {
	t.Helper()
	return objectsOf(t, stream, func(obj map[string]any) string { return fmt.Sprintf("%s/%s", obj["apiVersion"], obj["kind"]) })
}

// namesOf is the kind/name of each object of a YAML stream.
func namesOf(t *testing.T, stream string) []string {
	t.Helper()
	return objectsOf(t, stream, func(obj map[string]any) string {
		meta, _ := obj["metadata"].(map[string]any)
		return fmt.Sprintf("%s/%s", obj["kind"], meta["name"])
	})
}

// objectsOf is what f says of each object of a YAML stream.
func objectsOf(t *testing.T, stream string, f func(map[string]any) string) []string {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	var out []string
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal(doc, &obj))
		if len(obj) > 0 {
			out = append(out, f(obj))
		}
	}
}

// TestChart_rendersOnlyWhatThisAPIServerServes: "helm template" with this
// apiserver's APIs (the served list from its discovery, as helm install
// reads it) and a Kubernetes version before 1.36 renders only kinds it
// serves, with every optional part of the chart on.
func TestChart_rendersOnlyWhatThisAPIServerServes(t *testing.T) {
	served, err := env.ServedKinds()
	require.NoError(t, err)
	require.NotContains(t, served, mapKind, "this apiserver must not serve MutatingAdmissionPolicy")
	require.Contains(t, served, "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")
	for name, set := range map[string]string{
		"prometheus and cert-manager and own namespace": "prometheus.enabled=true,certManager.enabled=true,namespace.name=guard,namespace.create=true",
		"static admission": "staticAdmission.enabled=true",
	} {
		for _, kube := range []string{"1.30.0", "1.33.0", "1.35.0"} {
			t.Run(name+" at "+kube, func(t *testing.T) {
				r := runHelm(t, "template", "webhook-guard", chartDir, "-f", valuesFile(t, values), "--set", set,
					"--kube-version", kube, "--api-versions", strings.Join(served, ","))
				require.NoError(t, r.err, r.stderr)
				kinds := kindsOf(t, r.stdout)
				require.NotEmpty(t, kinds)
				for _, k := range kinds {
					if !slices.Contains(fromCRDs, k) {
						assert.Contains(t, served, k, "rendered, not served")
					}
				}
			})
		}
	}
}

// TestHelm_installsWithoutMarkingAndTheGuardRuns: the real helm installs
// the chart (it would fail on an object of a kind the apiserver does not
// serve), its notes say that marking is unavailable, and the real guard,
// as the chart's ServiceAccount, says so too, and opens and closes the
// target's circuit without marking.
func TestHelm_installsWithoutMarkingAndTheGuardRuns(t *testing.T) {
	ctx := context.Background()
	ns := "nomap-e2e"
	require.NoError(t, env.EnsureNamespace(ctx, ns))
	wh, err := harness.StartWebhook(harness.WebhookOptions{Host: "127.0.0.1"})
	require.NoError(t, err)
	t.Cleanup(wh.Close)
	wh.SetBehaviour(mutatePath, harness.Allow())

	install := runHelm(t, "install", "webhook-guard", chartDir, "--namespace", releaseNamespace, "--create-namespace", "-f", valuesFile(t, values))
	require.NoError(t, install.err, "helm install:\n%s%s", install.stdout, install.stderr)
	// No kubelet runs the pre-delete hook's Job here: helm would wait for it.
	t.Cleanup(func() { runHelm(t, "uninstall", "webhook-guard", "--namespace", releaseNamespace, "--no-hooks") })
	assert.Contains(t, install.stdout, "This cluster does not serve MutatingAdmissionPolicy", "the notes say why nothing is marked")
	manifest := runHelm(t, "get", "manifest", "webhook-guard", "--namespace", releaseNamespace)
	require.NoError(t, manifest.err, manifest.stderr)
	assert.NotContains(t, kindsOf(t, manifest.stdout), mapKind)
	assert.Contains(t, kindsOf(t, manifest.stdout), "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy", "the guard policy is installed")

	createTarget(t, ctx, ns, wh)
	g := startInstalledGuard(t, ctx, circuit.DefaultServiceAccount)
	require.Eventually(t, func() bool {
		if exited, code := g.Exited(); exited {
			require.FailNow(t, "the guard exited", "exit code %d; logs:\n%s", code, g.Logs())
		}
		return strings.Contains(g.Logs(), "Marking unavailable")
	}, time.Minute, 100*time.Millisecond, "the guard never said that marking is unavailable")
	cycleTarget(t, ctx, g, wh, ns)
}

// createTarget creates the target's configuration: one webhook,
// failurePolicy Fail, for ConfigMap creates in ns, served by wh.
func createTarget(t *testing.T, ctx context.Context, ns string, wh *harness.Webhook) {
	t.Helper()
	hook := harness.ConfigMapWebhook(targetWebhook, ns, wh.URL(mutatePath), wh.CA.CertPEM, admissionregistrationv1.Fail)
	cfgObj := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: targetName},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{hook},
	}
	require.NoError(t, env.Client.Create(ctx, cfgObj))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cfgObj) })
}

// cycleTarget makes the target's webhook slow until g has opened its
// circuit in Bypass mode (nothing marks what is admitted meanwhile), then
// healthy until g has closed it; g's logs must show no refusal.
func cycleTarget(t *testing.T, ctx context.Context, g *harness.Guard, wh *harness.Webhook, ns string) {
	t.Helper()
	notExited := func() {
		if exited, code := g.Exited(); exited {
			require.FailNow(t, "the guard exited", "exit code %d; logs:\n%s", code, g.Logs())
		}
	}
	wh.SetBehaviour(mutatePath, harness.Delayed(2*time.Second, harness.Allow()))
	require.Eventually(t, func() bool {
		notExited()
		policy, bypass := owned(ctx, t)
		return policy == admissionregistrationv1.Ignore && bypass
	}, time.Minute, 100*time.Millisecond, "the circuit never opened")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "open-"}}
	require.NoError(t, env.Client.Create(ctx, cm))
	assert.NotContains(t, cm.Labels, circuit.UnmutatedLabel, "nothing marks without the API")

	wh.SetBehaviour(mutatePath, harness.Allow())
	require.Eventually(t, func() bool {
		notExited()
		policy, bypass := owned(ctx, t)
		return policy == admissionregistrationv1.Fail && !bypass
	}, time.Minute, 100*time.Millisecond, "the circuit never closed")
	g.Stop()
	assert.NotContains(t, strings.ToLower(g.Logs()), "forbidden", "the guard was refused something by the chart's RBAC")
}

// owned reads the target webhook's failurePolicy and whether it carries
// the bypass matchCondition.
func owned(ctx context.Context, t *testing.T) (admissionregistrationv1.FailurePolicyType, bool) {
	obj := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: targetName}, obj); err != nil || len(obj.Webhooks) != 1 {
		t.Logf("reading %s: %v", targetName, err)
		return "", false
	}
	w := obj.Webhooks[0]
	bypass := slices.ContainsFunc(w.MatchConditions, func(c admissionregistrationv1.MatchCondition) bool { return c.Name == circuit.BypassCondition })
	return ptr.Deref(w.FailurePolicy, ""), bypass
}

// startInstalledGuard runs the real guard as the chart's ServiceAccount
// serviceAccount with the installed configuration, the Deployment's leader election
// flags, and without the webhook server and the certificate it needs (no
// pod network here).
func startInstalledGuard(t *testing.T, ctx context.Context, serviceAccount string) *harness.Guard {
	t.Helper()
	cm := &corev1.ConfigMap{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "webhook-guard-config"}, cm))
	id, err := env.ServiceAccount(ctx, releaseNamespace, serviceAccount)
	require.NoError(t, err)
	args := []string{"--leader-elect", "--leader-election-namespace", metav1.NamespaceSystem}
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	if help, _ := exec.Command(bin, "run", "--help").CombinedOutput(); bytes.Contains(help, []byte("-cert-secret")) {
		args = append(args, "--cert-secret=")
	}
	g, err := env.StartGuard(harness.GuardOptions{Name: serviceAccount, Kubeconfig: id.KubeconfigPath, Config: cm.Data["config.yaml"], Args: args, WithoutMarking: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("guard logs:\n%s", g.Logs())
		}
	})
	return g
}

// TestHelm_guardRunsAsTheServiceAccountNamed: with serviceAccount.create
// false and a name, the chart creates no ServiceAccount and binds its RBAC,
// the guard policy and the release hook to the one named, which the
// platform created (here with an annotation, as a workload identity
// would); the real guard, as that account, opens and closes the target's
// circuit.
func TestHelm_guardRunsAsTheServiceAccountNamed(t *testing.T) {
	ctx := context.Background()
	const name = "platform-guard"
	ns := "nomap-sa-e2e"
	require.NoError(t, env.EnsureNamespace(ctx, ns))
	require.NoError(t, env.EnsureNamespace(ctx, releaseNamespace))
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNamespace, Name: name, Annotations: map[string]string{"iam.example.com/role": "guard"}}}
	require.NoError(t, env.Client.Create(ctx, sa))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), sa) })
	wh, err := harness.StartWebhook(harness.WebhookOptions{Host: "127.0.0.1"})
	require.NoError(t, err)
	t.Cleanup(wh.Close)
	wh.SetBehaviour(mutatePath, harness.Allow())

	install := runHelm(t, "install", "webhook-guard", chartDir, "--namespace", releaseNamespace, "-f", valuesFile(t, values),
		"--set", "serviceAccount.create=false,serviceAccount.name="+name)
	require.NoError(t, install.err, "helm install:\n%s%s", install.stdout, install.stderr)
	t.Cleanup(func() { runHelm(t, "uninstall", "webhook-guard", "--namespace", releaseNamespace, "--no-hooks") })
	manifest := runHelm(t, "get", "manifest", "webhook-guard", "--namespace", releaseNamespace)
	require.NoError(t, manifest.err, manifest.stderr)
	assert.NotContains(t, namesOf(t, manifest.stdout), "ServiceAccount/"+name, "serviceAccount.create=false")
	assert.NotContains(t, namesOf(t, manifest.stdout), "ServiceAccount/webhook-guard")
	assert.NotContains(t, manifest.stdout, "serviceaccount:"+releaseNamespace+":webhook-guard'", "the guard policy exempts the named account only")
	assert.Contains(t, manifest.stdout, "serviceAccountName: "+name)
	hooks := runHelm(t, "get", "hooks", "webhook-guard", "--namespace", releaseNamespace)
	require.NoError(t, hooks.err, hooks.stderr)
	assert.Contains(t, hooks.stdout, "--breaker=system:serviceaccount:"+releaseNamespace+":"+name)
	assert.Contains(t, hooks.stdout, "serviceAccountName: "+name+"-release", "the release identity the guard policy names")

	createTarget(t, ctx, ns, wh)
	g := startInstalledGuard(t, ctx, name)
	cycleTarget(t, ctx, g, wh, ns)
}
