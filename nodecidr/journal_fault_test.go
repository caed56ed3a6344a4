package nodecidr

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/kubetest"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

// TestApplyDeletesNoNodeItCouldNotJournal fails the write of the cluster
// journal at each of a run's journal writes in turn (the ConfigMap write
// answered with an error). Whatever write fails, no node is deleted
// unless its full backup is in the cluster journal when the delete is
// sent, a failed backup stops the run before that node's delete, and a
// run resumed with the same journals ends with every node moved.
func TestApplyDeletesNoNodeItCouldNotJournal(t *testing.T) {
	ref := nodeJournalFaultRun(t, -1)
	require.NoError(t, ref.err)
	require.Empty(t, ref.failures)
	require.Len(t, ref.deleted, 4, "the three workers and the control-plane node")
	stopped := map[string]bool{}
	for n := range ref.writes {
		r := nodeJournalFaultRun(t, n)
		assert.Empty(t, r.failures, "journal write %d of %d failed", n+1, ref.writes)
		if r.err != nil {
			assert.ErrorContains(t, r.err, "etcd: request timed out", "journal write %d of %d failed", n+1, ref.writes)
			if _, rest, ok := strings.Cut(r.err.Error(), "not deleting node "); ok {
				node, _, _ := strings.Cut(rest, ",")
				assert.NotContains(t, r.deleted, node, "journal write %d of %d failed", n+1, ref.writes)
				stopped[node] = true
			}
		}
		_, err := Apply(ctxT(t), r.c, r.p, r.opts)
		require.NoError(t, err, "the run resumed after journal write %d of %d failed (first run: %v)", n+1, ref.writes, r.err)
		checkMoved(t, r.s, storyOne(), r.p)
	}
	assert.Len(t, stopped, len(ref.deleted), "each node's backup, failed, stops the run before its delete: %v", stopped)
}

type nodeJournalFault struct {
	c        *fake.Clientset
	s        *nodecidrtest.Server
	p        *Plan
	opts     ApplyOptions
	writes   int
	deleted  []string
	failures []string
	err      error
}

// nodeJournalFaultRun applies story one with its cluster journal's write
// number failAt (counted from 0; -1: none) failing.
func nodeJournalFaultRun(t *testing.T, failAt int) *nodeJournalFault {
	t.Helper()
	r := &nodeJournalFault{}
	r.c, r.s = newCluster(storyOne()...)
	kubetest.EnforceCAS(r.c, "configmaps")
	r.p = rebasePlan(t, r.c)
	fault := kubetest.FailWrite(r.c, "configmaps", failAt, errors.New("etcd: request timed out"))
	var mu sync.Mutex
	r.c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteActionImpl).GetName()
		recs, err := clusterRecords(r.c)
		mu.Lock()
		defer mu.Unlock()
		r.deleted = append(r.deleted, name)
		if err != nil {
			r.failures = append(r.failures, "read the cluster journal before the delete of "+name+": "+err.Error())
			return false, nil, nil
		}
		if rec, ok := recs[name]; !ok || rec.Phase != PhaseBackedUp || rec.Backup == nil || rec.Backup.Name != name {
			r.failures = append(r.failures, "no full backup of "+name+" in the cluster before its delete")
		}
		return false, nil, nil
	})
	r.opts = ApplyOptions{JournalDir: t.TempDir(), Concurrency: 1, CreateGrace: 1, Retry: fastRetry(),
		Lock: &kubetest.Lock{ChecksLeft: -1}, ClusterJournal: &ClusterJournal{}}
	_, r.err = Apply(ctxT(t), r.c, r.p, r.opts)
	r.writes = fault.Writes()
	return r
}
