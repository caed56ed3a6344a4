package calico_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/internal/kubetest"
)

// quiet is a cluster without the simulated controllers and IPAM: it holds
// exactly the objects a test puts there, and only Apply and the test's
// reactors change them. Deployments report every rollout complete at once
// (observedGeneration follows generation) without replacing any pod, unless
// a test's reactor does.
type quiet struct {
	kube  *fake.Clientset
	dyn   *dynamicfake.FakeDynamicClient
	pools calico.PoolStore
	cl    calico.Cluster

	eventLog
}

// plan makes the swap plan of request() on q's cluster.
func (q *quiet) plan(t *testing.T) *calico.SwapPlan {
	t.Helper()
	plan, err := calico.Plan(context.Background(), q.cl, request())
	require.NoError(t, err)
	return plan
}

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

func newQuiet(t *testing.T, objs []runtime.Object, dynObjs ...runtime.Object) *quiet {
	t.Helper()
	all := append([]runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}},
	}, objs...)
	kube, _ := calicotest.NewKube(all...)
	accesstest.Authorize(kube)
	kube.PrependReactor("get", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := kube.Tracker().Get(a.GetResource(), a.GetNamespace(), a.(k8stesting.GetAction).GetName())
		if err != nil {
			return true, nil, err
		}
		d := obj.(*appsv1.Deployment).DeepCopy()
		d.Status.ObservedGeneration = d.Generation
		return true, d, nil
	})
	dyn, _ := calicotest.NewDynamic(append([]runtime.Object{v1PoolObject(oldPoolName, oldPoolSpec(), nil)}, dynObjs...)...)
	q := &quiet{kube: kube, dyn: dyn, pools: calico.NewCRDStore(dyn)}
	q.cl = calico.Cluster{Kube: kube, Pools: q.pools, Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}
	return q
}

// disableOldPool sets the old pool's disabled flag, as the swap's step does.
func (q *quiet) disableOldPool(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	old, err := q.pools.Get(ctx, oldPoolName)
	require.NoError(t, err)
	old.Spec.Disabled = true
	_, err = q.pools.Update(ctx, old, calico.WriteOptions{})
	require.NoError(t, err)
}

func (q *quiet) podExists(t *testing.T, ns, name string) bool {
	t.Helper()
	_, err := q.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

func (q *quiet) evictions() []string {
	var out []string
	for _, a := range q.kube.Actions() {
		if c, ok := a.(k8stesting.CreateActionImpl); ok && a.GetSubresource() == "eviction" {
			out = append(out, a.GetNamespace()+"/"+c.GetObject().(*policyv1.Eviction).Name)
		}
	}
	return out
}

// rolledDeployment is a Deployment whose status says its rollout is
// complete, with a ReplicaSet it controls and pods of that ReplicaSet at the
// given addresses (named <name>-1, <name>-2, ...).
func rolledDeployment(ns, name string, extraLabels map[string]string, ips ...string) []runtime.Object {
	n := int32(len(ips))
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-deploy-" + ns + "-" + name)},
		Spec:   appsv1.DeploymentSpec{Replicas: &n, Selector: sel(name), Template: podTemplate(name, extraLabels)},
		Status: appsv1.DeploymentStatus{Replicas: n, UpdatedReplicas: n, AvailableReplicas: n, ReadyReplicas: n}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name + "-rs", Namespace: ns, UID: types.UID("uid-rs-" + ns + "-" + name),
		OwnerReferences: ctrl("Deployment", "apps/v1", name, string(d.UID))}}
	out := []runtime.Object{d, rs}
	for i, ip := range ips {
		out = append(out, podWithIP(ns, fmt.Sprintf("%s-%d", name, i+1), ip, ctrl("ReplicaSet", "apps/v1", rs.Name, string(rs.UID)), func(p *corev1.Pod) {
			p.Labels = map[string]string{"app": name}
			for k, v := range extraLabels {
				p.Labels[k] = v
			}
			p.Spec.NodeName = "node-a"
		}))
	}
	return out
}

// lonelyPods are pods of a ReplicaSet without a Deployment (moved by
// eviction), named <rs>-1, <rs>-2, ...
func lonelyPods(ns, rs string, ips ...string) []runtime.Object {
	out := []runtime.Object{&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: rs, Namespace: ns, UID: types.UID("uid-rs-" + ns + "-" + rs)}}}
	for i, ip := range ips {
		out = append(out, podWithIP(ns, fmt.Sprintf("%s-%d", rs, i+1), ip, ctrl("ReplicaSet", "apps/v1", rs, "uid-rs-"+ns+"-"+rs), func(p *corev1.Pod) {
			p.Spec.NodeName = "node-a"
		}))
	}
	return out
}

// replacesOnRestart makes the first restart of each named Deployment
// replace only its first pod (<name>-1), as a rollout that a StatefulSet
// partition, a stuck pod or a paused controller leaves half done.
func replacesOnRestart(kube *fake.Clientset, names ...string) {
	done := map[string]bool{}
	var mu sync.Mutex
	kube.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.PatchAction).GetName()
		mu.Lock()
		defer mu.Unlock()
		for _, n := range names {
			if n == name && !done[n] {
				done[n] = true
				_ = kube.Tracker().Delete(podsGVR, a.GetNamespace(), name+"-1")
			}
		}
		return false, nil, nil
	})
}

func resultKeys(ws []calico.WorkloadRef) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Key())
	}
	return out
}

func podKeys(ps []calico.PodRef) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// TestApplyEvictsWhatARolloutLeftBehind: a rollout that replaced only some
// of a workload's pods (cluster DNS and another Deployment) is not repeated
// (the same restartedAt value would change nothing): the next pass evicts
// the pods it left behind, each workload is reported restarted once, and
// the old pool is deleted once they are gone. The events carry their phase
// and say what they did.
func TestApplyEvictsWhatARolloutLeftBehind(t *testing.T) {
	objs := append(rolledDeployment("kube-system", "coredns", map[string]string{"k8s-app": "kube-dns"}, "10.233.64.2", "10.233.64.3"),
		rolledDeployment("default", "web", nil, "10.233.64.4", "10.233.64.5")...)
	q := newQuiet(t, objs)
	replacesOnRestart(q.kube, "coredns", "web")
	ctx := context.Background()
	plan := q.plan(t)
	opts := fastOptions(t.TempDir())
	opts.OnEvent = q.onEvent
	res, err := calico.Apply(ctx, q.cl, plan, opts)
	require.NoError(t, err)
	assert.True(t, res.Done)
	assert.True(t, res.OldPoolDeleted)
	assert.Equal(t, []string{"Deployment/kube-system/coredns", "Deployment/default/web"}, resultKeys(res.Restarted), "each workload restarted once")
	assert.ElementsMatch(t, []string{"kube-system/coredns-2", "default/web-2"}, podKeys(res.Evicted), "the pods the rollouts left behind are evicted")
	assert.ElementsMatch(t, []string{"kube-system/coredns-2", "default/web-2"}, q.evictions())
	assert.False(t, q.podExists(t, "kube-system", "coredns-2"))
	assert.False(t, q.podExists(t, "default", "web-2"))
	_, err = q.pools.Get(ctx, oldPoolName)
	assert.ErrorIs(t, err, calico.ErrPoolNotFound)

	assert.Len(t, q.eventsOf(calico.EventRestart), 2, "no workload is restarted twice")
	for _, ev := range q.eventsOf(calico.EventRestart) {
		assert.Equal(t, calico.PhaseMovePods, ev.Phase, ev.Message)
	}
	var evicts []string
	for _, ev := range q.eventsOf(calico.EventEvict) {
		assert.Equal(t, calico.PhaseMovePods, ev.Phase, ev.Message)
		evicts = append(evicts, ev.Message)
	}
	assert.ElementsMatch(t, []string{
		"evict pod kube-system/coredns-2 (10.233.64.3) of Deployment kube-system/coredns",
		"evict pod default/web-2 (10.233.64.5) of Deployment default/web",
	}, evicts)
	created := q.eventsOf(calico.EventCreatePool)
	require.Len(t, created, 1)
	assert.Equal(t, calico.PhaseCreatePool, created[0].Phase)
	deleted := q.eventsOf(calico.EventDeletePool)
	require.Len(t, deleted, 1)
	assert.Equal(t, calico.PhaseDeleteOldPool, deleted[0].Phase)
	assert.Equal(t, `delete IPPool "default-ipv4-ippool" (10.233.64.0/18)`, deleted[0].Message, "nothing was left: no forced delete")
}

