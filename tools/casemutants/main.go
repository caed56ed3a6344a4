// Command casemutants runs the mutants gremlins reports as "not covered"
// although the tests run their code: mutants in the conditions of a
// tagless switch (`switch { case a && b: ... }`).
//
// gremlins (v0.6.0) decides whether a mutant is covered from the blocks of
// `go test -coverprofile`, and the cover tool puts a switch's case
// expressions in no block at all: only the statements before the switch and
// the bodies of its cases are counted. So every mutant of a case condition
// is "not covered" and never run, however well the tests exercise it.
//
// The same holds for a select case's send or receive statement
// (`case <-time.After(2 * d):`).
//
// casemutants reads a gremlins log, keeps the NOT COVERED mutants whose
// position lies in a case clause's expressions or a select case's
// statement, applies each with the same token change gremlins makes, and
// runs the package's tests with the mutated file given through `go test
// -overlay`, so the source tree is never written. It prints a line per mutant in gremlins' words (KILLED, LIVED,
// TIMED OUT, NOT VIABLE) and a summary line:
//
//	casemutants: killed 12, lived 3, timed out 0, not viable 0, moved 0 (15 in case expressions; 13 not covered in blocks no test ran; 2 elsewhere)
//
// "Elsewhere" are the other not covered mutants in no block of the
// package's coverage profile: in a constant's expression, or in a file the
// profile does not hold (a test helper package below the package, which
// gremlins mutates but whose coverage the package's tests do not record).
// They are left alone: gremlins' "not covered" is right for them.
//
// With -lived it also runs the mutants the log says lived, against the
// package's tests as they are now, to see which new tests kill them (a
// token no longer where the log says is counted as MOVED). With -uncovered
// it also runs the not covered mutants in blocks that the tests run now
// (they ran none when gremlins did): the mutants that new tests reach.
//
// It is a module of its own (tools/), so the library's go.mod does not
// carry its dependency. Usage, from the repository root:
//
//	go run -C tools ./casemutants -module .. -log /abs/kubeadmcfg.log ./kubeadmcfg
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/tools/cover"
)

// mutations is gremlins' token change per mutant type, for the types it
// enables by default (internal/engine/mappings.go in gremlins v0.6.0).
var mutations = map[string]map[token.Token]token.Token{
	"ARITHMETIC_BASE":       {token.ADD: token.SUB, token.MUL: token.QUO, token.QUO: token.MUL, token.REM: token.MUL, token.SUB: token.ADD},
	"CONDITIONALS_BOUNDARY": {token.GEQ: token.GTR, token.GTR: token.GEQ, token.LEQ: token.LSS, token.LSS: token.LEQ},
	"CONDITIONALS_NEGATION": {token.EQL: token.NEQ, token.GEQ: token.LSS, token.GTR: token.LEQ, token.LEQ: token.GTR, token.LSS: token.GEQ, token.NEQ: token.EQL},
	"INCREMENT_DECREMENT":   {token.DEC: token.INC, token.INC: token.DEC},
	"INVERT_NEGATIVES":      {token.SUB: token.ADD},
}

// mutant is one NOT COVERED or LIVED line of a gremlins log.
type mutant struct {
	Status string // NOT COVERED or LIVED
	Kind   string // e.g. CONDITIONALS_NEGATION
	File   string // as gremlins prints it, relative to the package
	Line   int
	Col    int
}

func (m mutant) String() string { return fmt.Sprintf("%s at %s:%d:%d", m.Kind, m.File, m.Line, m.Col) }

var logLine = regexp.MustCompile(`^\s*(NOT COVERED|LIVED) (\S+) at (\S+\.go):(\d+):(\d+)\s*$`)

// parseLog returns the NOT COVERED and LIVED mutants of a gremlins log, in order.
func parseLog(r io.Reader) ([]mutant, error) {
	var out []mutant
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := logLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[4])
		col, _ := strconv.Atoi(m[5])
		out = append(out, mutant{Status: m[1], Kind: m[2], File: m[3], Line: line, Col: col})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the gremlins log: %w", err)
	}
	return out, nil
}

// blocksAt returns the blocks of a file's coverage profile that line:col
// lies in.
func blocksAt(p *cover.Profile, line, col int) []cover.ProfileBlock {
	var in []cover.ProfileBlock
	for _, b := range p.Blocks {
		after := line > b.StartLine || line == b.StartLine && col >= b.StartCol
		before := line < b.EndLine || line == b.EndLine && col <= b.EndCol
		if after && before {
			in = append(in, b)
		}
	}
	return in
}

// inNoBlock reports whether line:col of a file lies outside every block of
// its coverage profile.
func inNoBlock(p *cover.Profile, line, col int) bool { return len(blocksAt(p, line, col)) == 0 }

