package nodecidr

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
)

// NodePodCIDRs converts Nodes to what cidr.ControllerManagerPreflight reads:
// each node's spec.podCIDRs, falling back to spec.podCIDR when podCIDRs is
// empty, exactly as written (the preflight parses them as the component does).
func NodePodCIDRs(nodes []corev1.Node) []cidr.NodePodCIDRs {
	out := make([]cidr.NodePodCIDRs, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		out = append(out, cidr.NodePodCIDRs{Name: n.Name, PodCIDRs: cidrs})
	}
	return out
}

// Preflight predicts whether kube-controller-manager would start with the
// proposed flags and these nodes, listing every node that would make it exit
// with the text it would log. The rule is cidr.ControllerManagerPreflight's.
func Preflight(flags cidr.ControllerManagerFlags, nodes []corev1.Node) cidr.PreflightResult {
	return cidr.ControllerManagerPreflight(flags, NodePodCIDRs(nodes))
}

// PreflightCluster is Preflight against the cluster's live Nodes.
func PreflightCluster(ctx context.Context, client kubernetes.Interface, flags cidr.ControllerManagerFlags, opts ListOptions) (cidr.PreflightResult, error) {
	nodes, err := ListNodes(ctx, client, opts)
	if err != nil {
		return cidr.PreflightResult{}, fmt.Errorf("kube-controller-manager preflight: %w", err)
	}
	return Preflight(flags, nodes), nil
}

// PreflightAfter is Preflight against the nodes as they will be once plan is
// applied: every planned node carries its new podCIDRs. It answers the
// question the first field story got wrong: would kube-controller-manager
// start with the new --cluster-cidr once these nodes are moved, or does a node
// left behind (a control-plane node, typically) make it crash-loop?
func PreflightAfter(flags cidr.ControllerManagerFlags, nodes []corev1.Node, plan *Plan) cidr.PreflightResult {
	in := NodePodCIDRs(nodes)
	if plan != nil {
		steps := plan.stepIndex()
		for i := range in {
			if s := steps[in[i].Name]; s != nil {
				in[i].PodCIDRs = s.NewPodCIDRs
			}
		}
	}
	return cidr.ControllerManagerPreflight(flags, in)
}

// afterPlan returns slim copies of nodes (name, creationTimestamp, podCIDRs)
// as they will be once plan is applied.
func afterPlan(nodes []corev1.Node, plan *Plan) []*corev1.Node {
	steps := plan.stepIndex()
	out := make([]*corev1.Node, len(nodes))
	for i := range nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodes[i].Name, CreationTimestamp: nodes[i].CreationTimestamp},
			Spec: corev1.NodeSpec{PodCIDR: nodes[i].Spec.PodCIDR, PodCIDRs: nodes[i].Spec.PodCIDRs}}
		if s := steps[n.Name]; s != nil {
			n.Spec.PodCIDRs, n.Spec.PodCIDR = s.NewPodCIDRs, s.NewPodCIDRs[0]
		}
		out[i] = n
	}
	return out
}
