package nodenet

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPodNamesShowsThreeThenCounts: a finding names up to three pods and
// counts the rest.
func TestPodNamesShowsThreeThenCounts(t *testing.T) {
	pods := []Pod{{Name: "a/p1"}, {Name: "a/p2"}, {Name: "a/p3"}, {Name: "a/p4"}, {Name: "a/p5"}}
	assert.Equal(t, "a/p1, a/p2, a/p3", podNames(pods[:3]))
	assert.Equal(t, "a/p1, a/p2, a/p3, and 1 more", podNames(pods[:4]))
	assert.Equal(t, "a/p1, a/p2, a/p3, and 2 more", podNames(pods))
}

// TestAnalyzeBridgeAddressWhy: the bridge's new gateway action says whether
// the old gateway goes at once or moves to the transition veth for the old
// pods (make before break).
func TestAnalyzeBridgeAddressWhy(t *testing.T) {
	s := baseSnapshot()
	s.bridge = &linkState{name: "cni0", addrs: []netip.Prefix{pfx("10.244.3.1/24")}}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), Backend: BackendHostGW, LivePodsComplete: true})
	set := func(r *Report) Action {
		t.Helper()
		for _, f := range r.Findings {
			for _, a := range f.Fix {
				if a.Kind == ActionSetAddress && a.Link == "cni0" {
					return a
				}
			}
		}
		require.Fail(t, "no set-address action for cni0", "%v", codeList(r))
		return Action{}
	}
	assert.Equal(t, "give cni0 the gateway 10.244.9.1/24 and take 10.244.3.1/24 away once no pod uses it", set(analyze(w, s)).Why, "no old pod: nothing to keep")

	s.reservations = []reservation{{path: "/var/lib/cni/networks/cbr0/10.244.3.7", ip: addr("10.244.3.7"), containerID: "c1"}}
	w.LivePods = []Pod{{Name: "default/old", IP: addr("10.244.3.7"), ContainerID: "c1"}}
	assert.Equal(t, "give cni0 the gateway 10.244.9.1/24 and take 10.244.3.1/24 away (make before break: cni0-old keeps 10.244.3.1/24 for the old pods)", set(analyze(w, s)).Why)
}

// TestAnalyzeVTEPWithoutAddress: a VTEP that holds no address says so.
func TestAnalyzeVTEPWithoutAddress(t *testing.T) {
	s := baseSnapshot()
	s.vtep = &linkState{name: "flannel.1"}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16")})
	with := func(r *Report) (out []Finding) {
		for _, f := range r.Findings {
			if f.Code == CodeVTEPAddress {
				out = append(out, f)
			}
		}
		return out
	}
	r := analyze(w, s)
	f := with(r)
	require.Len(t, f, 1, "%v", codeList(r))
	assert.Equal(t, "holds no address; flanneld gives it 10.244.9.0/32, the podCIDR's network address", f[0].Message)

	s.vtep.addrs = []netip.Prefix{pfx("10.244.3.0/32")}
	f = with(analyze(w, s))
	require.Len(t, f, 1)
	assert.Equal(t, "holds 10.244.3.0/32; flanneld gives it 10.244.9.0/32, the podCIDR's network address", f[0].Message)
}

// TestAnalyzeRoutesInOrder: route findings come by destination address,
// then the wider prefix first, however the routes were listed; a missing
// route names whose subnet it is, the peer's podCIDR or its old subnet.
func TestAnalyzeRoutesInOrder(t *testing.T) {
	s := baseSnapshot()
	s.vtep = &linkState{name: "flannel.1", addrs: []netip.Prefix{pfx("10.244.9.0/32")}}
	stale := func(dst string) Route {
		p := pfx(dst)
		return Route{Dst: p, Gw: p.Addr(), Dev: "flannel.1", Onlink: true}
	}
	s.routes = []Route{stale("10.244.4.0/23"), stale("10.244.2.0/25"), stale("10.244.4.0/22")}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), PeersComplete: true,
		Peers: []Peer{{Name: "n2", PodCIDR: pfx("10.244.4.0/24"), OldPodCIDRs: []netip.Prefix{pfx("10.244.6.0/24")}}}})
	want := []string{
		"route-stale route 10.244.2.0/25",
		"route-stale route 10.244.4.0/22",
		"route-stale route 10.244.4.0/23",
		"route-missing route 10.244.4.0/24 no route to 10.244.4.0/24 (node n2's podCIDR): this node's pods cannot reach the pods there",
		"route-missing route 10.244.6.0/24 no route to 10.244.6.0/24 (node n2's old subnet, where its pods still are): this node's pods cannot reach the pods there",
	}
	for range 20 { // the routes are grouped in maps: any order may come out
		var got []string
		for _, f := range analyze(w, s).Findings {
			switch f.Code {
			case CodeRouteStale:
				got = append(got, string(f.Code)+" "+f.Object)
			case CodeRouteMissing:
				got = append(got, string(f.Code)+" "+f.Object+" "+f.Message)
			}
		}
		require.Equal(t, want, got)
	}
}