// TestApplyResumedRestartsWithTheJournaledRestartedAt: a run stopped right
// after restarting a workload, whose pods the rollout has not replaced yet,
// is resumed in a later second; the resumed run restarts the workload with
// the restartedAt value its journal holds, so the Deployment's template is
// not changed again and its rollout is not started a second time. (Each
// restart here replaces one more pod, so that each pass makes progress.)
func TestApplyResumedRestartsWithTheJournaledRestartedAt(t *testing.T) {
	q := newQuiet(t, rolledDeployment("default", "web", nil, "10.233.64.4", "10.233.64.5", "10.233.64.6"))
	var restarts atomic.Int32
	q.kube.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		_ = q.kube.Tracker().Delete(podsGVR, a.GetNamespace(), fmt.Sprintf("web-%d", restarts.Add(1)))
		return false, nil, nil
	})
	ctx := context.Background()
	plan := q.plan(t)
	dir := t.TempDir()

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := fastOptions(dir)
	opts.OnEvent = func(ev calico.Event) {
		q.onEvent(ev)
		if ev.Type == calico.EventRestart {
			cancel()
		}
	}
	_, err := calico.Apply(cctx, q.cl, plan, opts)
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, q.evictions(), "the stopped run evicted nothing")
	assert.True(t, q.podExists(t, "default", "web-2"))

	// restartedAt has a resolution of one second: resume in a later second,
	// so that a value made afresh, not read from the journal, would differ.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	opts = fastOptions(dir)
	opts.OnEvent = q.onEvent
	res, err := calico.Apply(ctx, q.cl, plan, opts)
	require.NoError(t, err)
	assert.True(t, res.Resumed)
	assert.True(t, res.Done)
	assert.Equal(t, []string{"default/web-3"}, q.evictions(), "the pod both restarts left behind is evicted")

	var patches []string
	for _, a := range q.kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "deployments" {
			patches = append(patches, string(p.GetPatch()))
		}
	}
	require.Len(t, patches, 2, "web is restarted by each run")
	assert.Equal(t, patches[0], patches[1], "the resumed run writes the journaled restartedAt")
}

// TestApplyReportsPodsThatDoNotLeave: an eviction answered "gone" while the
// pod stays (the same UID) leaves the same pods after a full pass; Apply
// stops with an error naming them instead of passing over them until the
// verification.
func TestApplyReportsPodsThatDoNotLeave(t *testing.T) {
	q := newQuiet(t, lonelyPods("default", "lonely", "10.233.64.4"))
	q.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewNotFound(podsGVR.GroupResource(), "lonely-1")
	})
	ctx := context.Background()
	plan := q.plan(t)
	res, err := calico.Apply(ctx, q.cl, plan, fastOptions(t.TempDir()))
	require.Error(t, err)
	assert.NotErrorIs(t, err, calico.ErrLeftovers)
	assert.Contains(t, err.Error(), "pods did not leave 10.233.64.0/18 after a full pass: default/lonely-1/")
	assert.Equal(t, calico.PhaseMovePods, res.Phase)
	assert.Len(t, q.evictions(), 1, "evicted once, found again in the next pass")
	_, err = q.pools.Get(ctx, oldPoolName)
	require.NoError(t, err, "the old pool stays")
}

// TestApplyStopsMovingAfterMaxPasses: pods that keep coming back on the old
// pool under new names (something still hands out its addresses) are
// evicted once a pass for MaxPasses passes (3 by default), then the
// verification refuses the delete and names what is left.
func TestApplyStopsMovingAfterMaxPasses(t *testing.T) {
	for _, tc := range []struct {
		maxPasses int
		evictions int32
	}{{0, 3}, {1, 1}} {
		t.Run(fmt.Sprint(tc.maxPasses), func(t *testing.T) {
			q := newQuiet(t, lonelyPods("default", "lonely", "10.233.64.4"))
			var evictions atomic.Int32
			q.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				n := evictions.Add(1)
				if n > 20 {
					return true, nil, errors.New("test: too many evictions")
				}
				name := a.(k8stesting.CreateActionImpl).GetObject().(*policyv1.Eviction).Name
				if err := q.kube.Tracker().Delete(podsGVR, "default", name); err != nil {
					return true, nil, err
				}
				p := podWithIP("default", fmt.Sprintf("lonely-r%d", n), "10.233.64.4", ctrl("ReplicaSet", "apps/v1", "lonely", "uid-rs-default-lonely"))
				p.UID = types.UID("uid-replacement-" + p.Name)
				if err := q.kube.Tracker().Add(p); err != nil {
					return true, nil, err
				}
				return true, &metav1.Status{Status: metav1.StatusSuccess}, nil
			})
			ctx := context.Background()
			plan, err := calico.Plan(ctx, q.cl, request())
			require.NoError(t, err)
			opts := fastOptions(t.TempDir())
			opts.DrainTimeout = time.Millisecond
			opts.MaxPasses = tc.maxPasses
			res, err := calico.Apply(ctx, q.cl, plan, opts)
			require.ErrorIs(t, err, calico.ErrLeftovers)
			assert.Equal(t, tc.evictions, evictions.Load(), "one eviction a pass")
			require.NotNil(t, res.Verify)
			assert.Equal(t, []string{fmt.Sprintf("default/lonely-r%d", tc.evictions)}, podKeys(res.Verify.PodsLeft))
		})
	}
}

