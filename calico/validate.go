package calico

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
)

// ErrInvalidPool is wrapped by every *FieldError.
var ErrInvalidPool = errors.New("invalid IPPool")

// Rule names a validation rule. Rules marked "Calico" are the ones Calico
// itself applies (with Calico's meaning); the others are cidrshift's own.
type Rule string

// The rules Validate and ValidateNewPool apply.
const (
	// RuleType: a field read from the cluster has the wrong JSON type.
	RuleType Rule = "type"
	// RuleName (Calico): the pool name must be a DNS-1123 subdomain.
	RuleName Rule = "name"
	// RuleCIDRSyntax (Calico): the CIDR must parse.
	RuleCIDRSyntax Rule = "cidr-syntax"
	// RuleCIDRMasked (Calico): the CIDR must be strictly masked (no host bits).
	RuleCIDRMasked Rule = "cidr-masked"
	// RuleBlockSizeRange (Calico): blockSize 20-32 for IPv4, 116-128 for IPv6.
	RuleBlockSizeRange Rule = "block-size-range"
	// RulePoolSmallerThanBlock (Calico): an enabled pool must hold at least
	// one block (pool prefix length <= blockSize).
	RulePoolSmallerThanBlock Rule = "pool-smaller-than-block"
	// RuleLinkLocal (Calico): the pool must not overlap 169.254.0.0/16 or fe80::/10.
	RuleLinkLocal Rule = "link-local"
	// RuleEncapMode (Calico): ipipMode/vxlanMode must be Never, Always or CrossSubnet.
	RuleEncapMode Rule = "encap-mode"
	// RuleEncapExclusive (Calico): IPIP and VXLAN must not both be enabled.
	RuleEncapExclusive Rule = "encap-exclusive"
	// RuleIPIPOnIPv6 (Calico): IPIP is not supported on an IPv6 pool.
	RuleIPIPOnIPv6 Rule = "ipip-ipv6"
	// RuleAllowedUses (Calico): allowedUses entries must be Workload, Tunnel or
	// LoadBalancer, without duplicates; LoadBalancer cannot be combined with
	// the others; Tunnel cannot be combined with a namespaceSelector.
	RuleAllowedUses Rule = "allowed-uses"
	// RuleAssignmentMode (Calico): assignmentMode must be Automatic or Manual.
	RuleAssignmentMode Rule = "assignment-mode"
	// RulePoolOverlap (Calico): pools must not overlap.
	RulePoolOverlap Rule = "pool-overlap"
	// RuleOutsideClusterCIDR: the pool must lie inside the cluster CIDR the
	// user intends (of its family).
	RuleOutsideClusterCIDR Rule = "outside-cluster-cidr"
	// RuleServiceOverlap: the pool must not overlap a Service CIDR.
	RuleServiceOverlap Rule = "service-overlap"
	// RuleNodeNetworkOverlap: the pool must not overlap the node network.
	RuleNodeNetworkOverlap Rule = "node-network-overlap"
)

// FieldError is one broken rule: which pool, which field, which value, and
// why (with what would be valid).
type FieldError struct {
	Pool   string
	Field  string
	Value  string
	Rule   Rule
	Reason string
	err    error
}

// Error describes the problem in one line.
func (e *FieldError) Error() string {
	name := e.Pool
	if name == "" {
		name = "(unnamed)"
	}
	return fmt.Sprintf("IPPool %q: %s %q: %s", name, e.Field, e.Value, e.Reason)
}

// Is reports whether target is ErrInvalidPool.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidPool }

// Unwrap returns the underlying parse error, if any.
func (e *FieldError) Unwrap() error { return e.err }

// FieldErrors extracts every *FieldError from err (as returned by Validate or
// ValidateNewPool, which join them).
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if fe, ok := e.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		walk(errors.Unwrap(e))
	}
	walk(err)
	return out
}

