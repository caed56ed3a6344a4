package migrate

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// The steps of the CalicoPodCIDR migration, in order. They are the journal
// keys (step/<name>).
const (
	CalicoStepPreflight = "preflight"
	CalicoStepAddPool   = "add-pool"
	CalicoStepDisable   = "disable-old-pool"
	CalicoStepNodes     = "move-nodes"
	CalicoStepKubeadm   = "kubeadm-config"
	CalicoStepFlags     = "controller-manager-flags"
	CalicoStepMove      = "move-workloads"
	CalicoStepVerify    = "verify"
	CalicoStepDelete    = "delete-old-pool"
)

// CalicoProbeNodeName is the Node that CalicoPodCIDROptions.ProbeNode
// creates (and deletes) to see which range kube-controller-manager hands out.
const CalicoProbeNodeName = "cidrshift-probe"

// CalicoProbeLabel marks the probe Node; a Node named CalicoProbeNodeName
// without it is never deleted.
const CalicoProbeLabel = "cidrshift.io/probe"

// CalicoDefaultOldPool is the pool CalicoPodCIDROptions.OldPool defaults to.
const CalicoDefaultOldPool = "default-ipv4-ippool"

// Journal keys of the CalicoPodCIDR migration.
const (
	calKeyCalicoPlan = "calico-plan"
	calKeyNodePlan   = "nodecidr-plan"
)

// CalicoPodCIDROptions asks for a move of a kubeadm + Calico cluster's pod
// range (story 1: pod CIDR 10.233.64.0/18 with /24 node masks, boxed in by
// the Service CIDR 10.233.0.0/18, moves to 10.200.0.0/16). Errors name the
// options by the flags of examples/migrate-calico-podcidr (--to, --from, ...).
// To, From, NewPoolCIDR and ServiceCIDR are of one family, IPv4 or IPv6. In
// a dual-stack cluster the migration moves that family and keeps the other:
// kube-controller-manager's --cluster-cidr, kubeadm's podSubnet and
// kube-proxy's clusterCIDR keep the other family's range, in the cluster's
// order, and every node keeps its podCIDR of that family.
type CalicoPodCIDROptions struct {
	// Cluster reaches the cluster: Kube and Pools are required, Blocks and
	// Dynamic are used when set (see calico.Cluster).
	Cluster calico.Cluster
	// To is the new cluster CIDR, e.g. 10.200.0.0/16. Required.
	To netip.Prefix
	// From is the pod range in use; it must be the old pool's CIDR.
	// Default: the journal's record, else the old pool's CIDR.
	From netip.Prefix
	// ServiceCIDR is the Service range. Default: the journal's record, else
	// kube-controller-manager's --service-cluster-ip-range as found in the
	// cluster (an error when it is not found).
	ServiceCIDR netip.Prefix
	// OldPool is the Calico IPPool to retire (default CalicoDefaultOldPool).
	OldPool string
	// NewPool names the new IPPool (default ippool-<NewPoolCIDR with dashes>).
	NewPool string
	// NewPoolCIDR is the new IPPool's CIDR, inside To (default To).
	NewPoolCIDR netip.Prefix
	// NodeMask is kube-controller-manager's node mask of To's family
	// (--node-cidr-mask-size, or -ipv4/-ipv6 in a dual-stack cluster;
	// default: as found in the cluster, else 24 for IPv4 and 64 for IPv6).
	NodeMask int
	// Move is how pods leave the old pool: calico.MoveRollout (default) or
	// calico.MoveEvict.
	Move calico.MoveMethod
	// Manifests is a directory holding kube-controller-manager.yaml to render
	// the flag edit from (read only); Out, with Manifests, is where the
	// rewritten manifest is written.
	Manifests, Out string
	// Continue says the operator restarted kube-controller-manager with the
	// new flag: the controller-manager-flags step goes on without observing it.
	Continue bool
	// ProbeNode observes the operator step by creating (and deleting) the
	// Node CalicoProbeNodeName and reading the podCIDR kube-controller-manager
	// gives it.
	ProbeNode bool
	// PollInterval is the period of the waits (default 2s); RolloutTimeout
	// bounds one workload's rollout (default 10m); DrainTimeout the wait for
	// Calico to release the old pool's addresses (default 2m); ProbeTimeout
	// the wait for the probe Node's podCIDR (default 20s).
	PollInterval, RolloutTimeout, DrainTimeout, ProbeTimeout time.Duration
}

// CalicoPodCIDRIntent is what a CalicoPodCIDR migration records in its
// journal: a rerun must ask for the same move.
type CalicoPodCIDRIntent struct {
	From        netip.Prefix `json:"from"`
	To          netip.Prefix `json:"to"`
	ServiceCIDR netip.Prefix `json:"serviceCIDR"`
	OldPool     string       `json:"oldPool"`
	NewPool     string       `json:"newPool"`
	NewPoolCIDR netip.Prefix `json:"newPoolCIDR"`
}

