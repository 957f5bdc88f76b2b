package admission

import "github.com/prometheus/client_golang/prometheus"

// Every metric of this package is defined here. Its collectors are
// returned, never registered: the caller registers them with the other
// metrics, on controller-runtime's registry.

// NewPolicyRepairs returns the counter of writes that put the guard policy
// or its binding back after someone deleted or changed it. The caller
// registers it with the other metrics.
func NewPolicyRepairs() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "webhook_guard_policy_repairs_total",
		Help: "Writes that restored the webhook-guard ValidatingAdmissionPolicy or its binding, by object and action.",
	}, []string{"object", "action"})
}

// The label values of webhook_guard_policy_repairs_total.
var (
	// RepairObjects are the kinds RenderPolicy renders.
	RepairObjects = []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
	// RepairActions are what a repair did.
	RepairActions = []string{repairCreated, repairUpdated}
)

const (
	repairCreated = "created"
	repairUpdated = "updated"
)

// InitializePolicyRepairs creates every series of repairs (NewPolicyRepairs)
// at 0, so that the first repair after a start is an increase from 0 that
// increase() sees, not a series that appears at 1.
func InitializePolicyRepairs(repairs *prometheus.CounterVec) {
	for _, object := range RepairObjects {
		for _, action := range RepairActions {
			repairs.WithLabelValues(object, action)
		}
	}
}
