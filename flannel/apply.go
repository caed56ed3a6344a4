package flannel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-logr/logr"

	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/internal/lease"
)

// Outcome is what happened to one plan step.
type Outcome string

// The outcomes of a step.
const (
	// OutcomeApplied: the step's transaction committed.
	OutcomeApplied Outcome = "applied"
	// OutcomeAlreadyDone: the store already shows the step's result (a rerun
	// after a crash, or someone else did it).
	OutcomeAlreadyDone Outcome = "already-done"
	// OutcomeWouldApply: dry run; the step would be applied.
	OutcomeWouldApply Outcome = "would-apply"
	// OutcomePending: Verify found the step not done yet.
	OutcomePending Outcome = "pending"
	// OutcomeConflict: the key changed since the plan was made; nothing written.
	OutcomeConflict Outcome = "conflict"
	// OutcomeFailed: the store could not be read or written.
	OutcomeFailed Outcome = "failed"
)

// StepResult reports one step.
type StepResult struct {
	Index   int     `json:"index"`
	Step    Step    `json:"step"`
	Outcome Outcome `json:"outcome"`
	Detail  string  `json:"detail,omitempty"`
	// Error is the error text of a conflict or failure.
	Error string `json:"error,omitempty"`
}

// ApplyResult reports a whole run.
type ApplyResult struct {
	Steps []StepResult `json:"steps"`
	// Done is true when every step is applied or already done.
	Done bool `json:"done"`
	// Resumed is true when an earlier run of the plan did not finish: the
	// journal held its records, or etcd its run key (RunKey).
	Resumed bool `json:"resumed,omitempty"`
}

// ApplyOptions tunes Apply.
type ApplyOptions struct {
	// DryRun checks every step against the store and reports what would be
	// done, writing nothing.
	DryRun bool
	// OnProgress is called after each step with its result.
	OnProgress func(StepResult)
	// BeforeWrite, when set, is called right before each write transaction; an
	// error it returns stops Apply with that error before anything is written.
	// Callers use it to journal, to ask for confirmation, or (tests) to inject
	// faults.
	BeforeWrite func(ctx context.Context, index int, step Step) error
	// JournalDir, when set, is a directory where Apply records each step,
	// fsynced, before its transaction and its outcome after; the directory is
	// locked so two runs cannot apply at once. Resuming does not need it:
	// every step's result is visible in etcd, and so is the run itself, with
	// the old value of every key it wrote (RunKey), whatever the directory.
	// It leaves a durable trail, on this machine, of what a killed run was
	// doing.
	JournalDir string
	// Lock, when set, is taken before the first write and held until Apply
	// returns (a dry run does not take it); Apply checks it is still held
	// before each transaction and stops when it is not. Use the Lease of
	// LockScope.
	Lock Locker
}

// LockScope names the Lease that serialises flannel network and subnet
// changes across operators.
const LockScope = lease.ScopeFlannel

// Locker is a cluster-wide lock such as a coordination.k8s.io Lease.
type Locker interface {
	// Lock takes the lock, or fails at once when another run holds it, and
	// returns the function that releases it. The holder may call it again.
	Lock(ctx context.Context) (release func(), err error)
	// Check returns nil while the lock is still held; Apply calls it
	// before each write.
	Check() error
}

// journalRecord is what Apply writes to the journal for one step.
type journalRecord struct {
	Plan     string     `json:"plan"`
	Index    int        `json:"index"`
	Action   StepAction `json:"action"`
	Key      string     `json:"key"`
	NewKey   string     `json:"newKey,omitempty"`
	State    string     `json:"state"`
	Revision int64      `json:"revision,omitempty"`
	Error    string     `json:"error,omitempty"`
}

