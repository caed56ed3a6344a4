package servicecidr

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cidrshift/cidrshift/cidr"
)

// Snapshot is the cluster state a plan, an inventory or a deletion report is
// computed from, read in one pass.
type Snapshot struct {
	Server           ServerInfo       `json:"server"`
	APIVersion       APIVersion       `json:"apiVersion"`
	IPAddressVersion APIVersion       `json:"ipAddressVersion,omitempty"`
	ServiceCIDRs     []ServiceCIDR    `json:"serviceCIDRs"`
	Services         []corev1.Service `json:"services"`
	// IPAddresses is nil when no IPAddress API is served.
	IPAddresses []IPAddress `json:"ipAddresses,omitempty"`
	// Nodes is filled when asked for and readable.
	Nodes []NodeInfo `json:"nodes,omitempty"`
	// Pods is filled when asked for and readable.
	Pods []PodInfo `json:"pods,omitempty"`
	// Unread says, one line each, what was asked for but may not be read
	// (nodes or pods forbidden) and what goes unchecked for it.
	Unread []string `json:"unread,omitempty"`
	// KubernetesDeleted is the journal's record that an interrupted Apply
	// deleted default/kubernetes and did not see kube-apiserver recreate it.
	// Client.Plan fills it from PlanOptions.JournalDir; BuildPlan plans that
	// Service from it while it is absent.
	KubernetesDeleted *KubernetesDeletion `json:"kubernetesDeleted,omitempty"`
}

// NodeInfo is what the validation needs of a Node.
type NodeInfo struct {
	Name      string         `json:"name"`
	PodCIDRs  []netip.Prefix `json:"podCIDRs,omitempty"`
	Addresses []netip.Addr   `json:"addresses,omitempty"`
}

// PodInfo is what the plan needs of a Pod: whether it resolves names through
// the cluster DNS Service (and so keeps the old DNS IP until it restarts).
type PodInfo struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	DNSPolicy corev1.DNSPolicy `json:"dnsPolicy,omitempty"`
	// HostNetwork pods use cluster DNS only with ClusterFirstWithHostNet.
	HostNetwork bool `json:"hostNetwork,omitempty"`
}

// UsesClusterDNS reports whether the pod's resolv.conf points at the cluster
// DNS Service.
func (p PodInfo) UsesClusterDNS() bool {
	switch p.DNSPolicy {
	case corev1.DNSClusterFirstWithHostNet:
		return true
	case corev1.DNSClusterFirst, "":
		return !p.HostNetwork
	}
	return false
}

// SnapshotOptions says what else to read besides ServiceCIDRs and Services.
type SnapshotOptions struct {
	// Nodes reads node podCIDRs and addresses for conflict checks. A
	// permission error is logged and the nodes are left out.
	Nodes bool
	// Pods reads pods to list those that must restart to see a new DNS IP.
	Pods bool
}

// Snapshot reads every ServiceCIDR, Service and (where served) IPAddress,
// and nodes and pods when asked.
func (c *Client) Snapshot(ctx context.Context, opts SnapshotOptions) (*Snapshot, error) {
	log := logr.FromContextOrDiscard(ctx)
	s := &Snapshot{Server: c.server, APIVersion: c.version, IPAddressVersion: c.ipVersion}
	var err error
	if s.ServiceCIDRs, err = c.List(ctx); err != nil {
		return nil, err
	}
	svcs, err := c.kube.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Services: %w", err)
	}
	s.Services = svcs.Items
	sort.Slice(s.Services, func(i, j int) bool { return svcKey(&s.Services[i]) < svcKey(&s.Services[j]) })
	if c.ips != nil {
		ips, err := c.ips.listIPs(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing IPAddresses (%s): %w", c.ipVersion.GroupVersion(), err)
		}
		if ips == nil {
			ips = []IPAddress{}
		}
		s.IPAddresses = ips
	}
	if opts.Nodes {
		nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		switch {
		case apierrors.IsForbidden(err):
			log.Info("cannot list nodes; node ranges are not checked for conflicts", "err", err)
			s.Unread = append(s.Unread, "nodes not read, their networks are not checked for conflicts: "+err.Error())
		case err != nil:
			return nil, fmt.Errorf("listing Nodes: %w", err)
		default:
			for _, n := range nodes.Items {
				ni := NodeInfo{Name: n.Name}
				pcs := n.Spec.PodCIDRs
				if len(pcs) == 0 && n.Spec.PodCIDR != "" {
					pcs = []string{n.Spec.PodCIDR}
				}
				for _, pc := range pcs {
					if p, _, err := cidr.ParseLenient(pc); err == nil {
						ni.PodCIDRs = append(ni.PodCIDRs, p)
					}
				}
				for _, a := range n.Status.Addresses {
					if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
						continue
					}
					if ip, err := netip.ParseAddr(a.Address); err == nil {
						ni.Addresses = append(ni.Addresses, ip.Unmap())
					}
				}
				s.Nodes = append(s.Nodes, ni)
			}
		}
	}
	if opts.Pods {
		pods, err := c.kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		switch {
		case apierrors.IsForbidden(err):
			log.Info("cannot list pods; pods to restart are not listed", "err", err)
			s.Unread = append(s.Unread, "pods not read, the pods to restart for the new DNS address are not listed: "+err.Error())
		case err != nil:
			return nil, fmt.Errorf("listing Pods: %w", err)
		default:
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
					continue
				}
				s.Pods = append(s.Pods, PodInfo{Namespace: p.Namespace, Name: p.Name, DNSPolicy: p.Spec.DNSPolicy, HostNetwork: p.Spec.HostNetwork})
			}
		}
	}
	return s, nil
}

