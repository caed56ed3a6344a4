package servicecidrtest

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Discovery reports the version asked for (v1.36.3 by default, a minor
// read from two parts as from three) and serves IPAddress only when its
// version is not "none".
func TestDiscoveryFollowsTheOptions(t *testing.T) {
	for _, tc := range []struct {
		git, wantGit, wantMinor string
	}{{"", "v1.36.3", "36"}, {"v1.33", "v1.33", "33"}} {
		c := base(t, Options{GitVersion: tc.git})
		v, err := c.Kube.Discovery().ServerVersion()
		require.NoError(t, err)
		assert.Equal(t, tc.wantGit, v.GitVersion)
		assert.Equal(t, tc.wantMinor, v.Minor, tc.git)
	}
	resources := func(o Options) []string {
		c := base(t, o)
		l, err := c.Kube.Discovery().ServerResourcesForGroupVersion("networking.k8s.io/v1")
		require.NoError(t, err)
		var names []string
		for _, r := range l.APIResources {
			names = append(names, r.Name)
		}
		return names
	}
	assert.Equal(t, []string{"servicecidrs", "ipaddresses"}, resources(Options{}))
	assert.Equal(t, []string{"servicecidrs"}, resources(Options{IPAddressVersion: "none"}))
}

// ControllerDelay and AllocatorDelay count requests, the one that made the
// change included: a ServiceCIDR created by request n is Ready from
// request n+ControllerDelay and hands out addresses from
// n+ControllerDelay+AllocatorDelay; one deleted by request n goes at
// n+ControllerDelay; default/kubernetes deleted by request n is back at
// n+ControllerDelay.
func TestControllersActAfterTheirDelay(t *testing.T) {
	c := base(t, Options{ControllerDelay: 2, AllocatorDelay: 3, APIServerRange: "10.96.0.0/16",
		Services: []*corev1.Service{svc("default", "kubernetes", "10.96.0.1")}})
	scs := c.Kube.NetworkingV1().ServiceCIDRs()
	get := func() { // one request
		_, err := scs.Get(ctx, "kubernetes", metav1.GetOptions{})
		require.NoError(t, err)
	}
	_, err := scs.Create(ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.100.0.0/16"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	n := c.Requests()
	ready := func() bool {
		st, ok := c.ServiceCIDR("new")
		require.True(t, ok)
		return st.Ready
	}
	assert.False(t, ready())
	get()
	assert.False(t, ready(), "request n+1")
	get()
	assert.True(t, ready(), "request n+2")
	for i, name := range []string{"a", "b", "c"} {
		_, err := c.Kube.CoreV1().Services("a").Create(ctx, svc("a", name, "10.100.0.10"), metav1.CreateOptions{})
		if c.Requests() < n+5 {
			assert.Error(t, err, "request n+%d: the allocator has not seen it yet", 3+i)
			continue
		}
		assert.NoError(t, err, "request n+5")
	}
	require.Equal(t, n+5, c.Requests())

	require.NoError(t, c.Kube.CoreV1().Services("a").Delete(ctx, "c", metav1.DeleteOptions{}))
	require.NoError(t, scs.Delete(ctx, "new", metav1.DeleteOptions{}))
	n = c.Requests()
	get()
	_, ok := c.ServiceCIDR("new")
	assert.True(t, ok, "request n+1: still there")
	get()
	_, ok = c.ServiceCIDR("new")
	assert.False(t, ok, "request n+2: gone")
	require.Equal(t, n+2, c.Requests())

	require.NoError(t, c.Kube.CoreV1().Services("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{}))
	n = c.Requests()
	get()
	_, ok = c.Service("default", "kubernetes")
	assert.False(t, ok, "request n+1")
	get()
	_, ok = c.Service("default", "kubernetes")
	assert.True(t, ok, "request n+2: recreated")
	require.Equal(t, n+2, c.Requests())
}

// The "kubernetes" ServiceCIDR that kube-apiserver recreates from its
// flag is a new object: the controller marks it Ready ControllerDelay
// requests after the request that recreated it, like any other.
func TestRecreatedKubernetesServiceCIDRWaitsForTheController(t *testing.T) {
	c := base(t, Options{ControllerDelay: 2, APIServerRange: "10.96.0.0/16",
		ServiceCIDRs: []InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}, {Name: "new", CIDRs: []string{"10.100.0.0/16"}}}})
	scs := c.Kube.NetworkingV1().ServiceCIDRs()
	require.NoError(t, scs.Delete(ctx, "kubernetes", metav1.DeleteOptions{}))
	n := c.Requests()
	var seen []string
	for c.Requests() < n+5 {
		_, err := scs.Get(ctx, "new", metav1.GetOptions{})
		require.NoError(t, err)
		st, ok := c.ServiceCIDR("kubernetes")
		seen = append(seen, fmt.Sprintf("n+%d %v %v %v", c.Requests()-n, ok, st.Terminating, st.Ready))
	}
	// Gone and recreated at n+2 (the delete's delay), Ready at n+4.
	assert.Equal(t, []string{"n+1 true true false", "n+2 true false false", "n+3 true false false", "n+4 true false true", "n+5 true false true"}, seen)
}

// kube-apiserver's reconciler recreates default/kubernetes after a
// delete; a cluster built without it stays without it.
func TestNoKubernetesServiceUnlessOneWasDeleted(t *testing.T) {
	c := base(t, Options{APIServerRange: "10.96.0.0/16"})
	for range 3 {
		_, err := c.Kube.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
	}
	_, ok := c.Service("default", "kubernetes")
	assert.False(t, ok)
}

// A Service is created as kube-apiserver would: in the request's
// namespace when it names none, named from generateName, with clusterIP
// and clusterIPs[0] equal, and an address of its first IP family; an
// update that leaves clusterIPs out keeps them. Every write takes a
// resourceVersion above the last.
func TestServiceCreateAndUpdateRules(t *testing.T) {
	c := base(t, Options{ServiceCIDRs: []InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16", "fd00:10:96::/108"}}}})
	s := c.Kube.CoreV1().Services("a")
	var rvs []int
	rv := func(svc *corev1.Service) {
		n, err := strconv.Atoi(svc.ResourceVersion)
		require.NoError(t, err, svc.ResourceVersion)
		if len(rvs) > 0 {
			assert.Greater(t, n, rvs[len(rvs)-1])
		}
		rvs = append(rvs, n)
	}

	plain := svc("", "plain", "")
	got, err := s.Create(ctx, plain, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "a", got.Namespace)
	_, ok := c.Service("a", "plain")
	assert.True(t, ok)
	rv(got)

	gen := svc("a", "", "")
	gen.GenerateName = "web-"
	got, err = s.Create(ctx, gen, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Regexp(t, `^web-[0-9]+$`, got.Name)
	rv(got)

	v6 := svc("a", "six", "")
	v6.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	got, err = s.Create(ctx, v6, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Regexp(t, `^fd00:10:96::`, got.Spec.ClusterIP)
	rv(got)

	mismatch := svc("a", "mismatch", "10.96.0.30")
	mismatch.Spec.ClusterIPs = []string{"10.96.0.31"}
	_, err = s.Create(ctx, mismatch, metav1.CreateOptions{})
	assert.ErrorContains(t, err, "must be equal to clusterIP")

	live, err := s.Get(ctx, "plain", metav1.GetOptions{})
	require.NoError(t, err)
	ips := live.Spec.ClusterIPs
	require.NotEmpty(t, ips)
	live.Spec.ClusterIP, live.Spec.ClusterIPs = "", nil
	live.Labels = map[string]string{"edited": "yes"}
	got, err = s.Update(ctx, live, metav1.UpdateOptions{})
	require.NoError(t, err, "an update without clusterIPs keeps them")
	assert.Equal(t, ips, got.Spec.ClusterIPs)
	rv(got)
}

// Without APIServerRange nothing recreates default/kubernetes.
func TestNoAPIServerRangeNoKubernetesService(t *testing.T) {
	c := base(t, Options{Services: []*corev1.Service{svc("default", "kubernetes", "10.96.0.1")}})
	require.NoError(t, c.Kube.CoreV1().Services("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{}))
	c.Reconcile()
	_, ok := c.Service("default", "kubernetes")
	assert.False(t, ok)
}

// A deleted ServiceCIDR whose addresses another ServiceCIDR of the same
// range also covers goes at once, as the service-cidr-controller lets it.
func TestSameRangeCoversADeletedServiceCIDR(t *testing.T) {
	c := base(t, Options{Services: []*corev1.Service{svc("a", "web", "10.96.0.20")},
		ServiceCIDRs: []InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}, {Name: "twin", CIDRs: []string{"10.96.0.0/16"}}}})
	require.NoError(t, c.Kube.NetworkingV1().ServiceCIDRs().Delete(ctx, "kubernetes", metav1.DeleteOptions{}))
	c.Reconcile()
	_, ok := c.ServiceCIDR("kubernetes")
	assert.False(t, ok)
}

// The dynamic ServiceCIDR client honours dryRun on create and update, and
// an update names the resourceVersion it read: a stale one is a conflict.
func TestDynamicServiceCIDRDryRunAndConflict(t *testing.T) {
	c := base(t, Options{})
	r := c.Dynamic.Resource(networkingv1.SchemeGroupVersion.WithResource("servicecidrs"))
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
		"metadata": map[string]any{"name": "new"}, "spec": map[string]any{"cidrs": []any{"10.100.0.0/16"}}}}
	_, err := r.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err)
	_, ok := c.ServiceCIDR("new")
	assert.False(t, ok, "a dry-run create stores nothing")

	_, err = r.Create(ctx, obj, metav1.CreateOptions{})
	require.NoError(t, err)
	live, err := r.Get(ctx, "new", metav1.GetOptions{})
	require.NoError(t, err)
	dual := live.DeepCopy()
	require.NoError(t, unstructured.SetNestedStringSlice(dual.Object, []string{"10.100.0.0/16", "fd00::/108"}, "spec", "cidrs"))
	_, err = r.Update(ctx, dual, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err)
	st, _ := c.ServiceCIDR("new")
	assert.Equal(t, []string{"10.100.0.0/16"}, st.CIDRs, "a dry-run update stores nothing")

	_, err = r.Update(ctx, dual, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = r.Update(ctx, dual, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsConflict(err), "the resourceVersion read before the last update: %v", err)
}

// NodePorts are taken as kube-apiserver takes them: in 30000-32767, the
// lowest free one when none is asked for, for a NodePort Service and a
// LoadBalancer (unless it turns them off), plus a healthCheckNodePort for
// a LoadBalancer with externalTrafficPolicy Local.
func TestNodePortRules(t *testing.T) {
	c := base(t, Options{})
	s := c.Kube.CoreV1().Services("a")
	typed := func(name string, tp corev1.ServiceType, port int32) *corev1.Service {
		v := svc("a", name, "")
		v.Spec.Type, v.Spec.Ports[0].NodePort = tp, port
		return v
	}
	for _, port := range []int32{29999, 32768} {
		_, err := s.Create(ctx, typed("out", corev1.ServiceTypeNodePort, port), metav1.CreateOptions{})
		assert.ErrorContains(t, err, "provided port is not in the valid range. The range of valid ports is 30000-32767", port)
	}
	for _, port := range []int32{30000, 32767} {
		got, err := s.Create(ctx, typed(fmt.Sprint("edge-", port), corev1.ServiceTypeNodePort, port), metav1.CreateOptions{})
		require.NoError(t, err, port)
		assert.Equal(t, port, got.Spec.Ports[0].NodePort)
	}
	got, err := s.Create(ctx, typed("lb", corev1.ServiceTypeLoadBalancer, 0), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(30001), got.Spec.Ports[0].NodePort, "the lowest free one")
	assert.Zero(t, got.Spec.HealthCheckNodePort)

	off := typed("lb-off", corev1.ServiceTypeLoadBalancer, 0)
	off.Spec.AllocateLoadBalancerNodePorts = ptr.To(false)
	got, err = s.Create(ctx, off, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Zero(t, got.Spec.Ports[0].NodePort)

	local := typed("lb-local", corev1.ServiceTypeLoadBalancer, 0)
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	got, err = s.Create(ctx, local, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(30002), got.Spec.Ports[0].NodePort)
	assert.Equal(t, int32(30003), got.Spec.HealthCheckNodePort)

	got, err = s.Create(ctx, typed("cluster-ip", corev1.ServiceTypeClusterIP, 0), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Zero(t, got.Spec.Ports[0].NodePort)
}

// Services are listed by namespace (or in all of them) and label; a field
// selector is refused, not ignored.
func TestServiceListSelectors(t *testing.T) {
	web := svc("a", "web", "10.96.0.20")
	web.Labels = map[string]string{"app": "web"}
	c := base(t, Options{Services: []*corev1.Service{web, svc("a", "db", "10.96.0.21"), svc("b", "other", "10.96.0.22")}})
	s := c.Kube.CoreV1().Services("a")
	all, err := s.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, all.Items, 2, "namespace a")
	every, err := c.Kube.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, every.Items, 3, "every namespace")
	some, err := s.List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	require.NoError(t, err)
	require.Len(t, some.Items, 1)
	assert.Equal(t, "web", some.Items[0].Name)
	_, err = s.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=web"})
	assert.ErrorContains(t, err, "field selectors are not modelled")
}

// The typed ServiceCIDR client honours dryRun on update.
func TestTypedServiceCIDRUpdateDryRun(t *testing.T) {
	c := base(t, Options{})
	scs := c.Kube.NetworkingV1().ServiceCIDRs()
	live, err := scs.Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	live.Spec.CIDRs = append(live.Spec.CIDRs, "fd00::/108")
	_, err = scs.Update(ctx, live, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err)
	st, _ := c.ServiceCIDR("kubernetes")
	assert.Equal(t, []string{"10.96.0.0/16"}, st.CIDRs)
}

// LoseResponseAfter(n) answers n more requests; the next one is processed
// and its answer lost.
func TestLoseResponseAfterCountsTheRequestsLetThrough(t *testing.T) {
	c := base(t, Options{Services: []*corev1.Service{svc("a", "web", "10.96.0.20")}})
	c.LoseResponseAfter(1, nil)
	_, err := c.Kube.CoreV1().Services("a").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err, "the one request let through")
	err = c.Kube.CoreV1().Services("a").Delete(ctx, "web", metav1.DeleteOptions{})
	assert.ErrorIs(t, err, ErrKilled)
	_, ok := c.Service("a", "web")
	assert.False(t, ok, "processed, its answer lost")
}

// The last NodePort, 32767, is handed out once every other one is taken.
func TestNodePortRangeEndsAt32767(t *testing.T) {
	var taken []*corev1.Service
	for p := int32(30000); p < 32767; p++ {
		v := svc("a", fmt.Sprint("np-", p), "")
		v.Spec.Type, v.Spec.Ports[0].NodePort = corev1.ServiceTypeNodePort, p
		taken = append(taken, v)
	}
	c := base(t, Options{Services: taken})
	last := svc("a", "last", "")
	last.Spec.Type = corev1.ServiceTypeNodePort
	got, err := c.Kube.CoreV1().Services("a").Create(ctx, last, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(32767), got.Spec.Ports[0].NodePort)
}

// A delete's preconditions are the API server's: a UID or resourceVersion
// other than the object's is a conflict, and the object stays.
func TestDeletePreconditions(t *testing.T) {
	c := base(t, Options{Services: []*corev1.Service{svc("a", "web", "10.96.0.20")}})
	s := c.Kube.CoreV1().Services("a")
	live, err := s.Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	for _, pre := range []metav1.Preconditions{{UID: ptr.To(types.UID("other"))}, {ResourceVersion: ptr.To("0")}} {
		err := s.Delete(ctx, "web", metav1.DeleteOptions{Preconditions: &pre})
		assert.True(t, apierrors.IsConflict(err), "%v", err)
		assert.ErrorContains(t, err, "Precondition failed")
		_, ok := c.Service("a", "web")
		assert.True(t, ok)
	}
	require.NoError(t, s.Delete(ctx, "web", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &live.UID, ResourceVersion: &live.ResourceVersion}}))
	_, ok := c.Service("a", "web")
	assert.False(t, ok)
}

// kube-apiserver recreates the "kubernetes" ServiceCIDR from its flag
// when it is gone; Services lists every Service sorted by namespace/name;
// a ServiceCIDR holds at most two ranges.
func TestKubernetesServiceCIDRRecreatedAndServicesSorted(t *testing.T) {
	c := base(t, Options{APIServerRange: "10.96.0.0/16", ServiceCIDRs: []InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}, {Name: "new", CIDRs: []string{"10.100.0.0/16"}}},
		Services: []*corev1.Service{svc("b", "web", "10.96.0.20"), svc("a", "zz", "10.96.0.21"), svc("a", "db", "10.96.0.22")}})
	var names []string
	for _, s := range c.Services() {
		names = append(names, s.Namespace+"/"+s.Name)
	}
	assert.Equal(t, []string{"a/db", "a/zz", "b/web"}, names)

	for _, n := range []string{"web", "zz", "db"} {
		ns := "a"
		if n == "web" {
			ns = "b"
		}
		require.NoError(t, c.Kube.CoreV1().Services(ns).Delete(ctx, n, metav1.DeleteOptions{}))
	}
	require.NoError(t, c.Kube.NetworkingV1().ServiceCIDRs().Delete(ctx, "kubernetes", metav1.DeleteOptions{}))
	c.Reconcile()
	st, ok := c.ServiceCIDR("kubernetes")
	require.True(t, ok, "recreated")
	assert.Equal(t, []string{"10.96.0.0/16"}, st.CIDRs)
	assert.False(t, st.Terminating)

	_, err := c.Kube.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "three"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.1.0.0/16", "fd00::/108", "10.2.0.0/16"}}}, metav1.CreateOptions{})
	assert.ErrorContains(t, err, "may only hold up to 2 values")
}
