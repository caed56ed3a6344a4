package nodenet

import (
	"net/netip"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

// TestDataplaneDeleteRouteMatchesTheDevice: a route to delete names its
// device; a route to the same destination through another device is not
// it and stays (a route of flanneld's through flannel.1 is not a stale
// cni0 route of the same subnet).
func TestDataplaneDeleteRouteMatchesTheDevice(t *testing.T) {
	n := newTestNode(t)
	a := n.bridge("bra")
	n.bridge("brb")
	n.route("10.99.0.0/24", "", a, false, 0)
	h, err := openHost(n.want("n1", "10.244.1.0/24", ""))
	require.NoError(t, err)
	defer h.close()
	dst := netip.MustParsePrefix("10.99.0.0/24")

	st, _, err := h.deleteRoute(&Action{Kind: ActionDeleteRoute, Route: &Route{Dst: dst, Dev: "brb"}})
	require.NoError(t, err)
	assert.Equal(t, StatusUnchanged, st, "no route to 10.99.0.0/24 through brb")
	assert.Contains(t, n.routeLines(), "10.99.0.0/24 dev bra")

	st, _, err = h.deleteRoute(&Action{Kind: ActionDeleteRoute, Route: &Route{Dst: dst, Dev: "bra"}})
	require.NoError(t, err)
	assert.Equal(t, StatusDone, st)
	assert.NotContains(t, n.routeLines(), "10.99.0.0/24 dev bra")
}

// TestDataplaneBridgeKeepsAnOldGatewayTheTransitionDoesNotServe: the bridge's
// set-address that takes away an old gateway the plan moves to the
// transition waits while the transition does not serve it (its veth, proxy
// entry and route are missing); other actions on the bridge are not held.
func TestDataplaneBridgeKeepsAnOldGatewayTheTransitionDoesNotServe(t *testing.T) {
	n := newTestNode(t)
	n.bridge("cni0", "10.244.3.1/24")
	h, err := openHost(n.want("n1", "10.244.9.0/24", ""))
	require.NoError(t, err)
	defer h.close()
	link, _ := TransitionLinks("cni0")
	old := netip.MustParsePrefix("10.244.3.1/24")
	p := &Plan{Bridge: "cni0", Actions: []Action{
		{Kind: ActionSetTransition, Link: link, Add: old},
		{Kind: ActionSetAddress, Link: "cni0", Add: netip.MustParsePrefix("10.244.9.1/24"), Remove: []netip.Prefix{old}},
		{Kind: ActionDeleteRoute, Link: "cni0", Remove: []netip.Prefix{old}, Route: &Route{Dst: netip.MustParsePrefix("10.244.3.0/24"), Dev: "cni0"}},
	}}
	assert.Equal(t, "the transition does not serve the old gateway 10.244.3.1/24 yet; taking it off cni0 would cut the old pods off", h.unmoved(p, &p.Actions[1]))
	assert.Empty(t, h.unmoved(p, &p.Actions[2]), "only the bridge's set-address is held")

	// The veth with the gateway's host route and the proxy entry, but not
	// yet the old subnet's route through the bridge: still held.
	_, port := TransitionLinks("cni0")
	veth := n.addLink(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: link}, PeerName: port})
	n.route("10.244.3.1/32", "", veth, false, 0)
	br, err := n.nl.LinkByName("cni0")
	require.NoError(t, err)
	require.NoError(t, n.nl.NeighAdd(&netlink.Neigh{LinkIndex: br.Attrs().Index, Family: netlink.FAMILY_V4, Flags: netlink.NTF_PROXY, IP: old.Addr().AsSlice()}))
	assert.NotEmpty(t, h.unmoved(p, &p.Actions[1]), "the old subnet's route through the bridge is missing")
	n.route("10.244.3.0/24", "", br, false, TransitionMetric)
	assert.Empty(t, h.unmoved(p, &p.Actions[1]), "the transition serves the old gateway")
}

