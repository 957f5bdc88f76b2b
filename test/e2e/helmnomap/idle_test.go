package helmnomap

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// TestHelm_noTargetInstallsAndRunsIdle: the chart with its default
// values, no target approved yet, installs; its notes say how to approve
// the first; the real guard, as the chart's ServiceAccount, starts, leads
// and runs idle, changing nothing.
func TestHelm_noTargetInstallsAndRunsIdle(t *testing.T) {
	ctx := context.Background()
	install := runHelm(t, "install", "webhook-guard", chartDir, "--namespace", releaseNamespace, "--create-namespace")
	require.NoError(t, install.err, "helm install:\n%s%s", install.stdout, install.stderr)
	t.Cleanup(func() { runHelm(t, "uninstall", "webhook-guard", "--namespace", releaseNamespace, "--no-hooks") })
	assert.Contains(t, install.stdout, "No webhook is approved yet: the guard runs idle")
	assert.Contains(t, install.stdout, "Approve a webhook: add it to targets")
	assert.Contains(t, install.stdout, "allowAdmissionWithoutMutation: true")

	var before admissionregistrationv1.MutatingWebhookConfigurationList
	require.NoError(t, env.Client.List(ctx, &before))
	g := startInstalledGuard(t, ctx, circuit.DefaultServiceAccount)
	require.Eventually(t, func() bool {
		if exited, code := g.Exited(); exited {
			require.FailNow(t, "the guard exited", "exit code %d; logs:\n%s", code, g.Logs())
		}
		return strings.Contains(g.Logs(), "Successfully acquired lease")
	}, time.Minute, 100*time.Millisecond, "the idle guard never led")
	assert.Contains(t, g.Logs(), "No target: the guard runs idle")
	// A few probe intervals of nothing to do.
	time.Sleep(3 * time.Second)
	exited, _ := g.Exited()
	require.False(t, exited, "the idle guard exited:\n%s", g.Logs())
	var after admissionregistrationv1.MutatingWebhookConfigurationList
	require.NoError(t, env.Client.List(ctx, &after))
	versions := map[string]string{}
	for _, c := range before.Items {
		versions[c.Name] = c.ResourceVersion
	}
	for _, c := range after.Items {
		assert.Equal(t, versions[c.Name], c.ResourceVersion, "the idle guard wrote %s", c.Name)
	}
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: "webhook-guard"}, &policy), "the guard policy is installed with the chart")
	g.Stop()
	assert.NotContains(t, strings.ToLower(g.Logs()), "forbidden")
}

// TestHelm_aSecondReleaseIsRefusedWithWhatToDo: the chart's cluster-wide
// names are fixed, so a second release, in another namespace, is refused
// before anything is created, naming the release that is there.
func TestHelm_aSecondReleaseIsRefusedWithWhatToDo(t *testing.T) {
	install := runHelm(t, "install", "webhook-guard", chartDir, "--namespace", releaseNamespace, "--create-namespace")
	require.NoError(t, install.err, "helm install:\n%s%s", install.stdout, install.stderr)
	t.Cleanup(func() { runHelm(t, "uninstall", "webhook-guard", "--namespace", releaseNamespace, "--no-hooks") })

	second := runHelm(t, "install", "guard-two", chartDir, "--namespace", "guard-two", "--create-namespace")
	t.Cleanup(func() { runHelm(t, "uninstall", "guard-two", "--namespace", "guard-two", "--no-hooks") })
	require.Error(t, second.err, "a second release was installed:\n%s", second.stdout)
	assert.Contains(t, second.stderr, `webhook-guard is already installed in this cluster as release "webhook-guard" in namespace "`+releaseNamespace+`"`)
	assert.Contains(t, second.stderr, "helm upgrade webhook-guard -n "+releaseNamespace)

	upgrade := runHelm(t, "upgrade", "webhook-guard", chartDir, "--namespace", releaseNamespace)
	require.NoError(t, upgrade.err, "the release itself still upgrades:\n%s", upgrade.stderr)
}
