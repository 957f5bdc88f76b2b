package decide

import (
	"maps"
	"slices"
	"time"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// A reconcile of one configuration reads one Snapshot, asks NextStep what
// to do, and does exactly that: write transitions, write arming entries,
// or wait. NextStep is pure: the reconciler gathers what it needs first
// (the evidence, whether each marking policy is in place), and when the
// step is to wait for a canary (WaitCanary) it sends it, notes the answer
// in the Memory, and asks NextStep again, once.

// StepKind is what a Step does.
type StepKind string

const (
	// StepWrite writes Next: transitions (Changes) and the arming entries
	// that go with them.
	StepWrite StepKind = "write"
	// StepArm writes Next: the arming entries alone, which arm marking
	// before an opening.
	StepArm StepKind = "arm"
	// StepWait writes nothing.
	StepWait StepKind = "wait"
)

// WaitReason says why a Step waits.
type WaitReason string

const (
	// WaitNothing: nothing changes.
	WaitNothing WaitReason = "nothing to change"
	// WaitUnreadable: the record cannot be read (Step.Err); nothing is
	// changed until it is repaired or handed over.
	WaitUnreadable WaitReason = "the record cannot be read"
	// WaitSibling: coalescing; the transitions wait for a sibling one
	// probe from its own (coalesce).
	WaitSibling WaitReason = "a sibling is one probe from the same transition"
	// WaitMarking: the openings are armed, and kube-apiserver does not
	// show it yet (marking wait).
	WaitMarking WaitReason = "kube-apiserver does not show the marking armed yet"
	// WaitCanary: a canary must ask kube-apiserver whether it marks with
	// Step.Ask; then NextStep decides again.
	WaitCanary WaitReason = "a canary is to ask whether kube-apiserver marks"
)

// Step is what one reconcile does.
type Step struct {
	Kind StepKind
	// Why says why a StepWait waits.
	Why WaitReason
	// After is how long to wait before deciding again; zero waits for the
	// next change of the evidence or the object.
	After time.Duration
	// Next is the object to write (StepWrite, StepArm), and Record the
	// circuit record it carries.
	Next   *circuit.ConfigView
	Record circuit.Record
	// Changes are the transitions StepWrite writes.
	Changes []Change
	// Unconfirmed are the openings of Changes that go without marking
	// evidence, by webhook, with why: they waited markingBound.
	Unconfirmed map[string]string
	// Ask are the webhooks a WaitCanary asks about, for at most
	// AskTimeout.
	Ask        []string
	AskTimeout time.Duration
	// Err is why a WaitUnreadable cannot read the record.
	Err error
	// MarkingFailed are the openings whose marking policy is not in
	// place, by webhook, with why, reported once per opening.
	MarkingFailed map[string]string
	// Memory is the memory to keep, unless the step's write succeeds
	// (then Memory.Written).
	Memory Memory
	// Coalesced is how many transitions a WaitSibling holds back.
	Coalesced int
}

// Marking is what the reconciler knows of a configuration's marking when
// it asks NextStep.
type Marking struct {
	// On: openings of this configuration arm marking first (a mutating
	// configuration, where kube-apiserver serves MutatingAdmissionPolicies).
	On bool
	// Policies holds why each target's marking policy is not in place, by
	// webhook; a target it does not hold is in place.
	Policies map[string]string
	// Asked: a canary was sent in this reconcile, and its answer is in the
	// Memory (Memory.CanaryAnswered).
	Asked bool
}

// decision is one run of NextStep.
type decision struct {
	s   Snapshot
	in  Inputs
	mk  Marking
	now time.Time
	m   Memory
	// markingFailed are the MarkingFailed reports of this step.
	markingFailed map[string]string
}

// NextStep is the one decision of a reconcile of s: what Plan wants,
// held back while a sibling is one probe from the same transition
// (coalesce), and, for a mutating configuration, with its marking armed
// around each transition (arming). in.Now is the time of the reconcile.
//
// The error is one of encoding the arming entries, which nothing written
// by the breaker causes.
func NextStep(s Snapshot, in Inputs, m Memory, mk Marking) (Step, error) {
	d := &decision{s: s, in: in, mk: mk, now: in.Now, m: m.of(s.View.UID)}
	d.in.Now = d.m.decisionTime(d.now)
	st, err := d.step()
	st.Memory, st.MarkingFailed = d.m, d.markingFailed
	return st, err
}

func (d *decision) step() (Step, error) {
	next, after, changes, err := plan(d.s, d.in)
	if err != nil {
		d.m.DecidedAt, d.m.CoalesceUntil = time.Time{}, time.Time{}
		return Step{Kind: StepWait, Why: WaitUnreadable, Err: err}, nil
	}
	if wait, held := d.coalesce(changes); held {
		return d.coalescing(after, changes, wait)
	}
	a := d.arming(next, after, changes)
	if a.err == nil && a.hold != nil {
		d.m.holdDecision(d.in.Now)
		held := a
		d.in.Wait = held.hold
		next, after, changes, err = plan(d.s, d.in)
		if err != nil {
			return Step{}, err
		}
		a = d.armingFor(next, after, held.add, held.ahead)
		a.wait = minPositive(a.wait, MarkingPoll)
		a.unconfirmed = held.unconfirmed
	}
	switch {
	case a.err != nil:
		return Step{}, a.err
	case a.ask != nil:
		return a.ask.step(), nil
	case a.arm != nil:
		d.m.holdDecision(d.in.Now)
		return Step{Kind: StepArm, Next: a.arm, Record: d.s.Record, After: MarkingPoll}, nil
	case a.pending:
		d.m.holdDecision(d.in.Now)
		return Step{Kind: StepWait, Why: WaitMarking, After: MarkingPoll}, nil
	}
	return d.write(next, after, changes, a), nil
}

// write is the step that writes next, with the arming entries a carries,
// or nothing when nothing changes.
func (d *decision) write(next *circuit.ConfigView, after circuit.Record, changes []Change, a armingStep) Step {
	if !maps.Equal(next.Annotations, a.annotations) {
		if len(changes) == 0 {
			next = d.s.View.DeepCopy() // plan returned the view itself
		}
		next.Annotations = a.annotations
	} else if len(changes) == 0 {
		d.m.DecidedAt = time.Time{}
		return Step{Kind: StepWait, Why: WaitNothing, After: a.wait}
	}
	return Step{Kind: StepWrite, Next: next, Record: after, Changes: NoteUnconfirmed(changes, a.unconfirmed), Unconfirmed: a.unconfirmed, After: a.wait}
}

// NoteUnconfirmed adds to the message of each opening in unconfirmed that
// it went without marking evidence, and why.
func NoteUnconfirmed(changes []Change, unconfirmed map[string]string) []Change {
	if len(unconfirmed) == 0 {
		return changes
	}
	out := slices.Clone(changes)
	for i, c := range out {
		if why, ok := unconfirmed[c.Webhook]; ok && c.Kind == Opened {
			out[i].Message += "; marking not confirmed: " + why
		}
	}
	return out
}

// askCanary is a canary to send before deciding again.
type askCanary struct {
	hooks   []string
	timeout time.Duration
}

func (a *askCanary) step() Step {
	return Step{Kind: StepWait, Why: WaitCanary, Ask: a.hooks, AskTimeout: a.timeout}
}

// MarkingPoll is how long an opening waits before asking again whether
// kube-apiserver marks with its armed policies (it reloads policies once a
// second, and sees a configuration's write a moment after it lands).
const MarkingPoll = 100 * time.Millisecond

// minPositive is the smaller of a and b, ignoring a zero a.
func minPositive(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}
