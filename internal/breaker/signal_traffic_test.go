package breaker

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/apimetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// countingProber answers every probe with result and counts them.
type countingProber struct {
	result probe.Result
	calls  int
}

func (p *countingProber) Probe(context.Context, admissionregistrationv1.MutatingWebhook, probe.Spec) probe.Result {
	p.calls++
	return p.result
}

// trafficSample is whA's counters after calls calls, errs of them failed,
// slow of them answered after 2.5 s and the others within 5 ms.
func trafficSample(calls, errs, slow float64) apimetrics.Sample {
	s := sample(calls, errs)
	h := apimetrics.Histogram{Count: calls}
	for _, b := range []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, math.Inf(1)} {
		c := calls - slow
		if b >= 2.5 {
			c = calls
		}
		h.Buckets = append(h.Buckets, apimetrics.Bucket{UpperBound: b, Count: c})
	}
	for wh := range s.Webhooks {
		s.Latency = map[apimetrics.Webhook]apimetrics.Histogram{wh: h}
	}
	return s
}

// trafficRunner is a runner for whA with the apiserver signal and traffic
// as the probe, a 1 s probe timeout, over objs (the first one whA's).
func trafficRunner(t *testing.T, objs ...*admissionregistrationv1.MutatingWebhookConfiguration) (*ProbeRunner, *countingProber, *clocktesting.FakeClock) {
	t.Helper()
	tgt := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
	tgt.APIServerSignal.TrafficAsProbe = true
	tgt.Probe.Timeout = time.Second
	tgt.Probe.Interval = time.Second
	r, _ := runnerFor(t, objs[0], tgt, breakertest.HealthyResult())
	for _, o := range objs[1:] {
		require.NoError(t, r.Reader.(client.Client).Create(context.Background(), o))
	}
	prober := &countingProber{result: breakertest.HealthyResult()}
	r.Prober = prober
	r.signal = newAPIServerSignal(r.Targets, 0)
	require.NotNil(t, r.signal)
	r.kicks = map[string]chan struct{}{tgt.Key(): make(chan struct{}, 1)}
	return r, prober, r.Clock.(*clocktesting.FakeClock)
}

func TestProbeRunner_trafficStandsInForTheProbeWhileFresh(t *testing.T) {
	r, prober, clock := trafficRunner(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)))
	ctx := context.Background()
	tgt := r.Targets[0]
	scrape := func(s apimetrics.Sample) {
		r.Scraper = &fakeScraper{samples: []apimetrics.Sample{s}}
		r.ScrapeOnce(ctx, r.signal)
	}
	probes := func() int { r.ProbeOnce(ctx, tgt); return prober.calls }
	kicked := func() bool {
		select {
		case <-r.kicks[tgt.Key()]:
			return true
		default:
			return false
		}
	}

	scrape(trafficSample(0, 0, 0))
	assert.Equal(t, 1, probes(), "the first scrape is only a baseline")

	clock.Step(time.Second)
	scrape(trafficSample(5, 0, 0))
	assert.Equal(t, 1, probes(), "five fast calls, none failed: no probe")
	clock.Step(time.Second)
	assert.Equal(t, 1, probes(), "still fresh one interval later")
	clock.Step(600 * time.Millisecond)
	assert.Equal(t, 2, probes(), "one and a half intervals without a scrape: the traffic is stale")
	assert.Equal(t, 2.0, testutil.ToFloat64(r.Metrics.ProbesSkipped.WithLabelValues(string(tgt.Kind), tgt.Configuration, tgt.Webhook)))
	assert.False(t, kicked())

	scrape(trafficSample(9, 0, 0))
	assert.Equal(t, 2, probes())
	clock.Step(time.Second)
	scrape(trafficSample(12, 1, 0))
	assert.True(t, kicked(), "a failed call wakes the probe loop at once")
	assert.Equal(t, 3, probes(), "one failed call in three: the probe runs")

	clock.Step(time.Second)
	scrape(trafficSample(15, 1, 0))
	assert.Equal(t, 3, probes(), "healthy again")
	clock.Step(time.Second)
	scrape(trafficSample(15, 1, 0))
	assert.True(t, kicked(), "no call completed: a hanging webhook completes none")
	assert.Equal(t, 4, probes())

	clock.Step(time.Second)
	scrape(trafficSample(18, 1, 1))
	assert.Equal(t, 5, probes(), "a call slower than the probe's timeout would have failed the probe")
}

