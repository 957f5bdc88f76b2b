package breaker

import (
	"fmt"
	"time"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
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

// observedChange is the Change reported for an Observe transition of t,
// judged from st at now.
func observedChange(t config.Target, st TargetStatus, action decide.Action, signal string, now time.Time) decide.Change {
	if action == decide.Open {
		_, why := decide.OpenedBecause(signal, st.Counts, st.APIServer)
		why += decide.PathNote(signal, st.Path)
		return decide.Change{Webhook: t.Webhook, Kind: decide.WouldOpen, Signal: signal, Message: circuit.EventNote(
			"would have opened the circuit on %s %s; mode Observe: webhook-guard changed nothing, and in Bypass mode the webhook would now be skipped, in Ignore mode its failures ignored",
			t.Webhook, why)}
	}
	because := fmt.Sprintf("after %d consecutive healthy probes", st.Successes)
	switch {
	case st.Unprobeable:
		because = fmt.Sprintf("because it can no longer be probed (%s)", st.Problem)
	case signal == decide.SignalPath:
		because = decide.PathClosedBecause(st.Path)
	case signal == decide.SignalAPIServer:
		because = fmt.Sprintf("after %d intervals in which the probe could not run (last: %v) while the apiserver's own calls to the webhook succeeded for %d intervals",
			st.Unknowns, decide.UnknownErr(st.Counts), st.APIServer.Successes)
	}
	since := st.WouldOpenSince
	return decide.Change{Webhook: t.Webhook, Kind: decide.WouldClose, Message: circuit.EventNote(
		"would have closed the circuit on %s %s; it would have been open since %s (%s); mode Observe: webhook-guard changed nothing",
		t.Webhook, because, since.UTC().Format(time.RFC3339), now.Sub(since).Round(time.Second))}
}