var (
	linkLocal4 = netip.MustParsePrefix("169.254.0.0/16")
	linkLocal6 = netip.MustParsePrefix("fe80::/10")
)

// Validate applies Calico's own IPPool rules, with Calico's meaning, and
// returns every broken rule as joined *FieldError values (nil when valid):
// a parsable, strictly masked CIDR; blockSize within 20-32 (IPv4) or 116-128
// (IPv6), 0 meaning the default 26/122; an enabled pool at least one block
// big; no overlap with link-local; ipipMode/vxlanMode from Never, Always,
// CrossSubnet and not both enabled; no IPIP on IPv6; allowedUses and
// assignmentMode from their enums.
//
// Calico validates these itself on projectcalico.org/v3; on
// crd.projectcalico.org/v1 nothing does, which is why this package runs
// Validate before every write.
func Validate(p IPPool) error {
	var errs []error
	add := func(field, value string, rule Rule, reason string) {
		errs = append(errs, &FieldError{Pool: p.Name, Field: field, Value: value, Rule: rule, Reason: reason})
	}
	if p.Name == "" {
		add("metadata.name", "", RuleName, "a pool needs a name")
	} else if msg := dns1123Subdomain(p.Name); msg != "" {
		add("metadata.name", p.Name, RuleName, msg)
	}
	var pfx netip.Prefix
	if strings.TrimSpace(p.Spec.CIDR) == "" {
		add("spec.cidr", "", RuleCIDRSyntax, "IPPool CIDR must be specified, e.g. 10.20.0.0/16")
	} else {
		strict, err := cidr.Parse(p.Spec.CIDR)
		switch {
		case err == nil:
			pfx = strict
		case errors.Is(err, cidr.ErrHostBitsSet):
			var pe *cidr.ParseError
			canon := ""
			if errors.As(err, &pe) && pe.Canonical.IsValid() {
				canon = pe.Canonical.String()
				pfx = pe.Canonical
			}
			errs = append(errs, &FieldError{Pool: p.Name, Field: "spec.cidr", Value: p.Spec.CIDR, Rule: RuleCIDRMasked,
				Reason: "IP pool CIDR is not strictly masked; write " + canon, err: err})
		default:
			errs = append(errs, &FieldError{Pool: p.Name, Field: "spec.cidr", Value: p.Spec.CIDR, Rule: RuleCIDRSyntax,
				Reason: "IPPool CIDR must be a valid subnet, e.g. 10.20.0.0/16: " + err.Error(), err: err})
		}
	}
	for _, m := range []struct {
		field string
		mode  EncapMode
	}{{"spec.ipipMode", p.Spec.IPIPMode}, {"spec.vxlanMode", p.Spec.VXLANMode}} {
		switch m.mode {
		case "", EncapNever, EncapAlways, EncapCrossSubnet:
		default:
			add(m.field, string(m.mode), RuleEncapMode, "must be Never, Always or CrossSubnet")
		}
	}
	if p.Spec.IPIPMode.Enabled() && p.Spec.VXLANMode.Enabled() {
		add("spec.vxlanMode", string(p.Spec.VXLANMode), RuleEncapExclusive,
			fmt.Sprintf("IPIP (ipipMode %s) and VXLAN cannot both be enabled on one pool; set one of them to Never", p.Spec.IPIPMode))
	}
	switch p.Spec.AssignmentMode {
	case "", AssignmentAutomatic, AssignmentManual:
	default:
		add("spec.assignmentMode", string(p.Spec.AssignmentMode), RuleAssignmentMode, "must be Automatic or Manual")
	}
	seen := map[AllowedUse]bool{}
	for i, u := range p.Spec.AllowedUses {
		field := fmt.Sprintf("spec.allowedUses[%d]", i)
		switch u {
		case UseWorkload, UseTunnel, UseLoadBalancer:
		default:
			add(field, string(u), RuleAllowedUses, "must be Workload, Tunnel or LoadBalancer")
			continue
		}
		if seen[u] {
			add(field, string(u), RuleAllowedUses, "listed twice")
		}
		seen[u] = true
	}
	if seen[UseLoadBalancer] && (seen[UseWorkload] || seen[UseTunnel]) {
		add("spec.allowedUses", joinUses(p.Spec.AllowedUses), RuleAllowedUses, "LoadBalancer cannot be combined with Workload or Tunnel")
	}
	if seen[UseTunnel] && p.Spec.NamespaceSelector != "" {
		add("spec.namespaceSelector", p.Spec.NamespaceSelector, RuleAllowedUses, "a pool with allowed use Tunnel cannot have a namespaceSelector")
	}
	if !pfx.IsValid() {
		return errors.Join(errs...)
	}
	v6 := pfx.Addr().Is6()
	bs := p.Spec.BlockSize
	if bs != 0 {
		lo, hi := MinBlockSizeIPv4, MaxBlockSizeIPv4
		fam := "IPv4"
		if v6 {
			lo, hi, fam = MinBlockSizeIPv6, MaxBlockSizeIPv6, "IPv6"
		}
		if bs < lo || bs > hi {
			add("spec.blockSize", fmt.Sprint(bs), RuleBlockSizeRange,
				fmt.Sprintf("block size for an %s pool must be between %d and %d (default %d)", fam, lo, hi, map[bool]int{false: DefaultBlockSizeIPv4, true: DefaultBlockSizeIPv6}[v6]))
			bs = 0
		}
	}
	if bs == 0 {
		// Unset or out of range: judge the size against the family default.
		bs = DefaultBlockSizeIPv4
		if v6 {
			bs = DefaultBlockSizeIPv6
		}
	}
	if !p.Spec.Disabled && pfx.Bits() > bs {
		add("spec.cidr", p.Spec.CIDR, RulePoolSmallerThanBlock,
			fmt.Sprintf("IP pool size is too small for use with Calico IPAM: a /%d holds no whole /%d block; use a prefix of /%d or shorter, or a larger blockSize", pfx.Bits(), bs, bs))
	}
	if (!v6 && pfx.Overlaps(linkLocal4)) || (v6 && pfx.Overlaps(linkLocal6)) {
		ll := linkLocal4
		if v6 {
			ll = linkLocal6
		}
		add("spec.cidr", p.Spec.CIDR, RuleLinkLocal, "IP pool range overlaps with the link-local range "+ll.String())
	}
	if v6 && p.Spec.IPIPMode.Enabled() {
		add("spec.ipipMode", string(p.Spec.IPIPMode), RuleIPIPOnIPv6, "IPIPMode other than Never is not supported on an IPv6 IP pool")
	}
	return errors.Join(errs...)
}

