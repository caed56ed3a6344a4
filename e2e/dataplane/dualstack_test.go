package dataplane

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/flannel"
)

// dualTargets are every pod's IPv4 and IPv6 echo servers.
func dualTargets(pods []*Pod) []Target {
	var ts []Target
	for _, p := range pods {
		ts = append(ts, PodTarget(p), PodTarget6(p))
	}
	return ts
}

// TestDualStackFlannelVXLANIPv6Move is issue 19's packet scenario: three
// dual-stack nodes (IPv4 and IPv6 underlay) run real flanneld v0.28 in
// etcd mode with a dual-stack config (Network 10.50.0.0/16, EnableIPv6,
// IPv6Network fd00:50::/56, vxlan), and each pod gets an IPv4 and an IPv6
// address from the real flannel → bridge → host-local chain. Every pod
// reaches every other over both families, through flannel.1 and
// flannel-v6.1, with its own source address. Then the IPv6 Network moves to
// fd00:60::/56 with the flannel library (PlanSetNetwork with MoveLeases:
// each lease keeps its IPv4 subnet and takes the same offset in the new
// IPv6 range, Apply) and each node's CleanupSteps (which delete both vxlan
// devices). Afterwards every pod holds its node's new IPv6 subnet and its
// old IPv4 one, no lease is left in the old IPv6 range, and the matrix is
// full on both families again.
func TestDualStackFlannelVXLANIPv6Move(t *testing.T) {
	env := NewEnv(t)
	cp := env.StartControlPlane(t, harness.Options{DisableNodeIPAM: true})
	cs, err := cp.Client()
	require.NoError(t, err)
	ctx := t.Context()

	reg, apply := etcdRegistry(t, flannel.EtcdConfig{Endpoints: []string{cp.Cluster.EtcdEndpoint()}})
	v4Net, oldV6, newV6 := netip.MustParsePrefix("10.50.0.0/16"), netip.MustParsePrefix("fd00:50::/56"), netip.MustParsePrefix("fd00:60::/56")
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	plan, err := flannel.PlanPutConfig(snap, []byte(`{"Network": "10.50.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:50::/56", "Backend": {"Type": "vxlan"}}`))
	require.NoError(t, err)
	apply(plan)

	var nodes []*Node
	for _, name := range []string{"a", "b", "c"} {
		n, err := env.AddNode(name)
		require.NoError(t, err)
		require.NoError(t, n.EnableIPv6())
		nodes = append(nodes, n)
		createNode(t, cs, n, "10.99.0.0/24") // the API knows the node (for cordon); flannel ignores its podCIDR in etcd mode
	}
	v4Subnets := map[string]netip.Prefix{}
	for _, n := range nodes {
		require.NoError(t, n.StartFlanneld(nil, 30*time.Second, "--ip-masq", "--etcd-endpoints="+cp.EtcdEndpoint))
		senv, err := n.SubnetEnv()
		require.NoError(t, err)
		assert.Equal(t, oldV6.String(), senv["FLANNEL_IPV6_NETWORK"], "subnet.env of %s", n.Name)
		v6 := netip.MustParsePrefix(senv["FLANNEL_IPV6_SUBNET"])
		require.True(t, oldV6.Contains(v6.Addr()), "subnet.env of %s: %v", n.Name, senv)
		v4Subnets[n.Name] = netip.MustParsePrefix(senv["FLANNEL_SUBNET"]).Masked()
		require.True(t, v4Net.Contains(v4Subnets[n.Name].Addr()), "subnet.env of %s: %v", n.Name, senv)
		p, err := n.AddPod(ctx, n.Name+"1")
		require.NoError(t, err)
		require.NoError(t, registerPod(ctx, cs, p))
		require.True(t, p.IP6.IsValid(), "pod %s has no IPv6 address", p.Name)
		require.True(t, v6.Masked().Contains(p.IP6), "pod %s: %s outside its node's %s", p.Name, p.IP6, v6)
	}
	pods := allPods(nodes...)
	for _, p := range pods {
		t.Logf("pod %s on %s: %s, %s", p.Name, p.Node.Name, p.IP, p.IP6)
	}
	m := checkUntil(t, pods, dualTargets(pods), (*Matrix).Full)
	t.Logf("dual-stack flannel vxlan, IPv6 Network %s:\n%s", oldV6, m)
	require.True(t, m.Full(), "pod to pod over both families:\n%s", m)
	links, err := nodes[0].Run("ip", "-o", "link", "show", "type", "vxlan")
	require.NoError(t, err)
	assert.Contains(t, links, "flannel.1", "the IPv4 VTEP on a")
	assert.Contains(t, links, "flannel-v6.1", "the IPv6 VTEP on a")

	// Move the IPv6 Network: config first, then each lease to the same
	// offset in the new range, its IPv4 subnet kept.
	snap, err = reg.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Leases, 3)
	old := map[netip.Addr]flannel.SubnetKey{}
	for _, l := range snap.Leases {
		old[l.Attrs.PublicIP] = l.Subnet
	}
	plan, err = flannel.PlanSetNetwork(snap, flannel.SetNetworkRequest{IPv6Network: newV6, MoveLeases: true})
	require.NoError(t, err)
	for _, s := range plan.Steps {
		t.Logf("plan step %s %s -> %s", s.Action, s.Key, s.NewKey)
	}
	apply(plan)

	snap, err = reg.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Leases, 3)
	moved := map[netip.Addr]flannel.SubnetKey{}
	for _, l := range snap.Leases {
		moved[l.Attrs.PublicIP] = l.Subnet
		assert.True(t, newV6.Contains(l.Subnet.IPv6.Addr()), "lease %s left in the old IPv6 network", l.Key)
		assert.Equal(t, old[l.Attrs.PublicIP].IPv4, l.Subnet.IPv4, "lease %s keeps its IPv4 subnet", l.Key)
	}
	for _, n := range nodes {
		from, to := old[n.IP], moved[n.IP]
		require.True(t, to.IPv6.IsValid(), "no moved lease for %s (%s)", n.Name, n.IP)
		steps := flannel.CleanupSteps(flannel.CleanupOptions{Node: n.Name, From: from, To: to, BackendType: "vxlan", IPv6: true,
			CNINetwork: n.CNINetwork, SubnetFile: n.SubnetFile})
		require.NoError(t, hostStepRunner{cs: cs, node: n}.run(context.WithoutCancel(ctx), steps), "host steps on %s", n.Name)
		senv, err := n.SubnetEnv()
		require.NoError(t, err)
		assert.Equal(t, newV6.String(), senv["FLANNEL_IPV6_NETWORK"], "subnet.env of %s", n.Name)
		assert.Equal(t, to.IPv6.String(), netip.MustParsePrefix(senv["FLANNEL_IPV6_SUBNET"]).Masked().String(), "%s takes its moved lease", n.Name)
		assert.Equal(t, v4Subnets[n.Name].String(), netip.MustParsePrefix(senv["FLANNEL_SUBNET"]).Masked().String(), "%s keeps its IPv4 subnet", n.Name)
	}

	pods = allPods(nodes...)
	for _, p := range pods {
		t.Logf("pod %s on %s now: %s, %s", p.Name, p.Node.Name, p.IP, p.IP6)
		require.True(t, newV6.Contains(p.IP6), "pod %s has %s", p.Name, p.IP6)
		require.True(t, v4Subnets[p.Node.Name].Contains(p.IP), "pod %s has %s", p.Name, p.IP)
	}
	m = checkUntil(t, pods, dualTargets(pods), (*Matrix).Full)
	t.Logf("after the IPv6 move to %s:\n%s", newV6, m)
	require.True(t, m.Full(), "pod to pod over both families on the new IPv6 range:\n%s", m)
	routes, err := nodes[0].Run("ip", "-6", "route")
	require.NoError(t, err)
	assert.NotContains(t, routes, "fd00:50:", "a route to the old IPv6 range is left on a")
}

