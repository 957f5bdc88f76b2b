package admission_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"

	"github.com/webhook-guard/webhook-guard/internal/admission"
)

// TestInitializePolicyRepairs_createsEverySeriesAtZero: the first repair
// after a start must be an increase from 0 (issue 22), for each object the
// reconciler renders and each action.
func TestInitializePolicyRepairs_createsEverySeriesAtZero(t *testing.T) {
	repairs := admission.NewPolicyRepairs()
	admission.InitializePolicyRepairs(repairs)
	assert.Equal(t, 4, testutil.CollectAndCount(repairs))

	policy, binding := admission.RenderPolicy(admission.Options{BreakerUsername: "system:serviceaccount:webhook-guard-system:webhook-guard"})
	for _, kind := range []string{policy.GetObjectKind().GroupVersionKind().Kind, binding.GetObjectKind().GroupVersionKind().Kind} {
		assert.Contains(t, admission.RepairObjects, kind, "the object label the reconciler counts repairs of")
		for _, action := range admission.RepairActions {
			assert.Zero(t, testutil.ToFloat64(repairs.WithLabelValues(kind, action)))
		}
	}
}
