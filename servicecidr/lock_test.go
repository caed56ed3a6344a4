package servicecidr_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/internal/kubetest"
	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// A run that loses its lock stops before its next delete, with the Service
// it was about to move untouched; another machine (another journal
// directory) then resumes from the journal kept in the cluster and finishes.
func TestApplyStopsWhenTheLockIsLostAndResumesFromTheClusterJournal(t *testing.T) {
	ctx := context.Background()
	cl := servicecidrtest.MustNew(story3Options("v1"))
	c := connect(t, cl)
	p, err := c.Plan(ctx, story3PlanOptions())
	require.NoError(t, err)
	before := servicesByKey(cl)

	lock := &kubetest.Lock{ChecksLeft: 1}
	o := fastApply(t.TempDir())
	o.Concurrency = 1
	o.Lock = lock
	o.ClusterJournal = &servicecidr.ClusterJournal{Namespace: "cidrshift"}
	_, err = c.Apply(ctx, p, o)
	require.ErrorIs(t, err, kubetest.ErrLockLost)
	assert.ErrorContains(t, err, "the run no longer holds its lock")
	assert.False(t, lock.Held(), "released")
	moved := 0
	for _, m := range p.Moves {
		live, ok := cl.Service(m.Namespace, m.Name)
		require.True(t, ok, "%s is never lost", m.Key())
		if live.UID != before[m.Key()].UID {
			moved++
		}
	}
	assert.Equal(t, 1, moved, "one Service moved before the lock was lost, no delete after")
	cms, err := cl.Kube.CoreV1().ConfigMaps("cidrshift").List(ctx, metav1.ListOptions{LabelSelector: "journal.cidrshift.io/scope=" + servicecidr.LockScope + ",journal.cidrshift.io/state=open"})
	require.NoError(t, err)
	require.NotEmpty(t, cms.Items, "the run's records are in the cluster")

	o2 := fastApply(t.TempDir())
	o2.Lock = &kubetest.Lock{ChecksLeft: -1}
	o2.ClusterJournal = o.ClusterJournal
	res, err := c.Apply(ctx, p, o2)
	require.NoError(t, err)
	assert.Len(t, res.AlreadyMoved, 1)
	assert.Len(t, res.Moved, len(p.Moves)-1)
	assertMovedIntact(t, cl, before, p)
	cms, err = cl.Kube.CoreV1().ConfigMaps("cidrshift").List(ctx, metav1.ListOptions{LabelSelector: "journal.cidrshift.io/state=open"})
	require.NoError(t, err)
	assert.Empty(t, cms.Items, "a finished run leaves no open records")

	o3 := fastApply(t.TempDir())
	o3.ClusterJournal = o.ClusterJournal
	_, err = c.Apply(ctx, p, o3)
	require.ErrorIs(t, err, servicecidr.ErrInvalid, "a cluster journal without a lock is refused")
}
