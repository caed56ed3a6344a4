package servicecidr_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/kubetest"
	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// TestApplyDeletesNothingItCouldNotJournal fails the write of the cluster
// journal at each of a run's journal writes in turn (the ConfigMap write
// answered with an error). Whatever write fails, no Service, no
// default/kubernetes and no ServiceCIDR is deleted unless its record is in
// the cluster journal when the delete is sent, and a run resumed with the
// same journals finishes with every Service moved and intact.
func TestApplyDeletesNothingItCouldNotJournal(t *testing.T) {
	ref := journalFaultRun(t, -1, -1)
	require.NoError(t, ref.err)
	require.Empty(t, ref.unjournaled)
	require.Len(t, ref.deletes, 6, "the old ServiceCIDR, four Services and default/kubernetes")
	stopped := map[string]bool{}
	for n := range ref.writes {
		r := journalFaultRun(t, n, -1)
		assert.Empty(t, r.unjournaled, "journal write %d of %d failed: deletes sent without their record", n+1, ref.writes)
		if r.err != nil {
			// The run stops at the delete whose record it could not write.
			assert.ErrorContains(t, r.err, "etcd: request timed out", "journal write %d of %d failed", n+1, ref.writes)
			what, _, ok := strings.Cut(strings.TrimPrefix(r.err.Error(), "journaling "), " before deleting it: ")
			require.True(t, ok, "journal write %d of %d failed: %v", n+1, ref.writes, r.err)
			kind, name, _ := strings.Cut(what, " ")
			key := map[string]string{"Service": "service/", "ServiceCIDR": "servicecidr/"}[kind] + name
			if name == servicecidr.KubernetesService {
				key = "kubernetes/" + name
			}
			assert.NotContains(t, r.deletes, key, "journal write %d of %d failed", n+1, ref.writes)
			assert.False(t, stopped[key], "two writes journal the delete of %s", key)
			stopped[key] = true
		} else {
			// A record written after its delete's create, or the run's
			// end: the run goes on and says so.
			assert.Contains(t, strings.Join(r.res.Warnings, "\n"), "journal", "journal write %d of %d failed", n+1, ref.writes)
		}
		r.resume(t, fmt.Sprintf("journal write %d of %d failed", n+1, ref.writes))
	}
	assert.Len(t, stopped, len(ref.deletes), "each delete's own journal write, failed, stops the run before it: %v", stopped)
}

// TestApplySendsNoDeleteOnceItsLockIsLost loses the run's lock at each of
// its checks in turn (one before each delete): the run stops with the
// lock's error, the deletes before the failed check are the only ones
// sent, and a run resumed with a lock of its own finishes with every
// Service moved and intact.
func TestApplySendsNoDeleteOnceItsLockIsLost(t *testing.T) {
	ref := journalFaultRun(t, -1, -1)
	require.NoError(t, ref.err)
	require.Equal(t, len(ref.deletes), ref.lock.checks, "a check before each delete")
	for n := range ref.lock.checks {
		r := journalFaultRun(t, -1, n)
		require.ErrorIs(t, r.err, kubetest.ErrLockLost, "the lock lost at check %d of %d", n+1, ref.lock.checks)
		assert.Empty(t, r.unjournaled, "the lock lost at check %d of %d", n+1, ref.lock.checks)
		assert.Equal(t, ref.deletes[:n], append([]string{}, r.deletes...), "the lock lost at check %d of %d: the deletes before it, and no other", n+1, ref.lock.checks)
		r.resume(t, fmt.Sprintf("the lock lost at check %d of %d", n+1, ref.lock.checks))
	}
}

// resume applies the plan again with the same journals and a lock that
// holds, and checks that every Service is moved and intact.
func (r *journalFault) resume(t *testing.T, after string) {
	t.Helper()
	r.lock = &watchedLock{inner: kubetest.Lock{ChecksLeft: -1}}
	res, err := r.c.Apply(context.Background(), r.p, r.opts(r.dir))
	require.NoError(t, err, "the run resumed after %s (first run: %v)", after, r.err)
	assertMovedIntact(t, r.cl, r.before, r.p)
	assert.Len(t, r.cl.Services(), len(r.before), "%s: no Service lost or duplicated", after)
	assert.NotContains(t, strings.Join(res.Warnings, "\n"), "not recreated", after)
}