// CalicoPodCIDRMigration moves a Calico cluster's pod range in nine steps,
// in the one order that never crash-loops kube-controller-manager and never
// loses a node:
//
//  1. preflight: the new cluster CIDR holds every node
//     (cidr.ComputePodCapacity), conflicts with nothing (cidr.Analyze:
//     Service CIDR, node addresses), kube-controller-manager would start with
//     the new --cluster-cidr once the nodes are moved
//     (nodecidr.PreflightAfter), and the caller may do everything the
//     migration needs (SelfSubjectAccessReview). Checked in Prepare, before
//     the first write, with the old pool, --from and both plans; reported here.
//  2. add-pool: create the new Calico pool inside the new cluster CIDR
//     (calico Plan, journaled, then Apply stopped after create-new-pool).
//  3. disable-old-pool: the old pool gives no new addresses; running pods
//     keep theirs.
//  4. move-nodes: rewrite every node's podCIDR into the new range, keeping
//     its offset, workers first and control-plane nodes last (nodecidr
//     rebase, delete + create per node, crash-safe journal below the run's).
//  5. kubeadm-config: podSubnet in kubeadm-config and clusterCIDR in
//     kube-proxy's ConfigMap, when they exist (kubeadmcfg).
//  6. controller-manager-flags: the --cluster-cidr edit of
//     kube-controller-manager, done by an operator: the step checks once more
//     that no node would crash kube-controller-manager, then pauses until it
//     observes the new flag (mirror pods, or with ProbeNode a probe Node's
//     podCIDR), or Continue.
//  7. move-workloads: recreate every pod that holds an old address (cluster
//     DNS first; rollout restart or eviction, respecting PodDisruptionBudgets).
//  8. verify: no pod and no IPAM allocation left in the old pool, every
//     planned node has its new podCIDR and kept its metadata, and
//     kube-controller-manager would start with the new flag against the live
//     nodes.
//  9. delete-old-pool: delete the old Calico pool.
type CalicoPodCIDRMigration struct {
	o CalicoPodCIDROptions

	mode                    Mode
	env                     *Env
	j                       Journal
	from, to, svc, poolCIDR netip.Prefix
	newPool                 string
	nodeMask                int
	// keep is the family a dual-stack cluster keeps (zero cidr otherwise);
	// svcFlag is --service-cluster-ip-range as found (both families).
	keep    keptFamily
	svcFlag string
	cplan   *calico.SwapPlan
	nplan   *nodecidr.Plan
	// cplanSaved and nplanSaved: the plan is in the journal.
	cplanSaved, nplanSaved bool
	// saving: the intent is recorded (Prepared.Save ran); a plan made from
	// now on is journaled at once.
	saving bool
	// checks are the details of the checks Prepare made (step 1).
	checks []string
}

// CalicoPodCIDR returns the migration for o, checking the options that need
// no cluster and filling in the defaults.
func CalicoPodCIDR(o CalicoPodCIDROptions) (*CalicoPodCIDRMigration, error) {
	if o.Cluster.Kube == nil || o.Cluster.Pools == nil {
		return nil, inputf("CalicoPodCIDROptions.Cluster: Kube and Pools are required")
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.OldPool == "" {
		o.OldPool = CalicoDefaultOldPool
	}
	if o.Move == "" {
		o.Move = calico.MoveRollout
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.PollInterval, 2 * time.Second}, {&o.RolloutTimeout, 10 * time.Minute}, {&o.DrainTimeout, 2 * time.Minute}, {&o.ProbeTimeout, 20 * time.Second}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	return &CalicoPodCIDRMigration{o: o}, nil
}

// Validate checks the options that need no cluster (all but Cluster).
func (o CalicoPodCIDROptions) Validate() error {
	if !o.To.IsValid() {
		return inputf("--to is required: the new cluster CIDR, e.g. --to 10.200.0.0/16")
	}
	for _, f := range []struct {
		name string
		p    netip.Prefix
	}{{"--to", o.To}, {"--from", o.From}, {"--service-cidr", o.ServiceCIDR}, {"--new-pool-cidr", o.NewPoolCIDR}} {
		if !f.p.IsValid() {
			continue
		}
		if f.p != f.p.Masked() {
			return inputf("%s %s: has host bits set; the network is %s", f.name, f.p, f.p.Masked())
		}
		if f.p.Addr().Is4() != o.To.Addr().Is4() {
			return inputf("%s %s: not of --to %s's family; the runbook moves one family (the other one stays as it is)", f.name, f.p, o.To)
		}
	}
	if o.NewPoolCIDR.IsValid() && !cidr.ContainsPrefix(o.To, o.NewPoolCIDR) {
		return inputf("--new-pool-cidr %s lies outside --to %s: Calico pools must stay inside the cluster CIDR", o.NewPoolCIDR, o.To)
	}
	switch o.Move {
	case "", calico.MoveRollout, calico.MoveEvict:
	default:
		return inputf("--move %q: want rollout or evict", o.Move)
	}
	if err := checkManifestDirs(o.Manifests, o.Out); err != nil {
		return err
	}
	if bits := o.To.Addr().BitLen(); o.NodeMask < 0 || o.NodeMask > bits {
		return inputf("--node-mask %d: want 1-%d (--to %s)", o.NodeMask, bits, o.To)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"poll-interval", o.PollInterval}, {"rollout-timeout", o.RolloutTimeout}, {"drain-timeout", o.DrainTimeout}, {"probe-timeout", o.ProbeTimeout}} {
		if d.v < 0 {
			return inputf("--%s %s: must not be negative", d.name, d.v)
		}
	}
	oldPool := o.OldPool
	if oldPool == "" {
		oldPool = CalicoDefaultOldPool
	}
	if o.NewPool != "" && o.NewPool == oldPool {
		return inputf("--new-pool %q is the --old-pool: the new pool needs another name", o.NewPool)
	}
	return nil
}

// Kind implements Composition.
func (m *CalicoPodCIDRMigration) Kind() string { return "calico-podcidr" }

// LockScopes are the Leases a run holds: the IPPool swap's, the node
// rewrite's and kubeadm's.
func (m *CalicoPodCIDRMigration) LockScopes() []string {
	return []string{calico.LockScope, nodecidr.LockScope, kubeadmcfg.LockScope}
}

// From is the pod range in use, as the last Prepare resolved it.
func (m *CalicoPodCIDRMigration) From() netip.Prefix { return m.from }

// To is the new cluster CIDR.
func (m *CalicoPodCIDRMigration) To() netip.Prefix { return m.o.To }

// ServiceCIDR is the Service range, as the last Prepare resolved it.
func (m *CalicoPodCIDRMigration) ServiceCIDR() netip.Prefix { return m.svc }

// OldPool is the name of the IPPool retired.
func (m *CalicoPodCIDRMigration) OldPool() string { return m.o.OldPool }

// NewPool is the name of the IPPool created.
func (m *CalicoPodCIDRMigration) NewPool() string {
	if m.o.NewPool != "" {
		return m.o.NewPool
	}
	return "ippool-" + strings.NewReplacer(".", "-", ":", "-", "/", "-").Replace(m.newPoolCIDR().String())
}

func (m *CalicoPodCIDRMigration) newPoolCIDR() netip.Prefix {
	if m.o.NewPoolCIDR.IsValid() {
		return m.o.NewPoolCIDR
	}
	return m.o.To
}

