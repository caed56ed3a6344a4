package cidr

import "math/bits"

// indexSet is a set of subnet indices. Two representations exist: a dense
// bitmap for small pools, where a fixed few KiB beat any per-run bookkeeping,
// and runs in a treap for large pools, where memory must follow what is held.
type indexSet interface {
	has(x uint64) bool
	// nextAbsent returns the smallest index >= x not in the set (it may lie
	// past the pool's last index).
	nextAbsent(x uint64) uint64
	// add inserts [a,b] and returns how many indices were new.
	add(a, b uint64) uint64
	// remove deletes x and reports whether it was present.
	remove(x uint64) bool
	// runs returns how many runs of consecutive indices are held.
	runs() int
}

// denseLimit is the largest pool (in subnets) kept as a bitmap: 2^16 subnets
// cost 8 KiB, the size of kube-controller-manager's own bitmap for such a pool.
const denseLimit = 1 << 16

func newIndexSet(size uint64) indexSet {
	if size <= denseLimit {
		return &bitset{words: make([]uint64, (size+63)/64)}
	}
	s := newRunSet()
	return &s
}

// bitset is a dense bitmap of indices [0, 64*len(words)).
type bitset struct{ words []uint64 }

func (s *bitset) has(x uint64) bool {
	w := x >> 6
	return w < uint64(len(s.words)) && s.words[w]&(1<<(x&63)) != 0
}

func (s *bitset) nextAbsent(x uint64) uint64 {
	for w := x >> 6; w < uint64(len(s.words)); w++ {
		free := ^s.words[w]
		if w == x>>6 {
			free &= ^uint64(0) << (x & 63)
		}
		if free != 0 {
			return w<<6 | uint64(bits.TrailingZeros64(free))
		}
	}
	if end := uint64(len(s.words)) << 6; x < end {
		return end
	}
	return x
}

func (s *bitset) add(a, b uint64) uint64 {
	added := uint64(0)
	for w := a >> 6; w <= b>>6 && w < uint64(len(s.words)); w++ {
		m := ^uint64(0)
		if w == a>>6 {
			m &= ^uint64(0) << (a & 63)
		}
		if w == b>>6 {
			m &= ^uint64(0) >> (63 - b&63)
		}
		added += uint64(bits.OnesCount64(m &^ s.words[w]))
		s.words[w] |= m
	}
	return added
}

func (s *bitset) remove(x uint64) bool {
	if !s.has(x) {
		return false
	}
	s.words[x>>6] &^= 1 << (x & 63)
	return true
}

func (s *bitset) runs() int {
	n := 0
	prev := uint64(0) // bit 63 of the previous word
	for _, w := range s.words {
		// A run starts at every set bit whose lower neighbour is clear.
		starts := w &^ (w<<1 | prev)
		n += bits.OnesCount64(starts)
		prev = w >> 63
	}
	return n
}
