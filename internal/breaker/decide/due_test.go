package decide_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// TestDue: the probe runner wakes the reconciler exactly when the
// evidence could change the configuration's step, without planning.
func TestDue(t *testing.T) {
	type want struct{ opening, closing, due bool }
	open := circuit.Record{breakertest.WhA: breakertest.EntryFor(config.ModeBypass, breakertest.PolicyFail)}
	for name, tc := range map[string]struct {
		record     circuit.Record
		mode       config.Mode
		probe      decide.Counts
		override   bool
		unreadable bool
		want       want
	}{
		"healthy and closed": {probe: breakertest.Healthy(5)},
		"one failure":        {probe: breakertest.Failing(1, probe.ReasonTimeout)},
		"one failure from the threshold: arm ahead": {probe: breakertest.Failing(2, probe.ReasonTimeout), want: want{due: true}},
		"at the threshold":                          {probe: breakertest.Failing(3, probe.ReasonTimeout), want: want{opening: true, due: true}},
		"open, one success":                         {record: open, probe: breakertest.Healthy(1)},
		"open, closeAfter successes":                {record: open, probe: breakertest.Healthy(2), want: want{closing: true, due: true}},
		"Observe mode at the threshold":             {mode: config.ModeObserve, probe: breakertest.Failing(3, probe.ReasonTimeout)},
		"Observe mode with a record left open":      {mode: config.ModeObserve, record: open, probe: breakertest.Healthy(5), want: want{due: true}},
		"handed over with an entry of ours":         {record: open, override: true, want: want{due: true}},
		"handed over with nothing of ours":          {override: true, probe: breakertest.Failing(3, probe.ReasonTimeout)},
		"an unreadable record":                      {unreadable: true, probe: breakertest.Failing(3, probe.ReasonTimeout)},
		"an unreadable record, handed over":         {unreadable: true, override: true},
	} {
		t.Run(name, func(t *testing.T) {
			cur := breakertest.WithEntries(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail)), tc.record)
			if tc.record != nil {
				cur.Webhooks[0] = breakertest.Webhook(breakertest.WhA, breakertest.PolicyIgnore, breakertest.BypassMarker())
			}
			if tc.override {
				cur.Annotations[circuit.OverrideAnnotation] = "ours now"
			}
			if tc.unreadable {
				cur.Annotations[circuit.Annotation] = "{"
			}
			mode := tc.mode
			if mode == "" {
				mode = config.ModeBypass
			}
			in := decide.Inputs{
				Targets:  []config.Target{breakertest.Target(breakertest.WhA, mode, 3, 2)},
				Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: tc.probe}},
				Now:      breakertest.Now,
			}
			opening, closing, due := decide.Due(decide.Read(cur), in)
			assert.Equal(t, tc.want, want{opening, closing, due})
		})
	}
}
