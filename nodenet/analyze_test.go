package nodenet

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/cidr"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func mustWant(t *testing.T, w Want) Want {
	t.Helper()
	w, err := w.normalize()
	require.NoError(t, err)
	return w
}

func rule(table, chain, spec string) Rule {
	_, words, _, err := parseRuleLine("-A " + chain + " " + spec)
	if err != nil {
		panic(err)
	}
	return Rule{Table: table, Chain: chain, Spec: words}
}

func baseSnapshot() *snapshot {
	return &snapshot{iptables: IPTablesNFT, envFile: "/run/flannel/subnet.env",
		envData: []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.9.1/24\n"),
		cniFile: "/etc/cni/net.d/10-flannel.conflist", cni: &CNIConfig{Name: "cbr0", Plugin: "flannel", Bridge: "cni0", IPAM: "host-local"},
		resDir: "/var/lib/cni/networks/cbr0", chains: map[string][]Rule{},
		bridge: &linkState{name: "cni0", addrs: []netip.Prefix{pfx("10.244.9.1/24")}}}
}

func codeList(r *Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, string(f.Code))
	}
	return out
}

// TestAnalyzeUnknownPods: without the complete list of live pods no
// reservation is released and the old gateway is never taken away: it moves
// to the transition veth (make before break), so the bridge can take the new
// one.
func TestAnalyzeUnknownPods(t *testing.T) {
	s := baseSnapshot()
	s.bridge = &linkState{name: "cni0", addrs: []netip.Prefix{pfx("10.244.3.1/24")}}
	s.reservations = []reservation{{path: "/var/lib/cni/networks/cbr0/10.244.3.7", ip: addr("10.244.3.7"), containerID: "c1"}}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), Backend: BackendHostGW})
	r := analyze(w, s)
	assert.Equal(t, []string{"bridge-address", "reservation-unknown"}, codeList(r))
	p, err := NewPlan(r)
	require.NoError(t, err)
	require.Len(t, p.Actions, 2)
	assert.Equal(t, ActionSetTransition, p.Actions[0].Kind)
	assert.Equal(t, "cni0-old", p.Actions[0].Link)
	assert.Equal(t, pfx("10.244.3.1/24"), p.Actions[0].Add)
	assert.Equal(t, ActionSetAddress, p.Actions[1].Kind)
	assert.Empty(t, p.Actions[1].Retires, "the old subnet is kept, on the veth")
	for _, a := range p.Actions {
		assert.Empty(t, a.Deferred)
	}

	w.LivePodsComplete = true
	r = analyze(w, s)
	assert.Equal(t, []string{"bridge-address", "reservation-leaked"}, codeList(r))
	p, err = NewPlan(r)
	require.NoError(t, err)
	require.Len(t, p.Actions, 2)
	assert.Equal(t, ActionReleaseReservation, p.Actions[0].Kind, "leaked reservations go before the bridge moves")
	for _, a := range p.Actions {
		assert.Empty(t, a.Deferred)
	}
}

// TestAnalyzeNoTransitionIntoAPeersSubnet: the old subnet of a node moved
// off a duplicate podCIDR is another node's now (seed 001): no transition
// takes it over locally; the bridge keeps its old gateway, deferred, until
// the old pods are gone.
func TestAnalyzeNoTransitionIntoAPeersSubnet(t *testing.T) {
	s := baseSnapshot()
	s.bridge = &linkState{name: "cni0", addrs: []netip.Prefix{pfx("10.244.3.1/24")}}
	w := mustWant(t, Want{Node: "c", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), Backend: BackendHostGW,
		LivePodsComplete: true, LivePods: []Pod{{Name: "default/c1", IP: addr("10.244.3.2")}},
		Peers: []Peer{{Name: "b", PodCIDR: pfx("10.244.3.0/24"), PublicIP: addr("192.0.2.12")}}})
	p, err := NewPlan(analyze(w, s))
	require.NoError(t, err)
	var kinds []ActionKind
	for _, a := range p.Actions {
		kinds = append(kinds, a.Kind)
		if a.Kind == ActionSetAddress && a.Link == "cni0" {
			assert.NotEmpty(t, a.Deferred, "the bridge keeps 10.244.3.1 while c1 lives")
			assert.Equal(t, []netip.Prefix{pfx("10.244.3.0/24")}, a.Retires)
		}
	}
	assert.NotContains(t, kinds, ActionSetTransition, "b holds 10.244.3.0/24: c does not keep a route to it")
	assert.Contains(t, kinds, ActionSetAddress)
}

