//go:build linux

package nodenet

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

// TestDataplaneStandbyAcrossNodeRecreation follows node-2 through node-1's
// move from A=10.244.3.0/24 to C=10.244.9.0/24 while pod p1 keeps its A
// address: node-2's flanneld forgets A when node-1's Node is deleted and
// learns C when it is re-created. The test plays flanneld with exactly its
// netlink calls. Without the standby, p2 loses p1 when A is forgotten; with
// it (set up before the delete, from a Peer with NextPodCIDR), p2 reaches p1
// after the forget, after learning C, and once node-1 lists A as old; when
// node-1 lists A no more, nothing of the standby is left.
func TestDataplaneStandbyAcrossNodeRecreation(t *testing.T) {
	for _, backend := range []string{BackendVXLAN, BackendHostGW} {
		t.Run(backend, func(t *testing.T) { testStandby(t, backend) })
	}
}

func testStandby(t *testing.T, backend string) {
	ctx := context.Background()
	const (
		network = "10.244.0.0/16"
		oldA    = "10.244.3.0/24"
		newC    = "10.244.9.0/24"
		peerD   = "10.244.5.0/24"
		mac1    = "6e:00:00:00:03:00"
		mac2    = "6e:00:00:00:05:00"
		under1  = "192.0.2.11"
	)
	n1, n2, br, eth1, eth2 := twoNodes(t)
	for n, subnet := range map[*testNode]string{n1: oldA, n2: peerD} {
		n.sysctl("net.ipv4.ip_forward", "1")
		n.flannelFiles(br, subnet, network)
	}
	var v1, v2 netlink.Link
	if backend == BackendVXLAN {
		v1 = n1.vxlan("flannel.1", eth1, under1, mac1, "10.244.3.0/32")
		v2 = n2.vxlan("flannel.1", eth2, "192.0.2.12", mac2, "10.244.5.0/32")
		n1.vtepTo(v1, peerD, "10.244.5.0", mac2, "192.0.2.12")
	} else {
		n1.route(peerD, "192.0.2.12", eth1, false, 0)
	}
	// flanneld on node-2 learning and forgetting a lease of node-1, with
	// the calls of its vxlan (or host-gw) backend.
	learn := func(subnet string) {
		t.Helper()
		if backend == BackendVXLAN {
			n2.vtepTo(v2, subnet, netip.MustParsePrefix(subnet).Addr().String(), mac1, under1)
			return
		}
		n2.route(subnet, under1, eth2, false, 0)
	}
	forget := func(subnet string) {
		t.Helper()
		dst := toIPNet(netip.MustParsePrefix(subnet))
		if backend == BackendHostGW {
			require.NoError(t, n2.nl.RouteDel(&netlink.Route{Dst: dst, Gw: net.ParseIP(under1)}))
			return
		}
		mac, err := net.ParseMAC(mac1)
		require.NoError(t, err)
		vtepIP := dst.IP
		require.NoError(t, n2.nl.NeighDel(&netlink.Neigh{LinkIndex: v2.Attrs().Index, State: netlink.NUD_PERMANENT, Type: syscall.RTN_UNICAST, IP: vtepIP, HardwareAddr: mac}))
		require.NoError(t, n2.nl.NeighDel(&netlink.Neigh{LinkIndex: v2.Attrs().Index, Family: syscall.AF_BRIDGE, Flags: netlink.NTF_SELF, IP: net.ParseIP(under1), HardwareAddr: mac}))
		rt := &netlink.Route{LinkIndex: v2.Attrs().Index, Scope: netlink.SCOPE_UNIVERSE, Dst: dst, Gw: vtepIP}
		rt.SetFlag(netlink.FLAG_ONLINK)
		require.NoError(t, n2.nl.RouteDel(rt))
	}
	learn(oldA)
	p1 := n1.addPod(br, runPrefix+"p1", "10.244.3.2/24", "10.244.3.1")
	p2 := n2.addPod(br, runPrefix+"p2", "10.244.5.2/24", "10.244.5.1")
	reach(t, p2.testNode, "p2", p1.ip, p2.ip)

	// Without a standby, node-1's delete cuts p1 off.
	forget(oldA)
	_, err := p2.dial(p1.ip)
	require.Error(t, err, "p2 -> p1 once flanneld forgot A, without a standby")
	learn(oldA)
	reach(t, p2.testNode, "p2", p1.ip, p2.ip)

	node1 := Peer{Name: "node-1", PodCIDR: netip.MustParsePrefix(oldA), NextPodCIDR: netip.MustParsePrefix(newC),
		PublicIP: netip.MustParseAddr(under1), VTEPMAC: mac1}
	w2 := n2.want("node-2", peerD, network)
	w2.Backend, w2.Bridge = backend, br
	w2.Peers = []Peer{node1}
	w2.PeersComplete = true
	w2.LivePods = []Pod{{Name: "default/p2", IP: netip.MustParseAddr(p2.ip)}}
	w2.LivePodsComplete = true
	apply := func(want []string) {
		t.Helper()
		r, err := Audit(ctx, w2)
		require.NoError(t, err)
		assert.Equal(t, want, codes(r))
		plan, err := NewPlan(r)
		require.NoError(t, err)
		res, err := Apply(ctx, w2, plan, ApplyOptions{})
		require.NoError(t, err)
		if len(want) == 0 {
			assert.Empty(t, res.Outcomes)
		} else {
			assert.Equal(t, map[Status]int{StatusDone: len(want)}, statuses(res), "%v", res.Outcomes)
		}
		r, err = Verify(ctx, w2)
		require.NoError(t, err, "%v", r)
	}

	// Before node-1's delete: the standby.
	standby := oldA + " via 192.0.2.11 dev eth0 metric 1"
	if backend == BackendVXLAN {
		standby = oldA + " via 10.244.9.0 dev flannel.1 onlink metric 1"
		apply([]string{"standby-missing fdb 00:00:00:00:00:00 dst " + under1, "standby-missing neighbour 10.244.9.0", "standby-missing route " + oldA})
		assert.Contains(t, n2.state(), "neigh 10.244.9.0 lladdr "+mac1+" dev flannel.1")
		assert.Contains(t, n2.state(), "fdb 00:00:00:00:00:00 dst "+under1+" dev flannel.1")
	} else {
		apply([]string{"standby-missing route " + oldA})
	}
	assert.Contains(t, n2.routeLines(), standby)
	reach(t, p2.testNode, "p2", p1.ip, p2.ip)

	// node-1's Node is deleted: flanneld forgets A, the standby stays.
	forget(oldA)
	assert.Contains(t, n2.routeLines(), standby, "flanneld's delete leaves the standby route")
	for i := range 5 {
		n2.flushNeigh(br)
		got, err := p2.dial(p1.ip)
		if assert.NoError(t, err, "p2 -> p1 after flanneld forgot A (try %d)", i) {
			assert.Equal(t, p2.ip, got)
		}
	}
	// A re-run in that window changes nothing: the standby stands in for
	// flanneld's route.
	apply(nil)

	// The Node is back with C; node-1's restarted flanneld moved its VTEP
	// to C.0 (and added its routes again: here they stay, the new address
	// comes first).
	if backend == BackendVXLAN {
		require.NoError(t, n1.nl.AddrAdd(v1, mustAddr(t, "10.244.9.0/32")))
		require.NoError(t, n1.nl.AddrDel(v1, mustAddr(t, "10.244.3.0/32")))
	}
	learn(newC)
	reach(t, p2.testNode, "p2", p1.ip, p2.ip)

	// The runbook lists A as node-1's old subnet: the standby route is the
	// transition route, nothing to do.
	w2.Peers = []Peer{{Name: "node-1", PodCIDR: netip.MustParsePrefix(newC), OldPodCIDRs: []netip.Prefix{netip.MustParsePrefix(oldA)},
		PublicIP: netip.MustParseAddr(under1), VTEPMAC: mac1}}
	apply(nil)
	reach(t, p2.testNode, "p2", p1.ip, p2.ip)

	// p1 is gone; node-1 lists A no more: no trace of A or of the standby.
	w2.Peers[0].OldPodCIDRs = nil
	if backend == BackendVXLAN {
		apply([]string{"route-stale route " + oldA, "standby-left fdb 00:00:00:00:00:00 dst " + under1})
	} else {
		apply([]string{"route-stale route " + oldA})
	}
	st := n2.state()
	assert.NotContains(t, st, "10.244.3.", "no trace of A on node-2")
	assert.NotContains(t, st, "00:00:00:00:00:00", "no default FDB entry on node-2")
	if backend == BackendVXLAN {
		assert.Contains(t, st, "neigh 10.244.9.0 lladdr "+mac1+" dev flannel.1", "C's neighbour entry is flanneld's now")
	}
}

