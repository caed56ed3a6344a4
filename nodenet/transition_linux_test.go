//go:build linux

package nodenet

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

// echoPort is where the test pods' TCP echo servers listen; they answer
// with the source address they saw.
const echoPort = 7007

// sysctl writes a /proc/sys value inside the namespace.
func (n *testNode) sysctl(key, value string) {
	n.t.Helper()
	require.NoError(n.t, n.h.inNS(func() error {
		return os.WriteFile("/proc/sys/"+strings.ReplaceAll(key, ".", "/"), []byte(value), 0o644)
	}))
}

// serve runs a TCP server in the namespace that writes the peer's address
// and closes; it stops with the test.
func (n *testNode) serve() {
	n.t.Helper()
	var ln net.Listener
	require.NoError(n.t, n.h.inNS(func() error {
		var err error
		ln, err = net.Listen("tcp4", ":"+strconv.Itoa(echoPort))
		return err
	}))
	n.t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, c.RemoteAddr().(*net.TCPAddr).IP.String())
			_ = c.Close()
		}
	}()
}

// dial connects from the namespace to dst's echo server and returns the
// source address the server saw.
func (n *testNode) dial(dst string) (string, error) {
	var got string
	err := n.h.inNS(func() error {
		c, err := net.DialTimeout("tcp4", net.JoinHostPort(dst, strconv.Itoa(echoPort)), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		b, err := io.ReadAll(c)
		got = string(b)
		return err
	})
	return got, err
}

// flannelFiles writes subnet.env for subnet and a bridge CNI config (the
// flannel plugin's delegate) for bridge and subnet.
func (n *testNode) flannelFiles(bridge, subnet, network string) {
	n.t.Helper()
	gw := gateway(netip.MustParsePrefix(subnet))
	n.file("run/flannel/subnet.env", "FLANNEL_NETWORK="+network+"\nFLANNEL_SUBNET="+gw.String()+"\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")
	n.file("etc/cni/net.d/10-bridge.conf", `{"cniVersion":"0.3.1","name":"cbr0","type":"bridge","bridge":"`+bridge+
		`","isDefaultGateway":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"`+subnet+`"}]]}}`)
}

// pod is a pod namespace on a node's bridge.
type pod struct {
	*testNode
	ip     string
	hostIf string
}

// addPod creates a pod namespace with eth0 at addr (a prefix), a veth on
// the node's bridge (hostIf, named with the run prefix), a default route via
// gw, and an echo server.
func (n *testNode) addPod(bridge, hostIf, addr, gw string) *pod {
	n.t.Helper()
	p := newTestNode(n.t)
	br, err := n.nl.LinkByName(bridge)
	require.NoError(n.t, err)
	require.NoError(n.t, n.nl.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf, MasterIndex: br.Attrs().Index},
		PeerName: "eth0", PeerNamespace: netlink.NsFd(p.ns)}))
	l, err := n.nl.LinkByName(hostIf)
	require.NoError(n.t, err)
	require.NoError(n.t, n.nl.LinkSetUp(l))
	eth0, err := p.nl.LinkByName("eth0")
	require.NoError(n.t, err)
	a, err := netlink.ParseAddr(addr)
	require.NoError(n.t, err)
	require.NoError(n.t, p.nl.AddrAdd(eth0, a))
	require.NoError(n.t, p.nl.LinkSetUp(eth0))
	require.NoError(n.t, p.nl.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP(gw)}))
	p.serve()
	return &pod{testNode: p, ip: a.IP.String(), hostIf: hostIf}
}

