package calico_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/internal/kubetest"
)

// A swap that loses its lock stops before its next restart (coredns, moved first, passed the one check); another
// machine (another journal directory) resumes it from the journal kept in
// the cluster, with the same restartedAt values, and keeps the old pool
// there before deleting it.
func TestApplyStopsWhenTheLockIsLostAndResumesFromTheClusterJournal(t *testing.T) {
	e := newEnv(t, envOptions{api: calico.APICRDV1})
	ctx := context.Background()
	req := request()
	req.AllowDeleteBarePods = true
	plan, err := calico.Plan(ctx, e.cl, req)
	require.NoError(t, err)

	lock := &kubetest.Lock{ChecksLeft: 1}
	opts := fastOptions(t.TempDir())
	opts.Concurrency = 1
	opts.OnEvent = e.onEvent
	opts.Lock = lock
	opts.ClusterJournal = &calico.ClusterJournal{Namespace: "cidrshift", Keep: true}
	res, err := calico.Apply(ctx, e.cl, plan, opts)
	require.ErrorIs(t, err, kubetest.ErrLockLost)
	assert.ErrorContains(t, err, "not restarting DaemonSet/kube-system/agent: the run no longer holds its lock")
	assert.False(t, res.Done)
	assert.False(t, lock.Held(), "released")
	_, err = e.pools.Get(ctx, oldPoolName)
	require.NoError(t, err, "the old pool is still there")

	opts2 := fastOptions(t.TempDir())
	opts2.OnEvent = e.onEvent
	opts2.Lock = &kubetest.Lock{ChecksLeft: -1}
	opts2.ClusterJournal = opts.ClusterJournal
	res, err = calico.Apply(ctx, e.cl, plan, opts2)
	require.NoError(t, err)
	assert.True(t, res.Resumed, "resumed from the cluster's copy of the journal")
	assert.True(t, res.Done)
	assert.True(t, res.OldPoolDeleted)

	cms, err := e.kube.CoreV1().ConfigMaps("cidrshift").List(ctx, metav1.ListOptions{LabelSelector: "journal.cidrshift.io/scope=" + calico.LockScope})
	require.NoError(t, err)
	pool := false
	for _, cm := range cms.Items {
		assert.Equal(t, "finished", cm.Labels["journal.cidrshift.io/state"])
		for _, v := range cm.Data {
			pool = pool || (strings.Contains(v, `"`+oldPoolName+`"`) && strings.Contains(v, oldCIDR))
		}
	}
	assert.True(t, pool, "the old IPPool was kept in the cluster journal before its delete")
}

// Both PoolStores take the lock of the Lock option around each create,
// update and delete and release it after; a lock the run no longer holds is
// refused before the write, with an error naming it. Dry runs take no lock.
func TestPoolStoreWritesTakeAndCheckTheLock(t *testing.T) {
	ctx := context.Background()
	for api, s := range stores(t) {
		t.Run(string(api), func(t *testing.T) {
			lost := func() *kubetest.Lock {
				return &kubetest.Lock{Name: "kube-system/" + calico.LockScope, ChecksLeft: 0}
			}
			old, err := s.Get(ctx, oldPoolName)
			require.NoError(t, err)
			disabled := old.DeepCopy()
			disabled.Spec.Disabled = true
			calls := []struct {
				what  string
				write func(l calico.Locker, dry bool) error
				done  func() bool
			}{
				{"not creating " + string(api) + " ippool \"" + newPoolName + "\"", func(l calico.Locker, dry bool) error {
					_, err := s.Create(ctx, calico.IPPool{Name: newPoolName, Spec: calico.PoolSpec{CIDR: newCIDR}}, calico.WriteOptions{Lock: l, DryRun: dry})
					return err
				}, func() bool { _, err := s.Get(ctx, newPoolName); return err == nil }},
				{"not updating " + string(api) + " ippool \"" + oldPoolName + "\"", func(l calico.Locker, dry bool) error {
					_, err := s.Update(ctx, disabled, calico.WriteOptions{Lock: l, DryRun: dry})
					return err
				}, func() bool { p, err := s.Get(ctx, oldPoolName); return err == nil && p.Spec.Disabled }},
				{"not deleting " + string(api) + " ippool \"" + oldPoolName + "\"", func(l calico.Locker, dry bool) error {
					return s.Delete(ctx, oldPoolName, calico.DeleteOptions{Lock: l, DryRun: dry})
				}, func() bool { _, err := s.Get(ctx, oldPoolName); return err != nil }},
			}
			for _, call := range calls {
				l := lost()
				err := call.write(l, false)
				require.ErrorIs(t, err, kubetest.ErrLockLost, call.what)
				assert.ErrorContains(t, err, call.what+": the run no longer holds its lock: test lock lost: lease kube-system/cidrshift-calico-pool")
				assert.False(t, call.done(), "%s: nothing written", call.what)
				assert.False(t, l.Held(), "%s: released", call.what)

				require.NoError(t, call.write(lost(), true), "%s: a dry run takes no lock", call.what)
				assert.False(t, call.done(), "%s: a dry run writes nothing", call.what)

				l = &kubetest.Lock{ChecksLeft: 1}
				require.NoError(t, call.write(l, false), call.what)
				assert.True(t, call.done(), "%s: written", call.what)
				assert.False(t, l.Held(), "%s: released after the write", call.what)
				assert.Zero(t, l.ChecksLeft, "%s: checked once", call.what)
			}
		})
	}
}
