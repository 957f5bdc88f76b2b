package admission_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// notes records the Events a checker emits, as the apiserver would
// receive them.
type notes struct {
	mu  sync.Mutex
	all []struct{ reason, note string }
}

func (n *notes) Eventf(_ runtime.Object, _ runtime.Object, _, reason, _, note string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.all = append(n.all, struct{ reason, note string }{reason, fmt.Sprintf(note, args...)})
}

func (n *notes) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	n.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

func (n *notes) byReason(reason string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, e := range n.all {
		if e.reason == reason {
			out = append(out, e.note)
		}
	}
	return out
}

// longName is a valid object name of the longest length (253).
func longName(prefix string, i int) string {
	name := fmt.Sprintf("%s-%05d-", prefix, i)
	return name + strings.Repeat("a", 253-len(name))
}

func manyConfigurations(n int) map[string][]string {
	m := make(map[string][]string, n)
	for i := range n {
		var hooks []string
		for j := range 5 {
			hooks = append(hooks, longName(fmt.Sprintf("hook-%d", j), i))
		}
		m[longName("config", i)] = hooks
	}
	return m
}

func policyScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, admissionregistrationv1.AddToScheme(scheme))
	return scheme
}

// TestPolicyChecker_reportsEachChangeOfVerdictAndNeverWrites: the checker
// reports the installed policy in force, then missing once it is deleted
// (one Event, however often it looks), then in force again once the
// installer applies it; the gauge follows, and the objects are never
// written by it: every write through its client fails.
func TestPolicyChecker_reportsEachChangeOfVerdictAndNeverWrites(t *testing.T) {
	opts := admission.Options{BreakerUsername: "system:serviceaccount:webhook-guard:webhook-guard", Managed: map[string][]string{"cfg": {"w.example.com"}}}
	policy, binding := admission.RenderPolicy(opts)
	c := fake.NewClientBuilder().WithScheme(policyScheme(t)).WithObjects(policy.DeepCopy(), binding.DeepCopy()).Build()
	rec := &notes{}
	gauge := admission.NewPolicyInForce()
	r := &admission.PolicyChecker{Reader: c, Options: opts, Recorder: rec, InForce: gauge}
	ctx := context.Background()
	check := func() {
		t.Helper()
		_, err := r.Reconcile(ctx, ctrl.Request{})
		require.NoError(t, err)
	}

	check()
	assert.Equal(t, 1.0, testutil.ToFloat64(gauge))
	require.Len(t, rec.byReason(admission.ReasonPolicyInForce), 1)

	require.NoError(t, c.Delete(ctx, policy.DeepCopy()))
	check()
	check()
	assert.Equal(t, 0.0, testutil.ToFloat64(gauge))
	missing := rec.byReason(admission.ReasonPolicyNotInForce)
	require.Len(t, missing, 1, "one Event per change of verdict")
	assert.Contains(t, missing[0], "ValidatingAdmissionPolicy webhook-guard is missing")
	assert.Contains(t, missing[0], "guard manifests policy")
	problems, checked := r.Problems()
	assert.True(t, checked)
	assert.Equal(t, []string{"ValidatingAdmissionPolicy webhook-guard is missing"}, problems)

	require.NoError(t, c.Create(ctx, policy.DeepCopy()))
	check()
	assert.Equal(t, 1.0, testutil.ToFloat64(gauge))
	assert.Len(t, rec.byReason(admission.ReasonPolicyInForce), 2)
	assert.NotContains(t, fmt.Sprint(rec.all), "Restored", "nothing was put back by the guard")
}

