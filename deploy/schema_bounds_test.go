package deploy_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/webhook-guard/webhook-guard/internal/config"
)

const schemaFile = "helm/webhook-guard/values.schema.json"

// schemaDefinition returns the definition name of values.schema.json.
func schemaDefinition(t *testing.T, name string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(schemaFile)
	require.NoError(t, err)
	var schema struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	require.NoError(t, json.Unmarshal(data, &schema))
	def, ok := schema.Definitions[name]
	require.True(t, ok, "values.schema.json has no definition %q", name)
	return def
}

// TestSchema_probesInARowAreTheGuards: the chart bounds openAfter and
// closeAfter where the guard does.
func TestSchema_probesInARowAreTheGuards(t *testing.T) {
	def := schemaDefinition(t, "probesInARow")
	assert.EqualValues(t, 1, def["minimum"])
	assert.EqualValues(t, config.MaxProbesInARow, def["maximum"])
}

// TestSchema_durationBoundsAreTheGuards: the definitions of probe.interval
// and apiserverScrapeInterval in values.schema.json, their patterns
// matched with Go's regexp as helm's schema validator matches them
// (santhosh-tekuri/jsonschema), accept a duration only when
// the guard does, for every spelling generated here: each unit, whole
// and decimal numbers on both sides of the bound, sums of two terms and
// signs. They refuse only the unusual spellings the guard also reads
// (unusualDuration), which the schema's grammar of durations never took,
// and accept nothing the guard refuses but a duration longer than Go's
// time.Duration holds (about 292 years), which the guard refuses at start
// as no duration.
func TestSchema_durationBoundsAreTheGuards(t *testing.T) {
	header := "apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\n"
	target := "targets:\n- {configuration: m, webhook: m.example.com, allowAdmissionWithoutMutation: true%s}\n"
	cases := map[string]struct {
		definition string
		bound      string
		config     func(spelling string) string
	}{
		"probe.interval": {"probeInterval", config.MinProbeInterval.String(), func(s string) string {
			return header + fmt.Sprintf(target, ", probe: {interval: '"+s+"'}")
		}},
		"apiserverScrapeInterval": {"scrapeInterval", config.MinAPIServerScrapeInterval.String(), func(s string) string {
			return header + "apiserverScrapeInterval: '" + s + "'\n" + fmt.Sprintf(target, "")
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			accepts := boundedDuration(t, c.definition)
			spellings := durationSpellings()
			accepted := 0
			for _, s := range spellings {
				_, err := config.Parse([]byte(c.config(s)))
				guard, schema := err == nil, accepts(s)
				switch {
				case schema && !guard && !longerThanGoHolds(t, s):
					t.Errorf("the schema accepts %s: %q, which the guard refuses: %v", name, s, err)
				case guard && !schema && !unusualDuration(s):
					t.Errorf("the schema refuses %s: %q, which the guard accepts", name, s)
				}
				if schema {
					accepted++
				}
			}
			assert.True(t, accepts(c.bound), "the bound %s itself", c.bound)
			t.Logf("%d spellings, %d accepted", len(spellings), accepted)
		})
	}
}

// boundedDuration returns what the schema's definition name accepts: a
// duration (the definition "duration") that matches the pattern whose
// mismatch the definition refuses ("if" it does "not" match, "then" it
// must be a const no duration is).
func boundedDuration(t *testing.T, name string) func(string) bool {
	t.Helper()
	duration, ok := schemaDefinition(t, "duration")["pattern"].(string)
	require.True(t, ok, "the definition duration has no pattern")
	var def struct {
		AllOf []struct {
			Ref string `json:"$ref"`
			If  struct {
				Not struct {
					Pattern string `json:"pattern"`
				} `json:"not"`
			} `json:"if"`
			Then struct {
				Const *string `json:"const"`
			} `json:"then"`
		} `json:"allOf"`
	}
	data, err := json.Marshal(schemaDefinition(t, name))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &def))
	require.Len(t, def.AllOf, 2, "%s: allOf a duration and a bound", name)
	require.Equal(t, "#/definitions/duration", def.AllOf[0].Ref, name)
	bound := def.AllOf[1]
	require.NotEmpty(t, bound.If.Not.Pattern, name)
	require.NotNil(t, bound.Then.Const, name)
	require.False(t, regexp.MustCompile(duration).MatchString(*bound.Then.Const), "%s: a duration equals the const that words the refusal", name)
	isDuration, reaches := regexp.MustCompile(duration), regexp.MustCompile(bound.If.Not.Pattern)
	return func(s string) bool { return isDuration.MatchString(s) && reaches.MatchString(s) }
}

