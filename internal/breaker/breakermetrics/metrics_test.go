package breakermetrics

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// TestMetrics_Initialize_createsEveryCounterSeriesAtZero: after Initialize,
// every label set the breaker can count exists at 0 before the first event,
// so that increase() sees that event.
func TestMetrics_Initialize_createsEveryCounterSeriesAtZero(t *testing.T) {
	m := NewMetrics()
	targets := []config.Target{
		{Kind: circuit.KindMutating, Configuration: "inject", Webhook: "inject.example.com"},
		{Kind: circuit.KindValidating, Configuration: "policy", Webhook: "check.example.com"},
	}
	m.Initialize(targets)

	n := len(targets)
	for _, c := range []struct {
		name      string
		collector prometheus.Collector
		want      int
	}{
		{"transitions: kind x to", m.Transitions, 2 * len(ChangeKinds)},
		{"reconciles: result", m.Reconciles, 4},
		{"scrape errors: reason", m.ScrapeErrors, 2},
		{"probe failures: target x reason", m.ProbeFailures, n * len(ProbeFailureReasons)},
		{"openings: target x signal", m.Openings, n * len(Signals)},
		{"observations: target x verdict", m.APIServerObservations, n * len(Verdicts)},
		{"probe unknown: target", m.ProbeUnknown, n},
		{"admitted without: target", m.AdmittedWithout, n},
		{"probe duration: target", m.ProbeDuration, n},
	} {
		assert.Equal(t, c.want, testutil.CollectAndCount(c.collector), c.name)
	}
	assert.Zero(t, testutil.ToFloat64(m.Openings.WithLabelValues("Validating", "policy", "check.example.com", decide.SignalProbe)))
	assert.Zero(t, testutil.ToFloat64(m.Transitions.WithLabelValues("Validating", string(decide.Opened))))
	assert.Zero(t, testutil.ToFloat64(m.ProbeFailures.WithLabelValues("Mutating", "inject", "inject.example.com", "timeout")))
	assert.Zero(t, testutil.ToFloat64(m.ScrapeErrors.WithLabelValues(ScrapeForbidden)))
}

// constantsOfType returns the values of the string constants of type
// typeName declared in the non-test Go files matching glob, from source.
func constantsOfType(t *testing.T, glob, typeName string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(glob)
	require.NoError(t, err)
	var declared []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || vs.Type == nil {
				return true
			}
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == typeName {
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok {
						declared = append(declared, strings.Trim(lit.Value, `"`))
					}
				}
			}
			return true
		})
	}
	require.NotEmpty(t, declared, "no %s constants in %s", typeName, glob)
	slices.Sort(declared)
	return declared
}

func sortedStrings[S ~string](in []S) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		out = append(out, string(s))
	}
	slices.Sort(out)
	return out
}

// TestLabelValues_listEveryConstant reads the constants from source, so
// that a new probe failure reason or change kind cannot be forgotten by
// Initialize.
func TestLabelValues_listEveryConstant(t *testing.T) {
	assert.Equal(t, constantsOfType(t, "../../probe/*.go", "FailureReason"), sortedStrings(ProbeFailureReasons),
		"ProbeFailureReasons must list every probe.FailureReason constant")
	assert.Equal(t, constantsOfType(t, "../decide/*.go", "ChangeKind"), sortedStrings(ChangeKinds),
		"ChangeKinds must list every ChangeKind constant")
}
