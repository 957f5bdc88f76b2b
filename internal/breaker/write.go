package breaker

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// write sends one JSON patch of the owned fields (view to next), with the
// resourceVersion read: one write per transition, refused on conflict, and
// no field this client's types do not know can be lost (a full Update could
// drop it). It records, reports and counts what it wrote.
func (r *ConfigurationReconciler) write(ctx context.Context, cur client.Object, view, next *admissionregistrationv1.MutatingWebhookConfiguration, changes []decide.Change, targets []config.Target) error {
	patch, err := circuit.Patch(view, next)
	if err != nil {
		return err
	}
	written := cur.DeepCopyObject().(client.Object)
	failpoint("before-write")
	if err := r.Client.Patch(ctx, written, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(circuit.FieldManager)); err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsInvalid(err) {
			r.Metrics.WriteErrors.Inc()
			r.Recorder.Eventf(cur, nil, corev1.EventTypeWarning, "WriteFailed", "Update",
				"webhook-guard could not write %d change(s), nothing was changed: %v", len(changes), err)
		}
		return err
	}
	failpoint("after-write")
	r.wrote(cur.GetName(), cur, written)
	r.Metrics.Reconciles.WithLabelValues(ReconcileWritten).Inc()
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
			r.Metrics.Openings.WithLabelValues(string(r.Kind), view.Name, c.Webhook, c.Signal).Inc()
		}
		r.Recorder.Eventf(written, nil, eventType(c.Kind), string(c.Kind), "Update", "%s", c.Message)
		if r.Kind == circuit.KindValidating && c.Kind == decide.Opened {
			r.Recorder.Eventf(written, nil, corev1.EventTypeWarning, "AdmittingWithoutValidation", "Update",
				"%s: requests this webhook validates are admitted without its validation while the circuit is open; "+
					"webhook_guard_circuit_transitions_total{kind=\"Validating\",to=\"CircuitOpened\"} counts these openings", c.Webhook)
		}
		logf.FromContext(ctx).Info("Wrote a circuit transition", "kind", r.Kind, "webhook", c.Webhook, "change", c.Kind, "resourceVersion", written.GetResourceVersion())
	}
	r.syncGauges(targets, next)
	return nil
}

// syncGauges sets webhook_guard_circuit_open and webhook_guard_record_unreadable from the
// object (its circuit.View), level-based. Under an unreadable record a
// webhook that is not at Fail, or carries the bypass marker, may be open,
// and the gauge says so.
func (r *ConfigurationReconciler) syncGauges(targets []config.Target, view *admissionregistrationv1.MutatingWebhookConfiguration) {
	if len(targets) == 0 {
		return
	}
	rec, unreadable := circuit.Record{}, false
	if view != nil {
		decoded, err := circuit.Decode(view.Annotations)
		rec, unreadable = decoded, err != nil
	}
	r.Metrics.RecordUnreadable.WithLabelValues(string(r.Kind), targets[0].Configuration).Set(boolGauge(unreadable))
	for _, t := range targets {
		_, open := rec[t.Webhook]
		if unreadable {
			wh := circuit.FindWebhook(view, t.Webhook)
			open = wh != nil && (wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Fail || circuit.BypassIndex(wh) >= 0)
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