func (m *CalicoPodCIDRMigration) kube() kubernetes.Interface { return m.o.Cluster.Kube }

// Prepare implements Composition. It resolves From and the Service CIDR (the
// journal, the options or the cluster) and the node mask, then checks every
// input against the cluster, read-only: the old pool exists (unless this
// journal's run retired it already) and holds From; To is a move; capacity,
// conflicts, kube-controller-manager's start-up and the caller's permissions
// hold; the Calico pool swap and the node moves can be planned (a plan kept
// in the journal is checked as untrusted input). Step 1 reports these checks.
func (m *CalicoPodCIDRMigration) Prepare(ctx context.Context, env *Env) (*Prepared, error) {
	m.mode, m.j, m.env = env.Mode, env.Journal, env
	m.to, m.from, m.svc = m.o.To, m.o.From, m.o.ServiceCIDR
	m.poolCIDR, m.newPool = m.newPoolCIDR(), m.NewPool()
	m.cplan, m.nplan, m.cplanSaved, m.nplanSaved, m.saving, m.checks = nil, nil, false, false, false, nil
	found := false
	if m.j != nil {
		var st CalicoPodCIDRIntent
		var err error
		if found, err = m.j.Get(IntentKey, &st); err != nil {
			return nil, err
		}
		if found {
			if st.To != m.to || st.OldPool != m.o.OldPool || st.NewPool != m.newPool || st.NewPoolCIDR != m.poolCIDR ||
				(m.from.IsValid() && st.From != m.from) || (m.svc.IsValid() && st.ServiceCIDR != m.svc) {
				return nil, inputf("--journal %s records a move of pool %s (%s) to %s (pool %s %s, Service CIDR %s); rerun with those values or use another journal",
					m.j.Dir(), st.OldPool, st.From, st.To, st.NewPool, st.NewPoolCIDR, st.ServiceCIDR)
			}
			m.from, m.svc = st.From, st.ServiceCIDR
		}
		cp := &calico.SwapPlan{}
		if ok, err := m.j.Get(calKeyCalicoPlan, cp); err != nil {
			return nil, err
		} else if ok {
			m.cplan, m.cplanSaved = cp, true
		}
		np := &nodecidr.Plan{}
		if ok, err := m.j.Get(calKeyNodePlan, np); err != nil {
			return nil, err
		} else if ok {
			m.nplan, m.nplanSaved = np, true
		}
	}
	if err := m.discover(ctx); err != nil {
		return nil, err
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("calico pod CIDR move", "from", m.from, "to", m.to, "serviceCIDR", m.svc, "nodeMask", m.nodeMask, "oldPool", m.o.OldPool, "newPool", m.newPool)
	// Every input is checked against the cluster, and the plans are made,
	// before the first write.
	checks, err := m.validate(ctx, found)
	if err != nil {
		return nil, err
	}
	m.checks = checks
	step := func(name, title string, do func(context.Context, *Env, *StepReport) error) Step {
		return StepFunc{StepName: name, StepTitle: title, DoFunc: do}
	}
	return &Prepared{
		Intent: CalicoPodCIDRIntent{From: m.from, To: m.to, ServiceCIDR: m.svc, OldPool: m.o.OldPool, NewPool: m.newPool, NewPoolCIDR: m.poolCIDR},
		Steps: []Step{
			// Not a ReadOnly step: its checks ran in Prepare; the step
			// reports them and, like every step, is recorded once done.
			step(CalicoStepPreflight, "check capacity, conflicts, permissions and kube-controller-manager's start-up", m.reportChecks),
			StepFunc{StepName: CalicoStepAddPool, StepTitle: "add the new Calico pool inside the new cluster CIDR", DoFunc: m.addPool, DoneFunc: m.poolAdded},
			step(CalicoStepDisable, "disable the old Calico pool (no new addresses from it)", m.disablePool),
			step(CalicoStepNodes, "rewrite every node's podCIDR into the new range, control plane last", m.moveNodes),
			step(CalicoStepKubeadm, "kubeadm-config podSubnet and kube-proxy clusterCIDR", m.kubeadmConfig),
			step(CalicoStepFlags, "kube-controller-manager --cluster-cidr (operator)", m.controllerManagerFlags),
			step(CalicoStepMove, "move the pods off the old pool (cluster DNS first)", m.moveWorkloads),
			step(CalicoStepVerify, "verify pods, IPAM blocks and nodes", m.verify),
			step(CalicoStepDelete, "delete the old Calico pool", m.deletePool),
		},
		Save: m.save,
	}, nil
}

// save runs once the intent is recorded, before the first write: it
// deletes a probe Node a killed run left (with ProbeNode), then journals
// the plans Prepare made, so a rerun carries out the same plans.
func (m *CalicoPodCIDRMigration) save(ctx context.Context, _ Journal) error {
	if m.o.ProbeNode {
		// A probe left by a killed run would crash a kube-controller-manager
		// restarted with the new flag if it holds an old podCIDR.
		if err := m.deleteProbe(ctx); err != nil {
			return err
		}
	}
	m.saving = true
	return m.savePlans()
}

// savePlansIfSaving journals a plan made after Prepare in ModeApply.
func (m *CalicoPodCIDRMigration) savePlansIfSaving() error {
	if m.mode != ModeApply || !m.saving {
		return nil
	}
	return m.savePlans()
}

func (m *CalicoPodCIDRMigration) savePlans() error {
	if m.cplan != nil && !m.cplanSaved {
		if err := m.j.Put(calKeyCalicoPlan, m.cplan); err != nil {
			return err
		}
		m.cplanSaved = true
	}
	if m.nplan != nil && !m.nplanSaved {
		if err := m.j.Put(calKeyNodePlan, m.nplan); err != nil {
			return err
		}
		m.nplanSaved = true
	}
	return nil
}

// discover fills From (the old pool's CIDR), the Service CIDR and the node
// mask from the cluster when they were not given.
func (m *CalicoPodCIDRMigration) discover(ctx context.Context) error {
	if !m.from.IsValid() {
		p, err := m.o.Cluster.Pools.Get(ctx, m.o.OldPool)
		if err != nil {
			return fmt.Errorf("--from not given and IPPool %q cannot be read (%w); give --from and --old-pool", m.o.OldPool, err)
		}
		pfx, err := p.Prefix()
		if err != nil {
			return fmt.Errorf("IPPool %q: %w", m.o.OldPool, err)
		}
		m.from = pfx
	}
	m.nodeMask = m.o.NodeMask
	m.keep, m.svcFlag = keptFamily{}, ""
	v4 := m.to.Addr().Is4()
	// kube-controller-manager's flags, as its mirror pod shows them: the
	// Service range and node mask of To's family when not given, and in a
	// dual-stack cluster the other family, which the move keeps.
	d, err := nodecidr.DiscoverControllerManagerFlags(ctx, m.kube())
	if err != nil && !errors.Is(err, nodecidr.ErrNotDiscovered) {
		return err
	}
	if d != nil {
		m.svcFlag = d.Flags.ServiceClusterIPRange
		if ps, _, perr := cidr.ParseListLenient(d.Flags.ServiceClusterIPRange); perr == nil && !m.svc.IsValid() {
			for _, p := range ps {
				if p.Addr().Is4() == v4 {
					m.svc = p
					break
				}
			}
		}
		m.keep = keptFamilyOf(d.Flags, m.to)
		if m.nodeMask == 0 {
			m.nodeMask = max(d.Flags.NodeCIDRMaskSizeIPv4, d.Flags.NodeCIDRMaskSize)
			if !v4 {
				m.nodeMask = d.Flags.NodeCIDRMaskSizeIPv6
				if !m.keep.cidr.IsValid() {
					m.nodeMask = max(m.nodeMask, d.Flags.NodeCIDRMaskSize) // single-stack IPv6
				}
			}
		}
	}
	if !m.svc.IsValid() {
		return inputf("--service-cidr is required: kube-controller-manager's --service-cluster-ip-range was not found in the cluster")
	}
	if m.nodeMask == 0 {
		m.nodeMask = cidr.DefaultNodeMaskIPv4
		if !v4 {
			m.nodeMask = cidr.DefaultNodeMaskIPv6
		}
	}
	return nil
}

// clusterCIDR is kube-controller-manager's --cluster-cidr (and kubeadm's
// podSubnet) at the end: To, with the range of the family the move keeps in
// its place in a dual-stack cluster.
func (m *CalicoPodCIDRMigration) clusterCIDR() string { return m.keep.clusterCIDR(m.to) }

// validate checks the inputs against the cluster, read-only, and makes the
// plans; it returns the details step 1 reports.
func (m *CalicoPodCIDRMigration) validate(ctx context.Context, found bool) ([]string, error) {
	old, err := m.o.Cluster.Pools.Get(ctx, m.o.OldPool)
	oldExists := err == nil
	switch {
	case errors.Is(err, calico.ErrPoolNotFound):
		if !found {
			return nil, inputf("--old-pool %q: no such IPPool in the cluster", m.o.OldPool)
		}
	case err != nil:
		return nil, err
	default:
		pfx, err := old.Prefix()
		if err != nil {
			return nil, fmt.Errorf("IPPool %q: %w", m.o.OldPool, err)
		}
		if pfx != m.from {
			return nil, inputf("--from %s is not the range of IPPool %q (%s): --from must be the pod range in use", m.from, m.o.OldPool, pfx)
		}
	}
	if m.to == m.from {
		return nil, inputf("--to %s is the range in use already (IPPool %q): nothing to move", m.to, m.o.OldPool)
	}
	if m.cplan != nil {
		if err := calico.CheckPlan(m.cplan); err != nil {
			return nil, fmt.Errorf("--journal %s: the recorded Calico plan: %w", m.j.Dir(), err)
		}
	}
	var sr StepReport
	if err := m.preflight(ctx, &sr); err != nil {
		return nil, err
	}
	if oldExists || m.cplan != nil {
		if _, err := m.calicoPlan(ctx); err != nil {
			return nil, err
		}
	}
	if _, err := m.nodePlan(ctx); err != nil {
		return nil, err
	}
	if err := m.kubeadmEdits().preflight(ctx, m.kube(), m.env); err != nil {
		return nil, err
	}
	return sr.Details, nil
}

// newFlags are kube-controller-manager's node IPAM flags at the end.
func (m *CalicoPodCIDRMigration) newFlags() cidr.ControllerManagerFlags {
	f := cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: m.clusterCIDR(), NodeCIDRMaskSize: m.nodeMask, ServiceClusterIPRange: m.svc.String()}
	if m.keep.cidr.IsValid() {
		f.NodeCIDRMaskSize = 0
		f.NodeCIDRMaskSizeIPv4, f.NodeCIDRMaskSizeIPv6 = m.nodeMask, m.keep.mask
		if m.to.Addr().Is6() {
			f.NodeCIDRMaskSizeIPv4, f.NodeCIDRMaskSizeIPv6 = m.keep.mask, m.nodeMask
		}
		if m.svcFlag != "" {
			f.ServiceClusterIPRange = m.svcFlag
		}
	}
	return f
}

