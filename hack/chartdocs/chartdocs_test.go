package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chart is the chart's folder from this package's.
var chart = filepath.Join("..", "..", "deploy", "helm", "webhook-guard")

func TestREADME_valuesTableIsValuesYAML(t *testing.T) {
	want, err := Generate(chart)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(chart, "README.md"))
	require.NoError(t, err)
	if want == string(got) {
		return
	}
	w, g := strings.Split(want, "\n"), strings.Split(string(got), "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			t.Fatalf("deploy/helm/webhook-guard/README.md is out of date (run make docs); line %d is\n\t%s\nand values.yaml makes it\n\t%s", i+1, gl, wl)
		}
	}
}

func TestRows(t *testing.T) {
	schema := `{"properties": {
  "num": {"oneOf": [{"type": "null"}, {"type": "integer"}]},
  "t": {"$ref": "#/definitions/t"},
  "m": {"properties": {"a": {"type": ["string", "integer"]}}}
}, "definitions": {"t": {"type": "array"}}}`
	values := `# Header of the file, not of a key.

# num is a number.
num: null

# t and u share one comment.
t: []
u: "x"
# m has keys of its own.
m:
  # a is first.
  a: 1
  b: 2
  # c is last.
  c:
  - x: 1
    z: 2

# k is a Kubernetes object passed through: one row.
k:
  cpu: 1m
  limits:
    memory: 1Mi
`
	rows, err := Rows([]byte(values), []byte(schema))
	require.NoError(t, err)
	assert.Equal(t, []Row{
		{Path: "num", Type: "int or null", Default: "null", Description: "num is a number.", commented: true},
		{Path: "t", Type: "list", Default: "[]", Description: "t and u share one comment.", commented: true},
		{Path: "u", Type: "string", Default: `"x"`, Description: "t and u share one comment."},
		{Path: "m", Type: "object", Description: "m has keys of its own.", commented: true},
		{Path: "m.a", Type: "string or int", Default: "1", Description: "a is first.", commented: true},
		{Path: "m.b", Type: "int", Default: "2", Description: "a is first."},
		{Path: "m.c", Type: "list", Default: `[{"x":1,"z":2}]`, Description: "c is last.", commented: true},
		{Path: "k", Type: "object", Default: `{"cpu":"1m","limits":{"memory":"1Mi"}}`, Description: "k is a Kubernetes object passed through: one row.", commented: true},
	}, rows)

	table := Table(rows)
	assert.Contains(t, table, "| `m.c` | list | `[{\"x\":1,\"z\":2}]` | c is last. |")
	assert.True(t, strings.HasPrefix(table, Begin) && strings.HasSuffix(table, End))
}

func TestRows_aValueWithoutACommentIsAnError(t *testing.T) {
	_, err := Rows([]byte("# a has one.\na: 1\n\nb: 2\nm:\n  # c has one.\n  c: 1\n"), []byte(`{}`))
	require.Error(t, err)
	assert.Equal(t, "values.yaml: no comment above b", err.Error())
}

func TestTable_keepsPlaceholdersAndPipes(t *testing.T) {
	table := Table([]Row{{Path: "x", Type: "string", Default: `"a|b"`, Description: "<registry>/<repository> or a|b"}})
	assert.Contains(t, table, "| `x` | string | `\"a\\|b\"` | &lt;registry&gt;/&lt;repository&gt; or a\\|b |")
}

func TestUpdate_replacesOnlyTheTable(t *testing.T) {
	out, err := Update("# Chart\n\nbefore\n"+Begin+"\nold\n"+End+"\nafter\n", Begin+"\nnew\n"+End)
	require.NoError(t, err)
	assert.Equal(t, "# Chart\n\nbefore\n"+Begin+"\nnew\n"+End+"\nafter\n", out)
	_, err = Update("no markers", "")
	require.Error(t, err)
}
