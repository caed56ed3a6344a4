package nodenet

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/subnetenv"
)

// snapshot is what a node holds, as the host code read it. analyze turns it
// into findings without touching the host.
type snapshot struct {
	iptables string
	// bridge and vtep are nil when the device does not exist.
	bridge, vtep *linkState
	// transition and transitionPort are the transition veth pair
	// (TransitionLinks of the bridge); nil when absent (or, for transition,
	// not a veth). transitionGWs are the addresses routed (/32) through the
	// transition link: the old gateways it serves; analyze sets
	// transition.addrs to them with their old subnet's length.
	transition, transitionPort *linkState
	transitionGWs              []netip.Addr
	// proxies are the bridge's IPv4 proxy neighbour entries.
	proxies []netip.Addr
	// routes are the main table's IPv4 unicast routes.
	routes []Route
	// neighbours are the VTEP's IPv4 neighbour entries, fdbDefaults the
	// destinations of its default (all-zeros MAC) FDB entries (vxlan).
	neighbours  []neighbour
	fdbDefaults []netip.Addr
	// fdb are its FDB entries for a MAC (not the default ones).
	fdb []FDBEntry
	// chains maps "table/chain" to its rules; a missing chain is absent.
	chains map[string][]Rule
	// cniFile is the CNI config the layout comes from ("" when none
	// parses); cniBad lists the files before it that could not be read;
	// cniInUse is the file the runtime uses when nodenet cannot parse it.
	cniFile  string
	cni      *CNIConfig
	cniBad   []fileProblem
	cniInUse *fileProblem
	// envFile is subnet.env's path, envData its content; envMissing when the
	// file does not exist.
	envFile    string
	envData    []byte
	envMissing bool
	// resDir is host-local's directory; reservations are its address files.
	resDir       string
	reservations []reservation
}

type linkState struct {
	name  string
	mac   string
	addrs []netip.Prefix // IPv4, global scope
	// up is the administrative state; master the name of the bridge it is a
	// port of ("" when none).
	up     bool
	master string
}

type fileProblem struct {
	path string
	err  error
}

type reservation struct {
	path        string
	ip          netip.Addr
	containerID string
}

func chainKey(table, chain string) string { return table + "/" + chain }

// layout returns the bridge name and host-local's directory for w and the
// CNI config (nil when there is none).
func layout(w Want, cni *CNIConfig) (bridge, resDir string) {
	bridge, name, dataDir := w.Bridge, DefaultCNINetwork, filepath.Join(w.CNIDataDir, "networks")
	if cni != nil {
		if bridge == "" {
			bridge = cni.Bridge
		}
		name = cni.Name
		if cni.DataDir != "" {
			dataDir = cni.DataDir
			// A dataDir under /var/lib/cni follows CNIDataDir (the host
			// mounted elsewhere).
			if rel, err := filepath.Rel(DefaultCNIDataDir, cni.DataDir); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				dataDir = filepath.Join(w.CNIDataDir, rel)
			}
		}
	}
	if bridge == "" {
		bridge = DefaultBridge
	}
	return bridge, filepath.Join(dataDir, name)
}

type auditor struct {
	w Want
	s *snapshot
	r *Report
}

// analyze compares a snapshot with a normalized Want.
func analyze(w Want, s *snapshot) *Report {
	bridge, _ := layout(w, s.cni)
	r := &Report{Node: w.Node, PodCIDR: w.PodCIDR, Network: w.Network, Backend: w.Backend, Bridge: bridge,
		IPTables: s.iptables, CNIConfigFile: s.cniFile, ReservationDir: s.resDir, SubnetEnvFile: s.envFile,
		LivePods: w.LivePods, LivePodsComplete: w.LivePodsComplete, Findings: []Finding{}}
	if w.Backend == BackendVXLAN {
		r.VTEP = w.VTEP
	}
	a := &auditor{w: w, s: s, r: r}
	a.oldPod(w.OldPodCIDR)
	a.oldNet(w.OldNetwork)
	a.cniConfig()
	a.subnetEnv()
	a.transitionState()
	a.bridge()
	a.transition()
	a.vtep()
	a.standby()
	a.routes()
	a.reservations()
	a.rules()
	return r
}

