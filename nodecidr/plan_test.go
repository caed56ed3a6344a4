package nodecidr

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/cidrshift/cidrshift/cidr"
)

func derefs(ns ...*corev1.Node) []corev1.Node {
	out := make([]corev1.Node, len(ns))
	for i, n := range ns {
		out[i] = *n
	}
	return out
}

func stepsOf(p *Plan) map[string][]string {
	out := map[string][]string{}
	for _, s := range p.Steps {
		out[s.Node] = s.NewPodCIDRs
	}
	return out
}

func order(p *Plan) []string {
	var out []string
	for _, s := range p.Steps {
		out = append(out, s.Node)
	}
	return out
}

func rebase(from, to string) RebasePair {
	return RebasePair{From: cidr.MustParse(from), To: cidr.MustParse(to)}
}

// The first story: workers and the control plane move from 10.10.0.0/18 to
// 10.20.0.0/16 keeping their offsets; leaving the control plane out is what
// crash-looped kube-controller-manager, and the plan says so.
func TestPlanRebase(t *testing.T) {
	nodes := derefs(
		node("master1", cidrs("10.10.0.0/24"), cp),
		node("w2", cidrs("10.10.2.0/24")),
		node("w1", cidrs("10.10.1.0/24")),
		node("empty", nil),
	)
	p, err := PlanNodes(nodes, PlanOptions{Mode: ModeRebase, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}})
	require.NoError(t, err)
	assert.Equal(t, []string{"w1", "w2", "master1"}, order(p), "workers by name, control plane last")
	assert.Equal(t, map[string][]string{"w1": {"10.20.1.0/24"}, "w2": {"10.20.2.0/24"}, "master1": {"10.20.0.0/24"}}, stepsOf(p))
	s := p.Step("w1")
	assert.Equal(t, ActionRecreate, s.Action)
	assert.Equal(t, []string{"10.10.1.0/24"}, s.OldPodCIDRs)
	assert.EqualValues(t, "uid-w1", s.UID)
	assert.NotEmpty(t, s.ResourceVersion)
	assert.True(t, p.Step("master1").ControlPlane)
	assert.Equal(t, []Skip{{Node: "empty", Reason: "no podCIDR to rebase"}}, p.Skipped)
	require.NotNil(t, p.ControllerManager)
	assert.True(t, p.ControllerManager.WouldStart)

	workersOnly, err := PlanNodes(nodes, PlanOptions{Mode: ModeRebase, Names: []string{"w1", "w2"}, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}})
	require.NoError(t, err)
	assert.False(t, workersOnly.ControllerManager.WouldStart)
	require.Len(t, workersOnly.Warnings, 1)
	assert.Contains(t, workersOnly.Warnings[0], "crash-loop on node master1")
	assert.Contains(t, workersOnly.Warnings[0], "cidr 10.10.0.0/24 is out the range of cluster cidr 10.20.0.0/16")

	// Planning again after the move is a no-op.
	moved := derefs(node("master1", cidrs("10.20.0.0/24"), cp), node("w1", cidrs("10.20.1.0/24")))
	again, err := PlanNodes(moved, PlanOptions{Mode: ModeRebase, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}})
	require.NoError(t, err)
	assert.Empty(t, again.Steps)
	assert.Equal(t, 2, again.Unchanged)
}

