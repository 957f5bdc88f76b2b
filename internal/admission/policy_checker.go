package admission

import (
	"context"
	"fmt"
	"strings"
	"sync"

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

// Why the guard only reads its policy. kube-apiserver evaluates no
// API-registered admission policy on writes to admission policies and
// their bindings (k8s.io/apiserver, pkg/admission/plugin/policy/generic:
// "admission config resources are skipped"), so RBAC is the only limit on
// who changes the guard policy. A token that could update it could set the
// binding to Audit, or exempt itself more widely, and then use its patch on
// the targets to repoint an approved webhook at a server of its own. The
// installer therefore ships the policy and binding (rendered by "guard
// manifests policy", or the chart's templates of the same rendering), and
// the breaker's token has no write verb on either. The running guard checks
// that they are the rule it renders, and says so when they are not; it
// keeps opening and closing circuits either way, since its own writes need
// no policy: only the writes of others go unguarded.

// Event reasons of the PolicyChecker.
const (
	// ReasonPolicyNotInForce: the policy or binding is missing or differs
	// from the guard's rendering.
	ReasonPolicyNotInForce = "GuardPolicyNotInForce"
	// ReasonPolicyInForce: the policy and binding are the guard's rendering
	// again (or for the first time since the guard started).
	ReasonPolicyInForce = "GuardPolicyInForce"
)

// PolicyChecker reads the ValidatingAdmissionPolicy and binding named
// Options.Policy() and compares them with what RenderPolicy renders from
// Options (PolicyProblems). It never writes them. On every change of
// verdict it emits an Event and sets InForce; Problems returns the last
// verdict for "guard status" and /status.
type PolicyChecker struct {
	// Reader reads the objects (the manager's cache, which watches them).
	Reader client.Reader
	// Options are the rule's options: the breaker's identity (from
	// SelfSubjectReview) and the managed names (from the configuration).
	Options Options
	// Recorder emits Events about the policy.
	Recorder recorder.EventRecorder
	// InForce is set by every check (NewPolicyInForce).
	InForce prometheus.Gauge

	mu      sync.Mutex
	checked bool
	last    []string
}

// Reconcile checks both objects and reports a change of verdict.
func (r *PolicyChecker) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	problems, err := PolicyProblems(ctx, r.Reader, r.Options)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.mu.Lock()
	changed := !r.checked || strings.Join(problems, "\n") != strings.Join(r.last, "\n")
	r.checked, r.last = true, problems
	r.mu.Unlock()
	if len(problems) == 0 {
		r.InForce.Set(1)
	} else {
		r.InForce.Set(0)
	}
	if !changed {
		return ctrl.Result{}, nil
	}
	policy, binding := RenderPolicy(r.Options)
	var regarding client.Object = &admissionregistrationv1.ValidatingAdmissionPolicy{TypeMeta: policy.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: policy.Name}}
	action := "Check"
	log := logf.FromContext(ctx)
	if len(problems) == 0 {
		log.Info("The guard policy is in force", "name", policy.Name)
		r.Recorder.Eventf(regarding, nil, corev1.EventTypeNormal, ReasonPolicyInForce, action, "%s", circuit.EventNote(
			"webhook-guard's ValidatingAdmissionPolicy %s and its binding are the rule it renders (%s, breaker: %s)",
			policy.Name, r.Options.summary(), r.Options.Breaker()))
		return ctrl.Result{}, nil
	}
	log.Info("The guard policy is not in force: writes by others to the fields the breaker owns are not refused; the breaker goes on",
		"name", policy.Name, "problems", problems)
	// Events of one object, reason and action within minutes are one
	// series that keeps its first note (client-go's events API), so the
	// Event is about the object of the first problem, and its action says
	// whether that object is missing or changed: a binding loosened, then
	// the policy deleted, are two Events.
	if strings.HasPrefix(problems[0], binding.Kind+" ") {
		regarding = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{TypeMeta: binding.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: binding.Name}}
	}
	action = "Changed"
	if strings.HasSuffix(problems[0], " is missing") {
		action = "Missing"
	}
	r.Recorder.Eventf(regarding, nil, corev1.EventTypeWarning, ReasonPolicyNotInForce, action, "%s", circuit.EventNote(
		"webhook-guard's guard policy is not in force, so writes by others to the fields the breaker owns are not refused (the breaker goes on): %s. "+
			"Apply the installation's manifests again (helm upgrade, or kustomize build ... | kubectl apply -f -; guard manifests policy renders them)",
		strings.Join(problems, "; ")))
	return ctrl.Result{}, nil
}

// Problems returns the last check's problems, and false before the first
// check.
func (r *PolicyChecker) Problems() ([]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.last...), r.checked
}

// SetupWithManager watches the two objects by name and checks at startup
// even when neither exists.
func (r *PolicyChecker) SetupWithManager(mgr ctrl.Manager) error {
	name := r.Options.Policy()
	byName := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == name })
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []ctrl.Request {
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Name: name}}}
	})
	// A watch only fires for objects that exist; one event at start makes
	// the first check report a policy that was never installed.
	start := make(chan event.GenericEvent, 1)
	start <- event.GenericEvent{Object: &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("guard-policy").
		For(&admissionregistrationv1.ValidatingAdmissionPolicy{}, builder.WithPredicates(byName)).
		Watches(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, one, builder.WithPredicates(byName)).
		WatchesRawSource(source.Channel(start, one)).
		Complete(r)
}

