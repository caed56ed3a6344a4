package servicecidr_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// TestLabelsKeptOnEveryVersion: a ServiceCIDR's labels are read on every
// version (typed and unstructured) and kept when AddFamily updates it, and
// ToUnstructured sends the labels and the resourceVersion it is given.
func TestLabelsKeptOnEveryVersion(t *testing.T) {
	ctx := context.Background()
	for _, v := range []string{"v1", "v1beta1", "v1alpha1"} {
		t.Run(v, func(t *testing.T) {
			cl, c := withDefaultOnly(t, v)
			u := servicecidr.ToUnstructured(servicecidr.ServiceCIDR{Name: "labelled", Labels: map[string]string{"team": "net"},
				ResourceVersion: "42", CIDRs: []netip.Prefix{pfx("10.100.0.0/16")}}, c.APIVersion())
			assert.Equal(t, map[string]string{"team": "net"}, u.GetLabels())
			assert.Equal(t, "42", u.GetResourceVersion())
			u.SetResourceVersion("")
			_, err := cl.Dynamic.Resource(servicecidr.ServiceCIDRResource(c.APIVersion())).Create(ctx, u, metav1.CreateOptions{})
			require.NoError(t, err)

			got, err := c.Get(ctx, "labelled")
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"team": "net"}, got.Labels)
			_, err = c.AddFamily(ctx, "labelled", pfx("fd00:10:100::/108"), servicecidr.WriteOptions{})
			require.NoError(t, err)
			got, err = c.Get(ctx, "labelled")
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"team": "net"}, got.Labels)
			assert.Len(t, got.CIDRs, 2)
		})
	}
}

// TestAddFamilySendsTheResourceVersionItRead: AddFamily's update carries
// the resourceVersion of the object it checked, not that of the update's
// own read: a change made between the two is a conflict, never overwritten.
// Here the update's read answers with another resourceVersion ("999", as
// if someone had written meanwhile); the server still holds the one
// AddFamily read, so the update succeeds only when that one is sent.
func TestAddFamilySendsTheResourceVersionItRead(t *testing.T) {
	ctx := context.Background()
	for _, v := range []string{"v1", "v1alpha1"} {
		t.Run(v, func(t *testing.T) {
			cl := servicecidrtest.MustNew(servicecidrtest.Options{Version: v,
				ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}, {Name: "extra", CIDRs: []string{"10.100.0.0/16"}}}})
			c := connect(t, cl)
			before, err := c.Get(ctx, "extra")
			require.NoError(t, err)
			gets := 0
			moved := func(a k8stesting.Action) bool {
				if g, ok := a.(k8stesting.GetAction); !ok || g.GetName() != "extra" {
					return false
				}
				gets++
				return gets == 2 // the update's own read
			}
			if v == "v1" {
				cl.Kube.PrependReactor("get", "servicecidrs", func(a k8stesting.Action) (bool, runtime.Object, error) {
					if !moved(a) {
						return false, nil, nil
					}
					return true, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra", UID: before.UID, ResourceVersion: "999"},
						Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.100.0.0/16"}}}, nil
				})
			} else {
				cl.Dynamic.PrependReactor("get", "servicecidrs", func(a k8stesting.Action) (bool, runtime.Object, error) {
					if !moved(a) {
						return false, nil, nil
					}
					u := servicecidr.ToUnstructured(before, c.APIVersion())
					u.SetResourceVersion("999")
					return true, u, nil
				})
			}
			_, err = c.AddFamily(ctx, "extra", pfx("fd00:10:100::/108"), servicecidr.WriteOptions{})
			require.NoError(t, err, "the update sent the resourceVersion AddFamily read")
			assert.Equal(t, 2, gets)
		})
	}
}

// TestDeleteWithAStaleResourceVersionIsAConflict: a resourceVersion alone
// is a precondition too.
func TestDeleteWithAStaleResourceVersionIsAConflict(t *testing.T) {
	cl := servicecidrtest.MustNew(servicecidrtest.Options{ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{
		{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}, {Name: "b", CIDRs: []string{"10.97.0.0/16"}}}})
	c := connect(t, cl)
	err := c.Delete(context.Background(), "b", servicecidr.DeleteOptions{ResourceVersion: "1"})
	assert.True(t, apierrors.IsConflict(err), "%v", err)
	_, ok := cl.ServiceCIDR("b")
	assert.True(t, ok)
}

// TestDeleteRefusesTheLastServiceCIDRLeftBesideATerminatingDefault: with
// "kubernetes" being deleted (by someone else), the only other ServiceCIDR
// is the last one, even of a family "kubernetes" did not have.
func TestDeleteRefusesTheLastServiceCIDRLeftBesideATerminatingDefault(t *testing.T) {
	ctx := context.Background()
	cl := servicecidrtest.MustNew(servicecidrtest.Options{ControllerDelay: 1 << 30, ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{
		{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}, {Name: "v6", CIDRs: []string{"fd00:96::/108"}}}})
	c := connect(t, cl)
	require.NoError(t, cl.Kube.NetworkingV1().ServiceCIDRs().Delete(ctx, "kubernetes", metav1.DeleteOptions{}))
	st, _ := cl.ServiceCIDR("kubernetes")
	require.True(t, st.Terminating)
	err := c.Delete(ctx, "v6", servicecidr.DeleteOptions{})
	assert.ErrorIs(t, err, servicecidr.ErrLastServiceCIDR)
	assert.ErrorContains(t, err, "last ServiceCIDR for IPv6")
}

// TestWaitReadyZeroTimeoutMeansTheDefault: a zero Timeout waits up to the
// default (two minutes), not not at all; a zero Interval is the default
// second.
func TestWaitReadyZeroTimeoutMeansTheDefault(t *testing.T) {
	cl := servicecidrtest.MustNew(servicecidrtest.Options{ControllerDelay: 20})
	c := connect(t, cl)
	_, err := c.Create(context.Background(), "slow", []netip.Prefix{pfx("10.100.0.0/16")}, servicecidr.WriteOptions{})
	require.NoError(t, err)
	start := time.Now()
	got, err := c.WaitReady(context.Background(), "slow", servicecidr.WaitOptions{Interval: time.Millisecond})
	require.NoError(t, err, "after %s", time.Since(start))
	assert.True(t, got.IsReady())
	// No option at all: the defaults (a ticker of zero would panic).
	got, err = c.WaitReady(context.Background(), "slow", servicecidr.WaitOptions{})
	require.NoError(t, err)
	assert.True(t, got.IsReady())
}
