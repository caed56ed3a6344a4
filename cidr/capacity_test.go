package cidr

import (
	"errors"
	"math/big"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func big10(s string) *big.Int {
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		panic(s)
	}
	return v
}

func TestPodCapacityStories(t *testing.T) {
	tests := []struct {
		name                string
		cluster             string
		mask                int
		nodes, usable, pods string
	}{
		// First story: a /18 with /24 nodes holds 64 nodes; the /18 has 16382 usable addresses.
		{"first story", "10.233.64.0/18", 24, "64", "16382", "110"},
		// Second story: 10.244.0.0/16 with /24 is 256 nodes (not 258).
		{"second story /16", "10.244.0.0/16", 24, "256", "65534", "110"},
		{"second story /12 /16", "10.240.0.0/12", 16, "16", "1048574", "110"},
		{"second story /12 /24", "10.240.0.0/12", 24, "4096", "1048574", "110"},
		{"ipv6 default mask", "fd00:10:244::/56", 0, "256", "4722366482869645213696", "110"},
		{"tiny node subnet", "10.0.0.0/24", 28, "16", "254", "13"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ComputePodCapacity(NodeIPAM{ClusterCIDR: MustParse(tt.cluster), NodeMask: tt.mask})
			require.NoError(t, err)
			assert.Equal(t, tt.nodes, c.MaxNodes.String())
			assert.Equal(t, tt.usable, c.UsableAddresses.String())
			assert.Equal(t, tt.pods, c.PodsPerNode.String())
		})
	}
}

func TestPodCapacityCounts(t *testing.T) {
	c, err := ComputePodCapacity(NodeIPAM{ClusterCIDR: MustParse("10.244.0.0/16"), NodeMask: 24, MaxPods: 250})
	require.NoError(t, err)
	assert.Equal(t, "256", c.AddressesPerNode.String())
	assert.Equal(t, "253", c.PodIPsPerNode.String(), "network, gateway and broadcast are not pod IPs")
	assert.Equal(t, "250", c.PodsPerNode.String())
	assert.Equal(t, "64000", c.MaxPodsTotal.String())

	c, err = ComputePodCapacity(NodeIPAM{ClusterCIDR: MustParse("fd00::/112"), NodeMask: 120, MaxPods: 500})
	require.NoError(t, err)
	assert.Equal(t, "254", c.PodIPsPerNode.String(), "IPv6: network and gateway only")
	assert.Equal(t, "254", c.PodsPerNode.String(), "capped by addresses, not maxPods")

	c, err = ComputePodCapacity(NodeIPAM{ClusterCIDR: MustParse("10.0.0.0/30"), NodeMask: 32})
	require.NoError(t, err)
	assert.Equal(t, "0", c.PodIPsPerNode.String(), "never negative")
	assert.Equal(t, "2", c.UsableAddresses.String())

	c, err = ComputePodCapacity(NodeIPAM{ClusterCIDR: MustParse("10.0.0.0/31"), NodeMask: 32})
	require.NoError(t, err)
	assert.Equal(t, "2", c.UsableAddresses.String(), "/31 point-to-point counts 2")
}

func TestPodCapacityHugeIPv6IsExact(t *testing.T) {
	// A /32 with /64 nodes is 2^32 node subnets; kube-controller-manager
	// refuses it (more than 16 bits), but the arithmetic is still exact.
	c, err := ComputePodCapacity(NodeIPAM{ClusterCIDR: MustParse("2001:db8::/32"), NodeMask: 64})
	require.Error(t, err)
	assert.Equal(t, "4294967296", c.MaxNodes.String())
	assert.Equal(t, "18446744073709551616", c.AddressesPerNode.String())
	assert.Equal(t, "79228162514264337593543950336", c.UsableAddresses.String())
	var re *RuleError
	require.True(t, errors.As(err, &re))
	assert.Equal(t, KubeControllerManager, re.Component)
	assert.Contains(t, err.Error(), "kube-controller-manager would refuse --node-cidr-mask-size-ipv6=64: New CIDR set failed; the node CIDR size is too big")

	c, err = ComputePodCapacity(NodeIPAM{ClusterCIDR: MustParse("::/0"), NodeMask: 128})
	require.Error(t, err)
	assert.Equal(t, big10("340282366920938463463374607431768211456"), c.MaxNodes)
}

func TestPodCapacityRules(t *testing.T) {
	_, err := ComputePodCapacity(NodeIPAM{ClusterCIDR: MustParse("10.0.0.0/16"), NodeMask: 12})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrRule)
	assert.Contains(t, err.Error(), "kube-controller-manager would refuse --cluster-cidr=10.0.0.0/16: Controller: Invalid --cluster-cidr, mask size of cluster CIDR must be less than or equal to --node-cidr-mask-size configured for CIDR family (cluster /16, node /12)")

	_, err = ComputePodCapacity(NodeIPAM{ClusterCIDR: MustParse("10.0.0.0/16"), NodeMask: 33})
	assert.ErrorIs(t, err, ErrSyntax)
	assert.EqualError(t, err, `node mask: "33": an IPv4 node mask must be between 0 and 32`)

	_, err = ComputePodCapacity(NodeIPAM{ClusterCIDR: MustParse("10.0.0.0/16"), MaxPods: -1})
	assert.EqualError(t, err, `max pods: "-1": maxPods must be positive`)

	_, err = ComputePodCapacity(NodeIPAM{})
	assert.ErrorIs(t, err, ErrEmpty)
	assert.Contains(t, err.Error(), "--cluster-cidr: empty CIDR")

	_, err = ComputePodCapacity(NodeIPAM{ClusterCIDR: netip.MustParsePrefix("10.244.0.0/12"), NodeMask: 24})
	assert.ErrorIs(t, err, ErrHostBitsSet)
	assert.Contains(t, err.Error(), "10.244.0.0/12 has host bits set; the network is 10.240.0.0/12")
}

