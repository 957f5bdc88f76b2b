package breaker

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/events"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

func TestJudgeObserved_table(t *testing.T) {
	observe := target(whA, config.ModeObserve, 3, 2)
	observe.APIServerSignal.Enabled = true
	brokenRoad := Path{Road: RoadService, Counts: failing(3, probe.ReasonNoRoute)}
	cases := map[string]struct {
		wouldOpen  bool
		signal     string
		probe      Counts
		apiserver  Counts
		path       Path
		hold       bool
		wantAction Action
		wantSignal string
	}{
		"closed with no probes stays":                   {wantAction: Stay},
		"closed below openAfter stays":                  {probe: failing(2, probe.ReasonTimeout), wantAction: Stay},
		"closed at openAfter would open on the probe":   {probe: failing(3, probe.ReasonTimeout), wantAction: Open, wantSignal: SignalProbe},
		"the hold stops an opening on the probe alone":  {probe: failing(3, probe.ReasonTimeout), hold: true, wantAction: Stay},
		"the apiserver alone opens nothing unconfirmed": {apiserver: failing(3, ReasonAPIServerCalls), wantAction: Stay},
		"the apiserver confirmed by the path probe would open": {
			apiserver: failing(3, ReasonAPIServerCalls), path: brokenRoad, wantAction: Open, wantSignal: SignalAPIServer},
		"both signals would open together": {
			probe: failing(3, probe.ReasonTimeout), apiserver: failing(3, ReasonAPIServerCalls), path: brokenRoad, wantAction: Open, wantSignal: SignalBoth},
		"the hold does not stop what the apiserver confirms": {
			probe: failing(3, probe.ReasonTimeout), apiserver: failing(3, ReasonAPIServerCalls), path: brokenRoad, hold: true, wantAction: Open, wantSignal: SignalBoth},
		"would be open, below closeAfter stays": {wouldOpen: true, signal: SignalProbe, probe: healthy(1), wantAction: Stay},
		"would be open, at closeAfter would close": {
			wouldOpen: true, signal: SignalProbe, probe: healthy(2), wantAction: Close},
		"would be open, still failing stays": {wouldOpen: true, signal: SignalProbe, probe: failing(9, probe.ReasonTimeout), wantAction: Stay},
		"opened by the apiserver on a service road closes on the path probe": {
			wouldOpen: true, signal: SignalAPIServer, probe: healthy(1), path: Path{Road: RoadService, Counts: healthy(2)}, wantAction: Close, wantSignal: SignalPath},
		"opened by the apiserver stays while the path probe fails": {
			wouldOpen: true, signal: SignalAPIServer, probe: healthy(5), path: brokenRoad, wantAction: Stay},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			action, signal := JudgeObserved(c.wouldOpen, c.signal, c.probe, c.apiserver, c.path, observe, c.hold)
			assert.Equal(t, c.wantAction, action)
			assert.Equal(t, c.wantSignal, signal)
		})
	}
}

// An Observe target on a url road whose apiserver calls alone may open
// (withoutPathProbe: Open) is judged as in Ignore mode, where the
// apiserver keeps calling the webhook: it stays open while they fail, and
// no minimum open time applies.
func TestJudgeObserved_urlRoadIsJudgedAsIgnore(t *testing.T) {
	observe := target(whA, config.ModeObserve, 3, 2)
	observe.APIServerSignal = config.APIServerSignal{Enabled: true, WithoutPathProbe: config.WithoutPathProbeOpen}
	url := Path{Road: RoadURL}
	action, signal := JudgeObserved(false, "", Counts{}, failing(3, ReasonAPIServerCalls), url, observe, false)
	require.Equal(t, Open, action)
	require.Equal(t, SignalAPIServer, signal)

	action, _ = JudgeObserved(true, SignalAPIServer, healthy(2), failing(1, ReasonAPIServerCalls), url, observe, false)
	assert.Equal(t, Stay, action, "the apiserver's calls still fail")
	action, _ = JudgeObserved(true, SignalAPIServer, healthy(2), healthy(1), url, observe, false)
	assert.Equal(t, Close, action)
}

