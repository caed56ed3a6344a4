package migrate_test

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/migrate"
)

// runMBBWith is runMBB with the options o and without requiring the run to
// finish.
// runMBBWithAgents runs make-before-break on cs with agents on w1, w2 and
// w3 and the given HealthTimeout; the agents are stopped when it returns.
func runMBBWithAgents(t *testing.T, cs *fake.Clientset, healthTimeout time.Duration, set ...func(*migrate.FlannelPodCIDRMigration)) *migrate.Report {
	t.Helper()
	_, stop := agentsOn(cs, "w1", "w2", "w3")
	defer stop()
	o := mbbOptions(cs)
	o.HealthTimeout = healthTimeout
	return runMBBWith(t, o, set...)
}

func runMBBWith(t *testing.T, o migrate.FlannelPodCIDROptions, set ...func(*migrate.FlannelPodCIDRMigration)) *migrate.Report {
	t.Helper()
	m, err := migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	for _, f := range set {
		f(m)
	}
	agents := &migrate.HostAgents{Kube: o.Kube, PollInterval: time.Millisecond, Timeout: 5 * time.Second}
	waitAgents(t, agents, "w1", "w2", "w3")
	rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j"), Agents: agents}).Run(t.Context(), m)
	require.NoError(t, err)
	return rep
}

// The evictions of an applying run are real ones (no dryRun: the API
// server would evict nothing, and the run would wait for pods that never
// go: nodecidrtest, like it, deletes nothing in a dry run) and conditional
// on the UID of the pod the run saw.
func TestFlannelMakeBeforeBreakEvictsForRealTheUIDItSaw(t *testing.T) {
	cs, srv := mbbCluster()
	installEvictions(cs, srv, func(string, int) bool { return false }, nil)
	var mu sync.Mutex
	var sent []policyv1.Eviction
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			mu.Lock()
			sent = append(sent, *a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).DeepCopy())
			mu.Unlock()
		}
		return false, nil, nil
	})
	rep := runMBBWithAgents(t, cs, time.Second)
	require.False(t, rep.Paused(), "%+v", rep.Waiting)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, sent, 2)
	for _, ev := range sent {
		require.NotNil(t, ev.DeleteOptions, "%s", ev.Name)
		assert.Empty(t, ev.DeleteOptions.DryRun, "%s evicted for real", ev.Name)
		require.NotNil(t, ev.DeleteOptions.Preconditions, "%s", ev.Name)
		assert.Equal(t, types.UID("uid-"+ev.Name), *ev.DeleteOptions.Preconditions.UID, "%s: the UID the run saw", ev.Name)
	}
}

// A refused eviction (429: a PodDisruptionBudget allows no disruption
// now) is sent again after PollInterval (10ms), then twice as long each
// time up to 16 times PollInterval, while the next try falls before
// HealthTimeout ends; then the run pauses for the operator. The clock is the
// test's: each wait moves it on by what the run asked to wait.
func TestFlannelMakeBeforeBreakBacksOffARefusedEviction(t *testing.T) {
	cs, srv := mbbCluster()
	ev := installEvictions(cs, srv, func(pod string, _ int) bool { return pod == "web-a" }, nil)
	var mu sync.Mutex
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	var waits []time.Duration
	clock := func(m *migrate.FlannelPodCIDRMigration) {
		m.SetEvictionClock(func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		}, func(d time.Duration) <-chan time.Time {
			mu.Lock()
			defer mu.Unlock()
			waits = append(waits, d)
			now = now.Add(d)
			c := make(chan time.Time, 1)
			c <- now
			return c
		})
	}
	rep := runMBBWithAgents(t, cs, 790*time.Millisecond, clock)
	require.True(t, rep.Paused())
	ms := time.Millisecond
	mu.Lock()
	// 10+20+40+80+160+160+160 = 630ms; the next try would come at 790ms,
	// as HealthTimeout ends: not before it.
	assert.Equal(t, []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 160 * ms, 160 * ms}, waits)
	mu.Unlock()
	ev.mu.Lock()
	assert.Equal(t, 8, ev.calls["web-a"])
	ev.mu.Unlock()
	assert.Contains(t, rep.Waiting.Observed, "the eviction of default/web-a was refused 8 time(s) within 790ms")
}

