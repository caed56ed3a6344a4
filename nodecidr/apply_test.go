package nodecidr

import (
	"context"
	"encoding/json"
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
	"github.com/cidrshift/cidrshift/internal/kubetest"
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

// messages returns the messages of node's events in phase p (every phase
// when p is empty).
func (e *events) messages(node string, p Phase) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.all {
		if ev.Node == node && (p == "" || ev.Phase == p) {
			out = append(out, ev.Message)
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

// w1Plan is rebasePlan for w1 alone.
func w1Plan(t testing.TB, c *fake.Clientset) *Plan {
	t.Helper()
	p, err := MakePlan(ctxT(t), c, PlanOptions{Mode: ModeRebase, Names: []string{"w1"}, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.20.0.0/16")}})
	require.NoError(t, err)
	require.Len(t, p.Steps, 1)
	return p
}

// serverDelete deletes node name on the server directly, as another client
// would; a reactor may call it (the clientset would deadlock there).
func serverDelete(s *nodecidrtest.Server, name string) error {
	_, _, err := s.Handle(k8stesting.NewRootDeleteAction(corev1.SchemeGroupVersion.WithResource("nodes"), name))
	return err
}

// serverCreate creates n on the server directly, like serverDelete.
func serverCreate(s *nodecidrtest.Server, n *corev1.Node) error {
	_, _, err := s.Handle(k8stesting.NewRootCreateAction(corev1.SchemeGroupVersion.WithResource("nodes"), n))
	return err
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

// TestApplyPermanentCreateFailureRestoresAndStops: a create refused for good
// (an admission webhook) is tried three times, then the node is restored with
// its old podCIDRs and the run stops before the next node. The old podCIDR is
// restored in canonical form: strict validation refuses the host bits that
// API servers once accepted (10.10.1.1/24). The plan still applies once the
// cause is gone: the restored node, in either form, is the one expected.
func TestApplyPermanentCreateFailureRestoresAndStops(t *testing.T) {
	for _, tc := range []struct{ name, old string }{
		{"canonical", "10.10.1.0/24"},
		{"host bits restored in canonical form", "10.10.1.1/24"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := storyOne()
			orig[1].Spec.PodCIDR, orig[1].Spec.PodCIDRs = tc.old, []string{tc.old}
			c, s := newCluster(orig...)
			p := rebasePlan(t, c)
			require.Equal(t, []string{tc.old}, p.Step("w1").OldPodCIDRs)
			var mu sync.Mutex
			refuse := true
			var creates []string
			c.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				n := a.(k8stesting.CreateActionImpl).GetObject().(*corev1.Node)
				mu.Lock()
				defer mu.Unlock()
				creates = append(creates, n.Name+"="+n.Spec.PodCIDR)
				if refuse && strings.HasPrefix(n.Spec.PodCIDR, "10.20.") {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, n.Name, errors.New("admission webhook denied the request"))
				}
				return false, nil, nil
			})
			dir := t.TempDir()
			rec := record(c)
			_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Retry: fastRetry()})
			require.ErrorContains(t, err, "restored with its old podCIDRs "+tc.old)
			assert.Equal(t, []string{"w1=10.20.1.0/24", "w1=10.20.1.0/24", "w1=10.20.1.0/24", "w1=10.10.1.0/24"}, creates)
			assert.NotContains(t, strings.Join(rec.writes(), ","), "w2", "the run stopped before the next node")
			w1, ok := s.Node("w1")
			require.True(t, ok, "nothing lost")
			assert.Equal(t, []string{"10.10.1.0/24"}, w1.Spec.PodCIDRs)
			assert.Equal(t, orig[1].Labels, w1.Labels)

			mu.Lock()
			refuse = false
			mu.Unlock()
			_, err = Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Retry: fastRetry()})
			require.NoError(t, err)
			checkMoved(t, s, orig, p)
		})
	}
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
	for _, bad := range []struct {
		o    ApplyOptions
		want string
	}{
		{ApplyOptions{Concurrency: -1}, "concurrency -1: want 1 or more"},
		{ApplyOptions{RateLimit: -0.5}, "rate limit -0.5: want 0 (no limit) or more"},
		{ApplyOptions{CreateGrace: -time.Second}, "create grace -1s: must not be negative"},
		{ApplyOptions{Hooks: []Hook{{Name: "restart-cni"}}}, "hook 0 (restart-cni) has no Run"},
		{ApplyOptions{BeforeDelete: []Hook{{Name: "drain", Run: func(context.Context, *corev1.Node) error { return nil }}}, Hooks: []Hook{{Name: "cni"}}},
			"hook 1 (cni) has no Run"},
	} {
		bad.o.JournalDir = t.TempDir()
		w := len(c.Actions())
		_, err = Apply(ctxT(t), c, p, bad.o)
		require.ErrorIs(t, err, ErrInvalidOptions, bad.want)
		assert.ErrorContains(t, err, bad.want)
		assert.Len(t, c.Actions(), w, "%s: refused before any request", bad.want)
	}
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
	p := w1Plan(t, c)
	hooks := []Hook{
		DeleteNodePods(c, DeletePodsOptions{Namespace: "kube-flannel", LabelSelector: "app=flannel", IncludeHostNetwork: true}),
		DeleteNodePods(c, DeletePodsOptions{}),
	}
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Hooks: hooks, Retry: fastRetry()})
	require.NoError(t, err)
	var left []string
	for _, p := range s.Pods() {
		left = append(left, p.Namespace+"/"+p.Name)
	}
	assert.Equal(t, []string{"default/finished", "default/other-node", "kube-system/static"}, left)
	assert.Contains(t, RequiredPermissions(ApplyOptions{Concurrency: 1, Hooks: hooks}), Permission{Verb: "delete", Resource: "pods", Namespace: "kube-flannel"})
}

