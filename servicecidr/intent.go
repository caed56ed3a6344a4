package servicecidr

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/cidrshift/cidrshift/cidr"
)

// checkFrom refuses a From that is not the Service range the cluster
// actually uses. A move plans the kube-apiserver flag change From -> To, so a
// From that misses the range in use would move nothing and then tell the
// operator to strand every Service. For each prefix of From:
//   - default/kubernetes (or, while an interrupted Apply left it deleted,
//     its journaled address) of that family must lie in it; or be in To
//     already (the move is past the flag change) while it holds a
//     ServiceCIDR or a ClusterIP, or nothing but LoadBalancers is left
//     outside To (a rerun of a finished move);
//   - without a default/kubernetes of that family, it must hold a
//     ServiceCIDR or a ClusterIP, unless nothing but LoadBalancers is left
//     outside To;
//   - it must not cover only part of a ServiceCIDR: the ClusterIPs in the
//     rest of that ServiceCIDR would neither move nor survive the flag change.
//
// The error wraps ErrInvalid and names what is in use.
func checkFrom(s *Snapshot, field string, from, to []netip.Prefix) error {
	var kubeIPs []netip.Addr
	for i := range s.Services {
		if svcKey(&s.Services[i]) == KubernetesService {
			kubeIPs = ClusterIPs(&s.Services[i])
		}
	}
	if len(kubeIPs) == 0 && s.KubernetesDeleted != nil {
		kubeIPs = s.KubernetesDeleted.OldIPs
	}
	inTo := func(ip netip.Addr) bool {
		for _, t := range to {
			if t.Contains(ip) {
				return true
			}
		}
		return false
	}
	for _, f := range from {
		fam := cidr.FamilyOf(f)
		var kip netip.Addr
		for _, ip := range kubeIPs {
			if cidr.FamilyOf(netip.PrefixFrom(ip, ip.BitLen())) == fam {
				kip = ip
			}
		}
		// used: a ServiceCIDR or a ClusterIP lies in f. left: a Service of
		// this family, not a LoadBalancer (those may stay behind), still
		// outside To.
		used := false
		for _, sc := range s.ServiceCIDRs {
			for _, q := range sc.CIDRs {
				used = used || q.Overlaps(f)
			}
		}
		left := ""
		for i := range s.Services {
			svc := &s.Services[i]
			for _, ip := range ClusterIPs(svc) {
				used = used || f.Contains(ip)
				if left == "" && svc.Spec.Type != corev1.ServiceTypeLoadBalancer && cidr.FamilyOf(netip.PrefixFrom(ip, ip.BitLen())) == fam && !inTo(ip) {
					left = svcKey(svc) + " " + ip.String()
				}
			}
		}
		switch {
		case kip.IsValid() && f.Contains(kip):
		case kip.IsValid() && inTo(kip) && (used || left == ""):
			// Past the flag change: a rerun, or the last step.
		case kip.IsValid() && inTo(kip):
			return &FieldError{Field: field, Value: f.String(), Err: ErrInvalid,
				Reason: fmt.Sprintf("is not the Service range in use: no ServiceCIDR and no ClusterIP lies in it, and %s is still outside the new range; in use: %s", left, describeInUse(s, fam))}
		case kip.IsValid():
			return &FieldError{Field: field, Value: f.String(), Err: ErrInvalid,
				Reason: fmt.Sprintf("is not the Service range in use: default/kubernetes is at %s, outside it; in use: %s; give the range in use as --from", kip, describeInUse(s, fam))}
		case !used && left != "":
			// Without a default/kubernetes of this family, f must hold a
			// ServiceCIDR or a ClusterIP, unless the move is complete.
			return &FieldError{Field: field, Value: f.String(), Err: ErrInvalid,
				Reason: fmt.Sprintf("is not a Service range in use: no ServiceCIDR and no ClusterIP lies in it; in use: %s", describeInUse(s, fam))}
		}
		for _, sc := range s.ServiceCIDRs {
			for _, q := range sc.CIDRs {
				if !q.Overlaps(f) || cidr.ContainsPrefix(f, q) {
					continue
				}
				var outside []string
				for i := range s.Services {
					for _, ip := range ClusterIPs(&s.Services[i]) {
						if q.Contains(ip) && !f.Contains(ip) {
							outside = append(outside, svcKey(&s.Services[i])+" "+ip.String())
						}
					}
				}
				sort.Strings(outside)
				what := "none of its ClusterIPs lies outside it yet, but kube-apiserver's --service-cluster-ip-range is the whole range"
				if len(outside) > 0 {
					what = fmt.Sprintf("%d ClusterIP(s) lie outside it and would be stranded (%s)", len(outside), strings.Join(outside[:min(3, len(outside))], ", "))
				}
				return &FieldError{Field: field, Value: f.String(), Err: ErrInvalid,
					Reason: fmt.Sprintf("covers only part of ServiceCIDR %s (%s): %s; give --from %s", sc.Name, q, what, q)}
			}
		}
	}
	return nil
}

// describeInUse names the ServiceCIDRs of a family, what each holds, and
// where default/kubernetes is, for an error message.
func describeInUse(s *Snapshot, fam cidr.Family) string {
	var parts []string
	for _, sc := range s.ServiceCIDRs {
		for _, q := range sc.CIDRs {
			if cidr.FamilyOf(q) != fam {
				continue
			}
			n, kube := 0, ""
			for i := range s.Services {
				for _, ip := range ClusterIPs(&s.Services[i]) {
					if q.Contains(ip) {
						n++
						if svcKey(&s.Services[i]) == KubernetesService {
							kube = ", default/kubernetes " + ip.String()
						}
					}
				}
			}
			state := ""
			if sc.Terminating() {
				state = ", Terminating"
			}
			parts = append(parts, fmt.Sprintf("ServiceCIDR %s %s (%d ClusterIP(s)%s%s)", sc.Name, q, n, kube, state))
		}
	}
	if len(parts) == 0 {
		return "no ServiceCIDR of this family"
	}
	return strings.Join(parts, ", ")
}