// linkTwo joins two nodes' namespaces with a veth (eth0 in each) at the
// given underlay addresses.
func linkTwo(t *testing.T, n1, n2 *testNode, a1, a2 string) (eth1, eth2 netlink.Link) {
	t.Helper()
	require.NoError(t, n1.nl.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0", PeerNamespace: netlink.NsFd(n2.ns)}))
	up := func(n *testNode, addr string) netlink.Link {
		l, err := n.nl.LinkByName("eth0")
		require.NoError(t, err)
		a, err := netlink.ParseAddr(addr)
		require.NoError(t, err)
		require.NoError(t, n.nl.AddrAdd(l, a))
		require.NoError(t, n.nl.LinkSetUp(l))
		return l
	}
	return up(n1, a1), up(n2, a2)
}

// vtepTo makes n's VTEP reach a peer's: the ARP entry of the peer's VTEP
// address and the FDB entry of its MAC, as flanneld's vxlan backend writes
// them, and flanneld's route to the peer's subnet.
func (n *testNode) vtepTo(vtep netlink.Link, subnet, peerVTEPAddr, peerMAC, peerUnderlay string) {
	n.t.Helper()
	mac, err := net.ParseMAC(peerMAC)
	require.NoError(n.t, err)
	require.NoError(n.t, n.nl.NeighSet(&netlink.Neigh{LinkIndex: vtep.Attrs().Index, Family: syscall.AF_INET, State: netlink.NUD_PERMANENT,
		Type: syscall.RTN_UNICAST, IP: net.ParseIP(peerVTEPAddr), HardwareAddr: mac}))
	require.NoError(n.t, n.nl.NeighAppend(&netlink.Neigh{LinkIndex: vtep.Attrs().Index, Family: syscall.AF_BRIDGE, State: netlink.NUD_PERMANENT,
		Flags: netlink.NTF_SELF, IP: net.ParseIP(peerUnderlay), HardwareAddr: mac}))
	n.route(subnet, peerVTEPAddr, vtep, true, 0)
}

// flushNeigh forgets the IPv4 neighbours the namespace learned on link.
func (n *testNode) flushNeigh(link string) {
	n.t.Helper()
	l, err := n.nl.LinkByName(link)
	require.NoError(n.t, err)
	ns, err := n.nl.NeighList(l.Attrs().Index, netlink.FAMILY_V4)
	require.NoError(n.t, err)
	for _, e := range ns {
		if e.State&netlink.NUD_PERMANENT == 0 {
			_ = n.nl.NeighDel(&e)
		}
	}
}

// neighMAC is the MAC the namespace holds for ip on l ("" when none).
func (n *testNode) neighMAC(l netlink.Link, ip string) string {
	n.t.Helper()
	ns, err := n.nl.NeighList(l.Attrs().Index, netlink.FAMILY_V4)
	require.NoError(n.t, err)
	for _, e := range ns {
		if e.IP.String() == ip {
			return e.HardwareAddr.String()
		}
	}
	return ""
}

// reach asserts that from reaches to's echo server and that the source
// address it saw is want.
func reach(t *testing.T, from *testNode, fromName, to, want string) {
	t.Helper()
	got, err := from.dial(to)
	if assert.NoError(t, err, "%s -> %s", fromName, to) {
		assert.Equal(t, want, got, "%s -> %s: the source address is kept", fromName, to)
	}
}

// twoNodes makes node-1 and node-2, joined by their eth0 at 192.0.2.11 and
// 192.0.2.12, each with the bridge br (with A's gateway 10.244.3.1/24 on
// node-1, D's 10.244.5.1/24 on node-2).
func twoNodes(t *testing.T) (n1, n2 *testNode, br string, eth1, eth2 netlink.Link) {
	t.Helper()
	n1, n2 = newTestNode(t), newTestNode(t)
	br = runPrefix + "cni"
	eth1, eth2 = linkTwo(t, n1, n2, "192.0.2.11/24", "192.0.2.12/24")
	n1.bridge(br, "10.244.3.1/24")
	n2.bridge(br, "10.244.5.1/24")
	return n1, n2, br, eth1, eth2
}

// TestDataplaneTransition moves node-1 from the old subnet A=10.244.3.0/24
// to C=10.244.9.0/24 while pod p1 still runs at A.2, make before break, in
// real namespaces with flannel's masquerade rules and br_netfilter: Apply
// on node-1 has the bridge answer for A.1 as a proxy and gives it C.1, a
// new pod p3 at C.2 starts, and Apply on node-2 adds the route to A. Every
// pair of p1, p3 and node-2's p2 talks TCP with source addresses kept, and
// p1 reaches the node's and node-2's underlay addresses 20 times over with
// ARP caches flushed, NATed exactly as p3 is. Once p1 is gone, the
// transition is torn down on both nodes and no trace of A is left.
func TestDataplaneTransition(t *testing.T) {
	// Each backend has its own namespaces; run side by side, they take half
	// the time. Most of it is waiting: each time p1's ARP cache is flushed
	// below, the bridge's proxy answer for A.1 comes up to proxy_delay
	// (0.8 s) late.
	for _, backend := range []string{BackendHostGW, BackendVXLAN} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testTransition(t, backend)
		})
	}
}