// TestDeleteNodePodsHookNameSaysWhatItDeletes: the hook's name (in events,
// errors and dry runs) names its namespace and selector, when set.
func TestDeleteNodePodsHookNameSaysWhatItDeletes(t *testing.T) {
	c, _ := newCluster()
	for _, tc := range []struct {
		opts DeletePodsOptions
		want string
	}{
		{DeletePodsOptions{}, "delete-pods"},
		{DeletePodsOptions{Namespace: "kube-flannel"}, "delete-pods namespace=kube-flannel"},
		{DeletePodsOptions{LabelSelector: "app=flannel"}, "delete-pods selector=app=flannel"},
		{DeletePodsOptions{Namespace: "kube-flannel", LabelSelector: "app=flannel", IncludeHostNetwork: true}, "delete-pods namespace=kube-flannel selector=app=flannel"},
	} {
		assert.Equal(t, tc.want, DeleteNodePods(c, tc.opts).Name, "%+v", tc.opts)
	}
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
	assert.Contains(t, ev.messages("w1", ""), "would run hook standby before the delete")
}

// TestApplyRecordsAPlanFoundAlreadyDoneAsFinished: a plan whose nodes all
// have their new podCIDRs already (applied with another journal) still leaves
// its run and a done record per node in this journal, so the journal shows
// the whole plan finished.
func TestApplyRecordsAPlanFoundAlreadyDoneAsFinished(t *testing.T) {
	c, _ := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Retry: fastRetry()})
	require.NoError(t, err)

	dir := t.TempDir()
	res, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Retry: fastRetry()})
	require.NoError(t, err)
	assert.Empty(t, res.Changed)
	assert.Len(t, res.AlreadyDone, 4)
	st, err := ReadJournal(dir)
	require.NoError(t, err)
	require.NotNil(t, st, "the run is recorded")
	assert.Equal(t, p.ID(), st.PlanID)
	assert.True(t, st.Finished)
	assert.Equal(t, map[string]Phase{"master1": PhaseDone, "w1": PhaseDone, "w2": PhaseDone, "w3": PhaseDone}, st.Phases)
}

// TestApplyEmptyPlanRecordsNothing: a plan without steps writes no run, in
// the journal directory or in the cluster journal.
func TestApplyEmptyPlanRecordsNothing(t *testing.T) {
	c, _ := newCluster(storyOne()...)
	p, err := MakePlan(ctxT(t), c, PlanOptions{Mode: ModeRebase, Rebase: []RebasePair{rebase("10.30.0.0/16", "10.10.0.0/16")}})
	require.NoError(t, err)
	require.Empty(t, p.Steps)
	dir := t.TempDir()
	rec := record(c)
	res, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Lock: &kubetest.Lock{ChecksLeft: -1}, ClusterJournal: &ClusterJournal{}, Retry: fastRetry()})
	require.NoError(t, err)
	assert.Empty(t, res.Changed)
	st, err := ReadJournal(dir)
	require.NoError(t, err)
	assert.Nil(t, st, "no run recorded")
	for _, a := range rec.actions {
		assert.NotContains(t, []string{"create", "update", "patch", "delete"}, a.GetVerb(), "%s %s", a.GetVerb(), a.GetResource().Resource)
	}
}

