package nodenet

import (
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cidrshift/cidrshift/internal/subnetenv"
)

// Defaults of the Want's host layout and names: what flanneld, the flannel
// CNI plugin, the bridge plugin and host-local use when nothing else is set.
const (
	DefaultRunFlannelDir = "/run/flannel"
	DefaultCNIDataDir    = "/var/lib/cni"
	DefaultCNIConfDir    = "/etc/cni/net.d"
	DefaultBridge        = "cni0"
	DefaultVTEP          = "flannel.1"
	// DefaultCNINetwork is the network name of flannel's kube-flannel.yml
	// (its host-local reservations live in <CNIDataDir>/networks/cbr0), used
	// when CNIConfDir holds no config.
	DefaultCNINetwork = "cbr0"
)

// The flannel backends nodenet knows.
const (
	BackendVXLAN  = "vxlan"
	BackendHostGW = "host-gw"
)

// The iptables backends (Want.IPTablesBackend values, and Report.IPTables).
const (
	// IPTablesNFT is iptables-nft (the "nf_tables" that `iptables -V` prints).
	IPTablesNFT = "nft"
	// IPTablesLegacy is iptables-legacy.
	IPTablesLegacy = "legacy"
)

// Want is what a node's pod network should be, and where its state lives.
// Only Node and PodCIDR are required.
type Want struct {
	// Node is the Kubernetes node name.
	Node string `json:"node"`
	// PodCIDR is the node's IPv4 podCIDR (its flannel subnet).
	PodCIDR netip.Prefix `json:"podCIDR"`
	// Network is flannel's net-conf Network (the cluster's pod network). When
	// it is zero, nothing is checked against it.
	Network netip.Prefix `json:"network,omitzero"`
	// OldPodCIDR and OldNetwork are the node's podCIDR and the network before
	// the move, when known. Audit also infers old ranges from the bridge's
	// address and subnet.env.
	OldPodCIDR netip.Prefix `json:"oldPodCIDR,omitzero"`
	OldNetwork netip.Prefix `json:"oldNetwork,omitzero"`
	// Peers are the other nodes and the subnets routes must lead to.
	Peers []Peer `json:"peers,omitempty"`
	// PeersComplete says Peers lists every other node. Only then is a route
	// into the network that leads to no peer reported as stale (and deleted).
	PeersComplete bool `json:"peersComplete,omitempty"`
	// LivePods are the pods running on this node.
	LivePods []Pod `json:"livePods,omitempty"`
	// LivePodsComplete says LivePods lists every pod on the node, even when it
	// is empty. Without it no reservation is released and no old address is
	// taken away: a pod nobody listed may hold it.
	LivePodsComplete bool `json:"livePodsComplete,omitempty"`
	// Backend is the flannel backend: BackendVXLAN (the default) or
	// BackendHostGW.
	Backend string `json:"backend,omitempty"`
	// Bridge is the bridge the CNI plugin puts pods on; empty means the one
	// the CNI config names, else DefaultBridge.
	Bridge string `json:"bridge,omitempty"`
	// VTEP is the vxlan device; empty means DefaultVTEP.
	VTEP string `json:"vtep,omitempty"`
	// VTEPMAC is the MAC the node's flannel annotation (backend-data VtepMAC)
	// or lease announces; other nodes send to it. Empty: not checked.
	VTEPMAC string `json:"vtepMAC,omitempty"`
	// RunFlannelDir, CNIDataDir and CNIConfDir are where the host's files
	// are; empty means the defaults. An agent with the host mounted at /host
	// sets /host/run/flannel and so on.
	RunFlannelDir string `json:"runFlannelDir,omitempty"`
	CNIDataDir    string `json:"cniDataDir,omitempty"`
	CNIConfDir    string `json:"cniConfDir,omitempty"`
	// NetNS is the path of the network namespace to work in (a file such as
	// /run/netns/NAME or /proc/PID/ns/net); empty means the caller's.
	NetNS string `json:"netns,omitempty"`
	// IPTablesBackend forces IPTablesNFT or IPTablesLegacy; empty detects the
	// backend of the iptables binary on PATH.
	IPTablesBackend string `json:"iptablesBackend,omitempty"`
	// FDB (vxlan) are FDB entries the VTEP must hold, as flanneld sets one
	// for every lease it knows: frames for MAC go to Dst. A runbook lists
	// every other node's VTEP, also those of nodes that still share a
	// podCIDR and are not peers yet. flanneld keeps one lease per subnet,
	// so the removal of a shared subnet's lease deletes the entry of
	// whichever holder it cached last; at that holder's own removal the
	// delete fails, and flanneld retries it for about 50 s, handling no
	// other lease meanwhile. Missing entries are fdb-missing, and Apply sets
	// them; nodenet deletes none.
	FDB []FDBEntry `json:"fdb,omitempty"`
}

