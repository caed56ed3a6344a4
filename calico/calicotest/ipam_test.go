package calicotest_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
)

// ipamCluster is a fake cluster holding Calico pools, with IPAM over it.
type ipamCluster struct {
	kube *fake.Clientset
	dyn  *dynamicfake.FakeDynamicClient
	ipam *calicotest.IPAM
}

// newIPAMCluster holds the pools; mirror sets IPAM.Dynamic, so that
// allocations are mirrored into IPAMBlocks and BlockAffinities.
func newIPAMCluster(mirror bool, pools ...*unstructured.Unstructured) *ipamCluster {
	objs := make([]runtime.Object, len(pools))
	for i, p := range pools {
		objs[i] = p
	}
	kube, _ := calicotest.NewKube()
	dyn, _ := calicotest.NewDynamic(objs...)
	c := &ipamCluster{kube: kube, dyn: dyn, ipam: &calicotest.IPAM{Kube: kube, Pools: calico.NewCRDStore(dyn)}}
	if mirror {
		c.ipam.Dynamic = dyn
	}
	return c
}

// poolOf is an enabled crd.projectcalico.org/v1 IPPool with a block size.
func poolOf(name, c string, blockSize int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"cidr": c, "blockSize": blockSize}}}
}

// addPod creates a pod bound to node, with the status addresses given (as
// status.podIP alone: the form of a pod written before podIPs existed).
func (c *ipamCluster) addPod(t *testing.T, name, node, podIP string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP}}
	_, err := c.kube.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{})
	require.NoError(t, err)
}

func (c *ipamCluster) pod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := c.kube.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return p
}

func (c *ipamCluster) podIPs(t *testing.T, name string) []string {
	t.Helper()
	var out []string
	for _, ip := range c.pod(t, name).Status.PodIPs {
		out = append(out, ip.IP)
	}
	return out
}

func (c *ipamCluster) sync(t *testing.T) {
	t.Helper()
	require.NoError(t, c.ipam.Sync(context.Background()))
}

// One pass gives every pod its address, lowest first: a node fills its own
// block before it claims the next free one, pods are served in name order,
// and another node's block is never used.
func TestIPAMTakesTheLowestAddressOfTheNodesBlocks(t *testing.T) {
	c := newIPAMCluster(false, poolOf("p", "10.20.0.0/16", 30))
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		c.addPod(t, n, "n1", "")
	}
	c.addPod(t, "f", "n2", "")
	c.sync(t)
	for name, want := range map[string]string{
		"a": "10.20.0.0", "b": "10.20.0.1", "c": "10.20.0.2", "d": "10.20.0.3",
		"e": "10.20.0.4", // n1's first block (of four addresses) is full
		"f": "10.20.0.8", // n2 claims the lowest free block, not n1's second
	} {
		assert.Equal(t, []string{want}, c.podIPs(t, name), name)
		assert.Equal(t, want, c.pod(t, name).Status.PodIP, name)
	}

	// n1's second block has room: n1's next pod goes there, n2's next pod
	// to its own block.
	c.addPod(t, "g", "n1", "")
	c.addPod(t, "h", "n2", "")
	c.sync(t)
	assert.Equal(t, []string{"10.20.0.5"}, c.podIPs(t, "g"))
	assert.Equal(t, []string{"10.20.0.9"}, c.podIPs(t, "h"))
}

// Addresses a pod already has, in status.podIP alone (no podIPs), are in
// use, and their block belongs to the pod's node: the node's next pod takes
// the next free address of that block, and the pod keeps its address.
func TestIPAMCountsTheAddressesPodsAlreadyHave(t *testing.T) {
	c := newIPAMCluster(false, poolOf("p", "10.20.0.0/16", 24))
	c.addPod(t, "old", "n1", "10.20.0.0")
	c.addPod(t, "new", "n1", "")
	c.sync(t)
	assert.Equal(t, []string{"10.20.0.1"}, c.podIPs(t, "new"))
	old := c.pod(t, "old")
	assert.Equal(t, "10.20.0.0", old.Status.PodIP)
	assert.Empty(t, old.Status.PodIPs, "a pod with an address is left alone")
}

// A dual-stack pod gets one address per family, IPv4 first, whatever the
// pools' names.
func TestIPAMGivesOneAddressPerFamilyIPv4First(t *testing.T) {
	c := newIPAMCluster(false, poolOf("a-v6", "fd00:20::/112", 122), poolOf("b-v4", "10.20.0.0/16", 26))
	c.addPod(t, "p", "n1", "")
	c.sync(t)
	assert.Equal(t, []string{"10.20.0.0", "fd00:20::"}, c.podIPs(t, "p"))
	assert.Equal(t, "10.20.0.0", c.pod(t, "p").Status.PodIP)
}

// Pools are cut into at most 2^20 blocks of at most 2^12 addresses, and a
// block is never larger than its pool; a pool outside those bounds gives
// nothing.
func TestIPAMBlockSizeBounds(t *testing.T) {
	for _, tc := range []struct {
		cidr string
		bs   int64
		want []string
	}{
		{"10.20.0.0/24", 24, []string{"10.20.0.0"}}, // one block: the pool
		{"10.20.0.0/24", 23, nil},                   // a block larger than the pool
		{"8.0.0.0/6", 26, []string{"8.0.0.0"}},      // 2^20 blocks
		{"8.0.0.0/5", 26, nil},                      // 2^21 blocks
		{"10.16.0.0/12", 20, []string{"10.16.0.0"}}, // 2^12 addresses a block
		{"10.16.0.0/12", 19, nil},                   // 2^13 addresses a block
	} {
		c := newIPAMCluster(false, poolOf("p", tc.cidr, tc.bs))
		c.addPod(t, "p", "n1", "")
		c.sync(t)
		assert.Equal(t, tc.want, c.podIPs(t, "p"), "%s, blockSize %d", tc.cidr, tc.bs)
	}
}

