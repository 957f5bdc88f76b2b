// Package massfailure runs webhook-guard, with the defaults a user gets,
// through a mass failure: every webhook it probes hanging at once. Its
// control plane is its own: the badday package's apiserver has few seats
// on purpose, and fifty hanging webhooks there slowed the tests after
// them.
package massfailure

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// env is the control plane every test in this package shares; tests
// isolate themselves by namespace and object names.
var env *harness.Env

func TestMain(m *testing.M) {
	start := time.Now()
	var err error
	env, err = harness.Start(harness.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "massfailure: starting the control plane:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "massfailure: control plane up in %s\n", time.Since(start).Round(time.Millisecond))
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

var seq atomic.Uint32

// uniqueName returns a DNS-safe name unique within this test run.
func uniqueName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, seq.Add(1)) }

// namespace creates a namespace of the test's own.
func namespace(t *testing.T, name string) string {
	t.Helper()
	if err := env.EnsureNamespace(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	return name
}

// startGuard runs the guard binary as id with cfg and the binary's lease
// timings, its Lease where the shipped Deployment keeps it, and waits
// until it leads: until wh has answered three of its probes on path. Its
// logs are printed when t fails.
func startGuard(t *testing.T, name string, id *harness.Identity, cfg string, wh *harness.Webhook, path string) *harness.Guard {
	t.Helper()
	g, err := env.StartGuard(harness.GuardOptions{Name: name, Kubeconfig: id.KubeconfigPath, Config: cfg,
		Args: []string{"--leader-elect", "--leader-election-namespace", shippedLeaseNamespace(t)}})
	require.NoError(t, err)
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("guard logs:\n%s", g.Logs())
		}
	})
	probes := func() int { return wh.Calls(path) - wh.APIServerCalls(path) }
	require.Eventually(t, func() bool { return probes() >= 3 }, time.Minute, 100*time.Millisecond, "the guard never led and probed")
	return g
}

// shippedLeaseNamespace is the --leader-election-namespace of the kustomize
// base's Deployment, which install.yaml and the chart share.
func shippedLeaseNamespace(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "deploy", "kustomize", "base", "deployment.yaml"))
	require.NoError(t, err)
	d := &appsv1.Deployment{}
	require.NoError(t, yaml.Unmarshal(data, d))
	ns, ok := factory.LeaseNamespaceOf(d)
	require.True(t, ok, "the shipped Deployment does not say where its Lease is")
	return ns
}
