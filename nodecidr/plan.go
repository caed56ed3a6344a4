package nodecidr

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/cidr"
)

// The apiVersion and kind a serialised Plan carries.
const (
	PlanAPIVersion = "cidrshift.io/v1alpha1"
	PlanKind       = "NodePodCIDRPlan"
)

var (
	// ErrInvalidOptions means the caller's options cannot describe a plan
	// (missing layout, bad rebase pairs, unknown node names, ...).
	ErrInvalidOptions = errors.New("invalid options")
	// ErrPlan means no plan satisfies the request (a podCIDR outside --from,
	// no free subnet left, a new podCIDR colliding with a node that stays).
	ErrPlan = errors.New("cannot plan")
	// ErrInvalidPlan means a plan (typically read from a file) is malformed.
	ErrInvalidPlan = errors.New("invalid plan")
)

// Mode is how new podCIDRs are chosen.
type Mode string

// The planning modes.
const (
	// ModeRebase keeps each node's offset: 10.10.1.0/24 in 10.10.0.0/18 becomes
	// 10.20.1.0/24 in 10.20.0.0/16 (cidr.Rebase), per family.
	ModeRebase Mode = "rebase"
	// ModeAllocate gives each selected node that is not already correctly
	// placed a fresh subnet of the target layout, lowest free first, after
	// occupying every podCIDR in use.
	ModeAllocate Mode = "allocate"
	// ModeFix gives new subnets only to nodes whose podCIDR is missing,
	// duplicated (the node holding it longest keeps it), overlapping, invalid or
	// outside the current cluster CIDR.
	ModeFix Mode = "fix"
)

// Action is how a node gets its new podCIDRs.
type Action string

// The actions of a step.
const (
	// ActionRecreate deletes the Node and creates it again with new podCIDRs:
	// a podCIDR that is set can never be changed by an update.
	ActionRecreate Action = "recreate"
	// ActionPatch sets the podCIDRs of a node that has none: the one update the
	// API server allows (from "" to a value).
	ActionPatch Action = "patch"
)

// RebasePair maps one family's old range to its new one.
type RebasePair struct {
	From netip.Prefix `json:"from"`
	To   netip.Prefix `json:"to"`
}

// PlanOptions says which nodes to move and how.
type PlanOptions struct {
	// ListOptions.LabelSelector selects nodes by label; empty selects all.
	ListOptions
	// Names selects nodes by name; combined with LabelSelector a node must match both.
	Names []string
	// Mode picks how new podCIDRs are chosen.
	Mode Mode
	// Rebase has one pair per family for ModeRebase.
	Rebase []RebasePair
	// After, in ModeRebase, are kube-controller-manager's node IPAM flags
	// once the nodes are moved, for the plan's preflight
	// (Plan.ControllerManager). Without it they are derived from Rebase,
	// which is right unless the nodes also hold a family Rebase does not
	// move (a dual-stack cluster moving one family): the flags then keep
	// that family's range, which only the caller knows.
	After *cidr.ControllerManagerFlags
	// Layout is the target layout for ModeAllocate and the current layout for
	// ModeFix: cluster CIDR(s) in order, node masks (0 means the default), and
	// optionally the Service CIDR(s), whose subnets are never handed out.
	Layout cidr.NodeIPAMLayout
	// Within, when set, narrows where ModeAllocate and ModeFix take new
	// subnets: only node subnets wholly inside one of these prefixes (the
	// enabled Calico pools, say) are handed out, in each family that has
	// one. Subnets overlapping Excluded (disabled Calico pools, say) never
	// are. Neither changes the layout, which the plan records, nor the
	// podCIDRs in use.
	Within, Excluded []netip.Prefix
}

