package calico_test

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
)

// TestScanPodsPagesItsList: the pods are listed a page at a time (500 by
// default, PageSize when set), following the continue token to the last
// page, and come back sorted by namespace, then name.
func TestScanPodsPagesItsList(t *testing.T) {
	var objs []runtime.Object
	for i, ns := range []string{"b", "a", "c"} {
		for j := range 3 {
			objs = append(objs, podWithIP(ns, fmt.Sprintf("p%d", 3-j), fmt.Sprintf("10.233.64.%d", 10*i+j+1), nil))
		}
	}
	for _, tc := range []struct {
		pageSize int64
		limits   []int64
	}{{0, []int64{500}}, {-1, []int64{500}}, {4, []int64{4, 4, 4}}} {
		t.Run(fmt.Sprint(tc.pageSize), func(t *testing.T) {
			kube, _ := calicotest.NewKube(objs...)
			var limits []int64
			// The fake ignores limit and continue: serve pages as the API server does.
			kube.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				opts := a.(k8stesting.ListActionImpl).ListOptions
				limits = append(limits, opts.Limit)
				obj, err := kube.Tracker().List(podsGVR, corev1.SchemeGroupVersion.WithKind("Pod"), "")
				if err != nil {
					return true, nil, err
				}
				all := obj.(*corev1.PodList)
				from := 0
				if opts.Continue != "" {
					from, _ = strconv.Atoi(opts.Continue)
				}
				to := len(all.Items)
				out := &corev1.PodList{}
				if opts.Limit > 0 && from+int(opts.Limit) < to {
					to = from + int(opts.Limit)
					out.Continue = strconv.Itoa(to)
				}
				out.Items = all.Items[from:to]
				return true, out, nil
			})
			scan, err := calico.ScanPods(context.Background(), kube, netip.MustParsePrefix(oldCIDR), calico.ScanOptions{PageSize: tc.pageSize})
			require.NoError(t, err)
			assert.Equal(t, tc.limits, limits)
			assert.Equal(t, []string{"a/p1", "a/p2", "a/p3", "b/p1", "b/p2", "b/p3", "c/p1", "c/p2", "c/p3"}, podKeys(scan.Pods))
		})
	}
}

// TestBlockFromUnstructuredEdges: a block may be full (one allocation per
// address); an allocation must point at an existing attribute; an
// allocation known only by its handle is classified by it; a block marked
// deleted says so.
func TestBlockFromUnstructuredEdges(t *testing.T) {
	b, err := calico.BlockFromUnstructured(map[string]any{"metadata": map[string]any{"name": "full"}, "spec": map[string]any{
		"cidr": "10.0.0.0/31", "deleted": true, "allocations": []any{int64(0), int64(1)},
		"attributes": []any{map[string]any{"handle_id": "vxlan-tunnel-addr-node-a"}, map[string]any{"handle_id": "k8s-pod-network.0123"}},
	}})
	require.NoError(t, err)
	assert.True(t, b.Deleted)
	require.Len(t, b.Allocations, 2)
	assert.Equal(t, calico.AllocationTunnel, b.Allocations[0].Kind)
	assert.Equal(t, "10.0.0.0", b.Allocations[0].IP.String())
	assert.Equal(t, calico.AllocationPod, b.Allocations[1].Kind)
	assert.Equal(t, "10.0.0.1", b.Allocations[1].IP.String())

	_, err = calico.BlockFromUnstructured(map[string]any{"metadata": map[string]any{"name": "b"}, "spec": map[string]any{
		"cidr": "10.0.0.0/30", "allocations": []any{int64(1)}, "attributes": []any{map[string]any{"handle_id": "h"}},
	}})
	var oe *calico.ObjectError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "spec.allocations[0]", oe.Field)
	assert.Equal(t, "want an index into spec.attributes (0-0)", oe.Reason)
}

// TestReportBlocksSortsAffinities: affinities come sorted by their block's
// address, then by node.
func TestReportBlocksSortsAffinities(t *testing.T) {
	var objs []runtime.Object
	for _, a := range [][2]string{{"10.233.65.0/24", "node-a"}, {"10.233.64.0/24", "node-b"}, {"10.233.64.0/24", "node-a"}, {"10.233.66.0/24", "node-0"}} {
		objs = append(objs, affinityObject(a[0], a[1]))
	}
	dyn, _ := calicotest.NewDynamic(objs...)
	r, err := calico.ReportBlocks(context.Background(), calico.NewCRDBlockSource(dyn), netip.MustParsePrefix(oldCIDR))
	require.NoError(t, err)
	var got []string
	for _, a := range r.Affinities {
		got = append(got, a.CIDR.String()+" "+a.Node)
	}
	assert.Equal(t, []string{"10.233.64.0/24 node-a", "10.233.64.0/24 node-b", "10.233.65.0/24 node-a", "10.233.66.0/24 node-0"}, got)
}

// TestPoolStoreDeleteHonoursAResourceVersionPrecondition: a delete with a
// resourceVersion precondition is refused once the pool changed, alone or
// with a UID.
func TestPoolStoreDeleteHonoursAResourceVersionPrecondition(t *testing.T) {
	ctx := context.Background()
	for api, s := range stores(t) {
		t.Run(string(api), func(t *testing.T) {
			old, err := s.Get(ctx, oldPoolName)
			require.NoError(t, err)
			upd := old.DeepCopy()
			upd.Spec.Disabled = true
			_, err = s.Update(ctx, upd, calico.WriteOptions{})
			require.NoError(t, err)
			err = s.Delete(ctx, oldPoolName, calico.DeleteOptions{ResourceVersion: old.ResourceVersion})
			assert.True(t, apierrors.IsConflict(err), "%v", err)
			err = s.Delete(ctx, oldPoolName, calico.DeleteOptions{UID: old.UID, ResourceVersion: old.ResourceVersion})
			assert.True(t, apierrors.IsConflict(err), "%v", err)
			_, err = s.Get(ctx, oldPoolName)
			require.NoError(t, err, "not deleted")
			require.NoError(t, s.Delete(ctx, oldPoolName, calico.DeleteOptions{UID: old.UID}))
			_, err = s.Get(ctx, oldPoolName)
			assert.ErrorIs(t, err, calico.ErrPoolNotFound)
		})
	}
}

// affinityObject is a BlockAffinity of node for the block cidr.
func affinityObject(cidr, node string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calico.BlockAffinitiesV1.GroupVersion().String(), "kind": "BlockAffinity",
		"metadata": map[string]any{"name": node + "-" + calicotest.BlockName(netip.MustParsePrefix(cidr))},
		"spec":     map[string]any{"cidr": cidr, "node": node, "state": "confirmed", "deleted": "false"},
	}}
}
