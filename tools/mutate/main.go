// Command mutate runs gremlins over the library's packages one file at a
// time, keeps each file's result, and writes a package's row in TESTING.md
// once every file of the package has been measured at the same tree.
//
// A whole package takes gremlins two to four hours on a two-core machine,
// more than one sitting can give it. So mutate measures a package file by
// file: `gremlins unleash -E <every other file> -o <file>.json ./<package>`,
// and stores the file's counts under a key computed from the package's
// tree (its files, the files of the module's packages it or its tests
// import, go.mod and go.sum). A run that is stopped, or that reaches its
// -budget, goes on where it left off the next time: the files already
// measured at that key are not run again, and a change to the package or
// to what it imports starts it afresh. -first names files to measure
// before the others (the safety paths, when a package takes several
// sittings). The key does not cover the Go and
// gremlins versions or the timeout coefficient: the Makefile pins gremlins,
// and a row measured across a Go upgrade mixes the two.
//
// When every file of a package has a result, mutate runs tools/casemutants
// over the files' logs (the case conditions gremlins cannot run, and the
// not covered mutants in blocks no test ran) and writes the package's row
// between the mutate markers of TESTING.md. The rows of the packages not
// complete are kept as they were.
//
// It is a module of its own (tools/), run by `make mutate`:
//
//	go run -C tools ./mutate -module .. -gremlins /abs/gremlins -casemutants /abs/casemutants \
//	  -all 'cidr nodecidr' -budget 2h nodecidr
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is what one run of mutate was asked to do.
type config struct {
	module      string   // the module's root directory
	state       string   // where the per-file results are kept
	gremlins    string   // the gremlins binary
	casemutants string   // the casemutants binary
	gremlinsID  string   // how the table names gremlins (its module@version)
	all         []string // every package, in the table's order
	isolate     []string // packages whose tests run under `unshare --net`
	first       []string // files (relative to their package) measured before the others, in this order
	workers     int      // gremlins --workers; 0 leaves gremlins' default
	coefficient float64  // gremlins --timeout-coefficient
	budget      time.Duration
	rev         string // the commit the rows are measured at
	testing     string // TESTING.md, relative to module
	now         func() time.Time
	out         io.Writer
}

// record is the result of one file's gremlins run, kept in the state
// directory as <file>.rec.
type record struct {
	File       string  `json:"file"`
	Killed     int     `json:"killed"`
	Lived      int     `json:"lived"`
	NotCovered int     `json:"not_covered"`
	TimedOut   int     `json:"timed_out"`
	NotViable  int     `json:"not_viable"`
	Seconds    float64 `json:"seconds"`
	Workers    int     `json:"workers"`
	Date       string  `json:"date"`
	Rev        string  `json:"rev"`
}

// cases is casemutants' summary, kept as cases.rec.
type cases struct {
	Killed  int     `json:"killed"`
	Lived   int     `json:"lived"`
	Unrun   int     `json:"unrun"`
	Seconds float64 `json:"seconds"`
}

func main() {
	var c config
	var all, isolate, first string
	flag.StringVar(&c.module, "module", "..", "the module's root directory")
	flag.StringVar(&c.state, "state", "", "where the per-file results are kept (default: the user cache directory's cidrshift-mutate)")
	flag.StringVar(&c.gremlins, "gremlins", "gremlins", "the gremlins binary")
	flag.StringVar(&c.casemutants, "casemutants", "casemutants", "the casemutants binary")
	flag.StringVar(&c.gremlinsID, "gremlins-id", "gremlins", "how TESTING.md names gremlins")
	flag.StringVar(&all, "all", "", "every package, in the table's order (default: the packages to run)")
	flag.StringVar(&isolate, "isolate", "", "packages whose tests run under unshare --net")
	flag.StringVar(&first, "first", "", "files, relative to their package, to measure before the others, in this order (the safety paths first when a package takes more than one sitting)")
	flag.IntVar(&c.workers, "workers", 0, "gremlins --workers (0: gremlins' default)")
	flag.Float64Var(&c.coefficient, "timeout-coefficient", 10, "gremlins --timeout-coefficient")
	flag.DurationVar(&c.budget, "budget", 0, "start no file after this long (0: no limit)")
	flag.StringVar(&c.rev, "rev", "", "the commit the rows are measured at")
	flag.StringVar(&c.testing, "testing", "TESTING.md", "the file whose table is rewritten, relative to -module")
	flag.Parse()
	c.all, c.isolate, c.first = strings.Fields(all), strings.Fields(isolate), strings.Fields(first)
	if len(c.all) == 0 {
		c.all = flag.Args()
	}
	if c.state == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			fmt.Fprintln(os.Stderr, "mutate: no -state and no user cache directory:", err)
			os.Exit(2)
		}
		c.state = filepath.Join(dir, "cidrshift-mutate")
	}
	c.now, c.out = time.Now, os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