// Step is the change of one node.
type Step struct {
	Node string    `json:"node"`
	UID  types.UID `json:"uid"`
	// ResourceVersion is the node's resourceVersion when the plan was made.
	ResourceVersion string `json:"resourceVersion"`
	// ControlPlane marks nodes with a control-plane role; they are moved last.
	ControlPlane bool     `json:"controlPlane,omitempty"`
	Action       Action   `json:"action"`
	OldPodCIDRs  []string `json:"oldPodCIDRs"`
	NewPodCIDRs  []string `json:"newPodCIDRs"`
	// Reason says why the node moves.
	Reason string `json:"reason"`
}

// Skip is a selected node the plan leaves alone, and why.
type Skip struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// Plan is the reviewed, serialisable list of node changes. It records each
// node's UID, resourceVersion and podCIDRs as seen when planning, so Apply
// refuses it once the cluster no longer matches.
type Plan struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Mode       Mode   `json:"mode"`
	// Selector and Names record the selection the plan was made for.
	Selector string   `json:"selector,omitempty"`
	Names    []string `json:"names,omitempty"`
	// Rebase records the pairs of a rebase plan.
	Rebase []RebasePair `json:"rebase,omitempty"`
	// Layout records the layout of an allocate or fix plan.
	Layout *cidr.NodeIPAMLayout `json:"layout,omitempty"`
	// Steps are in the order Apply runs them: workers by name, then
	// control-plane nodes by name.
	Steps []Step `json:"steps"`
	// Skipped lists selected nodes that need no change, when the reason is worth telling.
	Skipped []Skip `json:"skipped,omitempty"`
	// Unchanged counts selected nodes that already satisfy the plan.
	Unchanged int `json:"unchanged"`
	// ControllerManager predicts kube-controller-manager's start-up with the
	// plan's target cluster CIDR(s) once the plan is applied.
	ControllerManager *cidr.PreflightResult `json:"controllerManager,omitempty"`
	// Warnings are problems the plan does not fix but a person should know.
	Warnings []string `json:"warnings,omitempty"`
}

// ID identifies the plan's content (mode and steps) so a journal can tell
// whether it holds a run of the same plan.
func (p *Plan) ID() string {
	data, _ := json.Marshal(struct {
		Mode  Mode   `json:"mode"`
		Steps []Step `json:"steps"`
	}{p.Mode, p.Steps})
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:12])
}

// Step returns the step for node, or nil.
func (p *Plan) Step(node string) *Step {
	for i := range p.Steps {
		if p.Steps[i].Node == node {
			return &p.Steps[i]
		}
	}
	return nil
}

// stepIndex maps node names to their steps.
func (p *Plan) stepIndex() map[string]*Step {
	m := make(map[string]*Step, len(p.Steps))
	for i := range p.Steps {
		m[p.Steps[i].Node] = &p.Steps[i]
	}
	return m
}

// YAML renders the plan with sigs.k8s.io/yaml.
func (p *Plan) YAML() ([]byte, error) { return yaml.Marshal(p) }

