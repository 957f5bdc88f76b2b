package decide

import (
	"time"

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
	// Slow says that every failure of the current run was only slow
	// (probe.Result.Slow). It means nothing while Failures is 0.
	Slow bool
	// FailingSince is when the first probe of the current run of failures
	// was sent (ObserveSince); zero when that is not known.
	FailingSince time.Time
	// SucceedingSince is, for the apiserver signal, when the window of
	// its last observation began, if kube-apiserver made calls to the
	// webhook in it and none failed (neither calling_webhook_error nor
	// fail-open: a Healthy observation may hold failures below
	// failureRatio); zero otherwise. The caller sets it with each
	// observation.
	SucceedingSince time.Time
}

// Observe adds one probe result. Unknown moves no counter: a probe that
// could not run for reasons on the guard's side says nothing about the
// webhook.
func (c *Counts) Observe(r probe.Result) {
	switch r.Outcome {
	case probe.OutcomeHealthy:
		c.Successes++
		c.Failures = 0
		c.Slow, c.FailingSince = false, time.Time{}
	case probe.OutcomeFailed:
		c.Failures++
		c.Successes = 0
		if c.Failures == 1 {
			c.Slow, c.FailingSince = r.Slow, time.Time{}
		} else {
			c.Slow = c.Slow && r.Slow
		}
	default:
		c.LastUnknown = &r
		c.Unknowns++
		return
	}
	c.Last = r
	c.LastUnknown = nil
	c.Unknowns = 0
}

// ObserveSince is Observe of a probe sent at sent: a result that begins a
// run of failures also sets FailingSince.
func (c *Counts) ObserveSince(r probe.Result, sent time.Time) {
	c.Observe(r)
	if r.Outcome == probe.OutcomeFailed && c.Failures == 1 {
		c.FailingSince = sent
	}
}

// ExpireFailures forgets c's failures once after consecutive Unknown
// results have followed them (after > 0; 0 keeps them): failures that
// old no longer count towards an opening. The apiserver signal uses it
// with openAfter, so that failing observations of one outage do not wait,
// counted, behind scrapes that saw no traffic until a later one completes
// a run on them.
func (c *Counts) ExpireFailures(after int) {
	if after > 0 && c.Unknowns >= after {
		c.Failures = 0
	}
}

// RecoveryProbe reports whether a target's next probe looks for recovery
// (probe.Spec.Recovery: its new connection, if it needs one, comes from
// the recovery budget, and a probe that gets none is not sent): an open
// circuit's probe, or the probe after an Unknown of a target with no
// failure counted, which looks for the guard's own recovery from a stall.
// A target with a failure counted is on its way to opening, and its
// probes are never budgeted: the budget does not stall an opening. A
// guard throttled by a thousand hanging webhooks says Unknown for many of
// their timeouts, and with its probes budgeted at 100 new connections a
// second it took 105 s to open them all (hack/bench, the mass failure
// with every default).
func (c Counts) RecoveryProbe(open bool) bool {
	return open || c.Unknowns > 0 && c.Failures == 0
}

// UnknownWhileOpen reports whether an open circuit's probe has said
// Unknown for closeAfter intervals in a row: long enough that the probe
// alone could have closed it had it run. From then on the apiserver's own
// calls decide (JudgeTarget), and the guard says so.
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

// Judge is the circuit's state machine. open is whether the breaker's
// changes are in place now (a record entry exists). A closed circuit opens
// after openAfter consecutive failures; an open one closes after
// closeAfter consecutive successes.
func Judge(open bool, c Counts, openAfter, closeAfter int) Action {
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
	// SignalAPIServer is kube-apiserver's record of the calls it made,
	// confirmed by the path probe (or, for a url webhook, alone when
	// withoutPathProbe is Open).
	SignalAPIServer = "apiserver"
	// SignalBoth: both reached openAfter in the same interval.
	SignalBoth = "probe+apiserver"
	// SignalRoad is the path probe alone: openAfter fresh path probes in a
	// row found kube-apiserver's road to a service-backed webhook broken
	// while the direct probe was not failing openAfter times, and the
	// apiserver's calls had not failed openAfter intervals. No tenant can
	// make the service proxy fail to connect.
	SignalRoad = "road"
	// SignalPath is not an opening signal: JudgeTarget returns it with
	// Close when the path probe closed a circuit the apiserver signal or
	// the road opened.
	SignalPath = "path"
)

