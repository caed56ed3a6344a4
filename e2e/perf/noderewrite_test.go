package perf

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/internal/timing"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// The nodes move between two /14s inside kube-controller-manager's
// --cluster-cidr=10.0.0.0/8, keeping their offset: node i has
// 10.(64+i/256).(i%256).0/24 in range A and 10.(128+i/256).(i%256).0/24 in B.
const (
	rewriteClusterCIDR = "10.0.0.0/8"
	rangeA             = "10.64.0.0/14"
	rangeB             = "10.128.0.0/14"
)

func rewriteNodeName(i int) string { return fmt.Sprintf("kwok-%04d", i) }

func rewriteCIDR(rng string, i int) string {
	base := netip.MustParsePrefix(rng).Addr().As4()
	return fmt.Sprintf("%d.%d.%d.0/24", base[0], int(base[1])+i/256, i%256)
}

// rewriteEnv is one cluster of n kwok nodes whose podCIDRs are all in
// range cur; every run moves all of them to the other range.
type rewriteEnv struct {
	c         *harness.Cluster
	cs        kubernetes.Interface
	n         int
	cur       string
	auditPath string
	auditOff  int64
	kubectl   string
	home      string
}

func (e *rewriteEnv) next() string {
	if e.cur == rangeA {
		return rangeB
	}
	return rangeA
}

// rewriteRun is one measured rewrite of every node.
type rewriteRun struct {
	name, agent string
	conc        int
	rate        string
	wall        time.Duration
	nodes       int
	gaps        timing.Summary
	retries     int
	own         Counts            // the tool's requests (audit log, by user agent)
	others      map[string]Counts // everyone else's, same window
	metrics     *Metrics          // kube-apiserver's counters, all clients
	load        [2]string
}

func (r *rewriteRun) perNode(c Counts, writes bool) float64 {
	if writes {
		return c.Writes() / float64(r.nodes)
	}
	return c.Total(nil) / float64(r.nodes)
}

func (r *rewriteRun) nodesPerSec() float64 { return float64(r.nodes) / r.wall.Seconds() }

