package flannel

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
)

// StepAction names what a plan step does.
type StepAction string

// The steps a registry plan can hold.
const (
	// ActionDeleteLease deletes a lease key if it still has the planned mod revision.
	ActionDeleteLease StepAction = "delete-lease"
	// ActionMoveLease writes the lease's value under a new key with the same etcd
	// lease attached and deletes the old key, in one transaction.
	ActionMoveLease StepAction = "move-lease"
	// ActionPutConfig writes <prefix>/config.
	ActionPutConfig StepAction = "put-config"
)

// Step is one change of a plan. It carries everything Apply needs, including
// what it assumes about the store: every write is a transaction that
// compares Key's mod revision with ModRevision (and, for a move, that NewKey
// does not exist), so a key changed since the plan was made (a flanneld
// renewing its lease, an operator editing it) is never overwritten.
type Step struct {
	Action StepAction `json:"action"`
	// Key is the key the step changes (the source of a move).
	Key string `json:"key"`
	// ModRevision is Key's mod revision when the plan was made; 0 means the key
	// did not exist.
	ModRevision int64 `json:"modRevision"`
	// NewKey is the destination of a move.
	NewKey string `json:"newKey,omitempty"`
	// Value is what a move writes under NewKey (the lease value as read) or what
	// put-config writes.
	Value string `json:"value,omitempty"`
	// LeaseID is the etcd lease a move attaches to NewKey (the old key's lease,
	// so the TTL carries over and flanneld's next renewal finds it).
	LeaseID int64 `json:"leaseID,omitempty"`
	// From and To are the subnets of a move.
	From SubnetKey `json:"from,omitzero"`
	To   SubnetKey `json:"to,omitzero"`
	// PublicIP identifies the node owning a moved or deleted lease.
	PublicIP netip.Addr `json:"publicIP,omitzero"`
	// Reason says why the step is there.
	Reason string `json:"reason"`
}

// Plan is a reviewed list of registry changes. It is plain data: it
// serialises to JSON and YAML (sigs.k8s.io/yaml), can be stored and applied
// later by Apply, which refuses steps whose keys changed since.
type Plan struct {
	// Prefix is the registry prefix the plan was computed for.
	Prefix string `json:"prefix"`
	// Revision is the etcd revision of the snapshot the plan was computed from.
	Revision int64 `json:"revision"`
	// Description says what the plan does.
	Description string `json:"description"`
	Steps       []Step `json:"steps"`
	// Warnings are consequences the operator must handle (host clean-up, restarts).
	Warnings []string `json:"warnings,omitempty"`
}

// resolveKey accepts a full key or the name under <prefix>/subnets/.
func resolveKey(prefix, k string) string {
	if strings.HasPrefix(k, prefix+"/") {
		return k
	}
	return prefix + "/subnets/" + strings.TrimPrefix(k, "/")
}

// PlanDelete plans deleting lease keys (full keys or names under
// <prefix>/subnets/, readable or not). Each delete happens only if the key
// still has the mod revision read in s: a lease flanneld renewed in between
// is alive and is kept (Apply reports a conflict).
func PlanDelete(s *Snapshot, keys []string, reason string) (*Plan, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no lease key to delete", ErrInvalidRequest)
	}
	if reason == "" {
		reason = "stale lease"
	}
	p := &Plan{Prefix: s.Prefix, Revision: s.Revision, Steps: []Step{}}
	seen := map[string]bool{}
	for _, k := range keys {
		key := resolveKey(s.Prefix, k)
		if seen[key] {
			continue
		}
		seen[key] = true
		st := Step{Action: ActionDeleteLease, Key: key, Reason: reason}
		if l := s.Lease(key); l != nil {
			st.ModRevision, st.From, st.PublicIP = l.ModRevision, l.Subnet, l.Attrs.PublicIP
		} else if i := slices.IndexFunc(s.BadLeases, func(b BadLease) bool { return b.Key == key }); i >= 0 {
			st.ModRevision, st.From = s.BadLeases[i].ModRevision, s.BadLeases[i].Subnet
		} else {
			return nil, fmt.Errorf("%w: lease key %s is not in the registry (read at revision %d)", ErrNotFound, key, s.Revision)
		}
		p.Steps = append(p.Steps, st)
	}
	p.Description = fmt.Sprintf("delete %d lease(s) under %s/subnets/", len(p.Steps), s.Prefix)
	p.Warnings = append(p.Warnings, "a deleted lease whose flanneld is still running makes it exit (\"Lease has been revoked\"); when it restarts it leases a subnet again, and its node needs the host clean-up steps if the subnet differs")
	return p, nil
}

