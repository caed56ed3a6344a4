package flannel

import (
	"math/big"
	"net/netip"
)

// addrInt returns a as an unsigned integer.
func addrInt(a netip.Addr) *big.Int {
	if a.Is4() {
		b := a.As4()
		return new(big.Int).SetBytes(b[:])
	}
	b := a.As16()
	return new(big.Int).SetBytes(b[:])
}

// intAddr returns the address of family like (IPv4 or IPv6) with value v, and
// false when v does not fit.
func intAddr(v *big.Int, like netip.Addr) (netip.Addr, bool) {
	if v.Sign() < 0 {
		return netip.Addr{}, false
	}
	if like.Is4() {
		if v.BitLen() > 32 {
			return netip.Addr{}, false
		}
		var b [4]byte
		v.FillBytes(b[:])
		return netip.AddrFrom4(b), true
	}
	if v.BitLen() > 128 {
		return netip.Addr{}, false
	}
	var b [16]byte
	v.FillBytes(b[:])
	return netip.AddrFrom16(b), true
}

// subnetSize returns 2^(bits-len): how many addresses a /len subnet holds.
func subnetSize(bits, length int) *big.Int {
	return new(big.Int).Lsh(big.NewInt(1), uint(bits-length))
}

// overlaps reports whether a and b share an address (same family only).
func overlaps(a, b netip.Prefix) bool {
	return a.IsValid() && b.IsValid() && a.Addr().Is4() == b.Addr().Is4() && a.Masked().Overlaps(b.Masked())
}

// rangeCount returns how many /length subnets start in [lo, hi] when both are
// aligned, and zero when hi < lo.
func rangeCount(lo, hi netip.Addr, length int) *big.Int {
	l, h := addrInt(lo), addrInt(hi)
	if h.Cmp(l) < 0 {
		return new(big.Int)
	}
	d := new(big.Int).Sub(h, l)
	d.Rsh(d, uint(lo.BitLen()-length))
	return d.Add(d, big.NewInt(1))
}
