package peerbench

import (
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"

	"k8s.io/kubernetes/pkg/controller/nodeipam/ipam/cidrset"

	"github.com/cidrshift/cidrshift/cidr"
)

// allocator is the common face of both implementations in these workloads.
type allocator interface {
	next() (netip.Prefix, error)
	occupy(p netip.Prefix) error
	release(p netip.Prefix) error
}

type kcm struct{ s *cidrset.CidrSet }

func (k kcm) next() (netip.Prefix, error) {
	n, err := k.s.AllocateNext()
	if err != nil {
		return netip.Prefix{}, err
	}
	// Conversion without allocation, so the comparison charges cidrset only for its own work.
	a, _ := netip.AddrFromSlice(n.IP)
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), nil
}
func (k kcm) occupy(p netip.Prefix) error {
	return k.s.Occupy(toIPNet(p))
}
func (k kcm) release(p netip.Prefix) error { return k.s.Release(toIPNet(p)) }

type ours struct{ a *cidr.Allocator }

func (o ours) next() (netip.Prefix, error) { return o.a.AllocateNext() }
func (o ours) occupy(p netip.Prefix) error {
	if f := o.a.Occupy(p, ""); len(f) > 0 {
		return errors.New(f[0].Detail)
	}
	return nil
}
func (o ours) release(p netip.Prefix) error { return o.a.Release(p) }

func toIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

type impl struct {
	name string
	make func(tb testing.TB, parent netip.Prefix, bits int) allocator
}

var impls = []impl{
	{"impl=cidrset", func(tb testing.TB, parent netip.Prefix, bits int) allocator {
		s, err := cidrset.NewCIDRSet(toIPNet(parent), bits)
		if err != nil {
			tb.Fatal(err)
		}
		return kcm{s}
	}},
	{"impl=cidrshift", func(tb testing.TB, parent netip.Prefix, bits int) allocator {
		a, err := cidr.NewAllocator([]cidr.Pool{{Parent: parent, Bits: bits}}, cidr.AllocatorOptions{Order: cidr.OrderControllerManager})
		if err != nil {
			tb.Fatal(err)
		}
		return ours{a}
	}},
}

func allocateAll(b *testing.B, parent string, bits, n int) {
	p := netip.MustParsePrefix(parent)
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a := im.make(b, p, bits)
				for i := 0; i < n; i++ {
					if _, err := a.next(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkAllocateEvery24Of8: every /24 of 10.0.0.0/8, 65,536 subnets.
func BenchmarkAllocateEvery24Of8(b *testing.B) { allocateAll(b, "10.0.0.0/8", 24, 1<<16) }

// BenchmarkAllocateEvery64Of48: every /64 of an IPv6 /48, 65,536 subnets.
func BenchmarkAllocateEvery64Of48(b *testing.B) { allocateAll(b, "fd00:10:244::/48", 64, 1<<16) }

func scattered(n int, seed uint64) []netip.Prefix {
	rng := rand.New(rand.NewPCG(seed, seed))
	perm := rng.Perm(1 << 16)
	out := make([]netip.Prefix, n)
	for i := range out {
		v := perm[i]
		out[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(v >> 8), byte(v), 0}), 24)
	}
	return out
}

// BenchmarkOccupy5000Allocate1000: a restart with 5,000 existing nodes, then 1,000 joins.
func BenchmarkOccupy5000Allocate1000(b *testing.B) {
	parent := netip.MustParsePrefix("10.0.0.0/8")
	held := scattered(5000, 42)
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a := im.make(b, parent, 24)
				for _, p := range held {
					if err := a.occupy(p); err != nil {
						b.Fatal(err)
					}
				}
				for i := 0; i < 1000; i++ {
					if _, err := a.next(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkChurn: half of 10.0.0.0/8's /24s held; each op releases a random
// held subnet and allocates the next one (a node leaves, another joins), so
// the fill level stays at one half.
func BenchmarkChurn(b *testing.B) {
	parent := netip.MustParsePrefix("10.0.0.0/8")
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			held := scattered(1<<15, 7)
			a := im.make(b, parent, 24)
			for _, p := range held {
				if err := a.occupy(p); err != nil {
					b.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(3, 3))
			b.ReportAllocs()
			for b.Loop() {
				i := rng.IntN(len(held))
				if err := a.release(held[i]); err != nil {
					b.Fatal(err)
				}
				p, err := a.next()
				if err != nil {
					b.Fatal(err)
				}
				held[i] = p
			}
		})
	}
}

// TestCidrsetCannotDoTheseWorkloads records what kube-controller-manager's
// allocator refuses and cidrshift's handles.
func TestCidrsetCannotDoTheseWorkloads(t *testing.T) {
	_, err := cidrset.NewCIDRSet(toIPNet(netip.MustParsePrefix("2001:db8::/32")), 64)
	if !errors.Is(err, cidrset.ErrCIDRSetSubNetTooBig) {
		t.Fatalf("cidrset accepted an IPv6 /32 with /64 nodes: %v", err)
	}
	a, err := cidr.NewAllocator([]cidr.Pool{{Parent: netip.MustParsePrefix("2001:db8::/32"), Bits: 64}}, cidr.AllocatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := a.AllocateNext(); err != nil || p.String() != "2001:db8::/64" {
		t.Fatalf("AllocateNext = %v, %v", p, err)
	}
	// Mixed node masks: one allocator, two parents with different subnet sizes.
	m, err := cidr.NewAllocator([]cidr.Pool{
		{Parent: netip.MustParsePrefix("10.10.0.0/16"), Bits: 24},
		{Parent: netip.MustParsePrefix("10.20.0.0/16"), Bits: 26},
	}, cidr.AllocatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Free().String(); got != "1280" {
		t.Fatalf("mixed masks free = %s, want 256+1024", got)
	}
}
