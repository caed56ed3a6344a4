package flannel

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/flannel/internal/etcdtest"
	"github.com/cidrshift/cidrshift/internal/kubetest"
)

const runConfig = "{\n  \"Network\": \"10.5.0.0/16\",\n  \"SubnetMin\": \"10.5.2.0\",\n  \"Backend\": {\"Type\": \"vxlan\", \"VNI\": 1}\n}"

// etcdRun starts etcd holding a vxlan config and two leases flanneld keeps
// renewing, and returns a registry over its own connection (one machine),
// flanneld's client and the plan that widens the Network to 10.20.0.0/16
// and moves both leases: a config overwrite and two moves.
func etcdRun(t *testing.T) (*etcdtest.Server, *Registry, *etcdStore, *Plan) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real etcd")
	}
	srv := etcdtest.Start(t)
	store := &etcdStore{cli: srv.Client()}
	store.put(t, pfx+"/config", runConfig, 0)
	for i, name := range []string{"10.5.2.0-24", "10.5.200.0-24"} {
		store.put(t, pfx+"/subnets/"+name, flanneldValue(fmt.Sprintf("10.0.0.%d", i+1), "vxlan"), store.grant(t, 24*time.Hour))
	}
	reg := machine(t, srv)
	snap, err := reg.Snapshot(t.Context())
	require.NoError(t, err)
	p, err := PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("10.20.0.0/16"), MoveLeases: true})
	require.NoError(t, err)
	require.Len(t, p.Steps, 3)
	return srv, reg, store, p
}

// machine is a registry over a connection of its own, as on another machine.
func machine(t *testing.T, srv *etcdtest.Server) *Registry {
	t.Helper()
	kv, err := DialEtcd(t.Context(), etcdConfig(srv))
	require.NoError(t, err)
	t.Cleanup(func() { _ = kv.Close() })
	reg, err := NewRegistry(kv, RegistryOptions{})
	require.NoError(t, err)
	return reg
}

// renewingKV is flanneld renewing key between Apply's read of it and the
// transaction that compares its mod revision.
type renewingKV struct {
	KV
	store *etcdStore
	t     *testing.T
	key   string
}

func (k *renewingKV) Txn(ctx context.Context, t Txn) (*TxnResult, error) {
	for _, op := range t.Then {
		if op.Type == OpDelete && op.Key == k.key {
			cur := k.store.get(k.t, k.key)
			k.store.put(k.t, k.key, string(cur.Value), cur.Lease)
		}
	}
	return k.KV.Txn(ctx, t)
}

// The old value of each key a step writes is recorded in etcd in the
// step's own transaction: the config overwrite leaves the old config under
// the run key, and a move whose comparison fails (flanneld renewed the
// lease in between) writes no record, as it moves nothing.
func TestApplyRecordsTheOldValueInTheStepsTransaction(t *testing.T) {
	ctx := t.Context()
	srv, reg, store, p := etcdRun(t)
	oldConfig := store.get(t, pfx+"/config")
	reg.kv = &renewingKV{KV: reg.kv, store: store, t: t, key: p.Steps[1].Key}

	res, err := reg.Apply(ctx, p, ApplyOptions{})
	require.ErrorAs(t, err, new(*ConflictError))
	assert.Equal(t, []Outcome{OutcomeApplied, OutcomeConflict}, outcomes(res))
	runKey := reg.RunKey(p.ID())
	assert.Equal(t, pfx+"/cidrshift/run/"+p.ID(), runKey)
	assert.Nil(t, store.get(t, runKey+"/2"), "the failed transaction wrote no record")
	assert.NotNil(t, store.get(t, p.Steps[1].Key), "nor moved the lease")

	runs, err := machine(t, srv).UnfinishedRuns(ctx)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, runKey, runs[0].Key)
	assert.Equal(t, p.ID(), runs[0].Plan.ID(), "the run key holds the plan")
	assert.NotEmpty(t, runs[0].StartedBy)
	assert.Equal(t, map[int]OldValue{0: {Key: pfx + "/config", Value: runConfig, ModRevision: oldConfig.ModRevision}}, runs[0].Old,
		"the config as it was before its overwrite")
	assert.Equal(t, p.Steps[0].Value, string(store.get(t, pfx+"/config").Value))
}

