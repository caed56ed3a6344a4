package nodecidr

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

// recorder remembers every API action, in order.
type recorder struct {
	mu      sync.Mutex
	actions []k8stesting.Action
}

func record(c *fake.Clientset) *recorder {
	r := &recorder{}
	c.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r.mu.Lock()
		r.actions = append(r.actions, a.DeepCopy())
		r.mu.Unlock()
		return false, nil, nil
	})
	return r
}

// writes returns "verb name" for every write to nodes.
func (r *recorder) writes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, a := range r.actions {
		if a.GetResource().Resource != "nodes" {
			continue
		}
		switch a := a.(type) {
		case k8stesting.CreateActionImpl:
			out = append(out, "create "+a.GetObject().(*corev1.Node).Name)
		case k8stesting.DeleteActionImpl:
			out = append(out, "delete "+a.GetName())
		case k8stesting.PatchActionImpl:
			out = append(out, "patch "+a.GetName())
		case k8stesting.UpdateActionImpl:
			out = append(out, "update "+a.GetObject().(*corev1.Node).Name)
		}
	}
	return out
}

type events struct {
	mu  sync.Mutex
	all []Event
}

func (e *events) add(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) phases(node string) []Phase {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Phase
	for _, ev := range e.all {
		if ev.Node == node {
			out = append(out, ev.Phase)
		}
	}
	return out
}

func storyOne() []*corev1.Node {
	return []*corev1.Node{
		node("master1", cidrs("10.10.0.0/24"), cp),
		node("w1", cidrs("10.10.1.0/24")),
		node("w2", cidrs("10.10.2.0/24"), func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		node("w3", cidrs("10.10.3.0/24")),
	}
}

func rebasePlan(t testing.TB, c *fake.Clientset) *Plan {
	t.Helper()
	p, err := MakePlan(ctxT(t), c, PlanOptions{Mode: ModeRebase, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}})
	require.NoError(t, err)
	require.Len(t, p.Steps, 4)
	return p
}

// checkMoved asserts that every original node exists with its planned
// podCIDRs and everything else it had.
func checkMoved(t *testing.T, s *nodecidrtest.Server, originals []*corev1.Node, p *Plan) {
	t.Helper()
	require.Len(t, s.Nodes(), len(originals), "no node lost, none added")
	for _, o := range originals {
		n, ok := s.Node(o.Name)
		require.True(t, ok, "node %s lost", o.Name)
		want := PodCIDRsOf(o)
		if st := p.Step(o.Name); st != nil {
			want = st.NewPodCIDRs
		}
		assert.Equal(t, want, n.Spec.PodCIDRs, o.Name)
		if len(want) > 0 {
			assert.Equal(t, want[0], n.Spec.PodCIDR, o.Name)
		}
		assert.Equal(t, o.Labels, n.Labels, o.Name)
		assert.Equal(t, o.Annotations, n.Annotations, o.Name)
		assert.Equal(t, o.Spec.Taints, n.Spec.Taints, o.Name)
		assert.Equal(t, o.Spec.ProviderID, n.Spec.ProviderID, o.Name)
		assert.Equal(t, o.Spec.Unschedulable, n.Spec.Unschedulable, o.Name)
		assert.Equal(t, o.Status.Addresses, n.Status.Addresses, o.Name)
	}
}

