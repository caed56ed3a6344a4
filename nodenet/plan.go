package nodenet

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"

	"sigs.k8s.io/yaml"
)

// The apiVersion and kind a serialised Plan carries.
const (
	PlanAPIVersion = "cidrshift.io/v1alpha1"
	PlanKind       = "NodeNetworkPlan"
)

// ActionKind is what an action does.
type ActionKind string

// The actions. A plan runs them in this order, except that set-transition
// runs right after set-mac, a set-address that keeps the old gateway on the
// transition veth right after it, set-neighbour and set-fdb right before
// set-route, delete-fdb right after delete-route, and a set-address that
// takes the bridge's old gateway away last of all.
const (
	// ActionWriteSubnetEnv rewrites FLANNEL_NETWORK and FLANNEL_SUBNET in
	// subnet.env (atomically, keeping the other variables).
	ActionWriteSubnetEnv ActionKind = "write-subnet-env"
	// ActionSetMAC sets a link's MAC.
	ActionSetMAC ActionKind = "set-mac"
	// ActionSetAddress gives a link the address Add and takes the addresses
	// Remove away.
	ActionSetAddress ActionKind = "set-address"
	// ActionSetRoute adds a route, or replaces in place the one with the same
	// destination and metric.
	ActionSetRoute ActionKind = "set-route"
	// ActionInsertRule inserts a rule just before the first rule whose
	// specification is Anchor (at the top of the chain without Anchor).
	ActionInsertRule ActionKind = "insert-rule"
	// ActionReleaseReservation removes a host-local reservation file, under
	// host-local's lock.
	ActionReleaseReservation ActionKind = "release-reservation"
	// ActionDeleteRule deletes a rule naming an old range.
	ActionDeleteRule ActionKind = "delete-rule"
	// ActionDeleteRoute deletes a route.
	ActionDeleteRoute ActionKind = "delete-route"
	// ActionSetTransition sets up (or repairs) the make-before-break
	// transition on a moved node: the veth pair Link/Peer (TransitionLinks
	// of the bridge), Link up with the route Add.Addr()/32 through it, Peer
	// down and no bridge port, and on the bridge a proxy neighbour entry
	// for the old gateway Add and a route to its subnet, so the bridge can
	// take the new gateway while old pods keep theirs. It runs before the
	// bridge's address is changed.
	ActionSetTransition ActionKind = "set-transition"
	// ActionDeleteTransition removes the transition (the proxy entries and
	// routes of Remove, then the veth pair) once no live pod holds an
	// address in the old subnets it serves (Retires).
	ActionDeleteTransition ActionKind = "delete-transition"
	// ActionSetNeighbour makes IP resolve to MAC on the VTEP, permanently:
	// the standby's entry for a peer's next VTEP address.
	ActionSetNeighbour ActionKind = "set-neighbour"
	// ActionSetFDB appends the VTEP's default FDB entry (MAC all zeros) to
	// the peer address IP: the standby's path for frames whose MAC flanneld
	// has just forgotten. With a peer's MAC it sets that MAC's entry to IP
	// (Want.FDB), as flanneld does.
	ActionSetFDB ActionKind = "set-fdb"
	// ActionDeleteFDB deletes the default FDB entry to IP once the peer
	// lists no subnet it is leaving or has left.
	ActionDeleteFDB ActionKind = "delete-fdb"
)

// phase orders actions so the node's pods stay reachable: new state first
// (subnet.env, VTEP, routes, new rules), then what only leaked state used, then
// what old pods may still use (old rules, the bridge's old gateway) last.
func (a *Action) phase() int {
	switch a.Kind {
	case ActionWriteSubnetEnv:
		return 0
	case ActionSetMAC:
		return 1
	case ActionSetTransition:
		return 2
	case ActionSetAddress:
		if len(a.Retires) > 0 {
			return 12
		}
		return 3
	case ActionSetNeighbour, ActionSetFDB:
		return 4
	case ActionSetRoute:
		return 5
	case ActionInsertRule:
		return 6
	case ActionReleaseReservation:
		return 7
	case ActionDeleteRule:
		return 8
	case ActionDeleteRoute:
		return 9
	case ActionDeleteFDB:
		return 10
	case ActionDeleteTransition:
		return 11
	}
	return -1
}