// TestApplyEvictsNoPodAfterTheLockIsLost: the lock is checked, and the
// eviction journaled, before each eviction: a run that lost its lock evicts
// nothing and deletes nothing.
func TestApplyEvictsNoPodAfterTheLockIsLost(t *testing.T) {
	q := newQuiet(t, lonelyPods("default", "lonely", "10.233.64.4"))
	ctx := context.Background()
	plan := q.plan(t)
	lock := &kubetest.Lock{ChecksLeft: 0}
	opts := fastOptions(t.TempDir())
	opts.Lock = lock
	res, err := calico.Apply(ctx, q.cl, plan, opts)
	require.ErrorIs(t, err, kubetest.ErrLockLost)
	assert.ErrorContains(t, err, "not evicting pod default/lonely-1: the run no longer holds its lock")
	assert.Empty(t, q.evictions(), "no eviction after the lock is lost")
	assert.Empty(t, res.Evicted)
	assert.True(t, q.podExists(t, "default", "lonely-1"))
	_, err = q.pools.Get(ctx, oldPoolName)
	require.NoError(t, err, "the old pool stays")
	assert.False(t, lock.Held())

	// With the lock held, the eviction is journaled before it is made: the
	// cluster's copy of the journal names the pod.
	q = newQuiet(t, lonelyPods("default", "lonely", "10.233.64.4"))
	var journaled atomic.Bool
	q.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		obj, err := q.kube.Tracker().List(corev1.SchemeGroupVersion.WithResource("configmaps"), corev1.SchemeGroupVersion.WithKind("ConfigMap"), "cidrshift")
		if err == nil {
			for _, cm := range obj.(*corev1.ConfigMapList).Items {
				for _, v := range cm.Data {
					if strings.Contains(v, "default/lonely-1") {
						journaled.Store(true)
					}
				}
			}
		}
		return false, nil, nil
	})
	plan, err = calico.Plan(ctx, q.cl, request())
	require.NoError(t, err)
	opts = fastOptions(t.TempDir())
	opts.Lock = &kubetest.Lock{ChecksLeft: -1}
	opts.ClusterJournal = &calico.ClusterJournal{Namespace: "cidrshift"}
	res, err = calico.Apply(ctx, q.cl, plan, opts)
	require.NoError(t, err)
	assert.True(t, res.Done)
	assert.Equal(t, []string{"default/lonely-1"}, q.evictions())
	assert.True(t, journaled.Load(), "the eviction was in the journal before it was made")
}

// TestApplyRefusesAPlanMadeThroughTheOtherCalicoAPI: a plan read through
// crd.projectcalico.org/v1 is refused by a cluster reached through
// projectcalico.org/v3, naming the API, before anything is written.
func TestApplyRefusesAPlanMadeThroughTheOtherCalicoAPI(t *testing.T) {
	q := newQuiet(t, nil)
	ctx := context.Background()
	plan := q.plan(t)
	cs, _ := calicotest.NewV3(v3PoolObject(oldPoolName, oldPoolSpec()))
	v3 := q.cl
	v3.Pools = calico.NewV3Store(cs)
	_, err := calico.Apply(ctx, v3, plan, fastOptions(t.TempDir()))
	var se *calico.StalePlanError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "api", se.Field)
	assert.Equal(t, string(calico.APICRDV1), se.Planned)
	assert.Equal(t, string(calico.APIProjectCalicoV3), se.Found)
	for _, s := range []calico.PoolStore{v3.Pools, q.pools} {
		_, err = s.Get(ctx, newPoolName)
		assert.ErrorIs(t, err, calico.ErrPoolNotFound, "nothing created")
	}
}

// TestApplyStopAfterTheFirstPhase: StopAfter create-new-pool (the first
// phase) is accepted; the new pool is created and the old one left as it was.
func TestApplyStopAfterTheFirstPhase(t *testing.T) {
	q := newQuiet(t, lonelyPods("default", "lonely", "10.233.64.4"))
	ctx := context.Background()
	plan := q.plan(t)
	opts := fastOptions(t.TempDir())
	opts.StopAfter = calico.PhaseCreatePool
	res, err := calico.Apply(ctx, q.cl, plan, opts)
	require.NoError(t, err)
	assert.False(t, res.Done)
	assert.Equal(t, calico.PhaseCreatePool, res.Phase)
	assert.True(t, res.CreatedPool)
	old, err := q.pools.Get(ctx, oldPoolName)
	require.NoError(t, err)
	assert.False(t, old.AllocationStopped(), "the old pool is not disabled")
	assert.Empty(t, q.evictions())
}

// TestApplyRetriesAConflictingDisableAFewTimes: the old pool's update is
// retried on a conflict (someone else wrote it meanwhile) five times, then
// the conflict is reported; the pool is not written blindly.
func TestApplyRetriesAConflictingDisableAFewTimes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		conflicts int32
		ok        bool
	}{
		{"conflicts on every attempt", 1000, false},
		{"five conflicts then success", 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQuiet(t, nil)
			var updates atomic.Int32
			q.dyn.PrependReactor("update", "ippools", func(a k8stesting.Action) (bool, runtime.Object, error) {
				n := updates.Add(1)
				if n > 10 {
					return true, nil, errors.New("test: runaway retries")
				}
				if n <= tc.conflicts {
					return true, nil, apierrors.NewConflict(schema.GroupResource{Group: calico.CRDGroup, Resource: "ippools"}, oldPoolName, errors.New("the object has been modified"))
				}
				return false, nil, nil
			})
			ctx := context.Background()
			plan, err := calico.Plan(ctx, q.cl, request())
			require.NoError(t, err)
			opts := fastOptions(t.TempDir())
			opts.StopAfter = calico.PhaseDisableOldPool
			res, err := calico.Apply(ctx, q.cl, plan, opts)
			old, gerr := q.pools.Get(ctx, oldPoolName)
			require.NoError(t, gerr)
			assert.Equal(t, int32(6), updates.Load(), "one update and five retries")
			if tc.ok {
				require.NoError(t, err)
				assert.True(t, res.DisabledPool)
				assert.True(t, old.Spec.Disabled)
				return
			}
			require.Error(t, err)
			assert.True(t, apierrors.IsConflict(err), "%v", err)
			assert.False(t, res.DisabledPool)
			assert.False(t, old.Spec.Disabled)
		})
	}
}

// TestApplyResumedChecksTheNewPoolAgainstPoolsCreatedSince: a resumed run
// (the new pool created by the first) refuses to go on when a pool created
// since overlaps the new one, before it disables the old pool.
func TestApplyResumedChecksTheNewPoolAgainstPoolsCreatedSince(t *testing.T) {
	q := newQuiet(t, lonelyPods("default", "lonely", "10.233.64.4"))
	ctx := context.Background()
	plan := q.plan(t)
	dir := t.TempDir()
	opts := fastOptions(dir)
	opts.StopAfter = calico.PhaseCreatePool
	_, err := calico.Apply(ctx, q.cl, plan, opts)
	require.NoError(t, err)
	// Written through the v1 CRDs, which do not validate.
	_, err = q.dyn.Resource(calico.IPPoolsV1).Create(ctx, v1PoolObject("intruder", calico.PoolSpec{CIDR: "10.20.128.0/17"}, nil), metav1.CreateOptions{})
	require.NoError(t, err)

	_, err = calico.Apply(ctx, q.cl, plan, fastOptions(dir))
	require.ErrorIs(t, err, calico.ErrInvalidPool)
	assert.Contains(t, err.Error(), "intruder")
	old, err := q.pools.Get(ctx, oldPoolName)
	require.NoError(t, err)
	assert.False(t, old.AllocationStopped(), "the old pool is not disabled")
	assert.Empty(t, q.evictions())
}

// operatorInstallation lists the old pool in the Tigera operator's Installation.
func operatorInstallation() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "operator.tigera.io/v1", "kind": "Installation",
		"metadata": map[string]any{"name": "default"},
		"spec": map[string]any{"calicoNetwork": map[string]any{"ipPools": []any{
			map[string]any{"name": oldPoolName, "cidr": oldCIDR, "encapsulation": "IPIP", "natOutgoing": "Enabled"},
		}}},
	}}
}

