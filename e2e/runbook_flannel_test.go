package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// Story 2 of FACTS.md, then a Network change, carried out end to end by the
// runbook binary examples/migrate-flannel-podcidr on a real control plane:
// 30 kwok nodes of a kube-subnet-manager flannel cluster (3 duplicate and 2
// missing podCIDRs) are repaired, net-conf.json moves from 10.244.0.0/16 to
// 10.240.0.0/12, and the test plays the operator who restarts
// kube-controller-manager with the new --cluster-cidr when the runbook
// pauses (exit 3).

var (
	flOld = netip.MustParsePrefix("10.244.0.0/16")
	flNew = netip.MustParsePrefix("10.240.0.0/12")
)

const (
	flNodes    = 30
	flReplicas = 60 // two per node
	flApp      = "flweb"
	// flNetConf is kube-flannel.yml's net-conf.json with some extra keys and
	// its own formatting, which the runbook must keep byte for byte.
	flNetConf = "{\n  \"Network\": \"10.244.0.0/16\",\n  \"EnableNFTables\": false,\n  \"Backend\": {\n    \"Type\": \"vxlan\",\n    \"VNI\": 1\n  }\n}\n"
	flCNIConf = `{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
)

// flKillPoints are stderr lines at which the killed variant may die.
var flKillPoints = []string{
	"step 1/5", ": deleted", ": created", "step 2/5", "step 3/5", "step 4/5", "step 5/5",
}

func TestRunbookFlannel(t *testing.T) { flScenario(t, "", false, false) }

// TestRunbookFlannelRewrite also renumbers every node into 10.240.0.0/16
// (--rewrite-nodes), node by node with the health check in between.
func TestRunbookFlannelRewrite(t *testing.T) { flScenario(t, "", true, false) }

// TestRunbookFlannelDualStack is the story in a dual-stack cluster (issue
// 19): net-conf.json also has IPv6Network fd00:10:244::/56, every node with
// a podCIDR also holds an IPv6 subnet (the duplicates' IPv6 subnets are
// their own), and kube-controller-manager's mirror pod shows
// --cluster-cidr=10.244.0.0/16,fd00:10:244::/56. The runbook asks for
// --cluster-cidr=10.240.0.0/12,fd00:10:244::/56, which the real dual-stack
// kube-controller-manager starts with; every node keeps its IPv6 subnet
// (the nodes without a podCIDR get a pair) and a joining node gets a pair.
func TestRunbookFlannelDualStack(t *testing.T) { flScenario(t, "", false, true) }

var flV6 = netip.MustParsePrefix("fd00:10:244::/56")

var flNodeRange = netip.MustParsePrefix("10.240.0.0/16")

// TestRunbookFlannelKilled SIGKILLs the runbook once, at a random point of
// flKillPoints (E2E_FLANNEL_KILL=<point> replays one), and resumes it.
func TestRunbookFlannelKilled(t *testing.T) {
	seed := time.Now().UnixNano()
	kill := flKillPoints[rand.New(rand.NewPCG(uint64(seed), 7)).IntN(len(flKillPoints))]
	if k := os.Getenv("E2E_FLANNEL_KILL"); k != "" { // replay one kill point
		kill = k
	}
	t.Logf("kill point %q (seed %d)", kill, seed)
	flScenario(t, kill, false, false)
}

// flMirrorPod plays the kubelet's mirror pod of a static
// kube-controller-manager, so the runbook can observe its flags.
func flMirrorPod(node string, args []string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "kube-controller-manager-" + node, Namespace: metav1.NamespaceSystem,
			Labels:      map[string]string{"component": "kube-controller-manager", "tier": "control-plane"},
			Annotations: map[string]string{nodecidr.MirrorPodAnnotation: "e2e"},
		},
		Spec: corev1.PodSpec{
			NodeName:    node,
			HostNetwork: true,
			Containers: []corev1.Container{{Name: "kube-controller-manager", Image: "registry.k8s.io/kube-controller-manager:v1.36.3",
				Command: append([]string{"kube-controller-manager"}, args...)}},
		},
	}
}

// flSetMirror replaces the mirror pod, as the kubelet does when the static
// pod's manifest changes. Each generation gets its own name (a suffix), so
// kwok's handling of the old pod's deletion cannot hit the new one.
func flSetMirror(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string, gen int, args []string) {
	t.Helper()
	p := flMirrorPod(node, args)
	if gen > 0 {
		old := p.Name
		if gen > 1 {
			old = fmt.Sprintf("%s-%d", p.Name, gen-1)
		}
		require.NoError(t, cs.CoreV1().Pods(p.Namespace).Delete(ctx, old, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
		p.Name = fmt.Sprintf("%s-%d", p.Name, gen)
	}
	_, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	require.NoError(t, err)
	poll(t, 30*time.Second, "mirror pods settled", func(ctx context.Context) error {
		list, err := cs.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "component=kube-controller-manager"})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].Name != p.Name {
			return fmt.Errorf("%d mirror pods", len(list.Items))
		}
		return nil
	})
}

// flSampler records the Deployment's ready replicas every 100 ms.
type flSampler struct {
	mu         sync.Mutex
	samples    int
	minReady   int32
	unanswered int
	stop, done chan struct{}
}

func flSample(ctx context.Context, cs kubernetes.Interface) *flSampler {
	s := &flSampler{minReady: 1 << 30, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			d, err := cs.AppsV1().Deployments(metav1.NamespaceDefault).Get(rctx, flApp, metav1.GetOptions{})
			cancel()
			s.mu.Lock()
			if err != nil {
				s.unanswered++
			} else {
				s.samples++
				s.minReady = min(s.minReady, d.Status.ReadyReplicas)
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *flSampler) finish() (samples int, minReady int32, unanswered int) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.minReady, s.unanswered
}

func flScenario(t *testing.T, killOn string, rewrite, dual bool) {
	skipInShortMode(t)
	start := time.Now()
	c := harness.Start(t, harness.Options{ClusterCIDR: flOld.String(), NodeCIDRMaskSize: 24, DisableNodeIPAM: true})
	netConf := flNetConf
	if dual {
		netConf = strings.Replace(flNetConf, "  \"EnableNFTables\"", "  \"EnableIPv6\": true,\n  \"IPv6Network\": \""+flV6.String()+"\",\n  \"EnableNFTables\"", 1)
	}
	// v6 is a node's IPv6 subnet in the dual-stack variant: its own, by index.
	v6 := func(n *corev1.Node, i int) *corev1.Node {
		if dual && n.Spec.PodCIDR != "" {
			n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, nodeE2ESubnet(flV6, 64, i).String())
		}
		return n
	}
	ctx := t.Context()
	cs := nodeE2EClient(t, c)
	bin := nodeE2EBuild(t, "migrate-flannel-podcidr")

	// Nodes: node-000..029; 3 duplicates (younger twins of nodes 12, 19,
	// 26) and 2 without podCIDR.
	name := func(i int) string { return fmt.Sprintf("node-%03d", i) }
	dups := map[int]int{5: 12, 11: 19, 17: 26}
	missing := map[int]bool{8: true, 23: true}
	var first, later []*corev1.Node
	for i := range flNodes {
		n := harness.KwokNode(name(i), map[string]string{"e2e.cidrshift.io/index": strconv.Itoa(i)})
		n.Annotations["flannel.alpha.coreos.com/backend-type"] = "vxlan"
		n.Annotations["flannel.alpha.coreos.com/kube-subnet-manager"] = "true"
		n.Annotations["flannel.alpha.coreos.com/public-ip"] = fmt.Sprintf("192.168.0.%d", i+1)
		switch {
		case missing[i]:
			first = append(first, n)
		case dups[i] != 0:
			later = append(later, v6(nodeE2EWithPodCIDR(n, nodeE2ESubnet(flOld, 24, dups[i]).String()), i))
		default:
			first = append(first, v6(nodeE2EWithPodCIDR(n, nodeE2ESubnet(flOld, 24, i).String()), i))
		}
	}
	created := nodeE2ECreateNodes(t, ctx, cs, first)
	var newest time.Time
	for _, n := range created {
		if ts := n.CreationTimestamp.Time; ts.After(newest) {
			newest = ts
		}
	}
	time.Sleep(time.Until(newest.Add(1100 * time.Millisecond))) // twins must be strictly older
	nodeE2ECreateNodes(t, ctx, cs, later)
	nodeE2ESettled(t, cs, flNodes, 2*time.Minute)

	// flannel's ConfigMap, the kube-controller-manager mirror pod, workloads.
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().ConfigMaps("kube-flannel").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-cfg", Namespace: "kube-flannel", Labels: map[string]string{"app": "flannel"}},
		Data:       map[string]string{"net-conf.json": netConf, "cni-conf.json": flCNIConf},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	kcmArgs := func(v4 netip.Prefix) []string {
		if dual {
			return []string{"--allocate-node-cidrs=true", "--cluster-cidr=" + v4.String() + "," + flV6.String(), "--node-cidr-mask-size-ipv4=24",
				"--node-cidr-mask-size-ipv6=64", "--service-cluster-ip-range=" + c.Options().ServiceCIDR}
		}
		return []string{"--allocate-node-cidrs=true", "--cluster-cidr=" + v4.String(), "--node-cidr-mask-size=24", "--service-cluster-ip-range=" + c.Options().ServiceCIDR}
	}
	flSetMirror(t, ctx, cs, name(0), 0, kcmArgs(flOld))
	for i := range flNodes {
		_, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, nodeE2EPod(metav1.NamespaceDefault, "keep-"+name(i), name(i), map[string]string{"app": "keep"}), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err = cs.AppsV1().Deployments(metav1.NamespaceDefault).Create(ctx, nodeE2EDeployment(flApp, flReplicas), metav1.CreateOptions{})
	require.NoError(t, err)
	nodeE2EWaitPodsRunning(t, c, cs, metav1.NamespaceDefault, "app=keep", flNodes, 2*time.Minute)
	deploy := nodeE2EWaitPodsRunning(t, c, cs, metav1.NamespaceDefault, "app="+flApp, flReplicas, 3*time.Minute)
	poll(t, time.Minute, "Deployment ready", func(ctx context.Context) error {
		d, err := cs.AppsV1().Deployments(metav1.NamespaceDefault).Get(ctx, flApp, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != flReplicas {
			return fmt.Errorf("%d ready", d.Status.ReadyReplicas)
		}
		return nil
	})
	before := nodeE2ENodes(t, ctx, cs)
	keepUIDs := map[string]types.UID{}
	keep, err := cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=keep"})
	require.NoError(t, err)
	for _, p := range keep.Items {
		keepUIDs[p.Name] = p.UID
	}
	fixed := map[string]bool{}
	for i := range dups {
		fixed[name(i)] = true
	}
	for i := range missing {
		fixed[name(i)] = true
	}
	deployUIDs := map[string]types.UID{} // pods on nodes the runbook leaves alone
	for _, p := range deploy {
		if !fixed[p.Spec.NodeName] && !rewrite {
			deployUIDs[p.Name] = p.UID
		}
	}
	t.Logf("fixture ready in %s", time.Since(start).Round(time.Millisecond))

	sampler := flSample(ctx, cs)
	journalDir := filepath.Join(t.TempDir(), "journal")
	args := []string{"--kubeconfig", c.AdminKubeconfig(), "--network", flNew.String(), "--journal", journalDir, "--apply", "--poll-interval", "200ms"}
	if rewrite {
		args = append(args, "--rewrite-nodes", "--node-range", flNodeRange.String())
	}
	// The runbook's health check waits for the pods of every node it
	// re-creates; kwok may never start some of them (kwokNudge).
	defer kwokNudger(t, c, cs)()
	runStart := time.Now()
	var (
		pauses, kills int
		stdout        string
	)
	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 8, "runbook did not finish")
		kill := ""
		if kills == 0 {
			kill = killOn
		}
		code, killed, out := rbRun(t, exec.Command(bin, args...), kill)
		if killed {
			kills++
			// The killed run's machine is lost: the next runs have an empty
			// journal directory and resume from the journal kept in the
			// cluster.
			args = rbWithJournal(args, filepath.Join(t.TempDir(), "other-machine"))
			continue
		}
		if code == 3 {
			pauses++
			require.Contains(t, out, "WAITING FOR AN OPERATOR (step controller-manager)")
			// A second run while nothing changed pauses again (the step is observed, not assumed).
			if pauses == 1 {
				// The operator: restart kube-controller-manager with the new
				// --cluster-cidr (node IPAM on); the kubelet updates the mirror pod.
				if dual {
					assert.Contains(t, out, "set --cluster-cidr="+flNew.String()+","+flV6.String()+" in")
				}
				require.NoError(t, c.Restart(ctx, harness.ControllerManager, kcmArgs(flNew)...))
				flSetMirror(t, ctx, cs, name(0), 1, kcmArgs(flNew))
			}
			require.LessOrEqual(t, pauses, 2, "the runbook must observe the restarted kube-controller-manager")
			continue
		}
		require.Equal(t, 0, code, "runbook failed:\n%s", out)
		stdout = out
		break
	}
	t.Logf("runbook done in %s (%d pause(s), %d kill(s))", time.Since(runStart).Round(time.Millisecond), pauses, kills)
	require.Equal(t, 1, pauses)
	if killOn != "" {
		require.Equal(t, 1, kills, "kill point %q never reached", killOn)
	}
	assert.Contains(t, stdout, "verified: 30 nodes")

	// A rerun of the finished runbook changes nothing.
	code, _, out := rbRun(t, exec.Command(bin, args...), "")
	require.Equal(t, 0, code, out)
	assert.NotContains(t, out, "[completed]")

	samples, minReady, unanswered := sampler.finish()
	t.Logf("Deployment samples %d, min ready %d, unanswered %d", samples, minReady, unanswered)
	require.Positive(t, samples)
	assert.GreaterOrEqual(t, minReady, int32(1), "Deployment had no ready replica at some sample")

	// net-conf.json: Network changed, everything else byte for byte.
	cm, err := cs.CoreV1().ConfigMaps("kube-flannel").Get(ctx, "kube-flannel-cfg", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, strings.Replace(netConf, flOld.String(), flNew.String(), 1), cm.Data["net-conf.json"])
	assert.Equal(t, flCNIConf, cm.Data["cni-conf.json"])

	// Nodes: none lost, no duplicate, every podCIDR inside the new Network,
	// the untouched ones keep their UID and podCIDR.
	after := nodeE2ENodes(t, ctx, cs)
	require.Len(t, after, flNodes)
	seen := map[netip.Prefix]string{}
	for nm, n := range after {
		require.Contains(t, before, nm)
		require.NotEmpty(t, n.Spec.PodCIDR, "node %s has no podCIDR", nm)
		p := cidr.MustParse(n.Spec.PodCIDR)
		assert.True(t, cidr.ContainsPrefix(flNew, p), "node %s podCIDR %s outside %s", nm, p, flNew)
		if rewrite {
			assert.True(t, cidr.ContainsPrefix(flNodeRange, p), "node %s podCIDR %s outside --node-range %s", nm, p, flNodeRange)
		} else {
			assert.True(t, cidr.ContainsPrefix(flOld, p), "node %s podCIDR %s: the fix allocates in the old Network", nm, p)
		}
		if other, dup := seen[p]; dup {
			t.Errorf("nodes %s and %s share %s", nm, other, p)
		}
		seen[p] = nm
		if dual {
			require.Len(t, n.Spec.PodCIDRs, 2, "node %s holds a pair", nm)
			v6 := cidr.MustParse(n.Spec.PodCIDRs[1])
			assert.True(t, cidr.ContainsPrefix(flV6, v6) && v6.Bits() == 64, "node %s IPv6 podCIDR %s", nm, v6)
			if len(before[nm].Spec.PodCIDRs) == 2 {
				assert.Equal(t, before[nm].Spec.PodCIDRs[1], n.Spec.PodCIDRs[1], "node %s keeps its IPv6 subnet", nm)
			}
			if other, dup := seen[v6]; dup {
				t.Errorf("nodes %s and %s share %s", nm, other, v6)
			}
			seen[v6] = nm
		}
		switch {
		case rewrite:
			assert.NotEqual(t, before[nm].UID, n.UID, "node %s should have been recreated", nm)
			if !fixed[nm] {
				assert.Equal(t, nodeE2ERebase(t, cidr.MustParse(before[nm].Spec.PodCIDR), flOld, flNodeRange).String(), n.Spec.PodCIDR, "node %s keeps its offset", nm)
			}
		case !fixed[nm]:
			assert.Equal(t, before[nm].UID, n.UID, "node %s was recreated", nm)
			assert.Equal(t, before[nm].Spec.PodCIDR, n.Spec.PodCIDR)
		case dups[mustIndex(t, nm)] != 0:
			assert.NotEqual(t, before[nm].UID, n.UID, "duplicate node %s should have been recreated", nm)
		}
	}

	// Every node's metadata (labels, annotations, taints, unschedulable) is
	// as before the run, recreated nodes included.
	meta := nodeE2ESnapshot(before)
	poll(t, 60*time.Second, "node metadata identical to before the run", func(ctx context.Context) error {
		if d := nodeE2EMetaDiff(meta, nodeE2ESnapshot(nodeE2ENodes(t, ctx, cs))); len(d) > 0 {
			return fmt.Errorf("%d nodes differ:\n%s", len(d), strings.Join(d[:min(len(d), 3)], "\n"))
		}
		return nil
	})

	// No pod garbage-collected: the bare pods (never restarted by the
	// runbook) keep their UIDs, recreated nodes included; Deployment pods on
	// untouched nodes too.
	keep, err = cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=keep"})
	require.NoError(t, err)
	gotKeep := map[string]types.UID{}
	for _, p := range keep.Items {
		gotKeep[p.Name] = p.UID
	}
	assert.Equal(t, keepUIDs, gotKeep)
	pods, err := cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=" + flApp})
	require.NoError(t, err)
	gotDeploy := map[string]types.UID{}
	for _, p := range pods.Items {
		gotDeploy[p.Name] = p.UID
	}
	for n, uid := range deployUIDs {
		assert.Equal(t, uid, gotDeploy[n], "Deployment pod %s on an untouched node was restarted or lost", n)
	}

	// kube-controller-manager runs with the new --cluster-cidr and node IPAM
	// works: a node joining now gets a podCIDR from it.
	assert.Contains(t, c.Flags(harness.ControllerManager), kcmArgs(flNew)[1])
	poll(t, 5*time.Second, "kube-controller-manager still running", func(context.Context) error {
		if !c.Status(harness.ControllerManager).Running {
			return fmt.Errorf("kube-controller-manager is not running: %+v", c.Status(harness.ControllerManager))
		}
		return nil
	})
	_, err = cs.CoreV1().Nodes().Create(ctx, harness.KwokNode("node-joiner", nil), metav1.CreateOptions{})
	require.NoError(t, err)
	got := nodeE2EWaitPodCIDRs(t, cs, []string{"node-joiner"}, time.Minute)
	assert.True(t, cidr.ContainsPrefix(flNew, got["node-joiner"]))
	if dual {
		j, err := cs.CoreV1().Nodes().Get(ctx, "node-joiner", metav1.GetOptions{})
		require.NoError(t, err)
		require.Len(t, j.Spec.PodCIDRs, 2, "the joiner gets a pair")
		assert.True(t, cidr.ContainsPrefix(flV6, cidr.MustParse(j.Spec.PodCIDRs[1])))
	}
	_, taken := seen[got["node-joiner"]]
	assert.False(t, taken, "joiner got a podCIDR already in use: %s", got["node-joiner"])
	t.Logf("scenario done in %s", time.Since(start).Round(time.Millisecond))
}
