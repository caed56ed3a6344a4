package flannel

import (
	"cmp"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/cidrshift/cidrshift/cidr"
)

// FindingKind names what an audit found.
type FindingKind string

// What Audit, AuditKube and CheckSubnetEnv report.
const (
	// FindingConfigMissing: <prefix>/config does not exist; flanneld cannot start.
	FindingConfigMissing FindingKind = "config-missing"
	// FindingConfigInvalid: flanneld refuses the network config.
	FindingConfigInvalid FindingKind = "config-invalid"
	// FindingConfigWarning: flanneld accepts the config but reads it differently
	// than written, or it cannot work as intended.
	FindingConfigWarning FindingKind = "config-warning"
	// FindingUnreadableKey: a key under <prefix>/subnets/ is not a subnet key;
	// flanneld ignores it.
	FindingUnreadableKey FindingKind = "unreadable-key"
	// FindingUnreadableLease: a lease value flanneld cannot decode; flanneld
	// ignores the lease, so its subnet looks free and may be leased twice.
	FindingUnreadableLease FindingKind = "unreadable-lease"
	// FindingNonCanonicalKey: a key flanneld would not have written (host bits,
	// leading zeros, junk before the address).
	FindingNonCanonicalKey FindingKind = "non-canonical-key"
	// FindingOutsideNetwork: a lease's subnet is not inside the configured network.
	FindingOutsideNetwork FindingKind = "lease-outside-network"
	// FindingIncompatible: a lease inside the network that flanneld would not
	// keep (wrong length, or outside SubnetMin..SubnetMax): its node's flanneld
	// deletes it at its next start and leases another subnet.
	FindingIncompatible FindingKind = "lease-incompatible"
	// FindingDuplicate: two leases hold the same subnet.
	FindingDuplicate FindingKind = "lease-duplicate"
	// FindingOverlap: one lease's subnet contains another's.
	FindingOverlap FindingKind = "lease-overlap"
	// FindingDuplicatePublicIP: several leases carry the same PublicIP; the
	// node's flanneld renews one of them, the others are stale.
	FindingDuplicatePublicIP FindingKind = "duplicate-public-ip"
	// FindingUnknownNode: a lease's PublicIP belongs to no node; the lease is stale.
	FindingUnknownNode FindingKind = "lease-unknown-node"
	// FindingNotRenewed: a lease's etcd lease has less time left than flanneld
	// lets it reach before renewing: its flanneld is not running or cannot
	// reach etcd.
	FindingNotRenewed FindingKind = "lease-not-renewed"
	// FindingReservation: a lease without an etcd lease; it never expires.
	FindingReservation FindingKind = "lease-reservation"
	// FindingBackendMismatch: a lease (or node annotation) names another backend
	// than the config; such nodes cannot reach each other.
	FindingBackendMismatch FindingKind = "backend-mismatch"
	// FindingCapacity: how many subnets the network holds and how many are left.
	FindingCapacity FindingKind = "capacity"
	// FindingExhausted: no subnet is left; flanneld on a new node fails with
	// "out of subnets".
	FindingExhausted FindingKind = "subnets-exhausted"
	// FindingPodCIDROutside: kube mode, a node's podCIDR is outside the Network;
	// flanneld on that node exits at start-up.
	FindingPodCIDROutside FindingKind = "podcidr-outside-network"
	// FindingPodCIDRMissing: kube mode, a node has no podCIDR; flanneld on it
	// exits at start-up.
	FindingPodCIDRMissing FindingKind = "podcidr-missing"
	// FindingPodCIDRInvalid: kube mode, a node's podCIDRs cannot be read by
	// flanneld (not a CIDR, more than two); flanneld on it exits at start-up.
	FindingPodCIDRInvalid FindingKind = "podcidr-invalid"
	// FindingNotManaged: kube mode, a node has no kube-subnet-manager annotation:
	// flanneld has not (yet) run on it in kube subnet manager mode.
	FindingNotManaged FindingKind = "not-kube-subnet-managed"
	// FindingSubnetEnvStale: subnet.env names another subnet than the node's
	// lease or podCIDR; the cni0 bridge still carries the old address.
	FindingSubnetEnvStale FindingKind = "subnet-env-stale"
	// FindingSubnetEnvMismatch: subnet.env differs from what flanneld would
	// write in a way that does not break pods by itself (network, gateway).
	FindingSubnetEnvMismatch FindingKind = "subnet-env-mismatch"
)

