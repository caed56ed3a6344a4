package flannel

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"Network": "172.7.0.0/16", "Backend": {"Type": "host-gw"}}`))
	require.NoError(t, err)
	assert.True(t, c.EnableIPv4)
	assert.False(t, c.EnableIPv6)
	assert.Equal(t, netip.MustParsePrefix("172.7.0.0/16"), c.Network)
	assert.Equal(t, "host-gw", c.BackendType)

	// Defaults and case-insensitive names, as flanneld's encoding/json decoding.
	c, err = ParseConfig([]byte(`{"network": "10.244.0.1/16", "enableipv4": false, "EnableIPv6": true, "IPv6Network": "fd00::/56", "Unknown": 1}`))
	require.NoError(t, err)
	assert.Equal(t, "udp", c.BackendType, "no Backend means udp")
	assert.False(t, c.EnableIPv4)
	assert.Equal(t, netip.MustParsePrefix("10.244.0.0/16"), c.Network, "host bits dropped like net.ParseCIDR")
	require.Len(t, c.Warnings, 1)
	assert.Contains(t, c.Warnings[0], "flanneld uses 10.244.0.0/16")

	c, err = ParseConfig([]byte(`{"Network":"10.0.0.0/8","SubnetMin":"0.0.0.0","IPv6SubnetMin":null}`))
	require.NoError(t, err)
	assert.False(t, c.SubnetMin.IsValid(), "0.0.0.0 means unset, as in flanneld")
	assert.False(t, c.IPv6SubnetMin.IsValid())
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name, in, field, msg string
	}{
		{"not json", `{"Network": `, "JSON", "not valid JSON"},
		{"array", `[1]`, "JSON", "must be a JSON object"},
		{"trailing data", `{} {}`, "JSON", "unexpected data"},
		{"network number", `{"Network": 5}`, "Network", "must be a CIDR string"},
		{"network null", `{"Network": null}`, "Network", "must be a CIDR string"},
		{"network garbage", `{"Network": "10.0.0/16"}`, "Network", "not a CIDR"},
		{"ipv6 in Network", `{"Network": "fd00::/64"}`, "Network", "IPv6 ranges go in IPv6Network"},
		{"ipv4 in IPv6Network", `{"IPv6Network": "10.0.0.0/8"}`, "IPv6Network", "must be an IPv6 CIDR"},
		{"negative SubnetLen", `{"Network": "10.0.0.0/8", "SubnetLen": -1}`, "SubnetLen", "non-negative integer"},
		{"bool as string", `{"EnableIPv4": "true"}`, "EnableIPv4", "true or false"},
		{"bad SubnetMin", `{"SubnetMin": "10.0.0"}`, "SubnetMin", "not an IP address"},
		{"ipv6 SubnetMin", `{"SubnetMin": "fd00::"}`, "SubnetMin", "must be an IPv4 address"},
		{"backend string", `{"Backend": "vxlan"}`, "Backend", `{"Type": "vxlan"}`},
		{"ipv6 network garbage", `{"IPv6Network": "fd00::/x"}`, "IPv6Network", `IPv6Network "fd00::/x": not a CIDR; write it like "fd00:10:244::/56"`},
		// Lengths past 128 (255 for IPv6) are refused here; up to there, Resolve
		// refuses what flanneld does (TestResolveSubnetLenBounds).
		{"SubnetLen 129", `{"Network": "10.0.0.0/8", "SubnetLen": 129}`, "SubnetLen", `SubnetLen "129": must be a prefix length of at most 30`},
		{"IPv6SubnetLen 256", `{"IPv6SubnetLen": 256}`, "IPv6SubnetLen", `IPv6SubnetLen "256": must be a prefix length of at most 126`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.in))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			var ce *ConfigError
			require.True(t, errors.As(err, &ce), "%v", err)
			assert.Equal(t, tt.field, ce.Field)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		subnetLen int
		min, max  string
		subnets   int64
		v6        *Layout
		defaulted []string
	}{
		{name: "story 4", in: `{"Network": "172.7.0.0/16", "Backend": {"Type": "host-gw"}}`,
			subnetLen: 24, min: "172.7.1.0", max: "172.7.255.0", subnets: 255, defaulted: []string{"SubnetLen", "SubnetMin", "SubnetMax"}},
		{name: "slash 22 still gets /24", in: `{"Network": "10.0.0.0/22"}`, subnetLen: 24, min: "10.0.1.0", max: "10.0.3.0", subnets: 3,
			defaulted: []string{"SubnetLen", "SubnetMin", "SubnetMax"}},
		{name: "slash 23 gets prefix+2", in: `{"Network": "10.0.0.0/23"}`, subnetLen: 25, min: "10.0.0.128", max: "10.0.1.128", subnets: 3,
			defaulted: []string{"SubnetLen", "SubnetMin", "SubnetMax"}},
		{name: "slash 28 is the smallest", in: `{"Network": "10.0.0.0/28"}`, subnetLen: 30, min: "10.0.0.4", max: "10.0.0.12", subnets: 3,
			defaulted: []string{"SubnetLen", "SubnetMin", "SubnetMax"}},
		{name: "explicit range", in: `{"Network": "10.0.0.0/16", "SubnetLen": 26, "SubnetMin": "10.0.8.0", "SubnetMax": "10.0.9.192"}`,
			subnetLen: 26, min: "10.0.8.0", max: "10.0.9.192", subnets: 8},
		{name: "one subnet", in: `{"Network": "10.0.0.0/16", "SubnetMin": "10.0.5.0", "SubnetMax": "10.0.5.0"}`,
			subnetLen: 24, min: "10.0.5.0", max: "10.0.5.0", subnets: 1, defaulted: []string{"SubnetLen"}},
		{name: "dual stack", in: `{"Network": "10.244.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan"}}`,
			subnetLen: 24, min: "10.244.1.0", max: "10.244.255.0", subnets: 255, defaulted: []string{"SubnetLen", "SubnetMin", "SubnetMax"},
			v6: &Layout{SubnetLen: 64, SubnetMin: netip.MustParseAddr("fd00:10:244:1::"), SubnetMax: netip.MustParseAddr("fd00:10:244:ff::")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.in))
			require.NoError(t, err)
			r, err := c.Resolve()
			require.NoError(t, err)
			require.NotNil(t, r.IPv4)
			assert.Equal(t, tt.subnetLen, r.IPv4.SubnetLen)
			assert.Equal(t, tt.min, r.IPv4.SubnetMin.String())
			assert.Equal(t, tt.max, r.IPv4.SubnetMax.String())
			assert.Equal(t, tt.subnets, r.IPv4.Subnets.Int64())
			assert.Equal(t, tt.defaulted, r.IPv4.Defaulted)
			if tt.v6 != nil {
				require.NotNil(t, r.IPv6)
				assert.Equal(t, tt.v6.SubnetLen, r.IPv6.SubnetLen)
				assert.Equal(t, tt.v6.SubnetMin, r.IPv6.SubnetMin)
				assert.Equal(t, tt.v6.SubnetMax, r.IPv6.SubnetMax)
			} else {
				assert.Nil(t, r.IPv6)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		name, in, field, flanneld string
	}{
		{"no network", `{}`, "Network", "please define a correct Network parameter in the flannel config"},
		{"0.0.0.0/0 counts as empty in flanneld", `{"Network": "0.0.0.0/0"}`, "Network", "please define a correct Network parameter"},
		{"subnet len 31", `{"Network": "10.0.0.0/8", "SubnetLen": 31}`, "SubnetLen", "SubnetLen must be less than /31"},
		{"four subnets", `{"Network": "10.0.0.0/16", "SubnetLen": 17}`, "SubnetLen", "network must be able to accommodate at least four subnets"},
		{"too small", `{"Network": "10.0.0.0/29"}`, "Network", "network is too small. Minimum useful network prefix is /28"},
		{"min outside", `{"Network": "10.0.0.0/16", "SubnetMin": "10.1.0.0"}`, "SubnetMin", "SubnetMin is not in the range of the Network"},
		{"max outside", `{"Network": "10.0.0.0/16", "SubnetMax": "10.1.0.0"}`, "SubnetMax", "SubnetMax is not in the range of the Network"},
		{"min unaligned", `{"Network": "10.0.0.0/16", "SubnetMin": "10.0.1.5"}`, "SubnetMin", "SubnetMin is not on a SubnetLen boundary: 10.0.1.5"},
		{"unknown backend", `{"Network": "10.0.0.0/16", "Backend": {"Type": "vxlam"}}`, "Backend.Type", "unknown backend type: vxlam"},
		{"ipv6 without network", `{"Network": "10.0.0.0/16", "EnableIPv6": true}`, "IPv6Network", "please define a correct IPv6Network parameter"},
		{"ipv6 too small", `{"Network": "10.0.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00::/125"}`, "IPv6Network", "IPv6Network is too small"},
		{"ipv6 len", `{"Network": "10.0.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00::/64", "IPv6SubnetLen": 127}`, "IPv6SubnetLen", "SubnetLen must be less than /127"},
		{"nothing enabled", `{"EnableIPv4": false}`, "EnableIPv4", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.in))
			require.NoError(t, err)
			_, err = c.Resolve()
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			var ce *ConfigError
			require.True(t, errors.As(err, &ce))
			assert.Equal(t, tt.field, ce.Field)
			assert.Contains(t, ce.Flanneld, tt.flanneld)
		})
	}
}

// TestResolveSubnetLenBounds: SubnetLen may be up to 30 (126 for IPv6) and
// as short as the network's length plus two (four subnets); one past either
// end is refused with flanneld's message and a reason that names the bound.
func TestResolveSubnetLenBounds(t *testing.T) {
	for _, tc := range []struct {
		in               string
		field, value     string // the error's; "" when the config resolves
		reason, flanneld string
	}{
		{in: `{"Network": "10.0.0.0/8", "SubnetLen": 30}`},
		{in: `{"Network": "10.0.0.0/16", "SubnetLen": 18}`},
		{in: `{"Network": "10.0.0.0/8", "SubnetLen": 31}`, field: "SubnetLen", value: "31",
			reason: "must be at most 30: each node needs room for a bridge and a tunnel address", flanneld: "SubnetLen must be less than /31"},
		{in: `{"Network": "10.0.0.0/8", "SubnetLen": 128}`, field: "SubnetLen", value: "128",
			reason: "must be at most 30: each node needs room for a bridge and a tunnel address", flanneld: "SubnetLen must be less than /31"},
		{in: `{"Network": "10.0.0.0/16", "SubnetLen": 17}`, field: "SubnetLen", value: "17",
			reason: "must be at least 18 so that Network 10.0.0.0/16 holds four subnets or more", flanneld: "network must be able to accommodate at least four subnets"},
		{in: `{"Network": "10.0.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00::/64", "IPv6SubnetLen": 126}`},
		{in: `{"Network": "10.0.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00::/64", "IPv6SubnetLen": 255}`, field: "IPv6SubnetLen", value: "255",
			reason: "must be at most 126: each node needs room for a bridge and a tunnel address", flanneld: "SubnetLen must be less than /127"},
	} {
		c, err := ParseConfig([]byte(tc.in))
		require.NoError(t, err, tc.in)
		_, err = c.Resolve()
		if tc.field == "" {
			assert.NoError(t, err, tc.in)
			continue
		}
		var ce *ConfigError
		if assert.True(t, errors.As(err, &ce), "%s: %v", tc.in, err) {
			assert.Equal(t, ConfigError{Field: tc.field, Value: tc.value, Reason: tc.reason, Flanneld: tc.flanneld}, *ce, tc.in)
		}
	}
}

// TestErrorTexts: an empty value or input is left out of the message, and
// input is quoted whole up to 120 bytes, cut with "..." past that.
func TestErrorTexts(t *testing.T) {
	assert.Equal(t, `flannel config: EnableIPv4: no family enabled`, (&ConfigError{Field: "EnableIPv4", Reason: "no family enabled"}).Error())
	assert.Equal(t, `lease key: empty`, (&ParseError{What: "lease key", Reason: "empty"}).Error())
	long := strings.Repeat("x", 120)
	assert.Equal(t, `lease value "`+long+`": bad`, (&ParseError{What: "lease value", Input: long, Reason: "bad"}).Error())
	assert.Equal(t, `lease value "`+long+`...": bad`, (&ParseError{What: "lease value", Input: long + "y", Reason: "bad"}).Error())
}

func TestLayoutCompatible(t *testing.T) {
	c, err := ParseConfig([]byte(`{"Network": "172.7.0.0/16"}`))
	require.NoError(t, err)
	r, err := c.Resolve()
	require.NoError(t, err)
	l := r.IPv4
	assert.True(t, l.Compatible(netip.MustParsePrefix("172.7.5.0/24")))
	assert.False(t, l.Compatible(netip.MustParsePrefix("172.7.0.0/24")), "the first subnet is never leased")
	assert.False(t, l.Compatible(netip.MustParsePrefix("172.7.5.0/25")), "wrong length")
	assert.False(t, l.Compatible(netip.MustParsePrefix("172.8.5.0/24")), "outside")
	assert.False(t, (*Layout)(nil).Compatible(netip.MustParsePrefix("172.7.5.0/24")))
}

func TestResolveWarnsEmptyRange(t *testing.T) {
	c, err := ParseConfig([]byte(`{"Network": "10.0.0.0/16", "SubnetMin": "10.0.9.0", "SubnetMax": "10.0.8.0"}`))
	require.NoError(t, err)
	r, err := c.Resolve()
	require.NoError(t, err)
	assert.Zero(t, r.IPv4.Subnets.Sign())
	require.Len(t, r.Warnings, 1)
	assert.Contains(t, r.Warnings[0], "out of subnets")
}

func TestEditTopLevel(t *testing.T) {
	in := "{\n  \"Network\": \"10.244.0.0/16\",\n  \"EnableNFTables\": false,\n  \"Backend\": {\n    \"Type\": \"vxlan\"\n  }\n}\n"
	out, err := editTopLevel([]byte(in), []memberEdit{{"Network", `"10.20.0.0/16"`}, {"IPv6Network", `"fd00::/56"`}})
	require.NoError(t, err)
	assert.Equal(t, "{\n  \"Network\": \"10.20.0.0/16\",\n  \"EnableNFTables\": false,\n  \"Backend\": {\n    \"Type\": \"vxlan\"\n  },\n  \"IPv6Network\": \"fd00::/56\"\n}\n", string(out))

	// Compact text, duplicate and differently-cased keys: all are edited.
	out, err = editTopLevel([]byte(`{"network":"1.0.0.0/8","Network" :  "2.0.0.0/8"}`), []memberEdit{{"Network", `"3.0.0.0/8"`}})
	require.NoError(t, err)
	assert.Equal(t, `{"network":"3.0.0.0/8","Network" :  "3.0.0.0/8"}`, string(out))

	out, err = editTopLevel([]byte(`{}`), []memberEdit{{"Network", `"3.0.0.0/8"`}, {"SubnetLen", `24`}})
	require.NoError(t, err)
	assert.Equal(t, `{"Network": "3.0.0.0/8",`+"\n"+`"SubnetLen": 24}`, string(out))

	_, err = editTopLevel([]byte(`[]`), []memberEdit{{"Network", `"3.0.0.0/8"`}})
	assert.Error(t, err)
	_, err = editTopLevel([]byte(`{} x`), []memberEdit{{"Network", `"3.0.0.0/8"`}})
	assert.Error(t, err)
}

func TestSetNetworkText(t *testing.T) {
	in := `{"Network": "10.0.0.0/16", "SubnetMin": "10.0.8.0", "SubnetMax": "10.0.200.0", "Backend": {"Type": "vxlan", "VNI": 4}, "Custom": [1, 2]}`
	out, c, err := SetNetworkText([]byte(in), SetNetworkRequest{Network: netip.MustParsePrefix("10.50.0.0/16")}, true)
	require.NoError(t, err)
	assert.Equal(t, `{"Network": "10.50.0.0/16", "SubnetMin": "10.50.8.0", "SubnetMax": "10.50.200.0", "Backend": {"Type": "vxlan", "VNI": 4}, "Custom": [1, 2]}`, string(out))
	assert.Equal(t, netip.MustParsePrefix("10.50.0.0/16"), c.Network)

	_, _, err = SetNetworkText([]byte(in), SetNetworkRequest{Network: netip.MustParsePrefix("10.50.0.0/24")}, true)
	assert.ErrorContains(t, err, "SubnetMin 10.0.8.0 cannot follow Network")

	_, _, err = SetNetworkText([]byte(`{"Network": "10.0.0.0/16"}`), SetNetworkRequest{Network: netip.MustParsePrefix("10.50.0.0/29")}, true)
	assert.ErrorIs(t, err, ErrInvalidConfig)
	assert.ErrorContains(t, err, "network is too small")

	_, _, err = SetNetworkText([]byte(`{"Network": "10.0.0.0/16"}`), SetNetworkRequest{Network: netip.PrefixFrom(netip.MustParseAddr("10.50.0.1"), 16)}, true)
	assert.ErrorIs(t, err, ErrInvalidRequest)
	assert.ErrorContains(t, err, "host bits set; the network is 10.50.0.0/16")

	_, _, err = SetNetworkText([]byte(`{"Network": "10.0.0.0/16"}`), SetNetworkRequest{}, true)
	assert.ErrorIs(t, err, ErrInvalidRequest)
}

func TestBackendTypesIsACopy(t *testing.T) {
	b := BackendTypes()
	assert.Contains(t, b, "host-gw")
	b[0] = "changed"
	assert.NotContains(t, BackendTypes(), "changed")
}
