package migrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/internal/lease"
)

// Mode says what a run does with the cluster.
type Mode string

// The three modes of a run.
const (
	// ModePlan reads the cluster and describes every step; it writes nothing.
	ModePlan Mode = "plan"
	// ModeApply carries the steps out, recording each in the journal.
	ModeApply Mode = "apply"
	// ModeServerDryRun sends the writes of the steps that can be checked by
	// the API server with dryRun=All: the server validates them and stores
	// nothing. Steps that need an earlier step's effect stop there.
	ModeServerDryRun Mode = "server-dry-run"
)

// Step statuses in a Report.
const (
	// StatusDone: an earlier run finished the step (the journal says so).
	StatusDone = "done"
	// StatusCompleted: this run finished the step.
	StatusCompleted = "completed"
	// StatusSkipped: this run found nothing to do for the step; it is
	// recorded as done.
	StatusSkipped = "skipped"
	// StatusPlanned: described only (ModePlan).
	StatusPlanned = "planned"
	// StatusDryRun: the API server checked the step's writes.
	StatusDryRun = "dry-run"
	// StatusWaiting: the step needs an operator; the run paused there.
	StatusWaiting = "waiting"
	// StatusFailed: the step failed; the run stopped there.
	StatusFailed = "failed"
	// StatusNotReached: an earlier step failed or paused.
	StatusNotReached = "not-reached"
	// StatusOperator: described only (ModePlan, ModeServerDryRun); an
	// operator must act when the run reaches it.
	StatusOperator = "operator"
	// StatusNotRun: not sent to the server in ModeServerDryRun, because
	// it needs an operator step first.
	StatusNotRun = "not-run"
)

// ErrInvalidInput is matched (errors.Is) by every *InputError: the caller's
// input was refused before the first write.
var ErrInvalidInput = errors.New("invalid input")

// InputError is bad input: an option, the journal's record or the cluster's
// state contradicts what was asked. Nothing was changed.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrInvalidInput) match.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

// inputf returns an *InputError.
func inputf(format string, args ...any) error {
	return &InputError{Msg: fmt.Sprintf(format, args...)}
}

// Pause is the typed result of a step that needs an operator: what to do,
// what the step observed, and how to resume. A step returns it as its
// error; the Runner stops there and reports it in Report.Waiting.
type Pause struct {
	Step         string   `json:"step"`
	Instructions []string `json:"instructions"`
	Observed     string   `json:"observed"`
	Resume       string   `json:"resume"`
}

func (p *Pause) Error() string {
	return fmt.Sprintf("step %s is waiting for an operator: %s", p.Step, strings.Join(p.Instructions, "; "))
}

// StepReport is what a run says about one step.
type StepReport struct {
	Number int    `json:"number"`
	Name   string `json:"name"`
	Title  string `json:"title"`
	// Status is one of the Status constants.
	Status  string   `json:"status"`
	Details []string `json:"details,omitempty"`
	// Note, if set by the step, is kept with the journal's record of the
	// step and shown by later runs (for example how an operator step was
	// found done). A skipped step's note defaults to its last detail.
	Note string `json:"-"`
}

// Addf appends one line to the step's details.
func (s *StepReport) Addf(format string, args ...any) {
	s.Details = append(s.Details, fmt.Sprintf(format, args...))
}

// Report is the outcome of a run.
type Report struct {
	Kind    string `json:"kind"`
	Mode    Mode   `json:"mode"`
	Journal string `json:"journal,omitempty"`
	// Intent is what the migration was asked to do, as Prepare resolved it.
	Intent any          `json:"intent,omitempty"`
	Steps  []StepReport `json:"steps"`
	// Waiting is set when the run paused for an operator.
	Waiting *Pause `json:"waiting,omitempty"`
}

// Paused reports whether the run stopped at an operator step.
func (r *Report) Paused() bool { return r != nil && r.Waiting != nil }

// done reports whether every step of an applying run is done.
func (r *Report) done() bool {
	for _, s := range r.Steps {
		switch s.Status {
		case StatusDone, StatusCompleted, StatusSkipped:
		default:
			return false
		}
	}
	return len(r.Steps) > 0
}

