package marking

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

func TestID_isShortStableAndAValidLabelValue(t *testing.T) {
	id := ID("sidecar-injector", "inject.example.com")
	assert.Len(t, id, 10)
	assert.Equal(t, id, ID("sidecar-injector", "inject.example.com"))
	assert.NotEqual(t, id, ID("sidecar-injector", "other.example.com"))
	assert.Empty(t, validation.IsValidLabelValue(id))
	assert.Empty(t, validation.IsDNS1123Subdomain(Name("a", "b")))
}

func TestRender_mirrorsTheWebhooksMatchCriteria(t *testing.T) {
	opened := time.Date(2026, 11, 30, 10, 21, 0, 0, time.UTC)
	wh := admissionregistrationv1.MutatingWebhook{
		Name: "inject.example.com",
		Rules: []admissionregistrationv1.RuleWithOperations{
			{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}},
			{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}}},
		},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"inject": "true"}},
		ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
		MatchConditions: []admissionregistrationv1.MatchCondition{
			{Name: "not-system", Expression: "request.namespace != 'kube-system'"},
			{Name: circuit.BypassCondition, Expression: circuit.BypassExpression},
		},
	}
	p, b := Render("sidecar-injector", wh, opened, "system:serviceaccount:webhook-guard-system:webhook-guard")
	require.NotNil(t, p)
	assert.Equal(t, Name("sidecar-injector", wh.Name), p.Name)
	assert.Equal(t, "sidecar-injector/inject.example.com", p.Annotations[circuit.MarksAnnotation])
	assert.Equal(t, admissionregistrationv1.Ignore, *p.Spec.FailurePolicy)
	assert.Equal(t, admissionregistrationv1.NeverReinvocationPolicy, p.Spec.ReinvocationPolicy)
	require.Len(t, p.Spec.MatchConstraints.ResourceRules, 1, "DELETE only: a mutation never applies to it")
	assert.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, p.Spec.MatchConstraints.ResourceRules[0].Operations)
	assert.Equal(t, wh.NamespaceSelector, p.Spec.MatchConstraints.NamespaceSelector)
	assert.Equal(t, wh.ObjectSelector, p.Spec.MatchConstraints.ObjectSelector)
	assert.Equal(t, wh.MatchPolicy, p.Spec.MatchConstraints.MatchPolicy)
	assert.Equal(t, wh.MatchConditions[:1], p.Spec.MatchConditions, "its own matchConditions, not the bypass marker")
	assert.Equal(t, "Object{metadata: Object.metadata{labels: {'webhook-guard.io/unmutated': '"+ID("sidecar-injector", wh.Name)+
		"'}, annotations: {'webhook-guard.io/unmutated-by': 'sidecar-injector/inject.example.com since 2026-11-30T10:21:00Z'}}}",
		p.Spec.Mutations[0].ApplyConfiguration.Expression)
	assert.Equal(t, p.Name, b.Spec.PolicyName)

	wh.Rules = wh.Rules[1:]
	p, b = Render("sidecar-injector", wh, opened, "me")
	assert.Nil(t, p, "a webhook that only sees DELETE has nothing to mark")
	assert.Nil(t, b)
}
