package promcheck_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/sets"

	// The binary imports controller-runtime's root package; so does this
	// test, so that the same init functions register the same collectors
	// (leader election, workqueue, REST client, reconcile metrics).
	_ "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/apimetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker/breakermetrics"
	"github.com/webhook-guard/webhook-guard/internal/clustermetrics"
)

// prometheusComponent is the kustomize Component for Prometheus, relative
// to this package.
const prometheusComponent = "../../deploy/kustomize/components/prometheus"

// runbookBase is the start of every alert's runbook_url; the alert's
// lowercase name is its section's anchor in docs/runbooks.md.
const runbookBase = "https://github.com/webhook-guard/webhook-guard/blob/main/docs/runbooks.md#"

// promqlParser is Prometheus's own PromQL parser with its default options,
// as a Prometheus server without feature flags uses it.
var promqlParser = parser.NewParser(parser.Options{})

// generatedByPrometheus are series that Prometheus writes itself for every
// scrape target; no binary registers them.
var generatedByPrometheus = sets.New("up")

// fromKubeAPIServer are kube-apiserver's own series that the alerts on
// every webhook in the cluster read (group webhook-guard-cluster-webhooks).
// The first three are the counters internal/apimetrics parses from the
// apiserver's /metrics (the e2e tests read them from a real one); the
// histogram is k8s.io/apiserver's admission webhook duration
// (pkg/admission/metrics: namespace apiserver, subsystem admission, name
// webhook_admission_duration_seconds).
var fromKubeAPIServer = sets.New(
	apimetrics.RequestTotal, apimetrics.RejectionCount, apimetrics.FailOpenCount,
	"apiserver_admission_webhook_admission_duration_seconds_bucket",
)

// guardMetrics registers the guard's collectors on controller-runtime's
// metrics.Registry the way internal/cli/run/run.go does (breakermetrics.NewMetrics and
// admission.NewPolicyInForce), once per test binary. It returns the
// names the guard's collectors describe, and those that are histograms,
// whose series carry the _bucket, _sum and _count suffixes.
var guardMetrics = sync.OnceValues(func() (names, histograms sets.Set[string]) {
	names, histograms = sets.New[string](), sets.New[string]()
	collectors := append(breakermetrics.NewMetrics().Collectors(), admission.NewPolicyInForce(),
		clustermetrics.NewBuildInfo("test", "test", "test"), &clustermetrics.WebhookTimeouts{Reader: fake.NewClientBuilder().Build()})
	for _, c := range collectors {
		// Registering on the registry the binary uses also proves that no
		// guard metric collides with one of controller-runtime's.
		if err := metrics.Registry.Register(c); err != nil {
			panic(err)
		}
		descs := make(chan *prometheus.Desc, 16)
		c.Describe(descs)
		close(descs)
		for d := range descs {
			name := descName(d)
			names.Insert(name)
			switch c.(type) {
			case *prometheus.HistogramVec, prometheus.Histogram:
				histograms.Insert(name)
			}
		}
	}
	return names, histograms
})

var descFQName = regexp.MustCompile(`fqName: "([^"]+)"`)

// descName is a descriptor's fully-qualified name. prometheus.Desc does
// not export it; its String() is the documented way to read it.
func descName(d *prometheus.Desc) string {
	m := descFQName.FindStringSubmatch(d.String())
	if m == nil {
		panic("no fqName in " + d.String())
	}
	return m[1]
}

// registered reports whether the binary's registry holds a collector
// named name. It asks the registry itself: registering a collector whose
// name is taken fails, as AlreadyRegisteredError or as an inconsistent
// descriptor. That covers controller-runtime's collectors, which are
// unexported package variables, without having to make each of them
// report a series first.
func registered(name string) bool {
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "webhook-guard test probe"})
	err := metrics.Registry.Register(probe)
	if err == nil {
		metrics.Registry.Unregister(probe)
		return false
	}
	var already prometheus.AlreadyRegisteredError
	return errors.As(err, &already) || strings.Contains(err.Error(), "same fully-qualified name")
}

