package flannel

import (
	"net/netip"
	"regexp"
	"strconv"
)

// subnetKeyRegex is flanneld's own pattern (pkg/subnet ParseSubnetKey). It is
// not anchored at the start and its dots are unescaped; the addresses are then
// checked by the IP parser, as flanneld does.
var subnetKeyRegex = regexp.MustCompile(`(\d+\.\d+.\d+.\d+)-(\d+)(?:&([a-f\d:]+)-(\d+))?$`)

// SubnetKey is the subnet a lease key names: an IPv4 subnet, plus an IPv6 subnet
// for dual-stack leases. Its String form is the last element of the etcd key,
// e.g. "10.5.34.0-24" or "10.5.34.0-24&fd00:10:244:5::-64".
type SubnetKey struct {
	IPv4 netip.Prefix `json:"ipv4"`
	IPv6 netip.Prefix `json:"ipv6,omitzero"`
}

// ParseSubnetKey parses the name of a lease key (the part after
// "<prefix>/subnets/") exactly as flanneld does: IPv4 prefix lengths 0..31,
// IPv6 prefix lengths 0..127, lowercase IPv6 hex. Like flanneld it keeps host
// bits; use Canonical to learn whether flanneld would write the same name.
func ParseSubnetKey(name string) (SubnetKey, error) {
	m := subnetKeyRegex.FindStringSubmatch(name)
	if m == nil {
		return SubnetKey{}, &ParseError{What: "subnet key", Input: name, Err: ErrBadKey,
			Reason: `flanneld expects "<IPv4>-<len>" or "<IPv4>-<len>&<IPv6>-<len>", e.g. "10.5.34.0-24"; it ignores this key`}
	}
	a4, err := netip.ParseAddr(m[1])
	if err != nil || !a4.Is4() {
		return SubnetKey{}, &ParseError{What: "subnet key", Input: name, Err: ErrBadKey,
			Reason: strconv.Quote(m[1]) + " is not an IPv4 address; flanneld ignores this key"}
	}
	l4, err := strconv.ParseUint(m[2], 10, 5)
	if err != nil {
		return SubnetKey{}, &ParseError{What: "subnet key", Input: name, Err: ErrBadKey,
			Reason: "IPv4 prefix length " + strconv.Quote(m[2]) + " is not in 0..31; flanneld ignores this key"}
	}
	k := SubnetKey{IPv4: netip.PrefixFrom(a4, int(l4))}
	if m[3] != "" {
		a6, err := netip.ParseAddr(m[3])
		if err != nil || !a6.Is6() {
			return SubnetKey{}, &ParseError{What: "subnet key", Input: name, Err: ErrBadKey,
				Reason: strconv.Quote(m[3]) + " is not an IPv6 address; flanneld ignores this key"}
		}
		l6, err := strconv.ParseUint(m[4], 10, 7)
		if err != nil {
			return SubnetKey{}, &ParseError{What: "subnet key", Input: name, Err: ErrBadKey,
				Reason: "IPv6 prefix length " + strconv.Quote(m[4]) + " is not in 0..127; flanneld ignores this key"}
		}
		k.IPv6 = netip.PrefixFrom(a6, int(l6))
	}
	return k, nil
}

// String renders the key name the way flanneld writes it (MakeSubnetKey).
func (k SubnetKey) String() string {
	s := k.IPv4.Addr().String() + "-" + strconv.Itoa(k.IPv4.Bits())
	if k.IPv6.IsValid() {
		s += "&" + k.IPv6.Addr().String() + "-" + strconv.Itoa(k.IPv6.Bits())
	}
	return s
}

// Canonical reports whether name is exactly what flanneld would write for k
// and k's subnets have no host bits. Keys that parse but are not canonical
// were not written by flanneld.
func (k SubnetKey) Canonical(name string) bool {
	if k.IPv4.Masked() != k.IPv4 || (k.IPv6.IsValid() && k.IPv6.Masked() != k.IPv6) {
		return false
	}
	return k.String() == name
}

// IsZero reports whether k is the zero SubnetKey.
func (k SubnetKey) IsZero() bool { return !k.IPv4.IsValid() && !k.IPv6.IsValid() }

// prefixes returns the valid subnets of k.
func (k SubnetKey) prefixes() []netip.Prefix {
	var out []netip.Prefix
	if k.IPv4.IsValid() {
		out = append(out, k.IPv4)
	}
	if k.IPv6.IsValid() {
		out = append(out, k.IPv6)
	}
	return out
}
