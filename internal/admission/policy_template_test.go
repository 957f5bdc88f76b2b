package admission

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// TestPolicyTemplateJSON_filledIsRender: the chart's template, filled as
// the chart's webhook-guard.policy fills it (fillPolicyTemplate), is
// RenderPolicy's policy and binding for every shape of targets: none, one
// kind, both, a named instance, repeats and unsorted names.
func TestPolicyTemplateJSON_filledIsRender(t *testing.T) {
	tmpl, err := PolicyTemplateJSON()
	require.NoError(t, err)
	for name, opts := range map[string]Options{
		"no targets": {},
		"mutating":   {Managed: map[string][]string{"slow-mutator": {"slow-mutator.example.com"}}},
		"validating": {ManagedValidating: map[string][]string{"policy-engine": {"b.example.com", "a.example.com", "a.example.com"}}},
		"both, an instance": {
			Managed:           map[string][]string{"z": {"z.example.com"}, "a": {"y.example.com", "x.example.com"}},
			ManagedValidating: map[string][]string{"v": {"v.example.com"}},
			Instance:          "canary",
		},
		"a configuration without approved webhooks": {Managed: map[string][]string{"observed": {}}},
	} {
		t.Run(name, func(t *testing.T) {
			opts.BreakerUsername = "system:serviceaccount:guard-ns:webhook-guard"
			gotPolicy, gotBinding := fillPolicyTemplate(t, tmpl, opts)
			policy, binding := RenderPolicy(opts)
			delete(policy.Annotations, circuit.PolicyDigestAnnotation)
			wantPolicy, err := circuit.ObjectJSON(policy)
			require.NoError(t, err)
			wantBinding, err := circuit.ObjectJSON(binding)
			require.NoError(t, err)
			assert.Equal(t, wantPolicy, gotPolicy)
			assert.Equal(t, wantBinding, gotBinding)
		})
	}
}

// fillPolicyTemplate fills templateJSON for opts as the chart's
// webhook-guard.policy does: names, the usernames, each kind's sorted
// configurations (or the template's noManaged), the CEL map literal and the
// inputs.
func fillPolicyTemplate(t *testing.T, templateJSON []byte, opts Options) (policy, binding map[string]any) {
	t.Helper()
	var tmpl policyTemplate
	require.NoError(t, json.Unmarshal(templateJSON, &tmpl))
	names := func(kind circuit.Kind) string {
		list := opts.ConfigNames(kind)
		if len(list) == 0 {
			list = []string{tmpl.NoManaged}
		}
		data, err := json.Marshal(list)
		require.NoError(t, err)
		return string(data)
	}
	managed := func(kind circuit.Kind) map[string][]string {
		out := map[string][]string{}
		for _, name := range opts.ConfigNames(kind) {
			hooks := append([]string{}, opts.managed(kind)[name]...)
			sort.Strings(hooks)
			out[name] = compact(hooks)
		}
		return out
	}
	inputs, err := json.Marshal(map[string]any{"breaker": opts.Breaker(), "releaser": opts.Releaser(),
		"mutating": managed(circuit.KindMutating), "validating": managed(circuit.KindValidating)})
	require.NoError(t, err)
	inputsString, err := json.Marshal(string(inputs))
	require.NoError(t, err)
	var kinds []string
	for _, kind := range []circuit.Kind{circuit.KindMutating, circuit.KindValidating} {
		var entries []string
		for _, name := range opts.ConfigNames(kind) {
			var hooks []string
			for _, h := range managed(kind)[name] {
				hooks = append(hooks, "'"+h+"'")
			}
			entries = append(entries, "'"+name+"': ["+strings.Join(hooks, ", ")+"]")
		}
		if len(opts.Managed) == 0 && len(opts.ManagedValidating) == 0 && kind == circuit.KindMutating {
			entries = append(entries, "'"+tmpl.NoManaged+"': ['']")
		}
		kinds = append(kinds, "'"+kind.Resource()+"': {"+strings.Join(entries, ", ")+"}")
	}
	filled := strings.NewReplacer(
		`["`+PlaceholderMutatingNames+`"]`, names(circuit.KindMutating),
		`["`+PlaceholderValidatingNames+`"]`, names(circuit.KindValidating),
		`"`+PlaceholderInputs+`"`, string(inputsString),
		PlaceholderManaged, "{"+strings.Join(kinds, ", ")+"}",
		PlaceholderName, opts.Policy(),
		tmpl.Breaker, opts.Breaker(),
		tmpl.Releaser, opts.Releaser(),
	).Replace(string(templateJSON))
	var out policyTemplate
	require.NoError(t, json.Unmarshal([]byte(filled), &out))
	// The inputs are compared as what they say, not as text.
	for _, obj := range []map[string]any{out.Policy} {
		meta := obj["metadata"].(map[string]any)
		annotations := meta["annotations"].(map[string]any)
		var in ruleInputs
		require.NoError(t, json.Unmarshal([]byte(annotations[PolicyInputsAnnotation].(string)), &in))
		annotations[PolicyInputsAnnotation] = renderInputs(opts)
		assert.Equal(t, ruleInputs{Breaker: opts.Breaker(), Releaser: opts.Releaser(), Mutating: managed(circuit.KindMutating), Validating: managed(circuit.KindValidating)}, in)
	}
	return out.Policy, out.Binding
}

func compact(sorted []string) []string {
	out := sorted[:0]
	for i, v := range sorted {
		if i == 0 || sorted[i-1] != v {
			out = append(out, v)
		}
	}
	return out
}
