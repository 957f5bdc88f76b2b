// Package badday runs webhook-guard, with the defaults a user gets, on
// the day it exists for: a webhook that hangs with kube-apiserver's
// default 10 s timeout while it intercepts the guard's own requests, and
// an apiserver whose seats are full of requests waiting on it. Its control
// plane has its own package because that apiserver has few seats
// (--max-requests-inflight, --max-mutating-requests-inflight), so that a
// few hundred waiting creates fill them as a real outage does.
package badday

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// env is the control plane every test in this package shares; tests
// isolate themselves by namespace and object names.
var env *harness.Env

// Seats: kube-apiserver's API Priority and Fairness shares these among
// its priority levels, so workload-low (every ServiceAccount without a
// FlowSchema of its own) gets a handful.
const (
	maxRequestsInflight         = 20
	maxMutatingRequestsInflight = 10
)

func TestMain(m *testing.M) {
	start := time.Now()
	var err error
	env, err = harness.Start(harness.Options{APIServerFlags: map[string]string{
		"max-requests-inflight":          fmt.Sprint(maxRequestsInflight),
		"max-mutating-requests-inflight": fmt.Sprint(maxMutatingRequestsInflight),
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "badday: starting the control plane:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "badday: control plane up in %s\n", time.Since(start).Round(time.Millisecond))
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
