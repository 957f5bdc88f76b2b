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

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/test/e2e/e2etest"
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

// targetConfig is a GuardConfiguration that approves one webhook in mode
// and says nothing else: every other setting is its default.
func targetConfig(configuration, webhook, mode string) string {
	return `apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
targets:
- configuration: ` + configuration + `
  webhook: ` + webhook + `
  allowAdmissionWithoutMutation: true
  mode: ` + mode + "\n"
}

// startGuard is e2etest.StartLeader on this package's control plane: its logs are printed when t fails, or always with BADDAY_LOGS set.
func startGuard(t *testing.T, name string, id *harness.Identity, cfg string, wh *harness.Webhook, path string) *harness.Guard {
	t.Helper()
	return e2etest.StartLeader(t, env, name, id, cfg, wh, path, os.Getenv("BADDAY_LOGS") != "")
}

// configMapTarget is a webhook of its own that answers on path, and a
// MutatingWebhookConfiguration name with one webhook, hook, on ConfigMaps
// in namespace ns: failurePolicy Fail and timeoutSeconds. The guard's
// ServiceAccount in guardNS may manage it. Everything goes when t ends.
type configMapTarget struct {
	wh       *harness.Webhook
	hook     string
	original admissionregistrationv1.MutatingWebhook
	id       *harness.Identity
}

func newConfigMapTarget(t *testing.T, name, ns, guardNS, path string, timeoutSeconds int32) configMapTarget {
	t.Helper()
	ctx := context.Background()
	wh, err := harness.StartWebhook(harness.WebhookOptions{Host: "127.0.0.1"})
	require.NoError(t, err)
	t.Cleanup(wh.Close)
	wh.SetBehaviour(path, harness.Allow())

	hook := "slow." + name + ".webhook-guard.io"
	w := harness.ConfigMapWebhook(hook, ns, wh.URL(path), wh.CA.CertPEM, admissionregistrationv1.Fail)
	w.TimeoutSeconds = ptr.To(timeoutSeconds)
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: []admissionregistrationv1.MutatingWebhook{w}}
	require.NoError(t, env.Client.Create(ctx, mwc))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), mwc) })

	id, err := env.ServiceAccount(ctx, guardNS, "webhook-guard")
	require.NoError(t, err)
	require.NoError(t, env.GrantGuard(ctx, guardNS, id, []string{name}))
	return configMapTarget{wh: wh, hook: hook, original: mwc.Webhooks[0], id: id}
}
