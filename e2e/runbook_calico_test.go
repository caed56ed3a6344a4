package e2e_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/e2e/harness"
)

// Story 1 of FACTS.md carried out end to end by the runbook binary
// examples/migrate-calico-podcidr on a real control plane: a kubeadm-like
// cluster with pod CIDR 10.233.64.0/18 (/24 per node) next to the Service
// CIDR 10.233.0.0/18 moves to 10.200.0.0/16 with Calico IPAM (played by
// calicotest.IPAM), three nodes of which one is the control plane, a
// Deployment of three replicas and cluster DNS. The runbook pauses (exit 3)
// for the kube-controller-manager flag; the test plays the operator.

const (
	rbcOldCIDR = "10.233.64.0/18"
	rbcNewCIDR = "10.200.0.0/16"
	rbcSvcCIDR = "10.233.0.0/18"
	rbcOldPool = "default-ipv4-ippool"
	rbcNewFlag = "--cluster-cidr=" + rbcNewCIDR
)

// The dual-stack variant (issue 19): the same cluster with an IPv6 family
// (pool, node subnets, Services) that the IPv4 move keeps.
const (
	rbcV6CIDR    = "fd00:10:233::/56"
	rbcV6SvcCIDR = "fd00:10:96::/112"
	rbcV6Pool    = "default-ipv6-ippool"
	// rbcV6PoolCIDR is the IPv6 pool, inside rbcV6CIDR; small, as the
	// IPAM that plays Calico's cuts it into blocks.
	rbcV6PoolCIDR = "fd00:10:233:40::/116"
	rbcDualFlag   = "--cluster-cidr=" + rbcNewCIDR + "," + rbcV6CIDR
)

// rbcNodes are a subset of calicoNodes, so calicoKubelet plays their kubelets.
var rbcNodes = []string{"master1", "worker1", "worker2"}

// rbcDeployments are sampled throughout: each must keep a ready replica.
var rbcDeployments = []string{"default/web", "kube-system/coredns"}

// rbcPods is how many pods hold a Calico address: web 3, coredns 2.
const rbcPods = 5

type rbcEnv struct {
	c     *harness.Cluster
	kube  kubernetes.Interface
	pools calico.PoolStore
	dual  bool
}

func rbcBuild(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "migrate-calico-podcidr")
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/cidrshift/cidrshift/examples/migrate-calico-podcidr")
	cmd.Dir = filepath.Join(wd, "..")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build examples/migrate-calico-podcidr:\n%s", out)
	t.Logf("built %s in %s", bin, time.Since(start).Round(time.Millisecond))
	return bin
}