// TestAnalyzeReservationOwnedByContainerID: a live pod known only by its
// sandbox ID (no address yet in the list) still owns its reservation.
func TestAnalyzeReservationOwnedByContainerID(t *testing.T) {
	s := baseSnapshot()
	s.reservations = []reservation{{path: "/var/lib/cni/networks/cbr0/10.244.3.7", ip: addr("10.244.3.7"), containerID: "c1"}}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), Backend: BackendHostGW,
		LivePodsComplete: true, LivePods: []Pod{{Name: "default/web", ContainerID: "c1"}, {Name: "default/other", IP: addr("10.244.9.4")}}})
	r := analyze(w, s)
	assert.Contains(t, codeList(r), string(CodeReservationLive))
	assert.NotContains(t, codeList(r), string(CodeReservationLeaked))

	w.LivePods = []Pod{{Name: "default/other", ContainerID: "c2"}}
	assert.Contains(t, codeList(analyze(w, s)), string(CodeReservationLeaked), "another sandbox's pod does not own it")
}

// TestAnalyzeOldPodRangeFromARule: a judged rule that names
// a node-sized subnet of the old network or the current one, other than
// the node's and its peers' (here a keep rule left by an
// earlier move) makes that subnet an old pod range.
func TestAnalyzeOldPodRangeFromARule(t *testing.T) {
	s := baseSnapshot()
	s.envData = []byte("FLANNEL_NETWORK=172.7.0.0/16\nFLANNEL_SUBNET=172.7.5.1/24\n")
	s.bridge.addrs = []netip.Prefix{pfx("10.20.5.1/24")}
	s.chains[chainKey(tableNAT, ChainFlannelPostrouting)] = []Rule{
		rule(tableNAT, ChainFlannelPostrouting, `-s 172.7.8.0/24 -d 10.20.0.0/16 -m comment --comment "`+keepComment+`" -j RETURN`),
	}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.20.5.0/24"), Network: pfx("10.20.0.0/16"), Backend: BackendHostGW, LivePodsComplete: true})
	r := analyze(w, s)
	assert.Equal(t, []netip.Prefix{pfx("172.7.0.0/16")}, r.OldNetworks)
	assert.Contains(t, r.OldPodCIDRs, pfx("172.7.8.0/24"))

	// The same inside the current network (a move of the podCIDR alone).
	s.envData = []byte("FLANNEL_NETWORK=10.20.0.0/16\nFLANNEL_SUBNET=10.20.5.1/24\n")
	s.chains[chainKey(tableNAT, ChainFlannelPostrouting)] = []Rule{
		rule(tableNAT, ChainFlannelPostrouting, `-s 10.20.8.0/24 -d 10.20.0.0/16 -m comment --comment "`+keepComment+`" -j RETURN`),
	}
	r = analyze(w, s)
	assert.Empty(t, r.OldNetworks)
	assert.Equal(t, []netip.Prefix{pfx("10.20.8.0/24")}, r.OldPodCIDRs)
}

// TestAnalyzeRuleRewriteKeepsTheHostPart: a rule naming one address of the
// old pod range is rewritten to the same host in the new podCIDR, not to
// the whole podCIDR.
func TestAnalyzeRuleRewriteKeepsTheHostPart(t *testing.T) {
	s := baseSnapshot()
	s.envData = []byte("FLANNEL_NETWORK=172.7.0.0/16\nFLANNEL_SUBNET=172.7.5.1/24\n")
	s.bridge.addrs = []netip.Prefix{pfx("10.20.5.1/24")}
	s.chains[chainKey(tableNAT, chainPostrouting)] = []Rule{
		rule(tableNAT, chainPostrouting, "-s 172.7.5.7/32 -j SNAT --to-source 192.0.2.1"),
	}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.20.5.0/24"), Network: pfx("10.20.0.0/16"), Backend: BackendHostGW, LivePodsComplete: true})
	rule1 := func() Finding {
		t.Helper()
		for _, f := range analyze(w, s).Findings {
			if f.Object == "rule nat POSTROUTING #1" {
				return f
			}
		}
		require.Fail(t, "no finding of rule nat POSTROUTING #1")
		return Finding{}
	}
	f := rule1()
	require.Len(t, f.Fix, 2)
	assert.Equal(t, ActionInsertRule, f.Fix[0].Kind)
	assert.Equal(t, "-s 10.20.5.7/32 -j SNAT --to-source 192.0.2.1", joinSpec(f.Fix[0].Rule.Spec))
	assert.Equal(t, "-t nat -A POSTROUTING -s 172.7.5.7/32 -j SNAT --to-source 192.0.2.1 names the old range 172.7.5.0/24", f.Message)

	// While a live pod holds an old address the message says why the rule stays.
	w.LivePods = []Pod{{Name: "default/old", IP: addr("172.7.5.9")}}
	assert.Equal(t, "-t nat -A POSTROUTING -s 172.7.5.7/32 -j SNAT --to-source 192.0.2.1 names the old range 172.7.5.0/24; live pods still use it (default/old), so it stays until they move", rule1().Message)
}
