package main

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/lease"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// --apply is refused at once while another run holds the Lease, naming it;
// --no-lock takes none.
func TestApplyRefusedWhileTheLeaseIsHeld(t *testing.T) {
	c, s := storyOne()
	before := s.Nodes()
	other, err := lease.New(c, lease.Options{Name: nodecidr.LockScope, Identity: "bob@desk/7"})
	require.NoError(t, err)
	release, err := other.Lock(context.Background())
	require.NoError(t, err)
	defer release()
	args := []string{"--from", "10.10.0.0/18", "--to", "10.20.0.0/16", "--apply", "--journal", filepath.Join(t.TempDir(), "j")}
	r := runWith(t, c, args...)
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, "taking the lock: lease kube-system/cidrshift-nodecidr is held by bob@desk/7 until")
	assert.Equal(t, before, s.Nodes(), "nothing changed")

	r = runWith(t, c, append(args, "--keep-cluster-journal", "--no-lock")...)
	assert.Equal(t, 2, r.code, r.stderr)
	r = runWith(t, c, append(args[:len(args)-1], filepath.Join(t.TempDir(), "j2"), "--no-lock")...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "3 node(s) changed")
}

// A run killed with a node deleted and not recreated is finished by the same
// command with another --journal directory (another machine): the plan and
// the node's backup come from the cluster journal. Another command is
// refused while that run is unfinished.
func TestResumeFromTheClusterJournalWithAnotherDirectory(t *testing.T) {
	c, s := storyOne()
	ctx, kill := context.WithCancel(context.Background())
	defer kill()
	var mu sync.Mutex
	dead, killed := false, false
	c.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if ca, ok := a.(k8stesting.CreateActionImpl); ok && !killed && a.GetResource().Resource == "nodes" && ca.GetObject().(*corev1.Node).Name == "w2" {
			dead, killed = true, true // the machine is lost right after w2's delete
			kill()
		}
		if dead {
			return true, nil, syscall.ECONNREFUSED
		}
		return false, nil, nil
	})
	args := []string{"--from", "10.10.0.0/18", "--to", "10.20.0.0/16", "--apply", "--rate", "0", "--concurrency", "1", "--create-grace", "1ms"}
	r := runCtx(ctx, c, append(args, "--journal", filepath.Join(t.TempDir(), "machine-1"))...)
	require.NotEqual(t, 0, r.code, r.stderr)
	_, ok := s.Node("w2")
	require.False(t, ok, "w2 is deleted and not recreated")
	mu.Lock()
	dead = false
	mu.Unlock()

	other := runWith(t, c, "--from", "10.10.0.0/18", "--to", "10.30.0.0/16", "--apply", "--journal", filepath.Join(t.TempDir(), "machine-3"))
	assert.Equal(t, 2, other.code, other.stderr)
	assert.Contains(t, other.stderr, "the cluster journal (ConfigMaps -l journal.cidrshift.io/run=")
	assert.Contains(t, other.stderr, "holds an unfinished run of another command")

	r = runWith(t, c, append(args, "--journal", filepath.Join(t.TempDir(), "machine-2"))...)
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stderr, "resuming plan ")
	assert.Contains(t, r.stderr, "from the cluster journal")
	assert.Contains(t, r.stdout, "Verified: 3 node(s)")
	require.Len(t, s.Nodes(), 3)
	for _, n := range s.Nodes() {
		assert.True(t, strings.HasPrefix(n.Spec.PodCIDR, "10.20."), n.Name)
		assert.Equal(t, "a", n.Labels["pool"], n.Name)
	}
	st, err := nodecidr.ReadClusterJournal(context.Background(), c, nodecidr.ClusterJournal{})
	require.NoError(t, err)
	assert.Nil(t, st, "finished")
}