// TestApplyResumedRunKeepsItsRunRecord: the run record (note, start time) is
// written once, by the run that started the plan; a resumed run keeps it.
func TestApplyResumedRunKeepsItsRunRecord(t *testing.T) {
	c, s := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	dir := t.TempDir()
	fail := true
	hook := Hook{Name: "gate", Run: func(_ context.Context, n *corev1.Node) error {
		if fail && n.Name == "w2" {
			return errors.New("not yet")
		}
		return nil
	}}
	opts := ApplyOptions{Concurrency: 1, JournalDir: dir, BeforeDelete: []Hook{hook}, Note: "first run", Retry: fastRetry()}
	_, err := Apply(ctxT(t), c, p, opts)
	require.ErrorContains(t, err, "not yet")
	first, err := ReadJournal(dir)
	require.NoError(t, err)
	require.NotNil(t, first)
	require.False(t, first.Finished)
	assert.Equal(t, "first run", first.Note)

	fail = false
	opts.Note = "second run"
	_, err = Apply(ctxT(t), c, p, opts)
	require.NoError(t, err)
	checkMoved(t, s, storyOne(), p)
	st, err := ReadJournal(dir)
	require.NoError(t, err)
	assert.True(t, st.Finished)
	assert.Equal(t, "first run", st.Note)
	assert.True(t, first.Started.Equal(st.Started), "started %s, then %s", first.Started, st.Started)
}

// TestApplyStrictResourceVersionRefusesOnlyTheNodesThatChanged: with
// StrictResourceVersion a node whose resourceVersion moved since the plan is
// stale, and only that one.
func TestApplyStrictResourceVersionRefusesOnlyTheNodesThatChanged(t *testing.T) {
	c, s := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	opts := ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), StrictResourceVersion: true, Retry: fastRetry()}
	require.True(t, s.Touch("w1"))
	w1, _ := s.Node("w1")
	rec := record(c)
	_, err := Apply(ctxT(t), c, p, opts)
	var stale *StaleError
	require.ErrorAs(t, err, &stale)
	assert.Equal(t, []Change{{Node: "w1", Field: "resourceVersion", Planned: p.Step("w1").ResourceVersion, Current: w1.ResourceVersion}}, stale.Changes)
	assert.Empty(t, rec.writes())

	p = rebasePlan(t, c)
	_, err = Apply(ctxT(t), c, p, opts)
	require.NoError(t, err, "nothing changed since this plan")
	checkMoved(t, s, storyOne(), p)
}

// TestApplyGivesUpOnANodeThatKeepsChanging: a node whose every delete is
// refused by its preconditions is read again and retried, six attempts in
// all, then the run stops naming it, with nothing deleted.
func TestApplyGivesUpOnANodeThatKeepsChanging(t *testing.T) {
	c, s := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	var mu sync.Mutex
	deletes := 0
	c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		deletes++
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, a.(k8stesting.DeleteActionImpl).GetName(), errors.New("the resourceVersion changed"))
	})
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Retry: fastRetry()})
	require.ErrorContains(t, err, "node w1 kept changing under the run")
	assert.Equal(t, 6, deletes)
	checkMoved(t, s, storyOne(), &Plan{})
}

// seedJournal writes a run of p and recs into the journal dir, as a run
// killed at some instant leaves it.
func seedJournal(t *testing.T, dir string, p *Plan, recs ...nodeRecord) {
	t.Helper()
	j, err := journal.Open(dir)
	require.NoError(t, err)
	defer func() { require.NoError(t, j.Close()) }()
	require.NoError(t, j.Put(runKey, runRecord{PlanID: p.ID(), Plan: p, Started: time.Now().UTC()}))
	for _, rec := range recs {
		rec.PlanID = p.ID()
		require.NoError(t, j.Put(nodeKey(rec.Node), rec))
	}
}

// recreatedAs deletes node name on the server and creates it again with
// podCIDRs, as Apply's create does: a new UID, the rest kept.
func recreatedAs(t *testing.T, s *nodecidrtest.Server, name string, podCIDRs ...string) *corev1.Node {
	t.Helper()
	n, ok := s.Node(name)
	require.True(t, ok)
	require.NoError(t, serverDelete(s, name))
	n.UID, n.ResourceVersion = "", ""
	n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDRs[0], podCIDRs
	require.NoError(t, serverCreate(s, n))
	n, _ = s.Node(name)
	return n
}

