package main

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

const (
	assertPkg  = "github.com/stretchr/testify/assert"
	requirePkg = "github.com/stretchr/testify/require"
	k8sTesting = "k8s.io/client-go/testing"
)

// Analyzer reports the two test defects of issue 21 (see the package
// comment).
var Analyzer = &analysis.Analyzer{
	Name:      "testlint",
	Doc:       "reports a test that stops off the test goroutine, and an assertion that cannot fail",
	Run:       run,
	FactTypes: []analysis.Fact{new(stopsFact)},
}

// stopsFact marks a function that may stop the test whose *testing.T (or
// B, F, TB) it is given: it calls require, t.Fatal, t.FailNow, t.Skip or
// t.TempDir on it, or passes it to a function that does.
type stopsFact struct{}

func (*stopsFact) AFact()         {}
func (*stopsFact) String() string { return "stops" }

func run(pass *analysis.Pass) (any, error) {
	stopping := markStopping(pass)
	for _, f := range pass.Files {
		vars := funcVars(pass, f)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				offGoroutine(pass, stopping, vars, n.Call.Fun, "a goroutine (go statement)")
				if stopsOn(pass, stopping, n.Call) {
					pass.Reportf(n.Pos(), "%s runs in a goroutine and may stop the test there; return its error and assert on the test goroutine", calleeName(pass, n.Call))
				}
			case *ast.CallExpr:
				checkCall(pass, stopping, vars, n)
			}
			return true
		})
	}
	return nil, nil
}

// markStopping returns the package's functions that may stop the test
// whose T they are given, and exports the fact for the packages that call
// them. It iterates to a fixpoint: a helper calling a helper.
func markStopping(pass *analysis.Pass) map[*types.Func]bool {
	stopping := map[*types.Func]bool{}
	var decls []*ast.FuncDecl
	for _, f := range pass.Files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				decls = append(decls, fd)
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, fd := range decls {
			fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func)
			if !ok || stopping[fn] || !takesT(fn) || isTestFunc(fd) {
				continue
			}
			found := false
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok && !found {
					found = stopsNow(pass, c) || stopsOn(pass, stopping, c)
				}
				return !found
			})
			if found {
				stopping[fn] = true
				changed = true
			}
		}
	}
	for fn := range stopping {
		pass.ExportObjectFact(fn, new(stopsFact))
	}
	return stopping
}

// isTestFunc reports whether fd is a test, benchmark or fuzz target, which
// no test calls.
func isTestFunc(fd *ast.FuncDecl) bool {
	return fd.Recv == nil && fd.Type.Params != nil && len(fd.Type.Params.List) == 1 &&
		(strings.HasPrefix(fd.Name.Name, "Test") || strings.HasPrefix(fd.Name.Name, "Benchmark") || strings.HasPrefix(fd.Name.Name, "Fuzz"))
}

// takesT reports whether fn has a parameter of a testing type.
func takesT(fn *types.Func) bool {
	sig, ok := fn.Type().(*types.Signature)
	if !ok {
		return false
	}
	for v := range sig.Params().Variables() {
		if isTestingT(v.Type()) {
			return true
		}
	}
	return false
}

// isTestingT reports whether t is *testing.T, *testing.B, *testing.F or
// testing.TB.
func isTestingT(t types.Type) bool {
	for _, n := range []string{"T", "B", "F", "TB"} {
		if named(deref(t), "testing", n) {
			return true
		}
	}
	return false
}

func isCollectT(t types.Type) bool { return named(deref(t), assertPkg, "CollectT") }

func deref(t types.Type) types.Type {
	if p, ok := t.(*types.Pointer); ok {
		return p.Elem()
	}
	return t
}

// stopsNow reports whether c stops the test when it fails: a require
// function given anything but an EventuallyWithT's CollectT, a method of
// require.Assertions, or T's Fatal, Fatalf, FailNow, Skip, Skipf, SkipNow
// or TempDir (which calls Fatalf when it cannot make the directory).
func stopsNow(pass *analysis.Pass, c *ast.CallExpr) bool {
	fn, ok := typeutil.Callee(pass.TypesInfo, c).(*types.Func)
	if !ok || fn.Pkg() == nil {
		return false
	}
	sig, _ := fn.Type().(*types.Signature)
	switch fn.Pkg().Path() {
	case requirePkg:
		if sig == nil {
			return false
		}
		if sig.Recv() != nil {
			return true // (*require.Assertions).X
		}
		// require.X(t, ...), but not require.New(t), which only keeps t,
		// nor one given an EventuallyWithT's CollectT.
		return fn.Name() != "New" && sig.Params().Len() > 0 && named(sig.Params().At(0).Type(), requirePkg, "TestingT") &&
			len(c.Args) > 0 && !isCollectT(pass.TypesInfo.TypeOf(c.Args[0]))
	case "testing":
		if sig == nil || sig.Recv() == nil {
			return false
		}
		switch fn.Name() {
		case "Fatal", "Fatalf", "FailNow", "Skip", "Skipf", "SkipNow", "TempDir":
			return true
		}
	}
	return false
}

