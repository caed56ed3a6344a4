package dataplane

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/migrate"
)

// mbbKubelet plays, for the namespace nodes, the parts of a cluster the
// harness does not run: the kubelets (a Ready heartbeat; CNI DEL of a
// deleted or evicted pod after its endpoint is gone, then its API object
// removed), the ReplicaSet (a replacement web pod on the same node by CNI
// ADD, registered and added to the Service's EndpointSlice) and flannel's
// DaemonSet (flanneld restarted on a node whose podCIDR changed). It only
// records; the test goroutine asserts.
type mbbKubelet struct {
	cs    kubernetes.Interface
	nodes map[string]*Node
	owner metav1.OwnerReference
	// service: the pods are Service web's endpoints (EndpointSlice
	// web-pods); grace is how long a deleted pod lives on after its
	// endpoint is gone (kube-proxy's sync, the pod's grace); replicas is
	// the number of pods settled waits for.
	service  bool
	grace    time.Duration
	replicas int
	// followPodCIDR: flanneld is restarted on a node whose podCIDR changed
	// (what the runbook's restart of the node's flannel pod does); without
	// it only a roll of DaemonSet kube-flannel-ds restarts flanneld.
	followPodCIDR bool
	// flannelPods: each node has a flannel pod object in namespace
	// kube-flannel (label app=flannel, see addFlannelPod); deleting it
	// restarts that node's flanneld and a new object takes its place (the
	// kubelet's and the DaemonSet's parts), as a real flannel pod's restart
	// does. Only that restarts flanneld: nothing restarts it when a podCIDR
	// changes, so the runbook's hooks before the restart run first.
	flannelPods bool
	rolledAt    string // the DaemonSet's restart annotations, as last rolled
	dsSeen      bool
	rolls       int

	// cni serialises the CNI calls on one node (its kubelet's), not
	// across nodes; restarting marks a node whose flanneld a goroutine
	// restarts (the node's own flannel pod, independent of the others').
	cni        map[string]*sync.Mutex
	restarting map[string]bool
	rolling    bool

	mu       sync.Mutex
	web      []*Pod // the Service's backends now
	seq      int
	errs     []string
	flannel  map[string]string // node -> podCIDR its flanneld started with
	replaced int
	// replacing are the pods whose end and replacement are under way.
	replacing map[*Pod]bool
}

// registerWeb creates a web pod's object, owned by the Deployment, as the
// kubelet would report it.
func (k *mbbKubelet) registerWeb(ctx context.Context, p *Pod) error {
	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: metav1.NamespaceDefault, Labels: map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{k.owner}},
		Spec: corev1.PodSpec{NodeName: p.Node.Name, Containers: []corev1.Container{{Name: "echo", Image: "cidrshift.local/echo"}}},
	}
	created, err := k.cs.CoreV1().Pods(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: p.IP.String(), PodIPs: []corev1.PodIP{{IP: p.IP.String()}},
		HostIP: p.Node.IP.String(), Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	_, err = k.cs.CoreV1().Pods(obj.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// setEndpoints writes the web pods as the endpoints of Service web.
func (k *mbbKubelet) setEndpoints(ctx context.Context) error {
	if !k.service {
		return nil
	}
	s, err := k.cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(ctx, "web-pods", metav1.GetOptions{})
	if err != nil {
		return err
	}
	s.Endpoints = nil
	for _, p := range k.web {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.IP.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)}, NodeName: new(p.Node.Name)})
	}
	_, err = k.cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Update(ctx, s, metav1.UpdateOptions{})
	return err
}

func (k *mbbKubelet) fail(format string, args ...any) {
	k.mu.Lock()
	k.errs = append(k.errs, fmt.Sprintf(format, args...))
	k.mu.Unlock()
}

// current returns the web pods now.
func (k *mbbKubelet) current() []*Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.web)
}

