package migrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/nodecidr"
	"github.com/cidrshift/cidrshift/servicecidr"
)

// Code is the stable machine name of a doctor finding.
type Code string

// The cross-layer finding codes. The node checks keep nodecidr's codes
// (nodecidr.FindingKind: duplicate-podcidr, missing-podcidr,
// pod-ip-outside-podcidr, ...), and kubeadmcfg findings without a code of
// their own keep kubeadmcfg's (kubeadmcfg.Code).
const (
	// CodePodCIDROutsideFlannelNetwork: a node's podCIDR is not inside flannel's Network.
	CodePodCIDROutsideFlannelNetwork Code = "podcidr-outside-flannel-network"
	// CodeFlannelBackendMismatch: a node's backend-type annotation is not net-conf's Backend.Type.
	CodeFlannelBackendMismatch Code = "flannel-backend-mismatch"
	// CodeFlannelPublicIPDuplicate: several nodes announce the same flannel public-ip.
	CodeFlannelPublicIPDuplicate Code = "flannel-public-ip-duplicate"
	// CodeFlannelNotRunning: a node without any flannel annotation in a flannel cluster.
	CodeFlannelNotRunning Code = "flannel-not-running"
	// CodeFlannelConfigInvalid: flanneld refuses net-conf.json.
	CodeFlannelConfigInvalid Code = "flannel-config-invalid"
	// CodeFlannelConfigWarning: flanneld reads net-conf.json differently than written.
	CodeFlannelConfigWarning Code = "flannel-config-warning"
	// CodeCalicoPoolOverlap: a Calico pool overlaps another pool, the Service range or node addresses.
	CodeCalicoPoolOverlap Code = "calico-pool-overlap"
	// CodeCalicoDisabledPoolInUse: a disabled pool still holds blocks with addresses, or pods.
	CodeCalicoDisabledPoolInUse Code = "calico-disabled-pool-in-use"
	// CodeCalicoBlockOrphaned: an IPAM block is affine to a node that no longer exists.
	CodeCalicoBlockOrphaned Code = "calico-block-orphaned"
	// CodePodIPOutsidePools: a pod IP lies in no Calico pool and, unless
	// Calico IPAM blocks were read (host-local IPAM may be in use), outside
	// its node's podCIDRs.
	CodePodIPOutsidePools Code = "pod-ip-outside-pools"
	// CodeServiceIPOutsideRange: a ClusterIP lies outside every ServiceCIDR
	// (or, when none was read, outside kube-apiserver's range).
	CodeServiceIPOutsideRange Code = "service-ip-outside-range"
	// CodeServiceCIDRFlagMismatch: the default ServiceCIDR "kubernetes" disagrees with kube-apiserver's flag.
	CodeServiceCIDRFlagMismatch Code = "servicecidr-flag-mismatch"
	// CodeKubernetesServiceIPWrong: default/kubernetes is not the first address of the Service range, or is missing.
	CodeKubernetesServiceIPWrong Code = "kubernetes-service-ip-wrong"
	// CodeClusterDNSMismatch: the kube-dns ClusterIP is not the kubelet's clusterDNS.
	CodeClusterDNSMismatch Code = "cluster-dns-mismatch"
	// CodeKubeProxyClusterCIDRMismatch: kube-proxy's clusterCIDR disagrees with the cluster CIDR.
	CodeKubeProxyClusterCIDRMismatch Code = "kube-proxy-cluster-cidr-mismatch"
	// CodeKubeadmConfigMismatch: kubeadm-config's podSubnet, serviceSubnet or node mask disagrees with the flags.
	CodeKubeadmConfigMismatch Code = "kubeadm-config-mismatch"
	// CodeRangeOverlapsCGNAT: a pod or Service range overlaps CGNAT 100.64.0.0/10 (Tailscale and carrier NAT use it).
	CodeRangeOverlapsCGNAT Code = "range-overlaps-cgnat"
	// CodeRangeOverlapsNodeIP: a pod or Service range holds node InternalIPs.
	CodeRangeOverlapsNodeIP Code = "range-overlaps-node-ip"
	// CodeConfigUnreadable: a ConfigMap the doctor reads cannot be parsed.
	CodeConfigUnreadable Code = "config-unreadable"
)

// CGNAT is the shared address space of RFC 6598, which Tailscale and
// carrier-grade NAT use.
var CGNAT = netip.MustParsePrefix("100.64.0.0/10")

// ObjectRef names an object a finding is about.
type ObjectRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String renders "Kind namespace/name" (or "Kind name").
func (o ObjectRef) String() string {
	if o.Namespace == "" {
		return o.Kind + " " + o.Name
	}
	return o.Kind + " " + o.Namespace + "/" + o.Name
}

// DoctorFinding is one problem, with the objects involved and the fix.
type DoctorFinding struct {
	Code     Code          `json:"code"`
	Severity cidr.Severity `json:"severity"`
	// Objects are the objects involved.
	Objects []ObjectRef `json:"objects,omitempty"`
	// Message says what is wrong and what it breaks.
	Message string `json:"message"`
	// Fix is the proposed repair.
	Fix string `json:"fix,omitempty"`
}

// Proposal is the kube-controller-manager preflight of proposed flags.
type Proposal struct {
	Flags  cidr.ControllerManagerFlags `json:"flags"`
	Result cidr.PreflightResult        `json:"result"`
	// Conflicts are the proposed layout's overlaps (cidr.CheckLayout).
	Conflicts []cidr.Overlap `json:"conflicts,omitempty"`
}

// Repair is a fix the node plan does not carry out: a node whose flanneld
// announces another backend than net-conf.json.
type Repair struct {
	Code Code   `json:"code"`
	Node string `json:"node"`
	// Annotation is the node annotation to correct, From what To what.
	Annotation string `json:"annotation"`
	From       string `json:"from"`
	To         string `json:"to"`
	// Commands carry the repair out: correct the annotation, then restart
	// the node's flanneld so that it announces its lease with the
	// configured backend again.
	Commands []string `json:"commands"`
}

// MapRange is one range of the address map (AddressMapSVG).
type MapRange struct {
	// Label says what the range is and where it is written.
	Label  string       `json:"label"`
	Kind   cidr.Kind    `json:"kind"`
	Prefix netip.Prefix `json:"prefix"`
	// Duplicate marks a node subnet held by more than one node; Conflict a
	// range overlapping one it must not.
	Duplicate bool `json:"duplicate,omitempty"`
	Conflict  bool `json:"conflict,omitempty"`
}

