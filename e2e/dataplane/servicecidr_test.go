package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/e2e/harness"
)

var (
	svcOldRange = netip.MustParsePrefix("10.96.0.0/16")
	svcNewRange = netip.MustParsePrefix("10.100.0.0/16")
)

// runRunbook runs the runbook and returns its exit code and output.
func runRunbook(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), bin, args...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	require.NoError(t, err)
	return 0, string(out)
}

// selectorlessService creates a Service without selector at clusterIP and
// an EndpointSlice (not owned by the Service, as a hand-made one is)
// pointing at the pods' echo servers.
func selectorlessService(t *testing.T, cs kubernetes.Interface, ns, name, clusterIP string, pods ...*Pod) {
	t.Helper()
	ctx := t.Context()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{{Name: "echo", Port: EchoPort, Protocol: corev1.ProtocolTCP}}},
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		assert.NoError(c, err)
	}, 30*time.Second, 200*time.Millisecond, "create Service %s/%s", ns, name)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-pods", Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "cidrshift-e2e"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("echo"), Port: new(int32(EchoPort)), Protocol: new(corev1.ProtocolTCP)}},
	}
	for _, p := range pods {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{p.IP.String()}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}, NodeName: new(p.Node.Name)})
	}
	_, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	require.NoError(t, err)
}

// serviceLoop is a client in a pod that connects to a Service over and
// over, re-reading its ClusterIP from the API as a client re-resolving the
// Service's name would. It only records; the test goroutine asserts.
type serviceLoop struct {
	mu       sync.Mutex
	ok, fail int
	// windows are the spans from the first failed attempt to the next
	// success.
	windows   []time.Duration
	starts    []time.Time // of each window
	failStart time.Time
	lastErr   error
	ips       map[string]bool
	// anyWindows are the spans during which kube-dns answered at none of
	// the fixed addresses in addrs (probed each round regardless of the
	// API): the data plane's own gap, whatever the client's resolution.
	addrs        []netip.Addr
	anyWindows   []time.Duration
	anyStarts    []time.Time
	anyFailStart time.Time
}

func startServiceLoop(ctx context.Context, cs kubernetes.Interface, from *Pod, ns, name string, addrs ...netip.Addr) (*serviceLoop, func()) {
	l := &serviceLoop{ips: map[string]bool{}, addrs: addrs}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ip netip.Addr
		lastRead := time.Time{}
		for ctx.Err() == nil {
			if time.Since(lastRead) > 100*time.Millisecond {
				if svc, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
					if a, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil {
						ip = a
					}
				}
				lastRead = time.Now()
			}
			var err error
			if !ip.IsValid() {
				err = fmt.Errorf("service %s/%s does not exist", ns, name)
			} else {
				_, err = Probe(from.NS, netip.AddrPortFrom(ip, EchoPort), 500*time.Millisecond)
			}
			anyOK := false
			for _, a := range l.addrs {
				if _, err := Probe(from.NS, netip.AddrPortFrom(a, EchoPort), 300*time.Millisecond); err == nil {
					anyOK = true
					break
				}
			}
			now := time.Now()
			l.mu.Lock()
			if anyOK && !l.anyFailStart.IsZero() {
				l.anyWindows = append(l.anyWindows, now.Sub(l.anyFailStart))
				l.anyStarts = append(l.anyStarts, l.anyFailStart)
				l.anyFailStart = time.Time{}
			} else if !anyOK && l.anyFailStart.IsZero() {
				l.anyFailStart = now
			}
			if ip.IsValid() {
				l.ips[ip.String()] = true
			}
			if err == nil {
				l.ok++
				if !l.failStart.IsZero() {
					l.windows = append(l.windows, now.Sub(l.failStart))
					l.starts = append(l.starts, l.failStart)
					l.failStart = time.Time{}
				}
			} else {
				l.fail++
				l.lastErr = err
				if l.failStart.IsZero() {
					l.failStart = now
				}
			}
			l.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return l, func() { cancel(); wg.Wait() }
}

