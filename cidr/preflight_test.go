package cidr

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPreflightFirstStory(t *testing.T) {
	// The workers were moved to 10.20.0.0/16 but master1 kept 10.10.2.0/24.
	nodes := []NodePodCIDRs{
		{Name: "master1", PodCIDRs: []string{"10.10.2.0/24"}},
		{Name: "worker1", PodCIDRs: []string{"10.20.0.0/24"}},
		{Name: "worker2", PodCIDRs: []string{"10.20.1.0/24"}},
		{Name: "joining"},
	}
	res := ControllerManagerPreflight(ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.20.0.0/16", NodeCIDRMaskSize: 24}, nodes)
	assert.False(t, res.WouldStart)
	require.Len(t, res.Crashes, 1)
	assert.Equal(t, "master1", res.Crashes[0].Node)
	assert.Equal(t, "failed to mark cidr[10.10.2.0/24] at idx [0] as occupied for node: master1: cidr 10.10.2.0/24 is out the range of cluster cidr 10.20.0.0/16", res.Crashes[0].Message)

	nodes[0].PodCIDRs = []string{"10.20.2.0/24"}
	res = ControllerManagerPreflight(ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.20.0.0/16", NodeCIDRMaskSize: 24}, nodes)
	assert.True(t, res.WouldStart)
	assert.Empty(t, res.Crashes)
	require.NotNil(t, res.Layout)
	assert.Equal(t, []int{24}, res.Layout.NodeMasks)
}

func TestPreflightNodeErrors(t *testing.T) {
	flags := ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/12"}
	res := ControllerManagerPreflight(flags, []NodePodCIDRs{
		{Name: "a", PodCIDRs: []string{"10.240.1.0/24"}},
		{Name: "b", PodCIDRs: []string{"garbage"}},
		{Name: "c", PodCIDRs: []string{"10.241.0.0/24", "fd00::/64"}},
		{Name: "d", PodCIDRs: []string{"fd00::/64"}},
	})
	assert.False(t, res.WouldStart)
	require.Len(t, res.Warnings, 1, "the /12 has host bits set")
	assert.Equal(t, "10.240.0.0/12", res.Warnings[0].Canonical.String())
	require.Len(t, res.Crashes, 3)
	assert.Equal(t, "failed to parse node b, CIDR garbage", res.Crashes[0].Message)
	assert.Equal(t, "node:c has an allocated cidr: fd00::/64 at index:1 that does not exist in cluster cidrs configuration", res.Crashes[1].Message)
	assert.Equal(t, "failed to mark cidr[fd00::/64] at idx [0] as occupied for node: d: cidr fd00::/64 is out the range of cluster cidr 10.240.0.0/12", res.Crashes[2].Message)
}

func TestPreflightFlags(t *testing.T) {
	tests := []struct {
		name  string
		flags ControllerManagerFlags
		msg   string
	}{
		{"no cluster cidr", ControllerManagerFlags{AllocateNodeCIDRs: true}, "Controller: Must specify --cluster-cidr if --allocate-node-cidrs is set"},
		{"two v4", ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/16,10.1.0.0/16"}, "len of ClusterCIDRs==2 and they are not configured as dual stack"},
		{"three", ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/16,fd00::/48,10.1.0.0/16"}, "len of ClusterCIDRs==3"},
		{"garbage", ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "nope"}, "invalid CIDR address: nope"},
		{"mask with dual", ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/16,fd00::/48", NodeCIDRMaskSize: 24}, "usage of --node-cidr-mask-size is not allowed with dual-stack clusters"},
		{"mask and v4", ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/16", NodeCIDRMaskSize: 24, NodeCIDRMaskSizeIPv4: 24}, "is not allowed if --node-cidr-mask-size is set"},
		{"v4 on v6", ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "fd00::/48", NodeCIDRMaskSizeIPv4: 24}, "usage of --node-cidr-mask-size-ipv4 is not allowed for a single-stack IPv6 cluster"},
		{"v6 on v4", ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/16", NodeCIDRMaskSizeIPv6: 64}, "usage of --node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster"},
		{"mask too small", ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/16", NodeCIDRMaskSize: 8}, "mask size of cluster CIDR must be less than or equal to --node-cidr-mask-size"},
		{"mask out of range", ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/16", NodeCIDRMaskSize: 40}, "an IPv4 node mask must be between 0 and 32"},
		{"v6 too big", ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "fd00::/32"}, "New CIDR set failed; the node CIDR size is too big"},
		{"service not dual", ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/16", ServiceClusterIPRange: "10.96.0.0/16,10.97.0.0/16"}, "serviceCIDR and secondaryServiceCIDR are not dualstack"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := ControllerManagerPreflight(tt.flags, nil)
			assert.False(t, res.WouldStart)
			require.NotEmpty(t, res.FlagErrors)
			assert.Contains(t, res.FlagErrors[0], tt.msg)
		})
	}
}

func TestPreflightDualStackAndDisabled(t *testing.T) {
	res := ControllerManagerPreflight(ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/16,fd00::/56", NodeCIDRMaskSizeIPv4: 25, NodeCIDRMaskSizeIPv6: 72, ServiceClusterIPRange: "10.96.0.0/16,fd00:96::/108"},
		[]NodePodCIDRs{{Name: "a", PodCIDRs: []string{"10.0.0.0/25", "fd00::/72"}}})
	assert.True(t, res.WouldStart)
	assert.Equal(t, []int{25, 72}, res.Layout.NodeMasks)
	assert.Len(t, res.Layout.ServiceCIDRs, 2)

	res = ControllerManagerPreflight(ControllerManagerFlags{ClusterCIDR: "garbage"}, []NodePodCIDRs{{Name: "a", PodCIDRs: []string{"x"}}})
	assert.True(t, res.WouldStart)
	assert.True(t, res.IPAMDisabled)
}

func TestControllerManagerFlagsArgs(t *testing.T) {
	f := ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.20.0.0/16", NodeCIDRMaskSize: 24, ServiceClusterIPRange: "10.96.0.0/12"}
	assert.Equal(t, []string{"--allocate-node-cidrs=true", "--cluster-cidr=10.20.0.0/16", "--node-cidr-mask-size=24", "--service-cluster-ip-range=10.96.0.0/12"}, f.Args())
}

// A node mask of the full address length (one address per node) is in range.
func TestPreflightAcceptsAFullLengthNodeMask(t *testing.T) {
	res := ControllerManagerPreflight(ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/24", NodeCIDRMaskSize: 32}, nil)
	assert.Empty(t, res.FlagErrors)
	assert.True(t, res.WouldStart)
}
