package calico

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/internal/lease"
)

// DryRun selects a dry run.
type DryRun string

// The dry-run modes.
const (
	// DryRunNone makes real changes.
	DryRunNone DryRun = ""
	// DryRunClient only reports what would be done; nothing is sent.
	DryRunClient DryRun = "client"
	// DryRunServer sends every write with dryRun=All, so the API server
	// validates (and admission runs) without persisting; nothing is waited for.
	DryRunServer DryRun = "server"
)

// Phase is a step of the swap, in order.
type Phase string

// The phases of Apply.
const (
	PhaseCreatePool     Phase = "create-new-pool"
	PhaseDisableOldPool Phase = "disable-old-pool"
	PhaseMovePods       Phase = "move-pods"
	PhaseVerify         Phase = "verify"
	PhaseDeleteOldPool  Phase = "delete-old-pool"
	PhaseDone           Phase = "done"
)

var phaseOrder = []Phase{PhaseCreatePool, PhaseDisableOldPool, PhaseMovePods, PhaseVerify, PhaseDeleteOldPool, PhaseDone}

func phaseIndex(p Phase) int {
	for i, x := range phaseOrder {
		if x == p {
			return i
		}
	}
	return -1
}

// EventType says what an Event reports.
type EventType string

// The events Apply emits.
const (
	EventPhase         EventType = "phase"
	EventCreatePool    EventType = "create-pool"
	EventDisablePool   EventType = "disable-pool"
	EventWaitOperator  EventType = "wait-operator"
	EventRestart       EventType = "restart"
	EventRolloutWait   EventType = "rollout-wait"
	EventRolloutDone   EventType = "rollout-done"
	EventEvict         EventType = "evict"
	EventEvictBlocked  EventType = "evict-blocked"
	EventPodGone       EventType = "pod-gone"
	EventBlocked       EventType = "blocked"
	EventVerify        EventType = "verify"
	EventDeletePool    EventType = "delete-pool"
	EventSkip          EventType = "skip"
	EventResume        EventType = "resume"
	EventLeftoversWait EventType = "leftovers-wait"
)

// PDBStatus is a PodDisruptionBudget an eviction waits for.
type PDBStatus struct {
	Namespace          string `json:"namespace"`
	Name               string `json:"name"`
	DisruptionsAllowed int32  `json:"disruptionsAllowed"`
	CurrentHealthy     int32  `json:"currentHealthy"`
	DesiredHealthy     int32  `json:"desiredHealthy"`
	ExpectedPods       int32  `json:"expectedPods"`
}

// Event is one step of progress. Apply calls ApplyOptions.OnEvent with it,
// never concurrently.
type Event struct {
	Time    time.Time `json:"time"`
	Type    EventType `json:"type"`
	Phase   Phase     `json:"phase"`
	Object  string    `json:"object,omitempty"`
	Message string    `json:"message"`
	DryRun  DryRun    `json:"dryRun,omitempty"`
	// PDB is set on EventEvictBlocked: the budget the eviction waits for.
	PDB *PDBStatus `json:"pdb,omitempty"`
}

