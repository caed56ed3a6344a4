package nodecidr

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

// errDead is what every call gets once the simulated process is dead.
var errDead = fmt.Errorf("dial tcp 127.0.0.1:6443: connect: %w", syscall.ECONNREFUSED)

// crasher kills the simulated process at the at-th API call: either before
// the server sees it, or after the server applied it but before the client
// got the answer. At that instant it copies the journal directory, which is
// what a SIGKILL would leave on disk, and cancels the run's context. The
// reactor runs on an Apply worker: it records a failed copy in copyErr for the
// test goroutine to check, never calls require.
type crasher struct {
	mu       sync.Mutex
	server   *nodecidrtest.Server
	calls    int
	at       int
	after    bool
	dead     bool
	journal  string
	snapshot string
	copyErr  error
	cancel   context.CancelFunc
}

func (c *crasher) install(t *testing.T, cs *fake.Clientset) {
	snapDir := t.TempDir()
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.dead {
			return true, nil, errDead
		}
		c.calls++
		if c.calls != c.at {
			return false, nil, nil
		}
		if c.after {
			// Node and pod calls take effect; access reviews have no effect to apply.
			_, _, _ = c.server.Handle(a)
		}
		c.snapshot, c.copyErr = snapDir, copyJournal(snapDir, c.journal)
		c.dead = true
		c.cancel()
		return true, nil, errDead
	})
}

// copyJournal copies the journal files of dir into snap.
func copyJournal(snap, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") || e.Name() == "LOCK" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(snap, e.Name()), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func crashCluster(t *testing.T) ([]*corev1.Node, *fake.Clientset, *nodecidrtest.Server, *Plan) {
	orig := storyOne()
	c, s := newCluster(orig...)
	for _, n := range orig {
		s.AddPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-" + n.Name},
			Spec: corev1.PodSpec{NodeName: n.Name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	return orig, c, s, rebasePlan(t, c)
}

// crashOptions cordons and runs a hook when full is set; without them a node
// gets no journal record between its backup and done.
func crashOptions(c *fake.Clientset, dir string, conc int, full bool) ApplyOptions {
	var hooks []Hook
	if full {
		hooks = []Hook{DeleteNodePods(c, DeletePodsOptions{Namespace: "default"})}
	}
	return ApplyOptions{
		JournalDir:  dir,
		Cordon:      full,
		Concurrency: conc,
		Hooks:       hooks,
		Retry:       Retry{Initial: time.Millisecond, Max: 2 * time.Millisecond, Timeout: 100 * time.Millisecond},
		CreateGrace: 20 * time.Millisecond,
	}
}

// TestCrashAtEveryCall kills a run at every API call it makes, before and
// after the server applies the call, then resumes from the journal as it was
// at that instant. Every resume must end in the planned state with nothing
// lost, and a third run must change nothing.
func TestCrashAtEveryCall(t *testing.T) {
	// Count the calls of an undisturbed run.
	_, c, _, p := crashCluster(t)
	rec := record(c)
	_, err := Apply(ctxT(t), c, p, crashOptions(c, t.TempDir(), 1, true))
	require.NoError(t, err)
	total := len(rec.actions)
	// 3 nodes x (cordon, delete, create, uncordon, the hook's pod list and
	// delete), the LIST and the access reviews.
	require.Greater(t, total, 20)

	for _, full := range []bool{true, false} {
		for _, conc := range []int{1, 3} {
			for _, after := range []bool{false, true} {
				for at := 1; at <= total; at++ {
					name := fmt.Sprintf("cordon+hook=%t/concurrency=%d/after=%t/call=%d", full, conc, after, at)
					t.Run(name, func(t *testing.T) {
						orig, c, s, p := crashCluster(t)
						dir := t.TempDir()
						ctx, cancel := context.WithCancel(ctxT(t))
						defer cancel()
						cr := &crasher{server: s, at: at, after: after, journal: dir, cancel: cancel}
						cr.install(t, c)
						_, err := Apply(ctx, c, p, crashOptions(c, dir, conc, full))
						cr.mu.Lock()
						snap, crashed, copyErr := cr.snapshot, cr.dead, cr.copyErr
						cr.dead = false
						cr.at = -1
						cr.mu.Unlock()
						if !crashed {
							require.NoError(t, err)
							t.Skip("the run made fewer calls")
						}
						require.Error(t, err)
						require.NoError(t, copyErr, "copy the journal at the crash")

						_, err = Apply(ctxT(t), c, p, crashOptions(c, snap, conc, full))
						require.NoError(t, err, "resume")
						checkMoved(t, s, orig, p)
						if full {
							for _, pod := range s.Pods() {
								t.Errorf("pod %s on %s was not restarted by the hook", pod.Name, pod.Spec.NodeName)
							}
						}
						v, err := Verify(ctxT(t), c, p, VerifyOptions{JournalDir: snap})
						require.NoError(t, err)
						assert.True(t, v.OK, "%v", v.Findings)

						rec := record(c)
						res, err := Apply(ctxT(t), c, p, crashOptions(c, snap, conc, full))
						require.NoError(t, err)
						assert.Len(t, res.AlreadyDone, len(p.Steps))
						assert.Empty(t, rec.writes())
					})
				}
			}
		}
	}
}