// TestApplyWaitsForTheOperatorBeforeMovingOn: with WaitForOperator, Apply
// moves no pod before the operator disabled the old pool, and returns only
// once the operator removed it; the operator here acts on the third poll
// after each request.
func TestApplyWaitsForTheOperatorBeforeMovingOn(t *testing.T) {
	q := newQuiet(t, lonelyPods("default", "lonely", "10.233.64.4"), operatorInstallation())
	var mu sync.Mutex
	asked, polls := "", 0
	var opErr error
	q.dyn.PrependReactor("get", "ippools", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() != oldPoolName {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if asked == "" {
			return false, nil, nil
		}
		polls++
		if polls != 3 {
			return false, nil, nil
		}
		switch asked {
		case "disable":
			obj, err := q.dyn.Tracker().Get(calico.IPPoolsV1, "", oldPoolName)
			if err == nil {
				u := obj.(*unstructured.Unstructured).DeepCopy()
				err = unstructured.SetNestedField(u.Object, true, "spec", "disabled")
				if err == nil {
					err = q.dyn.Tracker().Update(calico.IPPoolsV1, u, "")
				}
			}
			opErr = errors.Join(opErr, err)
		case "remove":
			opErr = errors.Join(opErr, q.dyn.Tracker().Delete(calico.IPPoolsV1, "", oldPoolName))
		}
		return false, nil, nil
	})
	var stoppedAtMove []bool
	opts := fastOptions(t.TempDir())
	opts.WaitForOperator = true
	opts.OnEvent = func(ev calico.Event) {
		q.onEvent(ev)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case ev.Type == calico.EventWaitOperator && strings.HasPrefix(ev.Object, "Installation "):
			asked, polls = "disable", 0
			if strings.Contains(ev.Message, "remove") {
				asked = "remove"
			}
		case ev.Type == calico.EventWaitOperator:
			asked = ""
		case ev.Type == calico.EventPhase && ev.Message == string(calico.PhaseMovePods):
			obj, err := q.dyn.Tracker().Get(calico.IPPoolsV1, "", oldPoolName)
			disabled := false
			if err == nil {
				disabled, _, _ = unstructured.NestedBool(obj.(*unstructured.Unstructured).Object, "spec", "disabled")
			}
			stoppedAtMove = append(stoppedAtMove, disabled)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plan := q.plan(t)
	res, err := calico.Apply(ctx, q.cl, plan, opts)
	require.NoError(t, err)
	require.NoError(t, opErr)
	assert.True(t, res.Done)
	assert.True(t, res.OldPoolDeleted)
	assert.Nil(t, res.Waiting, "nothing is awaited any more")
	assert.Equal(t, []bool{true}, stoppedAtMove, "the pods move only once the operator disabled the old pool")
	_, err = q.pools.Get(ctx, oldPoolName)
	assert.ErrorIs(t, err, calico.ErrPoolNotFound, "Apply returns once the operator removed the old pool")
	assert.Len(t, q.eventsOf(calico.EventWaitOperator), 4, "two requests, two observed changes")
	assert.Equal(t, []string{"default/lonely-1"}, q.evictions())
}

// TestApplyWaitsForCalicoToReleaseLeftoverAllocations: an allocation left
// in the old pool's blocks without a live pod is waited for (up to
// DrainTimeout); once Calico releases it, the old pool is deleted.
func TestApplyWaitsForCalicoToReleaseLeftoverAllocations(t *testing.T) {
	block := oldBlock(map[string]any{"handle_id": "k8s-pod-network.gone-uid",
		"secondary": map[string]any{"namespace": "default", "node": "node-a", "pod": "gone"}})
	q := newQuiet(t, nil, block)
	ctx := context.Background()
	plan := q.plan(t)
	var releaseErr error
	opts := fastOptions(t.TempDir())
	opts.DrainTimeout = 30 * time.Second
	opts.OnEvent = func(ev calico.Event) {
		q.onEvent(ev)
		if ev.Type == calico.EventLeftoversWait && len(q.eventsOf(calico.EventLeftoversWait)) == 1 {
			// Calico's kube-controllers release the leaked address.
			releaseErr = q.dyn.Resource(calico.IPAMBlocksV1).Delete(ctx, block.GetName(), metav1.DeleteOptions{})
		}
	}
	res, err := calico.Apply(ctx, q.cl, plan, opts)
	require.NoError(t, releaseErr)
	require.NoError(t, err)
	assert.True(t, res.OldPoolDeleted)
	assert.Len(t, q.eventsOf(calico.EventLeftoversWait), 1)
	require.NotNil(t, res.Verify)
	assert.True(t, res.Verify.Clear(), res.Verify.Summary())
}

// TestApplyReportsABudgetlessRefusalAndBacksOff: an eviction refused with
// 429 by something other than a PodDisruptionBudget (API priority and
// fairness) is retried with a doubling backoff, capped, and each refusal
// reported without a budget.
func TestApplyReportsABudgetlessRefusalAndBacksOff(t *testing.T) {
	q := newQuiet(t, lonelyPods("default", "lonely", "10.233.64.4"))
	var refusals atomic.Int32
	q.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" || refusals.Add(1) > 4 {
			return false, nil, nil
		}
		return true, nil, apierrors.NewTooManyRequests("the server is busy", 0)
	})
	ctx := context.Background()
	plan := q.plan(t)
	opts := fastOptions(t.TempDir())
	opts.OnEvent = q.onEvent
	opts.EvictionBackoff = time.Millisecond
	opts.MaxEvictionBackoff = 5 * time.Millisecond
	res, err := calico.Apply(ctx, q.cl, plan, opts)
	require.NoError(t, err)
	assert.True(t, res.Done)
	var retries []string
	for _, ev := range q.eventsOf(calico.EventEvictBlocked) {
		assert.Nil(t, ev.PDB)
		assert.Contains(t, ev.Message, "eviction of default/lonely-1 refused (429: the server is busy)")
		retries = append(retries, ev.Message[strings.LastIndex(ev.Message, " ")+1:])
	}
	assert.Equal(t, []string{"1ms", "2ms", "4ms", "5ms"}, retries)
}

// fakeDeploymentStatus makes the Deployment's reads return the given status
// for its first reads after a restart, then a complete rollout.
func fakeDeploymentStatus(kube *fake.Clientset, name string, notDone int, st appsv1.DeploymentStatus) {
	var reads atomic.Int32
	kube.PrependReactor("get", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() != name {
			return false, nil, nil
		}
		obj, err := kube.Tracker().Get(a.GetResource(), a.GetNamespace(), name)
		if err != nil {
			return true, nil, err
		}
		d := obj.(*appsv1.Deployment).DeepCopy()
		d.Status.ObservedGeneration = d.Generation
		if n := reads.Add(1); notDone < 0 || int(n) <= notDone {
			st.ObservedGeneration = d.Generation
			d.Status = st
		}
		return true, d, nil
	})
}