// TestApplyResumeRecordsACreateThatWasNotRecorded: a run killed after its
// create was accepted and before it recorded it leaves the node with its new
// podCIDRs and the journal at backed-up. The resumed run records the node
// created (with its new UID) before its hooks run, and reports its gap.
func TestApplyResumeRecordsACreateThatWasNotRecorded(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := w1Plan(t, c)
	dir := t.TempDir()
	seedJournal(t, dir, p, nodeRecord{Node: "w1", Phase: PhaseBackedUp, Backup: orig[1], DeleteStarted: time.Now().UTC().Add(-time.Second)})
	w1 := recreatedAs(t, s, "w1", "10.20.1.0/24")

	var off offTest
	var seen nodeRecord
	hook := Hook{Name: "look", Run: func(context.Context, *corev1.Node) error {
		data, err := os.ReadFile(filepath.Join(dir, "node%2Fw1.json"))
		if off.noError(err, "read w1's record in the hook") {
			off.noError(json.Unmarshal(data, &seen), "decode w1's record")
		}
		return nil
	}}
	rec := record(c)
	res, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Hooks: []Hook{hook}, Retry: fastRetry()})
	off.check(t)
	require.NoError(t, err)
	assert.Empty(t, rec.writes(), "the node already has its new podCIDRs")
	assert.Equal(t, PhaseCreated, seen.Phase, "recorded created before the hooks")
	assert.Equal(t, w1.UID, seen.NewUID)
	assert.Equal(t, []string{"w1"}, res.Changed)
	assert.Equal(t, 1, res.Gaps.Count, "the gap of the interrupted run is counted")
	assert.GreaterOrEqual(t, res.Gaps.Max, time.Second)
}

// TestApplyPatchedNodeHasNoGap: a node that only gets its podCIDRs by a
// patch was never absent: a resumed run that finishes it (its hook had
// failed) counts no gap for it.
func TestApplyPatchedNodeHasNoGap(t *testing.T) {
	orig := []*corev1.Node{node("a", cidrs("10.240.0.0/24")), node("c", nil)}
	c, s := newCluster(orig...)
	p, err := MakePlan(ctxT(t), c, PlanOptions{Mode: ModeFix, Layout: layout(t, "10.240.0.0/12", 24)})
	require.NoError(t, err)
	require.Equal(t, ActionPatch, p.Step("c").Action)
	fail := true
	hook := Hook{Name: "gate", Run: func(context.Context, *corev1.Node) error {
		if fail {
			return errors.New("not yet")
		}
		return nil
	}}
	dir := t.TempDir()
	var ev events
	opts := ApplyOptions{Concurrency: 1, JournalDir: dir, Hooks: []Hook{hook}, OnEvent: ev.add, Retry: fastRetry()}
	res, err := Apply(ctxT(t), c, p, opts)
	require.ErrorContains(t, err, "not yet")
	assert.Equal(t, 0, res.Gaps.Count)
	fail = false
	res, err = Apply(ctxT(t), c, p, opts)
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
	assert.Equal(t, []string{"c"}, res.Changed)
	assert.Equal(t, GapSummary{}, res.Gaps)
	assert.Equal(t, []string{"podCIDRs " + p.Step("c").NewPodCIDRs[0]}, ev.messages("c", PhasePatched), "no kubelet re-registration to mention")
	st, err := ReadJournal(dir)
	require.NoError(t, err)
	assert.True(t, st.Finished)
}

