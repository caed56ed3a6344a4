package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/internal/lease"
)

// apply --apply holds the Lease cidrshift-calico-pool: while another swap
// holds it the run is refused before any write, naming the holder.
func TestApplyRefusedWhileTheLeaseIsHeld(t *testing.T) {
	conn, cl := fakeCluster(t)
	ctx := context.Background()
	other, err := lease.New(cl.Kube, lease.Options{Name: lease.ScopeCalicoPool, Identity: "bob@desk/7"})
	require.NoError(t, err)
	release, err := other.Lock(ctx)
	require.NoError(t, err)
	defer release()
	args := []string{"apply", "--apply", "--journal", filepath.Join(t.TempDir(), "j"), "--old-pool", "default-ipv4-ippool",
		"--new-cidr", "10.20.0.0/16", "--cluster-cidr", "10.20.0.0/16", "--service-cidr", "10.233.0.0/18"}
	code, _, errOut := exec(t, conn, args...)
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, errOut, "taking the lock: lease kube-system/cidrshift-calico-pool is held by bob@desk/7 until")
	_, err = cl.Pools.Get(ctx, "pool-10-20-0-0-16")
	assert.ErrorIs(t, err, calico.ErrPoolNotFound, "nothing was written")

	code, _, errOut = exec(t, nil, append(args, "--lock-duration", "90ms")...)
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, "--lock-duration 90ms")
}
