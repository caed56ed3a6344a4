package kubeadmcfg

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
)

// Intent is the layout asked for. Empty fields keep what the cluster has.
type Intent struct {
	// PodSubnet is the new pod CIDR (one CIDR or a dual-stack pair, comma-separated).
	PodSubnet string `json:"podSubnet,omitempty"`
	// ServiceSubnet is the new Service CIDR (one CIDR or a dual-stack pair).
	ServiceSubnet string `json:"serviceSubnet,omitempty"`
	// NodeMask is the new node mask of a single-stack cluster, or the IPv4
	// node mask of a dual-stack one.
	NodeMask int `json:"nodeMask,omitempty"`
	// NodeMaskIPv6 is the new IPv6 node mask of a dual-stack cluster.
	NodeMaskIPv6 int `json:"nodeMaskIPv6,omitempty"`
}

// PlanOptions tunes NewPlan.
type PlanOptions struct {
	// KeepNodeIPAM leaves kube-controller-manager's node IPAM running while
	// nodes move to the new pod CIDR. By default the plan first sets
	// --allocate-node-cidrs=false, because a kube-controller-manager that
	// restarts (a leader election, a node reboot) between the node rewrite and
	// the --cluster-cidr change crash-loops on the moved nodes. While node IPAM
	// is paused, nodes that join get no podCIDR until it is back.
	KeepNodeIPAM bool
}

// Layout is a cluster's CIDR layout.
type Layout struct {
	PodSubnet     string   `json:"podSubnet,omitempty"`
	ServiceSubnet string   `json:"serviceSubnet,omitempty"`
	NodeMasks     []int    `json:"nodeMasks,omitempty"`
	ClusterDNS    []string `json:"clusterDNS,omitempty"`
}

// StepKind says who carries a step out.
type StepKind string

// The kinds of plan step.
const (
	// StepCheck is a read-only verification (Check, or the example's check command).
	StepCheck StepKind = "check"
	// StepPreflight runs cidr.ControllerManagerPreflight; do not go on unless it says the component starts.
	StepPreflight StepKind = "preflight"
	// StepExternal is done by another cidrshift package or tool (CNI pools, nodes, ServiceCIDRs, Services).
	StepExternal StepKind = "external"
	// StepConfigMap is an edit Apply makes through the API.
	StepConfigMap StepKind = "configmap"
	// StepFile is a static-pod manifest edit to make on every control-plane node (ApplyManifestChanges).
	StepFile StepKind = "file"
	// StepManual is an operator action (restarts, certificates).
	StepManual StepKind = "manual"
)

// Step is one step of a plan, in the order that keeps every component running.
type Step struct {
	Number int      `json:"number"`
	Kind   StepKind `json:"kind"`
	Title  string   `json:"title"`
	Detail string   `json:"detail,omitempty"`
	// Edit is the ID of the ConfigMapEdit or FileEdit the step makes.
	Edit string `json:"edit,omitempty"`
}

// ConfigMapEdit is a change to one key of a ConfigMap, made by Apply.
type ConfigMapEdit struct {
	ID string `json:"id"`
	// Ref names the ConfigMap and records the UID and resourceVersion the
	// plan was made from; Apply refuses to write over anything else.
	Ref     ConfigMapRef `json:"ref"`
	Changes []string     `json:"changes"`
	Before  string       `json:"before"`
	After   string       `json:"after"`
	Diff    string       `json:"diff"`
}

// FileEdit is a change to a static-pod manifest, to be made on every
// control-plane node with ApplyManifestChanges(path, Changes). Diff and After
// show it on the manifest that was read.
type FileEdit struct {
	ID        string       `json:"id"`
	Component string       `json:"component"`
	Path      string       `json:"path"`
	Changes   []FlagChange `json:"changes"`
	Diff      string       `json:"diff,omitempty"`
	After     string       `json:"after,omitempty"`
}

// NodeMove is a node whose podCIDRs must change before kube-controller-manager
// gets the new flags. To is a suggestion (the same offset in the new range
// where it is free, else the lowest free subnet); the node package computes
// and performs the real move.
type NodeMove struct {
	Name string   `json:"name"`
	From []string `json:"from"`
	To   []string `json:"to,omitempty"`
}

// Plan lists every edit a CIDR change needs and the order that never
// crash-loops kube-controller-manager nor leaves kube-apiserver unable to
// start. It serialises with sigs.k8s.io/yaml for review.
type Plan struct {
	Intent  Intent `json:"intent"`
	Current Layout `json:"current"`
	Target  Layout `json:"target"`
	Steps   []Step `json:"steps"`
	// ConfigMapEdits are made by Apply.
	ConfigMapEdits []ConfigMapEdit `json:"configMapEdits,omitempty"`
	// FileEdits are made on each control-plane node.
	FileEdits []FileEdit `json:"fileEdits,omitempty"`
	// NodeMoves are the nodes to rewrite first (when nodes were read).
	NodeMoves []NodeMove `json:"nodeMoves,omitempty"`
	// ProposedFlags are kube-controller-manager's node IPAM flags at the end.
	ProposedFlags *cidr.ControllerManagerFlags `json:"proposedFlags,omitempty"`
	// PreflightNow runs the proposed flags against the nodes as read: it
	// fails until every node has moved.
	PreflightNow *cidr.PreflightResult `json:"preflightNow,omitempty"`
	// PreflightAfterMove runs them against the nodes moved as NodeMoves suggests.
	PreflightAfterMove *cidr.PreflightResult `json:"preflightAfterMove,omitempty"`
	// Findings are problems with the target layout itself.
	Findings []Finding `json:"findings,omitempty"`
}

// Blocked reports whether the target layout has an error finding; Apply refuses such a plan.
func (p *Plan) Blocked() bool {
	for _, f := range p.Findings {
		if f.Severity == cidr.SeverityError {
			return true
		}
	}
	return false
}

// Edit IDs used in plans.
const (
	EditKubeadmConfig   = "kubeadm-config"
	EditKubeProxy       = "kube-proxy"
	EditKubeletConfig   = "kubelet-config"
	EditPauseNodeIPAM   = "kube-controller-manager-pause-node-ipam"
	EditControllerFlags = "kube-controller-manager-flags"
	EditAPIServerFlags  = "kube-apiserver-flags"
)