// TestAnalyzeRulesNetworkChange: rules naming the old network and the old
// node subnet are rewritten to the new ones; a rule naming an old address
// nodenet cannot map is reported for a person; other masquerades (Docker's)
// and non-masquerade POSTROUTING rules are left alone; nodenet's own keep
// rules are only deleted.
func TestAnalyzeRulesNetworkChange(t *testing.T) {
	s := baseSnapshot()
	s.envData = []byte("FLANNEL_NETWORK=172.7.0.0/16\nFLANNEL_SUBNET=172.7.5.1/24\n")
	s.bridge.addrs = []netip.Prefix{pfx("10.20.5.1/24")}
	s.chains[chainKey(tableNAT, chainPostrouting)] = []Rule{
		rule(tableNAT, chainPostrouting, "-s 172.17.0.0/16 ! -o docker0 -j MASQUERADE"),
		rule(tableNAT, chainPostrouting, "-s 172.7.5.0/24 ! -d 172.7.0.0/16 -j MASQUERADE"),
		rule(tableNAT, chainPostrouting, "-s 172.7.0.0/16 -d 172.7.0.0/16 -j RETURN"),
		rule(tableNAT, chainPostrouting, "-s 172.7.99.7/32 -j SNAT --to-source 192.0.2.1"),
	}
	s.chains[chainKey(tableNAT, ChainFlannelPostrouting)] = []Rule{
		rule(tableNAT, ChainFlannelPostrouting, `-s 172.7.5.0/24 -d 10.20.0.0/16 -m comment --comment "`+keepComment+`" -j RETURN`),
		rule(tableNAT, ChainFlannelPostrouting, `-s 172.7.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully`),
	}
	s.chains[chainKey(tableFilter, ChainFlannelForward)] = []Rule{
		rule(tableFilter, ChainFlannelForward, `-s 10.20.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT`),
		rule(tableFilter, ChainFlannelForward, `-s 172.7.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT`),
	}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.20.5.0/24"), Network: pfx("10.20.0.0/16"), Backend: BackendHostGW, LivePodsComplete: true})
	r := analyze(w, s)
	assert.Equal(t, []netip.Prefix{pfx("172.7.5.0/24")}, r.OldPodCIDRs)
	assert.Equal(t, []netip.Prefix{pfx("172.7.0.0/16")}, r.OldNetworks)
	byObj := map[string]Finding{}
	for _, f := range r.Findings {
		if f.Code == CodeRuleStale {
			byObj[f.Object] = f
		}
	}
	require.Len(t, byObj, 5, "%v", r.Findings)
	f := byObj["rule nat POSTROUTING #2"]
	require.Len(t, f.Fix, 2)
	assert.Equal(t, ActionInsertRule, f.Fix[0].Kind)
	assert.Equal(t, "-s 10.20.5.0/24 ! -d 10.20.0.0/16 -j MASQUERADE", joinSpec(f.Fix[0].Rule.Spec))
	assert.Equal(t, "-s 172.7.5.0/24 ! -d 172.7.0.0/16 -j MASQUERADE", joinSpec(f.Fix[0].Anchor))
	assert.Equal(t, []netip.Prefix{pfx("172.7.5.0/24"), pfx("172.7.0.0/16")}, f.Fix[1].Retires)
	f = byObj["rule nat POSTROUTING #4"]
	assert.Empty(t, f.Fix)
	assert.Contains(t, f.Message, "rewrite it by hand")
	f = byObj["rule nat FLANNEL-POSTRTG #1"]
	require.Len(t, f.Fix, 1)
	assert.Equal(t, ActionDeleteRule, f.Fix[0].Kind)
	f = byObj["rule filter FLANNEL-FWD #2"]
	require.Len(t, f.Fix, 1, "the rewrite is already the first rule")
	assert.Equal(t, ActionDeleteRule, f.Fix[0].Kind)
	assert.Contains(t, byObj, "rule nat FLANNEL-POSTRTG #2")

	p, err := NewPlan(r)
	require.NoError(t, err)
	var kinds []string
	for _, a := range p.Actions {
		kinds = append(kinds, string(a.Kind))
	}
	assert.Equal(t, "write-subnet-env insert-rule insert-rule delete-rule delete-rule delete-rule delete-rule", strings.Join(kinds, " "))
}

