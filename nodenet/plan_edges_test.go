package nodenet

import (
	"net/netip"
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
