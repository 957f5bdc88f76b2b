package partition

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// Traffic as the probe (apiserverSignal.trafficAsProbe): while
// kube-apiserver calls a webhook and every call succeeds, the guard sends
// it no probe. When the webhook fails for everyone, its calls fail too,
// and the circuit still opens within openAfter intervals (plus the second
// of slack the performance goals allow).
func TestTraffic_standsInForTheProbeAndAFailingWebhookStillOpens(t *testing.T) {
	const (
		interval  = time.Second
		openAfter = 3
	)
	w := newWorld(t)
	cfg := fmt.Sprintf(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
apiserverScrapeInterval: 1s
targets:
- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
  mode: Bypass
  openAfter: %d
  closeAfter: 3
  probe:
    interval: %s
    timeout: 500ms
`, w.name, w.hook, openAfter, interval)
	g := env.StartGuardT(t, harness.GuardOptions{Name: "traffic", Kubeconfig: w.id.KubeconfigPath, Config: cfg, WithoutMarking: true})
	l := startLoad(t, w.ns)
	probes := func() int { return w.wh.Calls(path) - w.wh.APIServerCalls(path) }

	// Healthy traffic: within a few scrapes the probes stop, while the
	// apiserver keeps calling the webhook.
	var quiet time.Duration
	var calls int
	require.Eventually(t, func() bool {
		p0, c0, start := probes(), w.wh.APIServerCalls(path), time.Now()
		time.Sleep(4 * interval)
		quiet, calls = time.Since(start), w.wh.APIServerCalls(path)-c0
		return probes() == p0 && calls >= 10
	}, transition, 10*time.Millisecond, "the guard kept probing a webhook the apiserver called successfully")
	t.Logf("no probe for %s while the apiserver made %d calls; %d probes before", quiet.Round(10*time.Millisecond), calls, probes())
	assert.Contains(t, g.Logs(), `"msg":"Apiserver signal observed"`)

	// The webhook fails for everyone: the apiserver's calls fail, the
	// probe runs again at once, and the circuit opens.
	failed := time.Now()
	w.wh.SetBehaviour(path, harness.Garbage())
	entry := w.waitOpen()
	took := time.Since(failed)
	l.Stop()
	t.Logf("opened %s after the webhook failed (openAfter %d × interval %s), by %q", took.Round(10*time.Millisecond), openAfter, interval, entry.Signal)
	assert.Contains(t, []string{decide.SignalProbe, decide.SignalBoth}, entry.Signal, "the probe, not the apiserver's calls alone, opened it")
	assert.Less(t, took, openAfter*interval+time.Second, "traffic delayed the opening beyond openAfter intervals")
	assert.GreaterOrEqual(t, probes(), openAfter, "the probe ran again")
}
