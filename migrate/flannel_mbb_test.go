package migrate_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/internal/kubetest"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
	"github.com/cidrshift/cidrshift/nodenet"
)

var webRS = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7c9", UID: "uid-rs", Controller: new(true)}}

func mbbPod(name, node, ip string, owners []metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), OwnerReferences: owners},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

// mbbCluster: w1, w2, w3 on 10.244.{1,2,3}.0/24 (renumbered into
// 10.240.0.0/16); a bare pod "solo" on w1 (nothing would recreate it, so it
// keeps its old address), the Deployment web's pods web-a on w2 and web-b
// on w3; kube-controller-manager already runs with the new --cluster-cidr.
func mbbCluster() (*fake.Clientset, *nodecidrtest.Server) {
	return nodecidrtest.New([]runtime.Object{
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: flannel.DefaultNetConfName, Namespace: flannel.DefaultNetConfNamespace, ResourceVersion: "1"},
			Data:       map[string]string{flannel.NetConfKey: flNetConf},
		},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-7c9", Namespace: "default", UID: "uid-rs",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "uid-web", Controller: new(true)}}}},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-cp", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"component": "kube-controller-manager"}},
			Spec: corev1.PodSpec{NodeName: "cp", HostNetwork: true, Containers: []corev1.Container{{Name: "kube-controller-manager",
				Command: []string{"kube-controller-manager", "--cluster-cidr=10.240.0.0/12", "--node-cidr-mask-size=24"}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		},
		flNode("w1", "10.244.1.0/24", 0),
		flNode("w2", "10.244.2.0/24", 0),
		flNode("w3", "10.244.3.0/24", 0),
		mbbPod("solo", "w1", "10.244.1.7", nil),
		mbbPod("web-a", "w2", "10.244.2.5", webRS),
		mbbPod("web-b", "w3", "10.244.3.5", webRS),
	}...)
}

func mbbOptions(cs *fake.Clientset) migrate.FlannelPodCIDROptions {
	o := flOptions(cs)
	o.RewriteNodes, o.NodeRange, o.MakeBeforeBreak = true, netip.MustParsePrefix("10.240.0.0/16"), true
	return o
}

// evictions answers the Eviction API as kube-apiserver and a ReplicaSet
// would: refuse answers 429 (a PodDisruptionBudget) for a pod while it
// returns true; otherwise the pod is deleted and a replacement with an
// address of its node's podCIDR now is created. onEvict runs before.
type evictions struct {
	mu      sync.Mutex
	calls   map[string]int
	evicted []string
}

func installEvictions(cs *fake.Clientset, srv *nodecidrtest.Server, refuse func(pod string, call int) bool, onEvict func(pod string)) *evictions {
	e := &evictions{calls: map[string]int{}}
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		e.mu.Lock()
		e.calls[ev.Name]++
		call := e.calls[ev.Name]
		e.mu.Unlock()
		if refuse(ev.Name, call) {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		var old *corev1.Pod
		for _, p := range srv.Pods() {
			if p.Namespace == a.GetNamespace() && p.Name == ev.Name {
				old = &p
			}
		}
		if old == nil {
			return true, nil, apierrors.NewNotFound(corev1.Resource("pods"), ev.Name)
		}
		if onEvict != nil {
			onEvict(ev.Name)
		}
		if _, _, err := srv.Handle(k8stesting.NewDeleteActionWithOptions(corev1.SchemeGroupVersion.WithResource("pods"), old.Namespace, old.Name, *ev.DeleteOptions)); err != nil {
			return true, nil, err
		}
		n, _ := srv.Node(old.Spec.NodeName)
		ip := netip.MustParsePrefix(n.Spec.PodCIDR).Addr().Next().Next().Next().String()
		srv.AddPod(mbbPod(old.Name+"-new", old.Spec.NodeName, ip, old.OwnerReferences))
		e.mu.Lock()
		e.evicted = append(e.evicted, ev.Name)
		e.mu.Unlock()
		return true, nil, nil
	})
	return e
}