func (m *CalicoPodCIDRMigration) rebase() nodecidr.PlanOptions {
	after := m.newFlags()
	return nodecidr.PlanOptions{Mode: nodecidr.ModeRebase, Rebase: []nodecidr.RebasePair{{From: m.from, To: m.to}}, After: &after}
}

// --- step 1: preflight ---

func (m *CalicoPodCIDRMigration) reportChecks(_ context.Context, _ *Env, sr *StepReport) error {
	sr.Details = append(sr.Details, m.checks...)
	return nil
}

func (m *CalicoPodCIDRMigration) preflight(ctx context.Context, sr *StepReport) error {
	nodes, err := nodecidr.ListNodes(ctx, m.kube(), nodecidr.ListOptions{})
	if err != nil {
		return err
	}
	newCap, err := cidr.ComputePodCapacity(cidr.NodeIPAM{ClusterCIDR: m.to, NodeMask: m.nodeMask})
	if err != nil {
		return inputf("--to %s with node mask /%d: %v", m.to, m.nodeMask, err)
	}
	oldCap, err := cidr.ComputePodCapacity(cidr.NodeIPAM{ClusterCIDR: m.from, NodeMask: m.nodeMask})
	if err != nil {
		return inputf("--from %s with node mask /%d: %v", m.from, m.nodeMask, err)
	}
	sr.Addf("capacity: %s with /%d node subnets holds %s nodes (was %s in %s); %d node(s) now",
		m.to, m.nodeMask, newCap.MaxNodes, oldCap.MaxNodes, m.from, len(nodes))
	if newCap.MaxNodes.IsInt64() && newCap.MaxNodes.Int64() < int64(len(nodes)) {
		return inputf("--to %s holds only %s node subnets of /%d, the cluster has %d nodes", m.to, newCap.MaxNodes, m.nodeMask, len(nodes))
	}

	// The new pool lies inside --to (Validate), so whatever it overlaps
	// --to overlaps too: it needs no range of its own.
	ranges := []cidr.Range{
		{Name: "new cluster CIDR (--to)", Kind: cidr.KindClusterCIDR, Prefix: m.to},
		{Name: "Service CIDR", Kind: cidr.KindServiceCIDR, Prefix: m.svc},
	}
	addrs := 0
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() == m.to.Addr().Is4() {
				ranges = append(ranges, cidr.Range{Name: "node " + n.Name + " address", Kind: cidr.KindNodeNetwork, Prefix: netip.PrefixFrom(ip, ip.BitLen())})
				addrs++
			}
		}
	}
	// The special-purpose ranges (CGNAT, link-local, documentation) give
	// warnings: pods there may be unreachable from networks that route those
	// ranges elsewhere (a Tailscale node answers 100.64.0.0/10 itself). Only
	// --to's are the migration's concern, not a node address's.
	var conflicts []string
	for _, o := range cidr.Analyze(ranges, cidr.AnalyzeOptions{WellKnown: true}) {
		switch {
		case o.Severity == cidr.SeverityError:
			conflicts = append(conflicts, o.Message())
		case o.Severity == cidr.SeverityWarning && (o.Outer.Kind == cidr.KindClusterCIDR || o.Inner.Kind == cidr.KindClusterCIDR):
			sr.Details = append(sr.Details, "warning: "+o.Message())
		}
	}
	if len(conflicts) > 0 {
		return inputf("--to %s conflicts: %s", m.to, strings.Join(conflicts, "; "))
	}
	sr.Addf("conflicts: none between %s, the Service CIDR %s and %d node address(es)", m.to, m.svc, addrs)

	plan, err := nodecidr.PlanNodes(nodes, m.rebase())
	if err != nil {
		return err
	}
	pf := nodecidr.PreflightAfter(m.newFlags(), nodes, plan)
	if !pf.WouldStart {
		return fmt.Errorf("kube-controller-manager would not start with %s once the nodes are moved: %s", strings.Join(m.newFlags().Args(), " "), calPreflightProblems(pf))
	}
	sr.Addf("kube-controller-manager would start with %s once the %d node(s) are moved (control plane included)",
		strings.Join(m.newFlags().Args(), " "), len(plan.Steps))

	checks := m.accessChecks()
	if err := access.Preflight(ctx, m.kube(), checks); err != nil {
		if m.mode == ModePlan {
			sr.Details = append(sr.Details, "warning: "+oneLine(err.Error()))
			return nil
		}
		return err
	}
	sr.Addf("permissions: all %d checks allowed", len(checks))
	return nil
}

