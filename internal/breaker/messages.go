package breaker

import (
	"fmt"
	"time"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// HandOffOriginal says what an entry recorded, for the HandedOff Event
// and guard status: "original failurePolicy X, mode M, opened at T by B".
// A handoff removes the entry, the only place the original failurePolicy
// was kept, so the Event must carry it.
func HandOffOriginal(e circuit.Entry) string {
	s := fmt.Sprintf("%s%s, mode %s, opened at %s", OriginalPrefix, circuit.PolicyString(e.OriginalFailurePolicy), e.Mode, e.OpenedAt.UTC().Format(time.RFC3339))
	if e.By != "" {
		s += " by " + e.By
	}
	return s
}

// OriginalPrefix begins HandOffOriginal, so that a reader of a HandedOff
// Event (guard status) can find it in the note.
const OriginalPrefix = "original failurePolicy "

// unknownErr is the error of c's last Unknown result.
func unknownErr(c Counts) error {
	if c.LastUnknown == nil {
		return nil
	}
	return c.LastUnknown.Err
}

// openedBecause returns the record's reason and the Event's explanation of
// an opening by signal.
func openedBecause(signal string, probeCounts, apiserver Counts) (string, string) {
	probeSays := func() string {
		return fmt.Sprintf("after %d consecutive failed probes (last: %s: %v)", probeCounts.Failures, probeCounts.Last.Reason, probeCounts.Last.Err)
	}
	apiserverSays := func() string {
		return fmt.Sprintf("after %d consecutive failing intervals of the apiserver's own calls (last: %v)", apiserver.Failures, apiserver.Last.Err)
	}
	switch signal {
	case SignalAPIServer:
		why := apiserverSays()
		switch probeCounts.Last.Outcome {
		case probe.OutcomeHealthy:
			why += " while the direct probe was healthy: the apiserver's path to the webhook is broken (konnectivity, a firewall or a NetworkPolicy between the control plane and the webhook)"
		case probe.OutcomeFailed:
			why += fmt.Sprintf(" (the direct probe is failing too: %s)", probeCounts.Last.Reason)
		}
		return string(ReasonAPIServerCalls), why
	case SignalBoth:
		return string(probeCounts.Last.Reason), probeSays() + " and " + apiserverSays()
	case SignalRoad:
		why := "because kube-apiserver cannot reach the webhook's server: its road (konnectivity, an egress proxy, a firewall or a NetworkPolicy between the control plane and the webhook) is broken"
		if probeCounts.Last.Outcome == probe.OutcomeHealthy {
			why += ", while the direct probe from the guard's pod is healthy"
		}
		return string(SignalRoad), why
	}
	return string(probeCounts.Last.Reason), probeSays()
}

// openedByAPIServer reports whether the apiserver signal opened entry's
// circuit.
func openedByAPIServer(entry circuit.Entry) bool {
	return entry.Signal == SignalAPIServer || entry.Signal == SignalBoth
}

// openedByRoad reports whether evidence about kube-apiserver's road
// opened entry's circuit: the apiserver signal (confirmed by the path
// probe, or alone on a url road) or the path probe alone. On a service
// road such a circuit closes on the path probe.
func openedByRoad(entry circuit.Entry) bool {
	return openedByAPIServer(entry) || entry.Signal == SignalRoad
}

// trialNote explains, for a closing Event, that closing a Bypass circuit
// the apiserver signal opened is a trial.
func trialNote(t config.Target, entry circuit.Entry) string {
	if t.Mode != circuit.ModeBypass || !openedByAPIServer(entry) {
		return ""
	}
	return "; the apiserver signal opened it, and its calls cannot be seen while bypassed: if they still fail it opens again, and stays open twice as long"
}

// admittedNote says, for a closing Event, how many requests the apiserver
// admitted without the webhook while the circuit was open, when the
// apiserver signal counted them.
func admittedNote(t config.Target, entry circuit.Entry, in Inputs) string {
	n, ok := in.Admitted[t.Webhook]
	if !t.APIServerSignal.Enabled || !ok {
		return ""
	}
	without := "mutation"
	if t.Kind == circuit.KindValidating {
		without = "validation"
	}
	note := fmt.Sprintf("; the apiserver admitted %.0f requests without the %s while open (%s), as counted from its /metrics",
		n, without, in.Now.Sub(entry.OpenedAt.Time).Round(time.Second))
	if m := in.Marked[t.Webhook]; m > 0 {
		note += fmt.Sprintf("; %.0f objects were marked %s=%s (guard unmutated lists them)", m, circuit.UnmutatedLabel, marking.ID(t.Configuration, t.Webhook))
	}
	return note
}
