package helm

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli/status"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// TestHelm_helmTestPassesOnlyWithALeaderAndTheGuardPolicy does what "helm
// test" does with a kubelet: it creates the test's ServiceAccount and
// bindings as the chart renders them and runs the test Pod's command,
// with the Pod's arguments, as that ServiceAccount. It fails while no
// guard has started (no leader; the chart installed the guard policy),
// passes once a guard leads, fails again, for no leader, once that guard
// is stopped, and for the guard policy once its binding is deleted.
func TestHelm_helmTestPassesOnlyWithALeaderAndTheGuardPolicy(t *testing.T) {
	ctx := context.Background()
	ns := "helm-test-e2e"
	require.NoError(t, env.EnsureNamespace(ctx, ns))
	dumpOnFailure(t, ns)
	wh, err := harness.StartWebhook(harness.WebhookOptions{Host: "127.0.0.1"})
	require.NoError(t, err)
	t.Cleanup(wh.Close)
	wh.SetBehaviour(mutatePath, harness.Allow())
	wh.SetBehaviour(validatePath, harness.Allow())
	install := runHelm(t, append([]string{"install", "webhook-guard", chartDir, "--namespace", releaseNamespace, "--create-namespace"}, exampleValues()...)...)
	require.NoError(t, install.err, "helm install:\n%s%s", install.stdout, install.stderr)
	assert.Contains(t, install.stdout, "guard status -n "+releaseNamespace, "NOTES.txt says how to check it")
	assert.Contains(t, install.stdout, "helm test webhook-guard", "NOTES.txt names the helm test")
	// No kubelet runs the pre-delete hook's Job here: helm would wait for it.
	t.Cleanup(func() { runHelm(t, "uninstall", "webhook-guard", "--namespace", releaseNamespace, "--no-hooks") })
	for _, tg := range []target{
		{circuit.KindMutating, mutatingTarget, mutatingWebhook, mutatePath},
		{circuit.KindValidating, validatingTarget, validatingWebhook, validatePath},
	} {
		createTarget(t, ns, wh, tg)
	}

	// The test's objects, as helm creates them before the Pod.
	tmpl := runHelm(t, append([]string{"template", "webhook-guard", chartDir, "--namespace", releaseNamespace, "--show-only", "templates/tests/status.yaml"}, exampleValues()...)...)
	require.NoError(t, tmpl.err, "helm template:\n%s", tmpl.stderr)
	var podArgs []string
	var rbac []string
	for _, doc := range strings.Split(tmpl.stdout, "\n---\n") {
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
		assert.Equal(t, "test", obj["metadata"].(map[string]any)["annotations"].(map[string]any)["helm.sh/hook"])
		if obj["kind"] != "Pod" {
			rbac = append(rbac, doc)
			continue
		}
		var pod struct {
			Spec struct {
				Containers []struct {
					Args []string `json:"args"`
				} `json:"containers"`
			} `json:"spec"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &pod))
		podArgs = pod.Spec.Containers[0].Args
	}
	require.Equal(t, []string{"status", "--exit-code", "--wait=60s", "--namespace=" + releaseNamespace}, podArgs)
	r := env.Kubectl(ctx, "", []byte(strings.Join(rbac, "\n---\n")), "apply", "-f", "-")
	require.NoError(t, r.Err, "kubectl apply of the test's RBAC:\n%s%s", r.Stdout, r.Stderr)
	t.Cleanup(func() {
		env.Kubectl(context.Background(), "", []byte(strings.Join(rbac, "\n---\n")), "delete", "--ignore-not-found", "-f", "-")
	})
	id, err := env.ServiceAccount(ctx, releaseNamespace, "webhook-guard-test")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return id.Client.Get(ctx, client.ObjectKey{Name: mutatingTarget}, &admissionregistrationv1.MutatingWebhookConfiguration{}) == nil
	}, 30*time.Second, 100*time.Millisecond, "the test's RBAC never took effect")
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	helmTest := func(wait string) (int, string) {
		t.Helper()
		args := []string{"--kubeconfig", id.KubeconfigPath}
		for _, a := range podArgs {
			if wait != "" && strings.HasPrefix(a, "--wait=") {
				a = "--wait=" + wait
			}
			args = append(args, a)
		}
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), out.String()
		}
		require.NoError(t, err, out.String())
		return 0, out.String()
	}

	code, out := helmTest("3s")
	t.Logf("before any guard:\n%s", out)
	assert.Equal(t, status.ExitNoLeader, code, "no guard leads")
	assert.Contains(t, out, "Guard policy: enforced", "the chart installed the guard policy")

	g := startInstalledGuard(t, "helm-test")
	code, out = helmTest("")
	t.Logf("with a guard leading:\n%s", out)
	assert.Zero(t, code, "the helm test fails with a guard leading and its policy enforced")

	g.Stop()
	code, out = helmTest("3s")
	t.Logf("after the guard stopped:\n%s", out)
	assert.Equal(t, status.ExitNoLeader, code, "the guard policy stays, nobody leads")

	require.NoError(t, env.Client.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "webhook-guard"}}))
	code, out = helmTest("3s")
	t.Logf("after the binding was deleted:\n%s", out)
	assert.Equal(t, status.ExitPolicyNotEnforced, code)
	assert.Contains(t, out, "ValidatingAdmissionPolicyBinding webhook-guard is missing")
}