func TestServiceCapacity(t *testing.T) {
	sc, err := ComputeServiceCapacity(MustParse("10.96.0.0/12"), ServiceRangeOptions{})
	require.NoError(t, err)
	assert.Equal(t, "1048574", sc.UsableIPs.String())
	assert.Equal(t, "10.96.0.1", sc.KubernetesIP.String())
	assert.Equal(t, "10.96.0.10", sc.DNSIP.String())

	sc, err = ComputeServiceCapacity(MustParse("172.24.0.0/15"), ServiceRangeOptions{})
	require.NoError(t, err)
	assert.Equal(t, "172.24.0.10", sc.DNSIP.String())
	assert.Equal(t, "131070", sc.UsableIPs.String())

	sc, err = ComputeServiceCapacity(MustParse("fd00:96::/108"), ServiceRangeOptions{})
	require.NoError(t, err)
	assert.Equal(t, "1048575", sc.UsableIPs.String(), "IPv6 2^n-1")
	assert.Equal(t, "fd00:96::a", sc.DNSIP.String())

	// The third story's kOps range /13 is fine; a /11 is too large before 1.34.
	_, err = ComputeServiceCapacity(MustParse("100.64.0.0/11"), ServiceRangeOptions{})
	assert.ErrorIs(t, err, ErrRule)
	assert.Contains(t, err.Error(), "kube-apiserver would refuse --service-cluster-ip-range=100.64.0.0/11: specified --service-cluster-ip-range is too large; for 32-bit addresses, the mask must be >= 12")
	_, err = ComputeServiceCapacity(MustParse("100.64.0.0/11"), ServiceRangeOptions{KubernetesMinor: 34})
	assert.NoError(t, err)
	_, err = ComputeServiceCapacity(MustParse("100.64.0.0/11"), ServiceRangeOptions{KubernetesMinor: 30, Object: true})
	assert.NoError(t, err, "a ServiceCIDR object is not bound by the flag's 20-bit limit")

	_, err = ComputeServiceCapacity(MustParse("fd00::/48"), ServiceRangeOptions{KubernetesMinor: 36})
	assert.ErrorIs(t, err, ErrRule)
	assert.Contains(t, err.Error(), "shorter than /64 is accepted but no ClusterIP is allocated")

	sc, err = ComputeServiceCapacity(MustParse("10.0.0.0/29"), ServiceRangeOptions{})
	require.NoError(t, err)
	assert.False(t, sc.DNSIP.IsValid(), "a /29 has no tenth usable address")

	_, err = ComputeServiceCapacity(MustParse("10.0.0.0/32"), ServiceRangeOptions{})
	assert.ErrorIs(t, err, ErrRule)
	assert.Contains(t, err.Error(), "no usable address for the kubernetes Service")

	_, err = ComputeServiceCapacity(netip.Prefix{}, ServiceRangeOptions{})
	assert.ErrorIs(t, err, ErrEmpty)
}

func TestNthAddr(t *testing.T) {
	a, err := NthAddr(MustParse("10.0.0.0/24"), 255)
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.255", a.String())
	_, err = NthAddr(MustParse("10.0.0.0/24"), 256)
	assert.ErrorIs(t, err, ErrOutOfRange)
	a, err = NthAddr(MustParse("::/0"), 1<<63)
	require.NoError(t, err)
	assert.Equal(t, "::8000:0:0:0", a.String())
}

// A cluster CIDR exactly as wide as the node mask is one node's subnet:
// kube-controller-manager accepts it, and it holds one node.
func TestPodCapacityClusterOfOneNodeSubnet(t *testing.T) {
	c, err := ComputePodCapacity(NodeIPAM{ClusterCIDR: MustParse("10.0.0.0/24"), NodeMask: 24})
	require.NoError(t, err)
	assert.Equal(t, "1", c.MaxNodes.String())
	assert.Equal(t, "110", c.MaxPodsTotal.String())
}

// The IPv6 rule names the longest node mask kube-controller-manager accepts
// for the cluster CIDR.
func TestPodCapacityIPv6RuleNamesTheLongestNodeMask(t *testing.T) {
	_, err := ComputePodCapacity(NodeIPAM{ClusterCIDR: MustParse("fd00::/32"), NodeMask: 64})
	assert.ErrorIs(t, err, ErrRule)
	assert.ErrorContains(t, err, "at most 16 bits longer than the cluster CIDR fd00::/32 (at most /48)")
}

// The edges of kube-apiserver's Service range rules.
func TestServiceCapacityRuleEdges(t *testing.T) {
	// A /31 has two addresses and none usable: no kubernetes Service IP.
	sc, err := ComputeServiceCapacity(MustParse("10.0.0.0/31"), ServiceRangeOptions{})
	assert.ErrorIs(t, err, ErrRule)
	assert.ErrorContains(t, err, "no usable address for the kubernetes Service")
	assert.False(t, sc.KubernetesIP.IsValid())

	// 1.33 still refuses a flag range of more than 20 host bits.
	_, err = ComputeServiceCapacity(MustParse("100.64.0.0/11"), ServiceRangeOptions{KubernetesMinor: 33})
	assert.ErrorIs(t, err, ErrRule)
	assert.ErrorContains(t, err, "is too large")

	// An IPv6 /64 object is allocated from.
	_, err = ComputeServiceCapacity(MustParse("fd00::/64"), ServiceRangeOptions{Object: true})
	assert.NoError(t, err)
}
