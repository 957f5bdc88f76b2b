package decide_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

func TestDamp_doublesPerReopeningUpToItsCap(t *testing.T) {
	tgt := breakertest.DefaultTarget(config.ModeBypass)
	var got []time.Duration
	for n := range 9 {
		got = append(got, decide.Damp(tgt, n)/time.Second)
	}
	assert.Equal(t, []time.Duration{0, 10, 20, 40, 80, 160, 320, 640, 640}, got, "seconds, with the defaults")
	assert.Equal(t, 150*time.Second, decide.FlapWindow(tgt))

	fast := breakertest.Target(breakertest.WhA, config.ModeBypass, 2, 2)
	fast.Probe.Interval, fast.DampFlapping = 100*time.Millisecond, true
	assert.Equal(t, 400*time.Millisecond, decide.Damp(fast, 1), "it scales with the target's own timing")

	tgt.DampFlapping = false
	assert.Zero(t, decide.Damp(tgt, 3), "dampFlapping: false turns it off")
}

func TestReopenings_countOnlyOpeningsSoonAfterAClose(t *testing.T) {
	tgt := breakertest.DefaultTarget(config.ModeBypass)
	closed := breakertest.Now
	cases := map[string]struct {
		closedAt time.Time
		at       time.Time
		want     int
	}{
		"never closed here (a new leader, or the first opening)": {time.Time{}, breakertest.Now, 0},
		"within the window":           {closed, closed.Add(149 * time.Second), 3},
		"at the window's end":         {closed, closed.Add(150 * time.Second), 0},
		"long after: starts over":     {closed, closed.Add(time.Hour), 0},
		"a clock step back is recent": {closed, closed.Add(-time.Second), 3},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, c.want, decide.Reopenings(tgt, 2, c.closedAt, c.at))
		})
	}
}

// A circuit that re-opened soon after its last close closes no sooner
// than its damp after opening, however healthy the probes are; the
// others close as before.
func TestPlan_aReopenedCircuitClosesNoSoonerThanItsDamp(t *testing.T) {
	tgt := breakertest.DefaultTarget(config.ModeBypass)
	open := breakertest.WithEntries(t, breakertest.Config(breakertest.Webhook(breakertest.WhA, ptr.To(admissionregistrationv1.Fail))), circuit.Record{breakertest.WhA: breakertest.EntryFor(config.ModeBypass, ptr.To(admissionregistrationv1.Fail))})
	openedAt := breakertest.EntryFor(config.ModeBypass, nil).OpenedAt.Time
	cases := map[string]struct {
		damp   time.Duration
		after  time.Duration
		closes bool
	}{
		"not re-opened":              {0, time.Second, true},
		"before its damp":            {20 * time.Second, 19 * time.Second, false},
		"at its damp":                {20 * time.Second, 20 * time.Second, true},
		"a long damp, long ago open": {640 * time.Second, time.Hour, true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, changes := breakertest.Plan(t, open, decide.Inputs{
				Targets: []config.Target{tgt}, Evidence: map[string]decide.Evidence{breakertest.WhA: {Probe: breakertest.Healthy(tgt.CloseAfter), Damp: c.damp}},
				Now: openedAt.Add(c.after),
			})
			if c.closes {
				assert.Equal(t, map[string]decide.ChangeKind{breakertest.WhA: decide.Closed}, breakertest.Kinds(changes))
			} else {
				assert.Empty(t, changes)
			}
		})
	}
}
