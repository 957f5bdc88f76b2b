package decide

import (
	"time"

	"github.com/webhook-guard/webhook-guard/internal/config"
)

// Flap damping. A webhook that fails now and then (one pod of three
// hanging, reached at random) opens its circuit, passes closeAfter probes,
// closes, and opens again a minute later: every cycle refuses requests
// for openAfter probe intervals before the opening. So a circuit that
// opens again soon after its last close stays open longer before it may
// close again, doubling with each such re-opening up to a cap, the way
// Envoy's outlier detection ejects a host for longer each time. Damping
// only ever holds a close back; it never holds an opening.
//
// The durations are in close periods (closeAfter probe intervals, 5 s
// with the defaults), so that they scale with a target's own timing.
const (
	// FlapWindowClosePeriods: an opening within this many close periods
	// of the circuit's last close is a re-opening (150 s with the
	// defaults). A circuit that stays closed longer starts again from no
	// re-openings.
	FlapWindowClosePeriods = 30
	// DampClosePeriods is how long the first re-opening keeps the circuit
	// open at least (10 s with the defaults).
	DampClosePeriods = 2
	// MaxDampDoublings caps the doubling: at most 64 times
	// DampClosePeriods (640 s, about 11 minutes, with the defaults).
	MaxDampDoublings = 6
)

// closePeriod is closeAfter probe intervals of t.
func closePeriod(t config.Target) time.Duration {
	return time.Duration(max(t.CloseAfter, 1)) * t.Probe.Interval
}

// FlapWindow is how soon after its last close an opening of t's circuit
// counts as a re-opening.
func FlapWindow(t config.Target) time.Duration {
	return FlapWindowClosePeriods * closePeriod(t)
}

// Damp is how long t's circuit stays open at least after its
// reopenings-th re-opening in a row: none without one, or when t turns
// damping off (dampFlapping: false), then DampClosePeriods close periods,
// doubled with each further one up to MaxDampDoublings.
func Damp(t config.Target, reopenings int) time.Duration {
	if reopenings <= 0 || !t.DampFlapping {
		return 0
	}
	return Doubled(DampClosePeriods*closePeriod(t), reopenings-1, MaxDampDoublings)
}

// Reopenings is the count of re-openings in a row after an opening at
// now: one more than before when the circuit last closed within
// FlapWindow (closedAt; zero when it never closed here), and none
// otherwise.
func Reopenings(t config.Target, before int, closedAt, now time.Time) int {
	if closedAt.IsZero() || now.Sub(closedAt) >= FlapWindow(t) {
		return 0
	}
	return before + 1
}

// Doubled is base doubled times times (none below zero), at most
// maxDoublings times: the backoff of MinOpen and of flap damping.
func Doubled(base time.Duration, times, maxDoublings int) time.Duration {
	return base << min(max(times, 0), maxDoublings)
}