// durationSpellings are Go durations around 100ms and 1s in every unit,
// and sums and signed forms of some of them.
func durationSpellings() []string {
	numbers := []string{
		"0", "1", "9", "10", "99", "100", "101", "999", "1000", "1001", "0100", "00999",
		"99999", "100000", "100001", "999999", "1000000", "99999999", "100000000", "999999999", "1000000000",
		"0.001", "0.0016", "0.0017", "0.002", "0.01", "0.05", "0.09", "0.099", "0.1", "0.10", "0.15", "0.5",
		"0.9", "0.99", "0.999", "1.0", "1.5", "99.9", "99.99", "100.0", "999.9", "1000.5", "00.1", "000.5",
	}
	var out []string
	// Go reads both the micro sign (U+00B5) and the Greek mu (U+03BC).
	for _, unit := range []string{"ns", "us", "\u00b5s", "\u03bcs", "ms", "s", "m", "h"} {
		for _, n := range numbers {
			out = append(out, n+unit)
		}
	}
	out = append(out,
		"60ms40ms", "60ms60ms", "500ms500ms", "999ms1ms", "1m30s", "1h1ms", "1ms1h", "99ms1s", "0s100ms", "0.5s0.5s",
		"+100ms", "+1s", "-1s", ".5s", "1.s", "1.ms", "1", "0", "1S", "1sec", "100 ms",
	)
	return out
}

// unusualDuration reports whether s is a spelling of a duration that the
// schema does not read although time.ParseDuration does: a sign, a
// number without a digit on one side of its point, more than one term
// (a sum whose terms may each be below the bound), or a decimal below
// 0.1 of a minute or an hour.
func unusualDuration(s string) bool {
	return strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-") || pointWithoutDigit.MatchString(s) ||
		len(durationTerm.FindAllString(s, -1)) > 1 || smallMinutesOrHours.MatchString(s)
}

var (
	pointWithoutDigit   = regexp.MustCompile(`(^|[^0-9])\.|\.([^0-9]|$)`)
	durationTerm        = regexp.MustCompile(`[0-9.]+(ns|us|\x{b5}s|\x{3bc}s|ms|s|m|h)`)
	smallMinutesOrHours = regexp.MustCompile(`^0*\.0[0-9]*(m|h)$`)
)

// longerThanGoHolds reports whether the duration s, summed exactly, is
// longer than the longest time.Duration.
func longerThanGoHolds(t *testing.T, s string) bool {
	t.Helper()
	nanoseconds := map[string]int64{"ns": 1, "us": 1e3, "\u00b5s": 1e3, "\u03bcs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9}
	sum := new(big.Rat)
	for _, m := range durationTermParts.FindAllStringSubmatch(s, -1) {
		v, ok := new(big.Rat).SetString(m[1])
		require.True(t, ok, m[1])
		sum.Add(sum, v.Mul(v, new(big.Rat).SetInt64(nanoseconds[m[2]])))
	}
	return sum.Cmp(new(big.Rat).SetInt64(math.MaxInt64)) > 0
}

var durationTermParts = regexp.MustCompile(`([0-9.]+)(ns|us|\x{b5}s|\x{3bc}s|ms|s|m|h)`)
