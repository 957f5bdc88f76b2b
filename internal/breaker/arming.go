package breaker

import (
	"context"
	"fmt"
	"maps"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
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
// Marks made while armed around a transition may be on objects the webhook
// did mutate: marks are hints, and an extra one is the safe error.

// disarmAfter is how long marking stays armed after the write that closed
// its circuit, or after an opening that did not happen: long enough for
// every kube-apiserver to have seen that write, short enough that few
// objects the webhook mutated are marked.
const disarmAfter = 2 * time.Second

// armingStep is what the arming asks of a reconcile.
type armingStep struct {
	// arm, when set, is the object to write first: the view with the
	// openings' entries armed. The opening waits for the next reconcile.
	arm *admissionregistrationv1.MutatingWebhookConfiguration
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
}

// arming returns next's annotations with the arming entries of the write
// from view to next, or says what must happen before that write
// (armingStep). It changes neither. Without a
// Marker (validating configurations, or no MutatingAdmissionPolicy API)
// there is nothing to arm.
func (r *TargetReconciler) arming(ctx context.Context, cur client.Object, view, next *admissionregistrationv1.MutatingWebhookConfiguration, changes []Change) (armingStep, error) {
	if r.Marker == nil {
		return armingStep{annotations: next.Annotations}, nil
	}
	if view.Annotations[circuit.OverrideAnnotation] != "" {
		// Handed to its administrators: the breaker arms nothing, and
		// drops its arming entries only in a write it makes anyway (the
		// handoff's).
		if len(changes) == 0 {
			return armingStep{annotations: next.Annotations}, nil
		}
		annotations := maps.Clone(next.Annotations)
		delete(annotations, circuit.ArmingAnnotation)
		return armingStep{annotations: annotations}, nil
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

	var opening []marking.Circuit
	for _, c := range changes {
		if c.Kind == Opened {
			opening = append(opening, marking.Circuit{Configuration: view.Name, Webhook: c.Webhook})
		}
	}
	if len(opening) > 0 {
		step, err := r.armOpenings(ctx, cur, view, armed, after, opening)
		if err != nil || step.arm != nil || step.pending || step.hold != nil {
			return step, err
		}
	}

	return r.armingFor(view, next, nil)
}

// armingFor returns next's annotations with the arming entries of the
// write from view to next: those a closing moves out of the record, those
// left from earlier until disarmAfter has passed since the latest of them
// (so that a mass closing is disarmed in one write), and add. An entry
// back in the record (an opening) needs no arming entry. Another
// installation's entries are left as they are.
func (r *TargetReconciler) armingFor(view, next *admissionregistrationv1.MutatingWebhookConfiguration, add circuit.Record) (armingStep, error) {
	armed, err := circuit.DecodeArming(view.Annotations)
	if err != nil {
		armed = circuit.Record{} // only the breaker writes them: rewrite them
	}
	before, err := circuit.Decode(view.Annotations)
	if err != nil {
		return armingStep{}, err
	}
	after, err := circuit.Decode(next.Annotations)
	if err != nil {
		return armingStep{}, err
	}
	want, mine := circuit.Record{}, circuit.Record{}
	now := now(r.Clock)
	var latest time.Time
	for hook, entry := range before {
		if _, stays := after[hook]; !stays && entry.UID == view.UID && entry.Mine(r.Signer) {
			mine[hook] = entry
			latest = r.armedAt(view.UID, hook, now, true)
		}
	}
	for hook, entry := range armed {
		switch _, inRecord := after[hook]; {
		case !entry.Mine(r.Signer):
			want[hook] = entry // another installation's
		case inRecord:
			r.forgetArmed(view.UID, hook)
		case mine[hook].UID == "":
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
	maps.Copy(want, add)
	annotations, err := circuit.EncodeArming(maps.Clone(next.Annotations), want)
	if err != nil {
		return armingStep{}, err
	}
	return armingStep{wait: wait, annotations: annotations}, nil
}

// armOpenings arms the openings' marking policies before the write that
// opens them: it checks that each is installed as this release renders it
// (else a MarkingFailed Event and an error, retried with backoff), and
// asks one canary whether kube-apiserver marks with those already armed.
// Those it does open now, and the write that opens them arms the others
// (hold); when none does, it asks for the arming write if an opening is
// not armed yet, and else waits (pending).
func (r *TargetReconciler) armOpenings(ctx context.Context, cur client.Object, view *admissionregistrationv1.MutatingWebhookConfiguration, armed, after circuit.Record, opening []marking.Circuit) (armingStep, error) {
	for _, c := range opening {
		if err := r.Marker.Check(ctx, c); err != nil {
			return armingStep{}, r.markingFailed(cur, err)
		}
	}
	missing := circuit.Record{}
	var armedOnes []marking.Circuit
	for _, c := range opening {
		if armed[c.Webhook].UID != view.UID {
			missing[c.Webhook] = after[c.Webhook]
		} else {
			armedOnes = append(armedOnes, c)
		}
	}
	hold := map[string]bool{}
	for hook := range missing {
		hold[hook] = true
	}
	if len(armedOnes) > 0 {
		notYet, err := r.Marker.Armed(ctx, armedOnes)
		if err != nil {
			return armingStep{}, r.markingFailed(cur, err)
		}
		for _, c := range notYet {
			hold[c.Webhook] = true
		}
	}
	switch {
	case len(hold) == 0:
		return armingStep{}, nil
	case len(hold) < len(opening):
		// Some can open now: they do, and the others are armed in the
		// same write.
		return armingStep{hold: hold, add: missing}, nil
	case len(missing) > 0:
		want := maps.Clone(armed)
		maps.Copy(want, missing)
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

// markingFailed reports that an opening was refused because its marking
// policy is not in place.
func (r *TargetReconciler) markingFailed(cur client.Object, err error) error {
	r.Metrics.WriteErrors.Inc()
	r.Recorder.Eventf(cur, nil, corev1.EventTypeWarning, "MarkingFailed", "Update",
		"webhook-guard did not open the circuit: the marking policy, which marks what is admitted without the webhook, is not in place: %v", err)
	return fmt.Errorf("marking before opening: %w", err)
}

// writeArming writes the arming entries of arm, and nothing else.
func (r *TargetReconciler) writeArming(ctx context.Context, cur client.Object, view, arm *admissionregistrationv1.MutatingWebhookConfiguration) error {
	patch, err := circuit.Patch(view, arm)
	if err != nil {
		return err
	}
	written := cur.DeepCopyObject().(client.Object)
	if err := r.Client.Patch(ctx, written, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(circuit.FieldManager)); err != nil {
		return err
	}
	logf.FromContext(ctx).V(1).Info("Armed marking before opening", "annotation", arm.Annotations[circuit.ArmingAnnotation], "resourceVersion", written.GetResourceVersion())
	return nil
}

// markingPoll is how long an opening waits before asking again whether
// kube-apiserver marks with its armed policies (it reloads policies once a
// second, and sees a configuration's write a moment after it lands).
const markingPoll = 100 * time.Millisecond

// armedAt returns since when the arming entry of the configuration's (by
// UID) hook has been outside the record: now when reset (a closing), or
// when the breaker had not seen it yet (a restarted breaker starts
// counting again).
func (r *TargetReconciler) armedAt(uid types.UID, hook string, now time.Time, reset bool) time.Time {
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

func (r *TargetReconciler) forgetArmed(uid types.UID, hook string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.armedSince, string(uid)+"/"+hook)
}

// minPositive is the smaller of a and b, ignoring a zero a.
func minPositive(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}
