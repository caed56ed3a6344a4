package calico_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/calico"
)

// A hand-edited plan breaks its own invariants: Apply refuses it with
// ErrInvalidPlan, naming the field and the value, before any write.
func TestApplyRefusesAnEditedPlanBeforeAnyWrite(t *testing.T) {
	seed := fuzzSeedPlan(t)
	for _, tc := range []struct {
		name string
		edit func(p *calico.SwapPlan)
		want []string
	}{
		{"newCIDR disagrees with spec.cidr", func(p *calico.SwapPlan) { p.NewCIDR = netip.MustParsePrefix("10.21.0.0/16") }, []string{"newCIDR", "10.21.0.0/16", "10.20.0.0/16"}},
		{"spec.cidr disagrees with newCIDR", func(p *calico.SwapPlan) { p.NewPool.Spec.CIDR = "10.233.64.0/19" }, []string{"newCIDR", "10.233.64.0/19"}},
		{"new pool outside the cluster CIDR", func(p *calico.SwapPlan) {
			p.NewPool.Spec.CIDR, p.NewCIDR = "10.40.0.0/16", netip.MustParsePrefix("10.40.0.0/16")
		}, []string{"newPool.spec.cidr", "10.40.0.0/16", "outside the cluster CIDR"}},
		{"new pool on the Service CIDR", func(p *calico.SwapPlan) {
			p.NewPool.Spec.CIDR, p.NewCIDR = "10.96.0.0/16", netip.MustParsePrefix("10.96.0.0/16")
			p.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		}, []string{"10.96.0.0/16", "Service CIDR 10.96.0.0/12"}},
		{"new pool overlapping the old pool", func(p *calico.SwapPlan) {
			p.NewPool.Spec.CIDR, p.NewCIDR = "10.233.0.0/16", netip.MustParsePrefix("10.233.0.0/16")
			p.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.233.0.0/16")}
		}, []string{"10.233.0.0/16", "overlaps IPPool default-ipv4-ippool"}},
		{"new pool on the node network", func(p *calico.SwapPlan) {
			p.NewPool.Spec.CIDR, p.NewCIDR = "192.168.0.0/16", netip.MustParsePrefix("192.168.0.0/16")
			p.ClusterCIDRs = nil
		}, []string{"192.168.0.0/16", "node network"}},
		{"block size out of range", func(p *calico.SwapPlan) { p.NewPool.Spec.BlockSize = 40 }, []string{"newPool.spec.blockSize", `"40"`}},
		{"oldCIDR narrowed", func(p *calico.SwapPlan) { p.OldCIDR = netip.MustParsePrefix("10.233.64.0/24") }, []string{"oldCIDR", "10.233.64.0/24", "10.233.64.0/18"}},
		{"new pool disabled", func(p *calico.SwapPlan) { p.NewPool.Spec.Disabled = true }, []string{"newPool.spec.disabled"}},
		{"new pool selecting no node", func(p *calico.SwapPlan) { p.NewPool.Spec.NodeSelector = "!all()" }, []string{"newPool.spec.nodeSelector", "!all()"}},
		{"new pool named as the old", func(p *calico.SwapPlan) { p.NewPool.Name = p.OldPool.Name }, []string{"newPool.name", "default-ipv4-ippool"}},
		{"other family", func(p *calico.SwapPlan) {
			p.NewPool.Spec.CIDR, p.NewCIDR = "fd00:20::/64", netip.MustParsePrefix("fd00:20::/64")
		}, []string{"newCIDR", "fd00:20::/64", "family"}},
		{"unknown move", func(p *calico.SwapPlan) { p.Move = "delete" }, []string{"move", `"delete"`}},
		{"no old pool UID", func(p *calico.SwapPlan) { p.OldPool.UID = "" }, []string{"oldPool.uid"}},
		{"unmasked Service CIDR", func(p *calico.SwapPlan) { p.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.1/12")} }, []string{"serviceCIDRs[0]", "10.96.0.1/12"}},
		{"another kind", func(p *calico.SwapPlan) { p.Kind = "Plan" }, []string{"kind", `"Plan"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := calico.DecodePlan(seed)
			require.NoError(t, err)
			tc.edit(p)
			data, err := yaml.Marshal(p)
			require.NoError(t, err)
			_, derr := calico.DecodePlan(data)
			require.ErrorIs(t, derr, calico.ErrInvalidPlan)

			cl, writes := fuzzCluster()
			_, err = calico.Apply(context.Background(), cl, p, calico.ApplyOptions{JournalDir: t.TempDir(), PollInterval: time.Millisecond, DrainTimeout: time.Millisecond, WritesPerSecond: 1000})
			require.ErrorIs(t, err, calico.ErrInvalidPlan)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.Zero(t, writes.Load(), "no write")
		})
	}
}

// A pool created after the plan was made, overlapping the new pool, is found
// before the first write too.
func TestApplyRefusesANewPoolOverlappingBeforeAnyWrite(t *testing.T) {
	p, err := calico.DecodePlan(fuzzSeedPlan(t))
	require.NoError(t, err)
	cl, writes := fuzzCluster()
	_, err = cl.Pools.Create(context.Background(), calico.IPPool{Name: "late", Spec: calico.PoolSpec{CIDR: "10.20.128.0/17", Disabled: true}}, calico.WriteOptions{})
	require.NoError(t, err)
	writes.Store(0)
	_, err = calico.Apply(context.Background(), cl, p, calico.ApplyOptions{JournalDir: t.TempDir(), PollInterval: time.Millisecond, WritesPerSecond: 1000})
	require.ErrorIs(t, err, calico.ErrInvalidPool)
	assert.Contains(t, err.Error(), "overlaps IPPool late")
	assert.Zero(t, writes.Load())
}

// Verify refuses an old CIDR other than the existing old pool's: checking
// another range would prove nothing.
func TestVerifyRefusesAnotherCIDRThanThePool(t *testing.T) {
	cl, _ := fuzzCluster()
	_, err := calico.Verify(context.Background(), cl, calico.VerifyTarget{OldPool: "default-ipv4-ippool", OldCIDR: netip.MustParsePrefix("10.99.0.0/16")})
	require.ErrorIs(t, err, calico.ErrInvalidTarget)
	assert.Contains(t, err.Error(), "10.99.0.0/16")
	assert.Contains(t, err.Error(), "10.233.64.0/18")
}

// A plan whose new pool breaks several rules is refused naming the first
// and counting the others; one broken rule is named alone.
func TestDecodePlanCountsTheNewPoolsOtherProblems(t *testing.T) {
	seed := fuzzSeedPlan(t)
	for _, tc := range []struct {
		name       string
		edit       func(p *calico.SwapPlan)
		more, none string
	}{
		{"one", func(p *calico.SwapPlan) { p.NewPool.Spec.BlockSize = 40 }, "", "(and"},
		{"two", func(p *calico.SwapPlan) {
			p.NewPool.Spec.BlockSize = 40
			p.NewPool.Spec.CIDR, p.NewCIDR = "10.40.0.0/16", netip.MustParsePrefix("10.40.0.0/16")
		}, "(and 1 more)", "(and 2"},
	} {
		p, err := calico.DecodePlan(seed)
		require.NoError(t, err)
		tc.edit(p)
		data, err := yaml.Marshal(p)
		require.NoError(t, err)
		_, err = calico.DecodePlan(data)
		require.ErrorIs(t, err, calico.ErrInvalidPlan, tc.name)
		assert.Contains(t, err.Error(), "newPool.spec.blockSize", tc.name)
		assert.Contains(t, err.Error(), tc.more, tc.name)
		assert.NotContains(t, err.Error(), tc.none, tc.name)
	}
}