// current works out the cluster's layout from the snapshot: the running
// components' flags first, then kubeadm-config, then kube-proxy.
func current(s *Snapshot) (Layout, []netip.Prefix, []netip.Prefix) {
	var l Layout
	if s.ControllerManager != nil {
		l.PodSubnet, _ = s.ControllerManager.Flag(FlagClusterCIDR)
	}
	if l.PodSubnet == "" && s.Kubeadm != nil {
		if f, err := s.Kubeadm.ControllerManagerFlags(); err == nil {
			l.PodSubnet = f.ClusterCIDR
		}
	}
	if l.PodSubnet == "" && s.KubeProxy != nil {
		l.PodSubnet = s.KubeProxy.ClusterCIDR()
	}
	if s.APIServer != nil {
		l.ServiceSubnet, _ = s.APIServer.Flag(FlagServiceClusterIPRange)
	}
	if l.ServiceSubnet == "" && s.Kubeadm != nil {
		l.ServiceSubnet = s.Kubeadm.APIServerServiceRange()
	}
	if l.ServiceSubnet == "" && s.ControllerManager != nil {
		l.ServiceSubnet, _ = s.ControllerManager.Flag(FlagServiceClusterIPRange)
	}
	if s.Kubelet != nil {
		l.ClusterDNS = s.Kubelet.ClusterDNS()
	}
	pods, _, _ := cidr.ParseListLenient(l.PodSubnet)
	svc, _, _ := cidr.ParseListLenient(l.ServiceSubnet)
	flags, ok := currentFlags(s)
	if ok && len(pods) > 0 {
		flags.ClusterCIDR = l.PodSubnet
		if layout, _, err := cidr.ParseControllerManagerFlags(flags); err == nil {
			l.NodeMasks = layout.NodeMasks
		}
	}
	if l.NodeMasks == nil {
		for _, p := range pods {
			l.NodeMasks = append(l.NodeMasks, cidr.DefaultNodeMask(cidr.FamilyOf(p)))
		}
	}
	return l, pods, svc
}

func currentFlags(s *Snapshot) (cidr.ControllerManagerFlags, bool) {
	if s.ControllerManager != nil {
		f, err := s.ControllerManager.ControllerManagerFlags()
		return f, err == nil
	}
	if s.Kubeadm != nil {
		f, err := s.Kubeadm.ControllerManagerFlags()
		return f, err == nil
	}
	return cidr.ControllerManagerFlags{}, false
}

