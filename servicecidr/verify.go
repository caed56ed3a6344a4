package servicecidr

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/cidrshift/cidrshift/cidr"
)

// VerifyOptions says what the end state of a move must be.
type VerifyOptions struct {
	// To are the ranges every ClusterIP must now lie in. Required.
	To []netip.Prefix
	// From are the old ranges; ServiceCIDRs inside them are reported (gone,
	// or Terminating and what holds them).
	From []netip.Prefix
	// DNSService is namespace/name (default kube-system/kube-dns) and
	// DNSIPs, when set, the addresses it must have.
	DNSService string
	DNSIPs     []netip.Addr
	// KubernetesIPs, when set, are the addresses default/kubernetes must have
	// (Plan.Kubernetes.NewIPs). Whether set or not, default/kubernetes must
	// exist, and a ClusterIP of it inside To must be the first address of its
	// range: the one kube-apiserver gives it and its serving certificate names.
	KubernetesIPs []netip.Addr
	// IncludeLoadBalancers makes a LoadBalancer Service outside To an error
	// instead of a warning.
	IncludeLoadBalancers bool
}

// Severity grades a verification finding.
type Severity string

// The severities.
const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
	SeverityInfo    Severity = "info"
)

// VerifyFinding is one thing Verify noticed.
type VerifyFinding struct {
	Severity Severity `json:"severity"`
	// Object is e.g. "services/default/web" or "servicecidrs/kubernetes".
	Object  string `json:"object"`
	Message string `json:"message"`
}

// Verification is the proof (or not) that a move is complete.
type Verification struct {
	// OK is true when no finding is an error.
	OK bool `json:"ok"`
	// Services is how many Services with a ClusterIP were checked.
	Services int             `json:"services"`
	Findings []VerifyFinding `json:"findings"`
}

// Verify reads the cluster and checks the end state of a move.
func (c *Client) Verify(ctx context.Context, opts VerifyOptions) (*Verification, error) {
	if err := ValidateCIDRs("--to", opts.To); err != nil {
		return nil, err
	}
	s, err := c.Snapshot(ctx, SnapshotOptions{})
	if err != nil {
		return nil, err
	}
	return VerifySnapshot(s, opts)
}

