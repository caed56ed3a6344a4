// Package subnetenv reads and writes /run/flannel/subnet.env, the file
// flanneld writes on each node and the flannel CNI plugin reads. The flannel
// package (the cluster's view) and the nodenet package (the node's view) share
// it.
package subnetenv

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
)

// The variables flanneld writes (pkg/subnet WriteSubnetFile), in the order it
// writes them.
const (
	Network     = "FLANNEL_NETWORK"
	Subnet      = "FLANNEL_SUBNET"
	IPv6Network = "FLANNEL_IPV6_NETWORK"
	IPv6Subnet  = "FLANNEL_IPV6_SUBNET"
	MTU         = "FLANNEL_MTU"
	IPMasq      = "FLANNEL_IPMASQ"
)

// Env is a parsed subnet.env. Its fields match flannel.SubnetEnv one for one
// (that type converts to and from this one).
type Env struct {
	// Network is FLANNEL_NETWORK.
	Network netip.Prefix
	// Subnet is FLANNEL_SUBNET as written (address with host bits).
	Subnet netip.Prefix
	// IPv6Network is FLANNEL_IPV6_NETWORK.
	IPv6Network netip.Prefix
	// IPv6Subnet is FLANNEL_IPV6_SUBNET as written.
	IPv6Subnet netip.Prefix
	// MTU is FLANNEL_MTU; 0 when missing.
	MTU int
	// IPMasq is FLANNEL_IPMASQ.
	IPMasq bool
	// Extra keeps any other variable, so nothing is lost on a rewrite.
	Extra map[string]string
}

// Error reports input Parse cannot read.
type Error struct {
	// Line is the 1-based line number; 0 when the problem is the whole file.
	Line int
	// Input is the offending line (empty when Line is 0).
	Input string
	// Reason says what is wrong and what would be valid.
	Reason string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Line == 0 {
		return "subnet.env: " + e.Reason
	}
	return fmt.Sprintf("subnet.env line %d %q: %s", e.Line, e.Input, e.Reason)
}

// Parse parses a subnet.env file. It reads the dotenv syntax flanneld reads it
// with (github.com/joho/godotenv): KEY=value lines, optional "export ", '#'
// comments, single or double quotes. Values of the FLANNEL_* variables must be
// what flanneld writes: one CIDR each, an integer MTU and a boolean IPMASQ.
// Errors are *Error.
func Parse(data []byte) (*Env, error) {
	e := &Env{}
	bad := func(line int, input, reason string) error {
		return &Error{Line: line, Input: input, Reason: reason}
	}
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimSpace(strings.TrimPrefix(line, "export "))
		sep := strings.IndexAny(line, "=:")
		if sep <= 0 {
			return nil, bad(n, line, "expected KEY=value")
		}
		key := strings.TrimSpace(line[:sep])
		if !validKey(key) {
			return nil, bad(n, line, "variable name "+strconv.Quote(key)+" must be letters, digits and underscores")
		}
		val, err := value(strings.TrimSpace(line[sep+1:]))
		if err != nil {
			return nil, bad(n, line, err.Error())
		}
		switch key {
		case Network, Subnet, IPv6Network, IPv6Subnet:
			fam := cidr.IPv4
			if key == IPv6Network || key == IPv6Subnet {
				fam = cidr.IPv6
			}
			if strings.Contains(val, ",") {
				return nil, bad(n, line, key+" holds several CIDRs; flanneld writes one and ignores such a value")
			}
			p, err := netip.ParsePrefix(val)
			if err != nil || p.Addr().Zone() != "" || p.Addr().Is4In6() {
				return nil, bad(n, line, key+" must be a CIDR such as "+map[cidr.Family]string{cidr.IPv4: "10.5.34.1/24", cidr.IPv6: "fd00:10:244:5::1/64"}[fam])
			}
			if cidr.FamilyOf(p) != fam {
				return nil, bad(n, line, key+" must be an "+fam.String()+" CIDR")
			}
			switch key {
			case Network:
				e.Network = p.Masked()
			case Subnet:
				e.Subnet = p
			case IPv6Network:
				e.IPv6Network = p.Masked()
			default:
				e.IPv6Subnet = p
			}
		case MTU:
			mtu, err := strconv.Atoi(val)
			if err != nil || mtu <= 0 || mtu > 65535 {
				return nil, bad(n, line, key+" must be an MTU between 1 and 65535")
			}
			e.MTU = mtu
		case IPMasq:
			b, err := strconv.ParseBool(val)
			if err != nil {
				return nil, bad(n, line, key+" must be true or false")
			}
			e.IPMasq = b
		default:
			if e.Extra == nil {
				e.Extra = map[string]string{}
			}
			e.Extra[key] = val
		}
	}
	if !e.Subnet.IsValid() && !e.IPv6Subnet.IsValid() {
		return nil, &Error{Reason: "neither " + Subnet + " nor " + IPv6Subnet + " is set; it was not written by flanneld"}
	}
	return e, nil
}

func validKey(k string) bool {
	for i, r := range k {
		if r == '_' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z') || (i > 0 && (r >= '0' && r <= '9' || r == '.')) {
			continue
		}
		return false
	}
	return k != ""
}

// value unquotes a dotenv value.
func value(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	switch q := v[0]; q {
	case '\'', '"':
		end := strings.LastIndexByte(v, q)
		if end == 0 {
			return "", fmt.Errorf("unterminated %c quote", q)
		}
		if rest := strings.TrimSpace(v[end+1:]); rest != "" && !strings.HasPrefix(rest, "#") {
			return "", fmt.Errorf("unexpected text after the quoted value")
		}
		inner := v[1:end]
		if q == '"' {
			if u, err := strconv.Unquote(`"` + inner + `"`); err == nil {
				return u, nil
			}
		}
		return inner, nil
	}
	if i := strings.Index(v, " #"); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v), nil
}

// Render writes the file the way flanneld writes it: the IPv4 pair, the IPv6
// pair, MTU and IPMASQ, then any extra variables sorted by name.
func (e *Env) Render() []byte {
	var b bytes.Buffer
	if e.Network.IsValid() {
		fmt.Fprintf(&b, "%s=%s\n", Network, e.Network)
	}
	if e.Subnet.IsValid() {
		fmt.Fprintf(&b, "%s=%s\n", Subnet, e.Subnet)
	}
	if e.IPv6Network.IsValid() {
		fmt.Fprintf(&b, "%s=%s\n", IPv6Network, e.IPv6Network)
	}
	if e.IPv6Subnet.IsValid() {
		fmt.Fprintf(&b, "%s=%s\n", IPv6Subnet, e.IPv6Subnet)
	}
	if e.MTU > 0 {
		fmt.Fprintf(&b, "%s=%d\n", MTU, e.MTU)
	}
	fmt.Fprintf(&b, "%s=%v\n", IPMasq, e.IPMasq)
	keys := make([]string, 0, len(e.Extra))
	for k := range e.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := e.Extra[k]
		if strings.ContainsAny(v, " #'\"\\\t") || v == "" {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	return b.Bytes()
}

// Gateway returns subnet's first address with subnet's length, as flanneld
// writes FLANNEL_SUBNET (and as the bridge CNI plugin puts it on cni0). The
// zero Prefix gives the zero Prefix.
func Gateway(p netip.Prefix) netip.Prefix {
	if !p.IsValid() {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(p.Masked().Addr().Next(), p.Bits())
}