// TestApplyWaitsForEachRolloutAndReportsItsProgress: Apply waits until a
// restarted workload's rollout is complete, reports each distinct state it
// waits in once, and fails with ErrRolloutTimeout (with the last state)
// when the rollout does not finish within RolloutTimeout.
func TestApplyWaitsForEachRolloutAndReportsItsProgress(t *testing.T) {
	t.Run("completes", func(t *testing.T) {
		q := newQuiet(t, rolledDeployment("default", "web", nil, "10.233.64.4", "10.233.64.5"))
		replacesOnRestart(q.kube, "web")
		fakeDeploymentStatus(q.kube, "web", 3, appsv1.DeploymentStatus{Replicas: 3, UpdatedReplicas: 1, AvailableReplicas: 1})
		ctx := context.Background()
		plan, err := calico.Plan(ctx, q.cl, request())
		require.NoError(t, err)
		opts := fastOptions(t.TempDir())
		opts.OnEvent = q.onEvent
		res, err := calico.Apply(ctx, q.cl, plan, opts)
		require.NoError(t, err)
		assert.True(t, res.Done)
		waits := q.eventsOf(calico.EventRolloutWait)
		require.Len(t, waits, 1, "one event per distinct state")
		assert.Equal(t, "waiting for Deployment default/web: 1 of 2 updated replicas", waits[0].Message)
		require.Len(t, q.eventsOf(calico.EventRolloutDone), 1)
		var order []calico.EventType
		for _, ev := range q.events {
			switch ev.Type {
			case calico.EventRestart, calico.EventRolloutWait, calico.EventRolloutDone, calico.EventEvict:
				order = append(order, ev.Type)
			}
		}
		assert.Equal(t, []calico.EventType{calico.EventRestart, calico.EventRolloutWait, calico.EventRolloutDone, calico.EventEvict}, order,
			"the pod left behind is evicted after the rollout finished")
	})
	t.Run("times out", func(t *testing.T) {
		q := newQuiet(t, rolledDeployment("default", "web", nil, "10.233.64.4", "10.233.64.5"))
		fakeDeploymentStatus(q.kube, "web", -1, appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 1, AvailableReplicas: 1})
		ctx := context.Background()
		plan, err := calico.Plan(ctx, q.cl, request())
		require.NoError(t, err)
		opts := fastOptions(t.TempDir())
		opts.RolloutTimeout = 20 * time.Millisecond
		_, err = calico.Apply(ctx, q.cl, plan, opts)
		require.ErrorIs(t, err, calico.ErrRolloutTimeout)
		assert.Contains(t, err.Error(), "Deployment default/web after 20ms: 1 of 2 updated replicas")
		_, err = q.pools.Get(ctx, oldPoolName)
		require.NoError(t, err, "the old pool stays")
	})
}

func TestDeploymentRolledOutFollowsKubectl(t *testing.T) {
	d := func(gen, observed int64, replicas *int32, st appsv1.DeploymentStatus, conds ...appsv1.DeploymentCondition) *appsv1.Deployment {
		st.ObservedGeneration = observed
		st.Conditions = conds
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Generation: gen},
			Spec: appsv1.DeploymentSpec{Replicas: replicas}, Status: st}
	}
	for _, tc := range []struct {
		name string
		d    *appsv1.Deployment
		done bool
		msg  string
	}{
		{"spec not observed", d(3, 2, int32p(2), appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}), false, "spec generation 3 not yet observed (at 2)"},
		{"complete", d(3, 3, int32p(2), appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}), true, ""},
		{"replicas unset means one", d(1, 1, nil, appsv1.DeploymentStatus{}), false, "0 of 1 updated replicas"},
		{"replicas unset, one updated", d(1, 1, nil, appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}), true, ""},
		{"updating", d(1, 1, int32p(3), appsv1.DeploymentStatus{Replicas: 4, UpdatedReplicas: 2, AvailableReplicas: 2}), false, "2 of 3 updated replicas"},
		{"old replicas left", d(1, 1, int32p(2), appsv1.DeploymentStatus{Replicas: 5, UpdatedReplicas: 2, AvailableReplicas: 2}), false, "3 old replicas pending termination"},
		{"not available", d(1, 1, int32p(2), appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 1}), false, "1 of 2 updated replicas available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, msg, err := calico.DeploymentRolledOut(tc.d)
			require.NoError(t, err)
			assert.Equal(t, tc.done, done)
			assert.Equal(t, tc.msg, msg)
		})
	}
	_, _, err := calico.DeploymentRolledOut(d(1, 1, int32p(2), appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 1},
		appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Reason: "ProgressDeadlineExceeded", Message: "took too long"}))
	require.ErrorIs(t, err, calico.ErrRolloutTimeout)
	assert.Contains(t, err.Error(), "took too long")
}