func (a *auditor) add(code Code, sev cidr.Severity, object, msg string, fix ...Action) {
	for i := range fix {
		fix[i].Object = object
	}
	a.r.Findings = append(a.r.Findings, Finding{Code: code, Severity: sev, Object: object, Message: msg, Fix: fix})
}

// oldPod records p as an old pod range of this node.
func (a *auditor) oldPod(p netip.Prefix) {
	if p.IsValid() && p.Addr().Is4() && !p.Overlaps(a.w.PodCIDR) && !slices.Contains(a.r.OldPodCIDRs, p) {
		a.r.OldPodCIDRs = append(a.r.OldPodCIDRs, p)
	}
}

// oldNet records p as an old network.
func (a *auditor) oldNet(p netip.Prefix) {
	if p.IsValid() && p.Addr().Is4() && p != a.w.Network && !slices.Contains(a.r.OldNetworks, p) {
		a.r.OldNetworks = append(a.r.OldNetworks, p)
	}
}

// oldPodsIn returns the live pods with an address in p but outside the
// podCIDR: the pods that still need p.
func (a *auditor) oldPodsIn(p netip.Prefix) []Pod {
	return oldPodsIn(a.w.PodCIDR, a.w.LivePods, p)
}

func oldPodsIn(podCIDR netip.Prefix, pods []Pod, p netip.Prefix) []Pod {
	var out []Pod
	for _, pod := range pods {
		if pod.IP.IsValid() && p.Contains(pod.IP) && !podCIDR.Contains(pod.IP) {
			out = append(out, pod)
		}
	}
	return out
}

func podNames(pods []Pod) string {
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.String())
	}
	if len(names) > 3 {
		names = append(names[:3], fmt.Sprintf("and %d more", len(names)-3))
	}
	return strings.Join(names, ", ")
}

func (a *auditor) cniConfig() {
	for _, b := range a.s.cniBad {
		a.add(CodeCNIConfigInvalid, cidr.SeverityWarning, "file "+b.path,
			fmt.Sprintf("cannot be read (%v); the runtime skips it too if a later file is valid", b.err))
	}
	if u := a.s.cniInUse; u != nil {
		layout := fmt.Sprintf("nodenet found no config it handles and assumes network %s and bridge %s", DefaultCNINetwork, a.r.Bridge)
		if a.s.cni != nil {
			layout = fmt.Sprintf("nodenet took network %s from %s, which the runtime uses only if %s delegates to it (as multus does), and bridge %s",
				a.s.cni.Name, a.s.cniFile, filepath.Base(u.path), a.r.Bridge)
		}
		a.add(CodeCNIConfigUnsupported, cidr.SeverityWarning, "file "+u.path,
			fmt.Sprintf("is the CNI config the container runtime uses, but not one nodenet handles (%v); %s: if this node's pods are not on that bridge, nodenet's fixes do not apply here", u.err, layout))
	}
	if a.s.cni == nil {
		if a.s.cniInUse == nil {
			a.add(CodeCNIConfigMissing, cidr.SeverityWarning, "dir "+a.w.CNIConfDir,
				fmt.Sprintf("holds no CNI config; assuming network %s and bridge %s", DefaultCNINetwork, a.r.Bridge))
		}
		return
	}
	for _, s := range a.s.cni.Subnets {
		if s.Addr().Is4() && s != a.w.PodCIDR {
			a.add(CodeCNIConfigRange, cidr.SeverityError, "file "+a.s.cniFile,
				fmt.Sprintf("gives host-local the range %s, but the node's podCIDR is %s: new pods get addresses other nodes do not route to; rewrite the config (it belongs to whoever installed it)", s, a.w.PodCIDR))
			a.oldPod(s)
		}
	}
}

