package calico_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
)

func TestPodIPsIn(t *testing.T) {
	p := netip.MustParsePrefix("10.233.64.0/18")
	cases := []struct {
		name   string
		podIP  string
		podIPs []string
		in     []string
		bad    int
	}{
		{"inside", "", []string{"10.233.64.5"}, []string{"10.233.64.5"}, 0},
		{"dual stack", "", []string{"10.233.65.1", "fd00::1"}, []string{"10.233.65.1"}, 0},
		{"outside", "", []string{"10.20.0.1"}, nil, 0},
		{"podIP fallback", "10.233.127.255", nil, []string{"10.233.127.255"}, 0},
		{"podIPs wins", "10.233.64.9", []string{"10.20.0.1"}, nil, 0},
		{"garbage", "", []string{"10.233.64.300", "", "fe80::1%eth0"}, nil, 3},
		{"mapped", "", []string{"::ffff:10.233.64.7"}, []string{"10.233.64.7"}, 0},
		{"duplicate", "", []string{"10.233.64.7", "10.233.64.7"}, []string{"10.233.64.7"}, 0},
		{"spaces", "", []string{" 10.233.64.8 "}, []string{"10.233.64.8"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in, bad := calico.PodIPsIn(c.podIP, c.podIPs, p)
			var got []string
			for _, a := range in {
				got = append(got, a.String())
			}
			assert.Equal(t, c.in, got)
			assert.Len(t, bad, c.bad)
		})
	}
}

func ctrl(kind, apiVersion, name, uid string) []metav1.OwnerReference {
	t := true
	return []metav1.OwnerReference{{Kind: kind, APIVersion: apiVersion, Name: name, UID: types.UID(uid), Controller: &t}}
}

func podWithIP(ns, name, ip string, owners []metav1.OwnerReference, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: owners},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func TestScanPods(t *testing.T) {
	objs := []runtime.Object{
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: "default", UID: "rs1", OwnerReferences: ctrl("Deployment", "apps/v1", "web", "d1")}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "lonely", Namespace: "default", UID: "rs2"}},
		podWithIP("default", "web-abc-1", "10.233.64.2", ctrl("ReplicaSet", "apps/v1", "web-abc", "rs1")),
		podWithIP("default", "web-abc-2", "10.233.64.3", ctrl("ReplicaSet", "apps/v1", "web-abc", "rs1")),
		podWithIP("default", "lonely-1", "10.233.64.4", ctrl("ReplicaSet", "apps/v1", "lonely", "rs2")),
		podWithIP("default", "gone-rs-1", "10.233.64.5", ctrl("ReplicaSet", "apps/v1", "gone-rs", "rs3")),
		podWithIP("default", "db-0", "10.233.64.6", ctrl("StatefulSet", "apps/v1", "db", "s1")),
		podWithIP("kube-system", "agent-x", "10.233.64.7", ctrl("DaemonSet", "apps/v1", "agent", "ds1")),
		podWithIP("default", "job-x", "10.233.64.8", ctrl("Job", "batch/v1", "job", "j1")),
		podWithIP("default", "crd-x", "10.233.64.9", ctrl("Thing", "example.com/v1", "thing", "t1")),
		podWithIP("kube-system", "etcd-master", "10.233.64.10", ctrl("Node", "v1", "master", "n1")),
		podWithIP("default", "bare", "10.233.64.11", nil),
		podWithIP("default", "done", "10.233.64.12", nil, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		podWithIP("default", "elsewhere", "10.20.0.4", nil),
		podWithIP("kube-system", "proxy", "10.233.64.13", nil, func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
		podWithIP("kube-system", "coredns-1", "10.233.64.14", ctrl("ReplicaSet", "apps/v1", "web-abc", "rs1"), func(p *corev1.Pod) {
			p.Labels = map[string]string{"k8s-app": "kube-dns"}
		}),
		podWithIP("default", "broken", "not-an-ip", nil),
	}
	kube, _ := calicotest.NewKube(objs...)
	scan, err := calico.ScanPods(context.Background(), kube, netip.MustParsePrefix("10.233.64.0/18"), calico.ScanOptions{PageSize: 3})
	require.NoError(t, err)
	got := map[string]string{}
	for _, p := range scan.Pods {
		got[p.String()] = p.Owner.String()
	}
	assert.Equal(t, map[string]string{
		"default/web-abc-1":       "Deployment default/web",
		"default/web-abc-2":       "Deployment default/web",
		"default/lonely-1":        "ReplicaSet default/lonely",
		"default/gone-rs-1":       "ReplicaSet default/gone-rs",
		"default/db-0":            "StatefulSet default/db",
		"kube-system/agent-x":     "DaemonSet kube-system/agent",
		"default/job-x":           "Job default/job",
		"default/crd-x":           "Thing default/thing",
		"kube-system/etcd-master": "StaticPod kube-system/etcd-master",
		"default/bare":            "Pod default/bare",
		"kube-system/coredns-1":   "ReplicaSet kube-system/web-abc",
	}, got)
	assert.Equal(t, 1, scan.HostNetwork)
	require.Len(t, scan.Terminal, 1)
	assert.Equal(t, "default/done", scan.Terminal[0].String())
	assert.Equal(t, []string{`default/broken: "not-an-ip"`}, scan.BadIPs)
	for _, p := range scan.Pods {
		assert.Equal(t, p.Name == "coredns-1", p.DNS, p.String())
	}
	// Sorted by namespace, then name.
	assert.Equal(t, "default/bare", scan.Pods[0].String())
	// The kind is the one the plan records, not only the text: a Job's pod
	// is a Job's, an unknown controller's is Other with the owner named.
	kinds := map[string]calico.WorkloadRef{}
	for _, p := range scan.Pods {
		kinds[p.String()] = p.Owner
	}
	assert.Equal(t, calico.WorkloadRef{Kind: calico.KindJob, Namespace: "default", Name: "job", UID: "j1"}, kinds["default/job-x"])
	assert.Equal(t, calico.WorkloadRef{Kind: calico.KindOther, Namespace: "default", Name: "thing", UID: "t1", OwnerKind: "Thing", OwnerAPIVersion: "example.com/v1"}, kinds["default/crd-x"])
	// Only what a rolling restart replaces is rollable.
	for pod, want := range map[string]bool{"default/web-abc-1": true, "default/db-0": true, "kube-system/agent-x": true,
		"default/lonely-1": false, "default/job-x": false, "default/crd-x": false, "default/bare": false} {
		assert.Equal(t, want, kinds[pod].Rollable(), pod)
	}
}