// TestAnalyzeRoutes: stale routes are only judged when the peers are
// complete; the node's own old segment (the old gateway kept beside the
// bridge) is never a peer route; routes outside the pod network are ignored.
func TestAnalyzeRoutes(t *testing.T) {
	s := baseSnapshot()
	s.envData = []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\n")
	s.vtep = &linkState{name: "flannel.1", addrs: []netip.Prefix{pfx("10.244.9.0/32")}}
	s.routes = []Route{
		{Dst: pfx("10.244.3.0/24"), Dev: "oldgw0"},
		{Dst: pfx("10.244.7.0/24"), Gw: addr("10.244.7.0"), Dev: "flannel.1", Onlink: true},
		{Dst: pfx("10.244.5.0/24"), Gw: addr("10.244.5.0"), Dev: "flannel.1", Onlink: true},
		{Dst: pfx("0.0.0.0/0"), Gw: addr("192.0.2.1"), Dev: "eth0"},
		{Dst: pfx("10.96.0.0/12"), Dev: "kube-ipvs0"},
	}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"),
		Peers: []Peer{{Name: "n2", PodCIDR: pfx("10.244.5.0/24")}}})
	r := analyze(w, s)
	assert.Equal(t, []string{"subnet-env-subnet"}, codeList(r))
	w.PeersComplete = true
	r = analyze(w, s)
	assert.Equal(t, []string{"subnet-env-subnet", "route-stale"}, codeList(r))
	assert.Equal(t, "route 10.244.7.0/24", r.Findings[1].Object)
}

// TestAnalyzeStandby: a peer about to move gets the standby (route at
// StandbyMetric beside flanneld's, neighbour entry of its next VTEP
// address, default FDB entry to its address); a route into its next subnet
// is flanneld's and never stale; flanneld's own route gone, the standby
// alone is enough; a default FDB entry to a peer that lists nothing old is
// left over, one to an address no peer has is not nodenet's.
func TestAnalyzeStandby(t *testing.T) {
	s := baseSnapshot()
	s.envData = []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.9.1/24\n")
	s.vtep = &linkState{name: "flannel.1", addrs: []netip.Prefix{pfx("10.244.9.0/32")}}
	flanneld := Route{Dst: pfx("10.244.5.0/24"), Gw: addr("10.244.5.0"), Dev: "flannel.1", Onlink: true}
	next := Route{Dst: pfx("10.244.7.0/24"), Gw: addr("10.244.7.0"), Dev: "flannel.1", Onlink: true}
	s.routes = []Route{flanneld, next}
	peer := Peer{Name: "n2", PodCIDR: pfx("10.244.5.0/24"), NextPodCIDR: pfx("10.244.7.0/24"), PublicIP: addr("192.0.2.12"), VTEPMAC: "6E:00:00:00:05:00"}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), Peers: []Peer{peer}, PeersComplete: true})
	r := analyze(w, s)
	require.Equal(t, []string{"standby-missing", "standby-missing", "standby-missing"}, codeList(r), "%v", r.Findings)
	plan, err := NewPlan(r)
	require.NoError(t, err)
	sb := Route{Dst: pfx("10.244.5.0/24"), Gw: addr("10.244.7.0"), Dev: "flannel.1", Onlink: true, Metric: StandbyMetric}
	assert.Equal(t, []Action{
		{Kind: ActionSetNeighbour, Object: "neighbour 10.244.7.0", Link: "flannel.1", IP: addr("10.244.7.0"), MAC: "6e:00:00:00:05:00", Why: "ip neigh replace 10.244.7.0 lladdr 6e:00:00:00:05:00 dev flannel.1 nud permanent"},
		{Kind: ActionSetFDB, Object: "fdb 00:00:00:00:00:00 dst 192.0.2.12", Link: "flannel.1", IP: addr("192.0.2.12"), MAC: zeroMAC, Why: "bridge fdb append 00:00:00:00:00:00 dev flannel.1 dst 192.0.2.12"},
		{Kind: ActionSetRoute, Object: "route 10.244.5.0/24", Route: &sb, Why: "add the standby route " + sb.String()},
	}, plan.Actions)

	// In place, with flanneld's route or without it: nothing to do.
	s.neighbours = []neighbour{{ip: addr("10.244.7.0"), mac: "6e:00:00:00:05:00", permanent: true}}
	s.fdbDefaults = []netip.Addr{addr("192.0.2.12")}
	s.routes = []Route{flanneld, sb, next}
	assert.Empty(t, codeList(analyze(w, s)))
	s.routes = []Route{sb}
	assert.Empty(t, codeList(analyze(w, s)))
	// A learned (not permanent) or other entry for the next VTEP address
	// is not the standby's.
	s.neighbours[0].permanent = false
	assert.Equal(t, []string{"standby-missing"}, codeList(analyze(w, s)))
	s.neighbours[0].permanent = true

	// Moved: the standby route is the route to the old subnet; the FDB
	// entry stays while the old subnet is listed.
	w.Peers = []Peer{{Name: "n2", PodCIDR: pfx("10.244.7.0/24"), OldPodCIDRs: []netip.Prefix{pfx("10.244.5.0/24")}, PublicIP: addr("192.0.2.12")}}
	s.routes = []Route{sb, next}
	assert.Empty(t, codeList(analyze(w, s)))
	// Done: the route and the FDB entry go; a default entry to an address
	// no peer has stays.
	w.Peers[0].OldPodCIDRs = nil
	s.fdbDefaults = append(s.fdbDefaults, addr("198.51.100.7"))
	r = analyze(w, s)
	assert.Equal(t, []string{"standby-left", "route-stale"}, codeList(r))
	assert.Equal(t, "fdb 00:00:00:00:00:00 dst 192.0.2.12", r.Findings[0].Object)

	// host-gw: the standby is a second route through the peer's address.
	s = baseSnapshot()
	s.envData = []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.9.1/24\n")
	s.routes = []Route{{Dst: pfx("10.244.5.0/24"), Gw: addr("192.0.2.12"), Dev: "eth0"}}
	w = mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), Backend: BackendHostGW, Peers: []Peer{peer}, PeersComplete: true})
	r = analyze(w, s)
	require.Equal(t, []string{"standby-missing"}, codeList(r))
	assert.Equal(t, Route{Dst: pfx("10.244.5.0/24"), Gw: addr("192.0.2.12"), Metric: StandbyMetric}, *r.Findings[0].Fix[0].Route)
	s.routes = append(s.routes, Route{Dst: pfx("10.244.5.0/24"), Gw: addr("192.0.2.12"), Dev: "eth0", Metric: StandbyMetric})
	assert.Empty(t, codeList(analyze(w, s)))
}

