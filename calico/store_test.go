package calico_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
)

// stores returns both PoolStore implementations over rule-enforcing fakes,
// each holding the old pool.
func stores(t *testing.T) map[calico.API]calico.PoolStore {
	t.Helper()
	cs, _ := calicotest.NewV3(v3PoolObject(oldPoolName, oldPoolSpec()))
	old := v1PoolObject(oldPoolName, oldPoolSpec(), map[string]string{calico.MetadataAnnotation: `{"uid":"v3-uid"}`, "team": "net"})
	// A deprecated field the store does not model must survive updates.
	old.Object["spec"].(map[string]any)["nat-outgoing"] = true
	dyn, _ := calicotest.NewDynamic(old)
	return map[calico.API]calico.PoolStore{
		calico.APIProjectCalicoV3: calico.NewV3Store(cs),
		calico.APICRDV1:           calico.NewCRDStore(dyn),
	}
}

func TestPoolStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	for api, s := range stores(t) {
		t.Run(string(api), func(t *testing.T) {
			assert.Equal(t, api, s.API())
			old, err := s.Get(ctx, oldPoolName)
			require.NoError(t, err)
			assert.Equal(t, oldPoolSpec(), old.Spec)
			assert.NotEmpty(t, old.UID)
			assert.NotEmpty(t, old.ResourceVersion)

			spec := calico.PoolSpec{CIDR: newCIDR, BlockSize: 26, VXLANMode: calico.EncapCrossSubnet, IPIPMode: calico.EncapNever,
				NATOutgoing: true, DisableBGPExport: true, NodeSelector: "all()", NamespaceSelector: "team == 'a'",
				AllowedUses: []calico.AllowedUse{calico.UseWorkload}, AssignmentMode: calico.AssignmentManual}
			created, err := s.Create(ctx, calico.IPPool{Name: newPoolName, UID: "ignored", ResourceVersion: "7", Labels: map[string]string{"a": "b"},
				Annotations: map[string]string{calico.MetadataAnnotation: `{"uid":"someone-else"}`, "note": "x"}, Spec: spec}, calico.WriteOptions{})
			require.NoError(t, err, "Create must strip uid and resourceVersion")
			assert.Equal(t, spec, created.Spec)
			assert.NotEqual(t, "ignored", created.UID)
			assert.Equal(t, map[string]string{"note": "x"}, created.Annotations, "the metadata annotation of another object is not copied")

			list, err := s.List(ctx)
			require.NoError(t, err)
			require.Len(t, list, 2)
			assert.Equal(t, oldPoolName, list[0].Name)
			assert.Equal(t, newPoolName, list[1].Name)

			_, err = s.Create(ctx, calico.IPPool{Name: newPoolName, Spec: spec}, calico.WriteOptions{})
			assert.True(t, apierrors.IsAlreadyExists(err), "%v", err)

			// Update: disable, keep everything else.
			upd := old.DeepCopy()
			upd.Spec.Disabled = true
			upd.Annotations = map[string]string{"team": "net"} // the caller dropped the metadata annotation
			got, err := s.Update(ctx, upd, calico.WriteOptions{})
			require.NoError(t, err)
			assert.True(t, got.Spec.Disabled)
			assert.NotEqual(t, old.ResourceVersion, got.ResourceVersion)
			if api == calico.APICRDV1 {
				assert.Equal(t, `{"uid":"v3-uid"}`, got.Annotations[calico.MetadataAnnotation], "metadata annotation kept intact")
			}

			// A stale resourceVersion is a conflict.
			_, err = s.Update(ctx, upd, calico.WriteOptions{})
			assert.True(t, apierrors.IsConflict(err), "%v", err)

			// cidr and blockSize are immutable.
			cur, err := s.Get(ctx, oldPoolName)
			require.NoError(t, err)
			bad := cur.DeepCopy()
			bad.Spec.CIDR = "10.233.0.0/16"
			_, err = s.Update(ctx, bad, calico.WriteOptions{})
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "%v", err)
			assert.Contains(t, err.Error(), "spec.cidr")
			bad = cur.DeepCopy()
			bad.Spec.BlockSize = 26
			_, err = s.Update(ctx, bad, calico.WriteOptions{})
			assert.True(t, apierrors.IsInvalid(err), "%v", err)

			// Dry runs change nothing.
			dry := cur.DeepCopy()
			dry.Spec.NATOutgoing = false
			_, err = s.Update(ctx, dry, calico.WriteOptions{DryRun: true})
			require.NoError(t, err)
			after, err := s.Get(ctx, oldPoolName)
			require.NoError(t, err)
			assert.True(t, after.Spec.NATOutgoing)
			require.NoError(t, s.Delete(ctx, oldPoolName, calico.DeleteOptions{DryRun: true}))
			_, err = s.Get(ctx, oldPoolName)
			require.NoError(t, err)

			// Delete with a wrong UID precondition is refused.
			err = s.Delete(ctx, oldPoolName, calico.DeleteOptions{UID: "not-it"})
			assert.True(t, apierrors.IsConflict(err), "%v", err)
			require.NoError(t, s.Delete(ctx, oldPoolName, calico.DeleteOptions{UID: after.UID}))
			_, err = s.Get(ctx, oldPoolName)
			assert.ErrorIs(t, err, calico.ErrPoolNotFound)
			assert.ErrorIs(t, s.Delete(ctx, oldPoolName, calico.DeleteOptions{}), calico.ErrPoolNotFound)
			_, err = s.Update(ctx, upd, calico.WriteOptions{})
			assert.ErrorIs(t, err, calico.ErrPoolNotFound)
		})
	}
}

