package helm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// assertLintsClean runs "helm lint --strict" on the chart with args: no
// error, no warning, and no note but the missing icon.
func assertLintsClean(t *testing.T, args ...string) {
	t.Helper()
	lint := runHelm(t, append([]string{"lint", "--strict", chartDir}, args...)...)
	require.NoError(t, lint.err, "helm lint:\n%s%s", lint.stdout, lint.stderr)
	for _, line := range strings.Split(lint.stdout+lint.stderr, "\n") {
		assert.NotContains(t, line, "[WARNING]")
		assert.NotContains(t, line, "[ERROR]")
		if strings.Contains(line, "[INFO]") {
			// The project has no icon to point at.
			assert.Contains(t, line, "icon is recommended", "helm lint said: %s", line)
		}
	}
}

// TestChart_lintsStrictWithTheDefaultsAndEachCIValuesFile: "helm lint
// --strict" passes with the chart's own values (no target: the guard
// runs idle) and with each values file of its ci/ folder, the ones
// chart-testing ("ct lint", "ct install") runs the chart with; each of
// them also renders.
func TestChart_lintsStrictWithTheDefaultsAndEachCIValuesFile(t *testing.T) {
	t.Run("the defaults", func(t *testing.T) {
		assertLintsClean(t)
		r := runHelm(t, "template", "webhook-guard", chartDir)
		require.NoError(t, r.err, r.stderr)
		objs := byKey(t, parseObjects(t, r.stdout))
		assert.Contains(t, objs, "Deployment default/webhook-guard")
		assert.Contains(t, objs, "ValidatingAdmissionPolicy /webhook-guard")
	})
	files, err := filepath.Glob(filepath.Join(root, chartDir, "ci", "*-values.yaml"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 5, "the ci/ folder's values files")
	entries, err := os.ReadDir(filepath.Join(root, chartDir, "ci"))
	require.NoError(t, err)
	require.Len(t, entries, len(files), "chart-testing reads only ci/*-values.yaml")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			assertLintsClean(t, "-f", f)
			r := runHelm(t, "template", "webhook-guard", chartDir, "-f", f)
			require.NoError(t, r.err, r.stderr)
			assert.NotEmpty(t, parseObjects(t, r.stdout))
		})
	}
}
