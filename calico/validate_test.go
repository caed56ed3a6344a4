package calico_test

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/cidr"
)

func pool(name, c string, mutate ...func(*calico.PoolSpec)) calico.IPPool {
	p := calico.IPPool{Name: name, Spec: calico.PoolSpec{CIDR: c}}
	for _, m := range mutate {
		m(&p.Spec)
	}
	return p
}

func TestValidateCalicoRules(t *testing.T) {
	cases := []struct {
		name  string
		pool  calico.IPPool
		rules []calico.Rule
		field string
		text  string
	}{
		{"valid default", pool("p", "10.20.0.0/16"), nil, "", ""},
		{"valid v6", pool("p6", "fd00:20::/64", func(s *calico.PoolSpec) { s.VXLANMode = calico.EncapAlways }), nil, "", ""},
		{"valid disabled tiny", pool("p", "10.20.0.0/30", func(s *calico.PoolSpec) { s.Disabled = true }), nil, "", ""},
		{"empty cidr", pool("p", ""), []calico.Rule{calico.RuleCIDRSyntax}, "spec.cidr", "must be specified"},
		{"garbage cidr", pool("p", "10.20.0/16"), []calico.Rule{calico.RuleCIDRSyntax}, "spec.cidr", "valid subnet"},
		{"host bits (story 1)", pool("p", "10.233.64.1/16"), []calico.Rule{calico.RuleCIDRMasked}, "spec.cidr", "write 10.233.0.0/16"},
		{"block too big v4", pool("p", "10.20.0.0/16", func(s *calico.PoolSpec) { s.BlockSize = 19 }), []calico.Rule{calico.RuleBlockSizeRange}, "spec.blockSize", "between 20 and 32"},
		{"block too small v4", pool("p", "10.20.0.0/16", func(s *calico.PoolSpec) { s.BlockSize = 33 }), []calico.Rule{calico.RuleBlockSizeRange}, "spec.blockSize", "between 20 and 32"},
		{"block v6 range", pool("p", "fd00::/48", func(s *calico.PoolSpec) { s.BlockSize = 26 }), []calico.Rule{calico.RuleBlockSizeRange}, "spec.blockSize", "between 116 and 128"},
		{"block v6 ok", pool("p", "fd00::/48", func(s *calico.PoolSpec) { s.BlockSize = 116 }), nil, "", ""},
		{"smaller than a block", pool("p", "10.20.0.0/27"), []calico.Rule{calico.RulePoolSmallerThanBlock}, "spec.cidr", "/27 holds no whole /26 block"},
		{"smaller than its block", pool("p", "10.20.0.0/25", func(s *calico.PoolSpec) { s.BlockSize = 24 }), []calico.Rule{calico.RulePoolSmallerThanBlock}, "spec.cidr", "/24"},
		{"link local v4", pool("p", "169.254.0.0/16"), []calico.Rule{calico.RuleLinkLocal}, "spec.cidr", "169.254.0.0/16"},
		{"contains link local", pool("p", "169.0.0.0/8"), []calico.Rule{calico.RuleLinkLocal}, "spec.cidr", "link-local"},
		{"link local v6", pool("p", "fe80::/64"), []calico.Rule{calico.RuleLinkLocal}, "spec.cidr", "fe80::/10"},
		{"ipip and vxlan", pool("p", "10.20.0.0/16", func(s *calico.PoolSpec) { s.IPIPMode, s.VXLANMode = calico.EncapAlways, calico.EncapCrossSubnet }), []calico.Rule{calico.RuleEncapExclusive}, "spec.vxlanMode", "cannot both be enabled"},
		{"ipip never + vxlan ok", pool("p", "10.20.0.0/16", func(s *calico.PoolSpec) { s.IPIPMode, s.VXLANMode = calico.EncapNever, calico.EncapAlways }), nil, "", ""},
		{"ipip on v6", pool("p", "fd00::/64", func(s *calico.PoolSpec) { s.IPIPMode = calico.EncapCrossSubnet }), []calico.Rule{calico.RuleIPIPOnIPv6}, "spec.ipipMode", "IPv6"},
		{"bad mode", pool("p", "10.20.0.0/16", func(s *calico.PoolSpec) { s.IPIPMode = "always" }), []calico.Rule{calico.RuleEncapMode}, "spec.ipipMode", "Never, Always or CrossSubnet"},
		{"bad use", pool("p", "10.20.0.0/16", func(s *calico.PoolSpec) { s.AllowedUses = []calico.AllowedUse{"Pods"} }), []calico.Rule{calico.RuleAllowedUses}, "spec.allowedUses[0]", "Workload, Tunnel or LoadBalancer"},
		{"lb mixed", pool("p", "10.20.0.0/16", func(s *calico.PoolSpec) {
			s.AllowedUses = []calico.AllowedUse{calico.UseLoadBalancer, calico.UseWorkload}
		}), []calico.Rule{calico.RuleAllowedUses}, "spec.allowedUses", "LoadBalancer cannot be combined"},
		{"tunnel with namespace selector", pool("p", "10.20.0.0/16", func(s *calico.PoolSpec) {
			s.AllowedUses = []calico.AllowedUse{calico.UseTunnel}
			s.NamespaceSelector = "team == 'a'"
		}), []calico.Rule{calico.RuleAllowedUses}, "spec.namespaceSelector", "Tunnel"},
		{"assignment mode", pool("p", "10.20.0.0/16", func(s *calico.PoolSpec) { s.AssignmentMode = "Sometimes" }), []calico.Rule{calico.RuleAssignmentMode}, "spec.assignmentMode", "Automatic or Manual"},
		{"bad name", pool("New_Pool", "10.20.0.0/16"), []calico.Rule{calico.RuleName}, "metadata.name", "lower case"},
		// The bounds are inclusive: a v4 block of /32, a pool of exactly one
		// block, a name of 253 bytes, the letters up to z and the digits up
		// to 9; a character inside a label is checked as well as its ends.
		{"block /32 ok", pool("p", "10.20.0.0/16", func(s *calico.PoolSpec) { s.BlockSize = 32 }), nil, "", ""},
		{"pool of one block", pool("p", "10.20.0.0/26"), nil, "", ""},
		{"name of 253 bytes", pool(strings.Repeat("a", 253), "10.20.0.0/16"), nil, "", ""},
		{"name of 254 bytes", pool(strings.Repeat("a", 254), "10.20.0.0/16"), []calico.Rule{calico.RuleName}, "metadata.name", "too long by 1 bytes"},
		{"name from z to 9", pool("zone.pool-9", "10.20.0.0/16"), nil, "", ""},
		{"underscore inside a label", pool("new_pool", "10.20.0.0/16"), []calico.Rule{calico.RuleName}, "metadata.name", "lower case"},
		{"several", pool("p", "fd00::/127", func(s *calico.PoolSpec) { s.IPIPMode = calico.EncapAlways; s.VXLANMode = calico.EncapAlways }),
			[]calico.Rule{calico.RuleEncapExclusive, calico.RulePoolSmallerThanBlock, calico.RuleIPIPOnIPv6}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := calico.Validate(c.pool)
			if c.rules == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, calico.ErrInvalidPool)
			var got []calico.Rule
			for _, fe := range calico.FieldErrors(err) {
				got = append(got, fe.Rule)
				if c.field != "" && fe.Rule == c.rules[0] {
					assert.Equal(t, c.field, fe.Field)
				}
			}
			assert.ElementsMatch(t, c.rules, got)
			if c.text != "" {
				assert.Contains(t, err.Error(), c.text)
			}
			// Every message names the pool, the field and the value.
			for _, fe := range calico.FieldErrors(err) {
				assert.Contains(t, fe.Error(), `IPPool "`+c.pool.Name+`"`)
				assert.Contains(t, fe.Error(), fe.Field)
				assert.Contains(t, fe.Error(), fe.Value)
			}
		})
	}
}

