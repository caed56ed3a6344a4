package e2e_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/servicecidr"
)

// TestServiceCIDRV1beta1BackendOnRealAPIServer drives the typed
// networking.k8s.io/v1beta1 backend (Kubernetes 1.31-1.32 serve ServiceCIDR
// only there; those releases cannot be built from the module proxy) against a
// kube-apiserver that serves v1beta1 beside v1 when asked with
// --runtime-config: list, create, wait for kube-controller-manager to mark it
// Ready, add a family (the update path), snapshot, delete. It skips where the
// server no longer has the v1beta1 API at all.
func TestServiceCIDRV1beta1BackendOnRealAPIServer(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	opts, minor := scClusterOptions()
	if minor < 31 {
		t.Skipf("Kubernetes 1.%d serves ServiceCIDR as v1alpha1", minor)
	}
	if minor >= 33 {
		opts.ExtraFlags = map[harness.Component][]string{
			harness.APIServer: {"--runtime-config=networking.k8s.io/v1beta1=true"},
		}
	}
	c := harness.Start(t, opts)
	ctx := t.Context()
	cfg := c.RESTConfig()
	cfg.WarningHandler = rest.NoWarnings{} // "v1beta1 ServiceCIDR is deprecated" on every request
	kube, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	res, err := kube.Discovery().ServerResourcesForGroupVersion("networking.k8s.io/v1beta1")
	served := err == nil
	if served {
		served = false
		for _, r := range res.APIResources {
			served = served || r.Name == "servicecidrs"
		}
	}
	if !served {
		t.Skipf("Kubernetes 1.%d does not serve networking.k8s.io/v1beta1 servicecidrs even with --runtime-config (%v)", minor, err)
	}

	client, err := servicecidr.New(ctx, servicecidr.Options{Kube: kube, Dynamic: dyn, APIVersion: servicecidr.V1beta1})
	require.NoError(t, err)
	require.Equal(t, servicecidr.V1beta1, client.APIVersion())

	all, err := client.List(ctx)
	require.NoError(t, err)
	var def *servicecidr.ServiceCIDR
	for i := range all {
		if all[i].Name == servicecidr.DefaultServiceCIDRName {
			def = &all[i]
		}
	}
	require.NotNil(t, def, "the default ServiceCIDR through v1beta1: %+v", all)
	assert.Equal(t, []netip.Prefix{scOldRange}, def.CIDRs)

	extra := netip.MustParsePrefix("172.30.0.0/16")
	dry, err := client.Create(ctx, "extra", []netip.Prefix{extra}, servicecidr.WriteOptions{DryRun: true})
	require.NoError(t, err, "server-side dry-run create")
	assert.Equal(t, []netip.Prefix{extra}, dry.CIDRs)
	_, err = client.Get(ctx, "extra")
	require.Error(t, err, "a dry run stores nothing")

	created, err := client.Create(ctx, "extra", []netip.Prefix{extra}, servicecidr.WriteOptions{})
	require.NoError(t, err)
	assert.NotEmpty(t, created.UID)
	ready, err := client.WaitReady(ctx, "extra", servicecidr.WaitOptions{Timeout: time.Minute, Interval: 200 * time.Millisecond})
	require.NoError(t, err, "kube-controller-manager marks it Ready")
	require.NotNil(t, ready.Ready)
	assert.Equal(t, "True", string(ready.Ready.Status))

	v6 := netip.MustParsePrefix("fd00:30::/108")
	updated, err := client.AddFamily(ctx, "extra", v6, servicecidr.WriteOptions{})
	require.NoError(t, err, "the update path: add the other family")
	assert.Equal(t, []netip.Prefix{extra, v6}, updated.CIDRs)
	got, err := client.Get(ctx, "extra")
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{extra, v6}, got.CIDRs)

	snap, err := client.Snapshot(ctx, servicecidr.SnapshotOptions{})
	require.NoError(t, err)
	names := map[string]bool{}
	for _, sc := range snap.ServiceCIDRs {
		names[sc.Name] = true
	}
	assert.True(t, names["extra"] && names[servicecidr.DefaultServiceCIDRName], "snapshot: %v", names)

	require.NoError(t, client.Delete(ctx, "extra", servicecidr.DeleteOptions{UID: string(got.UID)}))
	require.NoError(t, client.WaitDeleted(ctx, "extra", servicecidr.WaitOptions{UID: got.UID, Timeout: time.Minute, Interval: 200 * time.Millisecond}))
}