func TestStatefulSetRolledOutFollowsKubectl(t *testing.T) {
	s := func(gen, observed int64, replicas, partition *int32, rolling bool, st appsv1.StatefulSetStatus) *appsv1.StatefulSet {
		st.ObservedGeneration = observed
		out := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default", Generation: gen},
			Spec: appsv1.StatefulSetSpec{Replicas: replicas}, Status: st}
		if rolling {
			out.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
		}
		if partition != nil {
			out.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: partition}
		}
		return out
	}
	same := appsv1.StatefulSetStatus{ReadyReplicas: 3, UpdatedReplicas: 3, CurrentRevision: "r2", UpdateRevision: "r2"}
	for _, tc := range []struct {
		name string
		s    *appsv1.StatefulSet
		done bool
		msg  string
	}{
		{"never observed", s(0, 0, int32p(3), nil, true, same), false, "spec generation 0 not yet observed (at 0)"},
		{"spec not observed", s(2, 1, int32p(3), nil, true, same), false, "spec generation 2 not yet observed (at 1)"},
		{"complete", s(2, 2, int32p(3), nil, true, same), true, ""},
		{"replicas unset means one", s(1, 1, nil, nil, true, appsv1.StatefulSetStatus{}), false, "0 of 1 pods ready"},
		{"not ready", s(1, 1, int32p(3), nil, true, appsv1.StatefulSetStatus{ReadyReplicas: 2, CurrentRevision: "r2", UpdateRevision: "r2"}), false, "2 of 3 pods ready"},
		{"revision pending", s(1, 1, int32p(3), nil, true, appsv1.StatefulSetStatus{ReadyReplicas: 3, UpdatedReplicas: 1, CurrentRevision: "r1", UpdateRevision: "r2"}), false, "1 of 3 pods at revision r2"},
		{"partition 0 is no partition", s(1, 1, int32p(3), int32p(0), true, appsv1.StatefulSetStatus{ReadyReplicas: 3, UpdatedReplicas: 3, CurrentRevision: "r1", UpdateRevision: "r2"}), false, "3 of 3 pods at revision r2"},
		{"partition reached", s(1, 1, int32p(3), int32p(1), true, appsv1.StatefulSetStatus{ReadyReplicas: 3, UpdatedReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r2"}), true, ""},
		{"partition not reached", s(1, 1, int32p(3), int32p(1), true, appsv1.StatefulSetStatus{ReadyReplicas: 3, UpdatedReplicas: 1, CurrentRevision: "r1", UpdateRevision: "r2"}), false, "1 of 2 pods updated (partition 1)"},
		{"partition of an OnDelete set", s(1, 1, int32p(3), int32p(1), false, appsv1.StatefulSetStatus{ReadyReplicas: 3, UpdatedReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r2"}), false, "2 of 3 pods at revision r2"},
		{"rolling without partition", s(1, 1, int32p(3), nil, true, appsv1.StatefulSetStatus{ReadyReplicas: 3, UpdatedReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r2"}), false, "2 of 3 pods at revision r2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, msg := calico.StatefulSetRolledOut(tc.s)
			assert.Equal(t, tc.done, done)
			assert.Equal(t, tc.msg, msg)
		})
	}
	// A rolling set with a RollingUpdate block but no partition.
	ss := s(1, 1, int32p(3), nil, true, appsv1.StatefulSetStatus{ReadyReplicas: 3, UpdatedReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r2"})
	ss.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
	done, msg := calico.StatefulSetRolledOut(ss)
	assert.False(t, done)
	assert.Equal(t, "2 of 3 pods at revision r2", msg)
}

func TestDaemonSetRolledOutFollowsKubectl(t *testing.T) {
	ds := func(gen, observed int64, st appsv1.DaemonSetStatus) *appsv1.DaemonSet {
		st.ObservedGeneration = observed
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "kube-system", Generation: gen}, Status: st}
	}
	full := appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 2}
	for _, tc := range []struct {
		name string
		d    *appsv1.DaemonSet
		done bool
		msg  string
	}{
		{"spec not observed", ds(2, 1, full), false, "spec generation 2 not yet observed (at 1)"},
		{"complete", ds(2, 2, full), true, ""},
		{"scheduling", ds(1, 1, appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, UpdatedNumberScheduled: 1, NumberAvailable: 2}), false, "1 of 2 updated pods scheduled"},
		{"not available", ds(1, 1, appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 1}), false, "1 of 2 updated pods available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, msg := calico.DaemonSetRolledOut(tc.d)
			assert.Equal(t, tc.done, done)
			assert.Equal(t, tc.msg, msg)
		})
	}
}

// TestApplyCancelledBetweenMovesReportsTheCancellation: a run cancelled
// after one workload moved and before the next started returns the
// cancellation, starts nothing more and claims no pod is stuck.
func TestApplyCancelledBetweenMovesReportsTheCancellation(t *testing.T) {
	objs := append(lonelyPods("default", "a", "10.233.64.4"), lonelyPods("default", "b", "10.233.64.5")...)
	q := newQuiet(t, objs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	plan := q.plan(t)
	opts := fastOptions(t.TempDir())
	opts.Concurrency = 1
	opts.OnEvent = func(ev calico.Event) {
		q.onEvent(ev)
		if ev.Type == calico.EventPodGone && ev.Object == "Pod default/a-1" {
			cancel()
		}
	}
	res, err := calico.Apply(ctx, q.cl, plan, opts)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []string{"default/a-1"}, q.evictions())
	assert.True(t, q.podExists(t, "default", "b-1"))
	assert.Equal(t, calico.PhaseMovePods, res.Phase)
}

// ssars returns the access reviews the fake was asked, as "verb
// group/resource/subresource namespace".
func ssars(kube *fake.Clientset) []string {
	var out []string
	for _, a := range kube.Actions() {
		c, ok := a.(k8stesting.CreateAction)
		if !ok || a.GetResource().Resource != "selfsubjectaccessreviews" {
			continue
		}
		ra := c.GetObject().(*authorizationv1.SelfSubjectAccessReview).Spec.ResourceAttributes
		out = append(out, fmt.Sprintf("%s %s/%s/%s %s", ra.Verb, ra.Group, ra.Resource, ra.Subresource, ra.Namespace))
	}
	return out
}

// TestApplyAsksForExactlyThePermissionsItNeeds: the RBAC preflight checks
// every permission the run will use, and only those: the delete only when
// the old pool goes, IPAM reads only with a block source, the Installation
// only with a dynamic client, patch only for workloads that are rolled, and
// the cluster journal's ConfigMaps only for a real run that keeps one.
func TestApplyAsksForExactlyThePermissionsItNeeds(t *testing.T) {
	base := []string{
		"get crd.projectcalico.org/ippools/ ", "list crd.projectcalico.org/ippools/ ", "create crd.projectcalico.org/ippools/ ",
		"update crd.projectcalico.org/ippools/ ", "list /pods/ ", "get /pods/ ",
	}
	perNS := []string{"get apps/replicasets/ default", "create /pods/eviction default", "list policy/poddisruptionbudgets/ default"}
	del := "delete crd.projectcalico.org/ippools/ "
	ipam := []string{"list crd.projectcalico.org/ipamblocks/ ", "list crd.projectcalico.org/blockaffinities/ "}
	inst := "get operator.tigera.io/installations/ "
	roll := []string{"get apps/deployments/ default", "patch apps/deployments/ default"}
	var cm []string
	for _, c := range journal.ClusterChecks("cidrshift") {
		cm = append(cm, fmt.Sprintf("%s %s/%s/%s %s", c.Verb, c.Group, c.Resource, c.Subresource, c.Namespace))
	}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		mutate func(*calico.Cluster, *calico.ApplyOptions)
		want   []string
	}{
		{"everything", func(*calico.Cluster, *calico.ApplyOptions) {}, cat(base, []string{del}, ipam, []string{inst}, perNS, roll)},
		{"keep the old pool", func(_ *calico.Cluster, o *calico.ApplyOptions) { o.KeepOldPool = true }, cat(base, ipam, []string{inst}, perNS, roll)},
		{"no block source", func(c *calico.Cluster, _ *calico.ApplyOptions) { c.Blocks = nil }, cat(base, []string{del}, []string{inst}, perNS, roll)},
		{"no dynamic client", func(c *calico.Cluster, _ *calico.ApplyOptions) { c.Dynamic = nil }, cat(base, []string{del}, ipam, perNS, roll)},
		{"cluster journal", func(_ *calico.Cluster, o *calico.ApplyOptions) {
			o.Lock = &kubetest.Lock{ChecksLeft: -1}
			o.ClusterJournal = &calico.ClusterJournal{Namespace: "cidrshift"}
		}, cat(base, []string{del}, ipam, []string{inst}, perNS, roll, cm)},
		{"cluster journal, server dry run", func(_ *calico.Cluster, o *calico.ApplyOptions) {
			o.DryRun = calico.DryRunServer
			o.JournalDir = ""
			o.ClusterJournal = &calico.ClusterJournal{Namespace: "cidrshift"}
		}, cat(base, []string{del}, ipam, []string{inst}, perNS, roll)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := append(rolledDeployment("default", "web", nil, "10.233.64.4"), lonelyPods("default", "lonely", "10.233.64.5")...)
			q := newQuiet(t, objs)
			ctx := context.Background()
			plan, err := calico.Plan(ctx, q.cl, request())
			require.NoError(t, err)
			cl := q.cl
			opts := fastOptions(t.TempDir())
			opts.StopAfter = calico.PhaseCreatePool
			tc.mutate(&cl, &opts)
			q.kube.ClearActions()
			_, err = calico.Apply(ctx, cl, plan, opts)
			require.NoError(t, err)
			assert.Equal(t, tc.want, ssars(q.kube))
		})
	}
}