func TestApplyRebase(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	dir := t.TempDir()
	rec := record(c)

	// The backup must be on disk, in phase backed-up, when the delete arrives.
	// The reactor runs on an Apply worker: it records what is wrong (and
	// refuses the delete) rather than calling require there.
	var off offTest
	c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteActionImpl).GetName()
		data, err := os.ReadFile(filepath.Join(dir, "node%2F"+name+".json"))
		if !off.noError(err, "no journal record before delete of "+name) {
			return true, nil, err
		}
		if !strings.Contains(string(data), `"phase": "backed-up"`) || !strings.Contains(string(data), `"providerID": "test://`) {
			off.errorf("journal record of %s before its delete is not a backed-up backup: %s", name, data)
		}
		pre := a.(k8stesting.DeleteActionImpl).DeleteOptions.Preconditions
		if pre == nil || pre.UID == nil {
			off.errorf("delete of %s without a UID precondition: %+v", name, pre)
			return true, nil, errors.New("test: delete without a UID precondition")
		}
		return false, nil, nil
	})
	var ev events
	var hooked []string
	var hmu sync.Mutex
	hook := Hook{Name: "record", Run: func(ctx context.Context, n *corev1.Node) error {
		hmu.Lock()
		defer hmu.Unlock()
		hooked = append(hooked, n.Name+"="+n.Spec.PodCIDR)
		return nil
	}}
	res, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Cordon: true, Hooks: []Hook{hook}, OnEvent: ev.add, Retry: fastRetry()})
	off.check(t)
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
	assert.Equal(t, []string{"master1", "w1", "w2", "w3"}, res.Changed)
	assert.Equal(t, 4, res.Gaps.Count)
	assert.Less(t, res.Gaps.Max, PodGCQuarantine)
	assert.Equal(t, []string{"w1=10.20.1.0/24", "w2=10.20.2.0/24", "w3=10.20.3.0/24", "master1=10.20.0.0/24"}, hooked)
	assert.Equal(t, []string{
		"patch w1", "delete w1", "create w1", "patch w1",
		"delete w2", "create w2", // already unschedulable: not cordoned, not uncordoned
		"patch w3", "delete w3", "create w3", "patch w3",
		"patch master1", "delete master1", "create master1", "patch master1",
	}, rec.writes())
	assert.Equal(t, []Phase{PhaseCordoned, PhaseBackedUp, PhaseDeleted, PhaseCreated, PhaseVerified, PhaseUncordoned, PhaseHook, PhaseDone}, ev.phases("w1"))
	for _, n := range orig {
		now, _ := s.Node(n.Name)
		assert.NotEqual(t, n.UID, now.UID, "recreated")
	}

	st, err := ReadJournal(dir)
	require.NoError(t, err)
	assert.True(t, st.Finished)
	assert.Equal(t, p.ID(), st.PlanID)
	b, ok := st.Backup("w1")
	require.True(t, ok)
	assert.Equal(t, orig[1].UID, b.UID)

	v, err := Verify(ctxT(t), c, p, VerifyOptions{JournalDir: dir})
	require.NoError(t, err)
	assert.True(t, v.OK, "%v", v.Findings)
	assert.Equal(t, 4, v.Checked)

	// Idempotent: a finished plan changes nothing.
	before := len(rec.writes())
	res, err = Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Cordon: true, Hooks: []Hook{hook}, Retry: fastRetry()})
	require.NoError(t, err)
	assert.Empty(t, res.Changed)
	assert.Len(t, res.AlreadyDone, 4)
	assert.Len(t, rec.writes(), before)
	// A node deleted after the run (decommissioned) is not resurrected.
	_, _, err = s.Handle(k8stesting.NewRootDeleteAction(corev1.SchemeGroupVersion.WithResource("nodes"), "w3"))
	require.NoError(t, err)
	res, err = Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Retry: fastRetry()})
	require.NoError(t, err)
	assert.Len(t, res.AlreadyDone, 4)
	_, ok = s.Node("w3")
	assert.False(t, ok)
	before = len(rec.writes())
	// Even with a fresh journal, the moved nodes are recognised as done
	// (w3 is now simply gone, which makes the plan stale there).
	_, err = Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Retry: fastRetry()})
	var stale *StaleError
	require.ErrorAs(t, err, &stale)
	assert.Equal(t, "w3", stale.Changes[0].Node)
	assert.Len(t, rec.writes(), before)
}

