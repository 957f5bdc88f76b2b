package apimetrics

import (
	"fmt"
	"time"
)

// Verdict is what one observation says about a webhook.
type Verdict string

const (
	// Failing: enough calls were made and too many of them failed.
	Failing Verdict = "Failing"
	// Healthy: calls were made and they succeeded.
	Healthy Verdict = "Healthy"
	// Unknown: no traffic, too little of it yet, a counter reset, or no
	// scrape. Like an Unknown probe, it moves no counter.
	Unknown Verdict = "Unknown"
)

// Thresholds judge a webhook's calls.
type Thresholds struct {
	// MinRequests is the fewest calls judged at once. Fewer calls are
	// kept and added to the next interval's, up to MaxWindow.
	MinRequests int
	// FailureRatio is the share of failed calls (calling_webhook_error
	// plus fail-open) that makes the window Failing.
	FailureRatio float64
	// FastWithin, when set, is how long a call may take and still count
	// as fast in Result.Traffic (the probe's timeout): the calls above the
	// highest latency bucket bound at or below it are Traffic.Slow. It
	// needs the latency histogram (ParseOptions.Latency); without it every
	// call is Slow.
	FastWithin time.Duration
}

// Observation is one judged window of one webhook's calls.
type Observation struct {
	Verdict Verdict
	// Calls and Failed are the calls made, and those that failed, in the
	// window.
	Calls, Failed float64
	// Window is how long the window was.
	Window time.Duration
	// Why explains an Unknown.
	Why string
}

// String describes o for Events and logs, for example "apiserver: 37 of
// 40 calls failed (calling_webhook_error or fail-open) in the last 1s".
func (o Observation) String() string {
	switch o.Verdict {
	case Unknown:
		return "apiserver: unknown (" + o.Why + ")"
	case Failing:
		return fmt.Sprintf("apiserver: %.0f of %.0f calls failed (calling_webhook_error or fail-open) in the last %s", o.Failed, o.Calls, o.Window.Round(10*time.Millisecond))
	default:
		return fmt.Sprintf("apiserver: %.0f of %.0f calls failed in the last %s", o.Failed, o.Calls, o.Window.Round(10*time.Millisecond))
	}
}

// NoInstance is the Why of every observation of a scrape whose metrics
// carry no ProcessStartTime: the apiserver instance it reached cannot be
// told from another, so its counters are compared with nothing.
const NoInstance = "the apiserver's /metrics carry no " + ProcessStartTime + ", so the apiserver instance cannot be told from another; nothing is compared"

// MaxInstances is how many apiserver instances the Tracker remembers. An
// HA control plane has three or five; more means instances come and go,
// and the oldest are forgotten.
const MaxInstances = 16

// Tracker turns successive Samples into Observations. Counters are only
// ever compared with an earlier scrape of the same apiserver instance,
// told apart by ProcessStartTime (a Sample without it is Unknown):
// behind a Service each scrape may reach another apiserver, whose
// counters have nothing to do with the last one's. A counter that went
// down, or a webhook with fewer series than before, is a reset: Unknown,
// never a negative rate. Not safe for concurrent use.
type Tracker struct {
	// MaxWindow is the longest a window of too few calls is kept open
	// before it is dropped as Unknown.
	MaxWindow time.Duration

	instances map[float64]*instance
}

type instance struct {
	seen time.Time
	// base is where each webhook's current window starts.
	base map[Webhook]point
	// last is each webhook's previous scrape, for Admitted.
	last map[Webhook]Counters
	// lastAt is when the previous Observe scraped this instance, and
	// latency each webhook's latency histogram then, for Traffic.
	lastAt  time.Time
	latency map[Webhook]Histogram
}

type point struct {
	Counters
	at time.Time
}