func svcKey(s *corev1.Service) string { return s.Namespace + "/" + s.Name }

// ClusterIPs returns a Service's ClusterIPs as addresses. Headless ("None"),
// ExternalName and unparsable values give nil.
func ClusterIPs(s *corev1.Service) []netip.Addr {
	if s.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	ips := s.Spec.ClusterIPs
	if len(ips) == 0 && s.Spec.ClusterIP != "" {
		ips = []string{s.Spec.ClusterIP}
	}
	var out []netip.Addr
	for _, v := range ips {
		if v == corev1.ClusterIPNone || v == "" {
			return nil
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil
		}
		out = append(out, a.Unmap())
	}
	return out
}

// usableContains mirrors the API server: the network address (and the IPv4
// broadcast address) of a prefix is never allocated from it.
func usableContains(p netip.Prefix, ip netip.Addr) bool {
	if !p.Contains(ip) || ip == p.Masked().Addr() {
		return false
	}
	if ip.Is4() && p.Bits() < 32 {
		if last, ok := lastAddr(p); ok && ip == last {
			return false
		}
	}
	return true
}

func lastAddr(p netip.Prefix) (netip.Addr, bool) {
	b := p.Masked().Addr().AsSlice()
	host := len(b)*8 - p.Bits()
	for i := len(b) - 1; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(1<<n - 1)
		host -= n
	}
	a, ok := netip.AddrFromSlice(b)
	return a, ok
}

// containing returns the names of the ServiceCIDRs whose usable part holds ip,
// most specific prefix first.
func containing(scs []ServiceCIDR, ip netip.Addr) []string {
	type hit struct {
		name string
		bits int
	}
	var hits []hit
	for _, sc := range scs {
		for _, p := range sc.CIDRs {
			if usableContains(p, ip) {
				hits = append(hits, hit{sc.Name, p.Bits()})
			}
		}
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].bits > hits[j].bits })
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.name
	}
	return out
}

// Inventory shows which ServiceCIDR each Service's ClusterIPs belong to.
type Inventory struct {
	Server           ServerInfo `json:"server"`
	APIVersion       APIVersion `json:"apiVersion"`
	IPAddressVersion APIVersion `json:"ipAddressVersion,omitempty"`
	// Source says how ownership was established: IPAddress objects or range math.
	Source       string             `json:"source"`
	ServiceCIDRs []ServiceCIDRUsage `json:"serviceCIDRs"`
	Services     []ServiceIPs       `json:"services"`
	// Orphans are IPAddress objects whose parent Service is gone or has another IP.
	Orphans []IPAddress `json:"orphans,omitempty"`
	// Untracked are ClusterIPs (ns/name=ip) without an IPAddress object.
	Untracked []string `json:"untracked,omitempty"`
	// OutOfRange are ClusterIPs (ns/name=ip) in no ServiceCIDR.
	OutOfRange []string `json:"outOfRange,omitempty"`
}

// ServiceCIDRUsage is one ServiceCIDR and how many ClusterIPs it holds.
type ServiceCIDRUsage struct {
	ServiceCIDR
	// ClusterIPs counts the ClusterIPs whose most specific ServiceCIDR this is.
	ClusterIPs int `json:"clusterIPs"`
	// Deletion explains a Terminating ServiceCIDR.
	Deletion *DeletionReport `json:"deletion,omitempty"`
}

// ServiceIPs is one Service with a ClusterIP and where its addresses belong.
type ServiceIPs struct {
	Namespace string             `json:"namespace"`
	Name      string             `json:"name"`
	Type      corev1.ServiceType `json:"type"`
	IPs       []IPOwner          `json:"ips"`
}