// DecodePlan reads a plan from YAML or JSON, rejecting unknown fields, and validates it.
func DecodePlan(data []byte) (*Plan, error) {
	p := &Plan{}
	if err := yaml.UnmarshalStrict(data, p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPlan, err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Validate checks that the plan is well formed: known apiVersion, kind, mode
// and actions; unique node names with UIDs; one or two canonical new podCIDRs
// per step (one per family) that no two steps share; patch steps only for
// nodes without podCIDRs; and every new podCIDR inside the plan's own target
// (a rebase: the old podCIDR rebased by the plan's pair; allocate and fix:
// the layout's cluster CIDR of its family, with the layout's node mask).
// Errors wrap ErrInvalidPlan and name the step, the field and the value.
func (p *Plan) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidPlan}, args...)...)
	}
	if p.APIVersion != PlanAPIVersion || p.Kind != PlanKind {
		return bad("apiVersion %q kind %q: want apiVersion %s kind %s", p.APIVersion, p.Kind, PlanAPIVersion, PlanKind)
	}
	switch p.Mode {
	case ModeRebase, ModeAllocate, ModeFix:
	default:
		return bad("mode %q: want %s, %s or %s", p.Mode, ModeRebase, ModeAllocate, ModeFix)
	}
	seen := map[string]bool{}
	var ranges []cidr.Range
	for i, s := range p.Steps {
		where := fmt.Sprintf("steps[%d]", i)
		if s.Node == "" {
			return bad("%s.node is empty", where)
		}
		where += " (node " + s.Node + ")"
		if seen[s.Node] {
			return bad("%s: node appears twice", where)
		}
		seen[s.Node] = true
		if s.UID == "" {
			return bad("%s.uid is empty; plans record the UID of every node they change", where)
		}
		switch s.Action {
		case ActionRecreate:
			if len(s.OldPodCIDRs) == 0 {
				return bad("%s: action recreate with no oldPodCIDRs; a node without podCIDRs takes action patch", where)
			}
		case ActionPatch:
			if len(s.OldPodCIDRs) != 0 {
				return bad("%s: action patch with oldPodCIDRs %v; the API server only allows setting podCIDRs that are empty", where, s.OldPodCIDRs)
			}
		default:
			return bad("%s.action %q: want %s or %s", where, s.Action, ActionRecreate, ActionPatch)
		}
		if n := len(s.NewPodCIDRs); n < 1 || n > 2 {
			return bad("%s.newPodCIDRs has %d entries: want one, or two of different families", where, n)
		}
		var fams []cidr.Family
		for j, t := range s.NewPodCIDRs {
			pr, err := cidr.Parse(t)
			if err != nil {
				return bad("%s.newPodCIDRs[%d]: %w", where, j, err)
			}
			fams = append(fams, cidr.FamilyOf(pr))
			ranges = append(ranges, cidr.Range{Name: s.Node, Kind: cidr.KindNodePodCIDR, Prefix: pr})
		}
		if len(fams) == 2 && fams[0] == fams[1] {
			return bad("%s.newPodCIDRs %v: both are %s; at most one per family", where, s.NewPodCIDRs, fams[0])
		}
		if slices.Equal(s.OldPodCIDRs, s.NewPodCIDRs) {
			return bad("%s: newPodCIDRs equal oldPodCIDRs %v", where, s.OldPodCIDRs)
		}
	}
	for _, o := range cidr.Analyze(ranges, cidr.AnalyzeOptions{}) {
		return bad("nodes %s and %s would get overlapping podCIDRs %s and %s", o.Outer.Name, o.Inner.Name, o.Outer.Prefix, o.Inner.Prefix)
	}
	return p.checkTargets()
}

// MakePlan lists the cluster's Nodes (all of them: nodes that stay put
// constrain the new subnets) and plans new podCIDRs for the selected ones.
func MakePlan(ctx context.Context, client kubernetes.Interface, opts PlanOptions) (*Plan, error) {
	nodes, err := ListNodes(ctx, client, ListOptions{PageSize: opts.PageSize})
	if err != nil {
		return nil, fmt.Errorf("planning node podCIDRs: %w", err)
	}
	return PlanNodes(nodes, opts)
}

