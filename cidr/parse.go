package cidr

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Family is an IP address family.
type Family int

// The two IP families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// String returns "IPv4" or "IPv6".
func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return "unknown"
}

// MarshalText encodes the family as "IPv4" or "IPv6".
func (f Family) MarshalText() ([]byte, error) {
	if f != IPv4 && f != IPv6 {
		return nil, fmt.Errorf("%w: unknown family %d", ErrFamily, int(f))
	}
	return []byte(f.String()), nil
}

// UnmarshalText decodes "IPv4" or "IPv6" (case-insensitive; "4" and "6" too).
func (f *Family) UnmarshalText(b []byte) error {
	switch strings.ToLower(string(b)) {
	case "ipv4", "4":
		*f = IPv4
	case "ipv6", "6":
		*f = IPv6
	default:
		return fmt.Errorf("%w: %q is not IPv4 or IPv6", ErrFamily, b)
	}
	return nil
}

// FamilyOf returns the family of p.
func FamilyOf(p netip.Prefix) Family {
	if p.Addr().Is4() {
		return IPv4
	}
	return IPv6
}

// AddrBits returns the address width of family f: 32 or 128.
func (f Family) AddrBits() int {
	if f == IPv4 {
		return 32
	}
	return 128
}

// Warning is something a lenient parse accepted but that a person should know:
// the component silently uses a different value than the one written down.
type Warning struct {
	// Input is the text as written.
	Input string
	// Canonical is what the component actually uses.
	Canonical netip.Prefix
	// Reason says what was changed.
	Reason string
}

func (w Warning) String() string {
	return fmt.Sprintf("%s %s; Kubernetes components use %s", w.Input, w.Reason, w.Canonical)
}

// Parse parses one CIDR typed by a user for a new layout. It is strict: it
// rejects host bits (naming the canonical network), IPv4-mapped IPv6, zones,
// leading zeros and anything netip.ParsePrefix rejects.
func Parse(s string) (netip.Prefix, error) {
	p, canon, err := parse(s, false)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p != canon {
		return netip.Prefix{}, &ParseError{Input: strings.TrimSpace(s), Canonical: canon, Err: ErrHostBitsSet}
	}
	return p, nil
}

// ParseLenient parses one CIDR read from a running component, the way the
// component parses it (Go's net.ParseCIDR via k8s.io/utils/net's sloppy parser):
// host bits are dropped and IPv4 octets may carry leading zeros (read as
// decimal). It returns the canonical prefix, and a warning when what the
// component uses differs from the text.
func ParseLenient(s string) (netip.Prefix, *Warning, error) {
	p, canon, err := parse(s, true)
	if err != nil {
		return netip.Prefix{}, nil, err
	}
	in := strings.TrimSpace(s)
	switch {
	case p != canon:
		return canon, &Warning{Input: in, Canonical: canon, Reason: "has host bits set"}, nil
	case canon.String() != in:
		return canon, &Warning{Input: in, Canonical: canon, Reason: "is not in canonical form"}, nil
	}
	return canon, nil, nil
}

// MustParse is Parse for constants in programs and tests; it panics on error.
func MustParse(s string) netip.Prefix {
	p, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return p
}