// MoveRequest asks to move one lease.
type MoveRequest struct {
	// Key is the lease key (full, or its name under <prefix>/subnets/).
	Key string `json:"key"`
	// To is the destination. A zero IPv4 part picks the lowest free subnet
	// flanneld would accept; a zero IPv6 part keeps the lease's IPv6 subnet when
	// it is still valid and overlaps no other lease, else picks one.
	To SubnetKey `json:"to,omitzero"`
}

// PlanMove plans moving leases to other subnets. Each move is one etcd
// transaction: put the unchanged value under the new key with the same etcd
// lease attached and delete the old key, only if the old key still has its
// planned mod revision and the new key does not exist. The node's running
// flanneld sees its key deleted and exits; when restarted it finds the new
// lease by its PublicIP and keeps it. The node then needs the host clean-up
// steps (see CleanupSteps).
func PlanMove(s *Snapshot, reqs []MoveRequest) (*Plan, error) {
	res, err := s.resolved()
	if err != nil {
		return nil, fmt.Errorf("cannot plan a lease move without a valid network config: %w", err)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%w: no lease to move", ErrInvalidRequest)
	}
	taken := newTakenSet(s)
	p := &Plan{Prefix: s.Prefix, Revision: s.Revision, Steps: []Step{}}
	seen := map[string]bool{}
	for _, rq := range reqs {
		key := resolveKey(s.Prefix, rq.Key)
		l := s.Lease(key)
		if l == nil {
			return nil, fmt.Errorf("%w: lease key %s is not a readable lease in the registry (read at revision %d)", ErrNotFound, key, s.Revision)
		}
		if seen[key] {
			return nil, fmt.Errorf("%w: lease %s is listed twice", ErrInvalidRequest, key)
		}
		seen[key] = true
		if l.LeaseID != 0 && l.TTLSeconds < 0 {
			return nil, fmt.Errorf("%w: the etcd lease %x of %s has expired; nothing to move", ErrLeaseNotFound, l.LeaseID, key)
		}
		to := SubnetKey{}
		for _, fam := range []cidr.Family{cidr.IPv4, cidr.IPv6} {
			layout := res.Layout(fam)
			want, cur := rq.To.IPv4, l.Subnet.IPv4
			if fam == cidr.IPv6 {
				want, cur = rq.To.IPv6, l.Subnet.IPv6
			}
			if layout == nil {
				if want.IsValid() {
					return nil, fmt.Errorf("%w: destination %s: the network config does not enable %s", ErrInvalidRequest, want, fam)
				}
				if fam == cidr.IPv4 {
					// flanneld's etcd keys always carry an IPv4 part; keep it.
					to.IPv4 = cur
				}
				continue
			}
			var dst netip.Prefix
			switch {
			case want.IsValid():
				if want.Masked() != want {
					return nil, fmt.Errorf("%w: destination %s has host bits set; the subnet is %s", ErrInvalidRequest, want, want.Masked())
				}
				if !layout.Compatible(want) {
					return nil, fmt.Errorf("%w: destination %s: flanneld keeps only /%d subnets from %s to %s of %s", ErrInvalidRequest, want,
						layout.SubnetLen, layout.SubnetMin, layout.SubnetMax, layout.Network)
				}
				if other := taken.conflict(want, key); other != "" {
					return nil, fmt.Errorf("%w: destination %s overlaps %s", cidr.ErrOccupied, want, other)
				}
				dst = want
			case fam == cidr.IPv6 && cur.IsValid() && layout.Compatible(cur) && taken.conflict(cur.Masked(), key) == "":
				dst = cur
			default:
				var ok bool
				if dst, ok = taken.lowestFree(layout); !ok {
					return nil, fmt.Errorf("%w: every /%d of %s to %s overlaps a lease", ErrNoFreeSubnet, layout.SubnetLen, layout.SubnetMin, layout.SubnetMax)
				}
			}
			taken.add(dst, key+" (planned)")
			if fam == cidr.IPv4 {
				to.IPv4 = dst
			} else {
				to.IPv6 = dst
			}
		}
		if to == l.Subnet {
			return nil, fmt.Errorf("%w: lease %s is already on %s", ErrInvalidRequest, key, to)
		}
		p.Steps = append(p.Steps, Step{Action: ActionMoveLease, Key: key, ModRevision: l.ModRevision, NewKey: s.Prefix + "/subnets/" + to.String(),
			Value: l.Value, LeaseID: l.LeaseID, From: l.Subnet, To: to, PublicIP: l.Attrs.PublicIP,
			Reason: fmt.Sprintf("move the lease of %s from %s to %s", publicIPText(l.Attrs), l.Subnet, to)})
	}
	p.Description = fmt.Sprintf("move %d lease(s) under %s/subnets/", len(p.Steps), s.Prefix)
	p.Warnings = append(p.Warnings, moveWarning)
	return p, nil
}