func (a *auditor) subnetEnv() {
	obj := "file " + a.s.envFile
	if a.s.envMissing {
		a.add(CodeSubnetEnvMissing, cidr.SeverityError, obj,
			"does not exist; flanneld writes it when it starts, and the flannel CNI plugin fails every pod until then: restart flanneld")
		return
	}
	env, err := subnetenv.Parse(a.s.envData)
	if err != nil {
		a.add(CodeSubnetEnvInvalid, cidr.SeverityError, obj, fmt.Sprintf("%v; flanneld rewrites it when it restarts", err))
		return
	}
	gw := gateway(a.w.PodCIDR)
	fix := Action{Kind: ActionWriteSubnetEnv, Path: a.s.envFile, Env: &EnvChange{
		FromNetwork: env.Network, FromSubnet: env.Subnet, Network: env.Network, Subnet: gw}}
	if a.w.Network.IsValid() {
		fix.Env.Network = a.w.Network
	}
	fix.Why = fmt.Sprintf("write %s=%s %s=%s, keeping the other variables", subnetenv.Network, fix.Env.Network, subnetenv.Subnet, gw)
	var fixes []Action
	once := func() []Action {
		if fixes != nil {
			return nil
		}
		fixes = []Action{fix}
		return fixes
	}
	switch {
	case !env.Subnet.IsValid() || env.Subnet.Masked() != a.w.PodCIDR:
		if env.Subnet.IsValid() {
			a.oldPod(env.Subnet.Masked())
		}
		a.add(CodeSubnetEnvSubnet, cidr.SeverityError, obj,
			fmt.Sprintf("says %s=%s but the node's podCIDR is %s: the flannel CNI plugin gives new pods addresses from the old range", subnetenv.Subnet, prefixString(env.Subnet), a.w.PodCIDR), once()...)
	case env.Subnet != gw:
		a.add(CodeSubnetEnvSubnet, cidr.SeverityWarning, obj,
			fmt.Sprintf("says %s=%s; flanneld writes the subnet's first address, %s", subnetenv.Subnet, env.Subnet, gw), once()...)
	}
	if a.w.Network.IsValid() && env.Network != a.w.Network {
		a.oldNet(env.Network)
		a.add(CodeSubnetEnvNetwork, cidr.SeverityError, obj,
			fmt.Sprintf("says %s=%s but the network is %s: the flannel CNI plugin routes the wrong range through the bridge", subnetenv.Network, prefixString(env.Network), a.w.Network), once()...)
	}
}

func prefixString(p netip.Prefix) string {
	if !p.IsValid() {
		return "(unset)"
	}
	return p.String()
}

