package admission_test

import (
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/admission"
)

func variable(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy, name string) string {
	t.Helper()
	for _, v := range p.Spec.Variables {
		if v.Name == name {
			return v.Expression
		}
	}
	t.Fatalf("no variable %q", name)
	return ""
}

func TestRenderPolicy_resourceNames(t *testing.T) {
	opts := admission.Options{
		Managed: map[string][]string{
			"zeta":  {"z.example.com"},
			"alpha": {"a.example.com"},
			"mid":   nil,
		},
		ManagedValidating: map[string][]string{"policy-engine": {"v.example.com"}, "alpha": {"a.example.com"}},
	}
	p, _ := admission.RenderPolicy(opts)
	require.NotNil(t, p.Spec.MatchConstraints)
	rules := p.Spec.MatchConstraints.ResourceRules
	require.Len(t, rules, 2)
	assert.Equal(t, []string{"alpha", "mid", "zeta"}, rules[0].ResourceNames)
	assert.Equal(t, []string{"mutatingwebhookconfigurations"}, rules[0].Resources)
	assert.Equal(t, []string{"alpha", "policy-engine"}, rules[1].ResourceNames)
	assert.Equal(t, []string{"validatingwebhookconfigurations"}, rules[1].Resources)
	for _, r := range rules {
		assert.True(t, sort.StringsAreSorted(r.ResourceNames))
		assert.Equal(t, []string{"admissionregistration.k8s.io"}, r.APIGroups)
		assert.Equal(t, []string{"v1"}, r.APIVersions)
		assert.ElementsMatch(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, r.Operations)
	}
	assert.Empty(t, p.Spec.MatchConstraints.ExcludeResourceRules)
}

func TestRenderPolicy_emptyManagedMatchesNothing(t *testing.T) {
	for _, opts := range []admission.Options{{}, {Managed: map[string][]string{}, ManagedValidating: map[string][]string{}}} {
		p, _ := admission.RenderPolicy(opts)
		for _, rule := range p.Spec.MatchConstraints.ResourceRules {
			names := rule.ResourceNames
			require.NotEmpty(t, names, "an empty resourceNames list would match every configuration")
			assert.Equal(t, []string{admission.NoManagedConfigurationName}, names)
			// A webhook configuration's name is a DNS subdomain: no ':'.
			assert.Contains(t, names[0], ":")
		}
		// Typed as with targets (kube-apiserver checks literals as
		// homogeneous), naming no configuration there can be.
		assert.Equal(t, "{'mutatingwebhookconfigurations': {'"+admission.NoManagedConfigurationName+"': ['']}, 'validatingwebhookconfigurations': {}}", variable(t, p, "managedByResource"))
	}
}

func TestRenderPolicy_failurePolicyAndBinding(t *testing.T) {
	p, b := admission.RenderPolicy(admission.Options{Managed: map[string][]string{"cfg": {"w.example.com"}}})
	assert.Equal(t, admission.PolicyName, p.Name)
	require.NotNil(t, p.Spec.FailurePolicy)
	assert.Equal(t, admissionregistrationv1.Fail, *p.Spec.FailurePolicy)
	assert.Nil(t, p.Spec.ParamKind)

	assert.Equal(t, admission.PolicyName, b.Name)
	assert.Equal(t, admission.PolicyName, b.Spec.PolicyName)
	assert.Equal(t, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, b.Spec.ValidationActions)
	assert.Nil(t, b.Spec.ParamRef)
	assert.Nil(t, b.Spec.MatchResources, "the binding matches all that the policy matches")

	for _, labels := range []map[string]string{p.Labels, b.Labels} {
		assert.Equal(t, "webhook-guard", labels["app.kubernetes.io/name"])
		assert.Equal(t, "webhook-guard", labels["app.kubernetes.io/managed-by"])
	}
	assert.Equal(t, "admissionregistration.k8s.io/v1", p.APIVersion)
	assert.Equal(t, "ValidatingAdmissionPolicy", p.Kind)
	assert.Equal(t, "admissionregistration.k8s.io/v1", b.APIVersion)
	assert.Equal(t, "ValidatingAdmissionPolicyBinding", b.Kind)
}

