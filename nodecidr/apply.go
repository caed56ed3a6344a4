package nodecidr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/internal/lease"
	"github.com/cidrshift/cidrshift/internal/timing"
)

// PodGCQuarantine is how long the pod garbage collector waits after a pod's
// node disappears before it force-deletes the pod (then checks the node by
// name once more). Every delete→create gap must stay far below it.
const PodGCQuarantine = 40 * time.Second

// DefaultConcurrency is how many worker nodes Apply moves at once unless
// told otherwise. At most this many nodes are absent at any instant, each for
// tens of milliseconds (the pod garbage collector waits 40 s); on the e2e
// control plane it reaches the API server's delete+create throughput (about
// 25 times the kubectl loop), where one node at a time is bound by round
// trips. Control-plane nodes always move one at a time.
const DefaultConcurrency = 4

// DefaultCreateGrace is how long the create that follows a delete keeps being
// retried after the run's context has ended.
const DefaultCreateGrace = 20 * time.Second

var (
	// ErrStalePlan is wrapped by *StaleError.
	ErrStalePlan = errors.New("plan no longer matches the cluster")
	// ErrJournalConflict means the journal holds an unfinished run of another
	// plan; finish that run (Apply it again) or use another journal directory.
	ErrJournalConflict = errors.New("journal holds an unfinished run of another plan")
	// ErrJournalLocked means another process is using the journal.
	ErrJournalLocked = journal.ErrLocked
	// ErrNodeNotRecreated means a node was deleted and could not be created
	// again before the run stopped. Its full manifest is in the journal; the
	// next Apply of the same plan recreates it.
	ErrNodeNotRecreated = errors.New("node deleted but not yet recreated")
	// ErrVerify means a node did not come back as planned.
	ErrVerify = errors.New("node verification failed")
)

// Change is one difference between a plan and the cluster.
type Change struct {
	Node    string `json:"node"`
	Field   string `json:"field"`
	Planned string `json:"planned"`
	Current string `json:"current"`
}

// StaleError lists the planned nodes that changed since the plan was made.
type StaleError struct {
	Changes []Change
}

// Error lists every change, naming the node, the field and both values.
func (e *StaleError) Error() string {
	parts := make([]string, len(e.Changes))
	for i, c := range e.Changes {
		parts[i] = fmt.Sprintf("node %s: %s was %s when planned, now %s", c.Node, c.Field, c.Planned, c.Current)
	}
	return ErrStalePlan.Error() + "; make a new plan: " + strings.Join(parts, "; ")
}

// Unwrap returns ErrStalePlan.
func (e *StaleError) Unwrap() error { return ErrStalePlan }

// DryRun selects a dry-run mode.
type DryRun string

// The dry-run modes.
const (
	// DryRunNone carries the plan out.
	DryRunNone DryRun = ""
	// DryRunClient only reports, through events, what would be done. Nothing
	// is sent to the API server but reads and access reviews.
	DryRunClient DryRun = "client"
	// DryRunServer sends every write with metav1.DryRunAll, so validation,
	// admission and preconditions are checked and nothing is stored. A
	// server-side dry-run delete leaves the node in place, so the dry-run
	// create of the same name ends in AlreadyExists; the API server checks
	// existence only after validation and admission have passed, so Apply
	// counts that AlreadyExists as success.
	DryRunServer DryRun = "server"
)

// Phase is a point in a node's move, used in events and journal records.
type Phase string

// The phases. Journal records use cordoned, backed-up, created, restored and
// done; each is written before the next API call. No record is written
// between a node's delete and its create: the backed-up record already tells
// a resumed run to recreate a node that is missing, and the node is absent
// for less time. The created record is written only when an uncordon or
// hooks follow, and otherwise folded into done.
const (
	PhaseCordoned   Phase = "cordoned"
	PhaseBackedUp   Phase = "backed-up"
	PhaseDeleted    Phase = "deleted"
	PhaseCreated    Phase = "created"
	PhasePatched    Phase = "patched"
	PhaseVerified   Phase = "verified"
	PhaseUncordoned Phase = "uncordoned"
	PhaseHook       Phase = "hook"
	PhaseDone       Phase = "done"
	PhaseSkipped    Phase = "skipped"
	PhaseRetrying   Phase = "retrying"
	PhaseRestored   Phase = "restored"
	PhaseFailed     Phase = "failed"
)

// Event reports progress to the caller's OnEvent callback.
type Event struct {
	Time  time.Time `json:"time"`
	Node  string    `json:"node"`
	Phase Phase     `json:"phase"`
	// Message says what happened in words.
	Message string `json:"message,omitempty"`
	// Err is set for PhaseRetrying and PhaseFailed.
	Err error `json:"-"`
	// Gap is the time the node was absent, set for PhaseCreated.
	Gap time.Duration `json:"gap,omitempty"`
	// DryRun is set when nothing was changed.
	DryRun bool `json:"dryRun,omitempty"`
}

