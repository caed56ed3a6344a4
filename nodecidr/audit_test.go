package nodecidr

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/cidr"
)

func kinds(r *Report) map[FindingKind][]string {
	out := map[FindingKind][]string{}
	for _, f := range r.Findings {
		out[f.Kind] = append(out[f.Kind], f.Nodes...)
	}
	return out
}

func TestAuditFindings(t *testing.T) {
	single := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{cidr.MustParse("10.244.0.0/16")}, NodeMasks: []int{24}}
	dual := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{cidr.MustParse("10.244.0.0/16"), cidr.MustParse("fd00:10::/56")}, NodeMasks: []int{24, 64}}
	tests := []struct {
		name   string
		layout cidr.NodeIPAMLayout
		nodes  []*corev1.Node
		want   map[FindingKind][]string
	}{
		{"healthy", single, []*corev1.Node{node("a", cidrs("10.244.0.0/24")), node("b", cidrs("10.244.1.0/24"))}, map[FindingKind][]string{}},
		{"missing", single, []*corev1.Node{node("a", nil), node("b", cidrs("10.244.1.0/24"))},
			map[FindingKind][]string{FindingMissing: {"a"}}},
		{"duplicate, oldest first", single, []*corev1.Node{
			node("a", cidrs("10.244.1.0/24"), age(5)), node("b", cidrs("10.244.1.0/24"), age(1)), node("c", cidrs("10.244.1.0/24"), age(9))},
			map[FindingKind][]string{FindingDuplicate: {"b", "a", "c"}}},
		{"overlap", single, []*corev1.Node{node("wide", cidrs("10.244.0.0/23")), node("b", cidrs("10.244.1.0/24"))},
			map[FindingKind][]string{FindingOverlap: {"wide", "b"}, FindingMaskMismatch: {"wide"}}},
		{"out of range", single, []*corev1.Node{node("master1", cidrs("10.10.0.0/24"))},
			map[FindingKind][]string{FindingOutOfRange: {"master1"}}},
		{"podCIDR and podCIDRs[0] disagree", single, []*corev1.Node{node("a", cidrs("10.244.1.0/24"), podCIDRField("10.244.2.0/24"))},
			map[FindingKind][]string{FindingPodCIDRMismatch: {"a"}}},
		{"non-canonical and invalid", single, []*corev1.Node{node("a", cidrs("10.244.1.7/24")), node("b", cidrs("garbage"))},
			map[FindingKind][]string{FindingNonCanonical: {"a"}, FindingInvalid: {"b"}}},
		{"two of one family", single, []*corev1.Node{node("a", cidrs("10.244.1.0/24", "10.244.2.0/24"))},
			map[FindingKind][]string{FindingInvalid: {"a"}, FindingOutOfRange: {"a"}}},
		{"family order", dual, []*corev1.Node{node("a", cidrs("fd00:10::/64", "10.244.1.0/24"))},
			map[FindingKind][]string{FindingFamilyOrder: {"a", "a"}}},
		{"missing family", dual, []*corev1.Node{node("a", cidrs("10.244.1.0/24"))},
			map[FindingKind][]string{FindingMissingFamily: {"a"}}},
		{"no layout: only layout-free checks", cidr.NodeIPAMLayout{}, []*corev1.Node{node("a", cidrs("10.10.0.0/24")), node("b", cidrs("10.10.0.0/24"))},
			map[FindingKind][]string{FindingDuplicate: {"a", "b"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := make([]corev1.Node, len(tc.nodes))
			for i, n := range tc.nodes {
				nodes[i] = *n
			}
			r := AuditNodes(nodes, nil, AuditOptions{Layout: tc.layout})
			assert.Equal(t, tc.want, kinds(r), "%v", r.Findings)
			for _, f := range r.Findings {
				assert.NotEmpty(t, f.Message)
				assert.NotEmpty(t, f.Severity)
			}
		})
	}
}