// DoctorReport is what Diagnose found.
type DoctorReport struct {
	Source string `json:"source"`
	// Flags are kube-controller-manager's node IPAM flags, and where they come from.
	Flags       cidr.ControllerManagerFlags `json:"flags"`
	FlagsSource string                      `json:"flagsSource"`
	// ServiceRange is kube-apiserver's --service-cluster-ip-range (or the
	// best other source), and where it comes from.
	ServiceRange       string `json:"serviceRange,omitempty"`
	ServiceRangeSource string `json:"serviceRangeSource,omitempty"`
	// LayoutWarnings are values the components read differently than written.
	LayoutWarnings []string `json:"layoutWarnings,omitempty"`
	// Audit is the node audit (nodecidr), with capacity per cluster CIDR.
	Audit *nodecidr.Report `json:"audit"`
	// Findings are every finding, node checks included, errors first.
	Findings []DoctorFinding `json:"findings"`
	// Conflicts are the flags' layout overlaps (cidr.CheckLayout).
	Conflicts []cidr.Overlap `json:"conflicts,omitempty"`
	// ControllerManager is the start-up preflight with the current flags.
	ControllerManager cidr.PreflightResult `json:"controllerManager"`
	// Proposed is the preflight of the flags DoctorOptions.Propose proposed.
	Proposed *Proposal `json:"proposed,omitempty"`
	// FixPlan moves every node with a missing, duplicated, overlapping,
	// invalid or out-of-range podCIDR (new subnets come from free space
	// inside flannel's Network or the enabled Calico pools when there are
	// any), and re-creates a node whose podCIDRs are out of the cluster
	// CIDRs' family order with the same subnets in order. It is made only
	// when one of those is an error.
	FixPlan      *nodecidr.Plan `json:"fixPlan,omitempty"`
	FixPlanError string         `json:"fixPlanError,omitempty"`
	// Repairs are the fixes of flannel backend mismatches.
	Repairs []Repair `json:"repairs,omitempty"`
	// Ranges feed the address map.
	Ranges []MapRange `json:"ranges,omitempty"`
	// NotRead says what could not be read, so its checks were skipped.
	NotRead []string `json:"notRead,omitempty"`
	Healthy bool     `json:"healthy"`
}

// Count returns how many findings have severity sev.
func (r *DoctorReport) Count(sev cidr.Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == sev {
			n++
		}
	}
	return n
}

// With returns the findings with code c.
func (r *DoctorReport) With(c Code) []DoctorFinding {
	var out []DoctorFinding
	for _, f := range r.Findings {
		if f.Code == c {
			out = append(out, f)
		}
	}
	return out
}

// DoctorOptions tunes Diagnose.
type DoctorOptions struct {
	// Flags, when set, are kube-controller-manager's flags (FlagsSource says
	// whence); otherwise they are read from the snapshot's
	// kube-controller-manager Pod, else from kubeadm-config.
	Flags       *cidr.ControllerManagerFlags
	FlagsSource string
	// Propose, when set, turns the current flags into proposed ones, which
	// are preflighted against the nodes (DoctorReport.Proposed). Its error is
	// returned as is.
	Propose func(current cidr.ControllerManagerFlags) (cidr.ControllerManagerFlags, error)
	// Pods checks pod IPs against their node's podCIDR (or the Calico pools).
	Pods bool
}

// Errors of Diagnose; each is wrapped with the details.
var (
	// ErrNoFlags: no kube-controller-manager flags were given or found.
	ErrNoFlags = errors.New("no kube-controller-manager flags")
	// ErrFlagsRefused: kube-controller-manager would refuse the flags.
	ErrFlagsRefused = errors.New("kube-controller-manager would refuse the flags")
	// ErrProposedRefused: kube-controller-manager would refuse the proposed flags.
	ErrProposedRefused = errors.New("kube-controller-manager would refuse the proposed flags")
	// ErrNoNodes: the snapshot holds no Node; an audit that read nothing is no evidence of health.
	ErrNoNodes = errors.New("no Node objects")
)

// diag is one Diagnose run.
type diag struct {
	s        *Snapshot
	r        *DoctorReport
	layout   cidr.NodeIPAMLayout
	kubeadm  *kubeadmcfg.Snapshot
	netconf  *flannel.NetConf
	fnodes   []flannel.Node
	pools    []pool
	service  []netip.Prefix
	nodeSet  map[string]bool
	conflict map[string]bool // labels of ranges in conflict
}

type pool struct {
	p      calico.IPPool
	prefix netip.Prefix
}

func (d *diag) add(f DoctorFinding) { d.r.Findings = append(d.r.Findings, f) }

func nodeRefs(names []string) []ObjectRef {
	out := make([]ObjectRef, len(names))
	for i, n := range names {
		out[i] = ObjectRef{Kind: "Node", Name: n}
	}
	return out
}

// Diagnose checks every layer a snapshot holds and proposes the fixes: the
// nodes' podCIDRs (nodecidr), flannel's net-conf.json and node annotations,
// Calico pools and blocks, Services and ServiceCIDRs, the settings of
// kube-proxy, the kubelet and kubeadm (kubeadmcfg), kube-controller-manager's
// start-up (cidr.ControllerManagerPreflight), and ranges overlapping CGNAT
// or node addresses. It only reads the snapshot.
func Diagnose(ctx context.Context, s *Snapshot, opts DoctorOptions) (*DoctorReport, error) {
	log := logr.FromContextOrDiscard(ctx)
	if len(s.Nodes) == 0 {
		return nil, fmt.Errorf("%w in %s: nothing to audit", ErrNoNodes, s.Source)
	}
	d := &diag{s: s, r: &DoctorReport{Source: s.Source, NotRead: s.NotRead, Findings: []DoctorFinding{}}, nodeSet: map[string]bool{}, conflict: map[string]bool{}}
	for _, n := range s.Nodes {
		d.nodeSet[n.Name] = true
	}
	d.readConfig()
	if err := d.flags(opts); err != nil {
		return nil, err
	}
	d.readPools()
	d.serviceRange()
	log.V(1).Info("diagnosing", "nodes", len(s.Nodes), "pods", len(s.Pods), "services", len(s.Services), "pools", len(d.pools))

	// Pods get addresses from Calico's pools, not from node podCIDRs, when
	// there are pools (calico-ipam): pod IPs are checked against the pools.
	auditOpts := nodecidr.AuditOptions{Layout: d.layout, Pods: opts.Pods && s.PodsRead && len(d.pools) == 0}
	d.r.Audit = nodecidr.AuditNodes(s.Nodes, s.Pods, auditOpts)
	for _, f := range d.r.Audit.Findings {
		d.add(DoctorFinding{Code: Code(f.Kind), Severity: f.Severity, Objects: nodeRefs(f.Nodes), Message: f.Message, Fix: nodeFix(f.Kind)})
	}
	nodes := nodecidr.NodePodCIDRs(s.Nodes)
	d.r.ControllerManager = cidr.ControllerManagerPreflight(d.r.Flags, nodes)
	if opts.Propose != nil {
		p, err := opts.Propose(d.r.Flags)
		if err != nil {
			return nil, fmt.Errorf("proposing flags: %w", err)
		}
		pc := cidr.CheckLayout(p)
		if pc.Refused {
			return nil, fmt.Errorf("%w: %s: %w", ErrProposedRefused, strings.Join(p.Args(), " "), errors.Join(pc.Errors...))
		}
		d.r.Proposed = &Proposal{Flags: p, Conflicts: pc.Overlaps, Result: cidr.ControllerManagerPreflight(p, nodes)}
	}
	d.flannel()
	d.calico(opts.Pods && s.PodsRead)
	d.services()
	d.config(opts)
	d.conflicts()
	d.fixPlan()
	d.fixWithoutPlan()
	d.ranges()

	rank := map[cidr.Severity]int{cidr.SeverityError: 0, cidr.SeverityWarning: 1, cidr.SeverityInfo: 2}
	slices.SortStableFunc(d.r.Findings, func(a, b DoctorFinding) int { return rank[a.Severity] - rank[b.Severity] })
	r := d.r
	r.Healthy = r.Count(cidr.SeverityError) == 0 && r.ControllerManager.WouldStart && !hasErrorOverlap(r.Conflicts) &&
		(r.Proposed == nil || r.Proposed.Result.WouldStart && !hasErrorOverlap(r.Proposed.Conflicts))
	return r, nil
}

