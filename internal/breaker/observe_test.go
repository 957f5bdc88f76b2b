package breaker

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/events"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// TestState_JudgeObserved_opensAndClosesInMemory: the would-be state lives
// in State, each transition is reported once, and the counts start again
// after it.
func TestState_JudgeObserved_opensAndClosesInMemory(t *testing.T) {
	tgt := breakertest.Target(breakertest.WhA, config.ModeObserve, 2, 2)
	s := NewState()
	s.Register(tgt.Key())
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	observeAt := func(r probe.Result, at time.Time) (decide.Change, bool) {
		s.Observe(tgt.Key(), r, at)
		return s.JudgeObserved(tgt, at)
	}

	_, ok := observeAt(breakertest.FailedResult(probe.ReasonTimeout), t0)
	assert.False(t, ok, "one failure is below openAfter")
	c, ok := observeAt(breakertest.FailedResult(probe.ReasonTimeout), t0.Add(time.Second))
	require.True(t, ok)
	assert.Equal(t, decide.WouldOpen, c.Kind)
	assert.Equal(t, decide.SignalProbe, c.Signal)
	assert.Contains(t, c.Message, "would have opened the circuit on "+breakertest.WhA+" after 2 consecutive failed probes")
	assert.Contains(t, c.Message, "mode Observe: webhook-guard changed nothing")
	st, _ := s.Get(tgt.Key())
	assert.Equal(t, t0.Add(time.Second), st.WouldOpenSince)
	assert.Equal(t, decide.SignalProbe, st.WouldOpenSignal)
	assert.Zero(t, st.Failures, "the counts start again after a transition")

	_, ok = observeAt(breakertest.FailedResult(probe.ReasonTimeout), t0.Add(2*time.Second))
	assert.False(t, ok, "an opening is reported once")
	_, ok = observeAt(breakertest.FailedResult(probe.ReasonTimeout), t0.Add(3*time.Second))
	assert.False(t, ok, "and not again while it would stay open")

	_, ok = observeAt(breakertest.HealthyResult(), t0.Add(4*time.Second))
	assert.False(t, ok)
	c, ok = observeAt(breakertest.HealthyResult(), t0.Add(5*time.Second))
	require.True(t, ok)
	assert.Equal(t, decide.WouldClose, c.Kind)
	assert.Contains(t, c.Message, "would have closed the circuit on "+breakertest.WhA+" after 2 consecutive healthy probes; it would have been open since 2026-11-30T12:00:01Z (4s)")
	st, _ = s.Get(tgt.Key())
	assert.False(t, st.WouldBeOpen())
	assert.Equal(t, t0.Add(5*time.Second), st.WouldClosedAt)
}

func TestState_JudgeObserved_unprobeableWouldClose(t *testing.T) {
	tgt := breakertest.Target(breakertest.WhA, config.ModeObserve, 1, 2)
	s := NewState()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s.Observe(tgt.Key(), breakertest.FailedResult(probe.ReasonRefused), now)
	_, ok := s.JudgeObserved(tgt, now)
	require.True(t, ok)

	s.SetProblem(tgt.Key(), "sideEffects is Some", true)
	c, ok := s.JudgeObserved(tgt, now.Add(time.Minute))
	require.True(t, ok)
	assert.Equal(t, decide.WouldClose, c.Kind)
	assert.Contains(t, c.Message, "because it can no longer be probed (sideEffects is Some)")
	_, ok = s.JudgeObserved(tgt, now.Add(2*time.Minute))
	assert.False(t, ok, "a closed unprobeable target stays closed")
}

// TestProbeRunner_ProbeOnce_observeReportsWithoutWriting: under Observe the
// runner emits CircuitWouldOpen and CircuitWouldClose Events at the probes
// where the circuit would have opened and closed, counts them and sets
// webhook_guard_circuit_would_open, and never wakes the reconciler.
func TestProbeRunner_ProbeOnce_observeReportsWithoutWriting(t *testing.T) {
	tgt := breakertest.Target(breakertest.WhA, config.ModeObserve, 3, 2)
	r, trigger := runnerFor(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), tgt, breakertest.FailedResult(probe.ReasonTimeout))
	rec := r.Recorder.(*events.FakeRecorder)
	r.Metrics.Initialize(r.Targets)
	gauge := r.Metrics.WouldOpen.WithLabelValues(string(tgt.Kind), tgt.Configuration, tgt.Webhook)
	transitions := func(to decide.ChangeKind) float64 {
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
	assert.Regexp(t, `^Warning CircuitWouldOpen would have opened the circuit on `+breakertest.WhA+` after 3 consecutive failed probes`, <-rec.Events)
	assert.Equal(t, 1.0, transitions(decide.WouldOpen))
	assert.Zero(t, testutil.ToFloat64(r.Metrics.Openings.WithLabelValues(string(tgt.Kind), tgt.Configuration, tgt.Webhook, decide.SignalProbe)),
		"nothing opened")

	r.Prober = stubProber{breakertest.HealthyResult()}
	r.ProbeOnce(context.Background(), r.Targets[0])
	assert.Empty(t, rec.Events)
	r.ProbeOnce(context.Background(), r.Targets[0])
	require.Len(t, rec.Events, 1)
	assert.Regexp(t, `^Normal CircuitWouldClose would have closed the circuit on `+breakertest.WhA+` after 2 consecutive healthy probes`, <-rec.Events)
	assert.Equal(t, 1.0, transitions(decide.WouldClose))
	assert.Zero(t, testutil.ToFloat64(gauge))
	assert.Empty(t, trigger, "the reconciler is never woken for an Observe target")
}
