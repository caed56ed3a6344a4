package flannel

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
)

// A plan is untrusted input: it can be stored, reviewed and edited before it
// is applied. Apply re-checks its invariants before the first write, so an
// edited or corrupted plan is refused whole instead of being half applied.

// planError is an invariant a plan breaks; it wraps ErrInvalidPlan and
// ErrInvalidRequest.
func planError(i int, st Step, format string, args ...any) error {
	return fmt.Errorf("%w: %w: step %d (%s %s): %s", ErrInvalidPlan, ErrInvalidRequest, i+1, st.Action, st.Key, fmt.Sprintf(format, args...))
}

// stepError wraps an error met at step i (zero-based) with the step's
// number, action and key.
func stepError(i int, st Step, err error) error {
	return fmt.Errorf("step %d (%s %s): %w", i+1, st.Action, st.Key, err)
}

// subnetOf parses the subnet of a key under the registry's subnets prefix.
func (r *Registry) subnetOf(key string) (SubnetKey, error) {
	return ParseSubnetKey(strings.TrimPrefix(key, r.SubnetsPrefix()))
}

// checkPlanFields checks what a plan says about itself: every key in one
// step only, at most one config write and only as the first step, each
// move's From and To agreeing with its keys, a lease value flanneld can read
// and destinations that do not overlap each other.
func (r *Registry) checkPlanFields(p *Plan) error {
	seen := map[string]int{}
	use := func(i int, st Step, key string) error {
		if j, ok := seen[key]; ok {
			return planError(i, st, "key %s is already changed by step %d; a key may appear in one step only", key, j+1)
		}
		seen[key] = i
		return nil
	}
	type dest struct {
		p    netip.Prefix
		step int
	}
	var dests []dest
	for i, st := range p.Steps {
		if err := use(i, st, st.Key); err != nil {
			return err
		}
		switch st.Action {
		case ActionPutConfig:
			if i != 0 {
				return planError(i, st, "a config write must be the plan's first step, so the moves are checked against the config they land in")
			}
		case ActionDeleteLease:
			if k, err := r.subnetOf(st.Key); err == nil && !st.From.IsZero() && st.From != k {
				return planError(i, st, "from %s does not match the key's subnet %s", st.From, k)
			}
		case ActionMoveLease:
			if err := use(i, st, st.NewKey); err != nil {
				return err
			}
			from, err := r.subnetOf(st.Key)
			if err != nil {
				return planError(i, st, "the source key is not a lease key: %v", err)
			}
			to, err := r.subnetOf(st.NewKey)
			if err != nil {
				return planError(i, st, "the new key is not a lease key: %v", err)
			}
			if !st.From.IsZero() && st.From != from {
				return planError(i, st, "from %s does not match the key's subnet %s", st.From, from)
			}
			if st.To != to {
				return planError(i, st, "to %s does not match the new key's subnet %s", st.To, to)
			}
			if to.IPv4.Masked() != to.IPv4 || (to.IPv6.IsValid() && to.IPv6.Masked() != to.IPv6) {
				return planError(i, st, "to %s has host bits set", to)
			}
			attrs, err := ParseLeaseAttrs([]byte(st.Value))
			if err != nil {
				return planError(i, st, "the value is not a lease flanneld can read: %v", err)
			}
			if st.PublicIP.IsValid() && attrs.PublicIP != st.PublicIP {
				return planError(i, st, "publicIP %s does not match the value's PublicIP %s", st.PublicIP, attrs.PublicIP)
			}
			for _, d := range to.prefixes() {
				for _, o := range dests {
					if overlaps(o.p, d) {
						return planError(i, st, "destination %s overlaps %s, the destination of step %d", d, o.p, o.step+1)
					}
				}
				dests = append(dests, dest{d, i})
			}
		}
	}
	return nil
}

