//go:build linux

package nodenet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// maxFile bounds what nodenet reads from one host file.
const maxFile = 1 << 20

// host is an open view of one node: its network namespace, a netlink handle
// in it and iptables.
type host struct {
	w Want
	// ns is the namespace to work in; netns.None() means the caller's.
	ns      netns.NsHandle
	nl      *netlink.Handle
	ipt     *iptables.IPTables
	backend string
	// bridge is the bridge's name as Apply resolved it.
	bridge string
	// beforeRuleWrite, when set, runs between reading a chain and inserting
	// into it or deleting from it: tests change the chain there, as
	// flanneld does when it rewrites its chains.
	beforeRuleWrite func()
}

// openHost checks the host layout and opens the namespace, netlink and
// iptables. It changes nothing.
func openHost(w Want) (*host, error) {
	fi, err := os.Stat(w.RunFlannelDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fieldErr(ErrHostPathMissing, "Want.RunFlannelDir", w.RunFlannelDir,
			"does not exist: flanneld has not run on this node, or the host's root is mounted elsewhere (then set RunFlannelDir, CNIDataDir and CNIConfDir under it)")
	case err != nil:
		return nil, fieldErr(ErrHostPathMissing, "Want.RunFlannelDir", w.RunFlannelDir, "cannot be read: %v", err)
	case !fi.IsDir():
		return nil, fieldErr(ErrHostPathMissing, "Want.RunFlannelDir", w.RunFlannelDir, "is not a directory")
	}
	h := &host{w: w, ns: netns.None()}
	if w.NetNS != "" {
		if h.ns, err = netns.GetFromPath(w.NetNS); err != nil {
			return nil, fieldErr(ErrInvalidInput, "Want.NetNS", w.NetNS, "cannot be opened: %v", err)
		}
		h.nl, err = netlink.NewHandleAt(h.ns)
	} else {
		h.nl, err = netlink.NewHandle()
	}
	if err != nil {
		h.close()
		return nil, fieldErr(ErrInvalidInput, "Want.NetNS", w.NetNS, "is not a network namespace nodenet can enter: %v", err)
	}
	err = h.inNS(func() error {
		var err error
		h.ipt, h.backend, err = newIPTables(w.IPTablesBackend)
		if err != nil {
			return err
		}
		if _, err := h.ipt.List(tableNAT, chainPostrouting); err != nil {
			return fmt.Errorf("nodenet: %w: the %s backend cannot read nat %s (its kernel tables are missing: an nftables-only host?): %w",
				ErrNoIPTables, h.backend, chainPostrouting, err)
		}
		return nil
	})
	if err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

func (h *host) close() {
	if h.nl != nil {
		h.nl.Close()
	}
	if h.ns.IsOpen() {
		_ = h.ns.Close()
	}
}

// inNS runs fn on an OS thread switched into the host's namespace, so the
// iptables commands go-iptables runs act there. The thread is locked for the
// call; if it cannot be switched back it stays locked and Go retires it with
// its goroutine.
func (h *host) inNS(fn func() error) error {
	if !h.ns.IsOpen() {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("nodenet: read the current network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(h.ns); err != nil {
			runtime.UnlockOSThread()
			done <- fieldErr(ErrInvalidInput, "Want.NetNS", h.w.NetNS, "cannot be entered: %v", err)
			return
		}
		fnErr := fn()
		if err := netns.Set(orig); err != nil {
			done <- fmt.Errorf("nodenet: return from network namespace %s: %w (after: %v)", h.w.NetNS, err, fnErr)
			return
		}
		runtime.UnlockOSThread()
		done <- fnErr
	}()
	return <-done
}

// newIPTables opens iptables with the backend asked for, or the one the
// iptables binary on PATH is.
func newIPTables(backend string) (*iptables.IPTables, string, error) {
	var (
		ipt *iptables.IPTables
		err error
		cmd = "iptables"
	)
	switch backend {
	case IPTablesNFT:
		cmd = "iptables-nft"
		ipt, err = iptables.New(iptables.Path(cmd))
	case IPTablesLegacy:
		cmd = "iptables-legacy"
		ipt, err = iptables.New(iptables.Path(cmd))
	default:
		ipt, err = iptables.New()
		if err == nil {
			backend, err = detectBackend(cmd)
		}
	}
	if errors.Is(err, exec.ErrNotFound) {
		return nil, "", fmt.Errorf("nodenet: %w: no %s binary on PATH (%v): an nftables-only host; nodenet reads and rewrites flannel's rules through iptables (nft or legacy)",
			ErrNoIPTables, cmd, err)
	}
	if err != nil {
		return nil, "", fmt.Errorf("nodenet: %w: %w", ErrNoIPTables, err)
	}
	return ipt, backend, nil
}

// detectBackend names the backend of the iptables binary: the multi-call
// binary it resolves to is xtables-nft-multi or xtables-legacy-multi (or
// xtables-multi, before 1.8, legacy only).
func detectBackend(cmd string) (string, error) {
	path, err := exec.LookPath(cmd)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("nodenet: %w: resolve %s: %w", ErrUnknownBackend, path, err)
	}
	switch base := filepath.Base(real); {
	case base == "xtables-nft-multi" || base == "iptables-nft":
		return IPTablesNFT, nil
	case base == "xtables-legacy-multi" || base == "iptables-legacy" || base == "xtables-multi":
		return IPTablesLegacy, nil
	default:
		return "", fieldErr(ErrUnknownBackend, "iptables", path,
			"resolves to %s, which is neither xtables-nft-multi nor xtables-legacy-multi; set Want.IPTablesBackend to %q or %q", real, IPTablesNFT, IPTablesLegacy)
	}
}