// Step is one idempotent step of a migration.
type Step interface {
	// Name is the step's journal key (step/<name>) and its name in reports.
	Name() string
	// Title says in a few words what the step does.
	Title() string
	// Do carries the step out in env.Mode: ModePlan describes what it would
	// change, ModeServerDryRun sends its writes with dryRun=All, ModeApply
	// changes the cluster. It is idempotent: run again after a crash, it
	// finishes what is left. It returns a *Pause when an operator must act,
	// and may set rep.Status to StatusSkipped.
	Do(ctx context.Context, env *Env, rep *StepReport) error
}

// Checker is implemented by a Step that can tell, read-only, whether the
// cluster already holds its end state, so a run whose journal lacks the
// step's record (another machine, a lost journal) does not repeat it.
type Checker interface {
	Done(ctx context.Context, env *Env) (done bool, why string, err error)
}

// ReadOnly is implemented by a Step that only reads (a preflight): it runs
// on every run, is never recorded as done, and a run that fails there has
// written nothing, not even its intent.
type ReadOnly interface {
	ReadOnly() bool
}

// Verifier is implemented by a Step that proves, read-only, its end state
// after Do in ModeApply. A failed Verify fails the step: it is not recorded
// as done.
type Verifier interface {
	Verify(ctx context.Context, env *Env, rep *StepReport) error
}

// StepFunc makes a Step from functions. Done and Verify may be nil.
type StepFunc struct {
	StepName, StepTitle string
	// Check marks a read-only step (see ReadOnly).
	Check      bool
	DoFunc     func(ctx context.Context, env *Env, rep *StepReport) error
	DoneFunc   func(ctx context.Context, env *Env) (bool, string, error)
	VerifyFunc func(ctx context.Context, env *Env, rep *StepReport) error
}

// Name implements Step.
func (s StepFunc) Name() string { return s.StepName }

// Title implements Step.
func (s StepFunc) Title() string { return s.StepTitle }

// Do implements Step.
func (s StepFunc) Do(ctx context.Context, env *Env, rep *StepReport) error {
	return s.DoFunc(ctx, env, rep)
}

// ReadOnly implements ReadOnly.
func (s StepFunc) ReadOnly() bool { return s.Check }

// Done implements Checker; without DoneFunc a step is never found done.
func (s StepFunc) Done(ctx context.Context, env *Env) (bool, string, error) {
	if s.DoneFunc == nil {
		return false, "", nil
	}
	return s.DoneFunc(ctx, env)
}

// Verify implements Verifier; without VerifyFunc it proves nothing more.
func (s StepFunc) Verify(ctx context.Context, env *Env, rep *StepReport) error {
	if s.VerifyFunc == nil {
		return nil
	}
	return s.VerifyFunc(ctx, env, rep)
}

// Journal is the durable record a run keeps: what was asked, the plans it
// made, the steps done and each object before a destructive call.
type Journal interface {
	// Get loads the record under key into v and reports whether it exists.
	Get(key string, v any) (bool, error)
	// Put durably stores v under key before it returns.
	Put(key string, v any) error
	// Dir is where the journal lives; packages that keep their own journal
	// (nodecidr, servicecidr) keep it below Dir.
	Dir() string
}

// Locker serialises migrations across operators: a Runner in ModeApply or
// ModeServerDryRun holds the lock for the whole run. It has the methods of
// the packages' own Locker options (nodecidr, servicecidr, calico, flannel,
// kubeadmcfg), so the compositions hand the run's lock to each package call,
// which checks it before each destructive call.
type Locker interface {
	// Lock takes the lock, or fails at once naming who holds it (the
	// cluster Lease of internal/lease does so), and returns the function
	// that releases it. The holder may call it again (the packages do).
	Lock(ctx context.Context) (release func(), err error)
	// Check returns nil while the lock is still held: the Runner calls it
	// before each step that writes, and stops the run when it fails.
	Check() error
}

// Scoped is implemented by the compositions of this package: the scopes
// (coordination.k8s.io Lease names) a run must hold, one per package it
// writes through, so that it excludes every other run of cidrshift that
// writes the same objects (examples/noderecreate holds nodecidr's, for one).
type Scoped interface {
	LockScopes() []string
}

// LockScopes returns the scopes c's runs must hold: c's own when it is
// Scoped, and otherwise one named after its Kind.
func LockScopes(c Composition) []string {
	if s, ok := c.(Scoped); ok {
		return s.LockScopes()
	}
	return []string{"cidrshift-migrate-" + c.Kind()}
}

