package dataplane

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// pairRound is one round of probes between every two pods: which pairs
// answered, and each pod's node.
type pairRound struct {
	at   time.Time
	ok   map[[2]string]bool
	node map[string]string
}

// pairProber probes every pod from every other pod, a round every 100 ms,
// with the pods the emulated kubelets run at the time. It only records.
type pairProber struct {
	mu     sync.Mutex
	rounds []pairRound
}

func startPairProber(ctx context.Context, k *mbbKubelet) (*pairProber, func()) {
	p := &pairProber{}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			pods := k.current()
			r := pairRound{at: time.Now(), ok: map[[2]string]bool{}, node: map[string]string{}}
			var mu sync.Mutex
			var pw sync.WaitGroup
			for _, from := range pods {
				r.node[from.Name] = from.Node.Name
				for _, to := range pods {
					if from == to {
						continue
					}
					pw.Add(1)
					go func() {
						defer pw.Done()
						rep, err := Probe(from.NS, netip.AddrPortFrom(to.IP, EchoPort), 300*time.Millisecond)
						mu.Lock()
						r.ok[[2]string{from.Name, to.Name}] = err == nil && rep.Responder == to.Name
						mu.Unlock()
					}()
				}
			}
			pw.Wait()
			p.mu.Lock()
			p.rounds = append(p.rounds, r)
			p.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return p, func() { cancel(); wg.Wait() }
}

// seed001Fix is one fix procedure's measurements.
type seed001Fix struct {
	name string
	took time.Duration
	// window per moved node: from the first moment a pair that reached one
	// of its old pods fails, until every pod it runs is new and answers
	// the pod on the untouched node a.
	window map[string]time.Duration
	// lost are the pairs of pods on nodes not being moved that answered
	// throughout the second before the fix and failed at some time during
	// it, with the number of failed rounds.
	lost []string
	// steady are those pairs.
	steady []string
	// spans are the windows' ends, from the procedure's start.
	spans []string
}

// measure reads the prober's rounds from start (the procedure's start) on:
// a moved node's window opens at the first round in which a pair that
// reached one of its old pods in the round before fails, or that pod is
// gone (evicted or deleted), and closes at the first round in which all its
// pods are new and observer reaches each.
func (p *pairProber) measure(f *seed001Fix, start time.Time, moved []string, old map[string][]string, unmoved []string, observer string) {
	p.mu.Lock()
	rounds := slices.Clone(p.rounds)
	p.mu.Unlock()
	i0 := sort.Search(len(rounds), func(i int) bool { return !rounds[i].at.Before(start) })
	f.window = map[string]time.Duration{}
	for _, node := range moved {
		var stop, back time.Time
		var why string
		for i := i0; i < len(rounds) && back.IsZero(); i++ {
			r := rounds[i]
			if stop.IsZero() {
				// A pair that reached an old pod in the round before fails
				// now, or the old pod is gone.
				prev := rounds[max(i-1, 0)]
				for pair, ok := range prev.ok {
					if !ok || !slices.Contains(old[node], pair[1]) {
						continue
					}
					_, target := r.node[pair[1]]
					_, source := r.node[pair[0]]
					if !target || (source && !r.ok[pair]) {
						stop, why = r.at, pair[0]+"->"+pair[1]
					}
				}
				continue
			}
			var mine []string
			for pod, n := range r.node {
				if n == node {
					mine = append(mine, pod)
				}
			}
			fresh := len(mine) >= len(old[node]) && !slices.ContainsFunc(mine, func(pod string) bool { return slices.Contains(old[node], pod) })
			if fresh && !slices.ContainsFunc(mine, func(pod string) bool { return !r.ok[[2]string{observer, pod}] }) {
				back = r.at
			}
		}
		if !stop.IsZero() && !back.IsZero() {
			f.window[node] = back.Sub(stop)
			f.spans = append(f.spans, fmt.Sprintf("%s: from +%s (%s) to +%s", node, stop.Sub(start).Round(10*time.Millisecond), why, back.Sub(start).Round(10*time.Millisecond)))
		}
	}
	for _, a := range unmoved {
		for _, b := range unmoved {
			if a == b {
				continue
			}
			pair := [2]string{a, b}
			steady, seen := true, false
			for i := i0 - 1; i >= 0 && start.Sub(rounds[i].at) < time.Second; i-- {
				ok, probed := rounds[i].ok[pair]
				seen = seen || probed
				steady = steady && (!probed || ok)
			}
			if !seen || !steady {
				continue
			}
			f.steady = append(f.steady, a+"->"+b)
			failed := 0
			for _, r := range rounds[i0:] {
				if ok, probed := r.ok[pair]; probed && !ok {
					failed++
				}
			}
			if failed > 0 {
				f.lost = append(f.lost, fmt.Sprintf("%s->%s: %d rounds failed", a, b, failed))
			}
		}
	}
}