// TestPlanRebaseWarnsWithTheAfterFlags checks the warnings a rebase plan
// carries when kube-controller-manager, run with the After flags, would not
// start: flags it refuses, and nodes it would crash-loop on, with the hint to
// select a node the plan leaves out.
func TestPlanRebaseWarnsWithTheAfterFlags(t *testing.T) {
	nodes := derefs(node("w1", cidrs("10.10.1.0/24")), node("w2", cidrs("10.10.2.0/24")))
	plan := func(after cidr.ControllerManagerFlags) *Plan {
		t.Helper()
		p, err := PlanNodes(nodes, PlanOptions{Mode: ModeRebase, Names: []string{"w1"},
			Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}, After: &after})
		require.NoError(t, err, "a warning does not stop the plan")
		require.NotNil(t, p.ControllerManager)
		assert.False(t, p.ControllerManager.WouldStart)
		assert.Equal(t, map[string][]string{"w1": {"10.20.1.0/24"}}, stepsOf(p))
		return p
	}

	refused := plan(cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.20.0.0/16", NodeCIDRMaskSize: 8})
	assert.Equal(t, []string{"kube-controller-manager would refuse --cluster-cidr=10.20.0.0/16 --node-cidr-mask-size=8: " +
		"Controller: Invalid --cluster-cidr, mask size of cluster CIDR must be less than or equal to --node-cidr-mask-size " +
		"configured for CIDR family (cluster /16, node /8)"}, refused.Warnings)

	elsewhere := plan(cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.30.0.0/16", NodeCIDRMaskSize: 24})
	assert.Equal(t, []string{
		"after this plan, kube-controller-manager with --cluster-cidr=10.30.0.0/16 --node-cidr-mask-size=24 would crash-loop on node w1: " +
			"failed to mark cidr[10.20.1.0/24] at idx [0] as occupied for node: w1: cidr 10.20.1.0/24 is out the range of cluster cidr 10.30.0.0/16",
		"after this plan, kube-controller-manager with --cluster-cidr=10.30.0.0/16 --node-cidr-mask-size=24 would crash-loop on node w2: " +
			"failed to mark cidr[10.10.2.0/24] at idx [0] as occupied for node: w2: cidr 10.10.2.0/24 is out the range of cluster cidr 10.30.0.0/16" +
			"; the node is not in this plan, select it too",
	}, elsewhere.Warnings)
}

func TestPlanRebaseDualStack(t *testing.T) {
	nodes := derefs(node("a", cidrs("10.10.1.0/24", "fd00:10:0:1::/64")), node("b", cidrs("10.10.2.0/24", "fd00:10:0:2::/64")))
	p, err := PlanNodes(nodes, PlanOptions{Mode: ModeRebase, Rebase: []RebasePair{
		rebase("fd00:10::/56", "fd00:20::/56"), rebase("10.10.0.0/18", "10.20.0.0/16")}})
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{"a": {"10.20.1.0/24", "fd00:20:0:1::/64"}, "b": {"10.20.2.0/24", "fd00:20:0:2::/64"}}, stepsOf(p))

	v6only, err := PlanNodes(nodes, PlanOptions{Mode: ModeRebase, Rebase: []RebasePair{rebase("fd00:10::/56", "fd00:30::/56")}})
	require.NoError(t, err)
	assert.Equal(t, []string{"10.10.1.0/24", "fd00:30:0:1::/64"}, v6only.Step("a").NewPodCIDRs)
}

