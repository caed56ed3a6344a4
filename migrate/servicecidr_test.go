package migrate

import (
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

func scCluster(t *testing.T) (*servicecidrtest.Cluster, *servicecidr.Client) {
	t.Helper()
	svc := func(ns, name, ip string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	}
	return scConnect(t, servicecidrtest.Options{
		ServiceCIDRs:   []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"100.64.0.0/13"}}},
		APIServerRange: "100.64.0.0/13",
		Services:       []*corev1.Service{svc("default", "kubernetes", "100.64.0.1"), svc("shop", "web", "100.64.3.7")},
	})
}

// A reviewed plan is refused once a Service was added to the old range
// after the review: the move-services step would now change more.
func TestServiceCIDRPlanGoesStaleWhenAServiceIsAdded(t *testing.T) {
	cl, c := scCluster(t)
	m, err := ServiceCIDR(ServiceCIDROptions{Client: c, To: []netip.Prefix{netip.MustParsePrefix("172.24.0.0/15")}, PollInterval: time.Millisecond})
	require.NoError(t, err)
	r := Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}
	p, err := r.Plan(t.Context(), m)
	require.NoError(t, err)

	_, err = cl.AddService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "late"},
		Spec: corev1.ServiceSpec{ClusterIP: "100.64.9.9", Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}})
	require.NoError(t, err)
	writes := len(cl.Writes())
	_, err = r.ApplyPlan(t.Context(), m, p)
	require.ErrorIs(t, err, ErrStalePlan)
	assert.Contains(t, err.Error(), "move-services")
	assert.Contains(t, err.Error(), "shop/late")
	assert.Equal(t, writes, len(cl.Writes()), "a stale plan writes nothing")

	// Planned again, it is carried out up to the operator step.
	p, err = r.Plan(t.Context(), m)
	require.NoError(t, err)
	rep, err := r.ApplyPlan(t.Context(), m, p)
	require.NoError(t, err)
	require.True(t, rep.Paused())
	late, ok := cl.Service("shop", "late")
	require.True(t, ok)
	assert.Equal(t, "172.24.9.9", late.Spec.ClusterIP)
}

func TestServiceCIDROptionsRefusedBeforeTheCluster(t *testing.T) {
	_, c := scCluster(t)
	to := []netip.Prefix{netip.MustParsePrefix("172.24.0.0/15")}
	for _, tc := range []struct {
		o    ServiceCIDROptions
		want string
	}{
		{ServiceCIDROptions{To: to}, "Client is required"},
		{ServiceCIDROptions{Client: c}, "--to is required"},
		{ServiceCIDROptions{Client: c, To: to, Out: "/tmp/x"}, "--out /tmp/x needs --manifests"},
		{ServiceCIDROptions{Client: c, To: to, Manifests: "/nonexistent-cidrshift"}, "--manifests /nonexistent-cidrshift: not a directory"},
		{ServiceCIDROptions{Client: c, To: to, DrainTimeout: -time.Second}, "--drain-timeout -1s"},
	} {
		_, err := ServiceCIDR(tc.o)
		require.ErrorIs(t, err, ErrInvalidInput, tc.want)
		assert.Contains(t, err.Error(), tc.want)
	}
	m, err := ServiceCIDR(ServiceCIDROptions{Client: c, To: []netip.Prefix{netip.MustParsePrefix("100.64.128.0/17")}})
	require.NoError(t, err)
	_, err = (&Runner{}).Run(t.Context(), m)
	require.ErrorIs(t, err, ErrInvalidInput)
	assert.Contains(t, err.Error(), "--to 100.64.128.0/17 overlaps --from 100.64.0.0/13")
}

// A new Service range that kubeadm's podSubnet overlaps is refused by the
// preflight, before the first write: the kubeadm step's plan would carry a
// layout kubeadmcfg.Apply refuses, and before it, steps 2 on would have
// written the new ServiceCIDR and moved Services.
func TestServiceCIDRPreflightRefusesAKubeadmLayoutTheComponentsRefuse(t *testing.T) {
	cl, c := scCluster(t)
	_, err := cl.Kube.CoreV1().ConfigMaps("kube-system").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
		Data: map[string]string{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 172.25.0.0/16\n  serviceSubnet: 100.64.0.0/13\n"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	writes := len(cl.Writes())
	m, err := ServiceCIDR(ServiceCIDROptions{Client: c, To: []netip.Prefix{netip.MustParsePrefix("172.24.0.0/15")}, PollInterval: time.Millisecond})
	require.NoError(t, err)
	_, err = (&Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
	require.ErrorIs(t, err, ErrInvalidInput)
	assert.Contains(t, err.Error(), "the kubeadm ConfigMaps set to serviceSubnet 172.24.0.0/15 would hold a layout the components refuse")
	assert.Equal(t, writes, len(cl.Writes()), "nothing written")
}
