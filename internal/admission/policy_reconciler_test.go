package admission_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

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

// notes records the Events a reconciler emits, as the apiserver would
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

// reconcileAndRepair applies the policy once (GuardPolicyApplied), then
// deletes both objects and reconciles again (GuardPolicyRestored).
func reconcileAndRepair(t *testing.T, opts admission.Options) *notes {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, admissionregistrationv1.AddToScheme(scheme))
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	rec := &notes{}
	r := &admission.PolicyReconciler{Client: c, Options: opts, Recorder: rec, Repairs: admission.NewPolicyRepairs()}
	ctx := context.Background()
	_, err := r.Reconcile(ctx, ctrl.Request{})
	require.NoError(t, err)
	meta := metav1.ObjectMeta{Name: opts.Policy()}
	require.NoError(t, c.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: meta}))
	require.NoError(t, c.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: meta}))
	_, err = r.Reconcile(ctx, ctrl.Request{})
	require.NoError(t, err)
	return rec
}

// kube-apiserver rejects an Event whose note is longer than 1,024 bytes:
// the policy's Events name the count of managed configurations, never
// their list, at any number of them.
func TestPolicyReconciler_eventsStayUnderTheApiserversLimitAtManyConfigurations(t *testing.T) {
	for _, n := range []int{100, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			opts := admission.Options{
				BreakerUsername:   "system:serviceaccount:webhook-guard:webhook-guard",
				Managed:           manyConfigurations(n),
				ManagedValidating: manyConfigurations(n / 2),
			}
			rec := reconcileAndRepair(t, opts)
			count := fmt.Sprintf("managed configurations: %d mutating, %d validating", n, n/2)
			for _, reason := range []string{"GuardPolicyApplied", "GuardPolicyRestored"} {
				got := rec.byReason(reason)
				require.Len(t, got, 2, "%s: one for the policy, one for the binding", reason)
				for _, note := range got {
					assert.LessOrEqual(t, len(note), circuit.EventNoteLimit, "%s: %s", reason, note)
					assert.Contains(t, note, count)
					assert.NotContains(t, note, "(truncated)", "nothing to cut at any count: %s", note)
				}
			}
		})
	}
}

// Whatever the inputs (here an absurd breaker identity and the longest
// instance name), the note is cut to the limit and keeps the count.
func TestPolicyReconciler_eventsAreBoundedWhateverTheInput(t *testing.T) {
	opts := admission.Options{
		BreakerUsername: strings.Repeat("système:", 2000),
		Managed:         manyConfigurations(100),
		Instance:        strings.Repeat("i", 253-len(admission.PolicyName)-1),
	}
	rec := reconcileAndRepair(t, opts)
	for _, reason := range []string{"GuardPolicyApplied", "GuardPolicyRestored"} {
		got := rec.byReason(reason)
		require.Len(t, got, 2, reason)
		for _, note := range got {
			assert.LessOrEqual(t, len(note), circuit.EventNoteLimit, reason)
			assert.True(t, utf8.ValidString(note), reason)
			assert.Contains(t, note, "managed configurations: 100 mutating, 0 validating", reason)
			assert.Contains(t, note, opts.Policy(), reason)
			assert.True(t, strings.HasSuffix(note, "(truncated)"), "%s: %s", reason, note)
		}
	}
}

// TestPolicyReconciler_neuteredPolicyIsNotInPlace: PolicyInPlace, the
// reconciler's meaning of in place read from any replica, reports the guard
// in place only when the live objects are exactly the rendered ones; every
// way of neutering them without deleting them is caught.
func TestPolicyReconciler_neuteredPolicyIsNotInPlace(t *testing.T) {
	opts := admission.Options{Managed: map[string][]string{"cfg": {"w.example.com"}}}
	scheme := runtime.NewScheme()
	require.NoError(t, admissionregistrationv1.AddToScheme(scheme))
	build := func(edit func(*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding)) error {
		p, b := admission.RenderPolicy(opts)
		if edit != nil {
			edit(p, b)
		}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(p, b).Build()
		return admission.PolicyInPlace(context.Background(), c, opts)
	}
	require.NoError(t, build(nil))
	for name, edit := range map[string]func(*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding){
		"a false matchCondition on the policy": func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			p.Spec.MatchConditions = append(p.Spec.MatchConditions, admissionregistrationv1.MatchCondition{Name: "off", Expression: "false"})
		},
		"failurePolicy Ignore": func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			ignore := admissionregistrationv1.Ignore
			p.Spec.FailurePolicy = &ignore
		},
		"an object selector on the policy": func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			p.Spec.MatchConstraints.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"never": "x"}}
		},
		"an exclusion on the policy": func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			p.Spec.MatchConstraints.ExcludeResourceRules = p.Spec.MatchConstraints.ResourceRules
		},
		"a binding narrowed by matchResources": func(_ *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"never": "x"}}}
		},
		"a binding that only audits": func(_ *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
		},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Error(t, build(edit))
		})
	}
}