// EnvChange is the subnet.env rewrite of an ActionWriteSubnetEnv.
type EnvChange struct {
	// FromNetwork and FromSubnet are the values read when planning; Apply
	// leaves a file that says something else (flanneld rewrote it) alone.
	FromNetwork netip.Prefix `json:"fromNetwork,omitzero"`
	FromSubnet  netip.Prefix `json:"fromSubnet,omitzero"`
	// Network and Subnet are written.
	Network netip.Prefix `json:"network,omitzero"`
	Subnet  netip.Prefix `json:"subnet"`
}

// Action is one change to the node. Which fields are set depends on Kind.
type Action struct {
	Kind ActionKind `json:"kind"`
	// Object is what the action changes, as in the finding.
	Object string `json:"object"`
	// Why says what the action does and why.
	Why string `json:"why"`
	// Retires are the old ranges this action takes away. Apply defers the
	// action while a live pod holds an address in one of them (outside the
	// podCIDR); it also counts the subnets of the bridge addresses removed and
	// the ranges a deleted rule names, whatever Retires says.
	Retires []netip.Prefix `json:"retires,omitempty"`
	// Deferred, set by NewPlan, says why Apply will skip the action now.
	Deferred string `json:"deferred,omitempty"`

	// Link is the device (set-address, set-mac; the VTEP for set-neighbour,
	// set-fdb and delete-fdb; the transition veth that holds the old gateway
	// for set-transition and delete-transition).
	Link string `json:"link,omitempty"`
	// Peer is the transition veth's other end, kept down
	// (set-transition, delete-transition).
	Peer string `json:"peer,omitempty"`
	// Add and Remove are the addresses (set-address; set-transition adds
	// Add, delete-transition lists in Remove what the veth held).
	Add    netip.Prefix   `json:"add,omitzero"`
	Remove []netip.Prefix `json:"remove,omitempty"`
	// MAC and OldMAC are the new and the current MAC (set-mac); MAC is also
	// the neighbour's MAC (set-neighbour) and the FDB entry's, all zeros
	// (set-fdb, delete-fdb).
	MAC    string `json:"mac,omitempty"`
	OldMAC string `json:"oldMAC,omitempty"`
	// Route is the route to set or delete; Replaces the route a set-route
	// replaces in place.
	Route    *Route `json:"route,omitempty"`
	Replaces *Route `json:"replaces,omitempty"`
	// Rule is the rule to insert or delete; Anchor the specification of the
	// rule an insert goes just before (it replaces that rule in place, with
	// a delete-rule later).
	Rule   *Rule    `json:"rule,omitempty"`
	Anchor []string `json:"anchor,omitempty"`
	// Path is the reservation file or subnet.env; IP and ContainerID the
	// reservation's address and owner as read. IP is also the neighbour's
	// address (set-neighbour) and the FDB entry's destination (set-fdb,
	// delete-fdb).
	Path        string     `json:"path,omitempty"`
	IP          netip.Addr `json:"ip,omitzero"`
	ContainerID string     `json:"containerID,omitempty"`
	// Env is the subnet.env rewrite.
	Env *EnvChange `json:"env,omitempty"`
}

// Plan is the reviewed, serialisable list of changes for one node. It records
// the want it was made for; Apply refuses it for another node, podCIDR,
// network or host layout.
type Plan struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Node       string       `json:"node"`
	PodCIDR    netip.Prefix `json:"podCIDR"`
	Network    netip.Prefix `json:"network,omitzero"`
	Bridge     string       `json:"bridge"`
	VTEP       string       `json:"vtep,omitempty"`
	// ReservationDir and SubnetEnvFile are the host paths audited.
	ReservationDir string `json:"reservationDir"`
	SubnetEnvFile  string `json:"subnetEnvFile"`
	// OldPodCIDRs and OldNetworks are the old ranges the audit found; an
	// action only retires ranges listed here.
	OldPodCIDRs []netip.Prefix `json:"oldPodCIDRs,omitempty"`
	OldNetworks []netip.Prefix `json:"oldNetworks,omitempty"`
	// LivePods are the pods live when planning; Apply also protects them.
	LivePods         []Pod `json:"livePods,omitempty"`
	LivePodsComplete bool  `json:"livePodsComplete"`
	// Actions run in this order.
	Actions []Action `json:"actions"`
}

