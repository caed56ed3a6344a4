package flannel

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/lease"
)

// Defaults of kube subnet manager mode (kube-flannel.yml and flanneld flags).
const (
	// DefaultNetConfNamespace is the namespace of the kube-flannel-cfg ConfigMap.
	DefaultNetConfNamespace = "kube-flannel"
	// DefaultNetConfName is the ConfigMap holding net-conf.json.
	DefaultNetConfName = "kube-flannel-cfg"
	// NetConfKey is the ConfigMap key of the network config.
	NetConfKey = "net-conf.json"
	// DefaultAnnotationPrefix is flanneld's default --kube-annotation-prefix.
	DefaultAnnotationPrefix = "flannel.alpha.coreos.com"
)

// KubeOptions locates flannel's objects in kube subnet manager mode.
type KubeOptions struct {
	// Namespace of the ConfigMap; default DefaultNetConfNamespace.
	Namespace string
	// ConfigMap name; default DefaultNetConfName.
	ConfigMap string
	// Key in the ConfigMap; default NetConfKey.
	Key string
	// AnnotationPrefix is flanneld's --kube-annotation-prefix; default DefaultAnnotationPrefix.
	AnnotationPrefix string
}

func (o KubeOptions) withDefaults() KubeOptions {
	o.Namespace = or(o.Namespace, DefaultNetConfNamespace)
	o.ConfigMap = or(o.ConfigMap, DefaultNetConfName)
	o.Key = or(o.Key, NetConfKey)
	o.AnnotationPrefix = or(o.AnnotationPrefix, DefaultAnnotationPrefix)
	return o
}

// NetConf is net-conf.json as read from its ConfigMap.
type NetConf struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Key       string `json:"key"`
	// UID and ResourceVersion identify the ConfigMap version read.
	UID             types.UID `json:"uid"`
	ResourceVersion string    `json:"resourceVersion"`
	// Raw is the JSON text as stored.
	Raw string `json:"raw"`
	// Config is nil when Raw cannot be parsed.
	Config *Config `json:"config,omitempty"`
	// Error says why Raw cannot be parsed.
	Error string `json:"error,omitempty"`
}

// ReadNetConf reads net-conf.json from its ConfigMap. A config that does not
// parse is returned with Error set, not as an error, so it can be audited
// and fixed.
func ReadNetConf(ctx context.Context, c kubernetes.Interface, opts KubeOptions) (*NetConf, error) {
	o := opts.withDefaults()
	cm, err := c.CoreV1().ConfigMaps(o.Namespace).Get(ctx, o.ConfigMap, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: ConfigMap %s/%s (flanneld's net-conf.json; set the namespace and name if flannel is installed elsewhere): %v", ErrNotFound, o.Namespace, o.ConfigMap, err)
		}
		return nil, fmt.Errorf("read ConfigMap %s/%s: %w", o.Namespace, o.ConfigMap, err)
	}
	raw, ok := cm.Data[o.Key]
	if !ok {
		keys := make([]string, 0, len(cm.Data))
		for k := range cm.Data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return nil, fmt.Errorf("%w: ConfigMap %s/%s has no key %q (keys: %s)", ErrNotFound, o.Namespace, o.ConfigMap, o.Key, strings.Join(keys, ", "))
	}
	nc := &NetConf{Namespace: o.Namespace, Name: o.ConfigMap, Key: o.Key, UID: cm.UID, ResourceVersion: cm.ResourceVersion, Raw: raw}
	if cfg, err := ParseConfig([]byte(raw)); err != nil {
		nc.Error = err.Error()
	} else {
		nc.Config = cfg
	}
	return nc, nil
}

// AnnotationKeys are the node annotations flanneld's kube subnet manager
// writes, for one annotation prefix.
type AnnotationKeys struct {
	KubeSubnetManager   string `json:"kubeSubnetManager"`
	BackendData         string `json:"backendData"`
	BackendV6Data       string `json:"backendV6Data"`
	BackendType         string `json:"backendType"`
	PublicIP            string `json:"publicIP"`
	PublicIPv6          string `json:"publicIPv6"`
	NodePublicIP        string `json:"nodePublicIP"`
	NodePublicIPv6      string `json:"nodePublicIPv6"`
	PublicIPOverwrite   string `json:"publicIPOverwrite"`
	PublicIPv6Overwrite string `json:"publicIPv6Overwrite"`
	// Prefix is the normalised prefix every key starts with.
	Prefix string `json:"prefix"`
}

