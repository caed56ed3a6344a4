package cidr

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustAlloc(t testing.TB, parent string, bits int, order Order) *Allocator {
	t.Helper()
	a, err := NewAllocator([]Pool{{Parent: MustParse(parent), Bits: bits}}, AllocatorOptions{Order: order})
	require.NoError(t, err)
	return a
}

func TestAllocatorBasics(t *testing.T) {
	a := mustAlloc(t, "10.10.0.0/22", 24, OrderLowestFree)
	assert.Equal(t, "4", a.Free().String())
	for _, want := range []string{"10.10.0.0/24", "10.10.1.0/24", "10.10.2.0/24", "10.10.3.0/24"} {
		got, err := a.AllocateNext()
		require.NoError(t, err)
		assert.Equal(t, want, got.String())
	}
	_, err := a.AllocateNext()
	assert.ErrorIs(t, err, ErrFull)
	assert.EqualError(t, err, "no free subnet left in 10.10.0.0/22")
	require.NoError(t, a.Release(MustParse("10.10.1.0/24")))
	assert.Equal(t, "1", a.Free().String())
	assert.ErrorIs(t, a.Release(MustParse("10.10.1.0/24")), ErrNotHeld)
	got, err := a.AllocateNext()
	require.NoError(t, err)
	assert.Equal(t, "10.10.1.0/24", got.String())
	assert.Equal(t, "4", a.Held().String())
	assert.Equal(t, 1, a.Runs(), "consecutive subnets collapse into one run")
}

func TestAllocatorControllerManagerOrder(t *testing.T) {
	// After a restart kube-controller-manager hands out the lowest free index,
	// then continues round-robin past its last allocation.
	a := mustAlloc(t, "10.0.0.0/16", 24, OrderControllerManager)
	for _, held := range []string{"10.0.0.0/24", "10.0.1.0/24", "10.0.3.0/24"} {
		assert.Empty(t, a.Occupy(MustParse(held), ""))
	}
	next := func() string {
		p, err := a.AllocateNext()
		require.NoError(t, err)
		return p.String()
	}
	assert.Equal(t, "10.0.2.0/24", next())
	assert.Equal(t, "10.0.4.0/24", next())
	require.NoError(t, a.Release(MustParse("10.0.2.0/24")))
	assert.Equal(t, "10.0.5.0/24", next(), "release does not move the cursor back")

	// The lowest-free order would reuse the hole at once.
	b := mustAlloc(t, "10.0.0.0/16", 24, OrderLowestFree)
	for i := 0; i < 5; i++ {
		_, _ = b.AllocateNext()
	}
	require.NoError(t, b.Release(MustParse("10.0.2.0/24")))
	p, _ := b.AllocateNext()
	assert.Equal(t, "10.0.2.0/24", p.String())

	// The cursor wraps around.
	c := mustAlloc(t, "10.0.0.0/23", 24, OrderControllerManager)
	p0, _ := c.AllocateNext()
	p1, _ := c.AllocateNext()
	require.NoError(t, c.Release(p0))
	p2, err := c.AllocateNext()
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.0/24", "10.0.1.0/24", "10.0.0.0/24"}, []string{p0.String(), p1.String(), p2.String()})
}

// cidrsetModel is kube-controller-manager's cidrset reduced to its
// allocation logic: a bitmap scanned from a cursor.
type cidrsetModel struct {
	used []bool
	next int
	n    int
}

func (m *cidrsetModel) allocate() int {
	if m.n == len(m.used) {
		return -1
	}
	c := m.next
	for m.used[c] {
		c = (c + 1) % len(m.used)
	}
	m.next = (c + 1) % len(m.used)
	m.used[c] = true
	m.n++
	return c
}

