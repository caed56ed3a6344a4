package cidr

import (
	"math/big"
	"math/bits"
	"net/netip"
)

// u128 is an unsigned 128-bit integer used for address arithmetic, so no
// IPv6 range is too large to count or offset.
type u128 struct{ hi, lo uint64 }

func addrToU128(a netip.Addr) u128 {
	b := a.As16()
	var hi, lo uint64
	for i := 0; i < 8; i++ {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[i+8])
	}
	if a.Is4() {
		return u128{0, lo & 0xffffffff}
	}
	return u128{hi, lo}
}

func u128ToAddr(v u128, is4 bool) netip.Addr {
	if is4 {
		x := uint32(v.lo)
		return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
	}
	var b [16]byte
	for i := 0; i < 8; i++ {
		b[7-i] = byte(v.hi >> (8 * i))
		b[15-i] = byte(v.lo >> (8 * i))
	}
	return netip.AddrFrom16(b)
}

func (a u128) add(b u128) (u128, bool) {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	hi, c2 := bits.Add64(a.hi, b.hi, c)
	return u128{hi, lo}, c2 != 0
}

func (a u128) sub(b u128) u128 {
	lo, br := bits.Sub64(a.lo, b.lo, 0)
	hi, _ := bits.Sub64(a.hi, b.hi, br)
	return u128{hi, lo}
}

// shl returns v << n for n in [0,128).
func shl64(v uint64, n uint) u128 {
	switch {
	case n == 0:
		return u128{0, v}
	case n >= 64:
		return u128{v << (n - 64), 0}
	default:
		return u128{v >> (64 - n), v << n}
	}
}

// shr returns a >> n for n in [0,128].
func (a u128) shr(n uint) u128 {
	switch {
	case n == 0:
		return a
	case n >= 128:
		return u128{}
	case n >= 64:
		return u128{0, a.hi >> (n - 64)}
	default:
		return u128{a.hi >> n, a.lo>>n | a.hi<<(64-n)}
	}
}

func (a u128) isZero() bool { return a.hi == 0 && a.lo == 0 }

func (a u128) big() *big.Int {
	v := new(big.Int).SetUint64(a.hi)
	v.Lsh(v, 64)
	return v.Or(v, new(big.Int).SetUint64(a.lo))
}

// pow2 returns 2^n as a big.Int.
func pow2(n int) *big.Int { return new(big.Int).Lsh(big.NewInt(1), uint(n)) }

// pow2Minus returns max(0, 2^n - k).
func pow2Minus(n int, k int64) *big.Int {
	v := pow2(n)
	v.Sub(v, big.NewInt(k))
	if v.Sign() < 0 {
		v.SetInt64(0)
	}
	return v
}
