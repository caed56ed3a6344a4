package calico

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Cluster bundles the clients a pool swap uses.
type Cluster struct {
	// Kube is required.
	Kube kubernetes.Interface
	// Pools is required (see NewPoolStore).
	Pools PoolStore
	// Blocks reads Calico IPAM blocks; nil skips the block report.
	Blocks BlockSource
	// Dynamic is used to look for the Tigera operator's Installation; nil
	// means "no operator".
	Dynamic dynamic.Interface
}

func (c Cluster) check() error {
	if c.Kube == nil {
		return errors.New("calico: Cluster.Kube is nil")
	}
	if c.Pools == nil {
		return errors.New("calico: Cluster.Pools is nil")
	}
	return nil
}

// MoveMethod is how pods leave the old pool.
type MoveMethod string

// The move methods.
const (
	// MoveRollout restarts the owning Deployment, StatefulSet or DaemonSet the
	// way `kubectl rollout restart` does and waits for the rollout. Pods that
	// cannot be rolled (other controllers, StatefulSets and DaemonSets with
	// the OnDelete strategy, pods a rollout left behind) are evicted.
	MoveRollout MoveMethod = "rollout"
	// MoveEvict evicts pods one by one through the Eviction API, which
	// respects PodDisruptionBudgets.
	MoveEvict MoveMethod = "evict"
	// MoveDelete is used for bare pods (no controller): they are evicted
	// (which deletes them, still respecting PodDisruptionBudgets) and nothing
	// recreates them. Only with SwapRequest.AllowDeleteBarePods.
	MoveDelete MoveMethod = "delete"
)

// PoolOverrides changes the new pool's settings; nil fields copy the old pool.
type PoolOverrides struct {
	IPIPMode          *EncapMode      `json:"ipipMode,omitempty"`
	VXLANMode         *EncapMode      `json:"vxlanMode,omitempty"`
	NATOutgoing       *bool           `json:"natOutgoing,omitempty"`
	NodeSelector      *string         `json:"nodeSelector,omitempty"`
	NamespaceSelector *string         `json:"namespaceSelector,omitempty"`
	AllowedUses       []AllowedUse    `json:"allowedUses,omitempty"`
	DisableBGPExport  *bool           `json:"disableBGPExport,omitempty"`
	AssignmentMode    *AssignmentMode `json:"assignmentMode,omitempty"`
	// Labels are set on the new pool. Labels of the old pool are not copied
	// (the operator's managed-by label would make the operator delete it).
	Labels map[string]string `json:"labels,omitempty"`
}

// SwapRequest is what the user wants: retire OldPool in favour of a new pool.
type SwapRequest struct {
	// OldPool is the name of the pool to retire.
	OldPool string `json:"oldPool"`
	// NewName is the new pool's name.
	NewName string `json:"newName"`
	// NewCIDR is the new pool's CIDR, typed by a person: parsed strictly.
	NewCIDR string `json:"newCIDR"`
	// BlockSize of the new pool; 0 copies the old pool's (same family) or
	// uses Calico's default.
	BlockSize int `json:"blockSize,omitempty"`
	// ClusterCIDR is the cluster CIDR the user intends (comma-separated for
	// dual stack); the new pool must lie inside it. Empty skips the check
	// (with a warning).
	ClusterCIDR string `json:"clusterCIDR,omitempty"`
	// ServiceCIDR is the Service range(s), comma-separated.
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// NodeNetwork is the node network(s), comma-separated.
	NodeNetwork string `json:"nodeNetwork,omitempty"`
	// Overrides change the new pool's settings.
	Overrides PoolOverrides `json:"overrides,omitempty"`
	// Move is how pods leave the old pool; empty means MoveRollout.
	Move MoveMethod `json:"move,omitempty"`
	// AllowDeleteBarePods consents to deleting pods without a controller.
	AllowDeleteBarePods bool `json:"allowDeleteBarePods,omitempty"`
}

// WorkloadMove is how one workload's pods will leave the old pool.
type WorkloadMove struct {
	Workload WorkloadRef `json:"workload"`
	Method   MoveMethod  `json:"method"`
	// Reason explains a method other than the requested one.
	Reason string   `json:"reason,omitempty"`
	DNS    bool     `json:"dns,omitempty"`
	Pods   []PodRef `json:"pods"`
}

