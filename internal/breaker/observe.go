package breaker

import (
	"fmt"
	"time"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// The transitions of a target in Observe mode (config.ModeObserve): what
// the breaker would have written. Nothing is written; they are reported
// as Events and counted in webhook_guard_circuit_transitions_total.
const (
	// WouldOpen: the circuit would have opened.
	WouldOpen ChangeKind = "CircuitWouldOpen"
	// WouldClose: a circuit that would have been open would have closed.
	WouldClose ChangeKind = "CircuitWouldClose"
)

// Observed is what the breaker would have done to a target in Observe
// mode. There is no record entry to hold it, so it lives in memory
// (TargetStatus): after a failover the new leader starts closed.
type Observed struct {
	// WouldOpenSince is when the circuit would have opened; zero while it
	// would be closed.
	WouldOpenSince time.Time
	// WouldOpenSignal is the signal that would have opened it, as in the
	// record's signal field.
	WouldOpenSignal string
	// WouldClosedAt is when it last would have closed; zero if never.
	WouldClosedAt time.Time
	// WouldReopenings counts its re-openings in a row, each within
	// FlapWindow of the last close, as Reopenings does for a written
	// circuit: it would close no sooner than Damp after opening.
	WouldReopenings int
}

// WouldBeOpen reports whether the circuit would be open now.
func (o Observed) WouldBeOpen() bool { return !o.WouldOpenSince.IsZero() }

// JudgeObserved is JudgeTarget for a target in Observe mode, whose
// circuit would be open (wouldOpen) since an opening by signal. It opens
// and closes on the same evidence as the other modes, so that its
// Events come at the moment they would have. Nothing is bypassed, so the
// apiserver keeps calling the webhook: the closing rules are Ignore
// mode's, where the apiserver's calls stay visible, and no minimum open
// time applies. While holdOpen (every probed target failing at once) an
// opening on the probe alone is held, as Plan holds it.
func JudgeObserved(wouldOpen bool, signal string, probeCounts, apiserver Counts, path Path, t config.Target, holdOpen bool) (Action, string) {
	judged := t
	judged.Mode = circuit.ModeIgnore
	action, sig := JudgeTarget(wouldOpen, circuit.Entry{Signal: signal}, probeCounts, apiserver, path, judged)
	if action == Open && holdOpen && sig == SignalProbe {
		return Stay, ""
	}
	return action, sig
}

// observedChange is the Change reported for an Observe transition of t,
// judged from st at now.
func observedChange(t config.Target, st TargetStatus, action Action, signal string, now time.Time) Change {
	if action == Open {
		_, why := openedBecause(signal, st.Counts, st.APIServer)
		why += pathNote(signal, st.Path)
		return Change{Webhook: t.Webhook, Kind: WouldOpen, Signal: signal, Message: circuit.EventNote(
			"would have opened the circuit on %s %s; mode Observe: webhook-guard changed nothing, and in Bypass mode the webhook would now be skipped, in Ignore mode its failures ignored",
			t.Webhook, why)}
	}
	because := fmt.Sprintf("after %d consecutive healthy probes", st.Successes)
	switch {
	case st.Unprobeable:
		because = fmt.Sprintf("because it can no longer be probed (%s)", st.Problem)
	case signal == SignalPath:
		because = pathClosedBecause(st.Path)
	case signal == SignalAPIServer:
		because = fmt.Sprintf("after %d intervals in which the probe could not run (last: %v) while the apiserver's own calls to the webhook succeeded for %d intervals",
			st.Unknowns, unknownErr(st.Counts), st.APIServer.Successes)
	}
	since := st.WouldOpenSince
	return Change{Webhook: t.Webhook, Kind: WouldClose, Message: circuit.EventNote(
		"would have closed the circuit on %s %s; it would have been open since %s (%s); mode Observe: webhook-guard changed nothing",
		t.Webhook, because, since.UTC().Format(time.RFC3339), now.Sub(since).Round(time.Second))}
}
