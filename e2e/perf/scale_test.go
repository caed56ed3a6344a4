package perf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/nodecidr"
)

const (
	scaleNodes       = 5000
	scalePodsPerNode = 30 // 150,000 pods
)

// doctorSummary is the part of `doctor -o json` checked here.
type doctorSummary struct {
	Audit struct {
		Nodes    int                `json:"nodes"`
		Pods     int                `json:"pods"`
		Findings []nodecidr.Finding `json:"findings"`
	} `json:"audit"`
	FixPlan *struct {
		Steps []json.RawMessage `json:"steps"`
	} `json:"fixPlan"`
	FlagsSource string `json:"flagsSource"`
}

func findingKinds(fs []nodecidr.Finding) string {
	n := map[nodecidr.FindingKind]int{}
	var order []nodecidr.FindingKind
	for _, f := range fs {
		if n[f.Kind] == 0 {
			order = append(order, f.Kind)
		}
		n[f.Kind]++
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%s %d", k, n[k])
	}
	return strings.Join(parts, ", ")
}

// TestScaleOffline runs examples/doctor on a generated `kubectl get
// nodes,pods -A -o yaml` dump of 5,000 nodes and 150,000 pods, realistic
// (about 3 KB a pod, as kubectl prints a running Deployment pod) and minimal
// (only the fields the audit reads), and on the realistic one as `-o json`,
// under /usr/bin/time -v. Goal: under 2 s and 300 MB.
func TestScaleOffline(t *testing.T) {
	requirePerf(t)
	ctx := t.Context()
	doctor := buildExample(t, "doctor")
	nodes := envInt(t, "CIDRSHIFT_PERF_SCALE_NODES", scaleNodes)
	limit := envInt(t, "CIDRSHIFT_PERF_MEM_LIMIT_MB", 8192)
	dir := t.TempDir()
	var out strings.Builder
	fmt.Fprintf(&out, "## doctor on an offline dump: %d nodes, %d pods (v1 List, `kubectl get nodes,pods -A -o yaml|json` style), %s\n\n",
		nodes, nodes*scalePodsPerNode, machine())
	tbl := &table{head: []string{"dump", "file size", "command", "exit", "wall", "user+sys CPU", "max RSS", "goal (< 2 s, < 300 MB)", "load before → after"}}
	for _, v := range []struct {
		name    string
		minimal bool
		json    bool
	}{{"minimal pods", true, false}, {"realistic pods", false, false}, {"realistic pods, JSON", false, true}} {
		ext, write := ".yaml", WriteDump
		if v.json {
			ext, write = ".json", WriteDumpJSON
		}
		path := filepath.Join(dir, strings.NewReplacer(" ", "-", ",", "").Replace(v.name)+ext)
		f, err := os.Create(path)
		require.NoError(t, err)
		start := time.Now()
		size, err := write(f, DumpOptions{Nodes: nodes, PodsPerNode: scalePodsPerNode, Minimal: v.minimal})
		require.NoError(t, err)
		require.NoError(t, f.Close())
		t.Logf("%s: wrote %s (%.0f MiB) in %s", v.name, path, float64(size)/(1<<20), time.Since(start).Round(time.Millisecond))
		for _, args := range [][]string{{"-f", path}, {"-f", path, "-o", "json"}} {
			load := LoadAvg()
			r := runTimeVLimited(ctx, t, limit, doctor, args...)
			cmd := "doctor " + strings.Join(args, " ")
			cmd = strings.ReplaceAll(cmd, path, filepath.Base(path))
			if r.Exit != 1 {
				// Out of memory under the limit, most likely: report it.
				msg := lastLine(r.Stderr, "Command exited") + lastLine(r.Stderr, "fatal error") + lastLine(r.Stderr, "doctor:")
				t.Logf("%s: %s: exit %d under a %d MiB address-space limit: %s", v.name, cmd, r.Exit, limit, msg)
				tbl.add(v.name, fmt.Sprintf("%.0f MiB", float64(size)/(1<<20)), "`"+cmd+"`", fmt.Sprintf("%d (%s)", r.Exit, msg), r.Wall, r.User+r.System,
					mib(r.MaxRSSKB)+fmt.Sprintf(" (limit %d MiB)", limit), "NOT met", load+" → "+LoadAvg())
				continue
			}
			if len(args) == 4 {
				var s doctorSummary
				require.NoError(t, json.Unmarshal(r.Stdout, &s))
				require.Equal(t, nodes, s.Audit.Nodes)
				require.NotNil(t, s.FixPlan)
				t.Logf("%s: audit %d nodes, %d pods; findings: %s; fix plan %d steps; flags from %s",
					v.name, s.Audit.Nodes, s.Audit.Pods, findingKinds(s.Audit.Findings), len(s.FixPlan.Steps), s.FlagsSource)
			} else {
				require.Contains(t, string(r.Stdout), fmt.Sprintf("%d nodes", nodes))
			}
			ok := r.Wall < 2*time.Second && r.MaxRSSKB < 300*1024
			tbl.add(v.name, fmt.Sprintf("%.0f MiB", float64(size)/(1<<20)), "`"+cmd+"`", r.Exit, r.Wall, r.User+r.System, mib(r.MaxRSSKB), metOrNot(ok), load+" → "+LoadAvg())
			t.Logf("%s: %s: wall %s, cpu %s, max RSS %s", v.name, cmd, fmtDur(r.Wall), fmtDur(r.User+r.System), mib(r.MaxRSSKB))
		}
	}
	out.WriteString(tbl.String())
	report(t, "scale-offline", out.String())
}