// BlockedPod is a pod the swap cannot move.
type BlockedPod struct {
	Pod    PodRef `json:"pod"`
	Reason string `json:"reason"`
}

// Plan kinds.
const (
	PlanAPIVersion = "cidrshift.io/v1alpha1"
	PlanKind       = "CalicoPoolSwapPlan"
)

// SwapPlan is a reviewable, serialisable pool swap. It records the old pool's
// UID and resourceVersion, so Apply refuses it once the pool has changed.
type SwapPlan struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// ID names the swap; the journal keys its progress by it.
	ID string `json:"id"`
	// API is the Calico API the pools were read through.
	API API `json:"api"`
	// OldPool is the pool to retire, as read (UID and resourceVersion included).
	OldPool IPPool       `json:"oldPool"`
	OldCIDR netip.Prefix `json:"oldCIDR"`
	// NewPool is the pool to create.
	NewPool IPPool       `json:"newPool"`
	NewCIDR netip.Prefix `json:"newCIDR"`
	// NewPoolExists is true when a pool with the new name and CIDR exists already.
	NewPoolExists bool `json:"newPoolExists,omitempty"`
	// Environment the new pool was validated against (re-checked by Apply).
	ClusterCIDRs []netip.Prefix `json:"clusterCIDRs,omitempty"`
	ServiceCIDRs []netip.Prefix `json:"serviceCIDRs,omitempty"`
	NodeNetworks []netip.Prefix `json:"nodeNetworks,omitempty"`
	// Operator says whether the Tigera operator manages the old pool.
	Operator OperatorInfo `json:"operator"`
	// OperatorChange is the Installation change needed to disable the old
	// pool, when the operator manages it.
	OperatorChange *OperatorChange `json:"operatorChange,omitempty"`
	Move           MoveMethod      `json:"move"`
	// AllowDeleteBarePods records the consent to delete bare pods.
	AllowDeleteBarePods bool `json:"allowDeleteBarePods,omitempty"`
	// Workloads in the order they will be moved: cluster DNS first.
	Workloads []WorkloadMove `json:"workloads,omitempty"`
	// Blocked pods cannot be moved by the swap; the old pool cannot be
	// deleted while they hold addresses in it.
	Blocked []BlockedPod `json:"blocked,omitempty"`
	// HostNetworkPods were skipped.
	HostNetworkPods int `json:"hostNetworkPods,omitempty"`
	// Capacity of the new pool.
	Capacity Capacity `json:"capacity"`
	Warnings []string `json:"warnings,omitempty"`
	// Steps describe what Apply will do, in order.
	Steps []string `json:"steps"`
}

// Target returns what Verify should check for this plan.
func (p *SwapPlan) Target() VerifyTarget {
	return VerifyTarget{OldPool: p.OldPool.Name, OldPoolUID: p.OldPool.UID, OldCIDR: p.OldCIDR, NewPool: p.NewPool.Name}
}

// RuleFamily (cidrshift): the new pool must be of the old pool's IP family.
const RuleFamily Rule = "family"