// waitAgents waits until the fake agents on nodes have their Leases.
func waitAgents(t *testing.T, h *migrate.HostAgents, nodes ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if ok, _ := h.Present(t.Context(), n); !ok {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
}

// runMBB runs the make-before-break migration of mbbCluster to its end,
// with the agents agentsOn plays on w1, w2 and w3.
func runMBB(t *testing.T, cs *fake.Clientset) *migrate.Report {
	t.Helper()
	m, err := migrate.FlannelPodCIDR(mbbOptions(cs))
	require.NoError(t, err)
	agents := &migrate.HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 5 * time.Second}
	waitAgents(t, agents, "w1", "w2", "w3")
	rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j"), Agents: agents}).Run(t.Context(), m)
	require.NoError(t, err)
	require.False(t, rep.Paused(), "%+v", rep.Waiting)
	return rep
}

// published is the want a node's annotation holds now.
func published(t *testing.T, srv *nodecidrtest.Server, node string) nodenet.Want {
	n, ok := srv.Node(node)
	if !ok {
		return nodenet.Want{}
	}
	var req migrate.HostRequest
	if v, ok := n.Annotations[migrate.HostWantAnnotation]; !ok || json.Unmarshal([]byte(v), &req) != nil {
		return nodenet.Want{}
	}
	return req.Want
}

func peer(w nodenet.Want, name string) nodenet.Peer {
	for _, p := range w.Peers {
		if p.Name == name {
			return p
		}
	}
	return nodenet.Peer{}
}

var (
	old1 = netip.MustParsePrefix("10.244.1.0/24")
	old2 = netip.MustParsePrefix("10.244.2.0/24")
	new2 = netip.MustParsePrefix("10.240.2.0/24")
)

// Make-before-break: after each node moves, every node's agent gets a want
// that keeps the old subnets live pods still hold (w1's, for its bare pod,
// on every want published after w2 and w3 moved); a node's old pods are
// replaced through the Eviction API (a 429 retried), never deleted, and
// only after every other node's want routes their subnet; once they are
// gone the wants are published again without it. The bare pod's subnet is
// never torn down.
func TestFlannelMakeBeforeBreak(t *testing.T) {
	cs, srv := mbbCluster()
	var mu sync.Mutex
	atEviction := map[string]nodenet.Want{} // w1's and w3's wants when web-a was evicted
	ev := installEvictions(cs, srv, func(_ string, call int) bool { return call == 1 }, func(pod string) {
		if pod == "web-a" {
			mu.Lock()
			atEviction["w1"], atEviction["w3"] = published(t, srv, "w1"), published(t, srv, "w3")
			mu.Unlock()
		}
	})
	got, stop := agentsOn(cs, "w1", "w2", "w3")
	defer stop()
	rep := runMBB(t, cs)
	stop()

	ev.mu.Lock()
	assert.Equal(t, []string{"web-a", "web-b"}, ev.evicted, "each controller-owned old pod evicted once it could be")
	assert.Equal(t, map[string]int{"web-a": 2, "web-b": 2}, ev.calls, "the 429 is retried; the bare pod is never evicted")
	ev.mu.Unlock()
	for _, a := range cs.Actions() {
		assert.False(t, a.GetVerb() == "delete" && a.GetResource().Resource == "pods" && a.GetNamespace() == "default", "a pod deleted instead of evicted: %v", a)
	}
	pods := map[string]bool{}
	for _, p := range srv.Pods() {
		pods[p.Name] = true
	}
	assert.True(t, pods["solo"] && pods["web-a-new"] && pods["web-b-new"] && !pods["web-a"] && !pods["web-b"], "pods now: %v", pods)

	// The transition was up on every other node before web-a was evicted.
	mu.Lock()
	for _, n := range []string{"w1", "w3"} {
		p := peer(atEviction[n], "w2")
		assert.Equal(t, new2, p.PodCIDR, "%s's want when web-a was evicted", n)
		assert.Equal(t, []netip.Prefix{old2}, p.OldPodCIDRs, "%s routed w2's old subnet while web-a held %s", n, "10.244.2.5")
	}
	mu.Unlock()

	reqs := got()
	tornDown := map[string]bool{}
	for _, n := range []string{"w1", "w3"} {
		sawKept := false
		for _, r := range reqs[n] {
			if p := peer(r.Want, "w2"); p.PodCIDR == new2 {
				if len(p.OldPodCIDRs) > 0 {
					sawKept = true
				} else if sawKept {
					tornDown[n] = true
				}
			}
		}
		assert.True(t, sawKept, "%s was asked to route w2's old subnet", n)
	}
	assert.Equal(t, map[string]bool{"w1": true, "w3": true}, tornDown, "once web-a was gone, w2's old subnet was dropped from every other node's want")
	// After w1 moved, every want any other node got lists w1's old subnet:
	// the bare pod solo keeps it to the end.
	for _, n := range []string{"w2", "w3"} {
		n1 := 0
		for _, r := range reqs[n] {
			if p := peer(r.Want, "w1"); p.PodCIDR != old1 {
				n1++
				assert.Equal(t, []netip.Prefix{old1}, p.OldPodCIDRs, "generation %d to %s while solo holds 10.244.1.7", r.Generation, n)
			}
		}
		assert.Positive(t, n1, "%s got wants after w1 moved", n)
	}
	last1 := reqs["w1"][len(reqs["w1"])-1].Want
	assert.Equal(t, old1, last1.OldPodCIDR, "w1 keeps its transition for solo")
	assert.Empty(t, peer(published(t, srv, "w3"), "w3").OldPodCIDRs)
	assert.Empty(t, peer(published(t, srv, "w1"), "w3").OldPodCIDRs, "web-b replaced: w3's old subnet torn down")
	assert.Equal(t, []netip.Prefix{old1}, peer(published(t, srv, "w3"), "w1").OldPodCIDRs, "never torn down while solo lives")

	details := strings.Join(rep.Steps[3].Details, "\n")
	assert.Contains(t, details, "evicted default/web-a (old address 10.244.2.5)")
	assert.Contains(t, details, "restart by hand (no controller would recreate it): default/solo on w1")
	assert.Contains(t, details, "node w1: the transition stays while 1 pod(s) hold old addresses: default/solo")
	assert.Contains(t, details, "node w2: no pod holds an old address; transition torn down")
}