// TestApplyResumeFindsTheNodeRegisteredAgainByItsKubelet: a run killed
// after a node's delete, whose kubelet then registered the node again (a new
// UID, none of the backup's metadata): the resumed run takes the backup over
// that incarnation instead of calling the plan stale, whether
// kube-controller-manager gave it podCIDRs meanwhile or not.
func TestApplyResumeFindsTheNodeRegisteredAgainByItsKubelet(t *testing.T) {
	for _, assigned := range []string{"", "10.10.9.0/24"} {
		t.Run("podCIDR="+assigned, func(t *testing.T) {
			orig := storyOne()
			// A taint set by hand, besides the one the kubelet registers with.
			orig[1].Spec.Taints = append(orig[1].Spec.Taints, corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectNoSchedule})
			c, s := newCluster(orig...)
			p := w1Plan(t, c)
			dir := t.TempDir()
			seedJournal(t, dir, p, nodeRecord{Node: "w1", Phase: PhaseBackedUp, Backup: orig[1], DeleteStarted: time.Now().UTC().Add(-time.Second)})
			require.NoError(t, serverDelete(s, "w1"))
			// The kubelet registers with its --register-with-taints taint:
			// the backup's copy of it is not added a second time (the API
			// server refuses a node with two taints of one key and effect).
			fresh := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{"kubernetes.io/hostname": "w1"}},
				Spec:   corev1.NodeSpec{Taints: orig[1].Spec.Taints[:1]},
				Status: corev1.NodeStatus{Addresses: orig[1].Status.Addresses}}
			if assigned != "" {
				fresh.Spec.PodCIDR, fresh.Spec.PodCIDRs = assigned, []string{assigned}
			}
			require.NoError(t, serverCreate(s, fresh))
			kubelets, _ := s.Node("w1")

			rec := record(c)
			var ev events
			res, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, OnEvent: ev.add, Retry: fastRetry()})
			require.NoError(t, err)
			checkMoved(t, s, orig, p)
			assert.Equal(t, []string{"w1"}, res.Changed)
			assert.Equal(t, 1, res.Gaps.Count)
			assert.GreaterOrEqual(t, res.Gaps.Max, time.Second, "absent since the delete of the killed run")
			if assigned == "" {
				assert.Equal(t, []string{"patch w1"}, rec.writes(), "the podCIDRs and the backup's metadata set on the kubelet's node")
				assert.Equal(t, []string{"podCIDRs 10.20.1.0/24; the kubelet had registered the node again, the backup's metadata was merged back"},
					ev.messages("w1", PhasePatched))
			} else {
				assert.Equal(t, []string{"delete w1", "create w1"}, rec.writes(), "the kubelet's node replaced by the backup")
				now, _ := s.Node("w1")
				assert.NotEqual(t, kubelets.UID, now.UID)
			}
		})
	}
}

// TestApplyCordonedNodeIsBackedUpFromThePatchAnswer: with Cordon a node
// costs its cordon, delete, create and uncordon, and no GET: the backup is
// the node as the cordon's answer returned it.
func TestApplyCordonedNodeIsBackedUpFromThePatchAnswer(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := w1Plan(t, c)
	rec := record(c)
	dir := t.TempDir()
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Cordon: true, Retry: fastRetry()})
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
	var nodeCalls []string
	for _, v := range rec.verbs() {
		if strings.Fields(v)[1] == "nodes" {
			nodeCalls = append(nodeCalls, v)
		}
	}
	assert.Equal(t, []string{"list nodes", "patch nodes", "delete nodes w1", "create nodes w1", "patch nodes"}, nodeCalls)
	st, err := ReadJournal(dir)
	require.NoError(t, err)
	b, ok := st.Backup("w1")
	require.True(t, ok)
	assert.True(t, b.Spec.Unschedulable, "the backup is the cordoned node")
}

// TestApplyNodeReplacedBeforeItsCordonIsNotDeleted: a node deleted and
// registered again (a new UID) between Apply's LIST and its cordon gets the
// cordon (a merge patch has no UID precondition), but the answer's UID tells
// Apply it is another node: it is not backed up nor deleted, and the plan is
// stale.
func TestApplyNodeReplacedBeforeItsCordonIsNotDeleted(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	var off offTest
	var once sync.Once
	c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.PatchActionImpl).GetName() != "w1" {
			return false, nil, nil
		}
		once.Do(func() {
			n, _ := s.Node("w1")
			off.noError(serverDelete(s, "w1"), "delete w1 before its cordon")
			n.UID, n.ResourceVersion = "", ""
			off.noError(serverCreate(s, n), "register w1 again before its cordon")
		})
		return false, nil, nil
	})
	rec := record(c)
	dir := t.TempDir()
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Cordon: true, Retry: fastRetry()})
	off.check(t)
	var stale *StaleError
	require.ErrorAs(t, err, &stale)
	assert.Equal(t, "w1", stale.Changes[0].Node)
	assert.Equal(t, "uid", stale.Changes[0].Field)
	assert.Equal(t, []string{"patch w1"}, rec.writes(), "only the cordon")
	st, err := ReadJournal(dir)
	require.NoError(t, err)
	_, ok := st.Backup("w1")
	assert.False(t, ok, "no backup of the other incarnation")
}

