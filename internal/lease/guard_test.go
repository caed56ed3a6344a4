package lease

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/internal/kubetest"
)

// A Group takes every Lease or none: when one scope is held elsewhere, the
// scopes it took first are released again, and the error names the holder.
func TestGroupAllOrNothing(t *testing.T) {
	ctx := context.Background()
	c := newClient()
	other := newLease(t, c, Options{Name: ScopeKubeadmConfig, Identity: "alice@laptop/41"})
	releaseOther, err := other.Lock(ctx)
	require.NoError(t, err)

	g, err := NewGroup(c, Options{Identity: "bob@desk/7"}, ScopeFlannel, ScopeNodeCIDR, ScopeFlannel, ScopeKubeadmConfig)
	require.NoError(t, err)
	assert.Equal(t, "kube-system/cidrshift-flannel, kube-system/cidrshift-nodecidr, kube-system/cidrshift-kubeadmcfg", g.String(), "a scope named twice is taken once")
	_, err = g.Lock(ctx)
	require.ErrorIs(t, err, ErrHeld)
	assert.Contains(t, err.Error(), "alice@laptop/41")
	for _, s := range []string{ScopeFlannel, ScopeNodeCIDR} {
		l, err := c.CoordinationV1().Leases(ns).Get(ctx, s, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Empty(t, deref(l.Spec.HolderIdentity), "%s released after the refusal", s)
	}
	require.Error(t, g.Check(), "a refused group holds nothing")

	releaseOther()
	release, err := g.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, g.Check())
	again, err := g.Lock(ctx)
	require.NoError(t, err, "the holder may lock again")
	again()
	require.NoError(t, g.Check(), "held until every Lock is released")
	for _, s := range []string{ScopeFlannel, ScopeNodeCIDR, ScopeKubeadmConfig} {
		l, err := c.CoordinationV1().Leases(ns).Get(ctx, s, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "bob@desk/7", deref(l.Spec.HolderIdentity), s)
	}
	release()
	require.ErrorIs(t, g.Check(), ErrNotHeld)

	_, err = NewGroup(c, Options{})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = NewGroup(c, Options{}, "Bad_Scope")
	require.ErrorIs(t, err, ErrInvalid)
}

func TestHoldAndCheckHeld(t *testing.T) {
	release, err := Hold(context.Background(), nil)
	require.NoError(t, err)
	release()
	require.NoError(t, CheckHeld(nil, "not deleting x"))

	c := newClient()
	l := newLease(t, c, Options{Identity: "bob@desk/7"})
	err = CheckHeld(l, "not deleting Service default/dns")
	require.ErrorIs(t, err, ErrNotHeld)
	assert.Contains(t, err.Error(), "not deleting Service default/dns: the run no longer holds its lock")
	release, err = Hold(context.Background(), l)
	require.NoError(t, err)
	require.NoError(t, CheckHeld(l, "not deleting Service default/dns"))
	release()
}

// HoldFor takes a free Lease around one write and releases it after; the
// holder's own Lease is taken again; a Lease held elsewhere and a lock that
// was lost are refused, saying what is not done, and nothing stays held.
func TestHoldFor(t *testing.T) {
	ctx := context.Background()
	release, err := HoldFor(ctx, nil, "not creating x")
	require.NoError(t, err)
	release()

	c := newClient()
	l := newLease(t, c, Options{Identity: "bob@desk/7"})
	release, err = HoldFor(ctx, l, "not creating x")
	require.NoError(t, err)
	require.NoError(t, l.Check(), "taken for the write")
	release()
	require.ErrorIs(t, l.Check(), ErrNotHeld, "released after it")

	run, err := l.Lock(ctx)
	require.NoError(t, err)
	release, err = HoldFor(ctx, l, "not creating x")
	require.NoError(t, err, "the run's own Lease")
	release()
	require.NoError(t, l.Check(), "still held by the run")
	run()

	other := newLease(t, c, Options{Identity: "alice@laptop/41"})
	releaseOther, err := other.Lock(ctx)
	require.NoError(t, err)
	_, err = HoldFor(ctx, l, "not creating x")
	require.ErrorIs(t, err, ErrHeld)
	assert.ErrorContains(t, err, "not creating x: taking the lock: ")
	assert.ErrorContains(t, err, "alice@laptop/41")
	releaseOther()

	lost := &kubetest.Lock{Name: "kube-system/cidrshift-servicecidr", ChecksLeft: 0}
	_, err = HoldFor(ctx, lost, "not creating x")
	require.ErrorIs(t, err, kubetest.ErrLockLost)
	assert.ErrorContains(t, err, "not creating x: the run no longer holds its lock: test lock lost: lease kube-system/cidrshift-servicecidr")
	assert.False(t, lost.Held(), "released after the refusal")
}