// dump retries a netlink dump the kernel interrupted.
func dump[T any](f func() ([]T, error)) ([]T, error) {
	for i := 0; ; i++ {
		v, err := f()
		if errors.Is(err, netlink.ErrDumpInterrupted) && i < 10 {
			continue
		}
		return v, err
	}
}

func toPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

func toIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// link returns a link by name, nil when it does not exist.
func (h *host) link(name string) (netlink.Link, error) {
	l, err := h.nl.LinkByName(name)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil, nil
	}
	return l, err
}

// linkState reads a link's MAC and IPv4 addresses; nil when it does not exist.
func (h *host) linkState(name string) (*linkState, error) {
	l, err := h.link(name)
	if l == nil || err != nil {
		return nil, err
	}
	addrs, err := h.addrs(l)
	if err != nil {
		return nil, err
	}
	st := &linkState{name: name, mac: l.Attrs().HardwareAddr.String(), addrs: addrs, up: l.Attrs().Flags&net.FlagUp != 0}
	if mi := l.Attrs().MasterIndex; mi > 0 {
		if m, err := h.nl.LinkByIndex(mi); err == nil {
			st.master = m.Attrs().Name
		}
	}
	return st, nil
}

func (h *host) addrs(l netlink.Link) ([]netip.Prefix, error) {
	list, err := dump(func() ([]netlink.Addr, error) { return h.nl.AddrList(l, netlink.FAMILY_V4) })
	if err != nil {
		return nil, fmt.Errorf("nodenet: list addresses of %s: %w", l.Attrs().Name, err)
	}
	var out []netip.Prefix
	for _, a := range list {
		if p, ok := toPrefix(a.IPNet); ok && p.Addr().Is4() && a.Scope == int(netlink.SCOPE_UNIVERSE) {
			out = append(out, p)
		}
	}
	return out, nil
}

