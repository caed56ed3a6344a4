package calico_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cidrshift/cidrshift/calico"
)

// The new pool takes the old pool's settings, each override in their
// place, the labels given (never the old pool's), and every node: an old
// pool already disabled by its node selector (a run stopped after that
// step, planned again) does not leave the new one disabled. A plan made
// without a cluster CIDR says the new pool was not checked against one.
func TestPlanNewPoolFromTheOldPoolAndTheOverrides(t *testing.T) {
	e := newEnv(t, envOptions{api: calico.APICRDV1})
	ctx := context.Background()
	const noClusterCIDR = "no cluster CIDR given: the new pool was not checked against it; Calico pools must lie inside the cluster CIDR"

	p, err := calico.Plan(ctx, e.cl, request())
	require.NoError(t, err)
	old := oldPoolSpec()
	got := p.NewPool.Spec
	assert.Equal(t, newCIDR, got.CIDR)
	assert.Equal(t, []any{old.BlockSize, old.IPIPMode, old.VXLANMode, old.NATOutgoing, old.NodeSelector, old.AllowedUses},
		[]any{got.BlockSize, got.IPIPMode, got.VXLANMode, got.NATOutgoing, got.NodeSelector, got.AllowedUses})
	assert.Nil(t, p.NewPool.Labels)
	assert.NotContains(t, p.Warnings, noClusterCIDR)

	req := request()
	never, cross, no, sel, ns, yes, manual := calico.EncapNever, calico.EncapCrossSubnet, false, "zone == 'a'", "all()", true, calico.AssignmentManual
	req.Overrides = calico.PoolOverrides{IPIPMode: &never, VXLANMode: &cross, NATOutgoing: &no, NodeSelector: &sel, NamespaceSelector: &ns,
		AllowedUses: []calico.AllowedUse{calico.UseWorkload}, DisableBGPExport: &yes, AssignmentMode: &manual, Labels: map[string]string{"team": "net"}}
	p, err = calico.Plan(ctx, e.cl, req)
	require.NoError(t, err)
	got = p.NewPool.Spec
	assert.Equal(t, []any{never, cross, no, sel, ns, []calico.AllowedUse{calico.UseWorkload}, yes, manual},
		[]any{got.IPIPMode, got.VXLANMode, got.NATOutgoing, got.NodeSelector, got.NamespaceSelector, got.AllowedUses, got.DisableBGPExport, got.AssignmentMode})
	assert.Equal(t, map[string]string{"team": "net"}, p.NewPool.Labels)

	req = request()
	req.ClusterCIDR = ""
	p, err = calico.Plan(ctx, e.cl, req)
	require.NoError(t, err)
	assert.Contains(t, p.Warnings, noClusterCIDR)

	pool, err := e.pools.Get(ctx, oldPoolName)
	require.NoError(t, err)
	pool.Spec.NodeSelector = calico.DisabledNodeSelector
	_, err = e.pools.Update(ctx, pool, calico.WriteOptions{})
	require.NoError(t, err)
	p, err = calico.Plan(ctx, e.cl, request())
	require.NoError(t, err)
	assert.Equal(t, "all()", p.NewPool.Spec.NodeSelector)
}

// TestPlanRefusesANewNameTakenByAPoolOfAnotherCIDR: a pool that already has
// the new name is taken for the new pool only when its CIDR is the new one
// (a rerun); another CIDR under that name is refused, naming the field and
// both CIDRs, before anything is planned.
func TestPlanRefusesANewNameTakenByAPoolOfAnotherCIDR(t *testing.T) {
	ctx := context.Background()
	q := newQuiet(t, nil)
	_, err := q.pools.Create(ctx, calico.IPPool{Name: newPoolName, Spec: calico.PoolSpec{CIDR: "10.21.0.0/16"}}, calico.WriteOptions{})
	require.NoError(t, err)
	_, err = calico.Plan(ctx, q.cl, request())
	var fe *calico.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, []string{newPoolName, "metadata.name", newPoolName}, []string{fe.Pool, fe.Field, fe.Value})
	assert.Equal(t, calico.RuleName, fe.Rule)
	assert.Contains(t, fe.Reason, "exists with cidr 10.21.0.0/16, not "+newCIDR)
}

// TestPlanWarnsOfBadPodIPsAndBlocksStaticPods: a pod whose IP cannot be
// parsed is named in a warning (it is not counted as moved or left); a
// static pod in the old pool blocks the plan, with the node whose manifest
// must change.
func TestPlanWarnsOfBadPodIPsAndBlocksStaticPods(t *testing.T) {
	ctx := context.Background()
	onA := func(p *corev1.Pod) { p.Spec.NodeName = "node-a" }
	q := newQuiet(t, []runtime.Object{
		podWithIP("default", "broken", "not-an-ip", nil, onA),
		podWithIP("kube-system", "etcd-node-a", "10.233.64.10", ctrl("Node", "v1", "node-a", "n1"), onA),
	})
	p, err := calico.Plan(ctx, q.cl, request())
	require.NoError(t, err)
	assert.Contains(t, p.Warnings, `unparsable pod IP default/broken: "not-an-ip"`)
	require.Len(t, p.Blocked, 1)
	assert.Equal(t, "kube-system/etcd-node-a", p.Blocked[0].Pod.String())
	assert.Equal(t, "static (mirror) pod: change or move the manifest on node node-a and restart its kubelet", p.Blocked[0].Reason)
	assert.False(t, p.Blocked[0].Pod.Owner.Rollable())
}
