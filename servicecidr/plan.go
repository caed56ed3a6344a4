package servicecidr

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/cidr"
)

// Plan file identification.
const (
	PlanAPIVersion = "cidrshift.io/v1alpha1"
	PlanKind       = "ServiceMovePlan"
)

// Well-known names.
const (
	// DefaultDNSService is kubeadm's cluster DNS Service.
	DefaultDNSService = "kube-system/kube-dns"
	// DNSLabelKey and DNSLabelValue find a cluster DNS Service by label when
	// DefaultDNSService does not exist.
	DNSLabelKey   = "k8s-app"
	DNSLabelValue = "kube-dns"
	// KubernetesService is the Service kube-apiserver maintains for itself.
	KubernetesService = "default/kubernetes"
	// LastAppliedAnnotation is kubectl's record of the applied manifest.
	LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"
)

// AllocateMode says how a moved Service's new ClusterIP is chosen.
type AllocateMode string

// The allocation modes.
const (
	// AllocateOffset keeps each address's offset: 100.64.0.10 in
	// 100.64.0.0/13 becomes 172.24.0.10 in 172.24.0.0/15, so kube-dns keeps
	// the tenth address and one kubelet clusterDNS change covers every node.
	// An address that does not fit or collides falls back to a free one, and
	// the plan says so.
	AllocateOffset AllocateMode = "offset"
	// AllocateFree gives each Service the lowest free address of the new range
	// (the DNS Service still keeps its offset when it can), avoiding every
	// ClusterIP in use.
	AllocateFree AllocateMode = "free"
)

// PlanOptions is the user's intent for a move.
type PlanOptions struct {
	// From are the ranges Services move away from (one per family). Empty means
	// the CIDRs of the "kubernetes" ServiceCIDR.
	From []netip.Prefix
	// To are the new ranges (one per family). Required.
	To []netip.Prefix
	// Allocate defaults to AllocateOffset.
	Allocate AllocateMode
	// DNSService is the cluster DNS Service as namespace/name. Empty means
	// kube-system/kube-dns, or else the Service labelled k8s-app=kube-dns.
	DNSService string
	// IncludeLoadBalancers also moves type=LoadBalancer Services. They are left
	// alone by default: recreating one makes the cloud controller delete and
	// recreate its load balancer, and the external address may change.
	IncludeLoadBalancers bool
	// ServiceCIDRName names the ServiceCIDR to create for To when no existing
	// one has exactly these CIDRs; default "cidrshift-<to>".
	ServiceCIDRName string
	// Validate adds what the new range must not collide with (pod CIDRs, node
	// networks, AllowWellKnown). KubernetesMinor, ForFlag, Avoid and Existing
	// are filled in from the snapshot and From.
	Validate ValidateOptions
	// JournalDir is the journal of earlier Apply runs. When set, Client.Plan
	// reads it: a default/kubernetes an interrupted run deleted, and that
	// kube-apiserver has not recreated yet, stays in the plan (Plan.Kubernetes,
	// so Apply waits for it); a Service an interrupted run deleted and that
	// Recover has not recreated yet is an error (ErrServiceLost), since the
	// plan could hand its address to another Service. BuildPlan uses
	// Snapshot.KubernetesDeleted instead.
	JournalDir string `json:"-"`
}

// Plan is a reviewed, serialisable description of a Service move. It records
// the UID and resourceVersion of every object it touches so Apply can refuse
// it once the cluster has changed.
type Plan struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Server is the cluster version the plan was made for.
	Server         ServerInfo     `json:"server"`
	ServiceCIDRAPI APIVersion     `json:"serviceCIDRAPI"`
	From           []netip.Prefix `json:"from"`
	To             []netip.Prefix `json:"to"`
	Allocate       AllocateMode   `json:"allocate"`
	// Target is the ServiceCIDR that holds To: existing, or created by Apply.
	Target TargetServiceCIDR `json:"target"`
	// Old are the ServiceCIDRs lying inside From, which Apply may mark for
	// deletion when asked (DeleteOld).
	Old []ObservedServiceCIDR `json:"old,omitempty"`
	// DNS is the cluster DNS Service's move, also the first entry of Moves.
	DNS *AddressChange `json:"dns,omitempty"`
	// Moves are the Services Apply recreates, in order: DNS first.
	Moves []Move `json:"moves"`
	// Kubernetes is default/kubernetes: not recreated by Apply. Once every
	// kube-apiserver runs with the new --service-cluster-ip-range, deleting it
	// makes kube-apiserver recreate it at the first address of the new range.
	Kubernetes *Move `json:"kubernetes,omitempty"`
	// Skipped are Services in the old range that Apply leaves alone, with why.
	Skipped []Skip `json:"skipped,omitempty"`
	// Manual are the changes outside the API that the move needs.
	Manual []ManualStep `json:"manual"`
	// PodsToRestart are pods (namespace/name) that resolve through the cluster
	// DNS Service; they keep the old DNS IP in resolv.conf until restarted.
	PodsToRestart []string `json:"podsToRestart,omitempty"`
	// Capacity of the new range per family.
	Capacity []cidr.ServiceCapacity `json:"capacity,omitempty"`
	Warnings []string               `json:"warnings,omitempty"`
}

