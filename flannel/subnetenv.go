package flannel

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/subnetenv"
)

// DefaultSubnetFile is flanneld's default --subnet-file.
const DefaultSubnetFile = "/run/flannel/subnet.env"

// The variables flanneld writes to subnet.env (pkg/subnet WriteSubnetFile), in
// the order it writes them.
const (
	EnvNetwork     = subnetenv.Network
	EnvSubnet      = subnetenv.Subnet
	EnvIPv6Network = subnetenv.IPv6Network
	EnvIPv6Subnet  = subnetenv.IPv6Subnet
	EnvMTU         = subnetenv.MTU
	EnvIPMasq      = subnetenv.IPMasq
)

// SubnetEnv is /run/flannel/subnet.env, the file flanneld writes on each node
// and the flannel CNI plugin reads:
//
//	FLANNEL_NETWORK=10.5.0.0/16
//	FLANNEL_SUBNET=10.5.34.1/24
//	FLANNEL_MTU=1450
//	FLANNEL_IPMASQ=true
//
// FLANNEL_SUBNET is the node subnet's first address (the cni0 bridge's
// gateway) with the subnet's prefix length, not the subnet itself. IPv6
// variables appear when EnableIPv6 is set.
type SubnetEnv struct {
	// Network is FLANNEL_NETWORK.
	Network netip.Prefix `json:"network,omitzero"`
	// Subnet is FLANNEL_SUBNET as written (address with host bits).
	Subnet netip.Prefix `json:"subnet,omitzero"`
	// IPv6Network is FLANNEL_IPV6_NETWORK.
	IPv6Network netip.Prefix `json:"ipv6Network,omitzero"`
	// IPv6Subnet is FLANNEL_IPV6_SUBNET as written.
	IPv6Subnet netip.Prefix `json:"ipv6Subnet,omitzero"`
	// MTU is FLANNEL_MTU; 0 when missing.
	MTU int `json:"mtu,omitempty"`
	// IPMasq is FLANNEL_IPMASQ.
	IPMasq bool `json:"ipMasq"`
	// Extra keeps any other variable, so nothing is lost on a rewrite.
	Extra map[string]string `json:"extra,omitempty"`
}

// ParseSubnetEnv parses a subnet.env file. It reads the dotenv syntax
// flanneld reads it with (github.com/joho/godotenv): KEY=value lines,
// optional "export ", '#' comments, single or double quotes. Values of the
// FLANNEL_* variables must be what flanneld writes: one CIDR each, an integer
// MTU and a boolean IPMASQ.
func ParseSubnetEnv(data []byte) (*SubnetEnv, error) {
	e, err := subnetenv.Parse(data)
	if err != nil {
		pe := &ParseError{What: "subnet.env", Reason: err.Error(), Err: ErrBadSubnetEnv}
		var se *subnetenv.Error
		if errors.As(err, &se) {
			pe.Reason = se.Reason
			if se.Line > 0 {
				pe.What, pe.Input = "subnet.env line "+strconv.Itoa(se.Line), se.Input
			}
		}
		return nil, pe
	}
	s := SubnetEnv(*e)
	return &s, nil
}

// Render writes the file the way flanneld writes it: the IPv4 pair, the IPv6
// pair, MTU and IPMASQ, then any extra variables sorted by name.
func (e *SubnetEnv) Render() []byte { return (*subnetenv.Env)(e).Render() }

// Lease returns the subnets the file names (FLANNEL_SUBNET with host bits cleared).
func (e *SubnetEnv) Lease() SubnetKey {
	k := SubnetKey{}
	if e.Subnet.IsValid() {
		k.IPv4 = e.Subnet.Masked()
	}
	if e.IPv6Subnet.IsValid() {
		k.IPv6 = e.IPv6Subnet.Masked()
	}
	return k
}

// gateway returns subnet's first address with subnet's length, as flanneld
// writes FLANNEL_SUBNET.
func gateway(p netip.Prefix) netip.Prefix { return subnetenv.Gateway(p) }