// A pod whose PodDisruptionBudget never allows its eviction pauses the run
// (exit 3 in the runbook) with the pods still on old addresses and the
// command that replaces them; it is neither deleted nor cut off: the
// transition stays published. A rerun tries again and pauses again; a
// rerun with Continue goes on with the pod on its old address.
func TestFlannelMakeBeforeBreakPausesOnPDB(t *testing.T) {
	cs, srv := mbbCluster()
	ev := installEvictions(cs, srv, func(pod string, _ int) bool { return pod == "web-a" }, nil)
	_, stop := agentsOn(cs, "w1", "w2", "w3")
	defer stop()
	o := mbbOptions(cs)
	o.HealthTimeout = 100 * time.Millisecond
	journal := filepath.Join(t.TempDir(), "j")
	agents := &migrate.HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 5 * time.Second}
	waitAgents(t, agents, "w1", "w2", "w3")
	run := func(cont bool) *migrate.Report {
		t.Helper()
		o.Continue = cont
		m, err := migrate.FlannelPodCIDR(o)
		require.NoError(t, err)
		rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: journal, Agents: agents}).Run(t.Context(), m)
		require.NoError(t, err)
		return rep
	}
	for i := range 2 {
		rep := run(false)
		require.True(t, rep.Paused(), "run %d", i+1)
		assert.Equal(t, migrate.FlannelStepRewrite, rep.Waiting.Step)
		instr := strings.Join(rep.Waiting.Instructions, "\n")
		assert.Contains(t, instr, "pod default/web-a on node w2 still holds the old address 10.244.2.5")
		assert.Contains(t, instr, "kubectl -n default rollout restart deployment/web")
		assert.Contains(t, rep.Waiting.Observed, "the eviction of default/web-a was refused")
		assert.Contains(t, rep.Waiting.Resume, "--continue")
		for _, n := range []string{"w1", "w3"} {
			assert.Equal(t, []netip.Prefix{old2}, peer(published(t, srv, n), "w2").OldPodCIDRs, "run %d: %s keeps routing web-a's subnet", i+1, n)
		}
	}
	ev.mu.Lock()
	assert.GreaterOrEqual(t, ev.calls["web-a"], 4, "each run retried the refused eviction")
	assert.Empty(t, ev.evicted)
	ev.mu.Unlock()
	assert.True(t, slices.ContainsFunc(srv.Pods(), func(p corev1.Pod) bool { return p.Name == "web-a" }), "never deleted")

	rep := run(true)
	require.False(t, rep.Paused(), "%+v", rep.Waiting)
	assert.Contains(t, strings.Join(rep.Steps[3].Details, "\n"), "node w2: --continue after the pause: default/web-a keep their old addresses")
	for _, n := range []string{"w1", "w3"} {
		assert.Equal(t, []netip.Prefix{old2}, peer(published(t, srv, n), "w2").OldPodCIDRs, "%s still routes web-a's old subnet at the end", n)
	}
	ev.mu.Lock()
	assert.Equal(t, []string{"web-b"}, ev.evicted, "w3's pod was replaced after the continue")
	ev.mu.Unlock()
}

