package calico

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"strconv"
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

// Capacity is what a Calico pool can hold. Counts are exact big integers; in
// JSON they are numbers, as cidr.PodCapacity's are, written in full at any
// size (an IPv6 pool's counts go far beyond 2^64). YAML made from that JSON
// keeps them exact when numbers are copied verbatim, as the example programs
// print it; UnmarshalJSON also reads back what sigs.k8s.io/yaml makes of
// them (see there).
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

// capacityWire is Capacity as UnmarshalJSON reads it: the counts raw, so
// each can be checked for exactness.
type capacityWire struct {
	Pool                 string            `json:"pool,omitempty"`
	CIDR                 netip.Prefix      `json:"cidr"`
	Family               cidr.Family       `json:"family"`
	BlockSize            int               `json:"blockSize"`
	Addresses            json.RawMessage   `json:"addresses"`
	Blocks               json.RawMessage   `json:"blocks"`
	AddressesPerBlock    json.RawMessage   `json:"addressesPerBlock"`
	MaxNodesOneBlockEach json.RawMessage   `json:"maxNodesOneBlockEach"`
	Warnings             []CapacityWarning `json:"warnings,omitempty"`
}

// maxExactFloat is 2^53: every integer up to it is exact in a float64.
const maxExactFloat = 1 << 53

// UnmarshalJSON reads a Capacity. Each count is a non-negative JSON integer
// of any size, or a decimal string (as plans written before the counts
// became numbers hold them). YAML readers that go through float64, such as
// sigs.k8s.io/yaml, turn integers beyond 64 bits into floats (2^64 comes out
// as 18446744073709552000 or 1.8446744073709552e+19); such an inexact value
// is accepted only when it is the float64 of the count the capacity's own
// cidr and blockSize give, and is replaced by that exact count. Anything
// else is an error naming the field and the value.
func (c *Capacity) UnmarshalJSON(data []byte) error {
	var w capacityWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	out := Capacity{Pool: w.Pool, CIDR: w.CIDR, Family: w.Family, BlockSize: w.BlockSize, Warnings: w.Warnings}
	exact, _ := capacityCounts(w.CIDR, w.BlockSize) // zero when cidr or blockSize do not give counts
	for _, f := range []struct {
		name  string
		raw   json.RawMessage
		exact *big.Int
		dst   **big.Int
	}{
		{"addresses", w.Addresses, exact.addresses, &out.Addresses},
		{"blocks", w.Blocks, exact.blocks, &out.Blocks},
		{"addressesPerBlock", w.AddressesPerBlock, exact.perBlock, &out.AddressesPerBlock},
		{"maxNodesOneBlockEach", w.MaxNodesOneBlockEach, exact.blocks, &out.MaxNodesOneBlockEach},
	} {
		n, err := decodeCount(f.name, f.raw, f.exact)
		if err != nil {
			return err
		}
		*f.dst = n
	}
	*c = out
	return nil
}

