package perf

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// EnvPerf must be "1" for anything in this package to run.
const EnvPerf = "CIDRSHIFT_PERF"

// requirePerf skips unless CIDRSHIFT_PERF=1, and under -short: these
// measurements take minutes and most of the machine.
func requirePerf(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("perf: skipped with -short")
	}
	if os.Getenv(EnvPerf) != "1" {
		tb.Skipf("perf: set %s=1 to run (takes minutes; not part of CI)", EnvPerf)
	}
}

func envInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(tb, err, "%s=%q", name, v)
	return n
}

// repoRoot is the root module's directory (e2e/perf/../..).
func repoRoot(tb testing.TB) string {
	tb.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(tb, err)
	_, err = os.Stat(filepath.Join(root, "examples"))
	require.NoError(tb, err, "run from e2e/perf")
	return root
}

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]string{}
)

// buildExample builds examples/<name> of the root module once per test
// binary and returns the path of the binary.
func buildExample(tb testing.TB, name string) string {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "cidrshift-perf-bin-")
		require.NoError(tb, err)
		buildDir = d
	}
	bin := filepath.Join(buildDir, name)
	cmd := exec.Command("go", "build", "-o", bin, "./examples/"+name)
	cmd.Dir = repoRoot(tb)
	out, err := cmd.CombinedOutput()
	require.NoError(tb, err, "go build ./examples/%s: %s", name, out)
	built[name] = bin
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// timed is a command run under GNU time -v.
type timed struct {
	TimeV
	Exit   int
	Stdout []byte
	Stderr string
}

// runTimeV runs bin args under /usr/bin/time -v and returns its report; a
// non-zero exit status is returned, not failed on (doctor exits 1 when it
// finds problems).
func runTimeV(ctx context.Context, tb testing.TB, bin string, args ...string) timed {
	tb.Helper()
	return runTimeVLimited(ctx, tb, 0, bin, args...)
}

// runTimeVLimited is runTimeV with the address space limited to limitMB
// (prlimit --as), so a runaway process fails alone instead of pushing the
// shared machine into the OOM killer; 0 means no limit.
func runTimeVLimited(ctx context.Context, tb testing.TB, limitMB int, bin string, args ...string) timed {
	tb.Helper()
	argv := append([]string{"/usr/bin/time", "-v", bin}, args...)
	if limitMB > 0 {
		argv = append([]string{"prlimit", fmt.Sprintf("--as=%d", int64(limitMB)<<20), "--"}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := timed{Stdout: stdout.Bytes(), Stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.Exit = ee.ExitCode()
	} else {
		require.NoError(tb, err, "%s %s", bin, strings.Join(args, " "))
	}
	tv, perr := ParseTimeV(r.Stderr)
	require.NoError(tb, perr, "%s %s", bin, strings.Join(args, " "))
	r.TimeV = tv
	return r
}

// machine describes where a measurement ran.
func machine() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s, %d CPUs (GOMAXPROCS %d), %s %s/%s, load %s", host, runtime.NumCPU(), runtime.GOMAXPROCS(0),
		runtime.Version(), runtime.GOOS, runtime.GOARCH, LoadAvg())
}

// table prints a markdown table through t.Log and, with -v, stdout.
type table struct {
	head []string
	rows [][]string
}

func (tb *table) add(cells ...any) {
	row := make([]string, len(cells))
	for i, c := range cells {
		switch v := c.(type) {
		case time.Duration:
			row[i] = fmtDur(v)
		case float64:
			row[i] = trimFloat(v)
		default:
			row[i] = fmt.Sprint(v)
		}
		row[i] = strings.ReplaceAll(row[i], "|", `\|`) // keep the markdown table intact
	}
	tb.rows = append(tb.rows, row)
}

func (tb *table) String() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(tb.head, " | ") + " |\n|")
	for range tb.head {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range tb.rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

func mib(kb int64) string { return fmt.Sprintf("%.0f MiB", float64(kb)/1024) }

func TestParseTimeV(t *testing.T) {
	requirePerf(t)
	tv, err := ParseTimeV("\tCommand being timed: \"x\"\n\tUser time (seconds): 1.50\n\tSystem time (seconds): 0.25\n" +
		"\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02.50\n\tMaximum resident set size (kbytes): 123456\n")
	require.NoError(t, err)
	require.Equal(t, TimeV{Wall: 62500 * time.Millisecond, User: 1500 * time.Millisecond, System: 250 * time.Millisecond, MaxRSSKB: 123456}, tv)
	_, err = ParseTimeV("no report")
	require.Error(t, err)
}

func TestParseMetrics(t *testing.T) {
	requirePerf(t)
	m, err := ParseMetrics([]byte(`# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="POST",version="v1"} 1
apiserver_request_total{code="201",component="apiserver",dry_run="All",group="",resource="nodes",scope="resource",subresource="",verb="POST",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/api",verb="GET",version=""} 2
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="POST",version="v1"} 0.4
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="POST",version="v1"} 8
`))
	require.NoError(t, err)
	post := RequestKey{Verb: "POST", Resource: "nodes"}
	require.Equal(t, Counts{post: 8, {Verb: "GET", Subresource: "/api"}: 2}, m.Requests)
	require.Equal(t, 50*time.Millisecond, m.Latency[post].Mean())
	require.Equal(t, float64(8), m.Requests.Writes())
}
