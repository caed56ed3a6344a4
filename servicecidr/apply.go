package servicecidr

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
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

// DryRun selects a dry-run mode.
type DryRun string

// The dry-run modes.
const (
	// DryRunNone changes the cluster.
	DryRunNone DryRun = ""
	// DryRunClient only reports what would be done; nothing is sent.
	DryRunClient DryRun = "client"
	// DryRunServer sends every write with dryRun=All: the API server
	// validates and admits it but stores nothing.
	DryRunServer DryRun = "server"
)

// EventKind says what an Event reports.
type EventKind string

// The progress events Apply emits.
const (
	EventServiceCIDRCreated   EventKind = "servicecidr-created"
	EventServiceCIDRReady     EventKind = "servicecidr-ready"
	EventServiceCIDRDeleting  EventKind = "servicecidr-delete-requested"
	EventServiceCIDRGone      EventKind = "servicecidr-deleted"
	EventServiceCIDRHeld      EventKind = "servicecidr-still-held"
	EventServiceDeleted       EventKind = "service-deleted"
	EventServiceCreated       EventKind = "service-created"
	EventServiceAlreadyMoved  EventKind = "service-already-moved"
	EventServiceRecovered     EventKind = "service-recovered"
	EventRetry                EventKind = "retry"
	EventFallback             EventKind = "fallback"
	EventKubernetesDeleted    EventKind = "kubernetes-service-deleted"
	EventKubernetesRecreated  EventKind = "kubernetes-service-recreated"
	EventWarning              EventKind = "warning"
	EventDryRunServiceMove    EventKind = "dry-run-service-move"
	EventDryRunServiceCIDROp  EventKind = "dry-run-servicecidr"
	EventAccessChecked        EventKind = "access-checked"
	EventPlanChecked          EventKind = "plan-checked"
	EventKubernetesLeftAlone  EventKind = "kubernetes-service-left"
	EventServiceCreateSkipped EventKind = "service-create-not-checked"
	// EventKubernetesAwaited: default/kubernetes is absent (an earlier run
	// deleted it) and Apply waits for kube-apiserver to recreate it.
	EventKubernetesAwaited EventKind = "kubernetes-service-awaited"
)

// Event is one step of Apply, delivered to ApplyOptions.Progress.
type Event struct {
	Time        time.Time     `json:"time"`
	Kind        EventKind     `json:"kind"`
	Service     string        `json:"service,omitempty"`
	ServiceCIDR string        `json:"serviceCIDR,omitempty"`
	OldIPs      []netip.Addr  `json:"oldIPs,omitempty"`
	NewIPs      []netip.Addr  `json:"newIPs,omitempty"`
	Gap         time.Duration `json:"gap,omitempty"`
	Message     string        `json:"message,omitempty"`
	DryRun      DryRun        `json:"dryRun,omitempty"`
}

// ApplyOptions tunes Apply.
type ApplyOptions struct {
	// JournalDir is required unless DryRun is set: every Service is recorded
	// there, fsynced, before it is deleted, so a run killed at any instant is
	// resumed by running Apply again with the same directory.
	JournalDir string
	DryRun     DryRun
	// Progress receives every event. Calls are serialised; it must not block long.
	Progress func(Event)
	// Concurrency bounds how many Services move at once after the DNS
	// Service; default 4.
	Concurrency int
	// QPS and Burst limit how many Service moves start per second; default 10 and 10.
	QPS   float32
	Burst int
	// DeleteOld marks the plan's old ServiceCIDRs for deletion after the new
	// one is Ready and before Services move (the documented procedure). They
	// stay Terminating until nothing depends on them. Each is recorded in the
	// journal, as it was, before its delete.
	DeleteOld bool
	// DrainTimeout, with DeleteOld, waits this long for the old ServiceCIDRs
	// to go away and reports what still holds them.
	DrainTimeout time.Duration
	// DeleteKubernetesService deletes default/kubernetes last so that
	// kube-apiserver recreates it in the new range. Only set it once every
	// kube-apiserver runs with the new --service-cluster-ip-range: before that
	// it comes back at its old address.
	DeleteKubernetesService bool
	// ReadyTimeout bounds the wait for the new ServiceCIDR to become Ready,
	// and for kube-apiserver to recreate default/kubernetes; default 2m.
	ReadyTimeout time.Duration
	// RetryTimeout bounds the retries of a create refused because the new
	// address is not yet allocatable; default 1m.
	RetryTimeout time.Duration
	// PollInterval is the first backoff step and the poll period; default 1s.
	PollInterval time.Duration
	// Lock, when set, is taken before the first write and held until Apply
	// returns (dry runs do not take it); Apply checks it is still held
	// before each delete (a Service, an old ServiceCIDR, default/kubernetes)
	// and stops the run when it is not. Use the Lease of LockScope.
	Lock Locker
	// ClusterJournal, when set, keeps a copy of every journal record in
	// ConfigMaps of the cluster, so that a run whose machine is lost is
	// resumed from another one with another JournalDir. It needs Lock.
	ClusterJournal *ClusterJournal
}

// LockScope names the Lease that serialises Service CIDR moves across
// operators, and the cluster journal of their runs.
const LockScope = lease.ScopeServiceCIDR

// Locker is a cluster-wide lock such as a coordination.k8s.io Lease.
type Locker interface {
	// Lock takes the lock, or fails at once when another run holds it, and
	// returns the function that releases it. The holder may call it again.
	Lock(ctx context.Context) (release func(), err error)
	// Check returns nil while the lock is still held; Apply calls it
	// before each delete, Create, AddFamily and Delete before their write.
	Check() error
}

// ClusterJournal is where Apply keeps the copy of its journal: ConfigMaps
// in Namespace labelled journal.cidrshift.io/scope=Name, one key per record
// (each Service and old ServiceCIDR as it was before its delete,
// default/kubernetes's record), written after the local record and before
// the delete it guards, 256 KiB of records per ConfigMap (a larger record
// gets one of its own). When a run ends with every Service
// moved, its ConfigMaps are deleted but the first, which stays emptied and
// labelled journal.cidrshift.io/state=finished. RBAC: get, list, create,
// update and delete on configmaps in Namespace.
type ClusterJournal struct {
	// Namespace holds the ConfigMaps; empty means kube-system.
	Namespace string
	// Name is the journal's scope; empty means LockScope.
	Name string
	// Keep keeps a finished run's records, labelled finished.
	Keep bool
}

func (c *ClusterJournal) options(client kubernetes.Interface) *journal.ClusterOptions {
	if c == nil {
		return nil
	}
	return journal.ClusterIn(client, c.Namespace, c.Name, LockScope, lease.Identity())
}

