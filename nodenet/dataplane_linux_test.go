//go:build linux

package nodenet

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/coreos/go-iptables/iptables"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// requireEnv turns a data-plane test that cannot run into a failure.
const requireEnv = "CIDRSHIFT_REQUIRE_DATAPLANE"

// needDataplane skips (or, with CIDRSHIFT_REQUIRE_DATAPLANE=1, fails) a test
// that needs root, network namespaces and iptables.
func needDataplane(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root to create network namespaces, devices and iptables rules"
	} else if _, err := exec.LookPath("iptables"); err != nil {
		why = "needs iptables (apt-get install -y iptables)"
	}
	if why == "" {
		return
	}
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("%s=1 but this data-plane test %s", requireEnv, why)
	}
	t.Skip(why)
}

const netnsDir = "/run/netns"

// Every name a test gives (namespaces, temp dirs) starts with "nn", the test
// process's pid in base 36 and "-"; the sweeper removes leftovers of dead
// processes.
var (
	runPrefix = "nn" + strconv.FormatInt(int64(os.Getpid()), 36) + "-"
	runSeq    atomic.Int64
	sweepOnce sync.Once
	prefixRE  = regexp.MustCompile(`^nn([0-9a-z]+)-`)
)

// sweepDead removes namespaces and temp dirs left by test processes that died
// before their clean-up.
func sweepDead(t *testing.T) {
	dead := func(name string) bool {
		m := prefixRE.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, err := strconv.ParseInt(m[1], 36, 64)
		if err != nil || pid <= 0 || pid > 1<<22 || int(pid) == os.Getpid() {
			return false
		}
		err = syscall.Kill(int(pid), 0)
		return err == syscall.ESRCH
	}
	ents, _ := os.ReadDir(netnsDir)
	for _, e := range ents {
		if dead(e.Name()) {
			if err := netns.DeleteNamed(e.Name()); err != nil {
				t.Logf("sweep netns %s: %v", e.Name(), err)
			}
		}
	}
	tmps, _ := os.ReadDir(os.TempDir())
	for _, e := range tmps {
		if e.IsDir() && dead(e.Name()) {
			_ = os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
		}
	}
}

// rootAddrs lists the root namespace's links named with the run prefix and
// its addresses (but IPv6 link-local ones) as "link addr".
func rootAddrs(t *testing.T) []string {
	t.Helper()
	links, err := netlink.LinkList()
	require.NoError(t, err)
	var out []string
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, runPrefix) {
			out = append(out, "link "+l.Attrs().Name)
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		require.NoError(t, err)
		for _, a := range addrs {
			if !a.IP.IsLinkLocalUnicast() {
				out = append(out, l.Attrs().Name+" "+a.IPNet.String())
			}
		}
	}
	sort.Strings(out)
	return out
}

// checkRootNamespace fails the test if the root namespace gained a link
// named with the run prefix or a (non-link-local) address since before.
func checkRootNamespace(t *testing.T, before []string) {
	for _, a := range rootAddrs(t) {
		if !slices.Contains(before, a) {
			t.Errorf("the root namespace gained %s", a)
		}
	}
}

// testNode is a network namespace standing for one node, with its own file
// roots.
type testNode struct {
	t    *testing.T
	name string
	path string
	ns   netns.NsHandle
	nl   *netlink.Handle
	root string
	h    *host // for running iptables inside the namespace
}

// newTestNode creates a namespace (loopback up) and the node's file roots.
// Clean-up removes both, also after a failure.
func newTestNode(t *testing.T) *testNode {
	t.Helper()
	needDataplane(t)
	sweepOnce.Do(func() { sweepDead(t) })
	n := &testNode{t: t, name: runPrefix + strconv.FormatInt(runSeq.Add(1), 10)}
	n.path = filepath.Join(netnsDir, n.name)
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		orig, err := netns.Get()
		require.NoError(t, err)
		defer orig.Close()
		ns, err := netns.NewNamed(n.name)
		if err != nil {
			_ = netns.Set(orig)
			if os.Getenv(requireEnv) == "1" {
				t.Fatalf("create network namespace %s: %v", n.name, err)
			}
			t.Skipf("cannot create a network namespace here: %v", err)
		}
		if err := netns.Set(orig); err != nil {
			panic(fmt.Sprintf("cannot return to the original network namespace: %v", err))
		}
		n.ns = ns
	}()
	rootBefore := rootAddrs(t)
	t.Cleanup(func() { checkRootNamespace(t, rootBefore) })
	t.Cleanup(func() {
		if n.nl != nil {
			n.nl.Close()
		}
		_ = n.ns.Close()
		if err := netns.DeleteNamed(n.name); err != nil && !os.IsNotExist(err) {
			t.Errorf("delete netns %s: %v", n.name, err)
		}
		if _, err := os.Stat(n.path); !os.IsNotExist(err) {
			t.Errorf("netns %s still exists after clean-up", n.name)
		}
	})
	var err error
	n.nl, err = netlink.NewHandleAt(n.ns)
	require.NoError(t, err)
	lo, err := n.nl.LinkByName("lo")
	require.NoError(t, err)
	require.NoError(t, n.nl.LinkSetUp(lo))
	n.root, err = os.MkdirTemp("", n.name+"-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(n.root) })
	for _, d := range []string{"run/flannel", "var/lib/cni/networks/cbr0", "etc/cni/net.d"} {
		require.NoError(t, os.MkdirAll(filepath.Join(n.root, d), 0o755))
	}
	n.h = &host{w: Want{NetNS: n.path}, ns: n.ns}
	require.NoError(t, n.h.inNS(func() error {
		var err error
		n.h.ipt, err = iptables.New()
		return err
	}))
	return n
}

