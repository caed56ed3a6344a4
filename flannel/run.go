package flannel

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cidrshift/cidrshift/internal/lease"
)

// The record an Apply keeps in etcd, next to flannel's keys, so a run on
// another machine (another JournalDir, or none) finds an unfinished run and
// finishes it, and no value a run deleted or overwrote is lost with the
// machine that ran it.
//
// What is kept: the first transaction of a run also writes the run key
// <prefix>/cidrshift/run/<plan ID> (RunKey) holding the plan, who started
// the run and when, so a run key exists once a step was written, and a run
// whose first write failed leaves none. Each step's transaction also puts,
// under <run key>/<step number>, the key as it was before the step (value,
// mod revision, etcd lease; absent for a config that did not exist): that
// record exists if and only if the step's write happened. flanneld v0.28
// reads only <prefix>/config and the keys starting with <prefix>/subnets,
// so it never sees them (nor do Snapshot and Audit).
//
// Size: the run key holds the whole plan in one etcd value, so a plan must
// fit etcd's request limit (--max-request-bytes, default 1.5 MiB: some
// thousands of steps); a larger one fails before its first write.
//
// Retention: once every step is applied or already done, Apply deletes the
// run key and its records; nothing is left of a finished run. A run that
// stopped (a conflict, a lost lock, a crash) keeps them until the same plan
// is applied to its end: UnfinishedRuns lists them, with their plans;
// `etcdctl del --prefix <prefix>/cidrshift/run/<plan ID>` gives one up.

// runDir is where, under the registry prefix, Apply keeps its runs.
const runDir = "/cidrshift/run/"

// maxCleanupOps bounds the deletes of one cleanup transaction, below
// etcd's default --max-txn-ops (128).
const maxCleanupOps = 100

// RunKey returns the etcd key of the run applying the plan with ID planID:
// <prefix>/cidrshift/run/<plan ID>.
func (r *Registry) RunKey(planID string) string { return r.prefix + runDir + planID }

// Run is an Apply that has not finished, as kept in etcd under its run key.
type Run struct {
	// Key is the run key, <prefix>/cidrshift/run/<plan ID>.
	Key  string `json:"key"`
	Plan *Plan  `json:"plan"`
	// StartedBy is who started the run (user@host/pid), Started when.
	StartedBy string    `json:"startedBy"`
	Started   time.Time `json:"started"`
	// Old are the keys the run's transactions overwrote or deleted, as
	// they were, by step index (0-based, as Plan.Steps).
	Old map[int]OldValue `json:"old,omitempty"`
}

// OldValue is a key as it was before a step's transaction wrote it.
type OldValue struct {
	Key string `json:"key"`
	// Absent: the key did not exist (a config written for the first time).
	Absent      bool   `json:"absent,omitempty"`
	Value       string `json:"value,omitempty"`
	ModRevision int64  `json:"modRevision,omitempty"`
	// LeaseID is the etcd lease the key carried.
	LeaseID int64 `json:"leaseID,omitempty"`
}

// runRecord is the value of the run key.
type runRecord struct {
	Plan      *Plan     `json:"plan"`
	StartedBy string    `json:"startedBy"`
	Started   time.Time `json:"started"`
}

// UnfinishedRuns reads every run kept under <prefix>/cidrshift/run/, the
// oldest first; a run is kept until its plan is applied to the end, so each
// is unfinished. Apply its Plan (another JournalDir is fine) to finish it.
func (r *Registry) UnfinishedRuns(ctx context.Context) ([]Run, error) {
	dir := r.prefix + runDir
	res, err := r.kv.Get(ctx, dir, GetOptions{Prefix: true})
	if err != nil {
		return nil, fmt.Errorf("read the runs under %s: %w", dir, err)
	}
	runs := map[string]*Run{}
	old := map[string]map[int]OldValue{}
	for _, kv := range res.KVs {
		id, step, isOld := strings.Cut(strings.TrimPrefix(kv.Key, dir), "/")
		if !isOld {
			var rec runRecord
			if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.Plan == nil {
				return nil, fmt.Errorf("%w: run key %s holds no run record: %v", ErrInvalidPlan, kv.Key, err)
			}
			runs[id] = &Run{Key: kv.Key, Plan: rec.Plan, StartedBy: rec.StartedBy, Started: rec.Started}
			continue
		}
		n, err := strconv.Atoi(step)
		var ov OldValue
		if err == nil {
			err = json.Unmarshal(kv.Value, &ov)
		}
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: run record %s is not <run key>/<step number> holding an old value: %v", ErrInvalidPlan, kv.Key, err)
		}
		if old[id] == nil {
			old[id] = map[int]OldValue{}
		}
		old[id][n-1] = ov
	}
	out := make([]Run, 0, len(runs))
	for id, run := range runs {
		run.Old = old[id]
		out = append(out, *run)
	}
	slices.SortFunc(out, func(a, b Run) int { return a.Started.Compare(b.Started) })
	return out, nil
}

// runKeyOp is the put of the run key of plan p, in the run's first
// transaction.
func runKeyOp(key string, p *Plan) (Op, error) {
	rec, err := json.Marshal(runRecord{Plan: p, StartedBy: lease.Identity(), Started: time.Now().UTC()})
	if err != nil {
		return Op{}, fmt.Errorf("encode run key %s: %w", key, err)
	}
	return Op{Type: OpPut, Key: key, Value: rec}, nil
}

// oldValueOp is the put, in step i's transaction, of old (nil: absent), the
// key the step writes as it was read at the mod revision the transaction
// compares.
func oldValueOp(runKey string, i int, key string, old *KeyValue) (Op, error) {
	ov := OldValue{Key: key, Absent: old == nil}
	if old != nil {
		ov.Value, ov.ModRevision, ov.LeaseID = string(old.Value), old.ModRevision, old.Lease
	}
	data, err := json.Marshal(ov)
	if err != nil {
		return Op{}, fmt.Errorf("encode the old value of %s: %w", key, err)
	}
	return Op{Type: OpPut, Key: fmt.Sprintf("%s/%d", runKey, i+1), Value: data}, nil
}

// finishRun deletes the run key and its records, the records first, so a
// cleanup cut short still leaves the run to be found and finished again.
func (r *Registry) finishRun(ctx context.Context, key string) error {
	res, err := r.kv.Get(ctx, key+"/", GetOptions{Prefix: true})
	if err != nil {
		return fmt.Errorf("read the records of run %s: %w", key, err)
	}
	keys := make([]string, 0, len(res.KVs)+1)
	for _, kv := range res.KVs {
		keys = append(keys, kv.Key)
	}
	for batch := range slices.Chunk(append(keys, key), maxCleanupOps) {
		ops := make([]Op, len(batch))
		for i, k := range batch {
			ops[i] = Op{Type: OpDelete, Key: k}
		}
		if _, err := r.kv.Txn(ctx, Txn{Then: ops}); err != nil {
			return fmt.Errorf("delete finished run %s: %w", key, err)
		}
	}
	return nil
}
