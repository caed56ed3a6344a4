package flannel

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/cidrshift/cidrshift/internal/kubetest"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// newTestRegistry returns an empty MemKV-backed registry with a fake clock.
func newTestRegistry(t *testing.T) (*MemKV, *fakeClock, *Registry) {
	t.Helper()
	clk := newFakeClock()
	m := NewMemKV(MemKVOptions{Now: clk.Now})
	reg, err := NewRegistry(m, RegistryOptions{})
	require.NoError(t, err)
	return m, clk, reg
}

// newConfiguredRegistry is newTestRegistry with config stored under <prefix>/config.
func newConfiguredRegistry(t *testing.T, config string) (*MemKV, *fakeClock, *Registry) {
	t.Helper()
	m, clk, reg := newTestRegistry(t)
	_, err := m.Put(pfx+"/config", []byte(config), 0)
	require.NoError(t, err)
	return m, clk, reg
}

func putLease(t *testing.T, m *MemKV, name, ip, backend string) int64 {
	t.Helper()
	id := m.Grant(24 * time.Hour)
	_, err := m.Put(pfx+"/subnets/"+name, []byte(flanneldValue(ip, backend)), id)
	require.NoError(t, err)
	return id
}

func TestNewRegistry(t *testing.T) {
	m := NewMemKV(MemKVOptions{})
	for _, p := range []string{"coreos.com/network", "/", "//"} {
		_, err := NewRegistry(m, RegistryOptions{Prefix: p})
		assert.ErrorIs(t, err, ErrInvalidRequest, p)
	}
	_, err := NewRegistry(nil, RegistryOptions{})
	assert.ErrorIs(t, err, ErrInvalidRequest)
	r, err := NewRegistry(m, RegistryOptions{Prefix: "/atomic.io/network/"})
	require.NoError(t, err)
	assert.Equal(t, "/atomic.io/network", r.Prefix())
	assert.Equal(t, "/atomic.io/network/config", r.ConfigKey())
	assert.Equal(t, "/atomic.io/network/subnets/10.1.0.0-24", r.LeaseKey(SubnetKey{IPv4: netip.MustParsePrefix("10.1.0.0/24")}))
}

