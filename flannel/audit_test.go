package flannel

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAuditNotRenewedFiveMinutesPastTheMargin holds the not-renewed finding to
// its bound: flanneld renews a lease when less than --subnet-lease-renew-margin
// is left, so a lease with less than the margin minus five minutes left has a
// flanneld that is not renewing it. A lease with exactly that much left, or
// whose etcd lease is gone (-1), is not reported; one with nothing left is.
func TestAuditNotRenewedFiveMinutesPastTheMargin(t *testing.T) {
	ctx := context.Background()
	m, _, reg := newConfiguredRegistry(t, `{"Network": "10.0.0.0/16"}`)
	names := []string{"10.0.1.0-24", "10.0.2.0-24", "10.0.3.0-24", "10.0.4.0-24"}
	for i, n := range names {
		putLease(t, m, n, fmt.Sprintf("192.168.0.%d", i+1), "udp")
	}
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Leases, len(names))

	for _, tc := range []struct {
		margin time.Duration
		ttls   [4]int64 // by lease, in the order of names
		want   []string // the leases reported, by name
		detail string   // the first report's detail
	}{
		{0, [4]int64{3300, 3299, 0, -1}, []string{"10.0.2.0-24", "10.0.3.0-24"},
			"the etcd lease has 54m59s left; flanneld renews 1h0m0s before expiry, so the flanneld of 192.168.0.2 is not renewing it (node down or flanneld stopped)"},
		{2 * time.Hour, [4]int64{6900, 6899, 86400, 3300}, []string{"10.0.2.0-24", "10.0.4.0-24"},
			"the etcd lease has 1h54m59s left; flanneld renews 2h0m0s before expiry, so the flanneld of 192.168.0.2 is not renewing it (node down or flanneld stopped)"},
	} {
		for i := range snap.Leases {
			snap.Leases[i].TTLSeconds = tc.ttls[i]
		}
		rep := Audit(snap, AuditOptions{RenewMargin: tc.margin})
		var got []string
		var details []string
		for _, f := range rep.Findings {
			if f.Kind == FindingNotRenewed {
				require.Len(t, f.Keys, 1)
				got = append(got, f.Keys[0][len(pfx+"/subnets/"):])
				details = append(details, f.Detail)
			}
		}
		assert.Equal(t, tc.want, got, "margin %s, TTLs %v", tc.margin, tc.ttls)
		if assert.NotEmpty(t, details) {
			assert.Equal(t, tc.detail, details[0])
		}
	}
}

// TestAuditBackendMismatchUnderAnInvalidConfig: a config flanneld refuses but
// that parses still names the backend, and leases of another backend are
// reported against it (in lower case, as flanneld compares them).
func TestAuditBackendMismatchUnderAnInvalidConfig(t *testing.T) {
	ctx := context.Background()
	m, _, reg := newConfiguredRegistry(t, `{"Network": "10.0.0.0/31", "Backend": {"Type": "VXLAN"}}`)
	putLease(t, m, "10.0.0.0-24", "192.168.0.1", "vxlan")
	putLease(t, m, "10.0.1.0-24", "192.168.0.2", "host-gw")
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	require.NotNil(t, snap.Config.Config)
	require.Nil(t, snap.Config.Resolved)

	rep := Audit(snap, AuditOptions{})
	assert.Len(t, findingKeys(rep, FindingConfigInvalid), 1)
	var mismatch []Finding
	for _, f := range rep.Findings {
		if f.Kind == FindingBackendMismatch {
			mismatch = append(mismatch, f)
		}
	}
	require.Len(t, mismatch, 1)
	assert.Equal(t, []string{pfx + "/subnets/10.0.1.0-24"}, mismatch[0].Keys)
	assert.Contains(t, mismatch[0].Detail, "a host-gw flanneld but the config says vxlan")
}

// TestAuditUnknownNodeByIPv6: a lease whose PublicIP is 0.0.0.0 (no node has
// it) belongs to the node that has its PublicIPv6, and is stale when no node
// has that either.
func TestAuditUnknownNodeByIPv6(t *testing.T) {
	ctx := context.Background()
	m, _, reg := newConfiguredRegistry(t, `{"Network": "10.0.0.0/16"}`)
	for name, ip6 := range map[string]string{"10.0.1.0-24": "fd00::11", "10.0.2.0-24": "fd00::12"} {
		_, err := m.Put(pfx+"/subnets/"+name, []byte(`{"PublicIP":"0.0.0.0","PublicIPv6":"`+ip6+`","BackendType":"udp"}`), m.Grant(24*time.Hour))
		require.NoError(t, err)
	}
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Leases, 2)
	nodes := []NodeAddresses{{Name: "a", Addrs: []netip.Addr{netip.MustParseAddr("192.168.0.11"), netip.MustParseAddr("fd00::11")}}}
	rep := Audit(snap, AuditOptions{Nodes: nodes})
	assert.Equal(t, [][]string{{pfx + "/subnets/10.0.2.0-24"}}, findingKeys(rep, FindingUnknownNode))
}

// TestAuditOneBackendWithoutAConfigIsNoMismatch: with no config to compare
// with, leases all of one backend agree with each other.
func TestAuditOneBackendWithoutAConfigIsNoMismatch(t *testing.T) {
	m, _, reg := newTestRegistry(t)
	putLease(t, m, "10.0.1.0-24", "192.168.0.1", "vxlan")
	putLease(t, m, "10.0.2.0-24", "192.168.0.2", "VXLAN")
	snap, err := reg.Snapshot(context.Background())
	require.NoError(t, err)
	rep := Audit(snap, AuditOptions{})
	assert.Len(t, findingKeys(rep, FindingConfigMissing), 1)
	assert.Empty(t, findingKeys(rep, FindingBackendMismatch))
}

// TestAuditUnknownNodeSaysWhenTheLeaseEnds: a stale lease's finding says
// whether it ends on its own: a reservation never does, a gone etcd lease
// already did, a lease in its last second does unless renewed.
func TestAuditUnknownNodeSaysWhenTheLeaseEnds(t *testing.T) {
	m, _, reg := newTestRegistry(t)
	names := []string{"10.0.1.0-24", "10.0.2.0-24", "10.0.3.0-24"}
	for i, n := range names {
		putLease(t, m, n, fmt.Sprintf("192.168.0.%d", i+1), "udp")
	}
	snap, err := reg.Snapshot(context.Background())
	require.NoError(t, err)
	snap.Leases[0].LeaseID, snap.Leases[0].TTLSeconds = 0, 0
	snap.Leases[1].TTLSeconds = -1
	snap.Leases[2].TTLSeconds = 0
	rep := Audit(snap, AuditOptions{Nodes: []NodeAddresses{}})
	var details []string
	for _, f := range rep.Findings {
		if f.Kind == FindingUnknownNode {
			details = append(details, f.Detail)
		}
	}
	assert.Equal(t, []string{
		"PublicIP 192.168.0.1 belongs to no node: the lease is stale (a reservation, it never expires) and can be deleted",
		"PublicIP 192.168.0.2 belongs to no node: the lease is stale (its etcd lease is gone) and can be deleted",
		"PublicIP 192.168.0.3 belongs to no node: the lease is stale (it expires in 0s unless renewed) and can be deleted",
	}, details)
}
