package nodecidr

import (
	"cmp"
	"context"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
)

// FindingKind names a kind of podCIDR problem.
type FindingKind string

// The kinds of finding Audit and Verify report.
const (
	// FindingMissing: the node has no podCIDR; the CNI cannot give its pods addresses.
	FindingMissing FindingKind = "missing-podcidr"
	// FindingMissingFamily: a dual-stack cluster's node has a podCIDR for one family only.
	FindingMissingFamily FindingKind = "missing-family"
	// FindingDuplicate: two or more nodes hold the same podCIDR; pods on them are unreachable.
	FindingDuplicate FindingKind = "duplicate-podcidr"
	// FindingOverlap: one node's podCIDR contains another's.
	FindingOverlap FindingKind = "overlapping-podcidr"
	// FindingOutOfRange: a podCIDR lies outside the cluster CIDR of its position.
	FindingOutOfRange FindingKind = "out-of-range"
	// FindingMaskMismatch: a podCIDR's prefix length differs from the node mask.
	FindingMaskMismatch FindingKind = "mask-mismatch"
	// FindingPodCIDRMismatch: spec.podCIDR and spec.podCIDRs[0] disagree.
	FindingPodCIDRMismatch FindingKind = "podcidr-mismatch"
	// FindingFamilyOrder: podCIDRs are not in the cluster CIDRs' family order.
	FindingFamilyOrder FindingKind = "family-order"
	// FindingInvalid: a podCIDR cannot be parsed, or a node has more than one per family.
	FindingInvalid FindingKind = "invalid-podcidr"
	// FindingNonCanonical: a podCIDR has host bits set (components silently drop them).
	FindingNonCanonical FindingKind = "non-canonical"
	// FindingCapacity: the cluster CIDR has too few free node subnets, or cannot be cut into them.
	FindingCapacity FindingKind = "capacity"
	// FindingPodIPOutside: running pods have IPs outside their node's podCIDR.
	FindingPodIPOutside FindingKind = "pod-ip-outside-podcidr"
	// FindingNotApplied: Verify found a planned node without its planned podCIDRs.
	FindingNotApplied FindingKind = "not-applied"
	// FindingNodeMissing: Verify found a planned node missing from the cluster.
	FindingNodeMissing FindingKind = "node-missing"
	// FindingMetadataChanged: Verify found labels, annotations, taints,
	// unschedulable or providerID that differ from the node's backup.
	FindingMetadataChanged FindingKind = "metadata-changed"
)

// Finding is one problem, naming the nodes and CIDRs involved.
type Finding struct {
	Kind     FindingKind   `json:"kind"`
	Severity cidr.Severity `json:"severity"`
	// Nodes are the nodes involved. For a duplicate, the node that has held
	// the subnet longest (oldest creationTimestamp, then name) comes first.
	Nodes []string `json:"nodes"`
	// CIDRs are the podCIDRs (and cluster CIDRs) involved, as written.
	CIDRs []string `json:"cidrs,omitempty"`
	// Pods names up to ten pods (namespace/name IP) for pod findings.
	Pods []string `json:"pods,omitempty"`
	// Message says what is wrong and what it breaks.
	Message string `json:"message"`
}

// String renders the finding as "severity kind: message".
func (f Finding) String() string { return fmt.Sprintf("%s %s: %s", f.Severity, f.Kind, f.Message) }

// Capacity is how many node subnets one family's cluster CIDR has left.
type Capacity struct {
	Family      cidr.Family  `json:"family"`
	ClusterCIDR netip.Prefix `json:"clusterCIDR"`
	NodeMask    int          `json:"nodeMask"`
	// Subnets is how many node subnets the cluster CIDR holds: 2^(NodeMask - prefix length).
	Subnets *big.Int `json:"subnets"`
	// Reserved counts subnets overlapping the Service CIDR, which
	// kube-controller-manager never hands out.
	Reserved *big.Int `json:"reserved"`
	// Used counts subnets held by nodes (a subnet shared by two nodes counts once).
	Used *big.Int `json:"used"`
	// Free is what is left for new nodes.
	Free *big.Int `json:"free"`
	// NodesWithout counts audited nodes with no podCIDR of this family.
	NodesWithout int `json:"nodesWithout"`
}

