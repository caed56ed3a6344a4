//go:build linux

package nodenet

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	flannelConflist = `{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	oldMAC          = "6e:00:00:00:03:00"
	newMAC          = "6e:00:00:00:09:00"
)

// flannelMasq is what flanneld v0.28 puts in nat FLANNEL-POSTRTG for lease
// subnet in network net (pkg/trafficmngr/iptables masqRules).
func flannelMasq(subnet, network string) []string {
	c := "-m comment --comment flanneld_masq"
	return []string{
		"nat FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 " + c + " -j RETURN",
		"nat FLANNEL-POSTRTG -s " + subnet + " -d " + network + " " + c + " -j RETURN",
		"nat FLANNEL-POSTRTG -s " + network + " -d " + subnet + " " + c + " -j RETURN",
		"nat FLANNEL-POSTRTG ! -s " + network + " -d " + subnet + " " + c + " -j RETURN",
		"nat FLANNEL-POSTRTG -s " + network + " ! -d 224.0.0.0/4 " + c + " -j MASQUERADE --random-fully",
		"nat FLANNEL-POSTRTG ! -s " + network + " -d " + network + " " + c + " -j MASQUERADE --random-fully",
	}
}

// movedNode builds seed 001's node after its podCIDR moved from
// 10.244.3.0/24 to 10.244.9.0/24 in 10.244.0.0/16 (vxlan): cni0, flannel.1,
// routes, flannel's rules and a hand-made MASQUERADE, subnet.env and the
// host-local reservations all still name the old subnet; pod p1 still runs
// at 10.244.3.2, p2 already at 10.244.9.2.
func movedNode(t *testing.T) (*testNode, Want) {
	n := newTestNode(t)
	eth0 := n.underlay("192.0.2.11/24")
	n.bridge("cni0", "10.244.3.1/24")
	vtep := n.vxlan("flannel.1", eth0, "192.0.2.11", oldMAC, "10.244.3.0/32")
	n.route("10.244.5.0/24", "10.244.5.0", vtep, true, 0)   // node-2: right
	n.route("10.244.5.0/24", "10.244.5.0", vtep, true, 100) // node-2: duplicate
	n.route("10.244.7.0/24", "10.244.7.0", vtep, true, 0)   // nobody's: stale
	n.route("10.244.8.0/24", "10.244.6.0", vtep, true, 0)   // node-3: wrong next hop
	n.route("198.51.100.0/24", "192.0.2.1", eth0, false, 0) // not the pod network's
	n.rules(flannelMasq("10.244.3.0/24", "10.244.0.0/16")...)
	n.rules(
		"nat POSTROUTING -m comment --comment flanneld_masq -j FLANNEL-POSTRTG",
		"nat POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE",
		"nat POSTROUTING -s 10.244.3.0/24 ! -d 10.244.0.0/16 -j MASQUERADE",
	)
	n.rules(
		"filter FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment flanneld_forward -j ACCEPT",
		"filter FLANNEL-FWD -d 10.244.0.0/16 -m comment --comment flanneld_forward -j ACCEPT",
	)
	n.file("run/flannel/subnet.env", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")
	n.file("etc/cni/net.d/10-flannel.conflist", flannelConflist)
	n.file("var/lib/cni/networks/cbr0/10.244.3.2", "c-p1\r\neth0")
	n.file("var/lib/cni/networks/cbr0/10.244.3.3", "c-gone\r\neth0")
	n.file("var/lib/cni/networks/cbr0/10.244.9.2", "c-p2\r\neth0")
	n.file("var/lib/cni/networks/cbr0/last_reserved_ip.0", "10.244.9.2")
	n.file("var/lib/cni/networks/cbr0/lock", "")

	w := n.want("node-1", "10.244.9.0/24", "10.244.0.0/16")
	w.VTEPMAC = newMAC
	w.Peers = []Peer{
		{Name: "node-2", PodCIDR: netip.MustParsePrefix("10.244.5.0/24"), OldPodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}},
		{Name: "node-3", PodCIDR: netip.MustParsePrefix("10.244.8.0/24")},
		{Name: "node-4", PodCIDR: netip.MustParsePrefix("10.244.10.0/24")},
	}
	w.PeersComplete = true
	w.LivePods = []Pod{
		{Name: "default/p1", IP: netip.MustParseAddr("10.244.3.2"), ContainerID: "c-p1"},
		{Name: "default/p2", IP: netip.MustParseAddr("10.244.9.2"), ContainerID: "c-p2"},
	}
	w.LivePodsComplete = true
	return n, w
}

// movedNodePlan is movedNode with the plan of its audit.
func movedNodePlan(t *testing.T) (*testNode, Want, *Plan) {
	n, w := movedNode(t)
	r, err := Audit(context.Background(), w)
	require.NoError(t, err)
	plan, err := NewPlan(r)
	require.NoError(t, err)
	return n, w, plan
}

// TestDataplaneMoveKeepsPodsThenConverges runs Audit, NewPlan, Apply and
// Verify on a real namespace through a whole node move: first while an old
// pod still runs (everything new is put in place, nothing the old pod needs
// is taken), then again after it moved (the rest goes, Verify passes).
func TestDataplaneMoveKeepsPodsThenConverges(t *testing.T) {
	n, w := movedNode(t)
	ctx := context.Background()
	postroutingBefore := n.chain("nat", "POSTROUTING")
	masqBefore := n.chain("nat", "FLANNEL-POSTRTG")

	r, err := Audit(ctx, w)
	require.NoError(t, err)
	assert.Equal(t, IPTablesNFT, r.IPTables)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")}, r.OldPodCIDRs, "inferred from subnet.env and cni0")
	assert.Equal(t, []string{
		"bridge-address link cni0",
		"reservation-leaked file " + n.root + "/var/lib/cni/networks/cbr0/10.244.3.3",
		"reservation-live file " + n.root + "/var/lib/cni/networks/cbr0/10.244.3.2",
		"route-duplicate route 10.244.5.0/24",
		"route-missing route 10.244.10.0/24",
		"route-missing route 10.244.2.0/24",
		"route-stale route 10.244.7.0/24",
		"route-wrong route 10.244.8.0/24",
		"rule-stale rule nat FLANNEL-POSTRTG #2",
		"rule-stale rule nat FLANNEL-POSTRTG #3",
		"rule-stale rule nat FLANNEL-POSTRTG #4",
		"rule-stale rule nat POSTROUTING #3",
		"subnet-env-subnet file " + n.root + "/run/flannel/subnet.env",
		"vtep-address link flannel.1",
		"vtep-mac link flannel.1",
	}, codes(r))
	assert.Contains(t, finding(t, r, CodeBridgeAddress, "link cni0").Message,
		`already has an IP address different from 10.244.9.1/24`, "names seed 001's CNI error")

	plan, err := NewPlan(r)
	require.NoError(t, err)
	y, err := plan.YAML()
	require.NoError(t, err)
	back, err := DecodePlan(y)
	require.NoError(t, err)
	require.Equal(t, plan, back, "the plan survives YAML")

	res, err := Apply(ctx, w, plan, ApplyOptions{})
	require.NoError(t, err)
	// 4 deferred: the four old rules, which p1 (10.244.3.2) still needs.
	// The bridge's old gateway moved to the transition (a proxy entry).
	assert.Equal(t, map[Status]int{StatusDone: len(plan.Actions) - 4, StatusDeferred: 4}, statuses(res), "%v", res.Outcomes)
	assert.Len(t, res.Deferred(), 4)

	// New state in place; what p1 uses kept.
	assert.Equal(t, []string{"10.244.9.1/24"}, n.addrsOf("cni0"), "new pods can start")
	assert.Empty(t, n.addrsOf("cni0-old"), "the old gateway is no address any more")
	assert.Equal(t, []string{"10.244.3.1"}, n.proxies("cni0"), "cni0 answers for the old gateway while p1 uses it")
	assert.Equal(t, []string{"10.244.9.0/32"}, n.addrsOf("flannel.1"))
	l, err := n.nl.LinkByName("flannel.1")
	require.NoError(t, err)
	assert.Equal(t, newMAC, l.Attrs().HardwareAddr.String())
	assert.Equal(t, []string{
		"10.244.10.0/24 via 10.244.10.0 dev flannel.1 onlink",
		"10.244.2.0/24 via 10.244.5.0 dev flannel.1 onlink",
		"10.244.3.0/24 dev cni0 metric 1",
		"10.244.3.1/32 dev cni0-old",
		"10.244.5.0/24 via 10.244.5.0 dev flannel.1 onlink",
		"10.244.8.0/24 via 10.244.8.0 dev flannel.1 onlink",
		"10.244.9.0/24 dev cni0",
		"192.0.2.0/24 dev eth0",
		"198.51.100.0/24 via 192.0.2.1 dev eth0",
	}, n.routeLines())
	assert.Equal(t, "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.9.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n", n.read("run/flannel/subnet.env"))
	assert.True(t, n.exists("var/lib/cni/networks/cbr0/10.244.3.2"), "p1's reservation is never released")
	assert.False(t, n.exists("var/lib/cni/networks/cbr0/10.244.3.3"), "the leaked reservation is released")
	assert.True(t, n.exists("var/lib/cni/networks/cbr0/10.244.9.2"))
	// Rules rewritten in place: the new form sits just before the old one.
	assert.Equal(t, []string{
		postroutingBefore[0], postroutingBefore[1],
		"-A POSTROUTING -s 10.244.9.0/24 ! -d 10.244.0.0/16 -j MASQUERADE",
		postroutingBefore[2],
	}, n.chain("nat", "POSTROUTING"))
	assert.Equal(t, []string{
		masqBefore[0],
		`-A FLANNEL-POSTRTG -s 10.244.9.0/24 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j RETURN`,
		masqBefore[1],
		`-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.9.0/24 -m comment --comment "flanneld masq" -j RETURN`,
		masqBefore[2],
		`-A FLANNEL-POSTRTG ! -s 10.244.0.0/16 -d 10.244.9.0/24 -m comment --comment "flanneld masq" -j RETURN`,
		masqBefore[3], masqBefore[4], masqBefore[5],
	}, n.chain("nat", "FLANNEL-POSTRTG"))

	// Audit from a thread inside the namespace with NetNS empty (as a
	// hostNetwork agent runs) reads the same node.
	var inside *Report
	wHere := w
	wHere.NetNS = ""
	require.NoError(t, n.h.inNS(func() error {
		var err error
		inside, err = Audit(ctx, wHere)
		return err
	}))
	outside, err := Audit(ctx, w)
	require.NoError(t, err)
	assert.Equal(t, outside, inside)

	// Not done yet, and Verify says why.
	_, err = Verify(ctx, w)
	var nc *NotConvergedError
	require.ErrorAs(t, err, &nc)
	assert.ErrorIs(t, err, ErrNotConverged)

	// The same plan again changes nothing.
	before := n.state()
	res, err = Apply(ctx, w, plan, ApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[Status]int{StatusUnchanged: len(plan.Actions) - 4, StatusDeferred: 4}, statuses(res), "%v", res.Outcomes)
	assert.Equal(t, before, n.state())

	// A fresh plan while p1 still runs: only what p1 needs is left, deferred.
	r, err = Audit(ctx, w)
	require.NoError(t, err)
	plan, err = NewPlan(r)
	require.NoError(t, err)
	for _, a := range plan.Actions {
		assert.NotEmpty(t, a.Deferred, "%s %s", a.Kind, a.Object)
	}

	// p1 is recreated at 10.244.9.3; its old reservation was never released
	// by a CNI DEL, so it is leaked now.
	w.LivePods = []Pod{w.LivePods[1], {Name: "default/p1", IP: netip.MustParseAddr("10.244.9.3"), ContainerID: "c-p1b"}}
	r, err = Audit(ctx, w)
	require.NoError(t, err)
	plan, err = NewPlan(r)
	require.NoError(t, err)
	res, err = Apply(ctx, w, plan, ApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[Status]int{StatusDone: len(plan.Actions)}, statuses(res), "%v", res.Outcomes)
	assert.Equal(t, []string{"10.244.9.1/24"}, n.addrsOf("cni0"))
	assert.False(t, n.exists("var/lib/cni/networks/cbr0/10.244.3.2"))
	assert.Equal(t, []string{
		postroutingBefore[0], postroutingBefore[1],
		"-A POSTROUTING -s 10.244.9.0/24 ! -d 10.244.0.0/16 -j MASQUERADE",
	}, n.chain("nat", "POSTROUTING"), "same positions as the old rules")
	r, err = Verify(ctx, w)
	require.NoError(t, err, "%v", r)
	assert.Empty(t, codes(r))
}

// TestDataplaneSeed004 moves a host-gw node out of 172.7.0.0/16 (seed 004's
// network) into 10.20.0.0/16: the hand-made `! -d 172.7.0.0/16` MASQUERADE
// rule is rewritten in place, host-gw routes are fixed, and custom device
// names carrying the run prefix are honoured.
func TestDataplaneSeed004(t *testing.T) {
	n := newTestNode(t)
	ctx := context.Background()
	br := runPrefix + "br"
	eth0 := n.underlay("192.0.2.11/24")
	n.bridge(br, "172.7.5.1/24")
	n.route("172.7.87.0/24", "192.0.2.12", eth0, false, 0)
	n.rules(
		"nat POSTROUTING -s 198.51.100.0/24 -j MASQUERADE",
		"nat POSTROUTING -s 172.7.5.0/24 ! -d 172.7.0.0/16 -j MASQUERADE",
		"nat POSTROUTING -o eth0 -j ACCEPT",
	)
	n.file("run/flannel/subnet.env", "FLANNEL_NETWORK=172.7.0.0/16\nFLANNEL_SUBNET=172.7.5.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n")
	n.file("etc/cni/net.d/10-bridge.conf", `{"cniVersion":"0.3.1","name":"mynet","type":"bridge","bridge":"`+br+`","ipam":{"type":"host-local","ranges":[[{"subnet":"10.20.5.0/24"}]]}}`)
	n.file("var/lib/cni/networks/mynet/172.7.5.9", "c-old")

	w := n.want("node-5", "10.20.5.0/24", "10.20.0.0/16")
	w.Backend = BackendHostGW
	w.OldNetwork = netip.MustParsePrefix("172.7.0.0/16")
	w.Peers = []Peer{{Name: "node-87", PodCIDR: netip.MustParsePrefix("10.20.87.0/24"), PublicIP: netip.MustParseAddr("192.0.2.12")}}
	w.PeersComplete, w.LivePodsComplete = true, true

	r, err := Audit(ctx, w)
	require.NoError(t, err)
	assert.Equal(t, br, r.Bridge, "the bridge named by the CNI config")
	assert.Equal(t, []string{
		"bridge-address link " + br,
		"reservation-leaked file " + n.root + "/var/lib/cni/networks/mynet/172.7.5.9",
		"route-missing route 10.20.87.0/24",
		"route-stale route 172.7.87.0/24",
		"rule-stale rule nat POSTROUTING #2",
		"subnet-env-network file " + n.root + "/run/flannel/subnet.env",
		"subnet-env-subnet file " + n.root + "/run/flannel/subnet.env",
	}, codes(r))
	plan, err := NewPlan(r)
	require.NoError(t, err)
	res, err := Apply(ctx, w, plan, ApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[Status]int{StatusDone: len(plan.Actions)}, statuses(res), "%v", res.Outcomes)
	assert.Equal(t, []string{
		"-A POSTROUTING -s 198.51.100.0/24 -j MASQUERADE",
		"-A POSTROUTING -s 10.20.5.0/24 ! -d 10.20.0.0/16 -j MASQUERADE",
		"-A POSTROUTING -o eth0 -j ACCEPT",
	}, n.chain("nat", "POSTROUTING"))
	assert.Equal(t, []string{
		"10.20.5.0/24 dev " + br,
		"10.20.87.0/24 via 192.0.2.12 dev eth0",
		"192.0.2.0/24 dev eth0",
	}, n.routeLines())
	assert.Equal(t, "FLANNEL_NETWORK=10.20.0.0/16\nFLANNEL_SUBNET=10.20.5.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n", n.read("run/flannel/subnet.env"))
	r, err = Verify(ctx, w)
	require.NoError(t, err, "%v", r)
}

// TestDataplaneMasqKeep: flanneld has rebuilt FLANNEL-POSTRTG for the new
// subnet while a pod still holds an old address. Apply inserts the RETURN
// rules that keep its source address (make before break), and removes them
// once the pod has moved.
func TestDataplaneMasqKeep(t *testing.T) {
	n := newTestNode(t)
	ctx := context.Background()
	n.underlay("192.0.2.11/24")
	n.bridge("cni0", "10.244.3.1/24")
	n.rules(flannelMasq("10.244.9.0/24", "10.244.0.0/16")...)
	n.file("run/flannel/subnet.env", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.9.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")
	n.file("etc/cni/net.d/10-flannel.conflist", flannelConflist)
	w := n.want("node-1", "10.244.9.0/24", "10.244.0.0/16")
	w.Backend = BackendHostGW
	w.LivePods = []Pod{{Name: "default/p1", IP: netip.MustParseAddr("10.244.3.2")}}
	w.LivePodsComplete = true

	r, err := Audit(ctx, w)
	require.NoError(t, err)
	assert.Equal(t, []string{"bridge-address link cni0", "masq-keep-missing chain nat FLANNEL-POSTRTG", "masq-keep-missing chain nat FLANNEL-POSTRTG"}, codes(r))
	plan, err := NewPlan(r)
	require.NoError(t, err)
	_, err = Apply(ctx, w, plan, ApplyOptions{})
	require.NoError(t, err)
	got := n.chain("nat", "FLANNEL-POSTRTG")
	require.Len(t, got, 8)
	assert.Equal(t, `-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.3.0/24 -m comment --comment "cidrshift nodenet: keep old pod addresses" -j RETURN`, got[0])
	assert.Equal(t, `-A FLANNEL-POSTRTG -s 10.244.3.0/24 -d 10.244.0.0/16 -m comment --comment "cidrshift nodenet: keep old pod addresses" -j RETURN`, got[1])

	// The pod moved: the keep rules go, with the old gateway.
	w.LivePods = []Pod{{Name: "default/p1", IP: netip.MustParseAddr("10.244.9.4")}}
	r, err = Audit(ctx, w)
	require.NoError(t, err)
	plan, err = NewPlan(r)
	require.NoError(t, err)
	_, err = Apply(ctx, w, plan, ApplyOptions{})
	require.NoError(t, err)
	assert.Len(t, n.chain("nat", "FLANNEL-POSTRTG"), 6)
	_, err = Verify(ctx, w)
	require.NoError(t, err)
}

// TestDataplaneApplyNeverReleasesLivePodReservation: a reservation planned
// as leaked is kept when, at Apply time, a live pod holds it, or another
// container took the file.
func TestDataplaneApplyNeverReleasesLivePodReservation(t *testing.T) {
	n := newTestNode(t)
	ctx := context.Background()
	n.file("run/flannel/subnet.env", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.9.1/24\n")
	n.file("etc/cni/net.d/10-flannel.conflist", flannelConflist)
	n.file("var/lib/cni/networks/cbr0/10.244.3.2", "c-p1\r\neth0")
	n.file("var/lib/cni/networks/cbr0/10.244.3.3", "c-x\r\neth0")
	w := n.want("node-1", "10.244.9.0/24", "10.244.0.0/16")
	w.Backend = BackendHostGW
	w.LivePodsComplete = true // and no pod listed: both look leaked

	r, err := Audit(ctx, w)
	require.NoError(t, err)
	plan, err := NewPlan(r)
	require.NoError(t, err)
	require.Len(t, plan.Actions, 2)
	n.file("var/lib/cni/networks/cbr0/10.244.3.3", "c-y\r\neth0") // another container since
	res, err := Apply(ctx, w, plan, ApplyOptions{LivePods: []Pod{{Name: "default/p1", IP: netip.MustParseAddr("10.244.3.2")}}})
	require.NoError(t, err)
	assert.Equal(t, map[Status]int{StatusSkipped: 2}, statuses(res), "%v", res.Outcomes)
	assert.True(t, n.exists("var/lib/cni/networks/cbr0/10.244.3.2"))
	assert.True(t, n.exists("var/lib/cni/networks/cbr0/10.244.3.3"))

	// By container ID alone, too.
	res, err = Apply(ctx, w, plan, ApplyOptions{LivePods: []Pod{{ContainerID: "c-p1"}}})
	require.NoError(t, err)
	assert.Equal(t, StatusSkipped, res.Outcomes[0].Status)
	assert.True(t, n.exists("var/lib/cni/networks/cbr0/10.244.3.2"))

	// Not knowing the live pods: nothing is released.
	w.LivePodsComplete = false
	r, err = Audit(ctx, w)
	require.NoError(t, err)
	plan, err = NewPlan(r)
	require.NoError(t, err)
	assert.Empty(t, plan.Actions)
}

// TestDataplaneDryRun: a dry run reports every action and changes nothing.
func TestDataplaneDryRun(t *testing.T) {
	n, w, plan := movedNodePlan(t)
	ctx := context.Background()
	before := n.state()
	var events []Outcome
	res, err := Apply(ctx, w, plan, ApplyOptions{DryRun: true, OnEvent: func(o Outcome) { events = append(events, o) }})
	require.NoError(t, err)
	assert.Equal(t, map[Status]int{StatusDryRun: len(plan.Actions) - 4, StatusDeferred: 4}, statuses(res))
	assert.Equal(t, res.Outcomes, events)
	assert.Equal(t, before, n.state())
}

// TestDataplaneBackend: the backend Audit reports is the one `iptables -V`
// names, and a forced legacy backend reads legacy's tables.
func TestDataplaneBackend(t *testing.T) {
	n := newTestNode(t)
	ctx := context.Background()
	n.file("run/flannel/subnet.env", "FLANNEL_SUBNET=10.244.9.1/24\n")
	w := n.want("node-1", "10.244.9.0/24", "")
	w.Backend = BackendHostGW
	r, err := Audit(ctx, w)
	require.NoError(t, err)
	assert.Equal(t, iptablesV(t), r.IPTables)

	other := map[string]string{IPTablesNFT: IPTablesLegacy, IPTablesLegacy: IPTablesNFT}[r.IPTables]
	m := newTestNode(t) // a fresh namespace: the two backends do not share one
	m.file("run/flannel/subnet.env", "FLANNEL_SUBNET=10.244.9.1/24\n")
	w = m.want("node-1", "10.244.9.0/24", "")
	w.Backend, w.IPTablesBackend = BackendHostGW, other
	r, err = Audit(ctx, w)
	if errors.Is(err, ErrNoIPTables) {
		t.Skipf("the %s backend is not usable here: %v", other, err)
	}
	require.NoError(t, err)
	assert.Equal(t, other, r.IPTables)
}