// TestScaleLive runs doctor and a noderecreate --fix plan against a real
// control plane holding 5,000 kwok nodes and CIDRSHIFT_PERF_PODS (default
// 20,000) bare pods bound to them, under /usr/bin/time -v. It waits at most
// CIDRSHIFT_PERF_POD_WAIT_MIN minutes (default 20) for kwok to run the pods
// and reports how many got an IP. The nodes have the
// dump's podCIDRs and defects (duplicates, missing podCIDRs: those get one
// from kube-controller-manager); kwok makes the nodes Ready, renews their
// Leases every 10 s (see kwokLeaseFlags), and runs the pods with IPs from their node's podCIDR.
func TestScaleLive(t *testing.T) {
	requirePerf(t)
	ctx := t.Context()
	nNodes := envInt(t, "CIDRSHIFT_PERF_SCALE_NODES", scaleNodes)
	nPods := envInt(t, "CIDRSHIFT_PERF_PODS", 20000)
	const serviceCIDR = "10.96.0.0/16"
	c := harness.Start(t, harness.Options{ClusterCIDR: DumpClusterCIDR, NodeCIDRMaskSize: 24, ServiceCIDR: serviceCIDR,
		ExtraFlags: map[harness.Component][]string{harness.Kwok: kwokLeaseFlags(t)}})
	doctor := buildExample(t, "doctor")
	noderecreate := buildExample(t, "noderecreate")
	cs := unthrottled(t, c, "cidrshift-perf-setup")

	start := time.Now()
	parallel(t, nNodes, 32, func(i int) error {
		n := harness.KwokNode(DumpNodeName(i), map[string]string{"pool": fmt.Sprintf("pool-%d", i%7)})
		if a, b, ok := DumpSubnet(i); ok {
			n.Spec.PodCIDR = fmt.Sprintf("10.%d.%d.0/24", a, b)
			n.Spec.PodCIDRs = []string{n.Spec.PodCIDR}
		}
		_, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		return err
	})
	nodesCreated := time.Since(start)
	t.Logf("%d nodes created in %s (load %s)", nNodes, nodesCreated.Round(time.Millisecond), LoadAvg())
	const namespaces = 20
	parallel(t, namespaces, 4, func(i int) error {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns-%d", i)}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		for {
			_, err := cs.CoreV1().ServiceAccounts(fmt.Sprintf("ns-%d", i)).Get(ctx, "default", metav1.GetOptions{})
			if err == nil || !apierrors.IsNotFound(err) {
				return err
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	podStart := time.Now()
	falseVal := false
	parallel(t, nPods, 32, func(k int) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", k%namespaces), Name: fmt.Sprintf("pod-%06d", k), Labels: map[string]string{"app": fmt.Sprintf("app-%d", k%400)}},
			Spec: corev1.PodSpec{
				NodeName:                     DumpNodeName(k % nNodes),
				AutomountServiceAccountToken: &falseVal,
				Containers:                   []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			},
		}
		_, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	t.Logf("%d pods created in %s (load %s)", nPods, time.Since(podStart).Round(time.Millisecond), LoadAvg())
	running := waitPodsRunning(t, cs, nPods, time.Duration(envInt(t, "CIDRSHIFT_PERF_POD_WAIT_MIN", 20))*time.Minute)
	setup := time.Since(start)
	t.Logf("%d of %d pods Running with an IP; setup took %s (load %s)", running, nPods, setup.Round(time.Second), LoadAvg())

	// Background: kwok's lease renewals and node/pod status.
	bg0, err := ScrapeAPIServer(ctx, cs.CoreV1().RESTClient())
	require.NoError(t, err)
	time.Sleep(15 * time.Second)
	bg1, err := ScrapeAPIServer(ctx, cs.CoreV1().RESTClient())
	require.NoError(t, err)
	bg := bg1.Sub(bg0)

	var out strings.Builder
	fmt.Fprintf(&out, "## doctor and plan against a live cluster: %d kwok nodes (kwok flags %q), %d pods (%d Running with an IP), kube-apiserver v%s, %s\n\n",
		nNodes, kwokLeaseFlags(t), nPods, running, c.Binaries().K8sVersion, machine())
	fmt.Fprintf(&out, "Setup (nodes and pods created 32 at a time, pods run by kwok): %s. Background while idle: %.0f requests/s, %.0f writes/s (kwok renews each node's Lease every 10 s).\n\n",
		setup.Round(time.Second), bg.Requests.Total(nil)/15, bg.Requests.Writes()/15)
	tbl := &table{head: []string{"command", "exit", "wall", "user+sys CPU", "max RSS", "apiserver requests (LIST nodes / LIST pods)", "apiserver mean time per LIST nodes / pods page", "load before → after"}}
	common := []string{"--kubeconfig", c.AdminKubeconfig(), "--cluster-cidr", DumpClusterCIDR, "--node-mask", "24", "--service-cidr", serviceCIDR}
	cmds := []struct {
		bin  string
		name string
		args []string
		exit int
	}{
		{doctor, "doctor", common, 1},
		{doctor, "doctor", append(append([]string(nil), common...), "-o", "json"), 1},
		{doctor, "doctor", append(append([]string(nil), common...), "--pods=false"), 1},
		{noderecreate, "noderecreate", append(append([]string(nil), common...), "--fix", "-o", "json"), 0},
	}
	for _, cmd := range cmds {
		for rep := range 2 {
			load := LoadAvg()
			m0, err := ScrapeAPIServer(ctx, cs.CoreV1().RESTClient())
			require.NoError(t, err)
			r := runTimeV(ctx, t, cmd.bin, cmd.args...)
			m1, err := ScrapeAPIServer(ctx, cs.CoreV1().RESTClient())
			require.NoError(t, err)
			require.Equal(t, cmd.exit, r.Exit, "%s: stderr %s", cmd.name, tail(r.Stderr, 2000))
			delta := m1.Sub(m0)
			d := delta.Requests
			pageTime := fmtDur(delta.Latency[RequestKey{Verb: "LIST", Resource: "nodes"}].Mean()) + " / " +
				fmtDur(delta.Latency[RequestKey{Verb: "LIST", Resource: "pods"}].Mean())
			lists := fmt.Sprintf("%s (%s / %s)", trimFloat(d.Total(func(k RequestKey) bool { return k.Verb == "LIST" })),
				trimFloat(d[RequestKey{Verb: "LIST", Resource: "nodes"}]), trimFloat(d[RequestKey{Verb: "LIST", Resource: "pods"}]))
			if cmd.name == "doctor" && len(cmd.args) > len(common) && cmd.args[len(common)] == "-o" {
				var s doctorSummary
				require.NoError(t, json.Unmarshal(r.Stdout, &s))
				require.Equal(t, nNodes, s.Audit.Nodes)
				t.Logf("doctor -o json: audit %d nodes, %d pods; findings: %s", s.Audit.Nodes, s.Audit.Pods, findingKinds(s.Audit.Findings))
			}
			line := cmd.name + " " + strings.Join(cmd.args, " ")
			line = strings.ReplaceAll(line, c.AdminKubeconfig(), "admin.kubeconfig")
			tbl.add("`"+line+"`"+fmt.Sprintf(" (run %d)", rep+1), r.Exit, r.Wall, r.User+r.System, mib(r.MaxRSSKB), lists, pageTime, load+" → "+LoadAvg())
			t.Logf("%s: wall %s, cpu %s, max RSS %s, LISTs %s", line, fmtDur(r.Wall), fmtDur(r.User+r.System), mib(r.MaxRSSKB), lists)
		}
	}
	out.WriteString(tbl.String())
	report(t, "scale-live", out.String())
}

// lastLine returns the last line of s that contains substr, and "" if none.
func lastLine(s, substr string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], substr) {
			return strings.TrimSpace(lines[i]) + " "
		}
	}
	return ""
}

