package cidr

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseStrict(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr error
		msg     string
	}{
		{in: "10.244.0.0/16", want: "10.244.0.0/16"},
		{in: "  10.244.0.0/16 ", want: "10.244.0.0/16"},
		{in: "fd00:10:244::/56", want: "fd00:10:244::/56"},
		{in: "0.0.0.0/0", want: "0.0.0.0/0"},
		{in: "10.233.64.1/16", wantErr: ErrHostBitsSet, msg: "10.233.64.1/16 has host bits set; the network is 10.233.0.0/16"},
		{in: "10.244.0.0/12", wantErr: ErrHostBitsSet, msg: "10.244.0.0/12 has host bits set; the network is 10.240.0.0/12"},
		{in: "", wantErr: ErrEmpty, msg: "empty CIDR: want an address/prefix-length such as 10.244.0.0/16"},
		{in: "   ", wantErr: ErrEmpty, msg: "empty CIDR"},
		{in: "10.0.0.0", wantErr: ErrSyntax, msg: `"10.0.0.0": missing /prefix-length, want e.g. 10.244.0.0/16`},
		{in: "10.0.0.0/33", wantErr: ErrSyntax, msg: `"10.0.0.0/33": prefix length 33 is out of range for IPv4 (0-32)`},
		{in: "fd00::/129", wantErr: ErrSyntax, msg: "out of range for IPv6 (0-128)"},
		{in: "10.0.0.0/x", wantErr: ErrSyntax, msg: `prefix length "x" is not a number`},
		{in: "10.0.0.0/", wantErr: ErrSyntax, msg: `prefix length "" is not a number`},
		{in: "10.0.0.0/+8", wantErr: ErrSyntax, msg: "is not a number"},
		{in: "10.0.0.0/08", wantErr: ErrSyntax, msg: "is not a number"},
		{in: "banana/8", wantErr: ErrSyntax, msg: `"banana" is not an IP address`},
		{in: "010.0.0.0/8", wantErr: ErrSyntax, msg: `"010.0.0.0" is not an IP address`},
		{in: "::ffff:10.0.0.0/104", wantErr: ErrMappedIPv6, msg: "IPv4-mapped IPv6 addresses are not allowed"},
		{in: "fe80::/64%eth0", wantErr: ErrZone, msg: "IPv6 zones are not allowed"},
		{in: "fe80::%eth0/64", wantErr: ErrZone, msg: "IPv6 zones are not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.wantErr != nil {
				require.Error(t, err)
				assert.ErrorIs(t, err, tt.wantErr)
				assert.Contains(t, err.Error(), tt.msg)
				var pe *ParseError
				assert.True(t, errors.As(err, &pe), "error is a *ParseError")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got.String())
		})
	}
}

func TestParseLenientMatchesComponents(t *testing.T) {
	// The second story: --cluster-cidr=10.244.0.0/12 is used as 10.240.0.0/12,
	// which is why its pods had IPs 10.240.31.10 and 10.241.12.6.
	p, w, err := ParseLenient("10.244.0.0/12")
	require.NoError(t, err)
	assert.Equal(t, "10.240.0.0/12", p.String())
	require.NotNil(t, w)
	assert.Equal(t, "10.244.0.0/12 has host bits set; Kubernetes components use 10.240.0.0/12", w.String())
	assert.True(t, p.Contains(netip.MustParseAddr("10.240.31.10")))
	assert.True(t, p.Contains(netip.MustParseAddr("10.241.12.6")))

	p, w, err = ParseLenient("010.001.0.0/16")
	require.NoError(t, err)
	assert.Equal(t, "10.1.0.0/16", p.String())
	require.NotNil(t, w)
	assert.Contains(t, w.String(), "is not in canonical form")

	p, w, err = ParseLenient("10.244.0.0/16")
	require.NoError(t, err)
	assert.Nil(t, w)
	assert.Equal(t, "10.244.0.0/16", p.String())

	for _, bad := range []string{"", "::ffff:1.2.3.4/120", "1.2.3/8", "256.0.0.0/8", "1.2.3.4.5/8", "fe80::%1/64", "1.2.3.4/40"} {
		_, _, err := ParseLenient(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseList(t *testing.T) {
	ps, err := ParseList("10.244.0.0/16,fd00:10:244::/56")
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{MustParse("10.244.0.0/16"), MustParse("fd00:10:244::/56")}, ps)

	ps, err = ParseList(" fd00::/48 , 10.0.0.0/8 ")
	require.NoError(t, err)
	assert.Equal(t, IPv6, FamilyOf(ps[0]), "order is kept: first is primary")

	_, err = ParseList("10.0.0.0/16,10.1.0.0/16")
	assert.ErrorIs(t, err, ErrDualStack)
	assert.EqualError(t, err, `"10.0.0.0/16,10.1.0.0/16": a dual-stack pair needs one IPv4 and one IPv6 CIDR, got two IPv4 CIDRs`)

	_, err = ParseList("10.0.0.0/16,fd00::/64,10.1.0.0/16")
	assert.ErrorIs(t, err, ErrDualStack)
	assert.Contains(t, err.Error(), "3 CIDRs given; at most two are allowed")

	_, err = ParseList("10.0.0.0/16,")
	assert.ErrorIs(t, err, ErrEmpty)

	_, err = ParseList("10.0.0.1/16,fd00::/64")
	assert.ErrorIs(t, err, ErrHostBitsSet)

	ps, ws, err := ParseListLenient("10.244.0.0/12,fd00::1/64")
	require.NoError(t, err)
	assert.Equal(t, "10.240.0.0/12", ps[0].String())
	assert.Len(t, ws, 2)
}

func TestFamily(t *testing.T) {
	assert.Equal(t, "IPv4", IPv4.String())
	assert.Equal(t, "IPv6", IPv6.String())
	assert.Equal(t, "unknown", Family(0).String())
	assert.Equal(t, 128, IPv6.AddrBits())
}

func TestFamilyText(t *testing.T) {
	b, err := IPv6.MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "IPv6", string(b))
	_, err = Family(5).MarshalText()
	assert.ErrorIs(t, err, ErrFamily)
	var f Family
	require.NoError(t, f.UnmarshalText([]byte("ipv4")))
	assert.Equal(t, IPv4, f)
	require.NoError(t, f.UnmarshalText([]byte("6")))
	assert.Equal(t, IPv6, f)
	assert.ErrorContains(t, f.UnmarshalText([]byte("ipx")), `"ipx" is not IPv4 or IPv6`)
}

// The lenient parser reads every decimal digit and every octet value up to
// 255 in zero-padded IPv4, as ParseIPSloppy does.
func TestParseLenientZeroPaddedDigitsAndOctets(t *testing.T) {
	p, _, err := ParseLenient("010.009.255.000/24")
	require.NoError(t, err)
	assert.Equal(t, "10.9.255.0/24", p.String())
}

// A CIDR with nothing before the slash names the missing address, not a
// missing prefix length.
func TestParseEmptyAddressBeforeTheSlash(t *testing.T) {
	_, err := Parse("/24")
	assert.ErrorIs(t, err, ErrSyntax)
	assert.ErrorContains(t, err, `"" is not an IP address`)
}