func TestRenderPolicy_validations(t *testing.T) {
	p, _ := admission.RenderPolicy(admission.Options{BreakerUsername: "system:serviceaccount:ns:breaker", Managed: map[string][]string{"cfg": {"w.example.com"}}})
	require.Len(t, p.Spec.Validations, 3)
	assert.Contains(t, p.Spec.Validations[0].Expression, "variables.breakerChanges", "the breaker's own limit comes first")
	r := p.Spec.Validations[1]
	assert.Contains(t, r.Expression, "variables.releaserChanges", "then the release identity's")
	assert.Contains(t, r.MessageExpression, "release identity (' + 'system:serviceaccount:ns:breaker-release' + ')")
	assert.Equal(t, "webhook-guard's release identity (system:serviceaccount:ns:breaker-release) may change only what a release restores", r.Message)
	require.NotNil(t, r.Reason)
	assert.Equal(t, metav1.StatusReasonForbidden, *r.Reason)
	v := p.Spec.Validations[2]
	require.NotNil(t, v.Reason)
	assert.Equal(t, metav1.StatusReasonForbidden, *v.Reason)
	assert.Contains(t, v.Expression, "variables.isBreaker")
	assert.Contains(t, v.Expression, "variables.override")
	assert.Contains(t, v.Expression, "variables.ownedChanges")
	for _, want := range []string{
		"object.metadata.name",
		"variables.ownedChanges.join(', ')",
		"webhook-guard (' + 'system:serviceaccount:ns:breaker' + ')",
		"variables.openNotes.join('; ')",
		`'kubectl annotate ' + variables.kindName + ' ' + object.metadata.name + ' webhook-guard.io/override="<reason>"'`,
	} {
		assert.Contains(t, v.MessageExpression, want)
	}
	assert.NotEmpty(t, v.Message)
	assert.Equal(t, `request.userInfo.username == 'system:serviceaccount:ns:breaker'`, variable(t, p, "isBreaker"))
	assert.Equal(t, `!variables.isBreaker && request.userInfo.username == 'system:serviceaccount:ns:breaker-release'`, variable(t, p, "isReleaser"))
	assert.Contains(t, p.Spec.MatchConditions[0].Expression, `request.userInfo.username == 'system:serviceaccount:ns:breaker-release'`,
		"the matchCondition skips no write of the release identity")

	// The variables' names are unique and every variables.X reference is declared before use.
	declared := map[string]bool{}
	for _, vr := range p.Spec.Variables {
		require.False(t, declared[vr.Name], vr.Name)
		for _, ref := range referencedVariables(vr.Expression) {
			assert.True(t, declared[ref], "variable %s uses %s before it is declared", vr.Name, ref)
		}
		declared[vr.Name] = true
	}
	for _, val := range p.Spec.Validations {
		for _, expr := range []string{val.Expression, val.MessageExpression} {
			for _, ref := range referencedVariables(expr) {
				assert.True(t, declared[ref], "undeclared variable %s", ref)
			}
		}
	}
}

func referencedVariables(expr string) []string {
	var refs []string
	for _, part := range strings.Split(expr, "variables.")[1:] {
		end := strings.IndexFunc(part, func(r rune) bool {
			return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
		})
		if end < 0 {
			end = len(part)
		}
		refs = append(refs, part[:end])
	}
	return refs
}

func TestRenderPolicy_managedMapEscaped(t *testing.T) {
	p, _ := admission.RenderPolicy(admission.Options{
		BreakerUsername: `it's\me`,
		Managed: map[string][]string{
			"b-config":  {"z.example.com", `we'ird\hook`, "a.example.com", "a.example.com"},
			`a'config\`: {},
		},
	})
	assert.Equal(t, `{'mutatingwebhookconfigurations': {'a\'config\\': [], 'b-config': ['a.example.com', 'we\'ird\\hook', 'z.example.com']}, 'validatingwebhookconfigurations': {}}`, variable(t, p, "managedByResource"))
	assert.Equal(t, `request.userInfo.username == 'it\'s\\me'`, variable(t, p, "isBreaker"))
	assert.Equal(t, `!variables.isBreaker && request.userInfo.username == 'it\'s\\me-release'`, variable(t, p, "isReleaser"))
}

func TestRenderPolicy_marshalsToManifest(t *testing.T) {
	p, b := admission.RenderPolicy(admission.Options{Managed: map[string][]string{"cfg": {"w.example.com"}}})
	out, err := admission.MarshalManifest(p, b)
	require.NoError(t, err)
	docs := strings.Split(string(out), "---\n")
	require.Len(t, docs, 2)
	assert.NotContains(t, docs[0], "status:")
	assert.NotContains(t, docs[0], "creationTimestamp")

	var gotP admissionregistrationv1.ValidatingAdmissionPolicy
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[0]), &gotP))
	assert.Equal(t, *p, gotP)
	var gotB admissionregistrationv1.ValidatingAdmissionPolicyBinding
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[1]), &gotB))
	assert.Equal(t, *b, gotB)
}

func TestRenderPolicy_aNamedInstanceHasItsOwnNames(t *testing.T) {
	p, b := admission.RenderPolicy(admission.Options{Managed: map[string][]string{"cfg": {"w.example.com"}}, Instance: "canary"})
	assert.Equal(t, "webhook-guard-canary", p.Name)
	assert.Equal(t, "webhook-guard-canary", b.Name)
	assert.Equal(t, "webhook-guard-canary", b.Spec.PolicyName)
}