func TestPlanRebaseErrors(t *testing.T) {
	nodes := derefs(node("a", cidrs("10.10.1.0/24")), node("stray", cidrs("192.168.0.0/24")), node("keep", cidrs("10.20.5.0/24")))
	tests := []struct {
		name  string
		nodes []corev1.Node
		opts  PlanOptions
		is    error
		msg   string
	}{
		{"outside from", nodes, PlanOptions{Mode: ModeRebase, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}}, ErrPlan, "192.168.0.0/24 is neither inside from 10.10.0.0/18"},
		{"to too small", nodes[:1], PlanOptions{Mode: ModeRebase, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/24")}}, ErrPlan, "holds only 256 addresses"},
		{"collision with a node that stays", derefs(node("a", cidrs("10.10.5.0/24")), node("keep", cidrs("10.20.5.0/24"))),
			PlanOptions{Mode: ModeRebase, Names: []string{"a"}, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}}, ErrPlan, "podCIDR 10.20.5.0/24 is shared by"},
		{"family mismatch", nodes, PlanOptions{Mode: ModeRebase, Rebase: []RebasePair{rebase("10.10.0.0/18", "fd00::/48")}}, ErrInvalidOptions, "is IPv4"},
		{"host bits", nodes, PlanOptions{Mode: ModeRebase, Rebase: []RebasePair{{From: netip.MustParsePrefix("10.10.0.1/18"), To: cidr.MustParse("10.20.0.0/16")}}}, ErrInvalidOptions, "host bits"},
		{"unknown name", nodes, PlanOptions{Mode: ModeRebase, Names: []string{"nope"}, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}}, ErrInvalidOptions, "no node named nope"},
		{"bad selector", nodes, PlanOptions{Mode: ModeRebase, ListOptions: ListOptions{LabelSelector: "a in (b"}, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}}, ErrInvalidOptions, "label selector"},
		{"no mode", nodes, PlanOptions{}, ErrInvalidOptions, "mode"},
		{"fix without layout", nodes, PlanOptions{Mode: ModeFix}, ErrInvalidOptions, "clusterCIDRs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PlanNodes(tc.nodes, tc.opts)
			require.ErrorIs(t, err, tc.is)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

// TestPlanFixWithin: new subnets come only from inside Within (every prefix
// of it, in order, and in each family) and never from Excluded; a subnet
// only partly inside is not handed out.
func TestPlanFixWithin(t *testing.T) {
	nodes := derefs(
		node("a", cidrs("10.240.0.0/24", "fd00::/64")),
		node("b", cidrs("10.240.0.0/24", "fd00::/64"), age(5)),
		node("c", nil),
		node("d", nil),
	)
	l := layout(t, "10.240.0.0/12,fd00::/48", 24, 64)
	p, err := PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: l,
		Within:   []netip.Prefix{netip.MustParsePrefix("10.240.0.0/23"), netip.MustParsePrefix("10.240.7.128/25"), netip.MustParsePrefix("10.241.0.0/22"), netip.MustParsePrefix("fd00:0:0:8000::/49")},
		Excluded: []netip.Prefix{netip.MustParsePrefix("10.241.0.0/23"), netip.MustParsePrefix("fd00:0:0:8000::/64")}})
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{
		"b": {"10.240.1.0/24", "fd00:0:0:8001::/64"}, "c": {"10.241.2.0/24", "fd00:0:0:8002::/64"}, "d": {"10.241.3.0/24", "fd00:0:0:8003::/64"},
	}, stepsOf(p))
	// Nothing left inside Within: the plan says so.
	_, err = PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: l, Within: []netip.Prefix{netip.MustParsePrefix("10.240.0.0/23")}})
	assert.ErrorIs(t, err, cidr.ErrFull)

	// Excluded without Within: only the excluded subnets are skipped.
	p, err = PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: l,
		Excluded: []netip.Prefix{netip.MustParsePrefix("10.240.1.0/24"), netip.MustParsePrefix("fd00:0:0:2::/63")}})
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{
		"b": {"10.240.2.0/24", "fd00:0:0:1::/64"}, "c": {"10.240.3.0/24", "fd00:0:0:4::/64"}, "d": {"10.240.4.0/24", "fd00:0:0:5::/64"},
	}, stepsOf(p))
}

// The second story: duplicates and nodes without podCIDR; the node holding a
// subnet longest keeps it, the others get the lowest free subnets, and nodes
// without a podCIDR get theirs by a patch.
func TestPlanFix(t *testing.T) {
	nodes := derefs(
		node("old", cidrs("10.240.0.0/24"), age(1)),
		node("new", cidrs("10.240.0.0/24"), age(50)),
		node("newer", cidrs("10.240.0.0/24"), age(60)),
		node("fine", cidrs("10.240.2.0/24")),
		node("none", nil),
		node("outside", cidrs("10.10.0.0/24"), cp),
		node("wrongmask", cidrs("10.240.8.0/25")),
	)
	l := layout(t, "10.240.0.0/12", 24)
	p, err := PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: l})
	require.NoError(t, err)
	assert.Equal(t, []string{"new", "newer", "none", "outside"}, order(p))
	assert.Equal(t, map[string][]string{
		"new": {"10.240.1.0/24"}, "newer": {"10.240.3.0/24"}, "none": {"10.240.4.0/24"}, "outside": {"10.240.5.0/24"},
	}, stepsOf(p))
	assert.Equal(t, ActionPatch, p.Step("none").Action)
	assert.Equal(t, ActionRecreate, p.Step("new").Action)
	assert.Contains(t, p.Step("new").Reason, "shared with old")
	assert.Equal(t, 3, p.Unchanged)
	assert.True(t, p.ControllerManager.WouldStart)

	// Allocate is stricter: the /25 moves to the layout's /24 too.
	a, err := PlanNodes(nodes, PlanOptions{Mode: ModeAllocate, Layout: l})
	require.NoError(t, err)
	assert.Contains(t, stepsOf(a), "wrongmask")

	// After applying, a new fix plan has nothing to do.
	after := make([]corev1.Node, len(nodes))
	for i, n := range nodes {
		after[i] = *n.DeepCopy()
		if st := p.Step(n.Name); st != nil {
			after[i].Spec.PodCIDR, after[i].Spec.PodCIDRs = st.NewPodCIDRs[0], st.NewPodCIDRs
		}
	}
	again, err := PlanNodes(after, PlanOptions{Mode: ModeFix, Layout: l})
	require.NoError(t, err)
	assert.Empty(t, again.Steps)
}