// PlanNodes plans new podCIDRs for the selected nodes among nodes, which must
// be every node of the cluster. It is pure: the same input gives the same plan.
func PlanNodes(nodes []corev1.Node, opts PlanOptions) (*Plan, error) {
	all := make([]*corev1.Node, len(nodes))
	for i := range nodes {
		all[i] = &nodes[i]
	}
	selected, err := selectNodes(all, opts)
	if err != nil {
		return nil, err
	}
	p := &Plan{APIVersion: PlanAPIVersion, Kind: PlanKind, Mode: opts.Mode, Selector: opts.LabelSelector, Names: slices.Clone(opts.Names)}
	var flags cidr.ControllerManagerFlags
	switch opts.Mode {
	case ModeRebase:
		if err := planRebase(p, all, selected, opts.Rebase); err != nil {
			return nil, err
		}
		flags = rebaseFlags(p, opts.Rebase)
		if opts.After != nil {
			flags = *opts.After
		}
	case ModeAllocate, ModeFix:
		if err := checkLayout(opts.Layout); err != nil {
			return nil, err
		}
		l := opts.Layout
		p.Layout = &l
		if opts.Mode == ModeFix {
			if err := checkLayoutInUse(all, l); err != nil {
				return nil, err
			}
		}
		if err := planLayout(p, all, selected, opts, opts.Mode == ModeAllocate); err != nil {
			return nil, err
		}
		flags = layoutFlags(opts.Layout)
	default:
		return nil, fmt.Errorf("%w: mode %q: want %s, %s or %s", ErrInvalidOptions, opts.Mode, ModeRebase, ModeAllocate, ModeFix)
	}
	if err := checkCollisions(p, nodes); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w: internal error, the plan made is invalid: %w", ErrPlan, err)
	}
	if err := conflictsWith(p, nodes); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPlan, err)
	}
	pre := PreflightAfter(flags, nodes, p)
	p.ControllerManager = &pre
	if !pre.WouldStart {
		planned := p.stepIndex()
		for _, c := range pre.Crashes {
			hint := ""
			if planned[c.Node] == nil {
				hint = "; the node is not in this plan, select it too"
			}
			p.Warnings = append(p.Warnings, fmt.Sprintf("after this plan, kube-controller-manager with %s would crash-loop on node %s: %s%s",
				strings.Join(flags.Args()[1:], " "), c.Node, c.Message, hint))
		}
		for _, e := range pre.FlagErrors {
			p.Warnings = append(p.Warnings, "kube-controller-manager would refuse "+strings.Join(flags.Args()[1:], " ")+": "+e)
		}
	}
	return p, nil
}

func selectNodes(all []*corev1.Node, opts PlanOptions) ([]*corev1.Node, error) {
	sel := labels.Everything()
	if opts.LabelSelector != "" {
		s, err := labels.Parse(opts.LabelSelector)
		if err != nil {
			return nil, fmt.Errorf("%w: label selector %q: %w", ErrInvalidOptions, opts.LabelSelector, err)
		}
		sel = s
	}
	names := map[string]bool{}
	for _, n := range opts.Names {
		names[n] = true
	}
	found := map[string]bool{}
	var out []*corev1.Node
	var noUID []string
	for _, n := range all {
		if len(names) > 0 && !names[n.Name] {
			continue
		}
		found[n.Name] = true
		if sel.Matches(labels.Set(n.Labels)) {
			out = append(out, n)
			if n.UID == "" {
				noUID = append(noUID, n.Name)
			}
		}
	}
	if len(noUID) > 0 {
		return nil, fmt.Errorf("%w: nodes %s have no metadata.uid; a plan records the UID of every node it changes, so plan from the API or from a complete dump (kubectl get nodes -o yaml)",
			ErrInvalidOptions, strings.Join(noUID, ", "))
	}
	var missing []string
	for _, n := range opts.Names {
		if !found[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: no node named %s in the cluster", ErrInvalidOptions, strings.Join(missing, ", "))
	}
	if opts.LabelSelector != "" && len(out) == 0 {
		return nil, fmt.Errorf("%w: label selector %q matches no node", ErrInvalidOptions, opts.LabelSelector)
	}
	sortNodes(out)
	return out, nil
}

func newStep(n *corev1.Node, action Action, old, new []string, reason string) Step {
	return Step{Node: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, ControlPlane: IsControlPlane(n),
		Action: action, OldPodCIDRs: old, NewPodCIDRs: new, Reason: reason}
}

func planRebase(p *Plan, all, selected []*corev1.Node, pairs []RebasePair) error {
	byFam, err := rebasePairs(pairs)
	if err != nil {
		return err
	}
	p.Rebase = slices.Clone(pairs)
	var errs []error
	for _, n := range selected {
		old := PodCIDRsOf(n)
		if len(old) == 0 {
			p.Skipped = append(p.Skipped, Skip{Node: n.Name, Reason: "no podCIDR to rebase"})
			continue
		}
		next := make([]string, len(old))
		var why []string
		for i, t := range old {
			pr, _, err := cidr.ParseLenient(t)
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: node %s: podCIDRs[%d] %q: %w", ErrPlan, n.Name, i, t, err))
				continue
			}
			next[i] = pr.String()
			pair, ok := byFam[cidr.FamilyOf(pr)]
			if !ok {
				continue
			}
			switch {
			case cidr.ContainsPrefix(pair.From, pr):
				moved, err := cidr.Rebase(pr, pair.From, pair.To)
				if err != nil {
					errs = append(errs, fmt.Errorf("%w: node %s: %w", ErrPlan, n.Name, err))
					continue
				}
				if moved != pr {
					next[i] = moved.String()
					why = append(why, fmt.Sprintf("%s -> %s (same offset in %s as in %s)", pr, moved, pair.To, pair.From))
				}
			case cidr.ContainsPrefix(pair.To, pr):
				// already moved
			default:
				errs = append(errs, fmt.Errorf("%w: node %s: podCIDR %s is neither inside from %s nor inside to %s", ErrPlan, n.Name, pr, pair.From, pair.To))
			}
		}
		if len(why) == 0 {
			p.Unchanged++
			continue
		}
		p.Steps = append(p.Steps, newStep(n, ActionRecreate, old, next, "rebase "+strings.Join(why, ", ")))
	}
	return errors.Join(errs...)
}