// routes lists the main table's IPv4 unicast routes with a single next hop.
func (h *host) routes() ([]Route, []netlink.Route, error) {
	list, err := dump(func() ([]netlink.Route, error) {
		return h.nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: syscall.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("nodenet: list routes: %w", err)
	}
	names := map[int]string{}
	var out []Route
	var raw []netlink.Route
	for _, r := range list {
		dst, ok := toPrefix(r.Dst)
		if !ok || r.Type != syscall.RTN_UNICAST || len(r.MultiPath) > 0 || !dst.Addr().Is4() {
			continue
		}
		rt := Route{Dst: dst.Masked(), Onlink: r.Flags&int(netlink.FLAG_ONLINK) != 0, Metric: r.Priority}
		if gw, ok := netip.AddrFromSlice(r.Gw); ok {
			rt.Gw = gw.Unmap()
		}
		if r.LinkIndex > 0 {
			name, ok := names[r.LinkIndex]
			if !ok {
				if l, err := h.nl.LinkByIndex(r.LinkIndex); err == nil {
					name = l.Attrs().Name
				}
				names[r.LinkIndex] = name
			}
			rt.Dev = name
		}
		out = append(out, rt)
		raw = append(raw, r)
	}
	return out, raw, nil
}

// rules reads the watched chains (inside the namespace); missing chains are
// left out.
func (h *host) rules() (map[string][]Rule, error) {
	out := map[string][]Rule{}
	err := h.inNS(func() error {
		for _, c := range watchedChains {
			rules, ok, err := h.listChain(c.table, c.chain)
			if err != nil {
				return err
			}
			if ok {
				out[chainKey(c.table, c.chain)] = rules
			}
		}
		return nil
	})
	return out, err
}

// listChain lists one chain; call it inside the namespace.
func (h *host) listChain(table, chain string) ([]Rule, bool, error) {
	if chain != chainPostrouting {
		ok, err := h.ipt.ChainExists(table, chain)
		if err != nil || !ok {
			return nil, false, wrapIPT(err, "check chain", table, chain)
		}
	}
	lines, err := h.ipt.List(table, chain)
	if err != nil {
		return nil, false, wrapIPT(err, "list", table, chain)
	}
	rules := []Rule{}
	for _, line := range lines {
		c, spec, ok, err := parseRuleLine(line)
		if err != nil {
			return nil, false, fmt.Errorf("nodenet: %s %s: %w: %q", table, chain, err, line)
		}
		if ok && c == chain {
			rules = append(rules, Rule{Table: table, Chain: chain, Spec: spec})
		}
	}
	return rules, true, nil
}

// wrapIPT names the iptables call that failed; a command killed by a
// signal is marked ErrInterrupted.
func wrapIPT(err error, op, table, chain string) error {
	if err == nil {
		return nil
	}
	var ie *iptables.Error
	if errors.As(err, &ie) && ie.ProcessState != nil {
		if ws, ok := ie.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("nodenet: iptables %s %s %s: %w (%s): %w", op, table, chain, ErrInterrupted, ws.Signal(), err)
		}
	}
	return fmt.Errorf("nodenet: iptables %s %s %s: %w", op, table, chain, err)
}

// readFile reads at most maxFile bytes of a host file.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err == nil && len(data) > maxFile {
		err = fmt.Errorf("larger than %d bytes", maxFile)
	}
	return data, err
}

// cniRead is what readCNI found in CNIConfDir.
type cniRead struct {
	// file is the config nodenet reads the layout from ("" when none
	// parses), cfg what it says.
	file string
	cfg  *CNIConfig
	// bad lists the files before file that the runtime skips, or that
	// could not be read.
	bad []fileProblem
	// inUse is the file the container runtime uses when nodenet cannot
	// parse it (a calico or multus config, say), with why; nil when the
	// runtime uses file, or no file at all.
	inUse *fileProblem
}

