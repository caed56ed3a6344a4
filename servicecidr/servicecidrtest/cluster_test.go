package servicecidrtest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	networkingv1beta1 "k8s.io/api/networking/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

var ctx = context.Background()

func svc(ns, name, ip string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
}

func base(t *testing.T, o Options) *Cluster {
	t.Helper()
	if o.ServiceCIDRs == nil {
		o.ServiceCIDRs = []InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}}
	}
	c, err := New(o)
	require.NoError(t, err)
	return c
}

func TestServiceRulesAreEnforced(t *testing.T) {
	c := base(t, Options{Services: []*corev1.Service{svc("a", "web", "10.96.0.20")}})
	s := c.Kube.CoreV1().Services("a")

	live, err := s.Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotEmpty(t, live.UID, "the stock fake sets no UID; this one does")
	assert.NotEmpty(t, live.ResourceVersion)

	// spec.clusterIP is immutable.
	moved := live.DeepCopy()
	moved.Spec.ClusterIP, moved.Spec.ClusterIPs = "10.96.0.21", []string{"10.96.0.21"}
	_, err = s.Update(ctx, moved, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsInvalid(err), "%v", err)
	assert.ErrorContains(t, err, "spec.clusterIPs[0]: Invalid value: [\"10.96.0.21\"]: may not change once set")

	// A stale resourceVersion is a conflict; a fresh one works and bumps it.
	stale := live.DeepCopy()
	stale.Labels = map[string]string{"x": "y"}
	updated, err := s.Update(ctx, stale, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, live.ResourceVersion, updated.ResourceVersion)
	_, err = s.Update(ctx, stale, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsConflict(err), "%v", err)

	// Create with a resourceVersion is refused.
	withRV := svc("a", "rv", "10.96.0.30")
	withRV.ResourceVersion = "5"
	_, err = s.Create(ctx, withRV, metav1.CreateOptions{})
	assert.ErrorContains(t, err, "resourceVersion should not be set on objects to be created")

	// An address outside every ServiceCIDR.
	_, err = s.Create(ctx, svc("a", "out", "172.24.0.10"), metav1.CreateOptions{})
	assert.True(t, apierrors.IsInvalid(err), "%v", err)
	assert.ErrorContains(t, err, "failed to allocate IP 172.24.0.10: the provided IP (172.24.0.10) is not in the valid range. The range of valid IPs is 10.96.0.0/16")

	// The network and broadcast addresses are never allocated.
	_, err = s.Create(ctx, svc("a", "bcast", "10.96.255.255"), metav1.CreateOptions{})
	assert.ErrorContains(t, err, "is not in the valid range")

	// An address already taken.
	_, err = s.Create(ctx, svc("a", "dup", "10.96.0.20"), metav1.CreateOptions{})
	assert.ErrorContains(t, err, "failed to allocate IP 10.96.0.20: provided IP is already allocated")

	// Same name.
	_, err = s.Create(ctx, svc("a", "web", "10.96.0.40"), metav1.CreateOptions{})
	assert.True(t, apierrors.IsAlreadyExists(err), "%v", err)

	// Delete preconditions.
	uid := types.UID("other")
	err = s.Delete(ctx, "web", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	assert.True(t, apierrors.IsConflict(err), "%v", err)
	assert.ErrorContains(t, err, "Precondition failed: UID in precondition: other")

	// Dry runs store nothing and allocate nothing.
	_, err = s.Create(ctx, svc("a", "dry", "10.96.0.50"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, "web", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}))
	_, ok := c.Service("a", "dry")
	assert.False(t, ok)
	_, ok = c.Service("a", "web")
	assert.True(t, ok)
	assert.NotContains(t, c.IPAddresses(), "10.96.0.50")

	// Deleting releases the address.
	require.NoError(t, s.Delete(ctx, "web", metav1.DeleteOptions{}))
	assert.Empty(t, c.IPAddresses())
	_, err = s.Create(ctx, svc("a", "web2", "10.96.0.20"), metav1.CreateOptions{})
	require.NoError(t, err)

	// Dynamic allocation; patch is not modelled and says so.
	dyn, err := s.Create(ctx, svc("a", "dyn", ""), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "10.96.0.1", dyn.Spec.ClusterIP)
	_, err = s.Patch(ctx, "dyn", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
	assert.ErrorContains(t, err, "not modelled")
}

func TestNodePortsAreAllocated(t *testing.T) {
	np := svc("a", "np", "10.96.0.5")
	np.Spec.Type = corev1.ServiceTypeNodePort
	np.Spec.Ports[0].NodePort = 30080
	c := base(t, Options{Services: []*corev1.Service{np}})
	other := svc("a", "other", "10.96.0.6")
	other.Spec.Type = corev1.ServiceTypeNodePort
	other.Spec.Ports[0].NodePort = 30080
	_, err := c.Kube.CoreV1().Services("a").Create(ctx, other, metav1.CreateOptions{})
	assert.ErrorContains(t, err, "spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated")
	other.Spec.Ports[0].NodePort = 0
	got, err := c.Kube.CoreV1().Services("a").Create(ctx, other, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(30000), got.Spec.Ports[0].NodePort)
}

func TestServiceCIDRRulesOnEveryVersion(t *testing.T) {
	for _, v := range []string{"v1", "v1beta1", "v1alpha1"} {
		t.Run(v, func(t *testing.T) {
			c := base(t, Options{Version: v, ControllerDelay: 1})
			gvr := schema.GroupVersionResource{Group: "networking.k8s.io", Version: v, Resource: "servicecidrs"}
			r := c.Dynamic.Resource(gvr)
			obj := func(name string, cidrs ...any) *unstructured.Unstructured {
				return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "networking.k8s.io/" + v, "kind": "ServiceCIDR",
					"metadata": map[string]any{"name": name}, "spec": map[string]any{"cidrs": cidrs}}}
			}
			_, err := r.Create(ctx, obj("bad", "10.100.0.1/16"), metav1.CreateOptions{})
			assert.ErrorContains(t, err, `spec.cidrs[0]: Invalid value: "10.100.0.1/16": must be in canonical form ("10.100.0.0/16")`)
			_, err = r.Create(ctx, obj("bad", "10.100.0.0/16", "10.101.0.0/16"), metav1.CreateOptions{})
			assert.ErrorContains(t, err, "may specify no more than one IP for each IP family")
			_, err = r.Create(ctx, obj("bad"), metav1.CreateOptions{})
			assert.ErrorContains(t, err, "at least one CIDR required")

			created, err := r.Create(ctx, obj("new", "10.100.0.0/16"), metav1.CreateOptions{})
			require.NoError(t, err)
			_, found, _ := unstructured.NestedSlice(created.Object, "status", "conditions")
			assert.False(t, found, "Ready comes later, from the controller")
			c.Reconcile()
			st, _ := c.ServiceCIDR("new")
			assert.True(t, st.Ready)
			assert.Equal(t, []string{finalizer}, st.Finalizers)

			live, err := r.Get(ctx, "new", metav1.GetOptions{})
			require.NoError(t, err)
			require.NoError(t, unstructured.SetNestedStringSlice(live.Object, []string{"10.200.0.0/16"}, "spec", "cidrs"))
			_, err = r.Update(ctx, live, metav1.UpdateOptions{})
			assert.ErrorContains(t, err, "spec.cidrs[0]: Invalid value: \"10.200.0.0/16\": field is immutable")
			live, _ = r.Get(ctx, "new", metav1.GetOptions{})
			require.NoError(t, unstructured.SetNestedStringSlice(live.Object, []string{"10.100.0.0/16", "fd00::/108"}, "spec", "cidrs"))
			_, err = r.Update(ctx, live, metav1.UpdateOptions{})
			require.NoError(t, err, "adding the second family is allowed")

			// Typed clients see the same objects (no typed v1alpha1 exists).
			switch v {
			case "v1":
				l, err := c.Kube.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
				require.NoError(t, err)
				assert.Len(t, l.Items, 2)
			case "v1beta1":
				l, err := c.Kube.NetworkingV1beta1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
				require.NoError(t, err)
				assert.Len(t, l.Items, 2)
				_, err = c.Kube.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
				assert.True(t, apierrors.IsNotFound(err), "v1 is not served: %v", err)
			case "v1alpha1":
				_, err := c.Kube.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
				assert.True(t, apierrors.IsNotFound(err), "%v", err)
				assert.ErrorContains(t, err, "the server could not find the requested resource (networking.k8s.io/v1, Resource=servicecidrs)")
			}
		})
	}
}