// TestApplyUnsetCreateGraceKeepsRetryingTheCreate: with CreateGrace unset a
// run cancelled right after a delete keeps retrying the failing create for
// DefaultCreateGrace (20 s), not for no time at all; here it goes through
// 0.5 s after the cancel.
func TestApplyUnsetCreateGraceKeepsRetryingTheCreate(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var mu sync.Mutex
	var cancelled time.Time
	c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if cancelled.IsZero() {
			cancelled = time.Now()
			cancel()
		}
		return false, nil, nil
	})
	refused := 0
	c.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(cancelled) < 500*time.Millisecond {
			refused++
			return true, nil, apierrors.NewServiceUnavailable("apiserver restarting")
		}
		return false, nil, nil
	})
	_, err := Apply(ctx, c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Retry: fastRetry()})
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ErrNodeNotRecreated)
	w1, ok := s.Node("w1")
	require.True(t, ok, "w1 was created again")
	assert.Equal(t, []string{"10.20.1.0/24"}, w1.Spec.PodCIDRs)
	assert.Positive(t, refused)
}

// TestApplyResumeRecreatesAMissingNodeWithinTheCreateGrace: the create of a
// node a resumed run finds missing (its backup in the journal) keeps being
// retried after the run's context ends, for CreateGrace, like the create
// that follows a delete.
func TestApplyResumeRecreatesAMissingNodeWithinTheCreateGrace(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := w1Plan(t, c)
	dir := t.TempDir()
	seedJournal(t, dir, p, nodeRecord{Node: "w1", Phase: PhaseBackedUp, Backup: orig[1], DeleteStarted: time.Now().UTC()})
	require.NoError(t, serverDelete(s, "w1"))
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var mu sync.Mutex
	creates := 0
	c.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		creates++
		if creates == 1 {
			cancel() // the run is interrupted while its first create fails
			return true, nil, apierrors.NewServiceUnavailable("apiserver restarting")
		}
		return false, nil, nil
	})
	_, err := Apply(ctx, c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, CreateGrace: 10 * time.Second, Retry: fastRetry()})
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ErrNodeNotRecreated)
	assert.Equal(t, 2, creates)
	checkMoved(t, s, orig, p)
}

// clusterPhases logs, per node, each phase its record in the cluster
// journal takes, in the order written.
func clusterPhases(c *fake.Clientset) func() map[string][]Phase {
	var mu sync.Mutex
	last := map[string]string{}
	out := map[string][]Phase{}
	var bad []string
	c.PrependReactor("*", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, ok := a.(interface{ GetObject() runtime.Object })
		if !ok || (a.GetVerb() != "create" && a.GetVerb() != "update") {
			return false, nil, nil
		}
		cm := obj.GetObject().(*corev1.ConfigMap)
		mu.Lock()
		defer mu.Unlock()
		for k, v := range cm.Data {
			if !strings.HasPrefix(k, "node_2f") || last[k] == v {
				continue
			}
			last[k] = v
			var rec nodeRecord
			if err := json.Unmarshal([]byte(v), &rec); err != nil {
				bad = append(bad, k+": "+err.Error())
				continue
			}
			out[rec.Node] = append(out[rec.Node], rec.Phase)
		}
		return false, nil, nil
	})
	return func() map[string][]Phase {
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			out["undecodable"] = []Phase{Phase(strings.Join(bad, "; "))}
		}
		return out
	}
}

// TestApplyRecordsCreatedOnlyWhenWorkFollows: the journal records a node
// created only when an uncordon or a hook follows the create; otherwise the
// record goes from backed-up straight to done.
func TestApplyRecordsCreatedOnlyWhenWorkFollows(t *testing.T) {
	hook := Hook{Name: "noop", Run: func(context.Context, *corev1.Node) error { return nil }}
	for _, tc := range []struct {
		name   string
		cordon bool
		hooks  []Hook
		want   []Phase
		w2     []Phase // w2 is unschedulable already: never cordoned
	}{
		{"plain", false, nil, []Phase{PhaseBackedUp, PhaseDone}, []Phase{PhaseBackedUp, PhaseDone}},
		{"hook", false, []Hook{hook}, []Phase{PhaseBackedUp, PhaseCreated, PhaseDone}, []Phase{PhaseBackedUp, PhaseCreated, PhaseDone}},
		{"cordon", true, nil, []Phase{PhaseCordoned, PhaseBackedUp, PhaseCreated, PhaseDone}, []Phase{PhaseBackedUp, PhaseDone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := storyOne()
			c, s := newCluster(orig...)
			p := rebasePlan(t, c)
			phases := clusterPhases(c)
			_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Cordon: tc.cordon, Hooks: tc.hooks,
				Lock: &kubetest.Lock{ChecksLeft: -1}, ClusterJournal: &ClusterJournal{}, Retry: fastRetry()})
			require.NoError(t, err)
			checkMoved(t, s, orig, p)
			assert.Equal(t, map[string][]Phase{"w1": tc.want, "w2": tc.w2, "w3": tc.want, "master1": tc.want}, phases())
		})
	}
}