func TestAllocatorMatchesCidrsetModel(t *testing.T) {
	// Both representations: a bitmap pool (256 subnets) and a runs pool (2^17).
	for _, tc := range []struct {
		parent string
		bits   int
		size   int
	}{{"10.0.0.0/16", 24, 256}, {"10.0.0.0/8", 25, 1 << 17}} {
		t.Run(tc.parent, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			a := mustAlloc(t, tc.parent, tc.bits, OrderControllerManager)
			m := &cidrsetModel{used: make([]bool, tc.size)}
			base := addrToU128(MustParse(tc.parent).Addr())
			sub := func(i int) netip.Prefix {
				v, _ := base.add(shl64(uint64(i), uint(32-tc.bits)))
				return netip.PrefixFrom(u128ToAddr(v, true), tc.bits)
			}
			if tc.size > 256 {
				// Fill most of the range with one wide Occupy, leaving holes, so
				// the cursor wraps within the test.
				a.Occupy(MustParse(tc.parent), "")
				for i := range m.used {
					m.used[i] = true
				}
				m.n = tc.size
				for i := 0; i < 300; i++ {
					j := rng.IntN(tc.size)
					if m.used[j] {
						require.NoError(t, a.Release(sub(j)))
						m.used[j] = false
						m.n--
					}
				}
			}
			for step := 0; step < 20000; step++ {
				switch op := rng.IntN(10); {
				case op < 5:
					want := m.allocate()
					got, err := a.AllocateNext()
					if want < 0 {
						require.ErrorIs(t, err, ErrFull)
						continue
					}
					require.NoError(t, err)
					require.Equal(t, sub(want), got, "step %d", step)
				case op < 8:
					i := rng.IntN(tc.size)
					err := a.Release(sub(i))
					if m.used[i] {
						require.NoError(t, err)
						m.used[i] = false
						m.n--
					} else {
						require.ErrorIs(t, err, ErrNotHeld)
					}
				default:
					i := rng.IntN(tc.size)
					findings := a.Occupy(sub(i), "")
					if m.used[i] {
						require.Len(t, findings, 1)
						require.Equal(t, FindingOccupied, findings[0].Kind)
					} else {
						require.Empty(t, findings)
						m.used[i] = true
						m.n++
					}
				}
				require.Equal(t, fmt.Sprint(tc.size-m.n), a.Free().String())
				if step%4999 == 0 {
					for i := 0; i < tc.size; i++ {
						require.Equal(t, m.used[i], a.Has(sub(i)), "index %d at step %d", i, step)
					}
				}
			}
		})
	}
}

func TestAllocatorOccupyFindings(t *testing.T) {
	a := mustAlloc(t, "10.244.0.0/16", 24, OrderLowestFree)
	assert.Empty(t, a.Occupy(MustParse("10.244.5.0/24"), "node-a"))
	f := a.Occupy(MustParse("10.244.5.0/24"), "node-b")
	require.Len(t, f, 1)
	assert.Equal(t, FindingOccupied, f[0].Kind)
	assert.Equal(t, "node-a", f[0].HeldBy)
	assert.Equal(t, "10.244.5.0/24 is already held by node-a", f[0].Detail)

	f = a.Occupy(MustParse("10.10.0.0/24"), "node-c")
	require.Len(t, f, 1)
	assert.Equal(t, FindingOutOfRange, f[0].Kind)
	assert.Equal(t, "10.10.0.0/24 is outside 10.244.0.0/16", f[0].Detail)

	// A wider prefix holds every subnet it covers, as kube-controller-manager does
	// with a Service CIDR inside the cluster CIDR.
	f = a.Occupy(MustParse("10.244.4.0/22"), "")
	require.Len(t, f, 2)
	assert.Equal(t, FindingMaskMismatch, f[0].Kind)
	assert.Equal(t, FindingOccupied, f[1].Kind)
	assert.Equal(t, "1 of the 4 subnets of 10.244.4.0/22 were already held", f[1].Detail)
	assert.Equal(t, "4", a.Held().String())

	// A narrower one holds its containing subnet.
	f = a.Occupy(MustParse("10.244.9.128/25"), "x")
	require.Len(t, f, 1)
	assert.Equal(t, FindingMaskMismatch, f[0].Kind)
	assert.True(t, a.Has(MustParse("10.244.9.0/24")))

	// A prefix wider than the pool holds it all.
	a.Occupy(MustParse("10.0.0.0/8"), "")
	assert.Equal(t, "0", a.Free().String())
}

func TestClusterAllocatorFiltersServiceRange(t *testing.T) {
	a, err := NewClusterAllocator(MustParse("10.233.0.0/16"), 24, MustParse("10.233.0.0/18"))
	require.NoError(t, err)
	assert.Equal(t, "192", a.Free().String())
	p, err := a.AllocateNext()
	require.NoError(t, err)
	assert.Equal(t, "10.233.64.0/24", p.String())
}

func TestAllocatorAllocateSpecific(t *testing.T) {
	a := mustAlloc(t, "10.244.0.0/16", 24, OrderLowestFree)
	require.NoError(t, a.Allocate(MustParse("10.244.7.0/24"), "n1"))
	err := a.Allocate(MustParse("10.244.7.0/24"), "n2")
	assert.ErrorIs(t, err, ErrOccupied)
	assert.EqualError(t, err, "subnet already occupied: 10.244.7.0/24 is held by n1")
	assert.ErrorIs(t, a.Allocate(MustParse("10.244.8.0/25"), ""), ErrMask)
	assert.ErrorIs(t, a.Allocate(MustParse("10.245.0.0/24"), ""), ErrOutOfRange)
	assert.ErrorIs(t, a.Allocate(netip.MustParsePrefix("10.244.0.1/24"), ""), ErrHostBitsSet)
	assert.ErrorIs(t, a.Allocate(netip.Prefix{}, ""), ErrEmpty)
	assert.ErrorIs(t, a.Release(MustParse("fd00::/64")), ErrOutOfRange)
}