func TestApplyEmptyStatusAndConcurrency(t *testing.T) {
	var nodes []*corev1.Node
	for i := range 8 {
		nodes = append(nodes, node(fmt.Sprintf("w%d", i), cidrs(fmt.Sprintf("10.10.%d.0/24", i+1))))
	}
	nodes = append(nodes, node("cp", cidrs("10.10.0.0/24"), cp))
	c, s := newCluster(nodes...)
	p, err := MakePlan(ctxT(t), c, PlanOptions{Mode: ModeRebase, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}})
	require.NoError(t, err)
	rec := record(c)
	res, err := Apply(ctxT(t), c, p, ApplyOptions{JournalDir: t.TempDir(), Concurrency: 3, RateLimit: 1000, EmptyStatus: true, Retry: fastRetry()})
	require.NoError(t, err)
	assert.Len(t, res.Changed, 9)
	w := rec.writes()
	assert.Equal(t, []string{"delete cp", "create cp"}, w[len(w)-2:], "the control plane moves after every worker")
	for _, n := range s.Nodes() {
		assert.Empty(t, n.Status.Conditions, n.Name)
		assert.Equal(t, "net", n.Labels["team"])
	}
}

func TestApplyStalePlan(t *testing.T) {
	ctx := ctxT(t)
	c, s := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	// w3 is recreated by someone else after planning; w1 only gets a status update.
	cur, _ := s.Node("w3")
	require.NoError(t, c.CoreV1().Nodes().Delete(ctx, "w3", metav1.DeleteOptions{}))
	cur.ResourceVersion, cur.UID = "", ""
	_, err := c.CoreV1().Nodes().Create(ctx, cur, metav1.CreateOptions{})
	require.NoError(t, err)
	s.Touch("w1")
	rec := record(c)

	_, err = Apply(ctx, c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Retry: fastRetry()})
	var stale *StaleError
	require.ErrorAs(t, err, &stale)
	require.ErrorIs(t, err, ErrStalePlan)
	require.Len(t, stale.Changes, 1)
	assert.Equal(t, "w3", stale.Changes[0].Node)
	assert.Equal(t, "uid", stale.Changes[0].Field)
	assert.Contains(t, err.Error(), "uid-w3")
	assert.Empty(t, rec.writes(), "nothing changed")

	// StrictResourceVersion also refuses the status update.
	p2 := rebasePlan(t, c)
	s.Touch("w1")
	_, err = Apply(ctx, c, p2, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), StrictResourceVersion: true, Retry: fastRetry()})
	require.ErrorAs(t, err, &stale)
	assert.Equal(t, "resourceVersion", stale.Changes[0].Field)

	// A node without podCIDR that kube-controller-manager served meanwhile.
	c2, _ := newCluster(node("a", cidrs("10.240.0.0/24")), node("b", nil))
	fix, err := MakePlan(ctx, c2, PlanOptions{Mode: ModeFix, Layout: layout(t, "10.240.0.0/12", 24)})
	require.NoError(t, err)
	_, err = c2.CoreV1().Nodes().Patch(ctx, "b", "application/merge-patch+json", []byte(`{"spec":{"podCIDR":"10.240.7.0/24","podCIDRs":["10.240.7.0/24"]}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	_, err = Apply(ctx, c2, fix, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Retry: fastRetry()})
	require.ErrorAs(t, err, &stale)
	assert.Equal(t, Change{Node: "b", Field: "podCIDRs", Planned: "none", Current: "10.240.7.0/24"}, stale.Changes[0])
}

func TestApplyFixPatchesEmptyNodes(t *testing.T) {
	orig := []*corev1.Node{node("a", cidrs("10.240.0.0/24"), age(1)), node("b", cidrs("10.240.0.0/24"), age(2)), node("c", nil)}
	c, s := newCluster(orig...)
	p, err := MakePlan(ctxT(t), c, PlanOptions{Mode: ModeFix, Layout: layout(t, "10.240.0.0/12", 24)})
	require.NoError(t, err)
	rec := record(c)
	_, err = Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Cordon: true, Retry: fastRetry()})
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
	assert.Equal(t, []string{"patch b", "delete b", "create b", "patch b", "patch c"}, rec.writes(), "c only needs the allowed update")
	cNow, _ := s.Node("c")
	assert.EqualValues(t, "uid-c", cNow.UID)
}

func TestApplyCreateFailsAfterDeleteThenSucceeds(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	fails := 0
	c.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if fails < 4 {
			fails++
			if fails%2 == 0 {
				return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
			}
			return true, nil, fmt.Errorf("dial tcp 127.0.0.1:6443: connect: %w", syscall.ECONNREFUSED)
		}
		return false, nil, nil
	})
	var ev events
	res, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), OnEvent: ev.add, Retry: fastRetry()})
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
	assert.Equal(t, 4, fails)
	assert.Contains(t, ev.phases("w1"), PhaseRetrying)
	assert.Equal(t, 4, res.Gaps.Count)
}

func TestApplyPermanentCreateFailureRestoresAndStops(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	refuse := true
	c.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n := a.(k8stesting.CreateActionImpl).GetObject().(*corev1.Node)
		if refuse && strings.HasPrefix(n.Spec.PodCIDR, "10.20.") {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, n.Name, errors.New("admission webhook denied the request"))
		}
		return false, nil, nil
	})
	dir := t.TempDir()
	rec := record(c)
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Retry: fastRetry()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "restored with its old podCIDRs 10.10.1.0/24")
	assert.NotContains(t, strings.Join(rec.writes(), ","), "w2", "the run stopped before the next node")
	w1, ok := s.Node("w1")
	require.True(t, ok, "nothing lost")
	assert.Equal(t, []string{"10.10.1.0/24"}, w1.Spec.PodCIDRs)
	assert.Equal(t, orig[1].Labels, w1.Labels)

	// The plan still applies once the cause is gone: the restored node is expected.
	refuse = false
	_, err = Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Retry: fastRetry()})
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
}

func TestApplyDeleteConflictTakesFreshBackup(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	touched := false
	c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !touched {
			touched = true
			s.Touch(a.(k8stesting.DeleteActionImpl).GetName()) // the kubelet reports status in between
		}
		return false, nil, nil
	})
	var ev events
	dir := t.TempDir()
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, OnEvent: ev.add, Retry: fastRetry()})
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
	assert.Contains(t, ev.phases("w1"), PhaseRetrying)
	st, err := ReadJournal(dir)
	require.NoError(t, err)
	b, _ := st.Backup("w1")
	assert.False(t, b.Status.Conditions[0].LastHeartbeatTime.IsZero(), "the backup is the node as deleted, after the heartbeat")
}

func TestApplyChecksPermissionsFirst(t *testing.T) {
	c, s := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	accesstest.Authorize(c, accesstest.Rule{Verb: "delete", Resource: "nodes"}, accesstest.Rule{Verb: "list", Resource: "pods"})
	rec := record(c)
	hook := DeleteNodePods(c, DeletePodsOptions{})
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Hooks: []Hook{hook}, Retry: fastRetry()})
	require.ErrorIs(t, err, access.ErrDenied)
	assert.Contains(t, err.Error(), "delete nodes")
	assert.Contains(t, err.Error(), "list pods")
	assert.Empty(t, rec.writes())
	assert.Len(t, s.Nodes(), 4)
}

func TestApplyDryRun(t *testing.T) {
	orig := storyOne()
	t.Run("client", func(t *testing.T) {
		c, s := newCluster(orig...)
		p := rebasePlan(t, c)
		rec := record(c)
		var ev events
		dir := filepath.Join(t.TempDir(), "journal")
		res, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, DryRun: DryRunClient, Cordon: true, OnEvent: ev.add})
		require.NoError(t, err)
		assert.Empty(t, rec.writes())
		assert.Len(t, res.Changed, 4)
		assert.NoDirExists(t, dir)
		assert.Equal(t, []Phase{PhaseCordoned, PhaseBackedUp, PhaseDeleted, PhaseCreated}, ev.phases("w1"))
		for _, e := range ev.all {
			assert.True(t, e.DryRun)
		}
		checkMoved(t, s, orig, &Plan{})
	})
	t.Run("server", func(t *testing.T) {
		c, s := newCluster(orig...)
		p := rebasePlan(t, c)
		rec := record(c)
		res, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, DryRun: DryRunServer, Cordon: true, Retry: fastRetry()})
		require.NoError(t, err)
		assert.Len(t, res.Changed, 4)
		assert.NotEmpty(t, rec.writes())
		for _, a := range rec.actions {
			switch a := a.(type) {
			case k8stesting.CreateActionImpl:
				if a.GetResource().Resource == "nodes" {
					assert.Equal(t, []string{metav1.DryRunAll}, a.CreateOptions.DryRun)
				}
			case k8stesting.DeleteActionImpl:
				assert.Equal(t, []string{metav1.DryRunAll}, a.DeleteOptions.DryRun)
			case k8stesting.PatchActionImpl:
				assert.Equal(t, []string{metav1.DryRunAll}, a.PatchOptions.DryRun)
			}
		}
		checkMoved(t, s, orig, &Plan{})
	})
	t.Run("server reports what validation refuses", func(t *testing.T) {
		c, _ := newCluster(orig...)
		p := rebasePlan(t, c)
		c.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "w1", field.ErrorList{field.Invalid(field.NewPath("spec", "podCIDRs"), "x", "refused by a policy")})
		})
		_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, DryRun: DryRunServer, Retry: fastRetry()})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "refused by a policy")
	})
}

// The kubelet restarts while its Node is absent and registers it again,
// without podCIDRs and with only the labels it sets itself.
func TestApplyKubeletReregisters(t *testing.T) {
	for _, assigned := range []string{"", "10.10.9.0/24"} {
		t.Run("podCIDR="+assigned, func(t *testing.T) {
			orig := storyOne()
			c, s := newCluster(orig...)
			p := rebasePlan(t, c)
			done := false
			var off offTest
			c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				name := a.(k8stesting.DeleteActionImpl).GetName()
				handled, obj, err := s.Handle(a)
				if name == "w1" && !done && err == nil {
					done = true
					fresh := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{"kubernetes.io/hostname": "w1"}},
						Status: corev1.NodeStatus{Addresses: orig[1].Status.Addresses}}
					if assigned != "" {
						fresh.Spec.PodCIDR, fresh.Spec.PodCIDRs = assigned, []string{assigned}
					}
					// (a reactor must not call the clientset: the fake holds its lock)
					_, _, cerr := s.Handle(k8stesting.NewRootCreateAction(corev1.SchemeGroupVersion.WithResource("nodes"), fresh))
					off.noError(cerr, "the kubelet registering w1 again")
				}
				return handled, obj, err
			})
			var ev events
			_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), OnEvent: ev.add, Retry: fastRetry()})
			off.check(t)
			require.NoError(t, err)
			checkMoved(t, s, orig, p)
			if assigned == "" {
				assert.Contains(t, ev.phases("w1"), PhasePatched)
			} else {
				assert.Equal(t, 2, countPhase(ev.phases("w1"), PhaseDeleted))
			}
		})
	}
}

func countPhase(ps []Phase, p Phase) int {
	n := 0
	for _, q := range ps {
		if q == p {
			n++
		}
	}
	return n
}

// kube-apiserver restarts: every other call fails with a transport error or 503.
func TestApplySurvivesAPIServerRestarts(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	var mu sync.Mutex
	n := 0
	c.PrependReactor("*", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		n++
		switch n % 3 {
		case 1:
			return true, nil, fmt.Errorf("Get \"https://127.0.0.1:6443/api/v1/nodes\": dial tcp: %w", syscall.ECONNREFUSED)
		case 2:
			return true, nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable}}
		}
		return false, nil, nil
	})
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Cordon: true, Retry: fastRetry()})
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
}

// A cancelled run still recreates the node it has just deleted.
func TestApplyCancelAfterDeleteStillCreates(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	ctx, cancel := context.WithCancel(ctxT(t))
	c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cancel()
		return false, nil, nil
	})
	_, err := Apply(ctx, c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Retry: fastRetry()})
	require.ErrorIs(t, err, context.Canceled)
	w1, ok := s.Node("w1")
	require.True(t, ok)
	assert.Equal(t, []string{"10.20.1.0/24"}, w1.Spec.PodCIDRs)
	_, ok = s.Node("w2")
	require.True(t, ok)
	w2, _ := s.Node("w2")
	assert.Equal(t, []string{"10.10.2.0/24"}, w2.Spec.PodCIDRs, "no new node started after the cancel")
}

func TestApplyJournalConflict(t *testing.T) {
	c, _ := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	dir := t.TempDir()
	// Leave w1 cordoned mid-run under plan p by failing its delete for good.
	c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "w1", errors.New("not now"))
	})
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Cordon: true, Retry: fastRetry()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nothing lost, it was not deleted")

	other, err := MakePlan(ctxT(t), c, PlanOptions{Mode: ModeRebase, Names: []string{"w3"}, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.30.0.0/16")}})
	require.NoError(t, err)
	_, err = Apply(ctxT(t), c, other, ApplyOptions{Concurrency: 1, JournalDir: dir, Retry: fastRetry()})
	require.ErrorIs(t, err, ErrJournalConflict)
	assert.Contains(t, err.Error(), "w1 (backed-up)")
}

func TestApplyOptionsValidation(t *testing.T) {
	c, _ := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1})
	require.ErrorIs(t, err, ErrInvalidOptions)
	_, err = Apply(ctxT(t), c, p, ApplyOptions{DryRun: "maybe"})
	require.ErrorIs(t, err, ErrInvalidOptions)
	_, err = Apply(ctxT(t), c, nil, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir()})
	require.ErrorIs(t, err, ErrInvalidPlan)
	dir := t.TempDir()
	j, err := journal.Open(dir)
	require.NoError(t, err)
	_, err = Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir})
	require.ErrorIs(t, err, ErrJournalLocked)
	require.NoError(t, j.Close())
	bad := *p
	bad.Steps = slices.Clone(p.Steps)
	bad.Steps[0].NewPodCIDRs = []string{"10.20.1.1/24"}
	_, err = Apply(ctxT(t), c, &bad, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir()})
	require.ErrorIs(t, err, ErrInvalidPlan)
}

func TestDeleteNodePodsHook(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	pod := func(ns, name, nodeName string, mut ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}}, Spec: corev1.PodSpec{NodeName: nodeName},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		for _, m := range mut {
			m(p)
		}
		return p
	}
	s.AddPod(pod("default", "web", "w1"))
	s.AddPod(pod("default", "other-node", "w3"))
	s.AddPod(pod("kube-flannel", "flannel", "w1", func(p *corev1.Pod) { p.Spec.HostNetwork = true }))
	s.AddPod(pod("kube-system", "static", "w1", func(p *corev1.Pod) { p.Annotations = map[string]string{MirrorPodAnnotation: "x"} }))
	s.AddPod(pod("default", "finished", "w1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }))
	p, err := MakePlan(ctxT(t), c, PlanOptions{Mode: ModeRebase, Names: []string{"w1"}, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}})
	require.NoError(t, err)
	hooks := []Hook{
		DeleteNodePods(c, DeletePodsOptions{Namespace: "kube-flannel", LabelSelector: "app=flannel", IncludeHostNetwork: true}),
		DeleteNodePods(c, DeletePodsOptions{}),
	}
	_, err = Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Hooks: hooks, Retry: fastRetry()})
	require.NoError(t, err)
	var left []string
	for _, p := range s.Pods() {
		left = append(left, p.Namespace+"/"+p.Name)
	}
	assert.Equal(t, []string{"default/finished", "default/other-node", "kube-system/static"}, left)
	assert.Contains(t, RequiredPermissions(ApplyOptions{Concurrency: 1, Hooks: hooks}), Permission{Verb: "delete", Resource: "pods", Namespace: "kube-flannel"})
}

func TestRetryGivesUpOnPermanentErrors(t *testing.T) {
	calls := 0
	err := retryTransient(context.Background(), fastRetry(), "x", func(context.Context) error {
		calls++
		return apierrors.NewBadRequest("no")
	})
	require.Error(t, err)
	assert.Equal(t, 1, calls)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = retryTransient(ctx, Retry{Initial: time.Millisecond, Max: 2 * time.Millisecond, Timeout: time.Hour}, "y", func(context.Context) error {
		return apierrors.NewTooManyRequests("slow down", 1)
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, IsTransient(context.Canceled))
	assert.True(t, IsTransient(apierrors.NewInternalError(errors.New("etcdserver: request timed out"))))
}

// A delete whose answer never arrives: the node may or may not be gone.
func TestApplyDeleteOutcomeUnknown(t *testing.T) {
	retry := Retry{Initial: time.Millisecond, Max: 2 * time.Millisecond, Timeout: 30 * time.Millisecond}
	unavailable := apierrors.NewServiceUnavailable("apiserver shutting down")
	t.Run("applied", func(t *testing.T) {
		orig := storyOne()
		c, s := newCluster(orig...)
		p := rebasePlan(t, c)
		c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
			_, _, _ = s.Handle(a) // applied, but every answer is lost
			return true, nil, unavailable
		})
		_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Retry: retry})
		require.NoError(t, err)
		checkMoved(t, s, orig, p)
	})
	t.Run("not applied", func(t *testing.T) {
		orig := storyOne()
		c, s := newCluster(orig...)
		p := rebasePlan(t, c)
		c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, unavailable
		})
		_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Retry: retry})
		require.Error(t, err)
		checkMoved(t, s, orig, &Plan{}) // nothing lost, nothing changed
	})
}

// verbs returns "verb resource[ name]" for every call, in order.
func (r *recorder) verbs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.actions))
	for _, a := range r.actions {
		s := a.GetVerb() + " " + a.GetResource().Resource
		switch a := a.(type) {
		case k8stesting.GetActionImpl:
			s += " " + a.GetName()
		case k8stesting.DeleteActionImpl:
			s += " " + a.GetName()
		case k8stesting.CreateActionImpl:
			if n, ok := a.GetObject().(*corev1.Node); ok {
				s += " " + n.Name
			}
		}
		out = append(out, s)
	}
	return out
}

// TestApplyTwoRequestsPerNode pins the request budget: after one LIST and the
// access reviews, a node costs exactly its DELETE and its CREATE. The node is
// taken from the LIST and verified from the CREATE's answer.
func TestApplyTwoRequestsPerNode(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	rec := record(c)
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Retry: fastRetry()})
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
	var perNode []string
	reviews := 0
	for _, v := range rec.verbs() {
		switch {
		case v == "list nodes":
		case v == "create selfsubjectaccessreviews":
			reviews++
		default:
			perNode = append(perNode, v)
		}
	}
	assert.Equal(t, len(RequiredPermissions(ApplyOptions{Concurrency: 1})), reviews)
	// w2 is already unschedulable in storyOne; without Cordon nothing is patched.
	assert.Equal(t, []string{
		"delete nodes w1", "create nodes w1", "delete nodes w2", "create nodes w2",
		"delete nodes w3", "create nodes w3", "delete nodes master1", "create nodes master1",
	}, perNode)
}

// beforeFirstDelete runs fn when Apply first deletes node name, before the
// server sees that delete: what another client did since Apply's LIST.
func beforeFirstDelete(c *fake.Clientset, name string, fn func()) {
	var once sync.Once
	c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.DeleteActionImpl).GetName() == name {
			once.Do(fn)
		}
		return false, nil, nil
	})
}

// TestApplyNodeChangedSinceList: a node whose status moved on after Apply's
// LIST is refused by the delete's resourceVersion precondition, read again,
// backed up as it is now, and moved.
func TestApplyNodeChangedSinceList(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	var off offTest
	beforeFirstDelete(c, "w1", func() {
		if !s.Touch("w1") {
			off.errorf("w1 could not be touched before its delete")
		}
	})
	rec := record(c)
	dir := t.TempDir()
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Retry: fastRetry()})
	off.check(t)
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
	w1 := 0
	for _, v := range rec.verbs() {
		if strings.HasSuffix(v, " w1") {
			w1++
		}
	}
	assert.Equal(t, 4, w1, "refused delete, get, delete, create: %v", rec.verbs())
	st, err := ReadJournal(dir)
	require.NoError(t, err)
	b, ok := st.Backup("w1")
	require.True(t, ok)
	assert.False(t, b.Status.Conditions[0].LastHeartbeatTime.IsZero(), "the backup is the node as deleted, with the new heartbeat")
}

// TestApplyNodeDeletedSinceList: a node someone else deleted after Apply's
// LIST is not brought back from the backup taken from the LIST: the run stops
// with a stale plan naming it, and its journal record is gone.
func TestApplyNodeDeletedSinceList(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	var off offTest
	beforeFirstDelete(c, "w1", func() {
		_, _, err := s.Handle(k8stesting.NewRootDeleteAction(corev1.SchemeGroupVersion.WithResource("nodes"), "w1"))
		off.noError(err, "someone else deleting w1")
	})
	dir := t.TempDir()
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Retry: fastRetry()})
	off.check(t)
	var stale *StaleError
	require.ErrorAs(t, err, &stale)
	assert.Equal(t, []Change{{Node: "w1", Field: "existence", Planned: "uid uid-w1", Current: "not found"}}, stale.Changes)
	_, ok := s.Node("w1")
	assert.False(t, ok, "not resurrected")
	st, err := ReadJournal(dir)
	require.NoError(t, err)
	_, ok = st.Backup("w1")
	assert.False(t, ok)
}

// TestApplyBeforeDeleteHooks: a BeforeDelete hook runs once per re-created
// node, after its cordon and before its delete, seeing the node with its
// old podCIDR still in the API; one that fails stops the run with that node
// neither deleted nor backed up; a rerun runs it again and moves the node.
func TestApplyBeforeDeleteHooks(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	dir := t.TempDir()
	rec := record(c)
	var seen []string
	fail := "w2"
	hook := Hook{Name: "standby", Permissions: []Permission{{Verb: "patch", Resource: "nodes"}}, Run: func(ctx context.Context, n *corev1.Node) error {
		cur, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		seen = append(seen, fmt.Sprintf("%s=%s unschedulable=%t writes=%d", n.Name, cur.Spec.PodCIDR, cur.Spec.Unschedulable, len(rec.writes())))
		if n.Name == fail {
			return errors.New("agents did not answer")
		}
		return nil
	}}
	opts := ApplyOptions{Concurrency: 1, JournalDir: dir, Cordon: true, BeforeDelete: []Hook{hook}, Retry: fastRetry()}
	assert.Contains(t, RequiredPermissions(opts), Permission{Verb: "patch", Resource: "nodes"})
	_, err := Apply(ctxT(t), c, p, opts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "hook standby before deleting node w2 (the node was not deleted")
	assert.Equal(t, []string{"w1=10.10.1.0/24 unschedulable=true writes=1", "w2=10.10.2.0/24 unschedulable=true writes=4"}, seen)
	w2, ok := s.Node("w2")
	require.True(t, ok)
	assert.Equal(t, orig[2].UID, w2.UID, "w2 was not deleted")
	assert.NotContains(t, rec.writes(), "delete w2")
	st, err := ReadJournal(dir)
	require.NoError(t, err)
	_, backedUp := st.Backup("w2")
	assert.False(t, backedUp, "no backup of a node whose hook failed")

	fail, seen = "", nil
	_, err = Apply(ctxT(t), c, p, opts)
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
	assert.Len(t, seen, 3, "w2 (again), w3, master1: %v", seen)
	assert.True(t, strings.HasPrefix(seen[0], "w2=10.10.2.0/24 "), "%v", seen)

	// A dry run only names it.
	c2, _ := newCluster(storyOne()...)
	var ev events
	_, err = Apply(ctxT(t), c2, rebasePlan(t, c2), ApplyOptions{DryRun: DryRunClient, BeforeDelete: []Hook{hook}, OnEvent: ev.add})
	require.NoError(t, err)
	assert.Len(t, seen, 3, "a dry run runs no hook")
	var msgs []string
	for _, e := range ev.all {
		if e.Node == "w1" {
			msgs = append(msgs, e.Message)
		}
	}
	assert.Contains(t, msgs, "would run hook standby before the delete")
}
