package nodenet

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/cidrshift/cidrshift/cidr"
)

// The make-before-break transition. While live pods on a moved node still
// hold addresses in its old subnet A, the bridge takes the new subnet's
// gateway (so new pods start) and answers ARP for the old gateway A.1 as a
// proxy, so old pods keep A.1 as their gateway:
//
//	ip neigh add proxy A.1 dev <bridge>
//	ip route add A.1/32 dev <bridge>-old      (a veth; its peer <bridge>-olp stays down)
//	ip route add A dev <bridge> metric TransitionMetric
//
// The kernel answers an ARP request from a proxy entry only when the route
// to the target leaves through another device than the one the request came
// in on (net/ipv4/arp.c, arp_process; forwarding on, which it is on every
// node), hence the host route through <bridge>-old, a veth whose peer is
// down: packets routed to A.1 itself are dropped there. The bridge's name
// is cut to 11 characters so both names fit IFNAMSIZ (15 characters): cni0
// gives cni0-old and cni0-olp. The bridge plugin only looks at the bridge's
// own addresses, so it accepts the new gateway; old pods resolve A.1 to the
// bridge's own MAC, so their traffic is routed once by the bridge device,
// exactly like new pods'.

// transitionSuffix and transitionPortSuffix name the transition veth pair.
const (
	transitionSuffix     = "-old"
	transitionPortSuffix = "-olp"
	transitionBaseMax    = 15 - len(transitionSuffix)
)

// TransitionMetric is the metric of the transition's route to an old subnet
// through the bridge; it differs from the kernel's connected route (metric
// 0) so that both exist while the bridge still holds the old gateway, and
// the transition's stays when the gateway leaves the bridge.
const TransitionMetric = 1

// TransitionLinks returns the names of the transition veth pair of a bridge:
// link carries the routes to the old gateways, port is its peer, kept down
// and out of the bridge.
func TransitionLinks(bridge string) (link, port string) {
	base := bridge
	if len(base) > transitionBaseMax {
		base = base[:transitionBaseMax]
	}
	return base + transitionSuffix, base + transitionPortSuffix
}

// movedToTransition reports whether the plan hands the bridge address r to
// the transition (a set-transition adding r) before taking it off the
// bridge: r's subnet is then not retired by the bridge's set-address.
func (p *Plan) movedToTransition(r netip.Prefix) bool {
	link, _ := TransitionLinks(p.Bridge)
	return slices.ContainsFunc(p.Actions, func(a Action) bool {
		return a.Kind == ActionSetTransition && a.Link == link && a.Add == r
	})
}

// validateTransition checks a set-transition or delete-transition: the
// bridge's transition pair, and only old gateways of the plan's old pod
// subnets.
func (p *Plan) validateTransition(a *Action, field string) error {
	bad := func(f, value, reason string, args ...any) error {
		return fieldErr(ErrInvalidPlan, "plan."+field+"."+f, value, reason, args...)
	}
	link, port := TransitionLinks(p.Bridge)
	if a.Link != link {
		return bad("link", a.Link, "must be %q, the transition veth of bridge %s", link, p.Bridge)
	}
	if a.Peer != port {
		return bad("peer", a.Peer, "must be %q, the transition veth's port on bridge %s", port, p.Bridge)
	}
	oldGW := func(f string, r netip.Prefix) error {
		if !r.IsValid() || !r.Addr().Is4() || r.Overlaps(p.PodCIDR) || !slices.Contains(p.OldPodCIDRs, r.Masked()) {
			return bad(f, prefixString(r), "must be an address in one of the plan's oldPodCIDRs %s", joinPrefixes(p.OldPodCIDRs))
		}
		return nil
	}
	if a.Kind == ActionSetTransition {
		return oldGW("add", a.Add)
	}
	if a.Add.IsValid() {
		return bad("add", a.Add.String(), "must be empty: delete-transition adds nothing")
	}
	for j, r := range a.Remove {
		if err := oldGW("remove["+fmt.Sprint(j)+"]", r); err != nil {
			return err
		}
		if !slices.Contains(a.Retires, r.Masked()) {
			return bad("remove["+fmt.Sprint(j)+"]", r.String(), "takes %s away but retires lists %s", r.Masked(), joinPrefixes(a.Retires))
		}
	}
	return nil
}

// transitionNeeded reports whether old pod subnet m needs the transition:
// a listed live pod holds an address in it, or the live pods are not known
// (one may).
func (a *auditor) transitionNeeded(m netip.Prefix) bool {
	// A subnet another node holds now (a duplicate podCIDR being fixed) is
	// not kept here: the peer's route to it is the right one, and this
	// node's old pods in it were unreachable from the other nodes anyway.
	for _, p := range a.w.Peers {
		if p.PodCIDR.IsValid() && p.PodCIDR.Overlaps(m) {
			return false
		}
	}
	return !a.w.LivePodsComplete || len(a.oldPodsIn(m)) > 0
}

// setTransition is the action that has the bridge answer for old gateway
// gw through the transition.
func (a *auditor) setTransition(gw netip.Prefix) Action {
	link, port := TransitionLinks(a.r.Bridge)
	return Action{Kind: ActionSetTransition, Link: link, Peer: port, Add: gw,
		Why: fmt.Sprintf("have %s answer ARP for the old gateway %s as a proxy (route %s/32 through %s, peer %s down; route %s through %s), so old pods keep their gateway while the bridge takes %s",
			a.r.Bridge, gw.Addr(), gw.Addr(), link, port, gw.Masked(), a.r.Bridge, gateway(a.w.PodCIDR))}
}

