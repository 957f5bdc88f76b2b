package decide_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports_arePure reads the package's source and fails if it imports
// anything that talks to the API server, waits, or exports metrics, or if
// it reads the clock: the decisions must stay pure (see the package doc).
func TestImports_arePure(t *testing.T) {
	forbidden := []string{
		"context",
		"net",
		"os",
		"sync",
		"k8s.io/client-go",
		"k8s.io/utils/clock",
		"sigs.k8s.io/controller-runtime",
		"github.com/prometheus",
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	read := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		read++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if path == bad || strings.HasPrefix(path, bad+"/") {
					t.Errorf("%s imports %q: package decide must stay pure", name, path)
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" && (sel.Sel.Name == "Now" || sel.Sel.Name == "Since" || sel.Sel.Name == "Sleep") {
				t.Errorf("%s: time.%s: the time of a decision is an input (Inputs.Now)", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
	if read < 5 {
		t.Fatalf("read %d source files; the test is looking in the wrong place", read)
	}
}