// checkPlanStore checks a plan against the store before the first write:
// every move lands inside the network of the config it runs under (the
// plan's own config write, or the stored config) and overlaps no lease
// held by another key; a step not yet done still finds its key at the mod
// revision it recorded, a move's value and etcd lease are what the store
// holds at that revision (else the plan was edited). Conflicts (a key
// written since the plan was made) are left to the caller.
func (r *Registry) checkPlanStore(ctx context.Context, p *Plan) error {
	moves := false
	for _, st := range p.Steps {
		moves = moves || st.Action == ActionMoveLease
	}
	if moves { // so p.Steps[0] exists
		var cfg *Config
		if p.Steps[0].Action == ActionPutConfig {
			c, err := ParseConfig([]byte(p.Steps[0].Value))
			if err != nil {
				return planError(0, p.Steps[0], "%v", err)
			}
			cfg = c
		} else {
			ce, err := r.ReadConfig(ctx)
			if err != nil {
				return fmt.Errorf("read the network config to check the plan: %w", err)
			}
			if ce.Config == nil {
				return fmt.Errorf("%w: %s cannot be read (%s): a lease move needs a valid network config", ErrInvalidConfig, ce.Key, ce.Error)
			}
			cfg = ce.Config
		}
		res, err := cfg.Resolve()
		if err != nil {
			return fmt.Errorf("%w: the network config the moves run under is refused by flanneld: %w", ErrInvalidPlan, err)
		}
		snap, err := r.Snapshot(ctx)
		if err != nil {
			return err
		}
		for i, st := range p.Steps {
			if st.Action != ActionMoveLease {
				continue
			}
			for _, fam := range []cidr.Family{cidr.IPv4, cidr.IPv6} {
				d := st.To.IPv4
				if fam == cidr.IPv6 {
					d = st.To.IPv6
				}
				if !d.IsValid() {
					continue
				}
				l := res.Layout(fam)
				if l == nil {
					if fam == cidr.IPv4 && d == st.From.IPv4 {
						continue // an IPv6-only move keeps the key's IPv4 part
					}
					return planError(i, st, "destination %s: the network config does not enable %s", d, fam)
				}
				if !l.Compatible(d) {
					return planError(i, st, "destination %s is outside what flanneld keeps: /%d subnets from %s to %s of %s", d, l.SubnetLen, l.SubnetMin, l.SubnetMax, l.Network)
				}
				if other := heldElsewhere(snap, d, st.Key, st.NewKey); other != "" {
					return planError(i, st, "destination %s overlaps %s, held by another lease", d, other)
				}
			}
		}
	}
	for i, st := range p.Steps {
		state, _, err := r.stepState(ctx, st)
		switch {
		case state == stateConflict && st.Action == ActionMoveLease:
			// A destination that was already held when the plan was made
			// (created at or before the plan's revision) is an edit: the
			// planner never picks a held subnet. Other conflicts are
			// reported by Apply's own pass over the steps.
			src, err := r.getOne(ctx, st.Key)
			if err != nil {
				return stepError(i, st, err)
			}
			dst, err := r.getOne(ctx, st.NewKey)
			if err != nil {
				return stepError(i, st, err)
			}
			if src != nil && dst != nil && dst.CreateRevision <= p.Revision {
				return planError(i, st, "destination %s was already held at the plan's revision %d (created at %d): the plan was edited", st.NewKey, p.Revision, dst.CreateRevision)
			}
		case state == stateConflict:
		case err != nil:
			return stepError(i, st, err)
		case state == statePending && st.Action == ActionMoveLease:
			cur, err := r.getOne(ctx, st.Key)
			if err != nil {
				return stepError(i, st, err)
			}
			if cur != nil && (!bytes.Equal(cur.Value, []byte(st.Value)) || cur.Lease != st.LeaseID) {
				return planError(i, st, "the store holds another value or etcd lease for the key at mod revision %d: the plan was edited", st.ModRevision)
			}
		}
	}
	return nil
}

// heldElsewhere returns a lease of s (readable or not) overlapping d whose
// key is neither of keys, or "".
func heldElsewhere(s *Snapshot, d netip.Prefix, keys ...string) string {
	mine := func(k string) bool {
		for _, x := range keys {
			if x == k {
				return true
			}
		}
		return false
	}
	for _, l := range s.Leases {
		for _, p := range l.Subnet.prefixes() {
			if !mine(l.Key) && overlaps(p.Masked(), d) {
				return l.Key + " (" + p.String() + ")"
			}
		}
	}
	for _, b := range s.BadLeases {
		for _, p := range b.Subnet.prefixes() {
			if !mine(b.Key) && overlaps(p.Masked(), d) {
				return b.Key + " (" + p.String() + ")"
			}
		}
	}
	return ""
}
