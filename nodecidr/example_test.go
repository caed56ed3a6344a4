package nodecidr_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/nodecidr"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

func exampleNode(name, podCIDR string, controlPlane bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{}}}
	if controlPlane {
		n.Labels[nodecidr.LabelControlPlane] = ""
	}
	n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	return n
}

// The first field story, done right: every node, the control plane last,
// moves from 10.10.0.0/18 to 10.20.0.0/16 keeping its offset, and
// kube-controller-manager is predicted to start with the new --cluster-cidr.
func Example() {
	ctx := context.Background()
	client, _ := nodecidrtest.New(
		exampleNode("master1", "10.10.0.0/24", true),
		exampleNode("worker2", "10.10.2.0/24", false),
		exampleNode("worker1", "10.10.1.0/24", false),
	)
	plan, err := nodecidr.MakePlan(ctx, client, nodecidr.PlanOptions{
		Mode:   nodecidr.ModeRebase,
		Rebase: []nodecidr.RebasePair{{From: cidr.MustParse("10.10.0.0/18"), To: cidr.MustParse("10.20.0.0/16")}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range plan.Steps {
		fmt.Println(s.Node, s.Action, s.OldPodCIDRs, "->", s.NewPodCIDRs)
	}
	fmt.Println("kube-controller-manager would start:", plan.ControllerManager.WouldStart)

	dir, _ := os.MkdirTemp("", "nodecidr-journal")
	defer os.RemoveAll(dir)
	res, err := nodecidr.Apply(ctx, client, plan, nodecidr.ApplyOptions{JournalDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("recreated:", res.Changed, "gaps measured:", res.Gaps.Count)
	v, _ := nodecidr.Verify(ctx, client, plan, nodecidr.VerifyOptions{JournalDir: dir})
	fmt.Println("verified:", v.OK)
	// Output:
	// worker1 recreate [10.10.1.0/24] -> [10.20.1.0/24]
	// worker2 recreate [10.10.2.0/24] -> [10.20.2.0/24]
	// master1 recreate [10.10.0.0/24] -> [10.20.0.0/24]
	// kube-controller-manager would start: true
	// recreated: [master1 worker1 worker2] gaps measured: 3
	// verified: true
}

// Leaving the control-plane node out is what crash-looped
// kube-controller-manager in the first story; the plan warns before anything changes.
func ExamplePreflightAfter() {
	nodes := []corev1.Node{*exampleNode("master1", "10.10.0.0/24", true), *exampleNode("worker1", "10.10.1.0/24", false)}
	plan, _ := nodecidr.PlanNodes(nodes, nodecidr.PlanOptions{
		Mode:   nodecidr.ModeRebase,
		Names:  []string{"worker1"},
		Rebase: []nodecidr.RebasePair{{From: cidr.MustParse("10.10.0.0/18"), To: cidr.MustParse("10.20.0.0/16")}},
	})
	res := nodecidr.PreflightAfter(cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.20.0.0/16"}, nodes, plan)
	fmt.Println("would start:", res.WouldStart)
	for _, c := range res.Crashes {
		fmt.Println(c.Message)
	}
	// Output:
	// would start: false
	// failed to mark cidr[10.10.0.0/24] at idx [0] as occupied for node: master1: cidr 10.10.0.0/24 is out the range of cluster cidr 10.20.0.0/16
}

// Two nodes share a podCIDR and one has none: the fix plan keeps the subnet
// with the node that has held it longest.
func ExampleAuditNodes() {
	old := exampleNode("a", "10.244.1.0/24", false)
	old.CreationTimestamp = metav1.Unix(1000, 0)
	young := exampleNode("b", "10.244.1.0/24", false)
	young.CreationTimestamp = metav1.Unix(2000, 0)
	none := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "uid-c"}}
	nodes := []corev1.Node{*old, *young, *none}
	layout := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{cidr.MustParse("10.244.0.0/16")}, NodeMasks: []int{24}}

	r := nodecidr.AuditNodes(nodes, nil, nodecidr.AuditOptions{Layout: layout})
	for _, f := range r.Findings {
		fmt.Println(f.Kind, f.Nodes)
	}
	fmt.Println("free subnets:", r.Capacity[0].Free)
	plan, _ := nodecidr.PlanNodes(nodes, nodecidr.PlanOptions{Mode: nodecidr.ModeFix, Layout: layout})
	for _, s := range plan.Steps {
		fmt.Println(s.Node, s.Action, s.NewPodCIDRs)
	}
	// Output:
	// duplicate-podcidr [a b]
	// missing-podcidr [c]
	// free subnets: 255
	// b recreate [10.244.0.0/24]
	// c patch [10.244.2.0/24]
}