func hasErrorOverlap(os []cidr.Overlap) bool {
	return slices.ContainsFunc(os, func(o cidr.Overlap) bool { return o.Severity == cidr.SeverityError })
}

// planFixes are the node findings nodecidr's fix mode moves a node for:
// an error of one of them makes the doctor plan.
var planFixes = []nodecidr.FindingKind{nodecidr.FindingDuplicate, nodecidr.FindingMissing, nodecidr.FindingOverlap,
	nodecidr.FindingOutOfRange, nodecidr.FindingInvalid, nodecidr.FindingFamilyOrder}

func nodeFix(k nodecidr.FindingKind) string {
	switch {
	case k == nodecidr.FindingFamilyOrder:
		return "the fix plan re-creates the node with the same subnets in the cluster CIDRs' order; kube-controller-manager then starts"
	case slices.Contains(planFixes, k):
		return "the fix plan gives the node a free subnet (delete + recreate, or patch when it has none); then delete its cni0 bridge and restart its CNI agent and pods"
	case k == nodecidr.FindingPodIPOutside:
		return "restart the pods: they keep addresses from a subnet the node no longer holds"
	}
	return ""
}

// readConfig parses the kube-system ConfigMaps through kubeadmcfg and finds
// net-conf.json.
func (d *diag) readConfig() {
	d.kubeadm = &kubeadmcfg.Snapshot{}
	cms := slices.Clone(d.s.ConfigMaps)
	// kube-flannel-cfg: kube-flannel first, then kube-system, then by namespace.
	nsRank := func(ns string) int {
		switch ns {
		case flannel.DefaultNetConfNamespace:
			return 0
		case kubeadmcfg.Namespace:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(cms, func(a, b corev1.ConfigMap) int {
		return cmp.Or(cmp.Compare(nsRank(a.Namespace), nsRank(b.Namespace)), cmp.Compare(a.Namespace, b.Namespace))
	})
	for i := range cms {
		cm := &cms[i]
		ref := ObjectRef{Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name}
		if cm.Name == flannel.DefaultNetConfName {
			raw, ok := cm.Data[flannel.NetConfKey]
			if !ok || d.netconf != nil {
				continue
			}
			nc := &flannel.NetConf{Namespace: cm.Namespace, Name: cm.Name, Key: flannel.NetConfKey, UID: cm.UID, ResourceVersion: cm.ResourceVersion, Raw: raw}
			if c, err := flannel.ParseConfig([]byte(raw)); err != nil {
				nc.Error = err.Error()
			} else {
				nc.Config = c
			}
			d.netconf = nc
			continue
		}
		if cm.Namespace != kubeadmcfg.Namespace {
			continue
		}
		if err := d.kubeadm.AddConfigMap(cm); err != nil && !errors.Is(err, kubeadmcfg.ErrNotFound) {
			d.add(DoctorFinding{Code: CodeConfigUnreadable, Severity: cidr.SeverityError, Objects: []ObjectRef{ref},
				Message: fmt.Sprintf("%s cannot be read: %v", ref, err), Fix: "correct the ConfigMap; the components reading it fail the same way"})
		}
	}
	for i := range d.s.ControlPlanePods {
		p := d.s.ControlPlanePods[i] // a copy: typed clients leave TypeMeta empty
		p.APIVersion, p.Kind = "v1", "Pod"
		data, err := yaml.Marshal(&p)
		if err != nil {
			continue
		}
		src := "Pod " + p.Namespace + "/" + p.Name
		m, err := kubeadmcfg.ParseManifestFrom(src, data)
		if err != nil {
			continue // a pod without a command line names no flags
		}
		switch p.Labels["component"] {
		case cidr.KubeControllerManager:
			if d.kubeadm.ControllerManager == nil {
				d.kubeadm.ControllerManager = m
			}
		case cidr.KubeAPIServer:
			if d.kubeadm.APIServer == nil {
				d.kubeadm.APIServer = m
			}
		}
	}
}

// flags settles kube-controller-manager's flags and the node IPAM layout.
func (d *diag) flags(opts DoctorOptions) error {
	r := d.r
	var f cidr.ControllerManagerFlags
	switch km := d.kubeadm.ControllerManager; {
	case opts.Flags != nil:
		f, r.FlagsSource = *opts.Flags, opts.FlagsSource
	case km != nil:
		var err error
		if f, err = km.ControllerManagerFlags(); err == nil && f.ClusterCIDR != "" {
			r.FlagsSource = km.Source()
			if d.s.Source != "cluster" {
				r.FlagsSource += " in the dump"
			}
			break
		}
		fallthrough
	case d.kubeadm.Kubeadm != nil:
		kc := d.kubeadm.Kubeadm
		if kc == nil {
			return fmt.Errorf("%w: the kube-controller-manager Pod names no --cluster-cidr and there is no kubeadm-config", ErrNoFlags)
		}
		var err error
		if f, err = kc.ControllerManagerFlags(); err != nil || f.ClusterCIDR == "" {
			return fmt.Errorf("%w: kubeadm-config names no pod subnet (%v)", ErrNoFlags, err)
		}
		r.FlagsSource = d.kubeadm.KubeadmRef.String() + " (flags kubeadm would render)"
	default:
		return fmt.Errorf("%w: %s has no kube-controller-manager Pod and no kubeadm-config to read them from", ErrNoFlags, d.s.Source)
	}
	f.AllocateNodeCIDRs = true
	r.Flags = f
	check := cidr.CheckLayout(f)
	if check.Refused {
		return fmt.Errorf("%w: %s (from %s): %w", ErrFlagsRefused, strings.Join(f.Args(), " "), r.FlagsSource, errors.Join(check.Errors...))
	}
	d.layout = check.Layout
	for _, w := range check.Warnings {
		r.LayoutWarnings = append(r.LayoutWarnings, w.String())
	}
	r.Conflicts = check.Overlaps
	return nil
}

// serviceRange settles the Service range: kube-apiserver's flag, else
// kube-controller-manager's, else kubeadm-config's serviceSubnet.
func (d *diag) serviceRange() {
	r := d.r
	if api := d.kubeadm.APIServer; api != nil {
		if v, ok := api.Flag(kubeadmcfg.FlagServiceClusterIPRange); ok {
			r.ServiceRange, r.ServiceRangeSource = v, api.Source()+" --"+kubeadmcfg.FlagServiceClusterIPRange
		}
	}
	if r.ServiceRange == "" && r.Flags.ServiceClusterIPRange != "" {
		r.ServiceRange, r.ServiceRangeSource = r.Flags.ServiceClusterIPRange, r.FlagsSource+" --"+kubeadmcfg.FlagServiceClusterIPRange
	}
	if kc := d.kubeadm.Kubeadm; r.ServiceRange == "" && kc != nil && kc.Networking().ServiceSubnet != "" {
		r.ServiceRange, r.ServiceRangeSource = kc.Networking().ServiceSubnet, d.kubeadm.KubeadmRef.String()+" networking.serviceSubnet"
	}
	if r.ServiceRange != "" {
		d.service, _, _ = cidr.ParseListLenient(r.ServiceRange)
	}
}

func (d *diag) readPools() {
	for _, p := range d.s.IPPools {
		pfx, err := p.Prefix()
		if err != nil {
			d.add(DoctorFinding{Code: CodeConfigUnreadable, Severity: cidr.SeverityError, Objects: []ObjectRef{{Kind: "IPPool", Name: p.Name}},
				Message: err.Error(), Fix: "correct the pool's spec.cidr"})
			continue
		}
		d.pools = append(d.pools, pool{p: p, prefix: pfx})
	}
}

// flannel runs flannel's kube-mode audit against net-conf.json.
func (d *diag) flannel() {
	keys, err := flannel.NewAnnotationKeys(flannel.DefaultAnnotationPrefix)
	if err != nil {
		return
	}
	annotated := false
	d.fnodes = make([]flannel.Node, len(d.s.Nodes))
	for i := range d.s.Nodes {
		d.fnodes[i] = flannel.NodeFromObject(&d.s.Nodes[i], keys)
		annotated = annotated || len(d.fnodes[i].Annotations) > 0
	}
	nc := d.netconf
	if nc == nil {
		if annotated {
			d.r.NotRead = append(d.r.NotRead, "flannel's net-conf.json (ConfigMap kube-flannel-cfg): nodes carry flannel annotations but the ConfigMap was not read; flannel checks skipped")
		}
		return
	}
	cmRef := ObjectRef{Kind: "ConfigMap", Namespace: nc.Namespace, Name: nc.Name}
	rep := flannel.AuditKube(nc, d.fnodes)
	for _, f := range rep.Findings {
		objs := append(nodeRefs(f.Nodes), cmRef)
		switch f.Kind {
		case flannel.FindingPodCIDROutside:
			d.add(DoctorFinding{Code: CodePodCIDROutsideFlannelNetwork, Severity: cidr.SeverityError, Objects: objs, Message: fmt.Sprintf("node %s: %s", strings.Join(f.Nodes, ", "), f.Detail),
				Fix: "the fix plan gives the node a free subnet inside the Network; then delete its cni0 bridge and restart its flanneld and pods"})
		case flannel.FindingDuplicatePublicIP:
			d.add(DoctorFinding{Code: CodeFlannelPublicIPDuplicate, Severity: cidr.SeverityError, Objects: nodeRefs(f.Nodes), Message: f.Detail,
				Fix: "give each node its own address: correct the nodes' " + keys.PublicIP + " (or " + keys.PublicIPOverwrite + ") annotation and restart their flanneld"})
		case flannel.FindingConfigInvalid:
			d.add(DoctorFinding{Code: CodeFlannelConfigInvalid, Severity: cidr.SeverityError, Objects: []ObjectRef{cmRef}, Message: f.Detail, Fix: "correct net-conf.json"})
		case flannel.FindingConfigWarning:
			d.add(DoctorFinding{Code: CodeFlannelConfigWarning, Severity: cidr.SeverityWarning, Objects: []ObjectRef{cmRef}, Message: f.Detail})
		}
	}
	if nc.Config == nil {
		return
	}
	want := strings.ToLower(nc.Config.BackendType)
	for _, n := range d.fnodes {
		if len(n.Annotations) == 0 {
			d.add(DoctorFinding{Code: CodeFlannelNotRunning, Severity: cidr.SeverityWarning, Objects: nodeRefs([]string{n.Name}),
				Message: fmt.Sprintf("node %s carries no flannel annotation in a flannel cluster: flanneld has not run on it, so no other node routes to its pods", n.Name),
				Fix:     "check the kube-flannel DaemonSet pod on the node (tolerations, node selector, crash loop)"})
			continue
		}
		if n.BackendType == "" || want == "" || strings.EqualFold(n.BackendType, want) {
			continue
		}
		d.add(DoctorFinding{Code: CodeFlannelBackendMismatch, Severity: cidr.SeverityError, Objects: append(nodeRefs([]string{n.Name}), cmRef),
			Message: fmt.Sprintf("node %s announces %s=%s but %s/%s net-conf.json says Backend.Type %q: the other nodes' flanneld ignore its subnet and print `%s`, and its own flanneld ignores theirs, so its pods are cut off from every other node",
				n.Name, keys.BackendType, n.BackendType, nc.Namespace, nc.Name, nc.Config.BackendType, ignoreLine(want, n)),
			Fix: "see the repairs: correct the annotation and restart flanneld on " + n.Name + " with the ConfigMap's net-conf.json"})
		d.r.Repairs = append(d.r.Repairs, Repair{Code: CodeFlannelBackendMismatch, Node: n.Name, Annotation: keys.BackendType, From: n.BackendType, To: nc.Config.BackendType,
			Commands: []string{
				fmt.Sprintf("kubectl annotate node %s %s=%s --overwrite", n.Name, keys.BackendType, nc.Config.BackendType),
				restartFlannel(nc.Namespace, nc.Name, n.Name),
			}})
	}
}

// restartFlannel is the command that deletes the flannel pods of one node,
// so that their DaemonSet starts them again. It selects them by what every
// flannel pod has whatever its labels (app=flannel in the upstream
// manifest, k8s-app=flannel or others elsewhere): the node, the namespace
// and a volume of the ConfigMap holding net-conf.json. kubectl's
// go-template reads the list as JSON, where a volume without configMap
// has no such key.
func restartFlannel(namespace, configMap, node string) string {
	return fmt.Sprintf(`kubectl -n %[1]s get pods --field-selector spec.nodeName=%[3]s -o go-template='`+
		`{{range $p := .items}}{{range $p.spec.volumes}}{{if .configMap}}{{if eq .configMap.name "%[2]s"}}{{$p.metadata.name}}{{"\n"}}{{end}}{{end}}{{end}}{{end}}'`+
		` | xargs -r kubectl -n %[1]s delete pod`, namespace, configMap, node)
}

// ignoreLine is the warning flanneld with backend want logs for node n's lease.
func ignoreLine(want string, n flannel.Node) string {
	v4, v6 := "0.0.0.0/0", "::/0"
	for _, p := range n.PodCIDRs {
		if p.Addr().Is4() {
			v4 = p.String()
		} else {
			v6 = p.String()
		}
	}
	if want == "vxlan" {
		// flannel v0.28 pkg/backend/vxlan/vxlan_network.go
		return fmt.Sprintf("ignoring non-vxlan v4Subnet(%s) v6Subnet(%s): type=%s", v4, v6, n.BackendType)
	}
	// flannel pkg/backend/route_network.go (host-gw and the other route backends)
	return fmt.Sprintf("Ignoring non-%s subnet(%s): type=%s", want, v4, n.BackendType)
}

// calico checks pools against each other, the Service range and node
// addresses, disabled pools still in use, orphaned blocks and pod IPs.
func (d *diag) calico(pods bool) {
	ref := func(p pool) ObjectRef { return ObjectRef{Kind: "IPPool", Name: p.p.Name} }
	for i, a := range d.pools {
		for _, b := range d.pools[i+1:] {
			if a.prefix.Overlaps(b.prefix) {
				d.conflict[poolLabel(a)], d.conflict[poolLabel(b)] = true, true
				d.add(DoctorFinding{Code: CodeCalicoPoolOverlap, Severity: cidr.SeverityError, Objects: []ObjectRef{ref(a), ref(b)},
					Message: fmt.Sprintf("IPPool %s (%s) overlaps IPPool %s (%s): Calico refuses overlapping pools and may hand out one address twice", a.p.Name, a.prefix, b.p.Name, b.prefix),
					Fix:     "move one pool (calicopoolswap / migrate.CalicoPodCIDR)"})
			}
		}
		for _, sv := range d.serviceRanges() {
			if a.prefix.Overlaps(sv.prefix) {
				d.conflict[poolLabel(a)] = true
				d.add(DoctorFinding{Code: CodeCalicoPoolOverlap, Severity: cidr.SeverityError, Objects: []ObjectRef{ref(a)},
					Message: fmt.Sprintf("IPPool %s (%s) overlaps the Service range %s (%s): a pod and a Service can get the same address", a.p.Name, a.prefix, sv.prefix, sv.where),
					Fix:     "move the pool out of the Service range (calicopoolswap / migrate.CalicoPodCIDR)"})
			}
		}
		if names := d.nodesWithIPIn(a.prefix); len(names) > 0 {
			d.conflict[poolLabel(a)] = true
			d.add(DoctorFinding{Code: CodeCalicoPoolOverlap, Severity: cidr.SeverityError, Objects: append([]ObjectRef{ref(a)}, nodeRefs(names)...),
				Message: fmt.Sprintf("IPPool %s (%s) holds the InternalIP of %d node(s) (%s): pods given those addresses shadow the nodes", a.p.Name, a.prefix, len(names), short(names)),
				Fix:     "move the pool off the node network (calicopoolswap / migrate.CalicoPodCIDR)"})
		}
	}
	// Blocks: in a disabled pool, or affine to a node that is gone.
	inUse := map[string]int{}
	for _, b := range d.s.IPAMBlocks {
		if b.Node != "" && !d.nodeSet[b.Node] {
			d.add(DoctorFinding{Code: CodeCalicoBlockOrphaned, Severity: cidr.SeverityWarning, Objects: []ObjectRef{{Kind: "IPAMBlock", Name: b.Name}, {Kind: "Node", Name: b.Node}},
				Message: fmt.Sprintf("IPAMBlock %s (%s) is affine to node %s, which does not exist; its %d address(es) stay allocated", b.Name, b.CIDR, b.Node, len(b.Allocations)),
				Fix:     "run `calicoctl ipam check` and release the leaked addresses (`calicoctl ipam release`), or recreate the node"})
		}
		for _, p := range d.pools {
			if len(b.Allocations) > 0 && p.prefix.Overlaps(b.CIDR) {
				inUse[p.p.Name] += len(b.Allocations)
			}
		}
	}
	// With Calico IPAM (IPAM blocks in the snapshot) pods get addresses
	// from the pools' blocks, so an address in no pool is wrong. Without
	// blocks the CNI may use host-local IPAM (Calico with "ipam": {"type":
	// "host-local", "subnet": "usePodCidr"}, canal, flannel), which gives
	// pods addresses from their node's podCIDR: there, an address is wrong
	// only when it lies in no pool and outside its node's podCIDRs.
	var hostLocal map[string][]netip.Prefix
	if len(d.s.IPAMBlocks) == 0 {
		hostLocal = make(map[string][]netip.Prefix, len(d.s.Nodes))
		for i := range d.s.Nodes {
			for _, c := range nodecidr.PodCIDRsOf(&d.s.Nodes[i]) {
				if p, _, err := cidr.ParseLenient(c); err == nil {
					hostLocal[d.s.Nodes[i].Name] = append(hostLocal[d.s.Nodes[i].Name], p.Masked())
				}
			}
		}
	}
	podsIn := map[string][]string{}
	var outside []string
	if pods && len(d.pools) > 0 {
		for _, ps := range d.s.Pods {
			if ps.HostNetwork || ps.Phase == corev1.PodSucceeded || ps.Phase == corev1.PodFailed {
				continue
			}
			for _, s := range ps.IPs {
				ip, err := netip.ParseAddr(s)
				if err != nil {
					continue
				}
				in := false
				for _, p := range d.pools {
					if p.prefix.Contains(ip) {
						in = true
						podsIn[p.p.Name] = append(podsIn[p.p.Name], ps.Namespace+"/"+ps.Name)
					}
				}
				if !in && (hostLocal == nil || !slices.ContainsFunc(hostLocal[ps.NodeName], func(p netip.Prefix) bool { return p.Contains(ip) })) {
					outside = append(outside, ps.Namespace+"/"+ps.Name+" "+s)
				}
			}
		}
	}
	for _, p := range d.pools {
		if !p.p.AllocationStopped() || inUse[p.p.Name]+len(podsIn[p.p.Name]) == 0 {
			continue
		}
		d.add(DoctorFinding{Code: CodeCalicoDisabledPoolInUse, Severity: cidr.SeverityWarning, Objects: []ObjectRef{ref(p)},
			Message: fmt.Sprintf("IPPool %s (%s) gives no new addresses but its blocks still hold %d and %d pod(s) still use it (%s)", p.p.Name, p.prefix, inUse[p.p.Name], len(podsIn[p.p.Name]), short(podsIn[p.p.Name])),
			Fix:     "recreate the pods still on the pool, then delete it (calicopoolswap / migrate.CalicoPodCIDR)"})
	}
	if len(outside) > 0 {
		nor := ""
		if hostLocal != nil {
			nor = " nor in their node's podCIDR"
		}
		d.add(DoctorFinding{Code: CodePodIPOutsidePools, Severity: cidr.SeverityError, Objects: podRefs(outside),
			Message: fmt.Sprintf("%d pod address(es) lie in no Calico pool%s (%s): Calico does not route them", len(outside), nor, short(outside)),
			Fix:     "restart the pods so that Calico gives them addresses from an enabled pool"})
	}
}

// podRefs turns "namespace/name ip" entries into Pod references (at most ten).
func podRefs(entries []string) []ObjectRef {
	var out []ObjectRef
	for _, e := range entries[:min(len(entries), 10)] {
		key, _, _ := strings.Cut(e, " ")
		ns, name, _ := strings.Cut(key, "/")
		out = append(out, ObjectRef{Kind: "Pod", Namespace: ns, Name: name})
	}
	return out
}

// short lists at most ten entries.
func short(items []string) string {
	if len(items) <= 10 {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:10], ", "), len(items)-10)
}