var annotationPrefixRegex = regexp.MustCompile(`(?:[a-z0-9_-]+\.)+[a-z0-9_-]+/(?:[a-z0-9_-]+-)?$`)

// NewAnnotationKeys applies flanneld's rules to an annotation prefix: without
// a slash, "/" is appended; with one that does not end in "/" or "-", "-" is
// appended; the result must look like "fqdn/[name-]".
func NewAnnotationKeys(prefix string) (AnnotationKeys, error) {
	switch n := strings.Count(prefix, "/"); {
	case n > 1:
		return AnnotationKeys{}, fmt.Errorf("%w: annotation prefix %q: at most one \"/\" (flanneld: \"subnet/kube: prefix can contain at most single slash\")", ErrInvalidRequest, prefix)
	case n == 0:
		prefix += "/"
	}
	if !strings.HasSuffix(prefix, "/") && !strings.HasSuffix(prefix, "-") {
		prefix += "-"
	}
	if !annotationPrefixRegex.MatchString(prefix) {
		return AnnotationKeys{}, fmt.Errorf("%w: annotation prefix %q must look like %q (flanneld: \"subnet/kube: prefix must be in a format: fqdn/[0-9a-z-_]*\")", ErrInvalidRequest, prefix, DefaultAnnotationPrefix)
	}
	return AnnotationKeys{
		Prefix:              prefix,
		KubeSubnetManager:   prefix + "kube-subnet-manager",
		BackendData:         prefix + "backend-data",
		BackendV6Data:       prefix + "backend-v6-data",
		BackendType:         prefix + "backend-type",
		PublicIP:            prefix + "public-ip",
		PublicIPv6:          prefix + "public-ipv6",
		NodePublicIP:        prefix + "node-public-ip",
		NodePublicIPv6:      prefix + "node-public-ipv6",
		PublicIPOverwrite:   prefix + "public-ip-overwrite",
		PublicIPv6Overwrite: prefix + "public-ipv6-overwrite",
	}, nil
}

// Node is what flannel's kube subnet manager sees of a Node.
type Node struct {
	Name string `json:"name"`
	// PodCIDR is spec.podCIDR as written (flanneld requires it).
	PodCIDR string `json:"podCIDR,omitempty"`
	// PodCIDRs is spec.podCIDRs (or spec.podCIDR when empty) parsed the way
	// flanneld parses them (net.ParseCIDR: host bits dropped).
	PodCIDRs []netip.Prefix `json:"podCIDRs,omitempty"`
	// PodCIDRErrors lists podCIDR values that do not parse.
	PodCIDRErrors []string `json:"podCIDRErrors,omitempty"`
	// Addresses are the node's InternalIP and ExternalIP addresses.
	Addresses []netip.Addr `json:"addresses,omitempty"`
	// KubeSubnetManager is the kube-subnet-manager annotation ("true" once
	// flanneld ran on the node in kube mode).
	KubeSubnetManager bool `json:"kubeSubnetManager"`
	// BackendType, BackendData, PublicIP and PublicIPv6 are flanneld's annotations.
	BackendType string     `json:"backendType,omitempty"`
	BackendData string     `json:"backendData,omitempty"`
	PublicIP    netip.Addr `json:"publicIP,omitzero"`
	PublicIPv6  netip.Addr `json:"publicIPv6,omitzero"`
	// Annotations holds every annotation under the prefix, as written.
	Annotations map[string]string `json:"annotations,omitempty"`
}