// TestPlanFixKeepsAHeldPodCIDROfAnotherMask: fix moves only what is
// wrong. Of two nodes sharing an IPv6 podCIDR, the one that moves keeps its
// IPv4 /25 although the layout gives nodes a /24: a podCIDR the node already
// holds is not held to the layout's target, in the plan and in its checks.
func TestPlanFixKeepsAHeldPodCIDROfAnotherMask(t *testing.T) {
	nodes := derefs(node("x", cidrs("10.20.5.0/25", "fd00:20::/64")), node("y", cidrs("10.20.6.0/25", "fd00:20::/64")))
	l := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{cidr.MustParse("10.20.0.0/16"), cidr.MustParse("fd00:20::/56")}, NodeMasks: []int{24, 64}}
	p, err := PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: l})
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{"y": {"10.20.6.0/25", "fd00:20:0:1::/64"}}, stepsOf(p))
	require.NoError(t, p.Validate())
	require.NoError(t, p.CheckAgainst(nodes))

	// A podCIDR of another mask that the node does not hold is refused.
	p.Steps[0].OldPodCIDRs = []string{"10.20.7.0/25", "fd00:20::/64"}
	require.ErrorIs(t, p.Validate(), ErrInvalidPlan)
	assert.ErrorContains(t, p.Validate(), "steps[0] (node y).newPodCIDRs[0] 10.20.6.0/25 is a /25 but the plan's layout gives nodes a /24 of 10.20.0.0/16")
}

