package servicecidr_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/servicecidr"
)

func TestParseCIDRs(t *testing.T) {
	tests := []struct {
		in      string
		want    []netip.Prefix
		wantErr string
		is      error
	}{
		{in: "172.24.0.0/15", want: []netip.Prefix{pfx("172.24.0.0/15")}},
		{in: "172.24.0.0/15,fd00:24::/108", want: []netip.Prefix{pfx("172.24.0.0/15"), pfx("fd00:24::/108")}},
		{in: "10.233.64.1/16", wantErr: `--to "10.233.64.1/16": 10.233.64.1/16 has host bits set; the network is 10.233.0.0/16`, is: cidr.ErrHostBitsSet},
		{in: "10.0.0.0/16,10.1.0.0/16", wantErr: `--to "10.0.0.0/16,10.1.0.0/16"`, is: cidr.ErrDualStack},
		{in: "", wantErr: "--to", is: cidr.ErrEmpty},
		{in: "banana", wantErr: `--to "banana"`, is: cidr.ErrSyntax},
	}
	for _, tt := range tests {
		got, err := servicecidr.ParseCIDRs("--to", tt.in)
		if tt.wantErr != "" {
			assert.ErrorContains(t, err, tt.wantErr, tt.in)
			assert.ErrorIs(t, err, servicecidr.ErrInvalid, tt.in)
			assert.ErrorIs(t, err, tt.is, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, got)
	}
}

func TestValidateUpdate(t *testing.T) {
	sc := func(cidrs ...string) servicecidr.ServiceCIDR {
		s := servicecidr.ServiceCIDR{Name: "kubernetes"}
		for _, c := range cidrs {
			s.CIDRs = append(s.CIDRs, pfx(c))
		}
		return s
	}
	tests := []struct {
		name      string
		old, next servicecidr.ServiceCIDR
		want      string
	}{
		{"unchanged", sc("10.96.0.0/12"), sc("10.96.0.0/12"), ""},
		{"add second family", sc("10.96.0.0/12"), sc("10.96.0.0/12", "fd00::/108"), ""},
		{"change", sc("10.96.0.0/12"), sc("10.112.0.0/12"), `ServiceCIDR kubernetes spec.cidrs[0] "10.112.0.0/12": field is immutable (it is 10.96.0.0/12); create a new ServiceCIDR instead`},
		{"replace first while adding", sc("10.96.0.0/12"), sc("10.112.0.0/12", "fd00::/108"), "only a CIDR of the other family may be added"},
		{"add same family", sc("10.96.0.0/12"), sc("10.96.0.0/12", "10.112.0.0/12"), "may specify no more than one CIDR for each IP family"},
		{"remove family", sc("10.96.0.0/12", "fd00::/108"), sc("10.96.0.0/12"), "the only allowed change is adding a CIDR of the other family"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := servicecidr.ValidateUpdate(tt.old, tt.next)
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.want)
		})
	}
	assert.ErrorIs(t, servicecidr.ValidateUpdate(sc("10.96.0.0/12"), sc("10.112.0.0/12")), servicecidr.ErrImmutable)
}

