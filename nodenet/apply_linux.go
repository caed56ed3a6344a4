//go:build linux

package nodenet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"

	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/internal/subnetenv"
)

// Apply carries out a plan on the node want describes. Before the first
// change it checks want, opts and the plan (Plan.Validate), that the plan is
// for this node (ErrWrongNode) and for want's podCIDR, network and host
// layout (ErrStalePlan), and that the host is usable (RunFlannelDir,
// NetNS, iptables); any failure changes nothing.
//
// Actions run in the plan's order. Each first reads the current state, so a
// run killed at any point is resumed by running the same plan again, and a
// finished plan changes nothing. An action that takes away a range a live pod
// (the plan's or opts.LivePods) still uses is deferred; a reservation a live
// pod holds is never released; a rule is rewritten by inserting its new form
// just before it and deleting the old one (deferred while pods use the old
// range), never by deleting first. Apply stops at the first failing action.
func Apply(ctx context.Context, want Want, plan *Plan, opts ApplyOptions) (*Result, error) {
	w, err := want.normalize()
	if err != nil {
		return nil, err
	}
	if err := checkPods("ApplyOptions.LivePods", opts.LivePods); err != nil {
		return nil, err
	}
	if plan == nil {
		return nil, fieldErr(ErrInvalidPlan, "plan", "", "is nil")
	}
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	if plan.Node != w.Node {
		return nil, fieldErr(ErrWrongNode, "plan.node", plan.Node, "this is node %q; a plan is only applied on the node it was made for", w.Node)
	}
	if plan.PodCIDR != w.PodCIDR || plan.Network != w.Network {
		return nil, fieldErr(ErrStalePlan, "plan.podCIDR/network", plan.PodCIDR.String()+" "+prefixString(plan.Network),
			"the want says podCIDR %s network %s; audit and plan again", w.PodCIDR, prefixString(w.Network))
	}
	if !opts.DryRun {
		status, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return nil, fmt.Errorf("nodenet: read the process's capabilities: %w", err)
		}
		if !hasNetAdmin(status) {
			return nil, fmt.Errorf("nodenet: %w: Apply changes links, routes and iptables rules and needs CAP_NET_ADMIN (a DaemonSet: securityContext.capabilities.add NET_ADMIN); nothing was changed", ErrNoPrivilege)
		}
	}
	h, err := openHost(w)
	if err != nil {
		return nil, err
	}
	defer h.close()
	cni, err := readCNI(w.CNIConfDir)
	if err != nil {
		return nil, err
	}
	bridge, resDir := layout(w, cni.cfg)
	h.bridge = bridge
	vtep := ""
	if w.Backend == BackendVXLAN {
		vtep = w.VTEP
	}
	for _, c := range []struct{ field, plan, want string }{
		{"plan.bridge", plan.Bridge, bridge}, {"plan.vtep", plan.VTEP, vtep},
		{"plan.reservationDir", plan.ReservationDir, resDir},
		{"plan.subnetEnvFile", plan.SubnetEnvFile, filepath.Join(w.RunFlannelDir, "subnet.env")},
	} {
		if c.plan != c.want {
			return nil, fieldErr(ErrStalePlan, c.field, c.plan, "the want's host layout gives %q; audit and plan again", c.want)
		}
	}

	log := logr.FromContextOrDiscard(ctx).WithValues("node", w.Node)
	pods := slices.Concat(plan.LivePods, opts.LivePods)
	res := &Result{Node: w.Node, Outcomes: []Outcome{}}
	id := plan.ID()
	record := func(i int, a *Action, o *Outcome) error {
		if opts.Journal == nil || opts.DryRun {
			return nil
		}
		key := fmt.Sprintf("%s%s/action-%03d", JournalPrefix, id, i)
		if err := opts.Journal.Put(key, JournalRecord{Node: w.Node, Plan: id, Action: *a, Outcome: o, At: time.Now().UTC()}); err != nil {
			return fmt.Errorf("nodenet: node %s: journaling action %d (%s %s): %w", w.Node, i, a.Kind, a.Object, err)
		}
		return nil
	}
	if opts.Journal != nil && !opts.DryRun {
		if err := opts.Journal.Put(JournalPrefix+id+"/plan", plan); err != nil {
			return nil, fmt.Errorf("nodenet: node %s: journaling the plan (nothing was changed): %w", w.Node, err)
		}
	}
	for i := range plan.Actions {
		a := &plan.Actions[i]
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("nodenet: node %s: stopped before action %d: %w", w.Node, i, err)
		}
		o := Outcome{Index: i, Kind: a.Kind, Object: a.Object}
		var aerr, jerr error
		switch d := a.Deferred; {
		case d != "":
			o.Status, o.Detail = StatusDeferred, d
		default:
			if d = plan.deferral(a, opts.LivePods); d != "" {
				o.Status, o.Detail = StatusDeferred, d
			} else if opts.DryRun {
				o.Status, o.Detail = StatusDryRun, a.Why
			} else if d = h.unmoved(plan, a); d != "" {
				o.Status, o.Detail = StatusSkipped, d
			} else if err := record(i, a, nil); err != nil {
				return res, err
			} else {
				o.Status, o.Detail, aerr = h.do(a, pods)
				jerr = record(i, a, &o)
			}
		}
		res.Outcomes = append(res.Outcomes, o)
		log.Info("nodenet action", "index", i, "kind", a.Kind, "object", a.Object, "status", o.Status, "detail", o.Detail)
		if opts.OnEvent != nil {
			opts.OnEvent(o)
		}
		if aerr != nil {
			return res, fmt.Errorf("nodenet: node %s: action %d (%s %s): %w", w.Node, i, a.Kind, a.Object, aerr)
		}
		if jerr != nil {
			return res, jerr
		}
	}
	return res, nil
}

