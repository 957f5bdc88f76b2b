package breaker

import (
	"context"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/webhook-guard/webhook-guard/internal/config"
)

// maxConflictRetries bounds how often one reconcile re-reads and decides
// again after a conflict before it hands the request back to the queue.
const maxConflictRetries = 5

// TargetReconciler writes the circuit's transitions to the target
// MutatingWebhookConfigurations, one Update per transition, with a
// resourceVersion precondition. It is level-based: from the object and
// the probe counts it computes the wanted object (Plan) and writes the
// difference, so a repeated or late reconcile is harmless.
type TargetReconciler struct {
	// Client reads from the cache and writes.
	Client client.Client
	// APIReader reads fresh from the apiserver after a conflict.
	APIReader client.Reader
	// Targets are the approved webhooks.
	Targets []config.Target
	// State holds the probe counts.
	State *State
	// Recorder emits Events on the configuration.
	Recorder recorder.EventRecorder
	// Metrics count transitions, conflicts and errors.
	Metrics *Metrics
	// Clock stamps openedAt. Default: the real clock.
	Clock clock.PassiveClock
}

// Reconcile brings one configuration to what the circuit wants.
func (r *TargetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	targets := r.targetsOf(req.Name)
	if len(targets) == 0 {
		return ctrl.Result{}, nil
	}
	var reader client.Reader = r.Client
	for attempt := 0; ; attempt++ {
		cur := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := reader.Get(ctx, req.NamespacedName, cur); err != nil {
			if apierrors.IsNotFound(err) {
				r.syncGauges(targets, nil)
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", req.Name, err)
		}
		in := Inputs{Targets: targets, Counts: map[string]Counts{}, Now: now(r.Clock)}
		for _, t := range targets {
			if st, ok := r.State.Get(t.Key()); ok && st.Problem == "" {
				in.Counts[t.Webhook] = st.Counts
			}
		}
		next, changes, err := Plan(cur, in)
		if err != nil {
			r.Recorder.Eventf(cur, nil, corev1.EventTypeWarning, "RecordUnreadable", "Reconcile",
				"webhook-guard changes nothing on this configuration until the record is repaired: %v", err)
			r.syncGauges(targets, cur)
			return ctrl.Result{}, nil // retried when the object changes
		}
		if len(changes) == 0 || equality.Semantic.DeepEqual(cur, next) {
			r.syncGauges(targets, cur)
			return ctrl.Result{}, nil
		}
		err = r.Client.Update(ctx, next)
		switch {
		case err == nil:
			for _, c := range changes {
				r.Metrics.Transitions.WithLabelValues(string(c.Kind)).Inc()
				r.Recorder.Eventf(next, nil, eventType(c.Kind), string(c.Kind), "Update", "%s", c.Message)
				log.Info("Wrote a circuit transition", "webhook", c.Webhook, "change", c.Kind, "resourceVersion", next.ResourceVersion)
			}
			r.syncGauges(targets, next)
			return ctrl.Result{}, nil
		case apierrors.IsConflict(err) && attempt < maxConflictRetries:
			r.Metrics.WriteConflicts.Inc()
			log.V(1).Info("Write conflict; reading again and deciding again", "attempt", attempt+1)
			reader = r.APIReader
		default:
			if apierrors.IsConflict(err) {
				r.Metrics.WriteConflicts.Inc()
			} else {
				r.Metrics.WriteErrors.Inc()
			}
			r.Recorder.Eventf(cur, nil, corev1.EventTypeWarning, "WriteFailed", "Update",
				"webhook-guard could not write %d change(s), nothing was changed: %v", len(changes), err)
			return ctrl.Result{}, fmt.Errorf("updating MutatingWebhookConfiguration %s: %w", req.Name, err)
		}
	}
}

// syncGauges sets guard_circuit_open from the object, level-based.
func (r *TargetReconciler) syncGauges(targets []config.Target, mwc *admissionregistrationv1.MutatingWebhookConfiguration) {
	rec := Record{}
	if mwc != nil {
		if decoded, err := DecodeRecord(mwc.Annotations); err == nil {
			rec = decoded
		}
	}
	for _, t := range targets {
		v := 0.0
		if _, open := rec[t.Webhook]; open {
			v = 1
		}
		r.Metrics.CircuitOpen.WithLabelValues(t.Configuration, t.Webhook).Set(v)
	}
}

func (r *TargetReconciler) targetsOf(configuration string) []config.Target {
	var out []config.Target
	for _, t := range r.Targets {
		if t.Configuration == configuration {
			out = append(out, t)
		}
	}
	return out
}

func eventType(k ChangeKind) string {
	if k == Opened || k == DroppedStale || k == Overwritten {
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}

// SetupWithManager watches the target configurations (and nothing else)
// and the probe runner's triggers.
func (r *TargetReconciler) SetupWithManager(mgr ctrl.Manager, trigger <-chan event.GenericEvent) error {
	names := map[string]bool{}
	for _, t := range r.Targets {
		names[t.Configuration] = true
	}
	isTarget := predicate.NewPredicateFuncs(func(o client.Object) bool { return names[o.GetName()] })
	return ctrl.NewControllerManagedBy(mgr).
		Named("breaker").
		For(&admissionregistrationv1.MutatingWebhookConfiguration{}, builder.WithPredicates(isTarget)).
		WatchesRawSource(source.Channel(trigger, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// now reads c, or the real clock when c is nil.
func now(c clock.PassiveClock) time.Time {
	if c == nil {
		return time.Now()
	}
	return c.Now()
}
