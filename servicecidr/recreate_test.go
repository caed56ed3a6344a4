package servicecidr_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/servicecidr"
)

// TestRecreatedSetsTheNewIPsOrKeepsTheLiveOnes: the Service to create gets
// the new ClusterIPs, the first as clusterIP; with none given it keeps the
// live ones. Server-set metadata and the LoadBalancer cleanup finalizer go.
func TestRecreatedSetsTheNewIPsOrKeepsTheLiveOnes(t *testing.T) {
	live := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u1", ResourceVersion: "7",
			Finalizers: []string{servicecidr.LoadBalancerCleanupFinalizer, "example.com/keep"}},
		Spec: corev1.ServiceSpec{ClusterIP: "100.64.3.7", ClusterIPs: []string{"100.64.3.7", "fd00:64::3:7"}},
	}
	got := servicecidr.Recreated(live, []netip.Addr{netip.MustParseAddr("172.24.3.7"), netip.MustParseAddr("fd00:24::3:7")})
	assert.Equal(t, "172.24.3.7", got.Spec.ClusterIP)
	assert.Equal(t, []string{"172.24.3.7", "fd00:24::3:7"}, got.Spec.ClusterIPs)
	assert.Equal(t, []string{"example.com/keep"}, got.Finalizers)
	assert.Empty(t, got.UID)
	assert.Empty(t, got.ResourceVersion)

	got = servicecidr.Recreated(live, nil)
	assert.Equal(t, "100.64.3.7", got.Spec.ClusterIP)
	assert.Equal(t, []string{"100.64.3.7", "fd00:64::3:7"}, got.Spec.ClusterIPs)
}
