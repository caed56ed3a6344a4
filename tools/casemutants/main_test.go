package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/cover"
)

func TestParseLog(t *testing.T) {
	log := "Starting...\n NOT COVERED CONDITIONALS_NEGATION at apply.go:200:11\n      KILLED ARITHMETIC_BASE at a.go:1:2\n       LIVED CONDITIONALS_BOUNDARY at b.go:3:4\n NOT COVERED ARITHMETIC_BASE at check.go:171:70\nKilled: 1, Lived: 1, Not covered: 2\n"
	got, err := parseLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []mutant{{"NOT COVERED", "CONDITIONALS_NEGATION", "apply.go", 200, 11}, {"LIVED", "CONDITIONALS_BOUNDARY", "b.go", 3, 4}, {"NOT COVERED", "ARITHMETIC_BASE", "check.go", 171, 70}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mutant %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

func TestInNoBlock(t *testing.T) {
	p := &cover.Profile{Blocks: []cover.ProfileBlock{
		{StartLine: 6, StartCol: 26, EndLine: 7, EndCol: 9},
		{StartLine: 8, StartCol: 13, EndLine: 9, EndCol: 20, Count: 2},
	}}
	for _, c := range []struct {
		line, col int
		want      bool
	}{
		{6, 26, false}, {6, 25, true}, {7, 1, false}, {7, 9, false}, {7, 10, true},
		{8, 9, true}, {8, 13, false}, {9, 20, false}, {9, 21, true}, {12, 1, true},
	} {
		if got := inNoBlock(p, c.line, c.col); got != c.want {
			t.Errorf("%d:%d: got %v, want %v", c.line, c.col, got, c.want)
		}
		// Only the second block ran.
		if got, want := ranNow(p, c.line, c.col), !c.want && c.line >= 8; got != want {
			t.Errorf("ranNow %d:%d: got %v, want %v", c.line, c.col, got, want)
		}
	}
}

func TestInCaseExpr(t *testing.T) {
	src := []byte("package p\n\nconst big = 10 * 10\n\nfunc f(n int) int {\n\tswitch {\n\tcase n < 0,\n\t\tn > big:\n\t\treturn n - 1\n\t}\n\tswitch n + 1 {\n\tcase 2 * 3:\n\t}\n\treturn 0\n}\n")
	for _, c := range []struct {
		line, col int
		want      bool
	}{
		{7, 7, true}, {7, 9, true}, {7, 11, true}, {7, 12, false}, {8, 5, true}, {8, 2, false},
		{9, 12, false}, {3, 16, false}, {11, 11, false}, {12, 9, true}, {7, 2, false},
	} {
		got, err := inCaseExpr(src, c.line, c.col)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%d:%d: got %v, want %v", c.line, c.col, got, c.want)
		}
	}
	// A select case's receive and send, not its body or a default.
	sel := []byte("package p\n\nfunc g(c chan int, d int) {\n\tselect {\n\tcase <-after(2 * d):\n\t\td = d - 1\n\tcase c <- d + 1:\n\tdefault:\n\t}\n}\n")
	for _, c := range []struct {
		line, col int
		want      bool
	}{
		{5, 7, true}, {5, 17, true}, {5, 21, false}, {6, 9, false}, {7, 12, true}, {7, 17, false}, {8, 2, false},
	} {
		got, err := inCaseExpr(sel, c.line, c.col)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("select %d:%d: got %v, want %v", c.line, c.col, got, c.want)
		}
	}
	if _, err := inCaseExpr([]byte("package p\nfunc {"), 1, 1); err == nil {
		t.Error("a file that does not parse: no error")
	}
}