// waitPodsRunning waits until want pods are Running with an IP (or timeout)
// and returns how many are.
func waitPodsRunning(t *testing.T, cs kubernetes.Interface, want int, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		running := 0
		cont := ""
		for {
			list, err := cs.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{Limit: 5000, Continue: cont})
			require.NoError(t, err)
			for _, p := range list.Items {
				if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
					running++
				}
			}
			if cont = list.Continue; cont == "" {
				break
			}
		}
		if running >= want || time.Now().After(deadline) {
			return running
		}
		t.Logf("%d of %d pods Running (load %s)", running, want, LoadAvg())
		time.Sleep(30 * time.Second) // each look lists every pod
	}
}

// BenchmarkDoctorDecode is doctor's offline path in-process (stream the dump
// through nodecidr.ReadDump, audit it, plan the fix), for the YAML and the
// JSON form of the dump, for profiles:
//
//	cd e2e && CIDRSHIFT_PERF=1 go test -run '^$' -bench DoctorDecode -benchtime 1x -count 1 \
//	    -cpuprofile cpu.out -memprofile mem.out ./perf
func BenchmarkDoctorDecode(b *testing.B) {
	requirePerf(b)
	for _, v := range []struct {
		name    string
		minimal bool
		json    bool
	}{{"pods=minimal/yaml", true, false}, {"pods=realistic/yaml", false, false}, {"pods=minimal/json", true, true}, {"pods=realistic/json", false, true}} {
		b.Run(v.name, func(b *testing.B) {
			data := generatedDump(b, v.minimal, v.json)
			layout := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix(DumpClusterCIDR)}, NodeMasks: []int{24},
				ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix(DumpServiceCIDR)}}
			var steps atomic.Int64
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				d, err := nodecidr.ReadDump(b.Context(), bytes.NewReader(data))
				if err != nil {
					b.Fatal(err)
				}
				r := nodecidr.AuditNodes(d.Nodes, d.Pods, nodecidr.AuditOptions{Layout: layout, Pods: true})
				p, err := nodecidr.PlanNodes(d.Nodes, nodecidr.PlanOptions{Mode: nodecidr.ModeFix, Layout: layout})
				if err != nil || r.Nodes != scaleNodes || len(d.ControlPlanePods) != 1 {
					b.Fatal(err, r.Nodes, len(d.ControlPlanePods))
				}
				steps.Store(int64(len(p.Steps)))
			}
			b.ReportMetric(float64(steps.Load()), "fixsteps")
		})
	}
}

