package nodecidr

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/cidrshift/cidrshift/cidr"
)

// A plan is untrusted input: it may have been edited by hand between
// planning and applying. The checks here hold every step to the target the
// plan itself states (its rebase pairs, or its layout), and, against the
// Nodes as listed right before the first write, to the podCIDRs held
// elsewhere in the cluster.

// invalidPlan wraps ErrInvalidPlan.
func invalidPlan(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidPlan}, args...)...)
}

// rebasePairs validates rebase pairs and indexes them by family. Its errors
// wrap ErrInvalidOptions.
func rebasePairs(pairs []RebasePair) (map[cidr.Family]RebasePair, error) {
	if len(pairs) == 0 || len(pairs) > 2 {
		return nil, fmt.Errorf("%w: rebase needs one from/to pair, or one per family; got %d", ErrInvalidOptions, len(pairs))
	}
	byFam := map[cidr.Family]RebasePair{}
	for i, pr := range pairs {
		if !pr.From.IsValid() || !pr.To.IsValid() {
			return nil, fmt.Errorf("%w: rebase pair %d: from %q and to %q must both be CIDRs", ErrInvalidOptions, i, pr.From, pr.To)
		}
		if pr.From != pr.From.Masked() || pr.To != pr.To.Masked() {
			return nil, fmt.Errorf("%w: rebase pair %d: %s -> %s has host bits set; use %s -> %s", ErrInvalidOptions, i, pr.From, pr.To, pr.From.Masked(), pr.To.Masked())
		}
		f := cidr.FamilyOf(pr.From)
		if f != cidr.FamilyOf(pr.To) {
			return nil, fmt.Errorf("%w: rebase pair %d: from %s is %s but to %s is %s", ErrInvalidOptions, i, pr.From, f, pr.To, cidr.FamilyOf(pr.To))
		}
		if _, dup := byFam[f]; dup {
			return nil, fmt.Errorf("%w: two %s rebase pairs; give at most one per family", ErrInvalidOptions, f)
		}
		byFam[f] = pr
	}
	return byFam, nil
}

// checkTargets checks every step against the plan's own target: for a
// rebase, each new podCIDR is its old one rebased by the plan's pair of its
// family (so it lies inside the pair's "to" with the old mask); for allocate
// and fix, one new podCIDR per cluster CIDR in the layout's order and family,
// and each podCIDR the node does not already hold lies inside its cluster
// CIDR, with the layout's node mask, outside the Service CIDR.
func (p *Plan) checkTargets() error {
	switch p.Mode {
	case ModeRebase:
		if p.Layout != nil {
			return invalidPlan("mode %s with a layout: a rebase plan states its target in rebase, not layout", p.Mode)
		}
		byFam, err := rebasePairs(p.Rebase)
		if err != nil {
			return invalidPlan("rebase: %w", err)
		}
		for i := range p.Steps {
			if err := checkRebaseStep(i, &p.Steps[i], byFam); err != nil {
				return err
			}
		}
	case ModeAllocate, ModeFix:
		if p.Layout == nil {
			return invalidPlan("mode %s without a layout: the plan must state its target cluster CIDR(s) in layout", p.Mode)
		}
		if len(p.Rebase) > 0 {
			return invalidPlan("mode %s with rebase pairs: only a rebase plan has them", p.Mode)
		}
		if err := checkLayout(*p.Layout); err != nil {
			return invalidPlan("layout: %w", err)
		}
		for i := range p.Steps {
			if err := checkLayoutStep(i, &p.Steps[i], *p.Layout); err != nil {
				return err
			}
		}
	}
	return nil
}

func stepWhere(i int, s *Step) string { return fmt.Sprintf("steps[%d] (node %s)", i, s.Node) }

// holds reports whether the node already holds prefix among its podCIDRs.
func holds(podCIDRs []string, prefix netip.Prefix) bool {
	return slices.ContainsFunc(podCIDRs, func(t string) bool {
		pr, _, err := cidr.ParseLenient(t)
		return err == nil && pr == prefix
	})
}

func checkRebaseStep(i int, s *Step, byFam map[cidr.Family]RebasePair) error {
	where := stepWhere(i, s)
	if len(s.NewPodCIDRs) != len(s.OldPodCIDRs) {
		return invalidPlan("%s: newPodCIDRs %v has %d entries but oldPodCIDRs %v has %d; a rebase keeps one per old podCIDR",
			where, s.NewPodCIDRs, len(s.NewPodCIDRs), s.OldPodCIDRs, len(s.OldPodCIDRs))
	}
	for j, t := range s.NewPodCIDRs {
		np, _ := cidr.Parse(t) // Validate parsed it
		op, _, err := cidr.ParseLenient(s.OldPodCIDRs[j])
		if err != nil {
			return invalidPlan("%s.oldPodCIDRs[%d] %q: %w", where, j, s.OldPodCIDRs[j], err)
		}
		if cidr.FamilyOf(np) != cidr.FamilyOf(op) {
			return invalidPlan("%s.newPodCIDRs[%d] %s is %s but oldPodCIDRs[%d] %s is %s", where, j, np, cidr.FamilyOf(np), j, op, cidr.FamilyOf(op))
		}
		pair, ok := byFam[cidr.FamilyOf(np)]
		if ok && !cidr.ContainsPrefix(pair.From, op) && !cidr.ContainsPrefix(pair.To, op) {
			return invalidPlan("%s.oldPodCIDRs[%d] %s is neither inside the plan's from %s nor inside its to %s", where, j, op, pair.From, pair.To)
		}
		want := op
		if ok && cidr.ContainsPrefix(pair.From, op) {
			if want, err = cidr.Rebase(op, pair.From, pair.To); err != nil {
				return invalidPlan("%s.oldPodCIDRs[%d] %s: %w", where, j, op, err)
			}
		}
		if np == want {
			continue
		}
		switch {
		case !ok:
			return invalidPlan("%s.newPodCIDRs[%d] %s: the plan has no %s rebase pair, so it must stay %s", where, j, np, cidr.FamilyOf(np), op)
		case !cidr.ContainsPrefix(pair.To, np):
			return invalidPlan("%s.newPodCIDRs[%d] %s is outside the plan's target %s", where, j, np, pair.To)
		case np.Bits() != op.Bits():
			return invalidPlan("%s.newPodCIDRs[%d] %s is a /%d but the node's podCIDR %s is a /%d; a rebase keeps the node mask", where, j, np, np.Bits(), op, op.Bits())
		default:
			return invalidPlan("%s.newPodCIDRs[%d] %s: a rebase from %s to %s moves %s to %s", where, j, np, pair.From, pair.To, op, want)
		}
	}
	return nil
}