// A run killed after its first two steps, on a machine whose journal
// directory is lost, is found in etcd by another machine with an empty
// directory, which finishes it: the same end state as a run never
// interrupted, and nothing of the run left in etcd.
func TestApplyResumesFromTheRunKeyOnAnotherMachine(t *testing.T) {
	ctx := t.Context()
	srv, reg, store, p := etcdRun(t)
	oldLease := store.get(t, p.Steps[1].Key)
	killed := errors.New("killed")
	_, err := reg.Apply(ctx, p, ApplyOptions{JournalDir: t.TempDir(), BeforeWrite: func(_ context.Context, i int, _ Step) error {
		if i == 2 {
			return killed
		}
		return nil
	}})
	require.ErrorIs(t, err, killed)

	other := machine(t, srv)
	runs, err := other.UnfinishedRuns(ctx)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, OldValue{Key: p.Steps[1].Key, Value: string(oldLease.Value), ModRevision: oldLease.ModRevision, LeaseID: oldLease.Lease}, runs[0].Old[1],
		"the moved lease as it was, with its etcd lease")
	assert.NotContains(t, runs[0].Old, 2, "the step not written has no record")
	res, err := other.Apply(ctx, runs[0].Plan, ApplyOptions{JournalDir: t.TempDir()})
	require.NoError(t, err)
	assert.True(t, res.Resumed, "resumed from the run key, the journal directory being empty")
	assert.True(t, res.Done)
	assert.Equal(t, []Outcome{OutcomeAlreadyDone, OutcomeAlreadyDone, OutcomeApplied}, outcomes(res))

	_, err = other.Verify(ctx, p)
	require.NoError(t, err)
	assert.Equal(t, p.Steps[0].Value, string(store.get(t, pfx+"/config").Value))
	for _, st := range p.Steps[1:] {
		assert.Nil(t, store.get(t, st.Key), st.Key)
		moved := store.get(t, st.NewKey)
		require.NotNil(t, moved, st.NewKey)
		assert.Equal(t, st.Value, string(moved.Value))
		assert.Equal(t, st.LeaseID, moved.Lease, "the etcd lease carried over")
	}
	keys, rev := runKeys(t, other.kv)
	assert.Empty(t, keys, "a finished run leaves nothing under its run key")
	runs, err = other.UnfinishedRuns(ctx)
	require.NoError(t, err)
	assert.Empty(t, runs)

	// Applied again, the finished plan writes nothing, not even a run key.
	res, err = reg.Apply(ctx, p, ApplyOptions{})
	require.NoError(t, err)
	assert.False(t, res.Resumed)
	_, after := runKeys(t, other.kv)
	assert.Equal(t, rev, after)
}

// runKeys lists the keys under <prefix>/cidrshift/ and the store's revision.
func runKeys(t *testing.T, kv KV) ([]string, int64) {
	t.Helper()
	res, err := kv.Get(t.Context(), pfx+"/cidrshift/", GetOptions{Prefix: true})
	require.NoError(t, err)
	var keys []string
	for _, e := range res.KVs {
		keys = append(keys, e.Key)
	}
	return keys, res.Revision
}

// memRenewingKV is flanneld renewing key on a MemKV right before the
// transaction that deletes it.
type memRenewingKV struct {
	*MemKV
	key string
}

func (k memRenewingKV) Txn(ctx context.Context, t Txn) (*TxnResult, error) {
	if res, err := k.Get(ctx, k.key, GetOptions{}); err == nil && len(res.KVs) == 1 && slices.ContainsFunc(t.Then, func(o Op) bool { return o.Type == OpDelete && o.Key == k.key }) {
		if _, err := k.Put(k.key, res.KVs[0].Value, res.KVs[0].Lease); err != nil {
			return nil, err
		}
	}
	return k.MemKV.Txn(ctx, t)
}

// A run whose first transaction fails its comparison wrote nothing, so it
// leaves no run key either: nothing to resume.
func TestApplyFirstConflictLeavesNoRunKey(t *testing.T) {
	m, _, mv := oneMove(t)
	reg, err := NewRegistry(memRenewingKV{MemKV: m, key: mv.Steps[0].Key}, RegistryOptions{})
	require.NoError(t, err)
	_, err = reg.Apply(t.Context(), mv, ApplyOptions{})
	require.ErrorAs(t, err, new(*ConflictError))
	keys, _ := runKeys(t, m)
	assert.Empty(t, keys)
}

