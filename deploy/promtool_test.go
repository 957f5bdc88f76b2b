package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/yaml"
)

// prometheusComponent is the kustomize Component for Prometheus, relative
// to this package.
const prometheusComponent = "kustomize/components/prometheus"

// prometheusRuleGroups reads the PrometheusRule's spec, which is a
// Prometheus rule file ("groups:"). hack/promcheck, which parses it with
// Prometheus's own rule parser, has the same reader.
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

// ruleTestFile is promtool's rule test beside the PrometheusRule. Its
// rule_files names rulesFileName, which TestPrometheusRule_promtoolRuleTests
// writes from the PrometheusRule's spec next to a copy of it.
const (
	ruleTestFile  = "prometheusrule_test.yaml"
	rulesFileName = "prometheusrule.rules.yaml"
)

// alertNames returns the PrometheusRule's alert names, in order.
func alertNames(t *testing.T) []string {
	t.Helper()
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(prometheusRuleGroups(t), &rf))
	var names []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
		}
	}
	require.NotEmpty(t, names)
	return names
}

// TestRunbooks_haveASectionPerAlert: every alert's runbook_url anchor is a
// "## <alert>" heading of docs/runbooks.md (GitHub's anchor for it is the
// lowercase name), and the runbooks describe no alert that does not exist.
func TestRunbooks_haveASectionPerAlert(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs", "runbooks.md"))
	require.NoError(t, err)
	headings := sets.New[string]()
	for _, m := range regexp.MustCompile(`(?m)^## (\S+)\s*$`).FindAllStringSubmatch(string(data), -1) {
		headings.Insert(m[1])
	}
	alerts := sets.New(alertNames(t)...)
	assert.Empty(t, sets.List(alerts.Difference(headings)), "alerts without a section in docs/runbooks.md")
	assert.Empty(t, sets.List(headings.Difference(alerts)), "sections of docs/runbooks.md for alerts the PrometheusRule does not have")
	for a := range alerts {
		assert.Contains(t, string(data), "(#"+strings.ToLower(a)+")", "the table of contents of docs/runbooks.md links to %s", a)
	}
}

// promtoolTests is the part of promtool's rule test file this test reads.
type promtoolTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			AlertName string `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `json:"exp_labels"`
				ExpAnnotations map[string]string `json:"exp_annotations"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestPrometheusRuleTests_coverEveryAlert: the promtool rule test has, for
// every alert, a case where it fires (with its labels and annotations) and
// one where it must not, and tests no alert that does not exist. promtool
// itself runs in TestPrometheusRule_promtoolRuleTests.
func TestPrometheusRuleTests_coverEveryAlert(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(prometheusComponent, ruleTestFile))
	require.NoError(t, err)
	var pt promtoolTests
	require.NoError(t, yaml.Unmarshal(data, &pt))
	assert.Equal(t, []string{rulesFileName}, pt.RuleFiles)
	alerts := sets.New(alertNames(t)...)
	fires, quiet := sets.New[string](), sets.New[string]()
	for _, tc := range pt.Tests {
		for _, a := range tc.AlertRuleTest {
			assert.True(t, alerts.Has(a.AlertName), "test %q checks %s, which the PrometheusRule does not have", tc.Name, a.AlertName)
			if len(a.ExpAlerts) == 0 {
				quiet.Insert(a.AlertName)
				continue
			}
			fires.Insert(a.AlertName)
			for _, e := range a.ExpAlerts {
				assert.NotEmpty(t, e.ExpLabels["severity"], "test %q, %s: exp_labels without severity", tc.Name, a.AlertName)
				for _, k := range []string{"summary", "description", "runbook_url"} {
					assert.NotEmpty(t, e.ExpAnnotations[k], "test %q, %s: exp_annotations without %s", tc.Name, a.AlertName, k)
				}
			}
		}
	}
	assert.Empty(t, sets.List(alerts.Difference(fires)), "alerts without a promtool case where they fire")
	assert.Empty(t, sets.List(alerts.Difference(quiet)), "alerts without a promtool case where they must not fire")
}

// TestPrometheusRule_promtoolRuleTests runs "promtool test rules" on
// prometheusrule_test.yaml against the PrometheusRule's spec (a plain rule
// file). PROMTOOL is the promtool binary: make promtool-test (part of make
// test) builds it with hack/tools/promtool.sh and sets it. Without it the
// test is skipped.
func TestPrometheusRule_promtoolRuleTests(t *testing.T) {
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		t.Skip("PROMTOOL is not set; make promtool-test builds promtool and runs this test")
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, rulesFileName), prometheusRuleGroups(t), 0o644))
	tests, err := os.ReadFile(filepath.Join(prometheusComponent, ruleTestFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ruleTestFile), tests, 0o644))

	cmd := exec.Command(promtool, "test", "rules", ruleTestFile)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("promtool test rules %s:\n%s", ruleTestFile, out)
	require.NoError(t, err, "promtool test rules failed")
}