// ReasonAPIServerCalls is the failure reason of an apiserver signal
// observation: too many of the apiserver's own calls to the webhook failed.
const ReasonAPIServerCalls probe.FailureReason = "apiserver-calls"

// Road is how kube-apiserver reaches a webhook, which decides what can
// confirm that its road is broken.
type Road string

const (
	// RoadUnknown: the webhook has not been read yet.
	RoadUnknown Road = ""
	// RoadService: clientConfig.service, dialed through the "cluster"
	// egress. The path probe (kube-apiserver's service proxy) travels it.
	RoadService Road = "service"
	// RoadURL: clientConfig.url, dialed through the "controlplane" egress
	// or none. No probe travels it.
	RoadURL Road = "url"
)

// Path is the path probe's evidence about one target: its consecutive
// results, and the road they are about.
type Path struct {
	// Counts are the path probe's consecutive results. They are kept only
	// while the path probe is needed (PathProbeNeeded), and zero otherwise.
	Counts
	// Road is the webhook's road.
	Road Road
	// SharedWith names another configuration of the same kind with a
	// webhook of the same name, when the apiserver's failing calls were
	// last seen: kube-apiserver counts both under one name, so its calls
	// cannot be told apart. Empty when there is none.
	SharedWith string
}

// PathBroken reports whether the evidence says kube-apiserver's road to
// t's webhook is broken, with at least n failed path probes in a row:
// for a service road, the path probe's; for a url road, which no probe
// travels, only when the operator lets the apiserver's calls speak alone
// (withoutPathProbe: Open) and no other configuration shares the
// webhook's name.
func PathBroken(path Path, t config.Target, n int) bool {
	switch path.Road {
	case RoadService:
		return path.Failures >= max(n, 1)
	case RoadURL:
		return t.APIServerSignal.WithoutPathProbe == config.WithoutPathProbeOpen && path.SharedWith == ""
	}
	return false
}

// PathProbeNeeded reports whether the target's own loop path-probes a
// target whose record entry is entry (open says it exists) and whose
// apiserver signal counts are apiserver: while the apiserver's calls are
// failing (to confirm or refute them), and while a circuit the apiserver
// signal or the road opened is open (to close it). A target the road
// schedule covers (ContinuousRoad) is probed there instead, every interval.
func PathProbeNeeded(open bool, entry circuit.Entry, apiserver Counts) bool {
	return (open && openedByRoad(entry)) || apiserver.Failures > 0
}

// RoadBroken reports whether path, about a service road, has openAfter
// failed path probes in a row, the last of them Failed.
func RoadBroken(path Path, openAfter int) bool {
	return path.Road == RoadService && path.Last.Outcome == probe.OutcomeFailed && path.Failures >= max(openAfter, 1)
}

// SlowVetoed reports whether kube-apiserver's own calls veto an opening on
// the direct probe's failures (probeCounts): every failure of the run was
// only slow (probe.Result.Slow: the probe gave up at its own timeout while
// kube-apiserver would still have waited), and the apiserver signal's last
// observation (apiserver) saw the webhook's calls made, none failed, in a
// window that began no earlier than the run's first probe was sent. Such
// a webhook answers kube-apiserver, only later than the probe waits.
//
// The window must lie within the run: calls that succeeded before the
// webhook became slow say nothing about it since. A webhook that hangs
// gives no such window: the calls made after it hung end only at their
// timeoutSeconds, and fail. No observation since the run began, an
// Unknown one (no traffic, fewer calls than minRequests) or a failed call
// in it vetoes nothing.
func SlowVetoed(probeCounts, apiserver Counts) bool {
	return probeCounts.Failures > 0 && probeCounts.Slow && !probeCounts.FailingSince.IsZero() &&
		apiserver.LastUnknown == nil && apiserver.Last.Outcome == probe.OutcomeHealthy &&
		!apiserver.SucceedingSince.IsZero() && !apiserver.SucceedingSince.Before(probeCounts.FailingSince)
}

