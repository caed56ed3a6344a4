//go:build linux

package nodenet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink"
)

// transitionState reads the bridge's transition: the veth pair (a link with
// the transition's name that is not a veth is left out: nodenet neither
// uses nor deletes it, and setTransition refuses it), the old gateways
// routed to it (host routes G/32 through the link) and the proxy
// neighbour entries on the bridge.
func (h *host) transitionState(bridge string, routes []Route) (link, port *linkState, gws, proxies []netip.Addr, err error) {
	if proxies, err = h.proxies(bridge); err != nil {
		return nil, nil, nil, nil, err
	}
	name, portName := TransitionLinks(bridge)
	l, err := h.link(name)
	if err != nil || l == nil || l.Type() != "veth" {
		return nil, nil, nil, proxies, err
	}
	if link, err = h.linkState(name); err != nil {
		return nil, nil, nil, nil, err
	}
	if port, err = h.linkState(portName); err != nil {
		return nil, nil, nil, nil, err
	}
	for _, rt := range routes {
		if rt.Dev == name && !rt.Gw.IsValid() && rt.Dst.Bits() == 32 {
			gws = append(gws, rt.Dst.Addr())
		}
	}
	return link, port, gws, proxies, nil
}

// proxies lists the IPv4 proxy neighbour entries (`ip neigh show proxy dev
// bridge`) of a link; none when it does not exist.
func (h *host) proxies(name string) ([]netip.Addr, error) {
	l, err := h.link(name)
	if err != nil || l == nil {
		return nil, err
	}
	list, err := dump(func() ([]netlink.Neigh, error) { return h.nl.NeighProxyList(l.Attrs().Index, netlink.FAMILY_V4) })
	if err != nil {
		return nil, fmt.Errorf("nodenet: list proxy neighbours of %s: %w", name, err)
	}
	var out []netip.Addr
	for _, n := range list {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap().Is4() && n.Flags&netlink.NTF_PROXY != 0 {
			out = append(out, a.Unmap())
		}
	}
	return out, nil
}

// transitionRoutes are the routes set-transition adds for old gateway gw:
// gw/32 through the transition link (so the kernel's arp_process takes the
// proxy branch: the route to the target leaves through another device than
// the bridge the request came in on) and the old subnet through the bridge
// (so the host and forwarded traffic reach the old pods; metric
// TransitionMetric, beside the kernel's connected route while the bridge
// still holds gw).
func transitionRoutes(gw netip.Prefix, link, bridge string) (host, subnet Route) {
	return Route{Dst: netip.PrefixFrom(gw.Addr(), 32), Dev: link},
		Route{Dst: gw.Masked(), Dev: bridge, Metric: TransitionMetric}
}

// addRoute adds a device route of scope link unless an equal one exists.
func (h *host) addRoute(rt Route, l netlink.Link) (bool, error) {
	if found, err := h.findRoute(rt); err != nil || found != nil {
		return false, err
	}
	nr := &netlink.Route{Dst: toIPNet(rt.Dst), LinkIndex: l.Attrs().Index, Scope: netlink.SCOPE_LINK, Priority: rt.Metric, Table: syscall.RT_TABLE_MAIN}
	if err := h.nl.RouteAdd(nr); err != nil && !errors.Is(err, syscall.EEXIST) {
		return false, fmt.Errorf("route add %s: %w", rt, err)
	}
	return true, nil
}

// setTransition makes sure the transition is in place for old gateway
// a.Add: the veth pair exists, its link is up and carries the route to the
// gateway, the bridge has a proxy neighbour entry for it and a route to the
// old subnet. The peer stays down and is no bridge port: the link is only
// the "other device" the proxy ARP needs, and packets routed to it are
// dropped. Each step first reads the current state, so a re-run changes
// nothing.
func (h *host) setTransition(a *Action) (Status, string, error) {
	br, err := h.link(h.bridge)
	if err != nil || br == nil {
		return StatusSkipped, "the bridge " + h.bridge + " is gone", err
	}
	var did []string
	l, err := h.link(a.Link)
	if err != nil {
		return "", "", err
	}
	if l == nil {
		if err := h.nl.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a.Link, MTU: br.Attrs().MTU}, PeerName: a.Peer}); err != nil {
			return "", "", fmt.Errorf("create veth %s/%s: %w", a.Link, a.Peer, err)
		}
		did = append(did, "created veth "+a.Link+"/"+a.Peer)
		if l, err = h.link(a.Link); err != nil || l == nil {
			return "", "", fmt.Errorf("read veth %s after creating it: %w", a.Link, err)
		}
	} else if l.Type() != "veth" {
		return "", "", fmt.Errorf("link %s exists and is a %s, not the transition veth; nodenet leaves it alone: rename it or set Want.Bridge", a.Link, l.Type())
	}
	port, err := h.link(a.Peer)
	if err != nil || port == nil {
		return "", "", fmt.Errorf("the transition veth %s has no peer %s (%v): delete %s and apply again", a.Link, a.Peer, err, a.Link)
	}
	if port.Attrs().MasterIndex != 0 {
		if err := h.nl.LinkSetNoMaster(port); err != nil {
			return "", "", fmt.Errorf("take %s off %s: %w", a.Peer, h.bridge, err)
		}
		did = append(did, a.Peer+" off the bridge")
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := h.nl.LinkSetUp(l); err != nil {
			return "", "", fmt.Errorf("set %s up: %w", a.Link, err)
		}
		did = append(did, a.Link+" up")
	}
	hostRt, subnetRt := transitionRoutes(a.Add, a.Link, h.bridge)
	for _, c := range []struct {
		rt Route
		l  netlink.Link
	}{{hostRt, l}, {subnetRt, br}} {
		added, err := h.addRoute(c.rt, c.l)
		if err != nil {
			return "", "", err
		}
		if added {
			did = append(did, "route "+c.rt.String())
		}
	}
	proxies, err := h.proxies(h.bridge)
	if err != nil {
		return "", "", err
	}
	if gw := a.Add.Addr(); !slices.Contains(proxies, gw) {
		n := &netlink.Neigh{LinkIndex: br.Attrs().Index, Family: netlink.FAMILY_V4, Flags: netlink.NTF_PROXY, IP: gw.AsSlice()}
		if err := h.nl.NeighAdd(n); err != nil && !errors.Is(err, syscall.EEXIST) {
			return "", "", fmt.Errorf("add proxy neighbour %s on %s: %w", gw, h.bridge, err)
		}
		did = append(did, "proxy "+gw.String()+" on "+h.bridge)
	}
	if len(did) == 0 {
		return StatusUnchanged, "", nil
	}
	return StatusDone, fmt.Sprintf("%s: %v", a.Why, did), nil
}

