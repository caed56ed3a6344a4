package cidr

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRebase(t *testing.T) {
	got, err := Rebase(MustParse("10.10.1.0/24"), MustParse("10.10.0.0/18"), MustParse("10.20.0.0/16"))
	require.NoError(t, err)
	assert.Equal(t, "10.20.1.0/24", got.String())

	got, err = Rebase(MustParse("fd00:1:0:5::/64"), MustParse("fd00:1::/48"), MustParse("fd00:2::/48"))
	require.NoError(t, err)
	assert.Equal(t, "fd00:2:0:5::/64", got.String())

	_, err = Rebase(MustParse("10.10.65.0/24"), MustParse("10.10.0.0/16"), MustParse("10.20.0.0/18"))
	assert.ErrorIs(t, err, ErrOutOfRange)
	assert.EqualError(t, err, "out of range: 10.10.65.0/24 is at offset 16640 of 10.10.0.0/16, but 10.20.0.0/18 holds only 16384 addresses")

	_, err = Rebase(MustParse("10.11.0.0/24"), MustParse("10.10.0.0/16"), MustParse("10.20.0.0/16"))
	assert.EqualError(t, err, "out of range: 10.11.0.0/24 is not inside 10.10.0.0/16")

	_, err = Rebase(MustParse("10.10.0.0/16"), MustParse("10.10.0.0/16"), MustParse("10.20.0.0/18"))
	assert.EqualError(t, err, "out of range: 10.10.0.0/16 is wider than the new range 10.20.0.0/18")

	_, err = Rebase(MustParse("10.0.0.0/8"), MustParse("10.10.0.0/16"), MustParse("10.20.0.0/16"))
	assert.ErrorIs(t, err, ErrOutOfRange)

	_, err = Rebase(MustParse("10.10.1.0/24"), MustParse("10.10.0.0/16"), MustParse("fd00::/48"))
	assert.ErrorIs(t, err, ErrFamily)

	_, err = Rebase(netip.Prefix{}, MustParse("10.10.0.0/16"), MustParse("10.20.0.0/16"))
	assert.ErrorIs(t, err, ErrEmpty)
}

func TestRebaseAddr(t *testing.T) {
	got, err := RebaseAddr(netip.MustParseAddr("100.64.0.10"), MustParse("100.64.0.0/13"), MustParse("172.24.0.0/15"))
	require.NoError(t, err)
	assert.Equal(t, "172.24.0.10", got.String())

	_, err = RebaseAddr(netip.MustParseAddr("100.70.0.10"), MustParse("100.64.0.0/13"), MustParse("172.24.0.0/15"))
	assert.ErrorIs(t, err, ErrOutOfRange)
	assert.Contains(t, err.Error(), "100.70.0.10 is at offset 393226 of 100.64.0.0/13, but 172.24.0.0/15 holds only 131072 addresses")

	_, err = RebaseAddr(netip.MustParseAddr("10.0.0.1"), MustParse("100.64.0.0/13"), MustParse("172.24.0.0/15"))
	assert.EqualError(t, err, "out of range: 10.0.0.1 is not inside 100.64.0.0/13")

	_, err = RebaseAddr(netip.Addr{}, MustParse("100.64.0.0/13"), MustParse("172.24.0.0/15"))
	assert.ErrorIs(t, err, ErrEmpty)
	_, err = RebaseAddr(netip.MustParseAddr("10.0.0.1"), netip.Prefix{}, MustParse("172.24.0.0/15"))
	assert.ErrorContains(t, err, "from: empty CIDR")
	_, err = RebaseAddr(netip.MustParseAddr("10.0.0.1"), MustParse("10.0.0.0/8"), netip.Prefix{})
	assert.ErrorContains(t, err, "to: empty CIDR")
}

// A subnet exactly as wide as the new range rebases onto all of it.
func TestRebaseSubnetAsWideAsTheNewRange(t *testing.T) {
	got, err := Rebase(MustParse("10.10.0.0/16"), MustParse("10.10.0.0/16"), MustParse("10.20.0.0/16"))
	require.NoError(t, err)
	assert.Equal(t, "10.20.0.0/16", got.String())
}