// TestCheckAgainstRefusesAPlanThatKeepsASharedPodCIDR: a step may keep a
// podCIDR its node holds, but not one another node shares or overlaps:
// after the plan the two would still clash. An edited plan that moves only
// the IPv6 podCIDR of a node whose IPv4 one is shared, or overlapped, is
// refused before anything is written.
func TestCheckAgainstRefusesAPlanThatKeepsASharedPodCIDR(t *testing.T) {
	l := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{cidr.MustParse("10.20.0.0/16"), cidr.MustParse("fd00:20::/56")}, NodeMasks: []int{24, 64}}
	for _, tc := range []struct{ name, other, want string }{
		{"shared", "10.20.5.0/24", "after the plan podCIDR 10.20.5.0/24 is shared by"},
		{"overlapped", "10.20.5.0/25", "after the plan node x's podCIDR 10.20.5.0/24 contains node y's podCIDR 10.20.5.0/25"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := derefs(node("x", cidrs("10.20.5.0/24", "fd00:20::/64")), node("y", cidrs(tc.other, "fd00:20:0:1::/64")))
			p := &Plan{APIVersion: PlanAPIVersion, Kind: PlanKind, Mode: ModeFix, Layout: &l, Steps: []Step{{
				Node: "x", UID: "uid-x", ResourceVersion: "1", Action: ActionRecreate,
				OldPodCIDRs: []string{"10.20.5.0/24", "fd00:20::/64"}, NewPodCIDRs: []string{"10.20.5.0/24", "fd00:20:0:2::/64"}}}}
			require.NoError(t, p.Validate())
			err := p.CheckAgainst(nodes)
			require.ErrorIs(t, err, ErrInvalidPlan)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// TestPlanFixKeepsTheSubnetWithTheLayoutsMask: of two nodes whose podCIDRs
// overlap, the one whose podCIDR has the layout's node mask keeps it, even
// when the other has existed longer; the mask is the layout's (/25 here),
// not the family's default.
func TestPlanFixKeepsTheSubnetWithTheLayoutsMask(t *testing.T) {
	nodes := derefs(node("older", cidrs("10.0.4.0/24"), age(1)), node("newer", cidrs("10.0.4.0/25"), age(9)))
	p, err := PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: layout(t, "10.0.0.0/16", 25)})
	require.NoError(t, err)
	require.Len(t, p.Steps, 1)
	assert.Equal(t, "older", p.Steps[0].Node, "the /24 gives way to the /25")
	np := cidr.MustParse(p.Steps[0].NewPodCIDRs[0])
	assert.Equal(t, 25, np.Bits())
	assert.False(t, np.Overlaps(cidr.MustParse("10.0.4.0/25")))
	assert.Equal(t, "10.0.4.0/24 overlaps another node's podCIDR", p.Steps[0].Reason)

	// A node without a podCIDR gets one, and the step says why.
	nodes = append(nodes, *node("bare", nil, age(5)))
	p, err = PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: layout(t, "10.0.0.0/16", 25)})
	require.NoError(t, err)
	require.NotNil(t, p.Step("bare"))
	assert.Equal(t, "no podCIDR", p.Step("bare").Reason)
	assert.Equal(t, "10.0.4.0/24 overlaps another node's podCIDR", p.Step("older").Reason)

	// Allocate says the same of a bare node, and names a podCIDR the
	// single-stack layout has no cluster CIDR for by its position.
	nodes = append(nodes, *node("dual", cidrs("10.0.9.0/25", "fd00::/64"), age(7)))
	p, err = PlanNodes(nodes, PlanOptions{Mode: ModeAllocate, Layout: layout(t, "10.0.0.0/16", 25)})
	require.NoError(t, err)
	require.NotNil(t, p.Step("bare"))
	assert.Equal(t, "no podCIDR", p.Step("bare").Reason)
	require.NotNil(t, p.Step("dual"))
	assert.Equal(t, "podCIDRs[1] fd00::/64 does not match the cluster CIDRs 10.0.0.0/16 by position", p.Step("dual").Reason)
	p, err = PlanNodes(append(nodes, *node("away", cidrs("10.9.0.0/25"), age(8))), PlanOptions{Mode: ModeAllocate, Layout: layout(t, "10.0.0.0/16", 25)})
	require.NoError(t, err)
	require.NotNil(t, p.Step("away"))
	assert.Equal(t, "10.9.0.0/25 is outside 10.0.0.0/16", p.Step("away").Reason)
}

// TestLayoutFlags: the kube-controller-manager flags a fix or allocate plan
// checks itself against, as the controller wants them: one
// --node-cidr-mask-size for a single cluster CIDR, one per family for two,
// which is what lets the plan's preflight pass.
func TestLayoutFlags(t *testing.T) {
	assert.Equal(t, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.20.0.0/16", NodeCIDRMaskSize: 25, ServiceClusterIPRange: "10.96.0.0/12"},
		layoutFlags(cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{cidr.MustParse("10.20.0.0/16")}, NodeMasks: []int{25}, ServiceCIDRs: []netip.Prefix{cidr.MustParse("10.96.0.0/12")}}))
	dual := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{cidr.MustParse("fd00:20::/56"), cidr.MustParse("10.20.0.0/16")}, NodeMasks: []int{64, 24}}
	assert.Equal(t, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "fd00:20::/56,10.20.0.0/16", NodeCIDRMaskSizeIPv4: 24, NodeCIDRMaskSizeIPv6: 64},
		layoutFlags(dual))
	p, err := PlanNodes(derefs(node("a", nil)), PlanOptions{Mode: ModeAllocate, Layout: dual})
	require.NoError(t, err)
	assert.True(t, p.ControllerManager.WouldStart, "%v", p.Warnings)
}

