package nodecidr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/internal/kubetest"
	"github.com/cidrshift/cidrshift/internal/lease"
)

// fakeLock is a Locker whose Check fails once failAfter checks passed
// (never when failAfter is 0); it logs its calls into log.
type fakeLock struct {
	mu        sync.Mutex
	lockErr   error
	failAfter int
	checks    int
	log       *[]string
}

var errLockLost = errors.New("lease lost: taken over by mallory")

func (f *fakeLock) Lock(context.Context) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.log = append(*f.log, "lock")
	if f.lockErr != nil {
		return nil, f.lockErr
	}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		*f.log = append(*f.log, "release")
	}, nil
}

func (f *fakeLock) Check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checks++
	*f.log = append(*f.log, "check")
	if f.failAfter > 0 && f.checks > f.failAfter {
		return errLockLost
	}
	return nil
}

// logWrites appends "delete NODE" and "create NODE" to log for node writes.
func logWrites(c *fake.Clientset, mu *sync.Mutex, log *[]string) {
	c.PrependReactor("*", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch a := a.(type) {
		case k8stesting.DeleteActionImpl:
			*log = append(*log, "delete "+a.GetName())
		case k8stesting.CreateActionImpl:
			*log = append(*log, "create "+a.GetObject().(*corev1.Node).Name)
		}
		return false, nil, nil
	})
}

// Apply takes the lock before its first write, checks it before every
// delete and releases it at the end.
func TestApplyHoldsAndChecksTheLock(t *testing.T) {
	nodes := storyOne()
	c, s := newCluster(nodes...)
	p := rebasePlan(t, c)
	var mu sync.Mutex
	var log []string
	logWrites(c, &mu, &log)
	lk := &fakeLock{log: &log}
	_, err := Apply(ctxT(t), c, p, ApplyOptions{JournalDir: t.TempDir(), Concurrency: 1, Lock: &lockedLog{fakeLock: lk, mu: &mu}})
	require.NoError(t, err)
	checkMoved(t, s, nodes, p)
	require.Equal(t, "lock", log[0])
	require.Equal(t, "release", log[len(log)-1])
	for i, e := range log {
		if strings.HasPrefix(e, "delete ") {
			assert.Equal(t, "check", log[i-1], "a check right before %s: %v", e, log)
		}
	}
	assert.Equal(t, 8, lk.checks, "one check per node before it is touched, one before its delete")
}

// lockedLog serialises fakeLock's log with the reactor's.
type lockedLog struct {
	*fakeLock
	mu *sync.Mutex
}

func (l *lockedLog) Lock(ctx context.Context) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	release, err := l.fakeLock.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		release()
	}, nil
}

func (l *lockedLog) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fakeLock.Check()
}

// A run that loses its lock stops before its next delete: the node in hand
// is left untouched (not deleted), nothing is lost, and the error says why.
func TestApplyStopsWhenTheLockIsLost(t *testing.T) {
	for _, tc := range []struct {
		failAfter int
		msg       string
	}{
		{2, "not touching node w2"}, // lost between two nodes
		{3, "not deleting node w2"}, // lost while w2 is in hand
	} {
		t.Run(tc.msg, func(t *testing.T) {
			nodes := storyOne()
			c, s := newCluster(nodes...)
			p := rebasePlan(t, c)
			var mu sync.Mutex
			var log []string
			logWrites(c, &mu, &log)
			lk := &lockedLog{fakeLock: &fakeLock{log: &log, failAfter: tc.failAfter}, mu: &mu}
			res, err := Apply(ctxT(t), c, p, ApplyOptions{JournalDir: t.TempDir(), Concurrency: 1, Lock: lk})
			require.ErrorIs(t, err, errLockLost)
			assert.ErrorContains(t, err, tc.msg+": the run no longer holds its lock")
			assert.Equal(t, []string{"w1"}, res.Changed)
			assert.Equal(t, 1, strings.Count(strings.Join(log, ","), "delete "), "one node deleted: %v", log)
			require.Len(t, s.Nodes(), 4, "no node lost")
		})
	}
}