func checkLayout(l cidr.NodeIPAMLayout) error {
	if n := len(l.ClusterCIDRs); n < 1 || n > 2 {
		return fmt.Errorf("%w: layout.clusterCIDRs has %d entries: want one, or two of different families", ErrInvalidOptions, n)
	}
	if len(l.ClusterCIDRs) == 2 && cidr.FamilyOf(l.ClusterCIDRs[0]) == cidr.FamilyOf(l.ClusterCIDRs[1]) {
		return fmt.Errorf("%w: layout.clusterCIDRs %s: both are %s; give one per family", ErrInvalidOptions, joinPrefixes(l.ClusterCIDRs), cidr.FamilyOf(l.ClusterCIDRs[0]))
	}
	for i, c := range l.ClusterCIDRs {
		if !c.IsValid() {
			return fmt.Errorf("%w: layout.clusterCIDRs[%d] is empty", ErrInvalidOptions, i)
		}
		if _, err := cidr.NewClusterAllocator(c.Masked(), maskAt(l, i), netip.Prefix{}); err != nil {
			return fmt.Errorf("%w: layout.clusterCIDRs[%d] %s with node mask /%d: %w", ErrInvalidOptions, i, c, maskAt(l, i), err)
		}
	}
	return nil
}

// checkLayoutInUse refuses a fix layout that holds none of the podCIDRs in
// use: fix works inside the current cluster CIDR, and a wrong one would move
// every node (allocate is the mode that moves nodes to a new range).
func checkLayoutInUse(all []*corev1.Node, l cidr.NodeIPAMLayout) error {
	inUse := 0
	for _, n := range all {
		for _, t := range PodCIDRsOf(n) {
			pr, _, err := cidr.ParseLenient(t)
			if err != nil {
				continue
			}
			inUse++
			for _, c := range l.ClusterCIDRs {
				if c.Masked().Overlaps(pr) {
					return nil
				}
			}
		}
	}
	if inUse == 0 {
		return nil
	}
	return fmt.Errorf("%w: layout.clusterCIDRs %s holds none of the %d podCIDRs in use: fix works inside the current cluster CIDR; to move nodes to a new range, allocate",
		ErrInvalidOptions, joinPrefixes(l.ClusterCIDRs), inUse)
}

// maskFor returns the node mask of the layout's cluster CIDR of family f.
func maskFor(l cidr.NodeIPAMLayout, f cidr.Family) int {
	for i, c := range l.ClusterCIDRs {
		if cidr.FamilyOf(c) == f {
			return maskAt(l, i)
		}
	}
	return cidr.DefaultNodeMask(f)
}