// IPOwner places one ClusterIP.
type IPOwner struct {
	IP netip.Addr `json:"ip"`
	// ServiceCIDRs holds every ServiceCIDR containing IP, most specific first.
	ServiceCIDRs []string `json:"serviceCIDRs"`
	// Tracked is true when an IPAddress object records this Service as the owner.
	Tracked bool `json:"tracked"`
}

// Inventory reads the cluster and places every ClusterIP.
func (c *Client) Inventory(ctx context.Context) (*Inventory, error) {
	s, err := c.Snapshot(ctx, SnapshotOptions{})
	if err != nil {
		return nil, err
	}
	return BuildInventory(s), nil
}

// BuildInventory places every ClusterIP of a snapshot: through IPAddress
// objects (spec.parentRef) where the snapshot has them, and by range math
// otherwise. Headless and ExternalName Services have no ClusterIP and are left out.
func BuildInventory(s *Snapshot) *Inventory {
	inv := &Inventory{Server: s.Server, APIVersion: s.APIVersion, IPAddressVersion: s.IPAddressVersion, Source: "range math (no IPAddress API served)"}
	tracked := s.IPAddresses != nil
	byIP := make(map[netip.Addr]IPAddress, len(s.IPAddresses))
	if tracked {
		inv.Source = "IPAddress objects (" + s.IPAddressVersion.GroupVersion() + ")"
		for _, ip := range s.IPAddresses {
			byIP[ip.IP] = ip
		}
	}
	count := map[string]int{}
	held := map[netip.Addr]string{}
	for i := range s.Services {
		svc := &s.Services[i]
		ips := ClusterIPs(svc)
		if len(ips) == 0 {
			continue
		}
		row := ServiceIPs{Namespace: svc.Namespace, Name: svc.Name, Type: svc.Spec.Type}
		for _, ip := range ips {
			held[ip] = svcKey(svc)
			o := IPOwner{IP: ip, ServiceCIDRs: containing(s.ServiceCIDRs, ip)}
			if rec, ok := byIP[ip]; ok && rec.ParentRef.IsService() && rec.ParentRef.Namespace == svc.Namespace && rec.ParentRef.Name == svc.Name {
				o.Tracked = true
			} else if tracked {
				inv.Untracked = append(inv.Untracked, svcKey(svc)+"="+ip.String())
			}
			if len(o.ServiceCIDRs) == 0 {
				inv.OutOfRange = append(inv.OutOfRange, svcKey(svc)+"="+ip.String())
			} else {
				count[o.ServiceCIDRs[0]]++
			}
			row.IPs = append(row.IPs, o)
		}
		inv.Services = append(inv.Services, row)
	}
	if tracked {
		for _, ip := range s.IPAddresses {
			if !ip.ParentRef.IsService() {
				continue
			}
			if held[ip.IP] != ip.ParentRef.Namespace+"/"+ip.ParentRef.Name {
				inv.Orphans = append(inv.Orphans, ip)
			}
		}
	}
	for _, sc := range s.ServiceCIDRs {
		u := ServiceCIDRUsage{ServiceCIDR: sc, ClusterIPs: count[sc.Name]}
		if sc.Terminating() {
			rep := BuildDeletionReport(s, sc.Name)
			u.Deletion = &rep
		}
		inv.ServiceCIDRs = append(inv.ServiceCIDRs, u)
	}
	return inv
}

// Holder is an address that keeps a ServiceCIDR from being deleted.
type Holder struct {
	IP netip.Addr `json:"ip"`
	// Parent is who holds it (a Service for ClusterIPs).
	Parent ParentRef `json:"parent"`
}

// DeletionReport explains why a ServiceCIDR is (or would stay) Terminating.
// kube-controller-manager's service-cidr-controller removes the finalizer
// only when every CIDR is covered by another ServiceCIDR, or no allocated
// address lies in this ServiceCIDR alone.
type DeletionReport struct {
	Name        string         `json:"name"`
	UID         types.UID      `json:"uid,omitempty"`
	CIDRs       []netip.Prefix `json:"cidrs"`
	Found       bool           `json:"found"`
	Terminating bool           `json:"terminating"`
	Ready       *Condition     `json:"ready,omitempty"`
	Finalizers  []string       `json:"finalizers,omitempty"`
	// CoveredBy lists ServiceCIDRs that contain all of this one's CIDRs; when
	// set, addresses do not block the deletion.
	CoveredBy []string `json:"coveredBy,omitempty"`
	// Holders are the addresses that depend only on this ServiceCIDR.
	Holders []Holder `json:"holders,omitempty"`
	// Source says how holders were found: IPAddress objects or Service ClusterIPs.
	Source string `json:"source"`
	// Summary is the explanation in words.
	Summary string `json:"summary"`
}

// String returns the summary.
func (r DeletionReport) String() string { return r.Summary }