// want returns a Want pointing at the node's namespace and roots.
func (n *testNode) want(node string, podCIDR, network string) Want {
	w := Want{Node: node, PodCIDR: netip.MustParsePrefix(podCIDR),
		RunFlannelDir: filepath.Join(n.root, "run/flannel"), CNIDataDir: filepath.Join(n.root, "var/lib/cni"),
		CNIConfDir: filepath.Join(n.root, "etc/cni/net.d"), NetNS: n.path}
	if network != "" {
		w.Network = netip.MustParsePrefix(network)
	}
	return w
}

func (n *testNode) file(rel, content string) {
	n.t.Helper()
	p := filepath.Join(n.root, rel)
	require.NoError(n.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(n.t, os.WriteFile(p, []byte(content), 0o644))
}

func (n *testNode) exists(rel string) bool {
	_, err := os.Stat(filepath.Join(n.root, rel))
	return err == nil
}

func (n *testNode) read(rel string) string {
	n.t.Helper()
	b, err := os.ReadFile(filepath.Join(n.root, rel))
	require.NoError(n.t, err)
	return string(b)
}

func (n *testNode) addLink(l netlink.Link, addrs ...string) netlink.Link {
	n.t.Helper()
	require.NoError(n.t, n.nl.LinkAdd(l))
	got, err := n.nl.LinkByName(l.Attrs().Name)
	require.NoError(n.t, err)
	for _, a := range addrs {
		ad, err := netlink.ParseAddr(a)
		require.NoError(n.t, err)
		require.NoError(n.t, n.nl.AddrAdd(got, ad))
	}
	require.NoError(n.t, n.nl.LinkSetUp(got))
	return got
}

// underlay adds eth0 with the node's underlay address: a veth whose peer
// (ul0, up, no address) stays in the namespace, so it has a carrier.
func (n *testNode) underlay(addr string) netlink.Link {
	eth0 := n.addLink(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "ul0"}, addr)
	peer, err := n.nl.LinkByName("ul0")
	require.NoError(n.t, err)
	require.NoError(n.t, n.nl.LinkSetUp(peer))
	return eth0
}

func (n *testNode) bridge(name string, addrs ...string) netlink.Link {
	return n.addLink(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}, addrs...)
}

// vxlan adds flanneld's VTEP: VNI 1, port 8472, on eth0.
func (n *testNode) vxlan(name string, eth0 netlink.Link, local, mac string, addrs ...string) netlink.Link {
	hw, err := net.ParseMAC(mac)
	require.NoError(n.t, err)
	return n.addLink(&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: hw}, VxlanId: 1, Port: 8472,
		VtepDevIndex: eth0.Attrs().Index, SrcAddr: net.ParseIP(local)}, addrs...)
}

func (n *testNode) route(dst, gw string, dev netlink.Link, onlink bool, metric int) {
	n.t.Helper()
	r := &netlink.Route{Dst: toIPNet(netip.MustParsePrefix(dst)), Gw: net.ParseIP(gw), LinkIndex: dev.Attrs().Index, Priority: metric}
	if onlink {
		r.Flags = int(netlink.FLAG_ONLINK)
	}
	require.NoError(n.t, n.nl.RouteAdd(r))
}

// ipt runs fn with iptables inside the namespace.
func (n *testNode) ipt(fn func(ipt *iptables.IPTables) error) {
	n.t.Helper()
	require.NoError(n.t, n.h.inNS(func() error { return fn(n.h.ipt) }))
}

// rules appends rules (each "table chain spec...", spec words split on
// spaces, "_" standing for a space inside a word), creating chains as needed.
func (n *testNode) rules(lines ...string) {
	n.t.Helper()
	n.ipt(func(ipt *iptables.IPTables) error {
		for _, l := range lines {
			f := strings.Fields(l)
			for i := range f {
				f[i] = strings.ReplaceAll(f[i], "_", " ")
			}
			if ok, err := ipt.ChainExists(f[0], f[1]); err != nil {
				return err
			} else if !ok {
				if err := ipt.NewChain(f[0], f[1]); err != nil {
					return err
				}
			}
			if err := ipt.Append(f[0], f[1], f[2:]...); err != nil {
				return fmt.Errorf("%s: %w", l, err)
			}
		}
		return nil
	})
}

