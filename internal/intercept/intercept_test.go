package intercept

import (
	"cmp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

const guardNS = "webhook-guard"

var (
	leaseReq    = Request{What: Lease, Namespace: guardNS}
	eventsGuard = Request{What: Events, Namespace: guardNS}
	eventsSys   = Request{What: Events, Namespace: "kube-system"}
	canaryReq   = Request{What: Canary, Namespace: "default"}
	// everything is every request of a guard whose Lease is in guardNS
	// (leaseNamespace ""): its Events about cluster-scoped objects are in
	// kube-system all the same.
	everything = []Request{leaseReq, eventsGuard, eventsSys, canaryReq}
	// engine is what a policy engine's webhook, which leaves kube-system
	// out, intercepts of them.
	engine = []Request{leaseReq, eventsGuard, canaryReq}
)

// rule is one rule of operations on groups/versions/resources.
func rule(ops []admissionregistrationv1.OperationType, groups, versions, resources []string) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{Operations: ops,
		Rule: admissionregistrationv1.Rule{APIGroups: groups, APIVersions: versions, Resources: resources}}
}

var (
	createUpdate = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	all          = []string{"*"}
	// everythingRule is a policy engine's: every group, version, resource
	// and subresource, on create and update.
	everythingRule = rule(createUpdate, all, all, []string{"*/*"})
)

// notIn is a namespaceSelector excluding namespaces by name.
func notIn(namespaces ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: namespaces},
	}}
}

// kyverno is a Kyverno-like webhook: */*, Fail, 10 s, excluding kube-system
// and its own namespace.
func kyverno() admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name:              "mutate.kyverno.svc-fail",
		FailurePolicy:     ptr.To(admissionregistrationv1.Fail),
		MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
		TimeoutSeconds:    ptr.To[int32](10),
		NamespaceSelector: notIn("kube-system", "kyverno"),
		ObjectSelector:    &metav1.LabelSelector{},
		Rules:             []admissionregistrationv1.RuleWithOperations{everythingRule},
	}
}

func mutating(w admissionregistrationv1.MutatingWebhook) Inputs {
	return Inputs{Namespace: guardNS, Mutating: []admissionregistrationv1.MutatingWebhookConfiguration{
		{ObjectMeta: metav1.ObjectMeta{Name: "kyverno-resource-mutating-webhook-cfg", UID: "uid-1"}, Webhooks: []admissionregistrationv1.MutatingWebhook{w}},
	}}
}

func with(change func(*admissionregistrationv1.MutatingWebhook)) Inputs {
	w := kyverno()
	change(&w)
	return mutating(w)
}