// ClusterJournal keeps a copy of a Runner's journal in the cluster, so that
// a run whose machine is lost is resumed from another one (any JournalDir,
// an empty one included) with the same kubeconfig: ConfigMaps in Namespace
// labelled journal.cidrshift.io/scope=cidrshift-migrate-<kind> for the
// Runner's own records (the intent, the plans, the steps done), and one
// scope per package journal below it (…-<kind>-nodecidr, …-servicecidr,
// …-calico, flannel's …-fix and …-rebase), each written after the local
// record and before the call it guards, 256 KiB of records per ConfigMap (a
// larger record gets one of its own). A run that ends with
// every step done deletes its ConfigMaps but the first of each scope, which
// stays, emptied, labelled journal.cidrshift.io/state=finished (remove them
// with kubectl delete configmap -n NAMESPACE -l
// journal.cidrshift.io/state=finished). It needs a Runner.Lock. RBAC: get,
// list, create, update and delete on configmaps in Namespace.
type ClusterJournal struct {
	// Client reaches the cluster.
	Client kubernetes.Interface
	// Namespace holds the ConfigMaps; empty means kube-system.
	Namespace string
	// Keep keeps a finished run's records, labelled finished.
	Keep bool
}

// ClusterScope is where one package keeps the copy of its journal during a
// run (see ClusterJournal): the fields of the packages' own ClusterJournal
// options.
type ClusterScope struct {
	Namespace string
	Name      string
	Keep      bool
}

// Env is what a step sees of its run.
type Env struct {
	// Mode is the run's mode.
	Mode Mode
	// Journal is nil in ModePlan and ModeServerDryRun without a journal
	// directory that exists.
	Journal Journal
	// Agents, when set, reach the node agents: a composition hands them the
	// host work instead of printing it for a person (see HostAgents).
	Agents *HostAgents
	// Lock is the run's lock in ModeApply (nil when the Runner has none):
	// pass it to the Lock option of each package call, which checks it
	// before each destructive call.
	Lock     Locker
	cluster  *ClusterJournal
	kind     string
	progress func(string)
}

// ClusterJournal returns where the package journal named part (the
// subdirectory of Journal.Dir it lives in, such as "nodecidr") keeps its
// copy in the cluster, or nil when the run keeps none.
func (e *Env) ClusterJournal(part string) *ClusterScope {
	if e.cluster == nil || e.Mode != ModeApply {
		return nil
	}
	return &ClusterScope{Namespace: e.cluster.Namespace, Name: clusterScope(e.kind) + "-" + part, Keep: e.cluster.Keep}
}

// clusterScope is the cluster journal scope of a migration's own records.
func clusterScope(kind string) string { return "cidrshift-migrate-" + kind }

// Applying reports whether the run changes the cluster.
func (e *Env) Applying() bool { return e.Mode == ModeApply }

// Progressf reports a progress line through the Runner's Progress callback.
func (e *Env) Progressf(format string, args ...any) {
	if e.progress != nil {
		e.progress(fmt.Sprintf(format, args...))
	}
}

// Composition is a migration: the compositions of this package
// (CalicoPodCIDR, FlannelPodCIDR, ServiceCIDR) implement it.
type Composition interface {
	// Kind names the migration, e.g. "servicecidr".
	Kind() string
	// Prepare reads the cluster and the journal (nil when there is none),
	// checks every input and returns the intent to record and the ordered
	// steps. It writes nothing: a refused run leaves no trace.
	Prepare(ctx context.Context, env *Env) (*Prepared, error)
}

// Prepared is what Composition.Prepare returns.
type Prepared struct {
	// Intent is recorded under IntentKey by the first applying run, before
	// its first step that writes; the composition compares it on every
	// later run.
	Intent any
	// Steps, in order.
	Steps []Step
	// Save, if set, runs in ModeApply after the intent is recorded, before
	// the first step that writes: it stores the plans Prepare made, so a rerun
	// carries out the same plans.
	Save func(ctx context.Context, j Journal) error
}

// IntentKey is the journal key of the migration's intent.
const IntentKey = "runbook"

// stepRecord marks a step done in the journal.
type stepRecord struct {
	Done time.Time `json:"done"`
	Note string    `json:"note,omitempty"`
}