// TargetServiceCIDR is the ServiceCIDR the Services move into.
type TargetServiceCIDR struct {
	Name  string         `json:"name"`
	CIDRs []netip.Prefix `json:"cidrs"`
	// Exists is false when Apply must create it.
	Exists          bool      `json:"exists"`
	UID             types.UID `json:"uid,omitempty"`
	ResourceVersion string    `json:"resourceVersion,omitempty"`
}

// ObservedServiceCIDR is a ServiceCIDR as the plan saw it.
type ObservedServiceCIDR struct {
	Name            string         `json:"name"`
	CIDRs           []netip.Prefix `json:"cidrs"`
	UID             types.UID      `json:"uid,omitempty"`
	ResourceVersion string         `json:"resourceVersion,omitempty"`
}

// AddressChange is a Service whose address others depend on.
type AddressChange struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	OldIPs    []netip.Addr `json:"oldIPs"`
	NewIPs    []netip.Addr `json:"newIPs"`
}

// Move is one Service to recreate with new ClusterIPs.
type Move struct {
	Namespace       string             `json:"namespace"`
	Name            string             `json:"name"`
	UID             types.UID          `json:"uid"`
	ResourceVersion string             `json:"resourceVersion"`
	Type            corev1.ServiceType `json:"type,omitempty"`
	// Role is "dns" for the cluster DNS Service and "kubernetes" for default/kubernetes.
	Role   string       `json:"role,omitempty"`
	OldIPs []netip.Addr `json:"oldIPs"`
	NewIPs []netip.Addr `json:"newIPs"`
	// Note explains an address that did not keep its offset.
	Note string `json:"note,omitempty"`
}

// Key is namespace/name.
func (m Move) Key() string { return m.Namespace + "/" + m.Name }

// Skip is a Service in the old range that the plan leaves alone.
type Skip struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Reason    string `json:"reason"`
}

// ManualStep is a change the plan cannot make through the API.
type ManualStep struct {
	// Component is what to change, e.g. "kube-apiserver" or "kubelet".
	Component string `json:"component"`
	// Action says what to do.
	Action string `json:"action"`
	Old    string `json:"old,omitempty"`
	New    string `json:"new,omitempty"`
}

// Plan reads the cluster (with nodes, for conflict checks, and pods, to list
// those that must restart) and, when opts.JournalDir is set, the journal of
// earlier runs, and computes a move plan with BuildPlan.
func (c *Client) Plan(ctx context.Context, opts PlanOptions) (*Plan, error) {
	s, err := c.Snapshot(ctx, SnapshotOptions{Nodes: true, Pods: true})
	if err != nil {
		return nil, err
	}
	if opts.JournalDir != "" {
		if s.KubernetesDeleted, err = readJournaledKubernetes(opts.JournalDir, s); err != nil {
			return nil, err
		}
		if d := s.KubernetesDeleted; d != nil {
			logr.FromContextOrDiscard(ctx).Info("the journal records default/kubernetes deleted by an interrupted run", "journal", d.JournalDir, "uid", d.UID, "oldIPs", d.OldIPs)
		}
	}
	return BuildPlan(s, opts)
}