func TestFind(t *testing.T) {
	tests := map[string]struct {
		in   Inputs
		want []Request // nil: not reported
		// mayIntercept is Interceptor.MatchConditions.
		mayIntercept bool
		circuitOpen  bool
	}{
		"a */* Fail webhook excluding kube-system and kyverno intercepts the Lease in the guard's namespace, its Events and the canary, not the Events in kube-system": {
			in: mutating(kyverno()), want: engine,
		},
		"excluding the guard's namespace by its kubernetes.io/metadata.name spares the Lease and its Events, not the canary": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.NamespaceSelector = notIn("kube-system", "kyverno", guardNS)
			}),
			want: []Request{canaryReq},
		},
		"excluding the guard's namespace and default intercepts nothing": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.NamespaceSelector = notIn("kube-system", "kyverno", guardNS, "default")
			}),
		},
		"a second NotIn expression on the name is ANDed with the first": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.NamespaceSelector.MatchExpressions = append(w.NamespaceSelector.MatchExpressions, notIn(guardNS).MatchExpressions...)
			}),
			want: []Request{canaryReq},
		},
		"an Ignore webhook is not reported": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			}),
		},
		"an unset failurePolicy is Fail, the API's default": {
			in:   with(func(w *admissionregistrationv1.MutatingWebhook) { w.FailurePolicy = nil }),
			want: engine,
		},
		"unset selectors and matchPolicy are the API's defaults: everything, Equivalent": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.NamespaceSelector, w.ObjectSelector, w.MatchPolicy = nil, nil, nil
			}),
			want: everything,
		},
		"a pods-only webhook is not reported": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.Rules = []admissionregistrationv1.RuleWithOperations{rule(createUpdate, []string{""}, []string{"v1"}, []string{"pods", "pods/*"})}
			}),
		},
		"resources * (no subresources) intercepts everything": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.Rules = []admissionregistrationv1.RuleWithOperations{rule(createUpdate, all, all, all)}
			}),
			want: engine,
		},
		"only a subresource of every resource (*/status) intercepts nothing": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.Rules = []admissionregistrationv1.RuleWithOperations{rule(createUpdate, all, all, []string{"*/status"})}
			}),
		},
		"events in group events.k8s.io intercept both groups' Events and the canary under matchPolicy Equivalent": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.Rules = []admissionregistrationv1.RuleWithOperations{rule(createUpdate, []string{"events.k8s.io"}, []string{"v1"}, []string{"events"})}
			}),
			want: []Request{eventsGuard, canaryReq},
		},
		"core v1 events intercept the canary too under matchPolicy Equivalent": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.Rules = []admissionregistrationv1.RuleWithOperations{rule(createUpdate, []string{""}, []string{"v1"}, []string{"events"})}
			}),
			want: []Request{eventsGuard, canaryReq},
		},
		"events.k8s.io events under matchPolicy Exact intercept the Events, not the canary (a core v1 Event)": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.MatchPolicy = ptr.To(admissionregistrationv1.Exact)
				w.Rules = []admissionregistrationv1.RuleWithOperations{rule(createUpdate, []string{"events.k8s.io"}, []string{"v1"}, []string{"events"})}
			}),
			want: []Request{eventsGuard},
		},
		"core v1 events under matchPolicy Exact intercept the Events and the canary": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.MatchPolicy = ptr.To(admissionregistrationv1.Exact)
				w.Rules = []admissionregistrationv1.RuleWithOperations{rule(createUpdate, []string{""}, []string{"v1"}, []string{"events"})}
			}),
			want: []Request{eventsGuard, canaryReq},
		},
		"leases in coordination.k8s.io intercept only the Lease": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.Rules = []admissionregistrationv1.RuleWithOperations{rule(createUpdate, []string{"coordination.k8s.io"}, []string{"v1"}, []string{"leases"})}
			}),
			want: []Request{leaseReq},
		},
		"scope Cluster intercepts nothing: Leases and Events are namespaced": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.Rules[0].Scope = ptr.To(admissionregistrationv1.ClusterScope)
			}),
		},
		"scope Namespaced intercepts everything": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.Rules[0].Scope = ptr.To(admissionregistrationv1.NamespacedScope)
			}),
			want: engine,
		},
		"DELETE only is not reported": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
			}),
		},
		"UPDATE only intercepts the Lease's renewals and the Events' patches, not the canary (a create)": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Update}
			}),
			want: []Request{leaseReq, eventsGuard},
		},
		"operations * intercepts everything": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
			}),
			want: engine,
		},
		"an objectSelector requiring a label intercepts nothing: the Lease and Events carry none": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"policy": "enforce"}}
			}),
		},
		"an objectSelector on the canary's label intercepts only the canary": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{marking.CanaryLabel: "true"}}
			}),
			want: []Request{canaryReq},
		},
		"an objectSelector excluding a label the objects lack intercepts everything": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "skip", Operator: metav1.LabelSelectorOpDoesNotExist}}}
			}),
			want: engine,
		},
		"a namespaceSelector on another label is judged by the labels given": {
			in: func() Inputs {
				in := with(func(w *admissionregistrationv1.MutatingWebhook) {
					w.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "admission.gatekeeper.sh/ignore", Operator: metav1.LabelSelectorOpDoesNotExist}}}
				})
				in.NamespaceLabels = map[string]string{"admission.gatekeeper.sh/ignore": "no-self-managing"}
				return in
			}(),
			want: []Request{eventsSys, canaryReq},
		},
		"kube-system's labels are judged too": {
			in: func() Inputs {
				in := with(func(w *admissionregistrationv1.MutatingWebhook) {
					w.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "admission.gatekeeper.sh/ignore", Operator: metav1.LabelSelectorOpDoesNotExist}}}
				})
				in.EventsLabels = map[string]string{"admission.gatekeeper.sh/ignore": "no-self-managing"}
				return in
			}(),
			want: engine,
		},
		"without the namespace's labels, a selector on another label is judged by the name label alone": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "admission.gatekeeper.sh/ignore", Operator: metav1.LabelSelectorOpDoesNotExist}}}
			}),
			want: everything,
		},
		"a namespaceSelector that does not parse intercepts: kube-apiserver rejects the request": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Nonsense"}}}
			}),
			want: everything,
		},
		"matchConditions make it a webhook that may intercept": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "not-leases", Expression: "request.resource.resource != 'leases'"}}
			}),
			want: engine, mayIntercept: true,
		},
		"a matchCondition false excludes every request": {
			in: with(func(w *admissionregistrationv1.MutatingWebhook) {
				w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "off", Expression: "false"}}
			}),
		},
		"an open circuit is judged by its original failurePolicy, without the bypass marker": {
			in: func() Inputs {
				in := with(func(w *admissionregistrationv1.MutatingWebhook) {
					w.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
					w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: circuit.BypassCondition, Expression: circuit.BypassExpression}}
				})
				ann, err := circuit.Encode(nil, circuit.Record{"mutate.kyverno.svc-fail": {UID: "uid-1", Mode: circuit.ModeBypass, OriginalFailurePolicy: ptr.To(admissionregistrationv1.Fail)}})
				require.NoError(t, err)
				in.Mutating[0].Annotations = ann
				return in
			}(),
			want: engine, circuitOpen: true,
		},
		"a stale record entry (another UID) is not the guard's: the live Ignore stands": {
			in: func() Inputs {
				in := with(func(w *admissionregistrationv1.MutatingWebhook) {
					w.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
				})
				ann, err := circuit.Encode(nil, circuit.Record{"mutate.kyverno.svc-fail": {UID: types.UID("uid-0"), Mode: circuit.ModeIgnore, OriginalFailurePolicy: ptr.To(admissionregistrationv1.Fail)}})
				require.NoError(t, err)
				in.Mutating[0].Annotations = ann
				return in
			}(),
		},
		"without leader election there is no Lease": {
			in:   func() Inputs { in := mutating(kyverno()); in.WithoutLeaderElection = true; return in }(),
			want: []Request{eventsGuard, canaryReq},
		},
		"without marking there is no canary": {
			in:   func() Inputs { in := mutating(kyverno()); in.WithoutMarking = true; return in }(),
			want: []Request{leaseReq, eventsGuard},
		},
		"a guard with its Lease in default": {
			in:   func() Inputs { in := mutating(kyverno()); in.Namespace = "default"; return in }(),
			want: []Request{{What: Lease, Namespace: "default"}, {What: Events, Namespace: "default"}, canaryReq},
		},
		"a guard with its Lease in kube-system, as shipped: a policy engine intercepts only the canary": {
			in:   func() Inputs { in := mutating(kyverno()); in.Namespace = "kube-system"; return in }(),
			want: []Request{canaryReq},
		},
		"a guard with its Lease in kube-system, under a webhook that leaves only its own namespace out: everything in one namespace and the canary": {
			in: func() Inputs {
				in := with(func(w *admissionregistrationv1.MutatingWebhook) { w.NamespaceSelector = notIn("gatekeeper-system") })
				in.Namespace = "kube-system"
				return in
			}(),
			want: []Request{{What: Lease, Namespace: "kube-system"}, eventsSys, canaryReq},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Find(tc.in)
			if tc.want == nil {
				assert.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			assert.Equal(t, tc.want, got[0].Intercepts)
			assert.Equal(t, tc.mayIntercept, got[0].MatchConditions, "MatchConditions")
			assert.Equal(t, tc.circuitOpen, got[0].CircuitOpen, "CircuitOpen")
			assert.Equal(t, circuit.KindMutating, got[0].Kind)
			assert.Equal(t, "mutate.kyverno.svc-fail", got[0].Webhook)
			assert.Equal(t, int32(10), got[0].TimeoutSeconds)
		})
	}
}

