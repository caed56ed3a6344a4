package dataplane

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/cidrshift/cidrshift/e2e/harness"
)

// RequireEnv names the variable that turns a data-plane skip into a
// failure (set by the Makefile's e2e target, so CI cannot silently skip).
const RequireEnv = "CIDRSHIFT_REQUIRE_DATAPLANE"

// Underlay addresses (TEST-NET-2, RFC 5737; not TEST-NET-1, which this
// machine's own uplink uses): only ever inside namespaces the
// test made.
var (
	UnderlayNet = netip.MustParsePrefix("198.51.100.0/24")
	// ControlIP is the control namespace's address; the forwarders to the
	// harness's control plane listen on it.
	ControlIP = netip.MustParseAddr("198.51.100.1")
	// OutsideIP is the "outside" namespace: a host beyond the cluster whose
	// echo server shows whether pod traffic was SNATed.
	OutsideIP = netip.MustParseAddr("198.51.100.254")
	// UnderlayNet6 is the underlay's IPv6 range: a node on which
	// EnableIPv6 ran holds UnderlayNet6's address with the same last byte
	// as its IPv4 one. Only node namespaces hold it.
	UnderlayNet6 = netip.MustParsePrefix("fd00:198:51:100::/64")
)

// Skip skips the test unless the data plane can run here: as root, with
// network namespace support and the iproute2, iptables and conntrack
// commands. With CIDRSHIFT_REQUIRE_DATAPLANE=1 a missing prerequisite fails
// the test instead. Under -short the test always skips (-short asks for no
// e2e work at all, so it is not a missing prerequisite).
func Skip(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("data plane: skipped under -short")
	}
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "data plane: needs root (network namespaces, veth, iptables)"
	case !netnsSupported():
		why = "data plane: network namespaces are not available here"
	default:
		for _, tool := range []string{"ip", "iptables", "iptables-save", "iptables-restore", "conntrack"} {
			if _, err := exec.LookPath(tool); err != nil {
				why = "data plane: " + tool + " is not installed (apt-get install iproute2 iptables conntrack)"
				break
			}
		}
	}
	if why == "" {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s, and %s=1 makes that a failure", why, RequireEnv)
	}
	t.Skip(why)
}

func netnsSupported() bool {
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return false
	}
	h, err := netns.Get()
	if err != nil {
		return false
	}
	h.Close()
	return true
}

var runSeq atomic.Int32

// Env is one run's topology: an underlay namespace with a bridge, a control
// namespace and an outside namespace on it, and the nodes added with
// AddNode. Everything is removed by t.Cleanup.
type Env struct {
	t      testing.TB
	Prefix string
	Dir    string

	// Bins are flanneld and the CNI plugins (kube-proxy comes with the
	// control plane: ControlPlane.Binaries().KubeProxy).
	Bins *harness.DataPlaneBinaries
	// CNIDir is the CNI plugin search path.
	CNIDir string

	UnderNS, ControlNS, OutsideNS string
	bridge                        string

	mu       sync.Mutex
	nsNames  []string // in creation order
	procs    []*Proc
	closers  []io.Closer
	nodeSeq  int
	outsider *EchoServer
}

// NewEnv sweeps leftovers of dead runs, then creates the underlay, control
// and outside namespaces. It registers the teardown, which also asserts
// that nothing with the run's prefix remains.
func NewEnv(t testing.TB) *Env {
	t.Helper()
	Skip(t)
	if removed, err := SweepDead(); err != nil {
		t.Logf("sweeper: %v", err)
	} else if len(removed) > 0 {
		t.Logf("sweeper removed leftovers of dead runs: %s", strings.Join(removed, ", "))
	}
	for _, u := range []netip.Prefix{UnderlayNet, UnderlayNet6} {
		if a, ok := rootAddrIn(u); ok {
			t.Fatalf("the root namespace itself uses the test underlay %s (%s): the data plane would look like this machine's network", u, a)
		}
	}
	bins, err := harness.EnsureDataPlaneBinaries(t.Context(), harness.BuildOptions{Logf: t.Logf})
	if err != nil {
		t.Fatalf("data plane binaries: %v", err)
	}
	e := &Env{t: t, Prefix: runPrefix(int(runSeq.Add(1))), Bins: bins, CNIDir: bins.CNIDir}
	// The run's files (subnet files, CNI state, logs, kubeconfig) live in a
	// directory named with the prefix, so the sweeper finds it after a
	// killed run too (t.TempDir is only removed by a test that ends).
	if e.Dir, err = os.MkdirTemp("", e.Prefix+"files-"); err != nil {
		t.Fatalf("run directory: %v", err)
	}
	e.UnderNS = e.Prefix + "under"
	e.ControlNS = e.Prefix + "control"
	e.OutsideNS = e.Prefix + "outside"
	e.bridge = e.Prefix + "br"
	t.Cleanup(e.teardown)
	if err := e.build(); err != nil {
		t.Fatalf("data plane topology: %v", err)
	}
	srv, err := e.StartEcho(e.OutsideNS, "outside", OutsideIP, EchoPort)
	if err != nil {
		t.Fatalf("outside echo server: %v", err)
	}
	e.outsider = srv
	return e
}