func TestTerminatingServiceCIDRKeepsItsAddresses(t *testing.T) {
	c := base(t, Options{Services: []*corev1.Service{svc("a", "web", "10.96.0.20")},
		ServiceCIDRs: []InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}, {Name: "new", CIDRs: []string{"10.100.0.0/16"}}}})
	require.NoError(t, c.Kube.NetworkingV1().ServiceCIDRs().Delete(ctx, "kubernetes", metav1.DeleteOptions{}))
	c.Reconcile()
	sc, err := c.Kube.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotNil(t, sc.DeletionTimestamp)
	require.Len(t, sc.Status.Conditions, 1)
	assert.Equal(t, "Terminating", sc.Status.Conditions[0].Reason)
	st, ok := c.ServiceCIDR("kubernetes")
	require.True(t, ok)
	assert.True(t, st.Terminating)
	assert.False(t, st.Ready)

	// A Terminating range gives no new addresses.
	_, err = c.Kube.CoreV1().Services("a").Create(ctx, svc("a", "more", "10.96.0.21"), metav1.CreateOptions{})
	assert.ErrorContains(t, err, "failed to allocate IP 10.96.0.21: the provided network does not match the current range")

	// Once the last address moves, it goes.
	require.NoError(t, c.Kube.CoreV1().Services("a").Delete(ctx, "web", metav1.DeleteOptions{}))
	c.Reconcile()
	_, ok = c.ServiceCIDR("kubernetes")
	assert.False(t, ok)
}