// TestSeed001RunbookAndAgentsVsManualSteps fixes seed 001 twice, each time
// on a fresh cluster: flanneld v0.28.10 (kube subnet manager, vxlan) on six
// nodes, where c, d and e registered with b's podCIDR (seed 001 had one such
// node; three give three disruption windows per run), a and f are healthy.
// Every node runs one pod, the moved nodes two; a Deployment owns them all.
//
//   - runbook: examples/migrate-flannel-podcidr --fix-only --agents (make-
//     before-break, the default with agents), with examples/nodenet-agent on
//     every node. The test runs no host command: what changes a host is the
//     agents, flanneld (restarted when its node's podCIDR changes, and when
//     the runbook rolls the flannel DaemonSet) and CNI ADD and DEL of the
//     pods the runbook deletes or evicts (the kubelets' and the ReplicaSet's
//     part, played by the test).
//   - manual: seed 001's steps in sequence, node by node: the node rewrite
//     (kubectl get -o yaml | sed | delete | apply, to the subnet the fix
//     plan picks), then flannel.CleanupSteps on the node, as printed by the
//     runbook without agents (the pods' delete through the API, the
//     emulated kubelets replacing them), then kubectl rollout restart of the
//     flannel DaemonSet.
//
// A prober connects every pod to every other pod, a round every 100 ms, the
// whole time. Each moved node's disruption window is measured, from the
// first failure of a pair that reached one of its old pods until all its
// pods are new and answer the pod on a. Both procedures must end with the
// connectivity matrix full (pods and the outside), and the pairs of pods on
// unmoved nodes that answered before the fix must never fail during it.
func TestSeed001RunbookAndAgentsVsManualSteps(t *testing.T) {
	var fixes []seed001Fix
	for _, name := range []string{"runbook", "manual"} {
		t.Run(name, func(t *testing.T) { fixes = append(fixes, testSeed001Fix(t, name == "runbook")) })
	}
	for _, f := range fixes {
		var ws []time.Duration
		var per []string
		for _, n := range slices.Sorted(maps.Keys(f.window)) {
			ws = append(ws, f.window[n])
			per = append(per, fmt.Sprintf("%s %s", n, f.window[n].Round(10*time.Millisecond)))
		}
		slices.Sort(ws)
		t.Logf("RESULT %s: took %s; disruption per moved node: %s (p50 %s, p99 %s); steady pairs of unmoved pods %d, lost %v",
			f.name, f.took.Round(10*time.Millisecond), strings.Join(per, ", "), percentile(ws, 50).Round(10*time.Millisecond),
			percentile(ws, 99).Round(10*time.Millisecond), len(f.steady), f.lost)
		t.Logf("RESULT %s: windows %s", f.name, strings.Join(f.spans, "; "))
	}
}

// percentile is the nearest-rank percentile of sorted ds (0 when empty).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := (p*len(ds)+99)/100 - 1
	return ds[max(0, min(i, len(ds)-1))]
}

