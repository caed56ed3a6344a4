package calicotest_test

import (
	"context"
	"net/netip"
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
)

func deployment(name string, replicas int32) *appsv1.Deployment {
	l := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}}
}

func TestRulesObjectBookkeeping(t *testing.T) {
	ctx := context.Background()
	kube, _ := calicotest.NewKube()
	d, err := kube.AppsV1().Deployments("default").Create(ctx, deployment("web", 1), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.NotEmpty(t, d.UID)
	assert.NotEmpty(t, d.ResourceVersion)
	assert.Equal(t, int64(1), d.Generation)

	// Spec change: generation moves. Status update: it does not, and cannot change the spec.
	d.Spec.Replicas = ptr(int32(3))
	d2, err := kube.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(2), d2.Generation)
	assert.Equal(t, d.UID, d2.UID)
	d2.Status.ObservedGeneration = 2
	d2.Spec.Replicas = ptr(int32(9))
	d3, err := kube.AppsV1().Deployments("default").UpdateStatus(ctx, d2, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(2), d3.Generation)
	assert.Equal(t, int32(3), *d3.Spec.Replicas)
	assert.Equal(t, int64(2), d3.Status.ObservedGeneration)

	// Stale resourceVersion: conflict.
	_, err = kube.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsConflict(err), "%v", err)

	// Patch of the template bumps generation too.
	p, err := kube.AppsV1().Deployments("default").Patch(ctx, "web", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"now"}}}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(3), p.Generation)
	assert.Equal(t, "now", p.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"])
	assert.NotEqual(t, d3.ResourceVersion, p.ResourceVersion)

	// Dry-run writes store nothing.
	dry := deployment("dry", 1)
	_, err = kube.AppsV1().Deployments("default").Create(ctx, dry, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err)
	_, err = kube.AppsV1().Deployments("default").Get(ctx, "dry", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err))
	require.NoError(t, kube.AppsV1().Deployments("default").Delete(ctx, "web", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}))
	_, err = kube.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)

	// Creating with a resourceVersion is refused.
	withRV := deployment("rv", 1)
	withRV.ResourceVersion = "5"
	_, err = kube.AppsV1().Deployments("default").Create(ctx, withRV, metav1.CreateOptions{})
	assert.True(t, apierrors.IsBadRequest(err), "%v", err)
}

// Like the API server, a create names an object from its generateName and
// refuses one with neither name, and create and update take the namespace
// of the request when the object has none. Stamp gives objects added to a
// tracker directly what a create gives them, and keeps what they have.
func TestRulesNamesNamespacesAndStamps(t *testing.T) {
	ctx := context.Background()
	kube, r := calicotest.NewKube()
	pods := kube.CoreV1().Pods("default")
	var names []string
	for range 2 {
		p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Regexp(t, `^web-[0-9a-z]+$`, p.Name)
		names = append(names, p.Name)
	}
	assert.NotEqual(t, names[0], names[1])
	_, err := pods.Create(ctx, &corev1.Pod{}, metav1.CreateOptions{})
	assert.True(t, apierrors.IsInvalid(err), "neither name nor generateName: %v", err)

	p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "default", p.Namespace)
	p.Namespace = ""
	p.Labels = map[string]string{"updated": "yes"}
	p, err = pods.Update(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "default", p.Namespace)
	got, err := pods.Get(ctx, "bare", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "yes", got.Labels["updated"])

	fresh := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fresh", Namespace: "default"}}
	kept := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "default", UID: "uid-kept", Generation: 7}}
	r.Stamp(fresh, kept)
	assert.NotEmpty(t, fresh.UID)
	assert.NotEmpty(t, fresh.ResourceVersion)
	assert.Equal(t, int64(1), fresh.Generation)
	assert.False(t, fresh.CreationTimestamp.IsZero())
	assert.Equal(t, types.UID("uid-kept"), kept.UID)
	assert.Equal(t, int64(7), kept.Generation)
	assert.NotEqual(t, fresh.ResourceVersion, kept.ResourceVersion)
}

func ptr[T any](v T) *T { return &v }

func readyPod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
}

