package flannel

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSubnetKey(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		want      SubnetKey
		canonical bool
		err       string
	}{
		{name: "ipv4", in: "10.5.34.0-24", want: SubnetKey{IPv4: netip.MustParsePrefix("10.5.34.0/24")}, canonical: true},
		{name: "dual stack", in: "10.5.34.0-24&fd00:10:244:5::-64",
			want: SubnetKey{IPv4: netip.MustParsePrefix("10.5.34.0/24"), IPv6: netip.MustParsePrefix("fd00:10:244:5::/64")}, canonical: true},
		{name: "host bits kept like flanneld", in: "10.5.34.7-24", want: SubnetKey{IPv4: netip.PrefixFrom(netip.MustParseAddr("10.5.34.7"), 24)}},
		{name: "leading zero length", in: "10.5.34.0-024", want: SubnetKey{IPv4: netip.MustParsePrefix("10.5.34.0/24")}},
		{name: "junk before, unanchored like flanneld", in: "x10.5.34.0-24", want: SubnetKey{IPv4: netip.MustParsePrefix("10.5.34.0/24")}},
		{name: "slash 31 is the longest flanneld reads", in: "10.5.34.0-31", want: SubnetKey{IPv4: netip.MustParsePrefix("10.5.34.0/31")}, canonical: true},
		{name: "slash 32 refused", in: "10.5.34.0-32", err: "not in 0..31"},
		{name: "ipv6 slash 128 refused", in: "10.5.34.0-24&fd00::-128", err: "not in 0..127"},
		{name: "uppercase ipv6 not matched", in: "10.5.34.0-24&FD00::-64", want: SubnetKey{}, err: "flanneld expects"},
		{name: "bad octet", in: "10.5.340.0-24", err: "is not an IPv4 address"},
		{name: "bad ipv6", in: "10.5.34.0-24&fd00:::1-64", err: "is not an IPv6 address"},
		{name: "slash form", in: "10.5.34.0/24", err: "flanneld expects"},
		{name: "empty", in: "", err: "flanneld expects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSubnetKey(tt.in)
			if tt.err != "" {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrBadKey)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.canonical, got.Canonical(tt.in))
		})
	}
}

func TestSubnetKeyString(t *testing.T) {
	k := SubnetKey{IPv4: netip.MustParsePrefix("172.7.3.0/24"), IPv6: netip.MustParsePrefix("fd00:10:244:5::/64")}
	assert.Equal(t, "172.7.3.0-24&fd00:10:244:5::-64", k.String())
	assert.Equal(t, "172.7.3.0-24", SubnetKey{IPv4: k.IPv4}.String())
	assert.True(t, SubnetKey{}.IsZero())
}