// stopsOn reports whether c calls a function that may stop the test and
// gives it a T.
func stopsOn(pass *analysis.Pass, stopping map[*types.Func]bool, c *ast.CallExpr) bool {
	fn, ok := typeutil.Callee(pass.TypesInfo, c).(*types.Func)
	if !ok {
		return false
	}
	if !stopping[fn] && !pass.ImportObjectFact(fn, new(stopsFact)) {
		return false
	}
	for _, a := range c.Args {
		if isTestingT(pass.TypesInfo.TypeOf(a)) {
			return true
		}
	}
	return false
}

func calleeName(pass *analysis.Pass, c *ast.CallExpr) string {
	if fn, ok := typeutil.Callee(pass.TypesInfo, c).(*types.Func); ok {
		return fn.Name()
	}
	return "the call"
}

// funcVars maps the variables of f that are given a function literal once
// (`count := func(...) {...}`) to it, so a reactor passed by name is
// checked as one written in place.
func funcVars(pass *analysis.Pass, f *ast.File) map[types.Object]*ast.FuncLit {
	out := map[types.Object]*ast.FuncLit{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok != token.DEFINE || len(n.Lhs) != len(n.Rhs) {
				return true
			}
			for i, l := range n.Lhs {
				id, ok := l.(*ast.Ident)
				lit, isLit := n.Rhs[i].(*ast.FuncLit)
				if ok && isLit {
					if o := pass.TypesInfo.Defs[id]; o != nil {
						out[o] = lit
					}
				}
			}
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if i < len(n.Values) {
					if lit, ok := n.Values[i].(*ast.FuncLit); ok {
						if o := pass.TypesInfo.Defs[id]; o != nil {
							out[o] = lit
						}
					}
				}
			}
		}
		return true
	})
	return out
}

// offGoroutine reports every call in the function e (a literal, or a
// variable given one) that may stop the test: e runs off the test
// goroutine, where, as where says.
func offGoroutine(pass *analysis.Pass, stopping map[*types.Func]bool, vars map[types.Object]*ast.FuncLit, e ast.Expr, where string) {
	var lit *ast.FuncLit
	switch e := ast.Unparen(e).(type) {
	case *ast.FuncLit:
		lit = e
	case *ast.Ident:
		lit = vars[pass.TypesInfo.Uses[e]]
	}
	if lit == nil {
		return
	}
	ast.Inspect(lit.Body, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		switch {
		case stopsNow(pass, c):
			pass.Reportf(c.Pos(), "%s stops the test, but runs in %s, off the test goroutine: record the failure (assert, or an error kept for the test goroutine) instead", render(pass, c), where)
		case stopsOn(pass, stopping, c):
			pass.Reportf(c.Pos(), "%s may stop the test (it calls require or t.Fatal on the T it is given), but runs in %s, off the test goroutine: return its error instead", calleeName(pass, c), where)
		}
		return true
	})
}

func render(pass *analysis.Pass, c *ast.CallExpr) string {
	if fn, ok := typeutil.Callee(pass.TypesInfo, c).(*types.Func); ok {
		if fn.Pkg() != nil && fn.Pkg().Path() == requirePkg {
			return "require." + fn.Name()
		}
		return "T." + fn.Name()
	}
	return "the call"
}

// checkCall looks at one call: whether it hands a function to something
// that runs it off the test goroutine, and whether it is a testify
// assertion that cannot fail.
func checkCall(pass *analysis.Pass, stopping map[*types.Func]bool, vars map[types.Object]*ast.FuncLit, c *ast.CallExpr) {
	// A conversion to http.HandlerFunc: the handler runs on the server's goroutine.
	if tv, ok := pass.TypesInfo.Types[c.Fun]; ok && tv.IsType() {
		if named(tv.Type, "net/http", "HandlerFunc") && len(c.Args) == 1 {
			offGoroutine(pass, stopping, vars, c.Args[0], "an HTTP handler")
		}
		return
	}
	fn, ok := typeutil.Callee(pass.TypesInfo, c).(*types.Func)
	if !ok || fn.Pkg() == nil {
		return
	}
	sig, _ := fn.Type().(*types.Signature)
	method := sig != nil && sig.Recv() != nil
	path, name := fn.Pkg().Path(), fn.Name()
	switch {
	case path == "sync" && name == "Go" && method:
		for _, a := range c.Args {
			offGoroutine(pass, stopping, vars, a, "a goroutine (WaitGroup.Go)")
		}
	case path == k8sTesting && strings.HasSuffix(name, "Reactor") && method:
		for _, a := range c.Args {
			offGoroutine(pass, stopping, vars, a, "a fake clientset's reactor (the goroutine of the call under test)")
		}
	case path == "net/http" && name == "HandleFunc":
		for _, a := range c.Args {
			offGoroutine(pass, stopping, vars, a, "an HTTP handler")
		}
	case path == assertPkg || path == requirePkg:
		args := c.Args
		if !method {
			if len(args) == 0 {
				return
			}
			args = args[1:] // the T
		}
		switch strings.TrimSuffix(name, "f") {
		case "Eventually", "Never":
			if len(args) > 0 {
				offGoroutine(pass, stopping, vars, args[0], "the condition of "+name+" (a goroutine of its own)")
			}
		}
		cannotFail(pass, c, strings.TrimSuffix(name, "f"), args)
	}
}

