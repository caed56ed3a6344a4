package cidr

import (
	"fmt"
	"math/big"
	"net/netip"
)

// Order is how an Allocator picks the next free subnet.
type Order int

const (
	// OrderLowestFree always hands out the lowest free subnet. It is what
	// kube-controller-manager does for the first allocation after every restart.
	OrderLowestFree Order = iota
	// OrderControllerManager reproduces kube-controller-manager's cidrset: a
	// cursor starts at index 0 (it is not persisted, so after a restart the
	// lowest free subnet wins), each allocation takes the first free subnet at
	// or after the cursor, wrapping around, and moves the cursor just past it.
	// Occupy and Release do not move the cursor.
	OrderControllerManager
)

// MaxSubnetBits is the largest difference between a parent's prefix length and
// its subnet prefix length that an Allocator handles (2^63 subnets per parent).
const MaxSubnetBits = 63

// Pool is a parent range cut into subnets of one size.
type Pool struct {
	// Parent is the range subnets are cut from, e.g. the cluster CIDR.
	Parent netip.Prefix
	// Bits is the subnets' prefix length, e.g. the node mask 24.
	Bits int
}

// AllocatorOptions configures an Allocator.
type AllocatorOptions struct {
	// Order picks the allocation order; the default is OrderLowestFree.
	Order Order
}

// Allocator hands out fixed-size subnets from one or more parent ranges of
// one family. A pool of at most 65,536 subnets is a fixed 8 KiB bitmap; a
// larger one keeps held subnets as runs of consecutive indices in a treap, so
// its memory grows with what is held (and how scattered it is), never with the
// size of the range: an IPv6 /32 cut into /64 subnets costs nothing until used.
// Operations are O(1) on a bitmap and O(log runs) on runs. An Allocator is not
// safe for concurrent use.
type Allocator struct {
	pools  []*pool
	order  Order
	owners map[netip.Prefix]string
}

type pool struct {
	Pool
	base  u128
	shift uint   // host bits of one subnet
	last  uint64 // highest subnet index
	held  uint64
	next  uint64 // cursor for OrderControllerManager
	set   indexSet
}

// NewAllocator returns an allocator over the given pools, which must be valid,
// canonical, of one family, disjoint, with subnets no wider than their parent
// and at most 2^MaxSubnetBits subnets each.
func NewAllocator(pools []Pool, opts AllocatorOptions) (*Allocator, error) {
	if len(pools) == 0 {
		return nil, fmt.Errorf("%w: an allocator needs at least one parent range", ErrOutOfRange)
	}
	a := &Allocator{order: opts.Order}
	for i, p := range pools {
		if !p.Parent.IsValid() {
			return nil, &ParseError{Field: fmt.Sprintf("pools[%d].Parent", i), Err: ErrEmpty}
		}
		if p.Parent != p.Parent.Masked() {
			return nil, &ParseError{Field: fmt.Sprintf("pools[%d].Parent", i), Input: p.Parent.String(), Canonical: p.Parent.Masked(), Err: ErrHostBitsSet}
		}
		fam := FamilyOf(p.Parent)
		if fam != FamilyOf(pools[0].Parent) {
			return nil, fmt.Errorf("%w: pools[%d].Parent %s is %s but pools[0].Parent %s is %s; use one allocator per family",
				ErrFamily, i, p.Parent, fam, pools[0].Parent, FamilyOf(pools[0].Parent))
		}
		if p.Bits < p.Parent.Bits() || p.Bits > fam.AddrBits() {
			return nil, fmt.Errorf("%w: pools[%d].Bits=%d for parent %s: want %d to %d", ErrMask, i, p.Bits, p.Parent, p.Parent.Bits(), fam.AddrBits())
		}
		if p.Bits-p.Parent.Bits() > MaxSubnetBits {
			return nil, fmt.Errorf("%w: pools[%d] cuts %s into 2^%d /%d subnets; the allocator handles at most 2^%d per parent",
				ErrOutOfRange, i, p.Parent, p.Bits-p.Parent.Bits(), p.Bits, MaxSubnetBits)
		}
		for j, q := range a.pools {
			if q.Parent.Overlaps(p.Parent) {
				return nil, fmt.Errorf("%w: pools[%d].Parent %s overlaps pools[%d].Parent %s", ErrOccupied, i, p.Parent, j, q.Parent)
			}
		}
		a.pools = append(a.pools, &pool{
			Pool:  p,
			base:  addrToU128(p.Parent.Addr()),
			shift: uint(fam.AddrBits() - p.Bits),
			last:  (uint64(1) << uint(p.Bits-p.Parent.Bits())) - 1,
			set:   newIndexSet(uint64(1) << uint(p.Bits-p.Parent.Bits())),
		})
	}
	return a, nil
}

