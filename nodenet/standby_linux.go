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

// standbyState reads the VTEP's IPv4 neighbour entries, the destinations
// of its default (all-zeros MAC) FDB entries and its other IPv4 FDB
// entries; nothing when it does not exist.
func (h *host) standbyState(vtep string) (neighs []neighbour, fdb []netip.Addr, macs []FDBEntry, err error) {
	l, err := h.link(vtep)
	if err != nil || l == nil {
		return nil, nil, nil, err
	}
	list, err := dump(func() ([]netlink.Neigh, error) { return h.nl.NeighList(l.Attrs().Index, netlink.FAMILY_V4) })
	if err != nil {
		return nil, nil, nil, fmt.Errorf("nodenet: list neighbours of %s: %w", vtep, err)
	}
	for _, n := range list {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap().Is4() && n.Flags&netlink.NTF_PROXY == 0 {
			neighs = append(neighs, neighbour{ip: a.Unmap(), mac: n.HardwareAddr.String(), permanent: n.State&netlink.NUD_PERMANENT != 0})
		}
	}
	entries, err := dump(func() ([]netlink.Neigh, error) { return h.nl.NeighList(l.Attrs().Index, syscall.AF_BRIDGE) })
	if err != nil {
		return nil, nil, nil, fmt.Errorf("nodenet: list the FDB of %s: %w", vtep, err)
	}
	for _, n := range entries {
		a, ok := netip.AddrFromSlice(n.IP)
		switch {
		case !ok || !a.Unmap().Is4():
		case n.HardwareAddr.String() == zeroMAC:
			fdb = append(fdb, a.Unmap())
		default:
			macs = append(macs, FDBEntry{MAC: n.HardwareAddr.String(), Dst: a.Unmap()})
		}
	}
	return neighs, fdb, macs, nil
}

// fdbEntry is the default FDB entry (all-zeros MAC) to dst on link l (a
// caller may set another MAC).
func fdbEntry(l netlink.Link, dst netip.Addr) *netlink.Neigh {
	mac, _ := net.ParseMAC(zeroMAC)
	return &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: syscall.AF_BRIDGE, Flags: netlink.NTF_SELF,
		State: netlink.NUD_PERMANENT, HardwareAddr: mac, IP: dst.AsSlice()}
}

// setNeighbour makes a.IP resolve to a.MAC on the VTEP, permanently, as
// flanneld's AddARP does.
func (h *host) setNeighbour(a *Action) (Status, string, error) {
	l, err := h.link(a.Link)
	if err != nil || l == nil {
		return StatusSkipped, "the link " + a.Link + " is gone", err
	}
	neighs, _, _, err := h.standbyState(a.Link)
	if err != nil {
		return "", "", err
	}
	if slices.Contains(neighs, neighbour{ip: a.IP, mac: a.MAC, permanent: true}) {
		return StatusUnchanged, "", nil
	}
	mac, _ := net.ParseMAC(a.MAC) // Validate checked it
	n := &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT, Type: syscall.RTN_UNICAST, IP: a.IP.AsSlice(), HardwareAddr: mac}
	if err := h.nl.NeighSet(n); err != nil {
		return "", "", fmt.Errorf("neighbour %s lladdr %s on %s: %w", a.IP, a.MAC, a.Link, err)
	}
	return StatusDone, a.Why, nil
}

// setFDB appends the default FDB entry to a.IP on the VTEP unless it is
// there, or, for a peer's MAC, sets its entry to a.IP as flanneld's AddFDB
// does.
func (h *host) setFDB(a *Action) (Status, string, error) {
	l, err := h.link(a.Link)
	if err != nil || l == nil {
		return StatusSkipped, "the link " + a.Link + " is gone", err
	}
	_, fdb, macs, err := h.standbyState(a.Link)
	if err != nil {
		return "", "", err
	}
	if a.MAC != zeroMAC {
		if slices.Contains(macs, FDBEntry{MAC: a.MAC, Dst: a.IP}) {
			return StatusUnchanged, "", nil
		}
		n := fdbEntry(l, a.IP)
		n.HardwareAddr, _ = net.ParseMAC(a.MAC) // validated
		if err := h.nl.NeighSet(n); err != nil {
			return "", "", fmt.Errorf("fdb replace %s dst %s on %s: %w", a.MAC, a.IP, a.Link, err)
		}
		return StatusDone, a.Why, nil
	}
	if slices.Contains(fdb, a.IP) {
		return StatusUnchanged, "", nil
	}
	if err := h.nl.NeighAppend(fdbEntry(l, a.IP)); err != nil && !errors.Is(err, syscall.EEXIST) {
		return "", "", fmt.Errorf("fdb append %s dst %s on %s: %w", zeroMAC, a.IP, a.Link, err)
	}
	return StatusDone, a.Why, nil
}

// deleteFDB deletes the default FDB entry to a.IP on the VTEP.
func (h *host) deleteFDB(a *Action) (Status, string, error) {
	l, err := h.link(a.Link)
	if err != nil || l == nil {
		return StatusUnchanged, "", err
	}
	_, fdb, _, err := h.standbyState(a.Link)
	if err != nil || !slices.Contains(fdb, a.IP) {
		return StatusUnchanged, "", err
	}
	if err := h.nl.NeighDel(fdbEntry(l, a.IP)); err != nil && !errors.Is(err, syscall.ENOENT) {
		return "", "", fmt.Errorf("fdb del %s dst %s on %s: %w", zeroMAC, a.IP, a.Link, err)
	}
	return StatusDone, a.Why, nil
}