func TestAuditCapacity(t *testing.T) {
	l := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{cidr.MustParse("10.233.64.0/22")}, NodeMasks: []int{24},
		ServiceCIDRs: []netip.Prefix{cidr.MustParse("10.233.0.0/18")}}
	nodes := []corev1.Node{*node("a", cidrs("10.233.64.0/24")), *node("b", cidrs("10.233.65.0/24")), *node("c", cidrs("10.233.65.0/24")),
		*node("d", nil), *node("e", nil), *node("f", nil)}
	r := AuditNodes(nodes, nil, AuditOptions{Layout: l})
	require.Len(t, r.Capacity, 1)
	c := r.Capacity[0]
	assert.Equal(t, "4", c.Subnets.String())
	assert.Equal(t, "2", c.Used.String())
	assert.Equal(t, "2", c.Free.String())
	assert.Equal(t, 3, c.NodesWithout)
	assert.Contains(t, kinds(r), FindingCapacity)
	assert.Equal(t, []string{"c"}, r.NodesWith(FindingDuplicate))
	assert.Equal(t, r.Count(cidr.SeverityError), len(r.Findings)-r.Count(cidr.SeverityWarning)-r.Count(cidr.SeverityInfo))
}

func TestAuditPaginatesAndChecksPods(t *testing.T) {
	var nodes []*corev1.Node
	for i := range 7 {
		nodes = append(nodes, node(fmt.Sprintf("n%d", i), cidrs(fmt.Sprintf("10.240.%d.0/24", i))))
	}
	c, s := newCluster(nodes...)
	pod := func(name, nodeName, ip string, host bool) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec:   corev1.PodSpec{NodeName: nodeName, HostNetwork: host},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
	}
	s.AddPod(pod("ok", "n1", "10.240.1.5", false))
	s.AddPod(pod("stale", "n3", "10.241.12.6", false))
	s.AddPod(pod("stale2", "n3", "10.240.31.10", false))
	s.AddPod(pod("host", "n4", "192.0.2.4", true))
	s.AddPod(pod("pending", "", "", false))
	lists := map[string]int{}
	c.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		lists[a.GetResource().Resource]++
		return false, nil, nil
	})
	r, err := Audit(ctxT(t), c, AuditOptions{ListOptions: ListOptions{PageSize: 2}, Layout: layout(t, "10.240.0.0/12", 24), Pods: true})
	require.NoError(t, err)
	assert.Equal(t, 7, r.Nodes)
	assert.Equal(t, 4, lists["nodes"], "7 nodes in pages of 2")
	assert.Equal(t, 2, lists["pods"])
	assert.Equal(t, 3, r.Pods)
	require.Equal(t, map[FindingKind][]string{FindingPodIPOutside: {"n3"}}, kinds(r))
	assert.Len(t, r.Findings[0].Pods, 2)
	assert.Contains(t, r.Findings[0].Message, "2 pods on node n3")
}