// TestApplyReportsAClusterJournalItCouldNotFinish: a swap that is done but
// whose cluster journal could not be marked finished succeeds, and says the
// ConfigMaps stay; a journal that was finished says nothing of the kind.
func TestApplyReportsAClusterJournalItCouldNotFinish(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			q := newQuiet(t, nil)
			if fail {
				q.kube.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
					cm := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
					if cm.Labels[journal.LabelState] == journal.StateFinished {
						return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, cm.Name, errors.New("test: no update"))
					}
					return false, nil, nil
				})
			}
			ctx := context.Background()
			plan, err := calico.Plan(ctx, q.cl, request())
			require.NoError(t, err)
			opts := fastOptions(t.TempDir())
			opts.OnEvent = q.onEvent
			opts.Lock = &kubetest.Lock{ChecksLeft: -1}
			opts.ClusterJournal = &calico.ClusterJournal{Namespace: "cidrshift"}
			res, err := calico.Apply(ctx, q.cl, plan, opts)
			require.NoError(t, err)
			assert.True(t, res.Done)
			var warned []string
			for _, ev := range q.eventsOf(calico.EventSkip) {
				if strings.Contains(ev.Message, "finishing the cluster journal failed") {
					warned = append(warned, ev.Message)
				}
			}
			if fail {
				require.Len(t, warned, 1)
				assert.Contains(t, warned[0], "its ConfigMaps stay until the next run")
			} else {
				assert.Empty(t, warned)
			}
		})
	}
}

// TestVerifyReportsAnOldPoolRecreatedUnderItsName: an old pool deleted and
// created again under the same name (another UID) is not the planned pool:
// Verify says so.
func TestVerifyReportsAnOldPoolRecreatedUnderItsName(t *testing.T) {
	q := newQuiet(t, nil)
	ctx := context.Background()
	plan := q.plan(t)
	require.NoError(t, q.pools.Delete(ctx, oldPoolName, calico.DeleteOptions{}))
	spec := oldPoolSpec()
	spec.Disabled = true
	_, err := q.pools.Create(ctx, calico.IPPool{Name: oldPoolName, Spec: spec}, calico.WriteOptions{})
	require.NoError(t, err)
	v, err := calico.Verify(ctx, q.cl, plan.Target())
	require.NoError(t, err)
	assert.False(t, v.Clear())
	assert.Contains(t, v.Summary(), fmt.Sprintf("IPPool %q has UID", oldPoolName))
	assert.Contains(t, v.Summary(), "it was recreated")

	// Without a UID in the target, the pool found is the one checked.
	v, err = calico.Verify(ctx, q.cl, calico.VerifyTarget{OldPool: oldPoolName})
	require.NoError(t, err)
	assert.True(t, v.Clear(), v.Summary())
}

// TestVerifyChecksTheNewPoolOnlyWhenNamed: a named new pool must exist and
// give addresses; without one, only the old pool is checked.
func TestVerifyChecksTheNewPoolOnlyWhenNamed(t *testing.T) {
	q := newQuiet(t, nil)
	ctx := context.Background()
	q.disableOldPool(t)
	_, err := q.pools.Create(ctx, calico.IPPool{Name: "stopped", Spec: calico.PoolSpec{CIDR: "10.30.0.0/16", NodeSelector: calico.DisabledNodeSelector}}, calico.WriteOptions{})
	require.NoError(t, err)

	v, err := calico.Verify(ctx, q.cl, calico.VerifyTarget{OldPool: oldPoolName})
	require.NoError(t, err)
	assert.True(t, v.Clear(), v.Summary())
	assert.False(t, v.NewPoolExists)

	v, err = calico.Verify(ctx, q.cl, calico.VerifyTarget{OldPool: oldPoolName, NewPool: "missing"})
	require.NoError(t, err)
	assert.Equal(t, []string{`new IPPool "missing" does not exist`}, v.Problems)

	v, err = calico.Verify(ctx, q.cl, calico.VerifyTarget{OldPool: oldPoolName, NewPool: "stopped"})
	require.NoError(t, err)
	assert.True(t, v.NewPoolExists)
	assert.False(t, v.NewPoolEnabled)
	assert.Equal(t, []string{`new IPPool "stopped" gives no addresses (disabled or nodeSelector "!all()")`}, v.Problems)
}

// TestVerifyNamesTheFirstFivePodsLeft: the problem names up to five pods
// left on the old pool and counts the others.
func TestVerifyNamesTheFirstFivePodsLeft(t *testing.T) {
	for _, n := range []int{5, 6} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var ips []string
			for i := range n {
				ips = append(ips, fmt.Sprintf("10.233.64.%d", 10+i))
			}
			q := newQuiet(t, lonelyPods("default", "p", ips...))
			v, err := calico.Verify(context.Background(), q.cl, calico.VerifyTarget{OldPool: oldPoolName})
			require.NoError(t, err)
			assert.Len(t, v.PodsLeft, n)
			want := fmt.Sprintf("%d pod(s) still have addresses in 10.233.64.0/18: default/p-1, default/p-2, default/p-3, default/p-4, default/p-5", n)
			if n == 6 {
				want += " and 1 more"
			}
			assert.Contains(t, v.Problems, want)
		})
	}
}

// emptyBlock is an IPAMBlock of the old pool that holds no address.
func emptyBlock(cidr string) *unstructured.Unstructured {
	pfx := netip.MustParsePrefix(cidr)
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calico.IPAMBlocksV1.GroupVersion().String(), "kind": "IPAMBlock",
		"metadata": map[string]any{"name": calicotest.BlockName(pfx)},
		"spec": map[string]any{"cidr": cidr, "affinity": "host:node-b", "allocations": make([]any, 256),
			"attributes": []any{}, "strictAffinity": false, "sequenceNumber": int64(0)},
	}}
}

// TestVerifyDescribesWhatTheBlocksStillHold: the problem counts the blocks
// that hold an address (not the empty ones), says which allocations belong
// to pods that no longer exist, and gives the advice for tunnel addresses
// only when there are some.
func TestVerifyDescribesWhatTheBlocksStillHold(t *testing.T) {
	leaked := map[string]any{"handle_id": "k8s-pod-network.gone-uid",
		"secondary": map[string]any{"namespace": "default", "node": "node-a", "pod": "gone"}}
	tunnel := map[string]any{"handle_id": "ipip-tunnel-addr-node-a",
		"secondary": map[string]any{"node": "node-a", "type": "ipipTunnelAddress"}}
	live := map[string]any{"handle_id": "k8s-pod-network.live-uid",
		"secondary": map[string]any{"namespace": "default", "node": "node-a", "pod": "lonely-1"}}
	for _, tc := range []struct {
		name  string
		attrs []map[string]any
		want  string
	}{
		{"leaked", []map[string]any{leaked},
			"1 address(es) still allocated in 1 IPAM block(s) in 10.233.64.0/18 (1 pod, 0 tunnel, 0 other; 1 of them for pods that no longer exist, which Calico's kube-controllers release after a grace period)"},
		{"tunnel", []map[string]any{tunnel},
			"1 address(es) still allocated in 1 IPAM block(s) in 10.233.64.0/18 (0 pod, 1 tunnel, 0 other; calico-node moves tunnel addresses to an enabled pool (restart calico-node if they stay))"},
		{"live pod", []map[string]any{live},
			"1 address(es) still allocated in 1 IPAM block(s) in 10.233.64.0/18 (1 pod, 0 tunnel, 0 other)"},
		{"all three", []map[string]any{leaked, tunnel, live},
			"3 address(es) still allocated in 1 IPAM block(s) in 10.233.64.0/18 (2 pod, 1 tunnel, 0 other; 1 of them for pods that no longer exist, which Calico's kube-controllers release after a grace period; calico-node moves tunnel addresses to an enabled pool (restart calico-node if they stay))"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Two empty blocks, so that counting the empty ones instead
			// of the others gives 2, not the 1 expected.
			q := newQuiet(t, lonelyPods("default", "lonely", "10.20.0.4"), oldBlock(tc.attrs...), emptyBlock("10.233.65.0/24"), emptyBlock("10.233.66.0/24"))
			v, err := calico.Verify(context.Background(), q.cl, calico.VerifyTarget{OldPool: oldPoolName})
			require.NoError(t, err)
			assert.Len(t, v.Blocks.Blocks, 3)
			assert.Contains(t, v.Problems, tc.want)
		})
	}
}

