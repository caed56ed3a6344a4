package calico_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