// ApplyOptions tune Apply. Zero values pick the documented defaults.
type ApplyOptions struct {
	// DryRun: client (report only) or server (dryRun=All on every write).
	DryRun DryRun
	// JournalDir is where Apply records its progress, fsynced before every
	// write, so a run killed at any instant resumes where it stopped. Required
	// unless DryRun is set.
	JournalDir string
	// OnEvent receives progress events.
	OnEvent func(Event)
	// Concurrency is how many workloads move at once (after DNS, which moves
	// alone); default 1.
	Concurrency int
	// WritesPerSecond limits the rate of writes; default 5.
	WritesPerSecond float64
	// PollInterval is how often rollouts, evictions and the operator are
	// checked; default 2s.
	PollInterval time.Duration
	// RolloutTimeout bounds the wait for one workload's rollout; default 10m.
	RolloutTimeout time.Duration
	// PodGoneTimeout bounds the wait for an evicted pod to disappear; default 5m.
	PodGoneTimeout time.Duration
	// EvictionBackoff is the first wait after an eviction refused with 429
	// (a PodDisruptionBudget forbids it); it doubles up to MaxEvictionBackoff
	// (default 1s and 30s).
	EvictionBackoff    time.Duration
	MaxEvictionBackoff time.Duration
	// PDBTimeout bounds how long one pod's eviction may be refused: counted
	// from the first refusal, with the last try at its end (a backoff that
	// would end later is cut short). 0 waits until ctx is done.
	PDBTimeout time.Duration
	// DrainTimeout is how long Verify's leftovers (IPAM allocations not yet
	// released) are awaited before the old pool's deletion is refused; default 2m.
	DrainTimeout time.Duration
	// MaxPasses bounds the scan-and-move passes; default 3.
	MaxPasses int
	// WaitForOperator polls until the operator has disabled (or removed) the
	// old pool instead of returning an *OperatorChangeError.
	WaitForOperator bool
	// KeepOldPool stops after verification, leaving the disabled pool.
	KeepOldPool bool
	// Force deletes the old pool even when pods or allocations are left.
	Force bool
	// StopAfter, when set, ends Apply (without error, Done false) once the
	// named phase has finished, e.g. PhaseDisableOldPool to stop new
	// allocations from the old pool before the pods move. Calling Apply again
	// with the same plan and journal (and another or no StopAfter) resumes
	// the swap from there. PhaseDone and the empty value run to the end.
	StopAfter Phase
	// Lock, when set, is taken before the first write and held until Apply
	// returns (dry runs do not take it); Apply checks it is still held
	// before each destructive call (a workload restart, an eviction, the
	// old pool's delete) and stops the run when it is not. Use the Lease of
	// LockScope.
	Lock Locker
	// ClusterJournal, when set, keeps a copy of every journal record in
	// ConfigMaps of the cluster, so that a run whose machine is lost is
	// resumed from another one with another JournalDir. It needs Lock.
	ClusterJournal *ClusterJournal
}

// LockScope names the Lease that serialises IPPool swaps across operators,
// and the cluster journal of their runs.
const LockScope = lease.ScopeCalicoPool

// Locker is a cluster-wide lock such as a coordination.k8s.io Lease.
type Locker interface {
	// Lock takes the lock, or fails at once when another run holds it, and
	// returns the function that releases it. The holder may call it again.
	Lock(ctx context.Context) (release func(), err error)
	// Check returns nil while the lock is still held; Apply calls it
	// before each destructive call, the PoolStores before each write given
	// a Lock.
	Check() error
}

// ClusterJournal is where Apply keeps the copy of its journal: ConfigMaps
// in Namespace labelled journal.cidrshift.io/scope=Name, holding the swap's
// record (phase, restarts, evictions) and the old IPPool as it was before
// its delete, written after the local record and before the call it
// guards. When the swap is done, its ConfigMaps are deleted but the first,
// which stays emptied and labelled journal.cidrshift.io/state=finished.
// RBAC: get, list, create, update and delete on configmaps in Namespace.
type ClusterJournal struct {
	// Namespace holds the ConfigMaps; empty means kube-system.
	Namespace string
	// Name is the journal's scope; empty means LockScope.
	Name string
	// Keep keeps a finished swap's records, labelled finished.
	Keep bool
}

func (c *ClusterJournal) options(client kubernetes.Interface) *journal.ClusterOptions {
	if c == nil {
		return nil
	}
	return journal.ClusterIn(client, c.Namespace, c.Name, LockScope, lease.Identity())
}