// BuildPlan computes a move plan from a snapshot; it is pure and
// deterministic. It moves every Service with a ClusterIP in From except
// headless and ExternalName ones (nothing to move) and, unless asked,
// LoadBalancer ones. The DNS Service comes first; default/kubernetes is not
// recreated by Apply (see Plan.Kubernetes). While default/kubernetes is
// absent and s.KubernetesDeleted says an interrupted Apply deleted it, the
// plan keeps it, from the journal's record, so that Apply waits for
// kube-apiserver to recreate it.
func BuildPlan(s *Snapshot, opts PlanOptions) (*Plan, error) {
	if s == nil {
		return nil, &FieldError{Field: "snapshot", Reason: "no snapshot", Err: ErrInvalid}
	}
	mode := opts.Allocate
	if mode == "" {
		mode = AllocateOffset
	}
	if mode != AllocateOffset && mode != AllocateFree {
		return nil, &FieldError{Field: "--allocate", Value: string(mode), Reason: "valid values are offset and free", Err: ErrInvalid}
	}
	if err := ValidateCIDRs("--to", opts.To); err != nil {
		return nil, err
	}
	from := opts.From
	if len(from) == 0 {
		for _, sc := range s.ServiceCIDRs {
			if sc.Name == DefaultServiceCIDRName {
				from = sc.CIDRs
			}
		}
		if len(from) == 0 {
			return nil, &FieldError{Field: "--from", Reason: "not given and there is no \"kubernetes\" ServiceCIDR to take it from; name the old range", Err: ErrInvalid}
		}
	}
	if err := ValidateCIDRs("--from", from); err != nil {
		return nil, err
	}
	if err := checkFrom(s, "--from", from, opts.To); err != nil {
		return nil, err
	}
	if len(opts.From) == 0 && samePrefixes(from, opts.To) {
		return nil, &FieldError{Field: "--from", Reason: fmt.Sprintf("not given, and the %q ServiceCIDR already has %s (the --to range): nothing to move; name the old range with --from if Services are still in it", DefaultServiceCIDRName, joinPrefixes(from)), Err: ErrInvalid}
	}
	toOf := map[cidr.Family]netip.Prefix{}
	for _, p := range opts.To {
		toOf[cidr.FamilyOf(p)] = p
	}
	for _, p := range from {
		if _, ok := toOf[cidr.FamilyOf(p)]; !ok {
			return nil, &FieldError{Field: "--to", Value: joinPrefixes(opts.To),
				Reason: fmt.Sprintf("has no %s range for the old range %s; give one CIDR per family of --from", cidr.FamilyOf(p), p), Err: ErrInvalid}
		}
	}
	dnsNS, dnsName, err := splitKey("--dns-service", opts.DNSService, DefaultDNSService)
	if err != nil {
		return nil, err
	}

	// Validate the new range against everything it could collide with.
	vo := opts.Validate
	vo.KubernetesMinor = s.Server.Minor
	vo.ForFlag = true
	vo.Avoid = append(append([]netip.Prefix(nil), vo.Avoid...), from...)
	vo.Existing = s.ServiceCIDRs
	vo.Field = "--to"
	for _, n := range s.Nodes {
		for _, p := range n.PodCIDRs {
			vo.NodePodCIDRs = append(vo.NodePodCIDRs, cidr.Range{Name: "node " + n.Name + " podCIDR", Kind: cidr.KindNodePodCIDR, Prefix: p})
		}
		for _, a := range n.Addresses {
			vo.NodeNetworks = append(vo.NodeNetworks, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	val, err := Validate(opts.To, vo)
	if err != nil {
		return nil, err
	}

	p := &Plan{
		APIVersion: PlanAPIVersion, Kind: PlanKind, Server: s.Server, ServiceCIDRAPI: s.APIVersion,
		From: from, To: opts.To, Allocate: mode, Capacity: val.Capacity, Warnings: append(val.Warnings, s.Unread...),
	}

	// Target ServiceCIDR: an existing one with exactly To, or a new one.
	name := opts.ServiceCIDRName
	if name == "" {
		name = TargetName(opts.To)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, &FieldError{Field: "ServiceCIDR name", Value: name, Reason: strings.Join(errs, "; "), Err: ErrInvalid}
	}
	p.Target = TargetServiceCIDR{Name: name, CIDRs: opts.To}
	for _, sc := range s.ServiceCIDRs {
		if samePrefixes(sc.CIDRs, opts.To) && (opts.ServiceCIDRName == "" || sc.Name == opts.ServiceCIDRName) {
			if sc.Terminating() {
				return nil, &FieldError{Field: "--to", Value: joinPrefixes(opts.To), Reason: fmt.Sprintf("ServiceCIDR %s with these CIDRs is being deleted; wait until it is gone", sc.Name), Err: ErrConflict}
			}
			p.Target = TargetServiceCIDR{Name: sc.Name, CIDRs: sc.CIDRs, Exists: true, UID: sc.UID, ResourceVersion: sc.ResourceVersion}
			break
		}
	}
	if !p.Target.Exists {
		for _, sc := range s.ServiceCIDRs {
			if sc.Name == name {
				return nil, &FieldError{Field: "ServiceCIDR name", Value: name, Reason: fmt.Sprintf("a ServiceCIDR with this name exists with CIDRs %s, not %s; choose another name", joinPrefixes(sc.CIDRs), joinPrefixes(opts.To)), Err: ErrConflict}
			}
		}
	}
	for _, sc := range s.ServiceCIDRs {
		inside := len(sc.CIDRs) > 0
		for _, q := range sc.CIDRs {
			ok := false
			for _, f := range from {
				ok = ok || cidr.ContainsPrefix(f, q)
			}
			inside = inside && ok
		}
		if inside {
			p.Old = append(p.Old, ObservedServiceCIDR{Name: sc.Name, CIDRs: sc.CIDRs, UID: sc.UID, ResourceVersion: sc.ResourceVersion})
		}
	}

	// Every address in use, and by whom.
	inUse := make(map[netip.Addr]string, len(s.Services)+len(s.IPAddresses))
	for _, ip := range s.IPAddresses {
		inUse[ip.IP] = ip.ParentRef.String()
	}
	for i := range s.Services {
		for _, ip := range ClusterIPs(&s.Services[i]) {
			inUse[ip] = "services/" + svcKey(&s.Services[i])
		}
	}

	// The DNS Service: by name, else by label.
	dnsKey := dnsNS + "/" + dnsName
	found := false
	for i := range s.Services {
		if svcKey(&s.Services[i]) == dnsKey {
			found = true
		}
	}
	if !found && opts.DNSService == "" {
		for i := range s.Services {
			if s.Services[i].Labels[DNSLabelKey] == DNSLabelValue && len(ClusterIPs(&s.Services[i])) > 0 {
				dnsKey, found = svcKey(&s.Services[i]), true
				break
			}
		}
	}
	if !found && opts.DNSService != "" {
		return nil, &FieldError{Field: "--dns-service", Value: opts.DNSService, Err: ErrInvalid,
			Reason: "does not exist; name the cluster DNS Service (namespace/name), or leave the flag out to find kube-system/kube-dns or the Service labelled " + DNSLabelKey + "=" + DNSLabelValue}
	}
	if found && opts.DNSService != "" {
		for i := range s.Services {
			svc := &s.Services[i]
			if svcKey(svc) != dnsKey {
				continue
			}
			switch {
			case svc.Spec.Type == corev1.ServiceTypeExternalName:
				return nil, &FieldError{Field: "--dns-service", Value: dnsKey, Err: ErrInvalid, Reason: "is an ExternalName Service: it has no ClusterIP for kubelet clusterDNS"}
			case svc.Spec.ClusterIP == corev1.ClusterIPNone:
				return nil, &FieldError{Field: "--dns-service", Value: dnsKey, Err: ErrInvalid, Reason: "is headless (clusterIP: None): it has no ClusterIP for kubelet clusterDNS"}
			case dnsKey == KubernetesService:
				return nil, &FieldError{Field: "--dns-service", Value: dnsKey, Err: ErrInvalid, Reason: "is the API server's own Service, not the cluster DNS"}
			}
		}
	}
	if !found {
		p.Warnings = append(p.Warnings, fmt.Sprintf("no cluster DNS Service %s found (nor one labelled %s=%s); kubelet clusterDNS needs no change", dnsKey, DNSLabelKey, DNSLabelValue))
	}

	// Classify.
	inFrom := func(ip netip.Addr) (netip.Prefix, bool) {
		for _, f := range from {
			if f.Contains(ip) {
				return f, true
			}
		}
		return netip.Prefix{}, false
	}
	var moves []*Move
	lbLeft := 0
	for i := range s.Services {
		svc := &s.Services[i]
		key := svcKey(svc)
		old := ClusterIPs(svc)
		hit := false
		for _, ip := range old {
			if _, ok := inFrom(ip); ok {
				hit = true
			}
		}
		switch {
		case svc.Spec.Type == corev1.ServiceTypeExternalName:
			p.Skipped = append(p.Skipped, Skip{Namespace: svc.Namespace, Name: svc.Name, Reason: "ExternalName: a DNS alias without a ClusterIP; nothing to move"})
			continue
		case svc.Spec.ClusterIP == corev1.ClusterIPNone:
			p.Skipped = append(p.Skipped, Skip{Namespace: svc.Namespace, Name: svc.Name, Reason: "headless (clusterIP: None): no ClusterIP; nothing to move, never recreated"})
			continue
		case len(old) == 0 || !hit:
			continue // not in the old range
		}
		m := &Move{Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID, ResourceVersion: svc.ResourceVersion, Type: svc.Spec.Type, OldIPs: old}
		switch {
		case key == KubernetesService:
			m.Role = "kubernetes"
		case key == dnsKey:
			m.Role = "dns"
		case svc.Spec.Type == corev1.ServiceTypeLoadBalancer && !opts.IncludeLoadBalancers:
			lbLeft++
			p.Skipped = append(p.Skipped, Skip{Namespace: svc.Namespace, Name: svc.Name,
				Reason: "type LoadBalancer: recreating it makes the cloud controller replace its load balancer and the external address may change; move it with --include-loadbalancers when that is acceptable"})
			continue
		}
		if a := svc.Annotations[LastAppliedAnnotation]; a != "" {
			for _, ip := range old {
				if strings.Contains(a, `"`+ip.String()+`"`) {
					p.Warnings = append(p.Warnings, fmt.Sprintf("Service %s: its kubectl last-applied configuration pins clusterIP %s; re-applying that manifest after the move fails (clusterIP is immutable): update the manifest (Helm, GitOps) to the new address", key, ip))
					break
				}
			}
		}
		moves = append(moves, m)
	}
	kubeFromJournal := false
	if d := s.KubernetesDeleted; d != nil && len(d.OldIPs) > 0 && d.UID != "" && !slices.ContainsFunc(s.Services, func(svc corev1.Service) bool { return svcKey(&svc) == KubernetesService }) {
		kubeFromJournal = true
		moves = append(moves, &Move{Namespace: "default", Name: "kubernetes", UID: d.UID, Role: "kubernetes", OldIPs: slices.Clone(d.OldIPs),
			Note: fmt.Sprintf("deleted by an interrupted apply at %s (journal %s); kube-apiserver has not recreated it yet", d.Deleted.UTC().Format(time.RFC3339), d.JournalDir)})
	}

	// New addresses: first every offset target, then free ones.
	assigned := map[netip.Addr]string{}
	free := newFreeList(opts.To, inUse, assigned)
	want := func(m *Move, ip netip.Addr) (netip.Addr, string) {
		f, ok := inFrom(ip)
		if !ok {
			return ip, "" // another family or range: keeps its address
		}
		to := toOf[cidr.FamilyOf(f)]
		if m.Role == "kubernetes" {
			a, _ := cidr.NthAddr(to, 1)
			return a, ""
		}
		if mode == AllocateFree && m.Role != "dns" {
			return netip.Addr{}, "free allocation requested"
		}
		n, err := cidr.RebaseAddr(ip, f, to)
		switch {
		case err != nil:
			return netip.Addr{}, fmt.Sprintf("offset of %s does not fit in %s", ip, to)
		case !usableContains(to, n):
			return netip.Addr{}, fmt.Sprintf("%s would be the network or broadcast address of %s", n, to)
		case isKubernetesIPOf(to, n):
			return netip.Addr{}, fmt.Sprintf("%s is reserved for default/kubernetes", n)
		}
		if owner, ok := inUse[n]; ok {
			return netip.Addr{}, fmt.Sprintf("%s is already used by %s", n, owner)
		}
		if owner, ok := assigned[n]; ok {
			return netip.Addr{}, fmt.Sprintf("%s is already planned for %s", n, owner)
		}
		return n, ""
	}
	for _, m := range moves {
		m.NewIPs = make([]netip.Addr, len(m.OldIPs))
		for j, ip := range m.OldIPs {
			n, why := want(m, ip)
			if n.IsValid() {
				m.NewIPs[j] = n
				if _, moving := inFrom(ip); moving {
					assigned[n] = m.Key()
				}
				continue
			}
			if why != "free allocation requested" {
				m.Note = appendNote(m.Note, why)
			}
		}
	}
	for _, m := range moves {
		for j, ip := range m.OldIPs {
			if m.NewIPs[j].IsValid() {
				continue
			}
			f, _ := inFrom(ip)
			n, err := free.next(cidr.FamilyOf(f))
			if err != nil {
				return nil, err
			}
			m.NewIPs[j] = n
			assigned[n] = m.Key()
			if m.Note != "" {
				m.Note = appendNote(m.Note, "given free address "+n.String())
			}
		}
	}

	// Order: DNS first, everything else by namespace/name; kubernetes apart.
	sort.SliceStable(moves, func(i, j int) bool {
		return moves[i].Role == "dns" && moves[j].Role != "dns"
	})
	p.Moves = []Move{}
	for _, m := range moves {
		switch m.Role {
		case "kubernetes":
			p.Kubernetes = m
			if kubeFromJournal {
				p.Warnings = append(p.Warnings, fmt.Sprintf("Service %s does not exist: an interrupted apply deleted it (uid %s, %s) and kube-apiserver has not recreated it yet; "+
					"kube-apiserver recreates it from its --service-cluster-ip-range, at %s once every kube-apiserver runs with %s; apply waits for it",
					m.Key(), m.UID, joinAddrs(m.OldIPs), joinAddrs(m.NewIPs), joinPrefixes(opts.To)))
			}
			continue
		case "dns":
			p.DNS = &AddressChange{Namespace: m.Namespace, Name: m.Name, OldIPs: m.OldIPs, NewIPs: m.NewIPs}
			if m.Note != "" {
				p.Warnings = append(p.Warnings, fmt.Sprintf("the DNS Service %s cannot keep its offset (%s): every kubelet's clusterDNS must change to %s", m.Key(), m.Note, joinAddrs(m.NewIPs)))
			}
		}
		p.Moves = append(p.Moves, *m)
	}
	if p.DNS != nil {
		for _, pod := range s.Pods {
			if pod.UsesClusterDNS() {
				p.PodsToRestart = append(p.PodsToRestart, pod.Namespace+"/"+pod.Name)
			}
		}
		sort.Strings(p.PodsToRestart)
	}
	if lbLeft > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d LoadBalancer Service(s) stay in the old range (see skipped); the old ServiceCIDR stays Terminating until they move", lbLeft))
	}
	if s.Server.Minor == 33 {
		p.Warnings = append(p.Warnings, dualWriteWarning)
	}
	p.Manual = manualSteps(p, s.Server.Minor)
	return p, nil
}

func appendNote(note, s string) string {
	if note == "" {
		return s
	}
	return note + "; " + s
}

func samePrefixes(a, b []netip.Prefix) bool {
	if len(a) != len(b) {
		return false
	}
	for _, p := range a {
		found := false
		for _, q := range b {
			found = found || p == q
		}
		if !found {
			return false
		}
	}
	return true
}

// TargetName is the name BuildPlan gives the ServiceCIDR it creates for
// the given ranges: "cidrshift-172-24-0-0-15" for 172.24.0.0/15.
func TargetName(to []netip.Prefix) string {
	var b strings.Builder
	b.WriteString("cidrshift")
	for _, p := range to {
		b.WriteByte('-')
		s := strings.NewReplacer(".", "-", ":", "-", "/", "-").Replace(p.String())
		b.WriteString(s)
	}
	out := strings.Trim(b.String(), "-")
	for strings.Contains(out, "---") {
		out = strings.ReplaceAll(out, "---", "--")
	}
	if len(out) > 253 {
		out = strings.TrimRight(out[:253], "-")
	}
	return out
}

func splitKey(field, v, def string) (string, string, error) {
	if v == "" {
		v = def
	}
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", &FieldError{Field: field, Value: v, Reason: "want namespace/name, e.g. kube-system/kube-dns", Err: ErrInvalid}
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", "", &FieldError{Field: field, Value: v, Reason: "namespace: " + strings.Join(errs, "; "), Err: ErrInvalid}
	}
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return "", "", &FieldError{Field: field, Value: v, Reason: "Service name: " + strings.Join(errs, "; "), Err: ErrInvalid}
	}
	return ns, name, nil
}

