package flannel

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestApplyDeleteLeaseRefusedWhenRenewedJustBeforeTheWrite: flanneld renews
// a lease after Apply's last read and before its delete (the renewal lands
// between the check and the transaction). The delete's ModRevision compare
// must refuse it: the lease is alive, and deleting it takes a live node's
// subnet away.
func TestApplyDeleteLeaseRefusedWhenRenewedJustBeforeTheWrite(t *testing.T) {
	ctx := context.Background()
	m, _, reg := newConfiguredRegistry(t, storyConfig)
	key := pfx + "/subnets/172.7.1.0-24"
	putLease(t, m, "172.7.1.0-24", "10.0.0.1", "host-gw")
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	del, err := PlanDelete(snap, []string{"172.7.1.0-24"}, "")
	require.NoError(t, err)
	require.Len(t, del.Steps, 1)
	require.Equal(t, ActionDeleteLease, del.Steps[0].Action)

	// BeforeWrite runs on Apply's goroutine, which is the test goroutine here
	// (flannel's Apply is sequential); its error is still kept, not required.
	var renewErr error
	renewals := 0
	opts := ApplyOptions{BeforeWrite: func(_ context.Context, _ int, st Step) error {
		renewals++
		_, renewErr = m.Put(st.Key, []byte(flanneldValue("10.0.0.1", "host-gw")), m.Grant(24*time.Hour))
		return nil
	}}
	res, err := reg.Apply(ctx, del, opts)
	require.NoError(t, renewErr, "the renewal")
	require.Equal(t, 1, renewals, "the renewal ran between the check and the write")
	var ce *ConflictError
	require.ErrorAs(t, err, &ce, "a delete racing a renewal must be refused")
	assert.Equal(t, key, ce.Key)
	assert.Equal(t, []Outcome{OutcomeConflict}, outcomes(res))
	got, err := m.Get(ctx, key, GetOptions{})
	require.NoError(t, err)
	require.Len(t, got.KVs, 1, "the renewed (live) lease must still exist")
	assert.Equal(t, flanneldValue("10.0.0.1", "host-gw"), string(got.KVs[0].Value))
}

// TestPlanSetNetworkRefusesAMoveOntoAnOccupiedSubnet: a network move whose
// offset-preserving target for one lease is a subnet another lease already
// holds is refused when planned, before any step (the config rewrite comes
// first) can be written; the transaction's compare on the new key would
// only stop it at apply time, after the config was rewritten.
func TestPlanSetNetworkRefusesAMoveOntoAnOccupiedSubnet(t *testing.T) {
	ctx := context.Background()
	m, _, reg := newConfiguredRegistry(t, "{\n  \"Network\": \"10.5.0.0/16\",\n  \"SubnetMin\": \"10.5.2.0\",\n  \"Backend\": {\"Type\": \"vxlan\", \"VNI\": 1}\n}")
	putLease(t, m, "10.5.2.0-24", "10.0.0.1", "vxlan")
	putLease(t, m, "10.5.3.0-24", "10.0.0.2", "vxlan")
	// A node that already joined the new network holds 10.5.3.0's target.
	putLease(t, m, "10.20.3.0-24", "10.0.0.3", "vxlan")
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	rev := m.Revision()

	p, err := PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("10.20.0.0/16"), MoveLeases: true})
	require.ErrorIs(t, err, ErrInvalidRequest, "plan: %+v", p)
	assert.Nil(t, p)
	assert.ErrorContains(t, err, "10.5.3.0-24")
	assert.ErrorContains(t, err, "10.20.3.0/24")
	assert.Equal(t, rev, m.Revision(), "nothing written")

	// The free target alone is planned: the check names the occupied one only.
	free, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	kept := free.Leases[:0]
	for _, l := range free.Leases {
		if l.Key != pfx+"/subnets/10.5.3.0-24" {
			kept = append(kept, l)
		}
	}
	free.Leases = kept
	p, err = PlanSetNetwork(free, SetNetworkRequest{Network: netip.MustParsePrefix("10.20.0.0/16"), MoveLeases: true})
	require.NoError(t, err)
	require.Len(t, p.Steps, 2)
	assert.Equal(t, pfx+"/subnets/10.20.2.0-24", p.Steps[1].NewKey)
}