func maskAt(l cidr.NodeIPAMLayout, i int) int {
	if i < len(l.NodeMasks) && l.NodeMasks[i] != 0 {
		return l.NodeMasks[i]
	}
	return cidr.DefaultNodeMask(cidr.FamilyOf(l.ClusterCIDRs[i]))
}

// claim is one entry's claim on its subnet. Claims are ordered: nodes that
// are not being moved first, then entries with the right mask, then the node
// that has existed longest (oldest creationTimestamp, then name).
type claim struct {
	e      *entry
	fixed  bool
	maskOK bool
}

func compareClaims(a, b claim) int {
	if a.fixed != b.fixed {
		if a.fixed {
			return -1
		}
		return 1
	}
	if a.maskOK != b.maskOK {
		if a.maskOK {
			return -1
		}
		return 1
	}
	return olderFirst(a.e.node, b.e.node)
}

// keepers decides which entries keep their subnet: within a group of equal
// prefixes the best claim wins, and of two nesting groups the one with the
// better winner keeps its subnet.
func keepers(a *analysis, isSelected func(string) bool) map[*entry]bool {
	type cand struct {
		g *group
		c claim
	}
	var cands []cand
	for _, g := range a.groups {
		var best *claim
		for _, e := range g.entries {
			if e.bad {
				continue
			}
			c := claim{e: e, fixed: !isSelected(e.node.Name), maskOK: e.prefix.Bits() == maskFor(a.layout, cidr.FamilyOf(e.prefix))}
			if best == nil || compareClaims(c, *best) < 0 {
				best = &c
			}
		}
		if best != nil {
			cands = append(cands, cand{g, *best})
		}
	}
	slices.SortStableFunc(cands, func(x, y cand) int { return compareClaims(x.c, y.c) })
	partners := map[*group][]*group{}
	for _, o := range a.overlaps {
		partners[o[0]] = append(partners[o[0]], o[1])
		partners[o[1]] = append(partners[o[1]], o[0])
	}
	kept := map[*group]bool{}
	out := map[*entry]bool{}
	for _, c := range cands {
		clash := false
		for _, q := range partners[c.g] {
			if kept[q] {
				clash = true
				break
			}
		}
		if !clash {
			kept[c.g] = true
			out[c.c.e] = true
		}
	}
	return out
}