func TestBlockFromUnstructured(t *testing.T) {
	block := map[string]any{
		"metadata": map[string]any{"name": "10-233-64-0-30"},
		"spec": map[string]any{
			"cidr": "10.233.64.0/30", "affinity": "host:node-a",
			"allocations": []any{int64(0), nil, int64(1), nil},
			"attributes": []any{
				map[string]any{"handle_id": "k8s-pod-network.abc", "secondary": map[string]any{"namespace": "default", "pod": "web-1", "node": "node-a"}},
				map[string]any{"handle_id": "ipip-tunnel-addr-node-a", "secondary": map[string]any{"node": "node-a", "type": "ipipTunnelAddress"}},
			},
			"unallocated": []any{int64(1), int64(3)},
		},
	}
	b, err := calico.BlockFromUnstructured(block)
	require.NoError(t, err)
	assert.Equal(t, "node-a", b.Node)
	require.Len(t, b.Allocations, 2)
	assert.Equal(t, "10.233.64.0", b.Allocations[0].IP.String())
	assert.Equal(t, calico.AllocationPod, b.Allocations[0].Kind)
	assert.Equal(t, "web-1", b.Allocations[0].Pod)
	assert.Equal(t, "10.233.64.2", b.Allocations[1].IP.String())
	assert.Equal(t, calico.AllocationTunnel, b.Allocations[1].Kind)

	bad := []struct {
		name  string
		spec  map[string]any
		field string
	}{
		{"no cidr", map[string]any{}, "spec.cidr"},
		{"bad cidr", map[string]any{"cidr": "nope"}, "spec.cidr"},
		{"index out of range", map[string]any{"cidr": "10.0.0.0/30", "allocations": []any{int64(3)}, "attributes": []any{}}, "spec.allocations[0]"},
		{"too many", map[string]any{"cidr": "10.0.0.0/31", "allocations": []any{nil, nil, nil}}, "spec.allocations"},
		{"affinity type", map[string]any{"cidr": "10.0.0.0/30", "affinity": int64(1)}, "spec.affinity"},
		{"attr type", map[string]any{"cidr": "10.0.0.0/30", "attributes": []any{"x"}}, "spec.attributes[0]"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := calico.BlockFromUnstructured(map[string]any{"metadata": map[string]any{"name": "b"}, "spec": c.spec})
			require.Error(t, err)
			assert.ErrorIs(t, err, calico.ErrMalformed)
			var oe *calico.ObjectError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, c.field, oe.Field)
		})
	}

	a, err := calico.AffinityFromUnstructured(map[string]any{"metadata": map[string]any{"name": "node-a-10-233-64-0-26"},
		"spec": map[string]any{"cidr": "10.233.64.0/26", "node": "node-a", "state": "confirmed", "deleted": "false"}})
	require.NoError(t, err)
	assert.False(t, a.Deleted)
	assert.Equal(t, "node-a", a.Node)
	a, err = calico.AffinityFromUnstructured(map[string]any{"spec": map[string]any{"cidr": "10.233.64.0/26", "deleted": true}})
	require.NoError(t, err)
	assert.True(t, a.Deleted)
}

type unavailableBlocks struct{}

func (unavailableBlocks) Blocks(context.Context) ([]calico.Block, error) {
	return nil, fmt.Errorf("%w: the server could not find the requested resource", calico.ErrIPAMUnavailable)
}