// ranNow reports whether line:col of a file lies in a block of its
// coverage profile that the tests ran.
func ranNow(p *cover.Profile, line, col int) bool {
	return slices.ContainsFunc(blocksAt(p, line, col), func(b cover.ProfileBlock) bool { return b.Count > 0 })
}

// inCaseExpr reports whether line:col of the Go source src lies in the
// expressions of a switch's case clause or in a select case's send or
// receive (`case <-time.After(2 * d):`), which the cover tool puts in no
// block either.
func inCaseExpr(src []byte, line, col int) (bool, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.SkipObjectResolution)
	if err != nil {
		return false, err
	}
	found := false
	in := func(e ast.Node) {
		from, to := fset.Position(e.Pos()), fset.Position(e.End())
		after := line > from.Line || line == from.Line && col >= from.Column
		before := line < to.Line || line == to.Line && col < to.Column
		found = found || after && before
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch c := n.(type) {
		case *ast.CaseClause:
			for _, e := range c.List {
				in(e)
			}
		case *ast.CommClause:
			if c.Comm != nil {
				in(c.Comm)
			}
		}
		return !found
	})
	return found, nil
}

// apply returns src with the token at line:col changed as kind says.
func apply(src []byte, m mutant) ([]byte, error) {
	fset := token.NewFileSet()
	f := fset.AddFile(m.File, -1, len(src))
	var s scanner.Scanner
	s.Init(f, src, nil, 0)
	for {
		pos, tok, _ := s.Scan()
		if tok == token.EOF {
			return nil, fmt.Errorf("%s: no token at %d:%d", m.File, m.Line, m.Col)
		}
		p := fset.Position(pos)
		if p.Line != m.Line || p.Column != m.Col {
			continue
		}
		to, ok := mutations[m.Kind][tok]
		if !ok {
			return nil, fmt.Errorf("%s: %s is not a %s token", m, tok, m.Kind)
		}
		off := p.Offset
		out := append(append(append([]byte{}, src[:off]...), to.String()...), src[off+len(tok.String()):]...)
		return out, nil
	}
}

type result string

const (
	killed    result = "KILLED"
	lived     result = "LIVED"
	timedOut  result = "TIMED OUT"
	notViable result = "NOT VIABLE"
	// moved: the token is no longer where the log says (the file changed
	// since gremlins ran).
	moved result = "MOVED"
)

// runner runs the package's tests with one file replaced.
type runner struct {
	module  string // the module's root, where go runs
	pkg     string // the package pattern, e.g. ./kubeadmcfg
	dir     string // the package's directory
	tmp     string // where overlays and mutated files are written
	timeout time.Duration
}

func (r runner) run(ctx context.Context, file string, src []byte) (result, error) {
	abs, err := filepath.Abs(filepath.Join(r.dir, file))
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", file, err)
	}
	mutated := filepath.Join(r.tmp, "mutant.go")
	if err := os.WriteFile(mutated, src, 0o600); err != nil {
		return "", fmt.Errorf("writing the mutant: %w", err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {abs: mutated}})
	if err != nil {
		return "", fmt.Errorf("encoding the overlay: %w", err)
	}
	ov := filepath.Join(r.tmp, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o600); err != nil {
		return "", fmt.Errorf("writing the overlay: %w", err)
	}
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(tctx, "go", "test", "-count=1", "-failfast", "-overlay", ov, "-timeout", (r.timeout + 2*time.Second).String(), r.pkg)
	cmd.Dir, cmd.Stdout, cmd.Stderr = r.module, &out, &out
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return "", fmt.Errorf("running the tests of %s: %w", r.pkg, ctx.Err())
	case errors.Is(tctx.Err(), context.DeadlineExceeded):
		return timedOut, nil
	case err == nil:
		return lived, nil
	case strings.Contains(out.String(), "[build failed]") || strings.Contains(out.String(), "[setup failed]"):
		return notViable, nil
	case errors.As(err, &exit):
		return killed, nil
	}
	return "", fmt.Errorf("running the tests of %s: %w", r.pkg, err)
}

func main() {
	logPath := flag.String("log", "", "a gremlins unleash log of the package (required)")
	module := flag.String("module", ".", "the root of the module the package is in")
	coefficient := flag.Float64("timeout-coefficient", 10, "a mutant times out at the coverage run's time times this")
	again := flag.Bool("lived", false, "also run the mutants the log says lived, against the tests as they are now")
	uncovered := flag.Bool("uncovered", false, "also run the not covered mutants in blocks the tests run now")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: casemutants [-module DIR] -log GREMLINS.LOG ./PACKAGE\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *logPath == "" || flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(context.Background(), *module, *logPath, flag.Arg(0), *coefficient, options{lived: *again, uncovered: *uncovered}, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "casemutants:", err)
		os.Exit(1)
	}
}