func (o ApplyOptions) withDefaults() ApplyOptions {
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.WritesPerSecond <= 0 {
		o.WritesPerSecond = 5
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.RolloutTimeout <= 0 {
		o.RolloutTimeout = 10 * time.Minute
	}
	if o.PodGoneTimeout <= 0 {
		o.PodGoneTimeout = 5 * time.Minute
	}
	if o.EvictionBackoff <= 0 {
		o.EvictionBackoff = time.Second
	}
	if o.MaxEvictionBackoff < o.EvictionBackoff {
		o.MaxEvictionBackoff = max(30*time.Second, o.EvictionBackoff)
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 2 * time.Minute
	}
	if o.MaxPasses <= 0 {
		o.MaxPasses = 3
	}
	return o
}

// ApplyResult says what Apply did.
type ApplyResult struct {
	PlanID string `json:"planID"`
	DryRun DryRun `json:"dryRun,omitempty"`
	// Phase is the last phase reached.
	Phase Phase `json:"phase"`
	// Done is true when the swap is complete.
	Done bool `json:"done"`
	// Resumed is true when a journal record of an earlier run was found.
	Resumed      bool          `json:"resumed,omitempty"`
	CreatedPool  bool          `json:"createdPool,omitempty"`
	DisabledPool bool          `json:"disabledPool,omitempty"`
	Restarted    []WorkloadRef `json:"restarted,omitempty"`
	Evicted      []PodRef      `json:"evicted,omitempty"`
	Blocked      []BlockedPod  `json:"blocked,omitempty"`
	// Waiting is the operator change Apply stopped for.
	Waiting        *OperatorChange `json:"waiting,omitempty"`
	Verify         *VerifyResult   `json:"verify,omitempty"`
	OldPoolDeleted bool            `json:"oldPoolDeleted,omitempty"`
}

// Sentinel errors of Apply.
var (
	// ErrStalePlan is wrapped by *StalePlanError.
	ErrStalePlan = errors.New("plan no longer matches the cluster")
	// ErrLeftovers is wrapped by *LeftoversError.
	ErrLeftovers = errors.New("old pool still in use")
	// ErrNoJournal means ApplyOptions.JournalDir was empty for a real run.
	ErrNoJournal = errors.New("ApplyOptions.JournalDir is empty: Apply records its progress there so that a killed run can resume")
)

// StalePlanError says what changed since the plan was made.
type StalePlanError struct {
	Object  string
	Field   string
	Planned string
	Found   string
}

// Error describes the problem in one line.
func (e *StalePlanError) Error() string {
	return fmt.Sprintf("%s changed since the plan was made: %s was %q, is %q; plan again", e.Object, e.Field, e.Planned, e.Found)
}

// Is reports whether target is ErrStalePlan.
func (e *StalePlanError) Is(target error) bool { return target == ErrStalePlan }

// LeftoversError refuses to delete the old pool because something is left.
type LeftoversError struct {
	Verify *VerifyResult
}

// Error describes the problem in one line.
func (e *LeftoversError) Error() string {
	return fmt.Sprintf("not deleting IPPool %q: %s (Force deletes it anyway)", e.Verify.OldPool, e.Verify.Summary())
}

// Is reports whether target is ErrLeftovers.
func (e *LeftoversError) Is(target error) bool { return target == ErrLeftovers }

// swapState is the journal record of one swap.
type swapState struct {
	PlanID     string    `json:"planID"`
	OldPoolUID string    `json:"oldPoolUID"`
	Phase      Phase     `json:"phase"`
	UpdatedAt  time.Time `json:"updatedAt"`
	// Restarts maps a workload key to the restartedAt value written (or about
	// to be written) on its pod template; a resumed run writes the same value,
	// so no workload restarts twice.
	Restarts map[string]string `json:"restarts,omitempty"`
	// Evictions maps "ns/name" to the pod UID whose eviction was requested.
	Evictions map[string]string `json:"evictions,omitempty"`
}

func journalKey(planID string) string { return "calico-swap/" + planID }

// deletedPoolKey is the journal key of an IPPool kept before its delete.
func deletedPoolKey(name string) string { return "calico-pool/" + name }

// applier carries one Apply run.
type applier struct {
	cl      Cluster
	plan    *SwapPlan
	opts    ApplyOptions
	log     logr.Logger
	limiter *rate.Limiter
	res     *ApplyResult

	jmu   sync.Mutex
	j     *journal.Journal
	state swapState

	emu   sync.Mutex
	phase Phase

	rmu sync.Mutex
}

// record changes the result under its lock (workloads move concurrently).
func (a *applier) record(f func(*ApplyResult)) {
	a.rmu.Lock()
	defer a.rmu.Unlock()
	f(a.res)
}

// Apply carries out a swap plan: create the new pool, disable the old one
// (or wait for the operator to), move every pod off the old pool, verify
// that nothing is left, report the IPAM blocks, and delete the old pool.
//
// Every step is idempotent and recorded in the journal (ApplyOptions.JournalDir)
// before its write, so Apply can be killed at any instant and run again with
// the same plan and journal to resume; on a finished swap it does nothing.
// It refuses a stale plan (*StalePlanError), checks RBAC before the first
// write (*access.DeniedError), stops for an operator change
// (*OperatorChangeError, with the result's Waiting set) unless
// WaitForOperator, and refuses to delete a pool still in use
// (*LeftoversError) unless Force. The result is returned with every error.
func Apply(ctx context.Context, cl Cluster, plan *SwapPlan, opts ApplyOptions) (*ApplyResult, error) {
	if err := cl.check(); err != nil {
		return nil, err
	}
	// A plan is untrusted input (a file a person may have edited): its own
	// invariants are checked before anything else, nothing written.
	if err := CheckPlan(plan); err != nil {
		return nil, err
	}
	if plan.API != "" && plan.API != cl.Pools.API() {
		return nil, &StalePlanError{Object: "Calico API", Field: "api", Planned: string(plan.API), Found: string(cl.Pools.API())}
	}
	switch opts.DryRun {
	case DryRunNone, DryRunClient, DryRunServer:
	default:
		return nil, fmt.Errorf("dry-run mode %q: want %q or %q", opts.DryRun, DryRunClient, DryRunServer)
	}
	if opts.StopAfter != "" && phaseIndex(opts.StopAfter) < 0 {
		return nil, fmt.Errorf("ApplyOptions.StopAfter %q: want one of %v", opts.StopAfter, phaseOrder)
	}
	opts = opts.withDefaults()
	a := &applier{
		cl: cl, plan: plan, opts: opts,
		log:     logr.FromContextOrDiscard(ctx).WithValues("plan", plan.ID),
		limiter: rate.NewLimiter(rate.Limit(opts.WritesPerSecond), 1),
		res:     &ApplyResult{PlanID: plan.ID, DryRun: opts.DryRun},
		state:   swapState{PlanID: plan.ID, OldPoolUID: plan.OldPool.UID},
	}
	if opts.DryRun == DryRunNone {
		if opts.JournalDir == "" {
			return a.res, ErrNoJournal
		}
		if opts.ClusterJournal != nil && opts.Lock == nil {
			return a.res, errors.New("ApplyOptions.ClusterJournal needs a Lock: only the holder of the lock may write the cluster journal")
		}
		release, err := lease.Hold(ctx, opts.Lock)
		if err != nil {
			return a.res, err
		}
		defer release()
		j, err := journal.OpenWithCluster(ctx, opts.JournalDir, opts.ClusterJournal.options(cl.Kube))
		if err != nil {
			return a.res, err
		}
		defer j.Close()
		a.j = j
		found, err := j.Get(journalKey(plan.ID), &a.state)
		if err != nil {
			return a.res, err
		}
		if found {
			if a.state.OldPoolUID != plan.OldPool.UID {
				return a.res, &StalePlanError{Object: "journal " + opts.JournalDir, Field: "oldPoolUID", Planned: plan.OldPool.UID, Found: a.state.OldPoolUID}
			}
			a.res.Resumed = true
			a.emit(Event{Type: EventResume, Message: fmt.Sprintf("resuming swap %s at phase %s", plan.ID, a.state.Phase)})
		}
	}
	err := a.run(ctx)
	a.res.Phase = a.state.Phase
	if a.opts.DryRun != DryRunNone {
		a.res.Phase = a.phase
	}
	return a.res, err
}

func (a *applier) run(ctx context.Context) error {
	if a.state.Phase == PhaseDone {
		a.res.Done = true
		a.emit(Event{Type: EventSkip, Message: "swap finished earlier; nothing to do"})
		return nil
	}
	done, err := a.checkFresh(ctx)
	if err != nil || done {
		return err
	}
	// The new pool against the pools as they are now, before the first write
	// (createPool checks again right before its create).
	if err := a.checkNewPool(ctx); err != nil {
		return err
	}
	if a.opts.DryRun != DryRunClient {
		if err := access.Preflight(ctx, a.cl.Kube, a.permissions()); err != nil {
			return err
		}
	}
	steps := []struct {
		phase Phase
		fn    func(context.Context) error
	}{
		{PhaseCreatePool, a.createPool},
		{PhaseDisableOldPool, a.disableOldPool},
		{PhaseMovePods, a.movePods},
		{PhaseVerify, a.verify},
		{PhaseDeleteOldPool, a.deleteOldPool},
	}
	// Creating and disabling are not repeated once passed; moving, verifying
	// and deleting are (they are idempotent), so a run resumed after it
	// stopped for leftovers looks again instead of trusting an old verdict.
	start := min(phaseIndex(a.state.Phase), phaseIndex(PhaseMovePods))
	for _, s := range steps {
		if phaseIndex(s.phase) < start {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if a.opts.StopAfter != "" && phaseIndex(s.phase) > phaseIndex(a.opts.StopAfter) {
			// Also when a resumed run is already past the phase: nothing
			// after StopAfter runs.
			a.emit(Event{Type: EventSkip, Message: fmt.Sprintf("stopping after phase %s as asked; Apply again with the same plan and journal to go on", a.opts.StopAfter)})
			return nil
		}
		if err := a.enter(s.phase); err != nil {
			return err
		}
		if err := s.fn(ctx); err != nil {
			return err
		}
	}
	if err := a.enter(PhaseDone); err != nil {
		return err
	}
	a.res.Done = a.opts.DryRun == DryRunNone
	if a.j != nil && a.opts.ClusterJournal != nil {
		if err := a.j.FinishRun(ctx, a.opts.ClusterJournal.Keep); err != nil {
			a.emit(Event{Type: EventSkip, Message: "finishing the cluster journal failed; its ConfigMaps stay until the next run: " + err.Error()})
		}
	}
	return nil
}

// checkLock returns nil when the run holds no lock (or is a dry run) or
// still holds it; what says which call is not made.
func (a *applier) checkLock(what string) error {
	if a.j == nil {
		return nil
	}
	return lease.CheckHeld(a.opts.Lock, what)
}

// checkFresh refuses a stale plan. A fresh run needs the old pool exactly as
// planned; a resumed run needs the same pool (UID) only, since the run itself
// changed it. A run without journal record whose old pool is gone while the
// new pool exists finished earlier: done.
func (a *applier) checkFresh(ctx context.Context) (bool, error) {
	old, err := a.cl.Pools.Get(ctx, a.plan.OldPool.Name)
	if errors.Is(err, ErrPoolNotFound) {
		if a.state.Phase == PhaseDeleteOldPool {
			return false, nil
		}
		if np, nerr := a.cl.Pools.Get(ctx, a.plan.NewPool.Name); nerr == nil && np.Spec.CIDR == a.plan.NewPool.Spec.CIDR && a.opts.DryRun == DryRunNone {
			a.res.Done, a.res.OldPoolDeleted = true, true
			a.emit(Event{Type: EventSkip, Message: fmt.Sprintf("IPPool %q is gone and %q exists: the swap is complete", a.plan.OldPool.Name, a.plan.NewPool.Name)})
			return true, a.setPhase(PhaseDone)
		}
		return false, &StalePlanError{Object: "IPPool " + a.plan.OldPool.Name, Field: "existence", Planned: "exists", Found: "not found"}
	}
	if err != nil {
		return false, err
	}
	if old.UID != a.plan.OldPool.UID {
		return false, &StalePlanError{Object: "IPPool " + old.Name, Field: "metadata.uid", Planned: a.plan.OldPool.UID, Found: old.UID}
	}
	if old.Spec.CIDR != a.plan.OldPool.Spec.CIDR {
		return false, &StalePlanError{Object: "IPPool " + old.Name, Field: "spec.cidr", Planned: a.plan.OldPool.Spec.CIDR, Found: old.Spec.CIDR}
	}
	if !a.res.Resumed && old.ResourceVersion != a.plan.OldPool.ResourceVersion {
		return false, &StalePlanError{Object: "IPPool " + old.Name, Field: "metadata.resourceVersion", Planned: a.plan.OldPool.ResourceVersion, Found: old.ResourceVersion}
	}
	return false, nil
}

// checkNewPool validates the plan's new pool against the cluster's pools
// now: a pool created since the plan was made must not overlap it.
func (a *applier) checkNewPool(ctx context.Context) error {
	pools, err := a.cl.Pools.List(ctx)
	if err != nil {
		return err
	}
	env := Environment{ClusterCIDRs: a.plan.ClusterCIDRs, ServiceCIDRs: a.plan.ServiceCIDRs, NodeNetworks: a.plan.NodeNetworks, Pools: pools}
	return ValidateNewPool(a.plan.NewPool, env)
}

// enter records that a phase starts (durably, before any of its writes).
func (a *applier) enter(p Phase) error {
	a.emu.Lock()
	a.phase = p
	a.emu.Unlock()
	a.emit(Event{Type: EventPhase, Message: string(p)})
	if phaseIndex(p) <= phaseIndex(a.state.Phase) {
		return nil
	}
	return a.setPhase(p)
}

func (a *applier) setPhase(p Phase) error {
	a.jmu.Lock()
	defer a.jmu.Unlock()
	a.state.Phase = p
	return a.saveLocked()
}

func (a *applier) saveLocked() error {
	if a.j == nil {
		return nil
	}
	a.state.UpdatedAt = time.Now().UTC()
	return a.j.Put(journalKey(a.plan.ID), a.state)
}

// recordRestart returns the restartedAt value to write for a workload,
// durably recording it first (a resumed run reuses the recorded value).
func (a *applier) recordRestart(key string) (string, error) {
	a.jmu.Lock()
	defer a.jmu.Unlock()
	if err := a.checkLock("not restarting " + key); err != nil {
		return "", err
	}
	if v, ok := a.state.Restarts[key]; ok {
		return v, nil
	}
	v := time.Now().UTC().Format(time.RFC3339)
	if a.j == nil {
		return v, nil
	}
	if a.state.Restarts == nil {
		a.state.Restarts = map[string]string{}
	}
	a.state.Restarts[key] = v
	return v, a.saveLocked()
}

func (a *applier) recordEviction(pod PodRef) error {
	a.jmu.Lock()
	defer a.jmu.Unlock()
	if a.j == nil {
		return nil
	}
	if err := a.checkLock("not evicting pod " + pod.String()); err != nil {
		return err
	}
	if a.state.Evictions == nil {
		a.state.Evictions = map[string]string{}
	}
	a.state.Evictions[pod.String()] = pod.UID
	return a.saveLocked()
}

func (a *applier) emit(e Event) {
	if a.opts.OnEvent == nil {
		a.log.V(1).Info(e.Message, "type", e.Type, "object", e.Object)
		return
	}
	a.emu.Lock()
	defer a.emu.Unlock()
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if e.Phase == "" {
		e.Phase = a.phase
	}
	e.DryRun = a.opts.DryRun
	a.log.V(1).Info(e.Message, "type", e.Type, "object", e.Object)
	a.opts.OnEvent(e)
}

func (a *applier) wait(ctx context.Context) error {
	return a.limiter.Wait(ctx)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// createPool creates the new pool unless it exists with the planned CIDR.
func (a *applier) createPool(ctx context.Context) error {
	name := a.plan.NewPool.Name
	cur, err := a.cl.Pools.Get(ctx, name)
	if err == nil {
		if cur.Spec.CIDR != a.plan.NewPool.Spec.CIDR {
			return &StalePlanError{Object: "IPPool " + name, Field: "spec.cidr", Planned: a.plan.NewPool.Spec.CIDR, Found: cur.Spec.CIDR}
		}
		a.emit(Event{Type: EventSkip, Object: "IPPool " + name, Message: fmt.Sprintf("IPPool %q (%s) exists", name, cur.Spec.CIDR)})
		return nil
	}
	if !errors.Is(err, ErrPoolNotFound) {
		return err
	}
	pools, err := a.cl.Pools.List(ctx)
	if err != nil {
		return err
	}
	env := Environment{ClusterCIDRs: a.plan.ClusterCIDRs, ServiceCIDRs: a.plan.ServiceCIDRs, NodeNetworks: a.plan.NodeNetworks, Pools: pools}
	if err := ValidateNewPool(a.plan.NewPool, env); err != nil {
		return err
	}
	msg := fmt.Sprintf("create IPPool %q cidr %s", name, a.plan.NewPool.Spec.CIDR)
	if a.opts.DryRun == DryRunClient {
		a.emit(Event{Type: EventCreatePool, Object: "IPPool " + name, Message: "would " + msg})
		return nil
	}
	if err := a.wait(ctx); err != nil {
		return err
	}
	_, err = a.cl.Pools.Create(ctx, a.plan.NewPool, WriteOptions{DryRun: a.opts.DryRun == DryRunServer})
	if apierrors.IsAlreadyExists(err) {
		// Created by an earlier run between our Get and Create: check it is ours.
		cur, gerr := a.cl.Pools.Get(ctx, name)
		if gerr != nil {
			return gerr
		}
		if cur.Spec.CIDR != a.plan.NewPool.Spec.CIDR {
			return &StalePlanError{Object: "IPPool " + name, Field: "spec.cidr", Planned: a.plan.NewPool.Spec.CIDR, Found: cur.Spec.CIDR}
		}
		err = nil
	}
	if err != nil {
		return err
	}
	a.res.CreatedPool = a.opts.DryRun == DryRunNone
	a.emit(Event{Type: EventCreatePool, Object: "IPPool " + name, Message: msg})
	return nil
}

// disableOldPool stops new allocations from the old pool, or waits for the
// operator to do it.
func (a *applier) disableOldPool(ctx context.Context) error {
	name := a.plan.OldPool.Name
	for attempt := 0; ; attempt++ {
		old, err := a.cl.Pools.Get(ctx, name)
		if err != nil {
			return err
		}
		if old.UID != a.plan.OldPool.UID {
			return &StalePlanError{Object: "IPPool " + name, Field: "metadata.uid", Planned: a.plan.OldPool.UID, Found: old.UID}
		}
		if old.AllocationStopped() {
			a.emit(Event{Type: EventSkip, Object: "IPPool " + name, Message: fmt.Sprintf("IPPool %q gives no new addresses", name)})
			return nil
		}
		info, err := DetectOperator(ctx, a.cl.Dynamic, old)
		if err != nil {
			return err
		}
		if info.ManagesPool {
			return a.waitOperator(ctx, disableChange(name, info), func(p IPPool, found bool) bool { return found && p.AllocationStopped() })
		}
		msg := fmt.Sprintf("disable IPPool %q (%s): no new addresses from it", name, old.Spec.CIDR)
		if a.opts.DryRun == DryRunClient {
			a.emit(Event{Type: EventDisablePool, Object: "IPPool " + name, Message: "would " + msg})
			return nil
		}
		if err := a.wait(ctx); err != nil {
			return err
		}
		upd := old.DeepCopy()
		upd.Spec.Disabled = true
		if err := Validate(upd); err != nil {
			// Disabling never makes a valid pool invalid; a pool that was
			// invalid before is Calico's business, not a reason to stop.
			a.log.Info("old pool breaks Calico rules", "error", err.Error())
		}
		_, err = a.cl.Pools.Update(ctx, upd, WriteOptions{DryRun: a.opts.DryRun == DryRunServer})
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return err
		}
		a.res.DisabledPool = a.opts.DryRun == DryRunNone
		a.emit(Event{Type: EventDisablePool, Object: "IPPool " + name, Message: msg})
		return nil
	}
}

// waitOperator returns an *OperatorChangeError, or polls until observed
// reports the change made.
func (a *applier) waitOperator(ctx context.Context, ch OperatorChange, observed func(IPPool, bool) bool) error {
	a.res.Waiting = &ch
	a.emit(Event{Type: EventWaitOperator, Object: "Installation " + InstallationName, Message: ch.String()})
	if !a.opts.WaitForOperator || a.opts.DryRun != DryRunNone {
		if a.opts.DryRun != DryRunNone {
			return nil
		}
		return &OperatorChangeError{Change: ch}
	}
	for {
		p, err := a.cl.Pools.Get(ctx, a.plan.OldPool.Name)
		found := err == nil
		if err != nil && !errors.Is(err, ErrPoolNotFound) {
			return err
		}
		if observed(p, found) {
			a.res.Waiting = nil
			a.emit(Event{Type: EventWaitOperator, Object: "IPPool " + a.plan.OldPool.Name, Message: "operator change observed"})
			return nil
		}
		if err := sleep(ctx, a.opts.PollInterval); err != nil {
			return err
		}
	}
}

// verify proves the old pool is empty, waiting up to DrainTimeout for
// leftovers to drain.
func (a *applier) verify(ctx context.Context) error {
	deadline := time.Now().Add(a.opts.DrainTimeout)
	for {
		v, err := Verify(ctx, a.cl, a.plan.Target())
		if err != nil {
			return err
		}
		a.res.Verify = v
		if v.Clear() || a.opts.DryRun != DryRunNone || !time.Now().Before(deadline) || v.liveLeft() > 0 {
			a.emit(Event{Type: EventVerify, Object: "IPPool " + a.plan.OldPool.Name, Message: v.Summary()})
			return nil
		}
		a.emit(Event{Type: EventLeftoversWait, Object: "IPPool " + a.plan.OldPool.Name, Message: "waiting for Calico to release: " + v.Summary()})
		if err := sleep(ctx, a.opts.PollInterval); err != nil {
			return err
		}
	}
}

// deleteOldPool deletes the old pool when nothing is left (or Force).
func (a *applier) deleteOldPool(ctx context.Context) error {
	name := a.plan.OldPool.Name
	if a.res.Verify == nil {
		v, err := Verify(ctx, a.cl, a.plan.Target())
		if err != nil {
			return err
		}
		a.res.Verify = v
	}
	v := a.res.Verify
	if a.opts.KeepOldPool {
		a.emit(Event{Type: EventSkip, Object: "IPPool " + name, Message: "keeping the old pool as asked"})
		return nil
	}
	if v != nil && !v.Clear() && !a.opts.Force {
		if a.opts.DryRun != DryRunNone {
			a.emit(Event{Type: EventSkip, Object: "IPPool " + name, Message: "would not delete: " + v.Summary()})
			return nil
		}
		return &LeftoversError{Verify: v}
	}
	old, err := a.cl.Pools.Get(ctx, name)
	if errors.Is(err, ErrPoolNotFound) {
		a.res.OldPoolDeleted = a.opts.DryRun == DryRunNone
		return nil
	}
	if err != nil {
		return err
	}
	if old.UID != a.plan.OldPool.UID {
		return &StalePlanError{Object: "IPPool " + name, Field: "metadata.uid", Planned: a.plan.OldPool.UID, Found: old.UID}
	}
	info, err := DetectOperator(ctx, a.cl.Dynamic, old)
	if err != nil {
		return err
	}
	if info.ManagesPool {
		if err := a.waitOperator(ctx, removeChange(name, info), func(_ IPPool, found bool) bool { return !found }); err != nil {
			return err
		}
		a.res.OldPoolDeleted = a.opts.DryRun == DryRunNone
		return nil
	}
	msg := fmt.Sprintf("delete IPPool %q (%s)", name, old.Spec.CIDR)
	if v != nil && !v.Clear() {
		msg += " despite leftovers (forced): " + v.Summary()
	}
	if a.opts.DryRun == DryRunClient {
		a.emit(Event{Type: EventDeletePool, Object: "IPPool " + name, Message: "would " + msg})
		return nil
	}
	if err := a.wait(ctx); err != nil {
		return err
	}
	if a.j != nil {
		if err := a.checkLock("not deleting IPPool " + name); err != nil {
			return err
		}
		// The pool as it was, in the journal (and the cluster's copy)
		// before its delete.
		if err := a.j.Put(deletedPoolKey(name), old); err != nil {
			return fmt.Errorf("journaling IPPool %s before deleting it: %w", name, err)
		}
	}
	err = a.cl.Pools.Delete(ctx, name, DeleteOptions{DryRun: a.opts.DryRun == DryRunServer, UID: a.plan.OldPool.UID})
	if err != nil && !errors.Is(err, ErrPoolNotFound) {
		return err
	}
	a.res.OldPoolDeleted = a.opts.DryRun == DryRunNone
	a.emit(Event{Type: EventDeletePool, Object: "IPPool " + name, Message: msg})
	return nil
}