const moveWarning = "each moved node's flanneld exits when its old key disappears (\"Lease has been revoked\") and takes the moved lease when restarted; " +
	"then run the node's host clean-up steps (delete cni0 and the backend device, clear the CNI IPAM directory, remove subnet.env, restart flanneld and the node's pods)"

// takenSet tracks which subnets leases hold, to pick and check move destinations.
type takenSet struct {
	exact map[netip.Prefix]string // masked prefix -> holder
	all   []struct {
		p   netip.Prefix
		key string
	}
}

func newTakenSet(s *Snapshot) *takenSet {
	t := &takenSet{exact: map[netip.Prefix]string{}}
	for _, l := range s.Leases {
		for _, p := range l.Subnet.prefixes() {
			t.add(p.Masked(), l.Key)
		}
	}
	for _, b := range s.BadLeases {
		for _, p := range b.Subnet.prefixes() {
			t.add(p.Masked(), b.Key)
		}
	}
	return t
}

func (t *takenSet) add(p netip.Prefix, key string) {
	if _, ok := t.exact[p]; !ok {
		t.exact[p] = key
	}
	t.all = append(t.all, struct {
		p   netip.Prefix
		key string
	}{p, key})
}

// conflict returns a holder overlapping p other than except, or "".
func (t *takenSet) conflict(p netip.Prefix, except string) string {
	for _, e := range t.all {
		if e.key != except && overlaps(e.p, p) {
			return e.key + " (" + e.p.String() + ")"
		}
	}
	return ""
}

// lowestFree returns the lowest subnet of the layout that overlaps nothing held.
func (t *takenSet) lowestFree(l *Layout) (netip.Prefix, bool) {
	size := subnetSize(l.Network.Addr().BitLen(), l.SubnetLen)
	cur := addrInt(l.SubnetMin)
	for i := new(big.Int); i.Cmp(l.Subnets) < 0; i.Add(i, big.NewInt(1)) {
		a, ok := intAddr(cur, l.SubnetMin)
		if !ok {
			break
		}
		c := netip.PrefixFrom(a, l.SubnetLen)
		if _, held := t.exact[c]; !held && t.conflict(c, "") == "" {
			return c, true
		}
		cur.Add(cur, size)
	}
	return netip.Prefix{}, false
}

// SetNetworkRequest asks to change the network of a config.
type SetNetworkRequest struct {
	// Network is the new IPv4 Network; zero keeps the current one. It must be
	// canonical (no host bits): parse user input with cidr.Parse.
	Network netip.Prefix `json:"network,omitzero"`
	// IPv6Network is the new IPv6Network; zero keeps the current one.
	IPv6Network netip.Prefix `json:"ipv6Network,omitzero"`
	// MoveLeases also moves every lease flanneld would not keep under the new
	// config to the subnet at the same offset in the new network (10.5.34.0/24
	// in 10.5.0.0/16 becomes 10.20.34.0/24 in 10.20.0.0/16), after the config
	// is written, so each node keeps "its" subnet number. Leases still valid
	// under the new config are left alone. Without MoveLeases, each flanneld
	// drops its lease at its next start and leases a random free subnet of the
	// new network.
	MoveLeases bool `json:"moveLeases,omitempty"`
}