// Result is what one Sample says about one webhook.
type Result struct {
	Observation
	// Admitted is how many requests the apiserver admitted without the
	// webhook since the previous scrape of the same instance: calls kept
	// from it by a matchCondition (once per request, see admitted), and
	// failed calls under Ignore.
	Admitted float64
	// Marked is how many objects its marking policy marked since then.
	Marked float64
	// Traffic is the calls made since the previous Observe of the same
	// instance; its Window is zero when they cannot be known (first scrape
	// of an instance, a reset, no instance).
	Traffic Traffic
}

// Traffic is what the apiserver's calls to a webhook between two scrapes
// say, whatever the minRequests window: how many completed, how many of
// them failed, and how many were not fast.
type Traffic struct {
	Calls, Failed float64
	// Slow is how many calls may have taken longer than
	// Thresholds.FastWithin; zero when that is unset.
	Slow float64
	// Window is the time between the two scrapes.
	Window time.Duration
}

// Healthy reports whether tr shows at least one call, and every call
// answered, in time: evidence worth one healthy probe.
func (tr Traffic) Healthy() bool {
	return tr.Window > 0 && tr.Calls >= 1 && tr.Failed == 0 && tr.Slow == 0
}

// Observe compares s, scraped at now, with the earlier scrapes of the
// same instance and returns a Result per webhook in want.
func (t *Tracker) Observe(s Sample, now time.Time, want map[Webhook]Thresholds) map[Webhook]Result {
	if t.instances == nil {
		t.instances = map[float64]*instance{}
	}
	if s.Instance == 0 {
		// Without the start time two apiservers behind one Service would
		// share one baseline, and their counters have nothing to do with
		// each other: nothing is compared, and nothing is remembered.
		out := make(map[Webhook]Result, len(want))
		for wh := range want {
			out[wh] = Result{Observation: Observation{Verdict: Unknown, Why: NoInstance}}
		}
		return out
	}
	in := t.instances[s.Instance]
	first := in == nil
	if first {
		t.forgetOldest()
		in = &instance{base: map[Webhook]point{}, last: map[Webhook]Counters{}, latency: map[Webhook]Histogram{}}
		t.instances[s.Instance] = in
	}
	in.seen = now
	since := now.Sub(in.lastAt)
	in.lastAt = now
	out := make(map[Webhook]Result, len(want))
	for wh, th := range want {
		cur := s.Webhooks[wh]
		last, hadLast := in.last[wh]
		in.last[wh] = cur
		base, hadBase := in.base[wh]
		r := Result{}
		switch {
		case first:
			r.Why = "first scrape of this apiserver instance"
		case reset(last, cur) || (hadBase && reset(base.Counters, cur)):
			r.Why = "the apiserver's counters were reset"
		case !hadLast:
			r.Why = "first scrape of this apiserver instance"
		default:
			r.Marked = cur.Marked - last.Marked
			r.Admitted = admitted(cur.Excluded-last.Excluded, r.Marked, cur.FailOpen-last.FailOpen)
			r.Traffic = traffic(last, cur, in.latency[wh], s.Latency[wh], th.FastWithin, since)
		}
		if h, ok := s.Latency[wh]; ok {
			in.latency[wh] = h
		} else {
			delete(in.latency, wh)
		}
		if r.Why != "" {
			in.base[wh] = point{cur, now}
			r.Verdict = Unknown
			out[wh] = r
			continue
		}
		if !hadBase {
			base = point{last, now}
		}
		r.Observation = judge(base, point{cur, now}, th, t.MaxWindow)
		if r.Verdict != Unknown || r.Calls == 0 || now.Sub(base.at) >= t.MaxWindow {
			in.base[wh] = point{cur, now}
		}
		out[wh] = r
	}
	return out
}