// replace ends the web pod old (its endpoint first, then, after a grace
// that lets kube-proxy drop it, CNI DEL and its object) and starts its
// replacement on the same node.
func (k *mbbKubelet) replace(ctx context.Context, old *Pod, uid string) {
	k.mu.Lock()
	k.web = slices.DeleteFunc(k.web, func(p *Pod) bool { return p == old })
	err := k.setEndpoints(ctx)
	k.seq++
	name := fmt.Sprintf("web-%d", k.seq)
	k.mu.Unlock()
	if err != nil {
		k.fail("endpoints without %s: %v", old.Name, err)
	}
	time.Sleep(k.grace)
	node := old.Node
	k.cni[node.Name].Lock()
	err = node.DelPod(ctx, old)
	k.cni[node.Name].Unlock()
	if err != nil {
		k.fail("CNI DEL %s: %v", old.Name, err)
	}
	zero := int64(0)
	uidp := types.UID(uid)
	if err := k.cs.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
		Preconditions: &metav1.Preconditions{UID: &uidp}}); err != nil {
		k.fail("delete %s: %v", old.Name, err)
	}
	var p *Pod
	deadline := time.Now().Add(60 * time.Second)
	for {
		k.cni[node.Name].Lock()
		p, err = node.AddPod(ctx, name)
		k.cni[node.Name].Unlock()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // e.g. cni0 still holds the old gateway
	}
	if err != nil {
		k.fail("CNI ADD %s on %s: %v", name, node.Name, err)
		return
	}
	if err := k.registerWeb(ctx, p); err != nil {
		k.fail("register %s: %v", name, err)
	}
	k.mu.Lock()
	k.web = append(k.web, p)
	k.replaced++
	err = k.setEndpoints(ctx)
	k.mu.Unlock()
	if err != nil {
		k.fail("endpoints with %s: %v", name, err)
	}
}