func calPreflightProblems(pf cidr.PreflightResult) string {
	var out []string
	out = append(out, pf.FlagErrors...)
	for _, c := range pf.Crashes {
		out = append(out, c.Message)
	}
	return strings.Join(out, "; ")
}

func (m *CalicoPodCIDRMigration) accessChecks() []access.Check {
	group := calico.CRDGroup
	if m.o.Cluster.Pools.API() == calico.APIProjectCalicoV3 {
		group = calico.IPPoolsV3.Group
	}
	var out []access.Check
	for _, v := range []string{"get", "list", "create", "update", "delete"} {
		out = append(out, access.Check{Verb: v, Group: group, Resource: "ippools"})
	}
	for _, v := range []string{"get", "list", "create", "delete", "patch"} {
		out = append(out, access.Check{Verb: v, Resource: "nodes"})
	}
	out = append(out,
		access.Check{Verb: "list", Group: calico.CRDGroup, Resource: "ipamblocks"},
		access.Check{Verb: "list", Group: calico.CRDGroup, Resource: "blockaffinities"},
		access.Check{Verb: "list", Resource: "pods"},
		access.Check{Verb: "create", Resource: "pods", Subresource: "eviction"},
		access.Check{Verb: "patch", Group: "apps", Resource: "deployments"},
		access.Check{Verb: "patch", Group: "apps", Resource: "statefulsets"},
		access.Check{Verb: "patch", Group: "apps", Resource: "daemonsets"},
		access.Check{Verb: "get", Resource: "configmaps", Namespace: kubeadmcfg.Namespace},
		access.Check{Verb: "update", Resource: "configmaps", Namespace: kubeadmcfg.Namespace, Name: kubeadmcfg.KubeadmConfigMap},
		access.Check{Verb: "update", Resource: "configmaps", Namespace: kubeadmcfg.Namespace, Name: kubeadmcfg.KubeProxyConfigMap},
	)
	return out
}

// --- steps 2, 3, 7, 9: the Calico pool swap ---

// calicoPlan returns the journaled swap plan, or makes (and in ModeApply,
// once the intent is recorded, journals) one.
func (m *CalicoPodCIDRMigration) calicoPlan(ctx context.Context) (*calico.SwapPlan, error) {
	if m.cplan != nil {
		return m.cplan, nil
	}
	p, err := calico.Plan(ctx, m.o.Cluster, calico.SwapRequest{
		OldPool: m.o.OldPool, NewName: m.newPool, NewCIDR: m.poolCIDR.String(),
		ClusterCIDR: m.to.String(), ServiceCIDR: m.svc.String(), Move: m.o.Move,
	})
	if err != nil {
		return nil, err
	}
	m.cplan = p
	return p, m.savePlansIfSaving()
}