// parse returns the prefix as written (with host bits) and its canonical form.
func parse(s string, lenient bool) (netip.Prefix, netip.Prefix, error) {
	in := strings.TrimSpace(s)
	fail := func(sentinel error, detail string) (netip.Prefix, netip.Prefix, error) {
		return netip.Prefix{}, netip.Prefix{}, &ParseError{Input: in, Err: sentinel, Detail: detail}
	}
	if in == "" {
		return fail(ErrEmpty, "")
	}
	if strings.Contains(in, "%") {
		return fail(ErrZone, "IPv6 zones are not allowed in a CIDR")
	}
	slash := strings.LastIndexByte(in, '/')
	if slash < 0 {
		return fail(ErrSyntax, "missing /prefix-length, want e.g. 10.244.0.0/16")
	}
	addrText, bitsText := in[:slash], in[slash+1:]
	addr, err := netip.ParseAddr(addrText)
	if err != nil && lenient {
		addr, err = parseSloppyIPv4(addrText)
	}
	if err != nil {
		return fail(ErrSyntax, fmt.Sprintf("%q is not an IP address", addrText))
	}
	if addr.Is4In6() {
		return fail(ErrMappedIPv6, "IPv4-mapped IPv6 addresses are not allowed; write the IPv4 CIDR instead")
	}
	bits, err := strconv.Atoi(bitsText)
	if err != nil || bitsText == "" || (len(bitsText) > 1 && bitsText[0] == '0') || bitsText[0] == '+' || bitsText[0] == '-' {
		return fail(ErrSyntax, fmt.Sprintf("prefix length %q is not a number", bitsText))
	}
	if bits < 0 || bits > addr.BitLen() {
		return fail(ErrSyntax, fmt.Sprintf("prefix length %d is out of range for %s (0-%d)", bits, FamilyOf(netip.PrefixFrom(addr, 0)), addr.BitLen()))
	}
	p := netip.PrefixFrom(addr, bits)
	return p, p.Masked(), nil
}

// parseSloppyIPv4 accepts dotted-quad IPv4 with leading zeros, read as
// decimal, as k8s.io/utils/net.ParseIPSloppy does.
func parseSloppyIPv4(s string) (netip.Addr, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return netip.Addr{}, fmt.Errorf("%w: %q", ErrSyntax, s)
	}
	var b [4]byte
	for i, part := range parts {
		if part == "" || len(part) > 3 {
			return netip.Addr{}, fmt.Errorf("%w: %q", ErrSyntax, s)
		}
		n := 0
		for _, c := range part {
			if c < '0' || c > '9' {
				return netip.Addr{}, fmt.Errorf("%w: %q", ErrSyntax, s)
			}
			n = n*10 + int(c-'0')
		}
		if n > 255 {
			return netip.Addr{}, fmt.Errorf("%w: %q", ErrSyntax, s)
		}
		b[i] = byte(n)
	}
	return netip.AddrFrom4(b), nil
}

// ParseList parses a comma-separated list typed by a user: one CIDR, or a
// dual-stack pair with one CIDR of each family (the order is kept: the first
// is the primary family). Each element is parsed with Parse.
func ParseList(s string) ([]netip.Prefix, error) {
	return parseList(s, func(item string) (netip.Prefix, error) { return Parse(item) })
}

// ParseListLenient is ParseList for values read from a running component;
// elements are parsed with ParseLenient and their warnings collected.
func ParseListLenient(s string) ([]netip.Prefix, []Warning, error) {
	var warnings []Warning
	ps, err := parseList(s, func(item string) (netip.Prefix, error) {
		p, w, err := ParseLenient(item)
		if w != nil {
			warnings = append(warnings, *w)
		}
		return p, err
	})
	return ps, warnings, err
}

func parseList(s string, one func(string) (netip.Prefix, error)) ([]netip.Prefix, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return nil, &ParseError{Input: in, Err: ErrEmpty}
	}
	items := strings.Split(in, ",")
	if len(items) > 2 {
		return nil, &ParseError{Input: in, Err: ErrDualStack,
			Detail: fmt.Sprintf("%d CIDRs given; at most two are allowed, one IPv4 and one IPv6", len(items))}
	}
	out := make([]netip.Prefix, 0, len(items))
	for _, item := range items {
		p, err := one(item)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if len(out) == 2 && FamilyOf(out[0]) == FamilyOf(out[1]) {
		return nil, &ParseError{Input: in, Err: ErrDualStack,
			Detail: fmt.Sprintf("a dual-stack pair needs one IPv4 and one IPv6 CIDR, got two %s CIDRs", FamilyOf(out[0]))}
	}
	return out, nil
}