func TestEvictionRespectsPDB(t *testing.T) {
	ctx := context.Background()
	l := map[string]string{"app": "web"}
	two := intstr.FromInt32(2)
	budget := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, Selector: &metav1.LabelSelector{MatchLabels: l}}}
	kube, _ := calicotest.NewKube(readyPod("a", l), readyPod("b", l), readyPod("c", l), budget, readyPod("free", nil))
	w := &calicotest.Workloads{Kube: kube}
	require.NoError(t, w.Sync(ctx))
	b, err := kube.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(1), b.Status.DisruptionsAllowed)
	assert.Equal(t, int32(3), b.Status.CurrentHealthy)

	evict := func(name string, opts *metav1.DeleteOptions) error {
		return kube.PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, DeleteOptions: opts})
	}
	// Dry run: allowed, nothing changes.
	require.NoError(t, evict("a", &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}))
	_, err = kube.CoreV1().Pods("default").Get(ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	// UID precondition.
	wrong := types.UID("nope")
	err = evict("a", &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrong}})
	assert.True(t, apierrors.IsConflict(err), "%v", err)
	// One disruption allowed: the first goes, the second is refused with 429 until the status catches up.
	require.NoError(t, evict("a", nil))
	err = evict("b", nil)
	require.True(t, apierrors.IsTooManyRequests(err), "%v", err)
	assert.Contains(t, err.Error(), "would violate the pod's disruption budget")
	var se *apierrors.StatusError
	require.ErrorAs(t, err, &se)
	assert.Contains(t, se.ErrStatus.Details.Causes[0].Message, "needs 2 healthy pods and has 3 currently")
	require.NoError(t, w.Sync(ctx))
	err = evict("b", nil)
	assert.True(t, apierrors.IsTooManyRequests(err), "2 healthy, 2 needed: %v", err)
	// A pod no budget selects goes at once; a missing pod is NotFound.
	require.NoError(t, evict("free", nil))
	assert.True(t, apierrors.IsNotFound(evict("free", nil)))

	// Two budgets for one pod: the API server refuses.
	other := budget.DeepCopy()
	other.Name, other.UID, other.ResourceVersion = "web2", "", ""
	_, err = kube.PolicyV1().PodDisruptionBudgets("default").Create(ctx, other, metav1.CreateOptions{})
	require.NoError(t, err)
	err = evict("c", nil)
	assert.True(t, apierrors.IsInternalError(err), "%v", err)
}

// An eviction the budget allows deletes the pod and records the disruption
// in the budget's status. Under unhealthyPodEvictionPolicy AlwaysAllow a pod
// that is not ready goes although the budget allows no more disruptions; a
// ready pod does not.
func TestEvictionConsumesTheBudgetAndHonoursAlwaysAllow(t *testing.T) {
	ctx := context.Background()
	l := map[string]string{"app": "web"}
	two := intstr.FromInt32(2)
	always := policyv1.AlwaysAllow
	budget := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, Selector: &metav1.LabelSelector{MatchLabels: l}, UnhealthyPodEvictionPolicy: &always}}
	unready := readyPod("unready", l)
	unready.Status.Conditions[0].Status = corev1.ConditionFalse
	kube, _ := calicotest.NewKube(readyPod("a", l), readyPod("b", l), readyPod("c", l), unready, budget)
	require.NoError(t, (&calicotest.Workloads{Kube: kube}).Sync(ctx))
	b, err := kube.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, policyv1.PodDisruptionBudgetStatus{ObservedGeneration: b.Generation, ExpectedPods: 4, CurrentHealthy: 3, DesiredHealthy: 2, DisruptionsAllowed: 1}, b.Status,
		"the pod that is not ready is expected, not healthy")
	evict := func(name string) error {
		return kube.PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}})
	}
	gone := func(name string) bool {
		_, err := kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}

	require.NoError(t, evict("a"))
	assert.True(t, gone("a"), "evicted")
	b, err = kube.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Zero(t, b.Status.DisruptionsAllowed, "the eviction consumed the one allowed disruption")
	assert.Contains(t, b.Status.DisruptedPods, "a")

	err = evict("b")
	assert.True(t, apierrors.IsTooManyRequests(err), "a ready pod waits for the budget: %v", err)
	assert.False(t, gone("b"))
	require.NoError(t, evict("unready"), "AlwaysAllow: a pod that is not ready goes")
	assert.True(t, gone("unready"))
}