// planLayout plans ModeAllocate (strict: every entry must be in the layout
// with its mask, every family present) and ModeFix (only broken nodes move).
func planLayout(p *Plan, all, selected []*corev1.Node, opts PlanOptions, strict bool) error {
	layout := opts.Layout
	a := analyze(all, layout)
	sel := make(map[string]bool, len(selected))
	for _, n := range selected {
		sel[n.Name] = true
	}
	keep := keepers(a, func(name string) bool { return sel[name] })
	allocs := make([]*cidr.Allocator, len(layout.ClusterCIDRs))
	for i, c := range layout.ClusterCIDRs {
		al, err := cidr.NewClusterAllocator(c.Masked(), maskAt(layout, i), serviceFor(layout, cidr.FamilyOf(c)))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
		allocs[i] = al
	}
	// Every podCIDR in use stays unavailable until its node has moved.
	for _, n := range all {
		for _, e := range a.entries[n.Name] {
			if !e.prefix.IsValid() {
				continue
			}
			for i, c := range layout.ClusterCIDRs {
				if cidr.FamilyOf(c) == cidr.FamilyOf(e.prefix) {
					allocs[i].Occupy(e.prefix, n.Name)
				}
			}
		}
	}
	// Space outside Within, or in Excluded, is held as if in use.
	for i, c := range layout.ClusterCIDRs {
		fam := cidr.FamilyOf(c)
		in := slices.DeleteFunc(slices.Clone(opts.Within), func(w netip.Prefix) bool { return !w.IsValid() || cidr.FamilyOf(w) != fam })
		for _, u := range unusable(c.Masked(), maskAt(layout, i), in, opts.Excluded) {
			allocs[i].Occupy(u, "")
		}
	}
	var errs []error
	short := make([][]string, len(layout.ClusterCIDRs)) // nodes left without a subnet, per family
	for _, n := range selected {
		es := a.entries[n.Name]
		old := PodCIDRsOf(n)
		next := make([]string, len(layout.ClusterCIDRs))
		var why []string
		change := len(es) == 0
		if len(es) == 0 {
			why = append(why, "no podCIDR")
		}
		for _, e := range es {
			if !keep[e] {
				change = true
				why = append(why, lossReason(a, e))
			}
		}
		for i, c := range layout.ClusterCIDRs {
			var have *entry
			for _, e := range es {
				if keep[e] && cidr.FamilyOf(e.prefix) == cidr.FamilyOf(c) {
					have = e
				}
			}
			if have != nil && have.index != i {
				change = true
				why = append(why, fmt.Sprintf("%s must be podCIDRs[%d] to match the cluster CIDRs' order", have.prefix, i))
			}
			if have != nil && strict && have.prefix.Bits() != maskAt(layout, i) {
				change = true
				why = append(why, fmt.Sprintf("%s is not a /%d", have.prefix, maskAt(layout, i)))
				have = nil
			}
			if have != nil {
				next[i] = have.prefix.String()
				continue
			}
			if strict && len(es) > 0 && !slices.ContainsFunc(es, func(e *entry) bool { return e.prefix.IsValid() && cidr.FamilyOf(e.prefix) == cidr.FamilyOf(c) }) {
				change = true
				why = append(why, "no "+cidr.FamilyOf(c).String()+" podCIDR")
			}
		}
		if !change {
			p.Unchanged++
			continue
		}
		for i := range next {
			if next[i] != "" {
				continue
			}
			sub, err := allocs[i].AllocateNext()
			if err != nil {
				short[i] = append(short[i], n.Name)
				continue
			}
			next[i] = sub.String()
		}
		if slices.Contains(next, "") {
			continue
		}
		action := ActionRecreate
		if len(old) == 0 {
			action = ActionPatch
		}
		slices.Sort(why)
		p.Steps = append(p.Steps, newStep(n, action, old, next, strings.Join(slices.Compact(why), "; ")))
	}
	for i, names := range short {
		if len(names) == 0 {
			continue
		}
		shown := names[:min(len(names), 5)]
		more := ""
		if len(names) > len(shown) {
			more = fmt.Sprintf(" and %d more", len(names)-len(shown))
		}
		errs = append(errs, fmt.Errorf("%w: %d nodes (%s%s) need a new /%d but %s has none left: %w",
			ErrPlan, len(names), strings.Join(shown, ", "), more, maskAt(layout, i), layout.ClusterCIDRs[i], cidr.ErrFull))
	}
	return errors.Join(errs...)
}

// unusable returns the parts of p that hold no node subnet (of /mask)
// lying wholly inside one of within (when any is given) and overlapping
// none of excluded: p is halved until each half is wholly usable, wholly
// unusable, or a single node subnet, which is then unusable.
func unusable(p netip.Prefix, mask int, within, excluded []netip.Prefix) []netip.Prefix {
	inside := len(within) == 0
	touches := len(within) == 0
	for _, w := range within {
		inside = inside || cidr.ContainsPrefix(w, p)
		touches = touches || w.Overlaps(p)
	}
	hit := false
	for _, e := range excluded {
		if e.IsValid() && e.Overlaps(p) {
			if cidr.ContainsPrefix(e, p) {
				return []netip.Prefix{p}
			}
			hit = true
		}
	}
	switch {
	case inside && !hit:
		return nil
	case !touches, p.Bits() >= mask:
		return []netip.Prefix{p}
	}
	b := p.Addr().AsSlice()
	b[p.Bits()/8] |= 0x80 >> (p.Bits() % 8) // the first address of the upper half
	hi, _ := netip.AddrFromSlice(b)
	return append(unusable(netip.PrefixFrom(p.Addr(), p.Bits()+1), mask, within, excluded),
		unusable(netip.PrefixFrom(hi, p.Bits()+1), mask, within, excluded)...)
}