func testSeed001Fix(t *testing.T, withRunbook bool) seed001Fix {
	env := NewEnv(t)
	cp, cs, flags := seed001Cluster(t, env)
	ctx := t.Context()
	network := netip.MustParsePrefix("10.244.0.0/16")
	var err error

	var agentBin, agentKubeconfig string
	if withRunbook {
		agentBin = buildExample(t, "nodenet-agent")
		createAgentRBAC(t, cs)
		agentKubeconfig, err = cp.NodeUserKubeconfig(agentIdentity[0], agentIdentity[1:]...)
		require.NoError(t, err)
	}
	k := &mbbKubelet{cs: cs, nodes: map[string]*Node{}, flannel: map[string]string{}, followPodCIDR: withRunbook}
	moved := []string{"c", "d", "e"}
	cidrs := map[string]netip.Prefix{}
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		n, err := env.AddNode(name)
		require.NoError(t, err)
		preset := ""
		if slices.Contains(moved, name) {
			preset = cidrs["b"].String() // the duplicates
		}
		cidrs[name] = createNode(t, cs, n, preset)
		k.nodes[name], k.flannel[name] = n, cidrs[name].String()
	}
	for _, name := range slices.Sorted(maps.Keys(k.nodes)) {
		n := k.nodes[name]
		require.NoError(t, n.StartFlanneld([]string{"NODE_NAME=" + name}, 30*time.Second, flags...))
		_, err = n.WriteCNIConfList()
		require.NoError(t, err)
		if withRunbook {
			_, err = env.StartProc(n.NS, "nodenet-agent-"+name, nil, agentBin, "--node="+name, "--host-root="+n.Dir,
				"--interval=500ms", "--kubeconfig="+agentKubeconfig, "--namespace="+migrate.DefaultAgentNamespace)
			require.NoError(t, err)
		}
	}
	t.Logf("podCIDRs: %v", cidrs)

	// flannel's DaemonSet, as the runbook and kubectl rollout restart find
	// it; its nodeSelector matches no node (no kubelet would run its pods:
	// the test restarts flanneld when it is rolled).
	_, err = cs.AppsV1().DaemonSets(flannel.DefaultNetConfNamespace).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-ds"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "flannel"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "flannel"}},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"cidrshift.test/no-kubelet": "true"},
					Containers: []corev1.Container{{Name: "kube-flannel", Image: "cidrshift.local/flannel"}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	k.owner = webOwner(t, cs)
	old := map[string][]string{}
	var unmoved []string
	for _, name := range slices.Sorted(maps.Keys(k.nodes)) {
		count := 1
		if slices.Contains(moved, name) {
			count = 2
		}
		for i := 1; i <= count; i++ {
			p, err := k.nodes[name].AddPod(ctx, fmt.Sprintf("%s%d", name, i))
			require.NoError(t, err)
			require.NoError(t, k.registerWeb(ctx, p))
			k.web = append(k.web, p)
			if slices.Contains(moved, name) {
				old[name] = append(old[name], p.Name)
			} else {
				unmoved = append(unmoved, p.Name)
			}
		}
	}
	k.replicas = len(k.web)
	before := Check(k.current(), podTargets(k.current()), ProbeOptions{})
	t.Logf("before the fix:\n%s", before)
	require.False(t, before.Full(), "seed 001: the pods of the nodes sharing a podCIDR fail")

	kctx, stopKubelet := context.WithCancel(ctx)
	var kwg sync.WaitGroup
	kwg.Add(1)
	go func() { defer kwg.Done(); k.run(kctx) }()
	defer func() { stopKubelet(); kwg.Wait() }()
	prober, stopProber := startPairProber(ctx, k)
	defer stopProber()
	time.Sleep(2 * time.Second)

	f := seed001Fix{name: "manual steps"}
	start := time.Now()
	if withRunbook {
		f.name = "runbook and agents"
		bin := buildExample(t, "migrate-flannel-podcidr")
		cmd := exec.CommandContext(ctx, bin, "--kubeconfig", cp.AdminKubeconfig(), "--fix-only", "--agents", "--agent-timeout", "60s",
			"--namespace", flannel.DefaultNetConfNamespace, "--flannel-selector", "app=flannel", "--health-timeout", "90s",
			"--poll-interval", "200ms", "--journal", filepath.Join(t.TempDir(), "j"), "--apply")
		out, err := cmd.CombinedOutput()
		t.Logf("runbook output:\n%s", out)
		require.NoError(t, err)
		t.Logf("runbook done at +%s", time.Since(start).Round(10*time.Millisecond))
		h := &migrate.HostAgents{Kube: cs}
		for _, name := range slices.Sorted(maps.Keys(k.nodes)) {
			if st, err := h.Status(ctx, name); err == nil && st != nil {
				t.Logf("agent on %s: generation %d %s: %s", name, st.Generation, st.Phase, strings.Join(st.Actions, "; "))
			}
		}
		// The runbook rolled the DaemonSet: wait for the roll.
		require.Eventually(t, func() bool { k.mu.Lock(); defer k.mu.Unlock(); return k.rolls == 1 }, 90*time.Second, 200*time.Millisecond)
	} else {
		layout := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{network}, NodeMasks: []int{24}}
		plan, err := nodecidr.MakePlan(ctx, cs, nodecidr.PlanOptions{Mode: nodecidr.ModeFix, Layout: layout})
		require.NoError(t, err)
		require.Len(t, plan.Steps, len(moved))
		for _, st := range plan.Steps {
			manualFix(t, cs, k, st.Node, cidrs[st.Node], netip.MustParsePrefix(st.NewPodCIDRs[0]))
		}
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
		_, err = cs.AppsV1().DaemonSets(flannel.DefaultNetConfNamespace).Patch(ctx, "kube-flannel-ds", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool { k.mu.Lock(); defer k.mu.Unlock(); return k.rolls == 1 }, 90*time.Second, 200*time.Millisecond)
	}
	t.Logf("flannel DaemonSet rolled at +%s", time.Since(start).Round(10*time.Millisecond))
	require.Eventually(t, func() bool { return k.settled(ctx) }, 90*time.Second, 200*time.Millisecond, "every pod replaced")
	f.took = time.Since(start)
	end := checkUntil(t, k.current(), podTargets(k.current()), (*Matrix).Full)
	time.Sleep(time.Second) // the prober sees the end state
	stopProber()
	stopKubelet()
	kwg.Wait()
	t.Logf("after the fix (%s, %s):\n%s", f.name, f.took.Round(10*time.Millisecond), end)
	prober.measure(&f, start, moved, old, unmoved, "a1")

	k.mu.Lock()
	assert.Empty(t, k.errs, "the emulated kubelets and controllers")
	k.mu.Unlock()
	assert.True(t, end.Full(), "%s: the matrix is full after the fix:\n%s", f.name, end)
	for _, n := range moved {
		obj, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		require.NoError(t, err)
		assert.NotEqual(t, cidrs["b"].String(), obj.Spec.PodCIDR, "%s left b's podCIDR", n)
		assert.Contains(t, f.window, n, "%s: a disruption window was measured", n)
	}
	assert.NotEmpty(t, f.steady, "some pairs of unmoved pods answered before the fix")
	assert.Empty(t, f.lost, "%s: pods on nodes not being moved lost no exchange (steady pairs %v)", f.name, f.steady)
	return f
}

