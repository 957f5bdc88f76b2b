package decide_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

func TestJudgeObserved_table(t *testing.T) {
	observe := breakertest.Target(breakertest.WhA, config.ModeObserve, 3, 2)
	observe.APIServerSignal.Enabled = true
	brokenRoad := decide.Path{Road: decide.RoadService, Counts: breakertest.Failing(3, probe.ReasonNoRoute)}
	cases := map[string]struct {
		wouldOpen  bool
		signal     string
		probe      decide.Counts
		apiserver  decide.Counts
		path       decide.Path
		hold       bool
		wantAction decide.Action
		wantSignal string
	}{
		"closed with no probes stays":                   {wantAction: decide.Stay},
		"closed below openAfter stays":                  {probe: breakertest.Failing(2, probe.ReasonTimeout), wantAction: decide.Stay},
		"closed at openAfter would open on the probe":   {probe: breakertest.Failing(3, probe.ReasonTimeout), wantAction: decide.Open, wantSignal: decide.SignalProbe},
		"the hold stops an opening on the probe alone":  {probe: breakertest.Failing(3, probe.ReasonTimeout), hold: true, wantAction: decide.Stay},
		"the apiserver alone opens nothing unconfirmed": {apiserver: breakertest.Failing(3, decide.ReasonAPIServerCalls), wantAction: decide.Stay},
		"the apiserver confirmed by the path probe would open": {
			apiserver: breakertest.Failing(3, decide.ReasonAPIServerCalls), path: brokenRoad, wantAction: decide.Open, wantSignal: decide.SignalAPIServer},
		"both signals would open together": {
			probe: breakertest.Failing(3, probe.ReasonTimeout), apiserver: breakertest.Failing(3, decide.ReasonAPIServerCalls), path: brokenRoad, wantAction: decide.Open, wantSignal: decide.SignalBoth},
		"the hold does not stop what the apiserver confirms": {
			probe: breakertest.Failing(3, probe.ReasonTimeout), apiserver: breakertest.Failing(3, decide.ReasonAPIServerCalls), path: brokenRoad, hold: true, wantAction: decide.Open, wantSignal: decide.SignalBoth},
		"would be open, below closeAfter stays": {wouldOpen: true, signal: decide.SignalProbe, probe: breakertest.Healthy(1), wantAction: decide.Stay},
		"would be open, at closeAfter would close": {
			wouldOpen: true, signal: decide.SignalProbe, probe: breakertest.Healthy(2), wantAction: decide.Close},
		"would be open, still failing stays": {wouldOpen: true, signal: decide.SignalProbe, probe: breakertest.Failing(9, probe.ReasonTimeout), wantAction: decide.Stay},
		"opened by the apiserver on a service road closes on the path probe": {
			wouldOpen: true, signal: decide.SignalAPIServer, probe: breakertest.Healthy(1), path: decide.Path{Road: decide.RoadService, Counts: breakertest.Healthy(2)}, wantAction: decide.Close, wantSignal: decide.SignalPath},
		"opened by the apiserver stays while the path probe fails": {
			wouldOpen: true, signal: decide.SignalAPIServer, probe: breakertest.Healthy(5), path: brokenRoad, wantAction: decide.Stay},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			action, signal := decide.JudgeObserved(c.wouldOpen, c.signal, c.probe, c.apiserver, c.path, observe, c.hold)
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
	observe := breakertest.Target(breakertest.WhA, config.ModeObserve, 3, 2)
	observe.APIServerSignal = config.APIServerSignal{Enabled: true, WithoutPathProbe: config.WithoutPathProbeOpen}
	url := decide.Path{Road: decide.RoadURL}
	action, signal := decide.JudgeObserved(false, "", decide.Counts{}, breakertest.Failing(3, decide.ReasonAPIServerCalls), url, observe, false)
	require.Equal(t, decide.Open, action)
	require.Equal(t, decide.SignalAPIServer, signal)

	action, _ = decide.JudgeObserved(true, decide.SignalAPIServer, breakertest.Healthy(2), breakertest.Failing(1, decide.ReasonAPIServerCalls), url, observe, false)
	assert.Equal(t, decide.Stay, action, "the apiserver's calls still fail")
	action, _ = decide.JudgeObserved(true, decide.SignalAPIServer, breakertest.Healthy(2), breakertest.Healthy(1), url, observe, false)
	assert.Equal(t, decide.Close, action)
}

// TestPlan_observe: Plan writes nothing for an Observe target, however
// its counts fail, beside a Bypass target of the same configuration that
// opens; and a circuit left open from an earlier mode closes.
func TestPlan_observe(t *testing.T) {
	base := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail, breakertest.MC("x")), breakertest.Webhook(breakertest.WhB, breakertest.PolicyFail))
	observe, bypass := breakertest.Target(breakertest.WhA, config.ModeObserve, 3, 3), breakertest.Target(breakertest.WhB, config.ModeBypass, 3, 3)
	for name, c := range map[string]struct {
		cur  func() *circuit.Record
		want map[string]decide.ChangeKind
	}{
		"failing counts open the Bypass target only": {want: map[string]decide.ChangeKind{breakertest.WhB: decide.Opened}},
		"a circuit open before the switch to Observe closes": {
			cur: func() *circuit.Record {
				return &circuit.Record{breakertest.WhA: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)}
			},
			want: map[string]decide.ChangeKind{breakertest.WhA: decide.Closed, breakertest.WhB: decide.Opened},
		},
	} {
		t.Run(name, func(t *testing.T) {
			cur := base
			if c.cur != nil {
				cur = breakertest.WithEntries(t, base, *c.cur())
			}
			next, changes := breakertest.Plan(t, cur, decide.Inputs{
				Targets:  []config.Target{observe, bypass},
				Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(5, probe.ReasonTimeout)}, breakertest.WhB: {Probe: breakertest.Failing(5, probe.ReasonTimeout)}},
			})
			assert.Equal(t, c.want, breakertest.Kinds(changes))
			assert.Equal(t, base.Webhooks[0], next.Webhooks[0], "the Observe target's webhook is as it was before any circuit")
			_, recorded := breakertest.MustRecord(t, next)[breakertest.WhA]
			assert.False(t, recorded, "an Observe target is never recorded")
			for _, ch := range changes {
				if ch.Webhook == breakertest.WhA {
					assert.Contains(t, ch.Message, "its target is now in Observe mode")
				}
			}
		})
	}

	// With only Observe targets nothing is written at all.
	next, changes := breakertest.Plan(t, base, decide.Inputs{Targets: []config.Target{observe}, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Failing(5, probe.ReasonTimeout)}}})
	assert.Empty(t, changes)
	assert.Same(t, base, next)
}
