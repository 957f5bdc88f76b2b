package breaker

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

func TestState_dampFollowsTheWrittenOpeningsAndClosings(t *testing.T) {
	s := NewState()
	tgt := breakertest.DefaultTarget(config.ModeBypass)
	dampNow := func() time.Duration {
		return s.Inputs([]config.Target{tgt}, breakertest.Now, "", "1").Evidence[breakertest.WhA].Damp
	}
	s.Observe(tgt.Key(), breakertest.HealthyResult(), breakertest.Now)
	at := breakertest.Now
	s.NoteOpening(tgt, decide.SignalProbe, at)
	assert.Zero(t, dampNow(), "a first opening is not damped")
	var got []time.Duration
	for range 3 {
		at = at.Add(time.Minute)
		s.NoteClosing(tgt.Key(), at)
		at = at.Add(30 * time.Second)
		s.NoteOpening(tgt, decide.SignalProbe, at)
		got = append(got, dampNow()/time.Second)
	}
	assert.Equal(t, []time.Duration{10, 20, 40}, got)
	s.NoteClosing(tgt.Key(), at.Add(time.Minute))
	s.NoteOpening(tgt, decide.SignalProbe, at.Add(time.Hour))
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
	tgt := breakertest.DefaultTarget(config.ModeBypass)
	rng := rand.New(rand.NewPCG(1, 2))
	s := NewState()
	cur := breakertest.Config(breakertest.Webhook(breakertest.WhA, ptr.To(admissionregistrationv1.Fail)))
	transitions := 0
	for at := breakertest.Now; at.Before(breakertest.Now.Add(time.Hour)); at = at.Add(tgt.Probe.Interval) {
		result := breakertest.HealthyResult()
		if rng.IntN(3) == 0 {
			result = breakertest.FailedResult(probe.ReasonTimeout)
		}
		s.Observe(tgt.Key(), result, at)
		in := s.Inputs([]config.Target{tgt}, at, "", "1")
		if ev := in.Evidence[breakertest.WhA]; !damping {
			ev.Damp = 0
			in.Evidence[breakertest.WhA] = ev
		}
		next, changes, err := decide.Plan(cur, in)
		require.NoError(t, err)
		for _, c := range changes {
			transitions++
			s.Reset(tgt.Key())
			switch c.Kind {
			case decide.Opened:
				s.NoteOpening(tgt, c.Signal, at)
			case decide.Closed:
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
	tgt := breakertest.DefaultTarget(config.ModeObserve)
	s := NewState()
	at := breakertest.Now
	step := func(r probe.Result, n int) (kinds []decide.ChangeKind) {
		for range n {
			at = at.Add(tgt.Probe.Interval)
			s.Observe(tgt.Key(), r, at)
			if c, ok := s.JudgeObserved(tgt, at); ok {
				kinds = append(kinds, c.Kind)
			}
		}
		return kinds
	}
	failed := breakertest.FailedResult(probe.ReasonTimeout)
	assert.Equal(t, []decide.ChangeKind{decide.WouldOpen}, step(failed, tgt.OpenAfter))
	assert.Equal(t, []decide.ChangeKind{decide.WouldClose}, step(breakertest.HealthyResult(), tgt.CloseAfter), "a first opening closes on closeAfter healthy probes")
	assert.Equal(t, []decide.ChangeKind{decide.WouldOpen}, step(failed, tgt.OpenAfter), "re-opened within the flap window")
	assert.Empty(t, step(breakertest.HealthyResult(), tgt.CloseAfter), "closeAfter healthy probes are not enough now")
	assert.Equal(t, []decide.ChangeKind{decide.WouldClose}, step(breakertest.HealthyResult(), 5), "it would close once open for its damp, 10 s")
}