// settled reports whether the Service has two web pods and none is being
// replaced.
func (k *mbbKubelet) settled(ctx context.Context) bool {
	k.mu.Lock()
	n := len(k.web)
	k.mu.Unlock()
	pods, err := k.cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || n != k.replicas || len(pods.Items) != k.replicas {
		return false
	}
	return !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

// run is the kubelets' and controllers' loop. What a node's kubelet or
// flannel pod does runs in goroutines of its own, so one node's work never
// holds up another's: a flanneld restart, a pod's end and replacement (CNI
// calls serialised per node), the DaemonSet's roll.
func (k *mbbKubelet) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	k.mu.Lock()
	k.replacing = map[*Pod]bool{}
	k.restarting = map[string]bool{}
	k.cni = map[string]*sync.Mutex{}
	for name := range k.nodes {
		k.cni[name] = &sync.Mutex{}
	}
	k.mu.Unlock()
	lastBeat := time.Time{}
	for ctx.Err() == nil {
		if time.Since(lastBeat) > 2*time.Second {
			lastBeat = time.Now()
			for name := range k.nodes {
				n, err := k.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					continue
				}
				now := metav1.Now()
				n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
					LastHeartbeatTime: now, LastTransitionTime: now}}
				_, _ = k.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			}
		}
		// flannel's DaemonSet: a node whose podCIDR changed gets a new flanneld.
		for name := range k.nodes {
			obj, err := k.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			k.restartFlanneld(&wg, name, func() bool {
				return !k.followPodCIDR || err != nil || obj.Spec.PodCIDR == "" || obj.Spec.PodCIDR == k.flannel[name]
			}, func() {
				k.mu.Lock()
				k.flannel[name] = obj.Spec.PodCIDR
				k.mu.Unlock()
			})
		}
		k.rollFlannel(ctx, &wg)
		k.restartFlannelPods(ctx, &wg)
		pods, err := k.cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err == nil {
			for _, obj := range pods.Items {
				if obj.DeletionTimestamp == nil {
					continue
				}
				k.mu.Lock()
				i := slices.IndexFunc(k.web, func(p *Pod) bool { return p.Name == obj.Name })
				var old *Pod
				if i >= 0 && !k.replacing[k.web[i]] {
					old = k.web[i]
					k.replacing[old] = true
				}
				k.mu.Unlock()
				if old != nil {
					// Each pod on its own, as the kubelet's pod workers: a
					// replacement whose CNI ADD keeps failing does not hold
					// up another pod's end.
					wg.Add(1)
					go func(uid string) {
						defer wg.Done()
						k.replace(ctx, old, uid)
						k.mu.Lock()
						delete(k.replacing, old)
						k.mu.Unlock()
					}(string(obj.UID))
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// addFlannelPod creates the flannel pod object of node (flannelPods),
// running and ready, as its kubelet would report it.
func (k *mbbKubelet) addFlannelPod(ctx context.Context, node string) error {
	created, err := k.cs.CoreV1().Pods(flannel.DefaultNetConfNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kube-flannel-ds-" + node + "-", Labels: map[string]string{"app": "flannel"}},
		Spec: corev1.PodSpec{NodeName: node, HostNetwork: true,
			Containers: []corev1.Container{{Name: "kube-flannel", Image: "cidrshift.local/flanneld"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	n := k.nodes[node]
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: n.IP.String(), PodIPs: []corev1.PodIP{{IP: n.IP.String()}},
		HostIP: n.IP.String(), Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	_, err = k.cs.CoreV1().Pods(created.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// restartFlannelPods plays, for flannelPods, the restart of each deleted
// flannel pod, in a goroutine of wg per node: flanneld is restarted, the
// object removed and a new one created.
func (k *mbbKubelet) restartFlannelPods(ctx context.Context, wg *sync.WaitGroup) {
	if !k.flannelPods {
		return
	}
	pods, err := k.cs.CoreV1().Pods(flannel.DefaultNetConfNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=flannel"})
	if err != nil {
		return
	}
	for _, obj := range pods.Items {
		name := obj.Spec.NodeName
		k.restartFlanneld(wg, name, func() bool { return obj.DeletionTimestamp == nil }, func() {
			// The API calls end with the kubelets (ctx): the runbook's last
			// step may restart the flannel pods as the test ends.
			zero := int64(0)
			err := k.cs.CoreV1().Pods(obj.Namespace).Delete(ctx, obj.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
				Preconditions: &metav1.Preconditions{UID: &obj.UID}})
			if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
				k.fail("delete flannel pod %s: %v", obj.Name, err)
			}
			if err := k.addFlannelPod(ctx, name); err != nil && ctx.Err() == nil {
				k.fail("flannel pod on %s: %v", name, err)
			}
		})
	}
}

// restartFlanneld restarts the flanneld of node name in a goroutine of wg,
// then runs after, unless skip (called with k.mu held) says not to, the
// node is unknown, or its flanneld is being restarted or rolled already.
func (k *mbbKubelet) restartFlanneld(wg *sync.WaitGroup, name string, skip func() bool, after func()) {
	n := k.nodes[name]
	k.mu.Lock()
	no := n == nil || k.restarting[name] || k.rolling || skip()
	if !no {
		k.restarting[name] = true
	}
	k.mu.Unlock()
	if no {
		return
	}
	wg.Go(func() {
		if err := n.RestartFlanneld(30 * time.Second); err != nil {
			k.fail("flanneld on %s: %v", name, err)
		}
		after()
		k.mu.Lock()
		delete(k.restarting, name)
		k.mu.Unlock()
	})
}

// rollFlannel plays the DaemonSet controller's rolling update of
// kube-flannel-ds (when it exists): once its pod template's restart
// annotations change (kubectl rollout restart, or the runbook's), flanneld
// is restarted on every node, one at a time, in a goroutine of wg (once no
// node's own restart is under way).
func (k *mbbKubelet) rollFlannel(ctx context.Context, wg *sync.WaitGroup) {
	ds, err := k.cs.AppsV1().DaemonSets(flannel.DefaultNetConfNamespace).Get(ctx, "kube-flannel-ds", metav1.GetOptions{})
	if err != nil {
		return
	}
	a := ds.Spec.Template.Annotations
	at := a[migrate.FlannelRestartedAtAnnotation] + "|" + a["kubectl.kubernetes.io/restartedAt"]
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.dsSeen || at == k.rolledAt {
		k.dsSeen, k.rolledAt = true, at
		return
	}
	if k.rolling || len(k.restarting) > 0 {
		return
	}
	k.rolling = true
	wg.Go(func() {
		for _, name := range slices.Sorted(maps.Keys(k.nodes)) {
			if err := k.nodes[name].RestartFlanneld(30 * time.Second); err != nil {
				k.fail("flanneld on %s (DaemonSet roll): %v", name, err)
			}
		}
		k.mu.Lock()
		k.rolledAt = at
		k.rolls++
		k.rolling = false
		k.mu.Unlock()
	})
}

// mbbRun is one migration's measurements.
type mbbRun struct {
	name           string
	ok, fail       int
	took, settled  time.Duration
	inTransition   map[string]time.Duration // node -> from its transition hook to its teardown
	matrixFailures []string
}

// TestMakeBeforeBreakFlannelPodCIDR moves the pod subnets of four flannel
// nodes a, b, c and z (kube subnet manager) twice with the
// FlannelPodCIDR migration and its host agents (examples/nodenet-agent in
// every node's namespace), while a client pod on z (moved last) loops on
// Service web (two replicas, on nodes a and b, under a PodDisruptionBudget
// with minAvailable 1) through real kube-proxy (iptables mode, on every
// node):
//
//  1. make-before-break: 10.244.0.0/16 -> 10.240.0.0/16, pods replaced by
//     eviction. The connectivity matrix of the client and the web pods is
//     full after each node's step and at the end. The client kept its old
//     address (a bare pod: nothing would recreate it) through z's
//     transition; once it is gone and the wants are published again, every
//     agent converged and no node holds a route, address, proxy entry or
//     rule of 10.244.0.0/16, and no default FDB entry of the standby. The
//     client sees no failed request: right before each node's delete every
//     other node's agent set up the standby for its subnet (nodenet), so
//     when their flanneld forget the subnet at the delete and learn the new
//     one at the re-creation, its pods stay reachable.
//  2. drain-style, as before make-before-break: 10.240.0.0/16 ->
//     10.236.0.0/16, pods deleted right after each node moved, with a new
//     client on z. Its failed requests, counted until the web pods are
//     replaced, are the comparison.
//
// flanneld's Network (file and ConfigMap) is 10.224.0.0/11 throughout, so
// both moves stay inside it and flanneld never needs the new Network; the
// runs give --from.
//
// It runs with each of flannel's vxlan and host-gw backends.
func TestMakeBeforeBreakFlannelPodCIDR(t *testing.T) {
	for _, backend := range []string{"vxlan", "host-gw"} {
		t.Run(backend, func(t *testing.T) { testMakeBeforeBreak(t, backend) })
	}
}

func testMakeBeforeBreak(t *testing.T, backend string) {
	ft := echoFailures(t)
	env := NewEnv(t)
	agentBin := buildExample(t, "nodenet-agent")
	const network = "10.224.0.0/11"
	cp := env.StartControlPlane(t, harness.Options{ClusterCIDR: network})
	cs, err := cp.Client()
	require.NoError(ft, err)
	ctx := t.Context()

	conf := `{"Network":"` + network + `","Backend":{"Type":"` + backend + `"}}`
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: flannel.DefaultNetConfNamespace}}, metav1.CreateOptions{})
	require.NoError(ft, err)
	_, err = cs.CoreV1().ConfigMaps(flannel.DefaultNetConfNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: flannel.DefaultNetConfName}, Data: map[string]string{flannel.NetConfKey: conf}}, metav1.CreateOptions{})
	require.NoError(ft, err)
	netConf := writeFile(t, env, "net-conf.json", conf)
	flags := []string{"--ip-masq", "--kube-subnet-mgr", "--kubeconfig-file=" + cp.NodeKubeconfig, "--net-config-path=" + netConf}

	createAgentRBAC(t, cs)
	agentKubeconfig, err := cp.NodeUserKubeconfig(agentIdentity[0], agentIdentity[1:]...)
	require.NoError(ft, err)
	k := &mbbKubelet{cs: cs, nodes: map[string]*Node{}, flannel: map[string]string{}, service: true, grace: 1500 * time.Millisecond, replicas: 2, flannelPods: true}
	moving := []string{"a", "b", "c", "z"}
	for i, name := range moving {
		n, err := env.AddNode(name)
		require.NoError(ft, err)
		podCIDR := fmt.Sprintf("10.244.%d.0/24", i+1)
		createNode(t, cs, n, podCIDR)
		require.NoError(ft, n.StartFlanneld([]string{"NODE_NAME=" + name}, 30*time.Second, flags...))
		k.nodes[name], k.flannel[name] = n, podCIDR
		require.NoError(ft, k.addFlannelPod(ctx, name))
		_, err = n.WriteCNIConfList()
		require.NoError(ft, err)
		_, err = env.StartProc(n.NS, "nodenet-agent-"+name, nil, agentBin, "--node="+name, "--host-root="+n.Dir,
			"--interval=500ms", "--kubeconfig="+agentKubeconfig, "--namespace="+migrate.DefaultAgentNamespace)
		require.NoError(ft, err)
	}
	for name, n := range k.nodes {
		_, err = env.StartProc(n.NS, "kube-proxy-"+name, nil, cp.Binaries().KubeProxy,
			"--kubeconfig="+cp.NodeKubeconfig, "--proxy-mode=iptables", "--hostname-override="+name,
			"--cluster-cidr="+network, "--bind-address="+n.IP.String(), "--conntrack-max-per-core=0",
			"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0", "--v=2")
		require.NoError(ft, err)
	}
	z := k.nodes["z"]

	// The web Deployment (no controller acts on it here: it only owns the
	// pods, so the migration may evict them), its PDB, two replicas on a
	// and b, the Service, and the client on z.
	k.owner = webOwner(t, cs)
	_, err = cs.PolicyV1().PodDisruptionBudgets(metav1.NamespaceDefault).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: new(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}, metav1.CreateOptions{})
	require.NoError(ft, err)
	for _, name := range []string{"a", "b"} {
		k.seq++
		p, err := k.nodes[name].AddPod(ctx, fmt.Sprintf("web-%d", k.seq))
		require.NoError(ft, err)
		require.NoError(ft, k.registerWeb(ctx, p))
		k.web = append(k.web, p)
	}
	selectorlessService(t, cs, metav1.NamespaceDefault, "web", "", k.web...)
	client, err := z.AddPod(ctx, "client")
	require.NoError(ft, err)
	require.NoError(ft, registerPod(ctx, cs, client))
	svc, err := cs.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(ft, err)
	svcIP := netip.MustParseAddr(svc.Spec.ClusterIP)
	matrix := func() *Matrix {
		pods := append(k.current(), client)
		return checkUntil(t, pods, append(podTargets(pods), ServiceTarget("web", svcIP, EchoPort, k.current()...)), (*Matrix).Full)
	}
	before := matrix()
	t.Logf("before:\n%s", before)
	require.True(ft, before.Full(), "the client and the web pods reach each other and Service web at %s:\n%s", svcIP, before)

	kctx, stopKubelet := context.WithCancel(ctx)
	var kwg sync.WaitGroup
	kwg.Add(1)
	go func() { defer kwg.Done(); k.run(kctx) }()
	defer func() { stopKubelet(); kwg.Wait() }()

	loop, stopLoop := startServiceLoop(ctx, cs, client, metav1.NamespaceDefault, "web")
	defer stopLoop()
	time.Sleep(2 * time.Second)
	agents := &migrate.HostAgents{Kube: cs, PollInterval: 100 * time.Millisecond, Timeout: 60 * time.Second}

	migrateOnce := func(name, from, nodeRange string, mbb bool, loop *serviceLoop) (mbbRun, *migrate.FlannelPodCIDRMigration) {
		t.Helper()
		r := mbbRun{name: name, inTransition: map[string]time.Duration{}}
		m, err := migrate.FlannelPodCIDR(migrate.FlannelPodCIDROptions{
			Kube: cs, Network: netip.MustParsePrefix(network), From: netip.MustParsePrefix(from),
			RewriteNodes: true, NodeRange: netip.MustParsePrefix(nodeRange), MakeBeforeBreak: mbb,
			Namespace: flannel.DefaultNetConfNamespace, ConfigMap: flannel.DefaultNetConfName, FlannelSelector: "app=flannel",
			Continue: true, HealthTimeout: 90 * time.Second, PollInterval: 200 * time.Millisecond,
		})
		require.NoError(ft, err)
		began := map[string]time.Time{}
		start := time.Now()
		runner := &migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), name), Agents: agents,
			Progress: func(line string) {
				t.Logf("%s %s +%s: %s", name, time.Now().Format("15:04:05.000"), time.Since(start).Round(10*time.Millisecond), line)
				var node, what string
				if _, err := fmt.Sscanf(strings.TrimSpace(line), "rebase %s hook: %s", &node, &what); err == nil {
					node = strings.TrimSuffix(node, ":")
					switch what {
					case "transition":
						began[node] = time.Now()
					case "transition-teardown":
						r.inTransition[node] = time.Since(began[node])
					}
				}
				// The matrix after each node's step (make-before-break only:
				// the probes of a broken matrix would hold the drain-style run
				// up and lengthen its failures).
				if mbb && strings.HasPrefix(strings.TrimSpace(line), "rebase ") && strings.HasSuffix(line, ": done") {
					m := matrix()
					if !m.Full() {
						r.matrixFailures = append(r.matrixFailures, fmt.Sprintf("after %s:\n%s", strings.TrimSpace(line), m))
					}
				}
			}}
		loop.mu.Lock()
		ok0, fail0 := loop.ok, loop.fail
		loop.mu.Unlock()
		start = time.Now()
		rep, err := runner.Run(ctx, m)
		r.took = time.Since(start)
		// The drain-style run ends with pods still being replaced: the
		// count goes on until the Service has its two replicas again.
		assert.Eventually(ft, func() bool { return k.settled(ctx) }, 90*time.Second, 200*time.Millisecond, "%s: the web pods are replaced", name)
		r.settled = time.Since(start)
		time.Sleep(time.Second) // the loop sees the end state
		loop.mu.Lock()
		r.ok, r.fail = loop.ok-ok0, loop.fail-fail0
		loop.mu.Unlock()
		if rep != nil {
			for _, s := range rep.Steps {
				t.Logf("%s step %s [%s]\n  %s", name, s.Name, s.Status, strings.Join(s.Details, "\n  "))
			}
		}
		require.NoError(ft, err)
		require.False(ft, rep.Paused(), "%+v", rep.Waiting)
		return r, m
	}

	mbb, m := migrateOnce("make-before-break", "10.244.0.0/16", "10.240.0.0/16", true, loop)
	// flanneld, starting with a new lease, deletes the VTEP's old address
	// before it adds the new one; the kernel then deletes every route
	// through the VTEP, and the node reaches no other node's pods until
	// flanneld adds them again. The runbook's prepare hook has the agent put
	// the new address there first, so no flanneld deletes one.
	var vtepRemoved []string
	if backend == "vxlan" {
		for _, name := range moving {
			for _, l := range strings.Split(k.nodes[name].Flanneld.Log(), "\n") {
				if strings.Contains(l, "removed IP address") && strings.Contains(l, "from flannel.1") {
					vtepRemoved = append(vtepRemoved, name+": "+l)
				}
			}
		}
	}
	end := matrix()
	t.Logf("after make-before-break:\n%s", end)
	stopLoop()
	windows := loopWindows(loop)

	// The client is a bare pod (nothing would recreate it): it kept its
	// old address through z's transition. It ends now, and the wants are
	// published again, as the runbook's teardown does: z's transition and
	// the other nodes' routes to its old subnet go.
	clientLeft := func() {
		t.Helper()
		k.cni[z.Name].Lock()
		require.NoError(ft, z.DelPod(ctx, client))
		k.cni[z.Name].Unlock()
		require.NoError(ft, cs.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, client.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
		wants, err := m.HostWants(ctx)
		require.NoError(ft, err)
		for _, w := range wants {
			for _, p := range w.Peers {
				assert.Empty(ft, p.OldPodCIDRs, "want of %s: no live pod holds an old address of %s", w.Node, p.Name)
			}
			_, err := agents.Apply(ctx, w)
			require.NoError(ft, err)
		}
		require.Eventually(ft, func() bool {
			st, err := agents.Status(ctx, "z")
			return err == nil && st != nil && st.Phase == migrate.HostConverged
		}, 60*time.Second, 200*time.Millisecond, "z's agent tears its transition down")
	}
	clientLeft()
	for _, name := range moving {
		hostDump(t, k.nodes[name], "after make-before-break")
	}
	var traces []string
	for name, n := range k.nodes {
		probes := [][]string{{"ip", "-4", "addr"}, {"ip", "-4", "route"}, {"ip", "neigh", "show", "proxy"}, {"iptables-save", "-t", "nat"}}
		if backend == "vxlan" {
			probes = append(probes, []string{"bridge", "fdb", "show", "dev", "flannel.1"})
		}
		for _, args := range probes {
			out, err := n.Run(args[0], args[1:]...)
			require.NoError(ft, err)
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "10.244.") || strings.HasPrefix(l, "00:00:00:00:00:00 ") {
					traces = append(traces, name+": "+strings.Join(args, " ")+": "+l)
				}
			}
		}
		st, err := agents.Status(ctx, name)
		require.NoError(ft, err)
		require.NotNil(ft, st, "node %s's agent reported", name)
		assert.Equal(ft, migrate.HostConverged, st.Phase, "node %s's agent: findings %v, error %s", name, st.Findings, st.Error)
	}

	// The drain-style move, with a new client on z (the same loop).
	client, err = z.AddPod(ctx, "client2")
	require.NoError(ft, err)
	require.NoError(ft, registerPod(ctx, cs, client))
	loop2, stopLoop2 := startServiceLoop(ctx, cs, client, metav1.NamespaceDefault, "web")
	defer stopLoop2()
	time.Sleep(2 * time.Second)
	drain, _ := migrateOnce("drain", "10.240.0.0/16", "10.236.0.0/16", false, loop2)
	endDrain := matrix()
	t.Logf("after the drain-style move:\n%s", endDrain)
	stopLoop2()
	windows = append(windows, loopWindows(loop2)...)

	// 3. (vxlan) make-before-break by the runbook binary, SIGKILLed four
	// times and rerun with the same command each time, with a third client
	// on z: 10.236.0.0/16 -> 10.232.0.0/16.
	var killed mbbRun
	var endKilled *Matrix
	if backend == "vxlan" {
		client, err = z.AddPod(ctx, "client3")
		require.NoError(ft, err)
		require.NoError(ft, registerPod(ctx, cs, client))
		loop3, stopLoop3 := startServiceLoop(ctx, cs, client, metav1.NamespaceDefault, "web")
		defer stopLoop3()
		time.Sleep(2 * time.Second)
		killed = killedRunbookMove(ft, cp.AdminKubeconfig(), network, "10.236.0.0/16", "10.232.0.0/16", loop3)
		assert.Eventually(ft, func() bool { return k.settled(ctx) }, 90*time.Second, 200*time.Millisecond, "killed runbook: the web pods are replaced")
		time.Sleep(time.Second)
		loop3.mu.Lock()
		killed.ok, killed.fail = loop3.ok, loop3.fail
		loop3.mu.Unlock()
		endKilled = matrix()
		t.Logf("after the killed and resumed runbook:\n%s", endKilled)
		stopLoop3()
		windows = append(windows, loopWindows(loop3)...)
	}
	stopKubelet()
	kwg.Wait()

	runs := []mbbRun{mbb, drain}
	if endKilled != nil {
		runs = append(runs, killed)
	}
	for _, r := range runs {
		var per []string
		for _, n := range moving {
			if d, ok := r.inTransition[n]; ok {
				per = append(per, fmt.Sprintf("%s %s", n, d.Round(10*time.Millisecond)))
			}
		}
		t.Logf("RESULT %s: %d requests, %d failed; migration took %s, web pods replaced after %s; per node in transition: %s",
			r.name, r.ok+r.fail, r.fail, r.took.Round(10*time.Millisecond), r.settled.Round(10*time.Millisecond), strings.Join(per, ", "))
	}
	for _, w := range windows {
		t.Log(w)
	}
	k.mu.Lock()
	assert.Empty(ft, k.errs, "the emulated kubelets and controllers")
	assert.GreaterOrEqual(ft, k.replaced, 4, "each web pod was replaced in each run")
	k.mu.Unlock()
	assert.Empty(ft, mbb.matrixFailures, "make-before-break: the matrix is full after each node's step")
	assert.True(ft, end.Full(), "after make-before-break:\n%s", end)
	assert.Empty(ft, traces, "no trace of 10.244.0.0/16 or of the standby on any node")
	assert.Len(ft, mbb.inTransition, len(moving), "every node went through the transition")
	assert.Empty(ft, vtepRemoved, "make-before-break: no flanneld deleted its VTEP's address (and with it the node's routes)")
	// The goal: no request through the Service failed during the
	// whole make-before-break migration (the drain-style run's failures are
	// the comparison, logged above and in BENCHMARKS.md section 6).
	assert.Positive(ft, mbb.ok, "the client's requests went through during make-before-break")
	assert.Zero(ft, mbb.fail, "make-before-break: failed requests through Service web (of %d)", mbb.ok+mbb.fail)
	assert.True(ft, endDrain.Full(), "after the drain-style move:\n%s", endDrain)
	if endKilled != nil {
		assert.Positive(ft, killed.ok, "the client's requests went through while the runbook was killed and rerun")
		assert.Zero(ft, killed.fail, "make-before-break killed four times: failed requests through Service web (of %d)", killed.ok+killed.fail)
		assert.True(ft, endKilled.Full(), "after the killed and resumed runbook:\n%s", endKilled)
	}
}