// options say which mutants run besides the case conditions.
type options struct {
	lived     bool // the ones the log says lived
	uncovered bool // the not covered ones in blocks the tests run now
}

func run(ctx context.Context, module, logPath, pkg string, coefficient float64, o options, w io.Writer) error {
	if coefficient <= 0 {
		return fmt.Errorf("-timeout-coefficient %v: must be above 0", coefficient)
	}
	lf, err := os.Open(logPath)
	if err != nil {
		return fmt.Errorf("opening the gremlins log: %w", err)
	}
	muts, err := parseLog(lf)
	_ = lf.Close()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "casemutants-")
	if err != nil {
		return fmt.Errorf("making a work directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()

	// The coverage run: the blocks, and the time a mutant may take.
	profile := filepath.Join(tmp, "cover.out")
	start := time.Now()
	cov := exec.CommandContext(ctx, "go", "test", "-count=1", "-coverprofile", profile, pkg)
	cov.Dir = module
	if out, err := cov.CombinedOutput(); err != nil {
		return fmt.Errorf("the tests of %s fail unmutated: %w\n%s", pkg, err, out)
	}
	took := time.Since(start)
	profiles, err := cover.ParseProfiles(profile)
	if err != nil {
		return fmt.Errorf("reading the coverage profile: %w", err)
	}
	list := exec.CommandContext(ctx, "go", "list", "-f", "{{.ImportPath}}\n{{.Dir}}", pkg)
	list.Dir = module
	out, err := list.Output()
	if err != nil {
		return fmt.Errorf("finding the directory of %s: %w", pkg, err)
	}
	importPath, dir, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	byFile := map[string]*cover.Profile{}
	for _, p := range profiles {
		byFile[p.FileName] = p
	}
	r := runner{module: module, pkg: pkg, dir: dir, tmp: tmp, timeout: time.Duration(float64(took) * coefficient)}

	counts, livedAgain, reached := map[result]int{}, map[result]int{}, map[result]int{}
	cases, blocks, elsewhere, wasLived, unrun := 0, 0, 0, 0, 0
	for _, m := range muts {
		if m.Status == "LIVED" && !o.lived {
			continue
		}
		src, err := os.ReadFile(filepath.Join(r.dir, m.File))
		if err != nil {
			return fmt.Errorf("reading %s: %w", m.File, err)
		}
		// The profile names files by import path; one below the package
		// (a test helper package gremlins mutates too) is not in it.
		prof := byFile[importPath+"/"+filepath.ToSlash(m.File)]
		tally := counts
		switch inCase, err := inCaseExpr(src, m.Line, m.Col); {
		case m.Status == "LIVED":
			tally = livedAgain
			wasLived++
		case err != nil:
			return fmt.Errorf("parsing %s: %w", m.File, err)
		case prof == nil:
			elsewhere++
			continue
		case inCase:
			cases++
		case !inNoBlock(prof, m.Line, m.Col):
			blocks++
			if !o.uncovered {
				continue
			}
			if !ranNow(prof, m.Line, m.Col) {
				unrun++
				continue
			}
			tally = reached
		default:
			elsewhere++
			continue
		}
		res := moved
		if mutated, err := apply(src, m); err == nil {
			if res, err = r.run(ctx, m.File, mutated); err != nil {
				return err
			}
		}
		tally[res]++
		fmt.Fprintf(w, "%12s %s\n", res, m)
	}
	fmt.Fprintf(w, "casemutants: killed %d, lived %d, timed out %d, not viable %d, moved %d (%d in case expressions; %d not covered in blocks no test ran; %d elsewhere)\n",
		counts[killed], counts[lived], counts[timedOut], counts[notViable], counts[moved], cases, blocks, elsewhere)
	if o.uncovered {
		fmt.Fprintf(w, "casemutants -uncovered: killed %d, lived %d, timed out %d, not viable %d, moved %d (of %d not covered in blocks; %d in blocks the tests still do not run)\n",
			reached[killed], reached[lived], reached[timedOut], reached[notViable], reached[moved], blocks, unrun)
	}
	if o.lived {
		fmt.Fprintf(w, "casemutants -lived: killed %d, lived %d, timed out %d, not viable %d, moved %d (of %d gremlins saw live)\n",
			livedAgain[killed], livedAgain[lived], livedAgain[timedOut], livedAgain[notViable], livedAgain[moved], wasLived)
	}
	return nil
}