// run measures pkgs in turn and rewrites the table. It returns an error
// when a run failed; a package left incomplete by the budget is not one.
func run(ctx context.Context, c config, pkgs []string) error {
	for _, p := range pkgs {
		if !slices.Contains(c.all, p) {
			return fmt.Errorf("package %q is not in -all %q", p, c.all)
		}
	}
	for _, f := range c.first {
		found := false
		for _, p := range pkgs {
			if _, err := os.Stat(filepath.Join(c.module, p, filepath.FromSlash(f))); err == nil {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("-first names %q, which is a file of none of the packages %q", f, pkgs)
		}
	}
	start := c.now()
	rows := map[string]string{}
	var failed []error
	for _, p := range pkgs {
		row, err := measure(ctx, c, p, start)
		switch {
		case err != nil:
			failed = append(failed, fmt.Errorf("%s: %w", p, err))
		case row != "":
			rows[p] = row
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err := rewriteTable(c, rows); err != nil {
		failed = append(failed, err)
	}
	return errors.Join(failed...)
}

// measure runs gremlins on the files of pkg that have no result at the
// package's current key, and returns its row when every file has one ("" when
// the budget ran out first).
func measure(ctx context.Context, c config, pkg string, start time.Time) (string, error) {
	key, err := treeKey(ctx, c.module, pkg)
	if err != nil {
		return "", err
	}
	files, err := mutatedFiles(filepath.Join(c.module, pkg))
	if err != nil {
		return "", err
	}
	order := firstOrder(files, c.first)
	dir := filepath.Join(c.state, strings.ReplaceAll(pkg, "/", "_"), key[:16])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	var recs []record
	var todo []string
	for _, f := range order {
		r, err := readJSON[record](filepath.Join(dir, partName(f)+".rec"))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			todo = append(todo, f)
		case err != nil:
			return "", err
		default:
			recs = append(recs, r)
		}
	}
	fmt.Fprintf(c.out, "== %s: %d files, %d measured at tree %s (state in %s)\n", pkg, len(files), len(recs), key[:16], dir)
	if len(todo) > 0 {
		if err := c.command(ctx, pkg, io.Discard, "go", "test", "-count=1", "-run", "^$", "./"+pkg); err != nil {
			return "", fmt.Errorf("building its tests: %w", err)
		}
	}
	for i, f := range todo {
		if c.budget > 0 && c.now().Sub(start) >= c.budget {
			fmt.Fprintf(c.out, "== %s: budget of %s spent; %d of %d files left, run again to go on\n", pkg, c.budget, len(todo)-i, len(files))
			return "", nil
		}
		r, err := c.gremlinsOn(ctx, pkg, files, f, dir)
		if err != nil {
			return "", err
		}
		recs = append(recs, r)
		fmt.Fprintf(c.out, "   %s: killed %d, lived %d, not covered %d, timed out %d, not viable %d (%.0fs)\n",
			f, r.Killed, r.Lived, r.NotCovered, r.TimedOut, r.NotViable, r.Seconds)
	}
	if c.budget > 0 && c.now().Sub(start) >= c.budget {
		if _, err := os.Stat(filepath.Join(dir, "cases.rec")); err != nil {
			fmt.Fprintf(c.out, "== %s: budget of %s spent; every file measured, casemutants left, run again to go on\n", pkg, c.budget)
			return "", nil
		}
	}
	cs, err := c.caseMutants(ctx, pkg, files, dir)
	if err != nil {
		return "", err
	}
	return formatRow(pkg, recs, cs), nil
}

// gremlinsOn runs gremlins on one file of pkg and keeps its record.
func (c config) gremlinsOn(ctx context.Context, pkg string, files []string, file, dir string) (record, error) {
	base := filepath.Join(dir, partName(file))
	args := []string{"unleash", "--timeout-coefficient", strconv.FormatFloat(c.coefficient, 'f', -1, 64)}
	if c.workers > 0 {
		args = append(args, "--workers", strconv.Itoa(c.workers))
	}
	args = append(args, excludeArgs(files, file)...)
	args = append(args, "-o", base+".json", "./"+pkg)
	logf, err := os.Create(base + ".log")
	if err != nil {
		return record{}, fmt.Errorf("gremlins log: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(c.out, "== %s %s: gremlins unleash ... -o %s.json ./%s\n", pkg, file, base, pkg)
	_ = os.Remove(base + ".json")
	began := c.now()
	if err := c.command(ctx, pkg, logf, c.gremlins, args...); err != nil {
		return record{}, fmt.Errorf("gremlins on %s (log in %s.log): %w", file, base, err)
	}
	// An interrupted gremlins (v0.6.0) stops its workers, reports the
	// mutants it ran, and exits 0: those are not the file's result.
	if err := ctx.Err(); err != nil {
		return record{}, fmt.Errorf("gremlins on %s: %w", file, err)
	}
	if log, err := os.ReadFile(base + ".log"); err != nil || bytes.Contains(log, []byte("Shutting down gracefully")) {
		return record{}, fmt.Errorf("gremlins on %s was interrupted (log in %s.log); its partial result is not kept", file, base)
	}
	r := record{File: file, Seconds: c.now().Sub(began).Seconds(), Workers: c.workers, Date: c.now().UTC().Format(time.DateOnly), Rev: c.rev}
	if err := countMutants(base+".json", base+".log", &r); err != nil {
		return record{}, fmt.Errorf("gremlins on %s: %w", file, err)
	}
	if err := writeJSON(base+".rec", r); err != nil {
		return record{}, err
	}
	return r, nil
}

// countMutants fills r's counts from gremlins' JSON output. gremlins writes
// none for a file without mutants and says so in its log.
func countMutants(jsonPath, logPath string, r *record) error {
	var out struct {
		Files []struct {
			Mutations []struct {
				Status string `json:"status"`
			} `json:"mutations"`
		} `json:"files"`
	}
	data, err := os.ReadFile(jsonPath)
	if errors.Is(err, fs.ErrNotExist) {
		log, lerr := os.ReadFile(logPath)
		if lerr == nil && bytes.Contains(log, []byte("No results to report.")) {
			return nil
		}
		return fmt.Errorf("no %s and no \"No results to report.\" in %s", jsonPath, logPath)
	}
	if err != nil {
		return fmt.Errorf("gremlins output: %w", err)
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return fmt.Errorf("gremlins output %s: %w", jsonPath, err)
	}
	for _, f := range out.Files {
		for _, m := range f.Mutations {
			switch m.Status {
			case "KILLED":
				r.Killed++
			case "LIVED":
				r.Lived++
			case "NOT COVERED":
				r.NotCovered++
			case "TIMED OUT":
				r.TimedOut++
			case "NOT VIABLE":
				r.NotViable++
			default:
				return fmt.Errorf("gremlins output %s: mutant status %q", jsonPath, m.Status)
			}
		}
	}
	return nil
}

var casesLine = regexp.MustCompile(`^casemutants: killed (\d+), lived (\d+),.*; (\d+) not covered in blocks no test ran;`)

// caseMutants runs casemutants over the logs of every file of pkg, once
// per key.
func (c config) caseMutants(ctx context.Context, pkg string, files []string, dir string) (cases, error) {
	recPath := filepath.Join(dir, "cases.rec")
	if cs, err := readJSON[cases](recPath); !errors.Is(err, fs.ErrNotExist) {
		return cs, err
	}
	var all bytes.Buffer
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, partName(f)+".log"))
		if err != nil {
			return cases{}, fmt.Errorf("gremlins log: %w", err)
		}
		all.Write(data)
	}
	logPath := filepath.Join(dir, "all.log")
	if err := os.WriteFile(logPath, all.Bytes(), 0o644); err != nil {
		return cases{}, fmt.Errorf("gremlins logs: %w", err)
	}
	abs, err := filepath.Abs(logPath)
	if err != nil {
		return cases{}, fmt.Errorf("gremlins logs: %w", err)
	}
	fmt.Fprintf(c.out, "== %s: casemutants over the %d files' logs\n", pkg, len(files))
	var out bytes.Buffer
	began := c.now()
	err = c.command(ctx, pkg, &out, c.casemutants, "-module", ".",
		"-timeout-coefficient", strconv.FormatFloat(c.coefficient, 'f', -1, 64), "-log", abs, "./"+pkg)
	if werr := os.WriteFile(filepath.Join(dir, "cases.log"), out.Bytes(), 0o644); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return cases{}, fmt.Errorf("casemutants (log in %s): %w", filepath.Join(dir, "cases.log"), err)
	}
	var cs cases
	for line := range strings.Lines(out.String()) {
		if m := casesLine.FindStringSubmatch(line); m != nil {
			cs.Killed, _ = strconv.Atoi(m[1])
			cs.Lived, _ = strconv.Atoi(m[2])
			cs.Unrun, _ = strconv.Atoi(m[3])
			cs.Seconds = c.now().Sub(began).Seconds()
			return cs, writeJSON(recPath, cs)
		}
	}
	return cases{}, fmt.Errorf("casemutants printed no summary line (log in %s)", filepath.Join(dir, "cases.log"))
}