// A run that loses its lock runs no further hook: the check comes before
// each hook of each node, the error names the lost Lease, and the node whose
// hooks were not run keeps its record open, so the next Apply runs them.
func TestApplyRunsNoHookAfterTheLockIsLost(t *testing.T) {
	for _, tc := range []struct {
		checksLeft int
		ran        []string
		msg        string
	}{
		{2, nil, "not running hook first on node w1"},                   // lost before w1's first hook
		{3, []string{"first w1"}, "not running hook second on node w1"}, // lost between its two hooks
	} {
		t.Run(tc.msg, func(t *testing.T) {
			nodes := storyOne()
			c, s := newCluster(nodes...)
			p := rebasePlan(t, c)
			var mu sync.Mutex
			var log, ran []string
			logWrites(c, &mu, &log)
			hook := func(name string) Hook {
				return Hook{Name: name, Run: func(_ context.Context, n *corev1.Node) error {
					mu.Lock()
					defer mu.Unlock()
					ran = append(ran, name+" "+n.Name)
					return nil
				}}
			}
			hooks := []Hook{hook("first"), hook("second")}
			// One check before w1 is touched, one before its delete, one per hook.
			lock := &kubetest.Lock{Name: "kube-system/cidrshift-nodecidr", ChecksLeft: tc.checksLeft}
			dir := t.TempDir()
			res, err := Apply(ctxT(t), c, p, ApplyOptions{JournalDir: dir, Concurrency: 1, Hooks: hooks, Lock: lock})
			require.ErrorIs(t, err, kubetest.ErrLockLost)
			assert.ErrorContains(t, err, tc.msg+": the run no longer holds its lock: test lock lost: lease kube-system/cidrshift-nodecidr")
			assert.Equal(t, tc.ran, ran, "no hook after the loss")
			assert.Equal(t, []string{"w1"}, res.Changed, "w1 has its new podCIDRs, its hooks are left to the next run")
			assert.Equal(t, []string{"delete w1", "create w1"}, log, "no other node touched")
			require.Len(t, s.Nodes(), 4, "no node lost")

			ran = nil
			_, err = Apply(ctxT(t), c, p, ApplyOptions{JournalDir: dir, Concurrency: 1, Hooks: hooks, Lock: &kubetest.Lock{ChecksLeft: -1}})
			require.NoError(t, err)
			assert.Equal(t, []string{"first w1", "second w1"}, ran[:2], "the next run runs w1's hooks first")
			checkMoved(t, s, nodes, p)
		})
	}
}

// A lock held elsewhere refuses the run before anything is written.
func TestApplyRefusedByTheLock(t *testing.T) {
	nodes := storyOne()
	c, s := newCluster(nodes...)
	p := rebasePlan(t, c)
	rec := record(c)
	var log []string
	held := &lease.HeldError{Lease: "kube-system/cidrshift-nodecidr", Holder: "bob@desk/7"}
	dir := filepath.Join(t.TempDir(), "j")
	_, err := Apply(ctxT(t), c, p, ApplyOptions{JournalDir: dir, Lock: &fakeLock{log: &log, lockErr: held}})
	require.ErrorIs(t, err, lease.ErrHeld)
	assert.ErrorContains(t, err, "taking the lock")
	assert.Empty(t, rec.writes())
	assert.Equal(t, storyOne()[1].Spec.PodCIDRs, must(s.Node("w1")).Spec.PodCIDRs)
	st, err := ReadJournal(dir)
	require.NoError(t, err)
	assert.Nil(t, st, "nothing recorded")

	// Dry runs do not take it.
	log = nil
	_, err = Apply(ctxT(t), c, p, ApplyOptions{DryRun: DryRunServer, Lock: &fakeLock{log: &log, lockErr: held}})
	require.NoError(t, err)
	assert.Empty(t, log)

	_, err = Apply(ctxT(t), c, p, ApplyOptions{JournalDir: dir, ClusterJournal: &ClusterJournal{}})
	require.ErrorIs(t, err, ErrInvalidOptions)
	assert.ErrorContains(t, err, "a cluster journal needs a Lock")
}

func must[T any](v T, ok bool) T {
	if !ok {
		panic("missing")
	}
	return v
}

// clusterRecords reads the node records of the cluster journal as they are
// now, by node. A reactor calls it on an Apply worker, so it returns its error
// rather than calling require.
func clusterRecords(c *fake.Clientset) (map[string]nodeRecord, error) {
	list, err := c.Tracker().List(corev1.SchemeGroupVersion.WithResource("configmaps"), corev1.SchemeGroupVersion.WithKind("ConfigMap"), "kube-system")
	if err != nil {
		return nil, err
	}
	out := map[string]nodeRecord{}
	for _, cm := range list.(*corev1.ConfigMapList).Items {
		if cm.Labels[journal.LabelState] != journal.StateOpen {
			continue
		}
		for k, v := range cm.Data {
			if !strings.HasPrefix(k, "node_2f") {
				continue
			}
			var rec nodeRecord
			if err := json.Unmarshal([]byte(v), &rec); err != nil {
				return nil, fmt.Errorf("record %s: %w", k, err)
			}
			out[rec.Node] = rec
		}
	}
	return out, nil
}