// Finding is one problem (or fact) an audit reports, naming the etcd keys or
// nodes involved.
type Finding struct {
	Kind     FindingKind   `json:"kind"`
	Severity cidr.Severity `json:"severity"`
	// Keys are the etcd keys involved.
	Keys []string `json:"keys,omitempty"`
	// Nodes are the Kubernetes nodes involved.
	Nodes []string `json:"nodes,omitempty"`
	// Subnet is the subnet concerned, when there is one.
	Subnet netip.Prefix `json:"subnet,omitzero"`
	// Detail explains the finding and its consequence.
	Detail string `json:"detail"`
}

// String renders "severity kind: detail".
func (f Finding) String() string {
	return fmt.Sprintf("%s %s: %s", f.Severity, f.Kind, f.Detail)
}

// NodeAddresses is a node and the addresses a lease's PublicIP may match
// (its InternalIP / ExternalIP and flannel public-ip annotations).
type NodeAddresses struct {
	Name  string       `json:"name"`
	Addrs []netip.Addr `json:"addrs"`
}

// DefaultRenewMargin is flanneld's default --subnet-lease-renew-margin.
const DefaultRenewMargin = time.Hour

// AuditOptions tunes Audit.
type AuditOptions struct {
	// Nodes lists the nodes of the cluster. When it is not nil, every lease
	// whose PublicIP belongs to none of them is reported as stale. Leave it nil
	// to skip that check.
	Nodes []NodeAddresses
	// RenewMargin is flanneld's --subnet-lease-renew-margin; zero means
	// DefaultRenewMargin. A lease with less time left than the margin (minus
	// five minutes of slack) is reported as not renewed.
	RenewMargin time.Duration
}

// Capacity is how full one family of the network is.
type Capacity struct {
	Family    cidr.Family  `json:"family"`
	Network   netip.Prefix `json:"network"`
	SubnetLen int          `json:"subnetLen"`
	// Subnets is how many subnets flanneld may lease (SubnetMin..SubnetMax).
	Subnets *big.Int `json:"subnets"`
	// Leased counts distinct subnets held by leases flanneld would keep.
	Leased *big.Int `json:"leased"`
	// Free is Subnets - Leased: how many more nodes fit.
	Free *big.Int `json:"free"`
}

// Report is the result of an audit.
type Report struct {
	Prefix   string     `json:"prefix,omitempty"`
	Revision int64      `json:"revision,omitempty"`
	Findings []Finding  `json:"findings"`
	Capacity []Capacity `json:"capacity,omitempty"`
}