// Result is what Apply did.
type Result struct {
	DryRun DryRun `json:"dryRun,omitempty"`
	// Target is the ServiceCIDR Services moved into.
	Target *ServiceCIDR `json:"target,omitempty"`
	// Moved are the Services recreated (or, in a dry run, that would be).
	Moved []Moved `json:"moved"`
	// AlreadyMoved are Services an earlier run had moved.
	AlreadyMoved []string `json:"alreadyMoved,omitempty"`
	// Gaps summarises how long Services were absent (delete sent to create
	// answered), over those moved in this run.
	Gaps GapSummary `json:"gaps"`
	// Old explains each old ServiceCIDR marked for deletion.
	Old []DeletionReport `json:"old,omitempty"`
	// Kubernetes says what happened to default/kubernetes.
	Kubernetes string   `json:"kubernetes,omitempty"`
	Warnings   []string `json:"warnings,omitempty"`
}

// Moved is one Service Apply recreated.
type Moved struct {
	Service string       `json:"service"`
	OldUID  types.UID    `json:"oldUID,omitempty"`
	NewUID  types.UID    `json:"newUID,omitempty"`
	OldIPs  []netip.Addr `json:"oldIPs"`
	NewIPs  []netip.Addr `json:"newIPs"`
	// Gap is how long the Service was absent: from the delete request to the
	// create's answer (an upper bound). Zero when resumed from the journal.
	Gap     time.Duration `json:"gap,omitempty"`
	Resumed bool          `json:"resumed,omitempty"`
	Note    string        `json:"note,omitempty"`
}

// GapSummary is the distribution of Service absence times.
type GapSummary struct {
	Count int           `json:"count"`
	P50   time.Duration `json:"p50"`
	P99   time.Duration `json:"p99"`
	Max   time.Duration `json:"max"`
}

const (
	phasePending = "pending" // recorded, delete about to be sent (or sent)
	phaseDone    = "done"
)

// record is the journal entry of one Service, written before its delete.
type record struct {
	Phase              string          `json:"phase"`
	Service            string          `json:"service"`
	OldUID             types.UID       `json:"oldUID"`
	OldResourceVersion string          `json:"oldResourceVersion"`
	OldIPs             []netip.Addr    `json:"oldIPs"`
	NewIPs             []netip.Addr    `json:"newIPs"`
	NewUID             types.UID       `json:"newUID,omitempty"`
	Original           *corev1.Service `json:"original"`
	Desired            *corev1.Service `json:"desired"`
	Note               string          `json:"note,omitempty"`
	Recorded           time.Time       `json:"recorded"`
	Done               *time.Time      `json:"done,omitempty"`
}

func journalKey(service string) string { return "service/" + service }

// serviceCIDRRecord is the journal entry of an old ServiceCIDR, written
// before its delete is requested. Nothing recreates a ServiceCIDR from it:
// it keeps what was deleted, for the operator.
type serviceCIDRRecord struct {
	ServiceCIDR string `json:"serviceCIDR"`
	// APIVersion is the version Object was read in (typed objects carry no
	// apiVersion of their own).
	APIVersion string `json:"apiVersion"`
	// Object is the live object as the API server returned it, without
	// managedFields.
	Object   any       `json:"object"`
	Recorded time.Time `json:"recorded"`
}

func serviceCIDRJournalKey(name string) string { return "servicecidr/" + name }

type applier struct {
	c       *Client
	p       *Plan
	o       ApplyOptions
	j       *journal.Journal
	log     logr.Logger
	limiter flowcontrol.RateLimiter

	mu        sync.Mutex
	res       *Result
	gaps      []time.Duration
	targetR   bool            // target ServiceCIDR exists and is Ready (for server dry-run)
	recovered map[string]bool // Services recovered from the journal in this run
	// kubeJournaled is the default/kubernetes record an earlier run left
	// pending (it deleted the Service and did not see it recreated); kubeLive
	// is the recreated object when recovery found one (the record is then
	// marked done), nil while the Service is absent.
	kubeJournaled *kubernetesRecord
	kubeLive      *corev1.Service
}

// Apply carries out a plan: it checks the caller's permissions, recovers
// any Service an interrupted run left deleted, refuses a stale plan, creates
// the new ServiceCIDR and waits until it is Ready, optionally marks the old
// ones for deletion, then recreates the Services (DNS first) with their new
// ClusterIPs, journaling each before its delete. Running it again on a
// finished plan does nothing.
func (c *Client) Apply(ctx context.Context, p *Plan, opts ApplyOptions) (*Result, error) {
	if p == nil {
		return nil, &FieldError{Field: "plan", Reason: "no plan", Err: ErrInvalid}
	}
	if err := p.Check(); err != nil {
		return nil, err
	}
	switch opts.DryRun {
	case DryRunNone, DryRunClient, DryRunServer:
	default:
		return nil, &FieldError{Field: "--dry-run", Value: string(opts.DryRun), Reason: "valid values are client and server", Err: ErrInvalid}
	}
	if opts.DryRun == DryRunNone && opts.JournalDir == "" {
		return nil, &FieldError{Field: "--journal", Reason: "a journal directory is required to apply: each Service is recorded there before it is deleted, so a crash loses nothing", Err: ErrInvalid}
	}
	if opts.ClusterJournal != nil && opts.Lock == nil {
		return nil, &FieldError{Field: "ClusterJournal", Reason: "a cluster journal needs a Lock: only the holder of the lock may write it", Err: ErrInvalid}
	}
	a := newApplier(ctx, c, p, opts)
	defer a.summarise() // a.res is returned, also on error
	if p.ServiceCIDRAPI != "" && p.ServiceCIDRAPI != c.version {
		a.warn(fmt.Sprintf("the plan was made against ServiceCIDR %s, the cluster now serves %s", p.ServiceCIDRAPI, c.version))
	}
	if opts.DryRun == DryRunNone {
		release, err := lease.Hold(ctx, opts.Lock)
		if err != nil {
			return nil, err
		}
		defer release()
		j, err := journal.OpenWithCluster(ctx, opts.JournalDir, opts.ClusterJournal.options(c.kube))
		if err != nil {
			return nil, fmt.Errorf("opening journal: %w", err)
		}
		defer j.Close()
		a.j = j
	}
	if opts.DryRun != DryRunClient {
		if err := access.Preflight(ctx, c.kube, a.checks()); err != nil {
			return nil, err
		}
		a.emit(Event{Kind: EventAccessChecked, Message: "every permission apply needs is granted"})
	}
	if err := a.recoverJournal(ctx); err != nil {
		return a.res, err
	}
	todo, err := a.checkStale(ctx)
	if err != nil {
		return a.res, err
	}
	a.emit(Event{Kind: EventPlanChecked, Message: fmt.Sprintf("plan matches the cluster: %d Service(s) to move, %d already moved", len(todo), len(a.res.AlreadyMoved))})
	if err := a.ensureTarget(ctx); err != nil {
		return a.res, err
	}
	if opts.DeleteOld {
		if err := a.deleteOld(ctx); err != nil {
			return a.res, err
		}
	}
	if err := a.moveAll(ctx, todo); err != nil {
		return a.res, err
	}
	if err := a.kubernetesService(ctx); err != nil {
		return a.res, err
	}
	if opts.DeleteOld {
		a.drain(ctx)
	}
	a.finishRun(ctx)
	return a.res, nil
}