// TestRebaseFlags: the flags a rebase plan checks itself against carry the
// mask its nodes keep (/25 here, not the default), one flag for one pair and
// one per family for two.
func TestRebaseFlags(t *testing.T) {
	nodes := derefs(node("a", cidrs("10.10.1.0/25", "fd00:10:0:1::/80")), node("b", cidrs("10.10.1.128/25", "fd00:10:0:2::/80")))
	p, err := PlanNodes(nodes, PlanOptions{Mode: ModeRebase, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}})
	require.NoError(t, err)
	assert.Equal(t, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.20.0.0/16", NodeCIDRMaskSize: 25}, rebaseFlags(p, p.Rebase))
	pairs := []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16"), rebase("fd00:10::/56", "fd00:20::/56")}
	p, err = PlanNodes(nodes, PlanOptions{Mode: ModeRebase, Rebase: pairs})
	require.NoError(t, err)
	assert.Equal(t, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.20.0.0/16,fd00:20::/56", NodeCIDRMaskSizeIPv4: 25, NodeCIDRMaskSizeIPv6: 80},
		rebaseFlags(p, pairs))
}

func TestPlanAllocate(t *testing.T) {
	nodes := derefs(node("a", cidrs("10.233.64.0/24")), node("b", cidrs("10.233.65.0/24")), node("c", cidrs("10.20.0.0/24")))
	l := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{cidr.MustParse("10.20.0.0/16"), cidr.MustParse("fd00:20::/56")}, NodeMasks: []int{24, 64}}
	p, err := PlanNodes(nodes, PlanOptions{Mode: ModeAllocate, Layout: l})
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{
		"a": {"10.20.1.0/24", "fd00:20::/64"},
		"b": {"10.20.2.0/24", "fd00:20:0:1::/64"},
		"c": {"10.20.0.0/24", "fd00:20:0:2::/64"},
	}, stepsOf(p), "c keeps its in-range subnet and gains an IPv6 one")

	full := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{cidr.MustParse("10.20.0.0/23")}, NodeMasks: []int{24}}
	_, err = PlanNodes(nodes, PlanOptions{Mode: ModeAllocate, Layout: full})
	require.ErrorIs(t, err, ErrPlan)
	require.ErrorIs(t, err, cidr.ErrFull)
}

func TestPlanSerialisation(t *testing.T) {
	nodes := derefs(node("w1", cidrs("10.10.1.0/24")), node("w2", cidrs("10.10.2.0/24")))
	p, err := PlanNodes(nodes, PlanOptions{Mode: ModeRebase, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}})
	require.NoError(t, err)
	y, err := p.YAML()
	require.NoError(t, err)
	assert.Contains(t, string(y), "apiVersion: cidrshift.io/v1alpha1")
	assert.Contains(t, string(y), "from: 10.10.0.0/18")
	back, err := DecodePlan(y)
	require.NoError(t, err)
	assert.Equal(t, p.ID(), back.ID())
	assert.Equal(t, p.Steps, back.Steps)
	j, err := json.Marshal(p)
	require.NoError(t, err)
	back, err = DecodePlan(j)
	require.NoError(t, err)
	assert.Equal(t, p.ID(), back.ID())

	bad := []struct{ name, edit, msg string }{
		{"unknown field", "steps:\n- node: x\n  bogus: 1\n", "unknown field"},
		{"kind", "apiVersion: v1\nkind: Node\nmode: fix\n", "want apiVersion cidrshift.io/v1alpha1"},
		{"host bits", "apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: fix\nsteps:\n- {node: a, uid: u, action: recreate, oldPodCIDRs: [10.0.0.0/24], newPodCIDRs: [10.1.0.1/24]}\n", "host bits"},
		{"patch with old", "apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: fix\nsteps:\n- {node: a, uid: u, action: patch, oldPodCIDRs: [10.0.0.0/24], newPodCIDRs: [10.1.0.0/24]}\n", "only allows setting podCIDRs that are empty"},
		{"overlap", "apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: fix\nsteps:\n- {node: a, uid: u, action: patch, newPodCIDRs: [10.1.0.0/24]}\n- {node: b, uid: v, action: patch, newPodCIDRs: [10.1.0.0/16]}\n", "overlapping"},
		{"duplicate node", "apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: fix\nsteps:\n- {node: a, uid: u, action: patch, newPodCIDRs: [10.1.0.0/24]}\n- {node: a, uid: u, action: patch, newPodCIDRs: [10.2.0.0/24]}\n", "twice"},
		{"no uid", "apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: fix\nsteps:\n- {node: a, action: patch, newPodCIDRs: [10.1.0.0/24]}\n", "uid is empty"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodePlan([]byte(tc.edit))
			require.True(t, errors.Is(err, ErrInvalidPlan), "%v", err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

// A dual-stack node with its families in the wrong order crashes
// kube-controller-manager; fix keeps both subnets and puts them in order.
func TestPlanFixFamilyOrder(t *testing.T) {
	nodes := derefs(node("a", cidrs("fd00:10::/64", "10.244.1.0/24")), node("b", cidrs("10.244.2.0/24", "fd00:10:0:1::/64")))
	l := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{cidr.MustParse("10.244.0.0/16"), cidr.MustParse("fd00:10::/56")}, NodeMasks: []int{24, 64}}
	p, err := PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: l})
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{"a": {"10.244.1.0/24", "fd00:10::/64"}}, stepsOf(p))
	assert.Contains(t, p.Step("a").Reason, "must be podCIDRs[0]")
}

