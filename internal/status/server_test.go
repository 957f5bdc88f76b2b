package status

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// The leader's row of an Observe target carries what the breaker would
// have done, from its memory; other targets' rows carry none of it.
func TestProbeRow_observeCarriesTheWouldBeState(t *testing.T) {
	observe := config.Target{Kind: circuit.KindMutating, Configuration: "c", Webhook: "w.example.com", Mode: config.ModeObserve, OpenAfter: 1, CloseAfter: 1}
	bypass := observe
	bypass.Webhook, bypass.Mode = "b.example.com", config.ModeBypass
	state := breaker.NewState()
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	failed := probe.Result{Outcome: probe.OutcomeFailed, Reason: probe.ReasonTimeout}
	for _, t := range []config.Target{observe, bypass} {
		state.Observe(t.Key(), failed, at)
	}
	_, ok := state.JudgeObserved(observe, at)
	assert.True(t, ok)

	row := probeRow(observe, state)
	assert.Equal(t, "2026-12-01T12:00:00Z", row.WouldOpenSince)
	assert.Equal(t, decide.SignalProbe, row.WouldOpenSignal)
	assert.Empty(t, row.WouldClosedAt)
	assert.Empty(t, row.Since)

	row = probeRow(bypass, state)
	assert.Empty(t, row.WouldOpenSince)
	assert.Empty(t, row.WouldOpenSignal)

	state.Observe(observe.Key(), probe.Result{Outcome: probe.OutcomeHealthy}, at.Add(time.Minute))
	_, ok = state.JudgeObserved(observe, at.Add(time.Minute))
	assert.True(t, ok)
	row = probeRow(observe, state)
	assert.Empty(t, row.WouldOpenSince)
	assert.Equal(t, "2026-12-01T12:01:00Z", row.WouldClosedAt)
}

// The leader's row says when a circuit is damped: how often it re-opened
// soon after closing, and how long it then stays open at least.
func TestProbeRow_showsTheFlapDamping(t *testing.T) {
	tgt := config.Target{Kind: circuit.KindMutating, Configuration: "c", Webhook: "w.example.com", Mode: config.ModeBypass, OpenAfter: 3, CloseAfter: 5, DampFlapping: true}
	tgt.Probe.Interval = time.Second
	state := breaker.NewState()
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	state.Observe(tgt.Key(), probe.Result{Outcome: probe.OutcomeHealthy}, at)
	state.NoteOpening(tgt, decide.SignalProbe, at)
	row := probeRow(tgt, state)
	assert.Zero(t, row.Reopenings)
	assert.Empty(t, row.DampedFor, "a first opening is not damped")

	state.NoteClosing(tgt.Key(), at.Add(20*time.Second))
	state.NoteOpening(tgt, decide.SignalProbe, at.Add(60*time.Second))
	state.NoteClosing(tgt.Key(), at.Add(80*time.Second))
	state.NoteOpening(tgt, decide.SignalProbe, at.Add(100*time.Second))
	row = probeRow(tgt, state)
	assert.Equal(t, 2, row.Reopenings)
	assert.Equal(t, "20s", row.DampedFor)
}

// While kube-apiserver's own calls veto an opening on the probe's slow
// failures, the leader's row says so after the last result; a failure
// that is not slow says nothing of the kind.
func TestProbeRow_saysWhenTheApiserversCallsVetoSlowProbes(t *testing.T) {
	tgt := config.Target{Kind: circuit.KindMutating, Configuration: "c", Webhook: "w.example.com", Mode: config.ModeBypass, OpenAfter: 3, CloseAfter: 5}
	tgt.APIServerSignal.Enabled = true
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for name, slow := range map[string]bool{"slow": true, "at timeoutSeconds": false} {
		t.Run(name, func(t *testing.T) {
			state := breaker.NewState()
			failed := probe.Result{Outcome: probe.OutcomeFailed, Reason: probe.ReasonTimeout, Err: errors.New("context deadline exceeded"), Duration: 4 * time.Second, Slow: slow}
			for i := range 3 {
				state.Observe(tgt.Key(), failed, at.Add(time.Duration(i)*time.Second))
			}
			state.ObserveAPIServer(tgt.Key(), probe.Result{Outcome: probe.OutcomeHealthy}, at.Add(time.Second), 0, 0, false)
			row := probeRow(tgt, state)
			assert.Equal(t, slow, strings.HasSuffix(row.LastResult, "; "+SlowVetoedNote), row.LastResult)
		})
	}
}