// Plan reads the cluster and computes a pool swap. It validates the new pool
// (Calico's rules and cidrshift's, see ValidateNewPool) and returns the
// joined *FieldError values when it breaks any. It changes nothing.
func Plan(ctx context.Context, cl Cluster, req SwapRequest) (*SwapPlan, error) {
	if err := cl.check(); err != nil {
		return nil, err
	}
	if req.OldPool == "" {
		return nil, &FieldError{Field: "oldPool", Rule: RuleName, Reason: "name the pool to retire"}
	}
	if req.NewName == "" {
		return nil, &FieldError{Field: "metadata.name", Rule: RuleName, Reason: "name the new pool"}
	}
	if req.NewName == req.OldPool {
		return nil, &FieldError{Pool: req.NewName, Field: "metadata.name", Value: req.NewName, Rule: RuleName, Reason: "the new pool needs a name different from the old pool's"}
	}
	move := req.Move
	switch move {
	case "":
		move = MoveRollout
	case MoveRollout, MoveEvict:
	default:
		return nil, fmt.Errorf("move method %q: want %q or %q", req.Move, MoveRollout, MoveEvict)
	}
	newPfx, err := cidr.Parse(req.NewCIDR)
	if err != nil {
		return nil, &FieldError{Pool: req.NewName, Field: "spec.cidr", Value: req.NewCIDR, Rule: RuleCIDRSyntax, Reason: err.Error(), err: err}
	}
	clusters, err := parseOptionalList(req.ClusterCIDR)
	if err != nil {
		return nil, fmt.Errorf("cluster CIDR %q: %w", req.ClusterCIDR, err)
	}
	services, err := parseOptionalList(req.ServiceCIDR)
	if err != nil {
		return nil, fmt.Errorf("service CIDR %q: %w", req.ServiceCIDR, err)
	}
	nodes, err := parseOptionalList(req.NodeNetwork)
	if err != nil {
		return nil, fmt.Errorf("node network %q: %w", req.NodeNetwork, err)
	}

	old, err := cl.Pools.Get(ctx, req.OldPool)
	if err != nil {
		return nil, err
	}
	oldPfx, err := old.Prefix()
	if err != nil {
		return nil, err
	}
	if oldPfx.Addr().Is4() != newPfx.Addr().Is4() {
		return nil, &FieldError{Pool: req.NewName, Field: "spec.cidr", Value: req.NewCIDR, Rule: RuleFamily,
			Reason: fmt.Sprintf("the old pool %q is %s (%s); a swap keeps the family", old.Name, cidr.FamilyOf(oldPfx), oldPfx)}
	}
	pools, err := cl.Pools.List(ctx)
	if err != nil {
		return nil, err
	}

	plan := &SwapPlan{
		APIVersion: PlanAPIVersion, Kind: PlanKind,
		API: cl.Pools.API(), OldPool: old, OldCIDR: oldPfx, NewCIDR: newPfx,
		ClusterCIDRs: clusters, ServiceCIDRs: services, NodeNetworks: nodes,
		Move: move, AllowDeleteBarePods: req.AllowDeleteBarePods,
	}
	plan.NewPool = newPoolFrom(old, req, newPfx)
	sum := sha256.Sum256([]byte(old.UID + "|" + old.Name + "|" + req.NewName + "|" + newPfx.String()))
	plan.ID = old.Name + "-to-" + req.NewName + "-" + hex.EncodeToString(sum[:4])

	for _, p := range pools {
		if p.Name != req.NewName {
			continue
		}
		if p.Spec.CIDR != plan.NewPool.Spec.CIDR {
			return nil, &FieldError{Pool: p.Name, Field: "metadata.name", Value: p.Name, Rule: RuleName,
				Reason: fmt.Sprintf("a pool with this name exists with cidr %s, not %s; pick another name", p.Spec.CIDR, plan.NewPool.Spec.CIDR)}
		}
		plan.NewPoolExists = true
		plan.NewPool.UID = p.UID
	}
	if err := ValidateNewPool(plan.NewPool, Environment{ClusterCIDRs: clusters, ServiceCIDRs: services, NodeNetworks: nodes, Pools: pools}); err != nil {
		return nil, err
	}
	if len(clusters) == 0 {
		plan.Warnings = append(plan.Warnings, "no cluster CIDR given: the new pool was not checked against it; Calico pools must lie inside the cluster CIDR")
	}
	capOpts := CapacityOptions{ClusterCIDR: req.ClusterCIDR}
	plan.Capacity, err = PoolCapacity(plan.NewPool, capOpts)
	if err != nil {
		return nil, err
	}
	for _, w := range plan.Capacity.Warnings {
		plan.Warnings = append(plan.Warnings, w.Message)
	}

	plan.Operator, err = DetectOperator(ctx, cl.Dynamic, old)
	if err != nil {
		return nil, err
	}
	if plan.Operator.ManagesPool && !old.AllocationStopped() {
		ch := disableChange(old.Name, plan.Operator)
		plan.OperatorChange = &ch
	}

	scan, err := ScanPods(ctx, cl.Kube, oldPfx, ScanOptions{})
	if err != nil {
		return nil, err
	}
	plan.HostNetworkPods = scan.HostNetwork
	for _, b := range scan.BadIPs {
		plan.Warnings = append(plan.Warnings, "unparsable pod IP "+b)
	}
	moves, blocked, err := classify(ctx, cl.Kube, scan.Pods, move, req.AllowDeleteBarePods)
	if err != nil {
		return nil, err
	}
	plan.Workloads, plan.Blocked = moves, blocked
	plan.Steps = planSteps(plan)
	return plan, nil
}

