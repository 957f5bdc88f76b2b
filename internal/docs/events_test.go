package docs_test

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// eventsTable is the page whose Events table must name every reason.
const eventsTable = "docs/operating.md"

// TestEvents_everyReasonTheCodeEmitsIsDocumented finds every Event reason
// the binary can emit, by reading the source of cmd/ and internal/ with
// go/types, and requires each in the Events table of docs/operating.md, and
// each row of that table to be a reason the code emits.
func TestEvents_everyReasonTheCodeEmitsIsDocumented(t *testing.T) {
	emitted := emittedReasons(t)
	if len(emitted) == 0 {
		t.Fatal("found no Event reasons in cmd/ and internal/")
	}
	documented := documentedReasons(t)
	for _, r := range sortedKeys(emitted) {
		if !documented[r] {
			t.Errorf("Event reason %s (emitted at %s) is missing from the Events table in %s", r, strings.Join(emitted[r], ", "), eventsTable)
		}
	}
	for _, r := range sortedKeys(documented) {
		if _, ok := emitted[r]; !ok {
			t.Errorf("%s's Events table lists %s, which no code in cmd/ or internal/ emits", eventsTable, r)
		}
	}
	if !t.Failed() {
		t.Logf("%d Event reasons, all documented: %s", len(emitted), strings.Join(sortedKeys(emitted), " "))
	}
}

// documentedReasons reads the first column of the Markdown table, in
// docs/operating.md, whose header's first cell is "reason".
func documentedReasons(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, eventsTable))
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]bool{}
	inTable, found := false, false
	name := regexp.MustCompile("^`([A-Za-z]+)`$")
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		first := strings.TrimSpace(cells[0])
		switch {
		case !inTable && strings.EqualFold(first, "reason"):
			if found {
				t.Fatalf("%s has two tables whose first column is \"reason\"", eventsTable)
			}
			inTable, found = true, true
		case inTable && strings.Trim(first, "-: ") == "":
			// the delimiter row
		case inTable:
			m := name.FindStringSubmatch(first)
			if m == nil {
				t.Errorf("%s: an Events table row's first cell is %q, not a `Reason`", eventsTable, first)
				continue
			}
			reasons[m[1]] = true
		}
	}
	if !found {
		t.Fatalf("%s has no table whose first column is \"reason\"", eventsTable)
	}
	return reasons
}

// emittedReasons returns every reason passed to an Event recorder in the
// non-test code of cmd/ and internal/, with where it is emitted. The reason
// is the argument after the event type (the parameter named eventtype) of
// a method Event, Eventf or AnnotatedEventf. Its values are found by
// following the expression: a constant; a conversion of a value of a named
// string type (every constant of that type); a local variable (every value
// assigned to it); a parameter (the argument at every call of the
// function). Anything else fails the test, so that a new way of emitting
// cannot go unchecked.
func emittedReasons(t *testing.T) map[string][]string {
	t.Helper()
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Dir:  repoRoot,
		// The same build configuration as make unit, so the export data
		// of the dependencies comes from the build cache.
		BuildFlags: []string{"-trimpath"},
		Env:        append(os.Environ(), "CGO_ENABLED=0"),
	}
	pkgs, err := packages.Load(cfg, "./cmd/...", "./internal/...")
	if err != nil {
		t.Fatal(err)
	}
	if n := packages.PrintErrors(pkgs); n > 0 {
		t.Fatalf("%d errors loading the packages", n)
	}
	f := &reasonFinder{t: t, byObj: map[types.Object]*objUses{}}
	for _, p := range pkgs {
		f.index(p)
	}
	reasons := map[string][]string{}
	for _, p := range pkgs {
		for _, file := range p.Syntax {
			ast.Inspect(file, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				i := reasonArg(p.TypesInfo, call)
				if i < 0 {
					return true
				}
				pos := p.Fset.Position(call.Pos())
				where := fmt.Sprintf("%s:%d", relPath(pos.Filename), pos.Line)
				for _, v := range f.values(p, call.Args[i], map[ast.Expr]bool{}) {
					reasons[v] = append(reasons[v], where)
				}
				return true
			})
		}
	}
	return reasons
}

// reasonArg returns the index of call's reason argument when call is a
// method Event, Eventf or AnnotatedEventf with a parameter named eventtype,
// and -1 otherwise.
func reasonArg(info *types.Info, call *ast.CallExpr) int {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return -1
	}
	switch sel.Sel.Name {
	case "Event", "Eventf", "AnnotatedEventf":
	default:
		return -1
	}
	selection := info.Selections[sel]
	if selection == nil || selection.Kind() != types.MethodVal {
		return -1
	}
	sig := selection.Type().(*types.Signature)
	for i := 0; i+1 < sig.Params().Len(); i++ {
		if strings.EqualFold(sig.Params().At(i).Name(), "eventtype") && i+1 < len(call.Args) {
			return i + 1
		}
	}
	return -1
}

// objUses are the expressions that give a variable its values: what is
// assigned to a local variable, or the arguments of a parameter.
type objUses struct {
	exprs []ast.Expr
}

