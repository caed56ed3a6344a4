package kubeadmcfg

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
)

// Code names what a Finding is about.
type Code string

// The findings Check reports.
const (
	// CodeInvalidValue: a value cannot be parsed (not a CIDR, not an IP, not a number).
	CodeInvalidValue Code = "invalid-value"
	// CodeHostBits: a CIDR has host bits set; the component silently uses the network.
	CodeHostBits Code = "host-bits"
	// CodePodSubnetMismatch: kubeadm's podSubnet (or extraArgs cluster-cidr) and kube-controller-manager's --cluster-cidr differ.
	CodePodSubnetMismatch Code = "pod-subnet-mismatch"
	// CodeServiceSubnetMismatch: serviceSubnet, kube-apiserver's and kube-controller-manager's --service-cluster-ip-range differ.
	CodeServiceSubnetMismatch Code = "service-subnet-mismatch"
	// CodeNodeMaskMismatch: the node mask in kubeadm's extraArgs and in the manifest differ.
	CodeNodeMaskMismatch Code = "node-mask-mismatch"
	// CodeAllocateNodeCIDRs: --allocate-node-cidrs differs from what kubeadm would render.
	CodeAllocateNodeCIDRs Code = "allocate-node-cidrs"
	// CodeControllerManagerFlags: kube-controller-manager would refuse its node IPAM flags and exit.
	CodeControllerManagerFlags Code = "controller-manager-flags"
	// CodeNodeCrash: a node's podCIDR would make kube-controller-manager exit at start-up (crash loop).
	CodeNodeCrash Code = "node-crashes-controller-manager"
	// CodeNodePodCIDRMask: a node's podCIDR is not of the node mask size.
	CodeNodePodCIDRMask Code = "node-podcidr-mask"
	// CodeKubeProxyClusterCIDR: kube-proxy's clusterCIDR differs from the cluster CIDR, or is empty.
	CodeKubeProxyClusterCIDR Code = "kube-proxy-cluster-cidr"
	// CodePoolOutsideClusterCIDR: a Calico pool is not inside the cluster CIDR.
	CodePoolOutsideClusterCIDR Code = "pool-outside-cluster-cidr"
	// CodePoolOutsideKubeProxy: a pod pool is not inside kube-proxy's clusterCIDR.
	CodePoolOutsideKubeProxy Code = "pool-outside-kube-proxy-cluster-cidr"
	// CodeClusterCIDROutsideNetwork: the cluster CIDR is not inside flannel's Network.
	CodeClusterCIDROutsideNetwork Code = "cluster-cidr-outside-flannel-network"
	// CodeClusterDNSOutsideServiceSubnet: a kubelet clusterDNS address is not in the Service range.
	CodeClusterDNSOutsideServiceSubnet Code = "cluster-dns-outside-service-subnet"
	// CodeClusterDNSNotTenth: clusterDNS is in the Service range but not its tenth address (kubeadm's choice).
	CodeClusterDNSNotTenth Code = "cluster-dns-not-tenth"
	// CodeDNSDomainMismatch: kubeadm's dnsDomain and the kubelet's clusterDomain differ.
	CodeDNSDomainMismatch Code = "dns-domain-mismatch"
	// CodeServiceRange: kube-apiserver would refuse the Service range.
	CodeServiceRange Code = "service-range"
	// CodeOverlap: two ranges overlap that must not (pods and Services, two nodes, a special-purpose range).
	CodeOverlap Code = "overlap"
)

// Finding is one disagreement or problem, naming every source involved.
type Finding struct {
	Severity cidr.Severity `json:"severity"`
	Code     Code          `json:"code"`
	Message  string        `json:"message"`
	// Sources are the values involved, each with where it is written.
	Sources []Value `json:"sources,omitempty"`
}

// String renders the finding on one line: severity, code and message.
func (f Finding) String() string { return fmt.Sprintf("%s %s: %s", f.Severity, f.Code, f.Message) }

// Report is the result of Check.
type Report struct {
	// Values are the settings read.
	Values []Value `json:"values"`
	// Findings are sorted by severity (errors first), then in the order found.
	Findings []Finding `json:"findings"`
	// PreflightSource says whose flags the preflight used: the
	// kube-controller-manager manifest, or what kubeadm would render.
	PreflightSource string `json:"preflightSource,omitempty"`
	// Preflight predicts whether kube-controller-manager starts with those
	// flags and the nodes read (nil when there were no flags to check).
	Preflight *cidr.PreflightResult `json:"preflight,omitempty"`
}

