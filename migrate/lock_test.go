package migrate

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cidrshift/cidrshift/internal/kubetest"
)

// A run that loses its lock does not start its next writing step; the
// steps hold the run's lock in Env.Lock.
func TestRunnerStopsBeforeTheNextStepWhenTheLockIsLost(t *testing.T) {
	lock := &kubetest.Lock{ChecksLeft: 1}
	var seen Locker
	c := &toy{open: true}
	probe := StepFunc{StepName: "probe", DoFunc: func(_ context.Context, env *Env, _ *StepReport) error { seen = env.Lock; return nil }}
	_, err := (&Runner{Mode: ModeApply, JournalDir: t.TempDir(), Lock: lock}).Run(t.Context(), compositionOf(probe))
	require.NoError(t, err)
	assert.Same(t, lock, seen, "the steps get the run's lock")

	lock.ChecksLeft = 1
	rep, err := (&Runner{Mode: ModeApply, JournalDir: t.TempDir(), Lock: lock}).Run(t.Context(), c)
	require.ErrorIs(t, err, kubetest.ErrLockLost)
	assert.ErrorContains(t, err, "not starting step gate: the run no longer holds its lock")
	assert.Equal(t, 1, c.total, "step one ran, nothing after")
	assert.Zero(t, c.calls["gate"])
	assert.Equal(t, []string{StatusCompleted, StatusCompleted}, statuses(rep))
	assert.False(t, lock.Held())

	seen = nil
	_, err = (&Runner{Mode: ModePlan, Lock: lock}).Run(t.Context(), compositionOf(probe))
	require.NoError(t, err)
	assert.Nil(t, seen, "a plan hands no lock to its steps")
}

// A run paused on one machine is resumed from the cluster journal on
// another (an empty journal directory), without repeating a step; the
// finished run leaves no open records.
func TestRunnerResumesFromTheClusterJournalOnAnotherMachine(t *testing.T) {
	kube := fake.NewClientset()
	kubetest.EnforceCAS(kube, "configmaps")
	cj := &ClusterJournal{Client: kube, Namespace: "cidrshift"}
	c := &toy{intent: map[string]string{"to": "b"}}
	a := Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "a"), Lock: &kubetest.Lock{ChecksLeft: -1}, ClusterJournal: cj}
	rep, err := a.Run(t.Context(), c)
	require.NoError(t, err)
	require.True(t, rep.Paused())
	assert.Equal(t, 1, c.total)
	open := func() int {
		cms, err := kube.CoreV1().ConfigMaps("cidrshift").List(t.Context(), metav1.ListOptions{LabelSelector: "journal.cidrshift.io/scope=cidrshift-migrate-toy,journal.cidrshift.io/state=open"})
		require.NoError(t, err)
		return len(cms.Items)
	}
	require.Equal(t, 1, open(), "the paused run's records are in the cluster")

	c.open = true
	b := Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "b"), Lock: &kubetest.Lock{ChecksLeft: -1}, ClusterJournal: cj}
	rep, err = b.Run(t.Context(), c)
	require.NoError(t, err)
	assert.Equal(t, []string{StatusCompleted, StatusDone, StatusCompleted, StatusCompleted}, statuses(rep))
	assert.Equal(t, 11, c.total, "step one is not repeated on the other machine")
	assert.Equal(t, 0, open(), "the finished run is closed")

	_, err = (&Runner{Mode: ModeApply, JournalDir: t.TempDir(), ClusterJournal: cj}).Run(t.Context(), c)
	require.ErrorIs(t, err, ErrInvalidInput, "a cluster journal without a lock is refused")
	env := &Env{Mode: ModeApply, kind: "toy", cluster: cj}
	assert.Equal(t, &ClusterScope{Namespace: "cidrshift", Name: "cidrshift-migrate-toy-nodecidr"}, env.ClusterJournal("nodecidr"))
	env.Mode = ModeServerDryRun
	assert.Nil(t, env.ClusterJournal("nodecidr"))
}

func TestLockScopes(t *testing.T) {
	assert.Equal(t, []string{"cidrshift-migrate-toy"}, LockScopes(&toy{}))
	assert.Equal(t, []string{"cidrshift-servicecidr", "cidrshift-kubeadmcfg"}, LockScopes(&ServiceCIDRMigration{}))
	assert.Equal(t, []string{"cidrshift-calico-pool", "cidrshift-nodecidr", "cidrshift-kubeadmcfg"}, LockScopes(&CalicoPodCIDRMigration{}))
	assert.Equal(t, []string{"cidrshift-flannel", "cidrshift-nodecidr", "cidrshift-kubeadmcfg"}, LockScopes(&FlannelPodCIDRMigration{}))
}
