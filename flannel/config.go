package flannel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
)

// DefaultBackendType is the backend flanneld uses when the config has no Backend.
const DefaultBackendType = "udp"

// backendTypes are the backend types flanneld v0.28 registers.
var backendTypes = []string{"alloc", "extension", "host-gw", "ipip", "ipsec", "tencent-vpc", "udp", "vxlan", "wireguard"}

// BackendTypes returns the backend types flanneld v0.28 registers. flanneld
// lower-cases Backend.Type before looking it up and refuses any other type
// with "unknown backend type: <type>".
func BackendTypes() []string { return slices.Clone(backendTypes) }

// Config is a flannel network config: the JSON stored at <prefix>/config in
// etcd, or the net-conf.json key of the kube-flannel-cfg ConfigMap in kube
// subnet manager mode. Fields hold what flanneld reads, before its defaults
// are applied (see Resolve). Zero addresses and prefixes mean "not set".
type Config struct {
	// EnableIPv4 turns the IPv4 network on; flanneld defaults it to true.
	EnableIPv4 bool `json:"EnableIPv4"`
	// EnableIPv6 turns the IPv6 network on (dual stack or IPv6 only).
	EnableIPv6 bool `json:"EnableIPv6"`
	// EnableNFTables makes flanneld use nftables instead of iptables.
	EnableNFTables bool `json:"EnableNFTables,omitempty"`
	// Network is the IPv4 range every node subnet is cut from. flanneld reads it
	// like net.ParseCIDR: host bits are dropped (and reported in Warnings).
	Network netip.Prefix `json:"Network,omitzero"`
	// SubnetLen is the prefix length of each node's subnet (0: flanneld's default).
	SubnetLen int `json:"SubnetLen,omitempty"`
	// SubnetMin is the first subnet flanneld may lease (zero: the second subnet of Network).
	SubnetMin netip.Addr `json:"SubnetMin,omitzero"`
	// SubnetMax is the last subnet flanneld may lease (zero: the last subnet of Network).
	SubnetMax netip.Addr `json:"SubnetMax,omitzero"`
	// IPv6Network is the IPv6 range, used when EnableIPv6 is set.
	IPv6Network netip.Prefix `json:"IPv6Network,omitzero"`
	// IPv6SubnetLen is the prefix length of each node's IPv6 subnet (0: default).
	IPv6SubnetLen int `json:"IPv6SubnetLen,omitempty"`
	// IPv6SubnetMin is the first IPv6 subnet flanneld may lease.
	IPv6SubnetMin netip.Addr `json:"IPv6SubnetMin,omitzero"`
	// IPv6SubnetMax is the last IPv6 subnet flanneld may lease.
	IPv6SubnetMax netip.Addr `json:"IPv6SubnetMax,omitzero"`
	// BackendType is Backend.Type, or DefaultBackendType when there is no Backend.
	BackendType string `json:"BackendType"`
	// Backend is the Backend object as written (backend-specific settings such as
	// the VXLAN VNI).
	Backend json.RawMessage `json:"Backend,omitempty"`
	// Warnings lists values flanneld silently reinterprets (host bits dropped).
	Warnings []string `json:"Warnings,omitempty"`
}

// rawConfig mirrors flanneld's subnet.Config for decoding: encoding/json
// matches field names case-insensitively and ignores unknown fields, as
// flanneld does; address fields are decoded by hand to report clear errors.
type rawConfig struct {
	EnableIPv4     *bool
	EnableIPv6     bool
	EnableNFTables bool
	Network        json.RawMessage
	IPv6Network    json.RawMessage
	SubnetMin      json.RawMessage
	SubnetMax      json.RawMessage
	IPv6SubnetMin  json.RawMessage
	IPv6SubnetMax  json.RawMessage
	SubnetLen      *uint
	IPv6SubnetLen  *uint
	Backend        json.RawMessage
}