// Count returns how many findings have the given severity.
func (r Report) Count(sev cidr.Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == sev {
			n++
		}
	}
	return n
}

type parsed struct {
	prefixes []netip.Prefix
	ok       bool
}

type checker struct {
	findings []Finding
	memo     map[string]parsed
}

func (c *checker) add(sev cidr.Severity, code Code, msg string, src ...Value) {
	c.findings = append(c.findings, Finding{Severity: sev, Code: code, Message: msg, Sources: src})
}

// prefixes parses a CIDR list read from the cluster the way the components
// do (host bits dropped), reporting each problem once.
func (c *checker) prefixes(v Value) ([]netip.Prefix, bool) {
	key := v.Where + "\x00" + v.Value
	if p, ok := c.memo[key]; ok {
		return p.prefixes, p.ok
	}
	ps, warns, err := cidr.ParseListLenient(v.Value)
	if err != nil {
		c.add(cidr.SeverityError, CodeInvalidValue, fmt.Sprintf("%s %q is not a valid CIDR or dual-stack CIDR pair: %v", v.Where, v.Value, err), v)
		c.memo[key] = parsed{}
		return nil, false
	}
	for _, w := range warns {
		c.add(cidr.SeverityWarning, CodeHostBits, fmt.Sprintf("%s: %s", v.Where, w.String()), v)
	}
	c.memo[key] = parsed{ps, true}
	return ps, true
}

// same compares two values as CIDR lists; both must parse.
func (c *checker) same(a, b Value) (equal, comparable bool) {
	pa, oka := c.prefixes(a)
	pb, okb := c.prefixes(b)
	if !oka || !okb {
		return false, false
	}
	return slices.Equal(pa, pb), true
}

func inAny(p netip.Prefix, in []netip.Prefix) bool {
	for _, o := range in {
		if cidr.ContainsPrefix(o, p) {
			return true
		}
	}
	return false
}

func sameFamily(p netip.Prefix, in []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, o := range in {
		if o.Addr().Is4() == p.Addr().Is4() {
			out = append(out, o)
		}
	}
	return out
}