// NewPlan turns a report's fixes into a plan: ordered so pods stay reachable,
// duplicates dropped, and every action that takes away a range live pods
// still use marked Deferred.
func NewPlan(r *Report) (*Plan, error) {
	if r == nil {
		return nil, fieldErr(ErrInvalidInput, "report", "", "is nil")
	}
	p := &Plan{APIVersion: PlanAPIVersion, Kind: PlanKind, Node: r.Node, PodCIDR: r.PodCIDR, Network: r.Network,
		Bridge: r.Bridge, VTEP: r.VTEP, ReservationDir: r.ReservationDir, SubnetEnvFile: r.SubnetEnvFile,
		OldPodCIDRs: slices.Clone(r.OldPodCIDRs), OldNetworks: slices.Clone(r.OldNetworks), LivePods: slices.Clone(r.LivePods), LivePodsComplete: r.LivePodsComplete, Actions: []Action{}}
	seen := map[string]bool{}
	for _, f := range r.Findings {
		for _, a := range f.Fix {
			key := string(a.Kind) + "\x00" + a.Object + "\x00" + a.Why
			if seen[key] {
				continue
			}
			seen[key] = true
			a.Deferred = p.deferral(&a, nil)
			p.Actions = append(p.Actions, a)
		}
	}
	slices.SortStableFunc(p.Actions, func(x, y Action) int { return x.phase() - y.phase() })
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// retired returns the old ranges a takes away: its Retires, and what its
// content takes away whatever Retires says (the bridge's removed addresses'
// subnets, the ranges a deleted rule names), so an edited plan cannot slip
// past the deferral.
func (p *Plan) retired(a *Action) []netip.Prefix {
	out := slices.Clone(a.Retires)
	add := func(r netip.Prefix) {
		if !r.Overlaps(p.PodCIDR) && r != p.Network && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	switch {
	case a.Kind == ActionSetAddress && a.Link == p.Bridge:
		for _, r := range a.Remove {
			if !p.movedToTransition(r) {
				add(r.Masked())
			}
		}
	case a.Kind == ActionDeleteTransition:
		for _, r := range a.Remove {
			add(r.Masked())
		}
	case a.Kind == ActionDeleteRule && a.Rule != nil:
		for _, ref := range ruleCIDRs(a.Rule.Spec) {
			add(ref.prefix)
		}
	}
	return out
}

// deferral says why a must wait, or "": it takes away a range that a live
// pod (of the plan, or of extra) still uses, or the live pods are not known.
func (p *Plan) deferral(a *Action, extra []Pod) string {
	retired := p.retired(a)
	if len(retired) == 0 {
		return ""
	}
	if !p.LivePodsComplete {
		return "the live pods are not known (LivePodsComplete is false): a pod may still use " + joinPrefixes(retired)
	}
	for _, r := range retired {
		if pods := oldPodsIn(p.PodCIDR, slices.Concat(p.LivePods, extra), r); len(pods) > 0 {
			return fmt.Sprintf("live pods still use %s: %s; it runs once they have moved to %s", r, podNames(pods), p.PodCIDR)
		}
	}
	return ""
}

// YAML renders the plan with sigs.k8s.io/yaml.
func (p *Plan) YAML() ([]byte, error) { return yaml.Marshal(p) }

// DecodePlan reads a plan from YAML or JSON, rejecting unknown fields, and
// validates it.
func DecodePlan(data []byte) (*Plan, error) {
	p := &Plan{}
	if err := yaml.UnmarshalStrict(data, p); err != nil {
		return nil, fmt.Errorf("nodenet: %w: %w", ErrInvalidPlan, err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Validate checks the plan's invariants: known apiVersion and kind; a node
// name and a canonical IPv4 podCIDR; and for every action, the fields its
// kind needs, consistent with the plan: the bridge only ever gets the
// podCIDR's gateway and the VTEP its network address; routes never lead into
// the podCIDR; rules only in the chains nodenet audits, and a delete only of a
// rule naming the old range it retires; reservations only inside
// ReservationDir, named by their address, outside the podCIDR; subnet.env
// only at SubnetEnvFile, with the podCIDR's gateway. Errors wrap
// ErrInvalidPlan and name the action, the field and the value.
func (p *Plan) Validate() error {
	bad := func(field, value, reason string, args ...any) error {
		return fieldErr(ErrInvalidPlan, "plan."+field, value, reason, args...)
	}
	if p.APIVersion != PlanAPIVersion || p.Kind != PlanKind {
		return bad("apiVersion/kind", p.APIVersion+"/"+p.Kind, "must be %s/%s", PlanAPIVersion, PlanKind)
	}
	if !nodeNameRE.MatchString(p.Node) {
		return bad("node", p.Node, "must be a node name")
	}
	if !p.PodCIDR.IsValid() || !p.PodCIDR.Addr().Is4() || p.PodCIDR.Masked() != p.PodCIDR || p.PodCIDR.Bits() > 30 {
		return bad("podCIDR", prefixString(p.PodCIDR), "must be a canonical IPv4 CIDR of /30 or shorter")
	}
	if p.Network.IsValid() && !contains(p.Network, p.PodCIDR) {
		return bad("network", p.Network.String(), "must contain podCIDR %s", p.PodCIDR)
	}
	if !validIfName(p.Bridge) {
		return bad("bridge", p.Bridge, "must be an interface name")
	}
	if p.VTEP != "" && !validIfName(p.VTEP) {
		return bad("vtep", p.VTEP, "must be an interface name")
	}
	for _, path := range []struct{ field, v string }{{"reservationDir", p.ReservationDir}, {"subnetEnvFile", p.SubnetEnvFile}} {
		if !filepath.IsAbs(path.v) || filepath.Clean(path.v) != path.v {
			return bad(path.field, path.v, "must be a clean absolute path")
		}
	}
	for i, r := range p.OldPodCIDRs {
		if !r.IsValid() || !r.Addr().Is4() || r.Masked() != r || r.Overlaps(p.PodCIDR) {
			return bad("oldPodCIDRs["+strconv.Itoa(i)+"]", prefixString(r), "must be a canonical IPv4 CIDR apart from the podCIDR %s", p.PodCIDR)
		}
	}
	for i, r := range p.OldNetworks {
		if !r.IsValid() || !r.Addr().Is4() || r.Masked() != r || r == p.Network {
			return bad("oldNetworks["+strconv.Itoa(i)+"]", prefixString(r), "must be a canonical IPv4 CIDR other than the network")
		}
	}
	last := 0
	for i := range p.Actions {
		a := &p.Actions[i]
		field := "actions[" + strconv.Itoa(i) + "]"
		if a.phase() < 0 {
			return bad(field+".kind", string(a.Kind), "is not an action nodenet knows")
		}
		if a.phase() < last {
			return bad(field+".kind", string(a.Kind), "is out of order: actions run subnet.env, MAC, transition set-up, address, neighbour and FDB, route, rule insert, reservation, rule delete, route delete, FDB delete, transition teardown, then the bridge's old address")
		}
		last = a.phase()
		for j, r := range a.Retires {
			if !slices.Contains(p.OldPodCIDRs, r) && !slices.Contains(p.OldNetworks, r) {
				return bad(field+".retires["+strconv.Itoa(j)+"]", prefixString(r), "must be one of the plan's oldPodCIDRs or oldNetworks")
			}
		}
		if err := p.validateAction(a, field); err != nil {
			return err
		}
	}
	return nil
}

func (p *Plan) validateAction(a *Action, field string) error {
	bad := func(f, value, reason string, args ...any) error {
		return fieldErr(ErrInvalidPlan, "plan."+field+"."+f, value, reason, args...)
	}
	switch a.Kind {
	case ActionWriteSubnetEnv:
		if a.Path != p.SubnetEnvFile {
			return bad("path", a.Path, "must be the plan's subnetEnvFile %s", p.SubnetEnvFile)
		}
		if a.Env == nil || a.Env.Subnet != gateway(p.PodCIDR) {
			return bad("env.subnet", envSubnet(a.Env), "must be %s, the podCIDR's gateway", gateway(p.PodCIDR))
		}
		if p.Network.IsValid() && a.Env.Network != p.Network {
			return bad("env.network", prefixString(a.Env.Network), "must be the plan's network %s", p.Network)
		}
	case ActionSetMAC:
		if a.Link != p.VTEP || p.VTEP == "" {
			return bad("link", a.Link, "must be the plan's VTEP %q", p.VTEP)
		}
		if mac, err := net.ParseMAC(a.MAC); err != nil || len(mac) != 6 {
			return bad("mac", a.MAC, "must be an Ethernet MAC")
		}
	case ActionSetAddress:
		switch {
		case a.Link == p.Bridge:
			if a.Add != gateway(p.PodCIDR) {
				return bad("add", prefixString(a.Add), "must be %s, the podCIDR's gateway, on the bridge %s", gateway(p.PodCIDR), p.Bridge)
			}
			for j, r := range a.Remove {
				if !r.Overlaps(p.PodCIDR) && !slices.Contains(a.Retires, r.Masked()) && !p.movedToTransition(r) {
					return bad("remove["+strconv.Itoa(j)+"]", prefixString(r), "takes %s away but retires lists %s", r.Masked(), joinPrefixes(a.Retires))
				}
			}
		case a.Link == p.VTEP && p.VTEP != "":
			if a.Add != vtepAddr(p.PodCIDR) || len(a.Retires) > 0 {
				return bad("add", prefixString(a.Add), "must be %s, the podCIDR's network address, on the VTEP %s", vtepAddr(p.PodCIDR), p.VTEP)
			}
		default:
			return bad("link", a.Link, "must be the plan's bridge %q or VTEP %q", p.Bridge, p.VTEP)
		}
		for j, r := range a.Remove {
			if !r.IsValid() || !r.Addr().Is4() || r == a.Add {
				return bad("remove["+strconv.Itoa(j)+"]", prefixString(r), "must be an IPv4 address other than %s", a.Add)
			}
		}
	case ActionSetRoute, ActionDeleteRoute:
		if a.Route == nil || !a.Route.Dst.IsValid() || !a.Route.Dst.Addr().Is4() || a.Route.Dst.Masked() != a.Route.Dst {
			return bad("route.dst", routeDst(a.Route), "must be a canonical IPv4 CIDR")
		}
		// The only route into the node's own podCIDR a plan touches is one
		// that leads away from the bridge through a gateway: it is deleted.
		ownStray := a.Kind == ActionDeleteRoute && a.Route.Gw.Is4() && a.Route.Dev != p.Bridge && contains(p.PodCIDR, a.Route.Dst)
		if a.Route.Dst.Overlaps(p.PodCIDR) && !ownStray {
			return bad("route.dst", a.Route.Dst.String(), "overlaps the node's own podCIDR %s, which lives on the bridge", p.PodCIDR)
		}
		if a.Route.Dev != "" && !validIfName(a.Route.Dev) {
			return bad("route.dev", a.Route.Dev, "must be an interface name")
		}
		if a.Kind == ActionSetRoute && !a.Route.Gw.Is4() {
			return bad("route.gw", addrString(a.Route.Gw), "must be an IPv4 next hop")
		}
	case ActionInsertRule, ActionDeleteRule:
		if a.Rule == nil || !watched(a.Rule.Table, a.Rule.Chain) {
			return bad("rule", ruleName(a.Rule), "must be in nat %s, nat %s or filter %s", chainPostrouting, ChainFlannelPostrouting, ChainFlannelForward)
		}
		if why := checkSpec(a.Rule.Spec); why != "" {
			return bad("rule.spec", joinSpec(a.Rule.Spec), "%s", why)
		}
		if len(a.Anchor) > 0 {
			if why := checkSpec(a.Anchor); why != "" {
				return bad("anchor", joinSpec(a.Anchor), "%s", why)
			}
		}
		if a.Kind == ActionDeleteRule && !namesRetired(a.Rule.Spec, a.Retires) {
			return bad("rule.spec", joinSpec(a.Rule.Spec), "names none of the retired ranges %s; a plan only deletes rules naming an old range", joinPrefixes(a.Retires))
		}
	case ActionSetTransition, ActionDeleteTransition:
		return p.validateTransition(a, field)
	case ActionSetNeighbour, ActionSetFDB, ActionDeleteFDB:
		return p.validateStandby(a, field)
	case ActionReleaseReservation:
		if !a.IP.Is4() || p.PodCIDR.Contains(a.IP) {
			return bad("ip", addrString(a.IP), "must be an IPv4 address outside the podCIDR %s", p.PodCIDR)
		}
		if want := filepath.Join(p.ReservationDir, a.IP.String()); a.Path != want {
			return bad("path", a.Path, "must be %s, the reservation file of %s", want, a.IP)
		}
	}
	return nil
}

func namesRetired(spec []string, retires []netip.Prefix) bool {
	for _, ref := range ruleCIDRs(spec) {
		for _, r := range retires {
			if contains(r, ref.prefix) {
				return true
			}
		}
	}
	return false
}

func envSubnet(e *EnvChange) string {
	if e == nil {
		return ""
	}
	return prefixString(e.Subnet)
}

func routeDst(r *Route) string {
	if r == nil {
		return ""
	}
	return prefixString(r.Dst)
}

func ruleName(r *Rule) string {
	if r == nil {
		return ""
	}
	return r.Table + " " + r.Chain
}
