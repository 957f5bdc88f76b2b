package admission_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/webhook-guard/webhook-guard/internal/admission"
)

var record = flag.Bool("record", false, "record this version's guard rule in internal/admission/rules")

// TestRecordedRules_holdThisVersionsRule: the rule this version renders is
// recorded, so that the next version recognises it while this version's
// leader keeps it in place during a rollout. After a change to the rule,
// run: go test ./internal/admission -run TestRecordedRules -record
func TestRecordedRules_holdThisVersionsRule(t *testing.T) {
	rules, err := admission.RecordedRules()
	require.NoError(t, err)
	require.NotEmpty(t, rules)
	this := admission.RecordRule()
	for _, rule := range rules {
		if equality.Semantic.DeepEqual(rule, this) {
			return
		}
	}
	if !*record {
		t.Fatalf("this version's guard rule is not recorded in internal/admission/%s; the next version could not recognise it during a rollout.\n"+
			"Record it: go test ./internal/admission -run TestRecordedRules -record", admission.RulesDir)
	}
	data, err := json.MarshalIndent(this, "", "  ")
	require.NoError(t, err)
	file := filepath.Join(admission.RulesDir, fmt.Sprintf("%02d.json", len(rules)+1))
	require.NoError(t, os.WriteFile(file, append(data, '\n'), 0o644))
	t.Logf("recorded this version's rule in %s", file)
}

// TestRecordedRules_instantiateRendersAsRenderPolicy: a recorded rule, put
// back together for a breaker and targets, is exactly what RenderPolicy
// renders for them, whatever the breaker's name holds.
func TestRecordedRules_instantiateRendersAsRenderPolicy(t *testing.T) {
	for name, opts := range map[string]admission.Options{
		"no targets":                    {},
		"targets of both kinds":         {BreakerUsername: "system:serviceaccount:guard:breaker", Managed: map[string][]string{"b": {"z.example.com", "a.example.com"}, "a": nil}, ManagedValidating: map[string][]string{"v": {"v.example.com"}}},
		"a breaker to escape":           {BreakerUsername: `it's\me ${BREAKER}`, Managed: map[string][]string{"cfg": {"w.example.com"}}},
		"a named instance":              {Instance: "canary", Managed: map[string][]string{"cfg": {"w.example.com"}}},
		"targets that need quoting":     {Managed: map[string][]string{`a'config\`: {`we'ird\hook`}}},
		"a release identity of its own": {BreakerUsername: "system:serviceaccount:guard:breaker", ReleaserUsername: `it's\me ${RELEASER} ${BREAKER}`, Managed: map[string][]string{"cfg": {"w.example.com"}}},
	} {
		t.Run(name, func(t *testing.T) {
			want, _ := admission.RenderPolicy(opts)
			assert.Equal(t, want.Spec, admission.Instantiate(admission.RecordRule(), opts))
		})
	}
}