func TestCRDStoreKeepsUnknownFields(t *testing.T) {
	ctx := context.Background()
	old := v1PoolObject(oldPoolName, oldPoolSpec(), nil)
	old.Object["spec"].(map[string]any)["nat-outgoing"] = true
	old.Object["spec"].(map[string]any)["futureField"] = "kept"
	dyn, _ := calicotest.NewDynamic(old)
	s := calico.NewCRDStore(dyn)
	p, err := s.Get(ctx, oldPoolName)
	require.NoError(t, err)
	p.Spec.Disabled = true
	_, err = s.Update(ctx, p, calico.WriteOptions{})
	require.NoError(t, err)
	u, err := dyn.Resource(calico.IPPoolsV1).Get(ctx, oldPoolName, metav1.GetOptions{})
	require.NoError(t, err)
	spec := u.Object["spec"].(map[string]any)
	assert.Equal(t, true, spec["nat-outgoing"])
	assert.Equal(t, "kept", spec["futureField"])
	assert.Equal(t, true, spec["disabled"])
}

func TestV3StoreValidationByFake(t *testing.T) {
	// The v3 fake enforces Calico's validation like the API server: an
	// overlapping pool is refused.
	cs, _ := calicotest.NewV3(v3PoolObject(oldPoolName, oldPoolSpec()))
	s := calico.NewV3Store(cs)
	_, err := s.Create(context.Background(), calico.IPPool{Name: "overlap", Spec: calico.PoolSpec{CIDR: "10.233.64.0/20"}}, calico.WriteOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "overlaps with IPPool(default-ipv4-ippool)")
}

func TestFakesRejectResourceVersionOnCreate(t *testing.T) {
	ctx := context.Background()
	cs, _ := calicotest.NewV3()
	p := v3PoolObject("x", calico.PoolSpec{CIDR: newCIDR})
	p.ResourceVersion = "12"
	_, err := cs.ProjectcalicoV3().IPPools().Create(ctx, p, metav1.CreateOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "resourceVersion should not be set on objects to be created")

	dyn, _ := calicotest.NewDynamic()
	u := v1PoolObject("x", calico.PoolSpec{CIDR: newCIDR}, nil)
	u.SetResourceVersion("12")
	_, err = dyn.Resource(calico.IPPoolsV1).Create(ctx, u, metav1.CreateOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "resourceVersion should not be set")

	// Custom resources need a resourceVersion on update.
	u.SetResourceVersion("")
	created, err := dyn.Resource(calico.IPPoolsV1).Create(ctx, u, metav1.CreateOptions{})
	require.NoError(t, err)
	created.SetResourceVersion("")
	_, err = dyn.Resource(calico.IPPoolsV1).Update(ctx, created, metav1.UpdateOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "must be specified for an update")
}

func TestNewPoolStoreDiscovery(t *testing.T) {
	ctx := context.Background()
	cs, _ := calicotest.NewV3()
	dyn, _ := calicotest.NewDynamic()
	res := func(gv string) *metav1.APIResourceList {
		return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: "ippools", Kind: "IPPool"}}}
	}
	cases := []struct {
		name      string
		resources []*metav1.APIResourceList
		want      calico.API
		err       error
	}{
		{"v3 preferred", []*metav1.APIResourceList{res("crd.projectcalico.org/v1"), res("projectcalico.org/v3")}, calico.APIProjectCalicoV3, nil},
		{"crd only", []*metav1.APIResourceList{res("crd.projectcalico.org/v1")}, calico.APICRDV1, nil},
		{"none", nil, "", calico.ErrNoCalicoAPI},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			disco := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{Resources: c.resources}}
			s, err := calico.NewPoolStore(ctx, calico.StoreClients{Discovery: disco, Calico: cs, Dynamic: dyn})
			if c.err != nil {
				assert.ErrorIs(t, err, c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, s.API())
		})
	}
	disco := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{Resources: []*metav1.APIResourceList{res("projectcalico.org/v3")}}}
	_, err := calico.NewPoolStore(ctx, calico.StoreClients{Discovery: disco, Dynamic: dyn})
	assert.ErrorContains(t, err, "StoreClients.Calico is nil")
}