// String renders the event as one line: "node: phase: message: error".
func (e Event) String() string {
	s := e.Node + ": " + string(e.Phase)
	if e.DryRun {
		s += " (dry run)"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Permission is one API permission a run needs.
type Permission struct {
	Verb        string `json:"verb"`
	Group       string `json:"group,omitempty"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	// Namespace is empty for cluster-scoped resources or all namespaces.
	Namespace string `json:"namespace,omitempty"`
}

// Hook runs after a node has its new podCIDRs, was verified and uncordoned,
// for example to restart the node's CNI pod or delete its pods so they get
// addresses from the new podCIDR. A hook may run more than once for a node
// (a run killed after the create and resumed runs it again), so it must be
// idempotent. A failing hook stops the run; the next Apply runs it again.
type Hook struct {
	Name string
	// Permissions the hook needs; Apply checks them before the first write.
	Permissions []Permission
	Run         func(ctx context.Context, node *corev1.Node) error
	// Check, when set, validates the hook's own input (a selector, a
	// namespace); Apply calls it before the first write, so a hook that could
	// only fail never runs after a node was moved.
	Check func() error
}

// ApplyOptions configures Apply.
type ApplyOptions struct {
	// JournalDir is the directory of the crash-safe journal. Required unless
	// DryRun is set. Apply takes an exclusive lock on it.
	JournalDir string
	// DryRun selects a dry-run mode.
	DryRun DryRun
	// Concurrency is how many worker nodes move at once; zero means
	// DefaultConcurrency. Control-plane nodes always move one at a time,
	// after all workers.
	Concurrency int
	// RateLimit is the most nodes started per second; zero means no limit.
	RateLimit float64
	// Cordon marks each node unschedulable before its delete and, if Apply
	// cordoned it, schedulable again once it is verified.
	Cordon bool
	// EmptyStatus creates nodes with an empty status instead of keeping the
	// old one until the kubelet refreshes it.
	EmptyStatus bool
	// Hooks run per node after it is verified (and uncordoned).
	Hooks []Hook
	// BeforeDelete hooks run per re-created node right before its backup
	// and delete (after the cordon), with the node as it is then, and again
	// whenever the delete is retried: they must be idempotent and must not
	// change that node (its delete is conditional on its resourceVersion).
	// A failing one leaves the node as it was (cordoned, with Cordon).
	// Nodes that are only patched, and a node a resumed run finds deleted
	// already, do not run them.
	BeforeDelete []Hook
	// OnEvent receives progress; calls are serialised.
	OnEvent func(Event)
	// Retry tunes the backoff for transient API errors.
	Retry Retry
	// CreateGrace is how long the create that follows a delete keeps being
	// retried after ctx ends, so a cancelled run does not leave a node
	// missing; zero means DefaultCreateGrace. It should stay below
	// PodGCQuarantine.
	CreateGrace time.Duration
	// StrictResourceVersion refuses a node whose resourceVersion moved since
	// the plan, even if only its status changed. By default only changes of
	// UID and podCIDRs make a plan stale (kubelets update node status every few
	// minutes).
	StrictResourceVersion bool
	// Note is stored with the plan in the journal (e.g. the command line).
	Note string
	// Lock, when set, is taken before the first write and held until Apply
	// returns (dry runs do not take it); Apply checks it is still held
	// before each node delete and each hook, and stops the run when it is
	// not. Use one per LockScope, such as the Lease of examples/noderecreate.
	Lock Locker
	// ClusterJournal, when set, keeps a copy of every journal record in
	// ConfigMaps of the cluster, so a run whose machine is lost is resumed
	// from another one (with another JournalDir). It needs Lock; dry runs
	// leave the cluster copy alone.
	ClusterJournal *ClusterJournal
}

// LockScope names the Lease that serialises node podCIDR rewrites across
// operators, and the cluster journal of their runs.
const LockScope = lease.ScopeNodeCIDR

// Locker is a cluster-wide lock such as a coordination.k8s.io Lease.
type Locker interface {
	// Lock takes the lock, or fails at once when another run holds it, and
	// returns the function that releases it. It may be called again by the
	// holder (release then runs once per call).
	Lock(ctx context.Context) (release func(), err error)
	// Check returns nil while the lock is still held; Apply calls it before
	// each destructive call.
	Check() error
}

// ClusterJournal is where Apply keeps the copy of its journal in the
// cluster: ConfigMaps in Namespace labelled journal.cidrshift.io/scope=Name,
// one key per record (the run's plan; per node its phase and, from its
// backed-up phase on, the full Node as deleted), written after the local
// record and before the call it guards, 256 KiB of records per ConfigMap (a
// larger record gets one of its own; one above 900 KiB is refused before
// the delete). When the
// run completes, its ConfigMaps are deleted but the first, emptied and
// labelled journal.cidrshift.io/state=finished; remove finished runs with
// `kubectl delete configmap -n NAMESPACE -l journal.cidrshift.io/state=finished`.
// RBAC: get, list, create, update and delete on configmaps in Namespace.
type ClusterJournal struct {
	// Namespace holds the ConfigMaps; empty means kube-system.
	Namespace string
	// Name is the journal's scope; empty means LockScope.
	Name string
	// Keep keeps a finished run's records (labelled finished) instead of
	// deleting them.
	Keep bool
}

func (c ClusterJournal) options(client kubernetes.Interface) journal.ClusterOptions {
	return *journal.ClusterIn(client, c.Namespace, c.Name, LockScope, lease.Identity())
}

// GapSummary is the distribution of the delete→create gaps of a run.
type GapSummary struct {
	Count int           `json:"count"`
	P50   time.Duration `json:"p50"`
	P99   time.Duration `json:"p99"`
	Max   time.Duration `json:"max"`
}

// Result is what a run did.
type Result struct {
	PlanID string `json:"planID"`
	DryRun DryRun `json:"dryRun,omitempty"`
	// Changed are the nodes this run moved (or would move, in a dry run).
	Changed []string `json:"changed"`
	// AlreadyDone are planned nodes that already had their new podCIDRs.
	AlreadyDone []string `json:"alreadyDone"`
	// Gaps summarises how long recreated nodes were absent.
	Gaps GapSummary `json:"gaps"`
}

// RequiredPermissions lists what Apply needs with these options: get, list,
// create, delete and patch on nodes (patch for cordoning, for nodes without
// podCIDRs and for recovering a node its kubelet re-registered mid-run), with
// a ClusterJournal get, list, create, update and delete on configmaps in its
// namespace, plus whatever the hooks declare. The Lock needs its own (a
// Lease: get, create and update on leases), checked by taking it.
func RequiredPermissions(opts ApplyOptions) []Permission {
	var out []Permission
	for _, v := range []string{"get", "list", "create", "delete", "patch"} {
		out = append(out, Permission{Verb: v, Resource: "nodes"})
	}
	if cj := opts.ClusterJournal; cj != nil && opts.DryRun == DryRunNone {
		ns := cj.Namespace
		if ns == "" {
			ns = metav1.NamespaceSystem
		}
		for _, v := range []string{"get", "list", "create", "update", "delete"} {
			out = append(out, Permission{Verb: v, Resource: "configmaps", Namespace: ns})
		}
	}
	for _, h := range slices.Concat(opts.BeforeDelete, opts.Hooks) {
		for _, p := range h.Permissions {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// runRecord is the journal's "run" record.
type runRecord struct {
	PlanID  string    `json:"planID"`
	Plan    *Plan     `json:"plan"`
	Note    string    `json:"note,omitempty"`
	Started time.Time `json:"started"`
}

// nodeRecord is the journal's "node/<name>" record. It is written before the
// call its phase announces, so after a crash it says what may have happened.
type nodeRecord struct {
	PlanID string `json:"planID"`
	Node   string `json:"node"`
	Phase  Phase  `json:"phase"`
	// Cordoned is set before Apply cordons the node; WasUnschedulable says
	// whether it already was, in which case it is never uncordoned.
	Cordoned         bool `json:"cordoned,omitempty"`
	WasUnschedulable bool `json:"wasUnschedulable,omitempty"`
	// Backup is the full Node as deleted.
	Backup        *corev1.Node  `json:"backup,omitempty"`
	DeleteStarted time.Time     `json:"deleteStarted,omitzero"`
	NewUID        types.UID     `json:"newUID,omitempty"`
	RestoredUID   types.UID     `json:"restoredUID,omitempty"`
	Gap           time.Duration `json:"gap,omitempty"`
	Updated       time.Time     `json:"updated"`
}

const runKey = "run"

func nodeKey(name string) string { return "node/" + name }

// Apply carries out a plan node by node: optionally cordon; write the full
// Node to the journal and fsync; delete it with UID and resourceVersion
// preconditions; create it again with the new spec.podCIDR(s) and everything
// else preserved; verify; uncordon if it cordoned; run the hooks. Nodes
// without podCIDRs get theirs by a patch instead.
//
// Before the first write it refuses an invalid plan (Validate, then
// CheckAgainst the Nodes listed: ErrInvalidPlan), invalid options and hooks
// (ErrInvalidOptions), a stale plan (*StaleError naming every
// changed node) and checks every permission it needs. A run killed at any
// instant is resumed by calling Apply again with the same plan and journal:
// nodes already moved are skipped, a deleted node is recreated from its
// backup, a node its kubelet re-registered without podCIDRs gets them by the
// allowed update. Apply on a finished plan changes nothing.
//
// If a create keeps failing, Apply retries it until it succeeds or ctx ends
// (plus CreateGrace); a create refused for good (validation, admission) is
// retried a few times, then the node is restored with its old podCIDRs. Either
// way the run stops before touching the next node.
func Apply(ctx context.Context, client kubernetes.Interface, plan *Plan, opts ApplyOptions) (*Result, error) {
	if plan == nil {
		return nil, fmt.Errorf("%w: no plan", ErrInvalidPlan)
	}
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	switch opts.DryRun {
	case DryRunNone, DryRunClient, DryRunServer:
	default:
		return nil, fmt.Errorf("%w: dry run %q: want %q, %q or %q", ErrInvalidOptions, opts.DryRun, DryRunNone, DryRunClient, DryRunServer)
	}
	if opts.DryRun == DryRunNone && opts.JournalDir == "" {
		return nil, fmt.Errorf("%w: a journal directory is required to apply a plan", ErrInvalidOptions)
	}
	if opts.Concurrency < 0 {
		return nil, fmt.Errorf("%w: concurrency %d: want 1 or more", ErrInvalidOptions, opts.Concurrency)
	}
	if opts.RateLimit < 0 {
		return nil, fmt.Errorf("%w: rate limit %g: want 0 (no limit) or more", ErrInvalidOptions, opts.RateLimit)
	}
	if opts.CreateGrace < 0 {
		return nil, fmt.Errorf("%w: create grace %s: must not be negative", ErrInvalidOptions, opts.CreateGrace)
	}
	if opts.ClusterJournal != nil && opts.Lock == nil {
		return nil, fmt.Errorf("%w: a cluster journal needs a Lock: only the holder of the lock may write it", ErrInvalidOptions)
	}
	for i, h := range slices.Concat(opts.BeforeDelete, opts.Hooks) {
		if h.Run == nil {
			return nil, fmt.Errorf("%w: hook %d (%s) has no Run", ErrInvalidOptions, i, h.Name)
		}
		if h.Check != nil {
			if err := h.Check(); err != nil {
				return nil, fmt.Errorf("%w: hook %s: %w", ErrInvalidOptions, h.Name, err)
			}
		}
	}
	r := &runner{
		client:  client,
		plan:    plan,
		planID:  plan.ID(),
		opts:    opts,
		log:     logr.FromContextOrDiscard(ctx).WithValues("plan", plan.ID()),
		records: map[string]*nodeRecord{},
		result:  &Result{PlanID: plan.ID(), DryRun: opts.DryRun, Changed: []string{}, AlreadyDone: []string{}},
	}
	if opts.Lock != nil && !r.dry() {
		release, err := opts.Lock.Lock(ctx)
		if err != nil {
			return nil, fmt.Errorf("applying plan %s: taking the lock: %w", r.planID, err)
		}
		defer release()
	}
	if err := r.openJournal(ctx); err != nil {
		return nil, err
	}
	defer r.closeJournal()

	nodes, err := listNodes(ctx, client, ListOptions{}, opts.Retry)
	if err != nil {
		return nil, fmt.Errorf("applying plan %s: %w", r.planID, err)
	}
	// The plan may come from a file: hold it to the cluster as it is now
	// before the first write.
	if err := plan.CheckAgainst(nodes); err != nil {
		return r.result, err
	}
	byName := make(map[string]*corev1.Node, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	r.listed = byName
	var stale []Change
	var work []*Step
	for i := range plan.Steps {
		s := &plan.Steps[i]
		rec := r.records[s.Node]
		st, ch := r.classify(s, rec, byName[s.Node])
		switch {
		case ch != nil:
			stale = append(stale, *ch)
		case st == stateDone && (rec == nil || rec.Phase == PhaseDone):
			r.result.AlreadyDone = append(r.result.AlreadyDone, s.Node)
			r.emit(Event{Node: s.Node, Phase: PhaseSkipped, Message: "already has podCIDRs " + strings.Join(s.NewPodCIDRs, ",")})
		default:
			work = append(work, s)
		}
	}
	if len(stale) > 0 {
		return r.result, &StaleError{Changes: stale}
	}
	if len(work) == 0 {
		if r.j != nil && !r.dry() && len(plan.Steps) > 0 {
			if err := r.putRun(ctx); err != nil {
				return r.result, err
			}
			r.markSkippedDone(ctx)
			r.finishRun(ctx)
		}
		return r.result, nil
	}
	checks := make([]access.Check, 0, 8)
	for _, p := range RequiredPermissions(opts) {
		checks = append(checks, access.Check{Verb: p.Verb, Group: p.Group, Resource: p.Resource, Subresource: p.Subresource, Namespace: p.Namespace})
	}
	if err := access.Preflight(ctx, client, checks); err != nil {
		return r.result, fmt.Errorf("applying plan %s: %w", r.planID, err)
	}
	if opts.DryRun == DryRunClient {
		for _, s := range work {
			r.describe(s, byName[s.Node])
		}
		return r.result, nil
	}
	if r.j != nil && opts.DryRun == DryRunNone {
		if err := r.putRun(ctx); err != nil {
			return r.result, err
		}
		r.markSkippedDone(ctx)
	}

	var workers, controlPlane []*Step
	for _, s := range work {
		if s.ControlPlane {
			controlPlane = append(controlPlane, s)
		} else {
			workers = append(workers, s)
		}
	}
	limiter := flowcontrol.NewFakeAlwaysRateLimiter()
	if opts.RateLimit > 0 {
		limiter = flowcontrol.NewTokenBucketRateLimiter(float32(opts.RateLimit), 1)
	}
	conc := opts.Concurrency
	if conc == 0 {
		conc = DefaultConcurrency
	}
	r.runAll(ctx, workers, conc, limiter)
	if r.firstErr() == nil {
		r.runAll(ctx, controlPlane, 1, limiter)
	}
	slices.Sort(r.result.Changed)
	s := timing.Summarize(r.gaps)
	r.result.Gaps = GapSummary{Count: s.Count, P50: s.P50, P99: s.P99, Max: s.Max}
	if err := r.firstErr(); err != nil {
		return r.result, fmt.Errorf("applying plan %s stopped: %w", r.planID, err)
	}
	if err := ctx.Err(); err != nil {
		return r.result, fmt.Errorf("applying plan %s interrupted; apply it again to resume: %w", r.planID, err)
	}
	if !r.dry() {
		r.finishRun(ctx)
	}
	return r.result, nil
}

// finishRun ends the run's cluster journal once every step is done. A
// failure only leaves the records in the cluster: the next Apply of the plan
// finds nothing to do and finishes it again.
func (r *runner) finishRun(ctx context.Context) {
	if r.j == nil || r.opts.ClusterJournal == nil {
		return
	}
	if err := r.j.FinishRun(ctx, r.opts.ClusterJournal.Keep); err != nil {
		r.log.Info("finishing the cluster journal failed; its ConfigMaps stay until the next run of this plan", "err", err.Error())
	}
}

// checkLock returns nil when Apply holds no lock, is a dry run, or still
// holds its lock; what says which step is not taken ("not deleting node w1").
func (r *runner) checkLock(what string) error {
	if r.dry() {
		return nil
	}
	return lease.CheckHeld(r.opts.Lock, what)
}

type runner struct {
	client kubernetes.Interface
	plan   *Plan
	planID string
	opts   ApplyOptions
	log    logr.Logger
	j      *journal.Journal

	mu      sync.Mutex
	records map[string]*nodeRecord
	result  *Result
	gaps    []time.Duration
	// listed holds the Nodes of the run's initial LIST (read-only). The
	// first attempt at a node starts from it instead of a GET: the delete's
	// UID and resourceVersion preconditions refuse a node that changed since,
	// and only then is it read again.
	listed map[string]*corev1.Node
	errs   []error
	evMu   sync.Mutex
}

func (r *runner) dry() bool { return r.opts.DryRun != DryRunNone }

func (r *runner) openJournal(ctx context.Context) error {
	if r.opts.JournalDir == "" {
		return nil
	}
	if r.dry() {
		// A dry run only reads an existing journal, to preview a resume.
		if _, err := os.Stat(r.opts.JournalDir); err != nil {
			return nil
		}
	}
	var j *journal.Journal
	var err error
	if cj := r.opts.ClusterJournal; cj != nil && !r.dry() {
		j, err = journal.OpenCluster(ctx, r.opts.JournalDir, cj.options(r.client))
		if errors.Is(err, journal.ErrClusterRun) {
			err = fmt.Errorf("%w: %w", ErrJournalConflict, err)
		}
	} else {
		j, err = journal.Open(r.opts.JournalDir)
	}
	if err != nil {
		return fmt.Errorf("opening journal: %w", err)
	}
	r.j = j
	var run runRecord
	found, err := j.Get(runKey, &run)
	if err != nil {
		return err
	}
	keys, err := j.Keys("node/")
	if err != nil {
		return err
	}
	var foreign []string
	for _, k := range keys {
		var rec nodeRecord
		if ok, err := j.Get(k, &rec); err != nil || !ok {
			if err != nil {
				return err
			}
			continue
		}
		if rec.PlanID == r.planID {
			r.records[rec.Node] = &rec
		} else if rec.Phase != PhaseDone {
			foreign = append(foreign, fmt.Sprintf("%s (%s)", rec.Node, rec.Phase))
		}
	}
	if len(foreign) > 0 {
		other := "another plan"
		if found {
			other = "plan " + run.PlanID
		}
		return fmt.Errorf("%w: %s in %s has unfinished nodes %s; apply that plan again to finish it, or use another journal directory",
			ErrJournalConflict, other, r.opts.JournalDir, strings.Join(foreign, ", "))
	}
	return nil
}

// putRun records the plan in the journal before the first node is touched;
// a resumed run keeps the original record.
func (r *runner) putRun(ctx context.Context) error {
	var run runRecord
	if found, err := r.j.Get(runKey, &run); err == nil && found && run.PlanID == r.planID {
		return nil
	}
	return r.j.PutContext(ctx, runKey, runRecord{PlanID: r.planID, Plan: r.plan, Note: r.opts.Note, Started: time.Now().UTC()})
}

func (r *runner) closeJournal() {
	if r.j != nil {
		r.j.Close()
	}
}

// markSkippedDone records steps found done without a record, so the journal
// shows the whole plan finished.
func (r *runner) markSkippedDone(ctx context.Context) {
	if r.j == nil || r.dry() {
		return
	}
	for _, n := range r.result.AlreadyDone {
		if rec := r.record(n); rec == nil {
			_ = r.put(ctx, &nodeRecord{PlanID: r.planID, Node: n, Phase: PhaseDone})
		}
	}
}

func (r *runner) record(node string) *nodeRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.records[node]; rec != nil {
		c := *rec
		return &c
	}
	return nil
}

// forget drops the journal record of a node this run backed up but did not
// delete (someone else did), so a resumed run does not recreate it.
func (r *runner) forget(ctx context.Context, rec *nodeRecord) error {
	r.mu.Lock()
	delete(r.records, rec.Node)
	r.mu.Unlock()
	if r.j == nil || r.dry() {
		return nil
	}
	if err := r.j.DeleteContext(ctx, nodeKey(rec.Node)); err != nil {
		return fmt.Errorf("journal record for node %s: %w", rec.Node, err)
	}
	return nil
}

// put durably writes rec (and, with a cluster journal, to the cluster);
// dry runs write nothing.
func (r *runner) put(ctx context.Context, rec *nodeRecord) error {
	if r.dry() {
		return nil
	}
	rec.PlanID = r.planID
	rec.Updated = time.Now().UTC()
	c := *rec
	r.mu.Lock()
	r.records[rec.Node] = &c
	r.mu.Unlock()
	if r.j == nil {
		return nil
	}
	if err := r.j.PutContext(ctx, nodeKey(rec.Node), rec); err != nil {
		return fmt.Errorf("journal record for node %s (%s): %w", rec.Node, rec.Phase, err)
	}
	return nil
}

func (r *runner) emit(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.DryRun = e.DryRun || r.dry()
	if e.Err != nil {
		r.log.Info("node event", "node", e.Node, "phase", e.Phase, "message", e.Message, "err", e.Err.Error())
	} else {
		r.log.V(1).Info("node event", "node", e.Node, "phase", e.Phase, "message", e.Message, "gap", e.Gap)
	}
	if r.opts.OnEvent == nil {
		return
	}
	r.evMu.Lock()
	defer r.evMu.Unlock()
	r.opts.OnEvent(e)
}

func (r *runner) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *runner) firstErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.errs...)
}

func (r *runner) changed(node string, gap time.Duration, recreated bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.result.Changed = append(r.result.Changed, node)
	if recreated {
		r.gaps = append(r.gaps, gap)
	}
}

func (r *runner) runAll(ctx context.Context, steps []*Step, conc int, limiter flowcontrol.RateLimiter) {
	if len(steps) == 0 {
		return
	}
	ch := make(chan *Step)
	var wg sync.WaitGroup
	for range min(conc, len(steps)) {
		wg.Go(func() {
			for s := range ch {
				if r.firstErr() != nil || ctx.Err() != nil {
					continue // the run stops before touching another node
				}
				if err := r.process(ctx, s); err != nil {
					r.emit(Event{Node: s.Node, Phase: PhaseFailed, Err: err})
					r.fail(err)
				}
			}
		})
	}
	// refused is the limiter's refusal. It stops the nodes not yet handed
	// to a worker; a node already handed over got its token and moves, so
	// the refusal is recorded only once the workers are done (recorded at
	// once, a worker that had not yet looked at its node would skip it).
	var refused error
	for _, s := range steps {
		if r.firstErr() != nil || ctx.Err() != nil {
			break
		}
		// The limiter also refuses, before ctx is done, a wait that would
		// end after ctx's deadline: the run stops with an error, never
		// with nodes left unmoved and no error.
		if err := limiter.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				break // interrupted: Apply says so and how to resume
			}
			refused = fmt.Errorf("node %s not started: waiting for the rate limit (%v nodes a second): %w", s.Node, r.opts.RateLimit, err)
			break
		}
		select {
		case ch <- s:
		case <-ctx.Done():
		}
	}
	close(ch)
	wg.Wait()
	if refused != nil {
		r.fail(refused)
	}
}

type nodeState int

const (
	stateDone         nodeState = iota // the node has its new podCIDRs
	statePending                       // the node is as planned: recreate or patch it
	stateMissing                       // the node is gone and its backup is in the journal
	stateReregistered                  // the kubelet registered the node again, without podCIDRs
	stateReassigned                    // the node was registered again and got other podCIDRs
)

// classify compares a step with the node as it is now and what the journal
// says this run already did.
func (r *runner) classify(s *Step, rec *nodeRecord, cur *corev1.Node) (nodeState, *Change) {
	haveBackup := rec != nil && rec.Backup != nil
	if cur == nil {
		if rec != nil && rec.Phase == PhaseDone {
			return stateDone, nil // moved by this plan, deleted by someone since: not ours to resurrect
		}
		if haveBackup {
			return stateMissing, nil
		}
		return 0, &Change{Node: s.Node, Field: "existence", Planned: "uid " + string(s.UID), Current: "not found"}
	}
	now := PodCIDRsOf(cur)
	if sameCIDRs(now, s.NewPodCIDRs) {
		return stateDone, nil
	}
	expected := s.UID
	if rec != nil && rec.RestoredUID != "" {
		expected = rec.RestoredUID
	}
	if cur.UID == expected || (haveBackup && cur.UID == rec.Backup.UID) {
		if !sameCIDRs(now, s.OldPodCIDRs) {
			return 0, &Change{Node: s.Node, Field: "podCIDRs", Planned: cidrList(s.OldPodCIDRs), Current: cidrList(now)}
		}
		if r.opts.StrictResourceVersion && rec == nil && cur.ResourceVersion != s.ResourceVersion {
			return 0, &Change{Node: s.Node, Field: "resourceVersion", Planned: s.ResourceVersion, Current: cur.ResourceVersion}
		}
		return statePending, nil
	}
	if haveBackup {
		if len(now) == 0 {
			return stateReregistered, nil
		}
		return stateReassigned, nil
	}
	return 0, &Change{Node: s.Node, Field: "uid", Planned: string(s.UID), Current: string(cur.UID) + " (the node was deleted and created again)"}
}

func cidrList(c []string) string {
	if len(c) == 0 {
		return "none"
	}
	return strings.Join(c, ",")
}

// sameCIDRs compares podCIDR lists by the networks they denote.
func sameCIDRs(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] == b[i] {
			continue
		}
		pa, _, errA := cidr.ParseLenient(a[i])
		pb, _, errB := cidr.ParseLenient(b[i])
		if errA != nil || errB != nil || pa != pb {
			return false
		}
	}
	return true
}

// canonical returns podCIDRs in canonical form (strict validation refuses
// host bits on create), keeping anything unparsable as written.
func canonical(c []string) []string {
	out := make([]string, len(c))
	for i, t := range c {
		out[i] = t
		if p, _, err := cidr.ParseLenient(t); err == nil {
			out[i] = p.String()
		}
	}
	return out
}

// describe reports what a client-side dry run would do to one node.
func (r *runner) describe(s *Step, cur *corev1.Node) {
	ev := func(p Phase, msg string) { r.emit(Event{Node: s.Node, Phase: p, Message: msg, DryRun: true}) }
	rec := r.record(s.Node)
	st, _ := r.classify(s, rec, cur)
	switch {
	case st == stateDone:
		ev(PhaseVerified, "already has "+cidrList(s.NewPodCIDRs)+"; would finish its remaining steps")
	case st == stateMissing:
		ev(PhaseCreated, "is missing; would recreate it from the journal's backup with podCIDRs "+cidrList(s.NewPodCIDRs))
	case st == stateReregistered || s.Action == ActionPatch:
		ev(PhasePatched, "would set podCIDRs "+cidrList(s.NewPodCIDRs))
	default:
		if r.opts.Cordon && cur != nil && !cur.Spec.Unschedulable {
			ev(PhaseCordoned, "would cordon")
		}
		for _, h := range r.opts.BeforeDelete {
			ev(PhaseHook, "would run hook "+h.Name+" before the delete")
		}
		ev(PhaseBackedUp, "would write the full Node to the journal")
		ev(PhaseDeleted, "would delete uid "+string(cur.UID))
		ev(PhaseCreated, "would create it with podCIDRs "+cidrList(s.NewPodCIDRs)+" (was "+cidrList(s.OldPodCIDRs)+")")
	}
	for _, h := range r.opts.Hooks {
		ev(PhaseHook, "would run hook "+h.Name)
	}
	r.changed(s.Node, 0, false)
}

var (
	errRetryStep = errors.New("node changed; looking again")
	errReread    = errors.New("read the node again")
)

// process moves one node, re-reading it after conflicts. A run that lost
// its lock touches no further node.
func (r *runner) process(ctx context.Context, s *Step) error {
	if err := r.checkLock("not touching node " + s.Node); err != nil {
		return err
	}
	var last error
	for attempt := 0; attempt < 6; attempt++ {
		if attempt > 0 && !errors.Is(last, errReread) {
			r.emit(Event{Node: s.Node, Phase: PhaseRetrying, Err: last})
		}
		var cur *corev1.Node
		var err error
		if attempt == 0 && r.listed[s.Node] != nil {
			cur = r.listed[s.Node]
		} else if cur, err = r.get(ctx, s.Node); err != nil {
			return err
		}
		rec := r.record(s.Node)
		st, ch := r.classify(s, rec, cur)
		if ch != nil {
			return &StaleError{Changes: []Change{*ch}}
		}
		switch st {
		case stateDone:
			if rec == nil || rec.Phase == PhaseDone {
				r.mu.Lock()
				r.result.AlreadyDone = append(r.result.AlreadyDone, s.Node)
				r.mu.Unlock()
				r.emit(Event{Node: s.Node, Phase: PhaseSkipped, Message: "already has podCIDRs " + cidrList(s.NewPodCIDRs)})
				return nil
			}
			if r.dry() {
				r.changed(s.Node, 0, false)
				return nil
			}
			if rec.Phase != PhaseCreated {
				// Crash after the create was accepted, before it was recorded.
				rec.Phase, rec.NewUID = PhaseCreated, cur.UID
				if !rec.DeleteStarted.IsZero() {
					rec.Gap = time.Since(rec.DeleteStarted)
				}
				if err := r.put(ctx, rec); err != nil {
					return err
				}
			}
			err = r.finish(ctx, s, rec, cur)
			r.changed(s.Node, rec.Gap, rec.Gap > 0)
			return err
		case statePending:
			if s.Action == ActionPatch {
				err = r.patchEmpty(ctx, s, rec, cur, nil)
			} else {
				err = r.recreate(ctx, s, rec, cur)
			}
		case stateMissing:
			err = r.createAndFinish(ctx, nil, s, rec)
		case stateReregistered:
			err = r.patchEmpty(ctx, s, rec, cur, rec.Backup)
		case stateReassigned:
			err = r.deleteReregistered(ctx, s, rec, cur)
		}
		if !errors.Is(err, errRetryStep) && !errors.Is(err, errReread) {
			return err
		}
		last = err
	}
	return fmt.Errorf("node %s kept changing under the run: %w", s.Node, last)
}

// get reads a node, retrying transient errors; a missing node is (nil, nil).
func (r *runner) get(ctx context.Context, name string) (*corev1.Node, error) {
	var n *corev1.Node
	err := retryTransient(ctx, r.opts.Retry, "get node "+name, func(ctx context.Context) error {
		var err error
		n, err = r.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return n, nil
}

func (r *runner) dryRunOpt() []string {
	if r.opts.DryRun == DryRunServer {
		return []string{metav1.DryRunAll}
	}
	return nil
}

func (r *runner) patch(ctx context.Context, name string, body any) (*corev1.Node, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	var out *corev1.Node
	err = retryTransient(ctx, r.opts.Retry, "patch node "+name, func(ctx context.Context) error {
		var err error
		out, err = r.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{DryRun: r.dryRunOpt()})
		return err
	})
	return out, err
}

// recreate cordons, backs up, deletes and creates one node.
func (r *runner) recreate(ctx context.Context, s *Step, rec *nodeRecord, cur *corev1.Node) error {
	if rec == nil {
		rec = &nodeRecord{Node: s.Node, WasUnschedulable: cur.Spec.Unschedulable}
	}
	if r.opts.Cordon && !cur.Spec.Unschedulable {
		if !rec.Cordoned {
			// Recorded before the patch; a resumed run keeps the first answer.
			rec.Cordoned, rec.WasUnschedulable = true, false
		}
		rec.Phase = PhaseCordoned
		if err := r.put(ctx, rec); err != nil {
			return err
		}
		patched, err := r.patch(ctx, s.Node, map[string]any{"spec": map[string]any{"unschedulable": true}})
		if err != nil {
			return fmt.Errorf("cordoning node %s: %w", s.Node, err)
		}
		r.emit(Event{Node: s.Node, Phase: PhaseCordoned})
		if !r.dry() {
			// The backup must be exactly what is deleted: the patched Node as
			// stored; if a controller changes it before the delete (the node
			// lifecycle controller adds the unschedulable taint), the delete's
			// resourceVersion precondition fails and the node is read again.
			if patched == nil || patched.UID != cur.UID {
				return errReread
			}
			cur = patched
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !r.dry() {
		for _, h := range r.opts.BeforeDelete {
			if err := r.checkLock("not running hook " + h.Name + " before deleting node " + s.Node); err != nil {
				return err
			}
			if err := h.Run(ctx, cur.DeepCopy()); err != nil {
				return fmt.Errorf("hook %s before deleting node %s (the node was not deleted; apply again to rerun it): %w", h.Name, s.Node, err)
			}
			r.emit(Event{Node: s.Node, Phase: PhaseHook, Message: h.Name + " (before the delete)"})
		}
	}
	if err := r.checkLock("not deleting node " + s.Node); err != nil {
		return err
	}
	rec.Backup = cur.DeepCopy()
	rec.Phase = PhaseBackedUp
	rec.DeleteStarted = time.Now().UTC()
	if err := r.put(ctx, rec); err != nil {
		return fmt.Errorf("not deleting node %s, its backup could not be written: %w", s.Node, err)
	}
	r.emit(Event{Node: s.Node, Phase: PhaseBackedUp})
	// From the delete on, the node must come back even if ctx ends.
	cctx, cancel := r.graceContext(ctx)
	defer cancel()
	uid, rv := cur.UID, cur.ResourceVersion
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}, DryRun: r.dryRunOpt()}
	tried := false
	err := retryTransient(cctx, r.opts.Retry, "delete node "+s.Node, func(ctx context.Context) error {
		err := r.client.CoreV1().Nodes().Delete(ctx, s.Node, opts)
		if apierrors.IsNotFound(err) && tried {
			return nil // an earlier attempt went through
		}
		tried = true
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		// Deleted by someone else after it was read: not ours to bring back.
		// Forget the backup and look again; a node that is still missing is
		// reported as a stale plan.
		if derr := r.forget(cctx, rec); derr != nil {
			return derr
		}
		return errReread
	case apierrors.IsConflict(err):
		return fmt.Errorf("%w: delete of node %s: %v", errRetryStep, s.Node, err)
	case err != nil && (IsTransient(err) || cctx.Err() != nil):
		// The outcome is unknown: the node may be gone. Make sure it exists
		// again; if it was never deleted, the create finds it and the node is
		// looked at afresh.
		r.emit(Event{Node: s.Node, Phase: PhaseRetrying, Message: "delete outcome unknown, making sure the node exists", Err: err})
		return r.createAndFinish(ctx, cctx, s, rec)
	case err != nil:
		return fmt.Errorf("deleting node %s (nothing lost, it was not deleted): %w", s.Node, err)
	}
	r.emit(Event{Node: s.Node, Phase: PhaseDeleted, Message: "uid " + string(uid)})
	return r.createAndFinish(ctx, cctx, s, rec)
}

// graceContext returns the context of a critical section: it survives the
// end of ctx by CreateGrace.
func (r *runner) graceContext(ctx context.Context) (context.Context, context.CancelFunc) {
	grace := r.opts.CreateGrace
	if grace <= 0 {
		grace = DefaultCreateGrace
	}
	return graceContext(ctx, grace)
}

// graceContext is ctx detached from its cancellation, ending grace after ctx ends.
func graceContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var timer *time.Timer
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		timer = time.AfterFunc(grace, cancel)
	})
	return gctx, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// createAndFinish creates the node from its backup in the critical-section
// context cctx (made from ctx when nil) and then finishes it under ctx.
func (r *runner) createAndFinish(ctx, cctx context.Context, s *Step, rec *nodeRecord) error {
	if cctx == nil {
		var cancel context.CancelFunc
		cctx, cancel = r.graceContext(ctx)
		defer cancel()
	}
	created, err := r.create(cctx, s, rec)
	if err != nil {
		return err
	}
	if created == nil { // handed over to patchEmpty, which finished the node
		return nil
	}
	if r.dry() {
		r.emit(Event{Node: s.Node, Phase: PhaseCreated, Message: "create accepted with podCIDRs " + cidrList(s.NewPodCIDRs)})
		r.changed(s.Node, 0, false)
		return nil
	}
	gap := time.Duration(0)
	if !rec.DeleteStarted.IsZero() {
		gap = time.Since(rec.DeleteStarted)
	}
	rec.Phase, rec.NewUID, rec.Gap = PhaseCreated, created.UID, gap
	var jerr error
	if len(r.opts.Hooks) > 0 || rec.Cordoned {
		jerr = r.put(cctx, rec) // work remains before done: uncordon, hooks
	}
	msg := fmt.Sprintf("uid %s, podCIDRs %s", created.UID, cidrList(s.NewPodCIDRs))
	if gap > PodGCQuarantine/2 {
		msg += fmt.Sprintf("; the node was absent %s, close to the pod GC's %s", gap.Round(time.Millisecond), PodGCQuarantine)
	}
	r.emit(Event{Node: s.Node, Phase: PhaseCreated, Gap: gap, Message: msg})
	r.changed(s.Node, gap, true)
	if jerr != nil {
		return jerr
	}
	return r.finish(ctx, s, rec, created)
}

// create creates the node from rec.Backup with the new podCIDRs, retrying
// until it exists or ctx ends. It returns (nil, nil) when the node was
// re-registered by its kubelet and handed to patchEmpty.
func (r *runner) create(ctx context.Context, s *Step, rec *nodeRecord) (*corev1.Node, error) {
	obj := newNodeFrom(rec.Backup, s.NewPodCIDRs, r.opts.EmptyStatus)
	wait := r.opts.Retry.initial()
	permanent, redeleted := 0, 0
	for {
		created, err := r.client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{DryRun: r.dryRunOpt()})
		if err == nil {
			return created, nil
		}
		switch {
		case apierrors.IsAlreadyExists(err) && r.dry():
			return obj, nil // expected: the dry-run delete left the node in place
		case apierrors.IsAlreadyExists(err):
			cur, gerr := r.get(ctx, s.Node)
			switch {
			case gerr != nil:
				err = gerr
			case cur == nil:
				// deleted again meanwhile: create after the wait
			case sameCIDRs(PodCIDRsOf(cur), s.NewPodCIDRs):
				return cur, nil // an earlier attempt was accepted
			case cur.UID == rec.Backup.UID:
				return nil, fmt.Errorf("%w: node %s still exists as backed up", errRetryStep, s.Node)
			case len(PodCIDRsOf(cur)) == 0:
				return nil, r.patchEmpty(ctx, s, rec, cur, rec.Backup)
			case redeleted < 3:
				// Registered again by its kubelet and given podCIDRs by
				// kube-controller-manager meanwhile: only a delete clears them.
				redeleted++
				derr := r.deleteExact(ctx, cur)
				if derr == nil || apierrors.IsNotFound(derr) || apierrors.IsConflict(derr) {
					r.emit(Event{Node: s.Node, Phase: PhaseDeleted, Message: fmt.Sprintf("re-registered incarnation uid %s with podCIDRs %s", cur.UID, cidrList(PodCIDRsOf(cur)))})
					continue
				}
				err = derr
			default:
				return nil, fmt.Errorf("%w: node %s keeps being registered with podCIDRs %s; its backup is in journal %s",
					ErrNodeNotRecreated, s.Node, cidrList(PodCIDRsOf(cur)), r.opts.JournalDir)
			}
		case !IsTransient(err) && r.dry():
			return nil, fmt.Errorf("dry-run create of node %s with podCIDRs %s: %w", s.Node, cidrList(s.NewPodCIDRs), err)
		case !IsTransient(err):
			permanent++
			if permanent >= 3 {
				return nil, r.restore(ctx, s, rec, err)
			}
		}
		r.emit(Event{Node: s.Node, Phase: PhaseRetrying, Message: "create", Err: err})
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: node %s: %w (last error: %v); its full manifest is in journal %s, apply the plan again to recreate it",
				ErrNodeNotRecreated, s.Node, ctx.Err(), err, r.opts.JournalDir)
		case <-t.C:
		}
		wait = min(wait*2, r.opts.Retry.max())
	}
}

// restore brings a node back with its old podCIDRs after its create was
// refused for good, so nothing is lost, and stops the run.
func (r *runner) restore(ctx context.Context, s *Step, rec *nodeRecord, cause error) error {
	obj := newNodeFrom(rec.Backup, canonical(s.OldPodCIDRs), r.opts.EmptyStatus)
	var created *corev1.Node
	err := retryUntil(ctx, r.opts.Retry, "restore node "+s.Node, time.Time{}, IsTransient, func(ctx context.Context) error {
		var err error
		created, err = r.client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{DryRun: r.dryRunOpt()})
		return err
	})
	if err != nil {
		return fmt.Errorf("%w: node %s: creating it with podCIDRs %s was refused (%v), and restoring it with %s failed too: %w; its full manifest is in journal %s",
			ErrNodeNotRecreated, s.Node, cidrList(s.NewPodCIDRs), cause, cidrList(s.OldPodCIDRs), err, r.opts.JournalDir)
	}
	rec.Phase, rec.RestoredUID = PhaseRestored, created.UID
	jerr := r.put(ctx, rec)
	r.emit(Event{Node: s.Node, Phase: PhaseRestored, Message: "recreated with its old podCIDRs " + cidrList(s.OldPodCIDRs), Err: cause})
	return errors.Join(fmt.Errorf("node %s: creating it with podCIDRs %s was refused: %w; it was restored with its old podCIDRs %s, nothing is lost; fix the cause and apply again",
		s.Node, cidrList(s.NewPodCIDRs), cause, cidrList(s.OldPodCIDRs)), jerr)
}

// deleteExact deletes exactly this incarnation of a node.
func (r *runner) deleteExact(ctx context.Context, n *corev1.Node) error {
	uid := n.UID
	return retryTransient(ctx, r.opts.Retry, "delete node "+n.Name, func(ctx context.Context) error {
		return r.client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, DryRun: r.dryRunOpt()})
	})
}

// deleteReregistered handles a node that was registered again during the run
// and already has other podCIDRs: delete that incarnation and create the
// backup with the planned podCIDRs.
func (r *runner) deleteReregistered(ctx context.Context, s *Step, rec *nodeRecord, cur *corev1.Node) error {
	if err := r.checkLock("not deleting node " + s.Node); err != nil {
		return err
	}
	if err := r.deleteExact(ctx, cur); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("%w: %v", errRetryStep, err)
		}
		return fmt.Errorf("deleting re-registered node %s: %w", s.Node, err)
	}
	r.emit(Event{Node: s.Node, Phase: PhaseDeleted, Message: fmt.Sprintf("re-registered incarnation uid %s with podCIDRs %s", cur.UID, cidrList(PodCIDRsOf(cur)))})
	return r.createAndFinish(ctx, nil, s, rec)
}

// patchEmpty sets the podCIDRs of a node that has none: the one update the API
// server allows. With a backup (the kubelet registered the node again while
// it was absent) it also restores the labels, annotations, taints,
// unschedulable and providerID of the backup that the new incarnation lacks.
func (r *runner) patchEmpty(ctx context.Context, s *Step, rec *nodeRecord, cur *corev1.Node, backup *corev1.Node) error {
	meta := map[string]any{"resourceVersion": cur.ResourceVersion}
	spec := map[string]any{"podCIDR": s.NewPodCIDRs[0], "podCIDRs": s.NewPodCIDRs}
	if backup != nil {
		if add := missingKeys(backup.Labels, cur.Labels); len(add) > 0 {
			meta["labels"] = add
		}
		if add := missingKeys(backup.Annotations, cur.Annotations); len(add) > 0 {
			meta["annotations"] = add
		}
		taints := slices.Clone(cur.Spec.Taints)
		for _, t := range backup.Spec.Taints {
			if !slices.ContainsFunc(taints, func(c corev1.Taint) bool { return c.Key == t.Key && c.Effect == t.Effect }) {
				taints = append(taints, t)
			}
		}
		if len(taints) != len(cur.Spec.Taints) {
			spec["taints"] = taints
		}
		if backup.Spec.Unschedulable && !cur.Spec.Unschedulable {
			spec["unschedulable"] = true
		}
		if cur.Spec.ProviderID == "" && backup.Spec.ProviderID != "" {
			spec["providerID"] = backup.Spec.ProviderID
		}
	}
	out, err := r.patch(ctx, s.Node, map[string]any{"metadata": meta, "spec": spec})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%w: %v", errRetryStep, err)
	}
	if err != nil {
		return fmt.Errorf("setting podCIDRs of node %s: %w", s.Node, err)
	}
	msg := "podCIDRs " + cidrList(s.NewPodCIDRs)
	if backup != nil {
		msg += "; the kubelet had registered the node again, the backup's metadata was merged back"
	}
	r.emit(Event{Node: s.Node, Phase: PhasePatched, Message: msg})
	if r.dry() {
		r.changed(s.Node, 0, false)
		return nil
	}
	if rec == nil {
		rec = &nodeRecord{Node: s.Node, WasUnschedulable: cur.Spec.Unschedulable}
	}
	gap := time.Duration(0)
	if backup != nil && !rec.DeleteStarted.IsZero() {
		gap = time.Since(rec.DeleteStarted)
	}
	rec.Phase, rec.NewUID, rec.Gap = PhaseCreated, out.UID, gap
	if err := r.put(ctx, rec); err != nil {
		return err
	}
	r.changed(s.Node, gap, backup != nil)
	return r.finish(ctx, s, rec, out)
}

func missingKeys(want, have map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range want {
		if _, ok := have[k]; !ok {
			out[k] = v
		}
	}
	return out
}

// finish verifies a node that has its new podCIDRs, uncordons it if the run
// cordoned it, runs the hooks and marks it done.
//
// cur is the Node as the API server returned it from the create or patch
// that gave it its podCIDRs (or as read, on a resumed run): it is what is
// stored, so it is verified without reading it again.
func (r *runner) finish(ctx context.Context, s *Step, rec *nodeRecord, cur *corev1.Node) error {
	got := cur
	if got == nil {
		return fmt.Errorf("%w: node %s: no object to verify", ErrVerify, s.Node)
	}
	if !sameCIDRs(PodCIDRsOf(got), s.NewPodCIDRs) {
		return fmt.Errorf("%w: node %s has podCIDRs %s, want %s", ErrVerify, s.Node, cidrList(PodCIDRsOf(got)), cidrList(s.NewPodCIDRs))
	}
	if rec.Backup != nil {
		if lost, _ := metadataDiff(rec.Backup, got); len(lost) > 0 {
			return fmt.Errorf("%w: node %s: %s", ErrVerify, s.Node, strings.Join(lost, "; "))
		}
	}
	r.emit(Event{Node: s.Node, Phase: PhaseVerified})
	if rec.Cordoned && !rec.WasUnschedulable && got.Spec.Unschedulable {
		uncordoned, err := r.patch(ctx, s.Node, map[string]any{"spec": map[string]any{"unschedulable": false}})
		if err != nil {
			return fmt.Errorf("uncordoning node %s: %w", s.Node, err)
		}
		r.emit(Event{Node: s.Node, Phase: PhaseUncordoned})
		if uncordoned != nil {
			got = uncordoned
		}
	}
	for _, h := range r.opts.Hooks {
		if h.Run == nil {
			continue
		}
		if err := r.checkLock("not running hook " + h.Name + " on node " + s.Node); err != nil {
			return err
		}
		if err := h.Run(ctx, got.DeepCopy()); err != nil {
			return fmt.Errorf("hook %s on node %s (the node has its new podCIDRs; apply again to rerun the hook): %w", h.Name, s.Node, err)
		}
		r.emit(Event{Node: s.Node, Phase: PhaseHook, Message: h.Name})
	}
	rec.Phase = PhaseDone
	if err := r.put(ctx, rec); err != nil {
		return err
	}
	r.emit(Event{Node: s.Node, Phase: PhaseDone})
	return nil
}

// managedTaints are set and cleared by the node lifecycle controller and the
// kubelet; they are not compared with the backup.
var managedTaints = []string{
	"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable", "node.kubernetes.io/unschedulable",
	"node.kubernetes.io/memory-pressure", "node.kubernetes.io/disk-pressure", "node.kubernetes.io/pid-pressure",
	"node.kubernetes.io/network-unavailable", "node.cloudprovider.kubernetes.io/uninitialized",
}

// metadataDiff compares a node with its backup: lost lists labels,
// annotations, taints (except those controllers manage) and a providerID the
// backup had and n lacks; changed lists labels and annotations n has with
// another value.
func metadataDiff(backup, n *corev1.Node) (lost, changed []string) {
	cmpMap := func(what string, want, have map[string]string) {
		keys := make([]string, 0, len(want))
		for k := range want {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v, ok := have[k]
			switch {
			case !ok:
				lost = append(lost, fmt.Sprintf("%s %s=%q was lost", what, k, want[k]))
			case v != want[k]:
				changed = append(changed, fmt.Sprintf("%s %s changed from %q to %q", what, k, want[k], v))
			}
		}
	}
	cmpMap("label", backup.Labels, n.Labels)
	cmpMap("annotation", backup.Annotations, n.Annotations)
	for _, t := range backup.Spec.Taints {
		if slices.Contains(managedTaints, t.Key) {
			continue
		}
		if !slices.ContainsFunc(n.Spec.Taints, func(c corev1.Taint) bool {
			return c.Key == t.Key && c.Effect == t.Effect && c.Value == t.Value
		}) {
			lost = append(lost, fmt.Sprintf("taint %s was lost", t.ToString()))
		}
	}
	if backup.Spec.ProviderID != n.Spec.ProviderID {
		lost = append(lost, fmt.Sprintf("providerID changed from %q to %q", backup.Spec.ProviderID, n.Spec.ProviderID))
	}
	return lost, changed
}
