package nodecidr

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/cidr"
)

// clusterWrites counts every write a client sends (anything but get, list
// and watch; access reviews aside).
func clusterWrites(c *fake.Clientset) func() []string {
	var got []string
	c.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch a.GetVerb() {
		case "get", "list", "watch":
		default:
			if r := a.GetResource().Resource; r != "selfsubjectaccessreviews" {
				got = append(got, a.GetVerb()+" "+r)
			}
		}
		return false, nil, nil
	})
	return func() []string { return got }
}

// issueNodes is the story of issue 20: three nodes in 10.20.0.0/16 and one
// node outside the plan.
func issueNodes() []*corev1.Node {
	return []*corev1.Node{
		node("master1", cidrs("10.20.0.0/24"), cp),
		node("worker1", cidrs("10.20.1.0/24")),
		node("worker2", cidrs("10.20.2.0/24")),
		node("other", cidrs("10.30.9.0/24")),
	}
}

func derefNodes(ns []*corev1.Node) []corev1.Node {
	out := make([]corev1.Node, len(ns))
	for i, n := range ns {
		out[i] = *n.DeepCopy()
	}
	return out
}

func rebaseIssuePlan(t *testing.T) *Plan {
	t.Helper()
	p, err := PlanNodes(derefNodes(issueNodes()), PlanOptions{Names: []string{"worker1", "worker2", "master1"}, Mode: ModeRebase,
		Rebase: []RebasePair{{From: cidr.MustParse("10.20.0.0/16"), To: cidr.MustParse("10.30.0.0/16")}}})
	require.NoError(t, err)
	require.Equal(t, "worker1", p.Steps[0].Node)
	require.Equal(t, []string{"10.30.1.0/24"}, p.Steps[0].NewPodCIDRs)
	return p
}

func allocateIssuePlan(t *testing.T) *Plan {
	t.Helper()
	l := layout(t, "10.40.0.0/16", 24)
	l.ServiceCIDRs = []netip.Prefix{cidr.MustParse("10.40.128.0/17")}
	p, err := PlanNodes(derefNodes(issueNodes()), PlanOptions{Names: []string{"worker1", "worker2"}, Mode: ModeAllocate, Layout: l})
	require.NoError(t, err)
	require.Equal(t, "worker1", p.Steps[0].Node)
	return p
}

