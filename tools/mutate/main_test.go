package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The test binary plays gremlins and casemutants when MUTATE_FAKE is set:
// mutate runs it as either, and it answers from the package's sources.
func TestMain(m *testing.M) {
	if os.Getenv("MUTATE_FAKE") != "" {
		var err error
		if len(os.Args) > 1 && os.Args[1] == "unleash" {
			err = fakeGremlins(os.Args[2:])
		} else {
			err = fakeCasemutants(os.Args[1:])
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeGremlins makes a mutant of each "==" in the files it mutates, with the
// status a trailing "// LIVED", "// NOT COVERED" or "// TIMED OUT" gives
// (KILLED otherwise). It fails on the file $MUTATE_FAKE_FAIL names, and
// acts interrupted on the one $MUTATE_FAKE_INTERRUPT names. It appends
// the files it mutated to $MUTATE_FAKE_CALLS.
func fakeGremlins(args []string) error {
	var excl []*regexp.Regexp
	var out, pkg string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-E":
			i++
			excl = append(excl, regexp.MustCompile(args[i]))
		case "-o":
			i++
			out = args[i]
		case "--workers", "--timeout-coefficient":
			i++
		default:
			pkg = args[i]
		}
	}
	type mutation struct {
		Type   string `json:"type"`
		Status string `json:"status"`
		Line   int    `json:"line"`
		Column int    `json:"column"`
	}
	type file struct {
		Name      string     `json:"file_name"`
		Mutations []mutation `json:"mutations"`
	}
	var files []file
	var mutated []string
	err := fs.WalkDir(os.DirFS(pkg), ".", func(path string, _ fs.DirEntry, _ error) error {
		if filepath.Ext(path) != ".go" || strings.HasSuffix(path, "_test.go") ||
			slices.ContainsFunc(excl, func(r *regexp.Regexp) bool { return r.MatchString(path) }) {
			return nil
		}
		mutated = append(mutated, path)
		data, err := os.ReadFile(filepath.Join(pkg, path))
		if err != nil {
			return err
		}
		if path == os.Getenv("MUTATE_FAKE_FAIL") {
			return fmt.Errorf("fake gremlins fails on %s", path)
		}
		if path == os.Getenv("MUTATE_FAKE_INTERRUPT") {
			// What gremlins prints when a signal stops it; it still
			// reports what it ran and exits 0.
			fmt.Println("\nShutting down gracefully...")
		}
		f := file{Name: path}
		for i, line := range strings.Split(string(data), "\n") {
			col := strings.Index(line, "==")
			if col < 0 {
				continue
			}
			st := "KILLED"
			for _, s := range []string{"LIVED", "NOT COVERED", "TIMED OUT"} {
				if strings.HasSuffix(line, "// "+s) {
					st = s
				}
			}
			f.Mutations = append(f.Mutations, mutation{"CONDITIONALS_NEGATION", st, i + 1, col + 1})
			fmt.Printf(" %s CONDITIONALS_NEGATION at %s:%d:%d\n", st, path, i+1, col+1)
		}
		if len(f.Mutations) > 0 {
			files = append(files, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	calls, err := os.OpenFile(os.Getenv("MUTATE_FAKE_CALLS"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer calls.Close()
	fmt.Fprintln(calls, strings.Join(mutated, " "))
	if len(files) == 0 {
		fmt.Println("\nNo results to report.")
		return nil
	}
	data, err := json.Marshal(map[string]any{"files": files})
	if err != nil {
		return err
	}
	return os.WriteFile(out, data, 0o644)
}

// fakeCasemutants counts the NOT COVERED lines of the log as killed case
// conditions, so a test sees which logs it was given.
func fakeCasemutants(args []string) error {
	i := slices.Index(args, "-log")
	if i < 0 || i+1 >= len(args) {
		return fmt.Errorf("fake casemutants: no -log in %q", args)
	}
	data, err := os.ReadFile(args[i+1])
	if err != nil {
		return err
	}
	n := strings.Count(string(data), "NOT COVERED")
	fmt.Printf("casemutants: killed %d, lived 0, timed out 0, not viable 0, moved 0 (%d in case expressions; 3 not covered in blocks no test ran; 0 elsewhere)\n", n, n)
	return nil
}

// fixture is a module with package p (two files with mutants, one without,
// one below it), q which p's tests import, and r which nothing imports.
type fixture struct {
	t      *testing.T
	root   string
	calls  string
	clock  time.Time
	config config
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"go.mod":       "module example.com/m\n\ngo 1.26\n",
		"p/a.go":       "package p\n\nfunc A(x int) bool { return x == 1 }\n\nfunc A2(x int) bool { return x == 2 } // LIVED\n",
		"p/b.go":       "package p\n\nfunc B(x int) bool { return x == 3 } // NOT COVERED\n\nfunc B2(x int) bool { return x == 4 } // TIMED OUT\n",
		"p/doc.go":     "// Package p is a fixture.\npackage p\n",
		"p/sub/c.go":   "package sub\n\nfunc C(x int) bool { return x == 5 }\n",
		"p/p_test.go":  "package p\n\nimport (\n\t\"testing\"\n\n\t\"example.com/m/q\"\n)\n\nfunc TestA(t *testing.T) { _ = q.Q }\n",
		"p/testdata/x": "data\n",
		"q/q.go":       "package q\n\nconst Q = 1\n",
		"r/r.go":       "package r\n\nconst R = 1\n",
		"TESTING.md":   "# Tests\n\n<!-- mutate:begin -->\n| r | 1 | 2 | 3 | 4 | 33.33% | 0 / 0 | 1s | 2026-01-01 abc |\n<!-- mutate:end -->\n\nAfter.\n",
	}
	for name, text := range files {
		writeFile(t, filepath.Join(root, name), text)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("MUTATE_FAKE", "1")
	f := &fixture{t: t, root: root, calls: filepath.Join(t.TempDir(), "calls"), clock: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	t.Setenv("MUTATE_FAKE_CALLS", f.calls)
	f.config = config{
		module: root, state: filepath.Join(t.TempDir(), "state"), gremlins: self, casemutants: self,
		gremlinsID: "fake gremlins", all: []string{"p", "r"}, workers: 2, coefficient: 10,
		rev: "abc1234", testing: "TESTING.md", out: io.Discard,
		// Each gremlins run takes an hour on this clock.
		now: func() time.Time { return f.clock.Add(time.Duration(len(f.runs())) * time.Hour) },
	}
	return f
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runs are the files each fake gremlins run mutated, in order.
func (f *fixture) runs() []string {
	data, err := os.ReadFile(f.calls)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// row is the table's row of pkg.
func (f *fixture) row(pkg string) string {
	f.t.Helper()
	data, err := os.ReadFile(filepath.Join(f.root, "TESTING.md"))
	if err != nil {
		f.t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, "| "+pkg+" |") {
			return strings.TrimSuffix(line, "\n")
		}
	}
	f.t.Fatalf("no row for %s in\n%s", pkg, data)
	return ""
}

const wantRow = "| p | 2 | 1 | 1 | 3 | 66.67% | 1 / 0 | 14400s (--workers 2; 4 files, 1 timed out) | 2026-11-29 abc1234 |"

func TestAStoppedRunGoesOnWhereItStopped(t *testing.T) {
	f := newFixture(t)
	f.config.budget = 90 * time.Minute
	if err := run(context.Background(), f.config, []string{"p"}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.runs(), []string{"a.go", "b.go"}; !slices.Equal(got, want) {
		t.Fatalf("with a budget of two runs, gremlins ran on %q, want %q", got, want)
	}
	if got, want := f.row("p"), "| p | | | | | | | | not measured |"; got != want {
		t.Fatalf("an incomplete package's row is %q, want %q", got, want)
	}

	f.config.budget = 0
	if err := run(context.Background(), f.config, []string{"p"}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.runs(), []string{"a.go", "b.go", "doc.go", "sub/c.go"}; !slices.Equal(got, want) {
		t.Fatalf("the second run ran gremlins on %q, want each file once: %q", got, want)
	}
	if got := f.row("p"); got != wantRow {
		t.Fatalf("row\n%s\nwant\n%s", got, wantRow)
	}
	if got, want := f.row("r"), "| r | 1 | 2 | 3 | 4 | 33.33% | 0 / 0 | 1s | 2026-01-01 abc |"; got != want {
		t.Fatalf("a package not run lost its row: %q, want %q", got, want)
	}
	data, err := os.ReadFile(filepath.Join(f.root, "TESTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "# Tests\n\n<!-- mutate:begin") || !strings.HasSuffix(string(data), "<!-- mutate:end -->\n\nAfter.\n") {
		t.Fatalf("the text around the table changed:\n%s", data)
	}

	// A third run measures nothing again and writes the same row.
	if err := run(context.Background(), f.config, []string{"p"}); err != nil {
		t.Fatal(err)
	}
	if got := len(f.runs()); got != 4 {
		t.Fatalf("a run over a measured tree ran gremlins again: %q", f.runs())
	}
	if got := f.row("p"); got != wantRow {
		t.Fatalf("row after a run with nothing to do\n%s\nwant\n%s", got, wantRow)
	}
}

func TestAChangedTreeIsMeasuredAfresh(t *testing.T) {
	for _, tc := range []struct {
		file  string
		again bool
	}{
		{"p/a.go", true},
		{"p/sub/c.go", true},
		{"p/testdata/x", true},
		{"q/q.go", true},  // p's tests import it
		{"go.mod", true},  // it says which dependencies the tests build with
		{"r/r.go", false}, // nothing imports it
		{"TESTING.md", false},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f := newFixture(t)
			if err := run(context.Background(), f.config, []string{"p"}); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(f.root, tc.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, string(data)+"\n// changed\n")
			if err := run(context.Background(), f.config, []string{"p"}); err != nil {
				t.Fatal(err)
			}
			if got := len(f.runs()); (got == 8) != tc.again || (got != 4 && got != 8) {
				t.Fatalf("after a change to %s gremlins ran %d times (%q); measured afresh: %v", tc.file, got, f.runs(), tc.again)
			}
		})
	}
}

func TestAFailedFileKeepsNoResult(t *testing.T) {
	f := newFixture(t)
	t.Setenv("MUTATE_FAKE_FAIL", "b.go")
	err := run(context.Background(), f.config, []string{"p"})
	if err == nil || !strings.Contains(err.Error(), "gremlins on b.go") {
		t.Fatalf("a gremlins run that fails gave %v, want an error naming b.go", err)
	}
	if got, want := f.runs(), []string{"a.go"}; !slices.Equal(got, want) {
		t.Fatalf("gremlins failed on b.go, and then gremlins ran on %q, want %q", got, want)
	}
	if got, want := f.row("p"), "| p | | | | | | | | not measured |"; got != want {
		t.Fatalf("row after a failed file: %q, want %q", got, want)
	}
	t.Setenv("MUTATE_FAKE_FAIL", "")
	if err := run(context.Background(), f.config, []string{"p"}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.runs(), []string{"a.go", "b.go", "doc.go", "sub/c.go"}; !slices.Equal(got, want) {
		t.Fatalf("the run after the failed one ran gremlins on %q, want b.go again and not a.go: %q", got, want)
	}
}

func TestAnInterruptedFileKeepsNoResult(t *testing.T) {
	f := newFixture(t)
	t.Setenv("MUTATE_FAKE_INTERRUPT", "b.go")
	err := run(context.Background(), f.config, []string{"p"})
	if err == nil || !strings.Contains(err.Error(), "gremlins on b.go was interrupted") {
		t.Fatalf("an interrupted gremlins run gave %v, want an error naming b.go", err)
	}
	t.Setenv("MUTATE_FAKE_INTERRUPT", "")
	if err := run(context.Background(), f.config, []string{"p"}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.runs(), []string{"a.go", "b.go", "b.go", "doc.go", "sub/c.go"}; !slices.Equal(got, want) {
		t.Fatalf("gremlins ran on %q, want b.go measured again after its interrupted run: %q", got, want)
	}
	if got := f.row("p"); got != wantRow {
		t.Fatalf("row\n%s\nwant\n%s", got, wantRow)
	}
}

func TestFirstFilesAreMeasuredFirst(t *testing.T) {
	f := newFixture(t)
	f.config.first = []string{"sub/c.go", "b.go"}
	f.config.budget = 90 * time.Minute
	if err := run(context.Background(), f.config, []string{"p"}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.runs(), []string{"sub/c.go", "b.go"}; !slices.Equal(got, want) {
		t.Fatalf("with -first %q and a budget of two runs, gremlins ran on %q, want %q", f.config.first, got, want)
	}
	f.config.first, f.config.budget = nil, 0
	if err := run(context.Background(), f.config, []string{"p"}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.runs(), []string{"sub/c.go", "b.go", "a.go", "doc.go"}; !slices.Equal(got, want) {
		t.Fatalf("the second run ran gremlins on %q, want the files left once: %q", got, want)
	}
	if got := f.row("p"); got != wantRow {
		t.Fatalf("row\n%s\nwant\n%s", got, wantRow)
	}
}

func TestAFirstFileOfNoPackageIsRefused(t *testing.T) {
	f := newFixture(t)
	f.config.first = []string{"a.go", "c.go"}
	err := run(context.Background(), f.config, []string{"p"})
	if err == nil || !strings.Contains(err.Error(), `-first names "c.go", which is a file of none of the packages`) {
		t.Fatalf("run with -first naming a file of no package gave %v", err)
	}
	if len(f.runs()) != 0 {
		t.Fatalf("gremlins ran: %q", f.runs())
	}
}

func TestAPackageNotInTheTableIsRefused(t *testing.T) {
	f := newFixture(t)
	err := run(context.Background(), f.config, []string{"q"})
	if err == nil || !strings.Contains(err.Error(), `package "q" is not in -all`) {
		t.Fatalf("run on a package outside -all gave %v", err)
	}
	if len(f.runs()) != 0 {
		t.Fatalf("gremlins ran: %q", f.runs())
	}
}

func TestExcludeArgs(t *testing.T) {
	files := []string{"a.go", "a_go.go", "sub/a.go", "x+y.go"}
	args := excludeArgs(files, "a.go")
	var excluded []string
	for i := 0; i < len(args); i += 2 {
		if args[i] != "-E" {
			t.Fatalf("args %q: want -E before each regexp", args)
		}
		r := regexp.MustCompile(args[i+1])
		for _, f := range files {
			if r.MatchString(f) {
				excluded = append(excluded, f)
			}
		}
	}
	if want := []string{"a_go.go", "sub/a.go", "x+y.go"}; !slices.Equal(excluded, want) {
		t.Fatalf("the -E flags %q exclude %q, want %q", args, excluded, want)
	}
}

func TestReplaceSection(t *testing.T) {
	build := func(old string) string { return "[" + old + "]\n" }
	for _, tc := range []struct{ in, want, err string }{
		{in: "a\n<!-- mutate:begin x -->\nrow\n<!-- mutate:end -->\nb\n", want: "a\n[<!-- mutate:begin x -->\nrow\n<!-- mutate:end -->\n]\nb\n"},
		{in: "a\n<!-- mutate:begin -->\n<!-- mutate:end -->", want: "a\n[<!-- mutate:begin -->\n<!-- mutate:end -->]\n"},
		{in: "a", want: "a\n\n[]\n"},
		{in: "a\n<!-- mutate:begin -->\nrow\n", err: "without"},
	} {
		got, err := replaceSection(tc.in, build)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("replaceSection(%q) = %q, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("replaceSection(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestCountMutantsRefusesWhatItCannotRead(t *testing.T) {
	dir := t.TempDir()
	j, l := filepath.Join(dir, "x.json"), filepath.Join(dir, "x.log")
	writeFile(t, l, "Killed: 0\n")
	var r record
	if err := countMutants(j, l, &r); err == nil || !strings.Contains(err.Error(), "No results to report") {
		t.Errorf("no output and a log without \"No results to report.\" gave %v", err)
	}
	writeFile(t, j, `{"files":[{"mutations":[{"status":"KILLED"},{"status":"SKIPPED"}]}]}`)
	if err := countMutants(j, l, &r); err == nil || !strings.Contains(err.Error(), `"SKIPPED"`) {
		t.Errorf("a status mutate does not count gave %v", err)
	}
	writeFile(t, j, `{"files":`)
	if err := countMutants(j, l, &r); err == nil || !strings.Contains(err.Error(), "x.json") {
		t.Errorf("truncated output gave %v", err)
	}
}
