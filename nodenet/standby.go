package nodenet

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/cidrshift/cidrshift/cidr"
)

// The standby of make-before-break. A node's podCIDR can only change by
// deleting and re-creating its Node object. When flanneld on every other
// node sees that delete, it forgets the node's subnet A: it deletes the
// route to A, the neighbour entry of A's VTEP address and the FDB entry of
// the node's VTEP MAC (vxlan), or the route to A through the node's address
// (host-gw). Once the re-created Node is seen, it learns the new subnet C
// and the same MAC again. The pods that keep their A addresses would be cut
// off between the two. So, before the delete, every node gets a standby for
// a peer that lists a NextPodCIDR C:
//
//	ip route add A via C.0 dev flannel.1 onlink metric StandbyMetric   (vxlan)
//	ip neigh replace C.0 lladdr <peer's VTEP MAC> dev flannel.1 nud permanent
//	bridge fdb append 00:00:00:00:00:00 dev flannel.1 dst <peer's address>
//	ip route add A via <peer's address> metric StandbyMetric            (host-gw)
//
// flanneld's own route to A has metric 0 and its delete names its next hop,
// so it never removes the standby route; its neighbour entry is for A.0,
// not C.0; and frames for a MAC whose FDB entry it has just deleted go to
// the default (all-zeros) entries, which it never touches. After the
// re-creation the standby route is the transition route to the old subnet
// (Peer.OldPodCIDRs), flanneld adds the same neighbour entry for C.0 as its
// own, and the default FDB entry stays while the peer lists old subnets: it
// is deleted with them (CodeStandbyLeft).

// StandbyMetric is the metric of the standby route: higher than flanneld's
// (0), so flanneld's route is used while it exists and its delete leaves the
// standby alone.
const StandbyMetric = 1

// zeroMAC is the MAC of a vxlan device's default FDB entries: frames to a
// MAC without an entry of its own go to each of their destinations.
const zeroMAC = "00:00:00:00:00:00"

// neighbour is an IPv4 neighbour entry of the VTEP; permanent is
// NUD_PERMANENT, as flanneld sets them.
type neighbour struct {
	ip        netip.Addr
	mac       string
	permanent bool
}

// standbyRoute is the standby route to peer p's PodCIDR while it lists a
// NextPodCIDR.
func (a *auditor) standbyRoute(p Peer) Route {
	if a.w.Backend == BackendHostGW {
		return Route{Dst: p.PodCIDR, Gw: p.PublicIP, Metric: StandbyMetric}
	}
	return Route{Dst: p.PodCIDR, Gw: p.NextPodCIDR.Addr(), Dev: a.w.VTEP, Onlink: true, Metric: StandbyMetric}
}

// standbyRoutes maps each peer's PodCIDR to its standby route, for the peers
// that list a NextPodCIDR.
func (a *auditor) standbyRoutes() map[netip.Prefix]Route {
	out := map[netip.Prefix]Route{}
	for _, p := range a.w.Peers {
		if p.NextPodCIDR.IsValid() {
			out[p.PodCIDR] = a.standbyRoute(p)
		}
	}
	return out
}

// isStandby reports whether rt is the standby route sb (its device only
// compared when sb names one: a host-gw route's device is the kernel's
// choice).
func isStandby(rt, sb Route) bool {
	return rt.Dst == sb.Dst && rt.Gw == sb.Gw && rt.Metric == sb.Metric && (sb.Dev == "" || rt.Dev == sb.Dev)
}

// inNextPodCIDR reports whether d lies in a subnet a peer is about to take:
// flanneld adds the route to it once the peer's Node is re-created, and
// nodenet neither needs it before nor calls it stale.
func (a *auditor) inNextPodCIDR(d netip.Prefix) bool {
	return slices.ContainsFunc(a.w.Peers, func(p Peer) bool { return p.NextPodCIDR.IsValid() && contains(p.NextPodCIDR, d) })
}