func lossReason(a *analysis, e *entry) string {
	if !e.prefix.IsValid() {
		return fmt.Sprintf("podCIDR %q is invalid", e.text)
	}
	if g := a.byPrefix[e.prefix]; g != nil && !e.bad {
		if len(g.entries) > 1 {
			holder := g.entries[0].node.Name
			if holder == e.node.Name {
				holder = g.entries[1].node.Name
			}
			return fmt.Sprintf("%s is shared with %s", e.prefix, holder)
		}
		return fmt.Sprintf("%s overlaps another node's podCIDR", e.prefix)
	}
	if e.index < len(a.layout.ClusterCIDRs) && cidr.FamilyOf(a.layout.ClusterCIDRs[e.index]) == cidr.FamilyOf(e.prefix) {
		return fmt.Sprintf("%s is outside %s", e.prefix, a.layout.ClusterCIDRs[e.index])
	}
	return fmt.Sprintf("podCIDRs[%d] %s does not match the cluster CIDRs %s by position", e.index, e.prefix, joinPrefixes(a.layout.ClusterCIDRs))
}

// checkCollisions refuses a plan whose new podCIDRs collide with a node's
// podCIDR after the plan, and notes collisions that exist independently of it.
func checkCollisions(p *Plan, nodes []corev1.Node) error {
	a := analyze(afterPlan(nodes, p), cidr.NodeIPAMLayout{})
	planned := map[string]bool{}
	for _, s := range p.Steps {
		planned[s.Node] = true
	}
	var errs []error
	for _, f := range a.findings {
		if f.Kind != FindingDuplicate && f.Kind != FindingOverlap {
			continue
		}
		if slices.ContainsFunc(f.Nodes, func(n string) bool { return planned[n] }) {
			errs = append(errs, fmt.Errorf("%w: after the plan %s", ErrPlan, f.Message))
		} else {
			p.Warnings = append(p.Warnings, "not fixed by this plan: "+f.Message)
		}
	}
	return errors.Join(errs...)
}

// rebaseFlags are kube-controller-manager's flags once the cluster CIDR is
// the rebase target, with the node masks the moved nodes use.
func rebaseFlags(p *Plan, pairs []RebasePair) cidr.ControllerManagerFlags {
	f := cidr.ControllerManagerFlags{AllocateNodeCIDRs: true}
	var parts []string
	masks := map[cidr.Family]int{}
	for _, pr := range pairs {
		parts = append(parts, pr.To.String())
	}
	for _, s := range p.Steps {
		for _, t := range s.NewPodCIDRs {
			if pr, err := netip.ParsePrefix(t); err == nil {
				if _, ok := masks[cidr.FamilyOf(pr)]; !ok {
					masks[cidr.FamilyOf(pr)] = pr.Bits()
				}
			}
		}
	}
	f.ClusterCIDR = strings.Join(parts, ",")
	if len(pairs) == 1 {
		f.NodeCIDRMaskSize = masks[cidr.FamilyOf(pairs[0].To)]
	} else {
		f.NodeCIDRMaskSizeIPv4, f.NodeCIDRMaskSizeIPv6 = masks[cidr.IPv4], masks[cidr.IPv6]
	}
	return f
}

// layoutFlags renders a layout as kube-controller-manager flags.
func layoutFlags(l cidr.NodeIPAMLayout) cidr.ControllerManagerFlags {
	f := cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: joinPrefixes(l.ClusterCIDRs), ServiceClusterIPRange: joinPrefixes(l.ServiceCIDRs)}
	if len(l.ClusterCIDRs) == 1 {
		f.NodeCIDRMaskSize = maskAt(l, 0)
		return f
	}
	for i, c := range l.ClusterCIDRs {
		if cidr.FamilyOf(c) == cidr.IPv4 {
			f.NodeCIDRMaskSizeIPv4 = maskAt(l, i)
		} else {
			f.NodeCIDRMaskSizeIPv6 = maskAt(l, i)
		}
	}
	return f
}