func TestApply(t *testing.T) {
	src := []byte("package p\n\nfunc f(n int) bool {\n\treturn n+1 <= -n*2 || n != 3\n}\n")
	for _, c := range []struct {
		m    mutant
		want string
		err  string
	}{
		{m: mutant{"", "CONDITIONALS_BOUNDARY", "p.go", 4, 13}, want: "\treturn n+1 < -n*2 || n != 3"},
		{m: mutant{"", "CONDITIONALS_NEGATION", "p.go", 4, 13}, want: "\treturn n+1 > -n*2 || n != 3"},
		{m: mutant{"", "CONDITIONALS_NEGATION", "p.go", 4, 26}, want: "\treturn n+1 <= -n*2 || n == 3"},
		{m: mutant{"", "ARITHMETIC_BASE", "p.go", 4, 10}, want: "\treturn n-1 <= -n*2 || n != 3"},
		{m: mutant{"", "ARITHMETIC_BASE", "p.go", 4, 18}, want: "\treturn n+1 <= -n/2 || n != 3"},
		{m: mutant{"", "INVERT_NEGATIVES", "p.go", 4, 16}, want: "\treturn n+1 <= +n*2 || n != 3"},
		{m: mutant{"", "CONDITIONALS_BOUNDARY", "p.go", 4, 26}, err: "!= is not a CONDITIONALS_BOUNDARY token"},
		{m: mutant{"", "CONDITIONALS_NEGATION", "p.go", 4, 14}, err: "no token at 4:14"},
		{m: mutant{"", "REMOVE_EVERYTHING", "p.go", 4, 13}, err: "<= is not a REMOVE_EVERYTHING token"},
	} {
		got, err := apply(src, c.m)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: got error %v, want one containing %q", c.m, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", c.m, err)
			continue
		}
		if line := strings.Split(string(got), "\n")[3]; line != c.want {
			t.Errorf("%v: got %q, want %q", c.m, line, c.want)
		}
	}
}

// TestRun runs the mutants of testdata/mod/sw's gremlins log: the case
// conditions are run; the mutant in a function no test calls, the one in a
// constant and the one in sw/inner (not in sw's coverage profile) are left
// alone; the lived ones only with -lived (one of them no longer where the
// log says); the one in Half, which a test runs now, only with -uncovered;
// and the source tree is not written.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test once per mutant")
	}
	module := filepath.Join("testdata", "mod")
	before, err := os.ReadFile(filepath.Join(module, "sw", "sw.go"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []string{
		"      KILLED CONDITIONALS_NEGATION at sw.go:8:9",
		"      KILLED CONDITIONALS_BOUNDARY at sw.go:8:9",
		"      KILLED CONDITIONALS_NEGATION at sw.go:10:9",
		"       LIVED CONDITIONALS_BOUNDARY at sw.go:10:9",
	}
	summary := "casemutants: killed 3, lived 1, timed out 0, not viable 0, moved 0 (4 in case expressions; 2 not covered in blocks no test ran; 2 elsewhere)"
	for _, c := range []struct {
		o    options
		want []string
	}{
		{options{}, append(cases, summary)},
		{options{lived: true}, append(append(cases[:2:2], "      KILLED CONDITIONALS_NEGATION at sw.go:8:9", "       MOVED CONDITIONALS_NEGATION at sw.go:3:1"), append(cases[2:], summary,
			"casemutants -lived: killed 1, lived 0, timed out 0, not viable 0, moved 1 (of 2 gremlins saw live)")...)},
		{options{uncovered: true}, append(append(cases[:4:4], "      KILLED ARITHMETIC_BASE at sw.go:28:11", summary),
			"casemutants -uncovered: killed 1, lived 0, timed out 0, not viable 0, moved 0 (of 2 not covered in blocks; 1 in blocks the tests still do not run)")},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), module, filepath.Join(module, "gremlins.log"), "./sw", 50, c.o, &out); err != nil {
			t.Fatal(err)
		}
		if got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%+v: got\n%s\nwant\n%s", c.o, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
	after, err := os.ReadFile(filepath.Join(module, "sw", "sw.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("sw.go was written")
	}
}