// opsLimitKV refuses transactions of more operations than etcd's default
// --max-txn-ops.
type opsLimitKV struct{ KV }

func (k opsLimitKV) Txn(ctx context.Context, t Txn) (*TxnResult, error) {
	if len(t.If)+len(t.Then) > 128 {
		return nil, errors.New("etcdserver: too many operations in txn request")
	}
	return k.KV.Txn(ctx, t)
}

// A run of more steps than one etcd transaction may delete is cleaned up
// all the same.
func TestApplyCleansUpALargeRun(t *testing.T) {
	ctx := t.Context()
	m, _, _ := newTestRegistry(t)
	reg, err := NewRegistry(opsLimitKV{m}, RegistryOptions{})
	require.NoError(t, err)
	_, err = m.Put(pfx+"/config", []byte(`{"Network": "10.5.0.0/16", "Backend": {"Type": "vxlan"}}`), 0)
	require.NoError(t, err)
	var keys []string
	for i := range 150 {
		keys = append(keys, fmt.Sprintf("10.5.%d.0-24", i))
		putLease(t, m, keys[i], fmt.Sprintf("10.0.%d.%d", i/200, i%200+1), "vxlan")
	}
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	p, err := PlanDelete(snap, keys, "")
	require.NoError(t, err)
	res, err := reg.Apply(ctx, p, ApplyOptions{})
	require.NoError(t, err)
	assert.True(t, res.Done)
	keys, _ = runKeys(t, m)
	assert.Empty(t, keys)
}

// cutRunKeyDeleteKV fails the first transaction that deletes a run key,
// as a machine that dies between the cleanup's transactions.
type cutRunKeyDeleteKV struct {
	KV
	cut bool
}

func (k *cutRunKeyDeleteKV) Txn(ctx context.Context, t Txn) (*TxnResult, error) {
	for _, op := range t.Then {
		rest, isRun := strings.CutPrefix(op.Key, pfx+runDir)
		if !k.cut && op.Type == OpDelete && isRun && !strings.Contains(rest, "/") {
			k.cut = true
			return nil, errors.New("connection lost")
		}
	}
	return k.KV.Txn(ctx, t)
}

// TestApplyFinishesARunWhoseCleanupStoppedAfterItsRecords: the cleanup
// deletes a run's records first and its run key last, so a cleanup cut
// short between them leaves a run key without records. Applying the plan
// again finds the run done and deletes the run key alone.
func TestApplyFinishesARunWhoseCleanupStoppedAfterItsRecords(t *testing.T) {
	ctx := t.Context()
	m, _, _ := newTestRegistry(t)
	_, err := m.Put(pfx+"/config", []byte(`{"Network": "10.5.0.0/16", "Backend": {"Type": "vxlan"}}`), 0)
	require.NoError(t, err)
	var keys []string
	for i := range maxCleanupOps { // one transaction of records, then the run key's
		keys = append(keys, fmt.Sprintf("10.5.%d.0-24", i))
		putLease(t, m, keys[i], fmt.Sprintf("10.0.0.%d", i+1), "vxlan")
	}
	cut := &cutRunKeyDeleteKV{KV: opsLimitKV{m}}
	reg, err := NewRegistry(cut, RegistryOptions{})
	require.NoError(t, err)
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	p, err := PlanDelete(snap, keys, "")
	require.NoError(t, err)
	_, err = reg.Apply(ctx, p, ApplyOptions{})
	require.ErrorContains(t, err, "connection lost")
	left, _ := runKeys(t, m)
	require.Equal(t, []string{reg.RunKey(p.ID())}, left, "the run key, without records")

	res, err := reg.Apply(ctx, p, ApplyOptions{})
	require.NoError(t, err)
	assert.True(t, res.Done)
	left, _ = runKeys(t, m)
	assert.Empty(t, left)
}

// TestApplyReportsAResumeFromItsJournalAlone: a run whose only trace is in
// its journal directory (its first transaction failed its comparison, so
// etcd holds no run key) is reported resumed when the plan is applied again
// with that directory; the first run is not.
func TestApplyReportsAResumeFromItsJournalAlone(t *testing.T) {
	m, _, mv := oneMove(t)
	reg, err := NewRegistry(memRenewingKV{MemKV: m, key: mv.Steps[0].Key}, RegistryOptions{})
	require.NoError(t, err)
	dir := t.TempDir()
	res, err := reg.Apply(t.Context(), mv, ApplyOptions{JournalDir: dir})
	require.ErrorAs(t, err, new(*ConflictError))
	assert.False(t, res.Resumed, "the first run")
	keys, _ := runKeys(t, m)
	require.Empty(t, keys)
	res, err = reg.Apply(t.Context(), mv, ApplyOptions{JournalDir: dir})
	require.ErrorAs(t, err, new(*ConflictError))
	assert.True(t, res.Resumed, "the journal holds the first run's records")
}

