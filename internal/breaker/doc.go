// Package breaker owns the circuit: the probe runner that gathers the
// evidence, and the reconciler that writes the decisions to Mutating- and
// ValidatingWebhookConfigurations (seen through circuit.View). The
// decisions themselves are package decide's pure functions: from the
// evidence to a target's judgment (Judge, JudgeTarget), to the next
// configuration (Plan), and to the one step a reconcile takes (NextStep:
// write transitions, arm marking, or wait). The names and the record it
// writes belong to package circuit.
//
// Every transition is exactly one JSON patch of the owned fields, carrying
// the resourceVersion it read, that changes the policy and the record
// together. The package keeps no other state store: after a crash or a
// failover everything is derived again from the objects. A webhook has a
// record entry if and only if the breaker's changes are in place.
//
// It must not change any field it does not own, and it must not decide
// whether a webhook may be skipped: that is the operator's approval in the
// configuration.
//
// # Glossary
//
// "Hold" has meant five things here. Each is written below as the one
// name the code gives it (TestGlossary_termsAreTheCodes checks that each
// still exists), and a comment that says "hold" alone should say which:
//
//   - all-fail hold (State.HoldOpen, Inputs.HoldOpen): every probed target
//     fails at once, so openings wait, for at most a bound, as the guard's
//     own network is the likelier culprit (State.HoldWhenAllFail).
//   - coalescing (coalesce, coalescing, WaitSibling): transitions that
//     become due within moments of each other are written together, in
//     one patch.
//   - decision time (decisionTime, holdDecision): one opening time for
//     every reconcile of an opening that waits for its marking, the time
//     its marking policies already carry.
//   - marking wait (WaitMarking, markingWait): an opening whose marking
//     policy kube-apiserver has not yet shown armed, for at most
//     MarkingBound.
//   - arming hold (Inputs.Wait, armingStep.hold): the openings a write
//     leaves out, because the same write arms their marking.
//
// Neither is flap damping (Damp, Evidence.Damp), which holds nothing back
// from opening: a circuit that re-opens soon after its last close stays
// open longer before it may close again.
//
// "Observe" is two things: State.Observe records one probe result;
// config.ModeObserve is the mode in which a target's circuit never opens
// and the guard says what it would have done.
package breaker