// A StatefulSet's pod comes back under its own name: the evicted pod is
// gone once the pod of that name has another UID, and the run goes on.
func TestFlannelMakeBeforeBreakTakesAStatefulSetPodBackUnderItsNameAsReplaced(t *testing.T) {
	cs, srv := mbbCluster()
	sts := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "uid-db", Controller: new(true)}}
	srv.AddPod(mbbPod("db-0", "w2", "10.244.2.9", sts))
	installEvictions(cs, srv, func(string, int) bool { return false }, nil)
	var mu sync.Mutex
	replaced := 0
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" || a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name != "db-0" {
			return false, nil, nil
		}
		if _, _, err := srv.Handle(k8stesting.NewDeleteAction(corev1.SchemeGroupVersion.WithResource("pods"), "default", "db-0")); err != nil {
			return true, nil, err
		}
		n, _ := srv.Node("w2")
		p := mbbPod("db-0", "w2", netip.MustParsePrefix(n.Spec.PodCIDR).Addr().Next().Next().String(), sts)
		p.UID = "uid-db-0-again"
		srv.AddPod(p)
		mu.Lock()
		replaced++
		mu.Unlock()
		return true, nil, nil
	})
	rep := runMBBWithAgents(t, cs, time.Second)
	require.False(t, rep.Paused(), "%+v", rep.Waiting)
	mu.Lock()
	assert.Equal(t, 1, replaced)
	mu.Unlock()
	assert.Contains(t, strings.Join(rep.Steps[3].Details, "\n"), "evicted default/db-0 (old address 10.244.2.9)")
}

// Each evicted pod is waited for until it is gone before the next pod is
// evicted, even once it has finished (its containers stopped, the object
// kept by a finalizer): the PodDisruptionBudget sets the pace, one pod at
// a time.
func TestFlannelMakeBeforeBreakEvictsTheNextPodOnlyOnceTheLastIsGone(t *testing.T) {
	cs, srv := mbbCluster()
	srv.AddPod(mbbPod("web-c", "w2", "10.244.2.6", webRS))
	installEvictions(cs, srv, func(string, int) bool { return false }, nil)
	var mu sync.Mutex
	var events []string
	gets := 0
	finished := ""
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name
		mu.Lock()
		defer mu.Unlock()
		events = append(events, "evict "+name)
		if finished != "" || a.GetNamespace() != "default" || (name != "web-a" && name != "web-c") {
			return false, nil, nil
		}
		// The first of w2's pods finishes and stays, until it was read 3 times.
		for _, p := range srv.Pods() {
			if p.Name == name {
				p.DeletionTimestamp = new(metav1.Now())
				p.Finalizers = []string{"example.com/keep"}
				p.Status.Phase = corev1.PodSucceeded
				srv.AddPod(&p)
			}
		}
		finished = name
		return true, nil, nil
	})
	cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.GetAction).GetName()
		mu.Lock()
		defer mu.Unlock()
		if name != finished || slices.Contains(events, "gone "+name) {
			return false, nil, nil
		}
		if gets++; gets == 3 {
			if _, _, err := srv.Handle(k8stesting.NewDeleteAction(corev1.SchemeGroupVersion.WithResource("pods"), "default", name)); err != nil {
				return true, nil, err
			}
			events = append(events, "gone "+name)
		}
		return false, nil, nil
	})
	rep := runMBBWithAgents(t, cs, time.Second)
	require.False(t, rep.Paused(), "%+v", rep.Waiting)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, finished)
	other := map[string]string{"web-a": "web-c", "web-c": "web-a"}[finished]
	gone, next := slices.Index(events, "gone "+finished), slices.Index(events, "evict "+other)
	require.GreaterOrEqual(t, gone, 0, "%v", events)
	require.GreaterOrEqual(t, next, 0, "%v", events)
	assert.Less(t, gone, next, "%s evicted while %s was still there: %v", other, finished, events)
}

// A node that leaves a podCIDR it shares (a duplicate the fix moves) gets
// no standby: the subnet stays the other holder's, which keeps its routes.
// The report says so.
func TestFlannelMakeBeforeBreakNoStandbyForADuplicate(t *testing.T) {
	cs := flCluster(flNetConf) // w3 shares w1's 10.244.1.0/24
	_, stop := agentsOn(cs, "w1", "w2", "w3", "w4")
	defer stop()
	o := flOptions(cs)
	o.Continue, o.MakeBeforeBreak = true, true
	m, err := migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	agents := &migrate.HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 5 * time.Second}
	waitAgents(t, agents, "w1", "w2", "w3")
	rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j"), Agents: agents}).Run(t.Context(), m)
	require.NoError(t, err)
	require.False(t, rep.Paused(), "%+v", rep.Waiting)
	var all []string
	for _, s := range rep.Steps {
		all = append(all, s.Details...)
	}
	assert.Contains(t, strings.Join(all, "\n"), "node w3: no standby before its delete: the subnet it leaves stays another node's")
}