func TestValidateNewPool(t *testing.T) {
	env := calico.Environment{
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("fd00:20::/56")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")},
		NodeNetworks: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/24")},
		Pools:        []calico.IPPool{pool("old", "10.233.64.0/18"), pool("other", "10.20.128.0/17")},
	}
	cases := []struct {
		name  string
		pool  calico.IPPool
		rules []calico.Rule
		text  string
	}{
		{"fits", pool("new", "10.20.0.0/17"), nil, ""},
		{"v6 fits", pool("new6", "fd00:20::/64"), nil, ""},
		{"same name ignored", pool("other", "10.20.128.0/17"), nil, ""},
		{"outside cluster", pool("new", "10.30.0.0/16"), []calico.Rule{calico.RuleOutsideClusterCIDR}, "outside the cluster CIDR 10.20.0.0/16"},
		{"wider than cluster", pool("new", "10.20.0.0/15"), []calico.Rule{calico.RuleOutsideClusterCIDR, calico.RulePoolOverlap}, "10.20.128.0/17"},
		{"overlaps pool", pool("new", "10.20.128.0/18"), []calico.Rule{calico.RulePoolOverlap}, `IPPool other (10.20.128.0/17)`},
		{"overlaps service", pool("new", "10.96.0.0/16"), []calico.Rule{calico.RuleOutsideClusterCIDR, calico.RuleServiceOverlap}, "Service CIDR 10.96.0.0/12"},
		{"overlaps nodes", pool("new", "192.168.0.0/16"), []calico.Rule{calico.RuleOutsideClusterCIDR, calico.RuleNodeNetworkOverlap}, "node network 192.168.0.0/24"},
		{"calico rule too", pool("new", "10.20.0.0/17", func(s *calico.PoolSpec) { s.BlockSize = 40 }), []calico.Rule{calico.RuleBlockSizeRange}, "spec.blockSize"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := calico.ValidateNewPool(c.pool, env)
			if c.rules == nil {
				require.NoError(t, err)
				return
			}
			var got []calico.Rule
			for _, fe := range calico.FieldErrors(err) {
				got = append(got, fe.Rule)
			}
			assert.ElementsMatch(t, c.rules, got)
			assert.Contains(t, err.Error(), c.text)
		})
	}
	// Without a cluster CIDR of the pool's family the pool is outside.
	err := calico.ValidateNewPool(pool("new6", "fd00:30::/64"), calico.Environment{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no IPv6 cluster CIDR")
}

func TestPoolCapacity(t *testing.T) {
	cases := []struct {
		name                        string
		pool                        calico.IPPool
		opts                        calico.CapacityOptions
		blocks, perBlock, addresses string
		blockSize                   int
		warnings                    []calico.WarningCode
	}{
		{"story 1 old pool", pool("old", "10.233.64.0/18", func(s *calico.PoolSpec) { s.BlockSize = 24 }), calico.CapacityOptions{}, "64", "256", "16384", 24, nil},
		{"default block", pool("new", "10.20.0.0/16"), calico.CapacityOptions{ClusterCIDR: "10.20.0.0/16", KubeProxyClusterCIDR: "10.20.0.0/16"}, "1024", "64", "65536", 26, nil},
		{"v6 default", pool("v6", "fd00:20::/64"), calico.CapacityOptions{}, "288230376151711744", "64", "18446744073709551616", 122, nil},
		{"outside cluster", pool("new", "10.20.0.0/16"), calico.CapacityOptions{ClusterCIDR: "10.233.64.0/18"}, "1024", "64", "65536", 26, []calico.WarningCode{calico.WarnOutsideClusterCIDR}},
		{"kube-proxy stale", pool("new", "10.20.0.0/16"), calico.CapacityOptions{KubeProxyClusterCIDR: "10.233.64.0/18"}, "1024", "64", "65536", 26, []calico.WarningCode{calico.WarnKubeProxyMismatch}},
		{"kube-proxy host bits", pool("new", "10.20.0.0/16"), calico.CapacityOptions{KubeProxyClusterCIDR: "10.20.0.1/16"}, "1024", "64", "65536", 26, []calico.WarningCode{calico.WarnKubeProxyHostBits}},
		{"no whole block", pool("tiny", "10.20.0.0/28", func(s *calico.PoolSpec) { s.Disabled = true }), calico.CapacityOptions{}, "0", "64", "16", 26, []calico.WarningCode{calico.WarnNoWholeBlock}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := calico.PoolCapacity(c.pool, c.opts)
			require.NoError(t, err)
			assert.Equal(t, c.blocks, got.Blocks.String())
			assert.Equal(t, c.blocks, got.MaxNodesOneBlockEach.String())
			assert.Equal(t, c.perBlock, got.AddressesPerBlock.String())
			assert.Equal(t, c.addresses, got.Addresses.String())
			assert.Equal(t, c.blockSize, got.BlockSize)
			var codes []calico.WarningCode
			for _, w := range got.Warnings {
				codes = append(codes, w.Code)
			}
			assert.Equal(t, c.warnings, codes)
		})
	}
	_, err := calico.PoolCapacity(pool("bad", "10.20.0.0/16", func(s *calico.PoolSpec) { s.BlockSize = 12 }), calico.CapacityOptions{})
	assert.ErrorIs(t, err, calico.ErrInvalidPool)
	_, err = calico.PoolCapacity(pool("new", "10.20.0.0/16"), calico.CapacityOptions{ClusterCIDR: "10.20.0.1/16"})
	assert.ErrorIs(t, err, cidr.ErrHostBitsSet)
	_, err = calico.PoolCapacity(pool("bad", "nonsense"), calico.CapacityOptions{})
	assert.ErrorIs(t, err, calico.ErrInvalidPool)
}

func BenchmarkValidateNewPool(b *testing.B) {
	env := calico.Environment{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")}}
	for i := 0; i < 200; i++ {
		env.Pools = append(env.Pools, pool("p", netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16).String()))
	}
	p := pool("new", "10.250.0.0/16")
	b.ReportAllocs()
	for b.Loop() {
		if err := calico.ValidateNewPool(p, env); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCapacityJSONExact(t *testing.T) {
	c, err := calico.PoolCapacity(pool("v6", "fd00::/24", func(s *calico.PoolSpec) { s.BlockSize = 122 }), calico.CapacityOptions{})
	require.NoError(t, err)
	data, err := yaml.Marshal(c)
	require.NoError(t, err)
	var back calico.Capacity
	require.NoError(t, yaml.Unmarshal(data, &back))
	assert.Equal(t, "316912650057057350374175801344", back.Blocks.String())
	assert.Equal(t, c.Addresses.String(), back.Addresses.String())
	assert.Equal(t, c.CIDR, back.CIDR)
	assert.Error(t, json.Unmarshal([]byte(`{"blocks":"1e9"}`), &back))
}