// MakeBeforeBreak without agents, or with a node no agent serves, is
// refused before the first write.
func TestFlannelMakeBeforeBreakNeedsAgents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		agents []string
		want   string
	}{
		{"no agents", nil, "--make-before-break needs --agents"},
		{"one node without", []string{"w1", "w3"}, "no host agent runs on node(s) w2 ("},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, _ := mbbCluster()
			r := &migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}
			if tc.agents != nil {
				_, stop := agentsOn(cs, tc.agents...)
				defer stop()
				r.Agents = &migrate.HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: time.Second}
				waitAgents(t, r.Agents, tc.agents...)
			}
			m, err := migrate.FlannelPodCIDR(mbbOptions(cs))
			require.NoError(t, err)
			_, err = r.Run(t.Context(), m)
			require.ErrorIs(t, err, migrate.ErrInvalidInput)
			assert.Contains(t, err.Error(), tc.want)
			for _, a := range cs.Actions() {
				v := a.GetVerb()
				assert.False(t, (v == "delete" || v == "create" || v == "update" || v == "patch") && (a.GetResource().Resource == "nodes" || a.GetResource().Resource == "configmaps"), "written: %v", a)
			}
		})
	}
}

// A run killed after an eviction was accepted finds the old pod
// terminating: it waits for its end before going on (and pauses when it
// does not end), instead of taking the node as done while the pod still
// holds its old address.
func TestFlannelMakeBeforeBreakWaitsForTerminatingPod(t *testing.T) {
	cs, srv := mbbCluster()
	for _, p := range srv.Pods() {
		if p.Name == "web-a" {
			p.DeletionTimestamp = new(metav1.Now())
			srv.AddPod(&p)
		}
	}
	ev := installEvictions(cs, srv, func(string, int) bool { return false }, nil)
	_, stop := agentsOn(cs, "w1", "w2", "w3")
	defer stop()
	o := mbbOptions(cs)
	o.HealthTimeout = 100 * time.Millisecond
	agents := &migrate.HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 5 * time.Second}
	waitAgents(t, agents, "w1", "w2", "w3")
	m, err := migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j"), Agents: agents}).Run(t.Context(), m)
	require.NoError(t, err)
	require.True(t, rep.Paused(), "w2's old pod web-a never ends")
	assert.Contains(t, rep.Waiting.Observed, "evicted pod default/web-a still exists")
	assert.Contains(t, strings.Join(rep.Waiting.Instructions, "\n"), "pod default/web-a on node w2 still holds the old address 10.244.2.5")
	for _, n := range []string{"w1", "w3"} {
		assert.Equal(t, []netip.Prefix{old2}, peer(published(t, srv, n), "w2").OldPodCIDRs, "%s keeps routing web-a's subnet", n)
	}
	ev.mu.Lock()
	assert.Zero(t, ev.calls["web-a"], "a terminating pod is not evicted again")
	ev.mu.Unlock()
}