// ParseConfig parses a flannel network config the way flanneld's ParseConfig
// does: field names match case-insensitively, unknown fields are ignored,
// EnableIPv4 defaults to true and the backend type to "udp". It does not
// apply flanneld's defaults and range checks; Resolve does.
func ParseConfig(data []byte) (*Config, error) {
	var rc rawConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&rc); err != nil {
		return nil, jsonConfigError(err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, &ConfigError{Field: "JSON", Reason: "unexpected data after the top-level object", Flanneld: "invalid character after top-level value"}
	}
	c := &Config{EnableIPv4: true, EnableIPv6: rc.EnableIPv6, EnableNFTables: rc.EnableNFTables}
	if rc.EnableIPv4 != nil {
		c.EnableIPv4 = *rc.EnableIPv4
	}
	var errs []error
	var err error
	var warn string
	if c.Network, warn, err = parseNetworkField("Network", rc.Network, cidr.IPv4); err != nil {
		errs = append(errs, err)
	} else if warn != "" {
		c.Warnings = append(c.Warnings, warn)
	}
	if c.IPv6Network, warn, err = parseNetworkField("IPv6Network", rc.IPv6Network, cidr.IPv6); err != nil {
		errs = append(errs, err)
	} else if warn != "" {
		c.Warnings = append(c.Warnings, warn)
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		fam  cidr.Family
		dst  *netip.Addr
	}{
		{"SubnetMin", rc.SubnetMin, cidr.IPv4, &c.SubnetMin},
		{"SubnetMax", rc.SubnetMax, cidr.IPv4, &c.SubnetMax},
		{"IPv6SubnetMin", rc.IPv6SubnetMin, cidr.IPv6, &c.IPv6SubnetMin},
		{"IPv6SubnetMax", rc.IPv6SubnetMax, cidr.IPv6, &c.IPv6SubnetMax},
	} {
		if *f.dst, err = parseAddrField(f.name, f.raw, f.fam); err != nil {
			errs = append(errs, err)
		}
	}
	if rc.SubnetLen != nil {
		if *rc.SubnetLen > 128 {
			errs = append(errs, &ConfigError{Field: "SubnetLen", Value: strconv.FormatUint(uint64(*rc.SubnetLen), 10),
				Reason: "must be a prefix length of at most 30", Flanneld: "SubnetLen must be less than /31"})
		} else {
			c.SubnetLen = int(*rc.SubnetLen)
		}
	}
	if rc.IPv6SubnetLen != nil {
		if *rc.IPv6SubnetLen > 255 {
			errs = append(errs, &ConfigError{Field: "IPv6SubnetLen", Value: strconv.FormatUint(uint64(*rc.IPv6SubnetLen), 10),
				Reason: "must be a prefix length of at most 126", Flanneld: "SubnetLen must be less than /127"})
		} else {
			c.IPv6SubnetLen = int(*rc.IPv6SubnetLen)
		}
	}
	c.Backend = rc.Backend
	if bt, err := parseBackendType(rc.Backend); err != nil {
		errs = append(errs, err)
	} else {
		c.BackendType = bt
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// jsonConfigError turns an encoding/json error into a ConfigError naming the field.
func jsonConfigError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			return &ConfigError{Field: "JSON", Value: te.Value, Reason: "the config must be a JSON object", Flanneld: err.Error()}
		}
		want := "a JSON " + te.Type.String()
		switch te.Type.String() {
		case "bool":
			want = "true or false"
		case "uint":
			want = "a non-negative integer prefix length"
		}
		return &ConfigError{Field: field, Value: te.Value, Reason: "must be " + want, Flanneld: err.Error()}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &ConfigError{Field: "JSON", Reason: fmt.Sprintf("not valid JSON at byte %d: %v", se.Offset, err), Flanneld: err.Error()}
	}
	return &ConfigError{Field: "JSON", Reason: "not valid JSON: " + err.Error(), Flanneld: err.Error()}
}

// jsonString decodes raw as a JSON string.
func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