// TestAnalyzeRouteToOwnSubnet: a route through the VTEP to the node's own
// podCIDR (left by a flanneld that still ran with the old lease when the
// node got its new one) is an error, fixed by deleting it, whatever
// PeersComplete says; the bridge's connected route is not.
func TestAnalyzeRouteToOwnSubnet(t *testing.T) {
	s := baseSnapshot()
	s.vtep = &linkState{name: "flannel.1", addrs: []netip.Prefix{pfx("10.244.9.0/32")}}
	own := Route{Dst: pfx("10.244.9.0/24"), Gw: addr("10.244.9.0"), Dev: "flannel.1", Onlink: true}
	s.routes = []Route{{Dst: pfx("10.244.9.0/24"), Dev: "cni0"}, own}
	for _, complete := range []bool{false, true} {
		w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), PeersComplete: complete})
		r := analyze(w, s)
		require.Equal(t, []string{"route-own-subnet"}, codeList(r), "peers complete: %t", complete)
		f := r.Findings[0]
		assert.Equal(t, cidr.SeverityError, f.Severity)
		require.Len(t, f.Fix, 1)
		assert.Equal(t, ActionDeleteRoute, f.Fix[0].Kind)
		assert.Equal(t, own, *f.Fix[0].Route)
		plan, err := NewPlan(r)
		require.NoError(t, err, "a plan may delete a stray route into the own podCIDR")
		require.NoError(t, plan.Validate())
		for _, edit := range []func(*Route){
			func(rt *Route) { rt.Dev = "cni0" },      // the bridge's own route
			func(rt *Route) { rt.Gw = netip.Addr{} }, // a device route
		} {
			bad := *plan
			bad.Actions = slices.Clone(plan.Actions)
			rt := *bad.Actions[0].Route
			edit(&rt)
			bad.Actions[0].Route = &rt
			assert.ErrorIs(t, bad.Validate(), ErrInvalidPlan, "%s", rt)
		}
	}
}