// JudgeTarget is Judge over all of t's evidence: the direct probe's
// counts, the apiserver signal's, and the path probe's.
//
// A closed circuit opens when the direct probe has openAfter consecutive
// failures (SignalProbe) that kube-apiserver's own calls do not veto
// (SlowVetoed), or when the apiserver's calls failed for openAfter
// intervals and PathBroken confirms it with openAfter failed path probes
// (SignalAPIServer; SignalBoth when both), or when the path probe alone
// has openAfter failures in a row on a service road (SignalRoad):
// kube-apiserver cannot connect to the webhook's server, which no tenant
// can cause. The apiserver's calls alone cannot tell a broken road from
// requests that fail because of what they carry, which any tenant can
// send, so they open nothing without that confirmation.
//
// An open circuit the apiserver signal or the road opened on a service
// road closes on the path probe: closeAfter healthy path probes (and
// closeAfter healthy direct probes if the direct probe opened it too),
// while the direct probe is not failing. It returns SignalPath. No trial
// puts Fail back in a broken road.
//
// Any other open circuit closes after closeAfter healthy probes, unless
// PathBroken says the road is broken now: then Fail would reject requests
// again. (For a url road under withoutPathProbe: Open that is while the
// apiserver's last observation is failing, in Ignore mode; in Bypass mode
// the apiserver makes no calls, and a circuit it opened closes by trial.)
//
// An open circuit whose probe has been Unknown for closeAfter intervals
// (Counts.UnknownWhileOpen) closes on the apiserver's word alone when
// closeAfter of its observations in a row saw the webhook's calls succeed
// (only possible in Ignore mode, where the apiserver still calls it), and
// the returned signal is SignalAPIServer; otherwise it stays open.
func JudgeTarget(open bool, entry circuit.Entry, probeCounts, apiserver Counts, path Path, t config.Target) (Action, string) {
	if !t.APIServerSignal.Enabled {
		apiserver, path = Counts{}, Path{}
	}
	if !open {
		byProbe := Judge(false, probeCounts, t.OpenAfter, t.CloseAfter) == Open && !SlowVetoed(probeCounts, apiserver)
		byAPIServer := Judge(false, apiserver, t.OpenAfter, t.CloseAfter) == Open && PathBroken(path, t, t.OpenAfter)
		switch {
		case byProbe && byAPIServer:
			return Open, SignalBoth
		case byProbe:
			return Open, SignalProbe
		case byAPIServer:
			return Open, SignalAPIServer
		case t.APIServerSignal.Enabled && RoadBroken(path, t.OpenAfter):
			return Open, SignalRoad
		}
		return Stay, ""
	}
	if openedByRoad(entry) && path.Road == RoadService {
		if path.Successes < t.CloseAfter || probeCounts.Failures > 0 {
			return Stay, ""
		}
		if entry.Signal == SignalBoth && probeCounts.Successes < t.CloseAfter {
			return Stay, ""
		}
		return Close, SignalPath
	}
	if probeCounts.UnknownWhileOpen(t.CloseAfter) {
		if t.APIServerSignal.Enabled && apiserver.Successes >= t.CloseAfter {
			return Close, SignalAPIServer
		}
		return Stay, ""
	}
	if Judge(true, probeCounts, t.OpenAfter, t.CloseAfter) != Close {
		return Stay, ""
	}
	switch path.Road {
	case RoadService:
		if PathBroken(path, t, 1) {
			return Stay, ""
		}
	case RoadURL:
		if t.Mode == circuit.ModeIgnore && apiserver.Failures > 0 && apiserver.LastUnknown == nil && PathBroken(path, t, 1) {
			return Stay, ""
		}
	}
	return Close, ""
}

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