// calicoEvents turns calico.Apply's events into progress lines and the
// step's details: phase changes are left out, and the repeated waits (a
// rollout, Calico releasing the old pool) go to progress only.
func calicoEvents(env *Env, sr *StepReport) func(calico.Event) {
	return func(e calico.Event) {
		if e.Type == calico.EventPhase {
			return
		}
		line := string(e.Type)
		if e.Object != "" {
			line += " " + e.Object
		}
		line += ": " + e.Message
		env.Progressf("  calico %s", line)
		if e.Type != calico.EventRolloutWait && e.Type != calico.EventLeftoversWait {
			sr.Details = append(sr.Details, line)
		}
	}
}

func (m *CalicoPodCIDRMigration) calicoApply(ctx context.Context, env *Env, sr *StepReport, stopAfter calico.Phase) (*calico.ApplyResult, error) {
	p, err := m.calicoPlan(ctx)
	if err != nil {
		return nil, err
	}
	opts := calico.ApplyOptions{
		StopAfter:    stopAfter,
		PollInterval: m.o.PollInterval, RolloutTimeout: m.o.RolloutTimeout, DrainTimeout: m.o.DrainTimeout,
		OnEvent: calicoEvents(env, sr),
	}
	if m.mode == ModeServerDryRun {
		opts.DryRun = calico.DryRunServer
	} else {
		opts.JournalDir = filepath.Join(m.j.Dir(), "calico")
		opts.Lock = m.env.Lock
		if cs := m.env.ClusterJournal("calico"); cs != nil {
			opts.ClusterJournal = &calico.ClusterJournal{Namespace: cs.Namespace, Name: cs.Name, Keep: cs.Keep}
		}
	}
	res, err := calico.Apply(ctx, m.o.Cluster, p, opts)
	var oc *calico.OperatorChangeError
	if errors.As(err, &oc) {
		return res, &Pause{Step: sr.Name, Instructions: []string{oc.Change.String(), oc.Change.Command},
			Observed: "the Tigera operator manages IPPool " + p.OldPool.Name, Resume: "rerun the same command once the Installation is changed"}
	}
	return res, err
}

// poolAdded is the add-pool step's read-only check: the new pool exists
// with its planned CIDR.
func (m *CalicoPodCIDRMigration) poolAdded(ctx context.Context, _ *Env) (bool, string, error) {
	p, err := m.o.Cluster.Pools.Get(ctx, m.newPool)
	if errors.Is(err, calico.ErrPoolNotFound) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	if pfx, err := p.Prefix(); err != nil || pfx != m.poolCIDR {
		// Not ours: the step itself refuses it.
		return false, "", nil
	}
	return true, fmt.Sprintf("IPPool %s exists with cidr %s", p.Name, m.poolCIDR), nil
}

func (m *CalicoPodCIDRMigration) addPool(ctx context.Context, env *Env, sr *StepReport) error {
	p, err := m.calicoPlan(ctx)
	if err != nil {
		return err
	}
	sr.Addf("new IPPool %s %s (blockSize %d, %s blocks), copying encapsulation and NAT of %s %s",
		p.NewPool.Name, p.NewCIDR, p.NewPool.EffectiveBlockSize(), p.Capacity.Blocks, p.OldPool.Name, p.OldCIDR)
	for _, w := range p.Warnings {
		sr.Details = append(sr.Details, "warning: "+w)
	}
	switch m.mode {
	case ModePlan:
		return nil
	case ModeServerDryRun:
		_, err := m.calicoApply(ctx, env, sr, calico.PhaseDisableOldPool)
		return err
	}
	_, err = m.calicoApply(ctx, env, sr, calico.PhaseCreatePool)
	return err
}

func (m *CalicoPodCIDRMigration) disablePool(ctx context.Context, env *Env, sr *StepReport) error {
	if m.mode != ModeApply {
		sr.Addf("set IPPool %s disabled: new pods get addresses from the new pool only; running pods keep theirs", m.o.OldPool)
		if m.mode == ModeServerDryRun {
			sr.Details = append(sr.Details, "dry-run together with step 2")
		}
		return nil
	}
	_, err := m.calicoApply(ctx, env, sr, calico.PhaseDisableOldPool)
	return err
}

func (m *CalicoPodCIDRMigration) moveWorkloads(ctx context.Context, env *Env, sr *StepReport) error {
	if m.mode != ModeApply {
		p, err := m.calicoPlan(ctx)
		if err != nil {
			return err
		}
		for _, w := range p.Workloads {
			sr.Addf("%s %s (%d pod(s) in %s)%s", w.Method, w.Workload, len(w.Pods), p.OldCIDR, map[bool]string{true: " (cluster DNS)"}[w.DNS])
		}
		for _, b := range p.Blocked {
			sr.Addf("blocked: %s: %s", b.Pod, b.Reason)
		}
		if m.mode == ModeServerDryRun {
			sr.Status = StatusNotRun
		}
		return nil
	}
	res, err := m.calicoApply(ctx, env, sr, calico.PhaseVerify)
	if err != nil {
		return err
	}
	if res.Verify != nil && !res.Verify.Clear() {
		return fmt.Errorf("the old pool is not clear yet: %s; rerun to move again", res.Verify.Summary())
	}
	return nil
}

func (m *CalicoPodCIDRMigration) deletePool(ctx context.Context, env *Env, sr *StepReport) error {
	if m.mode != ModeApply {
		sr.Addf("delete IPPool %s once nothing is left on it", m.o.OldPool)
		if m.mode == ModeServerDryRun {
			sr.Status = StatusNotRun
		}
		return nil
	}
	res, err := m.calicoApply(ctx, env, sr, "")
	if err != nil {
		return err
	}
	if !res.Done {
		return fmt.Errorf("the pool swap did not finish (phase %s); rerun", res.Phase)
	}
	return nil
}

// --- step 4: move the nodes ---

func (m *CalicoPodCIDRMigration) nodePlan(ctx context.Context) (*nodecidr.Plan, error) {
	if m.nplan != nil {
		return m.nplan, nil
	}
	p, err := nodecidr.MakePlan(ctx, m.kube(), m.rebase())
	if err != nil {
		return nil, err
	}
	m.nplan = p
	return p, m.savePlansIfSaving()
}

