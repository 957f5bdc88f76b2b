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
// it (all but) no probe. When the webhook fails for everyone, its calls fail too,
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
	// probes counts the guard's probes (dry-run reviews) and the
	// apiserver's calls in one snapshot of what the webhook received: a
	// call counted before its review was read would pass for a probe.
	probes := func() (probes, calls int) {
		for _, r := range w.wh.Requests(path) {
			if r.Request != nil && r.Request.DryRun != nil && *r.Request.DryRun {
				probes++
			} else {
				calls++
			}
		}
		return probes, calls
	}

	// Healthy traffic: within a few scrapes the probes all but stop, while
	// the apiserver keeps calling the webhook. A traffic reading stands in
	// from its scrape's start, for one interval and a half: on a loaded
	// machine, where a scrape of kube-apiserver's /metrics takes longer
	// than half an interval, a probe slips in now and then. Without the
	// stand-in there are four in four intervals; at most one is allowed.
	var quiet time.Duration
	var calls, slipped int
	require.Eventually(t, func() bool {
		p0, c0 := probes()
		start := time.Now()
		time.Sleep(4 * interval)
		p1, c1 := probes()
		quiet, calls, slipped = time.Since(start), c1-c0, p1-p0
		return slipped <= 1 && calls >= 10
	}, transition, 10*time.Millisecond, "the guard kept probing a webhook the apiserver called successfully")
	before, _ := probes()
	t.Logf("%d probes in %s while the apiserver made %d calls; %d probes before", slipped, quiet.Round(10*time.Millisecond), calls, before)
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
	after, _ := probes()
	assert.GreaterOrEqual(t, after, openAfter, "the probe ran again")
}