// chain lists a chain as `iptables -S` lines without the -N/-P lines.
func (n *testNode) chain(table, chain string) []string {
	n.t.Helper()
	var out []string
	n.ipt(func(ipt *iptables.IPTables) error {
		lines, err := ipt.List(table, chain)
		for _, l := range lines {
			if strings.HasPrefix(l, "-A ") {
				out = append(out, l)
			}
		}
		return err
	})
	return out
}

// addrsOf lists a link's IPv4 addresses.
func (n *testNode) addrsOf(name string) []string {
	n.t.Helper()
	l, err := n.nl.LinkByName(name)
	require.NoError(n.t, err)
	list, err := n.nl.AddrList(l, netlink.FAMILY_V4)
	require.NoError(n.t, err)
	var out []string
	for _, a := range list {
		out = append(out, a.IPNet.String())
	}
	sort.Strings(out)
	return out
}

// routeLines lists the main table's IPv4 routes as `ip route` would.
func (n *testNode) routeLines() []string {
	n.t.Helper()
	h := &host{nl: n.nl}
	rts, _, err := h.routes()
	require.NoError(n.t, err)
	var out []string
	for _, r := range rts {
		out = append(out, r.String())
	}
	sort.Strings(out)
	return out
}

// proxies lists a link's IPv4 proxy neighbour entries.
func (n *testNode) proxies(link string) []string {
	n.t.Helper()
	h := &host{nl: n.nl}
	ps, err := h.proxies(link)
	require.NoError(n.t, err)
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// state renders everything nodenet could change: links with MACs and
// addresses, proxy neighbour entries, routes, all iptables rules of nat
// and filter, and every file under the roots with its content.
func (n *testNode) state() string {
	n.t.Helper()
	var b strings.Builder
	links, err := n.nl.LinkList()
	require.NoError(n.t, err)
	for _, l := range links {
		fmt.Fprintf(&b, "link %s %s %v\n", l.Attrs().Name, l.Attrs().HardwareAddr, n.addrsOf(l.Attrs().Name))
	}
	for _, l := range links {
		for _, a := range n.proxies(l.Attrs().Name) {
			fmt.Fprintf(&b, "proxy %s dev %s\n", a, l.Attrs().Name)
		}
	}
	for _, r := range n.routeLines() {
		fmt.Fprintf(&b, "route %s\n", r)
	}
	// Permanent neighbour entries and vxlan FDB entries (with a remote):
	// what flanneld and the standby set; learned entries come and go.
	for _, l := range links {
		for _, fam := range []int{netlink.FAMILY_V4, syscall.AF_BRIDGE} {
			ns, err := n.nl.NeighList(l.Attrs().Index, fam)
			require.NoError(n.t, err)
			for _, e := range ns {
				if fam == netlink.FAMILY_V4 && e.State&netlink.NUD_PERMANENT != 0 && e.Flags&netlink.NTF_PROXY == 0 {
					fmt.Fprintf(&b, "neigh %s lladdr %s dev %s\n", e.IP, e.HardwareAddr, l.Attrs().Name)
				}
				if fam == syscall.AF_BRIDGE && e.IP != nil {
					fmt.Fprintf(&b, "fdb %s dst %s dev %s\n", e.HardwareAddr, e.IP, l.Attrs().Name)
				}
			}
		}
	}
	n.ipt(func(ipt *iptables.IPTables) error {
		for _, table := range []string{tableNAT, tableFilter} {
			chains, err := ipt.ListChains(table)
			if err != nil {
				return err
			}
			for _, c := range chains {
				lines, err := ipt.List(table, c)
				if err != nil {
					return err
				}
				fmt.Fprintf(&b, "%s %s\n", table, strings.Join(lines, "\n"))
			}
		}
		return nil
	})
	require.NoError(n.t, filepath.Walk(n.root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		fmt.Fprintf(&b, "file %s %q\n", p, data)
		return err
	}))
	return b.String()
}

// codes returns the findings' codes and objects, sorted, as "code object".
func codes(r *Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, string(f.Code)+" "+f.Object)
	}
	slices.Sort(out)
	return out
}

func finding(t *testing.T, r *Report, code Code, object string) Finding {
	t.Helper()
	for _, f := range r.Findings {
		if f.Code == code && f.Object == object {
			return f
		}
	}
	t.Fatalf("no finding %s %s in %v", code, object, codes(r))
	return Finding{}
}

func statuses(res *Result) map[Status]int {
	m := map[Status]int{}
	for _, o := range res.Outcomes {
		m[o.Status]++
	}
	return m
}
