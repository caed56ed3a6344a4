package cidr

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// Kind says what a named range is used for; it decides whether an overlap
// between two ranges is expected or a conflict.
type Kind string

// The kinds of range the conflict analysis understands.
const (
	KindClusterCIDR    Kind = "cluster-cidr"
	KindServiceCIDR    Kind = "service-cidr"
	KindNodePodCIDR    Kind = "node-podcidr"
	KindCalicoPool     Kind = "calico-pool"
	KindFlannelNetwork Kind = "flannel-network"
	KindNodeNetwork    Kind = "node-network"
	KindWellKnown      Kind = "well-known"
)

// Range is a named range of addresses, e.g. {"service CIDR", KindServiceCIDR, 10.96.0.0/12}.
type Range struct {
	Name   string       `json:"name"`
	Kind   Kind         `json:"kind"`
	Prefix netip.Prefix `json:"prefix"`
}

func (r Range) String() string { return fmt.Sprintf("%s %s (%s)", r.Kind, r.Prefix, r.Name) }

// WellKnown returns the special-purpose ranges that a cluster range should not
// overlap: shared address space (where Tailscale and carrier-grade NAT live),
// link-local, loopback, multicast and the documentation ranges.
func WellKnown() []Range {
	mk := func(name, p string) Range {
		return Range{Name: name, Kind: KindWellKnown, Prefix: netip.MustParsePrefix(p)}
	}
	return []Range{
		mk("this network (RFC 1122)", "0.0.0.0/8"),
		mk("loopback (RFC 1122)", "127.0.0.0/8"),
		mk("shared address space / CGNAT, used by Tailscale (RFC 6598)", "100.64.0.0/10"),
		mk("link-local (RFC 3927)", "169.254.0.0/16"),
		mk("documentation TEST-NET-1 (RFC 5737)", "192.0.2.0/24"),
		mk("documentation TEST-NET-2 (RFC 5737)", "198.51.100.0/24"),
		mk("documentation TEST-NET-3 (RFC 5737)", "203.0.113.0/24"),
		mk("multicast (RFC 5771)", "224.0.0.0/4"),
		mk("reserved (RFC 1112)", "240.0.0.0/4"),
		mk("loopback (RFC 4291)", "::1/128"),
		mk("IPv4-mapped (RFC 4291)", "::ffff:0:0/96"),
		mk("documentation (RFC 3849)", "2001:db8::/32"),
		mk("link-local (RFC 4291)", "fe80::/10"),
		mk("multicast (RFC 4291)", "ff00::/8"),
	}
}

// Relation is how two overlapping prefixes relate. Prefixes either nest or are
// disjoint, so an overlap is always equality or containment.
type Relation string

// The relations Analyze reports.
const (
	// Equal: both sides are the same prefix.
	Equal Relation = "equal"
	// Contains: the Outer side contains the Inner side.
	Contains Relation = "contains"
)

// Severity grades an overlap.
type Severity string

// The severities Analyze assigns.
const (
	// SeverityError: the layout is broken (pods and Services share addresses, duplicate podCIDRs, ...).
	SeverityError Severity = "error"
	// SeverityWarning: a cluster range overlaps a special-purpose range.
	SeverityWarning Severity = "warning"
	// SeverityInfo: an expected nesting, e.g. a node podCIDR inside the cluster CIDR.
	SeverityInfo Severity = "info"
)

// Overlap is one pair of overlapping ranges. Outer is the larger (or the
// first given, when equal).
type Overlap struct {
	Outer    Range    `json:"outer"`
	Inner    Range    `json:"inner"`
	Relation Relation `json:"relation"`
	Severity Severity `json:"severity"`
	Reason   string   `json:"reason"`
}

// String returns the severity followed by Message.
func (o Overlap) String() string { return string(o.Severity) + ": " + o.Message() }

// Message describes the overlap in one line, naming both sides and why it matters.
func (o Overlap) Message() string {
	verb := "contains"
	if o.Relation == Equal {
		verb = "equals"
	}
	return fmt.Sprintf("%s %s %s: %s", o.Outer, verb, o.Inner, o.Reason)
}

