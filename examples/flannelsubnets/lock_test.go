package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/internal/lease"
)

// --apply holds the Lease cidrshift-flannel when a cluster is at hand: while
// another run holds it, a kube-mode set-network and an etcd-mode move (with
// a kubeconfig) are refused before any write, naming the holder.
func TestApplyRefusedWhileTheLeaseIsHeld(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-cfg", Namespace: "kube-flannel", UID: "u1", ResourceVersion: "7"},
		Data: map[string]string{"net-conf.json": `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`}}
	w := storyWorld(t)
	require.NoError(t, w.kube.Tracker().Add(cm))
	other, err := lease.New(w.kube, lease.Options{Name: lease.ScopeFlannel, Identity: "bob@desk/7"})
	require.NoError(t, err)
	release, err := other.Lock(context.Background())
	require.NoError(t, err)
	defer release()

	code, _, stderr := w.run(t, "--kube-subnet-mgr", "set-network", "10.0.0.0/8", "--apply")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "lease kube-system/cidrshift-flannel is held by bob@desk/7 until")
	got, err := w.kube.CoreV1().ConfigMaps("kube-flannel").Get(context.Background(), "kube-flannel-cfg", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, got.Data["net-conf.json"], "10.244.0.0/16", "not written")

	code, _, stderr = w.run(t, "--kubeconfig", "kc", "move", "10.99.1.0-24", "--apply")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "is held by bob@desk/7")
	assert.True(t, w.has(t, pfx+"/subnets/10.99.1.0-24"), "the lease was not moved")
}
