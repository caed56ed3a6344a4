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

// transitionState reads the bridge's transition veth pair. A link with the
// transition's name that is not a veth is left out: nodenet neither uses nor
// deletes it (setTransition refuses it).
func (h *host) transitionState(bridge string) (link, port *linkState, err error) {
	name, portName := TransitionLinks(bridge)
	l, err := h.link(name)
	if err != nil || l == nil || l.Type() != "veth" {
		return nil, nil, err
	}
	if link, err = h.linkState(name); err != nil {
		return nil, nil, err
	}
	if port, err = h.linkState(portName); err != nil {
		return nil, nil, err
	}
	return link, port, nil
}

// setTransition makes sure the transition veth pair exists, its port is a
// port of the bridge, both ends are up and the link holds the old gateway.
// Each step first reads the current state, so a re-run changes nothing.
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
	if port.Attrs().MasterIndex != br.Attrs().Index {
		if err := h.nl.LinkSetMasterByIndex(port, br.Attrs().Index); err != nil {
			return "", "", fmt.Errorf("make %s a port of %s: %w", a.Peer, h.bridge, err)
		}
		did = append(did, a.Peer+" enslaved to "+h.bridge)
	}
	cur, err := h.addrs(l)
	if err != nil {
		return "", "", err
	}
	if !slices.Contains(cur, a.Add) {
		if err := h.nl.AddrAdd(l, &netlink.Addr{IPNet: toIPNet(a.Add)}); err != nil && !errors.Is(err, syscall.EEXIST) {
			return "", "", fmt.Errorf("add %s to %s: %w", a.Add, a.Link, err)
		}
		did = append(did, a.Add.String()+" on "+a.Link)
	}
	for _, x := range []netlink.Link{port, l} {
		if x.Attrs().Flags&net.FlagUp == 0 {
			if err := h.nl.LinkSetUp(x); err != nil {
				return "", "", fmt.Errorf("set %s up: %w", x.Attrs().Name, err)
			}
			did = append(did, x.Attrs().Name+" up")
		}
	}
	if len(did) == 0 {
		return StatusUnchanged, "", nil
	}
	return StatusDone, fmt.Sprintf("%s: %v", a.Why, did), nil
}

// deleteTransition deletes the transition veth pair, after reading it
// again: while a live pod holds an address in a subnet it serves, or it
// holds an address the plan did not retire, it is kept.
func (h *host) deleteTransition(a *Action, pods []Pod) (Status, string, error) {
	l, err := h.link(a.Link)
	if err != nil || l == nil {
		return StatusUnchanged, "", err
	}
	if l.Type() != "veth" {
		return StatusSkipped, fmt.Sprintf("%s is a %s now, not the transition veth", a.Link, l.Type()), nil
	}
	cur, err := h.addrs(l)
	if err != nil {
		return "", "", err
	}
	for _, p := range cur {
		m := p.Masked()
		if !slices.Contains(a.Retires, m) {
			return StatusSkipped, fmt.Sprintf("it holds %s now, which the plan does not retire; audit and plan again", p), nil
		}
		if users := oldPodsIn(netip.Prefix{}, pods, m); len(users) > 0 {
			return StatusSkipped, fmt.Sprintf("live pods still use %s: %s", m, podNames(users)), nil
		}
	}
	if err := h.nl.LinkDel(l); err != nil && !errors.Is(err, syscall.ENODEV) {
		return "", "", fmt.Errorf("delete veth %s: %w", a.Link, err)
	}
	return StatusDone, a.Why, nil
}

// unmoved says why a bridge set-address must not run yet, or "": it takes
// away an old gateway the plan moves to the transition veth, and the veth
// does not hold it (its set-transition was skipped or failed). Taking it off
// the bridge then would cut the old pods off their gateway.
func (h *host) unmoved(p *Plan, a *Action) string {
	if a.Kind != ActionSetAddress || a.Link != p.Bridge {
		return ""
	}
	link, _ := TransitionLinks(p.Bridge)
	var held []netip.Prefix
	if l, err := h.link(link); err == nil && l != nil && l.Type() == "veth" {
		held, _ = h.addrs(l)
	}
	for _, r := range a.Remove {
		if p.movedToTransition(r) && !slices.Contains(held, r) {
			return fmt.Sprintf("the old gateway %s is not on %s yet; taking it off %s would cut the old pods off", r, link, p.Bridge)
		}
	}
	return ""
}
