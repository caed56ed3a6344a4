package cidr

import (
	"fmt"
	"net/netip"
)

// RebaseAddr maps addr, which must lie in from, to the address at the same
// offset in to: 100.64.0.10 in 100.64.0.0/13 becomes 172.24.0.10 in
// 172.24.0.0/15. It fails with ErrOutOfRange when addr is outside from or to
// is too small to hold the offset, and with ErrFamily across families.
func RebaseAddr(addr netip.Addr, from, to netip.Prefix) (netip.Addr, error) {
	off, err := offsetIn(addr, from, to)
	if err != nil {
		return netip.Addr{}, err
	}
	if err := fitsIn(off, addr.String(), from, to); err != nil {
		return netip.Addr{}, err
	}
	v, _ := addrToU128(to.Masked().Addr()).add(off)
	return u128ToAddr(v, to.Addr().Is4()), nil
}

// Rebase maps subnet, which must lie in from, to the subnet at the same offset
// in to: 10.10.1.0/24 in 10.10.0.0/18 becomes 10.20.1.0/24 in 10.20.0.0/16.
// The whole subnet must fit in to.
func Rebase(subnet, from, to netip.Prefix) (netip.Prefix, error) {
	if !subnet.IsValid() {
		return netip.Prefix{}, &ParseError{Field: "subnet", Err: ErrEmpty}
	}
	subnet = subnet.Masked()
	if from.IsValid() && FamilyOf(from) == FamilyOf(subnet) && !contains(from.Masked(), subnet) {
		return netip.Prefix{}, fmt.Errorf("%w: %s is not inside %s", ErrOutOfRange, subnet, from.Masked())
	}
	off, err := offsetIn(subnet.Addr(), from, to)
	if err != nil {
		return netip.Prefix{}, err
	}
	if subnet.Bits() < to.Bits() {
		return netip.Prefix{}, fmt.Errorf("%w: %s is wider than the new range %s", ErrOutOfRange, subnet, to.Masked())
	}
	if err := fitsIn(off, subnet.String(), from, to); err != nil {
		return netip.Prefix{}, err
	}
	v, _ := addrToU128(to.Masked().Addr()).add(off)
	return netip.PrefixFrom(u128ToAddr(v, to.Addr().Is4()), subnet.Bits()), nil
}

func offsetIn(addr netip.Addr, from, to netip.Prefix) (u128, error) {
	switch {
	case !addr.IsValid():
		return u128{}, &ParseError{Field: "address", Err: ErrEmpty}
	case !from.IsValid():
		return u128{}, &ParseError{Field: "from", Err: ErrEmpty}
	case !to.IsValid():
		return u128{}, &ParseError{Field: "to", Err: ErrEmpty}
	case addr.BitLen() != from.Addr().BitLen() || addr.BitLen() != to.Addr().BitLen():
		return u128{}, fmt.Errorf("%w: cannot rebase %s from %s to %s", ErrFamily, addr, from, to)
	case !from.Masked().Contains(addr):
		return u128{}, fmt.Errorf("%w: %s is not inside %s", ErrOutOfRange, addr, from.Masked())
	}
	return addrToU128(addr).sub(addrToU128(from.Masked().Addr())), nil
}

// fitsIn checks that offset off lies inside to. Callers pass offsets of
// subnets no wider than to and aligned to their size, so the whole subnet fits.
func fitsIn(off u128, what string, from, to netip.Prefix) error {
	host := uint(to.Addr().BitLen() - to.Bits())
	if off.shr(host).isZero() {
		return nil
	}
	return fmt.Errorf("%w: %s is at offset %s of %s, but %s holds only %s addresses",
		ErrOutOfRange, what, off.big(), from.Masked(), to.Masked(), pow2(int(host)))
}