func TestDualWriteRefusesDynamicAllocation(t *testing.T) {
	c := base(t, Options{GitVersion: "v1.33.2", DualWrite: true, Services: []*corev1.Service{svc("a", "web", "10.96.0.20")},
		ServiceCIDRs: []InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}, {Name: "new", CIDRs: []string{"10.100.0.0/16"}}}})
	require.NoError(t, c.Kube.NetworkingV1().ServiceCIDRs().Delete(ctx, "kubernetes", metav1.DeleteOptions{}))
	_, err := c.Kube.CoreV1().Services("a").Create(ctx, svc("a", "dyn", ""), metav1.CreateOptions{})
	assert.True(t, apierrors.IsInternalError(err), "%v", err)
	assert.ErrorContains(t, err, "failed to allocate a serviceIP: the provided network does not match the current range")
	_, err = c.Kube.CoreV1().Services("a").Create(ctx, svc("a", "explicit", "10.100.0.5"), metav1.CreateOptions{})
	assert.NoError(t, err, "an explicit address in the new range avoids the dual-write path")
}

// TestDualWriteRefusesTheNewFlagRange is what the e2e suite saw on 1.33.13:
// kube-apiserver restarted with the new range alone refuses every address of
// it, default/kubernetes's included, until the dual-write is off.
func TestDualWriteRefusesTheNewFlagRange(t *testing.T) {
	c := base(t, Options{GitVersion: "v1.33.13", DualWrite: true, APIServerRange: "10.96.0.0/16", Services: []*corev1.Service{svc("default", "kubernetes", "10.96.0.1")},
		ServiceCIDRs: []InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}, {Name: "new", CIDRs: []string{"10.100.0.0/16"}}}})
	_, err := c.Kube.CoreV1().Services("a").Create(ctx, svc("a", "before", "10.100.0.5"), metav1.CreateOptions{})
	require.NoError(t, err, "with the old flag, an address of the new range is outside the legacy allocator and passes")
	require.NoError(t, c.SetAPIServerRange("10.100.0.0/16"))
	_, err = c.Kube.CoreV1().Services("a").Create(ctx, svc("a", "after", "10.100.0.6"), metav1.CreateOptions{})
	require.True(t, apierrors.IsInvalid(err), "%v", err)
	assert.ErrorContains(t, err, "failed to allocate IP 10.100.0.6: the provided range does not match the current range")
	require.NoError(t, c.Kube.CoreV1().Services("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{}))
	c.Reconcile()
	_, ok := c.Service("default", "kubernetes")
	assert.False(t, ok, "kube-apiserver cannot recreate default/kubernetes at 10.100.0.1 either")

	c.SetDualWrite(false)
	_, err = c.Kube.CoreV1().Services("a").Create(ctx, svc("a", "after", "10.100.0.6"), metav1.CreateOptions{})
	require.NoError(t, err, "restarted with DisableAllocatorDualWrite=true")
	c.Reconcile()
	k, ok := c.Service("default", "kubernetes")
	require.True(t, ok)
	assert.Equal(t, "10.100.0.1", k.Spec.ClusterIP)
}

func TestIPAddressesOnEveryVersion(t *testing.T) {
	for _, v := range []string{"v1", "v1beta1", "v1alpha1"} {
		c := base(t, Options{Version: v, Services: []*corev1.Service{svc("a", "web", "10.96.0.20")}})
		switch v {
		case "v1":
			l, err := c.Kube.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			require.Len(t, l.Items, 1)
			assert.Equal(t, networkingv1.ParentReference{Resource: "services", Namespace: "a", Name: "web"}, *l.Items[0].Spec.ParentRef)
		case "v1beta1":
			l, err := c.Kube.NetworkingV1beta1().IPAddresses().List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			require.Len(t, l.Items, 1)
			assert.Equal(t, networkingv1beta1.ParentReference{Resource: "services", Namespace: "a", Name: "web"}, *l.Items[0].Spec.ParentRef)
		case "v1alpha1":
			l, err := c.Dynamic.Resource(schema.GroupVersionResource{Group: "networking.k8s.io", Version: v, Resource: "ipaddresses"}).List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			require.Len(t, l.Items, 1)
			assert.Equal(t, "10.96.0.20", l.Items[0].GetName())
			assert.Equal(t, "ipallocator.k8s.io", l.Items[0].GetLabels()[managedByLabel])
		}
	}
}

func TestKillAndLoseResponse(t *testing.T) {
	c := base(t, Options{Services: []*corev1.Service{svc("a", "web", "10.96.0.20")}})
	killed := 0
	c.KillAfter(1, func() { killed++ })
	_, err := c.Kube.CoreV1().Services("a").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	err = c.Kube.CoreV1().Services("a").Delete(ctx, "web", metav1.DeleteOptions{})
	assert.ErrorIs(t, err, ErrKilled)
	_, ok := c.Service("a", "web")
	assert.True(t, ok, "a killed client's request never arrived")
	_, err = c.Kube.CoreV1().Services("a").Get(ctx, "web", metav1.GetOptions{})
	assert.ErrorIs(t, err, ErrKilled)
	assert.Equal(t, 1, killed)

	c.Revive()
	c.LoseResponseAfter(0, nil)
	err = c.Kube.CoreV1().Services("a").Delete(ctx, "web", metav1.DeleteOptions{})
	assert.ErrorIs(t, err, ErrKilled)
	_, ok = c.Service("a", "web")
	assert.False(t, ok, "the server processed the delete; only the answer was lost")
	c.Revive()
	assert.Equal(t, []string{"delete services a/web"}, c.Writes())
}

func TestKubeAPIServerRecreatesItsObjects(t *testing.T) {
	c := base(t, Options{APIServerRange: "10.96.0.0/16", Services: []*corev1.Service{svc("default", "kubernetes", "10.96.0.1")}})
	require.NoError(t, c.Kube.CoreV1().Services("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{}))
	c.Reconcile()
	k, ok := c.Service("default", "kubernetes")
	require.True(t, ok)
	assert.Equal(t, "10.96.0.1", k.Spec.ClusterIP)
}

func TestHoldKubernetesServiceModelsASlowKubeAPIServer(t *testing.T) {
	c := base(t, Options{APIServerRange: "10.96.0.0/16", Services: []*corev1.Service{svc("default", "kubernetes", "10.96.0.1")}})
	c.HoldKubernetesService(true)
	require.NoError(t, c.Kube.CoreV1().Services("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{}))
	c.Reconcile()
	_, err := c.Kube.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "held: not recreated, however many requests pass (%v)", err)
	_, ok := c.Service("default", "kubernetes")
	assert.False(t, ok)

	c.HoldKubernetesService(false)
	_, err = c.Kube.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err, "released: the next request finds it recreated")
	k, ok := c.Service("default", "kubernetes")
	require.True(t, ok)
	assert.Equal(t, []string{"10.96.0.1"}, k.Spec.ClusterIPs)
}

func TestNewRefusesBadOptions(t *testing.T) {
	_, err := New(Options{Version: "v2"})
	assert.ErrorContains(t, err, `version "v2"`)
	_, err = New(Options{ServiceCIDRs: []InitialServiceCIDR{{Name: "x", CIDRs: []string{"10.0.0.1/8"}}}})
	assert.ErrorContains(t, err, "canonical form")
	_, err = New(Options{Services: []*corev1.Service{svc("a", "b", "10.0.0.1")}})
	assert.ErrorContains(t, err, "not in the valid range")
	_, err = New(Options{APIServerRange: "nope"})
	assert.ErrorContains(t, err, `API server range "nope"`)
}