// freeList hands out the lowest free usable addresses of the new ranges,
// skipping the kubernetes (first) and DNS (tenth) addresses, every address in
// use and every address already planned.
type freeList struct {
	to       map[cidr.Family]netip.Prefix
	cursor   map[cidr.Family]netip.Addr
	inUse    map[netip.Addr]string
	assigned map[netip.Addr]string
}

func newFreeList(to []netip.Prefix, inUse, assigned map[netip.Addr]string) *freeList {
	f := &freeList{to: map[cidr.Family]netip.Prefix{}, cursor: map[cidr.Family]netip.Addr{}, inUse: inUse, assigned: assigned}
	for _, p := range to {
		f.to[cidr.FamilyOf(p)] = p
		f.cursor[cidr.FamilyOf(p)] = p.Masked().Addr()
	}
	return f
}

func (f *freeList) next(fam cidr.Family) (netip.Addr, error) {
	p, ok := f.to[fam]
	if !ok {
		return netip.Addr{}, &FieldError{Field: "--to", Reason: "no " + fam.String() + " range", Err: ErrInvalid}
	}
	dns, _ := cidr.NthAddr(p, cidr.DNSServiceIndex)
	for a := f.cursor[fam].Next(); a.IsValid() && p.Contains(a); a = a.Next() {
		if !usableContains(p, a) || isKubernetesIPOf(p, a) || a == dns {
			continue
		}
		if _, used := f.inUse[a]; used {
			continue
		}
		if _, used := f.assigned[a]; used {
			continue
		}
		f.cursor[fam] = a
		return a, nil
	}
	return netip.Addr{}, &FieldError{Field: "--to", Value: p.String(), Reason: "has no free address left for the Services to move; choose a larger range", Err: ErrRangeFull}
}

