package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// handedOffQuote begins every quotation of a HandedOff Event's message in
// the docs.
const handedOffQuote = "administrator override: "

// TestQuotes_handedOffMessageIsTheCodes: every HandedOff Event message the
// user docs quote (from "administrator override: " to the end of its
// line, or in a code block from "administrator override" on) matches one of the format strings the breaker's decision package
// gives circuit.EventNote for a HandedOff change, each verb standing for
// any text (%q for a quoted string). So a doc cannot keep quoting a
// message the code no longer writes.
func TestQuotes_handedOffMessageIsTheCodes(t *testing.T) {
	formats := handedOffFormats(t)
	if len(formats) == 0 {
		t.Fatal("found no HandedOff message in internal/breaker/decide; the test no longer reads the code")
	}
	patterns := make([]*regexp.Regexp, len(formats))
	for i, f := range formats {
		patterns[i] = formatPattern(f)
	}
	quotes := 0
	for _, file := range userDocs(t) {
		data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		fenced := map[int]bool{}
		for n := range strings.Split(string(data), "\n") {
			fenced[n+1] = true
		}
		proseLines(data, func(n int, _, _ string) { fenced[n] = false })
		for n, line := range strings.Split(string(data), "\n") {
			i := strings.Index(line, handedOffQuote)
			if fenced[n+1] {
				// In a code block (kubectl's output), any text from
				// "administrator override" on is a quote.
				i = strings.Index(line, strings.TrimSpace(handedOffQuote[:len(handedOffQuote)-2]))
			}
			if i < 0 {
				continue
			}
			quotes++
			quote := strings.TrimRight(line[i:], " \t")
			matched := false
			for _, p := range patterns {
				matched = matched || p.MatchString(quote)
			}
			if !matched {
				t.Errorf("%s:%d quotes a HandedOff message the code does not write:\n  %s\nthe code's formats (internal/breaker/decide):\n  %s",
					file, n+1, quote, strings.Join(formats, "\n  "))
			}
		}
	}
	if quotes == 0 {
		t.Errorf("no user doc quotes a HandedOff message (%q); the docs should show what the override's Event says", handedOffQuote)
	}
}

// handedOffFormats returns the format string of each circuit.EventNote call
// that gives the Message of a Change whose Kind is HandedOff, in the
// non-test files of internal/breaker/decide.
func handedOffFormats(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join(repoRoot, "internal", "breaker", "decide")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var formats []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			var kind string
			var message ast.Expr
			for _, elt := range lit.Elts {
				kv, ok := elt.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				switch key, _ := kv.Key.(*ast.Ident); {
				case key == nil:
				case key.Name == "Kind":
					if id, ok := kv.Value.(*ast.Ident); ok {
						kind = id.Name
					}
				case key.Name == "Message":
					message = kv.Value
				}
			}
			if kind != "HandedOff" || message == nil {
				return true
			}
			call, ok := message.(*ast.CallExpr)
			if sel, isSel := callFun(call); !ok || !isSel || sel != "EventNote" || len(call.Args) == 0 {
				pos := fset.Position(lit.Pos())
				t.Errorf("%s:%d: a HandedOff change whose Message is not circuit.EventNote(format, ...); teach this test the new form", relPath(pos.Filename), pos.Line)
				return true
			}
			format, ok := stringConstant(call.Args[0])
			if !ok {
				pos := fset.Position(call.Pos())
				t.Errorf("%s:%d: the HandedOff format is not a string literal or a sum of them; teach this test the new form", relPath(pos.Filename), pos.Line)
				return true
			}
			formats = append(formats, format)
			return true
		})
	}
	return formats
}

func callFun(call *ast.CallExpr) (name string, ok bool) {
	if call == nil {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	return sel.Sel.Name, true
}

// stringConstant folds a string literal, or a sum of them, into its value.
func stringConstant(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.ParenExpr:
		return stringConstant(e.X)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		x, ok := stringConstant(e.X)
		if !ok {
			return "", false
		}
		y, ok := stringConstant(e.Y)
		return x + y, ok
	}
	return "", false
}

// verb is a fmt verb without flags or width other than those the code uses.
var verb = regexp.MustCompile(`%[-+# 0]*[0-9]*(?:\.[0-9]+)?[a-zA-Z%]`)

// formatPattern turns a fmt format into a pattern that matches what it
// prints: the text as it is, %q a Go-quoted string, %% a percent sign and
// any other verb any text.
func formatPattern(format string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	last := 0
	for _, loc := range verb.FindAllStringIndex(format, -1) {
		b.WriteString(regexp.QuoteMeta(format[last:loc[0]]))
		switch v := format[loc[0]:loc[1]]; v[len(v)-1] {
		case '%':
			b.WriteString("%")
		case 'q':
			b.WriteString(`"(?:[^"\\]|\\.)*"`)
		default:
			b.WriteString(`.+?`)
		}
		last = loc[1]
	}
	b.WriteString(regexp.QuoteMeta(format[last:]))
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

func TestFormatPattern(t *testing.T) {
	p := formatPattern(`released %s (%s); reason: %q, 100%%`)
	for line, want := range map[string]bool{
		`released a.b (original Fail); reason: "INC-1 \"x\"", 100%`: true,
		`released a.b (original Fail); reason: INC-1, 100%`:         false,
		`released a.b; reason: "INC-1", 100%`:                       false,
	} {
		if got := p.MatchString(line); got != want {
			t.Errorf("%s matches %q: %v, want %v", p, line, got, want)
		}
	}
}

// TestConfiguration_probeTimeoutDefaultIsTheCodes: docs/configuration.md
// gives probe.timeout's default as the code applies it (probeTimeout in
// internal/probe): probe.DefaultSlowCall, or the webhook's timeoutSeconds
// when that is shorter; in the reference table and in the annotated
// example.
func TestConfiguration_probeTimeoutDefaultIsTheCodes(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	def := probe.DefaultSlowCall.String()
	var row, example string
	for _, line := range strings.Split(string(data), "\n") {
		switch trimmed := strings.TrimSpace(line); {
		case strings.HasPrefix(trimmed, "| `targets[].probe.timeout` |"):
			row = trimmed
		case strings.HasPrefix(trimmed, "timeout:") && strings.Contains(trimmed, "# default"):
			example = trimmed
		}
	}
	if want := "| `targets[].probe.timeout` | `" + def + "`, or the webhook's `timeoutSeconds` when shorter |"; !strings.HasPrefix(row, want) {
		t.Errorf("docs/configuration.md's row for probe.timeout is\n  %s\nwant it to begin\n  %s", row, want)
	}
	if want := "# default " + def + "; capped by the webhook's own timeoutSeconds"; !strings.Contains(example, want) {
		t.Errorf("docs/configuration.md's example says of probe.timeout\n  %s\nwant\n  %s", example, want)
	}
}