// finishRun ends the run of the cluster journal once every Service moved.
func (a *applier) finishRun(ctx context.Context) {
	if a.j == nil || a.o.ClusterJournal == nil {
		return
	}
	if err := a.j.FinishRun(ctx, a.o.ClusterJournal.Keep); err != nil {
		a.warn("finishing the cluster journal failed; its ConfigMaps stay until the next run: " + err.Error())
	}
}

// checkLock returns nil when Apply holds no lock, is a dry run, or still
// holds its lock; what says which delete is not made.
func (a *applier) checkLock(what string) error {
	if a.o.DryRun != DryRunNone {
		return nil
	}
	return lease.CheckHeld(a.o.Lock, what)
}

func (a *applier) summarise() {
	s := timing.Summarize(a.gaps)
	a.res.Gaps = GapSummary{Count: s.Count, P50: s.P50, P99: s.P99, Max: s.Max}
	sort.Slice(a.res.Moved, func(i, j int) bool { return a.res.Moved[i].Service < a.res.Moved[j].Service })
}

func (a *applier) emit(e Event) {
	e.Time = time.Now()
	e.DryRun = a.o.DryRun
	a.log.V(1).Info(string(e.Kind), "service", e.Service, "serviceCIDR", e.ServiceCIDR, "message", e.Message)
	if a.o.Progress == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.o.Progress(e)
}

func (a *applier) warn(msg string) {
	a.mu.Lock()
	a.res.Warnings = append(a.res.Warnings, msg)
	a.mu.Unlock()
	a.emit(Event{Kind: EventWarning, Message: msg})
}

func (a *applier) dryRunOpt() []string { return dryRunOpt(a.o.DryRun == DryRunServer) }