// TestPlanInvariants edits valid plans the ways a person (or an attacker)
// could, and checks that Validate, Apply and Verify refuse each one before
// any write, naming the field and the value.
func TestPlanInvariants(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plan  func(t *testing.T) *Plan
		edit  func(p *Plan)
		msg   string
		valid bool // passes Validate; only the check against the cluster refuses it
	}{
		{"issue 20: worker1 gets worker2's current range", rebaseIssuePlan, func(p *Plan) { p.Steps[0].NewPodCIDRs = cidrs("10.20.2.0/24") },
			"steps[0] (node worker1).newPodCIDRs[0] 10.20.2.0/24 is outside the plan's target 10.30.0.0/16", false},
		{"a range outside every target", rebaseIssuePlan, func(p *Plan) { p.Steps[0].NewPodCIDRs = cidrs("10.99.0.0/24") },
			"10.99.0.0/24 is outside the plan's target 10.30.0.0/16", false},
		{"two steps share a range", rebaseIssuePlan, func(p *Plan) { p.Steps[0].NewPodCIDRs = cidrs("10.30.2.0/24") },
			"overlapping podCIDRs 10.30.2.0/24 and 10.30.2.0/24", false},
		{"node mask changed", rebaseIssuePlan, func(p *Plan) { p.Steps[0].NewPodCIDRs = cidrs("10.30.1.0/25") },
			"10.30.1.0/25 is a /25 but the node's podCIDR 10.20.1.0/24 is a /24", false},
		{"offset not kept", rebaseIssuePlan, func(p *Plan) { p.Steps[0].NewPodCIDRs = cidrs("10.30.7.0/24") },
			"a rebase from 10.20.0.0/16 to 10.30.0.0/16 moves 10.20.1.0/24 to 10.30.1.0/24", false},
		{"family changed", rebaseIssuePlan, func(p *Plan) { p.Steps[0].NewPodCIDRs = cidrs("fd00::/64") },
			"newPodCIDRs[0] fd00::/64 is IPv6 but oldPodCIDRs[0] 10.20.1.0/24 is IPv4", false},
		{"extra family", rebaseIssuePlan, func(p *Plan) { p.Steps[0].NewPodCIDRs = cidrs("10.30.1.0/24", "fd00::/64") },
			"has 2 entries but oldPodCIDRs [10.20.1.0/24] has 1", false},
		{"rebase pairs removed", rebaseIssuePlan, func(p *Plan) { p.Rebase = nil },
			"rebase needs one from/to pair", false},
		{"target widened to hold the edit", rebaseIssuePlan, func(p *Plan) { p.Rebase[0].To = cidr.MustParse("10.99.0.0/16") },
			"10.30.1.0/24 is outside the plan's target 10.99.0.0/16", false},
		{"rebase pair with host bits", rebaseIssuePlan, func(p *Plan) { p.Rebase[0].To = netip.MustParsePrefix("10.30.0.1/16") },
			"has host bits set", false},
		{"rebase plan with a layout", rebaseIssuePlan, func(p *Plan) { l := layout(t, "10.30.0.0/16"); p.Layout = &l },
			"a rebase plan states its target in rebase", false},
		{"old podCIDR edited out of from", rebaseIssuePlan, func(p *Plan) { p.Steps[0].OldPodCIDRs = cidrs("10.50.1.0/24") },
			"oldPodCIDRs[0] 10.50.1.0/24 is neither inside the plan's from 10.20.0.0/16 nor inside its to 10.30.0.0/16", false},
		{"allocate: outside the layout", allocateIssuePlan, func(p *Plan) { p.Steps[0].NewPodCIDRs = cidrs("10.99.0.0/24") },
			"10.99.0.0/24 is outside the plan's target 10.40.0.0/16", false},
		{"allocate: wrong mask", allocateIssuePlan, func(p *Plan) { p.Steps[0].NewPodCIDRs = cidrs("10.40.50.0/23") },
			"10.40.50.0/23 is a /23 but the plan's layout gives nodes a /24 of 10.40.0.0/16", false},
		{"allocate: inside the Service CIDR", allocateIssuePlan, func(p *Plan) { p.Steps[0].NewPodCIDRs = cidrs("10.40.200.0/24") },
			"10.40.200.0/24 overlaps the plan's Service CIDR 10.40.128.0/17", false},
		{"allocate: layout removed", allocateIssuePlan, func(p *Plan) { p.Layout = nil },
			"without a layout", false},
		{"allocate: two entries for one cluster CIDR", allocateIssuePlan, func(p *Plan) { p.Steps[0].NewPodCIDRs = cidrs("10.40.50.0/24", "fd00::/64") },
			"want one per cluster CIDR", false},
		{"allocate: layout with bad mask", allocateIssuePlan, func(p *Plan) { p.Layout.NodeMasks = []int{8} },
			"layout", false},
		{"allocate: rebase pairs too", allocateIssuePlan, func(p *Plan) {
			p.Rebase = []RebasePair{{From: cidr.MustParse("10.20.0.0/16"), To: cidr.MustParse("10.40.0.0/16")}}
		}, "only a rebase plan has them", false},
		{"allocate: a range held by a node outside the plan", func(t *testing.T) *Plan {
			p := allocateIssuePlan(t)
			p.Layout.ClusterCIDRs[0] = cidr.MustParse("10.30.0.0/16")
			p.Layout.ServiceCIDRs = nil
			p.Steps[0].NewPodCIDRs, p.Steps[1].NewPodCIDRs = cidrs("10.30.9.0/24"), cidrs("10.30.10.0/24")
			return p
		}, func(p *Plan) {}, "newPodCIDRs[0] 10.30.9.0/24 overlaps podCIDR 10.30.9.0/24 held by node other", true},
		{"allocate: a range held by a node later in the plan", func(t *testing.T) *Plan {
			p := allocateIssuePlan(t)
			p.Layout.ClusterCIDRs[0] = cidr.MustParse("10.20.0.0/16")
			p.Layout.ServiceCIDRs = nil
			p.Steps[0].NewPodCIDRs, p.Steps[1].NewPodCIDRs = cidrs("10.20.2.0/24"), cidrs("10.20.3.0/24")
			return p
		}, func(p *Plan) {}, "newPodCIDRs[0] 10.20.2.0/24 overlaps podCIDR 10.20.2.0/24 held by node worker2", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.plan(t)
			tc.edit(p)
			err := p.Validate()
			if tc.valid {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrInvalidPlan)
				assert.Contains(t, err.Error(), tc.msg)
				// The same plan read from a file is refused too.
				y, yerr := p.YAML()
				require.NoError(t, yerr)
				_, derr := DecodePlan(y)
				require.ErrorIs(t, derr, ErrInvalidPlan)
			}

			c, s := newCluster(issueNodes()...)
			before := s.Nodes()
			writes := clusterWrites(c)
			for _, dry := range []DryRun{DryRunNone, DryRunServer, DryRunClient} {
				_, err = Apply(ctxT(t), c, p, ApplyOptions{JournalDir: t.TempDir(), DryRun: dry, Retry: fastRetry()})
				require.ErrorIs(t, err, ErrInvalidPlan, "dry run %q", dry)
				assert.Contains(t, err.Error(), tc.msg)
			}
			assert.Empty(t, writes(), "nothing is written")
			assert.Equal(t, before, s.Nodes())

			if !tc.valid {
				_, err = Verify(ctxT(t), c, p, VerifyOptions{})
				require.ErrorIs(t, err, ErrInvalidPlan)
			}
		})
	}
}

