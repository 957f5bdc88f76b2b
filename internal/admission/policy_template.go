package admission

import (
	"regexp"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// The Helm chart ships the guard policy as a template of its own objects,
// files/policy.json, rendered here (PolicyTemplateJSON) and written there
// by "make manifests". The chart fills in what depends on its values; the
// CEL, and so the rule, is this package's. A filled template is
// RenderPolicy's output (TestPolicyTemplateJSON_filledIsRender here, and
// test/e2e/helm against helm itself).
//
// Placeholders, none of which CEL, JSON or a Kubernetes name can hold
// otherwise:
const (
	// PlaceholderName stands for the objects' name (Options.Policy).
	PlaceholderName = "@POLICY_NAME@"
	// PlaceholderMutatingNames and PlaceholderValidatingNames are each
	// the one element of a resourceNames list; the list, brackets and
	// quotes included, is replaced with the JSON list of the kind's
	// managed configurations, or of noManagedConfigurationName when it
	// has none.
	PlaceholderMutatingNames   = "@MUTATING_NAMES@"
	PlaceholderValidatingNames = "@VALIDATING_NAMES@"
	// PlaceholderManaged stands for the managed-names variable's CEL map
	// literal (celManagedMap).
	PlaceholderManaged = "@MANAGED@"
	// PlaceholderInputs is PolicyInputsAnnotation's value; the string,
	// quotes included, is replaced with the JSON string of the inputs.
	PlaceholderInputs = "@INPUTS@"
)

// policyTemplate is files/policy.json.
type policyTemplate struct {
	// Breaker and Releaser are the placeholders of the two usernames,
	// which appear in CEL string literals and in messages: a username
	// holds no character CEL quoting changes.
	Breaker  string `json:"breaker"`
	Releaser string `json:"releaser"`
	// NoManaged is noManagedConfigurationName, the one resourceName of a
	// kind with no managed configuration.
	NoManaged string         `json:"noManaged"`
	Policy    map[string]any `json:"policy"`
	Binding   map[string]any `json:"binding"`
}

// PolicyTemplateJSON returns files/policy.json: the guard policy and
// binding as RenderPolicy renders them for breakerPlaceholder and
// releaserPlaceholder, with the placeholders above for the name, the
// targets and the inputs, and without circuit.PolicyDigestAnnotation
// (read only by versions that trusted it, which no chart installed).
func PolicyTemplateJSON() ([]byte, error) {
	opts := Options{BreakerUsername: breakerPlaceholder, ReleaserUsername: releaserPlaceholder}
	policy, binding := RenderPolicy(opts)
	policy.Name, binding.Name, binding.Spec.PolicyName = PlaceholderName, PlaceholderName, PlaceholderName
	for i := range policy.Spec.MatchConstraints.ResourceRules {
		r := &policy.Spec.MatchConstraints.ResourceRules[i]
		r.ResourceNames = []string{PlaceholderMutatingNames}
		if r.Resources[0] == circuit.KindValidating.Resource() {
			r.ResourceNames = []string{PlaceholderValidatingNames}
		}
	}
	for i := range policy.Spec.Variables {
		if policy.Spec.Variables[i].Name == managedVariable {
			policy.Spec.Variables[i].Expression = PlaceholderManaged
		}
	}
	policy.Annotations = map[string]string{PolicyInputsAnnotation: PlaceholderInputs}
	t := policyTemplate{Breaker: breakerPlaceholder, Releaser: releaserPlaceholder, NoManaged: noManagedConfigurationName}
	var err error
	if t.Policy, err = circuit.ObjectJSON(policy); err != nil {
		return nil, err
	}
	if t.Binding, err = circuit.ObjectJSON(binding); err != nil {
		return nil, err
	}
	data, err := circuit.IndentJSON(t)
	if err != nil {
		return nil, err
	}
	// Each list placeholder on one line, as the chart replaces it.
	out := listPlaceholder.ReplaceAll(data, []byte(`["$1"]`))
	return out, nil
}

// listPlaceholder is an indented list whose only element is a list
// placeholder.
var listPlaceholder = regexp.MustCompile(`\[\s*"(` + PlaceholderMutatingNames + `|` + PlaceholderValidatingNames + `)"\s*\]`)
