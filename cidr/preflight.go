package cidr

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ControllerManagerFlags are the kube-controller-manager flags that decide
// whether its node IPAM controller starts. Values are the flag texts as they
// would appear on the command line; zero values mean "flag not set".
type ControllerManagerFlags struct {
	AllocateNodeCIDRs     bool   `json:"allocateNodeCIDRs"`
	ClusterCIDR           string `json:"clusterCIDR,omitempty"`
	NodeCIDRMaskSize      int    `json:"nodeCIDRMaskSize,omitempty"`
	NodeCIDRMaskSizeIPv4  int    `json:"nodeCIDRMaskSizeIPv4,omitempty"`
	NodeCIDRMaskSizeIPv6  int    `json:"nodeCIDRMaskSizeIPv6,omitempty"`
	ServiceClusterIPRange string `json:"serviceClusterIPRange,omitempty"`
}

// Args renders the flags as kube-controller-manager arguments.
func (f ControllerManagerFlags) Args() []string {
	args := []string{"--allocate-node-cidrs=" + strconv.FormatBool(f.AllocateNodeCIDRs)}
	add := func(name, v string) {
		if v != "" && v != "0" {
			args = append(args, name+"="+v)
		}
	}
	add("--cluster-cidr", f.ClusterCIDR)
	add("--node-cidr-mask-size", strconv.Itoa(f.NodeCIDRMaskSize))
	add("--node-cidr-mask-size-ipv4", strconv.Itoa(f.NodeCIDRMaskSizeIPv4))
	add("--node-cidr-mask-size-ipv6", strconv.Itoa(f.NodeCIDRMaskSizeIPv6))
	add("--service-cluster-ip-range", f.ServiceClusterIPRange)
	return args
}

// NodePodCIDRs is what the preflight needs of a Node: its name and
// spec.podCIDRs (or spec.podCIDR when podCIDRs is empty) in order.
type NodePodCIDRs struct {
	Name     string   `json:"name"`
	PodCIDRs []string `json:"podCIDRs"`
}

// NodeIPAMLayout is the layout kube-controller-manager derives from its flags.
type NodeIPAMLayout struct {
	ClusterCIDRs []netip.Prefix `json:"clusterCIDRs"`
	NodeMasks    []int          `json:"nodeMasks"`
	ServiceCIDRs []netip.Prefix `json:"serviceCIDRs,omitempty"`
}

// NodeCrash is one node whose podCIDRs make kube-controller-manager exit at start-up.
type NodeCrash struct {
	Node    string `json:"node"`
	PodCIDR string `json:"podCIDR"`
	Index   int    `json:"index"`
	// Message is the error kube-controller-manager logs before it exits.
	Message string `json:"message"`
}

// PreflightResult says whether kube-controller-manager would start with the
// proposed flags and the live nodes.
type PreflightResult struct {
	// WouldStart is true when neither the flags nor any node would stop it.
	WouldStart bool `json:"wouldStart"`
	// IPAMDisabled is true when --allocate-node-cidrs is off: node IPAM does not run.
	IPAMDisabled bool `json:"ipamDisabled,omitempty"`
	// Layout is what the flags mean once parsed (set when the flags are valid).
	Layout *NodeIPAMLayout `json:"layout,omitempty"`
	// FlagErrors are the errors the flags alone cause, as the component words them.
	FlagErrors []string `json:"flagErrors,omitempty"`
	// Crashes lists every node that would make the controller exit. The
	// component stops at the first one it meets; fixing it reveals the next, so
	// all are listed.
	Crashes []NodeCrash `json:"crashes,omitempty"`
	// Warnings are values the component silently reinterprets (host bits set).
	Warnings []Warning `json:"warnings,omitempty"`
}