// unregisteredMetrics returns the names in used that the binary exposes
// under no name: not a registered collector, not a histogram series of
// one of the guard's histograms, not a series Prometheus writes itself.
// The registry does not say which of controller-runtime's collectors are
// histograms, so their _bucket/_sum/_count series are reported as
// missing: use them only after extending this.
func unregisteredMetrics(used []string) []string {
	_, histograms := guardMetrics()
	var missing []string
	for _, name := range used {
		if histograms.Has(name) {
			// A histogram exposes only its _bucket, _sum and _count series.
			missing = append(missing, name)
			continue
		}
		if generatedByPrometheus.Has(name) || fromKubeAPIServer.Has(name) || registered(name) {
			continue
		}
		isSeries := false
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && histograms.Has(base) {
				isSeries = true
			}
		}
		if !isSeries {
			missing = append(missing, name)
		}
	}
	return missing
}

// metricNames returns the metric names an expression selects, from
// Prometheus's AST: the name of every vector and matrix selector, or its
// __name__ matcher. A selector that names no metric (only labels) fails.
func metricNames(t *testing.T, expr parser.Expr, where string) []string {
	t.Helper()
	var names []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if assert.NotEmpty(t, name, "%s: the selector %s names no metric; this test can only check named ones", where, vs) {
			names = append(names, name)
		}
		return nil
	})
	return names
}

// prometheusRuleGroups reads the PrometheusRule's spec, which is a
// Prometheus rule file ("groups:"). deploy's promtool test has the same
// reader: test code cannot be shared across modules.
func prometheusRuleGroups(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(prometheusComponent, "prometheusrule.yaml"))
	require.NoError(t, err)
	var obj struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       map[string]any `json:"spec"`
	}
	require.NoError(t, yaml.UnmarshalStrict(data, &obj))
	require.Equal(t, "monitoring.coreos.com/v1", obj.APIVersion)
	require.Equal(t, "PrometheusRule", obj.Kind)
	groups, err := yaml.Marshal(obj.Spec)
	require.NoError(t, err)
	return groups
}

// actionable are the pointers an alert's description gives to the
// operator; each description must contain one.
var actionable = []string{"kubectl ", "guard status", "docs/"}

func TestPrometheusRule_parsesWithPrometheusRuleParser(t *testing.T) {
	groups, errs := rulefmt.Parse(prometheusRuleGroups(t), false, model.UTF8Validation, promqlParser)
	require.Empty(t, errs, "Prometheus's rule parser refused the PrometheusRule's groups")
	require.NotEmpty(t, groups.Groups)

	alerts := sets.New[string]()
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "group %s: only alerting rules are expected here; a recording rule %q needs this test extended", g.Name, r.Record)
			t.Run(r.Alert, func(t *testing.T) {
				assert.False(t, alerts.Has(r.Alert), "two alerts are named %s", r.Alert)
				alerts.Insert(r.Alert)
				assert.True(t, strings.HasPrefix(r.Alert, "WebhookGuard"), "alert names start with WebhookGuard")
				assert.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], "severity label")
				assert.NotEmpty(t, strings.TrimSpace(r.Annotations["summary"]), "summary annotation")
				desc := r.Annotations["description"]
				assert.NotEmpty(t, strings.TrimSpace(desc), "description annotation")
				assert.True(t, slices.ContainsFunc(actionable, func(s string) bool { return strings.Contains(desc, s) }),
					"the description must tell the operator where to look (one of %q):\n%s", actionable, desc)
				assert.Equal(t, runbookBase+strings.ToLower(r.Alert), r.Annotations["runbook_url"], "runbook_url annotation: the alert's section of docs/runbooks.md")
			})
		}
	}
	// The list; each must stay.
	for _, name := range []string{
		"WebhookGuardCircuitOpen", "WebhookGuardCircuitFlapping", "WebhookGuardProbesUnknown",
		"WebhookGuardPolicyNotInForce", "WebhookGuardNoLeader",
		"WebhookGuardWriteErrors", "WebhookGuardWriteConflicts",
		"WebhookGuardSignalsDisagree", "WebhookGuardAPIServerSignalUnavailable",
		// And these.
		"WebhookGuardValidatingCircuitOpened", "WebhookGuardWebhookCallsFailing", "WebhookGuardWebhookLatencyNearTimeout",
	} {
		assert.True(t, alerts.Has(name), "alert %s is missing", name)
	}
}