// NewPlan works out every edit the intent needs and their order. The
// snapshot is not changed. Invalid intent (host bits, a bad mask) is a
// *FieldError; a target layout the components would refuse, or that
// overlaps, is reported in Plan.Findings and blocks Apply.
//
// Every source read that disagrees with the intent is work: kubeadm-config
// (networking and extraArgs), the kube-apiserver and kube-controller-manager
// manifests' flags, kube-proxy's clusterCIDR, the kubelet's clusterDNS and,
// when kube-controller-manager's manifest was not read, the nodes' podCIDRs
// (nodes move before its flags change, so a node outside the target is the
// sign that the node IPAM part is not done). So a plan made after a partial
// change (an Apply stopped after kubeadm-config, a manifest already
// rewritten, every ConfigMap edited but no node moved) makes only the edits
// left, in the same order, and a source that already agrees is not edited.
// A manifest not read is assumed to need its edit, with every flag the
// intent names for the parts not done. ErrNothingToDo only when every
// source read agrees. Plan.Current is the range the running components use,
// or, when they already use the target, the first source still saying
// another range.
func NewPlan(s *Snapshot, in Intent, opts PlanOptions) (*Plan, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil snapshot", ErrInvalid)
	}
	cur, curPods, curSvc := current(s)
	p := &Plan{Intent: in, Current: cur, Target: cur}
	p.Target.NodeMasks = slices.Clone(cur.NodeMasks)
	p.Target.ClusterDNS = slices.Clone(cur.ClusterDNS)

	tgtPods, tgtSvc := curPods, curSvc
	if in.PodSubnet != "" {
		ps, err := cidr.ParseList(in.PodSubnet)
		if err != nil {
			return nil, &FieldError{Source: "intent", Field: "podSubnet", Value: in.PodSubnet, Reason: err.Error(), Err: err}
		}
		tgtPods, p.Target.PodSubnet = ps, joinPrefixes(ps)
	}
	if in.ServiceSubnet != "" {
		ps, err := cidr.ParseList(in.ServiceSubnet)
		if err != nil {
			return nil, &FieldError{Source: "intent", Field: "serviceSubnet", Value: in.ServiceSubnet, Reason: err.Error(), Err: err}
		}
		tgtSvc, p.Target.ServiceSubnet = ps, joinPrefixes(ps)
	}
	if (in.NodeMask != 0 || in.NodeMaskIPv6 != 0) && len(tgtPods) == 0 {
		field, value := "nodeMask", in.NodeMask
		if value == 0 {
			field, value = "nodeMaskIPv6", in.NodeMaskIPv6
		}
		return nil, invalid("intent", field, strconv.Itoa(value), "a node mask needs a pod CIDR: give podSubnet, or read a cluster that has one")
	}
	// Target node masks, per pod CIDR in order.
	p.Target.NodeMasks = nil
	for _, pp := range tgtPods {
		fam := cidr.FamilyOf(pp)
		m := 0
		switch {
		case fam == cidr.IPv6 && len(tgtPods) == 2:
			m = in.NodeMaskIPv6
		case fam == cidr.IPv6 && len(tgtPods) == 1:
			m = cmp0(in.NodeMask, in.NodeMaskIPv6)
		default:
			m = in.NodeMask
		}
		if m == 0 {
			for j, cp := range curPods {
				if cidr.FamilyOf(cp) == fam && j < len(cur.NodeMasks) {
					m = cur.NodeMasks[j]
				}
			}
		}
		if m == 0 {
			m = cidr.DefaultNodeMask(fam)
		}
		if m < 1 || m > fam.AddrBits() {
			field := "nodeMask"
			if fam == cidr.IPv6 && len(tgtPods) == 2 {
				field = "nodeMaskIPv6"
			}
			return nil, invalid("intent", field, strconv.Itoa(m), fmt.Sprintf("an %s node mask must be between 1 and %d", fam, fam.AddrBits()))
		}
		p.Target.NodeMasks = append(p.Target.NodeMasks, m)
	}

	// Every source that disagrees with the target is work, not only the one
	// the current layout is read from: a plan made after a partial Apply
	// (kubeadm-config written, kube-proxy or kubelet-config not) finishes the
	// change, in the same order, instead of finding nothing to do.
	var oldPods, oldSvc []Value
	if in.PodSubnet != "" {
		oldPods = disagreeing(podSources(s), tgtPods)
	}
	if in.ServiceSubnet != "" {
		oldSvc = disagreeing(serviceSources(s), tgtSvc)
	}
	dnsOff := in.ServiceSubnet != "" && len(outsideRanges(cur.ClusterDNS, tgtSvc)) > 0
	maskIntent := in.NodeMask != 0 || in.NodeMaskIPv6 != 0
	// The nodes read are a source too while kube-controller-manager's
	// manifest is not: nodes move before its flags change, so once a partial
	// Apply has rewritten kubeadm-config and kube-proxy, a node whose
	// podCIDRs do not fit the target is the only sign read that the node
	// IPAM part of the change is not done. (A manifest read says it with its
	// flags; nodes that do not fit them are Check's business.)
	var nodesOff []string
	if s.ControllerManager == nil && (in.PodSubnet != "" || maskIntent) {
		nodesOff = misfitNodes(s.Nodes, tgtPods, p.Target.NodeMasks)
	}
	podChange := in.PodSubnet != "" && (!slices.Equal(tgtPods, curPods) || len(oldPods) > 0 || len(nodesOff) > 0)
	svcChange := in.ServiceSubnet != "" && (!slices.Equal(tgtSvc, curSvc) || len(oldSvc) > 0 || dnsOff)
	// A mask asked for with a cluster's first pod CIDR is a change too (the
	// components would otherwise use their default).
	maskChange := maskIntent && (!slices.Equal(p.Target.NodeMasks, cur.NodeMasks) || masksDisagree(s, p.Target) || len(nodesOff) > 0)
	if !podChange && !svcChange && !maskChange {
		return nil, fmt.Errorf("%w: every source read already has pod CIDR %q, Service CIDR %q and node masks %v", ErrNothingToDo, cur.PodSubnet, cur.ServiceSubnet, cur.NodeMasks)
	}
	// The range being left: what the running components use, or, when they
	// already use the target, the first source still saying something else
	// (none when only the nodes are left behind: no source read records it).
	fromPods := curPods
	if podChange && slices.Equal(curPods, tgtPods) {
		fromPods = nil
		if v, ps, ok := firstRange(oldPods); ok {
			p.Current.PodSubnet, fromPods = v, ps
		}
	}
	fromSvc := curSvc
	if svcChange && slices.Equal(curSvc, tgtSvc) {
		fromSvc = nil
		if v, ps, ok := firstRange(oldSvc); ok {
			p.Current.ServiceSubnet, fromSvc = v, ps
		}
	}
	if svcChange {
		known := slices.Clone(fromSvc)
		for _, v := range oldSvc {
			if ps, _, err := cidr.ParseListLenient(v.Value); err == nil {
				for _, q := range ps {
					if !slices.Contains(known, q) {
						known = append(known, q)
					}
				}
			}
		}
		p.Target.ClusterDNS = moveDNS(cur.ClusterDNS, known, tgtSvc)
		p.Target.ClusterDNS = dnsFallback(p, s, p.Target.ClusterDNS, tgtSvc)
	}
	p.Findings = append(targetFindings(s, tgtPods, p.Target.NodeMasks, tgtSvc), p.Findings...)

	b := &planBuilder{p: p}
	if err := b.configMapEdits(s, podChange, svcChange, maskChange); err != nil {
		return nil, err
	}
	pause, final, nodesMove, err := b.controllerManagerChanges(s, in, podChange, svcChange, maskChange, opts)
	if err != nil {
		return nil, err
	}
	if svcChange && (s.APIServer == nil || !flagSays(s.APIServer, FlagServiceClusterIPRange, tgtSvc)) {
		apiChanges := []FlagChange{{Flag: FlagServiceClusterIPRange, Value: p.Target.ServiceSubnet}}
		if err := b.fileEdit(EditAPIServerFlags, "kube-apiserver", s.APIServer, APIServerManifest, apiChanges); err != nil {
			return nil, err
		}
	}
	if nodesMove {
		b.nodeMoves(s, fromPods, tgtPods, p.Target.NodeMasks, tgtSvc)
	}
	b.steps(s, podChange, svcChange, nodesMove, len(pause) > 0, len(final) > 0)
	return p, nil
}

// dnsFallback gives each clusterDNS address still outside the target ranges
// the tenth address of the target range of its family (kubeadm's choice) and
// says so in a warning finding: no source read records the range it came
// from (a partial Apply already rewrote them all), so its offset cannot be
// kept.
func dnsFallback(p *Plan, s *Snapshot, dns []string, to []netip.Prefix) []string {
	out := slices.Clone(dns)
	for i, v := range dns {
		a, err := netip.ParseAddr(strings.TrimSpace(v))
		if err != nil || len(outsideRanges([]string{v}, to)) == 0 {
			continue
		}
		for _, t := range to {
			if cidr.FamilyOf(t) != cidr.FamilyOf(netip.PrefixFrom(a, a.BitLen())) {
				continue
			}
			n, err := cidr.NthAddr(t, cidr.DNSServiceIndex)
			if err != nil {
				continue
			}
			out[i] = n.String()
			where := "kubelet clusterDNS"
			if s.Kubelet != nil {
				where = fmt.Sprintf("%s clusterDNS[%d]", s.Kubelet.Source(), i)
			}
			p.Findings = append(p.Findings, Finding{Severity: cidr.SeverityWarning, Code: CodeClusterDNSOutsideServiceSubnet,
				Message: fmt.Sprintf("%s %s is outside the target Service range %s and no source read records the range it is in, so its offset cannot be kept: the plan sets %s, the tenth address kubeadm gives the DNS Service; check that the DNS Service has that address",
					where, v, t, n),
				Sources: []Value{{Where: where, Value: v}}})
		}
	}
	return out
}