// FDBEntry is a VTEP FDB entry, as `bridge fdb replace MAC dev flannel.1 dst
// Dst self permanent` sets it.
type FDBEntry struct {
	// MAC is a peer's VTEP MAC.
	MAC string `json:"mac"`
	// Dst is the peer's underlay address.
	Dst netip.Addr `json:"dst"`
}

// Peer is another node.
type Peer struct {
	// Name is the node name.
	Name string `json:"name"`
	// PodCIDR is its IPv4 podCIDR.
	PodCIDR netip.Prefix `json:"podCIDR"`
	// OldPodCIDRs are subnets its pods still hold while they move: every node
	// keeps a route to them through the peer's new VTEP (vxlan) or address
	// (host-gw) until they are empty.
	OldPodCIDRs []netip.Prefix `json:"oldPodCIDRs,omitempty"`
	// NextPodCIDR is the podCIDR the peer is about to take: its Node is
	// re-created with it next, while its pods keep their PodCIDR addresses
	// (make-before-break). Every node then keeps a standby for PodCIDR
	// (StandbyMetric; see standby.go), so the pods stay reachable while
	// flanneld forgets PodCIDR and learns NextPodCIDR.
	NextPodCIDR netip.Prefix `json:"nextPodCIDR,omitzero"`
	// PublicIP is its flannel public IP (underlay address), required for
	// host-gw, where routes lead to it. With vxlan the standby's default FDB
	// entry leads to it.
	PublicIP netip.Addr `json:"publicIP,omitzero"`
	// VTEPMAC is the MAC of its VTEP (its backend-data VtepMAC), required
	// with vxlan when NextPodCIDR is set.
	VTEPMAC string `json:"vtepMAC,omitempty"`
}

// Pod is a live pod on the node. At least one of IP and ContainerID is set.
type Pod struct {
	// Name is "namespace/name", for messages.
	Name string `json:"name,omitempty"`
	// IP is the pod's IPv4 address.
	IP netip.Addr `json:"ip,omitzero"`
	// ContainerID is the sandbox ID the runtime passes to CNI (the first line
	// of a host-local reservation file).
	ContainerID string `json:"containerID,omitempty"`
}

// String names the pod: its name, else its IP, else its container ID.
func (p Pod) String() string {
	switch {
	case p.Name != "":
		return p.Name
	case p.IP.IsValid():
		return p.IP.String()
	}
	return "container " + p.ContainerID
}