func (e *Env) addNS(name string) error {
	if err := newNamedNS(name); err != nil {
		return err
	}
	e.mu.Lock()
	e.nsNames = append(e.nsNames, name)
	e.mu.Unlock()
	return nil
}

func (e *Env) build() error {
	for _, ns := range []string{e.UnderNS, e.ControlNS, e.OutsideNS} {
		if err := e.addNS(ns); err != nil {
			return err
		}
	}
	h, err := handleAt(e.UnderNS)
	if err != nil {
		return err
	}
	defer h.Close()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: e.bridge}}
	if err := h.LinkAdd(br); err != nil {
		return fmt.Errorf("add underlay bridge: %w", err)
	}
	if err := h.LinkSetUp(br); err != nil {
		return err
	}
	if err := e.attach(e.ControlNS, "c", "eth0", ControlIP); err != nil {
		return err
	}
	return e.attach(e.OutsideNS, "o", "eth0", OutsideIP)
}

// attach connects namespace ns to the underlay bridge with a veth pair:
// <prefix>v<tag> on the bridge, ifName with addr/24 in ns.
func (e *Env) attach(ns, tag, ifName string, addr netip.Addr) error {
	h, err := handleAt(e.UnderNS)
	if err != nil {
		return err
	}
	defer h.Close()
	target, err := netns.GetFromName(ns)
	if err != nil {
		return err
	}
	defer target.Close()
	hostSide := e.Prefix + "v" + tag
	if len(hostSide) > 15 {
		return fmt.Errorf("link name %q is longer than 15 characters", hostSide)
	}
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostSide},
		PeerName:      ifName,
		PeerNamespace: netlink.NsFd(int(target)),
	}
	if err := h.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s: %w", hostSide, err)
	}
	br, err := h.LinkByName(e.bridge)
	if err != nil {
		return err
	}
	l, err := h.LinkByName(hostSide)
	if err != nil {
		return err
	}
	if err := h.LinkSetMaster(l, br); err != nil {
		return err
	}
	if err := h.LinkSetUp(l); err != nil {
		return err
	}
	nh, err := netlink.NewHandleAt(target)
	if err != nil {
		return err
	}
	defer nh.Close()
	peer, err := nh.LinkByName(ifName)
	if err != nil {
		return err
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(UnderlayNet.Bits(), 32)}}
	if err := nh.AddrAdd(peer, a); err != nil {
		return fmt.Errorf("address %s on %s in %s: %w", addr, ifName, ns, err)
	}
	return nh.LinkSetUp(peer)
}

// Track registers a closer (listener, forwarder) closed at teardown before
// the namespaces are deleted: an open socket keeps its namespace alive.
func (e *Env) Track(c io.Closer) {
	e.mu.Lock()
	e.closers = append(e.closers, c)
	e.mu.Unlock()
}

// StartProc starts a process in a namespace; teardown stops it.
func (e *Env) StartProc(ns, name string, env []string, bin string, args ...string) (*Proc, error) {
	logPath := filepath.Join(e.Dir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	p, err := startInNS(ns, name, logPath, env, bin, args...)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return p, nil
}

// teardown stops processes, closes sockets, deletes namespaces in reverse
// order and checks that nothing with the prefix is left.
func (e *Env) teardown() {
	e.mu.Lock()
	procs := slices.Clone(e.procs)
	closers := slices.Clone(e.closers)
	names := slices.Clone(e.nsNames)
	e.mu.Unlock()
	if e.t.Failed() {
		for _, p := range procs {
			e.t.Logf("last lines of %s:\n%s", p.Name, tailLines(p.Log(), 25))
		}
	}
	for _, p := range procs {
		p.Stop(3 * time.Second)
	}
	for i := len(closers) - 1; i >= 0; i-- {
		_ = closers[i].Close()
	}
	for i := len(names) - 1; i >= 0; i-- {
		if err := deleteNamedNS(names[i]); err != nil {
			e.t.Errorf("teardown: %v", err)
		}
	}
	if os.Getenv(harness.KeepDirEnv) == "" {
		if err := os.RemoveAll(e.Dir); err != nil {
			e.t.Errorf("teardown: %v", err)
		}
	} else {
		e.t.Logf("kept %s (%s is set)", e.Dir, harness.KeepDirEnv)
	}
	if left := leftovers(e.Prefix); len(left) > 0 {
		e.t.Errorf("teardown left behind: %s", strings.Join(left, ", "))
	}
	for _, u := range []netip.Prefix{UnderlayNet, UnderlayNet6} {
		if a, ok := rootAddrIn(u); ok {
			e.t.Errorf("the root namespace holds an underlay address: %s", a)
		}
	}
	for _, p := range procs {
		if !p.Exited() || pidAlive(p.Pid()) && !isZombie(p.Pid()) {
			e.t.Errorf("teardown: process %s (pid %d) still running", p.Name, p.Pid())
		}
	}
}

// rootAddrIn returns an address of the root namespace inside p (either
// family).
func rootAddrIn(p netip.Prefix) (string, bool) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return "", false
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && p.Contains(ip.Unmap()) {
			return a.IPNet.String(), true
		}
	}
	return "", false
}

func isZombie(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sysctlIn writes a sysctl inside a namespace (/proc/sys/net follows the
// writing thread's network namespace).
func sysctlIn(ns, key, value string) error {
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	return inNS(ns, func() error {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString(value)
		return err
	})
}