// TestAnalyzeSubnetEnv: a missing or unreadable subnet.env is an error with
// no fix (flanneld writes it); a subnet with host bits other than the first
// address is a warning.
func TestAnalyzeSubnetEnv(t *testing.T) {
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), Backend: BackendHostGW})
	for _, tc := range []struct {
		data    string
		missing bool
		code    Code
		sev     cidr.Severity
		fix     bool
	}{
		{"", true, CodeSubnetEnvMissing, cidr.SeverityError, false},
		{"FLANNEL_SUBNET=nope\n", false, CodeSubnetEnvInvalid, cidr.SeverityError, false},
		{"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.9.7/24\n", false, CodeSubnetEnvSubnet, cidr.SeverityWarning, true},
		{"FLANNEL_NETWORK=10.0.0.0/8\nFLANNEL_SUBNET=10.244.9.1/24\n", false, CodeSubnetEnvNetwork, cidr.SeverityError, true},
	} {
		s := baseSnapshot()
		s.envData, s.envMissing = []byte(tc.data), tc.missing
		r := analyze(w, s)
		require.Len(t, r.Findings, 1, "%q: %v", tc.data, r.Findings)
		assert.Equal(t, tc.code, r.Findings[0].Code)
		assert.Equal(t, tc.sev, r.Findings[0].Severity)
		assert.Equal(t, tc.fix, len(r.Findings[0].Fix) == 1)
	}
}

// validPlan is a plan with one action of each kind, in order.
func validPlan() *Plan {
	return &Plan{APIVersion: PlanAPIVersion, Kind: PlanKind, Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"),
		Bridge: "cni0", VTEP: "flannel.1", ReservationDir: "/var/lib/cni/networks/cbr0", SubnetEnvFile: "/run/flannel/subnet.env",
		OldPodCIDRs: []netip.Prefix{pfx("10.244.3.0/24")}, LivePodsComplete: true,
		Actions: []Action{
			{Kind: ActionWriteSubnetEnv, Path: "/run/flannel/subnet.env", Env: &EnvChange{Network: pfx("10.244.0.0/16"), Subnet: pfx("10.244.9.1/24")}},
			{Kind: ActionSetMAC, Link: "flannel.1", MAC: "6e:00:00:00:09:00"},
			{Kind: ActionSetAddress, Link: "flannel.1", Add: pfx("10.244.9.0/32"), Remove: []netip.Prefix{pfx("10.244.3.0/32")}},
			{Kind: ActionSetRoute, Route: &Route{Dst: pfx("10.244.5.0/24"), Gw: addr("10.244.5.0"), Dev: "flannel.1", Onlink: true}},
			{Kind: ActionInsertRule, Rule: &Rule{Table: tableNAT, Chain: chainPostrouting, Spec: []string{"-s", "10.244.9.0/24", "-j", "MASQUERADE"}}},
			{Kind: ActionReleaseReservation, Path: "/var/lib/cni/networks/cbr0/10.244.3.3", IP: addr("10.244.3.3"), ContainerID: "c"},
			{Kind: ActionDeleteRule, Retires: []netip.Prefix{pfx("10.244.3.0/24")}, Rule: &Rule{Table: tableNAT, Chain: chainPostrouting, Spec: []string{"-s", "10.244.3.0/24", "-j", "MASQUERADE"}}},
			{Kind: ActionDeleteRoute, Route: &Route{Dst: pfx("10.244.7.0/24"), Gw: addr("10.244.7.0"), Dev: "flannel.1"}},
			{Kind: ActionSetAddress, Link: "cni0", Add: pfx("10.244.9.1/24"), Remove: []netip.Prefix{pfx("10.244.3.1/24")}, Retires: []netip.Prefix{pfx("10.244.3.0/24")}},
		}}
}