// TestPlanInvariantsKeepValidPlans: plans PlanNodes makes pass every check,
// including a fix plan that keeps a podCIDR a node already holds outside
// the layout's mask, and a dual-stack allocate.
func TestPlanInvariantsKeepValidPlans(t *testing.T) {
	nodes := derefNodes([]*corev1.Node{
		node("a", cidrs("10.20.0.0/24", "fd00:20::/64")),
		node("b", cidrs("10.20.0.0/24", "fd00:20:0:1::/64"), age(5)),
		node("c", nil),
		node("d", cidrs("10.20.3.0/25")),
	})
	dual := layout(t, "10.20.0.0/16,fd00:20::/48", 24, 64)
	for _, opts := range []PlanOptions{
		{Mode: ModeFix, Layout: dual},
		{Mode: ModeAllocate, Layout: layout(t, "10.50.0.0/16,fd00:50::/48", 24, 64)},
		{Mode: ModeRebase, Rebase: []RebasePair{{From: cidr.MustParse("10.20.0.0/16"), To: cidr.MustParse("10.60.0.0/16")}}, Names: []string{"d"}},
	} {
		p, err := PlanNodes(nodes, opts)
		require.NoError(t, err, "%s", opts.Mode)
		require.NotEmpty(t, p.Steps, "%s", opts.Mode)
		require.NoError(t, p.CheckAgainst(nodes), "%s", opts.Mode)
	}
}

// TestApplyChecksHooksFirst: a hook with a malformed selector (issue 20's
// --restart-cni 'kube-flannel/a in ((') is refused before any node moves.
func TestApplyChecksHooksFirst(t *testing.T) {
	c, s := newCluster(issueNodes()...)
	before := s.Nodes()
	writes := clusterWrites(c)
	p := rebaseIssuePlan(t)
	for _, opts := range []DeletePodsOptions{
		{Namespace: "kube-flannel", LabelSelector: "a in (("},
		{Namespace: "Kube_Flannel", LabelSelector: "app=flannel"},
	} {
		require.Error(t, opts.Validate())
		_, err := Apply(ctxT(t), c, p, ApplyOptions{JournalDir: t.TempDir(), Retry: fastRetry(), Hooks: []Hook{DeleteNodePods(c, opts)}})
		require.ErrorIs(t, err, ErrInvalidOptions)
		assert.Contains(t, err.Error(), opts.Namespace)
	}
	_, err := Apply(ctxT(t), c, p, ApplyOptions{JournalDir: t.TempDir(), Hooks: []Hook{{Name: "broken", Check: func() error { return errors.New("nope") }, Run: func(_ context.Context, n *corev1.Node) error { return nil }}}})
	require.ErrorIs(t, err, ErrInvalidOptions)
	assert.Empty(t, writes())
	assert.Equal(t, before, s.Nodes())
	require.NoError(t, DeletePodsOptions{Namespace: "kube-flannel", LabelSelector: "app=flannel"}.Validate())
}

// TestPlanIntentMustMatchCluster: a selector that matches nothing, and a fix
// layout that holds none of the podCIDRs in use, are refused.
func TestPlanIntentMustMatchCluster(t *testing.T) {
	nodes := derefNodes(issueNodes())
	_, err := PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: layout(t, "10.20.0.0/16"), ListOptions: ListOptions{LabelSelector: "team=none"}})
	require.ErrorIs(t, err, ErrInvalidOptions)
	assert.Contains(t, err.Error(), `label selector "team=none" matches no node`)
	_, err = PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: layout(t, "10.50.0.0/16")})
	require.ErrorIs(t, err, ErrInvalidOptions)
	assert.Contains(t, err.Error(), "layout.clusterCIDRs 10.50.0.0/16 holds none of the 4 podCIDRs in use")
	_, err = PlanNodes(nodes, PlanOptions{Mode: ModeFix, Layout: layout(t, "10.20.0.0/16")})
	require.NoError(t, err, "one node outside the range is what fix is for")
}