// The journal is kept in the cluster too: every node's full backup is there
// before its delete. A run killed while a node is deleted and not yet
// recreated, whose journal directory is then lost, is finished from another
// directory: the node comes back from the cluster's backup with all its
// metadata, and the finished run's records are removed.
func TestApplyResumesFromTheClusterJournal(t *testing.T) {
	nodes := storyOne()
	c, s := newCluster(nodes...)
	kubetest.EnforceCAS(c, "configmaps", "leases")
	p := rebasePlan(t, c)
	lk, err := lease.New(c, lease.Options{Name: LockScope})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var mu sync.Mutex
	var failures []string
	c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteActionImpl).GetName()
		recs, err := clusterRecords(c)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failures = append(failures, "read the cluster journal before the delete of "+name+": "+err.Error())
			return false, nil, nil
		}
		rec, ok := recs[name]
		if !ok || rec.Phase != PhaseBackedUp || rec.Backup == nil || rec.Backup.Name != name || rec.Backup.Labels["team"] != "net" {
			failures = append(failures, "no full backup of "+name+" in the cluster before its delete")
		}
		return false, nil, nil
	})
	// w3's create never goes through, and the process dies meanwhile.
	c.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.CreateActionImpl).GetObject().(*corev1.Node).Name == "w3" {
			cancel()
			return true, nil, apierrors.NewServiceUnavailable("apiserver going away")
		}
		return false, nil, nil
	})
	dir1 := filepath.Join(t.TempDir(), "machine-1")
	opts := ApplyOptions{JournalDir: dir1, Concurrency: 1, CreateGrace: 1, Retry: fastRetry(), Lock: lk, ClusterJournal: &ClusterJournal{}}
	_, err = Apply(ctx, c, p, opts)
	require.ErrorIs(t, err, ErrNodeNotRecreated)
	_, ok := s.Node("w3")
	require.False(t, ok, "w3 is deleted and not recreated")
	require.NoError(t, os.RemoveAll(dir1)) // the machine is lost

	st, err := ReadClusterJournal(ctxT(t), c, ClusterJournal{})
	require.NoError(t, err)
	require.NotNil(t, st)
	assert.Equal(t, p.ID(), st.PlanID)
	assert.False(t, st.Finished)
	assert.Equal(t, PhaseBackedUp, st.Phases["w3"])
	require.NotNil(t, st.Cluster)
	assert.Equal(t, lease.Identity(), st.Cluster.StartedBy)
	backup, ok := st.Backup("w3")
	require.True(t, ok)
	assert.Equal(t, "w3", backup.Name)

	c.ReactionChain = c.ReactionChain[1:] // creates go through again
	dir2 := filepath.Join(t.TempDir(), "machine-2")
	opts.JournalDir = dir2
	res, err := Apply(ctxT(t), c, st.Plan, opts)
	require.NoError(t, err)
	assert.Contains(t, res.Changed, "w3")
	checkMoved(t, s, nodes, p)
	mu.Lock()
	assert.Empty(t, failures)
	mu.Unlock()
	local, err := ReadJournal(dir2)
	require.NoError(t, err)
	assert.True(t, local.Finished)

	st, err = ReadClusterJournal(ctxT(t), c, ClusterJournal{})
	require.NoError(t, err)
	assert.Nil(t, st, "the finished run is no longer offered for resuming")
	cms, err := c.CoreV1().ConfigMaps("kube-system").List(ctxT(t), metav1.ListOptions{LabelSelector: journal.LabelScope + "=" + LockScope})
	require.NoError(t, err)
	require.Len(t, cms.Items, 1, "only the emptied first chunk remains")
	assert.Empty(t, cms.Items[0].Data)
	l, err := c.CoordinationV1().Leases("kube-system").Get(ctxT(t), LockScope, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, *l.Spec.HolderIdentity, "the lease is released")
}

func TestRequiredPermissionsClusterJournal(t *testing.T) {
	perms := RequiredPermissions(ApplyOptions{ClusterJournal: &ClusterJournal{Namespace: "ops"}})
	var cm []string
	for _, p := range perms {
		if p.Resource == "configmaps" {
			assert.Equal(t, "ops", p.Namespace)
			cm = append(cm, p.Verb)
		}
	}
	assert.Equal(t, []string{"get", "list", "create", "update", "delete"}, cm)
	for _, p := range RequiredPermissions(ApplyOptions{ClusterJournal: &ClusterJournal{}, DryRun: DryRunServer}) {
		assert.NotEqual(t, "configmaps", p.Resource, "dry runs leave the cluster journal alone")
	}
}
