package decide

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

// UnknownErr is the error of c's last Unknown result.
func UnknownErr(c Counts) error {
	if c.LastUnknown == nil {
		return nil
	}
	return c.LastUnknown.Err
}

// OpenedBecause returns the record's reason and the Event's explanation of
// an opening by signal.
func OpenedBecause(signal string, probeCounts, apiserver Counts) (string, string) {
	probeSays := func() string {
		why := fmt.Sprintf("after %d consecutive failed probes (last: %s: %v)", probeCounts.Failures, probeCounts.Last.Reason, probeCounts.Last.Err)
		if probeCounts.Slow {
			why += slowNote
		}
		return why
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

// slowNote ends the explanation of an opening on a run of slow probes
// (Counts.Slow): kube-apiserver would still have waited for each answer,
// so the Event says what the veto (SlowVetoed) did not see.
const slowNote = ", each cut at the probe's timeout, shorter than the webhook's timeoutSeconds, " +
	"while kube-apiserver's own calls were not seen succeeding since the first of them"

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
func admittedNote(t config.Target, entry circuit.Entry, ev Evidence, now time.Time) string {
	if !t.APIServerSignal.Enabled {
		return ""
	}
	without := "mutation"
	if t.Kind == circuit.KindValidating {
		without = "validation"
	}
	note := fmt.Sprintf("; the apiserver admitted %.0f requests without the %s while open (%s), as counted from its /metrics",
		ev.Admitted, without, now.Sub(entry.OpenedAt.Time).Round(time.Second))
	if m := ev.Marked; m > 0 {
		note += fmt.Sprintf("; %.0f objects were marked %s=%s (guard unmutated lists them)", m, circuit.UnmutatedLabel, marking.ID(t.Configuration, t.Webhook))
	}
	return note
}

// PathNote says, for an opening Event, what confirmed the apiserver's
// failing calls, or what the path probe alone found.
func PathNote(signal string, path Path) string {
	if signal == SignalRoad {
		return fmt.Sprintf(": %d probes in a row through kube-apiserver's service proxy, which dials through the same egress as its webhook calls, failed to connect (last: %s: %v); no request a tenant sends can cause that",
			path.Failures, path.Last.Reason, path.Last.Err)
	}
	if signal != SignalAPIServer && signal != SignalBoth {
		return ""
	}
	switch path.Road {
	case RoadService:
		return fmt.Sprintf("; confirmed by %d failed probes in a row through kube-apiserver's service proxy, which dials through the same egress as its webhook calls (last: %s: %v)",
			path.Failures, path.Last.Reason, path.Last.Err)
	case RoadURL:
		return "; no probe travels a url webhook's road, and withoutPathProbe: Open lets the apiserver's calls alone open it"
	}
	return ""
}

// PathClosedBecause says, for a closing Event, why the path probe closed
// a circuit.
func PathClosedBecause(path Path) string {
	return fmt.Sprintf("after %d consecutive healthy probes through kube-apiserver's service proxy: its road to the webhook works again", path.Successes)
}

// PathSays explains, for the SignalsDisagree Event of a target whose
// direct probe is healthy while the apiserver's calls fail, what the path
// evidence says about the road.
func PathSays(t config.Target, path Path) string {
	shared := ""
	if path.SharedWith != "" {
		shared = fmt.Sprintf("; kube-apiserver also counts the webhook of the same name in %s %s under this name", t.Kind.ObjectKind(), path.SharedWith)
	}
	switch {
	case path.Road == RoadService && path.Failures > 0:
		return fmt.Sprintf(": a probe through kube-apiserver's service proxy, which dials through the same egress, fails too (%s: %v): the apiserver's path to the webhook is broken; "+
			"check konnectivity or the egress proxy, firewalls between the control plane and the nodes, and NetworkPolicies allowing the control plane to the webhook's port%s", path.Last.Reason, path.Last.Err, shared)
	case path.Road == RoadService && path.Successes > 0:
		return fmt.Sprintf(": a probe through kube-apiserver's service proxy, which dials through the same egress, reaches the webhook's server, so the road works: "+
			"the failing calls fail because of what they carry (requests the webhook cannot answer in time) or are another webhook's of the same name%s; nothing opens on them", shared)
	case path.Road == RoadService && path.LastUnknown != nil:
		return fmt.Sprintf(": the probe through kube-apiserver's service proxy cannot tell whether the road works (%v), so nothing opens on them%s", path.LastUnknown.Err, shared)
	case path.Road == RoadURL && PathBroken(path, t, 1):
		return ": the apiserver's path to the webhook is broken (withoutPathProbe: Open: no probe travels a url webhook's road, so the apiserver's calls alone open it); check the control plane's route to the webhook's URL"
	case path.Road == RoadURL:
		return fmt.Sprintf(": no probe travels a url webhook's road, so nothing opens on them (withoutPathProbe: Report): check the control plane's route to the webhook's URL, or requests that make the webhook fail%s", shared)
	}
	return ": the apiserver's path to the webhook may be broken; nothing opens until a probe through kube-apiserver's service proxy confirms it" + shared
}
