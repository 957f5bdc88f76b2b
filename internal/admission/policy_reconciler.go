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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// FieldOwner is the server-side apply field manager of the objects the
// service reconciles.
const FieldOwner = "webhook-guard"

// PolicyRepairs counts writes that put the guard policy or its binding
// back after someone deleted or changed it.
var PolicyRepairs = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "guard_policy_repairs_total",
	Help: "Writes that restored the webhook-guard ValidatingAdmissionPolicy or its binding, by object and action.",
}, []string{"object", "action"})

// PolicyReconciler keeps the ValidatingAdmissionPolicy and binding named
// PolicyName equal to what RenderPolicy renders from Options. It applies
// them with server-side apply, so fields it does not own are left alone
// and a no-op apply does not write; any write after the first is a repair
// and gets an Event and a count.
type PolicyReconciler struct {
	// Client writes the objects.
	Client client.Client
	// Options are the rule's options: the breaker's identity (from
	// SelfSubjectReview) and the managed names (from the configuration).
	Options Options
	// Recorder emits Events on the repaired object.
	Recorder recorder.EventRecorder

	reconciled atomic.Bool
}

// Reconcile applies both objects.
func (r *PolicyReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	policy, binding := RenderPolicy(r.Options)
	for _, obj := range []client.Object{policy, binding} {
		if err := r.apply(ctx, obj); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.reconciled.Store(true)
	return ctrl.Result{}, nil
}

func (r *PolicyReconciler) apply(ctx context.Context, want client.Object) error {
	kind := want.GetObjectKind().GroupVersionKind().Kind
	before, err := r.get(ctx, want)
	if err != nil {
		return err
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(want)
	if err != nil {
		return fmt.Errorf("converting %s: %w", kind, err)
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}),
		client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", kind, want.GetName(), err)
	}
	after, err := r.get(ctx, want)
	if err != nil || after == nil {
		return err
	}
	action := ""
	switch {
	case before == nil:
		action = "created"
	case before.GetResourceVersion() != after.GetResourceVersion():
		action = "updated"
	default:
		return nil
	}
	if !r.reconciled.Load() {
		// The first apply fills in what kustomize could not know: the
		// breaker's identity and the target names. That is not a repair.
		logf.FromContext(ctx).Info("Applied the guard policy object", "kind", kind, "name", want.GetName(), "action", action)
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "GuardPolicyApplied", "Apply",
			"webhook-guard %s %s %s (managed configurations: %v, breaker: %s)",
			action, kind, want.GetName(), r.Options.ConfigNames(), r.Options.Breaker())
		return nil
	}
	PolicyRepairs.WithLabelValues(kind, action).Inc()
	logf.FromContext(ctx).Info("Restored the guard policy object", "kind", kind, "name", want.GetName(), "action", action)
	r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, "GuardPolicyRestored", "Apply",
		"webhook-guard %s %s %s after it was deleted or changed, to enforce its ownership rule (managed configurations: %v, breaker: %s)",
		action, kind, want.GetName(), r.Options.ConfigNames(), r.Options.Breaker())
	return nil
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

// InPlace reports whether the objects have been applied at least once by
// this process. Used by readyz on the leader.
func (r *PolicyReconciler) InPlace() bool { return r.reconciled.Load() }

// SetupWithManager watches the two objects by name and reconciles at
// startup even when neither exists yet.
func (r *PolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byName := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == PolicyName })
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []ctrl.Request {
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Name: PolicyName}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("guard-policy").
		For(&admissionregistrationv1.ValidatingAdmissionPolicy{}, builder.WithPredicates(byName)).
		Watches(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, one, builder.WithPredicates(byName)).
		Complete(r)
}

// PolicyInPlace checks, from any replica, that the policy and binding in
// the cluster are what Options renders. It is the readiness signal: a
// replica is not ready while the guard is not enforced.
func PolicyInPlace(ctx context.Context, c client.Reader, opts Options) error {
	want, wantBinding := RenderPolicy(opts)
	got := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Name: PolicyName}, got); err != nil {
		return fmt.Errorf("ValidatingAdmissionPolicy %s: %w", PolicyName, err)
	}
	gotBinding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := c.Get(ctx, client.ObjectKey{Name: PolicyName}, gotBinding); err != nil {
		return fmt.Errorf("ValidatingAdmissionPolicyBinding %s: %w", PolicyName, err)
	}
	if !equality.Semantic.DeepEqual(want.Spec.Validations, got.Spec.Validations) ||
		!equality.Semantic.DeepEqual(want.Spec.Variables, got.Spec.Variables) ||
		!equality.Semantic.DeepEqual(want.Spec.MatchConstraints.ResourceRules, got.Spec.MatchConstraints.ResourceRules) {
		return fmt.Errorf("ValidatingAdmissionPolicy %s differs from the rendered rule", PolicyName)
	}
	if gotBinding.Spec.PolicyName != PolicyName || !equality.Semantic.DeepEqual(wantBinding.Spec.ValidationActions, gotBinding.Spec.ValidationActions) {
		return fmt.Errorf("ValidatingAdmissionPolicyBinding %s differs from the rendered binding", PolicyName)
	}
	return nil
}