func parseOptionalList(s string) ([]netip.Prefix, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	return cidr.ParseList(s)
}

func newPoolFrom(old IPPool, req SwapRequest, pfx netip.Prefix) IPPool {
	o := req.Overrides
	spec := PoolSpec{
		CIDR:              pfx.String(),
		BlockSize:         req.BlockSize,
		IPIPMode:          old.Spec.IPIPMode,
		VXLANMode:         old.Spec.VXLANMode,
		NATOutgoing:       old.Spec.NATOutgoing,
		DisableBGPExport:  old.Spec.DisableBGPExport,
		NodeSelector:      old.Spec.NodeSelector,
		NamespaceSelector: old.Spec.NamespaceSelector,
		AllowedUses:       slices.Clone(old.Spec.AllowedUses),
		AssignmentMode:    old.Spec.AssignmentMode,
	}
	if spec.BlockSize == 0 {
		spec.BlockSize = old.EffectiveBlockSize()
	}
	if spec.NodeSelector == DisabledNodeSelector {
		spec.NodeSelector = "all()"
	}
	if o.IPIPMode != nil {
		spec.IPIPMode = *o.IPIPMode
	}
	if o.VXLANMode != nil {
		spec.VXLANMode = *o.VXLANMode
	}
	if o.NATOutgoing != nil {
		spec.NATOutgoing = *o.NATOutgoing
	}
	if o.NodeSelector != nil {
		spec.NodeSelector = *o.NodeSelector
	}
	if o.NamespaceSelector != nil {
		spec.NamespaceSelector = *o.NamespaceSelector
	}
	if o.AllowedUses != nil {
		spec.AllowedUses = slices.Clone(o.AllowedUses)
	}
	if o.DisableBGPExport != nil {
		spec.DisableBGPExport = *o.DisableBGPExport
	}
	if o.AssignmentMode != nil {
		spec.AssignmentMode = *o.AssignmentMode
	}
	var labels map[string]string
	if len(o.Labels) > 0 {
		labels = make(map[string]string, len(o.Labels))
		for k, v := range o.Labels {
			labels[k] = v
		}
	}
	return IPPool{Name: req.NewName, Labels: labels, Spec: spec}
}