type reasonFinder struct {
	t *testing.T
	// byObj maps local variables and parameters to the expressions
	// assigned or passed to them.
	byObj map[types.Object]*objUses
	// consts lists package-level constants of each named type.
	consts map[*types.TypeName][]*types.Const
}

func (f *reasonFinder) add(obj types.Object, p *packages.Package, e ast.Expr) {
	if obj == nil {
		return
	}
	u := f.byObj[obj]
	if u == nil {
		u = &objUses{}
		f.byObj[obj] = u
	}
	// Remember the package of the expression, not of the object.
	u.exprs = append(u.exprs, &pkgExpr{Expr: e, pkg: p})
}

// pkgExpr is an expression with the package whose TypesInfo describes it.
type pkgExpr struct {
	ast.Expr
	pkg *packages.Package
}

// index records the assignments to every variable and the arguments of
// every call to a function of the module, and the constants of named types.
func (f *reasonFinder) index(p *packages.Package) {
	if f.consts == nil {
		f.consts = map[*types.TypeName][]*types.Const{}
	}
	scope := p.Types.Scope()
	for _, name := range scope.Names() {
		if c, ok := scope.Lookup(name).(*types.Const); ok {
			if named, ok := c.Type().(*types.Named); ok {
				f.consts[named.Obj()] = append(f.consts[named.Obj()], c)
			}
		}
	}
	info := p.TypesInfo
	for _, file := range p.Syntax {
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				if len(n.Lhs) == len(n.Rhs) {
					for i, lhs := range n.Lhs {
						if id, ok := lhs.(*ast.Ident); ok {
							f.add(objectOf(info, id), p, n.Rhs[i])
						}
					}
				}
			case *ast.ValueSpec:
				if len(n.Names) == len(n.Values) {
					for i, id := range n.Names {
						f.add(info.Defs[id], p, n.Values[i])
					}
				}
			case *ast.CallExpr:
				fn := calledFunc(info, n)
				if fn == nil {
					return true
				}
				sig := fn.Type().(*types.Signature)
				for i, arg := range n.Args {
					if i < sig.Params().Len() {
						f.add(sig.Params().At(i), p, arg)
					}
				}
			}
			return true
		})
	}
}

func objectOf(info *types.Info, id *ast.Ident) types.Object {
	if obj := info.Defs[id]; obj != nil {
		return obj
	}
	return info.Uses[id]
}

// calledFunc is the function or method call calls, or nil.
func calledFunc(info *types.Info, call *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch fun := call.Fun.(type) {
	case *ast.Ident:
		id = fun
	case *ast.SelectorExpr:
		id = fun.Sel
	default:
		return nil
	}
	fn, _ := info.Uses[id].(*types.Func)
	if fn == nil {
		return nil
	}
	// A generic method's parameters are the origin's.
	return fn.Origin()
}

// values returns the string values e can have.
func (f *reasonFinder) values(p *packages.Package, e ast.Expr, seen map[ast.Expr]bool) []string {
	if pe, ok := e.(*pkgExpr); ok {
		p, e = pe.pkg, pe.Expr
	}
	if seen[e] {
		return nil
	}
	seen[e] = true
	info := p.TypesInfo
	if tv, ok := info.Types[e]; ok && tv.Value != nil && tv.Value.Kind() == constant.String {
		return []string{constant.StringVal(tv.Value)}
	}
	fail := func() []string {
		pos := p.Fset.Position(e.Pos())
		f.t.Errorf("%s:%d: cannot tell which Event reasons %s can be; emit a constant, or teach this test the new form",
			relPath(pos.Filename), pos.Line, types.ExprString(e))
		return nil
	}
	switch e := e.(type) {
	case *ast.ParenExpr:
		return f.values(p, e.X, seen)
	case *ast.CallExpr:
		// A conversion string(x) of a value of a named string type: every
		// constant of that type.
		if tv, ok := info.Types[e.Fun]; ok && tv.IsType() && len(e.Args) == 1 {
			if named, ok := info.TypeOf(e.Args[0]).(*types.Named); ok {
				if consts := f.consts[named.Obj()]; len(consts) > 0 {
					var vs []string
					for _, c := range consts {
						if c.Val().Kind() == constant.String {
							vs = append(vs, constant.StringVal(c.Val()))
						}
					}
					return vs
				}
			}
			return f.values(p, e.Args[0], seen)
		}
		return fail()
	case *ast.Ident:
		obj, ok := info.Uses[e].(*types.Var)
		if !ok || obj.Parent() == nil || obj.Parent() == obj.Pkg().Scope() {
			return fail() // a field or a package-level variable
		}
		uses := f.byObj[obj]
		if uses == nil {
			return fail()
		}
		var vs []string
		for _, x := range uses.exprs {
			vs = append(vs, f.values(p, x, seen)...)
		}
		return vs
	}
	return fail()
}

func relPath(p string) string {
	abs, err := filepath.Abs(repoRoot)
	if err != nil {
		return p
	}
	if rel, err := filepath.Rel(abs, p); err == nil {
		return filepath.ToSlash(rel)
	}
	return p
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
