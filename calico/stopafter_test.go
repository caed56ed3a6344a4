package calico_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/calico"
)

// TestApplyStopAfterPhases runs one swap in three calls, stopped after the
// old pool is disabled and after verification, and resumed from the journal
// with the same plan each time.
func TestApplyStopAfterPhases(t *testing.T) {
	e := newEnv(t, envOptions{api: calico.APICRDV1})
	ctx := context.Background()
	req := request()
	req.AllowDeleteBarePods = true
	plan, err := calico.Plan(ctx, e.cl, req)
	require.NoError(t, err)
	dir := t.TempDir()
	before := e.podsIn(oldCIDR)
	require.NotEmpty(t, before)

	opts := fastOptions(dir)
	opts.OnEvent = e.onEvent
	opts.StopAfter = calico.PhaseDisableOldPool
	res, err := calico.Apply(ctx, e.cl, plan, opts)
	require.NoError(t, err)
	assert.False(t, res.Done)
	assert.Equal(t, calico.PhaseDisableOldPool, res.Phase)
	assert.True(t, res.CreatedPool)
	assert.True(t, res.DisabledPool)
	assert.Empty(t, res.Restarted, "no pod moves before the stop")
	old, err := e.pools.Get(ctx, oldPoolName)
	require.NoError(t, err)
	assert.True(t, old.Spec.Disabled)
	_, err = e.pools.Get(ctx, newPoolName)
	require.NoError(t, err)
	assert.ElementsMatch(t, before, e.podsIn(oldCIDR), "pods stay on the old pool")

	// Again with the same stop: nothing new happens.
	res, err = calico.Apply(ctx, e.cl, plan, opts)
	require.NoError(t, err)
	assert.True(t, res.Resumed)
	assert.False(t, res.Done)
	assert.False(t, res.CreatedPool)
	assert.Empty(t, res.Restarted)

	opts.StopAfter = calico.PhaseVerify
	res, err = calico.Apply(ctx, e.cl, plan, opts)
	require.NoError(t, err)
	assert.False(t, res.Done)
	assert.Equal(t, calico.PhaseVerify, res.Phase)
	assert.NotEmpty(t, res.Restarted)
	assert.False(t, res.OldPoolDeleted)
	e.waitSettled(newCIDR)
	assert.Empty(t, e.podsIn(oldCIDR))
	_, err = e.pools.Get(ctx, oldPoolName)
	require.NoError(t, err, "the old pool stays until the last call")

	// A run already past the phase asked for changes nothing.
	opts.StopAfter = calico.PhaseDisableOldPool
	res, err = calico.Apply(ctx, e.cl, plan, opts)
	require.NoError(t, err)
	assert.False(t, res.Done)
	assert.False(t, res.OldPoolDeleted)
	_, err = e.pools.Get(ctx, oldPoolName)
	require.NoError(t, err)

	opts.StopAfter = ""
	res, err = calico.Apply(ctx, e.cl, plan, opts)
	require.NoError(t, err)
	assert.True(t, res.Done)
	assert.True(t, res.OldPoolDeleted)
	_, err = e.pools.Get(ctx, oldPoolName)
	assert.ErrorIs(t, err, calico.ErrPoolNotFound)
}

func TestApplyStopAfterUnknownPhase(t *testing.T) {
	e := newEnv(t, envOptions{api: calico.APICRDV1})
	plan, err := calico.Plan(context.Background(), e.cl, request())
	require.NoError(t, err)
	opts := fastOptions(t.TempDir())
	opts.StopAfter = "disable"
	_, err = calico.Apply(context.Background(), e.cl, plan, opts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `StopAfter "disable"`)
}
