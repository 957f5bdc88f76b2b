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

// NewPolicyRepairs returns the counter of writes that put the guard policy
// or its binding back after someone deleted or changed it. The caller
// registers it with the other metrics.
func NewPolicyRepairs() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "webhook_guard_policy_repairs_total",
		Help: "Writes that restored the webhook-guard ValidatingAdmissionPolicy or its binding, by object and action.",
	}, []string{"object", "action"})
}

// The label values of webhook_guard_policy_repairs_total.
var (
	// RepairObjects are the kinds RenderPolicy renders.
	RepairObjects = []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
	// RepairActions are what a repair did.
	RepairActions = []string{repairCreated, repairUpdated}
)

const (
	repairCreated = "created"
	repairUpdated = "updated"
)

// InitializePolicyRepairs creates every series of repairs (NewPolicyRepairs)
// at 0, so that the first repair after a start is an increase from 0 that
// increase() sees, not a series that appears at 1.
func InitializePolicyRepairs(repairs *prometheus.CounterVec) {
	for _, object := range RepairObjects {
		for _, action := range RepairActions {
			repairs.WithLabelValues(object, action)
		}
	}
}

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

// variable is the expression of spec's variable name; "" when it has none.
func variable(spec admissionregistrationv1.ValidatingAdmissionPolicySpec, name string) string {
	for _, v := range spec.Variables {
		if v.Name == name {
			return v.Expression
		}
	}
	return ""
}

// earlierRule reports whether live, a policy without a rule digest, is
// the rule of a guard from before digests that nothing switched off: only
// its CEL may differ from want's; its failurePolicy, matchConditions (it
// had none), match constraints but for the targets, and number of
// validations must be want's or those versions'.
func earlierRule(live, want admissionregistrationv1.ValidatingAdmissionPolicySpec) bool {
	if live.FailurePolicy == nil || *live.FailurePolicy != admissionregistrationv1.Fail || len(live.MatchConditions) > 0 ||
		len(live.Validations) != len(want.Validations) || live.MatchConstraints == nil || want.MatchConstraints == nil ||
		len(live.MatchConstraints.ResourceRules) != len(want.MatchConstraints.ResourceRules) {
		return false
	}
	if variable(live, "isBreaker") != variable(want, "isBreaker") {
		return false
	}
	constraints := want.MatchConstraints.DeepCopy()
	for i := range constraints.ResourceRules {
		constraints.ResourceRules[i].ResourceNames = live.MatchConstraints.ResourceRules[i].ResourceNames
	}
	for _, v := range live.Validations {
		if v.Reason == nil || *v.Reason != metav1.StatusReasonForbidden {
			return false
		}
	}
	return equality.Semantic.DeepEqual(live.MatchConstraints, constraints)
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
// the cluster are in place (inPlace) for opts. It is the readiness signal: a
// replica is not ready while the guard is not enforced as rendered.
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

// PolicyEnforced is the readiness signal: the policy and binding in the
// cluster are in place as any configuration renders them, whichever
// targets they name. Only the leader writes the policy, for its own
// configuration; during a rollout that changes the targets, a new replica
// must be ready while the old leader's policy stands, or the rollout never
// completes. The same holds for a rollout to a version with another rule:
// a policy whose rule digest (circuit.PolicyDigestAnnotation) matches its
// own spec is one a guard rendered and nobody changed since, and is
// accepted whatever version's rule it holds. Anything else that differs
// (an added matchCondition, an exclusion, a narrowed binding) is not in
// place.
func PolicyEnforced(ctx context.Context, c client.Reader, opts Options) error {
	policy, binding := RenderPolicy(opts)
	live := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(policy), live); err != nil {
		return fmt.Errorf("ValidatingAdmissionPolicy %s: %w", policy.Name, err)
	}
	digest := live.Annotations[circuit.PolicyDigestAnnotation]
	otherRule := digest != "" && digest != policy.Annotations[circuit.PolicyDigestAnnotation]
	switch {
	case otherRule && variable(live.Spec, "isBreaker") != variable(policy.Spec, "isBreaker"):
		return fmt.Errorf("ValidatingAdmissionPolicy %s holds another breaker's rule", policy.Name)
	case otherRule && ruleDigest(live.Spec) == digest:
		// Another version's rule for this breaker, as that version
		// rendered it.
	case otherRule:
		return fmt.Errorf("ValidatingAdmissionPolicy %s was changed after a guard rendered it (its %s does not match its rule)", policy.Name, circuit.PolicyDigestAnnotation)
	case digest == "" && earlierRule(live.Spec, policy.Spec):
		// A version from before rule digests.
	default:
		// Take the targets from the live policy, then require the rest equal.
		if mc := live.Spec.MatchConstraints; mc != nil && len(mc.ResourceRules) == len(policy.Spec.MatchConstraints.ResourceRules) {
			for i := range mc.ResourceRules {
				policy.Spec.MatchConstraints.ResourceRules[i].ResourceNames = mc.ResourceRules[i].ResourceNames
			}
		}
		for i, v := range policy.Spec.Variables {
			if v.Name == managedVariable {
				for _, lv := range live.Spec.Variables {
					if lv.Name == managedVariable {
						policy.Spec.Variables[i].Expression = lv.Expression
					}
				}
			}
		}
		if !inPlace(live, policy) {
			return fmt.Errorf("ValidatingAdmissionPolicy %s differs from the rendered guard beyond its targets", policy.Name)
		}
	}
	liveBinding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(binding), liveBinding); err != nil {
		return fmt.Errorf("ValidatingAdmissionPolicyBinding %s: %w", binding.Name, err)
	}
	if !inPlace(liveBinding, binding) {
		return fmt.Errorf("ValidatingAdmissionPolicyBinding %s differs from the rendered guard", binding.Name)
	}
	return nil
}
