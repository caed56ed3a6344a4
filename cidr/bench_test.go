package cidr

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// Workloads shared with the side-by-side comparison against
// kube-controller-manager's cidrset in the e2e module's benchmarks.

// BenchmarkAllocateEvery24Of8 allocates every /24 of 10.0.0.0/8 (65,536 subnets).
func BenchmarkAllocateEvery24Of8(b *testing.B) {
	parent := MustParse("10.0.0.0/8")
	b.ReportAllocs()
	for b.Loop() {
		a, _ := NewAllocator([]Pool{{Parent: parent, Bits: 24}}, AllocatorOptions{Order: OrderControllerManager})
		for i := 0; i < 1<<16; i++ {
			if _, err := a.AllocateNext(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkAllocateEvery64Of48 allocates every /64 of an IPv6 /48 (65,536 subnets).
func BenchmarkAllocateEvery64Of48(b *testing.B) {
	parent := MustParse("fd00:10:244::/48")
	b.ReportAllocs()
	for b.Loop() {
		a, _ := NewAllocator([]Pool{{Parent: parent, Bits: 64}}, AllocatorOptions{Order: OrderControllerManager})
		for i := 0; i < 1<<16; i++ {
			if _, err := a.AllocateNext(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// ScatteredSubnets returns n distinct /24s of 10.0.0.0/8 in a fixed random order.
func scatteredSubnets(n int) []netip.Prefix {
	rng := rand.New(rand.NewPCG(42, 42))
	perm := rng.Perm(1 << 16)
	out := make([]netip.Prefix, n)
	for i := range out {
		v := perm[i]
		out[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(v >> 8), byte(v), 0}), 24)
	}
	return out
}

// BenchmarkOccupy5000Allocate1000 occupies 5,000 scattered subnets (a
// restart with existing nodes), then allocates 1,000 more.
func BenchmarkOccupy5000Allocate1000(b *testing.B) {
	parent := MustParse("10.0.0.0/8")
	held := scatteredSubnets(5000)
	b.ReportAllocs()
	for b.Loop() {
		a, _ := NewAllocator([]Pool{{Parent: parent, Bits: 24}}, AllocatorOptions{Order: OrderControllerManager})
		for _, p := range held {
			a.Occupy(p, "")
		}
		for i := 0; i < 1000; i++ {
			if _, err := a.AllocateNext(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkHeldSetGrowth measures one Allocate+Release pair on an IPv6 /32
// with /64 subnets (which kube-controller-manager refuses) as the number of
// scattered held subnets grows: cost should grow like log n.
func BenchmarkHeldSetGrowth(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			a, _ := NewAllocator([]Pool{{Parent: MustParse("2001:db8::/32"), Bits: 64}}, AllocatorOptions{})
			rng := rand.New(rand.NewPCG(1, uint64(n)))
			sub := func(i uint32) netip.Prefix {
				return netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}), 64)
			}
			for i := 0; i < n; i++ {
				a.Occupy(sub(rng.Uint32()|1), "") // odd indices: every held subnet is its own run
			}
			b.ReportAllocs()
			for b.Loop() {
				p := sub(rng.Uint32() &^ 1)
				if err := a.Allocate(p, ""); err != nil {
					b.Fatal(err)
				}
				if err := a.Release(p); err != nil {
					b.Fatal(err)
				}
			}
			// After the loop: b.Loop's first call resets the timer and metrics.
			b.ReportMetric(float64(a.Runs()), "runs")
		})
	}
}