// standby audits the vxlan standby's neighbour and default FDB entries:
// missing while a peer lists a NextPodCIDR (the FDB entry also while it
// lists OldPodCIDRs), and a default FDB entry to a listed peer that lists
// neither. A default entry to an address no listed peer has is not
// nodenet's and is left alone. The standby routes are audited with the
// other routes.
func (a *auditor) standby() {
	if a.w.Backend != BackendVXLAN || a.s.vtep == nil {
		return
	}
	vtep := a.w.VTEP
	for _, e := range a.w.FDB {
		if !slices.Contains(a.s.fdb, e) {
			a.add(CodeFDBMissing, cidr.SeverityError, "fdb "+e.MAC+" dst "+e.Dst.String(),
				fmt.Sprintf("no FDB entry sends frames for VTEP MAC %s to %s: flanneld would fail to delete it, and retry for about 50 s before it handles any other lease", e.MAC, e.Dst),
				Action{Kind: ActionSetFDB, Link: vtep, IP: e.Dst, MAC: e.MAC, Why: fmt.Sprintf("bridge fdb replace %s dev %s dst %s self permanent", e.MAC, vtep, e.Dst)})
		}
	}
	for _, p := range a.w.Peers {
		// The neighbour entry of the peer's VTEP address, as flanneld sets
		// it: the route to the peer's podCIDR goes through it. Not for a
		// peer about to move: flanneld deletes that entry at its delete, and
		// the standby goes through the next VTEP address.
		if ip := p.PodCIDR.Addr(); p.VTEPMAC != "" && p.PodCIDR.IsValid() && !p.NextPodCIDR.IsValid() {
			if want := (neighbour{ip: ip, mac: p.VTEPMAC, permanent: true}); !slices.Contains(a.s.neighbours, want) {
				a.add(CodeNeighbourMissing, cidr.SeverityError, "neighbour "+ip.String(),
					fmt.Sprintf("node %s's VTEP address %s does not resolve to its VTEP MAC %s: the route to %s leads nowhere", p.Name, ip, p.VTEPMAC, p.PodCIDR),
					Action{Kind: ActionSetNeighbour, Link: vtep, IP: ip, MAC: p.VTEPMAC, Why: fmt.Sprintf("ip neigh replace %s lladdr %s dev %s nud permanent", ip, p.VTEPMAC, vtep)})
			}
		}
		keep := p.NextPodCIDR.IsValid() || len(p.OldPodCIDRs) > 0
		if p.NextPodCIDR.IsValid() {
			ip := p.NextPodCIDR.Addr()
			want := neighbour{ip: ip, mac: p.VTEPMAC, permanent: true}
			if !slices.Contains(a.s.neighbours, want) {
				a.add(CodeStandbyMissing, cidr.SeverityError, "neighbour "+ip.String(),
					fmt.Sprintf("node %s is about to take %s: its VTEP address %s must resolve to its VTEP MAC %s for the standby route to %s", p.Name, p.NextPodCIDR, ip, p.VTEPMAC, p.PodCIDR),
					Action{Kind: ActionSetNeighbour, Link: vtep, IP: ip, MAC: p.VTEPMAC, Why: fmt.Sprintf("ip neigh replace %s lladdr %s dev %s nud permanent", ip, p.VTEPMAC, vtep)})
			}
		}
		if !p.PublicIP.IsValid() {
			continue
		}
		has := slices.Contains(a.s.fdbDefaults, p.PublicIP)
		obj := "fdb " + zeroMAC + " dst " + p.PublicIP.String()
		switch {
		case keep && !has:
			a.add(CodeStandbyMissing, cidr.SeverityError, obj,
				fmt.Sprintf("node %s's pods keep subnets it leaves (%s): frames for its VTEP must still reach %s while flanneld here forgets and relearns its MAC", p.Name, joinPrefixes(append([]netip.Prefix{p.PodCIDR}, p.OldPodCIDRs...)), p.PublicIP),
				Action{Kind: ActionSetFDB, Link: vtep, IP: p.PublicIP, MAC: zeroMAC, Why: fmt.Sprintf("bridge fdb append %s dev %s dst %s", zeroMAC, vtep, p.PublicIP)})
		case !keep && has:
			a.add(CodeStandbyLeft, cidr.SeverityError, obj,
				fmt.Sprintf("node %s lists no subnet it is leaving or has left: the default FDB entry to %s is the standby of a finished move", p.Name, p.PublicIP),
				Action{Kind: ActionDeleteFDB, Link: vtep, IP: p.PublicIP, MAC: zeroMAC, Why: fmt.Sprintf("bridge fdb del %s dev %s dst %s", zeroMAC, vtep, p.PublicIP)})
		}
	}
}

// validateStandby checks a set-neighbour, set-fdb or delete-fdb: on the
// VTEP, an IPv4 address outside the podCIDR, and an Ethernet MAC (the
// all-zeros MAC to delete an FDB entry: nodenet only deletes default ones).
func (p *Plan) validateStandby(a *Action, field string) error {
	bad := func(f, value, reason string, args ...any) error {
		return fieldErr(ErrInvalidPlan, "plan."+field+"."+f, value, reason, args...)
	}
	if a.Link != p.VTEP || p.VTEP == "" {
		return bad("link", a.Link, "must be the plan's VTEP %q", p.VTEP)
	}
	if !a.IP.Is4() || p.PodCIDR.Contains(a.IP) {
		return bad("ip", addrString(a.IP), "must be an IPv4 address outside the podCIDR %s", p.PodCIDR)
	}
	mac, err := net.ParseMAC(a.MAC)
	switch {
	case err != nil || len(mac) != 6:
		return bad("mac", a.MAC, "must be an Ethernet MAC")
	case a.Kind == ActionSetNeighbour && mac.String() == zeroMAC:
		return bad("mac", a.MAC, "must be a VTEP's MAC, not all zeros")
	case a.Kind == ActionDeleteFDB && mac.String() != zeroMAC:
		return bad("mac", a.MAC, "must be %s: nodenet only deletes the VTEP's default FDB entries", zeroMAC)
	}
	if len(a.Retires) > 0 {
		return bad("retires", joinPrefixes(a.Retires), "must be empty: the standby takes no range away")
	}
	return nil
}