// TestNodeRewrite rewrites the podCIDRs of 500 kwok nodes again and again
// on one real control plane: the apiserver's own ceiling (a bare client-go
// delete+create loop), examples/noderecreate and nodecidr.Apply in-process
// at concurrency 1, 4, 16 and 64 without a rate limit, noderecreate with its
// defaults, and last the users' kubectl loop (last because kubectl apply
// adds a last-applied-configuration annotation that doubles every Node).
func TestNodeRewrite(t *testing.T) {
	requirePerf(t)
	n := envInt(t, "CIDRSHIFT_PERF_NODES", 500)
	ctx := t.Context()

	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte(AuditPolicy), 0o600))
	auditPath := filepath.Join(dir, "audit.log")
	c := harness.Start(t, harness.Options{
		ClusterCIDR:      rewriteClusterCIDR,
		NodeCIDRMaskSize: 24,
		ExtraFlags: map[harness.Component][]string{
			harness.APIServer: {
				"--audit-policy-file=" + policy,
				"--audit-log-path=" + auditPath,
				"--audit-log-maxsize=100000",
				"--audit-log-mode=blocking",
			},
			harness.Kwok: kwokLeaseFlags(t),
		},
	})
	bin := buildExample(t, "noderecreate")
	cs := unthrottled(t, c, "cidrshift-perf-setup")
	e := &rewriteEnv{c: c, cs: cs, n: n, cur: rangeA, auditPath: auditPath, kubectl: c.Binaries().Kubectl, home: filepath.Join(dir, "home")}
	require.NoError(t, os.MkdirAll(e.home, 0o700))

	// n kwok nodes with podCIDRs in range A, created 32 at a time, then Ready.
	start := time.Now()
	parallel(t, n, 32, func(i int) error {
		node := harness.KwokNode(rewriteNodeName(i), map[string]string{"pool": fmt.Sprint(i % 7)})
		node.Spec.PodCIDR = rewriteCIDR(rangeA, i)
		node.Spec.PodCIDRs = []string{node.Spec.PodCIDR}
		node.Spec.Taints = []corev1.Taint{{Key: "example.com/dedicated", Value: "perf", Effect: corev1.TaintEffectPreferNoSchedule}}
		_, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	})
	waitReady(t, cs, n, 5*time.Minute)
	t.Logf("%d kwok nodes created and Ready in %s", n, time.Since(start).Round(time.Millisecond))
	// Warm kubectl's discovery cache, as on a user's machine.
	_, err := e.kubectlRun(ctx, "get", "nodes", "-o", "name")
	require.NoError(t, err)
	time.Sleep(10 * time.Second) // let kwok and the controllers settle

	// Background: what the apiserver serves with nobody rewriting nodes.
	bg := e.measure(t, "idle (background)", "", 0, "", func() (timing.Summary, int) {
		time.Sleep(20 * time.Second)
		return timing.Summary{}, 0
	})

	fsyncBefore := journalPutLatency(t, 200)
	var runs []*rewriteRun
	levels := []int{1, 4, 16, 64}
	ceiling := map[int]*rewriteRun{}
	tool := map[int]*rewriteRun{}
	inproc := map[int]*rewriteRun{}
	for _, conc := range levels {
		r := e.measure(t, fmt.Sprintf("client-go delete+create, concurrency %d", conc), "cidrshift-perf-raw", conc, "none", func() (timing.Summary, int) {
			return e.rawRewrite(t, conc)
		})
		ceiling[conc] = r
		runs = append(runs, r)
	}
	for _, conc := range levels {
		r := e.measure(t, fmt.Sprintf("noderecreate --concurrency %d --rate 0", conc), "cidrshift-noderecreate", conc, "0 (none)", func() (timing.Summary, int) {
			return e.noderecreate(t, bin, "--concurrency", fmt.Sprint(conc), "--rate", "0")
		})
		tool[conc] = r
		runs = append(runs, r)
	}
	for _, conc := range levels {
		r := e.measure(t, fmt.Sprintf("nodecidr.Apply in-process, concurrency %d, client QPS unlimited", conc), "cidrshift-perf-apply", conc, "0 (none)", func() (timing.Summary, int) {
			return e.applyInProcess(t, conc)
		})
		inproc[conc] = r
		runs = append(runs, r)
	}
	fsyncMid := journalPutLatency(t, 200)
	defConc, defRate := flagDefault(t, bin, "concurrency"), flagDefault(t, bin, "rate")
	defName := fmt.Sprintf("noderecreate (defaults: --concurrency %s --rate %s)", defConc, defRate)
	defConcN, err := strconv.Atoi(defConc)
	require.NoError(t, err, "default of -concurrency")
	def := e.measure(t, defName, "cidrshift-noderecreate", defConcN, defRate+" (default)", func() (timing.Summary, int) {
		return e.noderecreate(t, bin)
	})
	runs = append(runs, def)
	kc := e.measure(t, "kubectl loop (get -o yaml, sed, delete, apply -f)", "kubectl", 1, "-", func() (timing.Summary, int) {
		return e.kubectlLoop(t)
	})
	runs = append(runs, kc)

	// Report.
	var out strings.Builder
	fmt.Fprintf(&out, "## Node rewrite: %d kwok nodes (kwok flags %q), kube-apiserver v%s (audit log on), %s\n\n", n, kwokLeaseFlags(t), c.Binaries().K8sVersion, machine())
	bgNodeWrites := bg.metrics.Requests.Total(func(k RequestKey) bool { return k.IsWrite() && k.Resource == "nodes" })
	fmt.Fprintf(&out, "Background with nobody rewriting (kwok, controllers): %.1f requests/s, %.1f writes/s, of which %.1f writes/s on Nodes (Lease renewals are not in the audit log).\n\n",
		bg.metrics.Requests.Total(nil)/bg.wall.Seconds(), bg.metrics.Requests.Writes()/bg.wall.Seconds(), bgNodeWrites/bg.wall.Seconds())
	out.WriteString("\"Node writes/node\" counts every write to nodes and their subresources (POST, PUT, PATCH, DELETE) that kube-apiserver served during the run, " +
		"from any client, divided by the number of nodes: the tool's delete and create plus what controllers and kwok write in reaction.\n\n")
	fsyncAfter := journalPutLatency(t, 200)
	fmt.Fprintf(&out, "Journal record (internal/journal Put: write, fsync, rename, fsync dir; Apply writes 2 per node, 3-4 with --cordon or hooks) in %s, 200 sequential puts: "+
		"p50/p99/max %s/%s/%s before the runs, %s/%s/%s before the default run, %s/%s/%s after.\n\n", os.TempDir(),
		fmtDur(fsyncBefore.P50), fmtDur(fsyncBefore.P99), fmtDur(fsyncBefore.Max), fmtDur(fsyncMid.P50), fmtDur(fsyncMid.P99), fmtDur(fsyncMid.Max),
		fmtDur(fsyncAfter.P50), fmtDur(fsyncAfter.P99), fmtDur(fsyncAfter.Max))
	out.WriteString("Gaps: for noderecreate and nodecidr.Apply from just before the backup is journaled (fsync) to the create's response " +
		"(Result.Gaps); for kubectl from the end of `kubectl delete` to the end of `kubectl apply`; for client-go from the delete's response to the create's.\n\n")
	main := &table{head: []string{"run", "conc", "rate", "total", "nodes/s", "req/node (tool)", "writes/node (tool)", "Node writes/node (apiserver metrics, all clients)", "gap p50", "gap p99", "gap max", "retries", "load before → after"}}
	for _, r := range runs {
		nodeWrites := r.metrics.Requests.Total(func(k RequestKey) bool { return k.IsWrite() && k.Resource == "nodes" })
		main.add(r.name, r.conc, r.rate, r.wall, r.nodesPerSec(), r.perNode(r.own, false), r.perNode(r.own, true),
			trimFloat(nodeWrites/float64(r.nodes)),
			r.gaps.P50, r.gaps.P99, r.gaps.Max, r.retries, r.load[0]+" → "+r.load[1])
	}
	out.WriteString(main.String())

	out.WriteString("\nRequests per node by client (audit log; fixed costs such as the plan's LIST and the access reviews spread over all nodes):\n\n")
	bd := &table{head: []string{"run", "the tool", "other clients in the same window"}}
	for _, r := range runs {
		var others []string
		for agent, cnt := range r.others {
			if cnt.Total(nil) >= float64(r.nodes)/10 {
				others = append(others, fmt.Sprintf("%s: %s", agent, cnt.Breakdown(float64(r.nodes), 5)))
			}
		}
		slices.Sort(others)
		bd.add(r.name, r.own.Breakdown(float64(r.nodes), 0), strings.Join(others, "; "))
	}
	out.WriteString(bd.String())

	out.WriteString("\nThroughput against the apiserver's ceiling for Node delete+create (same cluster, no rate limit):\n\n")
	ct := &table{head: []string{"concurrency", "ceiling nodes/s (writes/s)", "noderecreate nodes/s (% of ceiling)", "nodecidr.Apply nodes/s (% of ceiling)", "apiserver mean POST / DELETE nodes (ceiling run)", "apiserver mean POST / DELETE nodes (noderecreate run)"}}
	for _, conc := range levels {
		cr, tr, ir := ceiling[conc], tool[conc], inproc[conc]
		ct.add(conc,
			fmt.Sprintf("%s (%s)", trimFloat(cr.nodesPerSec()), trimFloat(cr.own.Writes()/cr.wall.Seconds())),
			fmt.Sprintf("%s (%.0f%%)", trimFloat(tr.nodesPerSec()), 100*tr.nodesPerSec()/cr.nodesPerSec()),
			fmt.Sprintf("%s (%.0f%%)", trimFloat(ir.nodesPerSec()), 100*ir.nodesPerSec()/cr.nodesPerSec()),
			serverLatency(cr.metrics), serverLatency(tr.metrics))
	}
	out.WriteString(ct.String())

	speedup := kc.wall.Seconds() / def.wall.Seconds()
	best := tool[1]
	for _, conc := range levels {
		if tool[conc].nodesPerSec() > best.nodesPerSec() {
			best = tool[conc]
		}
	}
	fmt.Fprintf(&out, "\nGoals:\n- 20x faster than the kubectl loop: noderecreate with its defaults (concurrency "+defConc+", rate "+defRate+"/s) took %s vs %s, %.1fx (%s); "+
		"with --rate 0 at concurrency 1 %.1fx (%s); best (%s) %.1fx.\n",
		fmtDur(def.wall), fmtDur(kc.wall), speedup, metOrNot(speedup >= 20),
		kc.wall.Seconds()/tool[1].wall.Seconds(), metOrNot(kc.wall.Seconds()/tool[1].wall.Seconds() >= 20),
		best.name, kc.wall.Seconds()/best.wall.Seconds())
	fmt.Fprintf(&out, "- at most 3 write requests per node: noderecreate defaults %s (%s), kubectl %s.\n",
		trimFloat(def.perNode(def.own, true)), metOrNot(def.perNode(def.own, true) <= 3), trimFloat(kc.perNode(kc.own, true)))
	worst := def.gaps.P99
	for _, conc := range levels {
		worst = max(worst, tool[conc].gaps.P99)
	}
	fmt.Fprintf(&out, "- delete->create gap p99 under 1 s: noderecreate defaults %s (%s), worst noderecreate run %s (%s); kubectl %s.\n",
		fmtDur(def.gaps.P99), metOrNot(def.gaps.P99 < time.Second), fmtDur(worst), metOrNot(worst < time.Second), fmtDur(kc.gaps.P99))
	report(t, "noderewrite", out.String())
}

