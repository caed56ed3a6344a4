package servicecidr

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
)

// ParseCIDRs parses a comma-separated list typed by a user (one CIDR, or one
// of each family) strictly with cidr.ParseList: host bits are refused with the
// network meant. The error is a *FieldError naming field.
func ParseCIDRs(field, s string) ([]netip.Prefix, error) {
	ps, err := cidr.ParseList(s)
	if err != nil {
		return nil, &FieldError{Field: field, Value: s, Reason: err.Error(), Err: ErrInvalid, Cause: err}
	}
	return ps, nil
}

// ValidateCIDRs checks what the API server checks in a ServiceCIDR's
// spec.cidrs: one or two valid canonical prefixes, at most one per family.
func ValidateCIDRs(field string, cidrs []netip.Prefix) error {
	switch len(cidrs) {
	case 0:
		return &FieldError{Field: field, Reason: "at least one CIDR is required", Err: ErrInvalid}
	case 1, 2:
	default:
		return &FieldError{Field: field, Value: joinPrefixes(cidrs), Reason: "may hold at most two CIDRs, one per IP family", Err: ErrInvalid}
	}
	for i, p := range cidrs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if !p.IsValid() {
			return &FieldError{Field: f, Reason: "not a valid CIDR", Err: ErrInvalid}
		}
		if p.Addr().Is4In6() {
			return &FieldError{Field: f, Value: p.String(), Reason: "IPv4-mapped IPv6 prefixes are not accepted; write the IPv4 prefix", Err: ErrInvalid}
		}
		if p.Addr().Zone() != "" {
			return &FieldError{Field: f, Value: p.String(), Reason: "IPv6 zones are not accepted", Err: ErrInvalid}
		}
		if p != p.Masked() {
			return &FieldError{Field: f, Value: p.String(), Reason: fmt.Sprintf("has host bits set; the network is %s", p.Masked()), Err: ErrInvalid, Cause: cidr.ErrHostBitsSet}
		}
	}
	if len(cidrs) == 2 && cidr.FamilyOf(cidrs[0]) == cidr.FamilyOf(cidrs[1]) {
		return &FieldError{Field: field, Value: joinPrefixes(cidrs),
			Reason: "may specify no more than one CIDR for each IP family, e.g. 192.168.0.0/24,2001:db8::/112", Err: ErrInvalid, Cause: cidr.ErrDualStack}
	}
	return nil
}

// ValidateUpdate checks a change to a ServiceCIDR the way the API server does:
// spec.cidrs is immutable, except that a single-stack ServiceCIDR may gain a
// CIDR of the other family (the first must stay unchanged).
func ValidateUpdate(old, next ServiceCIDR) error {
	field := "ServiceCIDR " + old.Name + " spec.cidrs"
	switch {
	case len(old.CIDRs) == len(next.CIDRs):
		for i := range old.CIDRs {
			if old.CIDRs[i] != next.CIDRs[i] {
				return &FieldError{Field: fmt.Sprintf("%s[%d]", field, i), Value: next.CIDRs[i].String(),
					Reason: fmt.Sprintf("field is immutable (it is %s); create a new ServiceCIDR instead", old.CIDRs[i]), Err: ErrImmutable}
			}
		}
		return nil
	case len(old.CIDRs) == 1 && len(next.CIDRs) == 2:
		if next.CIDRs[0] != old.CIDRs[0] {
			return &FieldError{Field: field + "[0]", Value: next.CIDRs[0].String(),
				Reason: fmt.Sprintf("field is immutable (it is %s); only a CIDR of the other family may be added", old.CIDRs[0]), Err: ErrImmutable}
		}
		return ValidateCIDRs(field, next.CIDRs)
	}
	return &FieldError{Field: field, Value: joinPrefixes(next.CIDRs),
		Reason: fmt.Sprintf("field is immutable (it is %s); the only allowed change is adding a CIDR of the other family to a single-stack ServiceCIDR", joinPrefixes(old.CIDRs)), Err: ErrImmutable}
}

// ValidateOptions says what a candidate Service range must not collide with.
type ValidateOptions struct {
	// KubernetesMinor is the cluster's 1.x minor version (0 = unknown, the
	// stricter rules apply).
	KubernetesMinor int
	// ForFlag applies kube-apiserver's size limit on --service-cluster-ip-range
	// (at most 20 host bits up to 1.33). Set it when the range will become the
	// flag's value, as in a move; a ServiceCIDR object alone has no such limit.
	ForFlag bool
	// PodCIDRs are the cluster's pod ranges (--cluster-cidr, IP pools).
	PodCIDRs []netip.Prefix
	// NodePodCIDRs are the nodes' spec.podCIDRs.
	NodePodCIDRs []cidr.Range
	// NodeNetworks are the networks (or single addresses) nodes live on.
	NodeNetworks []netip.Prefix
	// Avoid are ranges the candidate must not overlap, such as the range
	// Services are moving away from.
	Avoid []netip.Prefix
	// Existing are the cluster's ServiceCIDRs; an overlap with one is legal
	// (ServiceCIDRs may nest) but reported as a warning.
	Existing []ServiceCIDR
	// AllowWellKnown reports an overlap with a special-purpose range (CGNAT /
	// Tailscale 100.64.0.0/10, link-local, ...) as a warning instead of an error.
	AllowWellKnown bool
	// Field names the input in messages; default "service CIDR".
	Field string
}

