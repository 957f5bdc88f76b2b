package clustermetrics

import "github.com/prometheus/client_golang/prometheus"

// NewBuildInfo returns webhook_guard_build_info, 1 with the version and
// commit the binary was built from and the Go version that built it.
func NewBuildInfo(version, commit, goVersion string) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "webhook_guard_build_info",
		Help: "1, labelled with the webhook-guard version and commit the binary was built from and the Go version that built it.",
	}, []string{"version", "commit", "go_version"})
	g.WithLabelValues(version, commit, goVersion).Set(1)
	return g
}