// NewClusterAllocator returns the allocator kube-controller-manager would build
// for one family: the cluster CIDR cut into node-mask subnets, in
// OrderControllerManager, with every subnet overlapping the Service CIDR (if
// valid and overlapping) pre-marked as used, as the range allocator does.
func NewClusterAllocator(cluster netip.Prefix, nodeMask int, service netip.Prefix) (*Allocator, error) {
	a, err := NewAllocator([]Pool{{Parent: cluster.Masked(), Bits: nodeMask}}, AllocatorOptions{Order: OrderControllerManager})
	if err != nil {
		return nil, err
	}
	if service.IsValid() && service.Overlaps(cluster) {
		a.Occupy(service.Masked(), "")
	}
	return a, nil
}

func (p *pool) prefix(i uint64) netip.Prefix {
	v, _ := p.base.add(shl64(i, p.shift))
	return netip.PrefixFrom(u128ToAddr(v, p.Parent.Addr().Is4()), p.Bits)
}

// span returns the subnet indices [lo,hi] that prefix q covers in p, clipped
// to p, and whether q overlaps p at all.
func (p *pool) span(q netip.Prefix) (uint64, uint64, bool) {
	if !q.Overlaps(p.Parent) {
		return 0, 0, false
	}
	if q.Bits() <= p.Parent.Bits() {
		return 0, p.last, true
	}
	off := addrToU128(q.Addr()).sub(p.base)
	lo := off.shr(p.shift).lo
	if q.Bits() >= p.Bits {
		return lo, lo, true
	}
	return lo, lo + (uint64(1) << uint(p.Bits-q.Bits())) - 1, true
}

// FindingKind names what Occupy found.
type FindingKind string

// What Occupy can report.
const (
	// FindingOutOfRange: the subnet lies in no parent range.
	FindingOutOfRange FindingKind = "out-of-range"
	// FindingOccupied: (part of) the subnet was already held.
	FindingOccupied FindingKind = "already-occupied"
	// FindingMaskMismatch: the subnet's prefix length differs from the pool's.
	FindingMaskMismatch FindingKind = "mask-mismatch"
)

// Finding is something Occupy noticed. It still occupies what it can, as
// kube-controller-manager does.
type Finding struct {
	Kind   FindingKind  `json:"kind"`
	Subnet netip.Prefix `json:"subnet"`
	// Owner is who claimed Subnet in this call.
	Owner string `json:"owner,omitempty"`
	// HeldBy is who held it before, when known.
	HeldBy string `json:"heldBy,omitempty"`
	// Detail says what was found in words.
	Detail string `json:"detail"`
}

// Occupy marks subnet as held, on behalf of owner (a node name, or "" when
// ownership need not be tracked). A subnet wider than the pool's subnets holds
// every subnet it covers; a narrower one holds the subnet containing it. It
// never fails: it returns findings for an out-of-range subnet, a subnet
// already held (naming the previous owner when known), and a mask mismatch.
func (a *Allocator) Occupy(subnet netip.Prefix, owner string) []Finding {
	subnet = subnet.Masked()
	var out []Finding
	hit := false
	for _, p := range a.pools {
		lo, hi, ok := p.span(subnet)
		if !ok {
			continue
		}
		hit = true
		if subnet.Bits() != p.Bits {
			out = append(out, Finding{Kind: FindingMaskMismatch, Subnet: subnet, Owner: owner,
				Detail: fmt.Sprintf("%s is a /%d but %s is cut into /%d subnets", subnet, subnet.Bits(), p.Parent, p.Bits)})
		}
		added := p.set.add(lo, hi)
		p.held += added
		if added != hi-lo+1 {
			f := Finding{Kind: FindingOccupied, Subnet: subnet, Owner: owner}
			if lo == hi {
				f.HeldBy = a.owners[p.prefix(lo)]
			}
			if f.HeldBy != "" {
				f.Detail = fmt.Sprintf("%s is already held by %s", subnet, f.HeldBy)
			} else {
				f.Detail = fmt.Sprintf("%d of the %d subnets of %s were already held", hi-lo+1-added, hi-lo+1, subnet)
			}
			out = append(out, f)
		}
		if owner != "" && lo == hi {
			key := p.prefix(lo)
			if _, taken := a.owners[key]; !taken {
				if a.owners == nil {
					a.owners = make(map[netip.Prefix]string)
				}
				a.owners[key] = owner
			}
		}
	}
	if !hit {
		out = append(out, Finding{Kind: FindingOutOfRange, Subnet: subnet, Owner: owner,
			Detail: fmt.Sprintf("%s is outside %s", subnet, a.parents())})
	}
	return out
}

