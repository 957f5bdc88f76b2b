// Package e2etest holds the test helpers that the e2e packages with a
// control plane of their own share, where the harness, which knows no
// *testing.T, cannot hold them.
package e2etest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// StartLeader runs the guard binary on env as id with cfg and the binary's
// lease timings, its Lease where the shipped Deployment keeps it
// (harness.ShippedLeaseNamespace), and waits until it leads: until wh has
// answered three of its probes on path. It stops the guard when t ends,
// and prints its logs then when t failed, or always with alwaysLog.
func StartLeader(t *testing.T, env *harness.Env, name string, id *harness.Identity, cfg string, wh *harness.Webhook, path string, alwaysLog bool) *harness.Guard {
	t.Helper()
	leases, err := harness.ShippedLeaseNamespace()
	require.NoError(t, err)
	g, err := env.StartGuard(harness.GuardOptions{Name: name, Kubeconfig: id.KubeconfigPath, Config: cfg,
		Args: []string{"--leader-elect", "--leader-election-namespace", leases}})
	require.NoError(t, err)
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() || alwaysLog {
			t.Logf("guard logs:\n%s", g.Logs())
		}
	})
	probes := func() int { return wh.Calls(path) - wh.APIServerCalls(path) }
	require.Eventually(t, func() bool { return probes() >= 3 }, time.Minute, 100*time.Millisecond, "the guard never led and probed")
	return g
}