func TestPoolFromUnstructuredTypeErrors(t *testing.T) {
	cases := []struct {
		name  string
		spec  map[string]any
		field string
	}{
		{"cidr number", map[string]any{"cidr": int64(10)}, "spec.cidr"},
		{"blockSize string", map[string]any{"cidr": newCIDR, "blockSize": "26"}, "spec.blockSize"},
		{"blockSize huge", map[string]any{"cidr": newCIDR, "blockSize": int64(1) << 40}, "spec.blockSize"},
		{"disabled string", map[string]any{"cidr": newCIDR, "disabled": "true"}, "spec.disabled"},
		{"uses not list", map[string]any{"cidr": newCIDR, "allowedUses": "Workload"}, "spec.allowedUses"},
		{"use not string", map[string]any{"cidr": newCIDR, "allowedUses": []any{int64(1)}}, "spec.allowedUses[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := calico.PoolFromUnstructured(map[string]any{"metadata": map[string]any{"name": "p"}, "spec": c.spec})
			require.Error(t, err)
			var fe *calico.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, c.field, fe.Field)
			assert.Equal(t, calico.RuleType, fe.Rule)
		})
	}
	p, err := calico.PoolFromUnstructured(map[string]any{"metadata": map[string]any{"name": "p"}, "spec": map[string]any{"cidr": newCIDR, "blockSize": float64(26)}})
	require.NoError(t, err)
	assert.Equal(t, 26, p.Spec.BlockSize)

	// A spec that is not an object is named; a null one is no spec.
	_, err = calico.PoolFromUnstructured(map[string]any{"metadata": map[string]any{"name": "p"}, "spec": "10.20.0.0/16"})
	var fe *calico.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, []string{"spec", "10.20.0.0/16"}, []string{fe.Field, fe.Value})
	p, err = calico.PoolFromUnstructured(map[string]any{"metadata": map[string]any{"name": "p"}, "spec": nil})
	require.NoError(t, err)
	assert.Equal(t, calico.PoolSpec{}, p.Spec)
	// A map built by hand, with Go ints, is read (a deep copy would panic).
	p, err = calico.PoolFromUnstructured(map[string]any{"metadata": map[string]any{"name": "p"}, "spec": map[string]any{"cidr": newCIDR, "blockSize": 26}})
	require.NoError(t, err)
	assert.Equal(t, 26, p.Spec.BlockSize)
}

// TestPoolStoresListSortedByName: both stores sort the pools by name. The
// API server and the fakes list in key order already, so the fakes here
// answer in reverse, as another server (or an aggregated API) may.
func TestPoolStoresListSortedByName(t *testing.T) {
	ctx := context.Background()
	reversed := func(f *k8stesting.Fake, tracker k8stesting.ObjectTracker) {
		f.PrependReactor("list", "ippools", func(a k8stesting.Action) (bool, runtime.Object, error) {
			_, obj, err := k8stesting.ObjectReaction(tracker)(a)
			if err != nil {
				return true, nil, err
			}
			items, err := meta.ExtractList(obj)
			if err != nil {
				return true, nil, err
			}
			slices.Reverse(items)
			return true, obj, meta.SetList(obj, items)
		})
	}
	specs := map[string]calico.PoolSpec{"a-pool": {CIDR: "10.1.0.0/16"}, "b-pool": {CIDR: "10.2.0.0/16"}, "c-pool": {CIDR: "10.3.0.0/16"}}
	cs, _ := calicotest.NewV3(v3PoolObject("a-pool", specs["a-pool"]), v3PoolObject("b-pool", specs["b-pool"]), v3PoolObject("c-pool", specs["c-pool"]))
	reversed(&cs.Fake, cs.Tracker())
	dyn, _ := calicotest.NewDynamic(v1PoolObject("a-pool", specs["a-pool"], nil), v1PoolObject("b-pool", specs["b-pool"], nil), v1PoolObject("c-pool", specs["c-pool"], nil))
	reversed(&dyn.Fake, dyn.Tracker())
	for api, s := range map[calico.API]calico.PoolStore{calico.APIProjectCalicoV3: calico.NewV3Store(cs), calico.APICRDV1: calico.NewCRDStore(dyn)} {
		list, err := s.List(ctx)
		require.NoError(t, err, api)
		names := make([]string, 0, len(list))
		for _, p := range list {
			names = append(names, p.Name)
		}
		assert.Equal(t, []string{"a-pool", "b-pool", "c-pool"}, names, api)
	}
}