func parseNetworkField(field string, raw json.RawMessage, fam cidr.Family) (netip.Prefix, string, error) {
	if raw == nil {
		return netip.Prefix{}, "", nil
	}
	example := "10.244.0.0/16"
	if fam == cidr.IPv6 {
		example = "fd00:10:244::/56"
	}
	s, ok := jsonString(raw)
	if !ok || string(raw) == "null" {
		return netip.Prefix{}, "", &ConfigError{Field: field, Value: string(raw), Reason: "must be a CIDR string such as " + strconv.Quote(example),
			Flanneld: "invalid CIDR address: " + strings.Trim(string(raw), `"`)}
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, "", &ConfigError{Field: field, Value: s, Reason: "not a CIDR; write it like " + strconv.Quote(example),
			Flanneld: "invalid CIDR address: " + s}
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, "", &ConfigError{Field: field, Value: s, Reason: "IPv4-mapped IPv6 ranges are not supported; write it like " + strconv.Quote(example)}
	}
	if cidr.FamilyOf(p) != fam {
		reason := "must be an IPv4 CIDR; IPv6 ranges go in IPv6Network (flanneld panics on this value)"
		if fam == cidr.IPv6 {
			reason = "must be an IPv6 CIDR; IPv4 ranges go in Network"
		}
		return netip.Prefix{}, "", &ConfigError{Field: field, Value: s, Reason: reason}
	}
	warn := ""
	if p.Masked() != p {
		warn = fmt.Sprintf("%s %s has host bits set; flanneld uses %s", field, s, p.Masked())
	}
	return p.Masked(), warn, nil
}

