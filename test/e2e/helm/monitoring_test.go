package helm

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChart_monitoringPartsHaveSwitchesNamespacesAndLabels: with
// prometheus.enabled, the ServiceMonitor (with the binding that lets
// Prometheus read /metrics), the PrometheusRule and the dashboard each
// render or not by a switch of their own, in a namespace and with labels
// of their own, as kube-prometheus-stack users place them.
func TestChart_monitoringPartsHaveSwitchesNamespacesAndLabels(t *testing.T) {
	const ns = "webhook-guard-system"
	kinds := func(objs map[string]object) []string {
		var out []string
		for k := range objs {
			if strings.HasPrefix(k, "ServiceMonitor ") || strings.HasPrefix(k, "PrometheusRule ") ||
				k == "ConfigMap "+ns+"/webhook-guard-dashboard" || k == "ConfigMap grafana/webhook-guard-dashboard" ||
				k == "ClusterRoleBinding /webhook-guard-metrics-reader" {
				out = append(out, k)
			}
		}
		return out
	}
	cases := map[string]struct {
		set  string
		want []string
	}{
		"all three by default": {"prometheus.enabled=true", []string{
			"ServiceMonitor " + ns + "/webhook-guard", "ClusterRoleBinding /webhook-guard-metrics-reader",
			"PrometheusRule " + ns + "/webhook-guard", "ConfigMap " + ns + "/webhook-guard-dashboard"}},
		"none without prometheus.enabled": {"prometheus.serviceMonitor.enabled=true", nil},
		"only the alerts": {"prometheus.enabled=true,prometheus.serviceMonitor.enabled=false,prometheus.dashboard.enabled=false", []string{
			"PrometheusRule " + ns + "/webhook-guard"}},
		"only the dashboard, in Grafana's namespace": {"prometheus.enabled=true,prometheus.serviceMonitor.enabled=false,prometheus.prometheusRule.enabled=false,prometheus.dashboard.namespace=grafana", []string{
			"ConfigMap grafana/webhook-guard-dashboard"}},
		"each in a namespace of its own": {"prometheus.enabled=true,prometheus.serviceMonitor.namespace=monitoring,prometheus.prometheusRule.namespace=monitoring,prometheus.dashboard.namespace=grafana", []string{
			"ServiceMonitor monitoring/webhook-guard", "ClusterRoleBinding /webhook-guard-metrics-reader",
			"PrometheusRule monitoring/webhook-guard", "ConfigMap grafana/webhook-guard-dashboard"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			objs := byKey(t, parseObjects(t, helmTemplate(t, "--namespace", ns, "--set", c.set)))
			assert.ElementsMatch(t, c.want, kinds(objs))
		})
	}

	t.Run("a ServiceMonitor elsewhere selects the guard's namespace", func(t *testing.T) {
		objs := byKey(t, parseObjects(t, helmTemplate(t, "--namespace", ns, "--set", "prometheus.enabled=true,prometheus.serviceMonitor.namespace=monitoring")))
		sm := objs["ServiceMonitor monitoring/webhook-guard"]
		require.NotNil(t, sm)
		assert.Equal(t, object{"matchNames": []any{ns}}, sm["spec"].(object)["namespaceSelector"])
		home := byKey(t, parseObjects(t, helmTemplate(t, "--namespace", ns, "--set", "prometheus.enabled=true")))["ServiceMonitor "+ns+"/webhook-guard"]
		assert.NotContains(t, home["spec"], "namespaceSelector", "in the guard's namespace it needs none")
	})
	t.Run("a ServiceMonitor elsewhere is refused where it would need the CA's Secret", func(t *testing.T) {
		r := runHelm(t, append(append([]string{"template", "webhook-guard", chartDir}, exampleValues()...), "--set", "prometheus.enabled=true,certManager.enabled=true,prometheus.serviceMonitor.namespace=monitoring")...)
		require.Error(t, r.err)
		assert.Contains(t, r.stderr, "prometheus.serviceMonitor.namespace")
	})
	t.Run("the dashboard's labels are what Grafana's sidecar is told to look for", func(t *testing.T) {
		objs := byKey(t, parseObjects(t, helmTemplate(t, "--namespace", ns, "-f", valuesFile(t, `
prometheus:
  enabled: true
  dashboard:
    labels: {grafana_dashboard: null, team-dashboards: "yes"}
`))))
		labels := objs["ConfigMap "+ns+"/webhook-guard-dashboard"]["metadata"].(object)["labels"].(object)
		assert.Equal(t, "yes", labels["team-dashboards"])
		assert.NotContains(t, labels, "grafana_dashboard")
		def := byKey(t, parseObjects(t, helmTemplate(t, "--namespace", ns, "--set", "prometheus.enabled=true")))
		assert.Equal(t, "1", def["ConfigMap "+ns+"/webhook-guard-dashboard"]["metadata"].(object)["labels"].(object)["grafana_dashboard"])
	})
}
