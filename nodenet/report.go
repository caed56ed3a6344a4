package nodenet

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
)

// Code names what an audit found.
type Code string

// The finding codes.
const (
	// CodeBridgeAddress: the bridge holds an address other than the gateway
	// of the node's podCIDR; the bridge plugin refuses new pods with
	// `failed to set bridge addr: "cni0" already has an IP address different from ...`.
	CodeBridgeAddress Code = "bridge-address"
	// CodeBridgeMissing: no bridge yet; the bridge plugin creates it, with
	// the gateway address, for the first pod. Informational.
	CodeBridgeMissing Code = "bridge-missing"
	// CodeVTEPMissing: the vxlan device is missing; flanneld creates it when it
	// starts. Nothing nodenet can do.
	CodeVTEPMissing Code = "vtep-missing"
	// CodeVTEPAddress: the vxlan device's address is not the podCIDR's
	// network address /32.
	CodeVTEPAddress Code = "vtep-address"
	// CodeVTEPMAC: the vxlan device's MAC is not the one the node announces,
	// so other nodes' packets for it are dropped.
	CodeVTEPMAC Code = "vtep-mac"
	// CodeRouteMissing: no route to a peer's subnet (or to an old subnet its
	// pods still hold).
	CodeRouteMissing Code = "route-missing"
	// CodeRouteWrong: the route to a peer's subnet leads elsewhere.
	CodeRouteWrong Code = "route-wrong"
	// CodeRouteStale: a route into the pod network leads to a subnet no node
	// holds.
	CodeRouteStale Code = "route-stale"
	// CodeRouteOwnSubnet: a route sends traffic for this node's own podCIDR
	// through a gateway instead of the bridge. flanneld leaves one behind
	// when it still ran with the node's old lease as the node got its new
	// podCIDR (it took the new lease for a peer's), and the new flanneld
	// skips its own lease, so it never removes it: new pods are cut off.
	CodeRouteOwnSubnet Code = "route-own-subnet"
	// CodeRouteDuplicate: several routes to the same subnet.
	CodeRouteDuplicate Code = "route-duplicate"
	// CodeNeighbourMissing (vxlan): the VTEP has no neighbour entry for a
	// peer's VTEP address (the .0 of its podCIDR), so the route to the peer
	// leads nowhere. flanneld deletes it when a node that shared the peer's
	// podCIDR is deleted (a duplicate being fixed), and a flanneld whose
	// delete of an entry already gone fails retries it with backoff for up
	// to a minute, holding every later lease event back.
	CodeNeighbourMissing Code = "neighbour-missing"
	// CodeFDBMissing (vxlan): an entry of Want.FDB is not on the VTEP.
	CodeFDBMissing Code = "fdb-missing"
	// CodeReservationLeaked: a host-local reservation outside the podCIDR that
	// no live pod holds.
	CodeReservationLeaked Code = "reservation-leaked"
	// CodeReservationLive: a host-local reservation outside the podCIDR held
	// by a live pod; it goes when the pod is recreated. A warning.
	CodeReservationLive Code = "reservation-live"
	// CodeReservationUnknown: a reservation outside the podCIDR whose owner
	// cannot be told (Want.LivePodsComplete is false). A warning.
	CodeReservationUnknown Code = "reservation-unknown"
	// CodeSubnetEnvMissing: RunFlannelDir has no subnet.env; flanneld writes it
	// when it starts. Nothing nodenet can do.
	CodeSubnetEnvMissing Code = "subnet-env-missing"
	// CodeSubnetEnvInvalid: subnet.env cannot be read.
	CodeSubnetEnvInvalid Code = "subnet-env-invalid"
	// CodeSubnetEnvSubnet: FLANNEL_SUBNET is not the node's podCIDR (an error)
	// or not its first address (a warning).
	CodeSubnetEnvSubnet Code = "subnet-env-subnet"
	// CodeSubnetEnvNetwork: FLANNEL_NETWORK is not the Network.
	CodeSubnetEnvNetwork Code = "subnet-env-network"
	// CodeRuleStale: a MASQUERADE rule in nat POSTROUTING, or a rule of
	// FLANNEL-POSTRTG or FLANNEL-FWD, names an old range.
	CodeRuleStale Code = "rule-stale"
	// CodeMasqKeepMissing: live pods still hold old addresses but
	// FLANNEL-POSTRTG has no RETURN rule for them, so flannel's MASQUERADE
	// rewrites their source address.
	CodeMasqKeepMissing Code = "masq-keep-missing"
	// CodeOldGatewayMissing: live pods hold addresses in an old subnet of
	// the node, but neither the bridge holds that subnet's gateway nor the
	// transition serves it (or only in part: the transition veth down, the
	// bridge's proxy entry or route to the subnet missing): the old pods
	// lost their default gateway. Fixed by set-transition.
	CodeOldGatewayMissing Code = "old-gateway-missing"
	// CodeTransitionActive: the make-before-break transition (the bridge
	// answering for an old gateway as a proxy) is in place and live pods still use it, or the
	// live pods are not known. An error, so Verify does not pass while it
	// lasts; its teardown is planned and deferred.
	CodeTransitionActive Code = "transition-active"
	// CodeTransitionLeft: the transition is still there but no live
	// pod holds an address in the old subnets it serves; it is deleted.
	CodeTransitionLeft Code = "transition-left"
	// CodeTransitionRouteLeft: a route to a subnet that a listed peer no
	// longer claims leads through that peer's VTEP (vxlan) or address
	// (host-gw): the transition route to its old subnet, left after its old
	// pods are gone. Reported (and deleted) when PeersComplete is false;
	// with the complete list of peers such a route is CodeRouteStale.
	CodeTransitionRouteLeft Code = "transition-route-left"
	// CodeStandbyMissing: a peer lists a NextPodCIDR (it is about to be
	// re-created with it) and the standby for its pods is missing here: the
	// route to its PodCIDR at StandbyMetric, and with vxlan the neighbour
	// entry of its next VTEP address or the VTEP's default FDB entry to its
	// address (the FDB entry also while it lists OldPodCIDRs).
	CodeStandbyMissing Code = "standby-missing"
	// CodeStandbyLeft: the VTEP's default FDB entry to a listed peer that
	// lists no subnet it is leaving or has left: deleted.
	CodeStandbyLeft Code = "standby-left"
	// CodeCNIConfigMissing: CNIConfDir holds no CNI config; defaults are
	// assumed. A warning.
	CodeCNIConfigMissing Code = "cni-config-missing"
	// CodeCNIConfigInvalid: a file in CNIConfDir cannot be read. A warning.
	CodeCNIConfigInvalid Code = "cni-config-invalid"
	// CodeCNIConfigUnsupported: the file the container runtime uses from
	// CNIConfDir is not a config nodenet handles (not the bridge plugin,
	// directly or through flannel); the layout comes from a later file, or
	// defaults. Right when the file delegates to that one (multus), wrong
	// when the pods are on another plugin (calico, ptp). A warning.
	CodeCNIConfigUnsupported Code = "cni-config-unsupported"
	// CodeCNIConfigRange: the CNI config's host-local range is not the
	// podCIDR; new pods get addresses from the wrong range.
	CodeCNIConfigRange Code = "cni-config-range"
)

