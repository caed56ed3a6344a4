package cidr

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCheckLayout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flags    ControllerManagerFlags
		refused  bool
		errors   int
		problems int
	}{
		{"healthy", ControllerManagerFlags{ClusterCIDR: "10.20.0.0/16", NodeCIDRMaskSize: 24, ServiceClusterIPRange: "10.96.0.0/12"}, false, 0, 0},
		{"cluster swallows services", ControllerManagerFlags{ClusterCIDR: "10.0.0.0/8", ServiceClusterIPRange: "10.96.0.0/12"}, false, 0, 1},
		{"mask shorter than cluster", ControllerManagerFlags{ClusterCIDR: "10.0.0.0/16", NodeCIDRMaskSize: 8}, false, 1, 1},
		{"IPv6 mask too long", ControllerManagerFlags{ClusterCIDR: "fd00::/48", NodeCIDRMaskSizeIPv6: 120}, false, 1, 1},
		{"two IPv4 cluster CIDRs", ControllerManagerFlags{ClusterCIDR: "10.0.0.0/16,10.1.0.0/16"}, true, 1, 1},
		{"mask out of range", ControllerManagerFlags{ClusterCIDR: "10.0.0.0/16", NodeCIDRMaskSize: 40}, true, 1, 1},
		{"dual stack with a single mask", ControllerManagerFlags{ClusterCIDR: "10.0.0.0/16,fd00::/48", NodeCIDRMaskSize: 24}, true, 1, 1},
		{"two IPv4 Service CIDRs", ControllerManagerFlags{ClusterCIDR: "10.0.0.0/16", ServiceClusterIPRange: "10.96.0.0/16,10.97.0.0/16"}, true, 1, 1},
		{"empty", ControllerManagerFlags{}, true, 1, 1},
		{"unparsable", ControllerManagerFlags{ClusterCIDR: "banana"}, true, 2, 2},
		{"loopback is a warning", ControllerManagerFlags{ClusterCIDR: "127.0.0.0/16"}, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := CheckLayout(tc.flags)
			assert.Equal(t, tc.refused, c.Refused)
			assert.Len(t, c.Errors, tc.errors, "%v", c.Errors)
			assert.Equal(t, tc.problems, c.Problems())
		})
	}
	c := CheckLayout(ControllerManagerFlags{ClusterCIDR: "10.20.0.0/16"}, Range{Name: "--node-network", Kind: KindNodeNetwork, Prefix: MustParse("10.20.128.0/20")})
	assert.Equal(t, 1, c.Problems(), "others are checked too")
	assert.NotEmpty(t, CheckLayout(ControllerManagerFlags{ClusterCIDR: "127.0.0.0/16"}).Overlaps)
}

// Layouts with more Service CIDRs than cluster CIDRs, or with more further
// ranges than both, are checked in full.
func TestCheckLayoutWithManyServiceOrOtherRanges(t *testing.T) {
	c := CheckLayout(ControllerManagerFlags{ClusterCIDR: "10.20.0.0/16", ServiceClusterIPRange: "10.20.0.0/24,fd00::/108"})
	assert.False(t, c.Refused)
	assert.Equal(t, 1, c.Problems(), "the Service CIDR inside the cluster CIDR")

	node := func(p string) Range {
		return Range{Name: "--node-network", Kind: KindNodeNetwork, Prefix: MustParse(p)}
	}
	c = CheckLayout(ControllerManagerFlags{ClusterCIDR: "10.20.0.0/16"}, node("192.168.0.0/24"), node("192.168.1.0/24"), node("10.20.5.0/24"))
	assert.False(t, c.Refused)
	assert.Equal(t, 1, c.Problems(), "the third node network inside the cluster CIDR")
}