func TestFind_validatingAndSorted(t *testing.T) {
	v := kyverno()
	in := mutating(kyverno())
	in.Validating = []admissionregistrationv1.ValidatingWebhookConfiguration{{
		ObjectMeta: metav1.ObjectMeta{Name: "gatekeeper-validating-webhook-configuration"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "validation.gatekeeper.sh", FailurePolicy: v.FailurePolicy, NamespaceSelector: notIn("gatekeeper-system"), Rules: v.Rules, TimeoutSeconds: ptr.To[int32](3)},
			{Name: "check-ignore-label.gatekeeper.sh", FailurePolicy: v.FailurePolicy, Rules: []admissionregistrationv1.RuleWithOperations{
				rule(createUpdate, []string{""}, all, []string{"namespaces"})}},
		},
	}}
	got := Find(in)
	require.Len(t, got, 2)
	assert.Equal(t, circuit.KindMutating, got[0].Kind)
	assert.Equal(t, circuit.KindValidating, got[1].Kind)
	assert.Equal(t, "validation.gatekeeper.sh", got[1].Webhook)
	assert.Equal(t, int32(3), got[1].TimeoutSeconds)
	assert.Equal(t, everything, got[1].Intercepts)
}

func TestAdvice(t *testing.T) {
	tests := map[string]struct {
		i        Interceptor
		lease    string // the Lease's namespace; default guardNS
		contains []string
		lacks    []string
	}{
		"everything: the Lease, the exclusion of the namespaces, and what default costs": {
			i: Interceptor{TimeoutSeconds: 10, Intercepts: everything},
			contains: []string{
				"cannot renew its Lease",
				"fix: add {key: kubernetes.io/metadata.name, operator: NotIn, values: [webhook-guard, kube-system]} to its namespaceSelector.matchExpressions",
				"(or webhook-guard, kube-system to its existing NotIn on kubernetes.io/metadata.name)",
				"the guard's Events in webhook-guard and Events in kube-system and marking canary (sent before a mutating circuit opens) fail",
				"the guard loses those Events and the marking confirmation, and still opens circuits",
				"the marking canary can only be sent in default: only adding default as well ({key: kubernetes.io/metadata.name, operator: NotIn, values: [webhook-guard, kube-system, default]})",
			},
			lacks: []string{"matchConditions", "circuit is open"},
		},
		"the canary only (the shipped Lease in kube-system under a policy engine): no Lease, no fix but default": {
			i: Interceptor{TimeoutSeconds: 10, Intercepts: []Request{canaryReq}, MatchConditions: true, CircuitOpen: true}, lease: "kube-system",
			contains: []string{"the guard loses the marking confirmation", "values: [default]", "not evaluated here", "its circuit is open now"},
			lacks:    []string{"Lease", "fix: add", "Events"},
		},
		"Events in kube-system without the canary: no word of the canary or of default": {
			i: Interceptor{TimeoutSeconds: 10, Intercepts: []Request{eventsSys}}, lease: "kube-system",
			contains: []string{"while it fails, the guard's Events in kube-system fail (each after up to 10s): the guard loses those Events, and still opens circuits",
				"fix: add {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}"},
			lacks: []string{"canary", "marking", "default"},
		},
		"a guard with its Lease in default: adding default is the fix": {
			i: Interceptor{TimeoutSeconds: 10, Intercepts: []Request{{What: Lease, Namespace: "default"}}}, lease: "default",
			contains: []string{"the guard's Lease is in default: only adding default ({key: kubernetes.io/metadata.name, operator: NotIn, values: [default]}) protects it"},
			lacks:    []string{"fix: add"},
		},
		"the Lease only: no word about default": {
			i:        Interceptor{TimeoutSeconds: 10, Intercepts: []Request{leaseReq}},
			contains: []string{"cannot renew its Lease", "values: [webhook-guard]}"},
			lacks:    []string{"default"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := ""
			ns := cmp.Or(tc.lease, guardNS)
			for _, a := range Advice(tc.i, ns) {
				got += a + "\n"
			}
			for _, s := range tc.contains {
				assert.Contains(t, got, s)
			}
			for _, s := range tc.lacks {
				assert.NotContains(t, got, s)
			}
		})
	}
}

func TestRequest_String(t *testing.T) {
	assert.Equal(t, "Lease in webhook-guard", leaseReq.String())
	assert.Equal(t, "Events in kube-system", eventsSys.String())
	assert.Equal(t, "marking canary in default", canaryReq.String())
}
