package admission

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// Exported for the external test package.
var NoManagedConfigurationName = noManagedConfigurationName

var RuleDigest = ruleDigest

// BreakerMetadata names the metadata fields, besides labels and
// annotations, that the breaker may not change.
func BreakerMetadata() []string {
	names := make([]string, 0, len(breakerMetadata))
	for _, f := range breakerMetadata {
		names = append(names, f.name)
	}
	return names
}

var APIServerMetadata = apiServerMetadata

var (
	RecordRule  = recordRule
	Instantiate = instantiate
	RulesDir    = "rules"
)

// RecordedRules returns the recorded rules, in file order.
func RecordedRules() ([]admissionregistrationv1.ValidatingAdmissionPolicySpec, error) {
	return recordedRules()
}

// WithRecordedRule adds rule, recorded as recordRule records, to the
// recorded rules until t ends: an earlier version's rule for a test.
func WithRecordedRule(t testing.TB, rule admissionregistrationv1.ValidatingAdmissionPolicySpec) {
	rules, err := recordedRules()
	if err != nil {
		t.Fatal(err)
	}
	saved := recordedRules
	recordedRules = func() ([]admissionregistrationv1.ValidatingAdmissionPolicySpec, error) {
		return append(slices.Clip(rules), rule), nil
	}
	t.Cleanup(func() { recordedRules = saved })
}