// do runs one action after checking the current state.
func (h *host) do(a *Action, pods []Pod) (Status, string, error) {
	switch a.Kind {
	case ActionWriteSubnetEnv:
		return writeSubnetEnv(a)
	case ActionSetMAC:
		return h.setMAC(a)
	case ActionSetAddress:
		return h.setAddress(a)
	case ActionSetRoute:
		return h.setRoute(a)
	case ActionDeleteRoute:
		return h.deleteRoute(a)
	case ActionInsertRule:
		return h.insertRule(a)
	case ActionDeleteRule:
		return h.deleteRule(a)
	case ActionReleaseReservation:
		return releaseReservation(a, pods)
	case ActionSetTransition:
		return h.setTransition(a)
	case ActionDeleteTransition:
		return h.deleteTransition(a, pods)
	case ActionSetNeighbour:
		return h.setNeighbour(a)
	case ActionSetFDB:
		return h.setFDB(a)
	case ActionDeleteFDB:
		return h.deleteFDB(a)
	}
	return "", "", fmt.Errorf("unknown action kind %q", a.Kind)
}

func writeSubnetEnv(a *Action) (Status, string, error) {
	fi, err := os.Stat(a.Path)
	if errors.Is(err, os.ErrNotExist) {
		return StatusSkipped, "the file is gone; flanneld writes it when it starts", nil
	}
	if err != nil {
		return "", "", err
	}
	data, err := readFile(a.Path)
	if err != nil {
		return "", "", err
	}
	env, err := subnetenv.Parse(data)
	if err != nil {
		return StatusSkipped, fmt.Sprintf("the file cannot be read any more: %v", err), nil
	}
	c := a.Env
	if env.Subnet == c.Subnet && (!c.Network.IsValid() || env.Network == c.Network) {
		return StatusUnchanged, "", nil
	}
	if env.Subnet != c.FromSubnet || env.Network != c.FromNetwork {
		return StatusSkipped, fmt.Sprintf("changed since planning (%s=%s %s=%s; flanneld rewrote it?)",
			subnetenv.Network, prefixString(env.Network), subnetenv.Subnet, prefixString(env.Subnet)), nil
	}
	env.Subnet, env.Network = c.Subnet, c.Network
	if err := journal.WriteFileAtomic(a.Path, env.Render(), fi.Mode().Perm()); err != nil {
		return "", "", err
	}
	return StatusDone, a.Why, nil
}

func (h *host) setMAC(a *Action) (Status, string, error) {
	l, err := h.link(a.Link)
	if err != nil || l == nil {
		return StatusSkipped, "the link is gone", err
	}
	cur := l.Attrs().HardwareAddr.String()
	if cur == a.MAC {
		return StatusUnchanged, "", nil
	}
	if cur != a.OldMAC {
		return StatusSkipped, "its MAC changed since planning, to " + cur, nil
	}
	mac, _ := net.ParseMAC(a.MAC) // Validate checked it
	if err := h.nl.LinkSetHardwareAddr(l, mac); err != nil {
		return "", "", err
	}
	return StatusDone, a.Why, nil
}