func TestSnapshotAndReadConfig(t *testing.T) {
	ctx := context.Background()
	m, clk, reg := newTestRegistry(t)
	_, err := reg.ReadConfig(ctx)
	assert.ErrorIs(t, err, ErrConfigNotFound)

	_, err = m.Put(pfx+"/config", []byte(`{"Network": "10.0.0.0/31"}`), 0)
	require.NoError(t, err)
	putLease(t, m, "10.0.1.0-24", "192.168.0.1", "udp")
	_, err = m.Put(pfx+"/subnets/garbage", []byte("{}"), 0)
	require.NoError(t, err)
	_, err = m.Put(pfx+"/subnets/10.0.2.0-24", []byte("not json"), 0)
	require.NoError(t, err)
	_, err = m.Put(pfx+"/subnets/10.0.3.5-24", []byte(flanneldValue("192.168.0.3", "udp")), 0)
	require.NoError(t, err)
	_, err = m.Put(pfx+"/subnets.bak/10.0.4.0-24", []byte(flanneldValue("192.168.0.4", "udp")), 0)
	require.NoError(t, err)
	_, err = m.Put(pfx+"/other", []byte("x"), 0)
	require.NoError(t, err)
	_, err = m.Put("/coreos.com/networkx/config", []byte("x"), 0)
	require.NoError(t, err)
	clk.Advance(time.Hour)

	ce, err := reg.ReadConfig(ctx)
	require.NoError(t, err)
	assert.ErrorIs(t, ce.Err(), ErrInvalidConfig)
	assert.Contains(t, ce.Error, "network is too small")

	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Leases, 3)
	assert.Equal(t, pfx+"/subnets.bak/10.0.4.0-24", snap.Leases[0].Key, "flanneld reads keys next to subnets/ too")
	assert.EqualValues(t, 23*3600, snap.Leases[1].TTLSeconds)
	assert.Zero(t, snap.Leases[2].LeaseID)
	p, err := PlanDelete(snap, []string{pfx + "/subnets.bak/10.0.4.0-24"}, "backup flanneld mistakes for a lease")
	require.NoError(t, err)
	res, err := reg.Apply(ctx, p, ApplyOptions{DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, []Outcome{OutcomeWouldApply}, outcomes(res))
	require.Len(t, snap.BadLeases, 2)
	assert.Equal(t, pfx+"/subnets/10.0.2.0-24", snap.BadLeases[0].Key)
	assert.False(t, snap.BadLeases[0].Subnet.IsZero(), "key parsed, value did not")
	assert.True(t, snap.BadLeases[1].Subnet.IsZero())

	rep := Audit(snap, AuditOptions{})
	kinds := map[FindingKind]bool{}
	for _, f := range rep.Findings {
		kinds[f.Kind] = true
		assert.NotEmpty(t, f.Detail)
		assert.NotEmpty(t, f.String())
	}
	assert.Equal(t, map[FindingKind]bool{FindingConfigInvalid: true, FindingUnreadableKey: true, FindingUnreadableLease: true,
		FindingNonCanonicalKey: true, FindingReservation: true}, kinds)
	assert.Empty(t, rep.Capacity, "no capacity without a valid config")

	// A snapshot survives a JSON round trip (plans can be computed offline).
	b, err := json.Marshal(snap)
	require.NoError(t, err)
	var back Snapshot
	require.NoError(t, json.Unmarshal(b, &back))
	_, err = PlanMove(&back, []MoveRequest{{Key: "10.0.1.0-24"}})
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

func TestAuditNoConfigAndMixedBackends(t *testing.T) {
	ctx := context.Background()
	m, _, reg := newTestRegistry(t)
	putLease(t, m, "10.0.1.0-24", "192.168.0.1", "vxlan")
	putLease(t, m, "10.0.2.0-24", "192.168.0.2", "host-gw")
	putLease(t, m, "10.0.2.0-23", "192.168.0.3", "host-gw")
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	rep := Audit(snap, AuditOptions{Nodes: []NodeAddresses{}})
	assert.Equal(t, [][]string{{pfx + "/config"}}, findingKeys(rep, FindingConfigMissing))
	assert.Equal(t, [][]string{{pfx + "/subnets/10.0.1.0-24", pfx + "/subnets/10.0.2.0-23", pfx + "/subnets/10.0.2.0-24"}}, findingKeys(rep, FindingBackendMismatch))
	assert.Equal(t, [][]string{{pfx + "/subnets/10.0.2.0-23", pfx + "/subnets/10.0.2.0-24"}}, findingKeys(rep, FindingOverlap))
	assert.Len(t, findingKeys(rep, FindingUnknownNode), 3, "an empty node list makes every lease stale")
	for _, f := range rep.Findings {
		if f.Kind == FindingUnknownNode {
			assert.Equal(t, "PublicIP 192.168.0.1 belongs to no node: the lease is stale (it expires in 24h0m0s unless renewed) and can be deleted", f.Detail)
			break
		}
	}
	assert.Equal(t, 4, rep.Count(cidr.SeverityWarning))
}

func TestAuditExhausted(t *testing.T) {
	ctx := context.Background()
	m, _, reg := newConfiguredRegistry(t, `{"Network": "10.0.0.0/28"}`)
	for _, n := range []string{"10.0.0.4-30", "10.0.0.8-30", "10.0.0.12-30"} {
		putLease(t, m, n, "192.168.0.1", "udp")
	}
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	rep := Audit(snap, AuditOptions{})
	require.Len(t, rep.Capacity, 1)
	assert.Equal(t, "0", rep.Capacity[0].Free.String())
	assert.Len(t, findingKeys(rep, FindingExhausted), 1)
	_, err = PlanMove(snap, []MoveRequest{{Key: "10.0.0.4-30"}})
	assert.ErrorIs(t, err, ErrNoFreeSubnet)
}

func TestAuditDualStack(t *testing.T) {
	ctx := context.Background()
	m, _, reg := newConfiguredRegistry(t, `{"Network": "10.5.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan"}}`)
	putLease(t, m, "10.5.34.0-24&fd00:10:244:5::-64", "192.168.0.1", "vxlan")
	putLease(t, m, "10.5.35.0-24&fd00:10:244:5::-64", "192.168.0.2", "vxlan")
	putLease(t, m, "10.5.36.0-24", "192.168.0.3", "vxlan")
	putLease(t, m, "10.5.37.0-24&fd00:99::-64", "192.168.0.4", "vxlan")
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	rep := Audit(snap, AuditOptions{})
	assert.Equal(t, [][]string{{pfx + "/subnets/10.5.34.0-24&fd00:10:244:5::-64", pfx + "/subnets/10.5.35.0-24&fd00:10:244:5::-64"}}, findingKeys(rep, FindingDuplicate))
	assert.Equal(t, [][]string{{pfx + "/subnets/10.5.36.0-24"}}, findingKeys(rep, FindingIncompatible))
	assert.Equal(t, [][]string{{pfx + "/subnets/10.5.37.0-24&fd00:99::-64"}}, findingKeys(rep, FindingOutsideNetwork))
	for _, f := range rep.Findings {
		if f.Kind == FindingOutsideNetwork {
			assert.Contains(t, f.Detail, "fd00:99::/64 lies outside IPv6Network fd00:10:244::/56;")
		}
	}
	assert.Empty(t, leaseOverlaps(snap.Leases, cidr.IPv4), "the IPv4 subnets are all different")
	assert.Len(t, leaseOverlaps(snap.Leases, cidr.IPv6), 1, "two leases share fd00:10:244:5::/64")
	require.Len(t, rep.Capacity, 2)
	assert.Equal(t, "1", rep.Capacity[1].Leased.String())

	// Moving the duplicate picks a new IPv6 subnet and keeps the IPv4 one when asked.
	p, err := PlanMove(snap, []MoveRequest{{Key: "10.5.35.0-24&fd00:10:244:5::-64", To: SubnetKey{IPv4: netip.MustParsePrefix("10.5.35.0/24"), IPv6: netip.MustParsePrefix("fd00:10:244:7::/64")}}})
	require.NoError(t, err)
	assert.Equal(t, pfx+"/subnets/10.5.35.0-24&fd00:10:244:7::-64", p.Steps[0].NewKey)
	p, err = PlanMove(snap, []MoveRequest{{Key: "10.5.35.0-24&fd00:10:244:5::-64"}})
	require.NoError(t, err)
	assert.Equal(t, pfx+"/subnets/10.5.1.0-24&fd00:10:244:1::-64", p.Steps[0].NewKey)
	// The IPv4-only lease gets an IPv6 subnet too.
	p, err = PlanMove(snap, []MoveRequest{{Key: "10.5.36.0-24", To: SubnetKey{IPv4: netip.MustParsePrefix("10.5.36.0/24")}}})
	require.NoError(t, err)
	assert.Equal(t, pfx+"/subnets/10.5.36.0-24&fd00:10:244:1::-64", p.Steps[0].NewKey)
}

func TestPlanErrors(t *testing.T) {
	ctx := context.Background()
	m, clk, reg := newConfiguredRegistry(t, storyConfig)
	putLease(t, m, "172.7.1.0-24", "10.0.0.1", "host-gw")
	putLease(t, m, "172.7.2.0-24", "10.0.0.2", "host-gw")
	short := m.Grant(time.Minute)
	_, err := m.Put(pfx+"/subnets/172.7.3.0-24", []byte(flanneldValue("10.0.0.3", "host-gw")), short)
	require.NoError(t, err)
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)

	_, err = PlanDelete(snap, nil, "")
	assert.ErrorIs(t, err, ErrInvalidRequest)
	_, err = PlanDelete(snap, []string{"172.7.9.0-24"}, "")
	assert.ErrorIs(t, err, ErrNotFound)
	p, err := PlanDelete(snap, []string{"172.7.1.0-24", pfx + "/subnets/172.7.1.0-24"}, "")
	require.NoError(t, err)
	assert.Len(t, p.Steps, 1, "duplicates collapse")

	for name, rq := range map[string]MoveRequest{
		"unknown key":  {Key: "172.7.9.0-24"},
		"host bits":    {Key: "172.7.1.0-24", To: SubnetKey{IPv4: netip.MustParsePrefix("172.7.9.1/24")}},
		"wrong length": {Key: "172.7.1.0-24", To: SubnetKey{IPv4: netip.MustParsePrefix("172.7.9.0/25")}},
		"first subnet": {Key: "172.7.1.0-24", To: SubnetKey{IPv4: netip.MustParsePrefix("172.7.0.0/24")}},
		"taken":        {Key: "172.7.1.0-24", To: SubnetKey{IPv4: netip.MustParsePrefix("172.7.2.0/24")}},
		"same":         {Key: "172.7.1.0-24", To: SubnetKey{IPv4: netip.MustParsePrefix("172.7.1.0/24")}},
		"ipv6 off":     {Key: "172.7.1.0-24", To: SubnetKey{IPv4: netip.MustParsePrefix("172.7.9.0/24"), IPv6: netip.MustParsePrefix("fd00::/64")}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := PlanMove(snap, []MoveRequest{rq})
			require.Error(t, err)
		})
	}
	_, err = PlanMove(snap, []MoveRequest{{Key: "172.7.1.0-24"}, {Key: "172.7.1.0-24"}})
	assert.ErrorIs(t, err, ErrInvalidRequest)
	_, err = PlanMove(snap, nil)
	assert.ErrorIs(t, err, ErrInvalidRequest)

	// Two moves in one plan get distinct destinations.
	p, err = PlanMove(snap, []MoveRequest{{Key: "172.7.1.0-24"}, {Key: "172.7.2.0-24"}})
	require.NoError(t, err)
	assert.Equal(t, pfx+"/subnets/172.7.4.0-24", p.Steps[0].NewKey)
	assert.Equal(t, pfx+"/subnets/172.7.5.0-24", p.Steps[1].NewKey)

	// An expired lease cannot be moved: plan, let it expire, apply.
	mv, err := PlanMove(snap, []MoveRequest{{Key: "172.7.3.0-24"}})
	require.NoError(t, err)
	clk.Advance(2 * time.Minute)
	_, err = reg.Apply(ctx, mv, ApplyOptions{})
	var ce *ConflictError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Reason, "the lease is gone")
	snap2, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	snap2.Leases = append(snap2.Leases, Lease{Key: pfx + "/subnets/172.7.3.0-24", Subnet: SubnetKey{IPv4: netip.MustParsePrefix("172.7.3.0/24")}, LeaseID: short, TTLSeconds: -1, ModRevision: 1})
	_, err = PlanMove(snap2, []MoveRequest{{Key: "172.7.3.0-24"}})
	assert.ErrorIs(t, err, ErrLeaseNotFound)

	// Plans for another prefix, or hand-edited into nonsense, are refused.
	other, err := NewRegistry(m, RegistryOptions{Prefix: "/other"})
	require.NoError(t, err)
	_, err = other.Apply(ctx, p, ApplyOptions{})
	assert.ErrorIs(t, err, ErrStalePlan)
	bad := *p
	bad.Steps = []Step{{Action: "explode", Key: pfx + "/subnets/x"}}
	_, err = reg.Apply(ctx, &bad, ApplyOptions{})
	assert.ErrorIs(t, err, ErrInvalidRequest)
	bad.Steps = []Step{{Action: ActionPutConfig, Key: pfx + "/config", Value: `{"Network": "10.0.0.0/30"}`}}
	_, err = reg.Apply(ctx, &bad, ApplyOptions{})
	assert.ErrorIs(t, err, ErrInvalidRequest)
	bad.Steps = []Step{{Action: ActionDeleteLease, Key: pfx + "/config", ModRevision: 1}}
	_, err = reg.Apply(ctx, &bad, ApplyOptions{})
	assert.ErrorIs(t, err, ErrInvalidRequest)
	_, err = reg.Apply(ctx, nil, ApplyOptions{})
	assert.ErrorIs(t, err, ErrInvalidRequest)
}