// Validation is what Validate found about a candidate Service range.
type Validation struct {
	CIDRs    []netip.Prefix           `json:"cidrs"`
	Capacity []cidr.ServiceCapacity   `json:"capacity"`
	Overlaps []cidr.Overlap           `json:"overlaps,omitempty"`
	Warnings []string                 `json:"warnings,omitempty"`
	Errors   []string                 `json:"errors,omitempty"`
	byFamily map[cidr.Family]*big.Int `json:"-"`
}

// Usable returns the number of usable ClusterIPs in the candidate for family f.
func (v Validation) Usable(f cidr.Family) *big.Int {
	if n, ok := v.byFamily[f]; ok {
		return new(big.Int).Set(n)
	}
	return new(big.Int)
}

// Validate checks a candidate Service range: the ServiceCIDR rules
// (ValidateCIDRs), kube-apiserver's usable-size rules
// (cidr.ComputeServiceCapacity: at least one usable address, the IPv6 /64
// floor, and with ForFlag the 20-host-bit limit up to 1.33), and conflicts
// found by cidr.Analyze with pod ranges, node podCIDRs, node networks and the
// well-known special-purpose ranges (100.64.0.0/10, where Tailscale and CGNAT
// live, among them). It returns the findings and, when any is fatal, an error
// joining one *FieldError per problem.
func Validate(cidrs []netip.Prefix, opts ValidateOptions) (Validation, error) {
	field := opts.Field
	if field == "" {
		field = "service CIDR"
	}
	v := Validation{CIDRs: cidrs, byFamily: map[cidr.Family]*big.Int{}}
	if err := ValidateCIDRs(field, cidrs); err != nil {
		v.Errors = append(v.Errors, err.Error())
		return v, err
	}
	var errs []error
	fail := func(e *FieldError) {
		errs = append(errs, e)
		v.Errors = append(v.Errors, e.Error())
	}
	for _, p := range cidrs {
		capa, err := cidr.ComputeServiceCapacity(p, cidr.ServiceRangeOptions{KubernetesMinor: opts.KubernetesMinor, Object: !opts.ForFlag})
		v.Capacity = append(v.Capacity, capa)
		if capa.UsableIPs != nil {
			v.byFamily[cidr.FamilyOf(p)] = capa.UsableIPs
		}
		for _, e := range flatten(err) {
			fail(&FieldError{Field: field, Value: p.String(), Reason: e.Error(), Err: ErrInvalid, Cause: e})
		}
	}

	const candidate = "candidate Service range"
	ranges := make([]cidr.Range, 0, len(cidrs)+len(opts.PodCIDRs)+len(opts.NodePodCIDRs)+len(opts.NodeNetworks))
	for _, p := range cidrs {
		ranges = append(ranges, cidr.Range{Name: candidate, Kind: cidr.KindServiceCIDR, Prefix: p})
	}
	for _, p := range opts.PodCIDRs {
		ranges = append(ranges, cidr.Range{Name: "pod CIDR", Kind: cidr.KindClusterCIDR, Prefix: p})
	}
	ranges = append(ranges, opts.NodePodCIDRs...)
	for _, p := range opts.NodeNetworks {
		ranges = append(ranges, cidr.Range{Name: "node network", Kind: cidr.KindNodeNetwork, Prefix: p})
	}
	for _, o := range cidr.Analyze(ranges, cidr.AnalyzeOptions{WellKnown: true}) {
		if o.Outer.Name != candidate && o.Inner.Name != candidate {
			continue // a conflict elsewhere is not the candidate's problem
		}
		v.Overlaps = append(v.Overlaps, o)
		other, mine := o.Outer, o.Inner
		if mine.Name != candidate {
			other, mine = mine, other
		}
		e := &FieldError{Field: field, Value: mine.Prefix.String(), Err: ErrConflict,
			Reason: fmt.Sprintf("overlaps %s %s (%s): %s", other.Kind, other.Prefix, other.Name, o.Reason)}
		switch {
		case o.Severity == cidr.SeverityError:
			fail(e)
		case o.Severity == cidr.SeverityWarning && !opts.AllowWellKnown:
			e.Reason += "; choose another range (or allow well-known overlaps explicitly)"
			fail(e)
		case o.Severity == cidr.SeverityWarning:
			v.Warnings = append(v.Warnings, e.Error())
		}
	}
	for _, p := range cidrs {
		for _, a := range opts.Avoid {
			if p.Overlaps(a) {
				fail(&FieldError{Field: field, Value: p.String(), Err: ErrConflict,
					Reason: fmt.Sprintf("overlaps %s, the range Services are moving away from; the new range must be disjoint from it", a)})
			}
		}
		for _, sc := range opts.Existing {
			for _, q := range sc.CIDRs {
				if p.Overlaps(q) && !slicesContainsPrefix(opts.Avoid, q) && p != q {
					v.Warnings = append(v.Warnings, fmt.Sprintf("%s %s overlaps ServiceCIDR %s (%s); ClusterIPs in the overlap may come from either", field, p, sc.Name, q))
				}
			}
		}
	}
	return v, errors.Join(errs...)
}

func slicesContainsPrefix(ps []netip.Prefix, p netip.Prefix) bool {
	for _, q := range ps {
		if q.Overlaps(p) {
			return true
		}
	}
	return false
}

// flatten returns the leaves of a joined error.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}