// Check compares every place the snapshot holds a cluster's CIDRs and
// reports each disagreement with both sources named. It also runs
// cidr.ControllerManagerPreflight on the controller manager's flags (or the
// ones kubeadm would render) against the nodes read. Values read from the
// cluster are parsed leniently, as the components parse them, and host bits
// are reported as warnings.
func Check(s *Snapshot) Report {
	c := &checker{memo: map[string]parsed{}}
	rep := Report{Values: s.Values()}
	kc, km, api := s.Kubeadm, s.ControllerManager, s.APIServer

	// --- pod CIDR: kubeadm vs kube-controller-manager ---
	var kubeadmPod, kcmPod *Value
	if kc != nil {
		if v, ok := kc.ExtraArg(ControllerManager, FlagClusterCIDR); ok {
			kubeadmPod = &Value{kc.Source() + " controllerManager.extraArgs " + FlagClusterCIDR, v}
		} else if n := kc.Networking(); n.PodSubnet != "" {
			kubeadmPod = &Value{kc.Source() + " networking.podSubnet", n.PodSubnet}
		}
	}
	if km != nil {
		if v, ok := km.Flag(FlagClusterCIDR); ok {
			kcmPod = &Value{km.Source() + " --" + FlagClusterCIDR, v}
		}
	}
	switch {
	case kubeadmPod != nil && kcmPod != nil:
		if eq, ok := c.same(*kubeadmPod, *kcmPod); ok && !eq {
			c.add(cidr.SeverityError, CodePodSubnetMismatch, fmt.Sprintf(
				"%s is %s but %s is %s: kube-controller-manager hands out node podCIDRs from its flag, and kubeadm upgrade or join would render the flag from kubeadm-config",
				kcmPod.Where, kcmPod.Value, kubeadmPod.Where, kubeadmPod.Value), *kubeadmPod, *kcmPod)
		}
	case kubeadmPod != nil && km != nil:
		c.add(cidr.SeverityWarning, CodePodSubnetMismatch, fmt.Sprintf(
			"%s is %s but %s has no --%s: kubeadm upgrade would add it", kubeadmPod.Where, kubeadmPod.Value, km.Source(), FlagClusterCIDR), *kubeadmPod)
	case kcmPod != nil && kc != nil:
		c.add(cidr.SeverityWarning, CodePodSubnetMismatch, fmt.Sprintf(
			"%s is %s but %s sets no podSubnet: kubeadm upgrade would drop the flag", kcmPod.Where, kcmPod.Value, kc.Source()), *kcmPod)
	}
	clusterV := kcmPod
	if clusterV == nil {
		clusterV = kubeadmPod
	}
	var cluster []netip.Prefix
	if clusterV != nil {
		cluster, _ = c.prefixes(*clusterV)
	}

	// --- Service range: kubeadm vs kube-apiserver vs kube-controller-manager ---
	var kubeadmSvc, apiSvc, kcmSvc *Value
	if kc != nil {
		if v, ok := kc.ExtraArg(APIServer, FlagServiceClusterIPRange); ok {
			kubeadmSvc = &Value{kc.Source() + " apiServer.extraArgs " + FlagServiceClusterIPRange, v}
		} else if n := kc.Networking(); n.ServiceSubnet != "" {
			kubeadmSvc = &Value{kc.Source() + " networking.serviceSubnet", n.ServiceSubnet}
		} else {
			kubeadmSvc = &Value{kc.Source() + " networking.serviceSubnet (kubeadm default)", DefaultServiceSubnet}
		}
	}
	if api != nil {
		if v, ok := api.Flag(FlagServiceClusterIPRange); ok {
			apiSvc = &Value{api.Source() + " --" + FlagServiceClusterIPRange, v}
		}
	}
	if km != nil {
		if v, ok := km.Flag(FlagServiceClusterIPRange); ok {
			kcmSvc = &Value{km.Source() + " --" + FlagServiceClusterIPRange, v}
		}
	}
	svcMismatch := func(a, b *Value, why string) {
		if a == nil || b == nil {
			return
		}
		if eq, ok := c.same(*a, *b); ok && !eq {
			c.add(cidr.SeverityError, CodeServiceSubnetMismatch, fmt.Sprintf("%s is %s but %s is %s: %s", b.Where, b.Value, a.Where, a.Value, why), *a, *b)
		}
	}
	svcMismatch(kubeadmSvc, apiSvc, "kube-apiserver allocates ClusterIPs from its flag, and kubeadm upgrade or join would render the flag from kubeadm-config")
	if apiSvc != nil {
		svcMismatch(apiSvc, kcmSvc, "kube-controller-manager keeps node podCIDRs out of the Service range it is told, which is not the one kube-apiserver uses")
	} else {
		svcMismatch(kubeadmSvc, kcmSvc, "kube-controller-manager keeps node podCIDRs out of the Service range it is told, which is not the one kubeadm-config records")
	}
	svcV := apiSvc
	if svcV == nil {
		svcV = kubeadmSvc
	}
	if svcV == nil {
		svcV = kcmSvc
	}
	var service []netip.Prefix
	if svcV != nil {
		service, _ = c.prefixes(*svcV)
	}
	minor := 0
	if kc != nil {
		minor = kc.KubernetesMinor()
	}
	if minor == 0 && api != nil {
		minor = api.KubernetesMinor()
	}
	for _, p := range service {
		if _, err := cidr.ComputeServiceCapacity(p, cidr.ServiceRangeOptions{KubernetesMinor: minor}); err != nil {
			var re *cidr.RuleError
			if errors.As(err, &re) {
				c.add(cidr.SeverityError, CodeServiceRange, fmt.Sprintf("%s %s: %v", svcV.Where, p, err), *svcV)
			}
		}
	}

	// --- node IPAM flags: kubeadm vs manifest, then the preflight ---
	var kubeadmFlags, kcmFlags *cidr.ControllerManagerFlags
	if kc != nil {
		if f, err := kc.ControllerManagerFlags(); err != nil {
			c.addErr(err)
		} else {
			kubeadmFlags = &f
		}
	}
	if km != nil {
		if f, err := km.ControllerManagerFlags(); err != nil {
			c.addErr(err)
		} else {
			kcmFlags = &f
		}
	}
	if kubeadmFlags != nil && kcmFlags != nil {
		// Compare the masks the two sets of flags mean for the same cluster
		// CIDR: a flag spelled out with the default value is no disagreement.
		sameMasks := false
		if kcmFlags.ClusterCIDR != "" {
			kf := *kubeadmFlags
			kf.ClusterCIDR = kcmFlags.ClusterCIDR
			la, _, errA := cidr.ParseControllerManagerFlags(kf)
			lb, _, errB := cidr.ParseControllerManagerFlags(*kcmFlags)
			sameMasks = errA == nil && errB == nil && slices.Equal(la.NodeMasks, lb.NodeMasks)
		}
		for _, name := range []string{FlagNodeCIDRMaskSize, FlagNodeCIDRMaskSizeIPv4, FlagNodeCIDRMaskSizeIPv6} {
			kv, kok := kc.ExtraArg(ControllerManager, name)
			mv, mok := km.Flag(name)
			if sameMasks || kok == mok && strings.TrimSpace(kv) == strings.TrimSpace(mv) {
				continue
			}
			a := Value{kc.Source() + " controllerManager.extraArgs " + name, kv}
			b := Value{km.Source() + " --" + name, mv}
			if !kok {
				a.Value = "(not set)"
			}
			if !mok {
				b.Value = "(not set)"
			}
			c.add(cidr.SeverityError, CodeNodeMaskMismatch, fmt.Sprintf("%s is %s but %s is %s: kubeadm upgrade would change the node mask and kube-controller-manager would hand out subnets of another size",
				b.Where, b.Value, a.Where, a.Value), a, b)
		}
		if kubeadmFlags.AllocateNodeCIDRs != kcmFlags.AllocateNodeCIDRs {
			mv, _ := km.Flag(FlagAllocateNodeCIDRs)
			c.add(cidr.SeverityWarning, CodeAllocateNodeCIDRs, fmt.Sprintf("%s --%s is %q but kubeadm-config would render %t: kubeadm upgrade would change whether nodes get podCIDRs",
				km.Source(), FlagAllocateNodeCIDRs, mv, kubeadmFlags.AllocateNodeCIDRs), Value{km.Source() + " --" + FlagAllocateNodeCIDRs, mv})
		}
	}
	flags, flagsSource := kcmFlags, ""
	if flags != nil {
		flagsSource = km.Source()
	} else if kubeadmFlags != nil && kubeadmFlags.ClusterCIDR != "" {
		flags, flagsSource = kubeadmFlags, kc.Source()+" (flags kubeadm would render)"
	}
	if flags != nil {
		for _, n := range s.Nodes {
			for i, pc := range n.PodCIDRs {
				c.prefixes(Value{fmt.Sprintf("Node %s spec.podCIDRs[%d]", n.Name, i), pc})
			}
		}
		res := cidr.ControllerManagerPreflight(*flags, s.Nodes)
		rep.Preflight, rep.PreflightSource = &res, flagsSource
		for _, e := range res.FlagErrors {
			c.add(cidr.SeverityError, CodeControllerManagerFlags, fmt.Sprintf("kube-controller-manager would exit with the flags of %s: %s", flagsSource, e), flagValues(flagsSource, *flags)...)
		}
		for _, cr := range res.Crashes {
			src := []Value{{fmt.Sprintf("Node %s spec.podCIDRs[%d]", cr.Node, cr.Index), cr.PodCIDR}}
			if flags.ClusterCIDR != "" {
				src = append(src, Value{flagsSource + " --" + FlagClusterCIDR, flags.ClusterCIDR})
			}
			c.add(cidr.SeverityError, CodeNodeCrash, fmt.Sprintf("node %s would crash-loop kube-controller-manager (%s) at its next start: %s", cr.Node, flagsSource, cr.Message), src...)
		}
		if res.Layout != nil {
			for _, n := range s.Nodes {
				for i, pc := range n.PodCIDRs {
					p, _, err := cidr.ParseLenient(pc)
					if err != nil || i >= len(res.Layout.NodeMasks) || cidr.FamilyOf(p) != cidr.FamilyOf(res.Layout.ClusterCIDRs[i]) {
						continue
					}
					if m := res.Layout.NodeMasks[i]; p.Bits() != m {
						c.add(cidr.SeverityWarning, CodeNodePodCIDRMask, fmt.Sprintf("node %s has podCIDR %s but kube-controller-manager (%s) hands out /%d subnets: its range may overlap another node's",
							n.Name, pc, flagsSource, m), Value{fmt.Sprintf("Node %s spec.podCIDRs[%d]", n.Name, i), pc})
					}
				}
			}
		}
	}

	// --- kube-proxy clusterCIDR ---
	var proxy []netip.Prefix
	if kp := s.KubeProxy; kp != nil {
		pv := Value{kp.Source() + " clusterCIDR", kp.ClusterCIDR()}
		switch {
		case pv.Value == "" && clusterV != nil:
			c.add(cidr.SeverityWarning, CodeKubeProxyClusterCIDR, fmt.Sprintf("%s is empty but %s is %s: kube-proxy cannot tell pod traffic from outside traffic", pv.Where, clusterV.Where, clusterV.Value), pv, *clusterV)
		case pv.Value != "":
			proxy, _ = c.prefixes(pv)
			if clusterV != nil {
				if eq, ok := c.same(*clusterV, pv); ok && !eq {
					c.add(cidr.SeverityError, CodeKubeProxyClusterCIDR, fmt.Sprintf("%s is %s but %s is %s: kube-proxy treats pods outside its clusterCIDR as outside traffic (masquerading, local traffic detection)",
						pv.Where, pv.Value, clusterV.Where, clusterV.Value), *clusterV, pv)
				}
			}
		}
	}

	// --- CNI pools ---
	for _, pool := range s.Pools {
		pv := Value{poolWhere(pool), pool.CIDR}
		ps, ok := c.prefixes(pv)
		if !ok {
			continue
		}
		for _, p := range ps {
			switch pool.Kind {
			case cidr.KindFlannelNetwork:
				for _, cl := range cluster {
					if cidr.FamilyOf(cl) == cidr.FamilyOf(p) && !cidr.ContainsPrefix(p, cl) {
						c.add(cidr.SeverityError, CodeClusterCIDROutsideNetwork, fmt.Sprintf("%s %s does not contain %s %s: flannel refuses node podCIDRs outside its Network",
							pv.Where, p, clusterV.Where, cl), pv, *clusterV)
					}
				}
			default:
				if fam := sameFamily(p, cluster); len(fam) > 0 && !inAny(p, fam) {
					c.add(cidr.SeverityWarning, CodePoolOutsideClusterCIDR, fmt.Sprintf("%s %s is not inside %s %s: keep pod pools inside the cluster CIDR",
						pv.Where, p, clusterV.Where, clusterV.Value), pv, *clusterV)
				}
			}
			// flannel's Network may be wider than the cluster CIDR: pods only get node podCIDR addresses.
			if fam := sameFamily(p, proxy); pool.Kind != cidr.KindFlannelNetwork && len(fam) > 0 && !inAny(p, fam) {
				kv := Value{s.KubeProxy.Source() + " clusterCIDR", s.KubeProxy.ClusterCIDR()}
				c.add(cidr.SeverityError, CodePoolOutsideKubeProxy, fmt.Sprintf("%s %s is not inside %s %s: kube-proxy treats pods with these addresses as outside traffic",
					pv.Where, p, kv.Where, kv.Value), pv, kv)
			}
		}
	}

	// --- kubelet clusterDNS and clusterDomain ---
	if kl := s.Kubelet; kl != nil {
		for i, ip := range kl.ClusterDNS() {
			dv := Value{fmt.Sprintf("%s clusterDNS[%d]", kl.Source(), i), ip}
			a, err := netip.ParseAddr(strings.TrimSpace(ip))
			if err != nil {
				c.add(cidr.SeverityError, CodeInvalidValue, fmt.Sprintf("%s %q is not an IP address", dv.Where, ip), dv)
				continue
			}
			if len(service) == 0 {
				continue
			}
			in := false
			for _, p := range sameFamily(netip.PrefixFrom(a, a.BitLen()), service) {
				if p.Contains(a) {
					in = true
					if tenth, err := cidr.NthAddr(p, cidr.DNSServiceIndex); err == nil && tenth != a {
						c.add(cidr.SeverityInfo, CodeClusterDNSNotTenth, fmt.Sprintf("%s is %s, not %s, the tenth address of %s %s that kubeadm gives the DNS Service", dv.Where, ip, tenth, svcV.Where, p), dv, *svcV)
					}
				}
			}
			if !in {
				c.add(cidr.SeverityError, CodeClusterDNSOutsideServiceSubnet, fmt.Sprintf("%s %s is outside %s %s: no Service can have that address, so pods get no DNS", dv.Where, ip, svcV.Where, svcV.Value), dv, *svcV)
			}
		}
		if kc != nil && kl.ClusterDomain() != "" {
			dom := kc.Networking().DNSDomain
			where := kc.Source() + " networking.dnsDomain"
			if dom == "" {
				dom, where = DefaultDNSDomain, where+" (kubeadm default)"
			}
			if !strings.EqualFold(strings.TrimSuffix(dom, "."), strings.TrimSuffix(kl.ClusterDomain(), ".")) {
				c.add(cidr.SeverityError, CodeDNSDomainMismatch, fmt.Sprintf("%s clusterDomain is %s but %s is %s", kl.Source(), kl.ClusterDomain(), where, dom),
					Value{where, dom}, Value{kl.Source() + " clusterDomain", kl.ClusterDomain()})
			}
		}
	}

	// --- overlaps between pods, Services, nodes and special-purpose ranges ---
	var ranges []cidr.Range
	valueOf := map[string]Value{}
	addRange := func(name string, kind cidr.Kind, v Value, ps []netip.Prefix) {
		for _, p := range ps {
			ranges = append(ranges, cidr.Range{Name: name, Kind: kind, Prefix: p})
		}
		valueOf[name] = v
	}
	if clusterV != nil {
		addRange(clusterV.Where, cidr.KindClusterCIDR, *clusterV, cluster)
	}
	if svcV != nil {
		addRange(svcV.Where, cidr.KindServiceCIDR, *svcV, service)
	}
	for _, pool := range s.Pools {
		pv := Value{poolWhere(pool), pool.CIDR}
		ps, _ := c.prefixes(pv)
		addRange(pv.Where, pool.Kind, pv, ps)
	}
	for _, n := range s.Nodes {
		for i, pc := range n.PodCIDRs {
			v := Value{fmt.Sprintf("Node %s spec.podCIDRs[%d]", n.Name, i), pc}
			if p, _, err := cidr.ParseLenient(pc); err == nil {
				addRange(v.Where, cidr.KindNodePodCIDR, v, []netip.Prefix{p})
			}
		}
	}
	for _, o := range cidr.Analyze(ranges, cidr.AnalyzeOptions{WellKnown: true}) {
		if podSpace(o.Outer.Kind) && podSpace(o.Inner.Kind) && !(o.Outer.Kind == o.Inner.Kind && (o.Outer.Kind == cidr.KindNodePodCIDR || o.Outer.Kind == cidr.KindCalicoPool)) {
			continue // nesting of pod ranges is checked above, with the right rules per CNI
		}
		if (o.Outer.Kind == cidr.KindWellKnown && o.Inner.Kind == cidr.KindNodePodCIDR) || (o.Inner.Kind == cidr.KindWellKnown && o.Outer.Kind == cidr.KindNodePodCIDR) {
			continue // reported once for the cluster CIDR, not once per node
		}
		var src []Value
		for _, r := range []cidr.Range{o.Outer, o.Inner} {
			if v, ok := valueOf[r.Name]; ok {
				src = append(src, v)
			} else {
				src = append(src, Value{Where: r.Name, Value: r.Prefix.String()})
			}
		}
		c.add(o.Severity, CodeOverlap, o.String(), src...)
	}

	rank := map[cidr.Severity]int{cidr.SeverityError: 0, cidr.SeverityWarning: 1, cidr.SeverityInfo: 2}
	slices.SortStableFunc(c.findings, func(a, b Finding) int { return rank[a.Severity] - rank[b.Severity] })
	rep.Findings = c.findings
	if rep.Findings == nil {
		rep.Findings = []Finding{}
	}
	return rep
}

