package breaker

import (
	"context"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakermetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// What one patch carries, and the name of its failpoints (before-write
// and after-write, before-arm and after-arm).
const (
	// transitions: circuit transitions, with the record that says what
	// they changed.
	transitions = "write"
	// arming: the arming entries alone, marking armed before an opening
	// (decide.NextStep's StepArm).
	arming = "arm"
)

// write sends step's transitions (see patch), and once they are written
// counts the openings that went without marking evidence and keeps the
// memory of a written step (decide.Memory.Written).
func (r *ConfigurationReconciler) write(ctx context.Context, cur client.Object, view *circuit.ConfigView, step decide.Step, targets []config.Target) error {
	if len(step.Unconfirmed) > 0 {
		logf.FromContext(ctx).Info("Opening without marking evidence: the wait for it is bounded", "unconfirmed", step.Unconfirmed)
	}
	if err := r.patch(ctx, cur, view, step, targets); err != nil {
		return err
	}
	r.remember(view.Name, step.Memory.Written(step.Changes))
	for _, c := range step.Changes {
		if _, ok := step.Unconfirmed[c.Webhook]; ok && c.Kind == decide.Opened {
			r.Metrics.MarkingUnconfirmed.WithLabelValues(string(r.Kind), view.Name, c.Webhook).Inc()
		}
	}
	return nil
}

// patch is the breaker's one way to write a step (decide.StepWrite or
// decide.StepArm): one JSON patch of the owned fields (view to step.Next),
// with the resourceVersion read, refused on conflict, so that no field
// this client's types do not know can be lost (a full Update could drop
// it). Whatever it carries (transitions or arming entries), it passes the
// failpoints, reports a failure other than a conflict (decided again by
// Reconcile) or an invalid write (written one webhook at a time by
// writeStep) as a WriteFailed Event, and counts, records and reports what
// it wrote.
func (r *ConfigurationReconciler) patch(ctx context.Context, cur client.Object, view *circuit.ConfigView, step decide.Step, targets []config.Target) error {
	what := transitions
	if step.Kind == decide.StepArm {
		what = arming
	}
	patch, err := circuit.Patch(view, step.Next)
	if err != nil {
		return err
	}
	written := cur.DeepCopyObject().(client.Object)
	failpoint("before-" + what)
	if err := r.Client.Patch(ctx, written, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(circuit.FieldManager)); err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsInvalid(err) {
			r.Metrics.WriteErrors.Inc()
			carried := fmt.Sprintf("%d change(s)", len(step.Changes))
			if what == arming {
				carried = "the arming entries that arm marking before an opening"
			}
			r.Recorder.Eventf(cur, nil, corev1.EventTypeWarning, "WriteFailed", "Update",
				"webhook-guard could not write %s, nothing was changed: %v", carried, err)
		}
		return err
	}
	failpoint("after-" + what)
	r.wrote(cur.GetName(), cur, written)
	r.Metrics.Reconciles.WithLabelValues(breakermetrics.ReconcileWritten).Inc()
	if what == arming {
		logf.FromContext(ctx).V(1).Info("Armed marking before opening", "annotation", step.Next.Annotations[circuit.ArmingAnnotation], "resourceVersion", written.GetResourceVersion())
	}
	r.recordChanges(ctx, view.Name, written, step.Changes, targets)
	r.syncGauges(targets, &decide.Snapshot{View: step.Next, Record: step.Record})
	return nil
}