// podSources lists every place the pod range is written down, running
// component first: kube-controller-manager's --cluster-cidr (a missing flag
// is reported empty), kubeadm-config's controllerManager.extraArgs
// cluster-cidr (when set) and networking.podSubnet, kube-proxy's clusterCIDR.
func podSources(s *Snapshot) []Value {
	var out []Value
	if m := s.ControllerManager; m != nil {
		v, _ := m.Flag(FlagClusterCIDR)
		out = append(out, Value{Where: m.Source() + " --" + FlagClusterCIDR, Value: v})
	}
	if c := s.Kubeadm; c != nil {
		if v, ok := c.ExtraArg(ControllerManager, FlagClusterCIDR); ok {
			out = append(out, Value{Where: c.Source() + " controllerManager.extraArgs " + FlagClusterCIDR, Value: v})
		}
		out = append(out, Value{Where: c.Source() + " networking.podSubnet", Value: c.Networking().PodSubnet})
	}
	if kp := s.KubeProxy; kp != nil {
		out = append(out, Value{Where: kp.Source() + " clusterCIDR", Value: kp.ClusterCIDR()})
	}
	return out
}

// serviceSources lists every place the Service range is written down,
// running components first: kube-apiserver's --service-cluster-ip-range (a
// missing flag is reported empty), kube-controller-manager's (when set),
// kubeadm-config's apiServer and controllerManager extraArgs (when set) and
// networking.serviceSubnet (kubeadm's default when empty).
func serviceSources(s *Snapshot) []Value {
	var out []Value
	if m := s.APIServer; m != nil {
		v, _ := m.Flag(FlagServiceClusterIPRange)
		out = append(out, Value{Where: m.Source() + " --" + FlagServiceClusterIPRange, Value: v})
	}
	if m := s.ControllerManager; m != nil {
		if v, ok := m.Flag(FlagServiceClusterIPRange); ok {
			out = append(out, Value{Where: m.Source() + " --" + FlagServiceClusterIPRange, Value: v})
		}
	}
	if c := s.Kubeadm; c != nil {
		for _, comp := range []Component{APIServer, ControllerManager} {
			if v, ok := c.ExtraArg(comp, FlagServiceClusterIPRange); ok {
				out = append(out, Value{Where: c.Source() + " " + string(comp) + ".extraArgs " + FlagServiceClusterIPRange, Value: v})
			}
		}
		if v := c.Networking().ServiceSubnet; v != "" {
			out = append(out, Value{Where: c.Source() + " networking.serviceSubnet", Value: v})
		} else {
			out = append(out, Value{Where: c.Source() + " networking.serviceSubnet (kubeadm default)", Value: DefaultServiceSubnet})
		}
	}
	return out
}

// sameRange reports whether a value read from the cluster means the target
// ranges, parsed the way the components parse it (host bits dropped).
func sameRange(v string, target []netip.Prefix) bool {
	ps, _, err := cidr.ParseListLenient(v)
	return err == nil && len(ps) > 0 && slices.Equal(ps, target)
}

// flagSays reports whether a manifest's flag means the target ranges.
func flagSays(m *Manifest, flag string, target []netip.Prefix) bool {
	v, ok := m.Flag(flag)
	return ok && sameRange(v, target)
}

// disagreeing returns the sources that do not mean the target ranges.
func disagreeing(sources []Value, target []netip.Prefix) []Value {
	var out []Value
	for _, v := range sources {
		if !sameRange(v.Value, target) {
			out = append(out, v)
		}
	}
	return out
}

// misfitNodes returns the names of the nodes whose podCIDRs do not fit the
// target layout: one per target range, each inside its family's target range
// with that family's node mask (as nodeMoves decides who moves). A node
// without a podCIDR fits: the allocator gives it one.
func misfitNodes(nodes []cidr.NodePodCIDRs, tgtPods []netip.Prefix, masks []int) []string {
	var out []string
	for _, n := range nodes {
		if len(n.PodCIDRs) == 0 {
			continue
		}
		fits := len(n.PodCIDRs) == len(tgtPods)
		for _, pc := range n.PodCIDRs {
			p, _, err := cidr.ParseLenient(pc)
			inside := false
			for i, tp := range tgtPods {
				inside = inside || (err == nil && i < len(masks) && p.Bits() == masks[i] && cidr.ContainsPrefix(tp, p))
			}
			fits = fits && inside
		}
		if !fits {
			out = append(out, n.Name)
		}
	}
	return out
}

// firstRange returns the first value that parses to a range, with its prefixes.
func firstRange(vs []Value) (string, []netip.Prefix, bool) {
	for _, v := range vs {
		if ps, _, err := cidr.ParseListLenient(v.Value); err == nil && len(ps) > 0 {
			return joinPrefixes(ps), ps, true
		}
	}
	return "", nil, false
}

// outsideRanges returns the addresses (as written) that lie in none of the
// ranges; an address that does not parse counts as outside.
func outsideRanges(addrs []string, ranges []netip.Prefix) []string {
	var out []string
	for _, s := range addrs {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || !slices.ContainsFunc(ranges, func(p netip.Prefix) bool { return p.Contains(a) }) {
			out = append(out, s)
		}
	}
	return out
}

// masksDisagree reports whether kube-controller-manager's flags or the ones
// kubeadm-config renders give node masks other than the target's.
func masksDisagree(s *Snapshot, t Layout) bool {
	differ := func(f cidr.ControllerManagerFlags) bool {
		f.ClusterCIDR = t.PodSubnet
		l, _, err := cidr.ParseControllerManagerFlags(f)
		return err != nil || !slices.Equal(l.NodeMasks, t.NodeMasks)
	}
	if m := s.ControllerManager; m != nil {
		if f, err := m.ControllerManagerFlags(); err == nil && differ(f) {
			return true
		}
	}
	if c := s.Kubeadm; c != nil {
		if f, err := c.ControllerManagerFlags(); err == nil && differ(f) {
			return true
		}
	}
	return false
}

func cmp0(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// moveDNS maps each clusterDNS address into the new Service range at the
// same offset, so the tenth address (kubeadm's choice) stays the tenth; one
// whose offset the new range cannot hold gets its tenth address.
func moveDNS(dns []string, from, to []netip.Prefix) []string {
	out := make([]string, 0, len(dns))
	for _, s := range dns {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			out = append(out, s)
			continue
		}
		moved := s
		for _, f := range from {
			if !f.Contains(a) {
				continue
			}
			for _, t := range to {
				if cidr.FamilyOf(t) != cidr.FamilyOf(f) {
					continue
				}
				if n, err := cidr.RebaseAddr(a, f, t); err == nil {
					moved = n.String()
				} else if n, err := cidr.NthAddr(t, cidr.DNSServiceIndex); err == nil {
					moved = n.String()
				}
			}
		}
		out = append(out, moved)
	}
	return out
}