// flagDefault returns the default of a flag as bin -h prints it: the flag
// package prints "(default X)" at the end of a flag's usage unless X is the
// zero value of its type ("0" for numbers, "" for strings, false).
func flagDefault(t *testing.T, bin, name string) string {
	out, _ := exec.Command(bin, "-h").CombinedOutput() // -h exits 0 or 2 depending on the flag package's mode
	blocks := regexp.MustCompile(`(?m)^  -`).Split(string(out), -1)
	for _, b := range blocks {
		head, _, _ := strings.Cut(b, "\n")
		fields := strings.Fields(head)
		if len(fields) == 0 || fields[0] != name {
			continue
		}
		if m := regexp.MustCompile(`\(default ([^)]*)\)\s*$`).FindStringSubmatch(b); m != nil {
			return m[1]
		}
		if len(fields) > 1 && (strings.HasPrefix(fields[1], "int") || strings.HasPrefix(fields[1], "uint") || fields[1] == "float") {
			return "0"
		}
		return ""
	}
	t.Fatalf("no flag -%s in %s -h:\n%s", name, bin, out)
	return ""
}

// journalPutLatency times n sequential journal records like the ones Apply
// writes before each API call, in the temp dir the journals of the runs use.
func journalPutLatency(t *testing.T, n int) timing.Summary {
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal"))
	require.NoError(t, err)
	defer j.Close()
	rec := map[string]any{"node": "kwok-0000", "phase": "backed-up", "backup": harness.KwokNode("kwok-0000", nil)}
	ds := make([]time.Duration, n)
	for i := range ds {
		start := time.Now()
		require.NoError(t, j.Put(fmt.Sprintf("node/kwok-%04d", i), rec))
		ds[i] = time.Since(start)
	}
	s := timing.Summarize(ds)
	t.Logf("journal put: p50 %s p99 %s max %s", fmtDur(s.P50), fmtDur(s.P99), fmtDur(s.Max))
	return s
}