// ExplainDeletion reads the cluster and says what keeps a ServiceCIDR from
// being deleted (or would, if deletion were requested).
func (c *Client) ExplainDeletion(ctx context.Context, name string) (DeletionReport, error) {
	s, err := c.Snapshot(ctx, SnapshotOptions{})
	if err != nil {
		return DeletionReport{}, err
	}
	return BuildDeletionReport(s, name), nil
}

// BuildDeletionReport explains, from a snapshot, what holds the named
// ServiceCIDR, mirroring the service-cidr-controller's rule: an address holds
// it when this ServiceCIDR is the only one containing it.
func BuildDeletionReport(s *Snapshot, name string) DeletionReport {
	rep := DeletionReport{Name: name}
	var target ServiceCIDR
	for _, sc := range s.ServiceCIDRs {
		if sc.Name == name {
			target, rep.Found = sc, true
		}
	}
	if !rep.Found {
		rep.Summary = fmt.Sprintf("ServiceCIDR %s does not exist (deleted)", name)
		return rep
	}
	rep.UID, rep.CIDRs, rep.Terminating, rep.Ready, rep.Finalizers = target.UID, target.CIDRs, target.Terminating(), target.Ready, target.Finalizers

	covered := true
	for _, p := range target.CIDRs {
		found := false
		for _, o := range s.ServiceCIDRs {
			if o.Name == name {
				continue
			}
			for _, q := range o.CIDRs {
				if cidr.ContainsPrefix(q, p) {
					found = true
					rep.CoveredBy = appendUnique(rep.CoveredBy, o.Name)
				}
			}
		}
		covered = covered && found
	}
	if !covered {
		rep.CoveredBy = nil
		if s.IPAddresses != nil {
			rep.Source = "IPAddress objects (" + s.IPAddressVersion.GroupVersion() + ")"
			for _, ip := range s.IPAddresses {
				if ip.ManagedBy != "" && ip.ManagedBy != ManagedByAllocator {
					continue
				}
				if c := containing(s.ServiceCIDRs, ip.IP); len(c) == 1 && c[0] == name {
					rep.Holders = append(rep.Holders, Holder{IP: ip.IP, Parent: ip.ParentRef})
				}
			}
		} else {
			rep.Source = "Service ClusterIPs (range math; no IPAddress API served)"
			for i := range s.Services {
				svc := &s.Services[i]
				for _, ip := range ClusterIPs(svc) {
					if c := containing(s.ServiceCIDRs, ip); len(c) == 1 && c[0] == name {
						rep.Holders = append(rep.Holders, Holder{IP: ip, Parent: ParentRef{Resource: "services", Namespace: svc.Namespace, Name: svc.Name}})
					}
				}
			}
		}
		sort.Slice(rep.Holders, func(i, j int) bool { return rep.Holders[i].IP.Less(rep.Holders[j].IP) })
	}
	rep.Summary = rep.summary()
	return rep
}

func (r DeletionReport) summary() string {
	var b strings.Builder
	state := "is not being deleted"
	if r.Terminating {
		state = "is Terminating"
	}
	fmt.Fprintf(&b, "ServiceCIDR %s (%s) %s", r.Name, joinPrefixes(r.CIDRs), state)
	switch {
	case len(r.CoveredBy) > 0:
		fmt.Fprintf(&b, "; every CIDR is covered by %s, so no address blocks its deletion", strings.Join(r.CoveredBy, ", "))
	case len(r.Holders) > 0:
		fmt.Fprintf(&b, "; %d address(es) depend only on it, found through %s: ", len(r.Holders), r.Source)
		const show = 20
		for i, h := range r.Holders {
			if i == show {
				fmt.Fprintf(&b, ", and %d more", len(r.Holders)-show)
				break
			}
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s (%s)", h.IP, h.Parent)
		}
		b.WriteString(". Recreate those Services with ClusterIPs in another ServiceCIDR; default/kubernetes moves only after every kube-apiserver runs with the new --service-cluster-ip-range and the Service is deleted")
	default:
		b.WriteString("; no address depends on it")
	}
	if r.Terminating && len(r.Holders) == 0 {
		b.WriteString("; kube-controller-manager's service-cidr-controller removes the finalizer " + Finalizer + " about 10 s after deletion: if it stays, check that kube-controller-manager runs (and before 1.33 has --feature-gates=MultiCIDRServiceAllocator=true)")
	}
	if r.Terminating && r.Ready != nil && r.Ready.Message != "" {
		fmt.Fprintf(&b, " (condition Ready=%s %s: %s)", r.Ready.Status, r.Ready.Reason, r.Ready.Message)
	}
	return b.String()
}

func appendUnique(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}
