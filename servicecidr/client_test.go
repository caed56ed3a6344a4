package servicecidr_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

func TestNewDiscoversServedVersion(t *testing.T) {
	tests := []struct {
		version, ipVersion string
		git                string
		wantIP             servicecidr.APIVersion
		wantMinor          int
	}{
		{"v1", "v1", "v1.36.3", servicecidr.V1, 36},
		{"v1beta1", "v1beta1", "v1.32.4", servicecidr.V1beta1, 32},
		{"v1alpha1", "v1alpha1", "v1.29.6", servicecidr.V1alpha1, 29},
		{"v1", "none", "v1.33.1", "", 33},
	}
	for _, tt := range tests {
		t.Run(tt.version+"/"+tt.ipVersion, func(t *testing.T) {
			cl := servicecidrtest.MustNew(servicecidrtest.Options{Version: tt.version, IPAddressVersion: tt.ipVersion, GitVersion: tt.git})
			c := connect(t, cl)
			assert.Equal(t, servicecidr.APIVersion(tt.version), c.APIVersion())
			assert.Equal(t, tt.wantIP, c.IPAddressVersion())
			assert.Equal(t, tt.wantMinor, c.Server().Minor)
			assert.Equal(t, tt.git, c.Server().GitVersion)
		})
	}
}