func joinUses(us []AllowedUse) string {
	s := make([]string, len(us))
	for i, u := range us {
		s[i] = string(u)
	}
	return strings.Join(s, ",")
}

// dns1123Subdomain returns "" when s is a valid DNS-1123 subdomain (the rule
// Calico and Kubernetes apply to pool names), or what is wrong.
func dns1123Subdomain(s string) string {
	if len(s) > 253 {
		return fmt.Sprintf("name is too long by %d bytes (at most 253)", len(s)-253)
	}
	alnum := func(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') }
	for _, label := range strings.Split(s, ".") {
		if label == "" || !alnum(label[0]) || !alnum(label[len(label)-1]) {
			return "name must consist of lower case alphanumeric characters, '-' or '.', and start and end with an alphanumeric character"
		}
		for i := 0; i < len(label); i++ {
			if !alnum(label[i]) && label[i] != '-' {
				return "name must consist of lower case alphanumeric characters, '-' or '.', and start and end with an alphanumeric character"
			}
		}
	}
	return ""
}

// Environment is what a new pool must fit into. Empty fields are not checked.
type Environment struct {
	// ClusterCIDRs are the cluster CIDRs the user intends (kube-controller-manager
	// --cluster-cidr, kubeadm podSubnet), at most one per family.
	ClusterCIDRs []netip.Prefix
	// ServiceCIDRs are the Service ranges.
	ServiceCIDRs []netip.Prefix
	// NodeNetworks are the networks the nodes' own addresses live in.
	NodeNetworks []netip.Prefix
	// Pools are the existing pools; one with the same name as the checked
	// pool is ignored.
	Pools []IPPool
}

// ValidateNewPool applies Validate and then cidrshift's own rules: the pool
// lies inside the intended cluster CIDR of its family, and (by cidr.Analyze)
// does not overlap a Service CIDR, the node network or another pool. It
// returns every broken rule as joined *FieldError values.
func ValidateNewPool(p IPPool, env Environment) error {
	errs := []error{}
	if err := Validate(p); err != nil {
		errs = append(errs, err)
	}
	pfx, err := p.Prefix()
	if err != nil {
		return errors.Join(errs...)
	}
	add := func(rule Rule, reason string) {
		errs = append(errs, &FieldError{Pool: p.Name, Field: "spec.cidr", Value: p.Spec.CIDR, Rule: rule, Reason: reason})
	}
	if len(env.ClusterCIDRs) > 0 {
		inside := false
		var same []string
		for _, c := range env.ClusterCIDRs {
			if c.Addr().Is4() != pfx.Addr().Is4() {
				continue
			}
			same = append(same, c.String())
			if cidr.ContainsPrefix(c, pfx) {
				inside = true
			}
		}
		switch {
		case len(same) == 0:
			add(RuleOutsideClusterCIDR, fmt.Sprintf("the cluster has no %s cluster CIDR (given: %s); pod addresses outside the cluster CIDR are treated as external by kube-proxy", cidr.FamilyOf(pfx), prefixList(env.ClusterCIDRs)))
		case !inside:
			add(RuleOutsideClusterCIDR, fmt.Sprintf("lies outside the cluster CIDR %s; keep pools inside the cluster CIDR (or widen the cluster CIDR first)", strings.Join(same, ",")))
		}
	}
	ranges := []cidr.Range{{Name: "IPPool " + p.Name, Kind: cidr.KindCalicoPool, Prefix: pfx}}
	for _, s := range env.ServiceCIDRs {
		ranges = append(ranges, cidr.Range{Name: "Service CIDR", Kind: cidr.KindServiceCIDR, Prefix: s})
	}
	for _, n := range env.NodeNetworks {
		ranges = append(ranges, cidr.Range{Name: "node network", Kind: cidr.KindNodeNetwork, Prefix: n})
	}
	for _, o := range env.Pools {
		if o.Name == p.Name {
			continue
		}
		op, err := o.Prefix()
		if err != nil {
			continue
		}
		ranges = append(ranges, cidr.Range{Name: "IPPool " + o.Name, Kind: cidr.KindCalicoPool, Prefix: op})
	}
	self := ranges[0]
	for _, ov := range cidr.Analyze(ranges, cidr.AnalyzeOptions{}) {
		if ov.Severity != cidr.SeverityError {
			continue
		}
		var other cidr.Range
		switch self {
		case ov.Outer:
			other = ov.Inner
		case ov.Inner:
			other = ov.Outer
		default:
			continue
		}
		switch other.Kind {
		case cidr.KindServiceCIDR:
			add(RuleServiceOverlap, fmt.Sprintf("overlaps the Service CIDR %s; pod and Service addresses would collide", other.Prefix))
		case cidr.KindNodeNetwork:
			add(RuleNodeNetworkOverlap, fmt.Sprintf("overlaps the node network %s; routing to nodes or pods would break", other.Prefix))
		case cidr.KindCalicoPool:
			add(RulePoolOverlap, fmt.Sprintf("overlaps %s (%s); Calico IP pools must not overlap", other.Name, other.Prefix))
		}
	}
	return errors.Join(errs...)
}

func prefixList(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}
