package calico

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
)

// CapacityOptions are the cluster settings a pool's capacity is checked against.
type CapacityOptions struct {
	// ClusterCIDR is the cluster CIDR the user intends (one, or a dual-stack
	// pair, comma-separated), typed by a person: parsed strictly.
	ClusterCIDR string
	// KubeProxyClusterCIDR is kube-proxy's clusterCIDR as read from its
	// configuration (ConfigMap kube-system/kube-proxy, key config.conf):
	// parsed the lenient way kube-proxy does.
	KubeProxyClusterCIDR string
}

// WarningCode names a capacity warning.
type WarningCode string

// The warnings Capacity gives.
const (
	// WarnOutsideClusterCIDR: the pool is not inside the cluster CIDR.
	WarnOutsideClusterCIDR WarningCode = "outside-cluster-cidr"
	// WarnKubeProxyMismatch: kube-proxy's clusterCIDR does not contain the pool
	// (kube-proxy then treats pod traffic from the pool as external).
	WarnKubeProxyMismatch WarningCode = "kube-proxy-cluster-cidr"
	// WarnKubeProxyHostBits: kube-proxy's clusterCIDR has host bits set.
	WarnKubeProxyHostBits WarningCode = "kube-proxy-host-bits"
	// WarnNoWholeBlock: the pool is smaller than one block.
	WarnNoWholeBlock WarningCode = "no-whole-block"
)

// CapacityWarning is one thing about a pool's capacity a person should know.
type CapacityWarning struct {
	Code    WarningCode `json:"code"`
	Message string      `json:"message"`
}

// Capacity is what a Calico pool can hold. Counts are exact big integers;
// in JSON and YAML they are decimal strings, so IPv6 counts survive.
type Capacity struct {
	Pool      string       `json:"pool,omitempty"`
	CIDR      netip.Prefix `json:"cidr"`
	Family    cidr.Family  `json:"family"`
	BlockSize int          `json:"blockSize"`
	// Addresses is every address of the pool, 2^(bits - pool prefix length).
	// Calico IPAM hands out every address of a block, network and broadcast
	// addresses included.
	Addresses *big.Int `json:"addresses"`
	// Blocks is 2^(blockSize - pool prefix length).
	Blocks *big.Int `json:"blocks"`
	// AddressesPerBlock is 2^(bits - blockSize).
	AddressesPerBlock *big.Int `json:"addressesPerBlock"`
	// MaxNodesOneBlockEach is how many nodes can each hold one block of their
	// own (equal to Blocks). Nodes beyond that borrow addresses from other
	// nodes' blocks unless IPAM strictAffinity is on, in which case they get none.
	MaxNodesOneBlockEach *big.Int          `json:"maxNodesOneBlockEach"`
	Warnings             []CapacityWarning `json:"warnings,omitempty"`
}

// capacityJSON is Capacity with its counts as decimal strings: YAML (and
// many JSON readers) turn numbers beyond 2^53 into floats, and IPv6 counts
// go far beyond.
type capacityJSON struct {
	Pool                 string            `json:"pool,omitempty"`
	CIDR                 netip.Prefix      `json:"cidr"`
	Family               cidr.Family       `json:"family"`
	BlockSize            int               `json:"blockSize"`
	Addresses            string            `json:"addresses"`
	Blocks               string            `json:"blocks"`
	AddressesPerBlock    string            `json:"addressesPerBlock"`
	MaxNodesOneBlockEach string            `json:"maxNodesOneBlockEach"`
	Warnings             []CapacityWarning `json:"warnings,omitempty"`
}

// MarshalJSON writes the counts as decimal strings, exact at any size.
func (c Capacity) MarshalJSON() ([]byte, error) {
	str := func(b *big.Int) string {
		if b == nil {
			return ""
		}
		return b.String()
	}
	return json.Marshal(capacityJSON{Pool: c.Pool, CIDR: c.CIDR, Family: c.Family, BlockSize: c.BlockSize,
		Addresses: str(c.Addresses), Blocks: str(c.Blocks), AddressesPerBlock: str(c.AddressesPerBlock),
		MaxNodesOneBlockEach: str(c.MaxNodesOneBlockEach), Warnings: c.Warnings})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *Capacity) UnmarshalJSON(data []byte) error {
	var j capacityJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	num := func(field, s string) (*big.Int, error) {
		if s == "" {
			return nil, nil
		}
		n, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return nil, fmt.Errorf("capacity %s %q: not a decimal integer", field, s)
		}
		return n, nil
	}
	out := Capacity{Pool: j.Pool, CIDR: j.CIDR, Family: j.Family, BlockSize: j.BlockSize, Warnings: j.Warnings}
	var err error
	if out.Addresses, err = num("addresses", j.Addresses); err != nil {
		return err
	}
	if out.Blocks, err = num("blocks", j.Blocks); err != nil {
		return err
	}
	if out.AddressesPerBlock, err = num("addressesPerBlock", j.AddressesPerBlock); err != nil {
		return err
	}
	if out.MaxNodesOneBlockEach, err = num("maxNodesOneBlockEach", j.MaxNodesOneBlockEach); err != nil {
		return err
	}
	*c = out
	return nil
}

