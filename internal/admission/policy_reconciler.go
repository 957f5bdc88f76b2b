package admission

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// PolicyReconciler keeps the ValidatingAdmissionPolicy and binding named
// Options.Policy() equal to what RenderPolicy renders from Options. It writes
// only when the live objects are not in place (inPlace); any write after
// the first reconcile is a repair and gets an Event and a count.
type PolicyReconciler struct {
	// Client writes the objects.
	Client client.Client
	// Options are the rule's options: the breaker's identity (from
	// SelfSubjectReview) and the managed names (from the configuration).
	Options Options
	// Recorder emits Events on the repaired object.
	Recorder recorder.EventRecorder
	// Repairs counts repairs (NewPolicyRepairs).
	Repairs *prometheus.CounterVec

	applied atomic.Bool
}

// Reconcile applies both objects.
func (r *PolicyReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	policy, binding := RenderPolicy(r.Options)
	for _, obj := range []client.Object{policy, binding} {
		if err := r.apply(ctx, obj); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.applied.Store(true)
	return ctrl.Result{}, nil
}

// apply makes the live object equal to want. Any difference (including
// list entries another manager added) is replaced outright by an Update.
func (r *PolicyReconciler) apply(ctx context.Context, want client.Object) error {
	kind := want.GetObjectKind().GroupVersionKind().Kind
	live, err := r.get(ctx, want)
	if err != nil {
		return err
	}
	action := repairCreated
	var after client.Object
	if live == nil {
		after = want.DeepCopyObject().(client.Object)
		if err := r.Client.Create(ctx, after, client.FieldOwner(circuit.FieldManager)); err != nil {
			return fmt.Errorf("creating %s %s: %w", kind, want.GetName(), err)
		}
	} else {
		if inPlace(live, want) && hasAll(live.GetLabels(), want.GetLabels()) && hasAll(live.GetAnnotations(), want.GetAnnotations()) {
			return nil
		}
		action = repairUpdated
		after = withSpec(live, want)
		if err := r.Client.Update(ctx, after, client.FieldOwner(circuit.FieldManager)); err != nil {
			return fmt.Errorf("updating %s %s: %w", kind, want.GetName(), err)
		}
	}
	if !r.applied.Load() {
		// The first apply fills in what kustomize could not know: the
		// breaker's identity and the target names. That is not a repair.
		logf.FromContext(ctx).Info("Applied the guard policy object", "kind", kind, "name", want.GetName(), "action", action)
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "GuardPolicyApplied", "Apply", "%s", circuit.EventNote(
			"webhook-guard %s %s %s (%s, breaker: %s)",
			action, kind, want.GetName(), r.Options.summary(), r.Options.Breaker()))
		return nil
	}
	r.Repairs.WithLabelValues(kind, action).Inc()
	logf.FromContext(ctx).Info("Restored the guard policy object", "kind", kind, "name", want.GetName(), "action", action)
	r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, "GuardPolicyRestored", "Apply", "%s", circuit.EventNote(
		"webhook-guard %s %s %s after it was deleted or changed, to enforce its ownership rule (%s, breaker: %s)",
		action, kind, want.GetName(), r.Options.summary(), r.Options.Breaker()))
	return nil
}

// withSpec returns live with want's spec, labels and annotations, keeping
// live's other metadata (resourceVersion, others' labels and annotations).
func withSpec(live, want client.Object) client.Object {
	out := live.DeepCopyObject().(client.Object)
	switch o := out.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		o.Spec = *want.(*admissionregistrationv1.ValidatingAdmissionPolicy).Spec.DeepCopy()
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		o.Spec = *want.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding).Spec.DeepCopy()
	}
	labels := out.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range want.GetLabels() {
		labels[k] = v
	}
	out.SetLabels(labels)
	if len(want.GetAnnotations()) > 0 {
		annotations := out.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		for k, v := range want.GetAnnotations() {
			annotations[k] = v
		}
		out.SetAnnotations(annotations)
	}
	return out
}

// inPlace is the one meaning of "the guard is in place": the live object's
// whole spec equals the rendered one. RenderPolicy sets every field the
// apiserver defaults, so a live object equals it only when nothing was
// added, removed or changed, whoever did it; an added matchCondition or a
// binding narrowed by matchResources is not in place.
func inPlace(live, want client.Object) bool {
	switch l := live.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		w, ok := want.(*admissionregistrationv1.ValidatingAdmissionPolicy)
		return ok && equality.Semantic.DeepEqual(l.Spec, w.Spec)
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		w, ok := want.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		return ok && equality.Semantic.DeepEqual(l.Spec, w.Spec)
	}
	return false
}

// hasAll reports whether have holds every key of want with its value.
func hasAll(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func (r *PolicyReconciler) get(ctx context.Context, like client.Object) (client.Object, error) {
	obj := like.DeepCopyObject().(client.Object)
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(like), obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s %s: %w", like.GetObjectKind().GroupVersionKind().Kind, like.GetName(), err)
	}
	return obj, nil
}

// SetupWithManager watches the two objects by name and reconciles at
// startup even when neither exists yet.
func (r *PolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	name := r.Options.Policy()
	byName := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == name })
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []ctrl.Request {
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Name: name}}}
	})
	// A watch only fires for objects that exist; one event at start makes
	// the first reconcile create them when kustomize did not.
	start := make(chan event.GenericEvent, 1)
	start <- event.GenericEvent{Object: &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("guard-policy").
		For(&admissionregistrationv1.ValidatingAdmissionPolicy{}, builder.WithPredicates(byName)).
		Watches(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, one, builder.WithPredicates(byName)).
		WatchesRawSource(source.Channel(start, one)).
		Complete(r)
}

// PolicyInPlace checks, from any replica, that the policy and binding in
// the cluster are in place (inPlace) for opts: what a leader with opts
// leaves as it is, this version's rule for opts' targets. It is not the
// readiness signal, which also accepts an old leader's rule and targets
// (PolicyEnforced); the e2e tests wait on it for a leader's writes.
func PolicyInPlace(ctx context.Context, c client.Reader, opts Options) error {
	policy, binding := RenderPolicy(opts)
	for _, want := range []client.Object{policy, binding} {
		kind := want.GetObjectKind().GroupVersionKind().Kind
		live := want.DeepCopyObject().(client.Object)
		if err := c.Get(ctx, client.ObjectKeyFromObject(want), live); err != nil {
			return fmt.Errorf("%s %s: %w", kind, want.GetName(), err)
		}
		if !inPlace(live, want) {
			return fmt.Errorf("%s %s differs from the rendered guard", kind, want.GetName())
		}
	}
	return nil
}