func TestPreflightWrapsNodes(t *testing.T) {
	nodes := []corev1.Node{*node("master1", cidrs("10.10.2.0/24"), cp), *node("w1", nil, podCIDRField("10.20.0.0/24")), *node("w2", nil)}
	res := Preflight(cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.20.0.0/16", NodeCIDRMaskSize: 24}, nodes)
	assert.False(t, res.WouldStart)
	require.Len(t, res.Crashes, 1)
	assert.Equal(t, "failed to mark cidr[10.10.2.0/24] at idx [0] as occupied for node: master1: cidr 10.10.2.0/24 is out the range of cluster cidr 10.20.0.0/16", res.Crashes[0].Message)
	assert.Equal(t, []string{"10.20.0.0/24"}, NodePodCIDRs(nodes)[1].PodCIDRs, "falls back to spec.podCIDR")

	c, _ := newCluster(&nodes[0], &nodes[1])
	live, err := PreflightCluster(ctxT(t), c, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.10.0.0/16,10.20.0.0/16"}, ListOptions{})
	require.NoError(t, err)
	assert.False(t, live.WouldStart)
	assert.NotEmpty(t, live.FlagErrors)
}

// TestAuditReportsItsLayoutAndOrder: the report carries the layout it was
// audited against (none without one), and its findings come errors first,
// then by kind, then by node, whatever order they were found in.
func TestAuditReportsItsLayoutAndOrder(t *testing.T) {
	nodes := []corev1.Node{*node("a", cidrs("10.244.1.0/24")), *node("b", cidrs("10.244.1.0/24"))}
	assert.Nil(t, AuditNodes(nodes, nil, AuditOptions{}).Layout)
	l := layout(t, "10.244.0.0/16", 24)
	r := AuditNodes(nodes, nil, AuditOptions{Layout: l})
	require.NotNil(t, r.Layout)
	assert.Equal(t, l, *r.Layout)

	fs := []Finding{
		{Kind: "b-kind", Severity: cidr.SeverityWarning, Nodes: []string{"a"}},
		{Kind: "b-kind", Severity: cidr.SeverityError, Nodes: []string{"a"}},
		{Kind: "a-kind", Severity: cidr.SeverityError, Nodes: []string{"z"}},
		{Kind: "a-kind", Severity: cidr.SeverityError, Nodes: []string{"m"}},
		{Kind: "a-kind", Severity: cidr.SeverityInfo, Nodes: []string{"a"}},
	}
	sortFindings(fs)
	var got []string
	for _, f := range fs {
		got = append(got, fmt.Sprintf("%s %s %s", f.Severity, f.Kind, f.Nodes[0]))
	}
	assert.Equal(t, []string{"error a-kind m", "error a-kind z", "error b-kind a", "warning b-kind a", "info a-kind a"}, got)
}

// TestAuditCapacityUsesTheLayoutsNodeMask: the capacity of a cluster CIDR
// is counted in subnets of the layout's node mask, not the family's
// default; it is an error when nodes without a podCIDR outnumber the free
// subnets, and a warning when none is free.
func TestAuditCapacityUsesTheLayoutsNodeMask(t *testing.T) {
	nodes := []corev1.Node{*node("a", cidrs("10.233.64.0/25")), *node("b", cidrs("10.233.64.128/25")), *node("c", nil)}
	r := AuditNodes(nodes, nil, AuditOptions{Layout: layout(t, "10.233.64.0/24", 25)})
	require.Len(t, r.Capacity, 1)
	c := r.Capacity[0]
	assert.Equal(t, 25, c.NodeMask)
	assert.Equal(t, "2", c.Subnets.String())
	assert.Equal(t, "0", c.Free.String())
	var msgs []string
	for _, f := range r.Findings {
		if f.Kind == FindingCapacity {
			msgs = append(msgs, string(f.Severity)+": "+f.Message)
		}
	}
	assert.Equal(t, []string{"error: 1 nodes have no IPv4 podCIDR but only 0 /25 subnets are free in 10.233.64.0/24"}, msgs)

	r = AuditNodes(nodes[:2], nil, AuditOptions{Layout: layout(t, "10.233.64.0/24", 25)})
	msgs = nil
	for _, f := range r.Findings {
		if f.Kind == FindingCapacity {
			msgs = append(msgs, string(f.Severity)+": "+f.Message)
		}
	}
	assert.Equal(t, []string{"warning: no /25 subnet is free in 10.233.64.0/24: the next node to join gets no IPv4 podCIDR"}, msgs)

	// As many free subnets as nodes without one: enough, nothing to say.
	r = AuditNodes([]corev1.Node{nodes[0], nodes[2]}, nil, AuditOptions{Layout: layout(t, "10.233.64.0/24", 25)})
	assert.Equal(t, "1", r.Capacity[0].Free.String())
	assert.Equal(t, 1, r.Capacity[0].NodesWithout)
	assert.NotContains(t, kinds(r), FindingCapacity)
}

// TestAuditCountsEveryPodOutsideButNamesTen: a node with many pods outside
// its podCIDR gets one finding that counts them all and names ten.
func TestAuditCountsEveryPodOutsideButNamesTen(t *testing.T) {
	nodes := []corev1.Node{*node("n1", cidrs("10.240.1.0/24"))}
	var pods []PodSummary
	for i := range 12 {
		pods = append(pods, PodSummary{Namespace: "shop", Name: fmt.Sprintf("p%02d", i), NodeName: "n1", Phase: corev1.PodRunning,
			IPs: []string{fmt.Sprintf("10.241.1.%d", i+2)}})
	}
	r := AuditNodes(nodes, pods, AuditOptions{Pods: true})
	require.Len(t, r.Findings, 1)
	f := r.Findings[0]
	assert.Equal(t, FindingPodIPOutside, f.Kind)
	assert.Len(t, f.Pods, 10)
	assert.Equal(t, "shop/p00 10.241.1.2", f.Pods[0])
	assert.Equal(t, "shop/p09 10.241.1.11", f.Pods[9])
	assert.Equal(t, "12 pods on node n1 have IPs outside its podCIDR 10.240.1.0/24 (e.g. shop/p00 10.241.1.2); "+
		"they got their addresses under an older podCIDR and must be restarted after the node's CNI is reset", f.Message)
}