// TestPlanFixSelectedNodeYieldsToUnselectedTwin: of two nodes sharing a
// podCIDR, when only one is selected (Names), the selected one moves, even
// though it is older and would otherwise keep the subnet: a node the run
// may not touch keeps what it holds. Both name orders are planned, so the
// unselected node is met first and second.
func TestPlanFixSelectedNodeYieldsToUnselectedTwin(t *testing.T) {
	for _, names := range [][2]string{{"a", "b"}, {"b", "a"}} {
		selected, twin := names[0], names[1]
		nodes := derefs(node(selected, cidrs("10.240.0.0/24"), age(1)), node(twin, cidrs("10.240.0.0/24"), age(50)), node("c", cidrs("10.240.1.0/24")))
		p, err := PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: layout(t, "10.240.0.0/12", 24), Names: []string{selected}})
		require.NoError(t, err)
		assert.Equal(t, map[string][]string{selected: {"10.240.2.0/24"}}, stepsOf(p), "selected %s, its twin %s keeps 10.240.0.0/24", selected, twin)
		all, err := PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: layout(t, "10.240.0.0/12", 24)})
		require.NoError(t, err)
		assert.Equal(t, map[string][]string{twin: {"10.240.2.0/24"}}, stepsOf(all), "with every node selected, the older %s keeps it", selected)
	}
}

// TestPlanFixRangeExhausted: when the range has fewer free subnets than
// nodes that need one, nothing is planned, and the error counts the nodes
// left without, names the first five and says how many more there are.
func TestPlanFixRangeExhausted(t *testing.T) {
	var nodes []corev1.Node
	for i := range 10 {
		nodes = append(nodes, *node(fmt.Sprintf("w%02d", i), nil))
	}
	p, err := PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: layout(t, "10.240.0.0/22", 24)})
	assert.Nil(t, p)
	require.ErrorIs(t, err, ErrPlan)
	require.ErrorIs(t, err, cidr.ErrFull)
	assert.EqualError(t, err, "cannot plan: 6 nodes (w04, w05, w06, w07, w08 and 1 more) need a new /24 but 10.240.0.0/22 has none left: no free subnet left")

	p, err = PlanNodes(nodes[:9], PlanOptions{Mode: ModeFix, Layout: layout(t, "10.240.0.0/22", 24)})
	assert.Nil(t, p)
	assert.EqualError(t, err, "cannot plan: 5 nodes (w04, w05, w06, w07, w08) need a new /24 but 10.240.0.0/22 has none left: no free subnet left")
}
