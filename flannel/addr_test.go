package flannel

import (
	"math/big"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestIntAddrBounds: intAddr turns every value from zero to the family's
// largest address into an address, and refuses the values past either end.
func TestIntAddrBounds(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("fd00::")
	pow := func(n uint) *big.Int { return new(big.Int).Lsh(big.NewInt(1), n) }
	for _, tc := range []struct {
		v    *big.Int
		like netip.Addr
		want string // "" when it does not fit
	}{
		{big.NewInt(-1), v4, ""},
		{big.NewInt(0), v4, "0.0.0.0"},
		{new(big.Int).Sub(pow(32), big.NewInt(1)), v4, "255.255.255.255"},
		{pow(32), v4, ""},
		{big.NewInt(-1), v6, ""},
		{big.NewInt(0), v6, "::"},
		{new(big.Int).Sub(pow(128), big.NewInt(1)), v6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
		{pow(128), v6, ""},
	} {
		a, ok := intAddr(tc.v, tc.like)
		assert.Equal(t, tc.want != "", ok, "%s like %s", tc.v, tc.like)
		if ok {
			assert.Equal(t, tc.want, a.String())
		}
	}
}