// command runs name in the module's root with the environment gremlins'
// runs need, under `unshare --net` for the packages to isolate. Its output
// goes to w.
func (c config) command(ctx context.Context, pkg string, w io.Writer, name string, args ...string) error {
	if slices.Contains(c.isolate, pkg) {
		name, args = "unshare", append([]string{"--net", "--", name}, args...)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = c.module, w, w
	cmd.Env = append(os.Environ(), "CIDRSHIFT_REQUIRE_DATAPLANE=1", "GOFLAGS=-count=1")
	// gremlins runs go test in copies of the module: stop it with an
	// interrupt so it removes them, and kill it only if it does not stop.
	// It lets the running mutants' tests finish first: 40 s and more for
	// nodecidr, whose copy was left in TMPDIR when this waited 30 s.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Minute
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	return nil
}

// mutatedFiles lists the files gremlins mutates in dir, as it walks them:
// every .go file below dir that is not a test, relative to dir with
// forward slashes, in lexical order.
func mutatedFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the package's files: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no Go files to mutate in %s", dir)
	}
	return files, nil
}

// firstOrder is files with those named in first moved to the front, in
// first's order; the others keep theirs.
func firstOrder(files, first []string) []string {
	var order []string
	for _, f := range first {
		if slices.Contains(files, f) && !slices.Contains(order, f) {
			order = append(order, f)
		}
	}
	for _, f := range files {
		if !slices.Contains(order, f) {
			order = append(order, f)
		}
	}
	return order
}