// Finding is one thing an audit found, with the actions that fix it (none
// when nodenet cannot: the message then says who can).
type Finding struct {
	Code     Code          `json:"code"`
	Severity cidr.Severity `json:"severity"`
	// Object names what the finding is about: "link cni0", "route
	// 10.244.7.0/24", "rule nat FLANNEL-POSTRTG #3", "file <path>".
	Object string `json:"object"`
	// Message explains the finding and its consequence.
	Message string `json:"message"`
	// Fix are the actions that remove the finding.
	Fix []Action `json:"fix,omitempty"`
}

// String renders "severity code object: message".
func (f Finding) String() string {
	return fmt.Sprintf("%s %s %s: %s", f.Severity, f.Code, f.Object, f.Message)
}

// Report is what Audit read and found on one node.
type Report struct {
	Node    string       `json:"node"`
	PodCIDR netip.Prefix `json:"podCIDR"`
	Network netip.Prefix `json:"network,omitzero"`
	// Backend is the flannel backend audited for.
	Backend string `json:"backend"`
	// Bridge and VTEP are the device names used.
	Bridge string `json:"bridge"`
	VTEP   string `json:"vtep,omitempty"`
	// IPTables is the iptables backend used (IPTablesNFT or IPTablesLegacy).
	IPTables string `json:"iptables"`
	// CNIConfigFile is the CNI config the bridge and host-local directory
	// were read from; empty when there is none. It is not the file the
	// runtime uses when a cni-config-unsupported finding names another.
	CNIConfigFile string `json:"cniConfigFile,omitempty"`
	// ReservationDir is host-local's directory for the CNI network.
	ReservationDir string `json:"reservationDir"`
	// SubnetEnvFile is the subnet.env path.
	SubnetEnvFile string `json:"subnetEnvFile"`
	// OldPodCIDRs and OldNetworks are the old ranges: given in the Want or
	// inferred from the bridge, subnet.env and the rules.
	OldPodCIDRs []netip.Prefix `json:"oldPodCIDRs,omitempty"`
	OldNetworks []netip.Prefix `json:"oldNetworks,omitempty"`
	// LivePods and LivePodsComplete are the Want's, as audited with.
	LivePods         []Pod     `json:"livePods,omitempty"`
	LivePodsComplete bool      `json:"livePodsComplete"`
	Findings         []Finding `json:"findings"`
}

// Errors returns the error-severity findings.
func (r *Report) Errors() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Severity == cidr.SeverityError {
			out = append(out, f)
		}
	}
	return out
}

// Route is an IPv4 route of the main table.
type Route struct {
	Dst netip.Prefix `json:"dst"`
	// Gw is the next hop; zero for a device route.
	Gw netip.Addr `json:"gw,omitzero"`
	// Dev is the output device; empty lets the kernel choose (host-gw).
	Dev string `json:"dev,omitempty"`
	// Onlink marks a next hop that is not on any of the device's subnets
	// (flannel's vxlan routes).
	Onlink bool `json:"onlink,omitempty"`
	// Metric is the route's priority.
	Metric int `json:"metric,omitempty"`
}

// String renders the route the way `ip route` does.
func (r Route) String() string {
	var b strings.Builder
	b.WriteString(r.Dst.String())
	if r.Gw.IsValid() {
		b.WriteString(" via " + r.Gw.String())
	}
	if r.Dev != "" {
		b.WriteString(" dev " + r.Dev)
	}
	if r.Onlink {
		b.WriteString(" onlink")
	}
	if r.Metric != 0 {
		b.WriteString(" metric " + strconv.Itoa(r.Metric))
	}
	return b.String()
}

// Rule is one iptables rule: its table, chain and specification (the words
// after "-A CHAIN" in `iptables -S`).
type Rule struct {
	Table string   `json:"table"`
	Chain string   `json:"chain"`
	Spec  []string `json:"spec"`
}

// String renders the rule as an iptables command line would take it.
func (r Rule) String() string {
	return "-t " + r.Table + " -A " + r.Chain + " " + joinSpec(r.Spec)
}
