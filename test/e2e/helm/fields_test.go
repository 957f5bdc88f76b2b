package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/config"
)

// everyField is a GuardConfiguration that sets every field of the file
// format, each to a value other than its default, so that a field the
// chart drops changes what the guard loads.
const everyField = `apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
holdWhenAllFail: 4
instance: canary
apiserverScrapeInterval: 2s
targets:
- kind: Mutating
  configuration: every-field
  webhook: every-field.example.com
  allowAdmissionWithoutMutation: true
  mode: Bypass
  openAfter: 2
  closeAfter: 7
  dampFlapping: false
  probe:
    kind: HTTPGet
    interval: 2s
    timeout: 750ms
    path: /healthz
  apiserverSignal:
    enabled: false
    minRequests: 9
    failureRatio: 0.25
    minOpen: 45s
    pathProbe:
      service:
        namespace: hooks
        name: every-field
        port: 8443
    withoutPathProbe: Open
    trafficAsProbe: false
- kind: Validating
  configuration: every-field-validating
  webhook: validate.every-field.example.com
  allowAdmissionWithoutValidation: true
`

// TestChart_carriesEveryConfigurationField: the chart's schema accepts
// every field of the GuardConfiguration as a value, and its ConfigMap
// carries each one to the guard, which loads it. The fields are those of
// the Go types (config.FieldPaths, from their JSON names): a field added
// to the format fails this test until the test's values set it and the
// chart carries it.
func TestChart_carriesEveryConfigurationField(t *testing.T) {
	var values any
	require.NoError(t, yaml.Unmarshal([]byte(everyField), &values))
	fields := config.FieldPaths()
	set := leafPaths(values, "")
	for _, f := range fields {
		assert.Contains(t, set, f, "everyField does not set %s: set it, and make values.schema.json and templates/_helpers.tpl (webhook-guard.config) carry it", f)
	}
	for _, f := range set {
		assert.Contains(t, fields, f, "everyField sets %s, which is no field of the GuardConfiguration", f)
	}
	want, err := config.Parse([]byte(everyField))
	require.NoError(t, err, "everyField must be a valid GuardConfiguration")

	r := runHelm(t, "template", "webhook-guard", chartDir, "-f", valuesFile(t, everyField), "--set", "marking.enabled=false", "--show-only", "templates/configmap.yaml")
	require.NoError(t, r.err, "the chart refuses a GuardConfiguration the guard accepts:\n%s", r.stderr)
	objs := parseObjects(t, r.stdout)
	require.Len(t, objs, 1)
	rendered := objs[0]["data"].(object)["config.yaml"].(string)
	var got any
	require.NoError(t, yaml.Unmarshal([]byte(rendered), &got))

	for _, f := range fields {
		w := valuesAt(values, f)
		require.NotEmpty(t, w, f)
		assert.Equal(t, w, valuesAt(got, f), "the chart's configuration does not carry %s as given:\n%s", f, rendered)
	}

	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(rendered), 0o600))
	loaded, err := config.Load(path)
	require.NoError(t, err, "the guard refuses the configuration the chart renders")
	assert.Equal(t, want, loaded, "the guard loads another configuration from the chart's than from the values")
}

