package cidr

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"strconv"
)

// Defaults of the Kubernetes components.
const (
	// DefaultNodeMaskIPv4 is kube-controller-manager's default --node-cidr-mask-size-ipv4.
	DefaultNodeMaskIPv4 = 24
	// DefaultNodeMaskIPv6 is kube-controller-manager's default --node-cidr-mask-size-ipv6.
	DefaultNodeMaskIPv6 = 64
	// DefaultMaxPods is the kubelet's default maxPods.
	DefaultMaxPods = 110
	// MaxIPv6NodeMaskDiff is the largest node mask minus cluster mask that
	// kube-controller-manager's cidrset accepts for IPv6 (ErrCIDRSetSubNetTooBig).
	MaxIPv6NodeMaskDiff = 16
	// MaxServiceHostBits is the largest number of host bits kube-apiserver accepts in
	// --service-cluster-ip-range while the allocator dual-writes (Kubernetes 1.33 and older).
	MaxServiceHostBits = 20
	// DNSServiceIndex is the offset of the cluster DNS Service IP kubeadm uses (the tenth address).
	DNSServiceIndex = 10
)

// DefaultNodeMask returns kube-controller-manager's default node mask for family f.
func DefaultNodeMask(f Family) int {
	if f == IPv4 {
		return DefaultNodeMaskIPv4
	}
	return DefaultNodeMaskIPv6
}

// NodeIPAM describes one family of a cluster's pod network as
// kube-controller-manager's range allocator sees it.
type NodeIPAM struct {
	// ClusterCIDR is the --cluster-cidr entry for this family.
	ClusterCIDR netip.Prefix
	// NodeMask is the per-node prefix length (--node-cidr-mask-size[-ipv4|-ipv6]).
	// Zero means the component default for the family.
	NodeMask int
	// MaxPods is the kubelet's maxPods; zero means DefaultMaxPods.
	MaxPods int
}

// PodCapacity is the capacity of one family of a pod network. Counts are
// exact big integers, so IPv6 ranges of any size are counted without overflow.
//
// Pod IPs per node are counted as a bridge IPAM (host-local, as used by
// flannel's cni0 and kubenet) hands them out from a node's podCIDR: every
// address of the node subnet except the network address, the gateway the
// bridge takes, and for IPv4 the broadcast address, i.e. 2^h-3 for IPv4 and
// 2^h-2 for IPv6 where h is the node subnet's host bits. PodsPerNode is that
// figure capped by the kubelet's maxPods.
type PodCapacity struct {
	Family      Family       `json:"family"`
	ClusterCIDR netip.Prefix `json:"clusterCIDR"`
	NodeMask    int          `json:"nodeMask"`
	// MaxNodes is 2^(NodeMask - cluster prefix length): how many nodes can get a podCIDR.
	MaxNodes *big.Int `json:"maxNodes"`
	// AddressesPerNode is the size of one node subnet, 2^(bits - NodeMask).
	AddressesPerNode *big.Int `json:"addressesPerNode"`
	// PodIPsPerNode is the usable pod addresses of one node subnet (see the type doc).
	PodIPsPerNode *big.Int `json:"podIPsPerNode"`
	// MaxPods is the kubelet maxPods the figures assume.
	MaxPods int `json:"maxPods"`
	// PodsPerNode is min(PodIPsPerNode, MaxPods).
	PodsPerNode *big.Int `json:"podsPerNode"`
	// MaxPodsTotal is MaxNodes * PodsPerNode.
	MaxPodsTotal *big.Int `json:"maxPodsTotal"`
	// UsableAddresses counts the cluster CIDR the way classic IP calculators do:
	// IPv4 2^h-2 (no network, no broadcast; /31 gives 2 and /32 gives 1), IPv6 2^h.
	UsableAddresses *big.Int `json:"usableAddresses"`
}