// TestServiceCIDRMoveKubeProxy moves the Service CIDR with the
// migrate-servicecidr runbook while kube-proxy (iptables mode) runs in both
// node namespaces and a client pod loops on kube-dns. Before: kube-dns at
// the old range's .10 answers from every pod. After: it answers at the new
// range's .10 from every pod, with both backends seen, and the old
// ClusterIP answers no pod. The client's failure windows are logged: the
// client re-reads the ClusterIP from the API (so its window includes the
// operator's kube-apiserver restart when the move falls just before it),
// and, separately, the spans when kube-dns answered at neither address.
func TestServiceCIDRMoveKubeProxy(t *testing.T) {
	env := NewEnv(t)
	bin := buildExample(t, "migrate-servicecidr")
	cp := env.StartControlPlane(t, harness.Options{ClusterCIDR: "10.244.0.0/16", ServiceCIDR: svcOldRange.String()})
	cs, err := cp.Client()
	require.NoError(t, err)
	ctx := t.Context()
	netConf := writeFile(t, env, "net-conf.json", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)

	var nodes []*Node
	for _, name := range []string{"a", "b"} {
		n, err := env.AddNode(name)
		require.NoError(t, err)
		createNode(t, cs, n, "")
		require.NoError(t, n.StartFlanneld([]string{"NODE_NAME=" + name}, 30*time.Second,
			"--ip-masq", "--kube-subnet-mgr", "--kubeconfig-file="+cp.NodeKubeconfig, "--net-config-path="+netConf))
		_, err = env.StartProc(n.NS, "kube-proxy-"+name, nil, cp.Binaries().KubeProxy,
			"--kubeconfig="+cp.NodeKubeconfig, "--proxy-mode=iptables", "--hostname-override="+name,
			"--cluster-cidr=10.244.0.0/16", "--bind-address="+n.IP.String(), "--conntrack-max-per-core=0",
			"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0", "--v=2")
		require.NoError(t, err)
		_, err = n.AddPod(ctx, name+"1")
		require.NoError(t, err)
		nodes = append(nodes, n)
	}
	client, err := nodes[0].AddPod(ctx, "client")
	require.NoError(t, err)
	a1, b1 := nodes[0].Pods()[0], nodes[1].Pods()[0]
	pods := []*Pod{a1, b1, client}

	oldDNS := netip.MustParseAddr("10.96.0.10")
	newDNS := netip.MustParseAddr("10.100.0.10")
	selectorlessService(t, cs, "kube-system", "kube-dns", oldDNS.String(), a1, b1)
	before := checkUntil(t, pods, append(podTargets(pods), ServiceTarget("kube-dns", oldDNS, EchoPort, a1, b1)), (*Matrix).Full)
	t.Logf("before the move:\n%s", before)
	require.True(t, before.Full(), "kube-dns at %s answers from every pod:\n%s", oldDNS, before)

	loop, stopLoop := startServiceLoop(ctx, cs, client, "kube-system", "kube-dns", oldDNS, newDNS)
	journal := filepath.Join(t.TempDir(), "journal")
	args := []string{"--kubeconfig", cp.AdminKubeconfig(), "--to", svcNewRange.String(), "--journal", journal, "--apply",
		"--poll-interval", "200ms", "--drain-timeout", "90s"}
	start := time.Now()
	code, out := runRunbook(t, bin, args...)
	require.Equal(t, 3, code, "the runbook stops for the operator step:\n%s", out)
	t.Logf("runbook run 1 ended at +%s (exit 3)", time.Since(start).Round(time.Millisecond))
	flag := "--service-cluster-ip-range=" + svcNewRange.String()
	require.NoError(t, cp.Restart(ctx, harness.APIServer, flag))
	require.NoError(t, cp.Restart(ctx, harness.ControllerManager, flag))
	t.Logf("operator restarted kube-apiserver and kube-controller-manager by +%s", time.Since(start).Round(time.Millisecond))
	code, out = runRunbook(t, bin, args...)
	require.Equal(t, 0, code, "the runbook finishes:\n%s", out)
	took := time.Since(start)
	time.Sleep(2 * time.Second) // let the loop see the end state
	stopLoop()

	svc, err := cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, newDNS.String(), svc.Spec.ClusterIP, "kube-dns moved to the new range's .10")

	after := checkUntil(t, pods, append(podTargets(pods), ServiceTarget("kube-dns", newDNS, EchoPort, a1, b1)), (*Matrix).Full)
	t.Logf("after the move:\n%s", after)
	require.True(t, after.Full(), "kube-dns at %s answers from every pod:\n%s", newDNS, after)
	seen := map[string]bool{}
	for i := 0; i < 30 && len(seen) < 2; i++ {
		if r, err := Probe(client.NS, netip.AddrPortFrom(newDNS, EchoPort), time.Second); err == nil {
			seen[r.Responder] = true
		}
	}
	assert.Equal(t, map[string]bool{"a1": true, "b1": true}, seen, "both backends (one per node) answer at %s", newDNS)

	old := Check(pods, []Target{ServiceTarget("old-kube-dns", oldDNS, EchoPort, a1, b1)}, ProbeOptions{Attempts: 1})
	t.Logf("old ClusterIP:\n%s", old)
	assert.Len(t, old.Failing(), len(pods), "the old ClusterIP %s answers no pod", oldDNS)

	loop.mu.Lock()
	defer loop.mu.Unlock()
	var longest, total time.Duration
	for i, w := range loop.windows {
		total += w
		longest = max(longest, w)
		t.Logf("failure window %d: from +%s for %s", i+1, loop.starts[i].Sub(start).Round(time.Millisecond), w.Round(time.Millisecond))
	}
	t.Logf("client loop on kube-dns during the move (%s): %d ok, %d failed, %d failure window(s), longest %s, total %s; addresses used %v; last error %v",
		took.Round(time.Millisecond), loop.ok, loop.fail, len(loop.windows), longest.Round(time.Millisecond), total.Round(time.Millisecond), loop.ips, loop.lastErr)
	for i, w := range loop.anyWindows {
		t.Logf("kube-dns answered at neither %s nor %s: from +%s for %s", oldDNS, newDNS, loop.anyStarts[i].Sub(start).Round(time.Millisecond), w.Round(time.Millisecond))
	}
	assert.True(t, loop.failStart.IsZero(), "the client loop ended answered")
	assert.True(t, loop.ips[oldDNS.String()] && loop.ips[newDNS.String()], "the loop followed the Service from the old to the new address")
}
