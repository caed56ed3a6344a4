package cidr_test

import (
	"fmt"
	"net/netip"

	"github.com/cidrshift/cidrshift/cidr"
)

// The first story: a /18 pod CIDR with /24 nodes holds 64 nodes, and widening
// it to 10.233.0.0/16 would swallow the Service CIDR.
func Example() {
	pods := cidr.MustParse("10.233.64.0/18")
	c, err := cidr.ComputePodCapacity(cidr.NodeIPAM{ClusterCIDR: pods, NodeMask: 24})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("max nodes:", c.MaxNodes, "usable addresses:", c.UsableAddresses)

	if _, err := cidr.Parse("10.233.64.1/16"); err != nil {
		fmt.Println(err)
	}

	for _, o := range cidr.Analyze([]cidr.Range{
		{Name: "proposed pod CIDR", Kind: cidr.KindClusterCIDR, Prefix: cidr.MustParse("10.233.0.0/16")},
		{Name: "service CIDR", Kind: cidr.KindServiceCIDR, Prefix: cidr.MustParse("10.233.0.0/18")},
	}, cidr.AnalyzeOptions{WellKnown: true}) {
		fmt.Println(o)
	}

	moved, _ := cidr.Rebase(cidr.MustParse("10.233.65.0/24"), pods, cidr.MustParse("10.20.0.0/16"))
	fmt.Println("10.233.65.0/24 moves to", moved)
	// Output:
	// max nodes: 64 usable addresses: 16382
	// 10.233.64.1/16 has host bits set; the network is 10.233.0.0/16
	// error: cluster-cidr 10.233.0.0/16 (proposed pod CIDR) contains service-cidr 10.233.0.0/18 (service CIDR): Service ClusterIPs and other addresses would collide
	// 10.233.65.0/24 moves to 10.20.1.0/24
}

// An allocator predicts which podCIDR kube-controller-manager gives the next
// node after a restart: the lowest free subnet, with the Service range skipped.
func ExampleNewClusterAllocator() {
	a, _ := cidr.NewClusterAllocator(cidr.MustParse("10.244.0.0/16"), 24, netip.Prefix{})
	for _, held := range []string{"10.244.0.0/24", "10.244.2.0/24"} {
		a.Occupy(cidr.MustParse(held), "")
	}
	next, _ := a.AllocateNext()
	fmt.Println(next, "free:", a.Free())
	// Output: 10.244.1.0/24 free: 253
}

// The preflight names the node that would crash kube-controller-manager.
func ExampleControllerManagerPreflight() {
	res := cidr.ControllerManagerPreflight(
		cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.20.0.0/16", NodeCIDRMaskSize: 24},
		[]cidr.NodePodCIDRs{{Name: "master1", PodCIDRs: []string{"10.10.2.0/24"}}, {Name: "worker1", PodCIDRs: []string{"10.20.0.0/24"}}},
	)
	fmt.Println("would start:", res.WouldStart)
	for _, c := range res.Crashes {
		fmt.Println(c.Message)
	}
	// Output:
	// would start: false
	// failed to mark cidr[10.10.2.0/24] at idx [0] as occupied for node: master1: cidr 10.10.2.0/24 is out the range of cluster cidr 10.20.0.0/16
}