// Report is the result of an audit.
type Report struct {
	// Nodes is how many nodes were audited.
	Nodes int `json:"nodes"`
	// Pods is how many pods had their IPs checked (zero when pods were not audited).
	Pods int `json:"pods,omitempty"`
	// Layout is the cluster layout the nodes were checked against, if one was given.
	Layout *cidr.NodeIPAMLayout `json:"layout,omitempty"`
	// Capacity has one entry per cluster CIDR of Layout.
	Capacity []Capacity `json:"capacity,omitempty"`
	// Findings are sorted by severity (errors first), kind, then node.
	Findings []Finding `json:"findings"`
}

// Count returns how many findings have severity s.
func (r *Report) Count(s cidr.Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// NodesWith returns the sorted, distinct nodes named by findings of kind k.
// For duplicates, only the nodes that would have to give up the subnet are
// returned (every holder but the longest-standing one).
func (r *Report) NodesWith(k FindingKind) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Kind != k {
			continue
		}
		if k == FindingDuplicate && len(f.Nodes) > 1 {
			out = append(out, f.Nodes[1:]...)
			continue
		}
		out = append(out, f.Nodes...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// AuditOptions configures Audit and AuditNodes.
type AuditOptions struct {
	ListOptions
	// Layout is the cluster's current node IPAM layout (cluster CIDRs, node
	// masks, Service CIDRs). When ClusterCIDRs is empty the range, mask,
	// family-order and capacity checks are skipped.
	Layout cidr.NodeIPAMLayout
	// Pods also checks that every running pod's IP lies in its node's podCIDR
	// (the symptom of duplicate or changed podCIDRs). Audit lists pods page by
	// page; AuditNodes checks the pods it is given.
	Pods bool
}

// Audit lists the cluster's Nodes (page by page) and, when opts.Pods is set,
// its pods, and reports every podCIDR problem. It only reads.
func Audit(ctx context.Context, client kubernetes.Interface, opts AuditOptions) (*Report, error) {
	nodes, err := ListNodes(ctx, client, opts.ListOptions)
	if err != nil {
		return nil, fmt.Errorf("auditing node podCIDRs: %w", err)
	}
	return AuditListed(ctx, client, nodes, opts)
}

// AuditListed is Audit of Nodes the caller already listed (ListNodes), for
// callers that need the Nodes too (a preflight, a plan) and should not list
// them twice: pods are paged through client when opts.Pods is set.
func AuditListed(ctx context.Context, client kubernetes.Interface, nodes []corev1.Node, opts AuditOptions) (*Report, error) {
	var pods *podScan
	if opts.Pods {
		pods = newPodScan(nodes)
		add := func(p *corev1.Pod) {
			s := SummarizePod(p)
			pods.add(&s)
		}
		err := listPods(ctx, client, "", "spec.nodeName!=", "", opts.pageSize(), pods.reset, add)
		if err != nil {
			return nil, fmt.Errorf("auditing pod IPs: %w", err)
		}
	}
	return audit(nodes, pods, opts), nil
}

// AuditNodes audits Nodes read elsewhere, for example from an offline dump
// (ReadDump). Pods are checked when opts.Pods is set; SummarizePod turns a
// corev1.Pod into the PodSummary the check reads. opts.LabelSelector and
// PageSize are ignored.
func AuditNodes(nodes []corev1.Node, pods []PodSummary, opts AuditOptions) *Report {
	var scan *podScan
	if opts.Pods {
		scan = newPodScan(nodes)
		for i := range pods {
			scan.add(&pods[i])
		}
	}
	return audit(nodes, scan, opts)
}

func audit(nodes []corev1.Node, pods *podScan, opts AuditOptions) *Report {
	ptrs := make([]*corev1.Node, len(nodes))
	for i := range nodes {
		ptrs[i] = &nodes[i]
	}
	a := analyze(ptrs, opts.Layout)
	r := &Report{Nodes: len(nodes), Findings: a.findings, Capacity: a.capacity}
	if len(opts.Layout.ClusterCIDRs) > 0 {
		l := opts.Layout
		r.Layout = &l
	}
	if pods != nil {
		r.Pods = pods.checked
		r.Findings = append(r.Findings, pods.findings()...)
	}
	sortFindings(r.Findings)
	return r
}

var severityRank = map[cidr.Severity]int{cidr.SeverityError: 0, cidr.SeverityWarning: 1, cidr.SeverityInfo: 2}

func sortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		if c := cmp.Compare(severityRank[a.Severity], severityRank[b.Severity]); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return slices.Compare(a.Nodes, b.Nodes)
	})
}

