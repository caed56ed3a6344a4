package nodenet

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/cidrshift/cidrshift/cidr"
)

// The make-before-break transition. While live pods on a moved node still
// hold addresses in its old subnet A, the old gateway A.1 sits on a veth
// beside the bridge instead of on the bridge, so the bridge can take the new
// subnet's gateway (and new pods start) while old pods keep theirs:
//
//	<bridge>-old  holds A.1/len (and the gateway of any other old subnet in use)
//	<bridge>-obr  its peer, a port of the bridge
//
// The bridge's name is cut to 11 characters so both names fit IFNAMSIZ (15
// characters): cni0 gives cni0-old and cni0-obr. The bridge plugin only
// looks at the bridge's own addresses, so it accepts the new gateway; old
// pods' ARP for A.1 crosses the bridge to <bridge>-obr and is answered by
// <bridge>-old, and the host's connected route to A leads through it.

// transitionSuffix and transitionPortSuffix name the transition veth pair.
const (
	transitionSuffix     = "-old"
	transitionPortSuffix = "-obr"
	transitionBaseMax    = 15 - len(transitionSuffix)
)

// TransitionLinks returns the names of the transition veth pair of a bridge:
// link holds the old gateways, port is its peer, enslaved to the bridge.
func TransitionLinks(bridge string) (link, port string) {
	base := bridge
	if len(base) > transitionBaseMax {
		base = base[:transitionBaseMax]
	}
	return base + transitionSuffix, base + transitionPortSuffix
}

// movedToTransition reports whether the plan moves the bridge address r to
// the transition veth (a set-transition adding r) before taking it off the
// bridge: r's subnet is then not retired by the bridge's set-address.
func (p *Plan) movedToTransition(r netip.Prefix) bool {
	link, _ := TransitionLinks(p.Bridge)
	return slices.ContainsFunc(p.Actions, func(a Action) bool {
		return a.Kind == ActionSetTransition && a.Link == link && a.Add == r
	})
}

// validateTransition checks a set-transition or delete-transition: the
// bridge's transition pair, and only old gateways of the plan's old pod
// subnets on it.
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

// setTransition is the action that puts old gateway gw on the bridge's
// transition veth.
func (a *auditor) setTransition(gw netip.Prefix) Action {
	link, port := TransitionLinks(a.r.Bridge)
	return Action{Kind: ActionSetTransition, Link: link, Peer: port, Add: gw,
		Why: fmt.Sprintf("put the old gateway %s on %s (its peer %s a port of %s), so old pods keep their gateway while the bridge takes %s",
			gw, link, port, a.r.Bridge, gateway(a.w.PodCIDR))}
}

// transitionState records the old subnets the transition veth serves, so
// routes() does not take its connected routes for peer routes.
func (a *auditor) transitionState() {
	if t := a.s.transition; t != nil {
		for _, p := range t.addrs {
			a.oldPod(p.Masked())
		}
	}
}

// transition audits the transition veth pair: an old subnet in use whose
// gateway no device holds (or held on a veth that is not a working port of
// the bridge), and the pair itself while it is needed (active) and once it
// is not (left).
func (a *auditor) transition() {
	if a.s.bridge == nil {
		return
	}
	t, port := a.s.transition, a.s.transitionPort
	link, portName := TransitionLinks(a.r.Bridge)
	working := t != nil && t.up && port != nil && port.up && port.master == a.r.Bridge
	for _, o := range a.r.OldPodCIDRs {
		pods := a.oldPodsIn(o)
		if len(pods) == 0 {
			continue
		}
		gw := gateway(o)
		onBridge := slices.Contains(a.s.bridge.addrs, gw)
		onLink := t != nil && slices.Contains(t.addrs, gw)
		switch {
		case onBridge:
			// bridge() moves it.
		case !onLink:
			a.add(CodeOldGatewayMissing, cidr.SeverityError, "link "+link,
				fmt.Sprintf("live pods hold addresses in the old subnet %s (%s) but no device holds its gateway %s: they cannot leave their subnet", o, podNames(pods), gw),
				a.setTransition(gw))
		case !working:
			a.add(CodeOldGatewayMissing, cidr.SeverityError, "link "+link,
				fmt.Sprintf("holds the old gateway %s for live pods (%s), but it or its peer %s is down or not a port of %s", gw, podNames(pods), portName, a.r.Bridge),
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
		Why: fmt.Sprintf("delete the transition veth %s (and %s), which holds %s", link, portName, joinPrefixes(t.addrs))}
	obj := "link " + link
	switch {
	case !a.w.LivePodsComplete:
		a.add(CodeTransitionActive, cidr.SeverityError, obj,
			fmt.Sprintf("holds the old gateway(s) %s; the live pods are not known, so it stays", joinPrefixes(t.addrs)), del)
	case len(users) > 0:
		a.add(CodeTransitionActive, cidr.SeverityError, obj,
			fmt.Sprintf("holds the old gateway(s) %s for live pods (%s); it goes once they have moved to %s", joinPrefixes(t.addrs), podNames(users), a.w.PodCIDR), del)
	default:
		a.add(CodeTransitionLeft, cidr.SeverityError, obj,
			fmt.Sprintf("holds the old gateway(s) %s but no live pod has an address there any more", joinPrefixes(t.addrs)), del)
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