func TestProbeRunner_trafficNeverStandsInForAFailingProbe(t *testing.T) {
	r, prober, clock := trafficRunner(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)))
	ctx := context.Background()
	tgt := r.Targets[0]
	r.Scraper = &fakeScraper{samples: []apimetrics.Sample{trafficSample(0, 0, 0), trafficSample(5, 0, 0)}}
	r.ScrapeOnce(ctx, r.signal)
	prober.result = breakertest.FailedResult(probe.ReasonTimeout)
	r.ProbeOnce(ctx, tgt)
	clock.Step(time.Second)
	r.ScrapeOnce(ctx, r.signal)
	r.ProbeOnce(ctx, tgt)
	r.ProbeOnce(ctx, tgt)
	assert.Equal(t, 3, prober.calls, "after a failed probe the probe runs, however healthy the apiserver's calls")
	st, _ := r.State.Get(tgt.Key())
	assert.Equal(t, 3, st.Failures, "so the circuit reaches its threshold")
}

func TestProbeRunner_trafficDoesNotStandInFor(t *testing.T) {
	open := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyIgnore, breakertest.BypassMarker()))
	var err error
	open.Annotations, err = circuit.Encode(open.Annotations, circuit.Record{breakertest.WhA: circuit.Entry{UID: breakertest.UID, Mode: circuit.ModeBypass, OriginalFailurePolicy: breakertest.PolicyFail}})
	require.NoError(t, err)
	other := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail))
	other.ObjectMeta = metav1.ObjectMeta{Name: "another-" + breakertest.ConfigName}
	for name, tc := range map[string]struct {
		objs   []*admissionregistrationv1.MutatingWebhookConfiguration
		change func(*config.Target)
	}{
		"an open circuit, whose webhook only the probe sees":       {objs: []*admissionregistrationv1.MutatingWebhookConfiguration{open}},
		"a webhook whose name another configuration also has":      {objs: []*admissionregistrationv1.MutatingWebhookConfiguration{breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), other}},
		"a target probed more often than the apiserver is scraped": {change: func(t *config.Target) { t.Probe.Interval = 500 * time.Millisecond }},
		"a target that turned trafficAsProbe off":                  {change: func(t *config.Target) { t.APIServerSignal.TrafficAsProbe = false }},
		"a target whose apiserver signal is off, whatever it says": {change: func(t *config.Target) { t.APIServerSignal.Enabled = false }},
	} {
		t.Run(name, func(t *testing.T) {
			objs := tc.objs
			if objs == nil {
				objs = []*admissionregistrationv1.MutatingWebhookConfiguration{breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail))}
			}
			r, prober, clock := trafficRunner(t, objs...)
			if tc.change != nil {
				tc.change(&r.Targets[0])
			}
			ctx := context.Background()
			r.Scraper = &fakeScraper{samples: []apimetrics.Sample{trafficSample(0, 0, 0), trafficSample(5, 0, 0)}}
			r.ScrapeOnce(ctx, r.signal)
			clock.Step(time.Second)
			r.ScrapeOnce(ctx, r.signal)
			r.ProbeOnce(ctx, r.Targets[0])
			assert.Equal(t, 1, prober.calls)
		})
	}
}

func TestTrafficTooRare(t *testing.T) {
	fast := breakertest.WithSignal(breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2))
	fast.APIServerSignal.TrafficAsProbe = true
	fast.Probe.Interval = time.Second
	slow := fast
	slow.Webhook, slow.Probe.Interval = breakertest.WhB, time.Minute
	off := fast
	off.Webhook, off.APIServerSignal.TrafficAsProbe = breakertest.WhOther, false
	assert.Equal(t, []string{fast.Key()}, trafficTooRare([]config.Target{fast, slow, off}, 30*time.Second))
	assert.Empty(t, trafficTooRare([]config.Target{fast, slow, off}, time.Second))
}