func (m *CalicoPodCIDRMigration) moveNodes(ctx context.Context, env *Env, sr *StepReport) error {
	p, err := m.nodePlan(ctx)
	if err != nil {
		return err
	}
	for _, s := range p.Steps {
		role := ""
		if s.ControlPlane {
			role = " (control plane)"
		}
		sr.Addf("%s %s%s: %s -> %s", s.Action, s.Node, role, strings.Join(s.OldPodCIDRs, ","), strings.Join(s.NewPodCIDRs, ","))
	}
	if p.Unchanged > 0 {
		sr.Addf("%d node(s) already in %s", p.Unchanged, m.to)
	}
	for _, w := range p.Warnings {
		sr.Details = append(sr.Details, "warning: "+w)
	}
	if cm := p.ControllerManager; cm != nil && !cm.WouldStart {
		return fmt.Errorf("kube-controller-manager would not start with --cluster-cidr=%s after this plan: %s", m.clusterCIDR(), calPreflightProblems(*cm))
	}
	if m.mode == ModePlan || len(p.Steps) == 0 {
		return nil
	}
	opts := nodecidr.ApplyOptions{
		Note:    "migrate-calico-podcidr " + m.from.String() + " -> " + m.to.String(),
		OnEvent: func(e nodecidr.Event) { env.Progressf("  node %s", e.String()) },
	}
	if m.mode == ModeServerDryRun {
		opts.DryRun = nodecidr.DryRunServer
	} else {
		opts.JournalDir = filepath.Join(m.j.Dir(), "nodecidr")
		opts.Lock, opts.ClusterJournal = m.env.Lock, nodeClusterJournal(m.env, "nodecidr")
	}
	res, err := nodecidr.Apply(ctx, m.kube(), p, opts)
	if res != nil {
		if len(res.Changed) > 0 {
			sr.Addf("moved %d node(s); absent for p50 %s, max %s", len(res.Changed), res.Gaps.P50, res.Gaps.Max)
		}
		if len(res.AlreadyDone) > 0 {
			sr.Addf("%d node(s) moved by an earlier run", len(res.AlreadyDone))
		}
	}
	return err
}

// --- step 5: kubeadm ConfigMaps ---

func (m *CalicoPodCIDRMigration) kubeadmConfig(ctx context.Context, _ *Env, sr *StepReport) error {
	snap, err := kubeadmcfg.Read(ctx, m.kube(), kubeadmcfg.ReadOptions{})
	if err != nil {
		return err
	}
	if snap.Kubeadm == nil && snap.KubeProxy == nil {
		sr.Details = append(sr.Details, "no kubeadm-config or kube-proxy ConfigMap: nothing to update in the API")
		return nil
	}
	return m.kubeadmEdits().run(ctx, m.kube(), snap, m.env, sr)
}

// kubeadmEdits are the kubeadm ConfigMap edits of step 5, and of its check
// in Prepare.
func (m *CalicoPodCIDRMigration) kubeadmEdits() kubeadmEdits {
	return kubeadmEdits{key: keyKubeadmPlan, intent: kubeadmcfg.Intent{PodSubnet: m.clusterCIDR()},
		ids: []string{kubeadmcfg.EditKubeadmConfig, kubeadmcfg.EditKubeProxy}}
}

// --- step 6: kube-controller-manager --cluster-cidr (operator) ---

func (m *CalicoPodCIDRMigration) controllerManagerFlags(ctx context.Context, env *Env, sr *StepReport) error {
	flagValue := m.clusterCIDR()
	var instr []string
	if m.o.Manifests != "" {
		in, err := renderManifest(m.o.Manifests, m.o.Out, kubeadmcfg.ControllerManagerManifest, []kubeadmcfg.FlagChange{{Flag: kubeadmcfg.FlagClusterCIDR, Value: flagValue}}, sr)
		if err != nil {
			return err
		}
		if in != "" {
			instr = append(instr, in)
		}
	}
	if len(instr) == 0 {
		instr = append(instr, fmt.Sprintf("on every control-plane node, set --cluster-cidr=%s in %s (the kubelet restarts kube-controller-manager)",
			flagValue, filepath.Join(kubeadmcfg.DefaultManifestDir, kubeadmcfg.ControllerManagerManifest)))
	}
	resume := "rerun the same command: it goes on once it sees the new flag on the kube-controller-manager mirror pods"
	if m.o.ProbeNode {
		resume += " or on the podCIDR of a probe Node"
	}
	observe := func(ctx context.Context) (bool, string, error) {
		// The last word before the restart: every live node lies in the new
		// range, so kube-controller-manager starts with the new flag.
		pf, err := nodecidr.PreflightCluster(ctx, m.kube(), m.newFlags(), nodecidr.ListOptions{})
		if err != nil {
			return false, "", err
		}
		if !pf.WouldStart {
			return false, "", fmt.Errorf("do not restart kube-controller-manager yet: with --cluster-cidr=%s it would exit: %s", flagValue, calPreflightProblems(pf))
		}
		sr.Addf("every node lies in %s: kube-controller-manager will start with the new flag", flagValue)
		return m.observeFlags(ctx, env)
	}
	return operatorGate{step: CalicoStepFlags, instr: instr, observe: observe, cont: m.o.Continue, resume: resume}.run(ctx, m.mode, sr)
}