// kwokLeaseFlags turns on kwok's node Lease renewal (every 10 s, as a
// kubelet does): the harness's kwok runs without it, so kube-controller-manager
// marks every node NotReady after its 50 s grace period and kwok sets them
// Ready again, over and over. CIDRSHIFT_PERF_KWOK_LEASE=0 keeps the harness's
// behaviour; another value is the lease duration in seconds (default 40).
func kwokLeaseFlags(t *testing.T) []string {
	if s := envInt(t, "CIDRSHIFT_PERF_KWOK_LEASE", 40); s > 0 {
		return []string{fmt.Sprintf("--node-lease-duration-seconds=%d", s)}
	}
	return nil
}

func metOrNot(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func serverLatency(m *Metrics) string {
	return fmtDur(m.Latency[RequestKey{Verb: "POST", Resource: "nodes"}].Mean()) + " / " +
		fmtDur(m.Latency[RequestKey{Verb: "DELETE", Resource: "nodes"}].Mean())
}

// report logs a markdown section and, when CIDRSHIFT_PERF_OUT names a
// directory, writes it there as <name>.md.
func report(t *testing.T, name, md string) {
	t.Helper()
	t.Logf("\n%s", md)
	if dir := os.Getenv("CIDRSHIFT_PERF_OUT"); dir != "" {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".md"), []byte(md), 0o644))
	}
}

