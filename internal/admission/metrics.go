package admission

import "github.com/prometheus/client_golang/prometheus"

// Every metric of this package is defined here. Its collectors are
// returned, never registered: the caller registers them with the other
// metrics, on controller-runtime's registry.

// NewPolicyInForce returns the gauge the PolicyChecker sets: 1 while the
// guard policy and binding are in force as the guard renders them, 0 while
// either is missing or differs. The caller registers it with the other
// metrics.
func NewPolicyInForce() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "webhook_guard_policy_in_force",
		Help: "1 while the webhook-guard ValidatingAdmissionPolicy and its binding are what the guard renders for its breaker and targets, 0 while either is missing or differs (the leader's view).",
	})
}