// twoDeletes is a registry holding two leases and the plan deleting both.
func twoDeletes(t *testing.T) (*MemKV, *Registry, *Plan) {
	t.Helper()
	m, _, reg := newConfiguredRegistry(t, storyConfig)
	putLease(t, m, "172.7.1.0-24", "10.0.0.1", "host-gw")
	putLease(t, m, "172.7.2.0-24", "10.0.0.2", "host-gw")
	snap, err := reg.Snapshot(t.Context())
	require.NoError(t, err)
	p, err := PlanDelete(snap, []string{"172.7.1.0-24", "172.7.2.0-24"}, "")
	require.NoError(t, err)
	return m, reg, p
}

// TestApplyErrorsNameTheStepByItsNumber: an error of the second step of a
// plan says "step 2", whatever stopped it; a dry run reports the conflict of
// that step and goes on.
func TestApplyErrorsNameTheStepByItsNumber(t *testing.T) {
	t.Run("renewed since the plan", func(t *testing.T) {
		m, reg, p := twoDeletes(t)
		putLease(t, m, "172.7.2.0-24", "10.0.0.2", "host-gw")
		_, err := reg.Apply(t.Context(), p, ApplyOptions{})
		var ce *ConflictError
		require.ErrorAs(t, err, &ce)
		assert.ErrorContains(t, err, "step 2 (")
		assert.Equal(t, strconv.FormatInt(p.Steps[1].ModRevision, 10), ce.Expected)
		assert.Equal(t, strconv.FormatInt(m.Revision(), 10), ce.Actual, "the mod revision of the renewal")
		res, err := reg.Apply(t.Context(), p, ApplyOptions{DryRun: true})
		require.ErrorAs(t, err, new(*ConflictError))
		assert.ErrorContains(t, err, "step 2 (")
		assert.Equal(t, []Outcome{OutcomeWouldApply, OutcomeConflict}, outcomes(res))
	})
	t.Run("before write", func(t *testing.T) {
		_, reg, p := twoDeletes(t)
		_, err := reg.Apply(t.Context(), p, ApplyOptions{BeforeWrite: func(_ context.Context, i int, _ Step) error {
			if i == 1 {
				return errStoreDown
			}
			return nil
		}})
		require.ErrorIs(t, err, errStoreDown)
		assert.ErrorContains(t, err, "step 2 (")
	})
	t.Run("lock lost", func(t *testing.T) {
		_, reg, p := twoDeletes(t)
		_, err := reg.Apply(t.Context(), p, ApplyOptions{Lock: &kubetest.Lock{ChecksLeft: 1}})
		require.ErrorIs(t, err, kubetest.ErrLockLost)
		assert.ErrorContains(t, err, "step 2 (")
	})
	t.Run("store down at the write", func(t *testing.T) {
		m, _, p := twoDeletes(t)
		fk := &faultKV{KV: m}
		reg, err := NewRegistry(fk, RegistryOptions{})
		require.NoError(t, err)
		_, err = reg.Apply(t.Context(), p, ApplyOptions{BeforeWrite: func(_ context.Context, i int, _ Step) error {
			fk.down = i == 1
			return nil
		}})
		require.ErrorIs(t, err, errStoreDown)
		assert.ErrorContains(t, err, "step 2 (")
	})
	t.Run("renewed right before the write", func(t *testing.T) {
		m, _, p := twoDeletes(t)
		reg, err := NewRegistry(memRenewingKV{MemKV: m, key: p.Steps[1].Key}, RegistryOptions{})
		require.NoError(t, err)
		res, err := reg.Apply(t.Context(), p, ApplyOptions{})
		require.ErrorAs(t, err, new(*ConflictError))
		assert.ErrorContains(t, err, "step 2 (")
		assert.Equal(t, []Outcome{OutcomeApplied, OutcomeConflict}, outcomes(res))
	})
	t.Run("renewed after the first write", func(t *testing.T) {
		// Past the check before the first write: step 2's own check sees
		// it, and the run stops there; step 3 is not written.
		m, _, reg := newConfiguredRegistry(t, storyConfig)
		keys := []string{"172.7.1.0-24", "172.7.2.0-24", "172.7.3.0-24"}
		for i, k := range keys {
			putLease(t, m, k, fmt.Sprintf("10.0.0.%d", i+1), "host-gw")
		}
		snap, err := reg.Snapshot(t.Context())
		require.NoError(t, err)
		p, err := PlanDelete(snap, keys, "")
		require.NoError(t, err)
		res, err := reg.Apply(t.Context(), p, ApplyOptions{BeforeWrite: func(_ context.Context, i int, _ Step) error {
			if i == 0 {
				putLease(t, m, keys[1], "10.0.0.2", "host-gw")
			}
			return nil
		}})
		require.ErrorAs(t, err, new(*ConflictError))
		assert.ErrorContains(t, err, "step 2 (delete-lease): ")
		assert.NotContains(t, err.Error(), "nothing written", "step 1 was written")
		assert.Equal(t, []Outcome{OutcomeApplied, OutcomeConflict}, outcomes(res))
		snap, err = reg.Snapshot(t.Context())
		require.NoError(t, err)
		assert.Nil(t, snap.Lease(pfx+"/subnets/"+keys[0]))
		assert.NotNil(t, snap.Lease(pfx+"/subnets/"+keys[1]), "renewed: kept")
		assert.NotNil(t, snap.Lease(pfx+"/subnets/"+keys[2]), "after the conflict: not written")
	})
	t.Run("log", func(t *testing.T) {
		_, reg, p := twoDeletes(t)
		var steps []string
		log := funcr.New(func(_, args string) { steps = append(steps, args) }, funcr.Options{})
		_, err := reg.Apply(logr.NewContext(t.Context(), log), p, ApplyOptions{})
		require.NoError(t, err)
		require.Len(t, steps, 2)
		assert.Contains(t, steps[0], `"step"=1 `)
		assert.Contains(t, steps[1], `"step"=2 `)
	})
}