// classify groups pods by workload and decides how each group moves.
// The DNS workloads come first, then the rest sorted by key.
func classify(ctx context.Context, kube kubernetes.Interface, pods []PodRef, move MoveMethod, allowBare bool) ([]WorkloadMove, []BlockedPod, error) {
	byKey := map[string]*WorkloadMove{}
	var keys []string
	var blocked []BlockedPod
	for _, p := range pods {
		switch p.Owner.Kind {
		case KindStatic:
			blocked = append(blocked, BlockedPod{Pod: p, Reason: "static (mirror) pod: change or move the manifest on node " + p.Node + " and restart its kubelet"})
			continue
		case KindBare:
			if !allowBare {
				blocked = append(blocked, BlockedPod{Pod: p, Reason: "bare pod (no controller): nothing would recreate it; allow deleting bare pods to remove it"})
				continue
			}
		}
		k := p.Owner.Key()
		wm, ok := byKey[k]
		if !ok {
			wm = &WorkloadMove{Workload: p.Owner}
			byKey[k] = wm
			keys = append(keys, k)
		}
		wm.Pods = append(wm.Pods, p)
		wm.DNS = wm.DNS || p.DNS
	}
	out := make([]WorkloadMove, 0, len(keys))
	for _, k := range keys {
		wm := byKey[k]
		m, reason, err := methodFor(ctx, kube, wm.Workload, move)
		if err != nil {
			return nil, nil, err
		}
		wm.Method, wm.Reason = m, reason
		out = append(out, *wm)
	}
	slices.SortStableFunc(out, func(a, b WorkloadMove) int {
		if a.DNS != b.DNS {
			if a.DNS {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Workload.Key(), b.Workload.Key())
	})
	return out, blocked, nil
}

func methodFor(ctx context.Context, kube kubernetes.Interface, w WorkloadRef, move MoveMethod) (MoveMethod, string, error) {
	if w.Kind == KindBare {
		return MoveDelete, "bare pod: evicted (deleted) with consent; nothing recreates it", nil
	}
	if move == MoveEvict {
		return MoveEvict, "", nil
	}
	switch w.Kind {
	case KindStatefulSet:
		s, err := kube.AppsV1().StatefulSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return MoveEvict, "StatefulSet not found", nil
		}
		if err != nil {
			return "", "", fmt.Errorf("reading StatefulSet %s/%s: %w", w.Namespace, w.Name, err)
		}
		if s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
			return MoveEvict, "updateStrategy OnDelete: a rollout restart replaces no pod", nil
		}
		return MoveRollout, "", nil
	case KindDaemonSet:
		d, err := kube.AppsV1().DaemonSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return MoveEvict, "DaemonSet not found", nil
		}
		if err != nil {
			return "", "", fmt.Errorf("reading DaemonSet %s/%s: %w", w.Namespace, w.Name, err)
		}
		if d.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
			return MoveEvict, "updateStrategy OnDelete: a rollout restart replaces no pod", nil
		}
		return MoveRollout, "", nil
	case KindDeployment:
		return MoveRollout, "", nil
	}
	return MoveEvict, fmt.Sprintf("%s cannot be rolled; its pods are evicted", w.Kind), nil
}

func planSteps(p *SwapPlan) []string {
	var s []string
	if p.NewPoolExists {
		s = append(s, fmt.Sprintf("IPPool %q (%s) exists already: keep it", p.NewPool.Name, p.NewCIDR))
	} else {
		s = append(s, fmt.Sprintf("create IPPool %q cidr %s blockSize %d ipipMode %s vxlanMode %s natOutgoing %t nodeSelector %q",
			p.NewPool.Name, p.NewCIDR, p.NewPool.Spec.BlockSize, orNever(p.NewPool.Spec.IPIPMode), orNever(p.NewPool.Spec.VXLANMode), p.NewPool.Spec.NATOutgoing, p.NewPool.Spec.NodeSelector))
	}
	switch {
	case p.OldPool.AllocationStopped():
		s = append(s, fmt.Sprintf("IPPool %q already gives no new addresses", p.OldPool.Name))
	case p.OperatorChange != nil:
		s = append(s, "wait until "+p.OperatorChange.String())
	default:
		s = append(s, fmt.Sprintf("disable IPPool %q (spec.disabled: true)", p.OldPool.Name))
	}
	for _, w := range p.Workloads {
		verb := map[MoveMethod]string{MoveRollout: "rollout restart", MoveEvict: "evict the pods of", MoveDelete: "evict (delete) bare pod"}[w.Method]
		line := fmt.Sprintf("%s %s (%d pod(s) in %s)", verb, w.Workload, len(w.Pods), p.OldCIDR)
		if w.Method == MoveDelete {
			line = fmt.Sprintf("%s %s/%s", verb, w.Workload.Namespace, w.Workload.Name)
		}
		if w.DNS {
			line += ", cluster DNS first"
		}
		s = append(s, line)
	}
	for _, b := range p.Blocked {
		s = append(s, fmt.Sprintf("cannot move pod %s: %s", b.Pod, b.Reason))
	}
	s = append(s, fmt.Sprintf("verify that no pod has an address in %s and report the IPAM blocks left there", p.OldCIDR))
	if p.Operator.ManagesPool {
		s = append(s, fmt.Sprintf("remove IPPool %q from the operator's Installation once nothing is left", p.OldPool.Name))
	} else {
		s = append(s, fmt.Sprintf("delete IPPool %q once nothing is left", p.OldPool.Name))
	}
	return s
}

func orNever(m EncapMode) EncapMode {
	if m == "" {
		return EncapNever
	}
	return m
}