// Runner carries out a Composition: it owns the journal, resume, the mode,
// progress, the operator pause and the cluster lock.
type Runner struct {
	// Mode defaults to ModePlan.
	Mode Mode
	// JournalDir is required in ModeApply. In the other modes an existing
	// journal is read (so a plan shows the steps already done) but never
	// written.
	JournalDir string
	// Progress, if set, receives one line per step started or finished.
	Progress func(line string)
	// Lock, if set, is held for the whole run in ModeApply and
	// ModeServerDryRun, checked before each step that writes, and handed to
	// the steps (Env.Lock). Take one Lease per scope in LockScopes.
	Lock Locker
	// ClusterJournal, if set, keeps a copy of the journal in the cluster in
	// ModeApply. It needs Lock.
	ClusterJournal *ClusterJournal
	// Agents, if set, carry out the host work of the compositions that have
	// some (FlannelPodCIDR) through the node agents (examples/nodenet-agent)
	// instead of leaving it to a person: a moved node's agent right after
	// its pods were restarted, every node's in the final host step. A node
	// without an agent gets the same request printed as the one command to
	// run on it (HostSteps).
	Agents *HostAgents
	// Now defaults to time.Now.
	Now func() time.Time
}

// Run prepares the composition, then runs its steps in order, skipping the
// steps the journal records as done and stopping at the first failure or
// pause. The Report is returned with any error after Prepare: a failed step
// is both in the Report and the error. A paused run returns a nil error and
// a Report whose Waiting is set.
func (r *Runner) Run(ctx context.Context, c Composition) (*Report, error) {
	if r.Lock != nil && r.Mode != ModePlan && r.Mode != "" {
		release, err := r.Lock.Lock(ctx)
		if err != nil {
			return nil, fmt.Errorf("taking the migration lock: %w", err)
		}
		defer release()
	}
	return r.run(ctx, c)
}