// TestVerifyNamesTheStepByItsNumber: Verify's error names the first step
// not done, or the step whose read failed, by its number.
func TestVerifyNamesTheStepByItsNumber(t *testing.T) {
	m, reg, p := twoDeletes(t)
	_, err := reg.Verify(t.Context(), p)
	assert.ErrorContains(t, err, "step 1 (")
	_, err = reg.Apply(t.Context(), p, ApplyOptions{BeforeWrite: func(_ context.Context, i int, _ Step) error {
		if i == 1 {
			return errStoreDown
		}
		return nil
	}})
	require.ErrorIs(t, err, errStoreDown)
	_, err = reg.Verify(t.Context(), p)
	assert.ErrorContains(t, err, "step 2 (")
	assert.ErrorContains(t, err, "is not done: pending")

	down, err := NewRegistry(&faultKV{KV: m, down: true}, RegistryOptions{})
	require.NoError(t, err)
	_, err = down.Verify(t.Context(), p)
	require.ErrorIs(t, err, errStoreDown)
	assert.ErrorContains(t, err, "step 1 (")
}

// TestApplyRefusesAStepWithoutAModRevision: a delete or a move without the
// key's mod revision (an edited plan) would compare nothing the lease's
// renewal changes; it is refused before anything is written.
func TestApplyRefusesAStepWithoutAModRevision(t *testing.T) {
	for _, tc := range []struct {
		name string
		plan func(*testing.T) (*MemKV, *Registry, *Plan)
		why  string
	}{
		{"delete", twoDeletes, "a delete needs the key's mod revision"},
		{"move", oneMove, "a move needs the key's mod revision and a different new key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, reg, p := tc.plan(t)
			rev := m.Revision()
			last := len(p.Steps) - 1
			p.Steps[last].ModRevision = 0
			_, err := reg.Apply(t.Context(), p, ApplyOptions{})
			require.ErrorIs(t, err, ErrInvalidPlan)
			assert.ErrorContains(t, err, fmt.Sprintf("step %d (%s %s): %s", last+1, p.Steps[last].Action, p.Steps[last].Key, tc.why))
			assert.Equal(t, rev, m.Revision(), "nothing written")
		})
	}
}