func isKubernetesIPOf(p netip.Prefix, a netip.Addr) bool {
	k, err := cidr.NthAddr(p, 1)
	return err == nil && k == a
}

// dualWriteWarning is the plan's warning on Kubernetes 1.33, where
// DisableAllocatorDualWrite is off by default: kube-apiserver mirrors every
// ClusterIP into the legacy bitmap allocator, whose range is stored in etcd
// (RangeAllocation) and is not updated when --service-cluster-ip-range
// changes. Seen on the e2e control plane (1.33.13): restarted with the new
// range alone, kube-apiserver refused every address of it ("the provided
// range does not match the current range"), default/kubernetes's included;
// with the gate on as well, the move finished.
const dualWriteWarning = "Kubernetes 1.33 mirrors every ClusterIP into its legacy allocator (DisableAllocatorDualWrite is off by default), whose range is stored in etcd and does not follow --service-cluster-ip-range: " +
	"restart every kube-apiserver with --feature-gates=DisableAllocatorDualWrite=true together with the new --service-cluster-ip-range, or it refuses every address of the new range " +
	"(\"the provided range does not match the current range\"), default/kubernetes's included. Before that restart Services created without an explicit clusterIP may be refused too " +
	"(Apply always sends explicit ClusterIPs). Kubernetes 1.34+ does not need the gate."