func (a *Allocator) parents() string {
	s := ""
	for i, p := range a.pools {
		if i > 0 {
			s += ", "
		}
		s += p.Parent.String()
	}
	return s
}

// AllocateNext holds and returns the next free subnet in the allocator's
// order, trying the pools in the order given. It fails with ErrFull.
func (a *Allocator) AllocateNext() (netip.Prefix, error) {
	for _, p := range a.pools {
		if p.held > p.last {
			continue
		}
		start := uint64(0)
		if a.order == OrderControllerManager {
			start = p.next
		}
		c := p.set.nextAbsent(start)
		if c > p.last {
			c = p.set.nextAbsent(0)
		}
		p.set.add(c, c)
		p.held++
		if c == p.last {
			p.next = 0
		} else {
			p.next = c + 1
		}
		return p.prefix(c), nil
	}
	return netip.Prefix{}, fmt.Errorf("%w in %s", ErrFull, a.parents())
}

// Allocate holds the given subnet, which must be exactly one free subnet of a pool.
func (a *Allocator) Allocate(subnet netip.Prefix, owner string) error {
	p, i, err := a.locate(subnet)
	if err != nil {
		return err
	}
	if p.set.has(i) {
		if by := a.owners[subnet]; by != "" {
			return fmt.Errorf("%w: %s is held by %s", ErrOccupied, subnet, by)
		}
		return fmt.Errorf("%w: %s", ErrOccupied, subnet)
	}
	p.set.add(i, i)
	p.held++
	if owner != "" {
		if a.owners == nil {
			a.owners = make(map[netip.Prefix]string)
		}
		a.owners[subnet] = owner
	}
	return nil
}

// Release frees a subnet held by Occupy, Allocate or AllocateNext.
func (a *Allocator) Release(subnet netip.Prefix) error {
	p, i, err := a.locate(subnet)
	if err != nil {
		return err
	}
	if !p.set.remove(i) {
		return fmt.Errorf("%w: %s", ErrNotHeld, subnet)
	}
	p.held--
	delete(a.owners, subnet)
	return nil
}

// Has reports whether subnet (exactly one pool subnet) is held.
func (a *Allocator) Has(subnet netip.Prefix) bool {
	p, i, err := a.locate(subnet)
	return err == nil && p.set.has(i)
}

func (a *Allocator) locate(subnet netip.Prefix) (*pool, uint64, error) {
	if !subnet.IsValid() {
		return nil, 0, &ParseError{Field: "subnet", Err: ErrEmpty}
	}
	if subnet != subnet.Masked() {
		return nil, 0, &ParseError{Field: "subnet", Input: subnet.String(), Canonical: subnet.Masked(), Err: ErrHostBitsSet}
	}
	for _, p := range a.pools {
		if !p.Parent.Overlaps(subnet) {
			continue
		}
		if subnet.Bits() != p.Bits {
			return nil, 0, fmt.Errorf("%w: %s is a /%d but %s is cut into /%d subnets", ErrMask, subnet, subnet.Bits(), p.Parent, p.Bits)
		}
		lo, _, _ := p.span(subnet)
		return p, lo, nil
	}
	return nil, 0, fmt.Errorf("%w: %s is outside %s", ErrOutOfRange, subnet, a.parents())
}

// Free returns how many subnets are free in all pools together.
func (a *Allocator) Free() *big.Int {
	n := new(big.Int)
	for _, p := range a.pools {
		size := new(big.Int).SetUint64(p.last)
		size.Add(size, big.NewInt(1))
		n.Add(n, size.Sub(size, new(big.Int).SetUint64(p.held)))
	}
	return n
}

// Held returns how many subnets are held in all pools together.
func (a *Allocator) Held() *big.Int {
	n := new(big.Int)
	for _, p := range a.pools {
		n.Add(n, new(big.Int).SetUint64(p.held))
	}
	return n
}

// Runs returns how many runs of consecutive held subnets the allocator stores;
// its memory is proportional to this number.
func (a *Allocator) Runs() int {
	n := 0
	for _, p := range a.pools {
		n += p.set.runs()
	}
	return n
}