func TestApplyConflicts(t *testing.T) {
	ctx := context.Background()
	m, _, reg := newConfiguredRegistry(t, storyConfig)
	putLease(t, m, "172.7.1.0-24", "10.0.0.1", "host-gw")
	putLease(t, m, "172.7.2.0-24", "10.0.0.2", "host-gw")
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)

	// A stale lease renewed after the audit is alive: the delete is refused.
	del, err := PlanDelete(snap, []string{"172.7.1.0-24"}, "")
	require.NoError(t, err)
	putLease(t, m, "172.7.1.0-24", "10.0.0.1", "host-gw")
	var events []StepResult
	res, err := reg.Apply(ctx, del, ApplyOptions{OnProgress: func(r StepResult) { events = append(events, r) }})
	var ce *ConflictError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, pfx+"/subnets/172.7.1.0-24", ce.Key)
	assert.Equal(t, []Outcome{OutcomeConflict}, outcomes(res))
	assert.Len(t, events, 1)
	// A dry run reports the conflict too, after checking every step.
	_, err = reg.Apply(ctx, del, ApplyOptions{DryRun: true})
	assert.ErrorIs(t, err, ErrConflict)

	// The destination of a move taken meanwhile by another node.
	mv, err := PlanMove(snap, []MoveRequest{{Key: "172.7.2.0-24", To: SubnetKey{IPv4: netip.MustParsePrefix("172.7.9.0/24")}}})
	require.NoError(t, err)
	putLease(t, m, "172.7.9.0-24", "10.0.0.9", "host-gw")
	_, err = reg.Apply(ctx, mv, ApplyOptions{})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, pfx+"/subnets/172.7.9.0-24", ce.Key)
	_, err = m.Delete(pfx + "/subnets/172.7.9.0-24")
	require.NoError(t, err)

	// A move whose old key a flanneld renewal recreates afterwards is reported.
	res, err = reg.Apply(ctx, mv, ApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, []Outcome{OutcomeApplied}, outcomes(res))
	_, err = m.Put(pfx+"/subnets/172.7.2.0-24", []byte(flanneldValue("10.0.0.2", "host-gw")), m.Grant(24*time.Hour))
	require.NoError(t, err)
	_, err = reg.Apply(ctx, mv, ApplyOptions{})
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Reason, "renewal racing the move")
	v, err := reg.Verify(ctx, mv)
	assert.Error(t, err)
	assert.Equal(t, []Outcome{OutcomeConflict}, outcomes(v))

	// A config changed since the plan.
	pc, err := PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("172.9.0.0/16")})
	require.NoError(t, err)
	v, err = reg.Verify(ctx, pc)
	assert.Error(t, err)
	assert.Equal(t, []Outcome{OutcomePending}, outcomes(v))
	_, err = m.Put(pfx+"/config", []byte(`{"Network": "172.7.0.0/16"}`), 0)
	require.NoError(t, err)
	_, err = reg.Apply(ctx, pc, ApplyOptions{})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, pfx+"/config", ce.Key)
}