// ComputePodCapacity computes the capacity of one family and checks it
// against kube-controller-manager's rules. Malformed input (an invalid prefix,
// a node mask outside 0..32 or 0..128) returns only an error. A configuration
// the component would refuse returns the computed capacity together with
// *RuleError values (joined), so callers can still show the arithmetic.
func ComputePodCapacity(in NodeIPAM) (PodCapacity, error) {
	if !in.ClusterCIDR.IsValid() {
		return PodCapacity{}, &ParseError{Field: "--cluster-cidr", Err: ErrEmpty}
	}
	cluster := in.ClusterCIDR
	fam := FamilyOf(cluster)
	bits := fam.AddrBits()
	mask := in.NodeMask
	if mask == 0 {
		mask = DefaultNodeMask(fam)
	}
	if mask < 0 || mask > bits {
		return PodCapacity{}, &ParseError{Field: "node mask", Input: strconv.Itoa(mask), Err: ErrSyntax,
			Detail: fmt.Sprintf("an %s node mask must be between 0 and %d", fam, bits)}
	}
	maxPods := in.MaxPods
	if maxPods == 0 {
		maxPods = DefaultMaxPods
	}
	if maxPods < 0 {
		return PodCapacity{}, &ParseError{Field: "max pods", Input: strconv.Itoa(maxPods), Err: ErrSyntax,
			Detail: "maxPods must be positive"}
	}
	host := bits - mask
	c := PodCapacity{
		Family:           fam,
		ClusterCIDR:      cluster,
		NodeMask:         mask,
		AddressesPerNode: pow2(host),
		MaxPods:          maxPods,
		UsableAddresses:  classicUsable(fam, bits-cluster.Bits()),
	}
	if fam == IPv4 {
		c.PodIPsPerNode = pow2Minus(host, 3)
	} else {
		c.PodIPsPerNode = pow2Minus(host, 2)
	}
	c.PodsPerNode = new(big.Int).Set(c.PodIPsPerNode)
	if c.PodsPerNode.Cmp(big.NewInt(int64(maxPods))) > 0 {
		c.PodsPerNode.SetInt64(int64(maxPods))
	}
	if mask >= cluster.Bits() {
		c.MaxNodes = pow2(mask - cluster.Bits())
	} else {
		c.MaxNodes = big.NewInt(0)
	}
	c.MaxPodsTotal = new(big.Int).Mul(c.MaxNodes, c.PodsPerNode)
	return c, errors.Join(nodeIPAMRules(cluster, mask)...)
}

// nodeIPAMRules returns the rules kube-controller-manager enforces on one
// cluster CIDR and its node mask.
func nodeIPAMRules(cluster netip.Prefix, mask int) []error {
	var errs []error
	if cluster != cluster.Masked() {
		// Not refused, but worth an error for values typed for a new layout.
		errs = append(errs, &ParseError{Field: "--cluster-cidr", Input: cluster.String(), Canonical: cluster.Masked(), Err: ErrHostBitsSet})
	}
	if cluster.Bits() > mask {
		errs = append(errs, &RuleError{Component: KubeControllerManager, Field: "--cluster-cidr", Value: cluster.String(),
			Reason: fmt.Sprintf("Controller: Invalid --cluster-cidr, mask size of cluster CIDR must be less than or equal to --node-cidr-mask-size configured for CIDR family (cluster /%d, node /%d)", cluster.Bits(), mask)})
	}
	if FamilyOf(cluster) == IPv6 && mask-cluster.Bits() > MaxIPv6NodeMaskDiff {
		errs = append(errs, &RuleError{Component: KubeControllerManager, Field: "--node-cidr-mask-size-ipv6", Value: strconv.Itoa(mask),
			Reason: fmt.Sprintf("New CIDR set failed; the node CIDR size is too big: an IPv6 node mask may be at most %d bits longer than the cluster CIDR %s (at most /%d)", MaxIPv6NodeMaskDiff, cluster, cluster.Bits()+MaxIPv6NodeMaskDiff)})
	}
	return errs
}

func classicUsable(f Family, host int) *big.Int {
	if f == IPv6 {
		return pow2(host)
	}
	switch host {
	case 0:
		return big.NewInt(1)
	case 1:
		return big.NewInt(2)
	}
	return pow2Minus(host, 2)
}

// ServiceRangeOptions tunes the kube-apiserver rules ComputeServiceCapacity applies.
type ServiceRangeOptions struct {
	// KubernetesMinor is the cluster's Kubernetes 1.x minor version. Up to 1.33
	// the ClusterIP allocator dual-writes and kube-apiserver refuses a flag range
	// with more than 20 host bits; from 1.34 it does not. Zero means "unknown"
	// and applies the stricter, older rule.
	KubernetesMinor int
	// Object says the range is a ServiceCIDR object's spec.cidrs rather than
	// the --service-cluster-ip-range flag: the 20-host-bit limit is a flag
	// rule and does not apply to objects.
	Object bool
}