// TestApplyWarnsWhenANodeWasAbsentCloseToThePodGCQuarantine: a node whose
// create comes more than half of PodGCQuarantine after its delete (here a
// resumed run, 30 s after the delete) is reported with its gap and the
// quarantine; a node absent for milliseconds is not.
func TestApplyWarnsWhenANodeWasAbsentCloseToThePodGCQuarantine(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	dir := t.TempDir()
	seedJournal(t, dir, p, nodeRecord{Node: "w1", Phase: PhaseBackedUp, Backup: orig[1], DeleteStarted: time.Now().UTC().Add(-30 * time.Second)})
	require.NoError(t, serverDelete(s, "w1"))
	var ev events
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, OnEvent: ev.add, Retry: fastRetry()})
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
	w1 := ev.messages("w1", PhaseCreated)
	require.Len(t, w1, 1)
	assert.Regexp(t, `^uid .*, podCIDRs 10\.20\.1\.0/24; the node was absent 3\d(\.\d+)?s, close to the pod GC's 40s$`, w1[0])
	for _, n := range []string{"w2", "w3", "master1"} {
		created := ev.messages(n, PhaseCreated)
		require.Len(t, created, 1, n)
		assert.NotContains(t, created[0], "absent", n)
	}
}

// TestApplyStopsWhenTheKubeletKeepsRegisteringTheNode: a node registered
// again (with podCIDRs from kube-controller-manager) after each of its
// deletes is deleted again three times at most; then the run stops with
// ErrNodeNotRecreated, the backup in the journal.
func TestApplyStopsWhenTheKubeletKeepsRegisteringTheNode(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := rebasePlan(t, c)
	var off offTest
	deletes := 0
	c.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteActionImpl).GetName()
		handled, obj, err := s.Handle(a)
		if name == "w1" && err == nil {
			deletes++
			if deletes <= 10 { // a mutant that never gives up ends here, not at -timeout
				fresh := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{"kubernetes.io/hostname": "w1"}},
					Spec: corev1.NodeSpec{PodCIDR: "10.10.9.0/24", PodCIDRs: []string{"10.10.9.0/24"}}}
				off.noError(serverCreate(s, fresh), "the kubelet registering w1 again")
			}
		}
		return handled, obj, err
	})
	dir := t.TempDir()
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Retry: fastRetry()})
	off.check(t)
	require.ErrorIs(t, err, ErrNodeNotRecreated)
	assert.ErrorContains(t, err, "node w1 keeps being registered with podCIDRs 10.10.9.0/24")
	assert.Equal(t, 4, deletes, "the planned delete and three of the kubelet's nodes")
	st, err := ReadJournal(dir)
	require.NoError(t, err)
	_, ok := st.Backup("w1")
	assert.True(t, ok)
}

// TestApplyCreateBackoffDoubles: the create that follows a delete waits
// Retry.Initial after its first transient failure and twice as long after
// each next one. The waits are lower bounds (a timer never fires early).
func TestApplyCreateBackoffDoubles(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := w1Plan(t, c)
	var mu sync.Mutex
	var at []time.Time
	c.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		if len(at) <= 3 {
			return true, nil, apierrors.NewServiceUnavailable("apiserver restarting")
		}
		return false, nil, nil
	})
	retry := Retry{Initial: 200 * time.Millisecond, Max: 10 * time.Second, Timeout: time.Minute}
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Retry: retry})
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
	require.Len(t, at, 4)
	for i, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond} {
		assert.GreaterOrEqual(t, at[i+1].Sub(at[i]), want, "wait before create %d", i+2)
	}
}

// TestApplyHooksSeeTheNodeUncordoned: with Cordon, the hooks get the node
// as the uncordon returned it: schedulable again, its latest
// resourceVersion.
func TestApplyHooksSeeTheNodeUncordoned(t *testing.T) {
	orig := storyOne()
	c, s := newCluster(orig...)
	p := w1Plan(t, c)
	var seen *corev1.Node
	hook := Hook{Name: "look", Run: func(_ context.Context, n *corev1.Node) error {
		seen = n
		return nil
	}}
	_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: t.TempDir(), Cordon: true, Hooks: []Hook{hook}, Retry: fastRetry()})
	require.NoError(t, err)
	checkMoved(t, s, orig, p)
	require.NotNil(t, seen)
	assert.False(t, seen.Spec.Unschedulable)
	now, _ := s.Node("w1")
	assert.Equal(t, now.ResourceVersion, seen.ResourceVersion)
}