// transitionState turns the gateways routed through the transition link
// into prefixes of their old subnets (from the old pod ranges known, else
// from the transition's route through the bridge) and records those
// subnets as old, so routes() does not take the transition's routes for
// peer routes.
func (a *auditor) transitionState() {
	t := a.s.transition
	if t == nil {
		return
	}
	t.addrs = nil
	for _, g := range a.s.transitionGWs {
		bits := 32
		if i := slices.IndexFunc(a.r.OldPodCIDRs, func(o netip.Prefix) bool { return o.Contains(g) }); i >= 0 {
			bits = a.r.OldPodCIDRs[i].Bits()
		} else if i := slices.IndexFunc(a.s.routes, func(rt Route) bool {
			return rt.Dev == a.r.Bridge && !rt.Gw.IsValid() && rt.Dst.Bits() < 32 && rt.Dst.Contains(g)
		}); i >= 0 {
			bits = a.s.routes[i].Dst.Bits()
		}
		p := netip.PrefixFrom(g, bits)
		t.addrs = append(t.addrs, p)
		a.oldPod(p.Masked())
	}
}

// transitionServes reports whether the transition fully serves old gateway
// gw: the link routes it, the bridge has its proxy entry and the route to
// its subnet.
func (a *auditor) transitionServes(gw netip.Prefix) (routed, working bool) {
	t := a.s.transition
	if t == nil || !slices.Contains(t.addrs, gw) {
		return false, false
	}
	subnet := Route{Dst: gw.Masked(), Dev: a.r.Bridge, Metric: TransitionMetric}
	return true, t.up && slices.Contains(a.s.proxies, gw.Addr()) && slices.Contains(a.s.routes, subnet)
}

// transition audits the transition: an old subnet in use whose gateway
// neither the bridge nor the transition serves (or the transition only in
// part: link down, proxy entry or route to the subnet missing), and the
// transition itself while it is needed (active) and once it is not (left).
func (a *auditor) transition() {
	if a.s.bridge == nil {
		return
	}
	t := a.s.transition
	link, portName := TransitionLinks(a.r.Bridge)
	for _, o := range a.r.OldPodCIDRs {
		pods := a.oldPodsIn(o)
		if len(pods) == 0 {
			continue
		}
		gw := gateway(o)
		onBridge := slices.Contains(a.s.bridge.addrs, gw)
		routed, working := a.transitionServes(gw)
		switch {
		case onBridge:
			// bridge() moves it.
		case !routed:
			a.add(CodeOldGatewayMissing, cidr.SeverityError, "link "+link,
				fmt.Sprintf("live pods hold addresses in the old subnet %s (%s) but neither %s nor the transition serves its gateway %s: they cannot leave their subnet", o, podNames(pods), a.r.Bridge, gw),
				a.setTransition(gw))
		case !working:
			a.add(CodeOldGatewayMissing, cidr.SeverityError, "link "+link,
				fmt.Sprintf("carries the route to the old gateway %s for live pods (%s), but it is down, or %s lacks the proxy entry for %s or the route to %s", gw, podNames(pods), a.r.Bridge, gw.Addr(), o),
				a.setTransition(gw))
		}
	}
	if t == nil {
		return
	}
	var subs []netip.Prefix
	var users []Pod
	for _, p := range t.addrs {
		if m := p.Masked(); !slices.Contains(subs, m) {
			subs = append(subs, m)
			users = append(users, a.oldPodsIn(m)...)
		}
	}
	del := Action{Kind: ActionDeleteTransition, Link: link, Peer: portName, Remove: slices.Clone(t.addrs), Retires: subs,
		Why: fmt.Sprintf("delete the transition for %s: the proxy entries and routes, and the veth %s (and %s)", joinPrefixes(t.addrs), link, portName)}
	obj := "link " + link
	switch {
	case !a.w.LivePodsComplete:
		a.add(CodeTransitionActive, cidr.SeverityError, obj,
			fmt.Sprintf("serves the old gateway(s) %s; the live pods are not known, so it stays", joinPrefixes(t.addrs)), del)
	case len(users) > 0:
		a.add(CodeTransitionActive, cidr.SeverityError, obj,
			fmt.Sprintf("serves the old gateway(s) %s for live pods (%s); it goes once they have moved to %s", joinPrefixes(t.addrs), podNames(users), a.w.PodCIDR), del)
	default:
		a.add(CodeTransitionLeft, cidr.SeverityError, obj,
			fmt.Sprintf("serves the old gateway(s) %s but no live pod has an address there any more", joinPrefixes(t.addrs)), del)
	}
}

// leftTransitionRoute returns the peer a route leads to when it is the
// transition route to a subnet the peer no longer claims: through the
// peer's VTEP address (vxlan) or its underlay address (host-gw), to a
// destination other than the peer's listed subnets.
func (a *auditor) leftTransitionRoute(rt Route) (Peer, bool) {
	for _, p := range a.w.Peers {
		if rt.Dst == p.PodCIDR || slices.Contains(p.OldPodCIDRs, rt.Dst) {
			continue
		}
		vx := a.w.Backend == BackendVXLAN && rt.Dev == a.w.VTEP && rt.Gw == p.PodCIDR.Addr()
		hg := a.w.Backend == BackendHostGW && p.PublicIP.IsValid() && rt.Gw == p.PublicIP
		if vx || hg {
			return p, true
		}
	}
	return Peer{}, false
}