// targetFindings checks the target layout on its own: the components' rules
// and overlaps between pods, Services and the CNI pools. masks holds the
// node mask of each pod CIDR, in order.
func targetFindings(s *Snapshot, pods []netip.Prefix, masks []int, svc []netip.Prefix) []Finding {
	var out []Finding
	add := func(sev cidr.Severity, code Code, msg string) {
		out = append(out, Finding{Severity: sev, Code: code, Message: msg})
	}
	for i, pp := range pods {
		if _, err := cidr.ComputePodCapacity(cidr.NodeIPAM{ClusterCIDR: pp, NodeMask: masks[i]}); err != nil {
			add(cidr.SeverityError, CodeControllerManagerFlags, fmt.Sprintf("target pod CIDR %s with node mask /%d: %v", pp, masks[i], err))
		}
	}
	minor := 0
	if s.Kubeadm != nil {
		minor = s.Kubeadm.KubernetesMinor()
	}
	if minor == 0 && s.APIServer != nil {
		minor = s.APIServer.KubernetesMinor()
	}
	for _, sp := range svc {
		if _, err := cidr.ComputeServiceCapacity(sp, cidr.ServiceRangeOptions{KubernetesMinor: minor}); err != nil {
			add(cidr.SeverityError, CodeServiceRange, fmt.Sprintf("target Service CIDR %s: %v", sp, err))
		}
	}
	var ranges []cidr.Range
	for _, pp := range pods {
		ranges = append(ranges, cidr.Range{Name: "target pod CIDR", Kind: cidr.KindClusterCIDR, Prefix: pp})
	}
	for _, sp := range svc {
		ranges = append(ranges, cidr.Range{Name: "target Service CIDR", Kind: cidr.KindServiceCIDR, Prefix: sp})
	}
	for _, o := range cidr.Analyze(ranges, cidr.AnalyzeOptions{WellKnown: true}) {
		add(o.Severity, CodeOverlap, o.String())
	}
	return out
}

type planBuilder struct {
	p *Plan
}

func (b *planBuilder) configMapEdit(id string, ref ConfigMapRef, before, after []byte, changes []string) {
	if string(before) == string(after) {
		return
	}
	name := ref.String()
	b.p.ConfigMapEdits = append(b.p.ConfigMapEdits, ConfigMapEdit{
		ID: id, Ref: ref, Changes: changes, Before: string(before), After: string(after),
		Diff: UnifiedDiff(name+" (before)", name+" (after)", before, after),
	})
}

func change(field, from, to string) string {
	if from == "" {
		from = "(not set)"
	}
	return fmt.Sprintf("%s: %s -> %s", field, from, to)
}

func (b *planBuilder) configMapEdits(s *Snapshot, podChange, svcChange, maskChange bool) error {
	t := b.p.Target
	if kc := s.Kubeadm; kc != nil {
		c, err := parseClusterConfiguration(kc.source, kc.Bytes())
		if err != nil {
			return err
		}
		var changes []string
		n := c.Networking()
		if podChange {
			if n.PodSubnet != t.PodSubnet {
				if err := c.SetPodSubnet(t.PodSubnet); err != nil {
					return err
				}
				changes = append(changes, change("networking.podSubnet", n.PodSubnet, t.PodSubnet))
			}
			if v, ok := c.ExtraArg(ControllerManager, FlagClusterCIDR); ok && v != t.PodSubnet {
				if err := c.SetExtraArg(ControllerManager, FlagClusterCIDR, t.PodSubnet); err != nil {
					return err
				}
				changes = append(changes, change("controllerManager.extraArgs "+FlagClusterCIDR, v, t.PodSubnet))
			}
		}
		if svcChange {
			if n.ServiceSubnet != t.ServiceSubnet && (n.ServiceSubnet != "" || t.ServiceSubnet != DefaultServiceSubnet) {
				if err := c.SetServiceSubnet(t.ServiceSubnet); err != nil {
					return err
				}
				changes = append(changes, change("networking.serviceSubnet", n.ServiceSubnet, t.ServiceSubnet))
			}
			for _, comp := range []Component{APIServer, ControllerManager} {
				if v, ok := c.ExtraArg(comp, FlagServiceClusterIPRange); ok && v != t.ServiceSubnet {
					if err := c.SetExtraArg(comp, FlagServiceClusterIPRange, t.ServiceSubnet); err != nil {
						return err
					}
					changes = append(changes, change(string(comp)+".extraArgs "+FlagServiceClusterIPRange, v, t.ServiceSubnet))
				}
			}
		}
		if maskChange || podChange {
			kget := func(f string) (string, bool) { return kc.ExtraArg(ControllerManager, f) }
			for _, mc := range maskFlagChanges(kget, t) {
				v, had := c.ExtraArg(ControllerManager, mc.Flag)
				switch {
				case mc.Remove && had:
					if err := c.RemoveExtraArg(ControllerManager, mc.Flag); err != nil {
						return err
					}
					changes = append(changes, "controllerManager.extraArgs "+mc.Flag+": removed")
				case !mc.Remove && v != mc.Value && (maskChange || had):
					if err := c.SetExtraArg(ControllerManager, mc.Flag, mc.Value); err != nil {
						return err
					}
					changes = append(changes, change("controllerManager.extraArgs "+mc.Flag, v, mc.Value))
				}
			}
		}
		b.configMapEdit(EditKubeadmConfig, s.KubeadmRef, kc.Bytes(), c.Bytes(), changes)
	}
	if kp := s.KubeProxy; kp != nil && podChange {
		c, err := parseKubeProxyConfig(kp.source, kp.Bytes())
		if err != nil {
			return err
		}
		if err := c.SetClusterCIDR(t.PodSubnet); err != nil {
			return err
		}
		b.configMapEdit(EditKubeProxy, s.KubeProxyRef, kp.Bytes(), c.Bytes(), []string{change("clusterCIDR", kp.ClusterCIDR(), t.PodSubnet)})
	}
	if kl := s.Kubelet; kl != nil && svcChange && len(kl.ClusterDNS()) > 0 && !slices.Equal(kl.ClusterDNS(), t.ClusterDNS) {
		c, err := parseKubeletConfig(kl.source, kl.Bytes())
		if err != nil {
			return err
		}
		if err := c.SetClusterDNS(t.ClusterDNS); err != nil {
			return err
		}
		b.configMapEdit(EditKubeletConfig, s.KubeletRef, kl.Bytes(), c.Bytes(),
			[]string{change("clusterDNS", strings.Join(kl.ClusterDNS(), ","), strings.Join(t.ClusterDNS, ","))})
	}
	return nil
}