// TestApplyClientDryRunOfAResumedRun: a client-side dry run over a journal
// a killed run left says what the resumed run would do to each node: finish
// one that already has its new podCIDRs, recreate a missing one from its
// backup, patch one its kubelet registered again; and it names the hooks it
// would run, without running them or writing anything.
func TestApplyClientDryRunOfAResumedRun(t *testing.T) {
	for _, tc := range []struct {
		name  string
		phase Phase
		now   func(s *nodecidrtest.Server, orig *corev1.Node, p *Plan) error
		want  []string
	}{
		{"missing", PhaseBackedUp, func(s *nodecidrtest.Server, _ *corev1.Node, _ *Plan) error { return serverDelete(s, "w1") },
			[]string{"created: is missing; would recreate it from the journal's backup with podCIDRs 10.20.1.0/24"}},
		{"registered again", PhaseBackedUp, func(s *nodecidrtest.Server, orig *corev1.Node, _ *Plan) error {
			if err := serverDelete(s, "w1"); err != nil {
				return err
			}
			return serverCreate(s, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Status: corev1.NodeStatus{Addresses: orig.Status.Addresses}})
		}, []string{"patched: would set podCIDRs 10.20.1.0/24"}},
		{"created, not finished", PhaseCreated, func(s *nodecidrtest.Server, orig *corev1.Node, p *Plan) error {
			if err := serverDelete(s, "w1"); err != nil {
				return err
			}
			n := orig.DeepCopy()
			n.UID, n.ResourceVersion = "uid-w1-new", ""
			n.Spec.PodCIDR, n.Spec.PodCIDRs = p.Steps[0].NewPodCIDRs[0], p.Steps[0].NewPodCIDRs
			return serverCreate(s, n)
		}, []string{"verified: already has 10.20.1.0/24; would finish its remaining steps"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := storyOne()
			c, s := newCluster(orig...)
			p := w1Plan(t, c)
			dir := t.TempDir()
			seedJournal(t, dir, p, nodeRecord{Node: "w1", Phase: tc.phase, Backup: orig[1], DeleteStarted: time.Now().UTC().Add(-time.Second)})
			require.NoError(t, tc.now(s, orig[1], p))
			rec := record(c)
			var ev events
			hook := Hook{Name: "ready-check", Run: func(context.Context, *corev1.Node) error {
				t.Error("a dry run ran a hook")
				return nil
			}}
			_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, DryRun: DryRunClient, Hooks: []Hook{hook}, OnEvent: ev.add})
			require.NoError(t, err)
			var got []string
			for _, e := range ev.all {
				if e.Node == "w1" {
					assert.True(t, e.DryRun)
					got = append(got, string(e.Phase)+": "+e.Message)
				}
			}
			assert.Equal(t, append(tc.want, "hook: would run hook ready-check"), got)
			assert.Empty(t, rec.writes())
		})
	}
}

// TestEventString: the one-line form callers log, with each optional part.
func TestEventString(t *testing.T) {
	assert.Equal(t, "w1: verified", Event{Node: "w1", Phase: PhaseVerified}.String())
	assert.Equal(t, "w1: created (dry run): would create it", Event{Node: "w1", Phase: PhaseCreated, DryRun: true, Message: "would create it"}.String())
	assert.Equal(t, "w1: retrying: create: etcdserver: request timed out",
		Event{Node: "w1", Phase: PhaseRetrying, Message: "create", Err: errors.New("etcdserver: request timed out")}.String())
}

// A journal whose node record cannot be read stops Apply before any node
// is touched, naming the record: the run cannot know what that node's
// earlier run did.
func TestApplyUnreadableJournalRecord(t *testing.T) {
	c, _ := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	dir := t.TempDir()
	j, err := journal.Open(dir)
	require.NoError(t, err)
	require.NoError(t, j.Put("node/w1", "backed-up"))
	require.NoError(t, j.Close())
	c.ClearActions()
	_, err = Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, Retry: fastRetry()})
	require.ErrorContains(t, err, `decoding journal record "node/w1"`)
	for _, a := range c.Actions() {
		assert.Contains(t, []string{"get", "list", "watch", "create"}, a.GetVerb(), "%s %s before the journal was read", a.GetVerb(), a.GetResource().Resource)
		if a.GetVerb() == "create" {
			assert.NotEqual(t, "nodes", a.GetResource().Resource, "a node created")
		}
	}
}