// TestState_JudgeObserved_opensAndClosesInMemory: the would-be state lives
// in State, each transition is reported once, and the counts start again
// after it.
func TestState_JudgeObserved_opensAndClosesInMemory(t *testing.T) {
	tgt := target(whA, config.ModeObserve, 2, 2)
	s := NewState()
	s.Register(tgt.Key())
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	observeAt := func(r probe.Result, at time.Time) (Change, bool) {
		s.Observe(tgt.Key(), r, at)
		return s.JudgeObserved(tgt, at)
	}

	_, ok := observeAt(failedResult(probe.ReasonTimeout), t0)
	assert.False(t, ok, "one failure is below openAfter")
	c, ok := observeAt(failedResult(probe.ReasonTimeout), t0.Add(time.Second))
	require.True(t, ok)
	assert.Equal(t, WouldOpen, c.Kind)
	assert.Equal(t, SignalProbe, c.Signal)
	assert.Contains(t, c.Message, "would have opened the circuit on "+whA+" after 2 consecutive failed probes")
	assert.Contains(t, c.Message, "mode Observe: webhook-guard changed nothing")
	st, _ := s.Get(tgt.Key())
	assert.Equal(t, t0.Add(time.Second), st.WouldOpenSince)
	assert.Equal(t, SignalProbe, st.WouldOpenSignal)
	assert.Zero(t, st.Failures, "the counts start again after a transition")

	_, ok = observeAt(failedResult(probe.ReasonTimeout), t0.Add(2*time.Second))
	assert.False(t, ok, "an opening is reported once")
	_, ok = observeAt(failedResult(probe.ReasonTimeout), t0.Add(3*time.Second))
	assert.False(t, ok, "and not again while it would stay open")

	_, ok = observeAt(healthyResult(), t0.Add(4*time.Second))
	assert.False(t, ok)
	c, ok = observeAt(healthyResult(), t0.Add(5*time.Second))
	require.True(t, ok)
	assert.Equal(t, WouldClose, c.Kind)
	assert.Contains(t, c.Message, "would have closed the circuit on "+whA+" after 2 consecutive healthy probes; it would have been open since 2026-11-30T12:00:01Z (4s)")
	st, _ = s.Get(tgt.Key())
	assert.False(t, st.WouldBeOpen())
	assert.Equal(t, t0.Add(5*time.Second), st.WouldClosedAt)
}

func TestState_JudgeObserved_unprobeableWouldClose(t *testing.T) {
	tgt := target(whA, config.ModeObserve, 1, 2)
	s := NewState()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s.Observe(tgt.Key(), failedResult(probe.ReasonRefused), now)
	_, ok := s.JudgeObserved(tgt, now)
	require.True(t, ok)

	s.SetProblem(tgt.Key(), "sideEffects is Some", true)
	c, ok := s.JudgeObserved(tgt, now.Add(time.Minute))
	require.True(t, ok)
	assert.Equal(t, WouldClose, c.Kind)
	assert.Contains(t, c.Message, "because it can no longer be probed (sideEffects is Some)")
	_, ok = s.JudgeObserved(tgt, now.Add(2*time.Minute))
	assert.False(t, ok, "a closed unprobeable target stays closed")
}