// A block emptied by the deletion of its last pod keeps its affinity, as
// with Calico: its node's next pod takes its first address again, and
// another node's pod does not use it.
func TestIPAMEmptiedBlockKeepsItsAffinity(t *testing.T) {
	ctx := context.Background()
	c := newIPAMCluster(true, poolOf("p", "10.20.0.0/16", 24))
	c.addPod(t, "x", "n2", "")
	c.sync(t)
	require.Equal(t, []string{"10.20.0.0"}, c.podIPs(t, "x"))
	require.NoError(t, c.kube.CoreV1().Pods("default").Delete(ctx, "x", metav1.DeleteOptions{}))
	c.sync(t)

	c.addPod(t, "y", "n1", "")
	c.sync(t)
	assert.Equal(t, []string{"10.20.1.0"}, c.podIPs(t, "y"))
	c.addPod(t, "z", "n2", "")
	c.sync(t)
	assert.Equal(t, []string{"10.20.0.0"}, c.podIPs(t, "z"))
}

// With MarkReady a pod is Running and Ready, with a start time; a start time
// already set is kept, as a kubelet keeps it.
func TestIPAMMarkReadySetsTheStartTimeOnce(t *testing.T) {
	c := newIPAMCluster(false, poolOf("p", "10.20.0.0/16", 24))
	c.ipam.MarkReady = true
	c.addPod(t, "fresh", "n1", "")
	started := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "started", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodPending, StartTime: &started}}
	_, err := c.kube.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{})
	require.NoError(t, err)
	c.sync(t)

	fresh := c.pod(t, "fresh")
	assert.Equal(t, corev1.PodRunning, fresh.Status.Phase)
	require.NotNil(t, fresh.Status.StartTime)
	assert.False(t, fresh.Status.StartTime.Equal(&started))
	ready := false
	for _, cond := range fresh.Status.Conditions {
		ready = ready || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
	}
	assert.True(t, ready)

	st := c.pod(t, "started").Status
	assert.Equal(t, corev1.PodRunning, st.Phase)
	require.NotNil(t, st.StartTime)
	assert.True(t, st.StartTime.Equal(&started), "kept: %v", st.StartTime)
}

// The mirror writes each block in Calico's layout: an allocation per used
// ordinal pointing at its attribute, the free ordinals (an empty list, not
// null, when the block is full), the host affinity and a BlockAffinity. A
// pass that changes nothing writes nothing; a change bumps the block's
// sequence number by one.
func TestIPAMMirrorsBlocksInCalicosLayout(t *testing.T) {
	ctx := context.Background()
	c := newIPAMCluster(true, poolOf("p", "10.20.0.0/16", 30))
	blocks := c.dyn.Resource(calico.IPAMBlocksV1)
	spec := func() map[string]any {
		t.Helper()
		u, err := blocks.Get(ctx, "10-20-0-0-30", metav1.GetOptions{})
		require.NoError(t, err)
		s, ok := u.Object["spec"].(map[string]any)
		require.True(t, ok)
		return s
	}
	c.addPod(t, "a", "n1", "")
	c.addPod(t, "b", "n1", "")
	c.sync(t)
	s := spec()
	assert.Equal(t, []any{int64(0), int64(1), nil, nil}, s["allocations"])
	assert.Equal(t, []any{int64(2), int64(3)}, s["unallocated"])
	assert.Equal(t, "host:n1", s["affinity"])
	assert.Equal(t, int64(0), s["sequenceNumber"])
	attrs, ok := s["attributes"].([]any)
	require.True(t, ok)
	require.Len(t, attrs, 2)
	assert.Equal(t, map[string]any{"namespace": "default", "node": "n1", "pod": "a"}, attrs[0].(map[string]any)["secondary"])
	assert.Equal(t, "k8s-pod-network."+string(c.pod(t, "a").UID), attrs[0].(map[string]any)["handle_id"])
	aff, err := c.dyn.Resource(calico.BlockAffinitiesV1).Get(ctx, "n1-10-20-0-0-30", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"cidr": "10.20.0.0/30", "node": "n1", "state": "confirmed", "deleted": "false"}, aff.Object["spec"])

	u, err := blocks.Get(ctx, "10-20-0-0-30", metav1.GetOptions{})
	require.NoError(t, err)
	c.sync(t)
	again, err := blocks.Get(ctx, "10-20-0-0-30", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, u.GetResourceVersion(), again.GetResourceVersion(), "a pass that changes nothing writes nothing")

	require.NoError(t, c.kube.CoreV1().Pods("default").Delete(ctx, "a", metav1.DeleteOptions{}))
	c.sync(t)
	s = spec()
	assert.Equal(t, []any{nil, int64(0), nil, nil}, s["allocations"])
	assert.Equal(t, []any{int64(0), int64(2), int64(3)}, s["unallocated"])
	assert.Equal(t, int64(1), s["sequenceNumber"])

	for _, n := range []string{"c", "d", "e"} {
		c.addPod(t, n, "n1", "")
	}
	c.sync(t)
	s = spec()
	assert.Equal(t, []any{}, s["unallocated"], "a full block")
	assert.Equal(t, int64(2), s["sequenceNumber"])
	r, err := calico.ReportBlocks(ctx, calico.NewCRDBlockSource(c.dyn), netip.MustParsePrefix("10.20.0.0/16"))
	require.NoError(t, err)
	assert.Equal(t, 4, r.Allocated)
}