func TestNewPrefersNewestWhenSeveralAreServed(t *testing.T) {
	kube := fake.NewClientset()
	kube.Resources = []*metav1.APIResourceList{
		{GroupVersion: "networking.k8s.io/v1beta1", APIResources: []metav1.APIResource{{Name: "servicecidrs"}, {Name: "ipaddresses"}}},
		{GroupVersion: "networking.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "servicecidrs"}, {Name: "ipaddresses"}}},
	}
	c, err := servicecidr.New(context.Background(), servicecidr.Options{Kube: kube})
	require.NoError(t, err)
	assert.Equal(t, servicecidr.V1, c.APIVersion())
	assert.Equal(t, servicecidr.V1, c.IPAddressVersion())

	forced, err := servicecidr.New(context.Background(), servicecidr.Options{Kube: kube, APIVersion: servicecidr.V1beta1})
	require.NoError(t, err)
	assert.Equal(t, servicecidr.V1beta1, forced.APIVersion())
}

func TestNewNotServedSaysWhatToEnable(t *testing.T) {
	tests := []struct {
		git   string
		minor int
		want  string
	}{
		{"v1.28.9", 28, "arrived as v1alpha1 in 1.29"},
		{"v1.29.6", 29, "--feature-gates=MultiCIDRServiceAllocator=true --runtime-config=networking.k8s.io/v1alpha1=true"},
		{"v1.30.0", 30, "networking.k8s.io/v1alpha1=true"},
		{"v1.31.2", 31, "--runtime-config=networking.k8s.io/v1beta1=true"},
		{"v1.32.4", 32, "beta and off by default"},
		{"v1.33.0", 33, "on by default"},
		{"weird", 0, "version is unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.git, func(t *testing.T) {
			cl := servicecidrtest.MustNew(servicecidrtest.Options{Version: "none", GitVersion: tt.git})
			_, err := servicecidr.New(context.Background(), servicecidr.Options{Kube: cl.Kube})
			require.ErrorIs(t, err, servicecidr.ErrNotServed)
			var ns *servicecidr.NotServedError
			require.True(t, errors.As(err, &ns))
			assert.Equal(t, tt.minor, ns.Minor)
			assert.Contains(t, err.Error(), tt.want)
			assert.Contains(t, err.Error(), tt.git)
		})
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	_, err := servicecidr.New(context.Background(), servicecidr.Options{})
	assert.ErrorIs(t, err, servicecidr.ErrInvalid)
	assert.EqualError(t, err, "Options.Kube: a kubernetes.Interface is required")

	cl := servicecidrtest.MustNew(servicecidrtest.Options{Version: "v1alpha1"})
	_, err = servicecidr.New(context.Background(), servicecidr.Options{Kube: cl.Kube})
	assert.ErrorIs(t, err, servicecidr.ErrInvalid)
	assert.ErrorContains(t, err, "Options.Dynamic")

	_, err = servicecidr.New(context.Background(), servicecidr.Options{Kube: cl.Kube, APIVersion: "v2"})
	assert.EqualError(t, err, `Options.APIVersion "v2": valid versions are v1, v1beta1 and v1alpha1`)
}

func TestNewDiscoveryFailureIsReported(t *testing.T) {
	kube := fake.NewClientset()
	kube.PrependReactor("get", "resource", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	_, err := servicecidr.New(context.Background(), servicecidr.Options{Kube: kube})
	assert.EqualError(t, err, "discovering networking.k8s.io/v1: connection refused")
}

func TestParseServerVersion(t *testing.T) {
	tests := []struct {
		info *version.Info
		want int
	}{
		{nil, 0},
		{&version.Info{Major: "1", Minor: "33"}, 33},
		{&version.Info{Major: "1", Minor: "30+", GitVersion: "v1.30.4-gke.1"}, 30},
		{&version.Info{Major: "", Minor: "", GitVersion: "v1.29.2-eks-1234"}, 29},
		{&version.Info{Major: "2", Minor: "1", GitVersion: "v2.1.0"}, 0},
		{&version.Info{Major: "1", Minor: "x", GitVersion: "garbage"}, 0},
		{&version.Info{Major: "1", Minor: "99999999999999999999"}, 0},
		// At most four digits are read, from either field.
		{&version.Info{Major: "1", Minor: "1234"}, 1234},
		{&version.Info{Major: "1", Minor: "12345", GitVersion: "v1.1234.0"}, 1234},
		{&version.Info{GitVersion: "v1.12345.0"}, 0},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, servicecidr.ParseServerVersion(tt.info).Minor, "%+v", tt.info)
	}
}

func TestServiceCIDRLifecycleOnEveryVersion(t *testing.T) {
	ctx := context.Background()
	for _, v := range []string{"v1", "v1beta1", "v1alpha1"} {
		t.Run(v, func(t *testing.T) {
			cl, c := withDefaultOnly(t, v)

			created, err := c.Create(ctx, "extra", []netip.Prefix{pfx("10.100.0.0/16")}, servicecidr.WriteOptions{})
			require.NoError(t, err)
			assert.Equal(t, "Pending", created.State(), "the controller sets Ready asynchronously")
			assert.NotEmpty(t, created.UID)
			assert.NotEmpty(t, created.ResourceVersion)

			ready, err := c.WaitReady(ctx, "extra", servicecidr.WaitOptions{Timeout: time.Second, Interval: time.Millisecond})
			require.NoError(t, err)
			assert.True(t, ready.IsReady())
			assert.Equal(t, []string{servicecidr.Finalizer}, ready.Finalizers)

			list, err := c.List(ctx)
			require.NoError(t, err)
			require.Len(t, list, 2)
			assert.Equal(t, "extra", list[0].Name)
			assert.Equal(t, "kubernetes", list[1].Name)
			assert.True(t, list[1].Contains(netip.MustParseAddr("10.96.0.10")))

			dual, err := c.AddFamily(ctx, "extra", pfx("fd00:10:100::/108"), servicecidr.WriteOptions{})
			require.NoError(t, err)
			assert.Equal(t, []netip.Prefix{pfx("10.100.0.0/16"), pfx("fd00:10:100::/108")}, dual.CIDRs)
			_, err = c.AddFamily(ctx, "extra", pfx("fd00:20::/108"), servicecidr.WriteOptions{})
			assert.ErrorIs(t, err, servicecidr.ErrImmutable)

			// Server-side dry run stores nothing.
			_, err = c.Create(ctx, "dry", []netip.Prefix{pfx("10.200.0.0/16")}, servicecidr.WriteOptions{DryRun: true})
			require.NoError(t, err)
			_, err = c.Get(ctx, "dry")
			assert.True(t, apierrors.IsNotFound(err), "%v", err)

			require.NoError(t, c.Delete(ctx, "extra", servicecidr.DeleteOptions{}))
			require.NoError(t, c.WaitDeleted(ctx, "extra", servicecidr.WaitOptions{Timeout: time.Second, Interval: time.Millisecond}))

			err = c.Delete(ctx, "kubernetes", servicecidr.DeleteOptions{})
			assert.ErrorIs(t, err, servicecidr.ErrLastServiceCIDR)
			assert.ErrorContains(t, err, "last ServiceCIDR for IPv4")
			_, ok := cl.ServiceCIDR("kubernetes")
			assert.True(t, ok, "the last ServiceCIDR must never be deleted")
		})
	}
}

func TestCreateRefusesInvalidCIDRsBeforeSending(t *testing.T) {
	cl := servicecidrtest.MustNew(servicecidrtest.Options{})
	c := connect(t, cl)
	before := cl.Requests()
	tests := []struct {
		cidrs []netip.Prefix
		want  string
	}{
		{nil, "spec.cidrs: at least one CIDR is required"},
		{[]netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("10.233.64.1"), 16)}, `spec.cidrs[0] "10.233.64.1/16": has host bits set; the network is 10.233.0.0/16`},
		{[]netip.Prefix{pfx("10.0.0.0/16"), pfx("10.1.0.0/16")}, "may specify no more than one CIDR for each IP family"},
		{[]netip.Prefix{pfx("10.0.0.0/16"), pfx("fd00::/108"), pfx("10.1.0.0/16")}, "may hold at most two CIDRs"},
	}
	for _, tt := range tests {
		_, err := c.Create(context.Background(), "x", tt.cidrs, servicecidr.WriteOptions{})
		assert.ErrorIs(t, err, servicecidr.ErrInvalid)
		assert.ErrorContains(t, err, tt.want)
	}
	assert.Equal(t, before, cl.Requests(), "nothing was sent")
}