// watchedLock is a kubetest.Lock that counts its checks and remembers
// whether one failed.
type watchedLock struct {
	inner  kubetest.Lock
	mu     sync.Mutex
	checks int
	lost   bool
}

func (w *watchedLock) Lock(ctx context.Context) (func(), error) { return w.inner.Lock(ctx) }

func (w *watchedLock) Check() error {
	err := w.inner.Check()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checks++
	w.lost = w.lost || err != nil
	return err
}

func (w *watchedLock) isLost() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

type journalFault struct {
	cl          *servicecidrtest.Cluster
	c           *servicecidr.Client
	p           *servicecidr.Plan
	before      map[string]corev1.Service
	dir         string
	lock        *watchedLock
	writes      int
	unjournaled []string
	deletes     []string
	res         *servicecidr.Result
	err         error
}

func (r *journalFault) opts(dir string) servicecidr.ApplyOptions {
	o := faultApply(dir)
	o.Concurrency = 1 // the same order of writes in every run
	o.Lock = r.lock
	o.ClusterJournal = &servicecidr.ClusterJournal{Namespace: "cidrshift"}
	return o
}

// journalFaultRun applies story 3 with its cluster journal's write number
// failAt failing and its lock lost after checksLeft checks (each counted
// from 0; -1: never), and returns what happened. Deletes sent without
// their record in the cluster journal, or after a check of the lock
// failed, are in unjournaled.
func journalFaultRun(t *testing.T, failAt, checksLeft int) *journalFault {
	t.Helper()
	r := &journalFault{cl: servicecidrtest.MustNew(faultOptions("v1")), dir: t.TempDir(),
		lock: &watchedLock{inner: kubetest.Lock{ChecksLeft: checksLeft}}}
	kubetest.EnforceCAS(r.cl.Kube, "configmaps")
	r.c = connect(t, r.cl)
	po := story3PlanOptions()
	po.IncludeLoadBalancers = true
	var err error
	r.p, err = r.c.Plan(context.Background(), po)
	require.NoError(t, err)
	r.before = servicesByKey(r.cl)

	fault := kubetest.FailWrite(r.cl.Kube, "configmaps", failAt, errors.New("etcd: request timed out"))
	var mu sync.Mutex
	journaled := func(key string) func(a k8stesting.Action) (bool, runtime.Object, error) {
		return func(a k8stesting.Action) (bool, runtime.Object, error) {
			d := a.(k8stesting.DeleteActionImpl)
			k := key + d.GetName()
			if key == "service/" {
				k = key + d.GetNamespace() + "/" + d.GetName()
				if d.GetNamespace()+"/"+d.GetName() == servicecidr.KubernetesService {
					k = "kubernetes/" + servicecidr.KubernetesService
				}
			}
			_, ok, err := clusterRecord(r.cl.Kube, k)
			mu.Lock()
			r.deletes = append(r.deletes, k)
			switch {
			case r.lock.isLost():
				r.unjournaled = append(r.unjournaled, k+": sent after a check of the lock failed")
			case err != nil:
				r.unjournaled = append(r.unjournaled, k+": "+err.Error())
			case !ok:
				r.unjournaled = append(r.unjournaled, k+": not in the cluster journal")
			}
			mu.Unlock()
			return false, nil, nil
		}
	}
	r.cl.Kube.PrependReactor("delete", "services", journaled("service/"))
	r.cl.Dynamic.PrependReactor("delete", "servicecidrs", journaled("servicecidr/"))
	r.cl.Kube.PrependReactor("delete", "servicecidrs", journaled("servicecidr/"))
	r.res, r.err = r.c.Apply(context.Background(), r.p, r.opts(r.dir))
	r.writes = fault.Writes()
	return r
}
