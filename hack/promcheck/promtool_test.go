package promcheck_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPromtool_pinnedAtThisModulesPrometheusVersion: promtool is built
// from its own module (hack/tools/promtool) so that its dependencies stay
// out of every other go.mod; it must test the rules with the Prometheus
// whose rule and PromQL parsers this package's tests use.
func TestPromtool_pinnedAtThisModulesPrometheusVersion(t *testing.T) {
	version := func(path string) string {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/prometheus/prometheus\s+(\S+)`).FindStringSubmatch(string(data))
		require.NotNil(t, m, "%s requires no github.com/prometheus/prometheus", path)
		return m[1]
	}
	assert.Equal(t, version("../go.mod"), version("../tools/promtool/go.mod"),
		"hack/tools/promtool/go.mod must pin github.com/prometheus/prometheus at hack/go.mod's version")
}
