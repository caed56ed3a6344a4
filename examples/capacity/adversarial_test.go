package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/cli/clitest"
)

// TestAdversarial: hostile input gives exit 2 and one line naming the flag
// and the value; a layout the components would refuse to run is a problem
// (exit 1), by the same rules as the doctor's (cidr.CheckLayout).
func TestAdversarial(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  []string
	}{
		{"stray argument", []string{"--cluster-cidr", "10.0.0.0/16", "now"}, 2, []string{`unexpected argument "now"`}},
		{"cluster CIDR garbage", []string{"--cluster-cidr", "banana"}, 2, []string{"--cluster-cidr", "banana"}},
		{"cluster CIDR octet out of range", []string{"--cluster-cidr", "10.300.0.0/16"}, 2, []string{"--cluster-cidr", "10.300.0.0/16"}},
		{"two IPv4 cluster CIDRs", []string{"--cluster-cidr", "10.0.0.0/16,10.1.0.0/16"}, 2, []string{"--cluster-cidr", "10.0.0.0/16,10.1.0.0/16"}},
		{"three cluster CIDRs", []string{"--cluster-cidr", "10.0.0.0/16,fd00::/48,10.1.0.0/16"}, 2, []string{"--cluster-cidr"}},
		{"IPv4 mask out of range", []string{"--cluster-cidr", "10.0.0.0/16", "--node-mask", "33"}, 2, []string{"33", "between 0 and 32"}},
		{"negative mask", []string{"--cluster-cidr", "10.0.0.0/16", "--node-mask", "-1"}, 2, []string{"--node-mask=-1"}},
		{"IPv6 mask without IPv6", []string{"--cluster-cidr", "10.0.0.0/16", "--node-mask-ipv6", "64"}, 2, []string{"--node-mask-ipv6=64", "10.0.0.0/16"}},
		{"both masks for single-stack IPv6", []string{"--cluster-cidr", "fd00::/48", "--node-mask", "64", "--node-mask-ipv6", "64"}, 2, []string{"--node-mask=64", "--node-mask-ipv6=64"}},
		{"service CIDR with host bits", []string{"--cluster-cidr", "10.0.0.0/16", "--service-cidr", "10.96.0.1/12"}, 2, []string{"--service-cidr", "10.96.0.1/12"}},
		{"service CIDR mask 33", []string{"--cluster-cidr", "10.0.0.0/16", "--service-cidr", "10.96.0.0/33"}, 2, []string{"--service-cidr", "10.96.0.0/33"}},
		{"node network garbage", []string{"--cluster-cidr", "10.0.0.0/16", "--node-network", "lan"}, 2, []string{"--node-network", "lan"}},
		{"negative max-pods", []string{"--cluster-cidr", "10.0.0.0/16", "--max-pods", "-5"}, 2, []string{"--max-pods=-5"}},
		{"negative kubernetes minor", []string{"--cluster-cidr", "10.0.0.0/16", "--kubernetes-minor", "-1"}, 2, []string{"--kubernetes-minor=-1"}},
		{"output format", []string{"--cluster-cidr", "10.0.0.0/16", "-o", "xml"}, 2, []string{"-o", "xml"}},
		{"nodes not a number", []string{"--cluster-cidr", "10.0.0.0/16", "--nodes", "many"}, 2, []string{"-nodes", "many"}},
		// Conflicts: the doctor's rules, exit 1.
		{"node mask shorter than the cluster CIDR", []string{"--cluster-cidr", "10.0.0.0/16", "--node-mask", "8"}, 1, nil},
		{"cluster CIDR swallows the Service CIDR", []string{"--cluster-cidr", "10.0.0.0/8", "--service-cidr", "10.96.0.0/12"}, 1, nil},
		{"IPv6 node mask too long", []string{"--cluster-cidr", "fd00::/48", "--node-mask-ipv6", "120"}, 1, nil},
		{"cluster CIDR on loopback", []string{"--cluster-cidr", "127.0.0.0/16"}, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCapacity(tc.args...)
			assert.Equal(t, tc.code, code, "%s\n%s", out, errOut)
			assert.NotRegexp(t, clitest.NextStep, out+errOut)
			if tc.code != 2 {
				assert.Empty(t, errOut)
				return
			}
			assert.Empty(t, out)
			lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
			require.Len(t, lines, 1, errOut)
			for _, m := range tc.msg {
				assert.Contains(t, lines[0], m)
			}
		})
	}
}

// TestConflictsAreTheDoctors: every problem capacity reports for a layout's
// rules and overlaps is one cidr.CheckLayout (the doctor's check) finds, and
// the other way round.
func TestConflictsAreTheDoctors(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		flags cidr.ControllerManagerFlags
	}{
		{[]string{"--cluster-cidr", "10.0.0.0/8", "--service-cidr", "10.96.0.0/12", "--node-mask", "24"},
			cidr.ControllerManagerFlags{ClusterCIDR: "10.0.0.0/8", ServiceClusterIPRange: "10.96.0.0/12", NodeCIDRMaskSize: 24}},
		{[]string{"--cluster-cidr", "10.0.0.0/16", "--node-mask", "8"}, cidr.ControllerManagerFlags{ClusterCIDR: "10.0.0.0/16", NodeCIDRMaskSize: 8}},
		{[]string{"--cluster-cidr", "100.64.0.0/16"}, cidr.ControllerManagerFlags{ClusterCIDR: "100.64.0.0/16"}},
		{[]string{"--cluster-cidr", "10.0.0.0/16,fd00::/48", "--node-mask", "24", "--node-mask-ipv6", "120", "--service-cidr", "10.0.0.0/24"},
			cidr.ControllerManagerFlags{ClusterCIDR: "10.0.0.0/16,fd00::/48", NodeCIDRMaskSizeIPv4: 24, NodeCIDRMaskSizeIPv6: 120, ServiceClusterIPRange: "10.0.0.0/24"}},
		{[]string{"--cluster-cidr", "10.20.0.0/16", "--service-cidr", "10.96.0.0/16"}, cidr.ControllerManagerFlags{ClusterCIDR: "10.20.0.0/16", ServiceClusterIPRange: "10.96.0.0/16"}},
	} {
		o := options{output: "text"}
		for i := 0; i < len(tc.args); i += 2 {
			switch tc.args[i] {
			case "--cluster-cidr":
				o.clusterCIDR = tc.args[i+1]
			case "--service-cidr":
				o.serviceCIDR = tc.args[i+1]
			case "--node-mask":
				o.nodeMask = atoi(t, tc.args[i+1])
			case "--node-mask-ipv6":
				o.nodeMaskV6 = atoi(t, tc.args[i+1])
			}
		}
		rep, err := build(o)
		require.NoError(t, err, tc.args)
		check := cidr.CheckLayout(tc.flags)
		var want, got []string
		for _, e := range check.Errors {
			want = append(want, e.Error())
		}
		for _, ov := range check.Overlaps {
			want = append(want, ov.Message())
		}
		for _, p := range rep.Problems {
			if !strings.Contains(p.Message, "maxPods") && !strings.Contains(p.Message, "planned") && !strings.Contains(p.Message, "kube-apiserver") {
				got = append(got, p.Message)
			}
		}
		assert.ElementsMatch(t, want, got, tc.args)
	}
}

func atoi(t *testing.T, s string) int {
	var n int
	for _, r := range s {
		require.True(t, r >= '0' && r <= '9', s)
		n = n*10 + int(r-'0')
	}
	return n
}