func manualSteps(p *Plan, minor int) []ManualStep {
	from, to := joinPrefixes(p.From), joinPrefixes(p.To)
	steps := []ManualStep{
		{Component: "kube-apiserver", Action: "set --service-cluster-ip-range on every kube-apiserver and restart them (static pod manifest /etc/kubernetes/manifests/kube-apiserver.yaml on kubeadm)", Old: from, New: to},
		{Component: "kube-controller-manager", Action: "set --service-cluster-ip-range and restart it", Old: from, New: to},
		{Component: "kubeadm-config", Action: "set networking.serviceSubnet in ConfigMap kube-system/kubeadm-config (ClusterConfiguration), so upgrades and joins use the new range", Old: from, New: to},
	}
	if minor == 33 {
		steps = slices.Insert(steps, 1, ManualStep{Component: "kube-apiserver",
			Action: "Kubernetes 1.33: in the same restart, add --feature-gates=DisableAllocatorDualWrite=true (merged with any gates already set): with the dual-write on, kube-apiserver keeps the legacy allocator's old range in etcd and refuses every address of the new one, default/kubernetes's included",
			New:    "DisableAllocatorDualWrite=true"})
	}
	if p.Kubernetes != nil {
		steps = append(steps,
			ManualStep{Component: "kube-apiserver certificate", Action: "add the new kubernetes Service IP to the serving certificate's IP SANs (kubeadm: after updating serviceSubnet, move apiserver.crt/.key aside and run `kubeadm init phase certs apiserver`), before clients use it", Old: joinAddrs(p.Kubernetes.OldIPs), New: joinAddrs(p.Kubernetes.NewIPs)},
			ManualStep{Component: "default/kubernetes", Action: "after every kube-apiserver runs with the new range, delete Service default/kubernetes (apply --delete-kubernetes-service does it); kube-apiserver recreates it at the new address. Before the flags change it would come back in the old range", Old: joinAddrs(p.Kubernetes.OldIPs), New: joinAddrs(p.Kubernetes.NewIPs)},
			ManualStep{Component: "pods using in-cluster config", Action: "restart pods created before default/kubernetes moved: their KUBERNETES_SERVICE_HOST environment variable holds the old address"},
		)
	}
	if p.DNS != nil {
		steps = append(steps,
			ManualStep{Component: "kubelet", Action: "set clusterDNS on every node (/var/lib/kubelet/config.yaml, and ConfigMap kube-system/kubelet-config on kubeadm) and restart the kubelet", Old: joinAddrs(p.DNS.OldIPs), New: joinAddrs(p.DNS.NewIPs)},
			ManualStep{Component: "pods", Action: podsAction(len(p.PodsToRestart)), Old: joinAddrs(p.DNS.OldIPs), New: joinAddrs(p.DNS.NewIPs)},
			ManualStep{Component: "other DNS consumers", Action: "update configuration that hard-codes the DNS Service IP (NodeLocal DNSCache, CoreDNS forwarders in other clusters, manifests pinning clusterIP)", Old: joinAddrs(p.DNS.OldIPs), New: joinAddrs(p.DNS.NewIPs)},
		)
	}
	return steps
}