// Make-before-break sets up the standby before each node's delete: every
// other node's want lists the node with its next podCIDR and its VTEP MAC
// when the delete arrives. A node that
// announces no VTEP MAC gets no standby (noted), and still moves.
func TestFlannelMakeBeforeBreakStandbyBeforeEachDelete(t *testing.T) {
	cs, srv := mbbCluster()
	for i, name := range []string{"w1", "w2", "w3"} {
		if name == "w3" {
			continue // announces no MAC
		}
		n, err := cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(t, err)
		n.Annotations["flannel.alpha.coreos.com/backend-data"] = fmt.Sprintf(`{"VNI":1,"VtepMAC":"6e:00:00:00:0%d:00"}`, i+1)
		_, err = cs.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	atDelete := map[string]map[string]nodenet.Peer{} // deleted node -> other node -> its peer entry
	cs.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteAction).GetName()
		mu.Lock()
		defer mu.Unlock()
		atDelete[name] = map[string]nodenet.Peer{}
		for _, other := range []string{"w1", "w2", "w3"} {
			if other != name {
				atDelete[name][other] = peer(published(t, srv, other), name)
			}
		}
		return false, nil, nil
	})
	installEvictions(cs, srv, func(string, int) bool { return false }, nil)
	_, stop := agentsOn(cs, "w1", "w2", "w3")
	defer stop()
	rep := runMBB(t, cs)
	stop()

	mu.Lock()
	defer mu.Unlock()
	for name, want := range map[string]nodenet.Peer{
		"w1": {Name: "w1", PodCIDR: old1, NextPodCIDR: netip.MustParsePrefix("10.240.1.0/24"), VTEPMAC: "6e:00:00:00:01:00"},
		"w2": {Name: "w2", PodCIDR: old2, NextPodCIDR: new2, VTEPMAC: "6e:00:00:00:02:00"},
	} {
		for other, got := range atDelete[name] {
			assert.Equal(t, want, got, "%s's entry in %s's want when %s was deleted", name, other, name)
		}
		assert.Len(t, atDelete[name], 2)
	}
	for other, got := range atDelete["w3"] {
		assert.False(t, got.NextPodCIDR.IsValid(), "w3 announces no MAC: no standby in %s's want", other)
	}
	assert.Contains(t, strings.Join(rep.Steps[3].Details, "\n"), "node w3: no standby before its delete: its flannel annotation announces no VtepMAC")
}

// A run whose Lease is lost while a pod's eviction is refused sends no
// further eviction: the retry is not made, no other pod is evicted, and the
// error names the lost Lease. The pod keeps its old address, still routed.
func TestFlannelMakeBeforeBreakEvictsNothingAfterTheLockIsLost(t *testing.T) {
	cs, srv := mbbCluster()
	lock := &kubetest.Lock{Name: "kube-system/cidrshift-flannel", ChecksLeft: -1}
	ev := installEvictions(cs, srv, func(pod string, call int) bool {
		if pod == "web-a" && call == 1 {
			lock.Lose() // taken over while the PodDisruptionBudget refuses
			return true
		}
		return false
	}, nil)
	_, stop := agentsOn(cs, "w1", "w2", "w3")
	defer stop()
	agents := &migrate.HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 5 * time.Second}
	waitAgents(t, agents, "w1", "w2", "w3")
	m, err := migrate.FlannelPodCIDR(mbbOptions(cs))
	require.NoError(t, err)
	_, err = (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j"), Agents: agents, Lock: lock}).Run(t.Context(), m)
	require.ErrorIs(t, err, kubetest.ErrLockLost)
	assert.ErrorContains(t, err, "not evicting pod default/web-a on node w2: the run no longer holds its lock: test lock lost: lease kube-system/cidrshift-flannel")
	ev.mu.Lock()
	assert.Equal(t, map[string]int{"web-a": 1}, ev.calls, "no eviction after the loss")
	assert.Empty(t, ev.evicted)
	ev.mu.Unlock()
	assert.True(t, slices.ContainsFunc(srv.Pods(), func(p corev1.Pod) bool { return p.Name == "web-a" }), "never deleted")
	assert.False(t, lock.Held(), "released")
}