// NodeFromObject extracts what flannel uses from a Node.
func NodeFromObject(n *corev1.Node, keys AnnotationKeys) Node {
	out := Node{Name: n.Name, PodCIDR: n.Spec.PodCIDR}
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, s := range cidrs {
		p, _, err := cidr.ParseLenient(s)
		if err != nil {
			out.PodCIDRErrors = append(out.PodCIDRErrors, s)
			continue
		}
		out.PodCIDRs = append(out.PodCIDRs, p)
	}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out.Addresses = append(out.Addresses, ip.Unmap())
		}
	}
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, keys.Prefix) {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	out.KubeSubnetManager = n.Annotations[keys.KubeSubnetManager] == "true"
	out.BackendType = n.Annotations[keys.BackendType]
	out.BackendData = n.Annotations[keys.BackendData]
	if ip, err := netip.ParseAddr(n.Annotations[keys.PublicIP]); err == nil {
		out.PublicIP = ip.Unmap()
	}
	if ip, err := netip.ParseAddr(n.Annotations[keys.PublicIPv6]); err == nil {
		out.PublicIPv6 = ip
	}
	return out
}

// ReadNodes lists every node (in pages of 500) with its flannel annotations.
func ReadNodes(ctx context.Context, c kubernetes.Interface, opts KubeOptions) ([]Node, error) {
	keys, err := NewAnnotationKeys(opts.withDefaults().AnnotationPrefix)
	if err != nil {
		return nil, err
	}
	var out []Node
	lo := metav1.ListOptions{Limit: 500}
	for {
		list, err := c.CoreV1().Nodes().List(ctx, lo)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		for i := range list.Items {
			out = append(out, NodeFromObject(&list.Items[i], keys))
		}
		if list.Continue == "" {
			break
		}
		lo.Continue = list.Continue
	}
	slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// NodeAddressList returns, for each node, the addresses a lease's PublicIP may
// be: InternalIP/ExternalIP and the flannel public-ip annotations. It feeds
// AuditOptions.Nodes.
func NodeAddressList(nodes []Node) []NodeAddresses {
	out := make([]NodeAddresses, 0, len(nodes))
	for _, n := range nodes {
		na := NodeAddresses{Name: n.Name, Addrs: slices.Clone(n.Addresses)}
		for _, a := range []netip.Addr{n.PublicIP, n.PublicIPv6} {
			if a.IsValid() && !slices.Contains(na.Addrs, a) {
				na.Addrs = append(na.Addrs, a)
			}
		}
		out = append(out, na)
	}
	return out
}

// PodCIDRMessage is the error flanneld's kube subnet manager exits with when
// the node's podCIDR is outside the Network (pkg/subnet/kube AcquireLease).
func PodCIDRMessage(network, podCIDR netip.Prefix, node string) string {
	if podCIDR.Addr().Is6() {
		return fmt.Sprintf("subnet %q specified in the flannel net config doesn't contain %q IPv6 PodCIDR of the %q node", networkText(network, true), podCIDR.String(), node)
	}
	return fmt.Sprintf("subnet %q specified in the flannel net config doesn't contain %q PodCIDR of the %q node", networkText(network, false), podCIDR.String(), node)
}

// networkText prints an unset network the way flanneld's ip types do.
func networkText(p netip.Prefix, v6 bool) string {
	if p.IsValid() {
		return p.String()
	}
	if v6 {
		return "::/0"
	}
	return "0.0.0.0/0"
}

// AuditKube checks nodes against net-conf.json the way flanneld's kube
// subnet manager will at its next start: every node needs spec.podCIDR, each
// podCIDR of an enabled family must lie inside the Network, and the
// backend-type annotation (what the node's flanneld last ran) should match
// the configured backend, and no two nodes may announce the same
// public-ip. Duplicate podCIDRs are the nodecidr package's concern and are
// not reported here.
func AuditKube(nc *NetConf, nodes []Node) *Report {
	rep := &Report{Findings: []Finding{}}
	add := func(f Finding) { rep.Findings = append(rep.Findings, f) }
	src := nc.Namespace + "/" + nc.Name + " " + nc.Key
	c := nc.Config
	if c == nil {
		add(Finding{Kind: FindingConfigInvalid, Severity: cidr.SeverityError,
			Detail: src + " cannot be parsed; flanneld exits with \"error parsing subnet config\": " + nc.Error})
		return rep
	}
	for _, w := range c.Warnings {
		add(Finding{Kind: FindingConfigWarning, Severity: cidr.SeverityWarning, Detail: src + ": " + w})
	}
	backend := strings.ToLower(c.BackendType)
	if !slices.Contains(backendTypes, backend) {
		add(Finding{Kind: FindingConfigInvalid, Severity: cidr.SeverityError,
			Detail: fmt.Sprintf("%s: Backend.Type %q is not a backend flanneld knows (%s); flanneld exits with \"unknown backend type: %s\"", src, c.BackendType, strings.Join(backendTypes, ", "), backend)})
	}
	if !c.EnableIPv4 && !c.EnableIPv6 {
		add(Finding{Kind: FindingConfigInvalid, Severity: cidr.SeverityError, Detail: src + ": EnableIPv4 and EnableIPv6 are both false"})
	}
	for _, n := range nodes {
		names := []string{n.Name}
		if n.PodCIDR == "" && len(n.PodCIDRs) == 0 {
			add(Finding{Kind: FindingPodCIDRMissing, Severity: cidr.SeverityError, Nodes: names,
				Detail: fmt.Sprintf("the node has no podCIDR; flanneld on it exits with: node %q pod cidr not assigned", n.Name)})
			continue
		}
		for _, bad := range n.PodCIDRErrors {
			add(Finding{Kind: FindingPodCIDRInvalid, Severity: cidr.SeverityError, Nodes: names,
				Detail: fmt.Sprintf("podCIDR %q is not a CIDR; flanneld on the node exits with a parse error", bad)})
		}
		if len(n.PodCIDRs)+len(n.PodCIDRErrors) > 2 {
			add(Finding{Kind: FindingPodCIDRInvalid, Severity: cidr.SeverityError, Nodes: names,
				Detail: fmt.Sprintf("the node has %d podCIDRs; flanneld exits with: node %q pod cidrs should be IPv4/IPv6 only or dualstack", len(n.PodCIDRs)+len(n.PodCIDRErrors), n.Name)})
		}
		for _, p := range n.PodCIDRs {
			enabled, network := c.EnableIPv4, c.Network
			if p.Addr().Is6() {
				enabled, network = c.EnableIPv6, c.IPv6Network
			}
			if !enabled {
				continue
			}
			if !network.IsValid() || !cidr.ContainsPrefix(network, p) {
				add(Finding{Kind: FindingPodCIDROutside, Severity: cidr.SeverityError, Nodes: names, Subnet: p,
					Detail: fmt.Sprintf("podCIDR %s is outside the Network; flanneld on the node exits at its next start with: %s", p, PodCIDRMessage(network, p, n.Name))})
			}
		}
		if n.BackendType != "" && backend != "" && !strings.EqualFold(n.BackendType, backend) {
			add(Finding{Kind: FindingBackendMismatch, Severity: cidr.SeverityWarning, Nodes: names,
				Detail: fmt.Sprintf("the node's %s annotation says %q but %s says %q: its flanneld has not restarted since the backend changed (or runs another config); nodes on different backends cannot reach each other's pods",
					"backend-type", n.BackendType, src, c.BackendType)})
		}
		if !n.KubeSubnetManager {
			add(Finding{Kind: FindingNotManaged, Severity: cidr.SeverityInfo, Nodes: names,
				Detail: "the node has no kube-subnet-manager annotation: flanneld has not run on it in kube subnet manager mode"})
		}
	}
	// Two nodes announcing one public-ip: every other node routes (or
	// encapsulates) both nodes' subnets to the same host.
	byIP := map[netip.Addr][]string{}
	var ips []netip.Addr
	for _, n := range nodes {
		for _, ip := range []netip.Addr{n.PublicIP, n.PublicIPv6} {
			if !ip.IsValid() {
				continue
			}
			if _, ok := byIP[ip]; !ok {
				ips = append(ips, ip)
			}
			byIP[ip] = append(byIP[ip], n.Name)
		}
	}
	for _, ip := range ips {
		if names := byIP[ip]; len(names) > 1 {
			add(Finding{Kind: FindingDuplicatePublicIP, Severity: cidr.SeverityError, Nodes: names,
				Detail: fmt.Sprintf("nodes %s all announce public-ip %s: the other nodes send the pod traffic of all of them to one host, so the pods of all but one are unreachable", strings.Join(names, ", "), ip)})
		}
	}
	sortFindings(rep.Findings)
	return rep
}

// NetConfPlan is a reviewed rewrite of net-conf.json. It records the
// ConfigMap's UID and resourceVersion; ApplyNetConf refuses it when the
// ConfigMap changed since.
type NetConfPlan struct {
	Namespace       string    `json:"namespace"`
	Name            string    `json:"name"`
	Key             string    `json:"key"`
	UID             types.UID `json:"uid"`
	ResourceVersion string    `json:"resourceVersion"`
	// OldRaw and NewRaw are the JSON text before and after.
	OldRaw string `json:"oldRaw"`
	NewRaw string `json:"newRaw"`
	// NodesOutside are the nodes whose podCIDR lies outside the new network:
	// their flanneld exits at its next start until their podCIDR is moved.
	NodesOutside []string `json:"nodesOutside,omitempty"`
	Warnings     []string `json:"warnings,omitempty"`
}

// PlanNetConf plans rewriting net-conf.json to a new network, editing only
// the Network / IPv6Network values (see SetNetworkText); every other key and
// all formatting are kept. nodes (may be nil) are checked against the new
// network.
func PlanNetConf(nc *NetConf, req SetNetworkRequest, nodes []Node) (*NetConfPlan, error) {
	if req.MoveLeases {
		return nil, fmt.Errorf("%w: MoveLeases has no meaning in kube subnet manager mode: node subnets are the nodes' podCIDRs", ErrInvalidRequest)
	}
	newRaw, c, err := SetNetworkText([]byte(nc.Raw), req, false)
	if err != nil {
		return nil, err
	}
	p := &NetConfPlan{Namespace: nc.Namespace, Name: nc.Name, Key: nc.Key, UID: nc.UID, ResourceVersion: nc.ResourceVersion, OldRaw: nc.Raw, NewRaw: string(newRaw)}
	after := *nc
	after.Raw, after.Config, after.Error = string(newRaw), c, ""
	for _, f := range AuditKube(&after, nodes).Findings {
		if f.Kind == FindingPodCIDROutside {
			p.NodesOutside = append(p.NodesOutside, f.Nodes...)
		}
	}
	p.NodesOutside = slices.Compact(p.NodesOutside)
	p.Warnings = append(p.Warnings, "flanneld reads net-conf.json only when it starts: restart the kube-flannel DaemonSet after the nodes' podCIDRs are in the new network")
	if len(p.NodesOutside) > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d node(s) have a podCIDR outside the new network; their flanneld exits at its next start until kube-controller-manager's --cluster-cidr and the nodes' podCIDRs are moved too (see the nodecidr package)", len(p.NodesOutside)))
	}
	return p, nil
}