// TestPlanValidate: a plan is untrusted input; every edit that would make
// Apply do something no audit asks for is refused, naming the field.
func TestPlanValidate(t *testing.T) {
	require.NoError(t, validPlan().Validate())
	y, err := validPlan().YAML()
	require.NoError(t, err)
	back, err := DecodePlan(y)
	require.NoError(t, err)
	assert.Equal(t, validPlan(), back)
	_, err = DecodePlan(append(y, []byte("surprise: 1\n")...))
	assert.ErrorIs(t, err, ErrInvalidPlan)

	for _, tc := range []struct {
		name, field string
		edit        func(p *Plan)
	}{
		{"kind", "plan.apiVersion/kind", func(p *Plan) { p.Kind = "Other" }},
		{"node", "plan.node", func(p *Plan) { p.Node = "" }},
		{"podCIDR", "plan.podCIDR", func(p *Plan) { p.PodCIDR = pfx("10.244.9.0/31") }},
		{"unknown action", "plan.actions[0].kind", func(p *Plan) { p.Actions[0].Kind = "exec" }},
		{"order", "plan.actions[1].kind", func(p *Plan) { p.Actions[0], p.Actions[8] = p.Actions[8], p.Actions[0] }},
		{"subnet.env elsewhere", "plan.actions[0].path", func(p *Plan) { p.Actions[0].Path = "/etc/passwd" }},
		{"subnet.env subnet", "plan.actions[0].env.subnet", func(p *Plan) { p.Actions[0].Env.Subnet = pfx("10.244.3.1/24") }},
		{"mac on bridge", "plan.actions[1].link", func(p *Plan) { p.Actions[1].Link = "cni0" }},
		{"vtep address", "plan.actions[2].add", func(p *Plan) { p.Actions[2].Add = pfx("10.244.3.0/32") }},
		{"address on eth0", "plan.actions[2].link", func(p *Plan) { p.Actions[2].Link = "eth0" }},
		{"route into podCIDR", "plan.actions[3].route.dst", func(p *Plan) { p.Actions[3].Route.Dst = pfx("10.244.9.0/25") }},
		{"route without next hop", "plan.actions[3].route.gw", func(p *Plan) { p.Actions[3].Route.Gw = netip.Addr{} }},
		{"rule elsewhere", "plan.actions[4].rule", func(p *Plan) { p.Actions[4].Rule.Chain = "INPUT" }},
		{"rule command", "plan.actions[4].rule.spec", func(p *Plan) { p.Actions[4].Rule.Spec = []string{"-t", "filter", "-j", "DROP"} }},
		{"reservation inside", "plan.actions[5].ip", func(p *Plan) { p.Actions[5].IP = addr("10.244.9.3") }},
		{"reservation path", "plan.actions[5].path", func(p *Plan) { p.Actions[5].Path = "/var/lib/cni/networks/cbr0/../../x" }},
		{"delete unrelated rule", "plan.actions[6].rule.spec", func(p *Plan) { p.Actions[6].Rule.Spec = []string{"-s", "172.17.0.0/16", "-j", "MASQUERADE"} }},
		{"retire the podCIDR", "plan.actions[6].retires[0]", func(p *Plan) { p.Actions[6].Retires = []netip.Prefix{pfx("10.244.9.0/24")} }},
		{"bridge address", "plan.actions[8].add", func(p *Plan) { p.Actions[8].Add = pfx("10.244.9.5/24") }},
		{"bridge without retires", "plan.actions[0].remove[0]", func(p *Plan) { p.Actions = p.Actions[8:]; p.Actions[0].Retires = nil }},
		{"retire multicast", "plan.actions[6].retires[0]", func(p *Plan) {
			p.Actions[6].Retires = []netip.Prefix{pfx("224.0.0.0/4")}
			p.Actions[6].Rule.Spec = []string{"-s", "10.244.0.0/16", "!", "-d", "224.0.0.0/4", "-j", "MASQUERADE"}
		}},
		{"old range overlaps", "plan.oldPodCIDRs[0]", func(p *Plan) { p.OldPodCIDRs = []netip.Prefix{pfx("10.244.8.0/23")} }},
		{"old network is the network", "plan.oldNetworks[0]", func(p *Plan) { p.OldNetworks = []netip.Prefix{p.Network} }},
		{"bridge removes what it adds", "plan.actions[8].remove[0]", func(p *Plan) { p.Actions[8].Remove = []netip.Prefix{p.Actions[8].Add} }},
		{"neighbour on the bridge", "plan.actions[0].link", func(p *Plan) {
			p.Actions = []Action{standbyAction(ActionSetNeighbour, "cni0", "10.244.7.0", "6e:00:00:00:05:00")}
		}},
		{"neighbour in the podCIDR", "plan.actions[0].ip", func(p *Plan) {
			p.Actions = []Action{standbyAction(ActionSetNeighbour, "flannel.1", "10.244.9.4", "6e:00:00:00:05:00")}
		}},
		{"neighbour all zeros", "plan.actions[0].mac", func(p *Plan) {
			p.Actions = []Action{standbyAction(ActionSetNeighbour, "flannel.1", "10.244.7.0", zeroMAC)}
		}},
		{"fdb delete for a MAC", "plan.actions[0].mac", func(p *Plan) {
			p.Actions = []Action{standbyAction(ActionDeleteFDB, "flannel.1", "192.0.2.12", "6e:00:00:00:05:00")}
		}},
		{"fdb IPv6", "plan.actions[0].ip", func(p *Plan) { p.Actions = []Action{standbyAction(ActionSetFDB, "flannel.1", "fd00::1", zeroMAC)} }},
		{"fdb retires", "plan.actions[0].retires", func(p *Plan) {
			a := standbyAction(ActionDeleteFDB, "flannel.1", "192.0.2.12", zeroMAC)
			a.Retires = []netip.Prefix{pfx("10.244.3.0/24")}
			p.Actions = []Action{a}
		}},
		{"fdb delete before a route", "plan.actions[1].kind", func(p *Plan) {
			p.Actions = []Action{standbyAction(ActionDeleteFDB, "flannel.1", "192.0.2.12", zeroMAC), p.Actions[3]}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validPlan()
			tc.edit(p)
			err := p.Validate()
			require.ErrorIs(t, err, ErrInvalidPlan)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field, "%v", err)
		})
	}
}