var dumps sync.Map // "minimal=…,json=…" → []byte

// generatedDump returns the 5,000-node dump, written once per test binary
// (the realistic JSON one takes a minute to write).
func generatedDump(b *testing.B, minimal, asJSON bool) []byte {
	key := fmt.Sprintf("minimal=%t,json=%t", minimal, asJSON)
	if d, ok := dumps.Load(key); ok {
		return d.([]byte)
	}
	var buf bytes.Buffer
	write := WriteDump
	if asJSON {
		write = WriteDumpJSON
	}
	_, err := write(&buf, DumpOptions{Nodes: scaleNodes, PodsPerNode: scalePodsPerNode, Minimal: minimal})
	require.NoError(b, err)
	dumps.Store(key, buf.Bytes())
	return buf.Bytes()
}

// TestWriteDump checks that the generated dump decodes as doctor decodes it,
// with the defects it promises.
func TestWriteDump(t *testing.T) {
	requirePerf(t)
	for _, v := range []struct {
		minimal, json bool
	}{{false, false}, {true, false}, {false, true}, {true, true}} {
		var buf bytes.Buffer
		write := WriteDump
		if v.json {
			write = WriteDumpJSON
		}
		_, err := write(&buf, DumpOptions{Nodes: 600, PodsPerNode: 3, Minimal: v.minimal})
		require.NoError(t, err)
		d, err := nodecidr.ReadDump(t.Context(), bytes.NewReader(buf.Bytes()))
		require.NoError(t, err)
		require.Len(t, d.Nodes, 600)
		require.Len(t, d.Pods, 600*3+1)
		require.Equal(t, "10.64.0.0/24", d.Nodes[1].Spec.PodCIDR, "node 1 shares node 0's subnet")
		require.Empty(t, d.Nodes[7].Spec.PodCIDRs, "node 7 has no podCIDR")
		require.Equal(t, []string{"10.66.1.0/24"}, d.Nodes[513].Spec.PodCIDRs)
		require.Len(t, d.ControlPlanePods, 1)
		require.Equal(t, "kube-controller-manager", d.ControlPlanePods[0].Labels["component"])
		require.Equal(t, d.ControlPlanePods[0].Name, d.Pods[0].Name)
		p := d.Pods[1+513*3+2]
		require.Equal(t, DumpNodeName(513), p.NodeName)
		require.Equal(t, []string{"10.66.1.4"}, p.IPs)
		require.Equal(t, corev1.PodRunning, p.Phase)
		layout := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix(DumpClusterCIDR)}, NodeMasks: []int{24}}
		r := nodecidr.AuditNodes(d.Nodes, d.Pods, nodecidr.AuditOptions{Layout: layout, Pods: true})
		require.NotEmpty(t, r.NodesWith(nodecidr.FindingMissing))
		require.NotEmpty(t, r.NodesWith(nodecidr.FindingPodIPOutside))
		t.Logf("minimal=%t json=%t: %d bytes, findings: %s", v.minimal, v.json, buf.Len(), findingKinds(r.Findings))
	}
}