func podsAction(n int) string {
	const why = " once their node's kubelet has the new clusterDNS: resolv.conf is written when a pod starts"
	if n == 0 {
		return "restart every pod with dnsPolicy ClusterFirst (or ClusterFirstWithHostNet)" + why
	}
	return fmt.Sprintf("restart the %d pod(s) that use cluster DNS (listed in podsToRestart)%s", n, why)
}

// Marshal renders the plan as YAML.
func (p *Plan) Marshal() ([]byte, error) { return yaml.Marshal(p) }

// ParsePlan reads a plan written by Marshal (YAML or JSON). Unknown fields,
// a wrong kind and inconsistent content (addresses outside the new range,
// duplicates, missing UIDs) are refused with ErrPlanFormat, naming the field.
func ParsePlan(data []byte) (*Plan, error) {
	var p Plan
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, &FieldError{Field: "plan", Reason: err.Error(), Err: ErrPlanFormat, Cause: err}
	}
	if err := p.Check(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Check verifies that a plan is internally consistent before it is applied.
func (p *Plan) Check() error {
	bad := func(field, value, reason string) error {
		return &FieldError{Field: "plan " + field, Value: value, Reason: reason, Err: ErrPlanFormat}
	}
	if p.APIVersion != PlanAPIVersion || p.Kind != PlanKind {
		return bad("apiVersion/kind", p.APIVersion+"/"+p.Kind, "want "+PlanAPIVersion+"/"+PlanKind)
	}
	if err := ValidateCIDRs("to", p.To); err != nil {
		return &FieldError{Field: "plan to", Value: joinPrefixes(p.To), Reason: err.Error(), Err: ErrPlanFormat, Cause: err}
	}
	if err := ValidateCIDRs("from", p.From); err != nil {
		return &FieldError{Field: "plan from", Value: joinPrefixes(p.From), Reason: err.Error(), Err: ErrPlanFormat, Cause: err}
	}
	if p.Allocate != AllocateOffset && p.Allocate != AllocateFree {
		return bad("allocate", string(p.Allocate), "valid values are offset and free")
	}
	if errs := validation.IsDNS1123Subdomain(p.Target.Name); len(errs) > 0 {
		return bad("target.name", p.Target.Name, strings.Join(errs, "; "))
	}
	if !samePrefixes(p.Target.CIDRs, p.To) {
		return bad("target.cidrs", joinPrefixes(p.Target.CIDRs), "must equal to ("+joinPrefixes(p.To)+")")
	}
	toFam := map[cidr.Family]bool{}
	for _, t := range p.To {
		toFam[cidr.FamilyOf(t)] = true
	}
	for i, f := range p.From {
		if !toFam[cidr.FamilyOf(f)] {
			return bad(fmt.Sprintf("from[%d]", i), f.String(), "has no range of its family in to ("+joinPrefixes(p.To)+")")
		}
		for _, t := range p.To {
			if f.Overlaps(t) {
				return bad(fmt.Sprintf("from[%d]", i), f.String(), "overlaps to "+t.String()+": the new range must be disjoint from the old one")
			}
		}
	}
	oldNames := map[string]bool{}
	for i, o := range p.Old {
		f := fmt.Sprintf("old[%d]", i)
		if errs := validation.IsDNS1123Subdomain(o.Name); len(errs) > 0 {
			return bad(f+".name", o.Name, strings.Join(errs, "; "))
		}
		if o.Name == p.Target.Name {
			return bad(f+".name", o.Name, "is the target ServiceCIDR; apply would delete what it moves the Services into")
		}
		if oldNames[o.Name] {
			return bad(f+".name", o.Name, "listed twice")
		}
		oldNames[o.Name] = true
		if len(o.CIDRs) == 0 {
			return bad(f+".cidrs", o.Name, "at least one CIDR is required")
		}
		for _, q := range o.CIDRs {
			inside := false
			for _, fr := range p.From {
				inside = inside || cidr.ContainsPrefix(fr, q)
			}
			if !inside || !q.IsValid() {
				return bad(f+".cidrs", q.String(), "must lie inside from ("+joinPrefixes(p.From)+"): only ServiceCIDRs of the old range are deleted")
			}
		}
	}
	seen := map[netip.Addr]string{}
	keys := map[string]bool{}
	check := func(i int, m Move) error {
		f := fmt.Sprintf("moves[%d]", i)
		if i < 0 {
			f = "kubernetes"
		}
		if m.Namespace == "" || m.Name == "" {
			return bad(f, m.Key(), "namespace and name are required")
		}
		if len(validation.IsDNS1123Label(m.Namespace)) > 0 || len(validation.IsDNS1035Label(m.Name)) > 0 {
			return bad(f, m.Key(), "not a valid Service namespace/name")
		}
		if keys[m.Key()] {
			return bad(f, m.Key(), "Service listed twice")
		}
		keys[m.Key()] = true
		if m.UID == "" {
			return bad(f+".uid", m.Key(), "the UID the plan saw is required to detect a stale plan")
		}
		if len(m.OldIPs) == 0 || len(m.OldIPs) > 2 || len(m.OldIPs) != len(m.NewIPs) {
			return bad(f, m.Key(), "oldIPs and newIPs must hold the same one or two addresses")
		}
		for j := range m.OldIPs {
			o, n := m.OldIPs[j], m.NewIPs[j]
			if !o.IsValid() || !n.IsValid() || o.Is4() != n.Is4() {
				return bad(fmt.Sprintf("%s.newIPs[%d]", f, j), n.String(), "must be a valid address of the same family as "+o.String())
			}
			moving := false
			for _, fr := range p.From {
				moving = moving || fr.Contains(o)
			}
			if !moving {
				if o != n {
					return bad(fmt.Sprintf("%s.newIPs[%d]", f, j), n.String(), "an address outside from must stay "+o.String())
				}
				continue
			}
			inTo := false
			for _, t := range p.To {
				inTo = inTo || usableContains(t, n)
			}
			if !inTo {
				return bad(fmt.Sprintf("%s.newIPs[%d]", f, j), n.String(), "is not a usable address of "+joinPrefixes(p.To))
			}
			if i >= 0 {
				for _, t := range p.To {
					if isKubernetesIPOf(t, n) {
						return bad(fmt.Sprintf("%s.newIPs[%d]", f, j), n.String(), "is the first address of "+t.String()+", reserved for default/kubernetes")
					}
				}
			}
			if other, dup := seen[n]; dup {
				return bad(fmt.Sprintf("%s.newIPs[%d]", f, j), n.String(), "also planned for "+other)
			}
			seen[n] = m.Key()
		}
		return nil
	}
	for i, m := range p.Moves {
		if m.Role == "kubernetes" || m.Key() == KubernetesService {
			return bad(fmt.Sprintf("moves[%d]", i), m.Key(), "default/kubernetes is recreated by kube-apiserver, not by apply; it belongs in kubernetes")
		}
		if err := check(i, m); err != nil {
			return err
		}
	}
	if p.Kubernetes != nil {
		if err := check(-1, *p.Kubernetes); err != nil {
			return err
		}
	}
	var dnsMove *Move
	for i := range p.Moves {
		switch p.Moves[i].Role {
		case "":
		case "dns":
			if dnsMove != nil {
				return bad(fmt.Sprintf("moves[%d].role", i), "dns", "a second DNS Service; "+dnsMove.Key()+" is already the DNS Service")
			}
			dnsMove = &p.Moves[i]
		case "kubernetes":
		default:
			return bad(fmt.Sprintf("moves[%d].role", i), p.Moves[i].Role, `valid roles are "dns" and "" (default/kubernetes belongs in kubernetes)`)
		}
	}
	switch {
	case p.DNS == nil && dnsMove != nil:
		return bad("dns", "", "is missing but moves holds the DNS Service "+dnsMove.Key()+": the kubelet clusterDNS step would be lost")
	case p.DNS != nil && dnsMove == nil:
		return bad("dns", p.DNS.Namespace+"/"+p.DNS.Name, "names a DNS Service that no move with role dns recreates")
	case p.DNS != nil && (p.DNS.Namespace != dnsMove.Namespace || p.DNS.Name != dnsMove.Name || !slices.Equal(p.DNS.OldIPs, dnsMove.OldIPs) || !slices.Equal(p.DNS.NewIPs, dnsMove.NewIPs)):
		return bad("dns", p.DNS.Namespace+"/"+p.DNS.Name+" "+joinAddrs(p.DNS.OldIPs)+" -> "+joinAddrs(p.DNS.NewIPs),
			"disagrees with its move "+dnsMove.Key()+" "+joinAddrs(dnsMove.OldIPs)+" -> "+joinAddrs(dnsMove.NewIPs))
	}
	if k := p.Kubernetes; k != nil {
		if k.Key() != KubernetesService {
			return bad("kubernetes", k.Key(), "must be "+KubernetesService)
		}
		for j, n := range k.NewIPs {
			for _, t := range p.To {
				if first, err := cidr.NthAddr(t, 1); err == nil && t.Contains(n) && first != n {
					return bad(fmt.Sprintf("kubernetes.newIPs[%d]", j), n.String(), "must be "+first.String()+", the first address of "+t.String()+", where kube-apiserver recreates default/kubernetes")
				}
			}
		}
	}
	return nil
}