func checkLayoutStep(i int, s *Step, l cidr.NodeIPAMLayout) error {
	where := stepWhere(i, s)
	if len(s.NewPodCIDRs) != len(l.ClusterCIDRs) {
		return invalidPlan("%s.newPodCIDRs %v has %d entries but layout.clusterCIDRs %s has %d: want one per cluster CIDR, in its order",
			where, s.NewPodCIDRs, len(s.NewPodCIDRs), joinPrefixes(l.ClusterCIDRs), len(l.ClusterCIDRs))
	}
	for j, t := range s.NewPodCIDRs {
		np, _ := cidr.Parse(t) // Validate parsed it
		c := l.ClusterCIDRs[j].Masked()
		if cidr.FamilyOf(np) != cidr.FamilyOf(c) {
			return invalidPlan("%s.newPodCIDRs[%d] %s is %s but layout.clusterCIDRs[%d] %s is %s", where, j, np, cidr.FamilyOf(np), j, c, cidr.FamilyOf(c))
		}
		if holds(s.OldPodCIDRs, np) {
			continue // the node keeps a podCIDR it already holds
		}
		if !cidr.ContainsPrefix(c, np) {
			return invalidPlan("%s.newPodCIDRs[%d] %s is outside the plan's target %s", where, j, np, c)
		}
		if m := maskAt(l, j); np.Bits() != m {
			return invalidPlan("%s.newPodCIDRs[%d] %s is a /%d but the plan's layout gives nodes a /%d of %s", where, j, np, np.Bits(), m, c)
		}
		if svc := serviceFor(l, cidr.FamilyOf(np)); svc.IsValid() && svc.Overlaps(np) {
			return invalidPlan("%s.newPodCIDRs[%d] %s overlaps the plan's Service CIDR %s", where, j, np, svc)
		}
	}
	return nil
}

// CheckAgainst checks a valid plan against the cluster's Nodes as they are
// now, before anything is written: a podCIDR that a step gives a node, and
// that the node does not hold yet, must not overlap a podCIDR any other node
// holds (two nodes would share it, if only until the other node moves); and
// once the plan is applied no planned node may share or overlap a podCIDR
// with another node. Apply calls it; errors wrap ErrInvalidPlan.
func (p *Plan) CheckAgainst(nodes []corev1.Node) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if err := conflictsWith(p, nodes); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidPlan, err)
	}
	return nil
}

// conflictsWith finds a step's new podCIDR that overlaps one held by another
// node now, or a planned node that would share or overlap a podCIDR once the
// plan is applied.
func conflictsWith(p *Plan, nodes []corev1.Node) error {
	type held struct {
		node   string
		prefix netip.Prefix
	}
	var inUse []held
	current := make(map[string][]string, len(nodes))
	for i := range nodes {
		cs := PodCIDRsOf(&nodes[i])
		current[nodes[i].Name] = cs
		for _, t := range cs {
			if pr, _, err := cidr.ParseLenient(t); err == nil {
				inUse = append(inUse, held{nodes[i].Name, pr})
			}
		}
	}
	for i := range p.Steps {
		s := &p.Steps[i]
		for j, t := range s.NewPodCIDRs {
			np, err := cidr.Parse(t)
			if err != nil || holds(current[s.Node], np) || holds(s.OldPodCIDRs, np) {
				continue
			}
			for _, h := range inUse {
				if h.node != s.Node && h.prefix.Overlaps(np) {
					return fmt.Errorf("%s.newPodCIDRs[%d] %s overlaps podCIDR %s held by node %s; a new podCIDR must be free",
						stepWhere(i, s), j, np, h.prefix, h.node)
				}
			}
		}
	}
	planned := p.stepIndex()
	for _, f := range analyze(afterPlan(nodes, p), cidr.NodeIPAMLayout{}).findings {
		if f.Kind != FindingDuplicate && f.Kind != FindingOverlap {
			continue
		}
		if slices.ContainsFunc(f.Nodes, func(n string) bool { return planned[n] != nil }) {
			return fmt.Errorf("after the plan %s", f.Message)
		}
	}
	return nil
}