func standbyAction(kind ActionKind, link, ip, mac string) Action {
	return Action{Kind: kind, Object: "x", Why: "x", Link: link, IP: netip.MustParseAddr(ip), MAC: mac}
}

// TestNewPlanDeferral: actions that take away a range a live pod uses are
// deferred; the same fix reported by two findings runs once.
func TestNewPlanDeferral(t *testing.T) {
	fix := Action{Kind: ActionWriteSubnetEnv, Object: "file /run/flannel/subnet.env", Path: "/run/flannel/subnet.env", Why: "w",
		Env: &EnvChange{Network: pfx("10.244.0.0/16"), Subnet: pfx("10.244.9.1/24")}}
	bridge := Action{Kind: ActionSetAddress, Object: "link cni0", Link: "cni0", Add: pfx("10.244.9.1/24"),
		Remove: []netip.Prefix{pfx("10.244.3.1/24")}, Retires: []netip.Prefix{pfx("10.244.3.0/24")}}
	r := &Report{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), Bridge: "cni0", OldPodCIDRs: []netip.Prefix{pfx("10.244.3.0/24")},
		ReservationDir: "/var/lib/cni/networks/cbr0", SubnetEnvFile: "/run/flannel/subnet.env", LivePodsComplete: true,
		LivePods: []Pod{{Name: "a/new", IP: addr("10.244.9.4")}, {Name: "a/old", IP: addr("10.244.3.4")}},
		Findings: []Finding{{Fix: []Action{bridge}}, {Fix: []Action{fix}}, {Fix: []Action{fix}}}}
	p, err := NewPlan(r)
	require.NoError(t, err)
	require.Len(t, p.Actions, 2)
	assert.Equal(t, ActionWriteSubnetEnv, p.Actions[0].Kind)
	assert.Contains(t, p.Actions[1].Deferred, "a/old")
	assert.NotContains(t, p.Actions[1].Deferred, "a/new", "a pod in the new range does not hold the old one")

	r.LivePods = r.LivePods[:1]
	p, err = NewPlan(r)
	require.NoError(t, err)
	assert.Empty(t, p.Actions[1].Deferred)
	assert.Contains(t, p.deferral(&p.Actions[1], []Pod{{IP: addr("10.244.3.9")}}), "10.244.3.9", "Apply's fresh pods count too")
	stripped := p.Actions[1]
	stripped.Retires = nil
	assert.Contains(t, p.deferral(&stripped, []Pod{{IP: addr("10.244.3.9")}}), "10.244.3.9", "the removed address counts even without retires")

	// Without a complete list of live pods, every action that takes a
	// range away waits, and says which range.
	r.LivePodsComplete = false
	p, err = NewPlan(r)
	require.NoError(t, err)
	assert.Empty(t, p.Actions[0].Deferred)
	assert.Equal(t, "the live pods are not known (LivePodsComplete is false): a pod may still use 10.244.3.0/24", p.Actions[1].Deferred)

	_, err = NewPlan(nil)
	assert.ErrorIs(t, err, ErrInvalidInput)
}

