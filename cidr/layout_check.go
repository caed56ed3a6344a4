package cidr

// LayoutCheck is what the components would say about a pod and Service
// layout given as kube-controller-manager flags: the one set of conflict
// rules that examples/capacity (a layout planned on paper) and
// examples/doctor (a live cluster's current and proposed flags) share.
type LayoutCheck struct {
	// Layout is what the flags mean, as far as they could be parsed.
	Layout NodeIPAMLayout `json:"layout"`
	// Warnings are values the component silently reinterprets (host bits).
	Warnings []Warning `json:"warnings,omitempty"`
	// Refused is set when the flags cannot describe a layout at all (a value
	// that does not parse, two cluster CIDRs of one family, a mask flag the
	// layout does not allow): the error is in Errors, and nothing else was
	// checked. Such flags are bad input.
	Refused bool `json:"refused,omitempty"`
	// Errors are the rules kube-controller-manager enforces on the flags
	// (*RuleError: a node mask shorter than the cluster CIDR's, an IPv6 node
	// mask too long for the cluster CIDR, ...). The component refuses to
	// start: a problem of the layout.
	Errors []error `json:"-"`
	// Overlaps are every overlap among the cluster CIDRs, the Service CIDRs,
	// the other ranges given (node networks, ...) and the well-known
	// special-purpose ranges; expected nestings are left out.
	Overlaps []Overlap `json:"overlaps"`
}

// Problems counts the errors and the overlaps of severity error.
func (c LayoutCheck) Problems() int {
	n := len(c.Errors)
	for _, o := range c.Overlaps {
		if o.Severity == SeverityError {
			n++
		}
	}
	return n
}

// CheckLayout applies kube-controller-manager's flag rules
// (ParseControllerManagerFlags) and the overlap rules (Analyze with the
// well-known ranges) to a layout. others are further ranges to check against
// it, e.g. the node networks (KindNodeNetwork).
func CheckLayout(f ControllerManagerFlags, others ...Range) LayoutCheck {
	f.AllocateNodeCIDRs = true
	l, warnings, err := ParseControllerManagerFlags(f)
	c := LayoutCheck{Layout: l, Warnings: warnings, Overlaps: []Overlap{}}
	if err != nil {
		c.Errors = flatten(err)
		// ParseControllerManagerFlags stops at the first flag that cannot
		// describe a layout; it only gets through every node mask, and then
		// past the Service CIDRs' families, when the flags parse.
		c.Refused = len(l.NodeMasks) != len(l.ClusterCIDRs) || len(l.ClusterCIDRs) == 0 ||
			(len(l.ServiceCIDRs) == 2 && FamilyOf(l.ServiceCIDRs[0]) == FamilyOf(l.ServiceCIDRs[1]))
		if c.Refused {
			return c
		}
	}
	ranges := make([]Range, 0, len(l.ClusterCIDRs)+len(l.ServiceCIDRs)+len(others))
	for _, p := range l.ClusterCIDRs {
		ranges = append(ranges, Range{Name: "--cluster-cidr", Kind: KindClusterCIDR, Prefix: p.Masked()})
	}
	for _, p := range l.ServiceCIDRs {
		ranges = append(ranges, Range{Name: "--service-cidr", Kind: KindServiceCIDR, Prefix: p.Masked()})
	}
	ranges = append(ranges, others...)
	c.Overlaps = append(c.Overlaps, Analyze(ranges, AnalyzeOptions{WellKnown: true})...)
	return c
}
