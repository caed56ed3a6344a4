package cidrshift_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/cidrshift/cidrshift/"

// floor is where a package directory sits in the import graph of DESIGN.md:
// 1 cidr, 2 the Kubernetes- and host-facing packages, 3 migrate; 0 for
// internal plumbing and -1 for what no rule covers (examples, helpers of
// tests such as nodecidr/nodecidrtest).
func floor(dir string) int {
	top, _, _ := strings.Cut(dir, "/")
	switch {
	case dir == "cidr":
		return 1
	case dir == top && (top == "nodecidr" || top == "nodenet" || top == "calico" || top == "flannel" || top == "servicecidr" || top == "kubeadmcfg"):
		return 2
	case top == "migrate":
		return 3
	case top == "internal" && !strings.HasSuffix(dir, "test"):
		return 0
	}
	return -1
}

// TestImportGraph holds the library to its three floors: cidr imports no
// package of the module; a floor-2 package imports only cidr and internal
// plumbing, never another floor-2 package; internal plumbing imports
// neither floor 2 nor migrate; only migrate composes.
func TestImportGraph(t *testing.T) {
	imports := map[string]map[string]bool{} // dir -> module dirs imported by its non-test files
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "e2e" || path == "testdata" || strings.HasPrefix(d.Name(), ".") && path != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if imports[dir] == nil {
			imports[dir] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if rest, ok := strings.CutPrefix(p, module); ok {
				imports[dir][rest] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"cidr", "nodecidr", "calico", "flannel", "servicecidr", "kubeadmcfg", "migrate"} {
		if _, ok := imports[must]; !ok {
			t.Fatalf("package %s not found: the walk is broken", must)
		}
	}
	for dir, imps := range imports {
		from := floor(dir)
		for imp := range imps {
			to := floor(imp)
			var bad string
			switch {
			case from == 1:
				bad = "cidr imports no package of the module"
			case from == 2 && to == 2 && imp != dir:
				bad = "a floor-2 package never imports another floor-2 package: compose them in migrate"
			case from == 2 && to == 3, from == 0 && (to == 2 || to == 3), from == 1 && to != 1:
				bad = "imports flow downward only"
			case from >= 0 && to == -1 && !strings.HasPrefix(imp, dir+"/"):
				bad = "library code never imports examples or test helpers"
			}
			if bad != "" {
				t.Errorf("%s imports %s: %s", dir, imp, bad)
			}
		}
	}
}
