package breaker

import (
	"context"
	"maps"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

// Transitions of one configuration are written together when they come
// together. In a mass failure every webhook fails at the same moment, but
// each is probed at its own phase of the interval, so the webhooks of one
// configuration reach their thresholds spread over up to one interval.
// Writing each as it comes costs one write (and, for a mutating
// configuration, one arming write and one canary) per probe round.
//
// So when a transition is due while a sibling in the same configuration
// is one probe from the same transition (openAfter-1 consecutive
// failures before an opening, closeAfter-1 consecutive successes before a
// closing), the reconciler holds the write, without holding a worker,
// until that sibling crosses too (the probe runner wakes it then) or one
// probe interval has passed since it first held it, whichever comes first
// (coalesce). A hold never outlasts one interval of the transitions it
// holds, and a sibling further away is not waited for.

// coalesce reports whether the write of changes on view (the
// configuration name) waits for a sibling one probe from the same
// transition, and for how long at most. The bound starts when the
// reconciler first holds the configuration's transitions and ends with
// their write or when none is due any more (no changes); a
// write that was held for its bound is not held again.
func (r *ConfigurationReconciler) coalesce(name string, view *circuit.ConfigView, in decide.Inputs, changes []decide.Change) (time.Duration, bool) {
	if len(changes) == 0 {
		r.forgetHold(name)
		return 0, false
	}
	bound, due := dueSiblings(view, in, changes)
	if !due || bound <= 0 {
		return 0, false
	}
	at := now(r.Clock)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holds == nil {
		r.holds = map[string]time.Time{}
	}
	deadline, ok := r.holds[name]
	if !ok {
		deadline = at.Add(bound)
		r.holds[name] = deadline
	}
	if left := deadline.Sub(at); left > 0 {
		return left, true
	}
	return 0, false
}

// forgetHold forgets name's hold: its transitions were written, or none
// is due any more.
func (r *ConfigurationReconciler) forgetHold(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.holds, name)
}

// dueSiblings reports whether a target of view not in changes is one
// probe from the transition changes make to others (an opening or a
// closing), and the bound of a hold: the shortest probe interval of the
// targets changes open or close. Only openings and closings wait: a
// handoff, a dropped or overwritten record is written at once, and so is
// a write limited to one webhook (Inputs.Only).
func dueSiblings(view *circuit.ConfigView, in decide.Inputs, changes []decide.Change) (time.Duration, bool) {
	if in.Only != "" {
		return 0, false
	}
	changing := map[string]bool{}
	opening, closing := false, false
	for _, c := range changes {
		switch c.Kind {
		case decide.Opened:
			opening = true
		case decide.Closed:
			closing = true
		default:
			return 0, false
		}
		changing[c.Webhook] = true
	}
	rec, err := circuit.Decode(view.Annotations)
	if err != nil {
		return 0, false
	}
	var bound time.Duration
	for _, t := range in.Targets {
		if changing[t.Webhook] && t.Probe.Interval > 0 {
			bound = minPositive(bound, t.Probe.Interval)
		}
	}
	for _, t := range in.Targets {
		if changing[t.Webhook] || t.Observes() {
			continue
		}
		ev, known := in.Evidence[t.Webhook]
		c := ev.Probe
		wh := circuit.FindWebhook(view, t.Webhook)
		if !known || ev.Unprobeable != "" || wh == nil {
			continue
		}
		entry, open := rec[t.Webhook]
		switch {
		case opening && !open && !in.HoldOpen && t.OpenAfter >= 2 && c.Failures == t.OpenAfter-1 && wouldOpen(wh, t.Mode):
			return bound, true
		case closing && open && entry.Mine(in.Signer) && entry.UID == view.UID && t.CloseAfter >= 2 && c.Successes == t.CloseAfter-1:
			return bound, true
		}
	}
	return 0, false
}

// wouldOpen reports whether opening wh in mode changes it (openWebhook):
// an Ignore that is the administrator's baseline in Ignore mode does not.
func wouldOpen(wh *admissionregistrationv1.MutatingWebhook, mode circuit.Mode) bool {
	return wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Ignore ||
		mode == circuit.ModeBypass && circuit.BypassIndex(wh) < 0
}

// ArmAheadAt is the number of consecutive failures at which t's marking
// is armed ahead of its opening (see ConfigurationReconciler.armAhead):
// openAfter-1 when that is at least 2, so that a single failed probe never
// arms anything; otherwise openAfter, when it opens.
func ArmAheadAt(t config.Target) int {
	if t.OpenAfter >= 3 {
		return t.OpenAfter - 1
	}
	return t.OpenAfter
}