// checks lists every permission the plan needs.
func (a *applier) checks() []access.Check {
	var out []access.Check
	out = append(out,
		access.Check{Verb: "list", Resource: "services"},
		access.Check{Verb: "list", Group: Group, Resource: "servicecidrs"},
		access.Check{Verb: "get", Group: Group, Resource: "servicecidrs"},
	)
	if a.c.ipVersion != "" {
		out = append(out, access.Check{Verb: "list", Group: Group, Resource: "ipaddresses"})
	}
	if !a.p.Target.Exists {
		out = append(out, access.Check{Verb: "create", Group: Group, Resource: "servicecidrs"})
	}
	if a.o.DeleteOld && len(a.p.Old) > 0 {
		out = append(out, access.Check{Verb: "delete", Group: Group, Resource: "servicecidrs"})
	}
	namespaces := map[string]bool{}
	for _, m := range a.p.Moves {
		namespaces[m.Namespace] = true
	}
	ns := make([]string, 0, len(namespaces))
	for n := range namespaces {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	for _, n := range ns {
		out = append(out,
			access.Check{Verb: "get", Resource: "services", Namespace: n},
			access.Check{Verb: "delete", Resource: "services", Namespace: n},
			access.Check{Verb: "create", Resource: "services", Namespace: n})
	}
	if a.o.DeleteKubernetesService && a.p.Kubernetes != nil {
		out = append(out, access.Check{Verb: "delete", Resource: "services", Namespace: a.p.Kubernetes.Namespace, Name: a.p.Kubernetes.Name})
	}
	if cj := a.o.ClusterJournal.options(a.c.kube); cj != nil && a.o.DryRun == DryRunNone {
		out = append(out, journal.ClusterChecks(cj.Namespace)...)
	}
	return out
}

// newApplier fills in the defaults of opts.
func newApplier(ctx context.Context, c *Client, p *Plan, opts ApplyOptions) *applier {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.QPS <= 0 {
		opts.QPS = 10
	}
	if opts.Burst <= 0 {
		opts.Burst = 10
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	if opts.RetryTimeout <= 0 {
		opts.RetryTimeout = time.Minute
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	return &applier{c: c, p: p, o: opts, log: logr.FromContextOrDiscard(ctx),
		limiter:   flowcontrol.NewTokenBucketRateLimiter(opts.QPS, opts.Burst),
		res:       &Result{DryRun: opts.DryRun, Moved: []Moved{}},
		recovered: map[string]bool{}}
}

// Recover finishes, from the journal in opts.JournalDir, every Service an
// interrupted Apply left deleted but not yet recreated, and does nothing
// else. Call it before planning again after a crash: a new plan made while
// such a Service is absent would not know its journaled address and could
// hand that address to another Service. Apply recovers the same way on its
// own, so a caller that re-applies a saved plan need not call it.
//
// default/kubernetes is the exception: kube-apiserver recreates it, not
// Recover. When the journal says an interrupted run deleted it, Recover
// reports in Result.Kubernetes whether kube-apiserver has recreated it (and
// records that in the journal) or it is still absent (with a warning naming
// the address it is awaited at); it does not wait. Plan with
// PlanOptions.JournalDir then keeps it in the plan, and Apply waits for it.
func (c *Client) Recover(ctx context.Context, opts ApplyOptions) (*Result, error) {
	if opts.JournalDir == "" {
		return nil, &FieldError{Field: "--journal", Reason: "Recover needs the journal directory of the interrupted run", Err: ErrInvalid}
	}
	if opts.DryRun != DryRunNone {
		return &Result{DryRun: opts.DryRun, Moved: []Moved{}}, nil
	}
	if opts.ClusterJournal != nil && opts.Lock == nil {
		return nil, &FieldError{Field: "ClusterJournal", Reason: "a cluster journal needs a Lock: only the holder of the lock may write it", Err: ErrInvalid}
	}
	a := newApplier(ctx, c, &Plan{}, opts) // recovery needs only the journal's records
	defer a.summarise()
	release, err := lease.Hold(ctx, opts.Lock)
	if err != nil {
		return nil, err
	}
	defer release()
	j, err := journal.OpenWithCluster(ctx, opts.JournalDir, opts.ClusterJournal.options(c.kube))
	if err != nil {
		return nil, fmt.Errorf("opening journal: %w", err)
	}
	defer j.Close()
	a.j = j
	keys, err := j.Keys("service/")
	if err != nil {
		return a.res, err
	}
	kube, err := j.Keys(kubernetesJournalKey)
	if err != nil || len(keys)+len(kube) == 0 {
		return a.res, err
	}
	checks := []access.Check{{Verb: "get", Resource: "services"}}
	if len(keys) > 0 {
		checks = append(checks, access.Check{Verb: "create", Resource: "services"})
	}
	if err := access.Preflight(ctx, c.kube, checks); err != nil {
		return nil, err
	}
	if err := a.recoverJournal(ctx); err != nil {
		return a.res, err
	}
	switch rec := a.kubeJournaled; {
	case rec == nil:
	case a.kubeLive != nil:
		a.reportKubernetesRecreated(rec.move(), a.kubeLive)
	default:
		a.reportKubernetesAbsent(rec)
	}
	return a.res, nil
}

// recoverJournal finishes every Service an interrupted run left pending,
// whatever plan it came from: a pending record holds the whole object.
func (a *applier) recoverJournal(ctx context.Context) error {
	if a.j == nil {
		return nil
	}
	if err := a.loadKubernetesRecord(ctx); err != nil {
		return err
	}
	keys, err := a.j.Keys("service/")
	if err != nil {
		return err
	}
	for _, k := range keys {
		var rec record
		ok, err := a.j.Get(k, &rec)
		if err != nil {
			return err
		}
		if !ok || rec.Phase != phasePending {
			continue
		}
		if err := a.recoverOne(ctx, k, rec); err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) recoverOne(ctx context.Context, key string, rec record) error {
	if rec.Desired == nil {
		return fmt.Errorf("journal %s record %q: no desired object; remove the record after checking Service %s by hand", a.j.Dir(), key, rec.Service)
	}
	live, err := a.c.kube.CoreV1().Services(rec.Desired.Namespace).Get(ctx, rec.Desired.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// Deleted, not yet recreated: create it now.
		t0 := time.Now()
		created, err := a.create(ctx, key, &rec)
		if err != nil {
			return err
		}
		a.finish(key, &rec, created, time.Since(t0), true)
		a.emit(Event{Kind: EventServiceRecovered, Service: rec.Service, OldIPs: rec.OldIPs, NewIPs: ClusterIPs(created),
			Message: "recreated from the journal after an interrupted run"})
		return nil
	case err != nil:
		return fmt.Errorf("reading Service %s to resume it: %w", rec.Service, err)
	case live.UID == rec.OldUID:
		// The delete never happened: nothing was lost, forget the record; the
		// plan moves the Service normally.
		return a.j.Delete(key)
	case sameAddrs(ClusterIPs(live), ClusterIPs(rec.Desired)):
		// Created, but the run died before recording it.
		a.finish(key, &rec, live, 0, true)
		a.emit(Event{Kind: EventServiceRecovered, Service: rec.Service, OldIPs: rec.OldIPs, NewIPs: ClusterIPs(live),
			Message: "found recreated; journal updated"})
		return nil
	default:
		return fmt.Errorf("%w: Service %s was recreated by someone else (uid %s, clusterIPs %s) while journal %s record %q expected %s; check it, then remove the record",
			ErrStalePlan, rec.Service, live.UID, strings.Join(live.Spec.ClusterIPs, ","), a.j.Dir(), key, joinAddrs(ClusterIPs(rec.Desired)))
	}
}

// finish records a moved Service as done and reports it.
func (a *applier) finish(key string, rec *record, created *corev1.Service, gap time.Duration, resumed bool) {
	now := time.Now()
	rec.Phase, rec.NewUID, rec.Done = phaseDone, created.UID, &now
	if a.j != nil {
		if err := a.j.Put(key, rec); err != nil {
			a.warn(fmt.Sprintf("Service %s moved but the journal could not record it: %v", rec.Service, err))
		}
	}
	m := Moved{Service: rec.Service, OldUID: rec.OldUID, NewUID: created.UID, OldIPs: rec.OldIPs, NewIPs: ClusterIPs(created), Resumed: resumed, Note: rec.Note}
	if !resumed {
		m.Gap = gap
	}
	a.mu.Lock()
	if resumed {
		a.recovered[rec.Service] = true
	}
	a.res.Moved = append(a.res.Moved, m)
	if !resumed {
		a.gaps = append(a.gaps, gap)
	}
	a.mu.Unlock()
}

// checkStale compares the plan with the cluster and returns the moves left to do.
func (a *applier) checkStale(ctx context.Context) ([]Move, error) {
	s, err := a.c.Snapshot(ctx, SnapshotOptions{})
	if err != nil {
		return nil, err
	}
	// The plan's From must be the range the cluster uses: a plan file is
	// untrusted, and a wrong From would create the target, move nothing and
	// plan a flag change that strands every Service.
	if a.p.Kubernetes != nil && a.p.Kubernetes.UID != "" {
		s.KubernetesDeleted = &KubernetesDeletion{UID: a.p.Kubernetes.UID, OldIPs: a.p.Kubernetes.OldIPs}
	}
	if k := a.kubeJournaled; k != nil && len(k.OldIPs) > 0 {
		s.KubernetesDeleted = &KubernetesDeletion{UID: k.OldUID, OldIPs: k.OldIPs}
	}
	if err := checkFrom(s, "plan from", a.p.From, a.p.To); err != nil {
		return nil, err
	}
	if err := a.checkOld(s); err != nil {
		return nil, err
	}
	live := make(map[string]*corev1.Service, len(s.Services))
	owner := map[netip.Addr]string{}
	for i := range s.Services {
		svc := &s.Services[i]
		live[svcKey(svc)] = svc
		for _, ip := range ClusterIPs(svc) {
			owner[ip] = svcKey(svc)
		}
	}
	for _, ip := range s.IPAddresses {
		if _, ok := owner[ip.IP]; !ok && ip.ParentRef.IsService() {
			owner[ip.IP] = ip.ParentRef.Namespace + "/" + ip.ParentRef.Name
		}
	}
	var diffs []string
	var todo []Move
	planned := map[string]bool{}
	for _, m := range a.p.Moves {
		planned[m.Key()] = true
		l := live[m.Key()]
		switch {
		case l == nil:
			diffs = append(diffs, fmt.Sprintf("Service %s no longer exists", m.Key()))
			continue
		case l.UID != m.UID:
			if sameAddrs(ClusterIPs(l), m.NewIPs) || a.movedByUs(m.Key(), l.UID) {
				if !a.recovered[m.Key()] {
					a.res.AlreadyMoved = append(a.res.AlreadyMoved, m.Key())
					a.emit(Event{Kind: EventServiceAlreadyMoved, Service: m.Key(), NewIPs: ClusterIPs(l), Message: "already moved"})
				}
				continue
			}
			diffs = append(diffs, fmt.Sprintf("Service %s was recreated since planning (uid %s, now %s)", m.Key(), m.UID, l.UID))
			continue
		case l.ResourceVersion != m.ResourceVersion:
			diffs = append(diffs, fmt.Sprintf("Service %s changed since planning (resourceVersion %s, now %s)", m.Key(), m.ResourceVersion, l.ResourceVersion))
			continue
		}
		for _, ip := range m.NewIPs {
			if o, ok := owner[ip]; ok && o != m.Key() {
				diffs = append(diffs, fmt.Sprintf("address %s planned for Service %s is now used by %s", ip, m.Key(), o))
			}
		}
		todo = append(todo, m)
	}
	if k := a.p.Kubernetes; k != nil {
		planned[k.Key()] = true
	}
	for i, sk := range a.p.Skipped {
		key := sk.Namespace + "/" + sk.Name
		planned[key] = true
		// Only Services without a ClusterIP and LoadBalancers are left
		// alone; a plan file that skips any other Service of the old range
		// would strand it at the flag change.
		if l := live[key]; l != nil && l.Spec.Type != corev1.ServiceTypeLoadBalancer {
			for _, ip := range ClusterIPs(l) {
				for _, f := range a.p.From {
					if f.Contains(ip) {
						return nil, &FieldError{Field: fmt.Sprintf("plan skipped[%d]", i), Value: key, Err: ErrPlanFormat,
							Reason: fmt.Sprintf("holds %s in the old range %s and is a %s Service: only headless, ExternalName and LoadBalancer Services may be left alone", ip, f, l.Spec.Type)}
					}
				}
			}
		}
	}
	for key, svc := range live {
		if planned[key] {
			continue
		}
		for _, ip := range ClusterIPs(svc) {
			inFrom := false
			for _, f := range a.p.From {
				inFrom = inFrom || f.Contains(ip)
			}
			if inFrom {
				diffs = append(diffs, fmt.Sprintf("Service %s (%s) appeared in the old range after planning", key, ip))
				break
			}
		}
	}
	t := a.p.Target
	var liveTarget *ServiceCIDR
	for i := range s.ServiceCIDRs {
		if s.ServiceCIDRs[i].Name == t.Name {
			liveTarget = &s.ServiceCIDRs[i]
		}
	}
	switch {
	case t.Exists && liveTarget == nil:
		diffs = append(diffs, fmt.Sprintf("ServiceCIDR %s no longer exists", t.Name))
	case liveTarget != nil && !samePrefixes(liveTarget.CIDRs, t.CIDRs):
		diffs = append(diffs, fmt.Sprintf("ServiceCIDR %s now has CIDRs %s, the plan wants %s", t.Name, joinPrefixes(liveTarget.CIDRs), joinPrefixes(t.CIDRs)))
	case liveTarget != nil && liveTarget.Terminating():
		diffs = append(diffs, fmt.Sprintf("ServiceCIDR %s is being deleted", t.Name))
	case t.Exists && liveTarget.UID != t.UID:
		diffs = append(diffs, fmt.Sprintf("ServiceCIDR %s was recreated since planning (uid %s, now %s)", t.Name, t.UID, liveTarget.UID))
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		return nil, &StalePlanError{Differences: diffs}
	}
	return todo, nil
}

// checkOld refuses a plan whose Old names a live ServiceCIDR (the same
// object, or one the plan saw without a UID) that does not lie inside From:
// DeleteOld would mark it for deletion.
func (a *applier) checkOld(s *Snapshot) error {
	for i, o := range a.p.Old {
		for _, sc := range s.ServiceCIDRs {
			if sc.Name != o.Name || (o.UID != "" && sc.UID != o.UID) {
				continue
			}
			for _, q := range sc.CIDRs {
				inside := false
				for _, f := range a.p.From {
					inside = inside || cidr.ContainsPrefix(f, q)
				}
				if !inside {
					return &FieldError{Field: fmt.Sprintf("plan old[%d]", i), Value: o.Name, Err: ErrPlanFormat,
						Reason: fmt.Sprintf("the live ServiceCIDR %s holds %s, outside from (%s): apply deletes only ServiceCIDRs of the old range", o.Name, joinPrefixes(sc.CIDRs), joinPrefixes(a.p.From))}
				}
			}
		}
	}
	return nil
}

// movedByUs reports whether the journal records that an earlier run
// recreated the Service as the object with this UID (its address may differ
// from the plan's when the planned one was taken meanwhile).
func (a *applier) movedByUs(service string, uid types.UID) bool {
	if a.j == nil {
		return false
	}
	var rec record
	ok, err := a.j.Get(journalKey(service), &rec)
	return err == nil && ok && rec.Phase == phaseDone && rec.NewUID == uid
}

// ensureTarget creates the new ServiceCIDR if needed and waits until it is Ready.
func (a *applier) ensureTarget(ctx context.Context) error {
	t := a.p.Target
	sc, err := a.c.sc.get(ctx, t.Name)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading ServiceCIDR %s: %w", t.Name, err)
	}
	if !exists {
		switch a.o.DryRun {
		case DryRunClient:
			a.emit(Event{Kind: EventDryRunServiceCIDROp, ServiceCIDR: t.Name, Message: "would create ServiceCIDR " + t.Name + " " + joinPrefixes(t.CIDRs) + " and wait until it is Ready"})
			return nil
		case DryRunServer:
			if _, err := a.c.Create(ctx, t.Name, t.CIDRs, WriteOptions{DryRun: true}); err != nil {
				return err
			}
			a.emit(Event{Kind: EventServiceCIDRCreated, ServiceCIDR: t.Name, Message: "server accepted the ServiceCIDR (dry run, not stored)"})
			return nil
		}
		if sc, err = a.c.Create(ctx, t.Name, t.CIDRs, WriteOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		a.emit(Event{Kind: EventServiceCIDRCreated, ServiceCIDR: t.Name, Message: "created " + joinPrefixes(t.CIDRs)})
	}
	if a.o.DryRun != DryRunNone {
		a.targetR = sc.IsReady()
		return nil
	}
	sc, err = a.c.WaitReady(ctx, t.Name, WaitOptions{Timeout: a.o.ReadyTimeout, Interval: a.o.PollInterval})
	if err != nil {
		return err
	}
	a.targetR = true
	a.res.Target = &sc
	a.emit(Event{Kind: EventServiceCIDRReady, ServiceCIDR: t.Name, Message: "Ready"})
	return nil
}

// deleteOld marks the plan's old ServiceCIDRs for deletion.
func (a *applier) deleteOld(ctx context.Context) error {
	for _, o := range a.p.Old {
		live, obj, err := a.c.sc.object(ctx, o.Name)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("reading ServiceCIDR %s: %w", o.Name, err)
		case o.UID != "" && live.UID != o.UID:
			// Gone and recreated (kube-apiserver makes "kubernetes" from its flags).
			a.emit(Event{Kind: EventServiceCIDRGone, ServiceCIDR: o.Name, Message: "the planned ServiceCIDR is gone; " + o.Name + " is now a new object (" + joinPrefixes(live.CIDRs) + ") and is left alone"})
			continue
		case live.Terminating():
			continue
		}
		if a.o.DryRun == DryRunClient {
			a.emit(Event{Kind: EventDryRunServiceCIDROp, ServiceCIDR: o.Name, Message: "would delete ServiceCIDR " + o.Name + "; it stays Terminating until nothing depends on it"})
			continue
		}
		if err := a.checkLock("not deleting ServiceCIDR " + o.Name); err != nil {
			return err
		}
		if a.j != nil {
			if m, err := meta.Accessor(obj); err == nil {
				m.SetManagedFields(nil)
			}
			rec := serviceCIDRRecord{ServiceCIDR: o.Name, APIVersion: a.c.version.GroupVersion(), Object: obj, Recorded: time.Now()}
			if err := a.j.Put(serviceCIDRJournalKey(o.Name), &rec); err != nil {
				return fmt.Errorf("journaling ServiceCIDR %s before deleting it: %w", o.Name, err)
			}
		}
		err = a.c.Delete(ctx, o.Name, DeleteOptions{DryRun: a.o.DryRun == DryRunServer, UID: string(o.UID)})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case errors.Is(err, ErrLastServiceCIDR) && a.o.DryRun == DryRunServer && !a.targetR:
			a.emit(Event{Kind: EventDryRunServiceCIDROp, ServiceCIDR: o.Name, Message: "delete not checked: the new ServiceCIDR is not stored in a dry run, so this would be the last one"})
			continue
		case err != nil:
			return err
		}
		a.emit(Event{Kind: EventServiceCIDRDeleting, ServiceCIDR: o.Name, Message: "deletion requested; it stays Terminating until no address depends only on it"})
	}
	return nil
}

// moveAll moves the DNS Service first, then the rest with bounded concurrency.
func (a *applier) moveAll(ctx context.Context, todo []Move) error {
	var rest []Move
	for _, m := range todo {
		if m.Role == "dns" {
			if err := a.moveOne(ctx, m); err != nil {
				return err
			}
			continue
		}
		rest = append(rest, m)
	}
	work := make(chan Move)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var errs []error
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range min(a.o.Concurrency, max(len(rest), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range work {
				err := a.moveOne(wctx, m)
				if err == nil || errors.Is(err, context.Canceled) {
					continue // stopped by the caller or by another move's failure, reported below
				}
				errMu.Lock()
				errs = append(errs, err)
				errMu.Unlock()
				cancel()
			}
		}()
	}
feed:
	for _, m := range rest {
		select {
		case <-wctx.Done():
			break feed
		case work <- m:
		}
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return ctx.Err()
}

// moveOne recreates one Service with its new ClusterIPs.
func (a *applier) moveOne(ctx context.Context, m Move) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	key := journalKey(m.Key())
	live, err := a.c.kube.CoreV1().Services(m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Service %s: %w", m.Key(), err)
	}
	if live.UID != m.UID || live.ResourceVersion != m.ResourceVersion {
		return &StalePlanError{Midway: true, Differences: []string{fmt.Sprintf("Service %s changed while applying (uid %s rv %s, now uid %s rv %s)", m.Key(), m.UID, m.ResourceVersion, live.UID, live.ResourceVersion)}}
	}
	desired := Recreated(live, m.NewIPs)
	switch a.o.DryRun {
	case DryRunClient:
		a.emit(Event{Kind: EventDryRunServiceMove, Service: m.Key(), OldIPs: m.OldIPs, NewIPs: m.NewIPs,
			Message: fmt.Sprintf("would delete Service %s (uid %s) and create it with clusterIPs %s, keeping every other field", m.Key(), m.UID, joinAddrs(m.NewIPs))})
		a.addMoved(Moved{Service: m.Key(), OldUID: m.UID, OldIPs: m.OldIPs, NewIPs: m.NewIPs, Note: m.Note})
		return nil
	case DryRunServer:
		return a.dryRunServer(ctx, m, desired)
	}
	if err := a.limiter.Wait(ctx); err != nil {
		return err
	}
	if err := a.checkLock("not deleting Service " + m.Key()); err != nil {
		return err
	}
	rec := record{Phase: phasePending, Service: m.Key(), OldUID: live.UID, OldResourceVersion: live.ResourceVersion,
		OldIPs: m.OldIPs, NewIPs: m.NewIPs, Original: stripForJournal(live), Desired: desired, Note: m.Note, Recorded: time.Now()}
	if err := a.j.Put(key, &rec); err != nil {
		return fmt.Errorf("journaling Service %s before deleting it: %w", m.Key(), err)
	}
	uid, rv := live.UID, live.ResourceVersion
	t0 := time.Now()
	err = a.c.kube.CoreV1().Services(m.Namespace).Delete(ctx, m.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	switch {
	case apierrors.IsConflict(err):
		// Changed between our read and the delete: it still exists, nothing lost.
		if derr := a.j.Delete(key); derr != nil {
			return derr
		}
		return &StalePlanError{Midway: true, Differences: []string{fmt.Sprintf("Service %s changed while applying: %v", m.Key(), err)}}
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("deleting Service %s: %w (journal %s keeps its definition; run apply again to resume)", m.Key(), err, a.j.Dir())
	}
	a.emit(Event{Kind: EventServiceDeleted, Service: m.Key(), OldIPs: m.OldIPs})
	// Once deleted, recreate even if the caller cancels: a Ctrl-C must not
	// leave the Service absent. (A SIGKILL is what the journal is for.)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.o.RetryTimeout+a.o.PollInterval)
	defer cancel()
	created, err := a.create(cctx, key, &rec)
	if err != nil {
		return err
	}
	gap := time.Since(t0)
	a.finish(key, &rec, created, gap, false)
	a.emit(Event{Kind: EventServiceCreated, Service: m.Key(), OldIPs: m.OldIPs, NewIPs: ClusterIPs(created), Gap: gap, Message: rec.Note})
	return nil
}

func (a *applier) addMoved(m Moved) {
	a.mu.Lock()
	a.res.Moved = append(a.res.Moved, m)
	a.mu.Unlock()
}

func (a *applier) dryRunServer(ctx context.Context, m Move, desired *corev1.Service) error {
	uid, rv := m.UID, m.ResourceVersion
	if err := a.c.kube.CoreV1().Services(m.Namespace).Delete(ctx, m.Name, metav1.DeleteOptions{DryRun: a.dryRunOpt(),
		Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}}); err != nil {
		return fmt.Errorf("dry-run delete of Service %s: %w", m.Key(), err)
	}
	msg := "server accepted the delete and the create (dry run, nothing stored); nodePorts are not checked because the old Service still holds them"
	if a.targetR {
		probe := withoutNodePorts(desired)
		probe.Name = "" // the old one still exists: a create under its name would only say AlreadyExists
		probe.GenerateName = "cidrshift-dry-run-"
		if _, err := a.c.kube.CoreV1().Services(m.Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: a.dryRunOpt()}); err != nil {
			return fmt.Errorf("dry-run create of Service %s with clusterIPs %s: %w", m.Key(), joinAddrs(m.NewIPs), err)
		}
	} else {
		msg = "server accepted the delete; the create is not checked because the new ServiceCIDR does not exist yet (a dry run stores nothing)"
	}
	a.emit(Event{Kind: EventDryRunServiceMove, Service: m.Key(), OldIPs: m.OldIPs, NewIPs: m.NewIPs, Message: msg})
	a.addMoved(Moved{Service: m.Key(), OldUID: m.UID, OldIPs: m.OldIPs, NewIPs: m.NewIPs, Note: m.Note})
	return nil
}

// notAllocatableYet reports the answers the API server gives while the new
// range is not (yet) usable by its allocator.
func notAllocatableYet(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "does not match the current range") ||
		strings.Contains(msg, "is not in the valid range") ||
		strings.Contains(msg, "allocator not ready")
}