func TestPlanSetNetwork(t *testing.T) {
	ctx := context.Background()
	m, _, reg := newConfiguredRegistry(t, "{\n  \"Network\": \"10.5.0.0/16\",\n  \"SubnetMin\": \"10.5.2.0\",\n  \"Backend\": {\"Type\": \"vxlan\", \"VNI\": 1}\n}")
	putLease(t, m, "10.5.2.0-24", "10.0.0.1", "vxlan")
	putLease(t, m, "10.5.200.0-24", "10.0.0.2", "vxlan")
	putLease(t, m, "10.99.0.0-24", "10.0.0.3", "vxlan")
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)

	p, err := PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("10.20.0.0/16")})
	require.NoError(t, err)
	require.Len(t, p.Steps, 1)
	assert.Equal(t, "{\n  \"Network\": \"10.20.0.0/16\",\n  \"SubnetMin\": \"10.20.2.0\",\n  \"Backend\": {\"Type\": \"vxlan\", \"VNI\": 1}\n}", p.Steps[0].Value)
	assert.Contains(t, p.Warnings[1], "3 lease(s) do not fit")

	p, err = PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("10.20.0.0/16"), MoveLeases: true})
	require.NoError(t, err)
	require.Len(t, p.Steps, 3)
	assert.Equal(t, pfx+"/subnets/10.20.2.0-24", p.Steps[1].NewKey)
	assert.Equal(t, pfx+"/subnets/10.20.200.0-24", p.Steps[2].NewKey)
	assert.Contains(t, p.Warnings[1], "10.99.0.0-24 (10.99.0.0/24) lies outside the old network")
	y, err := yaml.Marshal(p)
	require.NoError(t, err)
	var back Plan
	require.NoError(t, yaml.Unmarshal(y, &back))
	assert.Equal(t, *p, back, "plans round-trip through YAML")

	// Growing the network around the old one keeps offsets; shrinking it cannot.
	_, err = PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("10.5.0.0/17"), MoveLeases: true})
	assert.ErrorIs(t, err, ErrInvalidRequest)
	assert.ErrorContains(t, err, "10.5.200.0-24")
	p, err = PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("10.4.0.0/15"), MoveLeases: true})
	require.NoError(t, err)
	assert.Len(t, p.Steps, 1, "10.5.x leases are still inside 10.4.0.0/15 and above the rebased SubnetMin: flanneld keeps them, nothing to move")

	_, err = PlanSetNetwork(snap, SetNetworkRequest{IPv6Network: netip.MustParsePrefix("10.0.0.0/8")})
	assert.ErrorIs(t, err, ErrInvalidRequest)
	_, err = PlanSetNetwork(&Snapshot{Prefix: pfx}, SetNetworkRequest{Network: netip.MustParsePrefix("10.20.0.0/16")})
	assert.ErrorIs(t, err, ErrConfigNotFound)
}

