package calico_test

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

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
)

// oldBlock is an IPAMBlock of the old pool (10.233.64.0/24, node-a) holding
// the given attributes at ordinals 1, 2, ...: what Calico's IPAM still
// records after every pod of the old pool is gone.
func oldBlock(attrs ...map[string]any) *unstructured.Unstructured {
	allocs := make([]any, 256)
	var unalloc []any
	for o := range allocs {
		if o >= 1 && o <= len(attrs) {
			allocs[o] = int64(o - 1)
			continue
		}
		unalloc = append(unalloc, int64(o))
	}
	as := make([]any, len(attrs))
	for i, a := range attrs {
		as[i] = a
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calico.IPAMBlocksV1.GroupVersion().String(), "kind": "IPAMBlock",
		"metadata": map[string]any{"name": calicotest.BlockName(netip.MustParsePrefix("10.233.64.0/24"))},
		"spec": map[string]any{"cidr": "10.233.64.0/24", "affinity": "host:node-a", "allocations": allocs,
			"attributes": as, "unallocated": unalloc, "strictAffinity": false, "sequenceNumber": int64(0)},
	}}
}

// TestApplyKeepsTheOldPoolWhileAllocationsRemainWithoutLivePods: no live pod
// is left on the old pool, but its IPAM blocks still hold an allocation: a
// leaked one (its pod no longer exists) or a node's tunnel address. Deleting
// the pool then strands those addresses (Calico cannot release them from a
// pool that is gone, and a tunnel address in it breaks the node's routes), so
// Apply must refuse with ErrLeftovers and keep the pool, counting every
// allocation as left, not only live pods.
func TestApplyKeepsTheOldPoolWhileAllocationsRemainWithoutLivePods(t *testing.T) {
	for _, tc := range []struct {
		name  string
		attr  map[string]any
		check func(t *testing.T, v *calico.VerifyResult)
	}{
		{"leaked pod allocation", map[string]any{"handle_id": "k8s-pod-network.gone-uid",
			"secondary": map[string]any{"namespace": "default", "node": "node-a", "pod": "gone"}},
			func(t *testing.T, v *calico.VerifyResult) {
				require.Len(t, v.Leaked, 1)
				assert.Equal(t, "gone", v.Leaked[0].Pod)
				assert.Equal(t, 1, v.Blocks.PodAllocations)
			}},
		{"tunnel address", map[string]any{"handle_id": "ipip-tunnel-addr-node-a",
			"secondary": map[string]any{"node": "node-a", "type": "ipipTunnelAddress"}},
			func(t *testing.T, v *calico.VerifyResult) {
				assert.Empty(t, v.Leaked)
				assert.Equal(t, 1, v.Blocks.TunnelAllocations)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			kube, _ := calicotest.NewKube(
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}},
			)
			accesstest.Authorize(kube)
			dyn, _ := calicotest.NewDynamic([]runtime.Object{
				v1PoolObject(oldPoolName, oldPoolSpec(), nil),
				oldBlock(tc.attr),
			}...)
			pools := calico.NewCRDStore(dyn)
			cl := calico.Cluster{Kube: kube, Pools: pools, Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}

			plan, err := calico.Plan(ctx, cl, request())
			require.NoError(t, err)
			opts := fastOptions(t.TempDir())
			opts.DrainTimeout = 20 * time.Millisecond
			res, err := calico.Apply(ctx, cl, plan, opts)
			require.ErrorIs(t, err, calico.ErrLeftovers, "the old pool must not be deleted while an allocation remains")
			var le *calico.LeftoversError
			require.ErrorAs(t, err, &le)
			assert.Empty(t, le.Verify.PodsLeft, "no live pod is left: only the allocation blocks the delete")
			assert.Equal(t, 1, le.Verify.Blocks.Allocated)
			tc.check(t, le.Verify)
			assert.False(t, res.OldPoolDeleted)
			assert.False(t, res.Done)
			old, err := pools.Get(ctx, oldPoolName)
			require.NoError(t, err, "the old pool is kept")
			assert.True(t, old.AllocationStopped(), "kept, but giving no new addresses")
			_, err = pools.Get(ctx, newPoolName)
			assert.NoError(t, err, "the new pool exists")
		})
	}
}