// observeFlags decides from the API whether kube-controller-manager runs with
// the new --cluster-cidr: its kubeadm mirror pods all carry the flag, or (with
// ProbeNode) a Node created without podCIDR gets one inside the new range.
func (m *CalicoPodCIDRMigration) observeFlags(ctx context.Context, env *Env) (bool, string, error) {
	want := m.clusterCIDR()
	pods, err := m.kube().CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component=" + cidr.KubeControllerManager})
	if err != nil {
		return false, "", fmt.Errorf("listing %s pods: %w", cidr.KubeControllerManager, err)
	}
	var names, stale []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
		if v, ok := podFlag(&p, cidr.KubeControllerManager, "--cluster-cidr"); !ok || v != want {
			stale = append(stale, fmt.Sprintf("%s has --cluster-cidr=%s", p.Name, v))
		}
	}
	if len(names) > 0 && len(stale) == 0 {
		return true, fmt.Sprintf("every kube-controller-manager pod (%s) runs with --cluster-cidr=%s", strings.Join(names, ", "), want), nil
	}
	why := strings.Join(stale, "; ")
	if len(names) == 0 {
		why = "no kube-controller-manager mirror pod in kube-system"
	}
	if !m.o.ProbeNode {
		return false, why, nil
	}
	got, err := m.probe(ctx, env)
	if err != nil {
		return false, "", err
	}
	if got.IsValid() && cidr.ContainsPrefix(m.to, got) {
		return true, fmt.Sprintf("probe Node %s got podCIDR %s inside %s", CalicoProbeNodeName, got, want), nil
	}
	if got.IsValid() {
		return false, fmt.Sprintf("%s; probe Node %s got podCIDR %s, outside %s", why, CalicoProbeNodeName, got, want), nil
	}
	return false, fmt.Sprintf("%s; probe Node %s got no podCIDR within %s", why, CalicoProbeNodeName, m.o.ProbeTimeout), nil
}

// probe creates the probe Node without podCIDR, waits for the podCIDR
// kube-controller-manager gives it, and deletes it whatever happens.
func (m *CalicoPodCIDRMigration) probe(ctx context.Context, env *Env) (netip.Prefix, error) {
	if err := m.deleteProbe(ctx); err != nil {
		return netip.Prefix{}, err
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: CalicoProbeNodeName, Labels: map[string]string{CalicoProbeLabel: "true"}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{
			{Key: CalicoProbeLabel, Effect: corev1.TaintEffectNoSchedule}, {Key: CalicoProbeLabel, Effect: corev1.TaintEffectNoExecute}}},
	}
	if _, err := m.kube().CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return netip.Prefix{}, fmt.Errorf("creating probe Node %s: %w", CalicoProbeNodeName, err)
	}
	env.Progressf("  probe Node %s created", CalicoProbeNodeName)
	defer func() {
		if err := m.deleteProbe(ctx); err != nil {
			env.Progressf("  warning: probe Node %s not deleted: %v; delete it before restarting kube-controller-manager", CalicoProbeNodeName, err)
		}
	}()
	deadline := time.Now().Add(m.o.ProbeTimeout)
	for {
		got, err := m.kube().CoreV1().Nodes().Get(ctx, CalicoProbeNodeName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return netip.Prefix{}, err
		}
		if err == nil && got.Spec.PodCIDR != "" {
			// The podCIDR of To's family (a dual-stack probe gets a pair).
			var out netip.Prefix
			for _, t := range nodecidr.PodCIDRsOf(got) {
				p, _, perr := cidr.ParseLenient(t)
				if perr != nil {
					return netip.Prefix{}, fmt.Errorf("probe Node %s: podCIDR %q: %w", CalicoProbeNodeName, t, perr)
				}
				if !out.IsValid() || p.Addr().Is4() == m.to.Addr().Is4() {
					out = p
				}
			}
			return out, nil
		}
		if time.Now().After(deadline) {
			return netip.Prefix{}, nil
		}
		select {
		case <-ctx.Done():
			return netip.Prefix{}, ctx.Err()
		case <-time.After(min(m.o.PollInterval, 500*time.Millisecond)):
		}
	}
}

// deleteProbe deletes the probe Node if it exists (with a context of its
// own, so it also runs when the run was interrupted).
func (m *CalicoPodCIDRMigration) deleteProbe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	n, err := m.kube().CoreV1().Nodes().Get(ctx, CalicoProbeNodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if n.Labels[CalicoProbeLabel] != "true" {
		return inputf("Node %s exists but is not a probe of this runbook (label %s missing); rename it or run without --probe-node", CalicoProbeNodeName, CalicoProbeLabel)
	}
	err = m.kube().CoreV1().Nodes().Delete(ctx, CalicoProbeNodeName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &n.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting probe Node %s: %w", CalicoProbeNodeName, err)
	}
	return nil
}

// --- step 8: verify ---

func (m *CalicoPodCIDRMigration) verify(ctx context.Context, _ *Env, sr *StepReport) error {
	if m.mode != ModeApply {
		sr.Addf("no live pod and no IPAM allocation left in %s; IPPool %s gives no addresses, %s is enabled", m.from, m.o.OldPool, m.newPool)
		sr.Addf("every planned node has its new podCIDR in %s and kept its labels, taints and annotations", m.to)
		sr.Addf("kube-controller-manager would start with --cluster-cidr=%s against the live nodes", m.clusterCIDR())
		if m.mode == ModeServerDryRun {
			sr.Status = StatusNotRun
		}
		return nil
	}
	p, err := m.calicoPlan(ctx)
	if err != nil {
		return err
	}
	var problems []string
	v, err := calico.Verify(ctx, m.o.Cluster, p.Target())
	if err != nil {
		return err
	}
	sr.Details = append(sr.Details, "calico: "+v.Summary())
	if !v.Clear() {
		problems = append(problems, "calico: "+v.Summary())
	}
	np, err := m.nodePlan(ctx)
	if err != nil {
		return err
	}
	nv, err := nodecidr.Verify(ctx, m.kube(), np, nodecidr.VerifyOptions{JournalDir: filepath.Join(m.j.Dir(), "nodecidr")})
	if err != nil {
		return err
	}
	for _, f := range nv.Findings {
		if f.Severity == cidr.SeverityError {
			problems = append(problems, "nodes: "+f.String())
		} else {
			sr.Details = append(sr.Details, "nodes: "+f.String())
		}
	}
	sr.Addf("nodes: %d planned node(s) checked", nv.Checked)
	pf, err := nodecidr.PreflightCluster(ctx, m.kube(), m.newFlags(), nodecidr.ListOptions{})
	if err != nil {
		return err
	}
	if !pf.WouldStart {
		problems = append(problems, "kube-controller-manager: "+calPreflightProblems(pf))
	} else {
		sr.Details = append(sr.Details, "kube-controller-manager starts with --cluster-cidr="+m.clusterCIDR()+" against every live node")
	}
	if len(problems) > 0 {
		return fmt.Errorf("verification failed: %s", strings.Join(problems, "; "))
	}
	return nil
}