// ParseControllerManagerFlags applies kube-controller-manager's own parsing
// and validation to the node IPAM flags (cmd/kube-controller-manager
// newNodeIpamController, setNodeCIDRMaskSizes, nodeipam.NewNodeIpamController,
// cidrset.NewCIDRSet). Values are parsed leniently, as the component does, and
// their warnings returned. The error joins *RuleError values whose Reason is
// the text the component logs.
func ParseControllerManagerFlags(f ControllerManagerFlags) (NodeIPAMLayout, []Warning, error) {
	refuse := func(field, value, reason string) error {
		return &RuleError{Component: KubeControllerManager, Field: field, Value: value, Reason: reason}
	}
	var layout NodeIPAMLayout
	if strings.TrimSpace(f.ClusterCIDR) == "" {
		return layout, nil, refuse("--cluster-cidr", `""`, "Controller: Must specify --cluster-cidr if --allocate-node-cidrs is set")
	}
	var warnings []Warning
	items := strings.Split(strings.TrimSpace(f.ClusterCIDR), ",")
	for _, item := range items {
		p, w, err := ParseLenient(item)
		if err != nil {
			return layout, warnings, errors.Join(refuse("--cluster-cidr", f.ClusterCIDR, fmt.Sprintf("invalid CIDR address: %s", item)), err)
		}
		if w != nil {
			warnings = append(warnings, *w)
		}
		layout.ClusterCIDRs = append(layout.ClusterCIDRs, p)
	}
	cidrs := layout.ClusterCIDRs
	dual := len(cidrs) == 2 && FamilyOf(cidrs[0]) != FamilyOf(cidrs[1])
	if len(cidrs) > 1 && !dual {
		return layout, warnings, refuse("--cluster-cidr", f.ClusterCIDR, fmt.Sprintf("len of ClusterCIDRs==%d and they are not configured as dual stack (at least one from each IPFamily", len(cidrs)))
	}

	v4, v6 := DefaultNodeMaskIPv4, DefaultNodeMaskIPv6
	switch {
	case dual:
		if f.NodeCIDRMaskSize != 0 {
			return layout, warnings, refuse("--node-cidr-mask-size", strconv.Itoa(f.NodeCIDRMaskSize), "usage of --node-cidr-mask-size is not allowed with dual-stack clusters")
		}
		if f.NodeCIDRMaskSizeIPv4 != 0 {
			v4 = f.NodeCIDRMaskSizeIPv4
		}
		if f.NodeCIDRMaskSizeIPv6 != 0 {
			v6 = f.NodeCIDRMaskSizeIPv6
		}
	case f.NodeCIDRMaskSize != 0:
		if f.NodeCIDRMaskSizeIPv4 != 0 || f.NodeCIDRMaskSizeIPv6 != 0 {
			return layout, warnings, refuse("--node-cidr-mask-size", strconv.Itoa(f.NodeCIDRMaskSize), "usage of --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6 is not allowed if --node-cidr-mask-size is set. For dual-stack clusters please unset it and use IPFamily specific flags")
		}
		v4, v6 = f.NodeCIDRMaskSize, f.NodeCIDRMaskSize
	default:
		single6 := FamilyOf(cidrs[0]) == IPv6
		if f.NodeCIDRMaskSizeIPv4 != 0 {
			if single6 {
				return layout, warnings, refuse("--node-cidr-mask-size-ipv4", strconv.Itoa(f.NodeCIDRMaskSizeIPv4), "usage of --node-cidr-mask-size-ipv4 is not allowed for a single-stack IPv6 cluster")
			}
			v4 = f.NodeCIDRMaskSizeIPv4
		}
		if f.NodeCIDRMaskSizeIPv6 != 0 {
			if !single6 {
				return layout, warnings, refuse("--node-cidr-mask-size-ipv6", strconv.Itoa(f.NodeCIDRMaskSizeIPv6), "usage of --node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster")
			}
			v6 = f.NodeCIDRMaskSizeIPv6
		}
	}
	for _, c := range cidrs {
		m := v4
		if FamilyOf(c) == IPv6 {
			m = v6
		}
		if m < 0 || m > FamilyOf(c).AddrBits() {
			return layout, warnings, refuse("--node-cidr-mask-size", strconv.Itoa(m), fmt.Sprintf("an %s node mask must be between 0 and %d", FamilyOf(c), FamilyOf(c).AddrBits()))
		}
		layout.NodeMasks = append(layout.NodeMasks, m)
	}
	if s := strings.TrimSpace(f.ServiceClusterIPRange); s != "" {
		// The component only logs a Service CIDR it cannot parse.
		for _, item := range strings.Split(s, ",") {
			if p, w, err := ParseLenient(item); err == nil {
				layout.ServiceCIDRs = append(layout.ServiceCIDRs, p)
				if w != nil {
					warnings = append(warnings, *w)
				}
			}
		}
		if len(layout.ServiceCIDRs) == 2 && FamilyOf(layout.ServiceCIDRs[0]) == FamilyOf(layout.ServiceCIDRs[1]) {
			return layout, warnings, refuse("--service-cluster-ip-range", f.ServiceClusterIPRange, "serviceCIDR and secondaryServiceCIDR are not dualstack (from different IPfamiles)")
		}
	}
	var errs []error
	for i, c := range cidrs {
		for _, err := range nodeIPAMRules(c, layout.NodeMasks[i]) {
			if errors.Is(err, ErrRule) { // host bits are a warning here, already collected
				errs = append(errs, err)
			}
		}
	}
	return layout, warnings, errors.Join(errs...)
}