// VerifySnapshot checks, from a snapshot: a Ready ServiceCIDR holds each new
// range; every ClusterIP (headless and ExternalName Services have none) lies
// in the new ranges; no two Services share an address; each address has its
// IPAddress object where the API is served; the DNS Service has its expected
// address; default/kubernetes exists (an Apply killed right after deleting
// it, with kube-apiserver slow or down, leaves it missing) at the first
// address of the new range once it is there; and what became of the old
// ServiceCIDRs.
func VerifySnapshot(s *Snapshot, opts VerifyOptions) (*Verification, error) {
	if err := ValidateCIDRs("--to", opts.To); err != nil {
		return nil, err
	}
	dnsNS, dnsName, err := splitKey("--dns-service", opts.DNSService, DefaultDNSService)
	if err != nil {
		return nil, err
	}
	for i, ip := range opts.DNSIPs {
		in := false
		for _, t := range opts.To {
			in = in || usableContains(t, ip)
		}
		if !in {
			return nil, &FieldError{Field: fmt.Sprintf("--dns-ip[%d]", i), Value: ip.String(), Err: ErrInvalid,
				Reason: "is not a usable address of --to " + joinPrefixes(opts.To) + ": the DNS Service must end up in the new range"}
		}
	}
	dnsFound := false
	for i := range s.Services {
		dnsFound = dnsFound || (s.Services[i].Namespace == dnsNS && s.Services[i].Name == dnsName)
	}
	if !dnsFound && opts.DNSService != "" {
		return nil, &FieldError{Field: "--dns-service", Value: opts.DNSService, Err: ErrInvalid, Reason: "does not exist; name the cluster DNS Service (namespace/name)"}
	}
	if !dnsFound {
		// As BuildPlan: the Service labelled k8s-app=kube-dns.
		for i := range s.Services {
			if s.Services[i].Labels[DNSLabelKey] == DNSLabelValue && len(ClusterIPs(&s.Services[i])) > 0 {
				dnsNS, dnsName, dnsFound = s.Services[i].Namespace, s.Services[i].Name, true
				break
			}
		}
	}
	v := &Verification{Findings: []VerifyFinding{}}
	add := func(sev Severity, obj, format string, args ...any) {
		v.Findings = append(v.Findings, VerifyFinding{Severity: sev, Object: obj, Message: fmt.Sprintf(format, args...)})
	}
	toOf := map[cidr.Family]netip.Prefix{}
	for _, p := range opts.To {
		toOf[cidr.FamilyOf(p)] = p
		ready := false
		for _, sc := range s.ServiceCIDRs {
			for _, q := range sc.CIDRs {
				if sc.IsReady() && cidr.ContainsPrefix(q, p) {
					ready = true
				}
			}
		}
		if !ready {
			add(SeverityError, "servicecidrs", "no Ready ServiceCIDR holds %s: the API server cannot allocate from it", p)
		}
	}
	byIP := map[netip.Addr]IPAddress{}
	for _, ip := range s.IPAddresses {
		byIP[ip.IP] = ip
	}
	holders := map[netip.Addr][]string{}
	kubeFound := false
	for i := range s.Services {
		svc := &s.Services[i]
		ips := ClusterIPs(svc)
		if len(ips) == 0 {
			continue
		}
		v.Services++
		key := svcKey(svc)
		obj := "services/" + key
		kubeFound = kubeFound || key == KubernetesService
		for _, ip := range ips {
			holders[ip] = append(holders[ip], key)
			fam := cidr.FamilyOf(netip.PrefixFrom(ip, ip.BitLen()))
			to, ok := toOf[fam]
			switch {
			case !ok:
				// A family the move does not cover.
			case usableContains(to, ip) && key == KubernetesService:
				if first := firstAddrs([]netip.Prefix{to}); len(first) == 1 && ip != first[0] {
					add(SeverityError, obj, "ClusterIP %s is not %s, the first address of %s that kube-apiserver gives default/kubernetes (and that its serving certificate names): "+
						"kube-apiserver did not create it from --service-cluster-ip-range=%s; delete it and kube-apiserver recreates it at %s", ip, first[0], to, joinPrefixes(opts.To), first[0])
				}
			case usableContains(to, ip):
			case key == KubernetesService:
				add(SeverityWarning, obj, "%s is outside %s: once every kube-apiserver runs with --service-cluster-ip-range=%s, delete it and kube-apiserver recreates it at %s", ip, to, joinPrefixes(opts.To), joinAddrs(firstAddrs([]netip.Prefix{to})))
			case svc.Spec.Type == corev1.ServiceTypeLoadBalancer && !opts.IncludeLoadBalancers:
				add(SeverityWarning, obj, "LoadBalancer Service left at %s, outside %s (it keeps the old ServiceCIDR Terminating)", ip, to)
			default:
				add(SeverityError, obj, "ClusterIP %s is outside %s", ip, to)
			}
			if len(containing(s.ServiceCIDRs, ip)) == 0 {
				add(SeverityError, obj, "ClusterIP %s lies in no ServiceCIDR", ip)
			}
			if s.IPAddresses != nil {
				rec, ok := byIP[ip]
				if !ok || !rec.ParentRef.IsService() || rec.ParentRef.Namespace != svc.Namespace || rec.ParentRef.Name != svc.Name {
					add(SeverityWarning, obj, "ClusterIP %s has no IPAddress object naming this Service (the allocator's repair loop fixes this)", ip)
				}
			}
		}
		if svc.Namespace == dnsNS && svc.Name == dnsName && len(opts.DNSIPs) > 0 && !sameAddrs(ips, opts.DNSIPs) {
			add(SeverityError, obj, "the DNS Service has %s, expected %s (kubelet clusterDNS must match it)", joinAddrs(ips), joinAddrs(opts.DNSIPs))
		}
		if key == KubernetesService && len(opts.KubernetesIPs) > 0 && !sameAddrs(ips, opts.KubernetesIPs) {
			add(SeverityError, obj, "Service %s has ClusterIP %s, expected %s (the first address of the new range, where kube-apiserver recreates it from --service-cluster-ip-range)", key, joinAddrs(ips), joinAddrs(opts.KubernetesIPs))
		}
	}
	if !dnsFound && len(opts.DNSIPs) > 0 {
		add(SeverityError, "services/"+dnsNS+"/"+dnsName, "the cluster DNS Service does not exist (nor one labelled %s=%s); expected at %s", DNSLabelKey, DNSLabelValue, joinAddrs(opts.DNSIPs))
	}
	if !kubeFound {
		want := joinAddrs(opts.KubernetesIPs)
		if want == "" {
			first := firstAddrs(opts.To)
			want = joinAddrs(first) + " (the first address of " + joinPrefixes(opts.To) + ")"
			if len(first) > 1 {
				want = strings.Join(addrStrings(first), " or ") + " (the first address of kube-apiserver's primary range, " + joinPrefixes(opts.To) + ")"
			}
		}
		add(SeverityError, "services/"+KubernetesService, "Service %s does not exist: kube-apiserver recreates it from its --service-cluster-ip-range within seconds, expected at %s; "+
			"if it stays missing, check that every kube-apiserver is running and with which range (in-cluster clients reach the API server through it)", KubernetesService, want)
	}
	dups := make([]netip.Addr, 0)
	for ip, hs := range holders {
		if len(hs) > 1 {
			dups = append(dups, ip)
		}
	}
	sort.Slice(dups, func(i, j int) bool { return dups[i].Less(dups[j]) })
	for _, ip := range dups {
		add(SeverityError, "services", "ClusterIP %s is held by %d Services: %v", ip, len(holders[ip]), holders[ip])
	}
	for _, sc := range s.ServiceCIDRs {
		inside := len(opts.From) > 0 && len(sc.CIDRs) > 0
		for _, q := range sc.CIDRs {
			ok := false
			for _, f := range opts.From {
				ok = ok || cidr.ContainsPrefix(f, q)
			}
			inside = inside && ok
		}
		if !inside {
			continue
		}
		obj := "servicecidrs/" + sc.Name
		if sc.Terminating() {
			rep := BuildDeletionReport(s, sc.Name)
			add(SeverityWarning, obj, "%s", rep.Summary)
		} else {
			add(SeverityInfo, obj, "old ServiceCIDR %s (%s) still exists and can hand out addresses; delete it once nothing needs the old range", sc.Name, joinPrefixes(sc.CIDRs))
		}
	}
	v.OK = true
	for _, f := range v.Findings {
		if f.Severity == SeverityError {
			v.OK = false
		}
	}
	return v, nil
}

func addrStrings(as []netip.Addr) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}
