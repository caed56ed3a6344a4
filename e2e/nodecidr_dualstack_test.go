package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// TestNodeCIDRDualStackDoctorAndFix is the node fix on a dual-stack cluster
// (issue 19): kube-controller-manager with --cluster-cidr=v4,v6 and one mask
// per family. Eight kwok nodes hold one podCIDR per family, IPv4 first, as
// kube-controller-manager gives them, except:
//   - ds-5 shares ds-1's IPv4 subnet (its IPv6 one is its own),
//   - ds-6 shares ds-2's IPv6 subnet (its IPv4 one is its own),
//   - ds-7 has no podCIDR,
//   - ds-8 holds its own pair in the wrong order (IPv6 first).
//
// The doctor (binary, dual-stack flags) and nodecidr.MakePlan agree on a
// fix plan that moves only the broken family of each node and keeps the
// other, patches ds-7 with a pair and reorders ds-8 without changing its
// subnets. After Apply and Verify every node holds a distinct pair, IPv4
// first, each inside its family's cluster CIDR. Then ds-9 joins with its
// own pair IPv6 first and no other fault: the doctor plans its reorder
// alone. After that plan, kube-controller-manager with dual-stack node IPAM
// on starts and gives a joining node a pair nobody holds.
func TestNodeCIDRDualStackDoctorAndFix(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	v4, v6 := netip.MustParsePrefix("10.250.0.0/16"), netip.MustParsePrefix("fd00:250::/56")
	clusterFlag := v4.String() + "," + v6.String()
	c := harness.Start(t, harness.Options{ClusterCIDR: clusterFlag, NodeCIDRMaskSize: 24, NodeCIDRMaskSizeIPv6: 64,
		DisableNodeIPAM: true, Disable: []harness.Component{harness.Scheduler}})
	ctx := t.Context()
	cs := nodeE2EClient(t, c)
	doctor := nodeE2EBuild(t, "doctor")

	pair := func(i4, i6 int) []string {
		return []string{nodeE2ESubnet(v4, 24, i4).String(), nodeE2ESubnet(v6, 64, i6).String()}
	}
	want := map[string][]string{ // podCIDRs as created
		"ds-0": pair(0, 0), "ds-1": pair(1, 1), "ds-2": pair(2, 2), "ds-3": pair(3, 3), "ds-4": pair(4, 4),
		"ds-5": pair(1, 5), "ds-6": pair(6, 2), "ds-7": nil,
		"ds-8": {nodeE2ESubnet(v6, 64, 8).String(), nodeE2ESubnet(v4, 24, 8).String()},
	}
	names := slices.Sorted(maps.Keys(want))
	mk := func(name string) *corev1.Node {
		n := harness.KwokNode(name, map[string]string{"e2e.cidrshift.io/story": "dual-stack"})
		if p := want[name]; len(p) > 0 {
			n.Spec.PodCIDR, n.Spec.PodCIDRs = p[0], slices.Clone(p)
		}
		return n
	}
	// The twins (ds-1, ds-2) first: a duplicate gives up the subnet it
	// holds the shortest time, and creationTimestamp has one-second
	// resolution.
	var first, later []*corev1.Node
	for _, n := range names {
		if n == "ds-5" || n == "ds-6" {
			later = append(later, mk(n))
		} else {
			first = append(first, mk(n))
		}
	}
	nodeE2ECreateNodes(t, ctx, cs, first)
	time.Sleep(1100 * time.Millisecond) // deliberate: strictly younger duplicates
	nodeE2ECreateNodes(t, ctx, cs, later)
	settled := nodeE2ESettled(t, cs, len(names), 2*time.Minute)
	for _, n := range names {
		assert.Equal(t, want[n], settled[n].Spec.PodCIDRs, "node %s as created", n)
	}

	// The doctor, with the dual-stack flags a user passes.
	serviceCIDR := c.Options().ServiceCIDR
	out, code, proc := nodeE2ERun(t, doctor, "--kubeconfig", c.AdminKubeconfig(), "--cluster-cidr", clusterFlag,
		"--node-mask", "24,64", "--service-cidr", serviceCIDR, "--pods=false", "-o", "json")
	require.Equal(t, 1, code, "doctor exits 1 when it finds problems:\n%s", proc.output())
	var rep nodeE2EDoctorReport
	nodeE2EJSON(t, out, &rep)
	assert.False(t, rep.Healthy)
	errFindings := nodeE2EErrorFindings(rep.Audit.Findings)
	assert.Equal(t, []string{"ds-5", "ds-6"}, errFindings[nodecidr.FindingDuplicate], "duplicates, one per family: %v", errFindings)
	assert.Equal(t, []string{"ds-7"}, errFindings[nodecidr.FindingMissing], "missing: %v", errFindings)
	require.NotEmpty(t, rep.FixPlan, "doctor printed no fix plan (error %q)", rep.FixPlanError)
	fix, err := nodecidr.DecodePlan(rep.FixPlan)
	require.NoError(t, err)

	layout, _, err := cidr.ParseControllerManagerFlags(cidr.ControllerManagerFlags{AllocateNodeCIDRs: true,
		ClusterCIDR: clusterFlag, NodeCIDRMaskSizeIPv4: 24, NodeCIDRMaskSizeIPv6: 64, ServiceClusterIPRange: serviceCIDR})
	require.NoError(t, err)
	own, err := nodecidr.MakePlan(ctx, cs, nodecidr.PlanOptions{Mode: nodecidr.ModeFix, Layout: layout})
	require.NoError(t, err)
	summary := func(p *nodecidr.Plan) map[string]string {
		out := map[string]string{}
		for _, s := range p.Steps {
			out[s.Node] = fmt.Sprintf("%s %v->%v", s.Action, s.OldPodCIDRs, s.NewPodCIDRs)
		}
		return out
	}
	assert.Equal(t, summary(own), summary(fix), "doctor's fix plan and MakePlan's")

	// What the plan keeps and what it moves, family by family.
	held := map[string]string{} // every subnet held before the fix → holder
	for _, n := range names {
		for _, p := range want[n] {
			if _, ok := held[p]; !ok {
				held[p] = n
			}
		}
	}
	steps := map[string]nodecidr.Step{}
	for _, s := range fix.Steps {
		steps[s.Node] = s
		require.Len(t, s.NewPodCIDRs, 2, "step %s: one podCIDR per family", s.Node)
		assert.True(t, netip.MustParsePrefix(s.NewPodCIDRs[0]).Addr().Is4(), "step %s: IPv4 first, the order of --cluster-cidr: %v", s.Node, s.NewPodCIDRs)
	}
	require.ElementsMatch(t, []string{"ds-5", "ds-6", "ds-7", "ds-8"}, slices.Collect(maps.Keys(steps)), "the fix plan moves exactly the broken nodes")
	fresh := func(node string, p string, family string) {
		t.Helper()
		if other, ok := held[p]; ok {
			t.Errorf("step %s: new %s podCIDR %s is held by %s", node, family, p, other)
		}
		held[p] = node
	}
	assert.Equal(t, nodecidr.ActionRecreate, steps["ds-5"].Action)
	assert.Equal(t, want["ds-5"][1], steps["ds-5"].NewPodCIDRs[1], "ds-5 keeps its own IPv6 subnet")
	fresh("ds-5", steps["ds-5"].NewPodCIDRs[0], "IPv4")
	assert.Equal(t, nodecidr.ActionRecreate, steps["ds-6"].Action)
	assert.Equal(t, want["ds-6"][0], steps["ds-6"].NewPodCIDRs[0], "ds-6 keeps its own IPv4 subnet")
	fresh("ds-6", steps["ds-6"].NewPodCIDRs[1], "IPv6")
	assert.Equal(t, nodecidr.ActionPatch, steps["ds-7"].Action)
	fresh("ds-7", steps["ds-7"].NewPodCIDRs[0], "IPv4")
	fresh("ds-7", steps["ds-7"].NewPodCIDRs[1], "IPv6")
	assert.Equal(t, nodecidr.ActionRecreate, steps["ds-8"].Action)
	assert.Equal(t, []string{want["ds-8"][1], want["ds-8"][0]}, steps["ds-8"].NewPodCIDRs, "ds-8 keeps both subnets, in the cluster's order")

	journalDir := filepath.Join(t.TempDir(), "journal")
	res, err := nodecidr.Apply(ctx, cs, fix, nodecidr.ApplyOptions{JournalDir: journalDir, Cordon: true, Note: "dual-stack fix"})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"ds-5", "ds-6", "ds-7", "ds-8"}, res.Changed)
	v, err := nodecidr.Verify(ctx, cs, fix, nodecidr.VerifyOptions{JournalDir: journalDir})
	require.NoError(t, err)
	assert.True(t, v.OK, "verify: %+v", v.Findings)

	after := nodeE2ENodes(t, ctx, cs)
	perFamily := map[netip.Prefix]string{}
	for _, n := range names {
		node := after[n]
		require.NotNil(t, node, "node %s", n)
		if s, moved := steps[n]; moved {
			assert.Equal(t, s.NewPodCIDRs, node.Spec.PodCIDRs, "node %s", n)
		} else {
			assert.Equal(t, want[n], node.Spec.PodCIDRs, "node %s keeps its pair", n)
		}
		require.Len(t, node.Spec.PodCIDRs, 2, "node %s", n)
		assert.Equal(t, node.Spec.PodCIDRs[0], node.Spec.PodCIDR, "node %s: podCIDR is podCIDRs[0]", n)
		for i, s := range node.Spec.PodCIDRs {
			p := netip.MustParsePrefix(s)
			in := []netip.Prefix{v4, v6}[i]
			assert.True(t, in.Contains(p.Addr()), "node %s: podCIDRs[%d] %s outside %s", n, i, p, in)
			if other, dup := perFamily[p]; dup {
				t.Errorf("nodes %s and %s both hold %s after the fix", other, n, p)
			}
			perFamily[p] = n
		}
		recreated := n == "ds-5" || n == "ds-6" || n == "ds-8"
		assert.Equal(t, !recreated, settled[n].UID == node.UID, "node %s recreated: %t", n, recreated)
	}

	out, code, proc = nodeE2ERun(t, doctor, "--kubeconfig", c.AdminKubeconfig(), "--cluster-cidr", clusterFlag,
		"--node-mask", "24,64", "--service-cidr", serviceCIDR, "--pods=false", "-o", "json")
	require.Equal(t, 0, code, "doctor after the fix:\n%s", proc.output())
	rep = nodeE2EDoctorReport{}
	nodeE2EJSON(t, out, &rep)
	assert.True(t, rep.Healthy)

	// A node whose only fault is its order (kube-controller-manager would
	// not start) gets a fix plan of its own: the same pair, reordered.
	ds9 := harness.KwokNode("ds-9", map[string]string{"e2e.cidrshift.io/story": "dual-stack"})
	pair9 := pair(200, 200)
	ds9.Spec.PodCIDR, ds9.Spec.PodCIDRs = pair9[1], []string{pair9[1], pair9[0]}
	nodeE2ECreateNodes(t, ctx, cs, []*corev1.Node{ds9})
	out, code, proc = nodeE2ERun(t, doctor, "--kubeconfig", c.AdminKubeconfig(), "--cluster-cidr", clusterFlag,
		"--node-mask", "24,64", "--service-cidr", serviceCIDR, "--pods=false", "-o", "json")
	require.Equal(t, 1, code, "doctor with ds-9 out of order:\n%s", proc.output())
	rep = nodeE2EDoctorReport{}
	nodeE2EJSON(t, out, &rep)
	assert.False(t, rep.ControllerManager.WouldStart)
	assert.Equal(t, map[nodecidr.FindingKind][]string{nodecidr.FindingFamilyOrder: {"ds-9"}}, nodeE2EErrorFindings(rep.Audit.Findings))
	require.NotEmpty(t, rep.FixPlan, "doctor printed no fix plan for a family-order error alone (error %q)", rep.FixPlanError)
	fix9, err := nodecidr.DecodePlan(rep.FixPlan)
	require.NoError(t, err)
	require.Len(t, fix9.Steps, 1)
	assert.Equal(t, "ds-9", fix9.Steps[0].Node)
	assert.Equal(t, nodecidr.ActionRecreate, fix9.Steps[0].Action)
	assert.Equal(t, pair9, fix9.Steps[0].NewPodCIDRs)
	_, err = nodecidr.Apply(ctx, cs, fix9, nodecidr.ApplyOptions{JournalDir: journalDir + "-ds9", Note: "family order"})
	require.NoError(t, err)
	n9, err := cs.CoreV1().Nodes().Get(ctx, "ds-9", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, pair9, n9.Spec.PodCIDRs)
	for _, s := range pair9 {
		perFamily[netip.MustParsePrefix(s)] = "ds-9"
	}

	// kube-controller-manager with dual-stack node IPAM on starts and gives
	// a joining node one subnet per family that no node holds.
	require.NoError(t, c.Restart(ctx, harness.ControllerManager, "--allocate-node-cidrs=true", "--cluster-cidr="+clusterFlag,
		"--node-cidr-mask-size-ipv4=24", "--node-cidr-mask-size-ipv6=64"))
	_, err = cs.CoreV1().Nodes().Create(ctx, harness.KwokNode("ds-join", nil), metav1.CreateOptions{})
	require.NoError(t, err)
	var joined []string
	poll(t, time.Minute, "ds-join gets a podCIDR per family", func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, "ds-join", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(n.Spec.PodCIDRs) != 2 {
			return errors.New("podCIDRs " + strings.Join(n.Spec.PodCIDRs, ","))
		}
		joined = n.Spec.PodCIDRs
		return nil
	})
	for i, s := range joined {
		p := netip.MustParsePrefix(s)
		assert.True(t, []netip.Prefix{v4, v6}[i].Contains(p.Addr()), "ds-join: podCIDRs[%d] %s", i, p)
		if other, dup := perFamily[p]; dup {
			t.Errorf("kube-controller-manager gave ds-join %s, held by %s", p, other)
		}
	}
	st := c.Status(harness.ControllerManager)
	assert.True(t, st.Running, "kube-controller-manager: %s", st)
}
