package decide

import (
	"fmt"
	"maps"
	"time"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// Marking is armed around each transition of a mutating circuit, so that
// no object is admitted without both the webhook's mutation and the mark
// (circuit.ArmingAnnotation, docs/how-it-works.md "Ordering"):
//
//   - Before the write that opens a circuit, the breaker writes the entry
//     it is about to record into the arming entries, and opens only once
//     a canary shows kube-apiserver marking with it (marking.Keeper.Armed).
//     The opening write moves the entry into the record.
//   - The write that closes a circuit moves its entry from the record into
//     the arming entries, and the breaker removes it disarmAfter later:
//     kube-apiserver's webhook dispatcher sees a write only after its
//     informer's event handler has run, while the marking policy reads the
//     informer itself, so for a moment after the closing write the webhook
//     may still be skipped.
//
//   - Ahead of an opening: when a target of a mutating configuration has
//     ArmAheadAt consecutive failures (openAfter-1, when openAfter is at
//     least 3), the breaker arms it, and in the same write every other
//     target of the configuration whose circuit is closed and that has
//     failed at least once in a row (armAhead). By the time they reach
//     openAfter, the canary shows them armed, and the opening write is
//     the only write at the threshold. An entry armed ahead stays while
//     its target keeps failing, and goes as an abandoned arming
//     (disarmAfter after it was first seen) once it has recovered.
//
// Marks made while armed around a transition may be on objects the webhook
// did mutate: marks are hints, and an extra one is the safe error. Ahead of
// an opening the webhook is failing and its failurePolicy is still the
// original one, so under Fail the requests it matches are mostly refused,
// not admitted and marked.

// disarmAfter is how long marking stays armed after the write that closed
// its circuit, or after an opening that did not happen (circuit.DisarmAfter).
const disarmAfter = circuit.DisarmAfter

// armingStep is what the arming asks of a step.
type armingStep struct {
	err error
	// ask, when set, is a canary to send before deciding again.
	ask *askCanary
	// arm, when set, is the object to write first: the view with the
	// openings' entries armed. The opening waits for the next reconcile.
	arm *circuit.ConfigView
	// pending: the openings are armed, but kube-apiserver does not show
	// it yet; the opening waits MarkingPoll.
	pending bool
	// wait, when positive, is how long to wait before deciding again, to
	// remove an arming entry.
	wait time.Duration
	// annotations are next's annotations with the arming entries the
	// write carries.
	annotations map[string]string
	// hold, when set, are openings that must wait while the others go
	// (the arming hold): plan again without them (Inputs.Wait), and write
	// with armingFor and add, the entries of the held openings not armed
	// yet.
	hold map[string]bool
	add  circuit.Record
	// ahead are the targets whose marking is armed ahead of their
	// opening (armAhead), with their probe interval: their arming entries
	// stay while they fail, and the reconciler looks again every interval
	// to remove them once they have recovered.
	ahead map[string]time.Duration
	// unconfirmed are the openings that go without marking evidence,
	// by webhook, with why: they waited markingBound (markingWait).
	unconfirmed map[string]string
}

// arming returns next's annotations with the arming entries of the write
// from the snapshot to next (whose record is after), or says what must
// happen before that write. Without marking (validating configurations,
// or no MutatingAdmissionPolicy API) there is nothing to arm.
func (d *decision) arming(next *circuit.ConfigView, after circuit.Record, changes []Change) armingStep {
	view := d.s.View
	if !d.mk.On {
		return armingStep{annotations: next.Annotations}
	}
	if view.Annotations[circuit.OverrideAnnotation] != "" {
		// Handed to its administrators: the breaker arms nothing new.
		// The handoff keeps each entry in the record, which marks as an
		// arming entry does while failurePolicy stays Ignore.
		return d.armingFor(next, after, nil, nil)
	}
	ahead, missing := d.armAhead(after, changes)
	opening := openings(changes)
	var unconfirmed map[string]string
	if len(opening) > 0 {
		a := d.armOpenings(after, opening, missing)
		if a.err != nil || a.ask != nil || a.arm != nil || a.pending || a.hold != nil {
			a.ahead = ahead
			return a
		}
		unconfirmed = a.unconfirmed
	}
	a := d.armingFor(next, after, missing, ahead)
	a.unconfirmed = unconfirmed
	if a.err != nil || len(opening) > 0 || len(missing) > 0 {
		return a
	}
	// Armed ahead and nothing to write: ask kube-apiserver now whether
	// it marks with them, so that at the threshold the opening needs no
	// canary of its own.
	wait, ask := d.showAhead(ahead)
	if ask != nil {
		return armingStep{ask: ask}
	}
	if wait > 0 {
		a.wait = minPositive(a.wait, wait)
	}
	return a
}

// openings are the webhooks changes open.
func openings(changes []Change) []string {
	var out []string
	for _, c := range changes {
		if c.Kind == Opened {
			out = append(out, c.Webhook)
		}
	}
	return out
}

// mineArmed reports whether hook's arming entry is this installation's,
// for this configuration.
func (d *decision) mineArmed(hook string) bool {
	e, ok := d.s.Armed[hook]
	return ok && e.UID == d.s.View.UID && e.Mine(d.in.Signer)
}

// showAhead asks for a canary about the entries armed ahead of a target
// at ArmAheadAt failures (and its siblings armed with it) that no canary
// has shown armed yet, and returns MarkingPoll while one is still not
// shown. A canary that fails is no error here: the opening, when it comes,
// waits at most markingBound for evidence (armOpenings).
func (d *decision) showAhead(ahead map[string]time.Duration) (time.Duration, *askCanary) {
	due := false
	var cs []string
	for _, t := range d.in.Targets {
		if _, ok := ahead[t.Webhook]; !ok || !d.mineArmed(t.Webhook) {
			continue
		}
		due = due || d.in.Evidence[t.Webhook].Probe.Failures >= ArmAheadAt(t)
		cs = append(cs, t.Webhook)
	}
	if !due {
		return 0, nil
	}
	interval := MarkingBound(d.in.Targets, cs)
	notYet, failure, ask := d.m.unshown(cs, interval, d.now, d.mk.Asked)
	switch {
	case ask:
		return 0, &askCanary{hooks: notYet, timeout: interval}
	case failure != "":
		return interval, nil
	case len(notYet) == 0:
		return 0, nil
	}
	return MarkingPoll, nil
}

// armAhead returns the targets whose marking is armed ahead of their
// opening, with their probe intervals (ahead), and the arming entries the
// next write adds for those not armed yet (missing).
//
// A target is armed ahead while its circuit is closed, it has failed at
// least once in a row, and it would open at its threshold (Plan, as if it
// had reached it, even while HoldOpen holds it: not in Observe mode, not an Ignore
// that is the administrator's baseline). Those opening in this write (in
// after) are armed by armOpenings, not added here. Entries are added only
// when something in the configuration is about to open: an opening in
// changes, or a target at ArmAheadAt failures. A single failed probe,
// alone, arms nothing.
func (d *decision) armAhead(after circuit.Record, changes []Change) (map[string]time.Duration, circuit.Record) {
	entries := aheadEntries(d.s, d.in)
	if len(entries) == 0 {
		return nil, nil
	}
	ahead := map[string]time.Duration{}
	due := len(openings(changes)) > 0
	for _, t := range d.in.Targets {
		if _, ok := entries[t.Webhook]; !ok {
			continue
		}
		// An opening is armed by armOpenings; its entry is kept like the
		// others' should it wait (Inputs.Wait).
		ahead[t.Webhook] = t.Probe.Interval
		if _, opening := after[t.Webhook]; opening {
			delete(entries, t.Webhook)
			continue
		}
		due = due || d.in.Evidence[t.Webhook].Probe.Failures >= ArmAheadAt(t)
	}
	if !due {
		return ahead, nil
	}
	missing := circuit.Record{}
	for hook, entry := range entries {
		if a, ok := d.s.Armed[hook]; !ok || a.UID != d.s.View.UID && a.Mine(d.in.Signer) {
			missing[hook] = entry
		}
	}
	return ahead, missing
}

// aheadEntries returns the entries Plan would record for the targets of
// s that have failed at least once in a row and whose circuit is closed,
// if they reached their threshold now (want, as if they had; openEntry).
func aheadEntries(s Snapshot, in Inputs) circuit.Record {
	if s.RecordErr != nil {
		return nil
	}
	// The all-fail hold holds openings, not their arming: when it gives
	// way after its bound, the openings it held go at once, armed.
	pretend := in
	pretend.Wait, pretend.Only, pretend.HoldOpen = nil, "", false
	out := circuit.Record{}
	for _, t := range in.Targets {
		ev, known := in.Evidence[t.Webhook]
		if _, open := s.Record[t.Webhook]; !known || ev.Unprobeable != "" || open || t.Observes() || ev.Probe.Failures == 0 {
			continue
		}
		ev.Probe.Failures = max(ev.Probe.Failures, t.OpenAfter)
		pretend.Evidence = map[string]Evidence{t.Webhook: ev}
		if kind, signal := want(s.View, s.Record, t, pretend); kind == Opened {
			out[t.Webhook] = openEntry(s.View, t, signal, ev, in)
		}
	}
	return out
}

// armingFor returns next's annotations with the arming entries of the
// write from the snapshot to next (whose record is after): those a
// closing moves out of the record, those left from earlier until
// disarmAfter has passed since the latest of them (so that a mass closing
// is disarmed in one write), those armed ahead of an opening while their
// target fails (ahead), and add. An entry back in the record (an opening)
// needs no arming entry. Another installation's entries are left as they
// are.
func (d *decision) armingFor(next *circuit.ConfigView, after, add circuit.Record, ahead map[string]time.Duration) armingStep {
	uid := d.s.View.UID
	// Only a handoff gets here with an unreadable record (Plan refuses it
	// otherwise): no entry can be moved out of it, and the arming entries
	// already there go disarmAfter from now.
	before := d.s.Record
	want, mine, kept := circuit.Record{}, circuit.Record{}, circuit.Record{}
	var latest time.Time
	for hook, entry := range before {
		if _, stays := after[hook]; !stays && entry.UID == uid && entry.Mine(d.in.Signer) {
			mine[hook] = entry
			latest = d.m.armedAt(hook, d.now, true)
		}
	}
	for hook, entry := range d.s.Armed {
		_, inRecord := after[hook]
		_, failing := ahead[hook]
		switch {
		case !entry.Mine(d.in.Signer):
			want[hook] = entry // another installation's
		case inRecord:
			d.m.forgetArmed(hook)
		case mine[hook].UID != "":
		case failing && entry.UID == uid:
			// Armed ahead of an opening, and still failing. Its time
			// is noted: once it recovers, it goes as an abandoned
			// arming, disarmAfter after it was first seen (or after
			// its circuit closed).
			kept[hook] = entry
			d.m.armedAt(hook, d.now, false)
		default:
			mine[hook] = entry
			if at := d.m.armedAt(hook, d.now, false); at.After(latest) {
				latest = at
			}
		}
	}
	var wait time.Duration
	if left := disarmAfter - d.now.Sub(latest); len(mine) > 0 && left > 0 {
		maps.Copy(want, mine)
		wait = left
	} else {
		for hook := range mine {
			d.m.forgetArmed(hook)
		}
	}
	maps.Copy(want, kept)
	maps.Copy(want, add)
	d.m.armedNow(add, d.now)
	for hook, interval := range ahead {
		if _, ok := want[hook]; ok && interval > 0 {
			// Look again in one interval: an entry whose target has
			// recovered goes.
			wait = minPositive(wait, interval)
		}
	}
	annotations, err := circuit.EncodeArming(maps.Clone(next.Annotations), want)
	if err != nil {
		return armingStep{err: err}
	}
	return armingStep{wait: wait, annotations: annotations, ahead: ahead}
}

// armOpenings arms the openings' marking policies before the write that
// opens them: it needs each installed as this release renders it (else a
// MarkingFailed report), and asks one canary whether kube-apiserver marks
// with those already armed. Those it does open now, and the write that
// opens them arms the others (the arming hold); when none does, it asks
// for the arming write if an opening is not armed yet, and else waits
// (pending).
//
// No opening waits for that evidence longer than markingBound after it
// was first wanted (markingWait): a circuit left closed on a broken
// webhook refuses every request, and the canary itself goes through
// admission, so a failing webhook that intercepts Events can refuse it
// for as long as the outage lasts. Such an opening goes unconfirmed, with
// why (armingStep.unconfirmed); the record entry it writes arms its
// marking all the same.
//
// ahead are the entries armed ahead of their opening that the write adds
// (armAhead): they go with the first write, the arming one or the opening
// one.
func (d *decision) armOpenings(after circuit.Record, opening []string, ahead circuit.Record) armingStep {
	uid := d.s.View.UID
	bound := MarkingBound(d.in.Targets, opening)
	why, waitedOut, left := d.checkPolicies(opening, bound)
	missing := circuit.Record{}
	var armedOnes []string
	for _, hook := range opening {
		switch {
		case why[hook] != "":
		case d.s.Armed[hook].UID != uid:
			missing[hook] = after[hook]
			why[hook] = "its arming write was not shown by a canary within " + bound.String()
		default:
			armedOnes = append(armedOnes, hook)
		}
	}
	if len(armedOnes) > 0 && left > 0 {
		// A canary only while some opening may still wait for it, and
		// for no longer than that.
		notYet, failure, ask := d.m.unshown(armedOnes, bound, d.now, d.mk.Asked)
		if ask {
			return armingStep{ask: &askCanary{hooks: notYet, timeout: min(left, bound)}}
		}
		for _, hook := range notYet {
			why[hook] = fmt.Sprintf("kube-apiserver did not show the policy armed within %s (is the MutatingAdmissionPolicy admission plugin on, and does no later mutating webhook strip the canary's annotations?)", bound)
			if failure != "" {
				why[hook] = failure
			}
		}
	} else {
		for _, hook := range armedOnes {
			why[hook] = d.m.unshownWhy(bound)
		}
	}
	hold := map[string]bool{}
	unconfirmed := map[string]string{}
	for hook, reason := range why {
		if !waitedOut[hook] {
			hold[hook] = true
			continue
		}
		unconfirmed[hook] = reason
		delete(missing, hook) // its record entry arms it
	}
	switch {
	case len(hold) == 0:
		return armingStep{unconfirmed: unconfirmed}
	case len(hold) < len(opening):
		// Some can open now: they do, and the others are armed in the
		// same write.
		maps.Copy(missing, ahead)
		return armingStep{hold: hold, add: missing, unconfirmed: unconfirmed}
	case len(missing) > 0:
		maps.Copy(missing, ahead)
		arm, err := d.armWrite(missing)
		return armingStep{arm: arm, err: err}
	default:
		return armingStep{pending: true}
	}
}

// armWrite is the object of an arming write: the snapshot with add
// armed besides its arming entries, and nothing else changed. Both an
// opening that waits for its marking (armOpenings) and openings that wait
// for a sibling (coalescing) arm through it.
func (d *decision) armWrite(add circuit.Record) (*circuit.ConfigView, error) {
	want := maps.Clone(d.s.Armed)
	maps.Copy(want, add)
	d.m.armedNow(add, d.now)
	arm := d.s.View.DeepCopy()
	annotations, err := circuit.EncodeArming(maps.Clone(d.s.View.Annotations), want)
	if err != nil {
		return nil, err
	}
	arm.Annotations = annotations
	return arm, nil
}

// checkPolicies returns why the marking policy of each opening is not in
// place (Marking.Policies; reported once per opening), which openings
// have waited out bound (markingWait), and the least time any of them may
// still wait.
func (d *decision) checkPolicies(opening []string, bound time.Duration) (why map[string]string, waitedOut map[string]bool, left time.Duration) {
	why, waitedOut, left = map[string]string{}, map[string]bool{}, bound
	for _, hook := range opening {
		remaining, first := d.m.markingWait(hook, bound, d.now)
		waitedOut[hook] = remaining <= 0
		left = min(left, max(remaining, 0))
		if problem := d.mk.Policies[hook]; problem != "" {
			why[hook] = problem
			if first {
				if d.markingFailed == nil {
					d.markingFailed = map[string]string{}
				}
				d.markingFailed[hook] = problem
			}
		}
	}
	return why, waitedOut, left
}

// MarkingBound is how long an opening of hooks waits at most for evidence
// that kube-apiserver marks with its policy, and how long a canary may
// take: one probe interval of the slowest of their targets, and at least
// disarmAfter, the time the breaker already allows kube-apiserver's
// webhook dispatcher to see a write.
func MarkingBound(targets []config.Target, hooks []string) time.Duration {
	bound := disarmAfter
	for _, t := range targets {
		for _, hook := range hooks {
			if t.Webhook == hook {
				bound = max(bound, t.Probe.Interval)
			}
		}
	}
	return bound
}
