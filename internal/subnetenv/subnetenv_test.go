package subnetenv

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRender(t *testing.T) {
	const file = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
	e, err := Parse([]byte(file))
	require.NoError(t, err)
	assert.Equal(t, &Env{Network: netip.MustParsePrefix("10.244.0.0/16"), Subnet: netip.MustParsePrefix("10.244.3.1/24"), MTU: 1450, IPMasq: true}, e)
	assert.Equal(t, file, string(e.Render()))
}

func TestParseErrors(t *testing.T) {
	_, err := Parse([]byte("FLANNEL_NETWORK=10.0.0.0/8\n\nFLANNEL_SUBNET=10.1.2.1\n"))
	var pe *Error
	require.True(t, errors.As(err, &pe))
	assert.Equal(t, 3, pe.Line)
	assert.Equal(t, "FLANNEL_SUBNET=10.1.2.1", pe.Input)
	assert.Contains(t, err.Error(), "subnet.env line 3")

	_, err = Parse([]byte("FLANNEL_MTU=1450\n"))
	require.True(t, errors.As(err, &pe))
	assert.Equal(t, 0, pe.Line)
	assert.Contains(t, err.Error(), "neither FLANNEL_SUBNET nor FLANNEL_IPV6_SUBNET")
}

func TestGateway(t *testing.T) {
	assert.Equal(t, netip.MustParsePrefix("10.244.9.1/24"), Gateway(netip.MustParsePrefix("10.244.9.0/24")))
	assert.Equal(t, netip.MustParsePrefix("10.244.9.1/24"), Gateway(netip.MustParsePrefix("10.244.9.77/24")))
	assert.Equal(t, netip.Prefix{}, Gateway(netip.Prefix{}))
}

// FuzzParseSubnetEnv: never panics; accepted files name subnets of the right
// family, and Render's output parses back to the same file.
func FuzzParseSubnetEnv(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Parse(b)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if (e.Subnet.IsValid() && !e.Subnet.Addr().Is4()) || (e.IPv6Subnet.IsValid() && e.IPv6Subnet.Addr().Is4()) {
			t.Fatalf("wrong family: %+v", e)
		}
		r := e.Render()
		back, err := Parse(r)
		if err != nil {
			t.Fatalf("rendered file does not parse: %v\n%s", err, r)
		}
		if !bytes.Equal(back.Render(), r) {
			t.Fatalf("render is not stable:\n%s\n---\n%s", r, back.Render())
		}
	})
}