// manualFix is seed 001's manual procedure on one node: the Node rewritten
// to podCIDR to (get, delete, create), then flannel.CleanupSteps run on the
// node, the pods' delete through the API (the emulated kubelets replace
// them, as their ReplicaSet would).
func manualFix(t *testing.T, cs kubernetes.Interface, k *mbbKubelet, name string, from, to netip.Prefix) {
	t.Helper()
	ctx := t.Context()
	obj, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}))
	obj.ResourceVersion, obj.UID, obj.CreationTimestamp = "", "", metav1.Time{}
	obj.Spec.PodCIDR, obj.Spec.PodCIDRs = to.String(), []string{to.String()}
	_, err = cs.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	require.NoError(t, err)
	n := k.nodes[name]
	steps := flannel.CleanupSteps(flannel.CleanupOptions{
		Node: name, From: flannel.SubnetKey{IPv4: from}, To: flannel.SubnetKey{IPv4: to},
		KubeSubnetManager: true, CNINetwork: n.CNINetwork, SubnetFile: n.SubnetFile,
	})
	r := hostStepRunner{cs: cs, node: n}
	for _, s := range steps {
		if s.Where == "cluster" && strings.HasPrefix(s.Command, "kubectl delete pods --all-namespaces") {
			pods, err := cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
			require.NoError(t, err)
			for _, p := range pods.Items {
				require.NoError(t, cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}))
			}
			require.Eventually(t, func() bool { return k.settled(ctx) }, 60*time.Second, 100*time.Millisecond, "the pods of %s replaced", name)
			continue
		}
		require.NoError(t, r.one(ctx, s), "step %q on %s", s.Command, name)
	}
}
