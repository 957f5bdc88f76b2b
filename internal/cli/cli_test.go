package cli

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// testReport is a report as the commands print them: JSON fields, and the
// objects it is about.
type testReport struct {
	Targets []testRow `json:"targets"`
	Note    string    `json:"note,omitempty"`
	names   []string
}

type testRow struct {
	Webhook string `json:"webhook"`
	State   string `json:"state"`
}

func (r testReport) ObjectNames() []string { return r.names }

var report = testReport{
	Targets: []testRow{{Webhook: "a.example.com", State: "Open"}, {Webhook: "b.example.com", State: "Closed"}},
	names:   []string{"mutatingwebhookconfiguration.admissionregistration.k8s.io/a", "configmap/b"},
}

func TestPrintObject(t *testing.T) {
	for name, tc := range map[string]struct {
		format string
		v      any
		want   string
	}{
		"json is indented": {"json", testReport{Targets: []testRow{{Webhook: "a", State: "Open"}}}, `{
  "targets": [
    {
      "webhook": "a",
      "state": "Open"
    }
  ]
}
`},
		"yaml":                                {"yaml", testReport{Targets: []testRow{{Webhook: "a", State: "Open"}}}, "targets:\n- state: Open\n  webhook: a\n"},
		"name prints one object a line":       {"name", report, "mutatingwebhookconfiguration.admissionregistration.k8s.io/a\nconfigmap/b\n"},
		"name prints nothing without objects": {"name", testReport{}, ""},
		"jsonpath runs on the JSON names":     {"jsonpath={.targets[*].webhook}", report, "a.example.com b.example.com"},
		"jsonpath with range and literals": {`jsonpath={range .targets[*]}{.webhook}{"\t"}{.state}{"\n"}{end}`, report,
			"a.example.com\tOpen\nb.example.com\tClosed\n"},
		"jsonpath with a filter":                    {`jsonpath={.targets[?(@.state=="Open")].webhook}`, report, "a.example.com"},
		"jsonpath allows a missing key, as kubectl": {"jsonpath={.note}", report, ""},
		"jsonpath of the whole report":              {"jsonpath={@}", testReport{Targets: []testRow{}}, `{"targets":[]}`},
		"a single path without braces is relaxed":   {"jsonpath=.targets[0].state", report, "Open"},
		"without braces and without the dot":        {"jsonpath=targets[1].state", report, "Closed"},
		"in braces without the dot":                 {"jsonpath={targets[1].webhook}", report, "b.example.com"},
		"jsonpath-as-json prints a JSON list":       {"jsonpath-as-json={.targets[*].state}", report, "[\n    \"Open\",\n    \"Closed\"\n]\n"},
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, ValidateOutput(tc.format))
			var out bytes.Buffer
			require.NoError(t, PrintObject(&out, tc.format, tc.v))
			assert.Equal(t, tc.want, out.String())
		})
	}
}

func TestPrintObject_failures(t *testing.T) {
	t.Run("name of a report that names no objects", func(t *testing.T) {
		var out bytes.Buffer
		err := PrintObject(&out, "name", struct{}{})
		require.ErrorContains(t, err, "names no objects")
	})
	t.Run("a template that fails prints nothing", func(t *testing.T) {
		var out bytes.Buffer
		err := PrintObject(&out, "jsonpath={.targets[*].webhook}{.targets[5]}", report)
		require.ErrorContains(t, err, "executing the template")
		assert.Empty(t, out.String())
		assert.False(t, errors.As(err, new(UsageError)), "a template that parses is no usage error")
	})
}

func TestValidateOutput_refusesWithAUsageError(t *testing.T) {
	for name, tc := range map[string]struct {
		format string
		want   string
	}{
		"an unknown format":            {"wide", `-o "wide": must be table, json or yaml, or kubectl's name, jsonpath=TEMPLATE or jsonpath-as-json=TEMPLATE`},
		"a format kubectl has, not us": {"go-template={{.kind}}", "must be table, json or yaml"},
		"jsonpath-file":                {"jsonpath-file=/tmp/t", "must be table, json or yaml"},
		"a template after json":        {"json=x", "must be table, json or yaml"},
		"jsonpath without template":    {"jsonpath", `-o "jsonpath": no template`},
		"jsonpath with an empty one":   {"jsonpath=", "no template: give one after the ="},
		"an unterminated array":        {"jsonpath={.targets[}", "does not parse: unterminated array"},
		"an unclosed action":           {"jsonpath={.targets", "does not parse: unclosed action"},
		"jsonpath-as-json, too":        {"jsonpath-as-json={.targets[", "does not parse"},
	} {
		t.Run(name, func(t *testing.T) {
			err := ValidateOutput(tc.format)
			require.Error(t, err)
			assert.ErrorContains(t, err, tc.want)
			assert.True(t, errors.As(err, new(UsageError)), "exit 2")
		})
	}
	for _, ok := range []string{"table", "json", "yaml", "name", "jsonpath={.a}", "jsonpath-as-json={.a}", "jsonpath=a.b"} {
		assert.NoError(t, ValidateOutput(ok), ok)
	}
}

func TestRelaxedJSONPath(t *testing.T) {
	// kubectl's own cases (k8s.io/kubectl/pkg/cmd/get/customcolumn_test.go),
	// and the templates it must leave alone.
	for in, want := range map[string]string{
		"foo.bar":                       "{.foo.bar}",
		"{foo.bar}":                     "{.foo.bar}",
		".foo.bar":                      "{.foo.bar}",
		"{.foo.bar}":                    "{.foo.bar}",
		"{foo.bar":                      "{foo.bar",
		"foo.bar}":                      "foo.bar}",
		"{foo.bar}}":                    "{foo.bar}}",
		"{@}":                           "{@}",
		"{$.a}":                         "{$.a}",
		`{"\n"}`:                        `{"\n"}`,
		"{.a}{.b}":                      "{.a}{.b}",
		"{range .items[*]}{.name}{end}": "{range .items[*]}{.name}{end}",
		".items[*].metadata.name":       "{.items[*].metadata.name}",
	} {
		assert.Equal(t, want, relaxedJSONPath(in), in)
	}
}

func TestObjectName(t *testing.T) {
	assert.Equal(t, "deployment.apps/web", ObjectName(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web"))
	assert.Equal(t, "configmap/settings", ObjectName(schema.GroupKind{Kind: "ConfigMap"}, "settings"))
	assert.Equal(t, "mutatingwebhookconfiguration.admissionregistration.k8s.io/a",
		ObjectName(schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}, "a"))
}