// ArmsAhead reports whether the reconciler would arm marking ahead of an
// opening on view, given in: a target of a mutating configuration has
// ArmAheadAt consecutive failures, fewer than openAfter, its circuit is
// closed and its marking is not armed. The probe runner wakes the
// reconciler when it does, as it does when Plan would write.
func ArmsAhead(view *circuit.ConfigView, in decide.Inputs) bool {
	if in.HoldOpen || view.Annotations[circuit.OverrideAnnotation] != "" {
		return false
	}
	var due []string
	for _, t := range in.Targets {
		c := in.Evidence[t.Webhook].Probe
		if t.Kind == circuit.KindMutating && !t.Observes() && c.Failures >= ArmAheadAt(t) && c.Failures < t.OpenAfter {
			if wh := circuit.FindWebhook(view, t.Webhook); wh != nil && wouldOpen(wh, t.Mode) {
				due = append(due, t.Webhook)
			}
		}
	}
	if len(due) == 0 {
		return false
	}
	rec, err := circuit.Decode(view.Annotations)
	if err != nil {
		return false
	}
	armed, _ := circuit.DecodeArming(view.Annotations)
	for _, hook := range due {
		if _, open := rec[hook]; !open && armed[hook].UID != view.UID {
			return true
		}
	}
	return false
}

// holdTransitions holds the write of changes (from view to next) for at
// most wait (coalesce), and meanwhile arms the marking of every opening
// it holds and of every target armed ahead (armAhead), in one write, so
// that when the hold ends the canary already shows them armed and the
// opening write is the only one left. Openings keep their decision time
// (holdDecision) while held, so the entries armed now are the ones
// recorded then.
func (r *ConfigurationReconciler) holdTransitions(ctx context.Context, cur client.Object, view, next *circuit.ConfigView, in decide.Inputs, changes []decide.Change, decidedAt time.Time, wait time.Duration) (time.Duration, error) {
	var opening []marking.Circuit
	for _, c := range changes {
		if c.Kind == decide.Opened {
			opening = append(opening, marking.Circuit{Configuration: view.Name, Webhook: c.Webhook})
		}
	}
	logf.FromContext(ctx).V(1).Info("Holding transitions while a sibling is one probe from its own", "changes", len(changes), "for", wait)
	if len(opening) == 0 {
		return wait, nil
	}
	r.holdDecision(view.Name, decidedAt)
	if r.Marker == nil || view.Annotations[circuit.OverrideAnnotation] != "" {
		return wait, nil
	}
	for _, c := range opening {
		if err := r.Marker.Check(ctx, c); err != nil {
			// The opening, once the hold ends, waits for it at most
			// markingBound (armOpenings).
			return wait, nil
		}
	}
	armed, err := circuit.DecodeArming(view.Annotations)
	if err != nil {
		armed = circuit.Record{} // only the breaker writes them: rewrite them
	}
	after, err := circuit.Decode(next.Annotations)
	if err != nil {
		return 0, err
	}
	ahead, want := r.armAhead(view, in, armed, after, changes)
	if want == nil {
		want = circuit.Record{}
	}
	for _, c := range opening {
		if armed[c.Webhook].UID != view.UID {
			want[c.Webhook] = after[c.Webhook]
		}
	}
	if len(want) == 0 {
		// All armed: ask kube-apiserver now whether it marks with them,
		// so that the write at the end of the hold needs no canary.
		var cs []marking.Circuit
		for _, t := range in.Targets {
			if _, ok := ahead[t.Webhook]; ok && armed[t.Webhook].UID == view.UID && armed[t.Webhook].Mine(r.Signer) {
				cs = append(cs, marking.Circuit{Configuration: view.Name, Webhook: t.Webhook})
			}
		}
		notYet, err := r.armedShown(ctx, view.UID, cs, markingBound(in.Targets, cs), wait)
		if err != nil {
			return wait, nil // the opening waits for it at most markingBound
		}
		if len(notYet) > 0 {
			return min(wait, markingPoll), nil
		}
		return wait, nil
	}
	all := maps.Clone(armed)
	maps.Copy(all, want)
	r.armedNow(view.UID, want, now(r.Clock))
	arm := view.DeepCopy()
	if arm.Annotations, err = circuit.EncodeArming(maps.Clone(view.Annotations), all); err != nil {
		return 0, err
	}
	return wait, r.writeArming(ctx, cur, view, arm, in.Targets)
}