func testTransition(t *testing.T, backend string) {
	ctx := context.Background()
	const (
		network = "10.244.0.0/16"
		oldA    = "10.244.3.0/24"
		newC    = "10.244.9.0/24"
		peerD   = "10.244.5.0/24"
		mac1    = "6e:00:00:00:09:00"
		mac2    = "6e:00:00:00:05:00"
	)
	// node-1 as flanneld leaves it after restarting on its new lease C: its
	// bridge still holds A's gateway, p1 runs at A.2.
	n1, n2, br, eth1, eth2 := twoNodes(t)
	for n, subnet := range map[*testNode]string{n1: newC, n2: peerD} {
		// The bridge plugin pins the bridge's MAC ("Set the bridge's MAC to
		// itself", so it does not follow its ports as they come and go).
		b, err := n.nl.LinkByName(br)
		require.NoError(t, err)
		require.NoError(t, n.nl.LinkSetHardwareAddr(b, b.Attrs().HardwareAddr))
		// What Kubernetes nodes run with (br_netfilter).
		n.sysctl("net.bridge.bridge-nf-call-iptables", "1")
		n.sysctl("net.ipv4.ip_forward", "1")
		n.rules(flannelMasq(subnet, network)...)
		n.rules("nat POSTROUTING -m comment --comment flanneld_masq -j FLANNEL-POSTRTG")
		n.flannelFiles(br, subnet, network)
	}
	if backend == BackendVXLAN {
		v1 := n1.vxlan("flannel.1", eth1, "192.0.2.11", mac1, "10.244.9.0/32")
		v2 := n2.vxlan("flannel.1", eth2, "192.0.2.12", mac2, "10.244.5.0/32")
		n1.vtepTo(v1, peerD, "10.244.5.0", mac2, "192.0.2.12")
		n2.vtepTo(v2, newC, "10.244.9.0", mac1, "192.0.2.11")
	} else {
		n1.route(peerD, "192.0.2.12", eth1, false, 0)
		n2.route(newC, "192.0.2.11", eth2, false, 0)
	}
	p1 := n1.addPod(br, runPrefix+"p1", "10.244.3.2/24", "10.244.3.1")
	p2 := n2.addPod(br, runPrefix+"p2", "10.244.5.2/24", "10.244.5.1")
	n1.serve()

	_, err := p2.dial(p1.ip)
	require.Error(t, err, "before the transition node-2 has no route to A (flanneld removed it with the old lease)")

	w1 := n1.want("node-1", newC, network)
	w1.Backend, w1.Bridge = backend, br
	w1.OldPodCIDR = netip.MustParsePrefix(oldA)
	w1.Peers = []Peer{{Name: "node-2", PodCIDR: netip.MustParsePrefix(peerD), PublicIP: netip.MustParseAddr("192.0.2.12")}}
	w1.PeersComplete = true
	w1.LivePods = []Pod{{Name: "default/p1", IP: netip.MustParseAddr(p1.ip)}}
	w1.LivePodsComplete = true
	w2 := n2.want("node-2", peerD, network)
	w2.Backend, w2.Bridge = backend, br
	w2.Peers = []Peer{{Name: "node-1", PodCIDR: netip.MustParsePrefix(newC), OldPodCIDRs: []netip.Prefix{netip.MustParsePrefix(oldA)},
		PublicIP: netip.MustParseAddr("192.0.2.11")}}
	w2.PeersComplete = true
	w2.LivePods = []Pod{{Name: "default/p2", IP: netip.MustParseAddr(p2.ip)}}
	w2.LivePodsComplete = true

	apply := func(n *testNode, w Want) (*Plan, *Result) {
		t.Helper()
		r, err := Audit(ctx, w)
		require.NoError(t, err)
		plan, err := NewPlan(r)
		require.NoError(t, err)
		res, err := Apply(ctx, w, plan, ApplyOptions{})
		require.NoError(t, err)
		for _, o := range res.Outcomes {
			require.NotEqual(t, StatusSkipped, o.Status, "%s", o)
		}
		return plan, res
	}

	// The transition on node-1.
	r, err := Audit(ctx, w1)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"bridge-address link " + br,
		"masq-keep-missing chain nat FLANNEL-POSTRTG", "masq-keep-missing chain nat FLANNEL-POSTRTG",
	}, codes(r))
	plan, _ := apply(n1, w1)
	link, port := TransitionLinks(br)
	brl, err := n1.nl.LinkByName(br)
	require.NoError(t, err)
	p1eth0, err := p1.nl.LinkByName("eth0")
	require.NoError(t, err)
	assert.Equal(t, []ActionKind{ActionSetTransition, ActionSetAddress, ActionInsertRule, ActionInsertRule}, kinds(plan))
	assert.Equal(t, []string{"10.244.9.1/24"}, n1.addrsOf(br), "the bridge has C's gateway: the bridge plugin accepts new pods")
	assert.Equal(t, []string{"10.244.3.1"}, n1.proxies(br), "the bridge answers ARP for A's gateway as a proxy")
	assert.Empty(t, n1.addrsOf(link), "A's gateway is no address of any device")
	assert.Subset(t, n1.routeLines(), []string{oldA + " dev " + br + " metric 1", "10.244.3.1/32 dev " + link})
	pl, err := n1.nl.LinkByName(port)
	require.NoError(t, err)
	assert.Zero(t, pl.Attrs().MasterIndex, "%s is no bridge port", port)
	assert.Zero(t, pl.Attrs().Flags&net.FlagUp, "%s stays down: packets routed to A.1 itself end there", port)
	keep := []string{
		`-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.3.0/24 -m comment --comment "cidrshift nodenet: keep old pod addresses" -j RETURN`,
		`-A FLANNEL-POSTRTG -s 10.244.3.0/24 -d 10.244.0.0/16 -m comment --comment "cidrshift nodenet: keep old pod addresses" -j RETURN`,
	}
	assert.Equal(t, keep, n1.chain("nat", "FLANNEL-POSTRTG")[:2], "the RETURN rules for A, at the top")

	// Re-running changes nothing; the transition is audited as active, its
	// teardown deferred, so Verify does not pass yet.
	before := n1.state()
	res, err := Apply(ctx, w1, plan, ApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[Status]int{StatusUnchanged: len(plan.Actions)}, statuses(res), "%v", res.Outcomes)
	assert.Equal(t, before, n1.state())
	r, err = Verify(ctx, w1)
	require.ErrorIs(t, err, ErrNotConverged)
	f := finding(t, r, CodeTransitionActive, "link "+link)
	require.Len(t, f.Fix, 1)
	again, err := NewPlan(r)
	require.NoError(t, err)
	for _, a := range again.Actions {
		assert.NotEmpty(t, a.Deferred, "while p1 lives only deferred teardown is planned: %s %s", a.Kind, a.Object)
	}

	// The route to A on node-2.
	r, err = Audit(ctx, w2)
	require.NoError(t, err)
	fdb := "fdb 00:00:00:00:00:00 dst 192.0.2.11"
	if backend == BackendVXLAN {
		// While node-1 lists an old subnet, node-2's VTEP floods frames
		// for a MAC flanneld has not (re)learned to node-1.
		assert.Equal(t, []string{"route-missing route " + oldA, "standby-missing " + fdb}, codes(r))
	} else {
		assert.Equal(t, []string{"route-missing route " + oldA}, codes(r))
	}
	apply(n2, w2)
	wantRoute := oldA + " via 192.0.2.11 dev eth0"
	if backend == BackendVXLAN {
		wantRoute = oldA + " via 10.244.9.0 dev flannel.1 onlink"
	}
	assert.Contains(t, n2.routeLines(), wantRoute)
	_, err = Verify(ctx, w2)
	require.NoError(t, err)

	// A new pod on node-1 gets C.2 on the bridge, gateway C.1.
	p3 := n1.addPod(br, runPrefix+"p3", "10.244.9.2/24", "10.244.9.1")
	pods := map[string]*pod{"p1": p1, "p2": p2, "p3": p3}
	for fromName, from := range pods {
		for toName, to := range pods {
			if fromName != toName {
				reach(t, from.testNode, fromName, to.ip, from.ip)
			}
		}
	}
	// The old gateway is a next hop, not a host address: p1's packets to
	// A.1 itself go nowhere (they end at the transition veth).
	_, err = p1.dial("10.244.3.1")
	assert.Error(t, err, "p1 -> its gateway's own address")
	// Old pods' traffic takes new pods' path: frames to the bridge's own
	// MAC, routed once, NATed once. With br_netfilter, a bridged hop to a
	// device beside the bridge would let flannel's MASQUERADE bind NAT on
	// the bridge pass. Whatever the ARP caches hold, p1 resolves A.1 to the
	// bridge's MAC and reaches the node's underlay address with its own
	// source, and node-2's with the node's (MASQUERADE, as for p3).
	brMAC := brl.Attrs().HardwareAddr.String()
	n2.serve()
	for i := range 20 {
		p1.flushNeigh("eth0")
		if i%2 == 1 {
			// The node forgets p1 too, so the next exchange starts from its side.
			n1.flushNeigh(br)
		}
		reach(t, p1.testNode, "p1", "192.0.2.11", p1.ip)
		reach(t, p1.testNode, "p1", "192.0.2.12", "192.0.2.11")
		assert.Equal(t, brMAC, p1.neighMAC(p1eth0, "10.244.3.1"), "p1 resolves its gateway to the bridge's MAC (try %d)", i)
	}
	reach(t, p3.testNode, "p3", "192.0.2.11", p3.ip)
	reach(t, p3.testNode, "p3", "192.0.2.12", "192.0.2.11")
	reach(t, p3.testNode, "p3", "10.244.9.1", p3.ip)

	// p1 is gone (its veth with it); node-1 tears the transition down, and
	// node-2's peer entry no longer lists A.
	require.NoError(t, n1.nl.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p1.hostIf}}))
	w1.LivePods = []Pod{{Name: "default/p3", IP: netip.MustParseAddr(p3.ip)}}
	r, err = Audit(ctx, w1)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"rule-stale rule nat FLANNEL-POSTRTG #1", "rule-stale rule nat FLANNEL-POSTRTG #2",
		"transition-left link " + link,
	}, codes(r))
	apply(n1, w1)
	_, err = n1.nl.LinkByName(link)
	assert.Error(t, err, "the transition veth is gone")
	_, err = n1.nl.LinkByName(port)
	assert.Error(t, err, "its peer too")
	assert.Empty(t, n1.proxies(br), "the proxy entry is gone")
	w2.Peers[0].OldPodCIDRs = nil
	r, err = Audit(ctx, w2)
	require.NoError(t, err)
	if backend == BackendVXLAN {
		assert.Equal(t, []string{"route-stale route " + oldA, "standby-left " + fdb}, codes(r))
	} else {
		assert.Equal(t, []string{"route-stale route " + oldA}, codes(r))
	}
	apply(n2, w2)
	assert.NotContains(t, n2.state(), "00:00:00:00:00:00", "the default FDB entry is gone")
	for _, c := range []struct {
		n *testNode
		w Want
	}{{n1, w1}, {n2, w2}} {
		r, err := Verify(ctx, c.w)
		require.NoError(t, err, "%v", r)
		assert.NotContains(t, c.n.state(), "10.244.3.", "no trace of A on %s", c.w.Node)
	}
	reach(t, p3.testNode, "p3", p2.ip, p3.ip)
	reach(t, p2.testNode, "p2", p3.ip, p2.ip)
}