func TestPlanPutConfig(t *testing.T) {
	ctx := context.Background()
	_, _, reg := newTestRegistry(t)
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	_, err = PlanPutConfig(snap, []byte(`{"Network": "10.0.0.0/30"}`))
	assert.ErrorIs(t, err, ErrInvalidConfig)
	_, err = PlanPutConfig(snap, []byte(`{`))
	assert.ErrorIs(t, err, ErrInvalidConfig)
	p, err := PlanPutConfig(snap, []byte(storyConfig))
	require.NoError(t, err)
	assert.Zero(t, p.Steps[0].ModRevision, "the key must not exist yet")
	res, err := reg.Apply(ctx, p, ApplyOptions{})
	require.NoError(t, err)
	assert.True(t, res.Done)
	res, err = reg.Apply(ctx, p, ApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, []Outcome{OutcomeAlreadyDone}, outcomes(res))
	ce, err := reg.ReadConfig(ctx)
	require.NoError(t, err)
	assert.Equal(t, storyConfig, ce.Raw)
}

// A move transaction is atomic: if the write fails, neither key changes.
// oneMove is a registry with one host-gw lease and the plan that moves it.
func oneMove(t *testing.T) (*MemKV, *Registry, *Plan) {
	t.Helper()
	m, _, reg := newConfiguredRegistry(t, storyConfig)
	putLease(t, m, "172.7.1.0-24", "10.0.0.1", "host-gw")
	snap, err := reg.Snapshot(context.Background())
	require.NoError(t, err)
	mv, err := PlanMove(snap, []MoveRequest{{Key: "172.7.1.0-24"}})
	require.NoError(t, err)
	return m, reg, mv
}