// cannotFail reports a testify assertion whose outcome the types decide:
// testify compares with reflect.DeepEqual, so values of two different
// types are never equal, and a NotContains, NotSubset or NotEqual of them
// always passes.
func cannotFail(pass *analysis.Pass, c *ast.CallExpr, name string, args []ast.Expr) {
	typ := func(i int) types.Type {
		if i >= len(args) {
			return nil
		}
		return pass.TypesInfo.TypeOf(args[i])
	}
	verdict := "always fails"
	if strings.HasPrefix(name, "Not") {
		verdict = "always passes"
	}
	switch name {
	case "Contains", "NotContains":
		if why := containerMismatch(typ(0), typ(1)); why != "" {
			pass.Reportf(c.Pos(), "%s %s: %s", name, verdict, why)
		}
	case "Subset", "NotSubset":
		if why := elemMismatch(typ(0), typ(1)); why != "" {
			pass.Reportf(c.Pos(), "%s %s: %s", name, verdict, why)
		}
	case "NotEqual":
		a, b := typ(0), typ(1)
		if concrete(a) && concrete(b) && !types.Identical(a, b) {
			pass.Reportf(c.Pos(), "NotEqual always passes: a %s is never equal to a %s", a, b)
		}
	case "NotNil":
		if t := typ(0); concrete(t) && !nillable(t) {
			pass.Reportf(c.Pos(), "NotNil always passes: a %s is never nil", t)
		}
	case "True", "False":
		if len(args) > 0 {
			if tv := pass.TypesInfo.Types[args[0]]; tv.Value != nil && tv.Value.Kind() == constant.Bool {
				pass.Reportf(c.Pos(), "%s of a constant: its outcome is fixed", name)
			}
		}
	}
}

// containerMismatch says why element can never be found in container, or
// "" when it can (or the types do not tell).
func containerMismatch(container, element types.Type) string {
	if !concrete(container) || element == nil || isInterface(element) || isUntypedNil(element) {
		return ""
	}
	switch u := container.Underlying().(type) {
	case *types.Basic:
		if u.Info()&types.IsString != 0 {
			if b, ok := element.Underlying().(*types.Basic); !ok || b.Info()&types.IsString == 0 {
				return fmt.Sprintf("it looks for a %s in a string", element)
			}
		}
	case *types.Map:
		if concrete(u.Key()) && !types.Identical(u.Key(), element) {
			return fmt.Sprintf("it looks for a %s among the keys of a %s", element, container)
		}
	case *types.Slice, *types.Array:
		el := u.(interface{ Elem() types.Type }).Elem()
		if concrete(el) && !types.Identical(el, element) {
			return fmt.Sprintf("it looks for a %s among the elements of a %s", element, container)
		}
	}
	return ""
}

// elemMismatch says why no element of subset can be in list.
func elemMismatch(list, subset types.Type) string {
	if !concrete(list) || !concrete(subset) {
		return ""
	}
	el, ok := elemOf(list)
	sub, ok2 := elemOf(subset)
	if ok && ok2 && concrete(el) && concrete(sub) && !types.Identical(el, sub) {
		return fmt.Sprintf("the elements of a %s are never among those of a %s", subset, list)
	}
	return ""
}

func elemOf(t types.Type) (types.Type, bool) {
	switch u := t.Underlying().(type) {
	case *types.Slice:
		return u.Elem(), true
	case *types.Array:
		return u.Elem(), true
	}
	return nil, false
}

// concrete reports whether t is known and is neither an interface, a type
// parameter nor untyped nil: a value of it has exactly this dynamic type.
func concrete(t types.Type) bool {
	if t == nil || isInterface(t) || isUntypedNil(t) {
		return false
	}
	_, tp := t.(*types.TypeParam)
	return !tp
}

func isInterface(t types.Type) bool { return types.IsInterface(t) }

func isUntypedNil(t types.Type) bool {
	b, ok := t.(*types.Basic)
	return ok && b.Kind() == types.UntypedNil
}

func nillable(t types.Type) bool {
	switch t.Underlying().(type) {
	case *types.Pointer, *types.Slice, *types.Map, *types.Chan, *types.Signature, *types.Interface:
		return true
	}
	return false
}

func named(t types.Type, pkg, name string) bool {
	n, ok := t.(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == pkg && n.Obj().Name() == name
}
