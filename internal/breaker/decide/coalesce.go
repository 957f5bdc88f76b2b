package decide

import (
	"time"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// Transitions of one configuration are written together when they come
// together (coalescing). In a mass failure every webhook fails at the same
// moment, but each is probed at its own phase of the interval, so the
// webhooks of one configuration reach their thresholds spread over up to
// one interval. Writing each as it comes costs one write (and, for a
// mutating configuration, one arming write and one canary) per probe
// round.
//
// So when a transition is due while a sibling in the same configuration
// is one probe from the same transition (openAfter-1 consecutive
// failures that kube-apiserver's calls do not veto before an opening,
// closeAfter-1 consecutive successes before a closing), the step waits,
// without holding a worker, until that sibling crosses too (the probe
// runner wakes the reconciler then) or one probe interval has passed
// since it first waited, whichever comes first (coalesce). A coalescing never outlasts one interval of the transitions
// it holds back, and a sibling further away is not waited for.

// coalesce reports whether the write of changes waits for a sibling one
// probe from the same transition, and for how long at most. The bound
// starts when a step first waits for the configuration's transitions and
// ends with their write or when none is due any more (no changes); a
// write that waited for its bound does not wait again.
func (d *decision) coalesce(changes []Change) (time.Duration, bool) {
	if len(changes) == 0 {
		d.m.CoalesceUntil = time.Time{}
		return 0, false
	}
	bound, due := dueSiblings(d.s, d.in, changes)
	if !due || bound <= 0 {
		return 0, false
	}
	if d.m.CoalesceUntil.IsZero() {
		d.m.CoalesceUntil = d.now.Add(bound)
	}
	if left := d.m.CoalesceUntil.Sub(d.now); left > 0 {
		return left, true
	}
	return 0, false
}

// dueSiblings reports whether a target of s not in changes is one probe
// from the transition changes make to others (an opening or a closing),
// and the bound of the wait: the shortest probe interval of the targets
// changes open or close. Only openings and closings wait: a handoff, a
// dropped or overwritten record is written at once, and so is a write
// limited to one webhook (Inputs.Only).
func dueSiblings(s Snapshot, in Inputs, changes []Change) (time.Duration, bool) {
	if in.Only != "" {
		return 0, false
	}
	changing := map[string]bool{}
	opening, closing := false, false
	for _, c := range changes {
		switch c.Kind {
		case Opened:
			opening = true
		case Closed:
			closing = true
		default:
			return 0, false
		}
		changing[c.Webhook] = true
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
		wh := circuit.FindWebhook(s.View, t.Webhook)
		if !known || ev.Unprobeable != "" || wh == nil {
			continue
		}
		entry, open := s.Record[t.Webhook]
		switch {
		case opening && !open && !in.HoldOpen && t.OpenAfter >= 2 && c.Failures == t.OpenAfter-1 && Opens(wh, t.Mode) &&
			!(t.APIServerSignal.Enabled && SlowVetoed(c, ev.APIServer)):
			return bound, true
		case closing && open && entry.Mine(in.Signer) && entry.UID == s.View.UID && t.CloseAfter >= 2 && c.Successes == t.CloseAfter-1:
			return bound, true
		}
	}
	return 0, false
}

// coalescing is the step of transitions that wait for a sibling (at most
// wait), which meanwhile arms the marking of every opening it holds back
// and of every target armed ahead (armAhead), in one write, so that when
// the wait ends the canary already shows them armed and the opening write
// is the only one left. Openings keep their decision time (holdDecision)
// meanwhile, so the entries armed now are the ones recorded then.
func (d *decision) coalescing(after circuit.Record, changes []Change, wait time.Duration) (Step, error) {
	waiting := Step{Kind: StepWait, Why: WaitSibling, After: wait, Coalesced: len(changes)}
	opening := openings(changes)
	if len(opening) == 0 {
		return waiting, nil
	}
	d.m.holdDecision(d.in.Now)
	if !d.mk.On || d.s.View.Annotations[circuit.OverrideAnnotation] != "" {
		return waiting, nil
	}
	for _, hook := range opening {
		if d.mk.Policies[hook] != "" {
			// The opening, once the wait ends, waits for it at most
			// markingBound (armOpenings).
			return waiting, nil
		}
	}
	ahead, want := d.armAhead(after, changes)
	if want == nil {
		want = circuit.Record{}
	}
	for _, hook := range opening {
		if d.s.Armed[hook].UID != d.s.View.UID {
			want[hook] = after[hook]
		}
	}
	if len(want) == 0 {
		// All armed: ask kube-apiserver now whether it marks with them,
		// so that the write at the end of the wait needs no canary.
		var cs []string
		for _, t := range d.in.Targets {
			if _, ok := ahead[t.Webhook]; ok && d.mineArmed(t.Webhook) {
				cs = append(cs, t.Webhook)
			}
		}
		bound := MarkingBound(d.in.Targets, cs)
		notYet, failure, ask := d.m.unshown(cs, bound, d.now, d.mk.Asked)
		switch {
		case ask:
			return (&askCanary{hooks: notYet, timeout: min(wait, bound)}).step(), nil
		case failure == "" && len(notYet) > 0:
			waiting.After = min(wait, MarkingPoll)
		}
		return waiting, nil
	}
	arm, err := d.armWrite(want)
	if err != nil {
		return Step{}, err
	}
	return Step{Kind: StepArm, Next: arm, Record: d.s.Record, After: wait, Coalesced: len(changes)}, nil
}
