package nodenet

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlanPodCIDRUpToSlash30: a podCIDR of /30 (two pod addresses) is the
// narrowest a plan takes.
func TestPlanPodCIDRUpToSlash30(t *testing.T) {
	p := validPlan()
	p.PodCIDR = pfx("10.244.9.0/30")
	for i := range p.Actions {
		p.Actions[i].Retires = nil
	}
	p.Actions = p.Actions[1:2] // the MAC alone: nothing else names the podCIDR
	require.NoError(t, p.Validate())
	p.PodCIDR = pfx("10.244.9.0/31")
	var fe *FieldError
	require.ErrorAs(t, p.Validate(), &fe)
	assert.Equal(t, "plan.podCIDR", fe.Field)
}

// TestPlanDeleteTransitionRetiresWhatItRemoves: a delete-transition that
// takes an old gateway away must retire its subnet, for every gateway it
// removes.
func TestPlanDeleteTransitionRetiresWhatItRemoves(t *testing.T) {
	p := validPlan()
	a := &Action{Kind: ActionDeleteTransition, Link: "cni0-old", Peer: "cni0-olp",
		Remove: []netip.Prefix{pfx("10.244.3.1/24")}, Retires: []netip.Prefix{pfx("10.244.3.0/24")}}
	require.NoError(t, p.validateTransition(a, "actions[9]"))
	a.Retires = nil
	err := p.validateTransition(a, "actions[9]")
	var fe *FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "plan.actions[9].remove[0]", fe.Field)
	assert.ErrorContains(t, err, "takes 10.244.3.0/24 away but retires lists")
}

// TestTruncateKeepsAStringOfTheLimit: a value as long as the limit is shown
// whole.
func TestTruncateKeepsAStringOfTheLimit(t *testing.T) {
	assert.Equal(t, "abc", truncate("abc", 3))
	assert.Equal(t, "ab...", truncate("abc", 2))
}

// TestAnalyzeTransitionSubnetFromTheBridgeRoute: without a known old pod
// range, a transition gateway's subnet is the route through the bridge that
// holds it, skipping a host route (/32) to the gateway itself.
func TestAnalyzeTransitionSubnetFromTheBridgeRoute(t *testing.T) {
	s := baseSnapshot()
	s.envData = []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.9.1/24\n")
	s.bridge = &linkState{name: "cni0", addrs: []netip.Prefix{pfx("10.244.9.1/24")}, up: true}
	s.transition = &linkState{name: "cni0-old", up: true}
	s.transitionGWs = []netip.Addr{addr("10.244.3.1")}
	s.routes = []Route{{Dst: pfx("10.244.3.1/32"), Dev: "cni0"}, {Dst: pfx("10.244.3.0/24"), Dev: "cni0", Metric: TransitionMetric}}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), Backend: BackendHostGW})
	r := analyze(w, s)
	assert.Equal(t, []netip.Prefix{pfx("10.244.3.0/24")}, r.OldPodCIDRs)
}

// TestAnalyzeTransitionRouteLeft: without the complete list of peers, only
// a route through a listed peer to a subnet that peer no longer lists is
// known to be the transition route left behind; a route to the peer's own
// podCIDR or to an old subnet it still lists is not.
func TestAnalyzeTransitionRouteLeft(t *testing.T) {
	s := baseSnapshot()
	s.vtep = &linkState{name: "flannel.1", addrs: []netip.Prefix{pfx("10.244.9.0/32")}}
	via := func(dst string) Route {
		return Route{Dst: pfx(dst), Gw: addr("10.244.5.0"), Dev: "flannel.1", Onlink: true}
	}
	s.routes = []Route{via("10.244.5.0/24"), via("10.244.6.0/24"), via("10.244.7.0/24")}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"),
		Peers: []Peer{{Name: "n2", PodCIDR: pfx("10.244.5.0/24"), OldPodCIDRs: []netip.Prefix{pfx("10.244.6.0/24")}}}})
	var got []string
	for _, f := range analyze(w, s).Findings {
		if f.Code == CodeTransitionRouteLeft {
			got = append(got, f.Object)
		}
	}
	assert.Equal(t, []string{"route 10.244.7.0/24"}, got)
}