// unthrottled is an admin clientset without client-side rate limiting.
func unthrottled(t *testing.T, c *harness.Cluster, agent string) kubernetes.Interface {
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = agent
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return cs
}

// parallel runs f(0..n-1) on conc goroutines and fails on the first error.
func parallel(t *testing.T, n, conc int, f func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errs <- fmt.Errorf("item %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func waitReady(t *testing.T, cs kubernetes.Interface, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		list, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{ResourceVersion: "0"})
		require.NoError(t, err)
		ready := 0
		for _, node := range list.Items {
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes Ready after %s", ready, n, timeout)
		}
		time.Sleep(time.Second)
	}
}

// quiesce waits (up to 30 s) until nobody writes Nodes for two seconds:
// kube-controller-manager patches every node the previous run created and
// lags behind a fast run, and a node it patches after the next run's LIST
// costs that run a refused delete and a read.
func (e *rewriteEnv) quiesce(t *testing.T) {
	nodeWrites := func() float64 {
		m, err := ScrapeAPIServer(t.Context(), e.cs.CoreV1().RESTClient())
		require.NoError(t, err)
		return m.Requests.Total(func(k RequestKey) bool { return k.Resource == "nodes" && k.IsWrite() })
	}
	deadline := time.Now().Add(30 * time.Second)
	last := nodeWrites()
	for time.Now().Before(deadline) {
		time.Sleep(2 * time.Second)
		now := nodeWrites()
		if now == last {
			return
		}
		last = now
	}
	t.Logf("Nodes still written after 30 s (%v writes so far); measuring anyway", last)
}

// measure runs f and attributes what the apiserver served meanwhile.
// f returns the delete→create gaps and the number of retries.
func (e *rewriteEnv) measure(t *testing.T, name, agent string, conc int, rate string, f func() (timing.Summary, int)) *rewriteRun {
	t.Helper()
	ctx := t.Context()
	_, off, err := ReadAudit(e.auditPath, e.auditOff)
	require.NoError(t, err)
	r := &rewriteRun{name: name, agent: agent, conc: conc, rate: rate, nodes: e.n}
	e.quiesce(t)
	r.load[0] = LoadAvg()
	before, err := ScrapeAPIServer(ctx, e.cs.CoreV1().RESTClient())
	require.NoError(t, err)
	start := time.Now()
	r.gaps, r.retries = f()
	r.wall = time.Since(start)
	after, err := ScrapeAPIServer(ctx, e.cs.CoreV1().RESTClient())
	require.NoError(t, err)
	r.load[1] = LoadAvg()
	r.metrics = after.Sub(before)
	time.Sleep(time.Second) // the audit line of the last response may trail it
	byAgent, off, err := ReadAudit(e.auditPath, off)
	require.NoError(t, err)
	e.auditOff = off
	r.own = byAgent[agent]
	if r.own == nil {
		r.own = Counts{}
	}
	delete(byAgent, agent)
	r.others = byAgent
	if agent != "" {
		e.cur = e.next()
	}
	t.Logf("%s: %s, %.1f nodes/s, tool %s req/node (%s writes), gap p50 %s p99 %s max %s, %d retries, load %s -> %s",
		name, fmtDur(r.wall), r.nodesPerSec(), trimFloat(r.perNode(r.own, false)), trimFloat(r.perNode(r.own, true)),
		fmtDur(r.gaps.P50), fmtDur(r.gaps.P99), fmtDur(r.gaps.Max), r.retries, r.load[0], r.load[1])
	return r
}

