package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/internal/lease"
)

// set --apply holds the Lease cidrshift-kubeadmcfg: while another run holds
// it, no ConfigMap is written and the holder is named; once it is released
// the same command updates the ConfigMaps.
func TestSetApplyRefusedWhileTheLeaseIsHeld(t *testing.T) {
	cs, updates := liveCluster(t)
	live := func(string, string) (kubernetes.Interface, error) { return cs, nil }
	other, err := lease.New(cs, lease.Options{Name: lease.ScopeKubeadmConfig, Identity: "bob@desk/7"})
	require.NoError(t, err)
	release, err := other.Lock(context.Background())
	require.NoError(t, err)
	args := []string{"set", "--pod-subnet", "10.20.0.0/16", "--manifests", td + "/manifests", "--apply"}

	code, _, errOut := runT(t, live, args...)
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, errOut, "lease kube-system/cidrshift-kubeadmcfg is held by bob@desk/7 until")
	assert.Equal(t, 0, *updates, "no ConfigMap written")

	release()
	code, _, errOut = runT(t, live, args...)
	require.Equal(t, 0, code, errOut)
	assert.Positive(t, *updates)
}