func TestValidateCatchesConflicts(t *testing.T) {
	tests := []struct {
		name    string
		cidrs   []netip.Prefix
		opts    servicecidr.ValidateOptions
		wantErr []string
		warn    string
	}{
		{name: "story 3: the old range sits in Tailscale's CGNAT space",
			cidrs:   []netip.Prefix{pfx("100.64.0.0/13")},
			wantErr: []string{`service CIDR "100.64.0.0/13": overlaps well-known 100.64.0.0/10 (shared address space / CGNAT, used by Tailscale (RFC 6598))`}},
		{name: "CGNAT allowed explicitly", cidrs: []netip.Prefix{pfx("100.64.0.0/13")}, opts: servicecidr.ValidateOptions{AllowWellKnown: true},
			warn: "overlaps well-known 100.64.0.0/10"},
		{name: "story 3 target is clean", cidrs: story3To,
			opts: servicecidr.ValidateOptions{PodCIDRs: []netip.Prefix{pfx("100.96.0.0/11")}, NodeNetworks: []netip.Prefix{pfx("172.20.0.0/16")}}},
		{name: "pod CIDR", cidrs: []netip.Prefix{pfx("10.96.0.0/12")}, opts: servicecidr.ValidateOptions{PodCIDRs: []netip.Prefix{pfx("10.100.0.0/16")}},
			wantErr: []string{"overlaps cluster-cidr 10.100.0.0/16 (pod CIDR): Service ClusterIPs and other addresses would collide"}},
		{name: "node network", cidrs: []netip.Prefix{pfx("172.20.0.0/16")}, opts: servicecidr.ValidateOptions{NodeNetworks: []netip.Prefix{pfx("172.20.40.10/32")}},
			wantErr: []string{"overlaps node-network 172.20.40.10/32"}},
		{name: "node podCIDR", cidrs: []netip.Prefix{pfx("10.244.0.0/16")},
			opts:    servicecidr.ValidateOptions{NodePodCIDRs: []cidr.Range{{Name: "node a", Kind: cidr.KindNodePodCIDR, Prefix: pfx("10.244.3.0/24")}}},
			wantErr: []string{"overlaps node-podcidr 10.244.3.0/24 (node a)"}},
		{name: "moving into the old range", cidrs: []netip.Prefix{pfx("100.64.0.0/12")}, opts: servicecidr.ValidateOptions{Avoid: []netip.Prefix{pfx("100.64.0.0/13")}, AllowWellKnown: true},
			wantErr: []string{"overlaps 100.64.0.0/13, the range Services are moving away from"}},
		{name: "IPv6 shorter than /64", cidrs: []netip.Prefix{pfx("fd00::/48")}, opts: servicecidr.ValidateOptions{KubernetesMinor: 36},
			wantErr: []string{"an IPv6 Service range shorter than /64 is accepted but no ClusterIP is allocated from it"}},
		{name: "flag limit up to 1.33", cidrs: []netip.Prefix{pfx("10.0.0.0/8")}, opts: servicecidr.ValidateOptions{KubernetesMinor: 33, ForFlag: true},
			wantErr: []string{"specified --service-cluster-ip-range is too large"}},
		{name: "no flag limit from 1.34", cidrs: []netip.Prefix{pfx("10.0.0.0/8")}, opts: servicecidr.ValidateOptions{KubernetesMinor: 34, ForFlag: true}},
		{name: "no flag limit for a ServiceCIDR object alone", cidrs: []netip.Prefix{pfx("10.0.0.0/8")}, opts: servicecidr.ValidateOptions{KubernetesMinor: 30}},
		{name: "too small", cidrs: []netip.Prefix{pfx("10.0.0.0/32")}, wantErr: []string{"no usable address for the kubernetes Service"}},
		// More ranges to check against than candidates, of each kind.
		{name: "dual-stack pod CIDRs beside one candidate", cidrs: story3To,
			opts: servicecidr.ValidateOptions{PodCIDRs: []netip.Prefix{pfx("10.244.0.0/16"), pfx("fd00:10:244::/56")}}},
		{name: "several node podCIDRs", cidrs: story3To, opts: servicecidr.ValidateOptions{NodePodCIDRs: []cidr.Range{
			{Name: "node a", Kind: cidr.KindNodePodCIDR, Prefix: pfx("10.244.1.0/24")}, {Name: "node b", Kind: cidr.KindNodePodCIDR, Prefix: pfx("10.244.2.0/24")}}}},
		{name: "several node networks", cidrs: story3To,
			opts: servicecidr.ValidateOptions{NodeNetworks: []netip.Prefix{pfx("192.168.1.0/24"), pfx("192.168.2.0/24")}}},
		{name: "existing ServiceCIDR overlap is a warning", cidrs: []netip.Prefix{pfx("10.96.0.0/16")},
			opts: servicecidr.ValidateOptions{Existing: []servicecidr.ServiceCIDR{{Name: "kubernetes", CIDRs: []netip.Prefix{pfx("10.96.0.0/12")}}}},
			warn: "overlaps ServiceCIDR kubernetes (10.96.0.0/12)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := servicecidr.Validate(tt.cidrs, tt.opts)
			if len(tt.wantErr) == 0 {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				// Collisions are ErrConflict; size and shape problems ErrInvalid.
				if !errors.Is(err, servicecidr.ErrConflict) {
					assert.ErrorIs(t, err, servicecidr.ErrInvalid)
				}
				for _, w := range tt.wantErr {
					assert.ErrorContains(t, err, w)
				}
				assert.NotEmpty(t, v.Errors)
			}
			if tt.warn != "" {
				require.NotEmpty(t, v.Warnings)
				assert.Contains(t, v.Warnings[0], tt.warn)
			}
		})
	}
}

func TestValidateReportsCapacity(t *testing.T) {
	v, err := servicecidr.Validate([]netip.Prefix{pfx("172.24.0.0/15"), pfx("fd00:24::/108")}, servicecidr.ValidateOptions{KubernetesMinor: 33, ForFlag: true})
	require.NoError(t, err)
	require.Len(t, v.Capacity, 2)
	assert.Equal(t, "131070", v.Usable(cidr.IPv4).String())
	assert.Equal(t, "1048575", v.Usable(cidr.IPv6).String())
	assert.Equal(t, "172.24.0.10", v.Capacity[0].DNSIP.String())
	assert.Equal(t, "fd00:24::1", v.Capacity[1].KubernetesIP.String())
}

func TestValidateErrorsAreTyped(t *testing.T) {
	_, err := servicecidr.Validate([]netip.Prefix{pfx("100.64.0.0/13")}, servicecidr.ValidateOptions{})
	assert.ErrorIs(t, err, servicecidr.ErrConflict)
	var fe *servicecidr.FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "service CIDR", fe.Field)
	assert.Equal(t, "100.64.0.0/13", fe.Value)

	_, err = servicecidr.Validate([]netip.Prefix{pfx("fd00::/48")}, servicecidr.ValidateOptions{KubernetesMinor: 36})
	assert.ErrorIs(t, err, cidr.ErrRule, "the cidr package's rule error stays reachable")
}