// killedRunbookMove runs examples/migrate-flannel-podcidr (make-before-break,
// the default with --agents) to move the nodes from from to nodeRange, and
// SIGKILLs it at four points, each time rerunning the same command at once:
// right after node a's standby (before its delete), right after a's
// transition hook (its pods not yet evicted), right after b's delete (b
// missing until the rerun re-creates it from the journal), and 300 ms after
// b's transition hook (during the eviction of its web pod, which the
// emulated kubelet takes 1.5 s to end). The last run must exit 0.
func killedRunbookMove(ft *failureEcho, kubeconfig, network, from, nodeRange string, loop *serviceLoop) mbbRun {
	t := ft.t
	t.Helper()
	bin := buildExample(t, "migrate-flannel-podcidr")
	journal := filepath.Join(t.TempDir(), "killed")
	args := []string{"--kubeconfig", kubeconfig, "--network", network, "--from", from, "--rewrite-nodes", "--node-range", nodeRange,
		"--agents", "--agent-timeout", "60s", "--namespace", flannel.DefaultNetConfNamespace, "--flannel-selector", "app=flannel",
		"--continue", "--health-timeout", "90s", "--poll-interval", "200ms", "--journal", journal, "--apply"}
	kills := []struct {
		line  string
		after time.Duration
	}{
		{"rebase a: hook: standby (before the delete)", 0},
		{"rebase a: hook: transition", 0},
		{"rebase b: deleted", 0},
		{"rebase b: hook: transition", 300 * time.Millisecond},
	}
	r := mbbRun{name: "make-before-break, killed 4 times", inTransition: map[string]time.Duration{}}
	loop.mu.Lock()
	ok0, fail0 := loop.ok, loop.fail
	loop.mu.Unlock()
	start := time.Now()
	for run := 0; ; run++ {
		require.Less(ft, run, 10, "the runbook keeps getting killed")
		cmd := exec.Command(bin, args...)
		stderr, err := cmd.StderrPipe()
		require.NoError(ft, err)
		var stdout strings.Builder
		cmd.Stdout = &stdout
		require.NoError(ft, cmd.Start())
		sc := bufio.NewScanner(stderr)
		wasKilled := false
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			t.Logf("runbook run %d +%s: %s", run+1, time.Since(start).Round(10*time.Millisecond), line)
			if !wasKilled && len(kills) > 0 && strings.Contains(line, kills[0].line) {
				time.Sleep(kills[0].after)
				require.NoError(ft, cmd.Process.Kill())
				t.Logf("runbook run %d: SIGKILL after %q", run+1, kills[0].line)
				kills, wasKilled = kills[1:], true
			}
		}
		err = cmd.Wait()
		if wasKilled {
			continue
		}
		require.NoError(ft, err, "the last run of the runbook:\n%s", stdout.String())
		require.Empty(ft, kills, "every kill point was reached")
		break
	}
	r.took = time.Since(start)
	loop.mu.Lock()
	r.ok, r.fail = loop.ok-ok0, loop.fail-fail0
	loop.mu.Unlock()
	return r
}

// loopWindows describes a stopped loop's failure windows.
func loopWindows(l *serviceLoop) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for i, w := range l.windows {
		out = append(out, fmt.Sprintf("failure window: at %s for %s (last error %v)", l.starts[i].Format("15:04:05.000"), w.Round(time.Millisecond), l.lastErr))
	}
	return out
}