func mustAddr(t *testing.T, s string) *netlink.Addr {
	t.Helper()
	a, err := netlink.ParseAddr(s)
	require.NoError(t, err)
	return a
}

// TestDataplaneNeighbourOfAPeerRestored: node-1 keeps A while another node
// that had registered with A (a duplicate) is deleted; node-2's flanneld
// then deletes its route to A, the neighbour entry of A.0 and the FDB entry
// of the holder it cached last (node-1), and p2 loses p1 (seed 001). A want
// listing node-1 with its VTEP MAC, and its FDB entry, brings back all
// three: p2 reaches p1 again. Without the
// neighbour entry the route leads nowhere (and a later duplicate's delete
// would find no entry to delete, which flanneld retries for up to a minute
// before it handles any other lease).
func TestDataplaneNeighbourOfAPeerRestored(t *testing.T) {
	ctx := context.Background()
	const (
		network = "10.244.0.0/16"
		subnetA = "10.244.3.0/24"
		subnetD = "10.244.5.0/24"
		mac1    = "6e:00:00:00:03:00"
		mac2    = "6e:00:00:00:05:00"
		under1  = "192.0.2.11"
	)
	n1, n2, br, eth1, eth2 := twoNodes(t)
	for n, subnet := range map[*testNode]string{n1: subnetA, n2: subnetD} {
		n.sysctl("net.ipv4.ip_forward", "1")
		n.flannelFiles(br, subnet, network)
	}
	v1 := n1.vxlan("flannel.1", eth1, under1, mac1, "10.244.3.0/32")
	v2 := n2.vxlan("flannel.1", eth2, "192.0.2.12", mac2, "10.244.5.0/32")
	n1.vtepTo(v1, subnetD, "10.244.5.0", mac2, "192.0.2.12")
	n2.vtepTo(v2, subnetA, "10.244.3.0", mac1, under1)
	p1 := n1.addPod(br, runPrefix+"p1", "10.244.3.2/24", "10.244.3.1")
	p2 := n2.addPod(br, runPrefix+"p2", "10.244.5.2/24", "10.244.5.1")
	reach(t, p2.testNode, "p2", p1.ip, p2.ip)

	// The duplicate's delete, as flanneld on node-2 carries it out: it
	// keeps one lease per subnet, node-1's here (the holder it learned
	// last), so it deletes node-1's FDB entry too.
	dst := toIPNet(netip.MustParsePrefix(subnetA))
	require.NoError(t, n2.nl.NeighDel(&netlink.Neigh{LinkIndex: v2.Attrs().Index, State: netlink.NUD_PERMANENT, Type: syscall.RTN_UNICAST, IP: dst.IP}))
	mac, err := net.ParseMAC(mac1)
	require.NoError(t, err)
	require.NoError(t, n2.nl.NeighDel(&netlink.Neigh{LinkIndex: v2.Attrs().Index, Family: syscall.AF_BRIDGE, Flags: netlink.NTF_SELF, IP: net.ParseIP(under1), HardwareAddr: mac}))
	rt := &netlink.Route{LinkIndex: v2.Attrs().Index, Scope: netlink.SCOPE_UNIVERSE, Dst: dst, Gw: dst.IP}
	rt.SetFlag(netlink.FLAG_ONLINK)
	require.NoError(t, n2.nl.RouteDel(rt))
	_, err = p2.dial(p1.ip)
	require.Error(t, err, "p2 -> p1 once flanneld removed the duplicate's lease of A")

	w2 := n2.want("node-2", subnetD, network)
	w2.Backend, w2.Bridge = BackendVXLAN, br
	w2.Peers = []Peer{{Name: "node-1", PodCIDR: netip.MustParsePrefix(subnetA), PublicIP: netip.MustParseAddr(under1), VTEPMAC: mac1}}
	w2.PeersComplete = true
	w2.FDB = []FDBEntry{{MAC: mac1, Dst: netip.MustParseAddr(under1)}}
	r, err := Audit(ctx, w2)
	require.NoError(t, err)
	assert.Equal(t, []string{"fdb-missing fdb " + mac1 + " dst " + under1, "neighbour-missing neighbour 10.244.3.0", "route-missing route " + subnetA}, codes(r))
	plan, err := NewPlan(r)
	require.NoError(t, err)
	res, err := Apply(ctx, w2, plan, ApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[Status]int{StatusDone: 3}, statuses(res), "%v", res.Outcomes)
	_, err = Verify(ctx, w2)
	require.NoError(t, err)
	assert.Contains(t, n2.state(), "neigh 10.244.3.0 lladdr "+mac1+" dev flannel.1")
	assert.Contains(t, n2.state(), "fdb "+mac1+" dst "+under1+" dev flannel.1")
	reach(t, p2.testNode, "p2", p1.ip, p2.ip)
}
