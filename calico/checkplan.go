package calico

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/cidr"
)

// ErrInvalidPlan is wrapped by every error CheckPlan and DecodePlan return:
// the plan breaks its own invariants (or does not decode). It is bad input,
// not a changed cluster; nothing was written.
var ErrInvalidPlan = errors.New("invalid pool swap plan")

// PlanError names the plan field that breaks an invariant, its value and why.
type PlanError struct {
	Field  string
	Value  string
	Reason string
	err    error
}

// Error describes the problem in one line.
func (e *PlanError) Error() string {
	return fmt.Sprintf("invalid plan: %s %q: %s", e.Field, e.Value, e.Reason)
}

// Is reports whether target is ErrInvalidPlan.
func (e *PlanError) Is(target error) bool { return target == ErrInvalidPlan }

// Unwrap returns the underlying error (a *FieldError of the new pool, a parse error).
func (e *PlanError) Unwrap() error { return e.err }

// DecodePlan decodes a plan file (YAML or JSON, as written by `plan -o
// yaml|json`) strictly and checks its invariants (CheckPlan). Every error
// wraps ErrInvalidPlan.
func DecodePlan(data []byte) (*SwapPlan, error) {
	p := &SwapPlan{}
	if err := yaml.UnmarshalStrict(data, p); err != nil {
		return nil, &PlanError{Field: "(file)", Value: fmt.Sprintf("%d bytes", len(data)), Reason: "does not decode as a " + PlanKind + ": " + oneLine(err.Error()), err: err}
	}
	if err := CheckPlan(p); err != nil {
		return nil, err
	}
	return p, nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// CheckPlan checks a plan's own invariants, the ones that hold for every plan
// Plan makes, so a hand-edited or truncated plan is refused before any
// write: the kind and ID are set; the old pool is named and recorded (UID)
// and its spec.cidr is the plan's oldCIDR; the new pool is named (not as the
// old one), its spec.cidr is exactly the plan's newCIDR, of the old pool's
// family, and it is a valid, enabled Calico pool that lies inside the plan's
// cluster CIDR and overlaps neither the old pool, a Service CIDR nor a node
// network; every recorded range is masked; the move method is known. The
// error wraps ErrInvalidPlan and names the field and the value.
func CheckPlan(p *SwapPlan) error {
	if p == nil {
		return &PlanError{Field: "(plan)", Value: "", Reason: "no plan"}
	}
	bad := func(field, value, reason string) error {
		return &PlanError{Field: field, Value: value, Reason: reason}
	}
	if p.Kind != PlanKind {
		return bad("kind", p.Kind, "want "+PlanKind)
	}
	if p.APIVersion != PlanAPIVersion {
		return bad("apiVersion", p.APIVersion, "want "+PlanAPIVersion)
	}
	if p.ID == "" {
		return bad("id", "", "a plan made by Plan has an ID; the journal keys its progress by it")
	}
	switch p.API {
	case "", APIProjectCalicoV3, APICRDV1:
	default:
		return bad("api", string(p.API), fmt.Sprintf("want %s or %s", APIProjectCalicoV3, APICRDV1))
	}
	if p.OldPool.Name == "" {
		return bad("oldPool.name", "", "name the pool to retire")
	}
	if p.OldPool.UID == "" {
		return bad("oldPool.uid", "", "the plan records the old pool's UID as read, so Apply can refuse another pool of that name")
	}
	if !p.OldCIDR.IsValid() {
		return bad("oldCIDR", "", "the old pool's CIDR is missing")
	}
	oldPfx, err := p.OldPool.Prefix()
	if err != nil {
		return &PlanError{Field: "oldPool.spec.cidr", Value: p.OldPool.Spec.CIDR, Reason: "does not parse", err: err}
	}
	if oldPfx != p.OldCIDR {
		return bad("oldCIDR", p.OldCIDR.String(), fmt.Sprintf("disagrees with oldPool.spec.cidr %s", p.OldPool.Spec.CIDR))
	}
	if p.NewPool.Name == "" {
		return bad("newPool.name", "", "name the new pool")
	}
	if p.NewPool.Name == p.OldPool.Name {
		return bad("newPool.name", p.NewPool.Name, "the new pool needs a name different from the old pool's")
	}
	if !p.NewCIDR.IsValid() {
		return bad("newCIDR", "", "the new pool's CIDR is missing")
	}
	newPfx, err := cidr.Parse(p.NewPool.Spec.CIDR)
	if err != nil {
		return &PlanError{Field: "newPool.spec.cidr", Value: p.NewPool.Spec.CIDR, Reason: err.Error(), err: err}
	}
	if newPfx != p.NewCIDR {
		return bad("newCIDR", p.NewCIDR.String(), fmt.Sprintf("disagrees with newPool.spec.cidr %s", p.NewPool.Spec.CIDR))
	}
	if newPfx.Addr().Is4() != oldPfx.Addr().Is4() {
		return bad("newCIDR", p.NewCIDR.String(), fmt.Sprintf("the old pool is %s (%s); a swap keeps the family", cidr.FamilyOf(oldPfx), oldPfx))
	}
	if p.NewPool.Spec.Disabled {
		return bad("newPool.spec.disabled", "true", "the new pool must give addresses")
	}
	if strings.TrimSpace(p.NewPool.Spec.NodeSelector) == DisabledNodeSelector {
		return bad("newPool.spec.nodeSelector", p.NewPool.Spec.NodeSelector, "matches no node: the new pool must give addresses")
	}
	for _, l := range []struct {
		field string
		ps    []netip.Prefix
	}{{"clusterCIDRs", p.ClusterCIDRs}, {"serviceCIDRs", p.ServiceCIDRs}, {"nodeNetworks", p.NodeNetworks}} {
		for i, x := range l.ps {
			if !x.IsValid() || x != x.Masked() {
				return bad(fmt.Sprintf("%s[%d]", l.field, i), x.String(), "want a masked CIDR, e.g. 10.20.0.0/16")
			}
		}
	}
	switch p.Move {
	case MoveRollout, MoveEvict:
	default:
		return bad("move", string(p.Move), fmt.Sprintf("want %s or %s", MoveRollout, MoveEvict))
	}
	env := Environment{ClusterCIDRs: p.ClusterCIDRs, ServiceCIDRs: p.ServiceCIDRs, NodeNetworks: p.NodeNetworks, Pools: []IPPool{p.OldPool}}
	if err := ValidateNewPool(p.NewPool, env); err != nil {
		fe := FieldErrors(err)
		reason := oneLine(err.Error())
		if len(fe) > 0 {
			reason = fe[0].Reason
			if len(fe) > 1 {
				reason += fmt.Sprintf(" (and %d more)", len(fe)-1)
			}
			return &PlanError{Field: "newPool." + fe[0].Field, Value: fe[0].Value, Reason: reason, err: err}
		}
		return &PlanError{Field: "newPool", Value: p.NewPool.Name, Reason: reason, err: err}
	}
	return nil
}