// ControllerManagerPreflight predicts whether kube-controller-manager would
// start with the proposed flags and these nodes. At start-up its range
// allocator occupies every node's podCIDRs; a podCIDR outside the cluster CIDR
// of its position (or a position with no cluster CIDR, or garbage) makes it
// exit, and every newly elected leader exits the same way: a crash loop.
func ControllerManagerPreflight(f ControllerManagerFlags, nodes []NodePodCIDRs) PreflightResult {
	res := PreflightResult{}
	if !f.AllocateNodeCIDRs {
		res.IPAMDisabled = true
		res.WouldStart = true
		return res
	}
	layout, warnings, err := ParseControllerManagerFlags(f)
	res.Warnings = warnings
	if err != nil {
		var re *RuleError
		for _, e := range flatten(err) {
			if errors.As(e, &re) {
				res.FlagErrors = append(res.FlagErrors, re.Reason)
			}
		}
		return res
	}
	res.Layout = &layout
	for _, n := range nodes {
		for idx, text := range n.PodCIDRs {
			if c, ok := podCIDRCrash(n.Name, idx, text, layout.ClusterCIDRs); !ok {
				res.Crashes = append(res.Crashes, c)
				break // the allocator stops at the node's first bad entry
			}
		}
	}
	res.WouldStart = len(res.Crashes) == 0
	return res
}

// podCIDRCrash checks one node podCIDR as the range allocator's occupyCIDRs does.
func podCIDRCrash(node string, idx int, text string, clusters []netip.Prefix) (NodeCrash, bool) {
	c := NodeCrash{Node: node, PodCIDR: text, Index: idx}
	p, _, err := ParseLenient(text)
	if err != nil {
		c.Message = fmt.Sprintf("failed to parse node %s, CIDR %s", node, text)
		return c, false
	}
	if idx >= len(clusters) {
		c.Message = fmt.Sprintf("node:%s has an allocated cidr: %s at index:%d that does not exist in cluster cidrs configuration", node, text, idx)
		return c, false
	}
	if !p.Overlaps(clusters[idx]) {
		c.Message = fmt.Sprintf("failed to mark cidr[%s] at idx [%d] as occupied for node: %s: cidr %s is out the range of cluster cidr %s", p, idx, node, p, clusters[idx])
		return c, false
	}
	return c, true
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