// run is Run with the lock held by the caller.
func (r *Runner) run(ctx context.Context, c Composition) (*Report, error) {
	log := logr.FromContextOrDiscard(ctx).WithValues("migration", c.Kind())
	mode := r.Mode
	if mode == "" {
		mode = ModePlan
	}
	switch mode {
	case ModePlan, ModeApply, ModeServerDryRun:
	default:
		return nil, inputf("mode %q: want %s, %s or %s", mode, ModePlan, ModeApply, ModeServerDryRun)
	}
	now := r.Now
	if now == nil {
		now = time.Now
	}
	env := &Env{Mode: mode, Agents: r.Agents, kind: c.Kind(), progress: r.Progress}
	if mode == ModeApply {
		env.Lock, env.cluster = r.Lock, r.ClusterJournal
	}
	rep := &Report{Kind: c.Kind(), Mode: mode}
	if mode == ModeApply && r.JournalDir == "" {
		return nil, inputf("a journal directory is required to apply: it records the finished steps and every object before its delete, so a rerun resumes")
	}
	if r.ClusterJournal != nil && (r.Lock == nil || r.ClusterJournal.Client == nil) {
		return nil, inputf("a cluster journal needs a client and a Lock: only the holder of the lock may write it")
	}
	if r.JournalDir != "" {
		if st, err := os.Stat(r.JournalDir); err == nil && !st.IsDir() {
			return nil, inputf("journal %s: not a directory", r.JournalDir)
		}
	}
	if mode == ModeApply || r.JournalDir != "" {
		if _, err := os.Stat(r.JournalDir); mode == ModeApply || err == nil {
			var co *journal.ClusterOptions
			if cj := env.cluster; cj != nil {
				co = &journal.ClusterOptions{Client: cj.Client, Namespace: cj.Namespace, Scope: clusterScope(c.Kind()), Holder: lease.Identity()}
			}
			j, err := journal.OpenWithCluster(ctx, r.JournalDir, co)
			if err != nil {
				return nil, fmt.Errorf("journal %s: %w", r.JournalDir, err)
			}
			defer j.Close()
			if co != nil {
				defer func() {
					if rep != nil && rep.Waiting == nil && rep.done() {
						if err := j.FinishRun(ctx, env.cluster.Keep); err != nil {
							log.Info("finishing the cluster journal failed; its ConfigMaps stay until the next run", "err", err.Error())
						}
					}
				}()
			}
			env.Journal = j
			rep.Journal = r.JournalDir
		}
	}
	prep, err := c.Prepare(ctx, env)
	if err != nil {
		return nil, err
	}
	rep.Intent = prep.Intent
	// The intent and the plans are recorded before the first step that
	// writes: a run refused by a read-only step leaves no record.
	recorded := false
	record := func() error {
		if recorded || mode != ModeApply {
			return nil
		}
		recorded = true
		if ok, err := env.Journal.Get(IntentKey, new(any)); err != nil {
			return err
		} else if !ok && prep.Intent != nil {
			if err := env.Journal.Put(IntentKey, prep.Intent); err != nil {
				return err
			}
		}
		if prep.Save != nil {
			return prep.Save(ctx, env.Journal)
		}
		return nil
	}
	n := len(prep.Steps)
	var failed error
	for i, s := range prep.Steps {
		sr := StepReport{Number: i + 1, Name: s.Name(), Title: s.Title()}
		if failed != nil {
			sr.Status = StatusNotReached
			rep.Steps = append(rep.Steps, sr)
			continue
		}
		ro, _ := s.(ReadOnly)
		readOnly := ro != nil && ro.ReadOnly()
		if !readOnly && env.Lock != nil {
			if err := env.Lock.Check(); err != nil {
				return rep, fmt.Errorf("not starting step %s: the run no longer holds its lock: %w", s.Name(), err)
			}
		}
		if !readOnly {
			if err := record(); err != nil {
				return rep, err
			}
		}
		if env.Journal != nil && !readOnly {
			var rec stepRecord
			ok, err := env.Journal.Get("step/"+s.Name(), &rec)
			if err != nil {
				return rep, err
			}
			if ok {
				sr.Status = StatusDone
				sr.Addf("done %s%s", rec.Done.Format(time.RFC3339), noteSuffix(rec.Note))
				rep.Steps = append(rep.Steps, sr)
				continue
			}
		}
		if ch, ok := s.(Checker); ok && mode == ModeApply {
			done, why, err := ch.Done(ctx, env)
			if err != nil {
				return rep, fmt.Errorf("step %s: checking whether it is done: %w", s.Name(), err)
			}
			if done {
				if err := env.Journal.Put("step/"+s.Name(), stepRecord{Done: now().UTC(), Note: why}); err != nil {
					return rep, err
				}
				sr.Status = StatusDone
				sr.Addf("found done: %s", why)
				rep.Steps = append(rep.Steps, sr)
				continue
			}
		}
		if mode == ModeApply {
			env.Progressf("step %d/%d %s: %s", i+1, n, s.Name(), s.Title())
		}
		log.V(1).Info("step", "number", i+1, "name", s.Name(), "mode", mode)
		err := s.Do(ctx, env, &sr)
		if err == nil && mode == ModeApply {
			if v, ok := s.(Verifier); ok {
				if verr := v.Verify(ctx, env, &sr); verr != nil {
					err = fmt.Errorf("verify: %w", verr)
				}
			}
		}
		var pause *Pause
		switch {
		case err == nil:
			if sr.Status == "" {
				sr.Status = map[Mode]string{ModeApply: StatusCompleted, ModePlan: StatusPlanned, ModeServerDryRun: StatusDryRun}[mode]
			}
			if mode == ModeApply && !readOnly && (sr.Status == StatusCompleted || sr.Status == StatusSkipped) {
				note := sr.Note
				if note == "" && sr.Status == StatusSkipped && len(sr.Details) > 0 {
					note = sr.Details[len(sr.Details)-1]
				}
				if err := env.Journal.Put("step/"+s.Name(), stepRecord{Done: now().UTC(), Note: note}); err != nil {
					return rep, err
				}
				env.Progressf("step %d/%d %s: %s", i+1, n, s.Name(), sr.Status)
			}
		case errors.As(err, &pause):
			sr.Status = StatusWaiting
			if pause.Step == "" {
				pause.Step = s.Name()
			}
			rep.Waiting = pause
			failed = err
		default:
			sr.Status = StatusFailed
			sr.Details = append(sr.Details, oneLine(err.Error()))
			failed = err
		}
		rep.Steps = append(rep.Steps, sr)
	}
	if failed == nil {
		// A composition of read-only steps records its intent all the same.
		if err := record(); err != nil {
			return rep, err
		}
	}
	if rep.Waiting != nil {
		return rep, nil
	}
	return rep, failed
}

// StepDone reports whether the journal records step name as done.
func StepDone(env *Env, name string) (bool, error) {
	if env.Journal == nil {
		return false, nil
	}
	return env.Journal.Get("step/"+name, &stepRecord{})
}

func noteSuffix(n string) string {
	if n == "" {
		return ""
	}
	return " (" + n + ")"
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}