// TestAnalyzeTransitionRouteLeftHostGW: the same with host-gw, where the
// route leads to the peer's underlay address.
func TestAnalyzeTransitionRouteLeftHostGW(t *testing.T) {
	s := baseSnapshot()
	via := func(dst, gw string) Route { return Route{Dst: pfx(dst), Gw: addr(gw), Dev: "eth0"} }
	s.routes = []Route{via("10.244.5.0/24", "192.0.2.5"), via("10.244.6.0/24", "192.0.2.5"), via("10.244.7.0/24", "192.0.2.5"), via("10.244.8.0/24", "192.0.2.8")}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), Backend: BackendHostGW,
		Peers: []Peer{{Name: "n2", PodCIDR: pfx("10.244.5.0/24"), PublicIP: addr("192.0.2.5"), OldPodCIDRs: []netip.Prefix{pfx("10.244.6.0/24")}}}})
	var got []string
	for _, f := range analyze(w, s).Findings {
		if f.Code == CodeTransitionRouteLeft {
			got = append(got, f.Object)
		}
	}
	assert.Equal(t, []string{"route 10.244.7.0/24"}, got, "not 10.244.8.0/24: it leads to no listed peer")
}

// TestNameLimits: an interface name has at most 15 bytes (IFNAMSIZ), a
// node name at most 253; a podCIDR is /30 or wider.
func TestNameLimits(t *testing.T) {
	assert.True(t, validIfName(strings.Repeat("i", 15)))
	assert.False(t, validIfName(strings.Repeat("i", 16)))
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "."
	w := Want{PodCIDR: pfx("10.244.9.0/24")}
	w.Node = long + strings.Repeat("d", 61)
	_, err := w.normalize()
	require.NoError(t, err, "253 bytes")
	w.Node = long + strings.Repeat("d", 62)
	_, err = w.normalize()
	var fe *FieldError
	require.ErrorAs(t, err, &fe, "254 bytes")
	assert.Equal(t, "Want.Node", fe.Field)

	// A podCIDR, old or new, of /30 is the narrowest: a gateway and pods.
	w = Want{Node: "n1", PodCIDR: pfx("10.244.9.0/30"), OldPodCIDR: pfx("10.244.3.0/30")}
	_, err = w.normalize()
	require.NoError(t, err)
	w.PodCIDR = pfx("10.244.9.0/31")
	_, err = w.normalize()
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "Want.PodCIDR", fe.Field)
	w.PodCIDR, w.OldPodCIDR = pfx("10.244.9.0/30"), pfx("10.244.3.0/31")
	_, err = w.normalize()
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "Want.OldPodCIDR", fe.Field)
}

// TestPlanFieldNames: the helpers that name an action's object in a plan
// error take a missing object.
func TestPlanFieldNames(t *testing.T) {
	assert.Empty(t, envSubnet(nil))
	assert.Equal(t, "10.244.9.1/24", envSubnet(&EnvChange{Subnet: pfx("10.244.9.1/24")}))
	assert.Empty(t, routeDst(nil))
	assert.Equal(t, "10.244.5.0/24", routeDst(&Route{Dst: pfx("10.244.5.0/24")}))
	assert.Empty(t, ruleName(nil))
	assert.Equal(t, "nat POSTROUTING", ruleName(&Rule{Table: tableNAT, Chain: chainPostrouting}))
}

// TestPlanRetiredFollowsTheContent: what an action takes away is read from
// what it does, not only from its Retires, so an edited plan that empties
// Retires still waits for the old pods: the old gateways a delete-transition
// removes, the ranges a deleted rule names; a VTEP's address retires
// nothing.
func TestPlanRetiredFollowsTheContent(t *testing.T) {
	p := validPlan()
	old := []netip.Prefix{pfx("10.244.3.0/24")}
	assert.Equal(t, old, p.retired(&Action{Kind: ActionDeleteTransition, Link: "cni0-old", Peer: "cni0-olp", Remove: []netip.Prefix{pfx("10.244.3.1/24")}}))
	assert.Equal(t, old, p.retired(&Action{Kind: ActionDeleteRule, Rule: &Rule{Table: tableNAT, Chain: chainPostrouting, Spec: []string{"-s", "10.244.3.0/24", "-j", "MASQUERADE"}}}))
	assert.Equal(t, old, p.retired(&Action{Kind: ActionSetAddress, Link: "cni0", Add: pfx("10.244.9.1/24"), Remove: []netip.Prefix{pfx("10.244.3.1/24")}}))
	assert.Empty(t, p.retired(&Action{Kind: ActionSetAddress, Link: "flannel.1", Add: pfx("10.244.9.0/32"), Remove: []netip.Prefix{pfx("10.244.3.0/32")}}))

	p.LivePods = []Pod{{Name: "default/old", IP: addr("10.244.3.7")}}
	assert.NotEmpty(t, p.deferral(&Action{Kind: ActionDeleteRule, Rule: &Rule{Table: tableNAT, Chain: chainPostrouting, Spec: []string{"-s", "10.244.3.0/24", "-j", "MASQUERADE"}}}, nil),
		"a rule of the old range waits for its pods, Retires empty or not")
}
