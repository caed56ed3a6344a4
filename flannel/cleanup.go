package flannel

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// HostStep is one command an operator runs after a node's subnet changed.
// The library runs nothing on hosts; it only says what to run, where and why.
type HostStep struct {
	// Where is "node" (a root shell on the node) or "cluster" (kubectl with
	// cluster-admin rights).
	Where string `json:"where"`
	// Command is the exact command line.
	Command string `json:"command"`
	// Why explains what breaks without it.
	Why string `json:"why"`
}

// CleanupOptions describes the node whose subnet moved.
type CleanupOptions struct {
	// Node is the Kubernetes node name.
	Node string
	// From and To are the old and new subnets (used in the explanations).
	From, To SubnetKey
	// BackendType is the flannel backend ("vxlan" when empty).
	BackendType string
	// Backend is the config's Backend object (for the VXLAN VNI, default 1).
	Backend json.RawMessage
	// IPv6 is set when the node also has an IPv6 flannel subnet.
	IPv6 bool
	// KubeSubnetManager is set when flanneld runs as the kube-flannel DaemonSet;
	// otherwise it is a host service (systemd unit "flanneld").
	KubeSubnetManager bool
	// Namespace and PodSelector find the flannel pod; defaults "kube-flannel" and "app=flannel".
	Namespace   string
	PodSelector string
	// Service is the systemd unit of a host flanneld; default "flanneld".
	Service string
	// Bridge is the CNI bridge; default "cni0".
	Bridge string
	// CNINetwork is the CNI network name whose host-local IPAM state lives under
	// /var/lib/cni/networks/<name>; default "cbr0" (kube-flannel.yml).
	CNINetwork string
	// SubnetFile is flanneld's --subnet-file; default DefaultSubnetFile.
	SubnetFile string
}

// backendDevices returns the network devices a backend creates on each node.
func backendDevices(backend string, raw json.RawMessage, ipv6 bool) []string {
	switch strings.ToLower(backend) {
	case "", "vxlan":
		// As flanneld's parseVXLANConfig: VNI 1 unless the config gives
		// one, and a VNI of 0 given is kept (the device is flannel.0).
		vni := 1
		var c struct {
			VNI *int `json:"VNI"`
		}
		if json.Unmarshal(raw, &c) == nil && c.VNI != nil && *c.VNI >= 0 {
			vni = *c.VNI
		}
		devs := []string{fmt.Sprintf("flannel.%d", vni)}
		if ipv6 {
			devs = append(devs, fmt.Sprintf("flannel-v6.%d", vni))
		}
		return devs
	case "wireguard":
		devs := []string{"flannel-wg"}
		if ipv6 {
			devs = append(devs, "flannel-wg-v6")
		}
		return devs
	case "udp":
		return []string{"flannel0"}
	case "ipip":
		return []string{"flannel.ipip"}
	}
	return nil // host-gw, alloc, ipsec, extension, tencent-vpc: no device carrying the subnet
}

// CleanupSteps returns, in order, the host clean-up an operator must do on a
// node whose flannel subnet changed: flanneld and the CNI plugin keep the old
// subnet in devices and files that nothing rewrites.
func CleanupSteps(o CleanupOptions) []HostStep {
	ns := or(o.Namespace, "kube-flannel")
	sel := shellWord(or(o.PodSelector, "app=flannel"))
	bridge := or(o.Bridge, "cni0")
	cniNet := or(o.CNINetwork, "cbr0")
	file := or(o.SubnetFile, DefaultSubnetFile)
	node := or(o.Node, "NODE")
	change := "the node's subnet changed"
	if !o.From.IsZero() && !o.To.IsZero() {
		change = fmt.Sprintf("the node's subnet moved from %s to %s", o.From, o.To)
	}
	newGW := "the new gateway"
	if o.To.IPv4.IsValid() {
		newGW = gateway(o.To.IPv4).String()
	}
	steps := []HostStep{
		{Where: "cluster", Command: "kubectl cordon " + node,
			Why: "no new pod lands on the node while its pod network is rebuilt"},
		{Where: "node", Command: "ip link delete " + bridge,
			Why: change + "; the " + bridge + " bridge still carries the old gateway address, and the bridge plugin refuses new pods with " +
				"`failed to set bridge addr: \"" + bridge + "\" already has an IP address different from " + newGW + "`; it is recreated with the new address by the next pod"},
	}
	for _, dev := range backendDevices(o.BackendType, o.Backend, o.IPv6) {
		steps = append(steps, HostStep{Where: "node", Command: "ip link delete " + dev,
			Why: dev + " holds the old subnet's address; flanneld recreates it for the new subnet when it restarts"})
	}
	steps = append(steps,
		HostStep{Where: "node", Command: "rm -rf /var/lib/cni/networks/" + cniNet,
			Why: "host-local IPAM keeps its reservations of old-subnet addresses there; stale entries leak addresses and confuse the next allocation"},
		HostStep{Where: "node", Command: "rm -f " + file,
			Why: "the file still names the old subnet: the flannel CNI plugin would hand it to the bridge plugin, and flanneld (etcd mode) would try to reclaim it; flanneld writes a fresh one at start"},
	)
	if o.KubeSubnetManager {
		steps = append(steps, HostStep{Where: "cluster",
			Command: fmt.Sprintf("kubectl -n %s delete pod -l %s --field-selector spec.nodeName=%s", ns, sel, node),
			Why:     "flanneld reads its subnet only at start; the DaemonSet recreates the pod, which sets up the backend and subnet.env for the new subnet"})
	} else {
		steps = append(steps, HostStep{Where: "node", Command: "systemctl restart " + or(o.Service, "flanneld"),
			Why: "flanneld reads its subnet only at start; restarted, it takes the node's lease and sets up the backend and subnet.env for it"})
	}
	// A flanneld still running with the old lease when the new one appeared
	// takes it for another node's and routes the node's own new subnet away
	// from the bridge; the restarted flanneld never removes that route.
	for _, r := range []struct {
		flag string
		p    netip.Prefix
	}{{"", o.To.IPv4}, {"-6 ", o.To.IPv6}} {
		if r.p.IsValid() {
			steps = append(steps, HostStep{Where: "node", Command: fmt.Sprintf("ip %sroute flush exact %s proto boot", r.flag, r.p),
				Why: "a flanneld that still ran with the old lease when the new one appeared took it for another node's and routed this node's own new subnet " + r.p.String() +
					" away from the bridge (via the node's own address with host-gw, through the VTEP with vxlan); the restarted flanneld skips its own lease and never removes that route, which cuts off every pod on the node. flanneld's routes are proto boot, the bridge's own route is proto kernel and stays"})
		}
	}
	steps = append(steps,
		HostStep{Where: "cluster",
			Command: fmt.Sprintf("kubectl delete pods --all-namespaces --field-selector spec.nodeName=%s,spec.hostNetwork=false", node),
			Why:     "pods still have addresses of the old subnet, which no other node routes to this node any more; their controllers recreate them with new addresses (hostNetwork pods are not affected)"},
		HostStep{Where: "cluster", Command: "kubectl uncordon " + node, Why: "the node takes pods again"},
	)
	return steps
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// shellWord quotes s for a POSIX shell unless it is made of characters no
// shell treats specially (a selector such as "app in (flannel)" is quoted).
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=,:+-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
