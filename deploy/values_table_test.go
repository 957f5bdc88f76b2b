package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// The table of chart values in docs/operating.md is generated from
// values.yaml, as helm-docs does: one row per value, its default and the
// first sentence of the comment above it. This test fails when they
// drift; UPDATE_DOCS=1 go test ./deploy -run TestChartValues rewrites it.

const (
	valuesFile   = "helm/webhook-guard/values.yaml"
	operatingDoc = "../docs/operating.md"
	tableBegin   = "<!-- chart-values:begin (generated from values.yaml: UPDATE_DOCS=1 go test ./deploy -run TestChartValues) -->"
	tableEnd     = "<!-- chart-values:end -->"
)

var valueKey = regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9]*):`)

// valueRow is one value of the chart.
type valueRow struct {
	path, comment string
}

// valueRows lists values.yaml's keys in order, with the comment block
// directly above each (or above the keys right above it); list items and
// what they hold are their key's.
func valueRows(text string) []valueRow {
	var rows []valueRow
	var stack []string // keys by indentation level (2 spaces)
	var comment []string
	// group is the comment of the keys since the last blank line: a key
	// right below another without a comment of its own shares its
	// comment.
	group := ""
	list := -1 // the indentation of the list whose items we are in; -1: none
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if list >= 0 && trimmed != "" && !strings.HasPrefix(trimmed, "#") && indent > list {
			continue
		}
		switch {
		case strings.HasPrefix(trimmed, "- "):
			list = indent
			comment = nil
			continue
		case strings.HasPrefix(trimmed, "#"):
			comment = append(comment, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			continue
		case trimmed == "":
			comment, group = nil, ""
			continue
		}
		m := valueKey.FindStringSubmatch(line)
		if m == nil {
			comment = nil
			continue
		}
		list = -1
		depth := len(m[1]) / 2
		if depth > len(stack) {
			comment = nil
			continue // inside a list item
		}
		stack = append(stack[:depth], m[2])
		if len(comment) > 0 {
			group = strings.Join(comment, " ")
		}
		rows = append(rows, valueRow{path: strings.Join(stack, "."), comment: group})
		comment = nil
	}
	return rows
}

// firstSentence is s up to its first full stop followed by a space.
func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}

func valueAt(values map[string]any, path string) (any, bool) {
	var v any = values
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

func valuesTable(t *testing.T) string {
	data, err := os.ReadFile(valuesFile)
	require.NoError(t, err)
	values := map[string]any{}
	require.NoError(t, yaml.Unmarshal(data, &values))
	rows := valueRows(string(data))
	var b strings.Builder
	b.WriteString("| Value | Default | What it is |\n|---|---|---|\n")
	for i, r := range rows {
		if i+1 < len(rows) && strings.HasPrefix(rows[i+1].path, r.path+".") {
			continue // a map: its values have rows of their own
		}
		v, ok := valueAt(values, r.path)
		require.True(t, ok, "%s: not found in the parsed values", r.path)
		def, err := json.Marshal(v)
		require.NoError(t, err)
		text := string(def)
		if len(text) > 60 {
			text = text[:57] + "..."
		}
		comment := r.comment
		for p := r.path; comment == "" && strings.Contains(p, "."); {
			p = p[:strings.LastIndex(p, ".")]
			for _, o := range rows {
				if o.path == p {
					comment = o.comment
				}
			}
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", r.path, strings.ReplaceAll(text, "|", `\|`), strings.ReplaceAll(firstSentence(comment), "|", `\|`))
	}
	return b.String()
}

func TestChartValues_tableInOperatingIsValuesYAML(t *testing.T) {
	doc, err := os.ReadFile(operatingDoc)
	require.NoError(t, err)
	begin := strings.Index(string(doc), tableBegin)
	end := strings.Index(string(doc), tableEnd)
	require.True(t, begin >= 0 && end > begin, "docs/operating.md has no table between %q and %q", tableBegin, tableEnd)
	want := tableBegin + "\n" + valuesTable(t) + tableEnd
	got := string(doc)[begin : end+len(tableEnd)]
	if os.Getenv("UPDATE_DOCS") == "1" {
		require.NoError(t, os.WriteFile(operatingDoc, []byte(strings.Replace(string(doc), got, want, 1)), 0o644))
		return
	}
	require.Equal(t, want, got, "the chart values table is out of date: UPDATE_DOCS=1 go test ./deploy -run TestChartValues (in %s)", filepath.Clean(operatingDoc))
}