func (a *auditor) bridge() {
	name := a.r.Bridge
	if a.s.bridge == nil {
		a.add(CodeBridgeMissing, cidr.SeverityInfo, "link "+name, "does not exist yet; the bridge plugin creates it with "+gateway(a.w.PodCIDR).String()+" for the first pod")
		return
	}
	gw := gateway(a.w.PodCIDR)
	var remove, retires, moved []netip.Prefix
	for _, p := range a.s.bridge.addrs {
		if p == gw {
			continue
		}
		remove = append(remove, p)
		m := p.Masked()
		if m.Overlaps(a.w.PodCIDR) {
			continue
		}
		a.oldPod(m)
		switch {
		case a.transitionNeeded(m):
			moved = append(moved, p)
		case !slices.Contains(retires, m):
			retires = append(retires, m)
		}
	}
	if len(remove) == 0 {
		return
	}
	var fix []Action
	for _, p := range moved {
		fix = append(fix, a.setTransition(p))
	}
	why := fmt.Sprintf("give %s the gateway %s and take %s away once no pod uses it", name, gw, joinPrefixes(remove))
	if len(moved) > 0 {
		link, _ := TransitionLinks(name)
		why = fmt.Sprintf("give %s the gateway %s and take %s away (make before break: %s keeps %s for the old pods)", name, gw, joinPrefixes(remove), link, joinPrefixes(moved))
	}
	fix = append(fix, Action{Kind: ActionSetAddress, Link: name, Add: gw, Remove: remove, Retires: retires, Why: why})
	a.add(CodeBridgeAddress, cidr.SeverityError, "link "+name,
		fmt.Sprintf("holds %s, not the gateway %s of podCIDR %s: the bridge plugin refuses new pods with `failed to set bridge addr: %q already has an IP address different from %s`",
			joinPrefixes(remove), gw, a.w.PodCIDR, name, gw), fix...)
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

func (a *auditor) vtep() {
	if a.w.Backend != BackendVXLAN {
		return
	}
	name, obj := a.w.VTEP, "link "+a.w.VTEP
	if a.s.vtep == nil {
		a.add(CodeVTEPMissing, cidr.SeverityError, obj, "does not exist: no vxlan traffic reaches the node's pods; flanneld creates it when it starts, restart flanneld")
		return
	}
	want := vtepAddr(a.w.PodCIDR)
	has := false
	var remove []netip.Prefix
	for _, p := range a.s.vtep.addrs {
		if p == want {
			has = true
		} else {
			remove = append(remove, p)
		}
	}
	if !has || len(remove) > 0 {
		held := "no address"
		if len(a.s.vtep.addrs) > 0 {
			held = joinPrefixes(a.s.vtep.addrs)
		}
		a.add(CodeVTEPAddress, cidr.SeverityError, obj,
			fmt.Sprintf("holds %s; flanneld gives it %s, the podCIDR's network address", held, want),
			Action{Kind: ActionSetAddress, Link: name, Add: want, Remove: remove, Why: fmt.Sprintf("give %s the address %s", name, want)})
	}
	if a.w.VTEPMAC != "" && a.s.vtep.mac != a.w.VTEPMAC {
		a.add(CodeVTEPMAC, cidr.SeverityError, obj,
			fmt.Sprintf("has MAC %s but the node announces %s: other nodes' vxlan packets for its pods are dropped", a.s.vtep.mac, a.w.VTEPMAC),
			Action{Kind: ActionSetMAC, Link: name, MAC: a.w.VTEPMAC, OldMAC: a.s.vtep.mac, Why: "set the announced MAC " + a.w.VTEPMAC})
	}
}

func (a *auditor) expectedRoutes() (map[netip.Prefix]Route, map[netip.Prefix]string) {
	exp, owner := map[netip.Prefix]Route{}, map[netip.Prefix]string{}
	for _, p := range a.w.Peers {
		for i, s := range append([]netip.Prefix{p.PodCIDR}, p.OldPodCIDRs...) {
			rt := Route{Dst: s, Gw: p.PublicIP}
			if a.w.Backend == BackendVXLAN {
				rt = Route{Dst: s, Gw: p.PodCIDR.Addr(), Dev: a.w.VTEP, Onlink: true}
			}
			exp[s] = rt
			owner[s] = "node " + p.Name + "'s podCIDR"
			if i > 0 {
				owner[s] = "node " + p.Name + "'s old subnet, where its pods still are"
			}
		}
	}
	return exp, owner
}

func (a *auditor) relevantRoute(rt Route, exp map[netip.Prefix]Route) bool {
	if _, ok := exp[rt.Dst]; ok {
		return true
	}
	if rt.Dev == a.r.Bridge || contains(a.w.PodCIDR, rt.Dst) || rt.Dst == a.w.Network || rt.Dst.Bits() == 0 || a.inNextPodCIDR(rt.Dst) {
		return false
	}
	// The node's own old subnet, routed to a device (the old gateway routed
	// to the transition veth while old pods remain) is not a peer route.
	if !rt.Gw.IsValid() && slices.ContainsFunc(a.r.OldPodCIDRs, func(o netip.Prefix) bool { return contains(o, rt.Dst) }) {
		return false
	}
	if a.w.Network.IsValid() && contains(a.w.Network, rt.Dst) {
		return true
	}
	for _, o := range slices.Concat(a.r.OldNetworks, a.r.OldPodCIDRs) {
		if contains(o, rt.Dst) {
			return true
		}
	}
	return false
}

func routeMatches(rt, want Route) bool {
	return rt.Gw == want.Gw && (want.Dev == "" || rt.Dev == want.Dev)
}

func (a *auditor) routes() {
	exp, owner := a.expectedRoutes()
	for _, rt := range a.s.routes {
		if rt.Gw.IsValid() && rt.Dev != a.r.Bridge && contains(a.w.PodCIDR, rt.Dst) {
			a.add(CodeRouteOwnSubnet, cidr.SeverityError, "route "+rt.Dst.String(),
				fmt.Sprintf("%s sends traffic for this node's own podCIDR %s away from %s: this node's pods cannot be reached (a flanneld that still ran with the old lease took the node's new one for a peer's)", rt, a.w.PodCIDR, a.r.Bridge),
				Action{Kind: ActionDeleteRoute, Route: &rt, Why: "delete " + rt.String()})
		}
	}
	groups := map[netip.Prefix][]Route{}
	for _, rt := range a.s.routes {
		if a.relevantRoute(rt, exp) {
			groups[rt.Dst] = append(groups[rt.Dst], rt)
		}
	}
	var dsts []netip.Prefix
	for d := range exp {
		dsts = append(dsts, d)
	}
	for d := range groups {
		if _, ok := exp[d]; !ok {
			dsts = append(dsts, d)
		}
	}
	slices.SortFunc(dsts, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr())*64 + x.Bits() - y.Bits() })
	standby := a.standbyRoutes()
	for _, d := range dsts {
		rts, want := groups[d], exp[d]
		obj := "route " + d.String()
		if sb, ok := standby[d]; ok {
			i := slices.IndexFunc(rts, func(rt Route) bool { return isStandby(rt, sb) })
			if i < 0 {
				a.add(CodeStandbyMissing, cidr.SeverityError, obj,
					fmt.Sprintf("%s is about to move: %s must stand by for its pods, whose route flanneld drops when the node is re-created", owner[d], sb),
					Action{Kind: ActionSetRoute, Route: &sb, Why: "add the standby route " + sb.String()})
			} else {
				rts = slices.Delete(slices.Clone(rts), i, i+1)
			}
			if len(rts) == 0 {
				// flanneld already dropped its own route (the node's delete
				// was seen): the standby carries the traffic.
				continue
			}
		}
		if _, ok := exp[d]; !ok {
			for _, rt := range rts {
				if !a.w.PeersComplete {
					// Only a route through a listed peer to a subnet it no
					// longer claims is known to be wrong.
					if peer, ok := a.leftTransitionRoute(rt); ok {
						a.add(CodeTransitionRouteLeft, cidr.SeverityError, obj,
							fmt.Sprintf("%s leads through node %s, which no longer lists %s: the transition route to its old subnet, whose pods are gone", rt, peer.Name, d),
							Action{Kind: ActionDeleteRoute, Route: &rt, Why: "delete " + rt.String()})
					}
					continue
				}
				a.add(CodeRouteStale, cidr.SeverityError, obj,
					fmt.Sprintf("%s leads to a subnet no node holds; traffic to it goes nowhere, or to whoever gets the subnet next", rt),
					Action{Kind: ActionDeleteRoute, Route: &rt, Why: "delete " + rt.String()})
			}
			continue
		}
		if len(rts) == 0 {
			a.add(CodeRouteMissing, cidr.SeverityError, obj,
				fmt.Sprintf("no route to %s (%s): this node's pods cannot reach the pods there", d, owner[d]),
				Action{Kind: ActionSetRoute, Route: &want, Why: "add " + want.String()})
			continue
		}
		keep := slices.IndexFunc(rts, func(rt Route) bool { return routeMatches(rt, want) })
		if keep < 0 {
			keep = 0
			fixed := want
			fixed.Metric = rts[0].Metric
			a.add(CodeRouteWrong, cidr.SeverityError, obj,
				fmt.Sprintf("%s does not lead to %s (%s)", rts[0], want, owner[d]),
				Action{Kind: ActionSetRoute, Route: &fixed, Replaces: &rts[0], Why: "replace it in place with " + fixed.String()})
		}
		for i, rt := range rts {
			if i == keep {
				continue
			}
			a.add(CodeRouteDuplicate, cidr.SeverityError, obj,
				fmt.Sprintf("%s duplicates %s: which one the kernel takes depends on the metric", rt, rts[keep]),
				Action{Kind: ActionDeleteRoute, Route: &rt, Why: "delete the duplicate " + rt.String()})
		}
	}
}