// DryRun selects how a Kubernetes write is rehearsed.
type DryRun string

// The dry-run modes.
const (
	// DryRunNone writes for real.
	DryRunNone DryRun = ""
	// DryRunClient checks the plan against the cluster and writes nothing.
	DryRunClient DryRun = "client"
	// DryRunServer sends the write with dryRun=All: the API server validates and
	// admits it but does not persist it.
	DryRunServer DryRun = "server"
)

// NetConfResult reports ApplyNetConf.
type NetConfResult struct {
	Outcome Outcome `json:"outcome"`
	// ResourceVersion is the ConfigMap's resourceVersion after the write.
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// KubeApplyOptions tunes ApplyNetConf.
type KubeApplyOptions struct {
	DryRun DryRun
	// Lock, when set, is taken and checked before the update and held
	// until ApplyNetConf returns (dry runs do not take it); a lock its holder
	// no longer holds is refused and nothing is written. Use the Lease of
	// LockScope.
	Lock Locker
}

// ApplyNetConf writes a NetConfPlan. Before writing it checks the caller may
// get and update the ConfigMap (SelfSubjectAccessReview), that the ConfigMap
// is the one planned (same UID) and unchanged (same resourceVersion); the
// update carries the planned resourceVersion, so a concurrent edit makes it
// fail with a *ConflictError instead of being overwritten. A ConfigMap that
// already holds NewRaw is reported as already done.
func ApplyNetConf(ctx context.Context, c kubernetes.Interface, p *NetConfPlan, opts KubeApplyOptions) (*NetConfResult, error) {
	log := logr.FromContextOrDiscard(ctx)
	if p == nil {
		return nil, fmt.Errorf("%w: plan is nil", ErrInvalidRequest)
	}
	obj := p.Namespace + "/" + p.Name
	// The plan is untrusted input: its fields must agree before anything is
	// read or written.
	if p.Namespace == "" || p.Name == "" || p.Key == "" {
		return nil, fmt.Errorf("%w: %w: the plan names no ConfigMap key (namespace %q, name %q, key %q)", ErrInvalidPlan, ErrInvalidRequest, p.Namespace, p.Name, p.Key)
	}
	if _, err := ParseConfig([]byte(p.NewRaw)); err != nil {
		return nil, fmt.Errorf("%w: %w: the plan's new %s does not parse: %w", ErrInvalidPlan, ErrInvalidRequest, p.Key, err)
	}
	if opts.DryRun != DryRunClient {
		if err := access.Preflight(ctx, c, []access.Check{
			{Verb: "get", Resource: "configmaps", Namespace: p.Namespace, Name: p.Name},
			{Verb: "update", Resource: "configmaps", Namespace: p.Namespace, Name: p.Name},
		}); err != nil {
			if errors.Is(err, access.ErrDenied) {
				return nil, fmt.Errorf("%w: ConfigMap %s: %w", ErrForbidden, obj, err)
			}
			return nil, err
		}
	}
	cm, err := c.CoreV1().ConfigMaps(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read ConfigMap %s: %w", obj, err)
	}
	if cm.UID != p.UID {
		return nil, fmt.Errorf("%w: ConfigMap %s has UID %s, the plan was made for UID %s (it was recreated); plan again", ErrStalePlan, obj, cm.UID, p.UID)
	}
	if cm.Data[p.Key] == p.NewRaw {
		return &NetConfResult{Outcome: OutcomeAlreadyDone, ResourceVersion: cm.ResourceVersion}, nil
	}
	if cm.ResourceVersion != p.ResourceVersion {
		return nil, &ConflictError{Key: "configmap " + obj, Expected: p.ResourceVersion, Actual: cm.ResourceVersion,
			Reason: "the ConfigMap was changed since the plan was made; read it again and re-plan"}
	}
	if cm.Data[p.Key] != p.OldRaw {
		return nil, fmt.Errorf("%w: %w: the plan's old %s is not what ConfigMap %s holds at resourceVersion %s: the plan was edited", ErrInvalidPlan, ErrInvalidRequest, p.Key, obj, cm.ResourceVersion)
	}
	if opts.DryRun == DryRunClient {
		return &NetConfResult{Outcome: OutcomeWouldApply, ResourceVersion: cm.ResourceVersion}, nil
	}
	if opts.DryRun == DryRunNone {
		release, err := lease.HoldFor(ctx, opts.Lock, "not updating ConfigMap "+obj)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	cm = cm.DeepCopy()
	cm.Data[p.Key] = p.NewRaw
	uo := metav1.UpdateOptions{}
	if opts.DryRun == DryRunServer {
		uo.DryRun = []string{metav1.DryRunAll}
	}
	updated, err := c.CoreV1().ConfigMaps(p.Namespace).Update(ctx, cm, uo)
	if err != nil {
		if apierrors.IsConflict(err) {
			return nil, &ConflictError{Key: "configmap " + obj, Expected: p.ResourceVersion, Actual: "newer",
				Reason: "the ConfigMap was changed concurrently; read it again and re-plan: " + err.Error()}
		}
		return nil, fmt.Errorf("update ConfigMap %s: %w", obj, err)
	}
	if opts.DryRun == DryRunServer {
		return &NetConfResult{Outcome: OutcomeWouldApply, ResourceVersion: p.ResourceVersion}, nil
	}
	log.Info("rewrote flannel net-conf.json", "configMap", obj, "resourceVersion", updated.ResourceVersion)
	return &NetConfResult{Outcome: OutcomeApplied, ResourceVersion: updated.ResourceVersion}, nil
}