// readCNI reads CNIConfDir the way container runtimes pick a file: sorted
// by name, .conf, .conflist and .json, skipping a file libcni does not load
// (runtimeCNI); the runtime uses the first one left. When nodenet
// cannot parse that one, readCNI says so (inUse) and reads the layout from
// the first later file it can parse, which the runtime reads only through
// a delegating config (multus's).
func readCNI(dir string) (cniRead, error) {
	var r cniRead
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("nodenet: read CNIConfDir %s: %w", dir, err)
	}
	for _, e := range ents { // os.ReadDir sorts by name
		switch filepath.Ext(e.Name()) {
		case ".conf", ".conflist", ".json":
		default:
			continue
		}
		if e.IsDir() {
			continue // libcni.ConfFiles skips directories
		}
		path := filepath.Join(dir, e.Name())
		data, err := readFile(path)
		if err == nil {
			data, err = runtimeCNI(path, data)
		}
		if err != nil {
			r.bad = append(r.bad, fileProblem{path: path, err: err})
			continue
		}
		c, err := ParseCNIConfig(data)
		if err == nil {
			r.file, r.cfg = path, c
			return r, nil
		}
		// The runtime reads none after the first it loads: a later file
		// nodenet cannot parse is no problem of the node's.
		if r.inUse == nil {
			r.inUse = &fileProblem{path: path, err: err}
		}
	}
	return r, nil
}

// readReservations lists host-local's address files in dir (IPv4 only).
func readReservations(dir string) ([]reservation, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nodenet: read reservations in %s: %w", dir, err)
	}
	var out []reservation
	for _, e := range ents {
		ip, err := netip.ParseAddr(e.Name())
		if err != nil || !ip.Is4() || !e.Type().IsRegular() {
			continue // lock, last_reserved_ip.N, IPv6
		}
		path := filepath.Join(dir, e.Name())
		data, err := readFile(path)
		if err != nil {
			return nil, fmt.Errorf("nodenet: read reservation %s: %w", path, err)
		}
		out = append(out, reservation{path: path, ip: ip, containerID: reservationOwner(data)})
	}
	return out, nil
}

// reservationOwner is the container ID of a reservation: its first line
// (host-local writes "ID\r\nIFNAME", older versions only the ID).
func reservationOwner(data []byte) string {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	return strings.TrimSpace(string(line))
}

// snapshot reads everything Audit judges. It changes nothing.
func (h *host) snapshot() (*snapshot, error) {
	w := h.w
	s := &snapshot{iptables: h.backend, envFile: filepath.Join(w.RunFlannelDir, "subnet.env")}
	var err error
	cni, err := readCNI(w.CNIConfDir)
	if err != nil {
		return nil, err
	}
	s.cniFile, s.cni, s.cniBad, s.cniInUse = cni.file, cni.cfg, cni.bad, cni.inUse
	var bridge string
	bridge, s.resDir = layout(w, s.cni)
	s.envData, err = readFile(s.envFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
		s.envMissing, s.envData = true, nil
	case err != nil:
		return nil, fmt.Errorf("nodenet: read %s: %w", s.envFile, err)
	}
	if s.bridge, err = h.linkState(bridge); err != nil {
		return nil, err
	}
	if s.routes, _, err = h.routes(); err != nil {
		return nil, err
	}
	if s.transition, s.transitionPort, s.transitionGWs, s.proxies, err = h.transitionState(bridge, s.routes); err != nil {
		return nil, err
	}
	if w.Backend == BackendVXLAN {
		if s.vtep, err = h.linkState(w.VTEP); err != nil {
			return nil, err
		}
		if s.neighbours, s.fdbDefaults, s.fdb, err = h.standbyState(w.VTEP); err != nil {
			return nil, err
		}
	}
	if s.chains, err = h.rules(); err != nil {
		return nil, err
	}
	if s.cni == nil || s.cni.IPAM == "host-local" {
		if s.reservations, err = readReservations(s.resDir); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ruleIndex returns the 1-based position of the first rule with spec.
func ruleIndex(rules []Rule, spec []string) int {
	return slices.IndexFunc(rules, func(r Rule) bool { return slices.Equal(r.Spec, spec) }) + 1
}
