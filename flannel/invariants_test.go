package flannel

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An edited NetConfPlan is refused as an invalid plan, before any write.
func TestApplyNetConfRefusesEditedPlan(t *testing.T) {
	ctx := context.Background()
	cs, updates := newKubeFake(t, allowAll, flannelConfigMap())
	nc, err := ReadNetConf(ctx, cs, KubeOptions{})
	require.NoError(t, err)
	p, err := PlanNetConf(nc, SetNetworkRequest{Network: netip.MustParsePrefix("10.240.0.0/12")}, nil)
	require.NoError(t, err)
	for name, edit := range map[string]func(q *NetConfPlan){
		"new config does not parse": func(q *NetConfPlan) { q.NewRaw = `{"Network": 7}` },
		"old config is not stored":  func(q *NetConfPlan) { q.OldRaw = `{"Network": "10.0.0.0/8"}` },
		"no key":                    func(q *NetConfPlan) { q.Key = "" },
	} {
		t.Run(name, func(t *testing.T) {
			q := *p
			edit(&q)
			_, err := ApplyNetConf(ctx, cs, &q, KubeApplyOptions{})
			assert.ErrorIs(t, err, ErrInvalidPlan)
			assert.ErrorIs(t, err, ErrInvalidRequest)
			assert.Zero(t, *updates)
		})
	}
	_, err = ApplyNetConf(ctx, cs, p, KubeApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, 1, *updates)
}

// Setting the Network the config already holds is refused: nothing to do.
func TestSetNetworkSameNetwork(t *testing.T) {
	_, _, err := SetNetworkText([]byte(`{"Network": "10.244.0.0/16"}`), SetNetworkRequest{Network: netip.MustParsePrefix("10.244.0.0/16")}, true)
	assert.ErrorIs(t, err, ErrInvalidRequest)
	assert.ErrorContains(t, err, "Network 10.244.0.0/16 is already the config's network")
	_, _, err = SetNetworkText([]byte(`{"Network": "10.244.0.0/16"}`), SetNetworkRequest{IPv6Network: netip.MustParsePrefix("fd00::/48")}, true)
	assert.ErrorIs(t, err, ErrInvalidRequest)
	assert.ErrorContains(t, err, "EnableIPv6")
}