// maskFlagChanges returns the node mask flags for the target layout, in the
// form the component already uses: --node-cidr-mask-size for a single-stack
// cluster unless a family flag is in use, the two family flags for dual stack
// (where --node-cidr-mask-size is refused).
func maskFlagChanges(get func(string) (string, bool), t Layout) []FlagChange {
	pods, _, _ := cidr.ParseListLenient(t.PodSubnet)
	if len(pods) == 0 || len(pods) != len(t.NodeMasks) {
		return nil
	}
	has := func(f string) bool { _, ok := get(f); return ok }
	var out []FlagChange
	if len(pods) == 2 {
		for i, pp := range pods {
			f := FlagNodeCIDRMaskSizeIPv4
			if cidr.FamilyOf(pp) == cidr.IPv6 {
				f = FlagNodeCIDRMaskSizeIPv6
			}
			out = append(out, FlagChange{Flag: f, Value: strconv.Itoa(t.NodeMasks[i])})
		}
		if has(FlagNodeCIDRMaskSize) {
			out = append(out, FlagChange{Flag: FlagNodeCIDRMaskSize, Remove: true})
		}
		return out
	}
	f := FlagNodeCIDRMaskSize
	fam := FlagNodeCIDRMaskSizeIPv4
	other := FlagNodeCIDRMaskSizeIPv6
	if cidr.FamilyOf(pods[0]) == cidr.IPv6 {
		fam, other = other, fam
	}
	if has(fam) && !has(FlagNodeCIDRMaskSize) {
		f = fam
	}
	out = append(out, FlagChange{Flag: f, Value: strconv.Itoa(t.NodeMasks[0])})
	// kube-controller-manager refuses a family's mask flag beside
	// --node-cidr-mask-size, so the one kept is the only one left.
	if f == FlagNodeCIDRMaskSize && has(fam) {
		out = append(out, FlagChange{Flag: fam, Remove: true})
	}
	if has(other) {
		out = append(out, FlagChange{Flag: other, Remove: true})
	}
	return out
}

func (b *planBuilder) fileEdit(id, component string, m *Manifest, file string, changes []FlagChange) error {
	fe := FileEdit{ID: id, Component: component, Path: file, Changes: changes}
	if m != nil {
		fe.Path = m.Source()
		c := m.clone()
		before := c.Bytes()
		if err := c.Apply(changes); err != nil {
			return err
		}
		after := c.Bytes()
		fe.Diff = UnifiedDiff(fe.Path, fe.Path, before, after)
		fe.After = string(after)
	}
	b.p.FileEdits = append(b.p.FileEdits, fe)
	return nil
}

// controllerManagerChanges adds the kube-controller-manager edits: the
// optional pause of node IPAM, then the new flags. Only flags that do not
// already mean the target are changed. When no manifest was read, its edit
// sets every flag the intent names for the parts of the change not done
// (the pod CIDR, the node masks, the Service CIDR): kubeadm-config's
// controllerManager.extraArgs give the form of its flags, not their values,
// since a partial Apply may already have rewritten them while the manifest
// was not touched. nodesMove says whether the node IPAM flags change, so
// that nodes must move first.
func (b *planBuilder) controllerManagerChanges(s *Snapshot, in Intent, podChange, svcChange, maskChange bool, opts PlanOptions) (pause, final []FlagChange, nodesMove bool, err error) {
	t := b.p.Target
	km := s.ControllerManager
	get := func(f string) (string, bool) { return "", false }
	allocate := true
	if km != nil {
		get = km.Flag
		f, ferr := km.ControllerManagerFlags()
		allocate = ferr == nil && f.AllocateNodeCIDRs
	} else if s.Kubeadm != nil {
		get = func(f string) (string, bool) { return s.Kubeadm.ExtraArg(ControllerManager, f) }
		f, ferr := s.Kubeadm.ControllerManagerFlags()
		allocate = ferr == nil && f.AllocateNodeCIDRs
	}
	maskIntent := in.NodeMask != 0 || in.NodeMaskIPv6 != 0
	tgtPods, _, _ := cidr.ParseListLenient(t.PodSubnet)
	tgtSvc, _, _ := cidr.ParseListLenient(t.ServiceSubnet)
	clusterCIDRChange := podChange && (km == nil || !flagSays(km, FlagClusterCIDR, tgtPods))
	if km == nil && in.PodSubnet != "" && maskChange {
		clusterCIDRChange = true
	}
	if clusterCIDRChange {
		final = append(final, FlagChange{Flag: FlagClusterCIDR, Value: t.PodSubnet})
	}
	if maskChange || podChange {
		for _, mc := range maskFlagChanges(get, t) {
			v, had := get(mc.Flag)
			unread := km == nil && maskIntent // the value read is kubeadm-config's, not the component's
			if (mc.Remove && had) || (!mc.Remove && (unread || v != mc.Value) && (maskChange || had)) {
				final = append(final, mc)
			}
		}
	}
	// Nodes move before kube-controller-manager's node IPAM flags change;
	// once they have changed, the nodes have moved.
	nodesMove = len(final) > 0
	if nodesMove && allocate && !opts.KeepNodeIPAM {
		pause = []FlagChange{{Flag: FlagAllocateNodeCIDRs, Value: "false"}}
	}
	if svcChange || (km == nil && nodesMove && in.ServiceSubnet != "") {
		if v, ok := get(FlagServiceClusterIPRange); km == nil || (ok && !sameRange(v, tgtSvc)) {
			final = append(final, FlagChange{Flag: FlagServiceClusterIPRange, Value: t.ServiceSubnet})
		}
	}
	if len(pause) > 0 || (clusterCIDRChange && !allocate) {
		// Back on after the pause; or on for the first time, as kubeadm renders
		// it whenever podSubnet is set.
		final = append(final, FlagChange{Flag: FlagAllocateNodeCIDRs, Value: "true"})
	}
	var proposed cidr.ControllerManagerFlags
	if km != nil {
		c := km.clone()
		if len(pause) > 0 {
			if err := b.fileEdit(EditPauseNodeIPAM, "kube-controller-manager", km, ControllerManagerManifest, pause); err != nil {
				return nil, nil, false, err
			}
			if err := c.Apply(pause); err != nil {
				return nil, nil, false, err
			}
		}
		if len(final) > 0 {
			if err := b.fileEdit(EditControllerFlags, "kube-controller-manager", c, ControllerManagerManifest, final); err != nil {
				return nil, nil, false, err
			}
			if err := c.Apply(final); err != nil {
				return nil, nil, false, err
			}
		}
		proposed, err = c.ControllerManagerFlags()
		if err != nil {
			return nil, nil, false, err
		}
	} else {
		if len(pause) > 0 {
			_ = b.fileEdit(EditPauseNodeIPAM, "kube-controller-manager", nil, ControllerManagerManifest, pause)
		}
		if len(final) > 0 {
			_ = b.fileEdit(EditControllerFlags, "kube-controller-manager", nil, ControllerManagerManifest, final)
		}
		proposed = cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: t.PodSubnet, ServiceClusterIPRange: t.ServiceSubnet}
		for _, mc := range maskFlagChanges(get, t) {
			if mc.Remove {
				continue
			}
			n, _ := strconv.Atoi(mc.Value)
			switch mc.Flag {
			case FlagNodeCIDRMaskSize:
				proposed.NodeCIDRMaskSize = n
			case FlagNodeCIDRMaskSizeIPv4:
				proposed.NodeCIDRMaskSizeIPv4 = n
			case FlagNodeCIDRMaskSizeIPv6:
				proposed.NodeCIDRMaskSizeIPv6 = n
			}
		}
	}
	if proposed.ClusterCIDR != "" || proposed.AllocateNodeCIDRs {
		b.p.ProposedFlags = &proposed
		if s.Nodes != nil {
			now := cidr.ControllerManagerPreflight(proposed, s.Nodes)
			b.p.PreflightNow = &now
		}
	}
	return pause, final, nodesMove, nil
}