// Without MakeBeforeBreak, a run whose Lease is lost after it deleted one
// of a moved node's pods deletes no other: the restart-pods hook checks the
// lock before each delete, and the error names the lost Lease.
func TestFlannelDeletesNoPodAfterTheLockIsLost(t *testing.T) {
	cs, srv := mbbCluster()
	srv.AddPod(mbbPod("web-c", "w2", "10.244.2.6", webRS))
	lock := &kubetest.Lock{Name: "kube-system/cidrshift-flannel", ChecksLeft: -1}
	var mu sync.Mutex
	var deleted []string
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "default" {
			mu.Lock()
			deleted = append(deleted, a.(k8stesting.DeleteAction).GetName())
			mu.Unlock()
			lock.Lose() // taken over right after this delete
		}
		return false, nil, nil
	})
	o := flOptions(cs)
	o.RewriteNodes, o.NodeRange = true, netip.MustParsePrefix("10.240.0.0/16")
	m, err := migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	_, err = (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j"), Lock: lock}).Run(t.Context(), m)
	require.ErrorIs(t, err, kubetest.ErrLockLost)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, deleted, 1, "one pod deleted, none after the loss")
	other := map[string]string{"web-a": "web-c", "web-c": "web-a"}[deleted[0]]
	require.NotEmpty(t, other, "deleted %v", deleted)
	assert.ErrorContains(t, err, "not deleting pod default/"+other+" on node w2: the run no longer holds its lock: test lock lost: lease kube-system/cidrshift-flannel")
	assert.True(t, slices.ContainsFunc(srv.Pods(), func(p corev1.Pod) bool { return p.Name == other }), "%s is left alone", other)
}

// Make-before-break gives each moved node's agent the node's want, with its
// new podCIDR, before the node's flannel pod restarts ("prepare"): the
// agent puts the new VTEP address beside the old one, so the restarted
// flanneld deletes no address and the kernel keeps the node's routes. (A
// device that loses its last IPv4 address loses every route through it:
// the node's old pods would answer nobody until flanneld's backend adds the
// routes again, seconds later; e2e/dataplane's make-before-break test saw
// failed requests from it.)
func TestFlannelMakeBeforeBreakPreparesBeforeTheFlannelPodRestarts(t *testing.T) {
	cs, srv := mbbCluster()
	for _, node := range []string{"w1", "w2", "w3"} {
		srv.AddPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-ds-" + node, Namespace: flannel.DefaultNetConfNamespace,
				UID: types.UID("uid-flannel-" + node), Labels: map[string]string{"app": "flannel"}},
			Spec:   corev1.PodSpec{NodeName: node, HostNetwork: true},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	installEvictions(cs, srv, func(string, int) bool { return false }, nil)
	got, stop := agentsOn(cs, "w1", "w2", "w3")
	defer stop()
	var mu sync.Mutex
	atRestart := map[string]string{} // node -> the podCIDR of the last want its agent had taken
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != flannel.DefaultNetConfNamespace {
			return false, nil, nil
		}
		name := a.(k8stesting.DeleteAction).GetName()
		for _, p := range srv.Pods() {
			if p.Namespace == a.GetNamespace() && p.Name == name {
				last := "no want"
				if reqs := got()[p.Spec.NodeName]; len(reqs) > 0 {
					last = reqs[len(reqs)-1].Want.PodCIDR.String()
				}
				mu.Lock()
				atRestart[p.Spec.NodeName] = last
				mu.Unlock()
			}
		}
		return false, nil, nil
	})
	runMBB(t, cs)
	stop()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]string{"w1": "10.240.1.0/24", "w2": "10.240.2.0/24", "w3": "10.240.3.0/24"}, atRestart, "each node's agent had its new podCIDR when its flannel pod was deleted")
}