func TestPrometheusRule_usesOnlyRegisteredMetrics(t *testing.T) {
	var rf struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(prometheusRuleGroups(t), &rf))
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			expr, err := promqlParser.ParseExpr(r.Expr)
			require.NoError(t, err, "alert %s", r.Alert)
			used := metricNames(t, expr, "alert "+r.Alert)
			assert.NotEmpty(t, used, "alert %s selects no metric", r.Alert)
			assert.Empty(t, unregisteredMetrics(used), "alert %s uses metrics webhook-guard does not expose (renamed?); the guard's own are %v",
				r.Alert, sets.List(must(guardMetrics())))
		}
	}
}

func must[T any](v T, _ ...any) T { return v }

// grafanaVariables are the Grafana variables the dashboard's queries use
// where PromQL needs a duration, with a value for parsing.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// dashboardPanel is the part of a Grafana panel this test reads.
type dashboardPanel struct {
	Title   string                  `json:"title"`
	Targets []struct{ Expr string } `json:"targets"`
	Panels  []dashboardPanel        `json:"panels"` // in a collapsed row
}

// dashboardQueries returns every panel query by panel title, and the
// metrics the template variables query with label_values(METRIC, LABEL).
func dashboardQueries(t *testing.T) (map[string][]string, []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(prometheusComponent, "webhook-guard-dashboard.json"))
	require.NoError(t, err)
	var d struct {
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(data, &d))
	queries := map[string][]string{}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				queries[p.Title] = append(queries[p.Title], tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
	var varMetrics []string
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		require.NotNil(t, m, "template variable query %q: this test reads label_values(METRIC, LABEL) only", v.Definition)
		varMetrics = append(varMetrics, m[1])
	}
	return queries, varMetrics
}

func TestDashboard_usesOnlyRegisteredMetrics(t *testing.T) {
	queries, varMetrics := dashboardQueries(t)
	require.NotEmpty(t, queries)
	all := sets.New(varMetrics...)
	for title, exprs := range queries {
		for _, q := range exprs {
			expr, err := promqlParser.ParseExpr(grafanaVariables.Replace(q))
			require.NoError(t, err, "panel %q: %s", title, q)
			used := metricNames(t, expr, "panel "+title)
			assert.NotEmpty(t, used, "panel %q: %s selects no metric", title, q)
			all.Insert(used...)
		}
	}
	assert.Empty(t, unregisteredMetrics(sets.List(all)), "the dashboard uses metrics webhook-guard does not expose (renamed?); the guard's own are %v",
		sets.List(must(guardMetrics())))
	// The panels it must have: circuit state, probe latency, probe
	// failures by reason, transitions.
	for _, name := range []string{"webhook_guard_circuit_open", "webhook_guard_probe_duration_seconds_bucket", "webhook_guard_probe_failures_total", "webhook_guard_circuit_transitions_total"} {
		assert.True(t, all.Has(name), "no panel shows %s", name)
	}
}

// TestUnregisteredMetrics_failsOnUnknownNames: the check above must be able
// to fail. A renamed metric, a histogram suffix on a counter, a
// controller-runtime metric that is never registered
// (leader_election_slowpath_total is declared but not registered in
// v0.25), and a misspelt one are all reported; the real names are not.
func TestUnregisteredMetrics_failsOnUnknownNames(t *testing.T) {
	guardMetrics()
	cases := map[string]bool{
		"webhook_guard_circuit_open":                                    true,
		"webhook_guard_probe_duration_seconds_bucket":                   true,
		"webhook_guard_probe_duration_seconds_count":                    true,
		"webhook_guard_policy_in_force":                                 true,
		"webhook_guard_build_info":                                      true,
		"webhook_guard_webhook_timeout_seconds":                         true,
		"apiserver_admission_webhook_request_total":                     true,
		"apiserver_admission_webhook_admission_duration_seconds_bucket": true,
		"guard_circuit_open":                                            false, // the name of an earlier release
		"leader_election_master_status":                                 true,
		"controller_runtime_reconcile_errors_total":                     true,
		"workqueue_depth":                                               true,
		"up":                                                            true,
		"webhook_guard_circuit_opened":                                  false,
		"webhook_guard_probe_duration_seconds":                          false,
		"webhook_guard_probe_failures_total_bucket":                     false,
		"webhook_guard_write_errors_total_count":                        false,
		"leader_election_slowpath_total":                                false,
		"webhook_guard_apiserver_not_yet":                               false,
	}
	for name, exposed := range cases {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, !exposed, len(unregisteredMetrics([]string{name})) == 1)
		})
	}
}