// ServiceCapacity is the capacity of one Service CIDR.
type ServiceCapacity struct {
	Family Family       `json:"family"`
	CIDR   netip.Prefix `json:"cidr"`
	// UsableIPs is what the ClusterIP allocator hands out: IPv4 2^h-2 (no
	// network, no broadcast), IPv6 2^h-1 (no network address).
	UsableIPs *big.Int `json:"usableIPs"`
	// KubernetesIP is the first address, taken by the default/kubernetes Service.
	KubernetesIP netip.Addr `json:"kubernetesIP"`
	// DNSIP is the tenth address, conventionally the cluster DNS Service (kubeadm).
	DNSIP netip.Addr `json:"dnsIP"`
}

// ComputeServiceCapacity computes the capacity of a Service CIDR and checks it
// against kube-apiserver's rules. As with ComputePodCapacity, rule violations
// come back as *RuleError values next to the computed figures.
func ComputeServiceCapacity(p netip.Prefix, opts ServiceRangeOptions) (ServiceCapacity, error) {
	if !p.IsValid() {
		return ServiceCapacity{}, &ParseError{Field: "--service-cluster-ip-range", Err: ErrEmpty}
	}
	fam := FamilyOf(p)
	host := fam.AddrBits() - p.Bits()
	sc := ServiceCapacity{Family: fam, CIDR: p}
	if fam == IPv4 {
		sc.UsableIPs = pow2Minus(host, 2)
	} else {
		sc.UsableIPs = pow2Minus(host, 1)
	}
	var errs []error
	if p != p.Masked() {
		errs = append(errs, &ParseError{Field: "--service-cluster-ip-range", Input: p.String(), Canonical: p.Masked(), Err: ErrHostBitsSet})
	}
	if ip, err := NthAddr(p.Masked(), 1); err == nil && sc.UsableIPs.Sign() > 0 {
		sc.KubernetesIP = ip
	} else {
		errs = append(errs, &RuleError{Component: KubeAPIServer, Field: "--service-cluster-ip-range", Value: p.String(),
			Reason: "the range has no usable address for the kubernetes Service"})
	}
	if ip, err := NthAddr(p.Masked(), DNSServiceIndex); err == nil && big.NewInt(DNSServiceIndex).Cmp(sc.UsableIPs) <= 0 {
		sc.DNSIP = ip
	}
	if !opts.Object && (opts.KubernetesMinor == 0 || opts.KubernetesMinor <= 33) && host > MaxServiceHostBits {
		errs = append(errs, &RuleError{Component: KubeAPIServer, Field: "--service-cluster-ip-range", Value: p.String(),
			Reason: fmt.Sprintf("specified --service-cluster-ip-range is too large; for %d-bit addresses, the mask must be >= %d (Kubernetes 1.33 and older)", fam.AddrBits(), fam.AddrBits()-MaxServiceHostBits)})
	}
	if fam == IPv6 && p.Bits() < 64 {
		errs = append(errs, &RuleError{Component: KubeAPIServer, Field: "ServiceCIDR spec.cidrs", Value: p.String(),
			Reason: "an IPv6 Service range shorter than /64 is accepted but no ClusterIP is allocated from it; use a /64 or longer prefix"})
	}
	return sc, errors.Join(errs...)
}

// NthAddr returns the n-th address of p (n=0 is the network address). It fails
// with ErrOutOfRange when p has fewer than n+1 addresses.
func NthAddr(p netip.Prefix, n uint64) (netip.Addr, error) {
	fam := FamilyOf(p)
	host := uint(fam.AddrBits() - p.Bits())
	if host < 64 && n>>host != 0 {
		return netip.Addr{}, fmt.Errorf("%w: %s has no address at index %d", ErrOutOfRange, p, n)
	}
	v, _ := addrToU128(p.Masked().Addr()).add(u128{0, n})
	return u128ToAddr(v, fam == IPv4), nil
}