// configEdits returns the text edits that set the new networks in c (and move
// SubnetMin/SubnetMax along when they are set).
func configEdits(c *Config, req SetNetworkRequest) ([]memberEdit, error) {
	var edits []memberEdit
	var same []string
	for _, f := range []struct {
		fam                cidr.Family
		want, cur          netip.Prefix
		field              string
		minField, maxField string
		min, max           netip.Addr
	}{
		{cidr.IPv4, req.Network, c.Network, "Network", "SubnetMin", "SubnetMax", c.SubnetMin, c.SubnetMax},
		{cidr.IPv6, req.IPv6Network, c.IPv6Network, "IPv6Network", "IPv6SubnetMin", "IPv6SubnetMax", c.IPv6SubnetMin, c.IPv6SubnetMax},
	} {
		if !f.want.IsValid() {
			continue
		}
		if cidr.FamilyOf(f.want) != f.fam {
			return nil, fmt.Errorf("%w: new %s %s must be an %s CIDR", ErrInvalidRequest, f.field, f.want, f.fam)
		}
		if f.fam == cidr.IPv6 && !c.EnableIPv6 {
			return nil, fmt.Errorf("%w: new %s %s: the config does not enable IPv6 (EnableIPv6 is false), so flanneld would ignore it", ErrInvalidRequest, f.field, f.want)
		}
		if f.fam == cidr.IPv4 && !c.EnableIPv4 {
			return nil, fmt.Errorf("%w: new %s %s: the config does not enable IPv4 (EnableIPv4 is false), so flanneld would ignore it", ErrInvalidRequest, f.field, f.want)
		}
		if f.want.Masked() != f.want {
			return nil, fmt.Errorf("%w: new %s %s has host bits set; the network is %s", ErrInvalidRequest, f.field, f.want, f.want.Masked())
		}
		if f.want == f.cur {
			same = append(same, fmt.Sprintf("%s %s", f.field, f.want))
			continue
		}
		v, _ := json.Marshal(f.want.String())
		edits = append(edits, memberEdit{Key: f.field, Value: string(v)})
		for _, m := range []struct {
			field string
			a     netip.Addr
		}{{f.minField, f.min}, {f.maxField, f.max}} {
			if !m.a.IsValid() {
				continue
			}
			if !f.cur.IsValid() {
				return nil, fmt.Errorf("%w: %s %s is set but the current %s is not; edit the config by hand", ErrInvalidRequest, m.field, m.a, f.field)
			}
			moved, err := cidr.RebaseAddr(m.a, f.cur, f.want)
			if err != nil {
				return nil, fmt.Errorf("%w: %s %s cannot follow %s from %s to %s: %v; set it by hand", ErrInvalidRequest, m.field, m.a, f.field, f.cur, f.want, err)
			}
			v, _ := json.Marshal(moved.String())
			edits = append(edits, memberEdit{Key: m.field, Value: string(v)})
		}
	}
	if len(edits) == 0 && len(same) > 0 {
		return nil, fmt.Errorf("%w: %s is already the config's network: nothing to change", ErrInvalidRequest, strings.Join(same, " and "))
	}
	if len(edits) == 0 {
		return nil, fmt.Errorf("%w: give a new Network or IPv6Network", ErrInvalidRequest)
	}
	return edits, nil
}

// SetNetworkText rewrites a config's JSON text to new networks, changing only
// the Network / IPv6Network values (and SubnetMin / SubnetMax, moved to the
// same offset, when they are set); every other byte, unknown fields and
// formatting included, is kept. A missing field is added after the last one.
// The result is checked with ParseConfig and, when check is true, Resolve.
func SetNetworkText(raw []byte, req SetNetworkRequest, check bool) ([]byte, *Config, error) {
	c, err := ParseConfig(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("the current config cannot be parsed: %w", err)
	}
	edits, err := configEdits(c, req)
	if err != nil {
		return nil, nil, err
	}
	out, err := editTopLevel(raw, edits)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	nc, err := ParseConfig(out)
	if err != nil {
		return nil, nil, fmt.Errorf("the rewritten config does not parse: %w", err)
	}
	if check {
		if _, err := nc.Resolve(); err != nil {
			return nil, nil, fmt.Errorf("flanneld would refuse the rewritten config: %w", err)
		}
	}
	return out, nc, nil
}

// PlanPutConfig plans writing a new network config, checked with ParseConfig
// and Resolve. The write happens only if <prefix>/config still has the mod
// revision read in s (or still does not exist).
func PlanPutConfig(s *Snapshot, raw []byte) (*Plan, error) {
	c, err := ParseConfig(raw)
	if err != nil {
		return nil, err
	}
	if _, err := c.Resolve(); err != nil {
		return nil, err
	}
	st := Step{Action: ActionPutConfig, Key: s.Prefix + "/config", Value: string(raw), Reason: "write the network config"}
	if s.Config != nil {
		st.ModRevision = s.Config.ModRevision
	}
	return &Plan{Prefix: s.Prefix, Revision: s.Revision, Description: "write " + st.Key, Steps: []Step{st},
		Warnings: []string{"flanneld reads the config only when it starts"}}, nil
}