// recordChanges notes each written change in State (its counts start
// again, and an opening or a closing feeds flap damping), counts it, and
// reports it in the log and as an Event on the written object: one Event
// per kind of change in the write (changeEvents).
func (r *ConfigurationReconciler) recordChanges(ctx context.Context, configuration string, written client.Object, changes []decide.Change, targets []config.Target) {
	for _, e := range changeEvents(changes) {
		r.Recorder.Eventf(written, nil, eventType(e.kind), string(e.kind), "Update", "%s", e.note)
	}
	for _, c := range changes {
		for _, t := range targets {
			if t.Webhook != c.Webhook && c.Webhook != "" {
				continue
			}
			r.State.Reset(t.Key())
			switch {
			case t.Webhook != c.Webhook:
			case c.Kind == decide.Opened:
				r.State.NoteOpening(t, c.Signal, now(r.Clock))
			case c.Kind == decide.Closed:
				r.State.NoteClosing(t.Key(), now(r.Clock))
			}
		}
		r.Metrics.Transitions.WithLabelValues(string(r.Kind), string(c.Kind)).Inc()
		if c.Kind == decide.Opened {
			r.Metrics.Openings.WithLabelValues(string(r.Kind), configuration, c.Webhook, c.Signal).Inc()
		}
		if r.Kind == circuit.KindValidating && c.Kind == decide.Opened {
			r.Recorder.Eventf(written, nil, corev1.EventTypeWarning, "AdmittingWithoutValidation", "Update",
				"%s: requests this webhook validates are admitted without its validation while the circuit is open; "+
					"webhook_guard_circuit_transitions_total{kind=\"Validating\",to=\"CircuitOpened\"} counts these openings", c.Webhook)
		}
		logf.FromContext(ctx).Info("Wrote a circuit transition", "kind", r.Kind, "webhook", c.Webhook, "change", c.Kind, "resourceVersion", written.GetResourceVersion())
	}
}

// changeEvent is one Event about the changes of one kind in a write.
type changeEvent struct {
	kind decide.ChangeKind
	note string
}

// changeEvents are the Events of a write's changes: one per kind, in the
// order the kinds first come. A change alone gives its own message; the
// changes of one kind together give one note that names every webhook
// first and then gives each message, cut at the Event note's limit. A
// mass failure writes the openings of a configuration's webhooks in one
// write, and each Event is a write that kube-apiserver admits through
// every marking policy (about 50 µs each, measured in its profile).
func changeEvents(changes []decide.Change) []changeEvent {
	var kinds []decide.ChangeKind
	byKind := map[decide.ChangeKind][]decide.Change{}
	for _, c := range changes {
		if _, ok := byKind[c.Kind]; !ok {
			kinds = append(kinds, c.Kind)
		}
		byKind[c.Kind] = append(byKind[c.Kind], c)
	}
	events := make([]changeEvent, 0, len(kinds))
	for _, k := range kinds {
		cs := byKind[k]
		if len(cs) == 1 {
			// An opening quotes the probe's error, whose URL has no bound.
			events = append(events, changeEvent{kind: k, note: circuit.EventNote("%s", cs[0].Message)})
			continue
		}
		names, messages := make([]string, len(cs)), make([]string, len(cs))
		for i, c := range cs {
			names[i], messages[i] = c.Webhook, c.Message
		}
		events = append(events, changeEvent{kind: k, note: circuit.EventNote("%s for %d webhooks in one write: %s. %s",
			k, len(cs), strings.Join(names, ", "), strings.Join(messages, "; "))})
	}
	return events
}

// syncGauges sets webhook_guard_circuit_open and
// webhook_guard_record_unreadable from the configuration's snapshot (nil:
// it is missing), level-based. Under an unreadable record a webhook that
// is not at Fail, or carries the bypass marker, may be open, and the
// gauge says so.
func (r *ConfigurationReconciler) syncGauges(targets []config.Target, s *decide.Snapshot) {
	if len(targets) == 0 {
		return
	}
	unreadable := s != nil && s.RecordErr != nil
	r.Metrics.RecordUnreadable.WithLabelValues(string(r.Kind), targets[0].Configuration).Set(boolGauge(unreadable))
	for _, t := range targets {
		open := false
		switch {
		case unreadable:
			wh := circuit.FindWebhook(s.View, t.Webhook)
			open = wh != nil && (wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Fail || circuit.BypassIndex(wh) >= 0)
		case s != nil:
			_, open = s.Record[t.Webhook]
		}
		r.Metrics.CircuitOpen.WithLabelValues(string(t.Kind), t.Configuration, t.Webhook).Set(boolGauge(open))
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func eventType(k decide.ChangeKind) string {
	if k == decide.Opened || k == decide.WouldOpen || k == decide.DroppedStale || k == decide.Overwritten {
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}