func transient(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err) ||
		(apierrors.IsInternalError(err) && !notAllocatableYet(err))
}

// create creates rec.Desired, retrying with backoff while the address is not
// yet allocatable; an address taken meanwhile falls back to a free one.
func (a *applier) create(ctx context.Context, key string, rec *record) (*corev1.Service, error) {
	svcs := a.c.kube.CoreV1().Services(rec.Desired.Namespace)
	deadline := time.Now().Add(a.o.RetryTimeout)
	delay := a.o.PollInterval
	fellBack := false
	for attempt := 1; ; attempt++ {
		created, err := svcs.Create(ctx, rec.Desired, metav1.CreateOptions{})
		if err == nil {
			return created, nil
		}
		if apierrors.IsAlreadyExists(err) {
			live, gerr := svcs.Get(ctx, rec.Desired.Name, metav1.GetOptions{})
			if gerr == nil && sameAddrs(ClusterIPs(live), ClusterIPs(rec.Desired)) {
				return live, nil // an earlier attempt got through
			}
		}
		if strings.Contains(err.Error(), "provided IP is already allocated") && !fellBack {
			ip, ferr := a.freeAddrs(ctx, rec)
			if ferr == nil {
				fellBack = true
				note := fmt.Sprintf("%s was taken meanwhile; given %s", joinAddrs(ClusterIPs(rec.Desired)), joinAddrs(ip))
				rec.Note = appendNote(rec.Note, note)
				rec.Desired = Recreated(rec.Desired, ip)
				rec.NewIPs = ip
				if perr := a.j.Put(key, rec); perr != nil {
					return nil, &ServiceLostError{Service: rec.Service, JournalKey: key, JournalDir: a.j.Dir(), Err: perr}
				}
				a.emit(Event{Kind: EventFallback, Service: rec.Service, NewIPs: ip, Message: note})
				if rec.Service == a.dnsKey() {
					a.warn("the DNS Service " + rec.Service + " did not get its planned address: " + note + "; kubelet clusterDNS must be set to " + joinAddrs(ip))
				}
				continue
			}
			a.log.Info("no free address to fall back to", "service", rec.Service, "err", ferr)
		}
		retry := notAllocatableYet(err) || transient(err)
		if !retry || time.Now().Add(delay).After(deadline) || ctx.Err() != nil {
			if notAllocatableYet(err) && a.c.server.Minor == 33 {
				err = &DualWriteError{Service: rec.Service, ServerVersion: a.c.server.GitVersion, Err: err}
			} else if notAllocatableYet(err) {
				err = fmt.Errorf("%w: ServiceCIDR %s does not yet hand out %s (is it Ready, and has every kube-apiserver seen it?)", err, a.p.Target.Name, joinAddrs(ClusterIPs(rec.Desired)))
			}
			return nil, &ServiceLostError{Service: rec.Service, JournalKey: key, JournalDir: a.j.Dir(), Err: err}
		}
		a.emit(Event{Kind: EventRetry, Service: rec.Service, NewIPs: ClusterIPs(rec.Desired), Message: fmt.Sprintf("attempt %d refused, retrying in %s: %v", attempt, delay, err)})
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(delay*2, 5*time.Second)
	}
}