func podSpace(k cidr.Kind) bool {
	return k == cidr.KindClusterCIDR || k == cidr.KindNodePodCIDR || k == cidr.KindCalicoPool || k == cidr.KindFlannelNetwork
}

// addErr reports an error from reading flags as a finding.
func (c *checker) addErr(err error) {
	var fe *FieldError
	if errors.As(err, &fe) {
		c.add(cidr.SeverityError, CodeInvalidValue, err.Error(), Value{fe.Source + " " + fe.Field, fe.Value})
		return
	}
	c.add(cidr.SeverityError, CodeInvalidValue, err.Error())
}

func flagValues(source string, f cidr.ControllerManagerFlags) []Value {
	var out []Value
	for _, a := range f.Args() {
		name, v, _ := strings.Cut(a, "=")
		out = append(out, Value{source + " " + name, v})
	}
	return out
}

// KubernetesMinor returns the Kubernetes minor version of the manifest's
// image tag (34 for registry.k8s.io/kube-apiserver:v1.34.2), or 0 when the
// image has no tag or no name before it.
func (m *Manifest) KubernetesMinor() int {
	img, _ := scalarAt(m.d.root(), ypath{"spec", "containers", m.container, "image"})
	i := strings.LastIndex(img, ":")
	if i <= 0 || strings.Contains(img[i:], "/") {
		return 0
	}
	return minorOf(img[i+1:])
}