// TestPlan_observe: Plan writes nothing for an Observe target, however
// its counts fail, beside a Bypass target of the same configuration that
// opens; and a circuit left open from an earlier mode closes.
func TestPlan_observe(t *testing.T) {
	base := newConfig(newWebhook(whA, policyFail, mc("x")), newWebhook(whB, policyFail))
	observe, bypass := target(whA, config.ModeObserve, 3, 3), target(whB, config.ModeBypass, 3, 3)
	for name, c := range map[string]struct {
		cur  func() *circuit.Record
		want map[string]ChangeKind
	}{
		"failing counts open the Bypass target only": {want: map[string]ChangeKind{whB: Opened}},
		"a circuit open before the switch to Observe closes": {
			cur:  func() *circuit.Record { return &circuit.Record{whA: entryFor(config.ModeBypass, policyFail)} },
			want: map[string]ChangeKind{whA: Closed, whB: Opened},
		},
	} {
		t.Run(name, func(t *testing.T) {
			cur := base
			if c.cur != nil {
				cur = withEntries(t, base, *c.cur())
			}
			next, changes := plan(t, cur, Inputs{
				Targets: []config.Target{observe, bypass},
				Counts:  map[string]Counts{whA: failing(5, probe.ReasonTimeout), whB: failing(5, probe.ReasonTimeout)},
			})
			assert.Equal(t, c.want, kinds(changes))
			assert.Equal(t, base.Webhooks[0], next.Webhooks[0], "the Observe target's webhook is as it was before any circuit")
			_, recorded := mustRecord(t, next)[whA]
			assert.False(t, recorded, "an Observe target is never recorded")
			for _, ch := range changes {
				if ch.Webhook == whA {
					assert.Contains(t, ch.Message, "its target is now in Observe mode")
				}
			}
		})
	}

	// With only Observe targets nothing is written at all.
	next, changes := plan(t, base, Inputs{Targets: []config.Target{observe}, Counts: map[string]Counts{whA: failing(5, probe.ReasonTimeout)}})
	assert.Empty(t, changes)
	assert.Same(t, base, next)
}

// TestProbeRunner_ProbeOnce_observeReportsWithoutWriting: under Observe the
// runner emits CircuitWouldOpen and CircuitWouldClose Events at the probes
// where the circuit would have opened and closed, counts them and sets
// webhook_guard_circuit_would_open, and never wakes the reconciler.
func TestProbeRunner_ProbeOnce_observeReportsWithoutWriting(t *testing.T) {
	tgt := target(whA, config.ModeObserve, 3, 2)
	r, trigger := runnerFor(t, newConfig(newWebhook(whA, policyFail)), tgt, failedResult(probe.ReasonTimeout))
	rec := r.Recorder.(*events.FakeRecorder)
	r.Metrics.Initialize(r.Targets)
	gauge := r.Metrics.WouldOpen.WithLabelValues(string(tgt.Kind), tgt.Configuration, tgt.Webhook)
	transitions := func(to ChangeKind) float64 {
		return testutil.ToFloat64(r.Metrics.Transitions.WithLabelValues(string(tgt.Kind), string(to)))
	}

	for i := 1; i <= 4; i++ {
		r.ProbeOnce(context.Background(), r.Targets[0])
		want := 0.0
		if i >= 3 {
			want = 1
		}
		assert.Equal(t, want, testutil.ToFloat64(gauge), "probe %d", i)
	}
	require.Len(t, rec.Events, 1)
	assert.Regexp(t, `^Warning CircuitWouldOpen would have opened the circuit on `+whA+` after 3 consecutive failed probes`, <-rec.Events)
	assert.Equal(t, 1.0, transitions(WouldOpen))
	assert.Zero(t, testutil.ToFloat64(r.Metrics.Openings.WithLabelValues(string(tgt.Kind), tgt.Configuration, tgt.Webhook, SignalProbe)),
		"nothing opened")

	r.Prober = stubProber{healthyResult()}
	r.ProbeOnce(context.Background(), r.Targets[0])
	assert.Empty(t, rec.Events)
	r.ProbeOnce(context.Background(), r.Targets[0])
	require.Len(t, rec.Events, 1)
	assert.Regexp(t, `^Normal CircuitWouldClose would have closed the circuit on `+whA+` after 2 consecutive healthy probes`, <-rec.Events)
	assert.Equal(t, 1.0, transitions(WouldClose))
	assert.Zero(t, testutil.ToFloat64(gauge))
	assert.Empty(t, trigger, "the reconciler is never woken for an Observe target")
}