// rbcStart starts story 1's cluster; dual adds the IPv6 family: the
// control plane dual-stack, an IPv6 pool beside the IPv4 one, and
// kubeadm-config's ClusterConfiguration (where the runbook finds the
// IPv6 range it keeps).
func rbcStart(t *testing.T, dual bool) *rbcEnv {
	t.Helper()
	opts := harness.Options{
		ClusterCIDR:      rbcOldCIDR,
		NodeCIDRMaskSize: 24,
		ServiceCIDR:      rbcSvcCIDR,
		Disable:          []harness.Component{harness.Kwok},
	}
	if dual {
		opts.ClusterCIDR, opts.NodeCIDRMaskSizeIPv6, opts.ServiceCIDR = rbcOldCIDR+","+rbcV6CIDR, 64, rbcSvcCIDR+","+rbcV6SvcCIDR
	}
	c := harness.Start(t, opts)
	ctx := t.Context()
	kube, err := c.Client()
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	require.NoError(t, err)
	installCalicoCRDs(t, dyn)
	poll(t, 30*time.Second, "discovery serves crd.projectcalico.org/v1 ippools", func(ctx context.Context) error {
		api, err := calico.ServedAPI(ctx, kube.Discovery())
		if err != nil {
			return err
		}
		if api != calico.APICRDV1 {
			return fmt.Errorf("served API is %s", api)
		}
		return nil
	})
	pools, err := calico.NewPoolStore(ctx, calico.StoreClients{Discovery: kube.Discovery(), Dynamic: dyn})
	require.NoError(t, err)
	_, err = dyn.Resource(calico.IPPoolsV1).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calico.IPPoolsV1.GroupVersion().String(), "kind": "IPPool",
		"metadata": map[string]any{"name": rbcOldPool},
		"spec":     map[string]any{"cidr": rbcOldCIDR, "blockSize": int64(26), "vxlanMode": "Always", "natOutgoing": true, "nodeSelector": "all()"},
	}}, metav1.CreateOptions{})
	require.NoError(t, err, "create the old IPPool")
	if dual {
		_, err = dyn.Resource(calico.IPPoolsV1).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": calico.IPPoolsV1.GroupVersion().String(), "kind": "IPPool",
			"metadata": map[string]any{"name": rbcV6Pool},
			"spec":     map[string]any{"cidr": rbcV6PoolCIDR, "blockSize": int64(122), "vxlanMode": "Never", "natOutgoing": false, "nodeSelector": "all()"},
		}}, metav1.CreateOptions{})
		require.NoError(t, err, "create the IPv6 IPPool")
		_, err = kube.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm-config", Namespace: metav1.NamespaceSystem},
			Data: map[string]string{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n" +
				"  podSubnet: " + rbcOldCIDR + "," + rbcV6CIDR + "\n  serviceSubnet: " + rbcSvcCIDR + "," + rbcV6SvcCIDR + "\n" +
				"controllerManager:\n  extraArgs:\n  - name: node-cidr-mask-size-ipv4\n    value: \"24\"\n  - name: node-cidr-mask-size-ipv6\n    value: \"64\"\n"},
		}, metav1.CreateOptions{})
		require.NoError(t, err, "create kubeadm-config")
	}

	kl := &calicoKubelet{kube: kube, beat: map[string]time.Time{}}
	stopKubelet := calicotest.Loop(ctx, 500*time.Millisecond, func(err error) { t.Logf("fake kubelet: %v", err) }, kl.sync)
	t.Cleanup(stopKubelet)
	ipam := &calicotest.IPAM{Kube: kube, Pools: pools, Dynamic: dyn, MarkReady: true}
	ictx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ipam.Run(ictx, time.Second, func(err error) {
			if !apierrors.IsConflict(err) {
				t.Logf("calicotest.IPAM: %v", err)
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done })

	for _, name := range rbcNodes {
		labels := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{"e2e.cidrshift.io/keep": name}}}
		if name == "master1" {
			labels["node-role.kubernetes.io/control-plane"] = ""
			n.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
		}
		_, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err, "create node %s", name)
	}
	old := netip.MustParsePrefix(rbcOldCIDR)
	poll(t, 60*time.Second, "nodes Ready with a podCIDR in "+rbcOldCIDR, func(ctx context.Context) error {
		for _, name := range rbcNodes {
			n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !calicoNodeReady(n) {
				return fmt.Errorf("node %s not Ready", name)
			}
			p, err := netip.ParsePrefix(n.Spec.PodCIDR)
			if err != nil || !old.Contains(p.Addr()) {
				return fmt.Errorf("node %s podCIDR %q", name, n.Spec.PodCIDR)
			}
			for _, taint := range n.Spec.Taints {
				if strings.HasPrefix(taint.Key, "node.kubernetes.io/") {
					return fmt.Errorf("node %s still has taint %s", name, taint.Key)
				}
			}
		}
		return nil
	})
	poll(t, 30*time.Second, "ServiceAccounts default", func(ctx context.Context) error {
		for _, ns := range []string{"default", "kube-system"} {
			if _, err := kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	dns := calicoDeployment(metav1.NamespaceSystem, "coredns", 2, map[string]string{calico.DNSLabel: "kube-dns"})
	dns.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	_, err = kube.AppsV1().Deployments(dns.Namespace).Create(ctx, dns, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.AppsV1().Deployments("default").Create(ctx, calicoDeployment("default", "web", 3, nil), metav1.CreateOptions{})
	require.NoError(t, err)
	e := &rbcEnv{c: c, kube: kube, pools: pools, dual: dual}
	poll(t, 90*time.Second, "every pod Ready with an address in the old pool", func(ctx context.Context) error {
		return e.podsIn(ctx, old)
	})
	return e
}

// podsIn checks that exactly rbcPods live pods exist, all Ready with their
// addresses in prefix.
func (e *rbcEnv) podsIn(ctx context.Context, prefix netip.Prefix) error {
	list, err := e.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var problems []string
	n := 0
	for _, p := range list.Items {
		n++
		if p.DeletionTimestamp != nil {
			problems = append(problems, p.Namespace+"/"+p.Name+" terminating")
			continue
		}
		if !calicoPodReady(&p) {
			problems = append(problems, fmt.Sprintf("%s/%s not ready (%s)", p.Namespace, p.Name, p.Status.Phase))
			continue
		}
		in, bad := calico.PodIPsIn(p.Status.PodIP, calicoPodIPs(&p), prefix)
		if len(bad) > 0 || len(in) == 0 {
			problems = append(problems, fmt.Sprintf("%s/%s has IPs %v, not in %s", p.Namespace, p.Name, calicoPodIPs(&p), prefix))
		}
		if v6, _ := calico.PodIPsIn("", calicoPodIPs(&p), netip.MustParsePrefix(rbcV6PoolCIDR)); e.dual && len(v6) != 1 {
			problems = append(problems, fmt.Sprintf("%s/%s has IPs %v, none in the IPv6 pool %s", p.Namespace, p.Name, calicoPodIPs(&p), rbcV6PoolCIDR))
		}
	}
	if n != rbcPods {
		problems = append(problems, fmt.Sprintf("%d pods, want %d", n, rbcPods))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// rbcSampler records, every 100 ms, each Deployment's ready replicas while
// the API answers.
type rbcSampler struct {
	mu       sync.Mutex
	samples  int
	minReady map[string]int32
	stop     chan struct{}
	done     chan struct{}
}

func rbcSample(ctx context.Context, cs kubernetes.Interface) *rbcSampler {
	s := &rbcSampler{minReady: map[string]int32{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			ready := map[string]int32{}
			ok := true
			for _, key := range rbcDeployments {
				ns, name, _ := strings.Cut(key, "/")
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				d, err := cs.AppsV1().Deployments(ns).Get(rctx, name, metav1.GetOptions{})
				cancel()
				if err != nil {
					ok = false
					break
				}
				ready[key] = d.Status.ReadyReplicas
			}
			if ok {
				s.mu.Lock()
				s.samples++
				for k, v := range ready {
					if cur, seen := s.minReady[k]; !seen || v < cur {
						s.minReady[k] = v
					}
				}
				s.mu.Unlock()
			}
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

func (s *rbcSampler) finish() (int, map[string]int32) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.minReady
}

// rbcRun runs the runbook once; with killOn set, it is SIGKILLed at the first
// stderr line containing it.
func rbcRun(t *testing.T, bin string, args []string, killOn string) (code int, killed bool, stdout string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out strings.Builder
	cmd.Stdout = &out
	pipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	var stderr strings.Builder
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		stderr.WriteString(line + "\n")
		if killOn != "" && !killed && strings.Contains(line, killOn) {
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			killed = true
			t.Logf("SIGKILLed the runbook at %q", line)
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	t.Logf("runbook exit %d (killed %v); stderr:\n%s", code, killed, stderr.String())
	if !killed {
		t.Logf("stdout:\n%s", out.String())
	}
	return code, killed, out.String()
}

// rbcKillPoints are stderr lines at which the killed variant may die: step
// starts, a node just deleted (not yet recreated), pool writes and restarts.
var rbcKillPoints = []string{
	"step 2/9", "calico create-pool", "step 3/9", "calico disable-pool", "step 4/9", ": deleted", "master1: backed-up",
	"step 5/9", "step 6/9", "step 7/9", "calico restart Deployment default/web", "step 8/9", "step 9/9",
}

func TestRunbookCalico(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	rbcScenario(t, "", false)
}

// TestRunbookCalicoDualStack is story 1 in a dual-stack cluster (issue
// 19): the runbook moves the IPv4 family and keeps the IPv6 one. It finds
// the IPv6 range in kubeadm-config, asks the operator for
// --cluster-cidr=10.200.0.0/16,fd00:10:233::/56, writes that podSubnet back
// to kubeadm-config, and leaves every node's IPv6 podCIDR, the IPv6 pool
// and every pod's IPv6 address as they were; the real dual-stack
// kube-controller-manager starts with the new flag and hands a joining node
// a pair.
func TestRunbookCalicoDualStack(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	rbcScenario(t, "", true)
}

func TestRunbookCalicoKilled(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, seed>>7))
	killOn := rbcKillPoints[r.IntN(len(rbcKillPoints))]
	if at := os.Getenv("E2E_RUNBOOK_KILL_AT"); at != "" {
		killOn = at
	}
	t.Logf("seed %d: kill the runbook at the first stderr line containing %q", seed, killOn)
	rbcScenario(t, killOn, false)
}

func rbcScenario(t *testing.T, killOn string, dual bool) {
	bin := rbcBuild(t)
	e := rbcStart(t, dual)
	newFlag := rbcNewFlag
	if dual {
		newFlag = rbcDualFlag
	}
	ctx := t.Context()
	c, cs := e.c, e.kube
	before := nodeE2ESettled(t, cs, len(rbcNodes), time.Minute)
	meta := nodeE2ESnapshot(before)
	journalDir := filepath.Join(t.TempDir(), "journal")
	base := []string{"--kubeconfig", c.AdminKubeconfig(), "--to", rbcNewCIDR, "--service-cidr", rbcSvcCIDR}
	args := append(append([]string{}, base...), "--journal", journalDir, "--apply", "--probe-node", "--probe-timeout", "10s",
		"--poll-interval", "200ms", "--drain-timeout", "60s", "--rollout-timeout", "3m")

	// The plan alone changes nothing.
	code, _, out := rbcRun(t, bin, base, "")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "6. controller-manager-flags [operator]")
	assert.Contains(t, out, "(control plane): ")

	sampler := rbcSample(ctx, cs)
	start := time.Now()
	operatorDone, killedOnce, observed := false, false, false
	runs := 0
	for ; runs < 8; runs++ {
		kill := ""
		if !killedOnce {
			kill = killOn
		}
		code, killed, out := rbcRun(t, bin, args, kill)
		if strings.Contains(out, "observed: probe Node cidrshift-probe got podCIDR") {
			observed = true
		}
		if killed {
			killedOnce = true
			// The killed run's machine is lost: the next runs have an empty
			// journal directory and resume from the journal kept in the
			// cluster.
			args = rbWithJournal(args, filepath.Join(t.TempDir(), "other-machine"))
			continue
		}
		if code == 3 {
			require.False(t, operatorDone, "the runbook waits again after the operator restarted kube-controller-manager:\n%s", out)
			assert.Contains(t, out, "WAITING FOR AN OPERATOR (step controller-manager-flags)")
			assert.Contains(t, out, newFlag)
			// Before the restart every node is in the new range, the probe is
			// gone and no pod has moved yet.
			for _, name := range rbcNodes {
				n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				require.NoError(t, err)
				assert.True(t, netip.MustParsePrefix(rbcNewCIDR).Contains(netip.MustParsePrefix(n.Spec.PodCIDR).Addr()), "%s at %s", name, n.Spec.PodCIDR)
			}
			_, err := cs.CoreV1().Nodes().Get(ctx, "cidrshift-probe", metav1.GetOptions{})
			require.True(t, apierrors.IsNotFound(err), "probe node deleted: %v", err)
			require.NoError(t, e.podsIn(ctx, netip.MustParsePrefix(rbcOldCIDR)), "pods wait for the new flag")
			rs := time.Now()
			require.NoError(t, c.Restart(ctx, harness.ControllerManager, newFlag))
			t.Logf("operator: restarted kube-controller-manager with %s in %s", newFlag, time.Since(rs).Round(time.Millisecond))
			operatorDone = true
			continue
		}
		require.Equal(t, 0, code, "runbook failed:\n%s", out)
		break
	}
	require.True(t, operatorDone, "the runbook paused for the operator")
	if killOn == "" {
		assert.True(t, observed, "the runbook saw the new flag by itself through the probe Node")
	} else {
		assert.True(t, killedOnce, "the runbook printed %q at some point and was killed there", killOn)
	}
	t.Logf("migration took %s over %d run(s)", time.Since(start).Round(time.Millisecond), runs+1)
	samples, minReady := sampler.finish()
	t.Logf("sampled %d times, min ready replicas %v", samples, minReady)
	assert.Greater(t, samples, 10)
	for _, d := range rbcDeployments {
		assert.GreaterOrEqual(t, minReady[d], int32(1), "%s kept a ready replica throughout", d)
	}

	// kube-controller-manager runs and does not crash-loop.
	time.Sleep(3 * time.Second)
	st := c.Status(harness.ControllerManager)
	assert.True(t, st.Running, "kube-controller-manager: %s\n%s", st, c.Logs(harness.ControllerManager))
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := c.WaitExit(wctx, harness.ControllerManager)
	cancel()
	assert.Error(t, err, "kube-controller-manager exited:\n%s", c.Logs(harness.ControllerManager))

	// End state: every node kept, in the new range, with its metadata.
	newCIDR := netip.MustParsePrefix(rbcNewCIDR)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
		p, err := netip.ParsePrefix(n.Spec.PodCIDR)
		require.NoError(t, err, n.Name)
		assert.True(t, newCIDR.Contains(p.Addr()) && p.Bits() == 24, "%s podCIDR %s", n.Name, p)
		want := []string{n.Spec.PodCIDR}
		if old := before[n.Name]; old != nil && dual {
			want = append(want, old.Spec.PodCIDRs[1]) // the IPv6 podCIDR stays
		}
		assert.Equal(t, want, n.Spec.PodCIDRs, "%s", n.Name)
		if old := before[n.Name]; old != nil {
			assert.NotEqual(t, old.UID, n.UID, "%s recreated", n.Name)
		}
	}
	sort.Strings(names)
	assert.Equal(t, rbcNodes, names, "no node lost, probe gone")
	poll(t, 60*time.Second, "node metadata identical to before the run", func(ctx context.Context) error {
		if d := nodeE2EMetaDiff(meta, nodeE2ESnapshot(nodeE2ENodes(t, ctx, cs))); len(d) > 0 {
			return fmt.Errorf("%d nodes differ:\n%s", len(d), strings.Join(d, "\n"))
		}
		return nil
	})
	poll(t, 60*time.Second, "every pod Ready in the new pool", func(ctx context.Context) error {
		return e.podsIn(ctx, newCIDR)
	})
	_, err = e.pools.Get(ctx, rbcOldPool)
	assert.ErrorIs(t, err, calico.ErrPoolNotFound, "old pool deleted")
	np, err := e.pools.Get(ctx, "ippool-10-200-0-0-16")
	require.NoError(t, err)
	assert.Equal(t, rbcNewCIDR, np.Spec.CIDR)
	assert.False(t, np.Spec.Disabled)
	// A node that joins now gets a podCIDR in the new range.
	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker9"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	poll(t, 30*time.Second, "worker9 gets a podCIDR in "+rbcNewCIDR, func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, "worker9", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p, err := netip.ParsePrefix(n.Spec.PodCIDR)
		if err != nil || !newCIDR.Contains(p.Addr()) {
			return fmt.Errorf("podCIDR %q", n.Spec.PodCIDR)
		}
		if dual && (len(n.Spec.PodCIDRs) != 2 || !netip.MustParsePrefix(rbcV6CIDR).Contains(netip.MustParsePrefix(n.Spec.PodCIDRs[1]).Addr())) {
			return fmt.Errorf("podCIDRs %q: want a pair, IPv6 in %s", n.Spec.PodCIDRs, rbcV6CIDR)
		}
		return nil
	})
	if dual {
		v6, err := e.pools.Get(ctx, rbcV6Pool)
		require.NoError(t, err)
		assert.Equal(t, rbcV6PoolCIDR, v6.Spec.CIDR)
		assert.False(t, v6.Spec.Disabled, "the IPv6 pool is left alone")
		cm, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kubeadm-config", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Contains(t, cm.Data["ClusterConfiguration"], "podSubnet: "+rbcNewCIDR+","+rbcV6CIDR)
		assert.Contains(t, cm.Data["ClusterConfiguration"], "serviceSubnet: "+rbcSvcCIDR+","+rbcV6SvcCIDR)
	}

	// Finished: a rerun reports every step done.
	code, _, out = rbcRun(t, bin, args, "")
	require.Equal(t, 0, code, out)
	for _, s := range []string{"preflight", "add-pool", "disable-old-pool", "move-nodes", "kubeadm-config", "controller-manager-flags", "move-workloads", "verify", "delete-old-pool"} {
		assert.Contains(t, out, s+" [done]")
	}
}
