package marking

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

func TestID_isShortStableAndAValidLabelValue(t *testing.T) {
	id := ID("sidecar-injector", "inject.example.com")
	assert.Len(t, id, 10)
	assert.Equal(t, id, ID("sidecar-injector", "inject.example.com"))
	assert.NotEqual(t, id, ID("sidecar-injector", "other.example.com"))
	assert.Empty(t, validation.IsValidLabelValue(id))
	assert.Empty(t, validation.IsDNS1123Subdomain(Name("a", "b")))
	assert.Empty(t, validation.IsQualifiedName(LoadedAnnotation("a", "b")))
}

// The marking policy needs nothing from the running service: it is bound
// to the configuration itself as its param, dormant until the record
// holds the webhook's entry, and it only ever adds the two marks (or,
// on a dry-run canary, the LoadedAnnotation).
func TestRender_isBoundToTheConfigurationAndDormantUntilTheRecordArmsIt(t *testing.T) {
	p, b := Render("sidecar-injector", "inject.example.com")
	require.NotNil(t, p)
	require.NotNil(t, b)
	name := Name("sidecar-injector", "inject.example.com")
	t.Run("names and labels", func(t *testing.T) {
		assert.Equal(t, name, p.Name)
		assert.Equal(t, name, b.Name)
		assert.Equal(t, name, b.Spec.PolicyName)
		assert.Equal(t, "sidecar-injector/inject.example.com", p.Annotations[circuit.MarksAnnotation])
		assert.Equal(t, Labels(), p.Labels)
	})
	t.Run("the param is the configuration", func(t *testing.T) {
		assert.Equal(t, &admissionregistrationv1.ParamKind{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"}, p.Spec.ParamKind)
		require.NotNil(t, b.Spec.ParamRef)
		assert.Equal(t, "sidecar-injector", b.Spec.ParamRef.Name)
		assert.Equal(t, admissionregistrationv1.AllowAction, *b.Spec.ParamRef.ParameterNotFoundAction, "no configuration, nothing to mark, nothing refused")
	})
	t.Run("it never refuses and never reinvokes", func(t *testing.T) {
		assert.Equal(t, admissionregistrationv1.Ignore, *p.Spec.FailurePolicy)
		assert.Equal(t, admissionregistrationv1.NeverReinvocationPolicy, p.Spec.ReinvocationPolicy)
	})
	t.Run("it applies only where it marks: the webhook's match criteria", func(t *testing.T) {
		expr := p.Spec.MatchConditions[0].Expression
		for _, field := range []string{"w.rules", "r.operations", "r.apiGroups", "r.apiVersions", "r.resources", "r.scope", "w.objectSelector", "w.matchPolicy"} {
			assert.Contains(t, expr, field, "in the matchCondition")
		}
		assert.NotContains(t, expr, "namespaceObject", "kube-apiserver gives matchConditions none")
		assert.Contains(t, p.Spec.Mutations[0].ApplyConfiguration.Expression, "variables.inNamespace", "the mutation checks the namespaceSelector")
		var inNamespace string
		for _, v := range p.Spec.Variables {
			if v.Name == "inNamespace" {
				inNamespace = v.Expression
			}
		}
		assert.Contains(t, inNamespace, "w.namespaceSelector")
	})
	t.Run("dormant: its one matchCondition reads the record and the canary only", func(t *testing.T) {
		require.Len(t, p.Spec.MatchConditions, 1)
		expr := p.Spec.MatchConditions[0].Expression
		assert.Contains(t, expr, "params.metadata.annotations["+circuit.QuoteCEL(circuit.Annotation)+"]")
		assert.Contains(t, expr, "'inject.example.com'")
		assert.Contains(t, expr, "params.metadata.uid", "a copied record with another UID does not arm it")
		assert.Contains(t, expr, "request.dryRun", "only a dry run is a canary")
		assert.NotContains(t, expr, "variables.", "matchConditions cannot read variables")
	})
	t.Run("its only mutation is the marks", func(t *testing.T) {
		require.Len(t, p.Spec.Mutations, 1)
		m := p.Spec.Mutations[0]
		assert.Equal(t, admissionregistrationv1.PatchTypeApplyConfiguration, m.PatchType)
		expr := m.ApplyConfiguration.Expression
		assert.Contains(t, expr, circuit.QuoteCEL(circuit.UnmutatedLabel)+": "+circuit.QuoteCEL(ID("sidecar-injector", "inject.example.com")))
		assert.Contains(t, expr, circuit.QuoteCEL(circuit.UnmutatedAnnotation))
		assert.Contains(t, expr, circuit.QuoteCEL(LoadedAnnotation("sidecar-injector", "inject.example.com"))+": "+circuit.QuoteCEL(Digest("sidecar-injector", "inject.example.com")))
		assert.Equal(t, 3, strings.Count(expr, "Object{"), "the canary's answer, nothing outside the namespaceSelector, or the marks")
	})
}

func TestDigest_tellsCircuitsAndReleasesApart(t *testing.T) {
	d := Digest("sidecar-injector", "inject.example.com")
	assert.Len(t, d, 16)
	assert.Equal(t, d, Digest("sidecar-injector", "inject.example.com"), "stable")
	assert.NotEqual(t, d, Digest("sidecar-injector", "other.example.com"))
	assert.NotEqual(t, d, Digest("other", "inject.example.com"))
	// A release that changes the policy changes the digest: it covers the
	// template's whole spec.
	p, b := render(placeholderConfiguration, placeholderWebhook, placeholderDigest)
	assert.Equal(t, d, digestFor(digestOf(p, b), "sidecar-injector", "inject.example.com"))
	p.Spec.FailurePolicy = new(admissionregistrationv1.FailurePolicyType)
	*p.Spec.FailurePolicy = admissionregistrationv1.Fail
	assert.NotEqual(t, d, digestFor(digestOf(p, b), "sidecar-injector", "inject.example.com"))
}

// TestTemplateJSON_filledIsRender: the chart's template, with a circuit's
// names put in as the chart does it, is exactly what Render returns for
// that circuit, for names of every shape a configuration and a webhook
// may have.
func TestTemplateJSON_filledIsRender(t *testing.T) {
	tmpl, err := TemplateJSON()
	require.NoError(t, err)
	assert.NotContains(t, string(tmpl), ID(placeholderConfiguration, placeholderWebhook), "every ID is a placeholder")
	for _, c := range [][2]string{
		{"sidecar-injector", "inject.example.com"},
		{"a", "b.c.d"},
		{"kyverno-resource-mutating-webhook-cfg", "mutate.kyverno.svc-fail"},
		{"x.y-1", "0.9-z.example"},
		{strings.Repeat("n", 253), strings.Repeat("w", 63) + ".example.com"},
	} {
		t.Run(c[0]+"/"+c[1], func(t *testing.T) {
			gotPolicy, gotBinding, err := fill(tmpl, c[0], c[1])
			require.NoError(t, err)
			policy, binding := Render(c[0], c[1])
			wantPolicy, err := circuit.ObjectJSON(policy)
			require.NoError(t, err)
			wantBinding, err := circuit.ObjectJSON(binding)
			require.NoError(t, err)
			assert.Equal(t, wantPolicy, gotPolicy)
			assert.Equal(t, wantBinding, gotBinding)
		})
	}
}

func TestInline_writesVariablesOut(t *testing.T) {
	vars := []admissionregistrationv1.Variable{{Name: "a", Expression: "1 + variables.b"}, {Name: "b", Expression: "2"}}
	assert.Equal(t, "(1 + (2)) * (2)", inline("variables.a * variables.b", vars))
}

// fill is templateJSON with each placeholder replaced by configuration's
// and webhook's value, as the chart's webhook-guard.marking does it.
func fill(templateJSON []byte, configuration, webhook string) (policy, binding map[string]any, err error) {
	filled := strings.NewReplacer(
		placeholderID, ID(configuration, webhook),
		placeholderDigest, Digest(configuration, webhook),
		placeholderConfiguration, configuration,
		placeholderWebhookPattern, circuit.NamePattern(webhook),
		placeholderWebhook, webhook,
	).Replace(string(templateJSON))
	var t markingTemplate
	if err := json.Unmarshal([]byte(filled), &t); err != nil {
		return nil, nil, err
	}
	return t.Policy, t.Binding, nil
}