func TestApplyStopsBeforeWrite(t *testing.T) {
	ctx := context.Background()
	m, reg, mv := oneMove(t)
	rev := m.Revision()
	_, err := reg.Apply(ctx, mv, ApplyOptions{BeforeWrite: func(context.Context, int, Step) error { return errStoreDown }})
	assert.ErrorIs(t, err, errStoreDown)
	assert.Equal(t, rev, m.Revision(), "nothing written")
	fk := &faultKV{KV: m, down: true}
	reg2, err := NewRegistry(fk, RegistryOptions{})
	require.NoError(t, err)
	_, err = reg2.Apply(ctx, mv, ApplyOptions{})
	assert.ErrorIs(t, err, errStoreDown)
	_, err = reg2.Snapshot(ctx)
	assert.ErrorIs(t, err, errStoreDown)
	_, err = reg2.Verify(ctx, mv)
	assert.ErrorIs(t, err, errStoreDown)
}

func TestApplyJournal(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newTestRegistry(t)
	_, err := m.Put(pfx+"/config", []byte(storyConfig), 0)
	require.NoError(t, err)
	putLease(t, m, "172.7.1.0-24", "10.0.0.1", "host-gw")
	putLease(t, m, "172.7.2.0-24", "10.0.0.2", "host-gw")
	fk := &faultKV{KV: m}
	reg, err := NewRegistry(fk, RegistryOptions{})
	require.NoError(t, err)
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	p, err := PlanDelete(snap, []string{"172.7.1.0-24", "172.7.2.0-24"}, "")
	require.NoError(t, err)
	dir := t.TempDir()

	_, err = reg.Apply(ctx, p, ApplyOptions{JournalDir: dir, BeforeWrite: func(_ context.Context, i int, _ Step) error {
		if i == 1 {
			fk.down = true // the second delete meets a dead store
		}
		return nil
	}})
	require.ErrorIs(t, err, errStoreDown)
	fk.down = false
	var rec journalRecord
	j, err := journal.Open(dir)
	require.NoError(t, err)
	found, err := j.Get("flannel/"+p.ID()+"/step-001", &rec)
	require.NoError(t, err)
	require.True(t, found, "the intent was journaled before the write")
	assert.Equal(t, "writing", rec.State)
	_, err = reg.Apply(ctx, p, ApplyOptions{JournalDir: dir})
	assert.ErrorIs(t, err, journal.ErrLocked, "one run at a time")
	require.NoError(t, j.Close())

	res, err := reg.Apply(ctx, p, ApplyOptions{JournalDir: dir})
	require.NoError(t, err)
	assert.True(t, res.Resumed)
	assert.Equal(t, []Outcome{OutcomeAlreadyDone, OutcomeApplied}, outcomes(res))
}

// A lock lost before the write stops Apply with nothing written.
func TestApplyStopsWhenTheLockIsLost(t *testing.T) {
	ctx := context.Background()
	m, reg, mv := oneMove(t)
	rev := m.Revision()
	lock := &kubetest.Lock{ChecksLeft: 0}
	_, err := reg.Apply(ctx, mv, ApplyOptions{Lock: lock})
	require.ErrorIs(t, err, kubetest.ErrLockLost)
	assert.ErrorContains(t, err, "not writing: the run no longer holds its lock")
	assert.Equal(t, rev, m.Revision(), "nothing written")
	assert.False(t, lock.Held())
	_, err = reg.Apply(ctx, mv, ApplyOptions{Lock: &kubetest.Lock{ChecksLeft: -1}})
	require.NoError(t, err)
	assert.Greater(t, m.Revision(), rev)
}