// TestAnalyzeCNIConfigFindings: a CNI config that cannot be read is a
// warning that names its file; one whose host-local range is not the
// node's podCIDR is an error naming the file in use, and its range is an
// old pod range from then on (so its pods, reservations and rules are
// found).
func TestAnalyzeCNIConfigFindings(t *testing.T) {
	s := baseSnapshot()
	s.cniBad = []fileProblem{{path: "/etc/cni/net.d/05-broken.conf", err: errors.New("unexpected end of JSON input")}}
	s.cni.Subnets = []netip.Prefix{pfx("10.244.3.0/24"), pfx("fd00::/64")}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), Backend: BackendHostGW, LivePodsComplete: true})
	r := analyze(w, s)
	var got []string
	for _, f := range r.Findings {
		if f.Code == CodeCNIConfigInvalid || f.Code == CodeCNIConfigRange {
			got = append(got, f.String())
		}
	}
	assert.Equal(t, []string{
		"warning cni-config-invalid file /etc/cni/net.d/05-broken.conf: cannot be read (unexpected end of JSON input); the runtime skips it too if a later file is valid",
		"error cni-config-range file /etc/cni/net.d/10-flannel.conflist: gives host-local the range 10.244.3.0/24, but the node's podCIDR is 10.244.9.0/24: new pods get addresses other nodes do not route to; rewrite the config (it belongs to whoever installed it)",
	}, got)
	assert.Equal(t, []netip.Prefix{pfx("10.244.3.0/24")}, r.OldPodCIDRs)
}

// TestAnalyzeCNIConfigTheRuntimeUsesButNodenetDoesNot: the runtime's file
// is one nodenet does not handle; the warning names it and says where the
// layout came from (a later file, or the defaults), and a directory with
// such a file is not reported as holding no config.
func TestAnalyzeCNIConfigTheRuntimeUsesButNodenetDoesNot(t *testing.T) {
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), Backend: BackendHostGW, LivePodsComplete: true})
	cniFindings := func(s *snapshot) []string {
		var got []string
		for _, f := range analyze(w, s).Findings {
			if strings.HasPrefix(string(f.Code), "cni-config-") {
				got = append(got, f.String())
			}
		}
		return got
	}
	multus := &fileProblem{path: "/etc/cni/net.d/00-multus.conf", err: errors.New(`type "multus": must be bridge or flannel`)}

	s := baseSnapshot()
	s.cniInUse = multus
	assert.Equal(t, []string{
		`warning cni-config-unsupported file /etc/cni/net.d/00-multus.conf: is the CNI config the container runtime uses, but not one nodenet handles (type "multus": must be bridge or flannel); nodenet took network cbr0 from /etc/cni/net.d/10-flannel.conflist, which the runtime uses only if 00-multus.conf delegates to it (as multus does), and bridge cni0: if this node's pods are not on that bridge, nodenet's fixes do not apply here`,
	}, cniFindings(s))

	s = baseSnapshot()
	s.cniFile, s.cni, s.cniInUse = "", nil, multus
	s.cniBad = []fileProblem{{path: "/etc/cni/net.d/00-untyped.conf", err: errors.New(`is skipped by container runtimes`)}}
	assert.Equal(t, []string{
		`warning cni-config-invalid file /etc/cni/net.d/00-untyped.conf: cannot be read (is skipped by container runtimes); the runtime skips it too if a later file is valid`,
		`warning cni-config-unsupported file /etc/cni/net.d/00-multus.conf: is the CNI config the container runtime uses, but not one nodenet handles (type "multus": must be bridge or flannel); nodenet found no config it handles and assumes network cbr0 and bridge cni0: if this node's pods are not on that bridge, nodenet's fixes do not apply here`,
	}, cniFindings(s))

	s.cniInUse = nil
	assert.Contains(t, cniFindings(s), "warning cni-config-missing dir "+w.CNIConfDir+": holds no CNI config; assuming network cbr0 and bridge cni0")
}

// TestOutcomeAndNotConvergedText: what Apply's outcomes and its
// not-converged error print, with and without a detail.
func TestOutcomeAndNotConvergedText(t *testing.T) {
	assert.Equal(t, "#3 set-address link cni0: done (10.244.9.1/24 added)",
		Outcome{Index: 3, Kind: ActionSetAddress, Object: "link cni0", Status: StatusDone, Detail: "10.244.9.1/24 added"}.String())
	assert.Equal(t, "#0 delete-route route 10.244.7.0/24: skipped",
		Outcome{Kind: ActionDeleteRoute, Object: "route 10.244.7.0/24", Status: StatusSkipped}.String())
	err := &NotConvergedError{Node: "n1", Findings: []Finding{
		{Code: CodeCNIConfigRange, Object: "file /etc/cni/net.d/10-flannel.conflist"}, {Code: CodeBridgeAddress, Object: "link cni0"}}}
	assert.Equal(t, "nodenet: node n1: "+ErrNotConverged.Error()+": 2 error finding(s): cni-config-range (file /etc/cni/net.d/10-flannel.conflist), bridge-address (link cni0)", err.Error())
	assert.ErrorIs(t, err, ErrNotConverged)
}