// PoolCapacity computes the capacity of a pool and warns when it lies outside
// the cluster CIDR or kube-proxy's clusterCIDR disagrees with it. Malformed
// input (pool CIDR, block size, cluster CIDRs) is an error naming the field.
func PoolCapacity(p IPPool, opts CapacityOptions) (Capacity, error) {
	pfx, err := p.Prefix()
	if err != nil {
		return Capacity{}, err
	}
	bits := pfx.Addr().BitLen()
	bs := p.EffectiveBlockSize()
	lo, hi := MinBlockSizeIPv4, MaxBlockSizeIPv4
	if bits == 128 {
		lo, hi = MinBlockSizeIPv6, MaxBlockSizeIPv6
	}
	if bs < lo || bs > hi {
		return Capacity{}, &FieldError{Pool: p.Name, Field: "spec.blockSize", Value: fmt.Sprint(p.Spec.BlockSize), Rule: RuleBlockSizeRange,
			Reason: fmt.Sprintf("block size for a %s pool must be between %d and %d", cidr.FamilyOf(pfx), lo, hi)}
	}
	c := Capacity{
		Pool:              p.Name,
		CIDR:              pfx,
		Family:            cidr.FamilyOf(pfx),
		BlockSize:         bs,
		Addresses:         pow2(bits - pfx.Bits()),
		AddressesPerBlock: pow2(bits - bs),
		Blocks:            big.NewInt(0),
	}
	if pfx.Bits() <= bs {
		c.Blocks = pow2(bs - pfx.Bits())
	} else {
		c.Warnings = append(c.Warnings, CapacityWarning{Code: WarnNoWholeBlock,
			Message: fmt.Sprintf("pool %s is smaller than one /%d block: Calico refuses it while enabled", pfx, bs)})
	}
	c.MaxNodesOneBlockEach = new(big.Int).Set(c.Blocks)

	if strings.TrimSpace(opts.ClusterCIDR) != "" {
		clusters, err := cidr.ParseList(opts.ClusterCIDR)
		if err != nil {
			return Capacity{}, fmt.Errorf("cluster CIDR %q: %w", opts.ClusterCIDR, err)
		}
		if !containedInFamily(clusters, pfx) {
			c.Warnings = append(c.Warnings, CapacityWarning{Code: WarnOutsideClusterCIDR,
				Message: fmt.Sprintf("pool %s lies outside the cluster CIDR %s; keep pools inside the cluster CIDR", pfx, opts.ClusterCIDR)})
		}
	}
	if strings.TrimSpace(opts.KubeProxyClusterCIDR) != "" {
		kp, warns, err := cidr.ParseListLenient(opts.KubeProxyClusterCIDR)
		if err != nil {
			return Capacity{}, fmt.Errorf("kube-proxy clusterCIDR %q: %w", opts.KubeProxyClusterCIDR, err)
		}
		for _, w := range warns {
			c.Warnings = append(c.Warnings, CapacityWarning{Code: WarnKubeProxyHostBits, Message: "kube-proxy clusterCIDR: " + w.String()})
		}
		if !containedInFamily(kp, pfx) {
			c.Warnings = append(c.Warnings, CapacityWarning{Code: WarnKubeProxyMismatch,
				Message: fmt.Sprintf("kube-proxy's clusterCIDR %s does not contain pool %s: kube-proxy will treat traffic from these pods as external (masquerade and local-traffic detection break); update kube-proxy's clusterCIDR and restart it", prefixList(kp), pfx)})
		}
	}
	return c, nil
}

func containedInFamily(outer []netip.Prefix, p netip.Prefix) bool {
	for _, o := range outer {
		if cidr.ContainsPrefix(o, p) {
			return true
		}
	}
	return false
}

func pow2(n int) *big.Int {
	if n < 0 {
		return big.NewInt(0)
	}
	return new(big.Int).Lsh(big.NewInt(1), uint(n))
}