func (unavailableBlocks) Affinities(context.Context) ([]calico.BlockAffinity, error) {
	return nil, calico.ErrIPAMUnavailable
}

func TestReportBlocksAvailability(t *testing.T) {
	ctx := context.Background()
	dyn, _ := calicotest.NewDynamic()
	r, err := calico.ReportBlocks(ctx, calico.NewCRDBlockSource(dyn), netip.MustParsePrefix(oldCIDR))
	require.NoError(t, err)
	assert.True(t, r.Available)
	assert.True(t, r.Clear(), "no blocks at all is clear")

	for _, src := range []calico.BlockSource{nil, unavailableBlocks{}} {
		r, err = calico.ReportBlocks(ctx, src, netip.MustParsePrefix(oldCIDR))
		require.NoError(t, err)
		assert.False(t, r.Available)
		assert.False(t, r.Clear(), "unreadable blocks are not proof of anything")
		assert.NotEmpty(t, r.Note)
	}
}

func TestDetectOperator(t *testing.T) {
	ctx := context.Background()
	inst := func(pools ...any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "operator.tigera.io/v1", "kind": "Installation",
			"metadata": map[string]any{"name": "default"}, "spec": map[string]any{"calicoNetwork": map[string]any{"ipPools": pools}}}}
	}
	old := calico.IPPool{Name: oldPoolName, Spec: oldPoolSpec()}
	cases := []struct {
		name    string
		objs    []runtime.Object
		pool    calico.IPPool
		want    calico.OperatorInfo
		command string
	}{
		{"no operator", nil, old, calico.OperatorInfo{Index: -1}, ""},
		{"by name", []runtime.Object{inst(map[string]any{"name": "x", "cidr": "10.1.0.0/16"}, map[string]any{"name": oldPoolName})}, old,
			calico.OperatorInfo{Installed: true, ManagesPool: true, Index: 1, Entry: oldPoolName}, "/spec/calicoNetwork/ipPools/1/disableNewAllocations"},
		{"by cidr", []runtime.Object{inst(map[string]any{"cidr": oldCIDR})}, old,
			calico.OperatorInfo{Installed: true, ManagesPool: true, Index: 0}, "/spec/calicoNetwork/ipPools/0/disableNewAllocations"},
		{"unlisted", []runtime.Object{inst()}, old, calico.OperatorInfo{Installed: true, Index: -1}, ""},
		{"label only", []runtime.Object{inst()}, calico.IPPool{Name: oldPoolName, Labels: map[string]string{calico.ManagedByLabel: "tigera-operator"}, Spec: oldPoolSpec()},
			calico.OperatorInfo{Installed: true, ManagesPool: true, Index: -1}, "kubectl edit installation default"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dyn, _ := calicotest.NewDynamic(c.objs...)
			got, err := calico.DetectOperator(ctx, dyn, c.pool)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
			if c.command != "" {
				assert.Contains(t, got.DisableChange(c.pool.Name).Command, c.command)
				assert.Contains(t, got.DisableChange(c.pool.Name).String(), "disableNewAllocations")
			}
		})
	}
	info, err := calico.DetectOperator(ctx, nil, old)
	require.NoError(t, err)
	assert.False(t, info.Installed)
}

// The changes asked of the operator, word for word: an entry found at index
// 0 is named by its index; an entry not found is described, with kubectl
// edit. A disable offers the nodeSelector alternative; a removal has none.
func TestOperatorChangeTexts(t *testing.T) {
	at0 := calico.OperatorInfo{Installed: true, ManagesPool: true, Index: 0}
	unlisted := calico.OperatorInfo{Installed: true, ManagesPool: true, Index: -1}
	for _, tc := range []struct {
		change calico.OperatorChange
		want   string
	}{
		{at0.DisableChange("p"), `the Tigera operator manages IPPool "p": set spec.calicoNetwork.ipPools[0].disableNewAllocations to true in Installation "default" ` +
			`(kubectl patch installation default --type=json -p '[{"op":"add","path":"/spec/calicoNetwork/ipPools/0/disableNewAllocations","value":true}]'); ` +
			`or set spec.calicoNetwork.ipPools[0].nodeSelector to "!all()"`},
		{unlisted.DisableChange("p"), `the Tigera operator manages IPPool "p": set spec.calicoNetwork.ipPools[<entry for p>].disableNewAllocations to true in Installation "default" ` +
			`(kubectl edit installation default); or set that entry's nodeSelector to "!all()"`},
		{at0.RemoveChange("p"), `the Tigera operator manages IPPool "p": remove spec.calicoNetwork.ipPools[0] from Installation "default" ` +
			`(kubectl patch installation default --type=json -p '[{"op":"remove","path":"/spec/calicoNetwork/ipPools/0"}]')`},
		{unlisted.RemoveChange("p"), `the Tigera operator manages IPPool "p": remove spec.calicoNetwork.ipPools[<entry for p>] from Installation "default" (kubectl edit installation default)`},
	} {
		assert.Equal(t, tc.want, tc.change.String())
	}
}