// nodeMoves lists the nodes whose podCIDRs do not fit the target and
// suggests where each could go, then runs the preflight on the moved nodes.
func (b *planBuilder) nodeMoves(s *Snapshot, curPods, tgtPods []netip.Prefix, masks []int, svc []netip.Prefix) {
	if s.Nodes == nil {
		return
	}
	type famAlloc struct {
		a    *cidr.Allocator
		from netip.Prefix
		to   netip.Prefix
		mask int
	}
	allocs := map[cidr.Family]*famAlloc{}
	for i, tp := range tgtPods {
		fam := cidr.FamilyOf(tp)
		var svcP netip.Prefix
		for _, sp := range svc {
			if cidr.FamilyOf(sp) == fam {
				svcP = sp
			}
		}
		a, err := cidr.NewClusterAllocator(tp, masks[i], svcP)
		if err != nil {
			continue
		}
		fa := &famAlloc{a: a, to: tp, mask: masks[i]}
		for _, cp := range curPods {
			if cidr.FamilyOf(cp) == fam {
				fa.from = cp
			}
		}
		allocs[fam] = fa
	}
	fits := func(pc string) (netip.Prefix, bool) {
		p, _, err := cidr.ParseLenient(pc)
		if err != nil {
			return p, false
		}
		fa := allocs[cidr.FamilyOf(p)]
		return p, fa != nil && p.Bits() == fa.mask && cidr.ContainsPrefix(fa.to, p)
	}
	// Nodes that stay hold their subnets first.
	nodes := slices.Clone(s.Nodes)
	sort.SliceStable(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	var moving []cidr.NodePodCIDRs
	for _, n := range nodes {
		ok := len(n.PodCIDRs) == len(tgtPods)
		for _, pc := range n.PodCIDRs {
			if _, f := fits(pc); !f {
				ok = false
			}
		}
		if len(n.PodCIDRs) == 0 {
			continue // the allocator gives it one once node IPAM runs with the new flags
		}
		if ok {
			for _, pc := range n.PodCIDRs {
				p, _ := fits(pc)
				allocs[cidr.FamilyOf(p)].a.Occupy(p, n.Name)
			}
			continue
		}
		moving = append(moving, n)
	}
	after := make([]cidr.NodePodCIDRs, 0, len(nodes))
	for _, n := range nodes {
		if !slices.ContainsFunc(moving, func(m cidr.NodePodCIDRs) bool { return m.Name == n.Name }) {
			after = append(after, n)
		}
	}
	for _, n := range moving {
		mv := NodeMove{Name: n.Name, From: slices.Clone(n.PodCIDRs)}
		for _, tp := range tgtPods {
			fa := allocs[cidr.FamilyOf(tp)]
			if fa == nil {
				continue
			}
			var got netip.Prefix
			for _, pc := range n.PodCIDRs {
				p, _, err := cidr.ParseLenient(pc)
				if err != nil || cidr.FamilyOf(p) != cidr.FamilyOf(tp) || !fa.from.IsValid() || p.Bits() != fa.mask {
					continue
				}
				if r, err := cidr.Rebase(p, fa.from, fa.to); err == nil && fa.a.Allocate(r, n.Name) == nil {
					got = r
				}
			}
			if !got.IsValid() {
				if r, err := fa.a.AllocateNext(); err == nil {
					got = r
				}
			}
			if got.IsValid() {
				mv.To = append(mv.To, got.String())
			}
		}
		b.p.NodeMoves = append(b.p.NodeMoves, mv)
		after = append(after, cidr.NodePodCIDRs{Name: n.Name, PodCIDRs: mv.To})
	}
	if b.p.ProposedFlags != nil {
		res := cidr.ControllerManagerPreflight(*b.p.ProposedFlags, after)
		b.p.PreflightAfterMove = &res
	}
}

// steps writes the ordered procedure.
func (b *planBuilder) steps(s *Snapshot, podChange, svcChange, nodesMove, paused, kcmFinal bool) {
	p := b.p
	add := func(kind StepKind, edit, title, detail string) {
		p.Steps = append(p.Steps, Step{Number: len(p.Steps) + 1, Kind: kind, Title: title, Detail: detail, Edit: edit})
	}
	has := func(id string) bool {
		return slices.ContainsFunc(p.ConfigMapEdits, func(e ConfigMapEdit) bool { return e.ID == id })
	}
	hasFile := func(id string) bool {
		return slices.ContainsFunc(p.FileEdits, func(e FileEdit) bool { return e.ID == id })
	}
	t, c := p.Target, p.Current
	add(StepCheck, "", "Check the cluster as it is",
		"Run the consistency check and fix every error first: a node podCIDR outside the current --cluster-cidr already crash-loops kube-controller-manager at its next restart.")
	if podChange {
		add(StepExternal, "", fmt.Sprintf("Make the CNI hand out pod addresses from %s", t.PodSubnet),
			"Calico: add an IPPool for the new range (calico package); flannel: widen or replace Network (flannel package). Old pods keep their addresses for now.")
	}
	if svcChange {
		add(StepExternal, "", fmt.Sprintf("Create a ServiceCIDR for %s and wait until it is Ready", t.ServiceSubnet),
			"servicecidr package. It must exist before any kube-apiserver gets the new --service-cluster-ip-range; the ServiceCIDR API is on by default from Kubernetes 1.33 (networking.k8s.io/v1).")
		add(StepExternal, "", "Recreate every ClusterIP Service in the new range, the DNS Service at "+strings.Join(t.ClusterDNS, ","),
			"servicecidr package: delete + create (spec.clusterIP is immutable); headless and ExternalName Services have nothing to move. Keep the old DNS Service until the kubelets point at the new address.")
		if has(EditKubeletConfig) {
			add(StepConfigMap, EditKubeletConfig, "Point the kubelets' clusterDNS at the new DNS Service: "+strings.Join(t.ClusterDNS, ","),
				"Apply updates ConfigMap kubelet-config. Then on every node update clusterDNS in /var/lib/kubelet/config.yaml (kubeadm upgrade node phase kubelet-config) and restart the kubelet; pods get the new resolver when they are recreated.")
		}
		if hasFile(EditAPIServerFlags) {
			add(StepFile, EditAPIServerFlags, fmt.Sprintf("On every control-plane node, one at a time: kube-apiserver --%s=%s", FlagServiceClusterIPRange, t.ServiceSubnet),
				fmt.Sprintf("Rewrite %s (ApplyManifestChanges, or apply the diff); the kubelet restarts kube-apiserver. Wait until it is ready before the next node.", APIServerManifest))
		}
	}
	if nodesMove {
		if paused {
			add(StepFile, EditPauseNodeIPAM, "On every control-plane node: pause node IPAM with --allocate-node-cidrs=false",
				"kube-controller-manager restarts without its node IPAM controller, so it cannot crash on podCIDRs outside either range while nodes move. Nodes that join meanwhile get no podCIDR until the flags are back.")
		} else if s.ControllerManager != nil {
			add(StepManual, "", "Do not restart kube-controller-manager until its flags are changed",
				"Node IPAM keeps running (KeepNodeIPAM): once a node is moved, any kube-controller-manager restart (leader election, reboot) crash-loops until the next --cluster-cidr change is made.")
		}
		detail := "nodecidr package (delete + recreate each Node, control-plane nodes included; the kubelet adopts the recreated Node)."
		if len(p.NodeMoves) > 0 {
			var names []string
			for _, m := range p.NodeMoves {
				names = append(names, fmt.Sprintf("%s %s -> %s", m.Name, strings.Join(m.From, ","), strings.Join(m.To, ",")))
			}
			detail += " Nodes to move (suggested targets): " + strings.Join(names, "; ") + "."
		}
		add(StepExternal, "", fmt.Sprintf("Rewrite every Node's podCIDR into %s with /%s subnets BEFORE kube-controller-manager gets the new --cluster-cidr", t.PodSubnet, joinInts(t.NodeMasks)), detail)
		add(StepPreflight, "", "Preflight: kube-controller-manager must start with the new flags and the nodes as they are now",
			"Run cidr.ControllerManagerPreflight (the example's check, or NewPlan again) with the proposed flags against the live nodes; go on only when it reports no crash.")
	}
	if kcmFinal {
		var fl []string
		for _, e := range p.FileEdits {
			if e.ID == EditControllerFlags {
				for _, ch := range e.Changes {
					fl = append(fl, ch.String())
				}
			}
		}
		add(StepFile, EditControllerFlags, "On every control-plane node: kube-controller-manager "+strings.Join(fl, " "),
			fmt.Sprintf("Rewrite %s (ApplyManifestChanges, or apply the diff); the kubelet restarts kube-controller-manager. Check it stays up before the next node.", ControllerManagerManifest))
	}
	if has(EditKubeadmConfig) {
		add(StepConfigMap, EditKubeadmConfig, "Record the new layout in kubeadm-config",
			"Apply updates ConfigMap kubeadm-config so kubeadm upgrade and join render the same flags. It changes no running component.")
	}
	if has(EditKubeProxy) {
		add(StepConfigMap, EditKubeProxy, "Set kube-proxy's clusterCIDR to "+t.PodSubnet,
			"Apply updates ConfigMap kube-proxy; then kubectl -n kube-system rollout restart daemonset/kube-proxy.")
	}
	if svcChange {
		add(StepManual, "", "Reissue the kube-apiserver serving certificate with the new kubernetes Service address",
			"The certificate names the first address of the Service range ("+firstAddrs(t.ServiceSubnet)+"). On every control-plane node move apiserver.crt and apiserver.key out of /etc/kubernetes/pki, run kubeadm init phase certs apiserver --config <file with the new serviceSubnet>, and restart kube-apiserver.")
		retire := "Retire the old Service range"
		if c.ServiceSubnet != "" && c.ServiceSubnet != t.ServiceSubnet {
			retire += " " + c.ServiceSubnet
		}
		add(StepExternal, "", retire,
			"servicecidr package: delete the old ServiceCIDR (kubernetes), then delete Service default/kubernetes so kube-apiserver recreates it at the first address of the new range, and remove the old DNS Service.")
	}
	if podChange {
		old := "the old pod range"
		if c.PodSubnet != "" && c.PodSubnet != t.PodSubnet {
			old += " " + c.PodSubnet
		}
		add(StepExternal, "", "Move the remaining pods off "+old+" and remove it from the CNI",
			"calico package: disable the old pool, recreate pods still on it, delete it; flannel: restart flannel and the nodes' pods.")
	}
	add(StepCheck, "", "Verify", "Run the consistency check: no finding may remain.")
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",/")
}

func firstAddrs(list string) string {
	ps, err := cidr.ParseList(list)
	if err != nil {
		return list
	}
	var out []string
	for _, p := range ps {
		if a, err := cidr.NthAddr(p, 1); err == nil {
			out = append(out, a.String())
		}
	}
	return strings.Join(out, ", ")
}