// rawRewrite is the apiserver's ceiling: each node deleted and created again
// with the other range's podCIDR by a bare client, no reads, no journal.
func (e *rewriteEnv) rawRewrite(t *testing.T, conc int) (timing.Summary, int) {
	ctx := t.Context()
	cs := unthrottled(t, e.c, "cidrshift-perf-raw")
	list, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, e.n)
	gaps := make([]time.Duration, e.n)
	to := e.next()
	parallel(t, e.n, conc, func(i int) error {
		old := &list.Items[i]
		idx := 0
		if _, err := fmt.Sscanf(old.Name, "kwok-%d", &idx); err != nil {
			return err
		}
		n := old.DeepCopy()
		n.ResourceVersion, n.UID, n.CreationTimestamp, n.ManagedFields = "", "", metav1.Time{}, nil
		n.Spec.PodCIDR = rewriteCIDR(to, idx)
		n.Spec.PodCIDRs = []string{n.Spec.PodCIDR}
		if err := cs.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		deleted := time.Now()
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return err
		}
		gaps[i] = time.Since(deleted)
		return nil
	})
	return timing.Summarize(gaps), 0
}

// noderecreateOutput is the part of `noderecreate -o json` read here.
type noderecreateOutput struct {
	Result struct {
		Changed []string            `json:"changed"`
		Gaps    nodecidr.GapSummary `json:"gaps"`
	} `json:"result"`
	Verify struct {
		OK bool `json:"ok"`
	} `json:"verify"`
}

var (
	retryLine = regexp.MustCompile(`(?m)^\S+\s+\S+: retrying.*$`)
	numbers   = regexp.MustCompile(`kwok-\d+|[0-9a-f]{8}-[0-9a-f-]{27}|\d+`)
)

// retryReasons groups retry event lines by their text with names and numbers blanked.
func retryReasons(lines []string) string {
	n := map[string]int{}
	var order []string
	for _, l := range lines {
		_, msg, _ := strings.Cut(l, ": retrying")
		msg = numbers.ReplaceAllString(msg, "N")
		if len(msg) > 160 {
			msg = msg[:160] + "..."
		}
		if n[msg] == 0 {
			order = append(order, msg)
		}
		n[msg]++
	}
	parts := make([]string, len(order))
	for i, m := range order {
		parts[i] = fmt.Sprintf("%dx%q", n[m], m)
	}
	return strings.Join(parts, "; ")
}

// noderecreate runs the example binary: rebase every node to the other range.
func (e *rewriteEnv) noderecreate(t *testing.T, bin string, extra ...string) (timing.Summary, int) {
	args := append([]string{"--kubeconfig", e.c.AdminKubeconfig(), "--from", e.cur, "--to", e.next(),
		"--apply", "--journal", filepath.Join(t.TempDir(), "journal"), "-o", "json"}, extra...)
	cmd := exec.CommandContext(t.Context(), bin, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "noderecreate %s\nstderr (tail): %s", strings.Join(args, " "), tail(stderr.String(), 3000))
	var out noderecreateOutput
	require.NoError(t, json.Unmarshal([]byte(stdout.String()), &out))
	require.Len(t, out.Result.Changed, e.n)
	require.True(t, out.Verify.OK)
	g := out.Result.Gaps
	retries := retryLine.FindAllString(stderr.String(), -1)
	if len(retries) > 0 {
		t.Logf("noderecreate %s: retries: %s", strings.Join(extra, " "), retryReasons(retries))
	}
	return timing.Summary{Count: g.Count, P50: g.P50, P99: g.P99, Max: g.Max}, len(retries)
}