// TestDualStackFlannelKube runs flanneld v0.28 in kube subnet manager mode
// on a dual-stack cluster (issue 19): the real kube-controller-manager
// gives each node an IPv4 and an IPv6 podCIDR, net-conf enables IPv6, and
// flanneld writes the IPv6 annotations (public-ipv6, backend-v6-data) the
// flannel package reads. Every pod reaches every other over both families.
// flannel.ReadNodes sees each node's pair and its IPv4 and IPv6 public
// address as flanneld announced them, AuditKube finds nothing wrong, and
// two nodes announcing one IPv6 address (a copy of the real nodes with
// one annotation changed) are reported as duplicate-public-ip.
func TestDualStackFlannelKube(t *testing.T) {
	env := NewEnv(t)
	v4, v6 := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")
	cp := env.StartControlPlane(t, harness.Options{ClusterCIDR: v4.String() + "," + v6.String(), NodeCIDRMaskSize: 24, NodeCIDRMaskSizeIPv6: 64})
	cs, err := cp.Client()
	require.NoError(t, err)
	ctx := t.Context()
	netConf := netConfIn(t, env, cs, `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}`)
	flags := []string{"--ip-masq", "--kube-subnet-mgr", "--kubeconfig-file=" + cp.NodeKubeconfig, "--net-config-path=" + netConf}

	var nodes []*Node
	for _, name := range []string{"a", "b", "c"} {
		n, err := env.AddNode(name)
		require.NoError(t, err)
		require.NoError(t, n.EnableIPv6())
		createNode(t, cs, n, "")
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		require.NoError(t, n.StartFlanneld([]string{"NODE_NAME=" + n.Name}, 30*time.Second, flags...))
		senv, err := n.SubnetEnv()
		require.NoError(t, err)
		require.True(t, v6.Contains(netip.MustParsePrefix(senv["FLANNEL_IPV6_SUBNET"]).Addr()), "subnet.env of %s: %v", n.Name, senv)
		p, err := n.AddPod(ctx, n.Name+"1")
		require.NoError(t, err)
		require.NoError(t, registerPod(ctx, cs, p))
		require.True(t, v4.Contains(p.IP) && v6.Contains(p.IP6), "pod %s: %s, %s", p.Name, p.IP, p.IP6)
	}
	pods := allPods(nodes...)
	m := checkUntil(t, pods, dualTargets(pods), (*Matrix).Full)
	t.Logf("dual-stack flannel, kube subnet manager:\n%s", m)
	require.True(t, m.Full(), "pod to pod over both families:\n%s", m)

	nc, err := flannel.ReadNetConf(ctx, cs, flannel.KubeOptions{})
	require.NoError(t, err)
	read, err := flannel.ReadNodes(ctx, cs, flannel.KubeOptions{})
	require.NoError(t, err)
	require.Len(t, read, len(nodes))
	byName := map[string]flannel.Node{}
	for _, fn := range read {
		byName[fn.Name] = fn
	}
	for _, n := range nodes {
		fn := byName[n.Name]
		require.Len(t, fn.PodCIDRs, 2, "node %s", n.Name)
		assert.True(t, v4.Contains(fn.PodCIDRs[0].Addr()) && v6.Contains(fn.PodCIDRs[1].Addr()), "node %s: %v", n.Name, fn.PodCIDRs)
		assert.Equal(t, n.IP, fn.PublicIP, "node %s public-ip", n.Name)
		assert.Equal(t, n.IP6, fn.PublicIPv6, "node %s public-ipv6", n.Name)
		assert.Equal(t, "vxlan", fn.BackendType, "node %s", n.Name)
		assert.Contains(t, fn.Annotations["flannel.alpha.coreos.com/backend-v6-data"], "VtepMAC", "node %s", n.Name)
	}
	rep := flannel.AuditKube(nc, read)
	for _, f := range rep.Findings {
		assert.NotEqual(t, cidr.SeverityError, f.Severity, "finding on the healthy cluster: %+v", f)
	}
	dup := slices.Clone(read)
	for i := range dup {
		if dup[i].Name == "c" {
			dup[i].PublicIPv6 = nodes[0].IP6
		}
	}
	var found bool
	for _, f := range flannel.AuditKube(nc, dup).Findings {
		if f.Kind == flannel.FindingDuplicatePublicIP {
			found = true
			assert.Equal(t, []string{"a", "c"}, f.Nodes)
			assert.Contains(t, f.Detail, nodes[0].IP6.String())
		}
	}
	assert.True(t, found, "two nodes announcing %s", nodes[0].IP6)
}