// NewSubnetEnv returns what flanneld writes for a node holding subnet k under
// config c, with the backend's MTU and flanneld's --ip-masq.
func NewSubnetEnv(c *Config, k SubnetKey, mtu int, ipMasq bool) *SubnetEnv {
	e := &SubnetEnv{MTU: mtu, IPMasq: ipMasq}
	if c.EnableIPv4 {
		e.Network, e.Subnet = c.Network, gateway(k.IPv4)
	}
	if c.EnableIPv6 {
		e.IPv6Network, e.IPv6Subnet = c.IPv6Network, gateway(k.IPv6)
	}
	return e
}

// SubnetEnvExpectation is what a node's subnet.env should say.
type SubnetEnvExpectation struct {
	// Node names the node, for messages.
	Node string
	// Network and IPv6Network are the config's networks.
	Network     netip.Prefix
	IPv6Network netip.Prefix
	// Subnet is the node's lease (etcd mode) or podCIDRs (kube mode).
	Subnet SubnetKey
	// Source says where Subnet comes from, e.g. the lease key or "podCIDR".
	Source string
}

// CheckSubnetEnv compares a node's subnet.env with its lease or podCIDR. A
// different subnet means the node's bridge still carries the old gateway:
// pods started on it fail until the host clean-up steps are run.
func CheckSubnetEnv(e *SubnetEnv, want SubnetEnvExpectation) []Finding {
	var out []Finding
	node := []string(nil)
	if want.Node != "" {
		node = []string{want.Node}
	}
	src := want.Source
	if src == "" {
		src = "the node's subnet"
	}
	for _, f := range []struct {
		subVar, netVar string
		got, gotNet    netip.Prefix
		want, wantNet  netip.Prefix
	}{
		{EnvSubnet, EnvNetwork, e.Subnet, e.Network, want.Subnet.IPv4, want.Network},
		{EnvIPv6Subnet, EnvIPv6Network, e.IPv6Subnet, e.IPv6Network, want.Subnet.IPv6, want.IPv6Network},
	} {
		if f.want.IsValid() {
			gw := gateway(f.want)
			switch {
			case !f.got.IsValid():
				out = append(out, Finding{Kind: FindingSubnetEnvStale, Severity: cidr.SeverityError, Nodes: node, Subnet: f.want.Masked(),
					Detail: fmt.Sprintf("subnet.env has no %s but %s is %s; flanneld has not written the file for it", f.subVar, src, f.want.Masked())})
			case f.got.Masked() != f.want.Masked():
				out = append(out, Finding{Kind: FindingSubnetEnvStale, Severity: cidr.SeverityError, Nodes: node, Subnet: f.want.Masked(),
					Detail: fmt.Sprintf("subnet.env says %s=%s but %s is %s: the cni0 bridge still carries %s, and new pods fail with "+
						"`failed to set bridge addr: \"cni0\" already has an IP address different from %s`; run the host clean-up steps",
						f.subVar, f.got, src, f.want.Masked(), f.got, gw)})
			case f.got != gw:
				out = append(out, Finding{Kind: FindingSubnetEnvMismatch, Severity: cidr.SeverityWarning, Nodes: node, Subnet: f.want.Masked(),
					Detail: fmt.Sprintf("subnet.env says %s=%s; flanneld writes the subnet's first address, %s", f.subVar, f.got, gw)})
			}
		}
		if f.wantNet.IsValid() && f.gotNet.IsValid() && f.gotNet != f.wantNet {
			out = append(out, Finding{Kind: FindingSubnetEnvMismatch, Severity: cidr.SeverityWarning, Nodes: node, Subnet: f.wantNet,
				Detail: fmt.Sprintf("subnet.env says %s=%s but the config says %s: the file predates the network change; flanneld rewrites it when it restarts",
					f.netVar, f.gotNet, f.wantNet)})
		}
	}
	return out
}
