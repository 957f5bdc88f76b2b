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
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-guard/webhook-guard/test/e2e/e2etest"
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

// startGuard is e2etest.StartLeader on this package's control plane.
func startGuard(t *testing.T, name string, id *harness.Identity, cfg string, wh *harness.Webhook, path string) *harness.Guard {
	t.Helper()
	return e2etest.StartLeader(t, env, name, id, cfg, wh, path, false)
}