// Admitted is Observe without the judging: it returns, for each webhook in
// want, what the apiserver admitted without it (Result.Admitted and
// Marked) since the previous scrape of the same instance, and moves only
// that mark forward. The windows Observe judges are left as they are, so
// an extra scrape (the breaker's, just before a circuit closes) neither
// adds an observation nor counts a request twice. Everything else in the
// Results is zero.
func (t *Tracker) Admitted(s Sample, want map[Webhook]bool) map[Webhook]Result {
	out := make(map[Webhook]Result, len(want))
	in := t.instances[s.Instance]
	if s.Instance == 0 || in == nil {
		return out
	}
	for wh := range want {
		cur := s.Webhooks[wh]
		last, ok := in.last[wh]
		if !ok || reset(last, cur) {
			continue
		}
		in.last[wh] = cur
		// Traffic compares the latency histograms with the same scrape
		// as the counters.
		if h, ok := s.Latency[wh]; ok {
			in.latency[wh] = h
		} else {
			delete(in.latency, wh)
		}
		marked := cur.Marked - last.Marked
		out[wh] = Result{Admitted: admitted(cur.Excluded-last.Excluded, marked, cur.FailOpen-last.FailOpen), Marked: marked}
	}
	return out
}

// admitted is how many requests the apiserver admitted without a webhook,
// from the growth of its counters: excluded by a matchCondition, marked
// by the webhook's marking policy, and failed open under Ignore.
//
// A marking policy's mark changes the object, so kube-apiserver runs its
// mutating webhooks once more (reinvocation), and evaluates the bypass
// matchCondition again: every marked request is excluded twice (measured
// on 1.37.2: 196 exclusions for 99 marked objects). Each mark therefore
// stands for one exclusion too many.
func admitted(excluded, marked, failOpen float64) float64 {
	return max(excluded-marked, 0) + failOpen
}

// traffic is the calls between two scrapes of one webhook's counters
// (last, cur) and latency histograms (was, is), since apart.
func traffic(last, cur Counters, was, is Histogram, fastWithin, since time.Duration) Traffic {
	tr := Traffic{
		Calls:  cur.Calls - last.Calls,
		Failed: (cur.CallErrors - last.CallErrors) + (cur.FailOpen - last.FailOpen),
		Window: since,
	}
	if fastWithin <= 0 || tr.Calls == 0 {
		return tr
	}
	tr.Slow = tr.Calls
	// A histogram missing from either scrape leaves every call unknown.
	d, ok := is.Sub(was)
	if !ok || len(was.Buckets) == 0 {
		return tr
	}
	// The highest bound at or below fastWithin: a call counted there took
	// at most that long. Calls above it may have taken longer.
	fast := 0.0
	for _, b := range d.Buckets {
		if b.UpperBound <= fastWithin.Seconds() {
			fast = max(fast, b.Count)
		}
	}
	tr.Slow = max(tr.Calls-fast, 0)
	return tr
}

// judge judges the calls between from and to.
func judge(from, to point, th Thresholds, maxWindow time.Duration) Observation {
	o := Observation{
		Calls:  to.Calls - from.Calls,
		Failed: (to.CallErrors - from.CallErrors) + (to.FailOpen - from.FailOpen),
		Window: to.at.Sub(from.at),
	}
	switch {
	case o.Calls == 0:
		o.Verdict, o.Why = Unknown, "no calls"
	case o.Calls < float64(th.MinRequests):
		o.Verdict, o.Why = Unknown, fmt.Sprintf("%.0f calls, fewer than minRequests %d", o.Calls, th.MinRequests)
		if o.Window >= maxWindow {
			o.Why += " within " + maxWindow.String()
		}
	case o.Failed/o.Calls >= th.FailureRatio:
		o.Verdict = Failing
	default:
		o.Verdict = Healthy
	}
	return o
}

// reset reports whether cur cannot follow prev on the same counters.
func reset(prev, cur Counters) bool {
	return cur.Calls < prev.Calls || cur.CallErrors < prev.CallErrors || cur.FailOpen < prev.FailOpen ||
		cur.Excluded < prev.Excluded || cur.Marked < prev.Marked || cur.Series < prev.Series
}

func (t *Tracker) forgetOldest() {
	for len(t.instances) >= MaxInstances {
		var oldest float64
		var at time.Time
		for k, in := range t.instances {
			if at.IsZero() || in.seen.Before(at) {
				oldest, at = k, in.seen
			}
		}
		delete(t.instances, oldest)
	}
}