// TestPolicyProblems_namesEveryWayOfNeuteringTheGuard: the guard is in
// force only while the live objects are exactly the rendered ones; every
// way of neutering them without deleting them is named.
func TestPolicyProblems_namesEveryWayOfNeuteringTheGuard(t *testing.T) {
	opts := admission.Options{Managed: map[string][]string{"cfg": {"w.example.com"}}}
	scheme := policyScheme(t)
	build := func(edit func(*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding)) []string {
		p, b := admission.RenderPolicy(opts)
		if edit != nil {
			edit(p, b)
		}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(p, b).Build()
		problems, err := admission.PolicyProblems(context.Background(), c, opts)
		require.NoError(t, err)
		return problems
	}
	require.Empty(t, build(nil))
	require.Empty(t, build(func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		p.Labels, b.Annotations = map[string]string{"app.kubernetes.io/managed-by": "Helm"}, map[string]string{"argocd.argoproj.io/tracking-id": "x"}
		delete(p.Annotations, admission.PolicyInputsAnnotation)
	}), "labels and annotations change nothing kube-apiserver enforces")
	other := opts
	other.BreakerUsername = "system:serviceaccount:elsewhere:webhook-guard"
	otherPolicy, _ := admission.RenderPolicy(other)
	fewer := admission.Options{Managed: map[string][]string{"other": {"w.example.com"}}}
	fewerPolicy, _ := admission.RenderPolicy(fewer)
	for name, tc := range map[string]struct {
		edit func(*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		want string
	}{
		"a false matchCondition on the policy": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			p.Spec.MatchConditions = append(p.Spec.MatchConditions, admissionregistrationv1.MatchCondition{Name: "off", Expression: "false"})
		}, "matchConditions"},
		"failurePolicy Ignore": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			ignore := admissionregistrationv1.Ignore
			p.Spec.FailurePolicy = &ignore
		}, "failurePolicy Ignore, not Fail"},
		"an object selector on the policy": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			p.Spec.MatchConstraints.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"never": "x"}}
		}, "matchConstraints"},
		"an exclusion on the policy": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			p.Spec.MatchConstraints.ExcludeResourceRules = p.Spec.MatchConstraints.ResourceRules
		}, "matchConstraints"},
		"another breaker exempted": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			p.Spec = *otherPolicy.Spec.DeepCopy()
		}, "name the breaker"},
		"fewer targets": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			p.Spec = *fewerPolicy.Spec.DeepCopy()
		}, "the targets' configurations"},
		"a validation removed": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			p.Spec.Validations = p.Spec.Validations[1:]
		}, "its validations differ"},
		"a binding narrowed by matchResources": {func(_ *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"never": "x"}}}
		}, "narrows"},
		"a binding that only audits": {func(_ *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
		}, "validationActions [Audit], not [Deny]"},
		"a binding of another policy": {func(_ *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.PolicyName = "harmless"
		}, `binds policy "harmless"`},
	} {
		t.Run(name, func(t *testing.T) {
			problems := build(tc.edit)
			require.NotEmpty(t, problems)
			assert.Contains(t, strings.Join(problems, "; "), tc.want)
		})
	}
}

// kube-apiserver rejects an Event whose note is longer than 1,024 bytes:
// the checker's Events name the count of managed configurations, never
// their list, and are cut to the limit whatever the inputs.
func TestPolicyChecker_eventsStayUnderTheApiserversLimit(t *testing.T) {
	for name, opts := range map[string]admission.Options{
		"1000 configurations": {
			BreakerUsername: "system:serviceaccount:webhook-guard:webhook-guard",
			Managed:         manyConfigurations(1000), ManagedValidating: manyConfigurations(500),
		},
		"an absurd identity and the longest instance": {
			BreakerUsername: strings.Repeat("système:", 2000),
			Managed:         manyConfigurations(100),
			Instance:        strings.Repeat("i", 253-len(admission.PolicyName)-1),
		},
	} {
		t.Run(name, func(t *testing.T) {
			policy, binding := admission.RenderPolicy(opts)
			c := fake.NewClientBuilder().WithScheme(policyScheme(t)).WithObjects(policy, binding).Build()
			rec := &notes{}
			r := &admission.PolicyChecker{Reader: c, Options: opts, Recorder: rec, InForce: admission.NewPolicyInForce()}
			ctx := context.Background()
			_, err := r.Reconcile(ctx, ctrl.Request{})
			require.NoError(t, err)
			require.NoError(t, c.Delete(ctx, policy))
			require.NoError(t, c.Delete(ctx, binding))
			_, err = r.Reconcile(ctx, ctrl.Request{})
			require.NoError(t, err)
			for _, reason := range []string{admission.ReasonPolicyInForce, admission.ReasonPolicyNotInForce} {
				got := rec.byReason(reason)
				require.Len(t, got, 1, reason)
				assert.LessOrEqual(t, len(got[0]), circuit.EventNoteLimit, reason)
				assert.True(t, utf8.ValidString(got[0]), reason)
			}
		})
	}
}