// PolicyProblems compares the live policy and binding with what
// RenderPolicy renders from opts, and lists every difference that weakens
// the guard, in words an administrator can act on; none means the guard is
// in force as this version renders it for opts' breaker and targets. Only
// the specs are compared: labels and annotations (a GitOps tool's, say)
// change nothing kube-apiserver enforces. An error is returned only when
// the objects cannot be read.
func PolicyProblems(ctx context.Context, c client.Reader, opts Options) ([]string, error) {
	policy, binding := RenderPolicy(opts)
	var problems []string
	live := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	switch err := c.Get(ctx, client.ObjectKeyFromObject(policy), live); {
	case apierrors.IsNotFound(err):
		problems = append(problems, fmt.Sprintf("ValidatingAdmissionPolicy %s is missing", policy.Name))
	case err != nil:
		return nil, fmt.Errorf("reading ValidatingAdmissionPolicy %s: %w", policy.Name, err)
	default:
		problems = append(problems, policySpecProblems(policy.Name, live.Spec, policy.Spec)...)
	}
	liveBinding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	switch err := c.Get(ctx, client.ObjectKeyFromObject(binding), liveBinding); {
	case apierrors.IsNotFound(err):
		problems = append(problems, fmt.Sprintf("ValidatingAdmissionPolicyBinding %s is missing", binding.Name))
	case err != nil:
		return nil, fmt.Errorf("reading ValidatingAdmissionPolicyBinding %s: %w", binding.Name, err)
	default:
		problems = append(problems, bindingSpecProblems(binding.Name, liveBinding.Spec, binding.Spec)...)
	}
	return problems, nil
}

// policySpecProblems names each part of the policy's spec that differs
// from want's.
func policySpecProblems(name string, live, want admissionregistrationv1.ValidatingAdmissionPolicySpec) []string {
	if equality.Semantic.DeepEqual(live, want) {
		return nil
	}
	prefix := "ValidatingAdmissionPolicy " + name + " "
	var out []string
	if !equality.Semantic.DeepEqual(live.FailurePolicy, want.FailurePolicy) {
		out = append(out, prefix+"has failurePolicy "+policyName(live.FailurePolicy)+", not "+policyName(want.FailurePolicy))
	}
	if !equality.Semantic.DeepEqual(live.MatchConstraints, want.MatchConstraints) {
		out = append(out, prefix+"matches other requests than the guard's (its matchConstraints: the targets' configurations or the operations differ)")
	}
	if !equality.Semantic.DeepEqual(live.MatchConditions, want.MatchConditions) {
		out = append(out, prefix+"skips other requests than the guard's (its matchConditions, which name the breaker and the release identity, differ)")
	}
	if !equality.Semantic.DeepEqual(live.Variables, want.Variables) {
		out = append(out, prefix+"computes another rule (its variables, which name the breaker and the targets' webhooks, differ)")
	}
	if !equality.Semantic.DeepEqual(live.Validations, want.Validations) {
		out = append(out, prefix+"validates another rule (its validations differ)")
	}
	if len(out) == 0 {
		out = append(out, prefix+"differs from the guard's rendering (paramKind, audit annotations or another field)")
	}
	return out
}

// bindingSpecProblems names each part of the binding's spec that differs
// from want's.
func bindingSpecProblems(name string, live, want admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) []string {
	if equality.Semantic.DeepEqual(live, want) {
		return nil
	}
	prefix := "ValidatingAdmissionPolicyBinding " + name + " "
	var out []string
	if live.PolicyName != want.PolicyName {
		out = append(out, fmt.Sprintf("%sbinds policy %q, not %q", prefix, live.PolicyName, want.PolicyName))
	}
	if !equality.Semantic.DeepEqual(live.ValidationActions, want.ValidationActions) {
		out = append(out, fmt.Sprintf("%shas validationActions %v, not %v: a denial is not enforced", prefix, live.ValidationActions, want.ValidationActions))
	}
	if !equality.Semantic.DeepEqual(live.MatchResources, want.MatchResources) {
		out = append(out, prefix+"narrows what the policy matches (matchResources)")
	}
	if !equality.Semantic.DeepEqual(live.ParamRef, want.ParamRef) {
		out = append(out, prefix+"has a paramRef")
	}
	if len(out) == 0 {
		out = append(out, prefix+"differs from the guard's rendering")
	}
	return out
}

func policyName(p *admissionregistrationv1.FailurePolicyType) string {
	if p == nil {
		return circuit.Unset
	}
	return string(*p)
}

// PolicyInPlace returns an error naming every problem PolicyProblems
// finds, nil when the guard policy is in force for opts.
func PolicyInPlace(ctx context.Context, c client.Reader, opts Options) error {
	problems, err := PolicyProblems(ctx, c, opts)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("the guard policy is not in force: %s", strings.Join(problems, "; "))
	}
	return nil
}
