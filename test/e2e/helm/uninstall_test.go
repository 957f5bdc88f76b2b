package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// hookServiceAccount is the pre-delete hook's own ServiceAccount.
const hookServiceAccount = "webhook-guard-release"

// rawConfiguration is the configuration as kube-apiserver serves it,
// without resourceVersion, generation and managedFields (the bookkeeping
// of who wrote which field when; every write changes it), re-encoded with
// sorted keys.
func rawConfiguration(t *testing.T, ctx context.Context, tg target) string {
	t.Helper()
	raw, err := env.Clientset.AdmissionregistrationV1().RESTClient().Get().
		AbsPath("/apis/admissionregistration.k8s.io/v1/" + tg.kind.Resource() + "/" + tg.name).DoRaw(ctx)
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, json.Unmarshal(raw, &obj))
	meta := obj["metadata"].(map[string]any)
	delete(meta, "resourceVersion")
	delete(meta, "generation")
	delete(meta, "managedFields")
	out, err := json.MarshalIndent(obj, "", " ")
	require.NoError(t, err)
	return string(out)
}

// TestHelm_preDeleteHookReleasesEveryCircuit installs the chart, lets the
// guard open both example circuits, then does what "helm uninstall" does
// with a kubelet: it creates the pre-delete hook's ServiceAccount and RBAC
// as the chart renders them and runs the hook Job's command, with the
// Job's arguments, as that ServiceAccount; then "helm uninstall" (without
// hooks: no kubelet would run the Job). Each configuration is as it was
// before the guard touched it, and no policy is left.
func TestHelm_preDeleteHookReleasesEveryCircuit(t *testing.T) {
	ctx := context.Background()
	ns := "helm-release-e2e"
	require.NoError(t, env.EnsureNamespace(ctx, ns))
	dumpOnFailure(t, ns)
	wh, err := harness.StartWebhook(harness.WebhookOptions{Host: "127.0.0.1"})
	require.NoError(t, err)
	t.Cleanup(wh.Close)
	wh.SetBehaviour(mutatePath, harness.Allow())
	wh.SetBehaviour(validatePath, harness.Allow())

	install := runHelm(t, append([]string{"install", "webhook-guard", chartDir, "--namespace", releaseNamespace, "--create-namespace"}, exampleValues()...)...)
	require.NoError(t, install.err, "helm install:\n%s%s", install.stdout, install.stderr)
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			runHelm(t, "uninstall", "webhook-guard", "--namespace", releaseNamespace, "--no-hooks")
		}
	})

	example := []target{
		{circuit.KindMutating, mutatingTarget, mutatingWebhook, mutatePath},
		{circuit.KindValidating, validatingTarget, validatingWebhook, validatePath},
	}
	before := map[string]string{}
	for _, tg := range example {
		createTarget(t, ns, wh, tg)
		before[tg.name] = rawConfiguration(t, ctx, tg)
	}

	g := startInstalledGuard(t, "before-uninstall")
	wh.SetBehaviour(mutatePath, harness.Delayed(2*time.Second, harness.Allow()))
	wh.SetBehaviour(validatePath, harness.Delayed(2*time.Second, harness.Allow()))
	for _, tg := range example {
		require.Eventually(t, func() bool {
			if exited, code := g.Exited(); exited {
				require.FailNow(t, "the guard exited", "exit code %d; logs:\n%s", code, g.Logs())
			}
			policy, marker, record, err := ownedFields(ctx, tg)
			return err == nil && policy == admissionregistrationv1.Ignore && marker && strings.Contains(record, tg.webhook)
		}, 60*time.Second, 100*time.Millisecond, "the circuit never opened on %s", tg.name)
	}
	// The Job scales the Deployment to 0; here the guard is a process.
	g.Stop()
	// Arming entries an administrator mangled by hand: the breaker would
	// have rewritten them, and the release removes them rather than fail
	// with the guard scaled down.
	mangled := env.Kubectl(ctx, "", nil, "annotate", "--overwrite", "mutatingwebhookconfiguration", mutatingTarget, circuit.ArmingAnnotation+"=[]")
	require.NoError(t, mangled.Err, "kubectl annotate:\n%s%s", mangled.Stdout, mangled.Stderr)

	// The hook's objects, as helm creates them before the Job.
	rbac, jobArgs := hookObjects(t)
	id := applyHookRBAC(t, ctx, rbac)

	// The Job's command, with the mounted configuration as a local file.
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(installedConfig(t, ctx)), 0o600))
	args := []string{"--kubeconfig", id.KubeconfigPath}
	for _, a := range jobArgs {
		if strings.HasPrefix(a, "--config=") {
			a = "--config=" + cfg
		}
		args = append(args, a)
	}
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), "the hook's guard %v:\n%s", jobArgs, out.String())
	t.Logf("guard %s:\n%s", strings.Join(jobArgs, " "), out.String())
	name := marking.Name(mutatingTarget, mutatingWebhook)
	assert.Equal(t, []string{
		"deployment/webhook-guard scaled to 0",
		"mutatingwebhookconfiguration/slow-mutator: unreadable arming entries removed (annotation " + circuit.ArmingAnnotation +
			" is not a circuit record: json: cannot unmarshal array into Go value of type circuit.Record)",
		"mutatingwebhookconfiguration/slow-mutator slow-mutator.example.com: released (failurePolicy Ignore -> Fail, bypass matchCondition removed, record entry removed, arming entry removed 2s later)",
		"validatingwebhookconfiguration/policy-engine validate.policy-engine.example.com: released (failurePolicy Ignore -> Fail, bypass matchCondition removed, record entry removed)",
		"mutatingwebhookconfiguration/slow-mutator: marking disarmed (slow-mutator.example.com)",
		"mutatingadmissionpolicybinding/" + name + " deleted",
		"mutatingadmissionpolicy/" + name + " deleted",
		"validatingadmissionpolicybinding/webhook-guard deleted",
		"validatingadmissionpolicy/webhook-guard deleted",
	}, strings.Split(strings.TrimSpace(out.String()), "\n"))

	un := runHelm(t, "uninstall", "webhook-guard", "--namespace", releaseNamespace, "--no-hooks")
	require.NoError(t, un.err, "helm uninstall:\n%s%s", un.stdout, un.stderr)
	uninstalled = true

	for _, tg := range example {
		assert.Equal(t, before[tg.name], rawConfiguration(t, ctx, tg), "%s is not as it was before the guard touched it", tg.name)
	}
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingAdmissionPolicy{}, &admissionregistrationv1.MutatingAdmissionPolicyBinding{},
	} {
		assert.True(t, apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Name: name}, obj)), "%T %s is left", obj, name)
	}
	for _, obj := range []client.Object{
		&admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{},
	} {
		assert.True(t, apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Name: "webhook-guard"}, obj)), "%T webhook-guard is left", obj)
	}
}