// TestChart_refusesEachBoundAsTheGuardDoes: at each bound of the
// GuardConfiguration (config.MaxProbesInARow, config.MinProbeInterval,
// config.MinAPIServerScrapeInterval), the chart's schema and the guard
// refuse the same values, each naming the field, and both accept the
// values at the bound. deploy's TestSchema_durationBoundsAreTheGuards
// compares the schema's patterns with the guard on many more spellings.
func TestChart_refusesEachBoundAsTheGuardDoes(t *testing.T) {
	header := "apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\n"
	target := func(extra string) string {
		return "targets:\n- {configuration: m, webhook: m.example.com, allowAdmissionWithoutMutation: true" + extra + "}\n"
	}
	most, least := config.MaxProbesInARow, config.MinProbeInterval
	scrape := config.MinAPIServerScrapeInterval
	cases := map[string]struct {
		// field is the guard's name of the field, path the schema's; each
		// says the bound in its refusal: guardSays, chartSays.
		field, path          string
		guardSays, chartSays string
		refused, accepted    []string
	}{
		"openAfter": {"targets[0].openAfter", "/targets/0/openAfter", fmt.Sprintf("must be at most %d", most), fmt.Sprintf("want %d", most),
			[]string{header + target(fmt.Sprintf(", openAfter: %d", most+1)), header + target(", openAfter: 100000")},
			[]string{header + target(fmt.Sprintf(", openAfter: %d", most)), header + target(", openAfter: 1")}},
		"closeAfter": {"targets[0].closeAfter", "/targets/0/closeAfter", fmt.Sprintf("must be at most %d", most), fmt.Sprintf("want %d", most),
			[]string{header + target(fmt.Sprintf(", closeAfter: %d", most+1)), header + target(", closeAfter: 100000")},
			[]string{header + target(fmt.Sprintf(", closeAfter: %d", most))}},
		"probe.interval": {"targets[0].probe.interval", "/targets/0/probe/interval", "must be at least " + least.String(), "a duration of at least " + least.String(),
			[]string{
				header + target(", probe: {interval: "+(least-time.Millisecond).String()+"}"),
				header + target(", probe: {interval: 1ns}"),
				header + target(", probe: {interval: 0.09s}"),
				header + target(", probe: {interval: 99999us}"),
			},
			[]string{
				header + target(", probe: {interval: "+least.String()+"}"),
				header + target(", probe: {interval: 0.1s}"),
				header + target(", probe: {interval: 100000us}"),
				header + target(", probe: {interval: 1m30s}"),
			}},
		"apiserverScrapeInterval": {"apiserverScrapeInterval", "/apiserverScrapeInterval", "must be at least " + scrape.String(), "a duration of at least " + scrape.String(),
			[]string{
				header + "apiserverScrapeInterval: " + (scrape - time.Millisecond).String() + "\n" + target(""),
				header + "apiserverScrapeInterval: 0.5s\n" + target(""),
			},
			[]string{
				header + "apiserverScrapeInterval: " + scrape.String() + "\n" + target(""),
				header + "apiserverScrapeInterval: 1000ms\n" + target(""),
			}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			for _, values := range c.refused {
				_, err := config.Parse([]byte(values))
				if assert.Error(t, err, "the guard accepts:\n%s", values) {
					assert.Contains(t, err.Error(), c.field+": Invalid value")
					assert.Contains(t, err.Error(), c.guardSays)
				}
				r := runHelm(t, "template", "webhook-guard", chartDir, "-f", valuesFile(t, values), "--set", "marking.enabled=false", "--show-only", "templates/configmap.yaml")
				if assert.Error(t, r.err, "the chart accepts:\n%s", values) {
					assert.Contains(t, r.stderr, "values don't meet the specifications of the schema")
					assert.Contains(t, r.stderr, c.path)
					assert.Contains(t, r.stderr, c.chartSays)
				}
			}
			for _, values := range c.accepted {
				_, err := config.Parse([]byte(values))
				assert.NoError(t, err, "the guard refuses:\n%s", values)
				r := runHelm(t, "template", "webhook-guard", chartDir, "-f", valuesFile(t, values), "--set", "marking.enabled=false", "--show-only", "templates/configmap.yaml")
				assert.NoError(t, r.err, "the chart refuses:\n%s\n%s", values, r.stderr)
			}
		})
	}
}

// leafPaths lists the paths of v's leaves, written as config.FieldPaths
// writes them ("targets[].probe.kind"), each once, in first-seen order.
func leafPaths(v any, prefix string) []string {
	var out []string
	add := func(paths ...string) {
		for _, p := range paths {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	switch v := v.(type) {
	case map[string]any:
		for k, item := range v {
			add(leafPaths(item, prefix+k+".")...)
		}
	case []any:
		for _, item := range v {
			add(leafPaths(item, strings.TrimSuffix(prefix, ".")+"[].")...)
		}
	default:
		add(strings.TrimSuffix(prefix, "."))
	}
	return out
}

// valuesAt returns every value at path in v, through each item of each
// list on the way; an item without the field counts as nil.
func valuesAt(v any, path string) []any {
	if path == "" {
		return []any{v}
	}
	head, rest, _ := strings.Cut(path, ".")
	list := strings.HasSuffix(head, "[]")
	m, _ := v.(map[string]any)
	next, ok := m[strings.TrimSuffix(head, "[]")]
	if !ok {
		return []any{nil}
	}
	if !list {
		return valuesAt(next, rest)
	}
	var out []any
	items, _ := next.([]any)
	for _, item := range items {
		out = append(out, valuesAt(item, rest)...)
	}
	return out
}
