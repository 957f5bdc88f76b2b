package marking

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// matchFixture is one marking policy's match condition, compiled as
// kube-apiserver compiles it, and its param: a configuration of ten
// webhooks with their CA bundles that intercept creates of resources,
// every circuit open or every one closed.
type matchFixture struct {
	matcher matchconditions.Matcher
	param   *admissionregistrationv1.MutatingWebhookConfiguration
	// webhook is the policy's.
	webhook string
}

func newMatchFixture(t testing.TB, open bool, resources ...string) matchFixture {
	t.Helper()
	const configuration = "bench-configuration"
	hooks := make([]admissionregistrationv1.MutatingWebhook, 10)
	rec := circuit.Record{}
	uid := types.UID("3c1e2d6a-6f0e-4a8e-9d35-0d8f6a1b2c3d")
	for i := range hooks {
		name := fmt.Sprintf("w%d.%s.example.com", i, configuration)
		hooks[i] = admissionregistrationv1.MutatingWebhook{
			Name:         name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(fmt.Sprintf("https://127.0.0.1:%d/review", 40000+i)), CABundle: []byte(strings.Repeat("A", 1100))},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: resources},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}
		rec[name] = circuit.Entry{UID: uid, Mode: circuit.ModeIgnore, OpenedAt: metav1.NewTime(time.Unix(1_800_000_000, 0)), Reason: "probe failed 3 times in a row", By: "system:serviceaccount:webhook-guard-system:webhook-guard"}
	}
	text, err := rec.Text()
	require.NoError(t, err)
	param := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: configuration, UID: uid},
		Webhooks:   hooks,
	}
	if open {
		param.Annotations = map[string]string{circuit.Annotation: text}
	}
	policy, _ := Render(configuration, hooks[4].Name)
	compiler, err := cel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	require.NoError(t, err)
	decls := cel.OptionalVariableDeclarations{HasParams: true}
	var conditions []cel.ExpressionAccessor
	for i := range policy.Spec.MatchConditions {
		conditions = append(conditions, (*matchconditions.MatchCondition)(&policy.Spec.MatchConditions[i]))
	}
	filter := compiler.CompileCondition(conditions, decls, environment.StoredExpressions)
	return matchFixture{matcher: matchconditions.NewMatcher(filter, policy.Spec.FailurePolicy, "policy", "mutate", policy.Name), param: param, webhook: hooks[4].Name}
}

// match evaluates the match condition on obj's create.
func (f matchFixture) match(t testing.TB, obj runtime.Object, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, namespace string) bool {
	attr := admission.NewAttributesRecord(obj, nil, gvk, namespace, "x", gvr, "", admission.Create, nil, false, &user.DefaultInfo{Name: "someone"})
	versioned := &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(obj)}
	res := f.matcher.Match(context.Background(), versioned, f.param, nil)
	require.NoError(t, res.Error)
	return res.Matches
}

var (
	eventGVR     = schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}
	eventGVK     = schema.GroupVersionKind{Group: "events.k8s.io", Version: "v1", Kind: "Event"}
	coreEventGVR = schema.GroupVersionResource{Version: "v1", Resource: "events"}
	coreEventGVK = schema.GroupVersionKind{Version: "v1", Kind: "Event"}
	configMapGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	configMapGVK = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
)

// TestMatchCondition_openCircuit: while its circuit is open, the policy
// applies to what its webhook's rules match, and to nothing else; never to
// an Event, even under a webhook that intercepts every resource.
func TestMatchCondition_openCircuit(t *testing.T) {
	event := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}}
	configMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}}
	f := newMatchFixture(t, true, "configmaps")
	require.False(t, f.match(t, event, eventGVR, eventGVK, "default"), "an Event")
	require.True(t, f.match(t, configMap, configMapGVR, configMapGVK, "default"), "a ConfigMap")

	all := newMatchFixture(t, true, "*")
	require.True(t, all.match(t, configMap, configMapGVR, configMapGVK, "default"), "a ConfigMap under */*")
	require.False(t, all.match(t, event, eventGVR, eventGVK, "default"), "an events.k8s.io Event under */*")
	require.False(t, all.match(t, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}},
		coreEventGVR, coreEventGVK, "default"), "a core Event under */*")
}

// TestMatchCondition_closedCircuit: with every circuit of its
// configuration closed, the policy applies to nothing its webhook
// intercepts; nor while only other webhooks' circuits are open.
func TestMatchCondition_closedCircuit(t *testing.T) {
	configMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}}
	f := newMatchFixture(t, false, "*")
	require.False(t, f.match(t, configMap, configMapGVR, configMapGVK, "default"), "no record")

	others := newMatchFixture(t, true, "*")
	rec, err := circuit.Decode(others.param.Annotations)
	require.NoError(t, err)
	require.Len(t, rec, 10)
	delete(rec, others.webhook)
	others.param.Annotations, err = circuit.Encode(others.param.Annotations, rec)
	require.NoError(t, err)
	require.NotContains(t, others.param.Annotations[circuit.Annotation], others.webhook)
	require.False(t, others.match(t, configMap, configMapGVR, configMapGVK, "default"), "other webhooks' circuits open")
}

// BenchmarkMatchCondition is what one marking policy costs kube-apiserver
// on a write its webhook does not intercept, with its circuit closed and
// open: every write in the cluster that its matchConstraints match pays
// it once per marking policy. A core/v1 Event is the most frequent of
// them, a Secret anyone's write. (events.k8s.io Events, the guard's own
// among them, never get this far: BenchmarkPolicyMatch.)
//
//	go test ./internal/marking/ -run '^$' -bench MatchCondition -benchmem
func BenchmarkMatchCondition(b *testing.B) {
	secretGVR := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	secretGVK := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	for _, open := range []bool{false, true} {
		f := newMatchFixture(b, open, "configmaps")
		state := map[bool]string{false: "closed", true: "open"}[open]
		b.Run(state+"/event", func(b *testing.B) {
			ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}}
			for b.Loop() {
				f.match(b, ev, coreEventGVR, coreEventGVK, "default")
			}
		})
		b.Run(state+"/secret", func(b *testing.B) {
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}}
			for b.Loop() {
				f.match(b, secret, secretGVR, secretGVK, "default")
			}
		})
	}
}