// decodeCount reads one count (see Capacity.UnmarshalJSON). exact is the
// count the capacity's cidr and blockSize give, nil when they give none.
func decodeCount(field string, raw json.RawMessage, exact *big.Int) (*big.Int, error) {
	text := strings.TrimSpace(string(raw))
	if text == "" || text == "null" {
		return nil, nil
	}
	quoted := strings.HasPrefix(text, `"`)
	if quoted {
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, fmt.Errorf("capacity %s %s: %w", field, raw, err)
		}
	}
	if text != "" && strings.Trim(text, "0123456789") == "" {
		n, _ := new(big.Int).SetString(text, 10)
		// An integer written from a float64 (18446744073709552000 for 2^64)
		// stands for the exact count it rounds from.
		if exact != nil && n.Cmp(exact) != 0 && n.BitLen() > 53 && sameFloat64(n, exact) {
			return new(big.Int).Set(exact), nil
		}
		return n, nil
	}
	if quoted || !strings.ContainsAny(text, "0123456789") {
		return nil, fmt.Errorf("capacity %s %s: want a non-negative decimal integer", field, raw)
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return nil, fmt.Errorf("capacity %s %s: want a non-negative decimal integer: %w", field, text, err)
	}
	if f < 0 || f != math.Trunc(f) {
		return nil, fmt.Errorf("capacity %s %s: want a non-negative decimal integer", field, text)
	}
	if exact != nil {
		if want, _ := new(big.Float).SetInt(exact).Float64(); want == f {
			return new(big.Int).Set(exact), nil
		}
		return nil, fmt.Errorf("capacity %s %s: not exact, and not the count of the pool's cidr and blockSize (%s); want a decimal integer", field, text, exact)
	}
	if f > maxExactFloat {
		return nil, fmt.Errorf("capacity %s %s: not exact beyond 2^53 and the capacity has no cidr and blockSize to count from; want a decimal integer", field, text)
	}
	n, _ := big.NewFloat(f).Int(nil)
	return n, nil
}

// sameFloat64 reports whether a and b round to the same float64.
func sameFloat64(a, b *big.Int) bool {
	fa, _ := new(big.Float).SetInt(a).Float64()
	fb, _ := new(big.Float).SetInt(b).Float64()
	return fa == fb
}

// poolCounts are a pool's counts, as PoolCapacity computes them.
type poolCounts struct {
	addresses, blocks, perBlock *big.Int
}

// capacityCounts computes the counts of a pool with prefix pfx and block
// size bs. The error names the block size when it is outside the family's
// range; an invalid prefix gives zero counts and an error too.
func capacityCounts(pfx netip.Prefix, bs int) (poolCounts, error) {
	if !pfx.IsValid() {
		return poolCounts{}, fmt.Errorf("cidr %q: not a valid prefix", pfx)
	}
	bits := pfx.Addr().BitLen()
	lo, hi := MinBlockSizeIPv4, MaxBlockSizeIPv4
	if bits == 128 {
		lo, hi = MinBlockSizeIPv6, MaxBlockSizeIPv6
	}
	if bs < lo || bs > hi {
		return poolCounts{}, fmt.Errorf("block size for a %s pool must be between %d and %d", cidr.FamilyOf(pfx), lo, hi)
	}
	c := poolCounts{addresses: pow2(bits - pfx.Bits()), perBlock: pow2(bits - bs), blocks: big.NewInt(0)}
	if pfx.Bits() <= bs {
		c.blocks = pow2(bs - pfx.Bits())
	}
	return c, nil
}

// PoolCapacity computes the capacity of a pool and warns when it lies outside
// the cluster CIDR or kube-proxy's clusterCIDR disagrees with it. Malformed
// input (pool CIDR, block size, cluster CIDRs) is an error naming the field.
func PoolCapacity(p IPPool, opts CapacityOptions) (Capacity, error) {
	pfx, err := p.Prefix()
	if err != nil {
		return Capacity{}, err
	}
	bs := p.EffectiveBlockSize()
	counts, err := capacityCounts(pfx, bs)
	if err != nil {
		return Capacity{}, &FieldError{Pool: p.Name, Field: "spec.blockSize", Value: fmt.Sprint(p.Spec.BlockSize), Rule: RuleBlockSizeRange,
			Reason: err.Error()}
	}
	c := Capacity{
		Pool:              p.Name,
		CIDR:              pfx,
		Family:            cidr.FamilyOf(pfx),
		BlockSize:         bs,
		Addresses:         counts.addresses,
		AddressesPerBlock: counts.perBlock,
		Blocks:            counts.blocks,
	}
	if pfx.Bits() > bs {
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

// pow2 is 2^n; capacityCounts calls it with n >= 0 only.
func pow2(n int) *big.Int {
	return new(big.Int).Lsh(big.NewInt(1), uint(n))
}