// TestDataplaneTransitionRepair: the transition is re-asserted when
// something (flanneld's restart flushing FLANNEL-POSTRTG, a person
// flushing proxy entries) took part of it away, and a foreign link with the transition's name is refused.
func TestDataplaneTransitionRepair(t *testing.T) {
	ctx := context.Background()
	n := newTestNode(t)
	br := runPrefix + "cni"
	n.bridge(br, "10.244.9.1/24")
	n.rules(flannelMasq("10.244.9.0/24", "10.244.0.0/16")...)
	n.flannelFiles(br, "10.244.9.0/24", "10.244.0.0/16")
	w := n.want("node-1", "10.244.9.0/24", "10.244.0.0/16")
	w.Backend, w.Bridge = BackendHostGW, br
	w.OldPodCIDR = netip.MustParsePrefix("10.244.3.0/24")
	w.LivePods = []Pod{{Name: "default/p1", IP: netip.MustParseAddr("10.244.3.2")}}
	w.LivePodsComplete = true

	// Nothing holds A's gateway (someone removed it from the bridge).
	r, err := Audit(ctx, w)
	require.NoError(t, err)
	link, port := TransitionLinks(br)
	assert.Contains(t, codes(r), "old-gateway-missing link "+link)
	plan, err := NewPlan(r)
	require.NoError(t, err)
	_, err = Apply(ctx, w, plan, ApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"10.244.3.1"}, n.proxies(br))
	_, err = n.nl.LinkByName(port)
	require.NoError(t, err)

	// The proxy entry gone (`ip neigh flush proxy`, a person) and the
	// RETURN rules flushed, as a flanneld restart does (CreateIP4Chain
	// clears FLANNEL-POSTRTG).
	brl, err := n.nl.LinkByName(br)
	require.NoError(t, err)
	require.NoError(t, n.nl.NeighDel(&netlink.Neigh{LinkIndex: brl.Attrs().Index, Family: netlink.FAMILY_V4, Flags: netlink.NTF_PROXY, IP: net.ParseIP("10.244.3.1")}))
	require.Empty(t, n.proxies(br))
	n.ipt(func(ipt *iptables.IPTables) error { return ipt.ClearChain(tableNAT, ChainFlannelPostrouting) })
	n.rules(flannelMasq("10.244.9.0/24", "10.244.0.0/16")...)
	r, err = Audit(ctx, w)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"masq-keep-missing chain nat FLANNEL-POSTRTG", "masq-keep-missing chain nat FLANNEL-POSTRTG",
		"old-gateway-missing link " + link, "transition-active link " + link,
	}, codes(r))
	plan, err = NewPlan(r)
	require.NoError(t, err)
	_, err = Apply(ctx, w, plan, ApplyOptions{})
	require.NoError(t, err)
	r, err = Audit(ctx, w)
	require.NoError(t, err)
	assert.Equal(t, []string{"rule-stale rule nat FLANNEL-POSTRTG #1", "rule-stale rule nat FLANNEL-POSTRTG #2", "transition-active link " + link}, codes(r),
		"only the deferred teardown is left")
	assert.Equal(t, []string{"10.244.3.1"}, n.proxies(br), "the proxy entry is back")

	// Another link with the transition's name is not nodenet's: refused.
	m := newTestNode(t)
	m.bridge(br, "10.244.3.1/24")
	m.bridge(link)
	m.flannelFiles(br, "10.244.9.0/24", "10.244.0.0/16")
	w2 := m.want("node-1", "10.244.9.0/24", "10.244.0.0/16")
	w2.Backend, w2.Bridge, w2.OldPodCIDR, w2.LivePods, w2.LivePodsComplete = w.Backend, w.Bridge, w.OldPodCIDR, w.LivePods, true
	r, err = Audit(ctx, w2)
	require.NoError(t, err)
	plan, err = NewPlan(r)
	require.NoError(t, err)
	before := m.state()
	_, err = Apply(ctx, w2, plan, ApplyOptions{})
	require.ErrorContains(t, err, "is a bridge, not the transition veth")
	assert.Equal(t, before, m.state(), "the bridge keeps A's gateway")
}

func kinds(p *Plan) []ActionKind {
	out := make([]ActionKind, len(p.Actions))
	for i, a := range p.Actions {
		out[i] = a.Kind
	}
	return out
}