func poolLabel(p pool) string { return "IPPool " + p.p.Name }

type placed struct {
	prefix netip.Prefix
	where  string
}

// serviceRanges are the flag's Service range and every ServiceCIDR.
func (d *diag) serviceRanges() []placed {
	var out []placed
	for _, p := range d.service {
		out = append(out, placed{p, d.r.ServiceRangeSource})
	}
	for _, sc := range d.s.ServiceCIDRs {
		for _, p := range sc.CIDRs {
			if !slices.Contains(d.service, p) {
				out = append(out, placed{p, "ServiceCIDR " + sc.Name})
			}
		}
	}
	return out
}

// nodesWithIPIn names the nodes with an InternalIP inside p.
func (d *diag) nodesWithIPIn(p netip.Prefix) []string {
	var out []string
	for i := range d.s.Nodes {
		for _, a := range d.s.Nodes[i].Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil && p.Contains(ip.Unmap()) {
				out = append(out, d.s.Nodes[i].Name)
				break
			}
		}
	}
	return out
}

// services checks ClusterIPs, the default ServiceCIDR, default/kubernetes and kube-dns.
func (d *diag) services() {
	r := d.r
	svcRef := func(s *corev1.Service) ObjectRef {
		return ObjectRef{Kind: "Service", Namespace: s.Namespace, Name: s.Name}
	}
	if len(d.s.ServiceCIDRs) > 0 {
		inv := servicecidr.BuildInventory(&servicecidr.Snapshot{ServiceCIDRs: d.s.ServiceCIDRs, Services: d.s.Services})
		for _, o := range inv.OutOfRange {
			key, ip, _ := strings.Cut(o, "=")
			ns, name, _ := strings.Cut(key, "/")
			d.add(DoctorFinding{Code: CodeServiceIPOutsideRange, Severity: cidr.SeverityError, Objects: []ObjectRef{{Kind: "Service", Namespace: ns, Name: name}},
				Message: fmt.Sprintf("Service %s has ClusterIP %s, which lies in no ServiceCIDR: kube-apiserver's repair loop reports it and nothing reserves the address", key, ip),
				Fix:     "recreate the Service in the current range (servicecidr / migrate.ServiceCIDR), or add a ServiceCIDR covering it"})
		}
	} else if len(d.service) > 0 {
		for i := range d.s.Services {
			svc := &d.s.Services[i]
			for _, ip := range servicecidr.ClusterIPs(svc) {
				if !slices.ContainsFunc(d.service, func(p netip.Prefix) bool { return p.Contains(ip) }) {
					d.add(DoctorFinding{Code: CodeServiceIPOutsideRange, Severity: cidr.SeverityError, Objects: []ObjectRef{svcRef(svc)},
						Message: fmt.Sprintf("Service %s/%s has ClusterIP %s, outside %s %s", svc.Namespace, svc.Name, ip, r.ServiceRangeSource, r.ServiceRange),
						Fix:     "recreate the Service in the current range (servicecidr / migrate.ServiceCIDR)"})
				}
			}
		}
	}
	// The default ServiceCIDR follows the flag only when it is created.
	for _, sc := range d.s.ServiceCIDRs {
		if sc.Name != servicecidr.DefaultServiceCIDRName || len(d.service) == 0 {
			continue
		}
		if !slices.Equal(sortedPrefixes(sc.CIDRs), sortedPrefixes(d.service)) {
			d.add(DoctorFinding{Code: CodeServiceCIDRFlagMismatch, Severity: cidr.SeverityError, Objects: []ObjectRef{{Kind: "ServiceCIDR", Name: sc.Name}},
				Message: fmt.Sprintf("ServiceCIDR %s holds %s but %s is %s: kube-apiserver never changes the default ServiceCIDR to follow its flag (event KubernetesDefaultServiceCIDRInconsistent), so ClusterIPs keep coming from the old range",
					sc.Name, join(sc.CIDRs), r.ServiceRangeSource, r.ServiceRange),
				Fix: "finish the move with the ServiceCIDR procedure (servicecidr / migrate.ServiceCIDR): a ServiceCIDR for the new range, delete the old default, recreate Services"})
		}
	}
	var kubeSvc, dnsSvc *corev1.Service
	for i := range d.s.Services {
		svc := &d.s.Services[i]
		switch {
		case svc.Namespace == corev1.NamespaceDefault && svc.Name == "kubernetes":
			kubeSvc = svc
		case svc.Namespace == kubeadmcfg.Namespace && svc.Name == "kube-dns":
			dnsSvc = svc
		case dnsSvc == nil && svc.Labels[servicecidr.DNSLabelKey] == servicecidr.DNSLabelValue:
			dnsSvc = svc
		}
	}
	switch {
	case kubeSvc == nil && len(d.s.Services) > 0:
		d.add(DoctorFinding{Code: CodeKubernetesServiceIPWrong, Severity: cidr.SeverityWarning, Objects: []ObjectRef{{Kind: "Service", Namespace: "default", Name: "kubernetes"}},
			Message: "Service default/kubernetes is missing: in-cluster clients cannot reach the API server until kube-apiserver recreates it",
			Fix:     "wait for kube-apiserver to recreate it; restart kube-apiserver if it does not"})
	case kubeSvc != nil:
		for _, ip := range servicecidr.ClusterIPs(kubeSvc) {
			for _, p := range d.service {
				first, err := cidr.NthAddr(p.Masked(), 1)
				if err != nil || cidr.FamilyOf(p) != cidr.FamilyOf(netip.PrefixFrom(ip, ip.BitLen())) || first == ip {
					continue
				}
				d.add(DoctorFinding{Code: CodeKubernetesServiceIPWrong, Severity: cidr.SeverityError, Objects: []ObjectRef{svcRef(kubeSvc)},
					Message: fmt.Sprintf("Service default/kubernetes has ClusterIP %s but the first address of %s (%s) is %s: kube-apiserver's serving certificate and the Service range disagree", ip, p, r.ServiceRangeSource, first),
					Fix:     "delete Service default/kubernetes once the range is settled; kube-apiserver recreates it at the first address"})
			}
		}
	}
	if kl := d.kubeadm.Kubelet; kl != nil && dnsSvc != nil && len(kl.ClusterDNS()) > 0 {
		ips := servicecidr.ClusterIPs(dnsSvc)
		match := false
		for _, s := range kl.ClusterDNS() {
			if a, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil && slices.Contains(ips, a) {
				match = true
			}
		}
		if !match && len(ips) > 0 {
			d.add(DoctorFinding{Code: CodeClusterDNSMismatch, Severity: cidr.SeverityError,
				Objects: []ObjectRef{svcRef(dnsSvc), {Kind: "ConfigMap", Namespace: d.kubeadm.KubeletRef.Namespace, Name: d.kubeadm.KubeletRef.Name}},
				Message: fmt.Sprintf("Service %s/%s has ClusterIP %s but %s clusterDNS is %s: pods get a resolver address nothing answers",
					dnsSvc.Namespace, dnsSvc.Name, join(ips), d.kubeadm.KubeletRef, strings.Join(kl.ClusterDNS(), ",")),
				Fix: "set the kubelet's clusterDNS (ConfigMap and every node's config.yaml) to the DNS Service's ClusterIP, restart the kubelets, then restart the pods"})
		}
	}
}

func sortedPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = p.Masked()
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	return out
}

// join renders prefixes or addresses as a comma-separated list.
func join[T fmt.Stringer](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

// config runs kubeadmcfg.Check: kube-proxy, kubelet, kubeadm-config and the
// control-plane flags against each other.
func (d *diag) config(opts DoctorOptions) {
	ks := d.kubeadm
	if ks.ControllerManager == nil && opts.Flags != nil {
		// No kube-controller-manager Pod was read: the flags the caller gave
		// stand for it, so kube-proxy and kubeadm-config are compared with
		// them too.
		if m, err := flagsManifest(d.r.Flags, opts.FlagsSource); err == nil {
			cp := *ks
			cp.ControllerManager = m
			ks = &cp
		}
	}
	ks.Nodes = nodecidr.NodePodCIDRs(d.s.Nodes)
	for _, p := range d.s.IPPools {
		ks.Pools = append(ks.Pools, kubeadmcfg.PodPool{Name: p.Name, Kind: cidr.KindCalicoPool, CIDR: p.Spec.CIDR})
	}
	if nc := d.netconf; nc != nil && nc.Config != nil && nc.Config.Network.IsValid() {
		ks.Pools = append(ks.Pools, kubeadmcfg.PodPool{Name: nc.Namespace + "/" + nc.Name, Kind: cidr.KindFlannelNetwork, CIDR: nc.Config.Network.String()})
	}
	rep := kubeadmcfg.Check(ks)
	for _, f := range rep.Findings {
		code := Code(f.Code)
		switch f.Code {
		case kubeadmcfg.CodeHostBits, kubeadmcfg.CodeNodeCrash, kubeadmcfg.CodeNodePodCIDRMask, kubeadmcfg.CodeControllerManagerFlags, kubeadmcfg.CodeOverlap:
			continue // reported by the layout check, the preflight, the node audit and the conflicts
		case kubeadmcfg.CodeKubeProxyClusterCIDR:
			code = CodeKubeProxyClusterCIDRMismatch
		case kubeadmcfg.CodePodSubnetMismatch, kubeadmcfg.CodeServiceSubnetMismatch, kubeadmcfg.CodeNodeMaskMismatch, kubeadmcfg.CodeAllocateNodeCIDRs:
			code = CodeKubeadmConfigMismatch
		}
		var objs []ObjectRef
		for _, v := range f.Sources {
			if o, ok := refOf(v.Where); ok && !slices.Contains(objs, o) {
				objs = append(objs, o)
			}
		}
		d.add(DoctorFinding{Code: code, Severity: f.Severity, Objects: objs, Message: f.Message, Fix: configFix(code)})
	}
}

// refOf reads the object at the start of a kubeadmcfg source ("ConfigMap
// kube-system/kube-proxy config.conf clusterCIDR", "Pod kube-system/x --flag").
func refOf(where string) (ObjectRef, bool) {
	fields := strings.Fields(where)
	if len(fields) < 2 || (fields[0] != "ConfigMap" && fields[0] != "Pod" && fields[0] != "Node") {
		return ObjectRef{}, false
	}
	if ns, name, ok := strings.Cut(fields[1], "/"); ok {
		return ObjectRef{Kind: fields[0], Namespace: ns, Name: name}, true
	}
	return ObjectRef{Kind: fields[0], Name: fields[1]}, true
}

func configFix(c Code) string {
	switch c {
	case CodeKubeProxyClusterCIDRMismatch:
		return "set clusterCIDR in ConfigMap kube-system/kube-proxy (config.conf) to kube-controller-manager's --cluster-cidr and restart the kube-proxy pods (kubeadmcfg)"
	case CodeKubeadmConfigMismatch:
		return "make kubeadm-config and the static-pod flags agree (kubeadmcfg), so that kubeadm upgrade or join does not undo the running layout"
	}
	return ""
}

// conflicts reports pod and Service ranges overlapping CGNAT or node InternalIPs.
func (d *diag) conflicts() {
	for _, rg := range d.podAndServiceRanges() {
		if rg.prefix.Overlaps(CGNAT) {
			d.conflict[rg.where] = true
			d.add(DoctorFinding{Code: CodeRangeOverlapsCGNAT, Severity: cidr.SeverityWarning, Objects: rg.objects,
				Message: fmt.Sprintf("%s %s overlaps CGNAT %s: Tailscale and carrier-grade NAT use it, so those peers become unreachable from pods", rg.where, rg.prefix, CGNAT),
				Fix:     "move the range out of 100.64.0.0/10 (migrate.ServiceCIDR for Services, migrate.CalicoPodCIDR or migrate.FlannelPodCIDR for pods)"})
		}
		if names := d.nodesWithIPIn(rg.prefix); len(names) > 0 {
			d.conflict[rg.where] = true
			d.add(DoctorFinding{Code: CodeRangeOverlapsNodeIP, Severity: cidr.SeverityError, Objects: append(slices.Clone(rg.objects), nodeRefs(names)...),
				Message: fmt.Sprintf("%s %s holds the InternalIP of %d node(s) (%s): traffic to those nodes is routed as pod or Service traffic", rg.where, rg.prefix, len(names), short(names)),
				Fix:     "move the range off the node network"})
		}
	}
}

type namedRange struct {
	placed
	kind    cidr.Kind
	objects []ObjectRef
}

// podAndServiceRanges lists the cluster CIDRs, the Service range and
// ServiceCIDRs, the Calico pools and flannel's Network (Calico pools are
// checked against node addresses by calico).
func (d *diag) podAndServiceRanges() []namedRange {
	var out []namedRange
	for _, p := range d.layout.ClusterCIDRs {
		out = append(out, namedRange{placed{p, "cluster CIDR (" + d.r.FlagsSource + ")"}, cidr.KindClusterCIDR, nil})
	}
	for _, s := range d.serviceRanges() {
		var objs []ObjectRef
		if name, ok := strings.CutPrefix(s.where, "ServiceCIDR "); ok {
			objs = []ObjectRef{{Kind: "ServiceCIDR", Name: name}}
		}
		out = append(out, namedRange{s, cidr.KindServiceCIDR, objs})
	}
	for _, p := range d.pools {
		out = append(out, namedRange{placed{p.prefix, poolLabel(p)}, cidr.KindCalicoPool, []ObjectRef{{Kind: "IPPool", Name: p.p.Name}}})
	}
	if nc := d.netconf; nc != nil && nc.Config != nil {
		for _, p := range []netip.Prefix{nc.Config.Network, nc.Config.IPv6Network} {
			if p.IsValid() {
				out = append(out, namedRange{placed{p, "flannel Network (" + nc.Namespace + "/" + nc.Name + ")"}, cidr.KindFlannelNetwork,
					[]ObjectRef{{Kind: "ConfigMap", Namespace: nc.Namespace, Name: nc.Name}}})
			}
		}
	}
	return out
}

// fixPlan plans new podCIDRs for every broken node, from free space inside
// flannel's Network when it is narrower than the cluster CIDR, and inside
// the enabled Calico pools when any of them overlaps that range (all of
// them, in order): never from a disabled pool.
func (d *diag) fixPlan() {
	needs := false
	for _, f := range d.r.Findings {
		needs = needs || f.Severity == cidr.SeverityError && asksForPlan(f.Code)
	}
	if !needs {
		return
	}
	layout := d.layout
	layout.ClusterCIDRs = slices.Clone(layout.ClusterCIDRs)
	var within, excluded []netip.Prefix
	for i, cl := range layout.ClusterCIDRs {
		if nc := d.netconf; nc != nil && nc.Config != nil {
			for _, s := range []netip.Prefix{nc.Config.Network, nc.Config.IPv6Network} {
				if s.IsValid() && cidr.FamilyOf(s) == cidr.FamilyOf(cl) && cidr.ContainsPrefix(cl, s) && s.Bits() <= layout.NodeMasks[i] {
					layout.ClusterCIDRs[i] = s.Masked() // narrower: plan inside it
				}
			}
		}
		for _, p := range d.pools {
			if !p.p.AllocationStopped() && p.prefix.Overlaps(layout.ClusterCIDRs[i]) {
				within = append(within, p.prefix)
			}
		}
	}
	for _, p := range d.pools {
		if p.p.AllocationStopped() {
			excluded = append(excluded, p.prefix)
		}
	}
	plan, err := nodecidr.PlanNodes(d.s.Nodes, nodecidr.PlanOptions{Mode: nodecidr.ModeFix, Layout: layout, Within: within, Excluded: excluded})
	switch {
	case err != nil:
		d.r.FixPlanError = err.Error()
	case len(plan.Steps) > 0:
		d.r.FixPlan = plan
	}
}

// asksForPlan reports whether a finding of code c is fixed by the fix
// plan: a node outside flannel's Network, or one of planFixes.
func asksForPlan(c Code) bool {
	return c == CodePodCIDROutsideFlannelNetwork || slices.Contains(planFixes, nodecidr.FindingKind(c))
}

// fixWithoutPlan rewrites the Fix of the findings that point at the fix
// plan when there is none, so that no finding sends the reader to a plan the
// report does not hold: with a plan error they name it, and a node outside
// flannel's Network that no move fixes (the Network lies apart from the
// cluster CIDR) is sent to net-conf.json.
func (d *diag) fixWithoutPlan() {
	if d.r.FixPlan != nil {
		return
	}
	for i := range d.r.Findings {
		f := &d.r.Findings[i]
		if !asksForPlan(f.Code) {
			continue
		}
		switch {
		case d.r.FixPlanError != "":
			f.Fix = "no fix plan could be made: " + d.r.FixPlanError
		case f.Code == CodePodCIDROutsideFlannelNetwork:
			f.Fix = "no node move fixes it, the node is inside the cluster CIDR: make flannel's Network in net-conf.json and the cluster CIDR agree"
		}
	}
}

// ranges collects the address map's ranges.
func (d *diag) ranges() {
	r := d.r
	for _, rg := range d.podAndServiceRanges() {
		r.Ranges = append(r.Ranges, MapRange{Label: rg.where, Kind: rg.kind, Prefix: rg.prefix, Conflict: d.conflict[rg.where]})
	}
	for _, o := range r.Conflicts {
		for i := range r.Ranges {
			if r.Ranges[i].Prefix == o.Outer.Prefix || r.Ranges[i].Prefix == o.Inner.Prefix {
				r.Ranges[i].Conflict = r.Ranges[i].Conflict || o.Severity == cidr.SeverityError
			}
		}
	}
	dup := map[string]bool{}
	for _, n := range r.Audit.NodesWith(nodecidr.FindingDuplicate) {
		dup[n] = true
	}
	for _, f := range r.Audit.Findings {
		if f.Kind == nodecidr.FindingDuplicate && len(f.Nodes) > 0 {
			dup[f.Nodes[0]] = true
		}
	}
	bad := map[string]bool{}
	for _, f := range r.Findings {
		if f.Code == CodePodCIDROutsideFlannelNetwork || f.Code == Code(nodecidr.FindingOutOfRange) || f.Code == Code(nodecidr.FindingOverlap) {
			for _, o := range f.Objects {
				bad[o.Name] = o.Kind == "Node"
			}
		}
	}
	for _, fn := range d.fnodes {
		for _, p := range fn.PodCIDRs {
			r.Ranges = append(r.Ranges, MapRange{Label: "Node " + fn.Name, Kind: cidr.KindNodePodCIDR, Prefix: p, Duplicate: dup[fn.Name], Conflict: bad[fn.Name]})
		}
	}
}

// flagsManifest is a kube-controller-manager static-pod manifest running
// with f, named source (the flags a caller gave the doctor).
func flagsManifest(f cidr.ControllerManagerFlags, source string) (*kubeadmcfg.Manifest, error) {
	pod := corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: cidr.KubeControllerManager, Labels: map[string]string{"component": cidr.KubeControllerManager}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: cidr.KubeControllerManager, Command: append([]string{cidr.KubeControllerManager}, f.Args()...)}}}}
	data, err := yaml.Marshal(&pod)
	if err != nil {
		return nil, err
	}
	if source == "" {
		source = "the kube-controller-manager flags given"
	}
	return kubeadmcfg.ParseManifestFrom(source, data)
}