// owner returns the live pod holding a reservation.
func (a *auditor) owner(res reservation) (Pod, bool) {
	for _, p := range a.w.LivePods {
		if (p.IP.IsValid() && p.IP == res.ip) || (p.ContainerID != "" && p.ContainerID == res.containerID) {
			return p, true
		}
	}
	return Pod{}, false
}

func (a *auditor) reservations() {
	for _, res := range a.s.reservations {
		if a.w.PodCIDR.Contains(res.ip) {
			continue
		}
		obj := "file " + res.path
		if pod, ok := a.owner(res); ok {
			a.add(CodeReservationLive, cidr.SeverityWarning, obj,
				fmt.Sprintf("reserves %s, outside podCIDR %s, for live pod %s; host-local releases it when the pod is deleted", res.ip, a.w.PodCIDR, pod))
			continue
		}
		if !a.w.LivePodsComplete {
			a.add(CodeReservationUnknown, cidr.SeverityWarning, obj,
				fmt.Sprintf("reserves %s, outside podCIDR %s, for container %q; without the complete list of live pods it is kept", res.ip, a.w.PodCIDR, res.containerID))
			continue
		}
		a.add(CodeReservationLeaked, cidr.SeverityError, obj,
			fmt.Sprintf("reserves %s, outside podCIDR %s, for container %q that is not a live pod: leaked", res.ip, a.w.PodCIDR, res.containerID),
			Action{Kind: ActionReleaseReservation, Path: res.path, IP: res.ip, ContainerID: res.containerID, Why: "release the leaked reservation of " + res.ip.String()})
	}
}