// keptSink records the keepingOldSubnetsOf of each "host wants published"
// log line, and formats nothing else.
type keptSink struct {
	mu   *sync.Mutex
	kept *[][]string
}

func (s keptSink) Init(logr.RuntimeInfo)          {}
func (s keptSink) Enabled(int) bool               { return true }
func (s keptSink) Error(error, string, ...any)    {}
func (s keptSink) WithValues(...any) logr.LogSink { return s }
func (s keptSink) WithName(string) logr.LogSink   { return s }
func (s keptSink) Info(_ int, msg string, kv ...any) {
	if msg != "host wants published" {
		return
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "keepingOldSubnetsOf" {
			v, _ := kv[i+1].([]string)
			s.mu.Lock()
			*s.kept = append(*s.kept, v)
			s.mu.Unlock()
		}
	}
}

// Each publication of the wants logs (at V(1)) whose old subnets the peers
// keep routing: at the end of the run, only w1's, which its bare pod solo
// still holds.
func TestFlannelMakeBeforeBreakLogsWhoseOldSubnetsAreKept(t *testing.T) {
	cs, srv := mbbCluster()
	installEvictions(cs, srv, func(string, int) bool { return false }, nil)
	_, stop := agentsOn(cs, "w1", "w2", "w3")
	defer stop()
	var mu sync.Mutex
	var kept [][]string
	log := logr.New(keptSink{mu: &mu, kept: &kept})
	m, err := migrate.FlannelPodCIDR(mbbOptions(cs))
	require.NoError(t, err)
	agents := &migrate.HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 5 * time.Second}
	waitAgents(t, agents, "w1", "w2", "w3")
	rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j"), Agents: agents}).Run(logr.NewContext(t.Context(), log), m)
	require.NoError(t, err)
	require.False(t, rep.Paused())
	stop()
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, kept)
	assert.Equal(t, []string{"w1"}, kept[len(kept)-1], "%v", kept)
	assert.Contains(t, kept, []string{"w2", "w1"}, "after w2 moved, while web-a held its old address")
}

// A server dry run of make-before-break, with an agent on every node,
// changes no host and no pod: every write is a dry run, no want is
// published, no eviction is sent, and every node keeps its podCIDRs and
// its UID. (The make-before-break hooks' own checks of the mode are not
// what this test reaches: nodecidr runs no hook in a dry run.)
func TestFlannelMakeBeforeBreakServerDryRunChangesNothing(t *testing.T) {
	cs, srv := mbbCluster()
	got, stop := agentsOn(cs, "w1", "w2", "w3")
	defer stop()
	before := srv.Nodes()
	var mu sync.Mutex
	var writes []string
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			switch a.GetResource().Resource {
			case "leases", "selfsubjectaccessreviews":
				return false, nil, nil // the agents' own, and the access checks
			}
			mu.Lock()
			writes = append(writes, fmt.Sprintf("%s %s/%s %v", a.GetVerb(), a.GetResource().Resource, a.GetSubresource(), dryRunOf(a)))
			mu.Unlock()
		}
		return false, nil, nil
	})
	m, err := migrate.FlannelPodCIDR(mbbOptions(cs))
	require.NoError(t, err)
	agents := &migrate.HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 5 * time.Second}
	waitAgents(t, agents, "w1", "w2", "w3")
	_, err = (&migrate.Runner{Mode: migrate.ModeServerDryRun, Agents: agents}).Run(t.Context(), m)
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, writes, "the run sends its writes, as dry runs")
	for _, w := range writes {
		assert.Contains(t, w, "[All]", "every write of a server dry run is a dry run: %s", w)
		assert.NotContains(t, w, "eviction", "no eviction is sent, not even as a dry run")
	}
	assert.Empty(t, got(), "no agent got a want")
	for _, b := range before {
		n, ok := srv.Node(b.Name)
		require.True(t, ok, "node %s", b.Name)
		assert.Equal(t, b.UID, n.UID, "node %s", b.Name)
		assert.Equal(t, b.Spec.PodCIDRs, n.Spec.PodCIDRs, "node %s", b.Name)
		assert.NotContains(t, n.Annotations, migrate.HostWantAnnotation, b.Name)
	}
}

// dryRunOf is the dryRun option of a write.
func dryRunOf(a k8stesting.Action) []string {
	switch a := a.(type) {
	case k8stesting.CreateActionImpl:
		return a.CreateOptions.DryRun
	case k8stesting.UpdateActionImpl:
		return a.UpdateOptions.DryRun
	case k8stesting.PatchActionImpl:
		return a.PatchOptions.DryRun
	case k8stesting.DeleteActionImpl:
		return a.DeleteOptions.DryRun
	}
	return nil
}
