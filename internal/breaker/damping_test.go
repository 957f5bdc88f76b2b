package breaker

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// defaultTarget is a target with the defaults a user gets: a probe every
// second, open after 3, close after 5.
func defaultTarget(mode config.Mode) config.Target {
	tgt := target(whA, mode, config.DefaultOpenAfter, config.DefaultCloseAfter)
	tgt.Probe.Interval = config.DefaultProbeInterval
	tgt.DampFlapping = true
	return tgt
}

func TestDamp_doublesPerReopeningUpToItsCap(t *testing.T) {
	tgt := defaultTarget(config.ModeBypass)
	var got []time.Duration
	for n := range 9 {
		got = append(got, Damp(tgt, n)/time.Second)
	}
	assert.Equal(t, []time.Duration{0, 10, 20, 40, 80, 160, 320, 640, 640}, got, "seconds, with the defaults")
	assert.Equal(t, 150*time.Second, FlapWindow(tgt))

	fast := target(whA, config.ModeBypass, 2, 2)
	fast.Probe.Interval, fast.DampFlapping = 100*time.Millisecond, true
	assert.Equal(t, 400*time.Millisecond, Damp(fast, 1), "it scales with the target's own timing")

	tgt.DampFlapping = false
	assert.Zero(t, Damp(tgt, 3), "dampFlapping: false turns it off")
}

func TestReopenings_countOnlyOpeningsSoonAfterAClose(t *testing.T) {
	tgt := defaultTarget(config.ModeBypass)
	closed := testNow
	cases := map[string]struct {
		closedAt time.Time
		at       time.Time
		want     int
	}{
		"never closed here (a new leader, or the first opening)": {time.Time{}, testNow, 0},
		"within the window":           {closed, closed.Add(149 * time.Second), 3},
		"at the window's end":         {closed, closed.Add(150 * time.Second), 0},
		"long after: starts over":     {closed, closed.Add(time.Hour), 0},
		"a clock step back is recent": {closed, closed.Add(-time.Second), 3},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, c.want, Reopenings(tgt, 2, c.closedAt, c.at))
		})
	}
}

// A circuit that re-opened soon after its last close closes no sooner
// than its damp after opening, however healthy the probes are; the
// others close as before.
func TestPlan_aReopenedCircuitClosesNoSoonerThanItsDamp(t *testing.T) {
	tgt := defaultTarget(config.ModeBypass)
	open := withEntries(t, newConfig(newWebhook(whA, ptr.To(admissionregistrationv1.Fail))), circuit.Record{whA: entryFor(config.ModeBypass, ptr.To(admissionregistrationv1.Fail))})
	openedAt := entryFor(config.ModeBypass, nil).OpenedAt.Time
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
			_, changes := plan(t, open, Inputs{
				Targets: []config.Target{tgt}, Counts: map[string]Counts{whA: healthy(tgt.CloseAfter)},
				Damp: map[string]time.Duration{whA: c.damp}, Now: openedAt.Add(c.after),
			})
			if c.closes {
				assert.Equal(t, map[string]ChangeKind{whA: Closed}, kinds(changes))
			} else {
				assert.Empty(t, changes)
			}
		})
	}
}

func TestState_dampFollowsTheWrittenOpeningsAndClosings(t *testing.T) {
	s := NewState()
	tgt := defaultTarget(config.ModeBypass)
	dampNow := func() time.Duration {
		return s.Inputs([]config.Target{tgt}, testNow, "", "1").Damp[whA]
	}
	s.Observe(tgt.Key(), healthyResult(), testNow)
	at := testNow
	s.NoteOpening(tgt, SignalProbe, at)
	assert.Zero(t, dampNow(), "a first opening is not damped")
	var got []time.Duration
	for range 3 {
		at = at.Add(time.Minute)
		s.NoteClosing(tgt.Key(), at)
		at = at.Add(30 * time.Second)
		s.NoteOpening(tgt, SignalProbe, at)
		got = append(got, dampNow()/time.Second)
	}
	assert.Equal(t, []time.Duration{10, 20, 40}, got)
	s.NoteClosing(tgt.Key(), at.Add(time.Minute))
	s.NoteOpening(tgt, SignalProbe, at.Add(time.Hour))
	assert.Zero(t, dampNow(), "closed for longer than the flap window: it starts over")
}

// One pod of three hangs, and probes reach a pod at random: a third of
// them fail. With the defaults, one simulated hour of probes goes
// through the real State and Plan, and every transition Plan returns is
// applied as the reconciler applies it. Flap damping must cut the
// transitions to a fraction. (A simulation with a fixed seed, not a timed
// test: it counts transitions, it measures no time.)
func TestDamping_oneHangingPodOfThreeCyclesTheCircuitAFractionAsOften(t *testing.T) {
	before := simulateFlapping(t, false)
	after := simulateFlapping(t, true)
	t.Logf("transitions in one hour with a third of the probes failing at random: %d without damping, %d with", before, after)
	require.Greater(t, before, 60, "the simulated backend flaps")
	assert.LessOrEqual(t, after*4, before, "damping cuts the transitions to a quarter or less")
	assert.LessOrEqual(t, after, 24, "no more than a transition every 2.5 minutes")
}

func simulateFlapping(t *testing.T, damping bool) int {
	t.Helper()
	tgt := defaultTarget(config.ModeBypass)
	rng := rand.New(rand.NewPCG(1, 2))
	s := NewState()
	cur := newConfig(newWebhook(whA, ptr.To(admissionregistrationv1.Fail)))
	transitions := 0
	for at := testNow; at.Before(testNow.Add(time.Hour)); at = at.Add(tgt.Probe.Interval) {
		result := healthyResult()
		if rng.IntN(3) == 0 {
			result = failedResult(probe.ReasonTimeout)
		}
		s.Observe(tgt.Key(), result, at)
		in := s.Inputs([]config.Target{tgt}, at, "", "1")
		if !damping {
			in.Damp = nil
		}
		next, changes, err := Plan(cur, in)
		require.NoError(t, err)
		for _, c := range changes {
			transitions++
			s.Reset(tgt.Key())
			switch c.Kind {
			case Opened:
				s.NoteOpening(tgt, c.Signal, at)
			case Closed:
				s.NoteClosing(tgt.Key(), at)
			}
		}
		cur = next
	}
	return transitions
}

// Observe mode says when it would have closed as a written circuit
// would: damped after a re-opening soon after its last close.
func TestState_observeModeIsDampedAsTheOthersAre(t *testing.T) {
	tgt := defaultTarget(config.ModeObserve)
	s := NewState()
	at := testNow
	step := func(r probe.Result, n int) (kinds []ChangeKind) {
		for range n {
			at = at.Add(tgt.Probe.Interval)
			s.Observe(tgt.Key(), r, at)
			if c, ok := s.JudgeObserved(tgt, at); ok {
				kinds = append(kinds, c.Kind)
			}
		}
		return kinds
	}
	failed := failedResult(probe.ReasonTimeout)
	assert.Equal(t, []ChangeKind{WouldOpen}, step(failed, tgt.OpenAfter))
	assert.Equal(t, []ChangeKind{WouldClose}, step(healthyResult(), tgt.CloseAfter), "a first opening closes on closeAfter healthy probes")
	assert.Equal(t, []ChangeKind{WouldOpen}, step(failed, tgt.OpenAfter), "re-opened within the flap window")
	assert.Empty(t, step(healthyResult(), tgt.CloseAfter), "closeAfter healthy probes are not enough now")
	assert.Equal(t, []ChangeKind{WouldClose}, step(healthyResult(), 5), "it would close once open for its damp, 10 s")
}
