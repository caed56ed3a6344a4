package flannel

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseLeaseAttrs(t *testing.T) {
	a, err := ParseLeaseAttrs([]byte(`{"PublicIP":"192.168.1.10","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"12:c6:65:89:b4:e3"},"Future":true}`))
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("192.168.1.10"), a.PublicIP)
	assert.False(t, a.PublicIPv6.IsValid())
	assert.Equal(t, "vxlan", a.BackendType)
	assert.JSONEq(t, `{"VNI":1,"VtepMAC":"12:c6:65:89:b4:e3"}`, string(a.BackendData))

	a, err = ParseLeaseAttrs([]byte(`{"publicip":"::ffff:10.0.0.1","PublicIPv6":"fd00::1"}`))
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("10.0.0.1"), a.PublicIP, "mapped addresses read as IPv4, like net.IP.To4")
	assert.Equal(t, netip.MustParseAddr("fd00::1"), a.PublicIPv6)

	for name, in := range map[string]string{
		"null":            `null`,
		"array":           `[]`,
		"broken":          `{"PublicIP":`,
		"ipv6 public ip":  `{"PublicIP":"fd00::1"}`,
		"number ip":       `{"PublicIP":5}`,
		"null public ip":  `{"PublicIP":null}`,
		"wrong type":      `{"BackendType":5}`,
		"trailing":        `{} 1`,
		"bad public ipv6": `{"PublicIPv6":"x"}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseLeaseAttrs([]byte(in))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrBadLease)
		})
	}
}

func TestLeaseJSONRoundTrip(t *testing.T) {
	l := Lease{Key: "/coreos.com/network/subnets/10.5.34.0-24", Subnet: SubnetKey{IPv4: netip.MustParsePrefix("10.5.34.0/24")},
		Attrs: LeaseAttrs{PublicIP: netip.MustParseAddr("10.0.0.1"), BackendType: "host-gw"}, Value: `{"PublicIP":"10.0.0.1"}`, ModRevision: 5, LeaseID: 7, TTLSeconds: 100}
	b, err := json.Marshal(l)
	require.NoError(t, err)
	var back Lease
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, l, back)
}