// Keys returns the etcd keys named by findings of the given kinds (all kinds
// when none is given), sorted and without duplicates.
func (r *Report) Keys(kinds ...FindingKind) []string {
	var out []string
	for _, f := range r.Findings {
		if len(kinds) == 0 || slices.Contains(kinds, f.Kind) {
			out = append(out, f.Keys...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Count returns how many findings have severity sev.
func (r *Report) Count(sev cidr.Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == sev {
			n++
		}
	}
	return n
}

// Audit inspects a snapshot, read-only: the config, every lease against the
// config and against each other, lease TTLs, backends, the nodes the leases
// belong to (when opts.Nodes is given), and how many subnets are left.
func Audit(s *Snapshot, opts AuditOptions) *Report {
	rep := &Report{Prefix: s.Prefix, Revision: s.Revision, Findings: []Finding{}}
	add := func(f Finding) { rep.Findings = append(rep.Findings, f) }
	if opts.RenewMargin <= 0 {
		opts.RenewMargin = DefaultRenewMargin
	}

	// The config.
	var res *Resolved
	configBackend := ""
	switch {
	case s.Config == nil:
		add(Finding{Kind: FindingConfigMissing, Severity: cidr.SeverityError, Keys: []string{s.Prefix + "/config"},
			Detail: s.Prefix + "/config does not exist; flanneld exits with \"flannel config not found in etcd store\""})
	case s.Config.Resolved == nil:
		add(Finding{Kind: FindingConfigInvalid, Severity: cidr.SeverityError, Keys: []string{s.Config.Key},
			Detail: "flanneld refuses the network config: " + s.Config.Error})
		if s.Config.Config != nil {
			configBackend = strings.ToLower(s.Config.Config.BackendType)
		}
	default:
		res = s.Config.Resolved
		configBackend = res.BackendType
		for _, w := range append(slices.Clone(s.Config.Config.Warnings), res.Warnings...) {
			add(Finding{Kind: FindingConfigWarning, Severity: cidr.SeverityWarning, Keys: []string{s.Config.Key}, Detail: w})
		}
	}

	// Keys flanneld cannot read.
	for _, b := range s.BadLeases {
		if b.Subnet.IsZero() {
			add(Finding{Kind: FindingUnreadableKey, Severity: cidr.SeverityWarning, Keys: []string{b.Key},
				Detail: b.Error + "; it holds no subnet for flanneld and can be deleted"})
		} else {
			add(Finding{Kind: FindingUnreadableLease, Severity: cidr.SeverityError, Keys: []string{b.Key}, Subnet: b.Subnet.IPv4.Masked(),
				Detail: b.Error + "; flanneld skips it, so " + b.Subnet.String() + " looks free and may be leased to a second node"})
		}
	}

	leases := slices.Clone(s.Leases)
	slices.SortFunc(leases, func(a, b Lease) int { return strings.Compare(a.Key, b.Key) })
	for _, l := range leases {
		name := strings.TrimPrefix(strings.TrimPrefix(l.Key, s.Prefix+"/subnets"), "/")
		if !l.Subnet.Canonical(name) {
			add(Finding{Kind: FindingNonCanonicalKey, Severity: cidr.SeverityWarning, Keys: []string{l.Key}, Subnet: l.Subnet.IPv4.Masked(),
				Detail: fmt.Sprintf("flanneld reads %q as %s but would write it as %q; the key was not written by flanneld",
					name, l.Subnet.IPv4, SubnetKey{IPv4: l.Subnet.IPv4.Masked(), IPv6: l.Subnet.IPv6.Masked()})})
		}
		if l.LeaseID == 0 {
			add(Finding{Kind: FindingReservation, Severity: cidr.SeverityInfo, Keys: []string{l.Key}, Subnet: l.Subnet.IPv4.Masked(),
				Detail: "no etcd lease is attached: a reservation that never expires"})
		} else if l.TTLSeconds >= 0 && time.Duration(l.TTLSeconds)*time.Second < opts.RenewMargin-5*time.Minute {
			add(Finding{Kind: FindingNotRenewed, Severity: cidr.SeverityWarning, Keys: []string{l.Key}, Subnet: l.Subnet.IPv4.Masked(),
				Detail: fmt.Sprintf("the etcd lease has %s left; flanneld renews %s before expiry, so the flanneld of %s is not renewing it (node down or flanneld stopped)",
					time.Duration(l.TTLSeconds)*time.Second, opts.RenewMargin, publicIPText(l.Attrs))})
		}
	}

	// Per family: inside the network, compatible, capacity.
	for _, fam := range []cidr.Family{cidr.IPv4, cidr.IPv6} {
		layout := res.Layout(fam)
		if layout == nil {
			continue
		}
		alloc, err := cidr.NewAllocator([]cidr.Pool{{Parent: layout.Network, Bits: layout.SubnetLen}}, cidr.AllocatorOptions{})
		for _, l := range leases {
			p := l.Subnet.IPv4
			if fam == cidr.IPv6 {
				p = l.Subnet.IPv6
			}
			if !p.IsValid() {
				if fam == cidr.IPv6 {
					add(Finding{Kind: FindingIncompatible, Severity: cidr.SeverityWarning, Keys: []string{l.Key}, Subnet: l.Subnet.IPv4.Masked(),
						Detail: "the config enables IPv6 but the lease has no IPv6 subnet; its flanneld drops it at its next start and leases a dual-stack subnet"})
				}
				continue
			}
			pm := p.Masked()
			switch {
			case !cidr.ContainsPrefix(layout.Network, pm):
				add(Finding{Kind: FindingOutsideNetwork, Severity: cidr.SeverityError, Keys: []string{l.Key}, Subnet: pm,
					Detail: fmt.Sprintf("%s lies outside %s %s; its flanneld keeps using it until it restarts, then deletes the lease and takes a new subnet (its node's pods must be restarted after the host clean-up)",
						pm, fieldName(fam, "Network"), layout.Network)})
			case !layout.Compatible(p):
				add(Finding{Kind: FindingIncompatible, Severity: cidr.SeverityWarning, Keys: []string{l.Key}, Subnet: pm,
					Detail: fmt.Sprintf("flanneld keeps only /%d subnets from %s to %s; at its next start it deletes this lease and takes another subnet",
						layout.SubnetLen, layout.SubnetMin, layout.SubnetMax)})
			default:
				if err == nil {
					alloc.Occupy(pm, l.Key)
				}
			}
		}
		c := Capacity{Family: fam, Network: layout.Network, SubnetLen: layout.SubnetLen, Subnets: layout.Subnets, Leased: big.NewInt(0), Free: new(big.Int).Set(layout.Subnets)}
		if err == nil {
			c.Leased = alloc.Held()
			c.Free = new(big.Int).Sub(layout.Subnets, c.Leased)
		}
		rep.Capacity = append(rep.Capacity, c)
		if c.Free.Sign() <= 0 {
			add(Finding{Kind: FindingExhausted, Severity: cidr.SeverityError, Subnet: layout.Network,
				Detail: fmt.Sprintf("all %s subnets (/%d) of %s are leased; flanneld on a new node fails with \"out of subnets\"", c.Subnets, c.SubnetLen, c.Network)})
		} else {
			add(Finding{Kind: FindingCapacity, Severity: cidr.SeverityInfo, Subnet: layout.Network,
				Detail: fmt.Sprintf("%s holds %s subnets of /%d (%s to %s): %s leased, %s free", c.Network, c.Subnets, c.SubnetLen,
					layout.SubnetMin, layout.SubnetMax, c.Leased, c.Free)})
		}
	}

	// Overlaps and duplicates, across all leases of each family.
	for _, fam := range []cidr.Family{cidr.IPv4, cidr.IPv6} {
		for _, f := range leaseOverlaps(leases, fam) {
			add(f)
		}
	}

	// Duplicate public IPs.
	byIP := map[netip.Addr][]string{}
	for _, l := range leases {
		if ip := l.Attrs.PublicIP; ip.IsValid() {
			byIP[ip] = append(byIP[ip], l.Key)
		}
	}
	nodeOf := map[netip.Addr][]string{}
	for _, n := range opts.Nodes {
		for _, a := range n.Addrs {
			nodeOf[a.Unmap()] = append(nodeOf[a.Unmap()], n.Name)
		}
	}
	for _, ip := range sortedAddrs(byIP) {
		keys := byIP[ip]
		if len(keys) < 2 {
			continue
		}
		add(Finding{Kind: FindingDuplicatePublicIP, Severity: cidr.SeverityWarning, Keys: keys, Nodes: nodeOf[ip],
			Detail: fmt.Sprintf("%d leases carry PublicIP %s; the node's flanneld renews one of them and reuses the first by key order at restart, the others are stale", len(keys), ip)})
	}

	// Leases of no node.
	if opts.Nodes != nil {
		for _, l := range leases {
			ip, ip6 := l.Attrs.PublicIP, l.Attrs.PublicIPv6
			if (ip.IsValid() && len(nodeOf[ip]) > 0) || (ip6.IsValid() && len(nodeOf[ip6]) > 0) {
				continue
			}
			add(Finding{Kind: FindingUnknownNode, Severity: cidr.SeverityWarning, Keys: []string{l.Key}, Subnet: l.Subnet.IPv4.Masked(),
				Detail: fmt.Sprintf("PublicIP %s belongs to no node: the lease is stale (%s) and can be deleted", publicIPText(l.Attrs), ttlText(l))})
		}
	}

	// Backends.
	byBackend := map[string][]string{}
	for _, l := range leases {
		if l.Attrs.BackendType != "" {
			bt := strings.ToLower(l.Attrs.BackendType)
			byBackend[bt] = append(byBackend[bt], l.Key)
		}
	}
	types := make([]string, 0, len(byBackend))
	for t := range byBackend {
		types = append(types, t)
	}
	slices.Sort(types)
	switch {
	case configBackend != "":
		for _, t := range types {
			if t != configBackend {
				add(Finding{Kind: FindingBackendMismatch, Severity: cidr.SeverityWarning, Keys: byBackend[t],
					Detail: fmt.Sprintf("%d lease(s) were written by a %s flanneld but the config says %s; nodes on different backends cannot reach each other's pods until their flanneld restarts",
						len(byBackend[t]), t, configBackend)})
			}
		}
	case len(types) > 1:
		var all []string
		for _, t := range types {
			all = append(all, byBackend[t]...)
		}
		slices.Sort(all)
		add(Finding{Kind: FindingBackendMismatch, Severity: cidr.SeverityWarning, Keys: all,
			Detail: "leases were written by flanneld with different backends (" + strings.Join(types, ", ") + "); nodes on different backends cannot reach each other's pods"})
	}

	sortFindings(rep.Findings)
	return rep
}

// leaseOverlaps finds every pair of leases of family fam whose subnets share
// addresses, with a sorted sweep: prefixes either nest or are disjoint.
func leaseOverlaps(leases []Lease, fam cidr.Family) []Finding {
	type item struct {
		p   netip.Prefix
		key string
	}
	var items []item
	for _, l := range leases {
		p := l.Subnet.IPv4
		if fam == cidr.IPv6 {
			p = l.Subnet.IPv6
		}
		if p.IsValid() {
			items = append(items, item{p.Masked(), l.Key})
		}
	}
	slices.SortFunc(items, func(a, b item) int {
		return cmp.Or(a.p.Addr().Compare(b.p.Addr()), cmp.Compare(a.p.Bits(), b.p.Bits()), strings.Compare(a.key, b.key))
	})
	var out []Finding
	var stack []item
	for _, it := range items {
		for len(stack) > 0 && !stack[len(stack)-1].p.Contains(it.p.Addr()) {
			stack = stack[:len(stack)-1]
		}
		for _, outer := range stack {
			if outer.p == it.p {
				out = append(out, Finding{Kind: FindingDuplicate, Severity: cidr.SeverityError, Keys: []string{outer.key, it.key}, Subnet: it.p,
					Detail: fmt.Sprintf("two leases hold %s: two nodes route the same pod addresses, so pods on one of them are unreachable", it.p)})
			} else {
				out = append(out, Finding{Kind: FindingOverlap, Severity: cidr.SeverityError, Keys: []string{outer.key, it.key}, Subnet: it.p,
					Detail: fmt.Sprintf("%s contains %s: two nodes route overlapping pod addresses", outer.p, it.p)})
			}
		}
		stack = append(stack, it)
	}
	return out
}

func sortFindings(fs []Finding) {
	rank := map[cidr.Severity]int{cidr.SeverityError: 0, cidr.SeverityWarning: 1, cidr.SeverityInfo: 2}
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(rank[a.Severity], rank[b.Severity]), strings.Compare(string(a.Kind), string(b.Kind)),
			strings.Compare(strings.Join(a.Keys, ","), strings.Join(b.Keys, ",")), strings.Compare(strings.Join(a.Nodes, ","), strings.Join(b.Nodes, ",")))
	})
}

func sortedAddrs[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

func fieldName(fam cidr.Family, f string) string {
	if fam == cidr.IPv6 {
		return "IPv6" + f
	}
	return f
}

func publicIPText(a LeaseAttrs) string {
	switch {
	case a.PublicIP.IsValid():
		return a.PublicIP.String()
	case a.PublicIPv6.IsValid():
		return a.PublicIPv6.String()
	}
	return "(none)"
}

func ttlText(l Lease) string {
	switch {
	case l.LeaseID == 0:
		return "a reservation, it never expires"
	case l.TTLSeconds < 0:
		return "its etcd lease is gone"
	}
	return "it expires in " + (time.Duration(l.TTLSeconds) * time.Second).String() + " unless renewed"
}