// AnalyzeOptions tunes Analyze.
type AnalyzeOptions struct {
	// WellKnown adds WellKnown() to the ranges checked.
	WellKnown bool
	// Expected also reports expected nestings (SeverityInfo), which are
	// otherwise left out.
	Expected bool
}

// podSpace are the kinds that hold pod addresses and may nest inside each other.
func podSpace(k Kind) bool {
	return k == KindClusterCIDR || k == KindNodePodCIDR || k == KindCalicoPool || k == KindFlannelNetwork
}

// classify decides the severity of an overlap between outer and inner.
func classify(outer, inner Range) (Severity, string) {
	if outer.Kind == KindWellKnown || inner.Kind == KindWellKnown {
		return SeverityWarning, "cluster addresses overlap a special-purpose range; traffic to them may be routed elsewhere"
	}
	if outer.Kind == inner.Kind {
		switch outer.Kind {
		case KindNodePodCIDR:
			return SeverityError, "two nodes share pod addresses; pods on them are unreachable"
		case KindCalicoPool:
			return SeverityError, "Calico IP pools must not overlap"
		case KindServiceCIDR:
			return SeverityError, "Service ranges overlap"
		case KindNodeNetwork:
			return SeverityInfo, "node networks nest"
		}
		return SeverityError, fmt.Sprintf("two %s ranges overlap", outer.Kind)
	}
	if podSpace(outer.Kind) && podSpace(inner.Kind) {
		if inner.Kind == KindClusterCIDR && outer.Prefix != inner.Prefix {
			return SeverityError, fmt.Sprintf("the cluster CIDR should contain the %s, not lie inside it", outer.Kind)
		}
		return SeverityInfo, "pod ranges nest as expected"
	}
	switch {
	case outer.Kind == KindServiceCIDR || inner.Kind == KindServiceCIDR:
		return SeverityError, "Service ClusterIPs and other addresses would collide"
	case outer.Kind == KindNodeNetwork || inner.Kind == KindNodeNetwork:
		return SeverityError, "cluster addresses overlap the node network; routing to nodes or pods breaks"
	}
	return SeverityError, "ranges overlap"
}

// Analyze reports every pair of the given ranges that overlap, naming both
// sides, in a deterministic order. It runs in O(n log n + pairs): prefixes
// either nest or are disjoint, so a sorted sweep with a stack of open prefixes
// finds each pair exactly once. Invalid prefixes are skipped.
func Analyze(ranges []Range, opts AnalyzeOptions) []Overlap {
	all := make([]Range, 0, len(ranges)+16)
	for _, r := range ranges {
		if r.Prefix.IsValid() {
			r.Prefix = r.Prefix.Masked()
			all = append(all, r)
		}
	}
	if opts.WellKnown {
		all = append(all, WellKnown()...)
	}
	// Stable by address, then widest first, so containers precede their contents;
	// equal prefixes keep the caller's order.
	slices.SortStableFunc(all, func(a, b Range) int {
		if a.Prefix.Addr().BitLen() != b.Prefix.Addr().BitLen() {
			return cmp.Compare(a.Prefix.Addr().BitLen(), b.Prefix.Addr().BitLen())
		}
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits())
	})
	var out []Overlap
	var stack []Range
	for _, r := range all {
		for len(stack) > 0 && !contains(stack[len(stack)-1].Prefix, r.Prefix) {
			stack = stack[:len(stack)-1]
		}
		for _, s := range stack {
			if s.Kind == KindWellKnown && r.Kind == KindWellKnown {
				continue
			}
			rel := Contains
			if s.Prefix == r.Prefix {
				rel = Equal
			}
			sev, why := classify(s, r)
			if sev == SeverityInfo && !opts.Expected {
				continue
			}
			out = append(out, Overlap{Outer: s, Inner: r, Relation: rel, Severity: sev, Reason: why})
		}
		stack = append(stack, r)
	}
	return out
}

// contains reports whether outer contains inner (same family, inner no wider).
func contains(outer, inner netip.Prefix) bool {
	return outer.Addr().BitLen() == inner.Addr().BitLen() && outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

// ContainsPrefix reports whether outer contains all of inner.
func ContainsPrefix(outer, inner netip.Prefix) bool { return contains(outer.Masked(), inner.Masked()) }
