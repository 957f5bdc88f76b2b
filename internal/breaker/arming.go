package breaker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
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

// armingStep is what the arming asks of a reconcile.
type armingStep struct {
	// arm, when set, is the object to write first: the view with the
	// openings' entries armed. The opening waits for the next reconcile.
	arm *circuit.ConfigView
	// pending: the openings are armed, but kube-apiserver does not show
	// it yet; the opening waits markingPoll.
	pending bool
	// wait, when positive, is how long to wait before deciding again, to
	// remove an arming entry.
	wait time.Duration
	// annotations are next's annotations with the arming entries the
	// write carries.
	annotations map[string]string
	// hold, when set, are openings that must wait while the others go:
	// Plan again without them (Inputs.Wait), and write with armingFor
	// and add, the entries of the held openings not armed yet.
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
// from view to next, or says what must happen before that write
// (armingStep). It changes neither. Without a
// Marker (validating configurations, or no MutatingAdmissionPolicy API)
// there is nothing to arm.
func (r *ConfigurationReconciler) arming(ctx context.Context, cur client.Object, view, next *circuit.ConfigView, changes []decide.Change, in decide.Inputs) (armingStep, error) {
	if r.Marker == nil {
		return armingStep{annotations: next.Annotations}, nil
	}
	if view.Annotations[circuit.OverrideAnnotation] != "" {
		// Handed to its administrators: the breaker arms nothing new.
		// The handoff removes the bypass as a closing does, so it keeps
		// the order of a closing: the entries it takes out of the record
		// stay armed in its write, and go disarmAfter later, in a write
		// of their own (one write that did both let creates escape both
		// the mutation and the mark).
		return r.armingFor(view, next, nil, nil)
	}
	armed, err := circuit.DecodeArming(view.Annotations)
	if err != nil {
		// Only the breaker writes them, and they only arm marking:
		// rewrite them.
		logf.FromContext(ctx).Info("Rewriting unreadable arming entries", "error", err)
		armed = circuit.Record{}
	}
	after, err := circuit.Decode(next.Annotations)
	if err != nil {
		return armingStep{}, err
	}
	ahead, missing := r.armAhead(view, in, armed, after, changes)

	var opening []marking.Circuit
	for _, c := range changes {
		if c.Kind == decide.Opened {
			opening = append(opening, marking.Circuit{Configuration: view.Name, Webhook: c.Webhook})
		}
	}
	var unconfirmed map[string]string
	if len(opening) > 0 {
		step, err := r.armOpenings(ctx, cur, view, in, armed, after, opening, missing)
		if err != nil || step.arm != nil || step.pending || step.hold != nil {
			step.ahead = ahead
			return step, err
		}
		unconfirmed = step.unconfirmed
	}

	step, err := r.armingFor(view, next, missing, ahead)
	step.unconfirmed = unconfirmed
	if err != nil || len(opening) > 0 || len(missing) > 0 {
		return step, err
	}
	// Armed ahead and nothing to write: ask kube-apiserver now whether
	// it marks with them, so that at the threshold the opening needs no
	// canary of its own.
	if wait := r.showAhead(ctx, view, in, armed, ahead); wait > 0 {
		step.wait = minPositive(step.wait, wait)
	}
	return step, nil
}

// showAhead sends a canary for the entries armed ahead of a target at
// ArmAheadAt failures (and its siblings armed with it) that no canary has
// shown armed yet, and returns markingPoll while one is still not shown.
// A canary that fails is no error here: the opening, when it comes, waits
// at most markingBound for evidence (armOpenings).
func (r *ConfigurationReconciler) showAhead(ctx context.Context, view *circuit.ConfigView, in decide.Inputs, armed circuit.Record, ahead map[string]time.Duration) time.Duration {
	due := false
	var cs []marking.Circuit
	for _, t := range in.Targets {
		if _, ok := ahead[t.Webhook]; !ok || armed[t.Webhook].UID != view.UID || !armed[t.Webhook].Mine(r.Signer) {
			continue
		}
		due = due || in.Evidence[t.Webhook].Probe.Failures >= ArmAheadAt(t)
		cs = append(cs, marking.Circuit{Configuration: view.Name, Webhook: t.Webhook})
	}
	if !due {
		return 0
	}
	interval := markingBound(in.Targets, cs)
	notYet, err := r.armedShown(ctx, view.UID, cs, interval, interval)
	switch {
	case err != nil:
		logf.FromContext(ctx).V(1).Info("Marking canary ahead of an opening failed", "error", err)
		return interval
	case len(notYet) == 0:
		return 0
	}
	return markingPoll
}

// armedShown returns the circuits of cs, all armed in the configuration
// (by UID) as this reconciler last read it, that kube-apiserver does not
// show marking with yet. One canary asks for those no earlier canary has
// shown armed: kube-apiserver's view of an arming entry only moves
// forward, and the breaker forgets what a canary showed whenever it adds
// or removes that entry (armedNow, forgetArmed), so what a canary showed
// once holds until then. No canary is sent when every one was shown.
//
// The canary goes through admission, so a failing webhook that
// intercepts Events (a policy engine's */*) makes it wait and fail: it is
// bounded by timeout (and bound), and after a failure none is sent for
// the configuration for bound, when the last failure is returned instead.
func (r *ConfigurationReconciler) armedShown(ctx context.Context, uid types.UID, cs []marking.Circuit, bound, timeout time.Duration) ([]marking.Circuit, error) {
	var ask []marking.Circuit
	r.mu.Lock()
	for _, c := range cs {
		if !r.shown[string(uid)+"/"+c.Webhook] {
			ask = append(ask, c)
		}
	}
	r.mu.Unlock()
	if len(ask) == 0 {
		return nil, nil
	}
	if err := r.recentCanaryFailure(uid, bound); err != nil {
		return ask, err
	}
	if timeout <= 0 || timeout > bound {
		timeout = bound
	}
	canaryCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	notYet, err := r.Marker.Armed(canaryCtx, ask)
	if err != nil {
		r.Metrics.CanaryFailures.Inc()
		r.noteCanaryFailure(uid, err)
		return ask, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shown == nil {
		r.shown = map[string]bool{}
	}
	for _, c := range ask {
		if !slices.Contains(notYet, c) {
			r.shown[string(uid)+"/"+c.Webhook] = true
		}
	}
	return notYet, nil
}

// armAhead returns the targets of view whose marking is armed ahead of
// their opening, with their probe intervals (ahead), and the arming
// entries the next write adds for those not armed yet (missing).
//
// A target is armed ahead while its circuit is closed (in view), it has
// failed at least once in a row, and it would open at its threshold
// (Plan, as if it had reached it: not in Observe mode, not held by
// HoldOpen, not an Ignore that is the administrator's baseline). Those
// opening in this write (in after) are armed by armOpenings, not added
// here. Entries are added only when something in the configuration is
// about to open: an opening in changes, or a target at ArmAheadAt
// failures. A single failed probe, alone, arms nothing.
func (r *ConfigurationReconciler) armAhead(view *circuit.ConfigView, in decide.Inputs, armed, after circuit.Record, changes []decide.Change) (map[string]time.Duration, circuit.Record) {
	entries := aheadEntries(view, in)
	if len(entries) == 0 {
		return nil, nil
	}
	ahead := map[string]time.Duration{}
	due := false
	for _, c := range changes {
		due = due || c.Kind == decide.Opened
	}
	for _, t := range in.Targets {
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
		due = due || in.Evidence[t.Webhook].Probe.Failures >= ArmAheadAt(t)
	}
	if !due {
		return ahead, nil
	}
	missing := circuit.Record{}
	for hook, entry := range entries {
		if a, ok := armed[hook]; !ok || a.UID != view.UID && a.Mine(r.Signer) {
			missing[hook] = entry
		}
	}
	return ahead, missing
}

// aheadEntries returns the entries Plan would record for the targets of
// view that have failed at least once in a row and whose circuit is
// closed, if they reached their threshold now.
func aheadEntries(view *circuit.ConfigView, in decide.Inputs) circuit.Record {
	if in.HoldOpen {
		return nil
	}
	rec, err := circuit.Decode(view.Annotations)
	if err != nil {
		return nil
	}
	pretend := in
	pretend.Evidence, pretend.Wait, pretend.Only = map[string]decide.Evidence{}, nil, ""
	var names []string
	for _, t := range in.Targets {
		ev, known := in.Evidence[t.Webhook]
		if _, open := rec[t.Webhook]; !known || ev.Unprobeable != "" || open || t.Observes() || ev.Probe.Failures == 0 {
			continue
		}
		ev.Probe.Failures = max(ev.Probe.Failures, t.OpenAfter)
		pretend.Evidence[t.Webhook] = ev
		names = append(names, t.Webhook)
	}
	if len(names) == 0 {
		return nil
	}
	next, _, err := decide.Plan(view, pretend)
	if err != nil {
		return nil
	}
	would, err := circuit.Decode(next.Annotations)
	if err != nil {
		return nil
	}
	out := circuit.Record{}
	for _, hook := range names {
		if entry, ok := would[hook]; ok && entry.UID == view.UID && entry.Mine(in.Signer) {
			out[hook] = entry
		}
	}
	return out
}

// armingFor returns next's annotations with the arming entries of the
// write from view to next: those a closing moves out of the record, those
// left from earlier until disarmAfter has passed since the latest of them
// (so that a mass closing is disarmed in one write), those armed ahead of
// an opening while their target fails (ahead), and add. An entry back in
// the record (an opening) needs no arming entry. Another installation's
// entries are left as they are.
func (r *ConfigurationReconciler) armingFor(view, next *circuit.ConfigView, add circuit.Record, ahead map[string]time.Duration) (armingStep, error) {
	armed, err := circuit.DecodeArming(view.Annotations)
	if err != nil {
		armed = circuit.Record{} // only the breaker writes them: rewrite them
	}
	before, err := circuit.Decode(view.Annotations)
	if err != nil {
		// Only a handoff gets here with an unreadable record (Plan
		// refuses it otherwise): no entry can be moved out of it, and
		// the arming entries already there go disarmAfter from now.
		before = circuit.Record{}
	}
	after, err := circuit.Decode(next.Annotations)
	if err != nil {
		return armingStep{}, err
	}
	want, mine, kept := circuit.Record{}, circuit.Record{}, circuit.Record{}
	now := now(r.Clock)
	var latest time.Time
	for hook, entry := range before {
		if _, stays := after[hook]; !stays && entry.UID == view.UID && entry.Mine(r.Signer) {
			mine[hook] = entry
			latest = r.armedAt(view.UID, hook, now, true)
		}
	}
	for hook, entry := range armed {
		_, inRecord := after[hook]
		_, failing := ahead[hook]
		switch {
		case !entry.Mine(r.Signer):
			want[hook] = entry // another installation's
		case inRecord:
			r.forgetArmed(view.UID, hook)
		case mine[hook].UID != "":
		case failing && entry.UID == view.UID:
			// Armed ahead of an opening, and still failing. Its time
			// is noted: once it recovers, it goes as an abandoned
			// arming, disarmAfter after it was first seen (or after
			// its circuit closed).
			kept[hook] = entry
			r.armedAt(view.UID, hook, now, false)
		default:
			mine[hook] = entry
			if at := r.armedAt(view.UID, hook, now, false); at.After(latest) {
				latest = at
			}
		}
	}
	var wait time.Duration
	if left := disarmAfter - now.Sub(latest); len(mine) > 0 && left > 0 {
		maps.Copy(want, mine)
		wait = left
	} else {
		for hook := range mine {
			r.forgetArmed(view.UID, hook)
		}
	}
	maps.Copy(want, kept)
	maps.Copy(want, add)
	r.armedNow(view.UID, add, now)
	for hook, interval := range ahead {
		if _, ok := want[hook]; ok && interval > 0 {
			// Look again in one interval: an entry whose target has
			// recovered goes.
			wait = minPositive(wait, interval)
		}
	}
	annotations, err := circuit.EncodeArming(maps.Clone(next.Annotations), want)
	if err != nil {
		return armingStep{}, err
	}
	return armingStep{wait: wait, annotations: annotations, ahead: ahead}, nil
}

// armOpenings arms the openings' marking policies before the write that
// opens them: it checks that each is installed as this release renders it
// (else a MarkingFailed Event), and asks one canary whether kube-apiserver
// marks with those already armed. Those it does open now, and the write
// that opens them arms the others (hold); when none does, it asks for the
// arming write if an opening is not armed yet, and else waits (pending).
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
func (r *ConfigurationReconciler) armOpenings(ctx context.Context, cur client.Object, view *circuit.ConfigView, in decide.Inputs, armed, after circuit.Record, opening []marking.Circuit, ahead circuit.Record) (armingStep, error) {
	bound := markingBound(in.Targets, opening)
	now := now(r.Clock)
	why, waitedOut, left := r.checkPolicies(ctx, cur, view.UID, opening, bound, now)
	missing := circuit.Record{}
	var armedOnes []marking.Circuit
	for _, c := range opening {
		switch {
		case why[c.Webhook] != "":
		case armed[c.Webhook].UID != view.UID:
			missing[c.Webhook] = after[c.Webhook]
			why[c.Webhook] = "its arming write was not shown by a canary within " + bound.String()
		default:
			armedOnes = append(armedOnes, c)
		}
	}
	if len(armedOnes) > 0 && left > 0 {
		// A canary only while some opening may still wait for it, and
		// for no longer than that.
		notYet, err := r.armedShown(ctx, view.UID, armedOnes, bound, left)
		for _, c := range notYet {
			why[c.Webhook] = fmt.Sprintf("kube-apiserver did not show the policy armed within %s (is the MutatingAdmissionPolicy admission plugin on, and does no later mutating webhook strip the canary's annotations?)", bound)
			if err != nil {
				why[c.Webhook] = err.Error()
			}
		}
	} else {
		for _, c := range armedOnes {
			why[c.Webhook] = r.unshownWhy(view.UID, bound)
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
	if len(unconfirmed) > 0 {
		logf.FromContext(ctx).Info("Opening without marking evidence: the wait for it is bounded", "bound", bound, "unconfirmed", unconfirmed)
	}
	switch {
	case len(hold) == 0:
		return armingStep{unconfirmed: unconfirmed}, nil
	case len(hold) < len(opening):
		// Some can open now: they do, and the others are armed in the
		// same write.
		maps.Copy(missing, ahead)
		return armingStep{hold: hold, add: missing, unconfirmed: unconfirmed}, nil
	case len(missing) > 0:
		want := maps.Clone(armed)
		maps.Copy(want, missing)
		maps.Copy(want, ahead)
		r.armedNow(view.UID, missing, now)
		r.armedNow(view.UID, ahead, now)
		arm := view.DeepCopy()
		annotations, err := circuit.EncodeArming(maps.Clone(view.Annotations), want)
		if err != nil {
			return armingStep{}, err
		}
		arm.Annotations = annotations
		return armingStep{arm: arm}, nil
	default:
		return armingStep{pending: true}, nil
	}
}

// checkPolicies checks the marking policy of each opening (Marker.Check),
// and returns why each one that is not in place is not (reported once per
// opening), which openings have waited out bound (markingWait), and the
// least time any of them may still wait.
func (r *ConfigurationReconciler) checkPolicies(ctx context.Context, cur client.Object, uid types.UID, opening []marking.Circuit, bound time.Duration, now time.Time) (why map[string]string, waitedOut map[string]bool, left time.Duration) {
	why, waitedOut, left = map[string]string{}, map[string]bool{}, bound
	for _, c := range opening {
		remaining, first := r.markingWait(uid, c.Webhook, bound, now)
		waitedOut[c.Webhook] = remaining <= 0
		left = min(left, max(remaining, 0))
		if err := r.Marker.Check(ctx, c); err != nil {
			why[c.Webhook] = err.Error()
			if first {
				r.markingFailed(cur, err)
			}
		}
	}
	return why, waitedOut, left
}

// markingBound is how long an opening of cs waits at most for evidence
// that kube-apiserver marks with its policy, and how long a canary may
// take: one probe interval of the slowest of their targets, and at least
// disarmAfter, the time the breaker already allows kube-apiserver's
// webhook dispatcher to see a write.
func markingBound(targets []config.Target, cs []marking.Circuit) time.Duration {
	bound := disarmAfter
	for _, t := range targets {
		for _, c := range cs {
			if t.Webhook == c.Webhook {
				bound = max(bound, t.Probe.Interval)
			}
		}
	}
	return bound
}

// markingWait notes that hook's opening, in the configuration of uid, is
// wanted at now, and returns how much longer it may wait for marking
// evidence (zero or less: it has waited bound), and whether this is the
// first time (first). The wait counts from when it was first wanted, or
// from when its arming entry was written ahead of it, whichever is
// earlier: a canary that failed ahead of the threshold is not waited for
// again. A wait not seen for bound was abandoned (the target recovered):
// the next one starts anew.
func (r *ConfigurationReconciler) markingWait(uid types.UID, hook string, bound time.Duration, now time.Time) (left time.Duration, first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waits == nil {
		r.waits = map[string]wait{}
	}
	key := string(uid) + "/" + hook
	w, ok := r.waits[key]
	if !ok || now.Sub(w.seen) > bound {
		w, first = wait{since: now}, true
		if armed, ok := r.armedSince[key]; ok && armed.Before(w.since) {
			w.since = armed
		}
	}
	w.seen = now
	r.waits[key] = w
	return bound - now.Sub(w.since), first
}

// unshownWhy says why an armed opening that sent no canary this time has
// no evidence: the last canary's failure, or that none showed it armed.
func (r *ConfigurationReconciler) unshownWhy(uid types.UID, bound time.Duration) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.canaryFailures[string(uid)]; ok {
		return f.err.Error()
	}
	return fmt.Sprintf("kube-apiserver did not show the policy armed within %s", bound)
}

// wait is when an opening was first and last wanted while it waited for
// marking evidence.
type wait struct{ since, seen time.Time }

// forgetWaits forgets the waits of the openings written in changes.
func (r *ConfigurationReconciler) forgetWaits(uid types.UID, changes []decide.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range changes {
		if c.Kind == decide.Opened {
			delete(r.waits, string(uid)+"/"+c.Webhook)
		}
	}
}

// recentCanaryFailure returns the last canary failure of the
// configuration of uid when it is less than bound old.
func (r *ConfigurationReconciler) recentCanaryFailure(uid types.UID, bound time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.canaryFailures[string(uid)]
	if !ok || now(r.Clock).Sub(f.at) >= bound {
		return nil
	}
	return f.err
}

// noteCanaryFailure records that a canary about the configuration of uid
// failed with err.
func (r *ConfigurationReconciler) noteCanaryFailure(uid types.UID, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.canaryFailures == nil {
		r.canaryFailures = map[string]canaryFailure{}
	}
	r.canaryFailures[string(uid)] = canaryFailure{at: now(r.Clock), err: err}
}

type canaryFailure struct {
	at  time.Time
	err error
}

// noteUnconfirmed adds to the Event of each opening in unconfirmed that
// it went without marking evidence, and why, and counts it.
func (r *ConfigurationReconciler) noteUnconfirmed(configuration string, changes []decide.Change, unconfirmed map[string]string) []decide.Change {
	if len(unconfirmed) == 0 {
		return changes
	}
	out := slices.Clone(changes)
	for i, c := range out {
		if why, ok := unconfirmed[c.Webhook]; ok && c.Kind == decide.Opened {
			out[i].Message += "; marking not confirmed: " + why
			r.Metrics.MarkingUnconfirmed.WithLabelValues(string(r.Kind), configuration, c.Webhook).Inc()
		}
	}
	return out
}

// markingFailed reports, once per opening, that its marking policy is not
// in place: the opening waits markingBound for it, then goes unmarked.
func (r *ConfigurationReconciler) markingFailed(cur client.Object, err error) {
	r.Metrics.WriteErrors.Inc()
	r.Recorder.Eventf(cur, nil, corev1.EventTypeWarning, "MarkingFailed", "Update",
		"the marking policy, which marks what is admitted without the webhook, is not in place; the circuit opens without it once the opening has waited for it: %v", err)
}

// markingPoll is how long an opening waits before asking again whether
// kube-apiserver marks with its armed policies (it reloads policies once a
// second, and sees a configuration's write a moment after it lands).
const markingPoll = 100 * time.Millisecond

// armedAt returns since when the arming entry of the configuration's (by
// UID) hook has been outside the record: now when reset (a closing), or
// when the breaker had not seen it yet (a restarted breaker starts
// counting again).
func (r *ConfigurationReconciler) armedAt(uid types.UID, hook string, now time.Time, reset bool) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.armedSince == nil {
		r.armedSince = map[string]time.Time{}
	}
	key := string(uid) + "/" + hook
	if at, ok := r.armedSince[key]; ok && !reset {
		return at
	}
	r.armedSince[key] = now
	return now
}

// armedNow notes now as when the entries of rec, about to be armed, were
// first seen, unless they were seen before: an arming abandoned without
// an opening goes disarmAfter after it was armed.
// A canary's answer about them is forgotten: it may predate their
// addition.
func (r *ConfigurationReconciler) armedNow(uid types.UID, rec circuit.Record, now time.Time) {
	for hook := range rec {
		r.armedAt(uid, hook, now, false)
		r.mu.Lock()
		delete(r.shown, string(uid)+"/"+hook)
		r.mu.Unlock()
	}
}

// forgetArmed forgets the arming entry of the configuration's (by UID)
// hook: it moved into the record, or it is removed. What a canary showed
// about it is forgotten too.
func (r *ConfigurationReconciler) forgetArmed(uid types.UID, hook string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.armedSince, string(uid)+"/"+hook)
	delete(r.shown, string(uid)+"/"+hook)
}

// minPositive is the smaller of a and b, ignoring a zero a.
func minPositive(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}