// deleteTransition deletes the transition, after reading it again: while a
// live pod holds an address in a subnet it serves, or it serves a gateway
// the plan did not retire, it is kept. It removes the proxy entries and the
// bridge routes of the retired subnets, then the veth pair (its routes go
// with it).
func (h *host) deleteTransition(a *Action, pods []Pod) (Status, string, error) {
	routes, _, err := h.routes()
	if err != nil {
		return "", "", err
	}
	l, _, gws, proxies, err := h.transitionState(h.bridge, routes)
	if err != nil {
		return "", "", err
	}
	if l == nil {
		if ll, err := h.link(a.Link); err != nil || ll != nil {
			return StatusSkipped, fmt.Sprintf("%s is not the transition veth now", a.Link), err
		}
	}
	for _, g := range gws {
		i := slices.IndexFunc(a.Retires, func(m netip.Prefix) bool { return m.Contains(g) })
		if i < 0 {
			return StatusSkipped, fmt.Sprintf("it serves %s now, which the plan does not retire; audit and plan again", g), nil
		}
	}
	for _, m := range a.Retires {
		if users := oldPodsIn(netip.Prefix{}, pods, m); len(users) > 0 {
			return StatusSkipped, fmt.Sprintf("live pods still use %s: %s", m, podNames(users)), nil
		}
	}
	var did []string
	br, err := h.link(h.bridge)
	if err != nil {
		return "", "", err
	}
	for _, r := range a.Remove {
		if br == nil {
			break
		}
		if slices.Contains(proxies, r.Addr()) {
			n := &netlink.Neigh{LinkIndex: br.Attrs().Index, Family: netlink.FAMILY_V4, Flags: netlink.NTF_PROXY, IP: r.Addr().AsSlice()}
			if err := h.nl.NeighDel(n); err != nil && !errors.Is(err, syscall.ENOENT) {
				return "", "", fmt.Errorf("delete proxy neighbour %s on %s: %w", r.Addr(), h.bridge, err)
			}
			did = append(did, "proxy "+r.Addr().String())
		}
		_, subnetRt := transitionRoutes(r, a.Link, h.bridge)
		found, err := h.findRoute(subnetRt)
		if err != nil {
			return "", "", err
		}
		if found != nil {
			if err := h.nl.RouteDel(found); err != nil && !errors.Is(err, syscall.ESRCH) {
				return "", "", fmt.Errorf("route delete %s: %w", subnetRt, err)
			}
			did = append(did, "route "+subnetRt.String())
		}
	}
	if ll, err := h.link(a.Link); err != nil {
		return "", "", err
	} else if ll != nil {
		if err := h.nl.LinkDel(ll); err != nil && !errors.Is(err, syscall.ENODEV) {
			return "", "", fmt.Errorf("delete veth %s: %w", a.Link, err)
		}
		did = append(did, "veth "+a.Link)
	}
	if len(did) == 0 {
		return StatusUnchanged, "", nil
	}
	return StatusDone, fmt.Sprintf("%s: %v", a.Why, did), nil
}

// unmoved says why a bridge set-address must not run yet, or "": it takes
// away an old gateway the plan moves to the transition, and the transition
// does not serve it yet (its set-transition was skipped or failed). Taking
// it off the bridge then would cut the old pods off their gateway.
func (h *host) unmoved(p *Plan, a *Action) string {
	if a.Kind != ActionSetAddress || a.Link != p.Bridge {
		return ""
	}
	link, _ := TransitionLinks(p.Bridge)
	routes, _, err := h.routes()
	if err != nil {
		return "cannot read the routes: " + err.Error()
	}
	_, _, gws, proxies, err := h.transitionState(p.Bridge, routes)
	if err != nil {
		return "cannot read the transition: " + err.Error()
	}
	for _, r := range a.Remove {
		if !p.movedToTransition(r) {
			continue
		}
		_, subnetRt := transitionRoutes(r, link, p.Bridge)
		if !slices.Contains(gws, r.Addr()) || !slices.Contains(proxies, r.Addr()) || !slices.ContainsFunc(routes, func(rt Route) bool { return rt == subnetRt }) {
			return fmt.Sprintf("the transition does not serve the old gateway %s yet; taking it off %s would cut the old pods off", r, p.Bridge)
		}
	}
	return ""
}
