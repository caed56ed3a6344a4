package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Node is one node namespace on the underlay, with its own files: the
// subnet file flanneld writes, the flannel CNI plugin's data dir and
// host-local's reservations, all under Dir.
type Node struct {
	env  *Env
	Name string
	NS   string
	// IP is the node's underlay address, on eth0.
	IP netip.Addr
	// IP6 is its IPv6 underlay address on eth0, once EnableIPv6 ran.
	IP6 netip.Addr
	Dir string
	// SubnetFile is flanneld's --subnet-file (the node's /run/flannel/subnet.env).
	SubnetFile string
	// CNINetwork is the CNI network name; host-local keeps its
	// reservations in IPAMDir/<CNINetwork> (the node's
	// /var/lib/cni/networks/<CNINetwork>).
	CNINetwork string
	IPAMDir    string
	// FlannelCNIDir is the flannel CNI plugin's dataDir (/var/lib/cni/flannel).
	FlannelCNIDir string
	cniCacheDir   string

	// DelegateIPMasq, when set, is the "ipMasq" the flannel CNI plugin
	// hands the bridge plugin; unset, the plugin uses !FLANNEL_IPMASQ, so
	// without flanneld's --ip-masq the bridge plugin masquerades every pod
	// connection leaving the node's subnet, pod to pod across nodes too.
	DelegateIPMasq *bool

	Flanneld *Proc
	// flanneldEnv and flanneldFlags are those of the last StartFlanneld.
	flanneldEnv   []string
	flanneldFlags []string
	pods          []*Pod
	podSeq        int
	idx           int
}

// AddNode creates a node namespace attached to the underlay at
// 198.51.100.(10+n), with IP forwarding and bridge netfilter on.
func (e *Env) AddNode(name string) (*Node, error) {
	e.mu.Lock()
	e.nodeSeq++
	idx := e.nodeSeq
	e.mu.Unlock()
	n := &Node{
		env:  e,
		Name: name,
		NS:   e.Prefix + "node-" + name,
		IP:   netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + idx)}),
		Dir:  filepath.Join(e.Dir, "nodes", name),
		idx:  idx,
	}
	n.SubnetFile = filepath.Join(n.Dir, "run", "flannel", "subnet.env")
	n.CNINetwork = "cbr0-" + name
	n.IPAMDir = filepath.Join(n.Dir, "var", "lib", "cni", "networks")
	n.FlannelCNIDir = filepath.Join(n.Dir, "var", "lib", "cni", "flannel")
	n.cniCacheDir = filepath.Join(n.Dir, "var", "lib", "cni", "cache")
	if err := os.MkdirAll(filepath.Dir(n.SubnetFile), 0o755); err != nil {
		return nil, err
	}
	if err := e.addNS(n.NS); err != nil {
		return nil, err
	}
	if err := e.attach(n.NS, fmt.Sprintf("n%d", idx), "eth0", n.IP); err != nil {
		return nil, err
	}
	// A new veth needs a moment before the bridge forwards its frames:
	// wait until the node reaches the outside echo server over the underlay.
	var reachErr error
	for i := 0; i < 50; i++ {
		if _, reachErr = Probe(n.NS, netip.AddrPortFrom(OutsideIP, EchoPort), 200*time.Millisecond); reachErr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if reachErr != nil {
		return nil, fmt.Errorf("node %s does not reach %s over the underlay: %w", name, OutsideIP, reachErr)
	}
	for _, kv := range [][2]string{
		{"net.ipv4.ip_forward", "1"},
		{"net.bridge.bridge-nf-call-iptables", "1"},
	} {
		if err := sysctlIn(n.NS, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("sysctl %s in %s: %w", kv[0], n.NS, err)
		}
	}
	return n, nil
}

// EnableIPv6 makes the node dual-stack: an address of UnderlayNet6 on eth0
// (no duplicate address detection: the underlay is the test's own) and
// IPv6 forwarding on. Call it before flanneld starts.
func (n *Node) EnableIPv6() error {
	a := UnderlayNet6.Addr().As16()
	a[15] = byte(10 + n.idx)
	ip := netip.AddrFrom16(a)
	h, err := handleAt(n.NS)
	if err != nil {
		return err
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("eth0 of %s: %w", n.Name, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(UnderlayNet6.Bits(), 128)}, Flags: unix.IFA_F_NODAD}
	if err := h.AddrAdd(eth0, addr); err != nil {
		return fmt.Errorf("address %s on eth0 of %s: %w", ip, n.Name, err)
	}
	for _, kv := range [][2]string{
		{"net.ipv6.conf.all.forwarding", "1"},
		{"net.bridge.bridge-nf-call-ip6tables", "1"},
	} {
		if err := sysctlIn(n.NS, kv[0], kv[1]); err != nil {
			return fmt.Errorf("sysctl %s in %s: %w", kv[0], n.NS, err)
		}
	}
	n.IP6 = ip
	return nil
}