// judged reports whether Audit judges the rule: every rule of flannel's
// chains, and the MASQUERADE and SNAT rules of nat POSTROUTING.
func judged(r Rule) bool {
	if r.Chain != chainPostrouting {
		return true
	}
	t := ruleTarget(r.Spec)
	return t == "MASQUERADE" || t == "SNAT"
}

// isPeerSubnet reports whether p is inside a subnet some peer holds.
func (a *auditor) isPeerSubnet(p netip.Prefix) bool {
	for _, peer := range a.w.Peers {
		for _, s := range append([]netip.Prefix{peer.PodCIDR, peer.NextPodCIDR}, peer.OldPodCIDRs...) {
			if s.IsValid() && s.Overlaps(p) {
				return true
			}
		}
	}
	return false
}

// inferFromRules records as old pod ranges the node-sized subnets of the
// network that judged rules name, other than the node's and its peers'.
func (a *auditor) inferFromRules() {
	for _, c := range watchedChains {
		for _, r := range a.s.chains[chainKey(c.table, c.chain)] {
			if !judged(r) {
				continue
			}
			for _, ref := range ruleCIDRs(r.Spec) {
				p := ref.prefix
				inNet := a.w.Network.IsValid() && contains(a.w.Network, p) && p != a.w.Network
				for _, n := range a.r.OldNetworks {
					inNet = inNet || (contains(n, p) && p != n)
				}
				if inNet && p.Bits() == a.w.PodCIDR.Bits() && !p.Overlaps(a.w.PodCIDR) && !a.isPeerSubnet(p) {
					a.oldPod(p)
				}
			}
		}
	}
}

// classify says whether p is an old range, which one, and what replaces it.
func (a *auditor) classify(p netip.Prefix) (old netip.Prefix, repl netip.Prefix, ok bool) {
	if contains(a.w.PodCIDR, p) || p == a.w.Network {
		return netip.Prefix{}, netip.Prefix{}, false
	}
	for _, o := range a.r.OldPodCIDRs {
		if !contains(o, p) {
			continue
		}
		if p == o {
			return o, a.w.PodCIDR, true
		}
		if r, err := cidr.Rebase(p, o, a.w.PodCIDR); err == nil {
			return o, r, true
		}
		return o, netip.Prefix{}, true
	}
	for _, n := range a.r.OldNetworks {
		if p == n && a.w.Network.IsValid() {
			return n, a.w.Network, true
		}
		if contains(n, p) {
			return n, netip.Prefix{}, true
		}
	}
	return netip.Prefix{}, netip.Prefix{}, false
}

func specIn(rules []Rule, spec []string) bool {
	return slices.ContainsFunc(rules, func(r Rule) bool { return slices.Equal(r.Spec, spec) })
}

