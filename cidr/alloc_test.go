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

// allocateN allocates n subnets from a and returns them in order.
func allocateN(t *testing.T, a *Allocator, n int) []string {
	t.Helper()
	var got []string
	for i := 0; i < n; i++ {
		p, err := a.AllocateNext()
		require.NoError(t, err)
		got = append(got, p.String())
	}
	return got
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
	got := allocateN(t, a, 4)
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
		{[]Pool{{Parent: MustParse("fd00::/8"), Bits: 72}}, ErrOutOfRange, "cuts fd00::/8 into 2^64 /72 subnets"},
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

// The widest and narrowest pools NewAllocator documents are accepted: one
// subnet that is the whole parent, single addresses, and 2^MaxSubnetBits
// subnets (held in memory that follows what is allocated).
func TestNewAllocatorAcceptsTheEdgesOfItsRange(t *testing.T) {
	a := mustAlloc(t, "10.0.0.0/24", 24, OrderLowestFree)
	p, err := a.AllocateNext()
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.0/24", p.String())
	_, err = a.AllocateNext()
	assert.ErrorIs(t, err, ErrFull)

	a = mustAlloc(t, "10.0.0.0/30", 32, OrderLowestFree)
	assert.Equal(t, "4", a.Free().String())
	p, err = a.AllocateNext()
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.0/32", p.String())

	a = mustAlloc(t, "::/0", MaxSubnetBits, OrderControllerManager)
	assert.Equal(t, "9223372036854775808", a.Free().String())
	p, err = a.AllocateNext()
	require.NoError(t, err)
	assert.Equal(t, "::/63", p.String())
}

// IPv6 subnet offsets cross the 64-bit halves of the address: a subnet index
// shifted into the upper half (subnets of /64 or wider), or carried across it
// (subnets narrower than /64 whose parent is wider than /64).
func TestAllocatorIPv6SubnetsAcrossThe64BitHalves(t *testing.T) {
	a := mustAlloc(t, "2001:db8::/63", 65, OrderLowestFree)
	got := allocateN(t, a, 4)
	assert.Equal(t, []string{"2001:db8::/65", "2001:db8:0:0:8000::/65", "2001:db8:0:1::/65", "2001:db8:0:1:8000::/65"}, got)

	// Occupying an index whose offset lies in the upper half marks that index.
	a = mustAlloc(t, "2001:db8::/63", 65, OrderLowestFree)
	upper := MustParse("2001:db8:0:1:8000::/65")
	require.NoError(t, a.Allocate(upper, "n"))
	assert.True(t, a.Has(upper))
	assert.False(t, a.Has(MustParse("2001:db8::/65")))
	got = allocateN(t, a, 3)
	assert.Equal(t, []string{"2001:db8::/65", "2001:db8:0:0:8000::/65", "2001:db8:0:1::/65"}, got)
	_, err := a.AllocateNext()
	assert.ErrorIs(t, err, ErrFull)

	a = mustAlloc(t, "2001:db8::/46", 48, OrderLowestFree)
	got = allocateN(t, a, 4)
	assert.Equal(t, []string{"2001:db8::/48", "2001:db8:1::/48", "2001:db8:2::/48", "2001:db8:3::/48"}, got)
}

// A pool of up to denseLimit subnets is a bitmap of exactly the words it
// needs (2^16 subnets: 8 KiB, as kube-controller-manager's); a larger one is
// a run set, whose memory follows what is held.
func TestIndexSetMemoryFollowsThePoolSize(t *testing.T) {
	for _, tc := range []struct {
		size  uint64
		words int
	}{{1, 1}, {64, 1}, {65, 2}, {100, 2}, {denseLimit, denseLimit / 64}} {
		s, ok := newIndexSet(tc.size).(*bitset)
		require.True(t, ok, "size %d", tc.size)
		assert.Len(t, s.words, tc.words, "size %d", tc.size)
	}
	_, ok := newIndexSet(denseLimit + 1).(*runSet)
	assert.True(t, ok)
}

// A bitmap holds indices [0, 64*len(words)): indices past them are absent and
// an add reaching past them adds only what fits.
func TestBitsetIgnoresIndicesPastItsWords(t *testing.T) {
	s := &bitset{words: make([]uint64, 1)}
	assert.Equal(t, uint64(4), s.add(60, 200))
	assert.True(t, s.has(63))
	assert.False(t, s.has(64))
	assert.False(t, s.has(1000))
	assert.Equal(t, uint64(64), s.nextAbsent(60))
	assert.Equal(t, 1, s.runs())
}

// The run set stays a balanced treap when runs arrive in order (a cluster
// allocated node by node, with gaps): every operation is O(log runs).
func TestRunSetStaysBalancedForRunsAddedInOrder(t *testing.T) {
	s := newRunSet()
	const n = 4096
	for i := uint64(0); i < n; i++ {
		require.Equal(t, uint64(1), s.add(2*i, 2*i))
	}
	require.Equal(t, n, s.runs())
	var depth func(int32) int
	depth = func(x int32) int {
		if x == nilNode {
			return 0
		}
		return 1 + max(depth(s.nodes[x].left), depth(s.nodes[x].right))
	}
	// log2(4096) = 12; a treap's expected depth is about 2.5 times that.
	assert.Less(t, depth(s.root), 60)
}