// PlanSetNetwork plans moving the network to a new range: first the config
// is rewritten (SetNetworkText), then, with MoveLeases, every lease is moved
// to the same offset in the new network. flanneld reads the config only at
// start: running nodes keep their old subnet until their flanneld restarts
// (a moved lease makes it exit at once), and every node whose subnet changes
// needs the host clean-up steps.
func PlanSetNetwork(s *Snapshot, req SetNetworkRequest) (*Plan, error) {
	if s.Config == nil {
		return nil, fmt.Errorf("%w: %s/config does not exist; write a config with PlanPutConfig first", ErrConfigNotFound, s.Prefix)
	}
	newRaw, nc, err := SetNetworkText([]byte(s.Config.Raw), req, true)
	if err != nil {
		return nil, err
	}
	newRes, _ := nc.Resolve()
	p := &Plan{Prefix: s.Prefix, Revision: s.Revision, Steps: []Step{{
		Action: ActionPutConfig, Key: s.Config.Key, ModRevision: s.Config.ModRevision, Value: string(newRaw),
		Reason: "rewrite the network config to " + networksText(nc),
	}}}
	p.Description = "move the flannel network to " + networksText(nc)
	p.Warnings = append(p.Warnings, "flanneld reads the config only when it starts: every node keeps its current subnet until its flanneld restarts")

	var stranded []string
	var steps []Step
	var cannot []string
	taken := newTakenSet(s)
	for _, l := range s.Leases {
		to := l.Subnet
		needsMove := false
		for _, fam := range []cidr.Family{cidr.IPv4, cidr.IPv6} {
			nl := newRes.Layout(fam)
			cur := l.Subnet.IPv4
			if fam == cidr.IPv6 {
				cur = l.Subnet.IPv6
			}
			changed := req.Network.IsValid()
			from := s.Config.Config.Network
			if fam == cidr.IPv6 {
				changed, from = req.IPv6Network.IsValid(), s.Config.Config.IPv6Network
			}
			if !changed || nl == nil || !cur.IsValid() || nl.Compatible(cur) {
				continue
			}
			needsMove = true
			if !req.MoveLeases {
				continue
			}
			if !from.IsValid() || !cidr.ContainsPrefix(from, cur.Masked()) {
				p.Warnings = append(p.Warnings, fmt.Sprintf("%s (%s) lies outside the old network and is not moved; its flanneld leases a new subnet at its next start", l.Key, cur))
				continue
			}
			moved, err := cidr.Rebase(cur.Masked(), from, nl.Network)
			if err != nil || !nl.Compatible(moved) {
				cannot = append(cannot, fmt.Sprintf("%s (%s)", l.Key, cur))
				continue
			}
			if other := taken.conflict(moved, l.Key); other != "" {
				cannot = append(cannot, fmt.Sprintf("%s (%s would overlap %s)", l.Key, moved, other))
				continue
			}
			if fam == cidr.IPv4 {
				to.IPv4 = moved
			} else {
				to.IPv6 = moved
			}
		}
		if !needsMove {
			continue
		}
		stranded = append(stranded, l.Key)
		if req.MoveLeases && to != l.Subnet {
			taken.add(to.IPv4, l.Key+" (planned)")
			if to.IPv6.IsValid() {
				taken.add(to.IPv6, l.Key+" (planned)")
			}
			steps = append(steps, Step{Action: ActionMoveLease, Key: l.Key, ModRevision: l.ModRevision, NewKey: s.Prefix + "/subnets/" + to.String(),
				Value: l.Value, LeaseID: l.LeaseID, From: l.Subnet, To: to, PublicIP: l.Attrs.PublicIP,
				Reason: fmt.Sprintf("keep %s's subnet offset: %s becomes %s", publicIPText(l.Attrs), l.Subnet, to)})
		}
	}
	if len(cannot) > 0 {
		return nil, fmt.Errorf("%w: these leases cannot keep their offset in the new network (it is smaller, or the subnet length changes): %s; plan without MoveLeases to let flanneld pick new subnets",
			ErrInvalidRequest, strings.Join(cannot, ", "))
	}
	p.Steps = append(p.Steps, steps...)
	if len(stranded) > 0 && !req.MoveLeases {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d lease(s) do not fit the new network; at its next start each of their flanneld deletes the lease and leases a new subnet, and the node then needs the host clean-up steps", len(stranded)))
	}
	if len(steps) > 0 {
		p.Warnings = append(p.Warnings, moveWarning)
	}
	return p, nil
}

func networksText(c *Config) string {
	var parts []string
	if c.EnableIPv4 && c.Network.IsValid() {
		parts = append(parts, c.Network.String())
	}
	if c.EnableIPv6 && c.IPv6Network.IsValid() {
		parts = append(parts, c.IPv6Network.String())
	}
	if len(parts) == 0 {
		return "(no network)"
	}
	return strings.Join(parts, " + ")
}