// Pods returns the node's pods.
func (n *Node) Pods() []*Pod { return n.pods }

// Pod is a namespace set up by CNI ADD on its node, with an echo server.
type Pod struct {
	Name string
	NS   string
	Node *Node
	IP   netip.Addr
	// IP6 is the pod's IPv6 address when its node's subnet file gives
	// one (a dual-stack flannel network); its echo server answers on it too.
	IP6         netip.Addr
	containerID string
	echo, echo6 *EchoServer
}

// cniConfList is the node's network configuration, as kube-flannel.yml's
// cni-conf.json, with this node's file locations.
func (n *Node) cniConfList() ([]byte, error) {
	delegate := map[string]any{"hairpinMode": true, "isDefaultGateway": true}
	if n.DelegateIPMasq != nil {
		delegate["ipMasq"] = *n.DelegateIPMasq
	}
	conf := map[string]any{
		"cniVersion": "0.3.1",
		"name":       n.CNINetwork,
		"plugins": []any{
			map[string]any{
				"type":       "flannel",
				"subnetFile": n.SubnetFile,
				"dataDir":    n.FlannelCNIDir,
				"ipam":       map[string]any{"type": "host-local", "dataDir": n.IPAMDir},
				"delegate":   delegate,
			},
			map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}},
		},
	}
	return json.Marshal(conf)
}

func (n *Node) cni() (*libcni.CNIConfig, *libcni.NetworkConfigList, error) {
	data, err := n.cniConfList()
	if err != nil {
		return nil, nil, err
	}
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		return nil, nil, err
	}
	cfg := libcni.NewCNIConfigWithCacheDir([]string{n.env.CNIDir}, n.cniCacheDir, &nsExec{ns: n.NS})
	return cfg, list, nil
}

// AddPod creates a pod namespace, runs CNI ADD for it on the node, and
// starts its echo server. A failed ADD leaves no namespace behind and
// returns the plugin's error.
func (n *Node) AddPod(ctx context.Context, name string) (*Pod, error) {
	p := &Pod{Name: name, NS: n.env.Prefix + "pod-" + name, Node: n}
	n.podSeq++
	p.containerID = fmt.Sprintf("%s-%s-%d", n.env.Prefix, name, n.podSeq)
	if err := n.env.addNS(p.NS); err != nil {
		return nil, err
	}
	cfg, list, err := n.cni()
	if err != nil {
		return nil, err
	}
	rt := &libcni.RuntimeConf{ContainerID: p.containerID, NetNS: filepath.Join(netnsDir, p.NS), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}}}
	res, err := cfg.AddNetworkList(ctx, list, rt)
	if err != nil {
		_ = deleteNamedNS(p.NS)
		return nil, fmt.Errorf("CNI ADD %s on %s: %w", name, n.Name, err)
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return nil, err
	}
	for _, ipc := range r.IPs {
		a, ok := netip.AddrFromSlice(ipc.Address.IP)
		switch a = a.Unmap(); {
		case ok && a.Is4() && !p.IP.IsValid():
			p.IP = a
		case ok && a.Is6() && !p.IP6.IsValid():
			p.IP6 = a
		}
	}
	if !p.IP.IsValid() {
		return nil, fmt.Errorf("CNI ADD %s: no IPv4 address in %v", name, r)
	}
	if p.echo, err = n.env.StartEcho(p.NS, name, netip.Addr{}, EchoPort); err != nil {
		return nil, err
	}
	if p.IP6.IsValid() {
		if p.echo6, err = n.env.StartEcho(p.NS, name, netip.IPv6Unspecified(), EchoPort); err != nil {
			return nil, err
		}
	}
	n.pods = append(n.pods, p)
	return p, nil
}