// entry is one podCIDR of one node.
type entry struct {
	node   *corev1.Node
	index  int
	text   string
	prefix netip.Prefix // invalid when text does not parse
	// bad: unparsable, out of range, wrong position or family; a node with a
	// bad entry must be given new podCIDRs by fix.
	bad bool
}

// analysis is what every mode needs to know about the nodes' podCIDRs.
type analysis struct {
	layout   cidr.NodeIPAMLayout
	entries  map[string][]*entry // by node name, in podCIDRs order
	groups   []*group            // distinct valid prefixes
	byPrefix map[netip.Prefix]*group
	overlaps [][2]*group // outer, inner
	findings []Finding
	capacity []Capacity
}

// group is every entry holding one prefix, oldest node first.
type group struct {
	prefix  netip.Prefix
	entries []*entry
}

// olderFirst orders nodes by how long they have existed: creationTimestamp, then name.
func olderFirst(a, b *corev1.Node) int {
	if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

func analyze(nodes []*corev1.Node, layout cidr.NodeIPAMLayout) *analysis {
	a := &analysis{layout: layout, entries: make(map[string][]*entry, len(nodes)), byPrefix: make(map[netip.Prefix]*group)}
	add := func(f Finding) { a.findings = append(a.findings, f) }
	clusters := layout.ClusterCIDRs
	for _, n := range nodes {
		if n.Spec.PodCIDR != "" && len(n.Spec.PodCIDRs) > 0 && n.Spec.PodCIDR != n.Spec.PodCIDRs[0] {
			add(Finding{Kind: FindingPodCIDRMismatch, Severity: cidr.SeverityWarning, Nodes: []string{n.Name},
				CIDRs: append([]string{n.Spec.PodCIDR}, n.Spec.PodCIDRs...),
				Message: fmt.Sprintf("node %s: spec.podCIDR %s differs from spec.podCIDRs[0] %s; the API server uses spec.podCIDR alone, so they must be equal",
					n.Name, n.Spec.PodCIDR, n.Spec.PodCIDRs[0])})
		}
		texts := PodCIDRsOf(n)
		if len(texts) == 0 {
			msg := fmt.Sprintf("node %s has no podCIDR: the CNI cannot give its pods addresses", n.Name)
			add(Finding{Kind: FindingMissing, Severity: cidr.SeverityError, Nodes: []string{n.Name}, Message: msg})
			a.entries[n.Name] = nil
			continue
		}
		var es []*entry
		fams := map[cidr.Family]int{}
		for i, t := range texts {
			e := &entry{node: n, index: i, text: t}
			es = append(es, e)
			p, w, err := cidr.ParseLenient(t)
			if err != nil {
				e.bad = true
				add(Finding{Kind: FindingInvalid, Severity: cidr.SeverityError, Nodes: []string{n.Name}, CIDRs: []string{t},
					Message: fmt.Sprintf("node %s: podCIDRs[%d] %q is not a CIDR (%v); kube-controller-manager fails to start on it", n.Name, i, t, err)})
				continue
			}
			e.prefix = p
			if w != nil {
				add(Finding{Kind: FindingNonCanonical, Severity: cidr.SeverityWarning, Nodes: []string{n.Name}, CIDRs: []string{t},
					Message: fmt.Sprintf("node %s: podCIDRs[%d] %s has host bits set; components use %s", n.Name, i, t, p)})
			}
			fams[cidr.FamilyOf(p)]++
		}
		if len(texts) > 2 || fams[cidr.IPv4] > 1 || fams[cidr.IPv6] > 1 {
			for _, e := range es {
				e.bad = true
			}
			add(Finding{Kind: FindingInvalid, Severity: cidr.SeverityError, Nodes: []string{n.Name}, CIDRs: texts,
				Message: fmt.Sprintf("node %s has podCIDRs %s: at most one per IP family is allowed", n.Name, strings.Join(texts, ","))})
		}
		a.entries[n.Name] = es
		if len(clusters) == 0 {
			continue
		}
		for _, e := range es {
			if !e.prefix.IsValid() {
				continue
			}
			a.checkRange(e, add)
		}
		if len(clusters) > 1 {
			var missing []string
			for _, c := range clusters {
				if fams[cidr.FamilyOf(c)] == 0 {
					missing = append(missing, cidr.FamilyOf(c).String())
				}
			}
			if len(missing) > 0 {
				add(Finding{Kind: FindingMissingFamily, Severity: cidr.SeverityWarning, Nodes: []string{n.Name}, CIDRs: texts,
					Message: fmt.Sprintf("node %s has no %s podCIDR in a dual-stack cluster; it can only be added by recreating the node", n.Name, strings.Join(missing, "/"))})
			}
		}
	}
	a.findDuplicates(nodes, add)
	a.computeCapacity(nodes, add)
	return a
}

// checkRange applies kube-controller-manager's positional rule: podCIDRs[i]
// belongs to cluster CIDR i.
func (a *analysis) checkRange(e *entry, add func(Finding)) {
	n, clusters := e.node, a.layout.ClusterCIDRs
	if e.index >= len(clusters) {
		e.bad = true
		add(Finding{Kind: FindingOutOfRange, Severity: cidr.SeverityError, Nodes: []string{n.Name}, CIDRs: []string{e.text},
			Message: fmt.Sprintf("node %s: podCIDRs[%d] %s has no cluster CIDR at index %d (cluster CIDRs: %s); kube-controller-manager exits at start-up",
				n.Name, e.index, e.text, e.index, joinPrefixes(clusters))})
		return
	}
	c := clusters[e.index]
	if cidr.FamilyOf(c) != cidr.FamilyOf(e.prefix) {
		// The subnet itself may be fine in its family's cluster CIDR: then
		// only the order must change (which still means recreating the node).
		e.bad = true
		for _, other := range clusters {
			if cidr.FamilyOf(other) == cidr.FamilyOf(e.prefix) && cidr.ContainsPrefix(other, e.prefix) {
				e.bad = false
			}
		}
		add(Finding{Kind: FindingFamilyOrder, Severity: cidr.SeverityError, Nodes: []string{n.Name}, CIDRs: []string{e.text, c.String()},
			Message: fmt.Sprintf("node %s: podCIDRs[%d] %s is %s but cluster CIDR %d is %s %s; kube-controller-manager matches them by position and exits at start-up",
				n.Name, e.index, e.text, cidr.FamilyOf(e.prefix), e.index, cidr.FamilyOf(c), c)})
		return
	}
	if !cidr.ContainsPrefix(c, e.prefix) {
		e.bad = true
		msg := fmt.Sprintf("node %s: podCIDR %s is outside the cluster CIDR %s", n.Name, e.prefix, c)
		if !c.Overlaps(e.prefix) {
			msg += fmt.Sprintf("; kube-controller-manager crash-loops at its next start (cidr %s is out the range of cluster cidr %s)", e.prefix, c)
		}
		add(Finding{Kind: FindingOutOfRange, Severity: cidr.SeverityError, Nodes: []string{n.Name}, CIDRs: []string{e.text, c.String()}, Message: msg})
		return
	}
	if e.index < len(a.layout.NodeMasks) && a.layout.NodeMasks[e.index] != 0 && e.prefix.Bits() != a.layout.NodeMasks[e.index] {
		add(Finding{Kind: FindingMaskMismatch, Severity: cidr.SeverityWarning, Nodes: []string{n.Name}, CIDRs: []string{e.text},
			Message: fmt.Sprintf("node %s: podCIDR %s is a /%d but the node mask is /%d", n.Name, e.prefix, e.prefix.Bits(), a.layout.NodeMasks[e.index])})
	}
}

// findDuplicates groups equal prefixes (a sort, O(n log n)) and finds nesting
// between distinct prefixes with cidr.Analyze.
func (a *analysis) findDuplicates(nodes []*corev1.Node, add func(Finding)) {
	for _, n := range nodes {
		for _, e := range a.entries[n.Name] {
			if !e.prefix.IsValid() {
				continue
			}
			g := a.byPrefix[e.prefix]
			if g == nil {
				g = &group{prefix: e.prefix}
				a.byPrefix[e.prefix] = g
				a.groups = append(a.groups, g)
			}
			g.entries = append(g.entries, e)
		}
	}
	slices.SortFunc(a.groups, func(x, y *group) int { return comparePrefix(x.prefix, y.prefix) })
	ranges := make([]cidr.Range, 0, len(a.groups))
	for _, g := range a.groups {
		slices.SortFunc(g.entries, func(x, y *entry) int { return olderFirst(x.node, y.node) })
		ranges = append(ranges, cidr.Range{Name: g.prefix.String(), Kind: cidr.KindNodePodCIDR, Prefix: g.prefix})
		if len(g.entries) > 1 {
			names := make([]string, len(g.entries))
			for i, e := range g.entries {
				names[i] = e.node.Name
			}
			add(Finding{Kind: FindingDuplicate, Severity: cidr.SeverityError, Nodes: names, CIDRs: []string{g.prefix.String()},
				Message: fmt.Sprintf("podCIDR %s is shared by %s (held longest) and %s; pods on these nodes get the same addresses and are unreachable",
					g.prefix, names[0], strings.Join(names[1:], ", "))})
		}
	}
	for _, o := range cidr.Analyze(ranges, cidr.AnalyzeOptions{}) {
		if o.Outer.Kind != cidr.KindNodePodCIDR || o.Inner.Kind != cidr.KindNodePodCIDR || o.Relation == cidr.Equal {
			continue
		}
		outer, inner := a.byPrefix[o.Outer.Prefix], a.byPrefix[o.Inner.Prefix]
		a.overlaps = append(a.overlaps, [2]*group{outer, inner})
		add(Finding{Kind: FindingOverlap, Severity: cidr.SeverityError,
			Nodes: []string{outer.entries[0].node.Name, inner.entries[0].node.Name},
			CIDRs: []string{outer.prefix.String(), inner.prefix.String()},
			Message: fmt.Sprintf("node %s's podCIDR %s contains node %s's podCIDR %s; their pods can get the same addresses",
				outer.entries[0].node.Name, outer.prefix, inner.entries[0].node.Name, inner.prefix)})
	}
}

func (a *analysis) computeCapacity(nodes []*corev1.Node, add func(Finding)) {
	for i, c := range a.layout.ClusterCIDRs {
		fam := cidr.FamilyOf(c)
		mask := cidr.DefaultNodeMask(fam)
		if i < len(a.layout.NodeMasks) && a.layout.NodeMasks[i] != 0 {
			mask = a.layout.NodeMasks[i]
		}
		alloc, err := cidr.NewClusterAllocator(c.Masked(), mask, serviceFor(a.layout, fam))
		if err != nil {
			add(Finding{Kind: FindingCapacity, Severity: cidr.SeverityError, CIDRs: []string{c.String()},
				Message: fmt.Sprintf("cluster CIDR %s cannot be cut into /%d node subnets: %v", c, mask, err)})
			continue
		}
		reserved := alloc.Held()
		without := 0
		for _, n := range nodes {
			found := false
			for _, e := range a.entries[n.Name] {
				if e.index == i && e.prefix.IsValid() && cidr.FamilyOf(e.prefix) == fam {
					found = true
					alloc.Occupy(e.prefix, "")
				}
			}
			if !found {
				without++
			}
		}
		total := new(big.Int).Lsh(big.NewInt(1), uint(mask-c.Bits()))
		used := new(big.Int).Sub(alloc.Held(), reserved)
		capy := Capacity{Family: fam, ClusterCIDR: c, NodeMask: mask, Subnets: total, Reserved: reserved, Used: used, Free: alloc.Free(), NodesWithout: without}
		a.capacity = append(a.capacity, capy)
		free := capy.Free
		switch {
		case without > 0 && free.Cmp(big.NewInt(int64(without))) < 0:
			add(Finding{Kind: FindingCapacity, Severity: cidr.SeverityError, CIDRs: []string{c.String()},
				Message: fmt.Sprintf("%d nodes have no %s podCIDR but only %s /%d subnets are free in %s", without, fam, free, mask, c)})
		case free.Sign() == 0:
			add(Finding{Kind: FindingCapacity, Severity: cidr.SeverityWarning, CIDRs: []string{c.String()},
				Message: fmt.Sprintf("no /%d subnet is free in %s: the next node to join gets no %s podCIDR", mask, c, fam)})
		}
	}
}

// serviceFor returns the layout's Service CIDR of family f, if any.
func serviceFor(l cidr.NodeIPAMLayout, f cidr.Family) netip.Prefix {
	for _, s := range l.ServiceCIDRs {
		if cidr.FamilyOf(s) == f {
			return s
		}
	}
	return netip.Prefix{}
}

func comparePrefix(a, b netip.Prefix) int {
	if c := cmp.Compare(a.Addr().BitLen(), b.Addr().BitLen()); c != 0 {
		return c
	}
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// podScan collects pods whose IPs lie outside their node's podCIDR.
type podScan struct {
	nodes   map[string]*corev1.Node
	cidrs   map[string][]netip.Prefix // parsed once per node
	checked int
	bad     map[string]*podBad
}

type podBad struct {
	count    int
	examples []string
}

func newPodScan(nodes []corev1.Node) *podScan {
	s := &podScan{nodes: make(map[string]*corev1.Node, len(nodes)), cidrs: make(map[string][]netip.Prefix, len(nodes)), bad: map[string]*podBad{}}
	for i := range nodes {
		n := &nodes[i]
		s.nodes[n.Name] = n
		for _, c := range PodCIDRsOf(n) {
			if p, _, err := cidr.ParseLenient(c); err == nil {
				s.cidrs[n.Name] = append(s.cidrs[n.Name], p)
			}
		}
	}
	return s
}

func (s *podScan) reset() {
	s.checked = 0
	s.bad = map[string]*podBad{}
}

func (s *podScan) add(p *PodSummary) {
	if p.NodeName == "" || p.HostNetwork || p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed {
		return
	}
	n := s.nodes[p.NodeName]
	if n == nil {
		return
	}
	ips := p.IPs
	if len(ips) == 0 {
		return
	}
	s.checked++
	for _, t := range ips {
		ip, err := netip.ParseAddr(t)
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		var match netip.Prefix
		for _, pr := range s.cidrs[n.Name] {
			if pr.Addr().Is4() == ip.Is4() {
				match = pr
				break
			}
		}
		if !match.IsValid() || match.Contains(ip) {
			continue
		}
		b := s.bad[n.Name]
		if b == nil {
			b = &podBad{}
			s.bad[n.Name] = b
		}
		b.count++
		if len(b.examples) < 10 {
			b.examples = append(b.examples, p.Namespace+"/"+p.Name+" "+ip.String())
		}
		break
	}
}

func (s *podScan) findings() []Finding {
	var out []Finding
	for name, b := range s.bad {
		cidrs := PodCIDRsOf(s.nodes[name])
		out = append(out, Finding{Kind: FindingPodIPOutside, Severity: cidr.SeverityError, Nodes: []string{name}, CIDRs: cidrs, Pods: b.examples,
			Message: fmt.Sprintf("%d pods on node %s have IPs outside its podCIDR %s (e.g. %s); they got their addresses under an older podCIDR and must be restarted after the node's CNI is reset",
				b.count, name, strings.Join(cidrs, ","), b.examples[0])})
	}
	return out
}
