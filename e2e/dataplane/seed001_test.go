package dataplane

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// TestSeed001FlannelKube replays the second field story (seed 001) on
// packets: flanneld v0.28.10 in kube subnet manager mode, vxlan, four
// nodes. Nodes b and c share a podCIDR, node d's flanneld runs host-gw.
// The matrix fails for exactly the pods of b, c and d, and a's flanneld
// logs the "ignoring non-vxlan" line for d's subnet. Then the fix with what
// cidrshift offers: the nodecidr fix plan moves c; restarting only
// flanneld leaves the stale cni0 address, and CNI ADD fails with the bridge
// plugin's error; flannel.CleanupSteps, executed on c, clear it;
// flannel.AuditKube names d's backend mismatch and d's flanneld is
// restarted with the cluster's config. That leaves b's pod unreachable from
// a (a's flanneld dropped its route to the shared subnet when c's lease
// went away; nothing cidrshift prints restarts it): asserted, then
// flanneld is restarted on a and b and the matrix reaches 100%.
func TestSeed001FlannelKube(t *testing.T) {
	env := NewEnv(t)
	cp := env.StartControlPlane(t, harness.Options{ClusterCIDR: "10.244.0.0/16"})
	cs, err := cp.Client()
	require.NoError(t, err)
	ctx := t.Context()

	netConf := seed001NetConf(t, env, cs)
	hostGWConf := writeFile(t, env, "net-conf-host-gw.json", `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`)
	kubeFlags := func(conf string) []string {
		return []string{"--ip-masq", "--kube-subnet-mgr", "--kubeconfig-file=" + cp.NodeKubeconfig, "--net-config-path=" + conf}
	}

	nodes, cidrs := seed001Nodes(t, env, cs)
	a, b, c, d := nodes["a"], nodes["b"], nodes["c"], nodes["d"]
	t.Logf("podCIDRs: a %s, b %s, c %s (duplicate), d %s", cidrs["a"], cidrs["b"], cidrs["c"], cidrs["d"])
	for _, n := range []*Node{a, b, c} {
		require.NoError(t, n.StartFlanneld([]string{"NODE_NAME=" + n.Name}, 30*time.Second, kubeFlags(netConf)...))
	}
	require.NoError(t, d.StartFlanneld([]string{"NODE_NAME=d"}, 30*time.Second, kubeFlags(hostGWConf)...))

	pods := addSeed001Pods(t, cs, nodes)

	ignoring := "ignoring non-vxlan v4Subnet(" + cidrs["d"].String() + ")"
	require.Eventually(t, func() bool { return strings.Contains(a.Flanneld.Log(), ignoring) }, 30*time.Second, 200*time.Millisecond,
		"flanneld on a logs %q", ignoring)

	broken := []string{"b1", "c1", "d1"}
	m := checkUntil(t, pods, podTargets(pods), func(m *Matrix) bool { return m.BrokenExactly(broken...) })
	t.Logf("before the fix:\n%s", m)
	require.Empty(t, m.FailuresNotTouching(broken...), "every failure involves a pod of b, c (shared podCIDR) or d (host-gw)")
	require.True(t, m.BrokenExactly(broken...), "each of %v fails somewhere", broken)

	// The fix, step 1: nodecidr's fix plan gives c a free subnet.
	layout := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, NodeMasks: []int{24}}
	plan, err := nodecidr.MakePlan(ctx, cs, nodecidr.PlanOptions{Mode: nodecidr.ModeFix, Layout: layout})
	require.NoError(t, err)
	require.Len(t, plan.Steps, 1, "one node of the duplicate pair moves")
	require.Equal(t, "c", plan.Steps[0].Node, "the node holding the podCIDR longest (b) keeps it")
	_, err = nodecidr.Apply(ctx, cs, plan, nodecidr.ApplyOptions{JournalDir: t.TempDir()})
	require.NoError(t, err)
	newC := waitPodCIDR(t, cs, "c")
	require.NotEqual(t, cidrs["c"], newC)
	t.Logf("c moved %s -> %s", cidrs["c"], newC)

	// Step 2, seeded wrong: only restart c's flanneld (what most runbooks
	// say). subnet.env follows the new podCIDR, but cni0 keeps the old
	// gateway and the bridge plugin refuses new pods: seed 001's error.
	steps := flannel.CleanupSteps(flannel.CleanupOptions{
		Node: "c", From: flannel.SubnetKey{IPv4: cidrs["c"]}, To: flannel.SubnetKey{IPv4: newC},
		KubeSubnetManager: true, CNINetwork: c.CNINetwork, SubnetFile: c.SubnetFile,
	})
	for _, s := range steps {
		t.Logf("host step (%s): %s", s.Where, s.Command)
	}
	require.NoError(t, c.RestartFlanneld(30*time.Second))
	senv, err := c.SubnetEnv()
	require.NoError(t, err)
	gw := netip.PrefixFrom(newC.Addr().Next(), newC.Bits())
	require.Equal(t, gw.String(), senv["FLANNEL_SUBNET"])
	_, err = c.AddPod(ctx, "c2")
	require.ErrorContains(t, err, `"cni0" already has an IP address different from `+gw.String())

	// Step 3: the printed host steps, executed on c.
	require.NoError(t, hostStepRunner{cs: cs, node: c}.run(ctx, steps))

	// Step 4: flannel's kube audit names d's backend; its flanneld is
	// restarted with the cluster's net-conf.json.
	nc, err := flannel.ReadNetConf(ctx, cs, flannel.KubeOptions{})
	require.NoError(t, err)
	fnodes, err := flannel.ReadNodes(ctx, cs, flannel.KubeOptions{})
	require.NoError(t, err)
	var mismatched []string
	for _, f := range flannel.AuditKube(nc, fnodes).Findings {
		if f.Kind == flannel.FindingBackendMismatch {
			mismatched = append(mismatched, f.Nodes...)
		}
	}
	require.Equal(t, []string{"d"}, mismatched)
	d.StopFlanneld()
	require.NoError(t, d.StartFlanneld([]string{"NODE_NAME=d"}, 30*time.Second, kubeFlags(netConf)...))

	pods = allPods(a, b, c, d)
	for _, p := range pods {
		t.Logf("pod %s on %s: %s", p.Name, p.Node.Name, p.IP)
	}

	// Gap in what cidrshift prints today: when c's lease for the shared
	// subnet went away, flanneld on a (not restarted by any step) deleted
	// its route to that subnet, which b still holds. b's pods stay
	// unreachable from a until a's flanneld restarts. CleanupSteps covers
	// only the moved node.
	m = checkUntil(t, pods, podTargets(pods), func(m *Matrix) bool { return m.BrokenExactly("b1") })
	t.Logf("after nodecidr apply + CleanupSteps(c) + d's restart:\n%s", m)
	routes, err := a.Run("ip", "route", "show", cidrs["b"].String())
	require.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(routes), "a lost its route to b's subnet %s", cidrs["b"])
	assert.True(t, m.BrokenExactly("b1"), "only b's pod is cut off (from a)")
	for _, n := range []*Node{a, b} {
		require.NoError(t, n.RestartFlanneld(30*time.Second), "the step cidrshift does not print yet: restart flanneld on the other nodes")
	}
	m = checkUntil(t, pods, podTargets(pods), (*Matrix).Full)
	t.Logf("after the fix:\n%s", m)
	require.True(t, m.Full(), "full matrix after the fix:\n%s", m)
	assert.True(t, newC.Contains(c.Pods()[0].IP), "c's pod has an address of c's new podCIDR")
	for _, p := range pods {
		obj, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.Name, metav1.GetOptions{})
		if assert.NoError(t, err) {
			assert.Equal(t, p.IP.String(), obj.Status.PodIP, "the API knows pod %s's address", p.Name)
		}
	}
}