func (a *auditor) rules() {
	a.inferFromRules()
	for _, c := range watchedChains {
		rules := a.s.chains[chainKey(c.table, c.chain)]
		for i, r := range rules {
			if !judged(r) {
				continue
			}
			newSpec := slices.Clone(r.Spec)
			var retires, unmapped []netip.Prefix
			for _, ref := range ruleCIDRs(r.Spec) {
				old, repl, ok := a.classify(ref.prefix)
				if !ok {
					continue
				}
				if !slices.Contains(retires, old) {
					retires = append(retires, old)
				}
				if repl.IsValid() {
					newSpec[ref.index] = repl.String()
				} else {
					unmapped = append(unmapped, ref.prefix)
				}
			}
			if len(retires) == 0 {
				continue
			}
			obj := fmt.Sprintf("rule %s %s #%d", c.table, c.chain, i+1)
			msg := fmt.Sprintf("%s names the old range %s", r, joinPrefixes(retires))
			if pods := a.oldPodsIn(retires[0]); len(pods) > 0 {
				msg += "; live pods still use it (" + podNames(pods) + "), so it stays until they move"
			}
			del := Action{Kind: ActionDeleteRule, Rule: &r, Retires: retires, Why: "delete " + r.String()}
			switch {
			case hasComment(r.Spec, keepComment):
				a.add(CodeRuleStale, cidr.SeverityError, obj, msg+"; nodenet added it for the old pods", del)
			case len(unmapped) > 0:
				a.add(CodeRuleStale, cidr.SeverityError, obj,
					msg+fmt.Sprintf("; nodenet does not know what replaces %s: rewrite it by hand", joinPrefixes(unmapped)))
			case specIn(rules, newSpec):
				a.add(CodeRuleStale, cidr.SeverityError, obj, msg+"; its rewrite is already in the chain", del)
			default:
				nr := Rule{Table: r.Table, Chain: r.Chain, Spec: newSpec}
				a.add(CodeRuleStale, cidr.SeverityError, obj, msg,
					Action{Kind: ActionInsertRule, Rule: &nr, Anchor: r.Spec, Why: "insert " + nr.String() + " just before it"},
					del)
			}
		}
	}
	a.masqKeep()
}

// masqKeep checks that while pods hold old addresses, FLANNEL-POSTRTG
// returns before masquerading their traffic inside the pod network.
func (a *auditor) masqKeep() {
	rules, ok := a.s.chains[chainKey(tableNAT, ChainFlannelPostrouting)]
	if !ok || !a.w.Network.IsValid() {
		return
	}
	hasReturn := func(src, dst netip.Prefix) bool {
		return slices.ContainsFunc(rules, func(r Rule) bool {
			if ruleTarget(r.Spec) != "RETURN" {
				return false
			}
			var s, d bool
			for _, ref := range ruleCIDRs(r.Spec) {
				if ref.neg {
					return false
				}
				s = s || (r.Spec[ref.index-1] == "-s" && ref.prefix == src)
				d = d || (r.Spec[ref.index-1] == "-d" && ref.prefix == dst)
			}
			return s && d
		})
	}
	for _, o := range a.r.OldPodCIDRs {
		pods := a.oldPodsIn(o)
		if len(pods) == 0 {
			continue
		}
		for _, n := range append([]netip.Prefix{a.w.Network}, a.r.OldNetworks...) {
			for _, pair := range [][2]netip.Prefix{{o, n}, {n, o}} {
				if pair[0] == pair[1] || hasReturn(pair[0], pair[1]) {
					continue
				}
				r := Rule{Table: tableNAT, Chain: ChainFlannelPostrouting,
					Spec: []string{"-s", pair[0].String(), "-d", pair[1].String(), "-m", "comment", "--comment", keepComment, "-j", "RETURN"}}
				a.add(CodeMasqKeepMissing, cidr.SeverityError, fmt.Sprintf("chain %s %s", tableNAT, ChainFlannelPostrouting),
					fmt.Sprintf("has no RETURN for %s -> %s while pods hold old addresses (%s): flannel's MASQUERADE rewrites their source address", pair[0], pair[1], podNames(pods)),
					Action{Kind: ActionInsertRule, Rule: &r, Why: "insert " + r.String() + " at the top"})
			}
		}
	}
}