// excludeArgs are gremlins' -E flags that leave only keep to mutate.
func excludeArgs(files []string, keep string) []string {
	var args []string
	for _, f := range files {
		if f != keep {
			args = append(args, "-E", "^"+regexp.QuoteMeta(f)+"$")
		}
	}
	return args
}

// partName is a file's name in the state directory.
func partName(file string) string { return strings.ReplaceAll(file, "/", "_") }

// treeKey hashes what the tests of pkg depend on in the module: go.mod,
// go.sum, every file below pkg's directory, and the files in the directory
// of each module package that pkg or its tests import.
func treeKey(ctx context.Context, module, pkg string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-test", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "./"+pkg)
	cmd.Dir = module
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -deps -test ./%s: %w: %s", pkg, err, bytes.TrimSpace(stderr.Bytes()))
	}
	root, err := filepath.Abs(module)
	if err != nil {
		return "", fmt.Errorf("module root: %w", err)
	}
	pkgDir := filepath.Join(root, pkg)
	h := sha256.New()
	add := func(path string) error {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("hashing the package's tree: %w", err)
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return fmt.Errorf("hashing the package's tree: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), len(data))
		h.Write(data)
		return nil
	}
	// walk adds the regular files of dir, and of its subdirectories when
	// deep.
	var walk func(dir string, deep bool) error
	walk = func(dir string, deep bool) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("hashing the package's tree: %w", err)
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			switch {
			case e.IsDir() && deep:
				if err := walk(p, true); err != nil {
					return err
				}
			case e.Type().IsRegular():
				if err := add(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := add(filepath.Join(root, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	dirs := strings.Fields(string(out))
	slices.Sort(dirs)
	for _, d := range slices.Compact(dirs) {
		if d == pkgDir || strings.HasPrefix(d, pkgDir+string(filepath.Separator)) {
			continue
		}
		if err := walk(d, false); err != nil {
			return "", err
		}
	}
	if err := walk(pkgDir, true); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// formatRow is pkg's row in the table.
func formatRow(pkg string, recs []record, cs cases) string {
	var sum record
	var seconds float64
	workers := map[int]bool{}
	first, last := recs[0], recs[0]
	for _, r := range recs {
		sum.Killed += r.Killed
		sum.Lived += r.Lived
		sum.NotCovered += r.NotCovered
		sum.TimedOut += r.TimedOut
		sum.NotViable += r.NotViable
		seconds += r.Seconds
		workers[r.Workers] = true
		if r.Date < first.Date {
			first = r
		}
		if r.Date >= last.Date {
			last = r
		}
	}
	eff := "n/a"
	if sum.Killed+sum.Lived > 0 {
		eff = fmt.Sprintf("%.2f%%", float64(sum.Killed)/float64(sum.Killed+sum.Lived)*100)
	}
	w := "gremlins' default"
	if len(workers) > 1 {
		w = "mixed"
	} else if !workers[0] {
		w = strconv.Itoa(recs[0].Workers)
	}
	when := last.Date
	if first.Date != last.Date {
		when = first.Date + " to " + last.Date
	}
	return fmt.Sprintf("| %s | %d | %d | %d | %d | %s | %d / %d | %.0fs (--workers %s; %d files, %d timed out) | %s %s |",
		pkg, sum.Killed, sum.Lived, sum.NotCovered, cs.Unrun, eff, cs.Killed, cs.Lived,
		seconds+cs.Seconds, w, len(recs), sum.TimedOut, when, last.Rev)
}

const (
	beginMark = "<!-- mutate:begin"
	endMark   = "<!-- mutate:end"
)

// rewriteTable writes the section between the mutate markers of the
// TESTING file: rows holds the rows measured now; the other packages keep
// the row they had.
func rewriteTable(c config, rows map[string]string) error {
	path := filepath.Join(c.module, c.testing)
	old, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		old = []byte("# How the tests are checked\n\n")
	} else if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	goVersion, cpus := runtime.Version(), runtime.NumCPU()
	text, err := replaceSection(string(old), section(c, rows, goVersion, cpus))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// section is the table's section, with the rows of old kept for the
// packages not in rows (callers pass the old section's text through
// replaceSection).
func section(c config, rows map[string]string, goVersion string, cpus int) func(old string) string {
	return func(old string) string {
		var b strings.Builder
		fmt.Fprintln(&b, beginMark+": written by make mutate; edits here are lost -->")
		fmt.Fprintln(&b)
		isolated := ""
		if len(c.isolate) > 0 {
			isolated = strings.Join(c.isolate, ", ") + " under `unshare --net`; "
		}
		fmt.Fprintf(&b, "Each row is written by `make mutate` when every file of its package has been measured at the same tree, and kept until then. The files are measured one at a time: `CIDRSHIFT_REQUIRE_DATAPLANE=1 GOFLAGS=-count=1 gremlins unleash --timeout-coefficient %s --workers N -E <every other file> ./<package>` (%s%s, %s, %d CPUs), each file's result kept at a hash of the package's tree, so a stopped run goes on where it stopped (`tools/mutate`). The time column adds the files' runs; the date and commit are the last file's.\n",
			strconv.FormatFloat(c.coefficient, 'f', -1, 64), isolated, c.gremlinsID, goVersion, cpus)
		fmt.Fprintln(&b, "Case conditions: of the not covered mutants, those in a tagless switch's case expressions, which the cover tool puts in no block, so gremlins never runs them; `tools/casemutants` runs them (killed / lived; not in the efficacy).")
		fmt.Fprintln(&b, "In code no test ran: of the not covered mutants, those in a block of the coverage profile that no test ran (`tools/casemutants` counts them): code no test can protect, which the efficacy leaves out. Rows measured before this column have it empty.")
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, "| package | killed | lived | not covered | of them in code no test ran | efficacy | case conditions killed / lived | time | measured |")
		fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|---:|---|---|")
		for _, p := range c.all {
			row, ok := rows[p]
			if !ok {
				row = "| " + p + " | | | | | | | | not measured |"
				for line := range strings.Lines(old) {
					if strings.HasPrefix(line, "| "+p+" |") {
						row = strings.TrimRight(line, "\n")
						break
					}
				}
			}
			fmt.Fprintln(&b, row)
		}
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, endMark+" -->")
		return b.String()
	}
}

// replaceSection replaces the lines from the begin marker to the end
// marker with what build makes of them, or appends the section when text
// has no markers.
func replaceSection(text string, build func(old string) string) (string, error) {
	i := strings.Index(text, beginMark)
	if i < 0 {
		if !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		return text + "\n" + build(""), nil
	}
	j := strings.Index(text[i:], endMark)
	if j < 0 {
		return "", fmt.Errorf("%q without %q", beginMark, endMark)
	}
	end := i + j
	if k := strings.IndexByte(text[end:], '\n'); k >= 0 {
		end += k + 1
	} else {
		end = len(text)
	}
	return text[:i] + build(text[i:end]) + text[end:], nil
}

func readJSON[T any](path string) (T, error) {
	var v T
	data, err := os.ReadFile(path)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// writeJSON writes v to path through a temporary file, so an interrupted
// run leaves no half record behind.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
