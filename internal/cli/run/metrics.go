package run

import (
	"fmt"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/breaker/breakermetrics"
	"github.com/webhook-guard/webhook-guard/internal/cli/version"
	"github.com/webhook-guard/webhook-guard/internal/clustermetrics"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// registerMetrics registers every metric the service exports, in one
// place: the breaker's (breakermetrics.Metrics), whether the guard policy
// is in force,
// webhook_guard_build_info, and the timeouts of every webhook in the
// cluster read from cache (for the alert on kube-apiserver's latency of
// any webhook). Every counter series the alerts take increase() or rate()
// of exists at 0 from the start, so that the first event after a start is
// seen.
func registerMetrics(reg prometheus.Registerer, targets []config.Target, build version.Build, cache client.Reader) (*breakermetrics.Metrics, prometheus.Gauge, error) {
	m := breakermetrics.NewMetrics()
	m.Initialize(targets)
	inForce := admission.NewPolicyInForce()
	collectors := append(m.Collectors(), inForce,
		clustermetrics.NewBuildInfo(build.Version, build.Commit, runtime.Version()),
		&clustermetrics.WebhookTimeouts{Reader: cache})
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	return m, inForce, nil
}