func (a *applier) dnsKey() string {
	if a.p.DNS == nil {
		return ""
	}
	return a.p.DNS.Namespace + "/" + a.p.DNS.Name
}

// freeAddrs picks fresh addresses for rec's moving families, avoiding every
// address in use now.
func (a *applier) freeAddrs(ctx context.Context, rec *record) ([]netip.Addr, error) {
	s, err := a.c.Snapshot(ctx, SnapshotOptions{})
	if err != nil {
		return nil, err
	}
	inUse := map[netip.Addr]string{}
	for i := range s.Services {
		for _, ip := range ClusterIPs(&s.Services[i]) {
			inUse[ip] = svcKey(&s.Services[i])
		}
	}
	for _, ip := range s.IPAddresses {
		inUse[ip.IP] = ip.ParentRef.String()
	}
	for _, m := range a.p.Moves { // keep every planned address for its Service
		for _, ip := range m.NewIPs {
			inUse[ip] = m.Key()
		}
	}
	fl := newFreeList(a.p.To, inUse, map[netip.Addr]string{})
	cur := ClusterIPs(rec.Desired)
	out := make([]netip.Addr, len(cur))
	for i, ip := range cur {
		moving := false
		for _, t := range a.p.To {
			moving = moving || t.Contains(ip)
		}
		if !moving {
			out[i] = ip
			continue
		}
		n, err := fl.next(cidr.FamilyOf(netip.PrefixFrom(ip, ip.BitLen())))
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// kubernetesService deletes default/kubernetes when asked, journaling the
// delete first, and waits for kube-apiserver to recreate it. It also waits
// for one an earlier, interrupted run deleted (the journal says so), whether
// or not the plan knows it and whether or not deletion was asked.
func (a *applier) kubernetesService(ctx context.Context) error {
	k := a.p.Kubernetes
	if k == nil && a.kubeJournaled != nil {
		k = a.kubeJournaled.move()
	}
	if k == nil {
		return nil
	}
	svcs := a.c.kube.CoreV1().Services(k.Namespace)
	live, err := svcs.Get(ctx, k.Name, metav1.GetOptions{})
	absent := apierrors.IsNotFound(err)
	if err != nil && !absent {
		return fmt.Errorf("reading Service %s: %w", k.Key(), err)
	}
	switch {
	case !absent && live.UID != k.UID && a.kubeJournaled != nil:
		// Deleted by an earlier run, recreated since.
		a.kubernetesDone(a.kubeJournaled, live)
		a.reportKubernetesRecreated(k, live)
		return nil
	case !absent && live.UID != k.UID && sameAddrs(ClusterIPs(live), k.NewIPs):
		a.res.Kubernetes = "already at " + joinAddrs(k.NewIPs)
		return nil
	case !absent && !a.o.DeleteKubernetesService:
		a.res.Kubernetes = fmt.Sprintf("left at %s: after every kube-apiserver runs with --service-cluster-ip-range=%s, delete it (or apply with --delete-kubernetes-service) and kube-apiserver recreates it at %s",
			joinAddrs(ClusterIPs(live)), joinPrefixes(a.p.To), joinAddrs(k.NewIPs))
		a.emit(Event{Kind: EventKubernetesLeftAlone, Service: k.Key(), Message: a.res.Kubernetes})
		return nil
	case !absent && live.UID != k.UID:
		// Recreated since planning, elsewhere than planned: report it as it is.
		a.reportKubernetesRecreated(k, live)
		return nil
	case absent && a.o.DryRun != DryRunNone:
		a.res.Kubernetes = "absent: " + kubernetesAwaited(k.NewIPs)
		a.emit(Event{Kind: EventDryRunServiceMove, Service: k.Key(), Message: a.res.Kubernetes})
		return nil
	case absent:
		// Deleted by an earlier run (or by someone else): wait for kube-apiserver.
		why := "deleted since planning"
		if a.kubeJournaled != nil {
			why = "deleted by an interrupted run, says the journal"
		}
		a.emit(Event{Kind: EventKubernetesAwaited, Service: k.Key(), OldIPs: k.OldIPs, NewIPs: k.NewIPs,
			Message: "absent (" + why + "); waiting up to " + a.o.ReadyTimeout.String() + " for it: " + kubernetesAwaited(k.NewIPs)})
	case a.o.DryRun == DryRunClient:
		a.res.Kubernetes = "would delete it; kube-apiserver recreates it at " + joinAddrs(k.NewIPs) + " if it runs with the new range"
		a.emit(Event{Kind: EventDryRunServiceMove, Service: k.Key(), Message: a.res.Kubernetes})
		return nil
	default:
		if err := a.deleteKubernetes(ctx, k, live); err != nil {
			return err
		}
		if a.o.DryRun == DryRunServer {
			a.res.Kubernetes = "server accepted the delete (dry run)"
			return nil
		}
	}
	var got *corev1.Service
	werr := poll(ctx, WaitOptions{Timeout: a.o.ReadyTimeout, Interval: a.o.PollInterval}, func() (bool, error) {
		l, err := svcs.Get(ctx, k.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		got = l
		return l.UID != k.UID, nil
	})
	switch {
	case errors.Is(werr, context.DeadlineExceeded):
		a.res.Kubernetes = "deleted; kube-apiserver has not recreated it yet"
		a.warn(fmt.Sprintf("Service %s was not recreated within %s: check kube-apiserver; its allocator must be able to hand out %s (the journal keeps the record: Verify reports it missing, and Plan with the journal and Apply wait for it again)", k.Key(), a.o.ReadyTimeout, joinAddrs(k.NewIPs)))
		return nil
	case werr != nil:
		return werr
	}
	var rec kubernetesRecord
	if a.j != nil {
		if ok, err := a.j.Get(kubernetesJournalKey, &rec); err == nil && ok {
			a.kubernetesDone(&rec, got)
		}
	}
	a.reportKubernetesRecreated(k, got)
	return nil
}

// deleteKubernetes deletes default/kubernetes (UID precondition), journaling
// the delete first so that a run killed before kube-apiserver recreates it
// still knows, on the next run, what was deleted and where it is awaited.
func (a *applier) deleteKubernetes(ctx context.Context, k *Move, live *corev1.Service) error {
	if err := a.checkLock("not deleting Service " + k.Key()); err != nil {
		return err
	}
	if a.j != nil {
		rec := kubernetesRecord{Phase: phasePending, Service: k.Key(), OldUID: live.UID, OldIPs: ClusterIPs(live),
			NewIPs: k.NewIPs, To: a.p.To, Recorded: time.Now()}
		if err := a.j.Put(kubernetesJournalKey, &rec); err != nil {
			return fmt.Errorf("journaling Service %s before deleting it: %w", k.Key(), err)
		}
	}
	uid := k.UID
	if err := a.c.kube.CoreV1().Services(k.Namespace).Delete(ctx, k.Name, metav1.DeleteOptions{DryRun: a.dryRunOpt(), Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Service %s: %w", k.Key(), err)
	}
	a.emit(Event{Kind: EventKubernetesDeleted, Service: k.Key(), OldIPs: k.OldIPs, Message: "deleted; kube-apiserver recreates it"})
	return nil
}

// drain waits for the old ServiceCIDRs to go and reports what holds them.
func (a *applier) drain(ctx context.Context) {
	if a.o.DryRun != DryRunNone {
		return
	}
	for _, o := range a.p.Old {
		var rep DeletionReport
		if a.o.DrainTimeout > 0 {
			err := a.c.WaitDeleted(ctx, o.Name, WaitOptions{Timeout: a.o.DrainTimeout, Interval: a.o.PollInterval, UID: o.UID})
			var blocked *DeletionBlockedError
			switch {
			case err == nil:
				rep = DeletionReport{Name: o.Name, CIDRs: o.CIDRs, Summary: "ServiceCIDR " + o.Name + " is gone"}
				a.emit(Event{Kind: EventServiceCIDRGone, ServiceCIDR: o.Name, Message: rep.Summary})
				a.res.Old = append(a.res.Old, rep)
				continue
			case errors.As(err, &blocked):
				rep = blocked.Report
			default:
				a.warn(fmt.Sprintf("waiting for ServiceCIDR %s to go: %v", o.Name, err))
				continue
			}
		} else {
			var err error
			if rep, err = a.c.ExplainDeletion(ctx, o.Name); err != nil {
				a.warn(fmt.Sprintf("explaining ServiceCIDR %s: %v", o.Name, err))
				continue
			}
		}
		kind := EventServiceCIDRHeld
		switch {
		case !rep.Found:
			kind = EventServiceCIDRGone
		case o.UID != "" && rep.UID != o.UID:
			kind = EventServiceCIDRGone
			rep = DeletionReport{Name: o.Name, CIDRs: o.CIDRs, Summary: "ServiceCIDR " + o.Name + " is gone (a new one of that name, " +
				joinPrefixes(rep.CIDRs) + ", was created by kube-apiserver from its --service-cluster-ip-range)"}
		}
		a.res.Old = append(a.res.Old, rep)
		a.emit(Event{Kind: kind, ServiceCIDR: o.Name, Message: rep.Summary})
	}
}