// DelPod runs CNI DEL for a pod, stops its echo server and removes its
// namespace, as the kubelet does when a pod is deleted.
func (n *Node) DelPod(ctx context.Context, p *Pod) error {
	for _, e := range []*EchoServer{p.echo, p.echo6} {
		if e != nil {
			_ = e.Close()
		}
	}
	cfg, list, err := n.cni()
	if err != nil {
		return err
	}
	rt := &libcni.RuntimeConf{ContainerID: p.containerID, NetNS: filepath.Join(netnsDir, p.NS), IfName: "eth0"}
	delErr := cfg.DelNetworkList(ctx, list, rt)
	for i, q := range n.pods {
		if q == p {
			n.pods = append(n.pods[:i], n.pods[i+1:]...)
			break
		}
	}
	if err := deleteNamedNS(p.NS); err != nil {
		return err
	}
	if delErr != nil {
		return fmt.Errorf("CNI DEL %s: %w", p.Name, delErr)
	}
	return nil
}

// nsExec runs CNI plugins inside a node namespace, as a runtime on that node
// would (the bridge plugin creates cni0 in the namespace it runs in).
type nsExec struct {
	ns string
	version.PluginDecoder
}

func (e *nsExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, "ip", "netns", "exec", e.ns, pluginPath)
	c.Env = environ
	c.Stdin = bytes.NewReader(stdinData)
	c.Stdout = &stdout
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		emsg := types.Error{}
		if stdout.Len() == 0 {
			emsg.Msg = fmt.Sprintf("netplugin failed: %q: %v", stderr.String(), err)
		} else if perr := json.Unmarshal(stdout.Bytes(), &emsg); perr != nil {
			emsg.Msg = fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", stdout.String(), perr)
		}
		return nil, &emsg
	}
	return stdout.Bytes(), nil
}

func (e *nsExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

// StartFlanneld starts flanneld on the node with the given flags plus
// --iface=eth0 and the node's --subnet-file, and waits until
// this run logged that it wrote the subnet file (unless wait is zero).
func (n *Node) StartFlanneld(env []string, wait time.Duration, flags ...string) error {
	if n.Flanneld != nil && !n.Flanneld.Exited() {
		return fmt.Errorf("flanneld already runs on %s", n.Name)
	}
	n.flanneldEnv, n.flanneldFlags = env, flags
	args := append([]string{"--iface=eth0", "--subnet-file=" + n.SubnetFile}, flags...)
	p, err := n.env.StartProc(n.NS, "flanneld-"+n.Name, env, n.env.Bins.Flanneld, args...)
	if err != nil {
		return err
	}
	n.Flanneld = p
	if wait == 0 {
		return nil
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if strings.Contains(p.RunLog(), "Wrote subnet file to "+n.SubnetFile) {
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("flanneld on %s exited:\n%s", n.Name, tailLines(p.Log(), 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("flanneld on %s wrote no %s within %s:\n%s", n.Name, n.SubnetFile, wait, tailLines(p.Log(), 20))
}

// RestartFlanneld stops flanneld and starts it again with the same flags.
func (n *Node) RestartFlanneld(wait time.Duration) error {
	n.StopFlanneld()
	return n.StartFlanneld(n.flanneldEnv, wait, n.flanneldFlags...)
}

// StopFlanneld stops the node's flanneld.
func (n *Node) StopFlanneld() {
	if n.Flanneld != nil {
		n.Flanneld.Stop(5 * time.Second)
	}
}

// SubnetEnv returns the node's subnet file as a map.
func (n *Node) SubnetEnv() (map[string]string, error) {
	data, err := os.ReadFile(n.SubnetFile)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			out[k] = v
		}
	}
	return out, nil
}

// Run runs a command inside the node namespace.
func (n *Node) Run(name string, args ...string) (string, error) { return runIn(n.NS, name, args...) }

// CNIConfFile is where WriteCNIConfList puts the node's CNI configuration:
// the host's /etc/cni/net.d/10-flannel.conflist, under Dir.
func (n *Node) CNIConfFile() string {
	return filepath.Join(n.Dir, "etc", "cni", "net.d", "10-flannel.conflist")
}

// WriteCNIConfList writes the node's CNI configuration (the one AddPod
// uses, otherwise only in memory) to CNIConfFile, for tools that read a
// host's files with Dir as the host's root (nodenet-agent --host-root).
func (n *Node) WriteCNIConfList() (string, error) {
	data, err := n.cniConfList()
	if err != nil {
		return "", err
	}
	path := n.CNIConfFile()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, data, 0o644)
}