func (h *host) setAddress(a *Action) (Status, string, error) {
	l, err := h.link(a.Link)
	if err != nil || l == nil {
		return StatusSkipped, "the link is gone", err
	}
	cur, err := h.addrs(l)
	if err != nil {
		return "", "", err
	}
	var remove []netip.Prefix
	for _, r := range a.Remove {
		if slices.Contains(cur, r) {
			remove = append(remove, r)
		}
	}
	add := !slices.Contains(cur, a.Add)
	if !add && len(remove) == 0 {
		return StatusUnchanged, "", nil
	}
	// Add before removing (make before break), unless an old address shares
	// the new one's subnet: deleting a primary address deletes its
	// secondaries, so it goes first then.
	first := slices.ContainsFunc(remove, func(r netip.Prefix) bool { return r.Overlaps(a.Add) })
	del := func() error {
		for _, r := range remove {
			if err := h.nl.AddrDel(l, &netlink.Addr{IPNet: toIPNet(r)}); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
				return fmt.Errorf("delete %s from %s: %w", r, a.Link, err)
			}
		}
		return nil
	}
	if first {
		if err := del(); err != nil {
			return "", "", err
		}
	}
	if add {
		if err := h.nl.AddrAdd(l, &netlink.Addr{IPNet: toIPNet(a.Add)}); err != nil && !errors.Is(err, syscall.EEXIST) {
			return "", "", fmt.Errorf("add %s to %s: %w", a.Add, a.Link, err)
		}
	}
	if !first {
		if err := del(); err != nil {
			return "", "", err
		}
	}
	return StatusDone, a.Why, nil
}

// findRoute returns the listed route equal to rt (destination, next hop,
// device and metric).
func (h *host) findRoute(rt Route) (*netlink.Route, error) {
	routes, raw, err := h.routes()
	if err != nil {
		return nil, err
	}
	for i, r := range routes {
		if r.Dst == rt.Dst && r.Gw == rt.Gw && (rt.Dev == "" || r.Dev == rt.Dev) && r.Metric == rt.Metric {
			return &raw[i], nil
		}
	}
	return nil, nil
}

func (h *host) setRoute(a *Action) (Status, string, error) {
	rt := *a.Route
	if found, err := h.findRoute(rt); err != nil || found != nil {
		return StatusUnchanged, "", err
	}
	nr := &netlink.Route{Dst: toIPNet(rt.Dst), Gw: rt.Gw.AsSlice(), Priority: rt.Metric, Table: syscall.RT_TABLE_MAIN}
	if rt.Onlink {
		nr.Flags = int(netlink.FLAG_ONLINK)
	}
	if rt.Dev != "" {
		l, err := h.link(rt.Dev)
		if err != nil || l == nil {
			return StatusSkipped, "the link " + rt.Dev + " is gone", err
		}
		nr.LinkIndex = l.Attrs().Index
	}
	if err := h.nl.RouteReplace(nr); err != nil {
		return "", "", fmt.Errorf("route replace %s: %w", rt, err)
	}
	return StatusDone, a.Why, nil
}

func (h *host) deleteRoute(a *Action) (Status, string, error) {
	found, err := h.findRoute(*a.Route)
	if err != nil || found == nil {
		return StatusUnchanged, "", err
	}
	if err := h.nl.RouteDel(found); err != nil && !errors.Is(err, syscall.ESRCH) {
		return "", "", fmt.Errorf("route delete %s: %w", a.Route, err)
	}
	return StatusDone, a.Why, nil
}

// ruleWriteAttempts bounds how often insertRule reads a chain again after
// another writer changed it.
const ruleWriteAttempts = 5