func TestDeleteRefusesLastPerFamily(t *testing.T) {
	cl := servicecidrtest.MustNew(servicecidrtest.Options{ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{
		{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16", "fd00:96::/108"}},
		{Name: "more-v4", CIDRs: []string{"10.97.0.0/16"}},
	}})
	c := connect(t, cl)
	err := c.Delete(context.Background(), "kubernetes", servicecidr.DeleteOptions{})
	assert.ErrorIs(t, err, servicecidr.ErrLastServiceCIDR)
	assert.ErrorContains(t, err, "last ServiceCIDR for IPv6")
	require.NoError(t, c.Delete(context.Background(), "more-v4", servicecidr.DeleteOptions{}))
}

func TestDeletePreconditions(t *testing.T) {
	cl := servicecidrtest.MustNew(servicecidrtest.Options{ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{
		{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}, {Name: "b", CIDRs: []string{"10.97.0.0/16"}}}})
	c := connect(t, cl)
	err := c.Delete(context.Background(), "b", servicecidr.DeleteOptions{UID: "not-the-uid"})
	assert.True(t, apierrors.IsConflict(err), "%v", err)
	assert.ErrorContains(t, err, "Precondition failed: UID in precondition: not-the-uid")
	err = c.Delete(context.Background(), "missing", servicecidr.DeleteOptions{})
	assert.True(t, apierrors.IsNotFound(err), "%v", err)
}

func TestWaitReadyTimesOutWithTheReason(t *testing.T) {
	cl := servicecidrtest.MustNew(servicecidrtest.Options{ControllerDelay: 1 << 30})
	c := connect(t, cl)
	_, err := c.Create(context.Background(), "slow", []netip.Prefix{pfx("10.100.0.0/16")}, servicecidr.WriteOptions{})
	require.NoError(t, err)
	_, err = c.WaitReady(context.Background(), "slow", servicecidr.WaitOptions{Timeout: 20 * time.Millisecond, Interval: time.Millisecond})
	assert.ErrorIs(t, err, servicecidr.ErrNotReady)
	assert.ErrorContains(t, err, "no Ready condition yet: is kube-controller-manager running")
}

func TestWaitReadyFailsFastOnTerminating(t *testing.T) {
	cl, c := newStory3(t, "v1")
	_, err := c.Create(context.Background(), "new", story3To, servicecidr.WriteOptions{})
	require.NoError(t, err)
	_, err = c.WaitReady(context.Background(), "new", servicecidr.WaitOptions{Timeout: time.Second, Interval: time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, c.Delete(context.Background(), "kubernetes", servicecidr.DeleteOptions{}))
	st, _ := cl.ServiceCIDR("kubernetes")
	assert.True(t, st.Terminating)
	_, err = c.WaitReady(context.Background(), "kubernetes", servicecidr.WaitOptions{Timeout: time.Second, Interval: time.Millisecond})
	assert.ErrorIs(t, err, servicecidr.ErrNotReady)
	assert.ErrorContains(t, err, "being deleted")
}

func TestStuckDeletionNamesWhatHoldsIt(t *testing.T) {
	for _, ipv := range []string{"v1", "none"} {
		t.Run("ipaddresses="+ipv, func(t *testing.T) {
			o := story3Options("v1")
			o.IPAddressVersion = ipv
			cl := servicecidrtest.MustNew(o)
			c := connect(t, cl)
			ctx := context.Background()
			_, err := c.Create(ctx, "new", story3To, servicecidr.WriteOptions{})
			require.NoError(t, err)
			require.NoError(t, c.Delete(ctx, "kubernetes", servicecidr.DeleteOptions{}))

			err = c.WaitDeleted(ctx, "kubernetes", servicecidr.WaitOptions{Timeout: 20 * time.Millisecond, Interval: time.Millisecond})
			require.ErrorIs(t, err, servicecidr.ErrDeletionBlocked)
			var blocked *servicecidr.DeletionBlockedError
			require.True(t, errors.As(err, &blocked))
			rep := blocked.Report
			assert.True(t, rep.Terminating)
			var held []string
			for _, h := range rep.Holders {
				held = append(held, h.IP.String()+" "+h.Parent.String())
			}
			assert.Equal(t, []string{
				"100.64.0.1 services/default/kubernetes",
				"100.64.0.10 services/kube-system/kube-dns",
				"100.64.0.200 services/shop/api",
				"100.64.1.1 services/shop/ingress",
				"100.64.3.7 services/shop/web",
			}, held)
			if ipv == "none" {
				assert.Contains(t, rep.Source, "range math")
			} else {
				assert.Contains(t, rep.Source, "IPAddress objects (networking.k8s.io/v1)")
			}
			assert.Contains(t, err.Error(), "ServiceCIDR kubernetes (100.64.0.0/13) is Terminating; 5 address(es) depend only on it")
			require.NotNil(t, rep.Ready)
			assert.Equal(t, "Terminating", rep.Ready.Reason)
		})
	}
}

func TestDeletionNotBlockedWhenCovered(t *testing.T) {
	o := story3Options("v1")
	o.ServiceCIDRs = append(o.ServiceCIDRs, servicecidrtest.InitialServiceCIDR{Name: "wide", CIDRs: []string{"100.64.0.0/10"}})
	cl := servicecidrtest.MustNew(o)
	c := connect(t, cl)
	rep, err := c.ExplainDeletion(context.Background(), "kubernetes")
	require.NoError(t, err)
	assert.Equal(t, []string{"wide"}, rep.CoveredBy)
	assert.Empty(t, rep.Holders)
	assert.Contains(t, rep.Summary, "every CIDR is covered by wide")
	require.NoError(t, c.Delete(context.Background(), "kubernetes", servicecidr.DeleteOptions{}))
	require.NoError(t, c.WaitDeleted(context.Background(), "kubernetes", servicecidr.WaitOptions{Timeout: time.Second, Interval: time.Millisecond}))
}

func TestInventoryPlacesEveryClusterIP(t *testing.T) {
	for _, ipv := range []string{"v1beta1", "none"} {
		o := story3Options("v1beta1")
		o.IPAddressVersion = ipv
		c := connect(t, servicecidrtest.MustNew(o))
		inv, err := c.Inventory(context.Background())
		require.NoError(t, err)
		got := map[string]string{}
		for _, s := range inv.Services {
			for _, ip := range s.IPs {
				assert.Equal(t, []string{"kubernetes"}, ip.ServiceCIDRs)
				assert.Equal(t, ipv != "none", ip.Tracked)
				got[s.Namespace+"/"+s.Name] = ip.IP.String()
			}
		}
		assert.Equal(t, map[string]string{"default/kubernetes": "100.64.0.1", "kube-system/kube-dns": "100.64.0.10",
			"shop/api": "100.64.0.200", "shop/ingress": "100.64.1.1", "shop/web": "100.64.3.7"}, got, "headless and ExternalName have no ClusterIP")
		require.Len(t, inv.ServiceCIDRs, 1)
		assert.Equal(t, 5, inv.ServiceCIDRs[0].ClusterIPs)
		assert.Empty(t, inv.OutOfRange)
		assert.Empty(t, inv.Orphans)
		assert.Empty(t, inv.Untracked)
		if ipv == "none" {
			assert.Contains(t, inv.Source, "range math")
		}
	}
}

func TestBuildInventoryFindsOrphansAndStrays(t *testing.T) {
	s := &servicecidr.Snapshot{
		APIVersion: servicecidr.V1, IPAddressVersion: servicecidr.V1,
		ServiceCIDRs: []servicecidr.ServiceCIDR{{Name: "kubernetes", CIDRs: []netip.Prefix{pfx("10.96.0.0/16")}},
			{Name: "narrow", CIDRs: []netip.Prefix{pfx("10.96.1.0/24")}}},
		IPAddresses: []servicecidr.IPAddress{
			{IP: netip.MustParseAddr("10.96.0.5"), ParentRef: servicecidr.ParentRef{Resource: "services", Namespace: "a", Name: "gone"}},
			{IP: netip.MustParseAddr("10.96.1.7"), ParentRef: servicecidr.ParentRef{Resource: "services", Namespace: "a", Name: "in-narrow"}},
		},
	}
	for _, x := range []struct{ name, ip string }{{"in-narrow", "10.96.1.7"}, {"untracked", "10.96.2.2"}, {"stray", "192.168.0.9"}} {
		svc := story3Services()[3].DeepCopy()
		svc.Namespace, svc.Name, svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "a", x.name, x.ip, []string{x.ip}
		s.Services = append(s.Services, *svc)
	}
	inv := servicecidr.BuildInventory(s)
	assert.Equal(t, []string{"a/untracked=10.96.2.2", "a/stray=192.168.0.9"}, inv.Untracked)
	assert.Equal(t, []string{"a/stray=192.168.0.9"}, inv.OutOfRange)
	require.Len(t, inv.Orphans, 1)
	assert.Equal(t, "services/a/gone", inv.Orphans[0].ParentRef.String())
	assert.Equal(t, []string{"narrow", "kubernetes"}, inv.Services[0].IPs[0].ServiceCIDRs, "most specific first")
}
