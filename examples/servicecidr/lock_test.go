package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/internal/lease"
)

// add --apply and apply --apply hold the Lease cidrshift-servicecidr: while
// another run holds it they are refused before any write, naming the
// holder; --no-lock takes none.
func TestWritesRefusedWhileTheLeaseIsHeld(t *testing.T) {
	cl := story3(t)
	other, err := lease.New(cl.Kube, lease.Options{Name: lease.ScopeServiceCIDR, Identity: "bob@desk/7"})
	require.NoError(t, err)
	release, err := other.Lock(context.Background())
	require.NoError(t, err)
	defer release()

	code, _, errs := runCLI(t, cl, "add", "--to", "172.24.0.0/15", "--name", "new", "--apply")
	assert.Equal(t, 1, code, errs)
	assert.Contains(t, errs, "lease kube-system/cidrshift-servicecidr is held by bob@desk/7 until")
	_, ok := cl.ServiceCIDR("new")
	assert.False(t, ok, "nothing was created")

	code, _, errs = runCLI(t, cl, "apply", "--to", "172.24.0.0/15", "--apply", "--journal", filepath.Join(t.TempDir(), "j"))
	assert.Equal(t, 1, code, errs)
	assert.Contains(t, errs, "is held by bob@desk/7")
	assert.Empty(t, cl.Writes())

	code, out, errs := runCLI(t, cl, "add", "--to", "172.24.0.0/15", "--name", "new", "--apply", "--no-lock")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "created ServiceCIDR new")
}