// insertRule inserts the rule just before its anchor, or at the top without
// one. flanneld rewrites its chains when it starts and when a rule of its
// own is missing, so the chain can change between the read that finds the
// anchor's position and the insert: an insert that failed while the chain
// changed, or that did not land just before the anchor, is undone and tried
// again on a fresh read.
func (h *host) insertRule(a *Action) (st Status, detail string, err error) {
	r := a.Rule
	err = h.inNS(func() error {
		for attempt := 1; ; attempt++ {
			rules, ok, err := h.listChain(r.Table, r.Chain)
			switch {
			case err != nil:
				return err
			case !ok:
				st, detail = StatusSkipped, "the chain is gone"
				return nil
			}
			if exists, err := h.ipt.Exists(r.Table, r.Chain, r.Spec...); err != nil || exists {
				st = StatusUnchanged
				return wrapIPT(err, "check", r.Table, r.Chain)
			}
			pos := 1
			if len(a.Anchor) > 0 {
				if pos = ruleIndex(rules, a.Anchor); pos == 0 {
					st, detail = StatusSkipped, "the rule it replaces is gone"
					return nil
				}
			}
			if h.beforeRuleWrite != nil {
				h.beforeRuleWrite()
			}
			ierr := h.ipt.Insert(r.Table, r.Chain, pos, r.Spec...)
			now, ok, err := h.listChain(r.Table, r.Chain)
			if err != nil {
				return err
			}
			if ierr == nil && ok && ruleIndex(now, r.Spec) == pos && (len(a.Anchor) == 0 || ruleIndex(now, a.Anchor) == pos+1) {
				st, detail = StatusDone, fmt.Sprintf("%s (at #%d)", a.Why, pos)
				return nil
			}
			if ierr == nil && ok {
				// Inserted, but the chain had changed: not just before the anchor.
				if h.beforeRuleWrite != nil {
					h.beforeRuleWrite()
				}
				if err := h.ipt.Delete(r.Table, r.Chain, r.Spec...); err != nil {
					// flanneld may have rewritten the chain meanwhile and
					// taken the rule with it: then the next attempt inserts
					// it again.
					if gone, gerr := h.ruleGone(r); gerr != nil || !gone {
						return wrapIPT(err, "delete a misplaced", r.Table, r.Chain)
					}
				}
			}
			if attempt == ruleWriteAttempts {
				if ierr != nil {
					return wrapIPT(ierr, "insert", r.Table, r.Chain)
				}
				return fmt.Errorf("nodenet: iptables %s %s: the chain kept changing while a rule was inserted just before %q", r.Table, r.Chain, strings.Join(a.Anchor, " "))
			}
			if ierr != nil && ok && slices.EqualFunc(now, rules, func(x, y Rule) bool { return slices.Equal(x.Spec, y.Spec) }) {
				return wrapIPT(ierr, "insert", r.Table, r.Chain) // the chain did not change: a failure of its own
			}
		}
	})
	return st, detail, err
}

func (h *host) deleteRule(a *Action) (st Status, detail string, err error) {
	r := a.Rule
	err = h.inNS(func() error {
		if ok, err := h.ipt.ChainExists(r.Table, r.Chain); err != nil || !ok {
			st = StatusUnchanged
			return wrapIPT(err, "check chain", r.Table, r.Chain)
		}
		exists, err := h.ipt.Exists(r.Table, r.Chain, r.Spec...)
		if err != nil || !exists {
			st = StatusUnchanged
			return wrapIPT(err, "check", r.Table, r.Chain)
		}
		if h.beforeRuleWrite != nil {
			h.beforeRuleWrite()
		}
		if derr := h.ipt.Delete(r.Table, r.Chain, r.Spec...); derr != nil {
			// Another writer (flanneld rewriting its chains) may have
			// removed the rule, or its chain, since the check: then the
			// rule is gone, as wanted, and nothing was changed here.
			if gone, err := h.ruleGone(r); err == nil && gone {
				st = StatusUnchanged
				return nil
			}
			return wrapIPT(derr, "delete", r.Table, r.Chain)
		}
		st, detail = StatusDone, a.Why
		return nil
	})
	return st, detail, err
}

// ruleGone reports whether r's chain, or r in it, no longer exists.
func (h *host) ruleGone(r *Rule) (bool, error) {
	ok, err := h.ipt.ChainExists(r.Table, r.Chain)
	if err != nil || !ok {
		return err == nil, err
	}
	exists, err := h.ipt.Exists(r.Table, r.Chain, r.Spec...)
	return err == nil && !exists, err
}

// releaseReservation removes a leaked reservation file under host-local's
// lock (flock on <dir>/lock), after reading it again: a file now held by
// another container, or by a live pod, is kept.
func releaseReservation(a *Action, pods []Pod) (Status, string, error) {
	dir := filepath.Dir(a.Path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return StatusUnchanged, "", nil
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return "", "", fmt.Errorf("open host-local's lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", "", fmt.Errorf("lock host-local's directory: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file unlocks too
	data, err := readFile(a.Path)
	if errors.Is(err, os.ErrNotExist) {
		return StatusUnchanged, "", nil
	}
	if err != nil {
		return "", "", err
	}
	owner := reservationOwner(data)
	if owner != a.ContainerID {
		return StatusSkipped, fmt.Sprintf("now reserved by container %q, not %q", owner, a.ContainerID), nil
	}
	for _, p := range pods {
		if p.IP == a.IP || (p.ContainerID != "" && p.ContainerID == owner) {
			return StatusSkipped, "held by live pod " + p.String(), nil
		}
	}
	if err := os.Remove(a.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", "", err
	}
	return StatusDone, a.Why, nil
}
