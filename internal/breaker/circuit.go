package breaker

import (
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// Counts are the consecutive probe outcomes of one target. They live in
// the leader's memory only; the circuit's state lives on the object.
type Counts struct {
	// Failures is the number of consecutive failed probes.
	Failures int
	// Successes is the number of consecutive healthy probes.
	Successes int
	// Last is the most recent result that was not Unknown.
	Last probe.Result
	// LastUnknown is the most recent Unknown result, if any came after Last.
	LastUnknown *probe.Result
	// Unknowns is the number of consecutive Unknown results.
	Unknowns int
}

// Observe adds one probe result. Unknown moves no counter: a probe that
// could not run for reasons on the guard's side says nothing about the
// webhook.
func (c *Counts) Observe(r probe.Result) {
	switch r.Outcome {
	case probe.OutcomeHealthy:
		c.Successes++
		c.Failures = 0
	case probe.OutcomeFailed:
		c.Failures++
		c.Successes = 0
	default:
		c.LastUnknown = &r
		c.Unknowns++
		return
	}
	c.Last = r
	c.LastUnknown = nil
	c.Unknowns = 0
}

// UnknownWhileOpen reports whether an open circuit's probe has said
// Unknown for closeAfter intervals in a row: long enough that the probe
// alone could have closed it had it run. From then on the apiserver's own
// calls decide (DecideTarget), and the guard says so.
func (c Counts) UnknownWhileOpen(closeAfter int) bool { return c.Unknowns >= closeAfter }

// Action is what the circuit wants done.
type Action string

const (
	// Stay leaves the webhook as it is.
	Stay Action = "Stay"
	// Open applies the mode's changes.
	Open Action = "Open"
	// Close restores what was there before opening.
	Close Action = "Close"
)

// Decide is the circuit's state machine. open is whether the breaker's
// changes are in place now (a record entry exists). A closed circuit opens
// after openAfter consecutive failures; an open one closes after
// closeAfter consecutive successes.
func Decide(open bool, c Counts, openAfter, closeAfter int) Action {
	switch {
	case !open && c.Failures >= openAfter:
		return Open
	case open && c.Successes >= closeAfter:
		return Close
	default:
		return Stay
	}
}

// The signals that open a circuit, as the record's signal field and the
// Events name them.
const (
	// SignalProbe is the guard's own probe of the webhook.
	SignalProbe = "probe"
	// SignalAPIServer is kube-apiserver's record of the calls it made.
	SignalAPIServer = "apiserver"
	// SignalBoth: both reached openAfter in the same interval.
	SignalBoth = "probe+apiserver"
)

// ReasonAPIServerCalls is the failure reason of an apiserver signal
// observation: too many of the apiserver's own calls to the webhook failed.
const ReasonAPIServerCalls probe.FailureReason = "apiserver-calls"

// DecideTarget is Decide over both of t's signals. A closed circuit opens
// when either signal has openAfter consecutive failing observations; it
// returns which. An open circuit closes after closeAfter healthy probes;
// in Ignore mode the apiserver still calls the webhook, so it also needs
// the apiserver's last observation not to be failing. In Bypass mode the
// apiserver makes no calls while open, and the probe alone closes.
//
// An open circuit whose probe has been Unknown for closeAfter intervals
// (Counts.UnknownWhileOpen) closes on the apiserver's word alone when
// closeAfter of its observations in a row saw the webhook's calls succeed
// (only possible in Ignore mode, where the apiserver still calls it), and
// the returned signal is SignalAPIServer; otherwise it stays open.
func DecideTarget(open bool, probeCounts, apiserver Counts, t config.Target) (Action, string) {
	if !t.APIServerSignal.Enabled {
		apiserver = Counts{}
	}
	if !open {
		byProbe := Decide(false, probeCounts, t.OpenAfter, t.CloseAfter) == Open
		byAPIServer := Decide(false, apiserver, t.OpenAfter, t.CloseAfter) == Open
		switch {
		case byProbe && byAPIServer:
			return Open, SignalBoth
		case byProbe:
			return Open, SignalProbe
		case byAPIServer:
			return Open, SignalAPIServer
		}
		return Stay, ""
	}
	if probeCounts.UnknownWhileOpen(t.CloseAfter) {
		if t.APIServerSignal.Enabled && apiserver.Successes >= t.CloseAfter {
			return Close, SignalAPIServer
		}
		return Stay, ""
	}
	if Decide(true, probeCounts, t.OpenAfter, t.CloseAfter) != Close {
		return Stay, ""
	}
	if t.Mode == circuit.ModeIgnore && apiserver.Failures > 0 && apiserver.LastUnknown == nil {
		return Stay, ""
	}
	return Close, ""
}