// TestDataplaneSetAddressOverlappingTheOldOne: when the new address shares
// the old one's range (the node mask changed, or the gateway moved inside
// the same subnet), the old one is deleted first. Added first, the new one
// would be the old one's secondary, and deleting a primary deletes its
// secondaries (promote_secondaries off, the kernel's default): the bridge
// would be left with no address.
func TestDataplaneSetAddressOverlappingTheOldOne(t *testing.T) {
	for _, tc := range []struct{ name, old, add string }{
		{"node mask /24 to /23", "10.244.2.1/24", "10.244.2.1/23"},
		{"gateway moved in the subnet", "10.244.3.1/24", "10.244.3.254/24"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t)
			n.bridge("cni0", tc.old)
			require.NoError(t, n.h.inNS(func() error {
				return os.WriteFile("/proc/sys/net/ipv4/conf/cni0/promote_secondaries", []byte("0"), 0)
			}))
			h, err := openHost(n.want("n1", netip.MustParsePrefix(tc.add).Masked().String(), ""))
			require.NoError(t, err)
			defer h.close()
			st, _, err := h.setAddress(&Action{Kind: ActionSetAddress, Link: "cni0", Add: netip.MustParsePrefix(tc.add), Remove: []netip.Prefix{netip.MustParsePrefix(tc.old)}})
			require.NoError(t, err)
			assert.Equal(t, StatusDone, st)
			assert.Equal(t, []string{tc.add}, n.addrsOf("cni0"))
		})
	}
}

// TestDataplaneDeleteTransitionLeavesALinkThatIsNotOne: a link with the
// transition veth's name that is not a veth (someone else's; a bridge
// here) is never
// deleted: the action is skipped and says so. With no such link at all
// there is nothing to delete and nothing is skipped.
func TestDataplaneDeleteTransitionLeavesALinkThatIsNotOne(t *testing.T) {
	n := newTestNode(t)
	n.bridge("cni0", "10.244.9.1/24")
	h, err := openHost(n.want("n1", "10.244.9.0/24", ""))
	require.NoError(t, err)
	defer h.close()
	h.bridge = "cni0" // as Apply sets it from the CNI config
	link, _ := TransitionLinks("cni0")
	old := netip.MustParsePrefix("10.244.3.1/24")
	a := &Action{Kind: ActionDeleteTransition, Link: link, Remove: []netip.Prefix{old}, Retires: []netip.Prefix{old.Masked()}}

	st, detail, err := h.deleteTransition(a, nil)
	require.NoError(t, err)
	assert.Equal(t, StatusUnchanged, st, detail)

	n.bridge(link)
	st, detail, err = h.deleteTransition(a, nil)
	require.NoError(t, err)
	assert.Equal(t, StatusSkipped, st)
	assert.Equal(t, link+" is not the transition veth now", detail)
	_, err = n.nl.LinkByName(link)
	assert.NoError(t, err, "the other link is still there")
}

// TestDataplaneSetTransitionTakesThePeerOffTheBridge: the transition's peer
// must be no bridge port (packets for the old gateway would go back into
// the bridge); a peer found on the bridge is taken off it, and the detail
// says so.
func TestDataplaneSetTransitionTakesThePeerOffTheBridge(t *testing.T) {
	n := newTestNode(t)
	br := n.bridge("cni0", "10.244.9.1/24")
	h, err := openHost(n.want("n1", "10.244.9.0/24", ""))
	require.NoError(t, err)
	defer h.close()
	h.bridge = "cni0" // as Apply sets it from the CNI config
	link, port := TransitionLinks("cni0")
	n.addLink(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: link}, PeerName: port})
	p, err := n.nl.LinkByName(port)
	require.NoError(t, err)
	require.NoError(t, n.nl.LinkSetMaster(p, br))

	st, detail, err := h.setTransition(&Action{Kind: ActionSetTransition, Link: link, Peer: port, Add: netip.MustParsePrefix("10.244.3.1/24"), Why: "w"})
	require.NoError(t, err)
	assert.Equal(t, StatusDone, st)
	assert.Contains(t, detail, port+" off the bridge")
	p, err = n.nl.LinkByName(port)
	require.NoError(t, err)
	assert.Zero(t, p.Attrs().MasterIndex, "the peer is no bridge port")
}
