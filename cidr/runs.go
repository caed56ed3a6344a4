package cidr

// runSet is a set of uint64 indices stored as maximal runs [lo,hi] in a treap
// keyed by lo. Memory is proportional to the number of runs, never to the size
// of the index space, and every operation is O(log runs) expected. Nodes live
// in one slice and refer to each other by index, so the set allocates only
// when the slice grows.
type runSet struct {
	nodes []runNode
	root  int32
	free  []int32
	seed  uint64
}

type runNode struct {
	lo, hi      uint64
	left, right int32
	prio        uint32
}

const nilNode int32 = -1

func newRunSet() runSet { return runSet{root: nilNode, seed: 0x9e3779b97f4a7c15} }

func (t *runSet) rand() uint32 {
	// xorshift64*: deterministic, so runs are reproducible.
	t.seed ^= t.seed >> 12
	t.seed ^= t.seed << 25
	t.seed ^= t.seed >> 27
	return uint32((t.seed * 2685821657736338717) >> 32)
}

func (t *runSet) newNode(lo, hi uint64) int32 {
	n := runNode{lo: lo, hi: hi, left: nilNode, right: nilNode, prio: t.rand()}
	if k := len(t.free); k > 0 {
		i := t.free[k-1]
		t.free = t.free[:k-1]
		t.nodes[i] = n
		return i
	}
	t.nodes = append(t.nodes, n)
	return int32(len(t.nodes) - 1)
}

// split splits tree n into keys < key and keys >= key.
func (t *runSet) split(n int32, key uint64) (int32, int32) {
	if n == nilNode {
		return nilNode, nilNode
	}
	nd := &t.nodes[n]
	if nd.lo < key {
		l, r := t.split(nd.right, key)
		t.nodes[n].right = l
		return n, r
	}
	l, r := t.split(nd.left, key)
	t.nodes[n].left = r
	return l, n
}

// merge joins a and b where every key of a is below every key of b.
func (t *runSet) merge(a, b int32) int32 {
	if a == nilNode {
		return b
	}
	if b == nilNode {
		return a
	}
	if t.nodes[a].prio > t.nodes[b].prio {
		t.nodes[a].right = t.merge(t.nodes[a].right, b)
		return a
	}
	t.nodes[b].left = t.merge(a, t.nodes[b].left)
	return b
}

// floor returns the node with the largest lo <= x.
func (t *runSet) floor(x uint64) int32 {
	best := nilNode
	for n := t.root; n != nilNode; {
		if t.nodes[n].lo <= x {
			best = n
			n = t.nodes[n].right
		} else {
			n = t.nodes[n].left
		}
	}
	return best
}

// has reports whether x is in the set.
func (t *runSet) has(x uint64) bool {
	f := t.floor(x)
	return f != nilNode && t.nodes[f].hi >= x
}

// nextAbsent returns the smallest index >= x that is not in the set. Runs are
// maximal, so the index after the run holding x is always absent.
func (t *runSet) nextAbsent(x uint64) uint64 {
	if f := t.floor(x); f != nilNode && t.nodes[f].hi >= x {
		return t.nodes[f].hi + 1
	}
	return x
}

// add inserts [a,b] (a <= b < 2^63) and returns how many indices were new.
func (t *runSet) add(a, b uint64) uint64 {
	// Fast path: extend the run just below a (sequential allocation).
	if f := t.floor(a); f != nilNode {
		nd := &t.nodes[f]
		if nd.hi >= b {
			return 0
		}
		if nd.hi+1 >= a {
			// Does the extension reach the next run? Only then fall through.
			if s := t.floor(b + 1); s == f {
				added := b - nd.hi
				nd.hi = b
				return added
			}
		}
	}
	left, rest := t.split(t.root, a)
	mid, right := t.split(rest, b+2)
	lo, hi := a, b
	covered := uint64(0)
	// Every run in mid starts within [a, b+1]: it overlaps or touches [a,b].
	t.walk(mid, func(n *runNode) {
		covered += overlapLen(n.lo, n.hi, a, b)
		if n.hi > hi {
			hi = n.hi
		}
	})
	t.release(mid)
	// Only the last run of left can reach into or touch [a,b].
	if m := t.maxNode(left); m != nilNode && t.nodes[m].hi+1 >= a {
		nd := &t.nodes[m]
		covered += overlapLen(nd.lo, nd.hi, a, b)
		if hi > nd.hi {
			nd.hi = hi
		}
		t.root = t.merge(left, right)
		return (b - a + 1) - covered
	}
	n := t.newNode(lo, hi)
	t.root = t.merge(t.merge(left, n), right)
	return (b - a + 1) - covered
}

// remove deletes x and reports whether it was present.
func (t *runSet) remove(x uint64) bool {
	f := t.floor(x)
	if f == nilNode || t.nodes[f].hi < x {
		return false
	}
	nd := &t.nodes[f]
	switch {
	case nd.lo == x && nd.hi == x:
		left, rest := t.split(t.root, x)
		_, right := t.split(rest, x+1)
		t.free = append(t.free, f)
		t.root = t.merge(left, right)
	case nd.lo == x:
		nd.lo = x + 1 // order is kept: the next run starts after hi+1
	case nd.hi == x:
		nd.hi = x - 1
	default:
		oldHi := nd.hi
		nd.hi = x - 1
		left, right := t.split(t.root, x+1)
		t.root = t.merge(t.merge(left, t.newNode(x+1, oldHi)), right)
	}
	return true
}

func (t *runSet) maxNode(n int32) int32 {
	if n == nilNode {
		return nilNode
	}
	for t.nodes[n].right != nilNode {
		n = t.nodes[n].right
	}
	return n
}

func (t *runSet) walk(n int32, f func(*runNode)) {
	if n == nilNode {
		return
	}
	t.walk(t.nodes[n].left, f)
	f(&t.nodes[n])
	t.walk(t.nodes[n].right, f)
}

func (t *runSet) release(n int32) {
	if n == nilNode {
		return
	}
	t.release(t.nodes[n].left)
	t.release(t.nodes[n].right)
	t.free = append(t.free, n)
}

// runs returns the number of runs held.
func (t *runSet) runs() int { return len(t.nodes) - len(t.free) }

func overlapLen(lo, hi, a, b uint64) uint64 {
	if lo < a {
		lo = a
	}
	if hi > b {
		hi = b
	}
	if lo > hi {
		return 0
	}
	return hi - lo + 1
}
