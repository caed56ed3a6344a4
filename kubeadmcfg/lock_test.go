package kubeadmcfg

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/internal/kubetest"
)

// A lock lost after the first edit stops Apply before the second; a dry
// run takes no lock.
func TestApplyStopsWhenTheLockIsLost(t *testing.T) {
	ctx := context.Background()
	f, s := liveStoryOne(t)
	p := bothChanges(t, s)
	lock := &kubetest.Lock{ChecksLeft: 1}
	res, err := Apply(ctx, f, p, ApplyOptions{Lock: lock})
	require.ErrorIs(t, err, kubetest.ErrLockLost)
	assert.ErrorContains(t, err, "not editing ConfigMap "+p.ConfigMapEdits[1].Ref.String())
	assert.Len(t, res.Events, 1)
	assert.Equal(t, 1, f.updates)
	assert.False(t, lock.Held(), "released")

	_, err = Apply(ctx, f, p, ApplyOptions{DryRun: DryRunServer, Lock: &kubetest.Lock{ChecksLeft: 0}})
	require.NoError(t, err, "a dry run neither takes nor checks the lock")
	res, err = Apply(ctx, f, p, ApplyOptions{Lock: &kubetest.Lock{ChecksLeft: -1}})
	require.NoError(t, err)
	assert.Len(t, res.Events, 3)
}