var (
	nodeNameRE   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	containerIDR = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]*$`)
)

// validIfName reports whether s is a Linux interface name (dev_valid_name).
func validIfName(s string) bool {
	return s != "" && len(s) < 16 && s != "." && s != ".." && !strings.ContainsAny(s, "/: \t\n\r\x00")
}

// normalize checks every field and returns the Want with defaults filled in.
// Errors are *FieldError values wrapping ErrInvalidInput (or
// ErrUnknownBackend for IPTablesBackend).
func (w Want) normalize() (Want, error) {
	bad := func(field, value, reason string, args ...any) (Want, error) {
		return Want{}, fieldErr(ErrInvalidInput, "Want."+field, value, reason, args...)
	}
	if len(w.Node) > 253 || !nodeNameRE.MatchString(w.Node) {
		return bad("Node", w.Node, "must be a node name (lower-case DNS subdomain)")
	}
	prefix := func(field string, p netip.Prefix, required bool) error {
		switch {
		case !p.IsValid():
			if required {
				return fieldErr(ErrInvalidInput, "Want."+field, "", "is required: the node's IPv4 podCIDR, e.g. 10.244.3.0/24")
			}
		case !p.Addr().Is4():
			return fieldErr(ErrInvalidInput, "Want."+field, p.String(), "must be an IPv4 CIDR (IPv6 is not handled yet)")
		case p.Masked() != p:
			return fieldErr(ErrInvalidInput, "Want."+field, p.String(), "has host bits set; the network is %s", p.Masked())
		}
		return nil
	}
	for _, f := range []struct {
		name     string
		p        netip.Prefix
		required bool
	}{{"PodCIDR", w.PodCIDR, true}, {"Network", w.Network, false}, {"OldPodCIDR", w.OldPodCIDR, false}, {"OldNetwork", w.OldNetwork, false}} {
		if err := prefix(f.name, f.p, f.required); err != nil {
			return Want{}, err
		}
	}
	if w.PodCIDR.Bits() > 30 {
		return bad("PodCIDR", w.PodCIDR.String(), "is too small for a gateway and pods; use /30 or shorter")
	}
	if w.Network.IsValid() && !contains(w.Network, w.PodCIDR) {
		return bad("PodCIDR", w.PodCIDR.String(), "is outside Network %s; flanneld refuses such a node", w.Network)
	}
	if w.OldPodCIDR.IsValid() && w.OldPodCIDR.Bits() > 30 {
		return bad("OldPodCIDR", w.OldPodCIDR.String(), "is too small for a gateway and pods; a flannel subnet is /30 or shorter")
	}
	if w.OldPodCIDR.IsValid() && w.OldPodCIDR.Overlaps(w.PodCIDR) {
		return bad("OldPodCIDR", w.OldPodCIDR.String(), "overlaps PodCIDR %s; the old range must be another subnet", w.PodCIDR)
	}
	if w.OldNetwork.IsValid() && w.OldNetwork == w.Network {
		return bad("OldNetwork", w.OldNetwork.String(), "equals Network; leave it empty when the network did not change")
	}
	switch w.Backend {
	case "":
		w.Backend = BackendVXLAN
	case BackendVXLAN, BackendHostGW:
	default:
		return bad("Backend", w.Backend, "must be %s or %s", BackendVXLAN, BackendHostGW)
	}
	if w.Bridge != "" && !validIfName(w.Bridge) {
		return bad("Bridge", w.Bridge, "must be an interface name (1-15 characters, no '/', ':' or spaces)")
	}
	if w.VTEP == "" {
		w.VTEP = DefaultVTEP
	} else if !validIfName(w.VTEP) {
		return bad("VTEP", w.VTEP, "must be an interface name (1-15 characters, no '/', ':' or spaces)")
	}
	if w.Bridge != "" {
		if link, port := TransitionLinks(w.Bridge); w.VTEP == link || w.VTEP == port {
			return bad("VTEP", w.VTEP, "is the name of bridge %s's transition veth (%s/%s); name the VTEP otherwise", w.Bridge, link, port)
		}
	}
	if w.VTEPMAC != "" {
		mac, err := net.ParseMAC(w.VTEPMAC)
		if err != nil || len(mac) != 6 {
			return bad("VTEPMAC", w.VTEPMAC, "must be an Ethernet MAC such as 6e:2b:1c:40:9a:01")
		}
		w.VTEPMAC = mac.String()
	}
	dirs := []struct {
		name string
		v    *string
		def  string
	}{{"RunFlannelDir", &w.RunFlannelDir, DefaultRunFlannelDir}, {"CNIDataDir", &w.CNIDataDir, DefaultCNIDataDir}, {"CNIConfDir", &w.CNIConfDir, DefaultCNIConfDir}}
	for _, d := range dirs {
		if *d.v == "" {
			*d.v = d.def
		}
		if !filepath.IsAbs(*d.v) {
			return bad(d.name, *d.v, "must be an absolute path (default %s)", d.def)
		}
		*d.v = filepath.Clean(*d.v)
	}
	if w.NetNS != "" && !filepath.IsAbs(w.NetNS) {
		return bad("NetNS", w.NetNS, "must be the absolute path of a network namespace, such as /run/netns/NAME or /proc/PID/ns/net")
	}
	switch w.IPTablesBackend {
	case "", IPTablesNFT, IPTablesLegacy:
	default:
		return Want{}, fieldErr(ErrUnknownBackend, "Want.IPTablesBackend", w.IPTablesBackend, "must be %q, %q or empty (detect)", IPTablesNFT, IPTablesLegacy)
	}
	names := map[string]bool{w.Node: true}
	var held []netip.Prefix
	for i, p := range w.Peers {
		field := "Peers[" + strconv.Itoa(i) + "]"
		if !nodeNameRE.MatchString(p.Name) || names[p.Name] {
			return bad(field+".Name", p.Name, "must be a node name, unique and not the node itself")
		}
		names[p.Name] = true
		subnets := append([]netip.Prefix{p.PodCIDR}, p.OldPodCIDRs...)
		if p.NextPodCIDR.IsValid() {
			subnets = append(subnets, p.NextPodCIDR)
		}
		for j, s := range subnets {
			sf := field + ".PodCIDR"
			switch {
			case j > len(p.OldPodCIDRs):
				sf = field + ".NextPodCIDR"
			case j > 0:
				sf = field + ".OldPodCIDRs[" + strconv.Itoa(j-1) + "]"
			}
			if err := prefix(sf, s, true); err != nil {
				return Want{}, err
			}
			if s.Overlaps(w.PodCIDR) {
				return bad(sf, s.String(), "overlaps this node's PodCIDR %s", w.PodCIDR)
			}
			for _, h := range held {
				if s.Overlaps(h) {
					return bad(sf, s.String(), "overlaps %s, which another peer entry holds", h)
				}
			}
			held = append(held, s)
		}
		if w.Backend == BackendHostGW && !p.PublicIP.Is4() {
			return bad(field+".PublicIP", addrString(p.PublicIP), "must be the peer's IPv4 underlay address: host-gw routes lead to it")
		}
		if p.PublicIP.IsValid() && !p.PublicIP.Is4() {
			return bad(field+".PublicIP", p.PublicIP.String(), "must be an IPv4 address")
		}
		if p.VTEPMAC != "" {
			mac, err := net.ParseMAC(p.VTEPMAC)
			if err != nil || len(mac) != 6 || mac.String() == zeroMAC {
				return bad(field+".VTEPMAC", p.VTEPMAC, "must be an Ethernet MAC such as 6e:2b:1c:40:9a:01")
			}
			w.Peers[i].VTEPMAC = mac.String()
		}
		if p.NextPodCIDR.IsValid() && w.Backend == BackendVXLAN && p.VTEPMAC == "" {
			return bad(field+".VTEPMAC", "", "is required with NextPodCIDR %s: the standby route leads to %s, which must resolve to the peer's VTEP MAC", p.NextPodCIDR, p.NextPodCIDR.Addr())
		}
	}
	w.FDB = slices.Clone(w.FDB)
	for i, e := range w.FDB {
		field := "FDB[" + strconv.Itoa(i) + "]"
		if w.Backend != BackendVXLAN {
			return bad(field+".MAC", e.MAC, "FDB entries are vxlan's; the backend is %s", w.Backend)
		}
		mac, err := net.ParseMAC(e.MAC)
		if err != nil || len(mac) != 6 || mac.String() == zeroMAC {
			return bad(field+".MAC", e.MAC, "must be an Ethernet MAC such as 6e:2b:1c:40:9a:01")
		}
		w.FDB[i].MAC = mac.String()
		if !e.Dst.Is4() {
			return bad(field+".Dst", addrString(e.Dst), "must be the peer's IPv4 underlay address")
		}
	}
	if err := checkPods("Want.LivePods", w.LivePods); err != nil {
		return Want{}, err
	}
	if w.OldPodCIDR.IsValid() {
		for i, p := range w.LivePods {
			if p.IP == gateway(w.OldPodCIDR).Addr() {
				return bad("LivePods["+strconv.Itoa(i)+"].IP", p.IP.String(), "is the gateway of OldPodCIDR %s, which the transition veth keeps for the old pods; a pod cannot hold it", w.OldPodCIDR)
			}
		}
	}
	return w, nil
}

// checkPods checks a list of live pods; field names the list.
func checkPods(field string, pods []Pod) error {
	for i, p := range pods {
		f := field + "[" + strconv.Itoa(i) + "]"
		if !p.IP.IsValid() && p.ContainerID == "" {
			return fieldErr(ErrInvalidInput, f, p.Name, "needs an IP or a ContainerID")
		}
		if p.IP.IsValid() && !p.IP.Is4() {
			return fieldErr(ErrInvalidInput, f+".IP", p.IP.String(), "must be an IPv4 address")
		}
		if p.ContainerID != "" && !containerIDR.MatchString(p.ContainerID) {
			return fieldErr(ErrInvalidInput, f+".ContainerID", p.ContainerID, "must be a container ID (letters, digits, '_', '.', '-')")
		}
	}
	return nil
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// contains reports whether outer contains all of inner.
func contains(outer, inner netip.Prefix) bool {
	return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

// gateway is the bridge address the bridge plugin gives a node with podCIDR p:
// its first address, with p's length (what flanneld writes as FLANNEL_SUBNET).
func gateway(p netip.Prefix) netip.Prefix { return subnetenv.Gateway(p) }

// vtepAddr is the address flanneld's vxlan backend puts on the VTEP: the
// subnet's network address as a /32.
func vtepAddr(p netip.Prefix) netip.Prefix { return netip.PrefixFrom(p.Masked().Addr(), 32) }