func parseAddrField(field string, raw json.RawMessage, fam cidr.Family) (netip.Addr, error) {
	if raw == nil || (fam == cidr.IPv6 && string(raw) == "null") {
		return netip.Addr{}, nil
	}
	s, ok := jsonString(raw)
	if !ok || string(raw) == "null" {
		return netip.Addr{}, &ConfigError{Field: field, Value: string(raw), Reason: "must be an IP address string",
			Flanneld: "invalid IP address format"}
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.Is4In6() {
		return netip.Addr{}, &ConfigError{Field: field, Value: s, Reason: "not an IP address", Flanneld: "invalid IP address format"}
	}
	if (fam == cidr.IPv4) != a.Is4() {
		return netip.Addr{}, &ConfigError{Field: field, Value: s, Reason: "must be an " + fam.String() + " address"}
	}
	if a.IsUnspecified() {
		return netip.Addr{}, nil // flanneld treats 0.0.0.0 and :: as "not set"
	}
	return a, nil
}

// parseBackendType is flanneld's parseBackendType: no Backend means "udp".
func parseBackendType(be json.RawMessage) (string, error) {
	if len(be) == 0 {
		return DefaultBackendType, nil
	}
	var bt struct{ Type string }
	if err := json.Unmarshal(be, &bt); err != nil {
		return "", &ConfigError{Field: "Backend", Value: truncate(string(be), 80), Reason: `must be an object such as {"Type": "vxlan"}`,
			Flanneld: "error decoding Backend property of config: " + err.Error()}
	}
	return bt.Type, nil
}

// Layout is what flanneld derives from a config for one IP family once its
// defaults are applied: the range node subnets are cut from, their size, and
// the first and last subnet it may lease.
type Layout struct {
	Family cidr.Family `json:"family"`
	// Network is the range every node subnet is cut from.
	Network netip.Prefix `json:"network"`
	// SubnetLen is the prefix length of each node subnet.
	SubnetLen int `json:"subnetLen"`
	// SubnetMin and SubnetMax are the first and last subnet flanneld may lease.
	// By default the first and the last subnet of Network are never leased.
	SubnetMin netip.Addr `json:"subnetMin"`
	SubnetMax netip.Addr `json:"subnetMax"`
	// Subnets is how many subnets lie in SubnetMin..SubnetMax: the most nodes
	// this network can hold.
	Subnets *big.Int `json:"subnets"`
	// Defaulted names the fields flanneld filled in because the config left them unset.
	Defaulted []string `json:"defaulted,omitempty"`
}

// Compatible reports whether flanneld keeps a lease on subnet p under this
// layout (isSubnetConfigCompat): its address lies in SubnetMin..SubnetMax and
// its length is SubnetLen. flanneld deletes an incompatible lease of its own
// node at start-up and leases a new subnet.
func (l *Layout) Compatible(p netip.Prefix) bool {
	if l == nil || !p.IsValid() || p.Addr().Is4() != l.Network.Addr().Is4() {
		return false
	}
	return p.Bits() == l.SubnetLen && p.Addr().Compare(l.SubnetMin) >= 0 && p.Addr().Compare(l.SubnetMax) <= 0
}

// Resolved is a config with flanneld's defaults applied and its checks passed
// (pkg/subnet CheckNetworkConfig, as the etcd subnet manager runs it).
type Resolved struct {
	// BackendType is the backend, lower-cased as flanneld looks it up.
	BackendType string `json:"backendType"`
	// IPv4 is nil when EnableIPv4 is false.
	IPv4 *Layout `json:"ipv4,omitempty"`
	// IPv6 is nil when EnableIPv6 is false.
	IPv6 *Layout `json:"ipv6,omitempty"`
	// Warnings are settings flanneld accepts but that cannot work as intended.
	Warnings []string `json:"warnings,omitempty"`
}

// Layout returns the layout of family f, or nil.
func (r *Resolved) Layout(f cidr.Family) *Layout {
	if r == nil {
		return nil
	}
	if f == cidr.IPv6 {
		return r.IPv6
	}
	return r.IPv4
}

// Resolve applies flanneld's rules for the etcd subnet manager
// (CheckNetworkConfig) and returns the resulting layouts:
//
//   - With EnableIPv4, Network must be set. SubnetLen, when set, must be at
//     most 30 and at least Network's length + 2, so Network holds at least
//     four subnets. When unset it defaults to 24 if Network is a /22 or
//     larger, else to Network's length + 2; a Network smaller than a /28 is
//     refused.
//   - SubnetMin defaults to the second subnet of Network and SubnetMax to the
//     last one (the first subnet is never leased: its first address would be
//     Network's own address). Both must lie in Network and on a SubnetLen
//     boundary.
//   - IPv6 follows the same rules with 126 as the longest length, 64 as the
//     default (for networks of /62 or larger) and /124 as the smallest network.
//   - Backend.Type must be a backend flanneld knows (see BackendTypes).
//
// The kube subnet manager does not run these checks: there the node podCIDRs
// decide the subnets (see AuditKube).
func (c *Config) Resolve() (*Resolved, error) {
	r := &Resolved{BackendType: strings.ToLower(c.BackendType)}
	var errs []error
	if !slices.Contains(backendTypes, r.BackendType) {
		errs = append(errs, &ConfigError{Field: "Backend.Type", Value: c.BackendType,
			Reason: "flanneld knows " + strings.Join(backendTypes, ", "), Flanneld: "unknown backend type: " + r.BackendType})
	}
	if !c.EnableIPv4 && !c.EnableIPv6 {
		errs = append(errs, &ConfigError{Field: "EnableIPv4", Value: "false", Reason: "with EnableIPv6 also false there is no network at all"})
	}
	if c.EnableIPv4 {
		l, w, err := resolveFamily(familyFields{
			fam: cidr.IPv4, network: c.Network, subnetLen: c.SubnetLen, min: c.SubnetMin, max: c.SubnetMax,
			netField: "Network", lenField: "SubnetLen", minField: "SubnetMin", maxField: "SubnetMax",
			maxLen: 30, minNetworkLen: 28, defaultLen: 24,
		})
		if err != nil {
			errs = append(errs, err)
		}
		r.IPv4 = l
		r.Warnings = append(r.Warnings, w...)
	}
	if c.EnableIPv6 {
		l, w, err := resolveFamily(familyFields{
			fam: cidr.IPv6, network: c.IPv6Network, subnetLen: c.IPv6SubnetLen, min: c.IPv6SubnetMin, max: c.IPv6SubnetMax,
			netField: "IPv6Network", lenField: "IPv6SubnetLen", minField: "IPv6SubnetMin", maxField: "IPv6SubnetMax",
			maxLen: 126, minNetworkLen: 124, defaultLen: 64,
		})
		if err != nil {
			errs = append(errs, err)
		}
		r.IPv6 = l
		r.Warnings = append(r.Warnings, w...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return r, nil
}

type familyFields struct {
	fam                                    cidr.Family
	network                                netip.Prefix
	subnetLen                              int
	min, max                               netip.Addr
	netField, lenField, minField, maxField string
	maxLen, minNetworkLen, defaultLen      int
}

func resolveFamily(f familyFields) (*Layout, []string, error) {
	if !f.network.IsValid() || (f.network.Bits() == 0 && f.network.Addr().IsUnspecified()) {
		return nil, nil, &ConfigError{Field: f.netField, Value: prefixText(f.network), Reason: "must be set to the " + f.fam.String() + " range node subnets are cut from",
			Flanneld: "please define a correct " + f.netField + " parameter in the flannel config"}
	}
	l := &Layout{Family: f.fam, Network: f.network, SubnetLen: f.subnetLen}
	plen := f.network.Bits()
	bits := f.network.Addr().BitLen()
	if f.subnetLen > 0 {
		if f.subnetLen > f.maxLen {
			return nil, nil, &ConfigError{Field: f.lenField, Value: strconv.Itoa(f.subnetLen),
				Reason:   fmt.Sprintf("must be at most %d: each node needs room for a bridge and a tunnel address", f.maxLen),
				Flanneld: fmt.Sprintf("SubnetLen must be less than /%d", f.maxLen+1)}
		}
		if f.subnetLen < plen+2 {
			return nil, nil, &ConfigError{Field: f.lenField, Value: strconv.Itoa(f.subnetLen),
				Reason:   fmt.Sprintf("must be at least %d so that %s %s holds four subnets or more", plen+2, f.netField, f.network),
				Flanneld: "network must be able to accommodate at least four subnets"}
		}
	} else {
		switch {
		case plen > f.minNetworkLen:
			msg := "network is too small. Minimum useful network prefix is /28"
			if f.fam == cidr.IPv6 {
				msg = "IPv6Network is too small. Minimum useful network prefix is /124"
			}
			return nil, nil, &ConfigError{Field: f.netField, Value: f.network.String(),
				Reason: fmt.Sprintf("a /%d or larger is needed (four subnets of at least four addresses)", f.minNetworkLen), Flanneld: msg}
		case plen <= f.defaultLen-2:
			l.SubnetLen = f.defaultLen
		default:
			l.SubnetLen = plen + 2
		}
		l.Defaulted = append(l.Defaulted, f.lenField)
	}
	size := subnetSize(bits, l.SubnetLen)
	netInt := addrInt(f.network.Addr())
	if !f.min.IsValid() {
		l.SubnetMin, _ = intAddr(new(big.Int).Add(netInt, size), f.network.Addr())
		l.Defaulted = append(l.Defaulted, f.minField)
	} else if !f.network.Contains(f.min) {
		return nil, nil, &ConfigError{Field: f.minField, Value: f.min.String(), Reason: "must lie in " + f.netField + " " + f.network.String(),
			Flanneld: f.minField + " is not in the range of the " + f.netField}
	} else {
		l.SubnetMin = f.min
	}
	if !f.max.IsValid() {
		end := new(big.Int).Add(netInt, subnetSize(bits, plen))
		l.SubnetMax, _ = intAddr(end.Sub(end, size), f.network.Addr())
		l.Defaulted = append(l.Defaulted, f.maxField)
	} else if !f.network.Contains(f.max) {
		return nil, nil, &ConfigError{Field: f.maxField, Value: f.max.String(), Reason: "must lie in " + f.netField + " " + f.network.String(),
			Flanneld: f.maxField + " is not in the range of the " + f.netField}
	} else {
		l.SubnetMax = f.max
	}
	for _, m := range []struct {
		field string
		a     netip.Addr
	}{{f.minField, l.SubnetMin}, {f.maxField, l.SubnetMax}} {
		if p := netip.PrefixFrom(m.a, l.SubnetLen); p.Masked().Addr() != m.a {
			return nil, nil, &ConfigError{Field: m.field, Value: m.a.String(),
				Reason:   fmt.Sprintf("must start a /%d subnet, e.g. %s", l.SubnetLen, p.Masked().Addr()),
				Flanneld: fmt.Sprintf("%s is not on a SubnetLen boundary: %s", m.field, m.a)}
		}
	}
	l.Subnets = rangeCount(l.SubnetMin, l.SubnetMax, l.SubnetLen)
	var warns []string
	if l.Subnets.Sign() == 0 {
		warns = append(warns, fmt.Sprintf("%s %s is after %s %s: flanneld accepts the config but can lease no subnet (\"out of subnets\")",
			f.minField, l.SubnetMin, f.maxField, l.SubnetMax))
	}
	return l, warns, nil
}

func prefixText(p netip.Prefix) string {
	if !p.IsValid() {
		return ""
	}
	return p.String()
}