// Workloads places pods on the nodes in Nodes, else on the Node objects,
// else on "node-1": a DaemonSet has one pod on each.
func TestWorkloadsPlacePodsOnTheNodes(t *testing.T) {
	ctx := context.Background()
	l := map[string]string{"app": "agent"}
	ds := func() *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: l},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}}
	}
	node := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	for _, tc := range []struct {
		what  string
		nodes []string
		objs  []runtime.Object
		want  []string
	}{
		{"Node objects", nil, []runtime.Object{node("n2"), node("n1")}, []string{"n1", "n2"}},
		{"no Node objects", nil, nil, []string{"node-1"}},
		{"Nodes given", []string{"x"}, []runtime.Object{node("n1")}, []string{"x"}},
	} {
		kube, _ := calicotest.NewKube(append(tc.objs, ds())...)
		w := &calicotest.Workloads{Kube: kube, Nodes: tc.nodes}
		require.NoError(t, w.Sync(ctx), tc.what)
		pods, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		var on []string
		for _, p := range pods.Items {
			on = append(on, p.Spec.NodeName)
		}
		assert.ElementsMatch(t, tc.want, on, tc.what)
	}
}

// A Deployment's rollout step by step: the new ReplicaSet (pods named like
// the real controller's, with the template's labels and pod-template-hash)
// surges first, the old one is scaled to zero only once every new pod is
// ready, the status counts both in between, and a pass that changes nothing
// writes nothing. A scale change reaches the ReplicaSet.
func TestWorkloadsDeploymentRolloutStepByStep(t *testing.T) {
	ctx := context.Background()
	kube, _ := calicotest.NewKube(deployment("web", 2), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	dyn, _ := calicotest.NewDynamic(pool("p", "10.233.64.0/18", false))
	ipam := &calicotest.IPAM{Kube: kube, Pools: calico.NewCRDStore(dyn), MarkReady: true}
	w := &calicotest.Workloads{Kube: kube}
	deps := kube.AppsV1().Deployments("default")
	status := func() appsv1.DeploymentStatus {
		t.Helper()
		d, err := deps.Get(ctx, "web", metav1.GetOptions{})
		require.NoError(t, err)
		return d.Status
	}
	pass := func(withIPAM bool) {
		t.Helper()
		require.NoError(t, w.Sync(ctx))
		if withIPAM {
			require.NoError(t, ipam.Sync(ctx))
		}
	}
	rsOf := func(hash string) *appsv1.ReplicaSet {
		t.Helper()
		l, err := kube.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for i := range l.Items {
			if l.Items[i].Labels["pod-template-hash"] == hash {
				return &l.Items[i]
			}
		}
		require.Failf(t, "no ReplicaSet", "pod-template-hash %s", hash)
		return nil
	}

	pass(true)
	st := status()
	assert.Equal(t, int64(1), st.ObservedGeneration, "observed in the pass that created the ReplicaSet")
	assert.Equal(t, int32(2), st.UnavailableReplicas)
	pods, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, pods.Items, 2)
	d, err := deps.Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	oldHash := calicotest.TemplateHash(d.Spec.Template)
	for _, p := range pods.Items {
		assert.Regexp(t, `^web-`+oldHash+`-[0-9a-z]{5}$`, p.Name)
		assert.Equal(t, map[string]string{"app": "web", "pod-template-hash": oldHash}, p.Labels)
	}
	pass(true)
	st = status()
	assert.Equal(t, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}, st)
	before, err := deps.Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	pass(true)
	after, err := deps.Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "a pass that changes nothing writes nothing")

	_, err = deps.Patch(ctx, "web", types.StrategicMergePatchType, []byte(`{"spec":{"template":{"metadata":{"annotations":{"x":"1"}}}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	pass(false) // the new ReplicaSet and its pods, not ready yet
	pass(false)
	assert.Equal(t, int32(2), replicasOf(rsOf(oldHash)), "old pods stay while the new ones are not ready")
	st = status()
	assert.Equal(t, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 4, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}, st)
	require.NoError(t, ipam.Sync(ctx))
	pass(false) // every new pod ready: the old ReplicaSet goes to zero
	assert.Equal(t, int32(0), replicasOf(rsOf(oldHash)))
	assert.Equal(t, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 4, UpdatedReplicas: 2, ReadyReplicas: 4, AvailableReplicas: 4}, status(),
		"counted before the old ReplicaSet deleted its pods")
	pass(false)
	assert.Equal(t, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}, status())

	_, err = deps.Patch(ctx, "web", types.StrategicMergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	pass(false)
	d, err = deps.Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(1), replicasOf(rsOf(calicotest.TemplateHash(d.Spec.Template))))
	pods, err = kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, pods.Items, 1)
}

func replicasOf(rs *appsv1.ReplicaSet) int32 {
	if rs.Spec.Replicas == nil {
		return 1
	}
	return *rs.Spec.Replicas
}

// A ReplicaSet with too many pods deletes the surplus in one pass, pods
// that are not ready first, then by name, and reports what is left.
func TestWorkloadsReplicaSetDeletesNotReadyPodsFirst(t *testing.T) {
	ctx := context.Background()
	one := int32(1)
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "default", UID: "uid-r"},
		Spec: appsv1.ReplicaSetSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "r"}}}}
	objs := []runtime.Object{rs}
	for _, n := range []string{"r-d", "r-c", "r-b", "r-a"} {
		p := readyPod(n, map[string]string{"app": "r"})
		if n == "r-b" || n == "r-d" {
			p.Status.Conditions[0].Status = corev1.ConditionFalse
		}
		t := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "r", UID: "uid-r", Controller: &t}}
		objs = append(objs, p)
	}
	kube, _ := calicotest.NewKube(objs...)
	require.NoError(t, (&calicotest.Workloads{Kube: kube}).Sync(ctx))
	pods, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	assert.Equal(t, "r-c", pods.Items[0].Name, "the ready pod last by name stays")
	got, err := kube.AppsV1().ReplicaSets("default").Get(ctx, "r", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, appsv1.ReplicaSetStatus{Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, ObservedGeneration: got.Generation}, got.Status)
}

// Every budget's status is recomputed in one pass, like the disruption
// controller's: a pod evicted but still present stays disrupted and is not
// healthy, and a pass that changes nothing writes nothing.
func TestWorkloadsBudgetStatus(t *testing.T) {
	ctx := context.Background()
	web, db := map[string]string{"app": "web"}, map[string]string{"app": "db"}
	one := intstr.FromInt32(1)
	budget := func(name string, l map[string]string) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: l}}}
	}
	evicted := budget("web", web)
	since := metav1.NewTime(time.Now().Truncate(time.Second))
	evicted.Status.DisruptedPods = map[string]metav1.Time{"web-a": since}
	kube, _ := calicotest.NewKube(readyPod("web-a", web), readyPod("web-b", web), readyPod("web-c", web), readyPod("db-a", db), evicted, budget("db", db))
	w := &calicotest.Workloads{Kube: kube}
	require.NoError(t, w.Sync(ctx))
	pdbs := kube.PolicyV1().PodDisruptionBudgets("default")
	b, err := pdbs.Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, policyv1.PodDisruptionBudgetStatus{ObservedGeneration: b.Generation, ExpectedPods: 3, CurrentHealthy: 2, DesiredHealthy: 1, DisruptionsAllowed: 1,
		DisruptedPods: map[string]metav1.Time{"web-a": since}}, b.Status)
	d, err := pdbs.Get(ctx, "db", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, policyv1.PodDisruptionBudgetStatus{ObservedGeneration: d.Generation, ExpectedPods: 1, CurrentHealthy: 1, DesiredHealthy: 1}, d.Status)

	require.NoError(t, w.Sync(ctx))
	for _, name := range []string{"web", "db"} {
		again, err := pdbs.Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		want := b.ResourceVersion
		if name == "db" {
			want = d.ResourceVersion
		}
		assert.Equal(t, want, again.ResourceVersion, "%s: a pass that changes nothing writes nothing", name)
	}
}

func TestWorkloadsAndIPAM(t *testing.T) {
	ctx := context.Background()
	kube, _ := calicotest.NewKube(deployment("web", 3), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}})
	dyn, _ := calicotest.NewDynamic(pool("old", "10.233.64.0/18", false), pool("aaa-disabled", "10.1.0.0/16", true))
	pools := calico.NewCRDStore(dyn)
	ipam := &calicotest.IPAM{Kube: kube, Pools: pools, Dynamic: dyn, MarkReady: true}
	w := &calicotest.Workloads{Kube: kube}
	for i := 0; i < 6; i++ {
		require.NoError(t, w.Sync(ctx))
		require.NoError(t, ipam.Sync(ctx))
	}
	d, err := kube.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	done, msg, err := calico.DeploymentRolledOut(d)
	require.NoError(t, err)
	assert.True(t, done, msg)
	pods, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, pods.Items, 3)
	seen := map[string]bool{}
	for _, p := range pods.Items {
		require.Len(t, p.Status.PodIPs, 1)
		ip := netip.MustParseAddr(p.Status.PodIP)
		assert.True(t, netip.MustParsePrefix("10.233.64.0/18").Contains(ip), "disabled pools give nothing: %s", ip)
		assert.False(t, seen[p.Status.PodIP], "duplicate %s", ip)
		seen[p.Status.PodIP] = true
		assert.Equal(t, corev1.PodRunning, p.Status.Phase)
	}
	r, err := calico.ReportBlocks(ctx, calico.NewCRDBlockSource(dyn), netip.MustParsePrefix("10.233.64.0/18"))
	require.NoError(t, err)
	assert.Equal(t, 3, r.Allocated)
	for _, b := range r.Blocks {
		assert.Equal(t, 24, b.CIDR.Bits())
		assert.NotEmpty(t, b.Node)
	}
	assert.NotEmpty(t, r.Affinities)

	// A template change replaces every pod; the status follows kubectl's rules.
	_, err = kube.AppsV1().Deployments("default").Patch(ctx, "web", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"metadata":{"annotations":{"x":"1"}}}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	d, err = kube.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	done, _, err = calico.DeploymentRolledOut(d)
	require.NoError(t, err)
	assert.False(t, done, "generation not observed yet")
	for i := 0; i < 8; i++ {
		require.NoError(t, w.Sync(ctx))
		require.NoError(t, ipam.Sync(ctx))
	}
	d, err = kube.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	done, msg, err = calico.DeploymentRolledOut(d)
	require.NoError(t, err)
	assert.True(t, done, msg)
	after, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, after.Items, 3)
	for _, p := range after.Items {
		for _, old := range pods.Items {
			assert.NotEqual(t, old.UID, p.UID, "every pod replaced")
		}
	}
	// Released addresses: the block holds only the new pods.
	r, err = calico.ReportBlocks(ctx, calico.NewCRDBlockSource(dyn), netip.MustParsePrefix("10.233.64.0/18"))
	require.NoError(t, err)
	assert.Equal(t, 3, r.Allocated)
}

func pool(name, c string, disabled bool) *unstructured.Unstructured {
	spec := map[string]any{"cidr": c, "blockSize": int64(24)}
	if disabled {
		spec["disabled"] = true
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

func TestIPAMRunWatches(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube, _ := calicotest.NewKube()
	watching := make(chan struct{})
	var once sync.Once
	kube.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := kube.Tracker().Watch(a.GetResource(), a.GetNamespace())
		once.Do(func() { close(watching) })
		return true, w, err
	})
	dyn, _ := calicotest.NewDynamic(pool("p", "10.20.0.0/16", false))
	ipam := &calicotest.IPAM{Kube: kube, Pools: calico.NewCRDStore(dyn)}
	errs := make(chan error, 10)
	done := make(chan error, 1)
	go func() { done <- ipam.Run(ctx, time.Hour, func(err error) { errs <- err }) }()
	// Once the first pass is done and the watch is open, create a pod: only
	// the watch event can trigger its assignment (the resync is an hour
	// away).
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Run opened no watch")
	}
	_, err := kube.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "n1"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, err := kube.CoreV1().Pods("default").Get(ctx, "p1", metav1.GetOptions{})
		return err == nil && p.Status.PodIP == "10.20.0.0"
	}, 10*time.Second, time.Millisecond)
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	assert.Empty(t, errs)
}

// Run reports a failing pass to onErr and goes on, and takes a resync of
// zero for one second.
func TestIPAMRunReportsFailedPasses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube, _ := calicotest.NewKube()
	dyn, _ := calicotest.NewDynamic(pool("p", "10.20.0.0/16", false))
	dyn.PrependReactor("list", "ippools", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("pools unavailable")
	})
	ipam := &calicotest.IPAM{Kube: kube, Pools: calico.NewCRDStore(dyn)}
	errs := make(chan error, 100)
	done := make(chan error, 1)
	go func() { done <- ipam.Run(ctx, 0, func(err error) { errs <- err }) }()
	for range 2 { // the first pass, then the resync's
		select {
		case err := <-errs:
			assert.ErrorContains(t, err, "pools unavailable")
		case <-time.After(10 * time.Second):
			require.FailNow(t, "no failed pass reported")
		}
	}
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

func TestBlockName(t *testing.T) {
	assert.Equal(t, "10-233-64-0-26", calicotest.BlockName(netip.MustParsePrefix("10.233.64.0/26")))
	assert.Equal(t, "fd00-20---122", calicotest.BlockName(netip.MustParsePrefix("fd00:20::/122")))
}