// ID returns a short digest of the plan's content, naming it in journals.
func (p *Plan) ID() string {
	b, _ := json.Marshal(p)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

type stepState int

const (
	statePending stepState = iota
	stateDone
	stateConflict
)

// Apply executes a plan step by step, in order. A plan is untrusted input
// (it may have been stored and edited): before the first write Apply
// re-checks its invariants (each key in one step, a move's From/To agreeing
// with its keys and its value with the store, destinations inside the
// network of the config they land in and overlapping no other lease) and
// refuses a broken plan with ErrInvalidPlan; a step whose key was written
// since the plan was made stops the run before any write with a
// *ConflictError. Each step is one etcd
// transaction that compares the mod revisions the plan recorded, so a key
// that changed since the plan was made (a lease renewed by flanneld) is never
// overwritten: Apply stops with a *ConflictError naming the key.
//
// Apply is idempotent and resumable, because each step's result is visible
// in the store: a step whose result is already there is reported as already
// done. After a crash, a lost connection or an etcd restart, running Apply
// again with the same plan finishes it; a finished plan reapplied does
// nothing. With its first write Apply keeps the run in etcd under RunKey
// (the plan), and each step's transaction also records there the key as it
// was, so a run killed on one machine is found (UnfinishedRuns) and
// finished from another, and no deleted or overwritten value is lost; the
// run key and its records are deleted once every step is done. With
// ApplyOptions.JournalDir, each step's intent is also recorded on disk
// (fsynced) before its write. Steps run one at a time, in order: a
// registry plan is a handful of small transactions, so there is no
// concurrency or rate limit to tune.
func (r *Registry) Apply(ctx context.Context, p *Plan, opts ApplyOptions) (*ApplyResult, error) {
	log := logr.FromContextOrDiscard(ctx)
	if err := r.checkPlan(p); err != nil {
		return nil, err
	}
	if err := r.checkPlanStore(ctx, p); err != nil {
		return nil, err
	}
	out := &ApplyResult{Steps: []StepResult{}}
	if !opts.DryRun {
		release, err := lease.Hold(ctx, opts.Lock)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	var jr *journal.Journal
	planID := p.ID()
	runKey, running := r.RunKey(planID), false
	if opts.JournalDir != "" && !opts.DryRun {
		j, err := journal.Open(opts.JournalDir)
		if err != nil {
			return nil, fmt.Errorf("open journal: %w", err)
		}
		defer j.Close()
		jr = j
		keys, err := j.Keys("flannel/" + planID + "/")
		if err != nil {
			return nil, fmt.Errorf("read journal: %w", err)
		}
		out.Resumed = len(keys) > 0
	}
	if !opts.DryRun {
		// The run key in etcd says the same as the local journal, to any
		// machine: a run of this plan started and did not finish.
		kv, err := r.getOne(ctx, runKey)
		if err != nil {
			return nil, fmt.Errorf("read run key: %w", err)
		}
		running = kv != nil
		out.Resumed = out.Resumed || running
	}
	record := func(i int, st Step, state string, rev int64, e error) error {
		if jr == nil {
			return nil
		}
		rec := journalRecord{Plan: planID, Index: i, Action: st.Action, Key: st.Key, NewKey: st.NewKey, State: state, Revision: rev}
		if e != nil {
			rec.Error = e.Error()
		}
		if err := jr.Put(fmt.Sprintf("flannel/%s/step-%03d", planID, i), rec); err != nil {
			return fmt.Errorf("write journal: %w", err)
		}
		return nil
	}
	report := func(sr StepResult) {
		out.Steps = append(out.Steps, sr)
		if opts.OnProgress != nil {
			opts.OnProgress(sr)
		}
	}
	if !opts.DryRun {
		// A step whose key was written since the plan was made stops the
		// run before its first write, not after the steps before it; so
		// does a step that cannot be read, whose state is then unknown.
		for i, st := range p.Steps {
			state, _, err := r.stepState(ctx, st)
			switch {
			case state == stateConflict:
				report(StepResult{Index: i, Step: st, Outcome: OutcomeConflict, Error: err.Error()})
				return out, fmt.Errorf("step %d (%s): nothing written: %w", i+1, st.Action, err)
			case err != nil:
				report(StepResult{Index: i, Step: st, Outcome: OutcomeFailed, Error: err.Error()})
				return out, fmt.Errorf("step %d (%s %s): nothing written: %w", i+1, st.Action, st.Key, err)
			}
		}
	}
	var firstConflict error
	for i, st := range p.Steps {
		state, detail, err := r.stepState(ctx, st)
		if err != nil && state != stateConflict {
			report(StepResult{Index: i, Step: st, Outcome: OutcomeFailed, Error: err.Error()})
			return out, stepError(i, st, err)
		}
		switch state {
		case stateDone:
			report(StepResult{Index: i, Step: st, Outcome: OutcomeAlreadyDone, Detail: detail})
			continue
		case stateConflict:
			report(StepResult{Index: i, Step: st, Outcome: OutcomeConflict, Error: err.Error()})
			if !opts.DryRun {
				return out, fmt.Errorf("step %d (%s): %w", i+1, st.Action, err)
			}
			if firstConflict == nil {
				firstConflict = fmt.Errorf("step %d (%s): %w", i+1, st.Action, err)
			}
			continue
		}
		if opts.DryRun {
			report(StepResult{Index: i, Step: st, Outcome: OutcomeWouldApply, Detail: describeStep(st)})
			continue
		}
		if opts.BeforeWrite != nil {
			if err := opts.BeforeWrite(ctx, i, st); err != nil {
				report(StepResult{Index: i, Step: st, Outcome: OutcomeFailed, Error: err.Error()})
				return out, fmt.Errorf("step %d (%s %s): stopped before writing: %w", i+1, st.Action, st.Key, err)
			}
		}
		if err := lease.CheckHeld(opts.Lock, fmt.Sprintf("step %d (%s %s): not writing", i+1, st.Action, st.Key)); err != nil {
			report(StepResult{Index: i, Step: st, Outcome: OutcomeFailed, Error: err.Error()})
			return out, err
		}
		if err := record(i, st, "writing", 0, nil); err != nil {
			report(StepResult{Index: i, Step: st, Outcome: OutcomeFailed, Error: err.Error()})
			return out, err
		}
		txn, err := r.recordedTxn(ctx, runKey, i, st)
		if err == nil && !running {
			// The run's first write starts it in etcd, in the same
			// transaction: a run key exists only once a step was written.
			var op Op
			if op, err = runKeyOp(runKey, p); err == nil {
				txn.Then = append(txn.Then, op)
			}
		}
		var res *TxnResult
		if err == nil {
			res, err = r.kv.Txn(ctx, txn)
		}
		if err != nil {
			report(StepResult{Index: i, Step: st, Outcome: OutcomeFailed, Error: err.Error()})
			return out, stepError(i, st, err)
		}
		if !res.Succeeded {
			// Something changed between the check and the write: find out what.
			state, detail, err := r.stepState(ctx, st)
			switch {
			case state == stateDone:
				report(StepResult{Index: i, Step: st, Outcome: OutcomeAlreadyDone, Detail: detail})
				continue
			case err == nil:
				err = &ConflictError{Key: st.Key, Expected: strconv.FormatInt(st.ModRevision, 10), Actual: "?", Reason: "the transaction's comparison failed"}
			}
			_ = record(i, st, "conflict", 0, err)
			report(StepResult{Index: i, Step: st, Outcome: OutcomeConflict, Error: err.Error()})
			return out, fmt.Errorf("step %d (%s): %w", i+1, st.Action, err)
		}
		running = true
		if err := record(i, st, "applied", res.Revision, nil); err != nil {
			return out, err
		}
		log.Info("applied flannel registry step", "step", i+1, "action", st.Action, "key", st.Key, "newKey", st.NewKey, "revision", res.Revision)
		report(StepResult{Index: i, Step: st, Outcome: OutcomeApplied, Detail: describeStep(st)})
	}
	if firstConflict != nil {
		return out, firstConflict
	}
	if running {
		if err := lease.CheckHeld(opts.Lock, "every step is done; not removing run key "+runKey); err != nil {
			return out, err
		}
		if err := r.finishRun(ctx, runKey); err != nil {
			return out, err
		}
	}
	out.Done = !opts.DryRun
	return out, nil
}

// recordedTxn is step i's transaction with, among its writes, the put of
// the key as it is now under <runKey>/<i+1>: the transaction compares the
// mod revision the value was read at, so the record is written if and only
// if the step is.
func (r *Registry) recordedTxn(ctx context.Context, runKey string, i int, st Step) (Txn, error) {
	cur, err := r.getOne(ctx, st.Key)
	if err != nil {
		return Txn{}, err
	}
	op, err := oldValueOp(runKey, i, st.Key, cur)
	if err != nil {
		return Txn{}, err
	}
	t := stepTxn(st)
	t.Then = append(t.Then, op)
	return t, nil
}

// Verify checks, read-only, that every step of a plan shows in the store.
// It returns an error naming the first step that is not done.
func (r *Registry) Verify(ctx context.Context, p *Plan) (*ApplyResult, error) {
	if err := r.checkPlan(p); err != nil {
		return nil, err
	}
	out := &ApplyResult{Steps: []StepResult{}, Done: true}
	var first error
	for i, st := range p.Steps {
		state, detail, err := r.stepState(ctx, st)
		sr := StepResult{Index: i, Step: st, Detail: detail}
		switch {
		case state == stateDone:
			sr.Outcome = OutcomeAlreadyDone
		case err != nil && state != stateConflict:
			return nil, stepError(i, st, err)
		case state == stateConflict:
			sr.Outcome, sr.Error = OutcomeConflict, err.Error()
		default:
			sr.Outcome = OutcomePending
		}
		if sr.Outcome != OutcomeAlreadyDone {
			out.Done = false
			if first == nil {
				first = fmt.Errorf("step %d (%s %s) is not done: %s", i+1, st.Action, st.Key, sr.Outcome)
			}
		}
		out.Steps = append(out.Steps, sr)
	}
	return out, first
}

func (r *Registry) checkPlan(p *Plan) error {
	if p == nil {
		return fmt.Errorf("%w: plan is nil", ErrInvalidRequest)
	}
	if p.Prefix != r.prefix {
		return fmt.Errorf("%w: the plan is for prefix %q, this registry uses %q", ErrStalePlan, p.Prefix, r.prefix)
	}
	for i, st := range p.Steps {
		bad := func(why string) error { return planError(i, st, "%s", why) }
		switch st.Action {
		case ActionDeleteLease:
			if !strings.HasPrefix(st.Key, r.prefix+"/subnets") {
				return bad("the key is not under " + r.SubnetsPrefix())
			}
			if st.ModRevision <= 0 {
				return bad("a delete needs the key's mod revision")
			}
		case ActionMoveLease:
			if !strings.HasPrefix(st.Key, r.prefix+"/subnets") || !strings.HasPrefix(st.NewKey, r.SubnetsPrefix()) {
				return bad("both keys must be under " + r.SubnetsPrefix())
			}
			if st.ModRevision <= 0 || st.NewKey == st.Key {
				return bad("a move needs the key's mod revision and a different new key")
			}
			// checkPlanFields parses both keys.
		case ActionPutConfig:
			if st.Key != r.ConfigKey() {
				return bad("the config key is " + r.ConfigKey())
			}
			c, err := ParseConfig([]byte(st.Value))
			if err == nil {
				_, err = c.Resolve()
			}
			if err != nil {
				return bad("flanneld would refuse the new config: " + err.Error())
			}
		default:
			return bad("unknown action")
		}
	}
	return r.checkPlanFields(p)
}

// stepTxn is the transaction of a pending step.
func stepTxn(st Step) Txn {
	switch st.Action {
	case ActionDeleteLease:
		return Txn{If: []Compare{{Key: st.Key, ModRevision: st.ModRevision}}, Then: []Op{{Type: OpDelete, Key: st.Key}}}
	case ActionMoveLease:
		return Txn{
			If:   []Compare{{Key: st.Key, ModRevision: st.ModRevision}, {Key: st.NewKey, ModRevision: 0}},
			Then: []Op{{Type: OpPut, Key: st.NewKey, Value: []byte(st.Value), Lease: st.LeaseID}, {Type: OpDelete, Key: st.Key}},
		}
	default: // ActionPutConfig
		return Txn{If: []Compare{{Key: st.Key, ModRevision: st.ModRevision}}, Then: []Op{{Type: OpPut, Key: st.Key, Value: []byte(st.Value)}}}
	}
}

func (r *Registry) getOne(ctx context.Context, key string) (*KeyValue, error) {
	res, err := r.kv.Get(ctx, key, GetOptions{})
	if err != nil {
		return nil, err
	}
	if len(res.KVs) == 0 {
		return nil, nil
	}
	return &res.KVs[0], nil
}

func revText(kv *KeyValue) string {
	if kv == nil {
		return "0"
	}
	return strconv.FormatInt(kv.ModRevision, 10)
}

// stepState compares a step with the store. For stateConflict the error is a
// *ConflictError; any other error is a read failure.
func (r *Registry) stepState(ctx context.Context, st Step) (stepState, string, error) {
	cur, err := r.getOne(ctx, st.Key)
	if err != nil {
		return statePending, "", err
	}
	expected := strconv.FormatInt(st.ModRevision, 10)
	switch st.Action {
	case ActionDeleteLease:
		switch {
		case cur == nil:
			return stateDone, st.Key + " is gone", nil
		case cur.ModRevision == st.ModRevision:
			return statePending, "", nil
		}
		return stateConflict, "", &ConflictError{Key: st.Key, Expected: expected, Actual: revText(cur),
			Reason: "the lease was written since the plan was made (flanneld renewed it, so it is alive); it is kept; audit again before deleting it"}
	case ActionMoveLease:
		dst, err := r.getOne(ctx, st.NewKey)
		if err != nil {
			return statePending, "", err
		}
		switch {
		case cur == nil && dst != nil:
			d := st.NewKey + " exists and " + st.Key + " is gone"
			if !bytes.Equal(dst.Value, []byte(st.Value)) {
				d += " (the value was rewritten since, by the node's flanneld)"
			}
			return stateDone, d, nil
		case cur == nil:
			return stateConflict, "", &ConflictError{Key: st.Key, Expected: expected, Actual: "0",
				Reason: "the lease is gone (expired, or deleted by its flanneld) and " + st.NewKey + " does not exist; nothing to move"}
		case dst != nil && dst.Lease == st.LeaseID && bytes.Equal(dst.Value, []byte(st.Value)):
			return stateConflict, "", &ConflictError{Key: st.Key, Expected: expected, Actual: revText(cur),
				Reason: "the move was applied, but " + st.Key + " was written again afterwards (a flanneld renewal racing the move); delete it once that flanneld has restarted"}
		case cur.ModRevision != st.ModRevision:
			return stateConflict, "", &ConflictError{Key: st.Key, Expected: expected, Actual: revText(cur),
				Reason: "the lease was written since the plan was made (flanneld renewed it); nothing was moved; plan the move again"}
		case dst != nil:
			return stateConflict, "", &ConflictError{Key: st.NewKey, Expected: "0", Actual: revText(dst),
				Reason: "the destination key exists now (another node leased the subnet); plan the move again"}
		}
		return statePending, "", nil
	case ActionPutConfig:
		switch {
		case cur != nil && bytes.Equal(cur.Value, []byte(st.Value)):
			return stateDone, st.Key + " holds the new config", nil
		case (cur == nil && st.ModRevision == 0) || (cur != nil && cur.ModRevision == st.ModRevision):
			return statePending, "", nil
		}
		return stateConflict, "", &ConflictError{Key: st.Key, Expected: expected, Actual: revText(cur),
			Reason: "the config was changed since the plan was made; read it again and re-plan"}
	}
	return statePending, "", errors.New("unknown action " + string(st.Action))
}

func describeStep(st Step) string {
	switch st.Action {
	case ActionDeleteLease:
		return "delete " + st.Key
	case ActionMoveLease:
		return fmt.Sprintf("move %s to %s (etcd lease %x kept)", st.Key, st.NewKey, st.LeaseID)
	default:
		return "write " + st.Key
	}
}
