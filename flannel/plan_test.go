package flannel

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlanDeleteReason: a delete without a reason is a stale lease's; a
// reason given is kept on every step.
func TestPlanDeleteReason(t *testing.T) {
	_, _, reg := fuzzPlanWorld(t)
	snap, err := reg.Snapshot(context.Background())
	require.NoError(t, err)
	for reason, want := range map[string]string{"": "stale lease", "node removed": "node removed"} {
		p, err := PlanDelete(snap, []string{"10.5.2.0-24", "garbage"}, reason)
		require.NoError(t, err)
		require.Len(t, p.Steps, 2)
		for _, st := range p.Steps {
			assert.Equal(t, want, st.Reason, st.Key)
		}
	}
}

// TestPlanMoveOfALeaseInItsLastSecond: etcd reports 0 s left for a lease in
// its last second, and -1 once it expired. The first still holds the key and
// is moved; the second is refused, as there is nothing left to move.
func TestPlanMoveOfALeaseInItsLastSecond(t *testing.T) {
	_, _, reg := fuzzPlanWorld(t)
	snap, err := reg.Snapshot(context.Background())
	require.NoError(t, err)
	l := snap.Lease(pfx + "/subnets/10.5.1.0-24")
	require.NotNil(t, l)
	require.NotZero(t, l.LeaseID)

	l.TTLSeconds = 0
	p, err := PlanMove(snap, []MoveRequest{{Key: "10.5.1.0-24"}})
	require.NoError(t, err)
	require.Len(t, p.Steps, 1)
	assert.Equal(t, l.LeaseID, p.Steps[0].LeaseID)

	l.TTLSeconds = -1
	_, err = PlanMove(snap, []MoveRequest{{Key: "10.5.1.0-24"}})
	assert.ErrorIs(t, err, ErrLeaseNotFound)
}

// TestPlanSetNetworkSaysOnlyWhatItDoes: a new network that keeps every lease
// and moves none warns of neither; the description names only the enabled
// families' networks.
func TestPlanSetNetworkSaysOnlyWhatItDoes(t *testing.T) {
	ctx := context.Background()
	m, _, reg := newConfiguredRegistry(t, `{"Network": "10.5.0.0/16", "IPv6Network": "fd00:10:244::/56"}`)
	putLease(t, m, "10.5.2.0-24", "10.0.0.1", "vxlan")
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)

	p, err := PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("10.4.0.0/15")})
	require.NoError(t, err)
	require.Len(t, p.Steps, 1)
	assert.Equal(t, []string{"flanneld reads the config only when it starts: every node keeps its current subnet until its flanneld restarts"}, p.Warnings)
	assert.Equal(t, "move the flannel network to 10.4.0.0/15", p.Description, "IPv6Network is set but not enabled")

	p, err = PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("10.20.0.0/16"), MoveLeases: true})
	require.NoError(t, err)
	require.Len(t, p.Steps, 2)
	assert.Contains(t, p.Warnings, moveWarning)

	_, err = m.Put(pfx+"/config", []byte(`{"Network": "10.5.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56"}`), 0)
	require.NoError(t, err)
	snap, err = reg.Snapshot(ctx)
	require.NoError(t, err)
	p, err = PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("10.4.0.0/15")})
	require.NoError(t, err)
	assert.Equal(t, "move the flannel network to 10.4.0.0/15 + fd00:10:244::/56", p.Description)
}

// TestSetNetworkRefusesAFamilyTheConfigDoesNotEnable: flanneld ignores the
// network of a family the config turns off, so setting it is refused; the
// family it turns on is set.
func TestSetNetworkRefusesAFamilyTheConfigDoesNotEnable(t *testing.T) {
	v6only := []byte(`{"EnableIPv4": false, "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56"}`)
	_, _, err := SetNetworkText(v6only, SetNetworkRequest{Network: netip.MustParsePrefix("10.20.0.0/16")}, true)
	assert.ErrorIs(t, err, ErrInvalidRequest)
	assert.ErrorContains(t, err, "new Network 10.20.0.0/16: the config does not enable IPv4 (EnableIPv4 is false)")
	out, _, err := SetNetworkText(v6only, SetNetworkRequest{IPv6Network: netip.MustParsePrefix("fd00:20::/56")}, true)
	require.NoError(t, err)
	assert.Equal(t, `{"EnableIPv4": false, "EnableIPv6": true, "IPv6Network": "fd00:20::/56"}`, string(out))
}