// TestPoolFromUnstructuredIntegerRange: integers are taken within the open
// range (-2^31, 2^31), as int64 or float64 (what JSON decoders produce).
func TestPoolFromUnstructuredIntegerRange(t *testing.T) {
	const limit = int64(1) << 31
	for _, tc := range []struct {
		v    any
		want int64 // 0: refused
	}{
		{limit - 1, limit - 1}, {limit, 0}, {-limit + 1, -limit + 1}, {-limit, 0},
		{float64(limit - 1), limit - 1}, {float64(limit), 0}, {float64(-limit + 1), -limit + 1}, {float64(-limit), 0},
		{float64(26.5), 0},
		{int(limit - 1), limit - 1}, {int(limit), 0}, {int(-limit + 1), -limit + 1}, {int(-limit), 0},
		{int32(26), 26},
	} {
		t.Run(fmt.Sprintf("%T %v", tc.v, tc.v), func(t *testing.T) {
			p, err := calico.PoolFromUnstructured(map[string]any{"metadata": map[string]any{"name": "p"}, "spec": map[string]any{"cidr": newCIDR, "blockSize": tc.v}})
			if tc.want == 0 {
				var fe *calico.FieldError
				require.ErrorAs(t, err, &fe)
				assert.Equal(t, "spec.blockSize", fe.Field)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, int64(p.Spec.BlockSize))
		})
	}
}

// TestApplyOptionsDefaults: zero and negative values get the defaults
// ApplyOptions documents; values set are kept. A zero left in place would
// hang the moves (Concurrency), refuse every write after the first
// (WritesPerSecond), poll without pause (PollInterval, EvictionBackoff),
// expire every wait at once (RolloutTimeout, PodGoneTimeout), never wait
// for leftovers to drain (DrainTimeout) or move nothing (MaxPasses).
func TestApplyOptionsDefaults(t *testing.T) {
	defaults := calico.ApplyOptions{
		Concurrency: 1, WritesPerSecond: 5, PollInterval: 2 * time.Second, RolloutTimeout: 10 * time.Minute,
		PodGoneTimeout: 5 * time.Minute, EvictionBackoff: time.Second, MaxEvictionBackoff: 30 * time.Second,
		DrainTimeout: 2 * time.Minute, MaxPasses: 3,
	}
	assert.Equal(t, defaults, calico.ApplyOptions{}.WithDefaults())
	assert.Equal(t, defaults, calico.ApplyOptions{
		Concurrency: -1, WritesPerSecond: -1, PollInterval: -1, RolloutTimeout: -1, PodGoneTimeout: -1,
		EvictionBackoff: -1, MaxEvictionBackoff: -1, DrainTimeout: -1, MaxPasses: -1,
	}.WithDefaults())
	set := calico.ApplyOptions{
		Concurrency: 4, WritesPerSecond: 0.5, PollInterval: time.Millisecond, RolloutTimeout: time.Millisecond,
		PodGoneTimeout: time.Millisecond, EvictionBackoff: time.Millisecond, MaxEvictionBackoff: time.Millisecond,
		DrainTimeout: time.Millisecond, MaxPasses: 1,
	}
	assert.Equal(t, set, set.WithDefaults(), "values set are kept, a maximum backoff equal to the first too")
	// A maximum below the first backoff is raised to 30s, or to the first
	// backoff when that is longer.
	o := calico.ApplyOptions{EvictionBackoff: time.Minute, MaxEvictionBackoff: time.Second}.WithDefaults()
	assert.Equal(t, time.Minute, o.MaxEvictionBackoff)
	o = calico.ApplyOptions{EvictionBackoff: 2 * time.Second, MaxEvictionBackoff: time.Second}.WithDefaults()
	assert.Equal(t, 30*time.Second, o.MaxEvictionBackoff)
}

// TestApplyFindsASwapFinishedByAnotherRun: with another journal (another
// machine), a swap whose old pool is gone and whose new pool exists with the
// planned CIDR is found done without a write; a dry run, or a new pool of
// another CIDR, makes the plan stale instead.
func TestApplyFindsASwapFinishedByAnotherRun(t *testing.T) {
	q := newQuiet(t, lonelyPods("default", "lonely", "10.233.64.4"))
	ctx := context.Background()
	plan := q.plan(t)
	res, err := calico.Apply(ctx, q.cl, plan, fastOptions(t.TempDir()))
	require.NoError(t, err)
	require.True(t, res.Done)

	q.dyn.ClearActions()
	q.kube.ClearActions()
	res, err = calico.Apply(ctx, q.cl, plan, fastOptions(t.TempDir()))
	require.NoError(t, err)
	assert.True(t, res.Done)
	assert.True(t, res.OldPoolDeleted)
	assert.False(t, res.Resumed)
	assert.Equal(t, calico.PhaseDone, res.Phase)
	for _, a := range q.dyn.Actions() {
		assert.Contains(t, []string{"get", "list"}, a.GetVerb(), "%s %s", a.GetVerb(), a.GetResource().Resource)
	}
	assert.Empty(t, q.evictions())

	dry := fastOptions("")
	dry.DryRun = calico.DryRunClient
	_, err = calico.Apply(ctx, q.cl, plan, dry)
	var se *calico.StalePlanError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "existence", se.Field)

	require.NoError(t, q.pools.Delete(ctx, newPoolName, calico.DeleteOptions{}))
	_, err = q.pools.Create(ctx, calico.IPPool{Name: newPoolName, Spec: calico.PoolSpec{CIDR: "10.21.0.0/16"}}, calico.WriteOptions{})
	require.NoError(t, err)
	_, err = calico.Apply(ctx, q.cl, plan, fastOptions(t.TempDir()))
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "existence", se.Field)
}

// TestVerifySummarySaysWhatWasChecked: a clear result says how many empty
// blocks were seen, or that the blocks were not checked and why, so a
// clear verdict without the IPAM blocks is never read as a full one.
func TestVerifySummarySaysWhatWasChecked(t *testing.T) {
	q := newQuiet(t, nil, emptyBlock("10.233.65.0/24"))
	ctx := context.Background()
	q.disableOldPool(t)

	v, err := calico.Verify(ctx, q.cl, calico.VerifyTarget{OldPool: oldPoolName})
	require.NoError(t, err)
	assert.Equal(t, "nothing left in 10.233.64.0/18: no pod address, 1 block(s) with no allocation", v.Summary())

	q.cl.Blocks = nil
	v, err = calico.Verify(ctx, q.cl, calico.VerifyTarget{OldPool: oldPoolName})
	require.NoError(t, err)
	assert.Equal(t, "nothing left in 10.233.64.0/18: no pod address (IPAM blocks not checked: no IPAM block source configured)", v.Summary())
}