func TestAllocatorMultiplePoolsAndMasks(t *testing.T) {
	a, err := NewAllocator([]Pool{
		{Parent: MustParse("10.10.0.0/23"), Bits: 24},
		{Parent: MustParse("10.20.0.0/16"), Bits: 20},
	}, AllocatorOptions{})
	require.NoError(t, err)
	var got []string
	for i := 0; i < 4; i++ {
		p, err := a.AllocateNext()
		require.NoError(t, err)
		got = append(got, p.String())
	}
	assert.Equal(t, []string{"10.10.0.0/24", "10.10.1.0/24", "10.20.0.0/20", "10.20.16.0/20"}, got)
	assert.Equal(t, "14", a.Free().String())
}

func TestNewAllocatorErrors(t *testing.T) {
	tests := []struct {
		pools []Pool
		err   error
		msg   string
	}{
		{nil, ErrOutOfRange, "needs at least one parent range"},
		{[]Pool{{Bits: 24}}, ErrEmpty, "pools[0].Parent: empty CIDR"},
		{[]Pool{{Parent: netip.MustParsePrefix("10.0.0.1/16"), Bits: 24}}, ErrHostBitsSet, "10.0.0.1/16 has host bits set; the network is 10.0.0.0/16"},
		{[]Pool{{Parent: MustParse("10.0.0.0/16"), Bits: 8}}, ErrMask, "pools[0].Bits=8 for parent 10.0.0.0/16: want 16 to 32"},
		{[]Pool{{Parent: MustParse("10.0.0.0/16"), Bits: 24}, {Parent: MustParse("fd00::/48"), Bits: 64}}, ErrFamily, "use one allocator per family"},
		{[]Pool{{Parent: MustParse("10.0.0.0/16"), Bits: 24}, {Parent: MustParse("10.0.128.0/17"), Bits: 24}}, ErrOccupied, "overlaps"},
		{[]Pool{{Parent: MustParse("::/0"), Bits: 64}}, ErrOutOfRange, "into 2^64 /64 subnets; the allocator handles at most 2^63"},
	}
	for _, tt := range tests {
		_, err := NewAllocator(tt.pools, AllocatorOptions{})
		assert.ErrorIs(t, err, tt.err)
		assert.ErrorContains(t, err, tt.msg)
	}
}

func TestAllocatorHugeIPv6(t *testing.T) {
	// kube-controller-manager refuses an IPv6 /32 with /64 nodes; this allocator
	// handles it in memory proportional to what is held.
	a := mustAlloc(t, "2001:db8::/32", 64, OrderControllerManager)
	assert.Equal(t, "4294967296", a.Free().String())
	p, err := a.AllocateNext()
	require.NoError(t, err)
	assert.Equal(t, "2001:db8::/64", p.String())
	last := MustParse("2001:db8:ffff:ffff::/64")
	assert.Empty(t, a.Occupy(last, "n"))
	require.NoError(t, a.Allocate(MustParse("2001:db8:1234:5678::/64"), ""))
	assert.Equal(t, 3, a.Runs())
	assert.Equal(t, "4294967293", a.Free().String())
	require.NoError(t, a.Release(last))
	assert.False(t, a.Has(last))
}

func TestIndexSetsRandomAgainstMap(t *testing.T) {
	const space = 300
	rs := newRunSet()
	for name, set := range map[string]indexSet{"runs": &rs, "bitmap": &bitset{words: make([]uint64, 5)}} {
		t.Run(name, func(t *testing.T) {
			testIndexSet(t, set, space)
		})
	}
}

func testIndexSet(t *testing.T, s indexSet, space uint64) {
	rng := rand.New(rand.NewPCG(7, 9))
	model := map[uint64]bool{}
	for step := 0; step < 30000; step++ {
		switch rng.IntN(3) {
		case 0:
			a := rng.Uint64N(space)
			b := a + uint64(rng.IntN(70))
			if b >= space {
				b = space - 1
			}
			want := uint64(0)
			for i := a; i <= b; i++ {
				if !model[i] {
					want++
					model[i] = true
				}
			}
			require.Equal(t, want, s.add(a, b), "add %d-%d", a, b)
		case 1:
			x := rng.Uint64N(space)
			require.Equal(t, model[x], s.remove(x))
			delete(model, x)
		default:
			x := rng.Uint64N(space)
			want := x
			for model[want] {
				want++
			}
			require.Equal(t, want, s.nextAbsent(x))
		}
		if step%500 == 0 {
			runs := 0
			for i := uint64(0); i < space; i++ {
				require.Equal(t, model[i], s.has(i))
				if model[i] && (i == 0 || !model[i-1]) {
					runs++
				}
			}
			require.Equal(t, runs, s.runs())
		}
	}
	if rs, ok := s.(*runSet); ok {
		// Runs stay maximal and sorted.
		var prevHi uint64
		first := true
		rs.walk(rs.root, func(n *runNode) {
			require.LessOrEqual(t, n.lo, n.hi)
			if !first {
				require.Greater(t, n.lo, prevHi+1, "runs must be maximal")
			}
			first = false
			prevHi = n.hi
		})
	}
}
