package marking

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes/scheme"
)

// policyMatcher is kube-apiserver's own matching of a policy's
// matchConstraints, the step before its binding, params and CEL: the
// MutatingAdmissionPolicy plugin runs it for every marking policy on every
// request that reaches admission.
type policyMatcher struct {
	matcher generic.PolicyMatcher
	objects admission.ObjectInterfaces
}

func newPolicyMatcher() policyMatcher {
	// No namespace lister: the marking policies' namespaceSelector is
	// empty, so kube-apiserver never looks a namespace up for them (a
	// lookup here would panic).
	return policyMatcher{matcher: generic.NewPolicyMatcher(matching.NewMatcher(nil, nil)), objects: admission.NewObjectInterfacesFromScheme(scheme.Scheme)}
}

func (m policyMatcher) matches(t testing.TB, policy *admissionregistrationv1.MutatingAdmissionPolicy, r request) bool {
	t.Helper()
	ok, _, _, err := m.matcher.DefinitionMatches(r.attributes(), m.objects, mutating.NewMutatingAdmissionPolicyAccessor(policy))
	require.NoError(t, err)
	return ok
}

// request is an admission request as kube-apiserver's admission sees it.
type request struct {
	obj       runtime.Object
	gvr       schema.GroupVersionResource
	kind      string
	sub       string
	namespace string
	op        admission.Operation
	dryRun    bool
}

func (r request) attributes() admission.Attributes {
	gvk := r.gvr.GroupVersion().WithKind(r.kind)
	return admission.NewAttributesRecord(r.obj, nil, gvk, r.namespace, "x", r.gvr, r.sub, r.op, nil, r.dryRun, &user.DefaultInfo{Name: "someone"})
}

var (
	// roadProbe is the path probe's service proxy GET: kube-apiserver
	// admits it as a CONNECT of services/proxy, with no object.
	roadProbe = request{gvr: corev1.SchemeGroupVersion.WithResource("services"), kind: "Service", sub: "proxy",
		namespace: "tenant", op: admission.Connect}
	// guardEvent is one of the guard's own Events (an events.k8s.io
	// recorder's create).
	guardEvent = request{obj: &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default"}},
		gvr: eventsv1.SchemeGroupVersion.WithResource("events"), kind: "Event", namespace: "default", op: admission.Create}
	canary = request{obj: CanaryEvent(Circuit{Configuration: "c", Webhook: "w.example.com"}),
		gvr: corev1.SchemeGroupVersion.WithResource("events"), kind: "Event", namespace: CanaryNamespace, op: admission.Create, dryRun: true}
	configMapCreate = request{obj: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant"}},
		gvr: corev1.SchemeGroupVersion.WithResource("configmaps"), kind: "ConfigMap", namespace: "tenant", op: admission.Create}
)

// The marking policy's matchConstraints, as kube-apiserver matches them:
// what its webhook may intercept and the canary go on to its CEL; the
// path probe's CONNECTs, the guard's own Events, Leases and webhook
// configurations stop here.
func TestRender_matchConstraints(t *testing.T) {
	policy, _ := Render("c", "w.example.com")
	m := newPolicyMatcher()
	for name, r := range map[string]request{
		"a ConfigMap create": configMapCreate,
		"a Pod update": {obj: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant"}},
			gvr: corev1.SchemeGroupVersion.WithResource("pods"), kind: "Pod", namespace: "tenant", op: admission.Update},
		"a Namespace create": {obj: &corev1.Namespace{},
			gvr: corev1.SchemeGroupVersion.WithResource("namespaces"), kind: "Namespace", op: admission.Create},
		"the canary, a core/v1 Event": canary,
	} {
		assert.True(t, m.matches(t, policy, r), "%s is left out", name)
	}
	for name, r := range map[string]request{
		"the road probe's CONNECT":         roadProbe,
		"an events.k8s.io Event":           guardEvent,
		"a Pod delete":                     {gvr: corev1.SchemeGroupVersion.WithResource("pods"), kind: "Pod", namespace: "tenant", op: admission.Delete},
		"a Lease renewal":                  {obj: &coordinationv1.Lease{}, gvr: coordinationv1.SchemeGroupVersion.WithResource("leases"), kind: "Lease", namespace: "tenant", op: admission.Update},
		"a MutatingWebhookConfiguration":   {obj: &admissionregistrationv1.MutatingWebhookConfiguration{}, gvr: admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingwebhookconfigurations"), kind: "MutatingWebhookConfiguration", op: admission.Update},
		"a MutatingAdmissionPolicyBinding": {obj: &admissionregistrationv1.MutatingAdmissionPolicyBinding{}, gvr: admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingadmissionpolicybindings"), kind: "MutatingAdmissionPolicyBinding", op: admission.Create},
	} {
		assert.False(t, m.matches(t, policy, r), "%s matches", name)
	}
}

// BenchmarkPolicyMatch is what one marking policy's matchConstraints cost
// kube-apiserver on a request, before its CEL: every request that reaches
// admission pays it once per marking policy. "objectSelector" is the
// policy as it was before this benchmark, with an objectSelector that
// left out a label (kube-apiserver parses a selector that is not empty
// on every request); "rendered" is Render's.
//
//	go test ./internal/marking/ -run '^$' -bench PolicyMatch -benchmem
func BenchmarkPolicyMatch(b *testing.B) {
	rendered, _ := Render("c", "w.example.com")
	withSelector := rendered.DeepCopy()
	withSelector.Spec.MatchConstraints.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "webhook-guard.io/marking-exempt", Operator: metav1.LabelSelectorOpDoesNotExist}}}
	m := newPolicyMatcher()
	for _, r := range []struct {
		name string
		request
	}{{"roadProbe", roadProbe}, {"guardEvent", guardEvent}, {"configMap", configMapCreate}} {
		for _, p := range []struct {
			name   string
			policy *admissionregistrationv1.MutatingAdmissionPolicy
		}{{"objectSelector", withSelector}, {"rendered", rendered}} {
			b.Run(r.name+"/"+p.name, func(b *testing.B) {
				for b.Loop() {
					m.matches(b, p.policy, r.request)
				}
			})
		}
	}
}