// applyInProcess plans and applies the rebase with the nodecidr package and
// a client without client-side throttling.
func (e *rewriteEnv) applyInProcess(t *testing.T, conc int) (timing.Summary, int) {
	ctx := t.Context()
	cs := unthrottled(t, e.c, "cidrshift-perf-apply")
	plan, err := nodecidr.MakePlan(ctx, cs, nodecidr.PlanOptions{Mode: nodecidr.ModeRebase,
		Rebase: []nodecidr.RebasePair{{From: netip.MustParsePrefix(e.cur), To: netip.MustParsePrefix(e.next())}}})
	require.NoError(t, err)
	require.Len(t, plan.Steps, e.n)
	var retries atomic.Int64
	var mu sync.Mutex
	var reasons []string
	journalDir := filepath.Join(t.TempDir(), "journal")
	res, err := nodecidr.Apply(ctx, cs, plan, nodecidr.ApplyOptions{
		JournalDir:  journalDir,
		Concurrency: conc,
		OnEvent: func(ev nodecidr.Event) {
			if ev.Phase == nodecidr.PhaseRetrying {
				retries.Add(1)
				mu.Lock()
				reasons = append(reasons, ev.String())
				mu.Unlock()
			}
		},
	})
	require.NoError(t, err)
	require.Len(t, res.Changed, e.n)
	if len(reasons) > 0 {
		t.Logf("nodecidr.Apply concurrency %d: retries: %s", conc, retryReasons(reasons))
	}
	v, err := nodecidr.Verify(ctx, cs, plan, nodecidr.VerifyOptions{JournalDir: journalDir})
	require.NoError(t, err)
	require.True(t, v.OK, "%+v", v.Findings)
	return timing.Summary{Count: res.Gaps.Count, P50: res.Gaps.P50, P99: res.Gaps.P99, Max: res.Gaps.Max}, int(retries.Load())
}

func (e *rewriteEnv) kubectlRun(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.kubectl, append([]string{"--kubeconfig", e.c.AdminKubeconfig()}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+e.home)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// kubectlLoop is the users' procedure from the field stories, one node after
// the other:
//
//	kubectl get node $N -o yaml > $N.yaml
//	sed -i -e 's#OLD#NEW#g' -e '/^  uid:/d' -e '/^  resourceVersion:/d' -e '/^  creationTimestamp:/d' $N.yaml
//	kubectl delete node $N
//	kubectl apply -f $N.yaml
//
// The gap is from the end of `kubectl delete` to the end of `kubectl apply`.
func (e *rewriteEnv) kubectlLoop(t *testing.T) (timing.Summary, int) {
	ctx := t.Context()
	dir := t.TempDir()
	to := e.next()
	gaps := make([]time.Duration, 0, e.n)
	for i := range e.n {
		name := rewriteNodeName(i)
		file := filepath.Join(dir, name+".yaml")
		y, err := e.kubectlRun(ctx, "get", "node", name, "-o", "yaml")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(file, []byte(y), 0o600))
		oldC, newC := rewriteCIDR(e.cur, i), rewriteCIDR(to, i)
		sed := exec.CommandContext(ctx, "sed", "-i", "-e", "s#"+strings.ReplaceAll(oldC, ".", `\.`)+"#"+newC+"#g",
			"-e", "/^  uid:/d", "-e", "/^  resourceVersion:/d", "-e", "/^  creationTimestamp:/d", file)
		out, err := sed.CombinedOutput()
		require.NoError(t, err, "sed: %s", out)
		_, err = e.kubectlRun(ctx, "delete", "node", name)
		require.NoError(t, err)
		deleted := time.Now()
		_, err = e.kubectlRun(ctx, "apply", "-f", file)
		require.NoError(t, err)
		gaps = append(gaps, time.Since(deleted))
	}
	return timing.Summarize(gaps), 0
}
