package flannel

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// flanneldStore is a store plus the writes flanneld itself makes, so the
// story runs the same against MemKV and a real etcd.
type flanneldStore interface {
	// grant creates an etcd lease, as flanneld's createSubnet/updateSubnet do.
	grant(t *testing.T, ttl time.Duration) int64
	// put writes a key unconditionally, as flanneld's updateSubnet (renewal) does.
	put(t *testing.T, key, value string, lease int64)
	// get reads a key's value and lease (nil when absent).
	get(t *testing.T, key string) *KeyValue
}

type memStore struct{ m *MemKV }

func (s memStore) grant(_ *testing.T, ttl time.Duration) int64 { return s.m.Grant(ttl) }
func (s memStore) put(t *testing.T, key, value string, lease int64) {
	_, err := s.m.Put(key, []byte(value), lease)
	require.NoError(t, err)
}
func (s memStore) get(t *testing.T, key string) *KeyValue {
	res, err := s.m.Get(context.Background(), key, GetOptions{})
	require.NoError(t, err)
	if len(res.KVs) == 0 {
		return nil
	}
	return &res.KVs[0]
}

const (
	storyConfig = `{"Network": "172.7.0.0/16", "Backend": {"Type": "host-gw"}}`
	pfx         = "/coreos.com/network"
)

// flanneldValue is the JSON flanneld's json.Marshal(LeaseAttrs) writes.
func flanneldValue(publicIP, backend string) string {
	if backend == "vxlan" {
		return fmt.Sprintf(`{"PublicIP":%q,"PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"12:c6:65:89:b4:e3"}}`, publicIP)
	}
	return fmt.Sprintf(`{"PublicIP":%q,"PublicIPv6":null,"BackendType":%q}`, publicIP, backend)
}

// storyNodes are the cluster's nodes; 10.0.0.99 (the stale lease's node) is gone.
var storyNodes = []NodeAddresses{
	{Name: "node-a", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}},
	{Name: "node-b", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}},
	{Name: "node-c", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.3")}},
	{Name: "node-d", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.4")}},
	{Name: "node-e", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}},
}

// seedStory loads the fourth story: the config, and leases created the way
// flanneld creates them (24 h etcd leases), plus the leftovers operators
// found: a stale lease of a removed node (not renewed), a stale dual-stack
// duplicate, a vxlan node in a host-gw network and a lease from an older
// network.
func seedStory(t *testing.T, s flanneldStore) {
	t.Helper()
	s.put(t, pfx+"/config", storyConfig, 0)
	for _, l := range []struct {
		name, ip, backend string
		ttl               time.Duration
	}{
		{"172.7.1.0-24", "10.0.0.1", "host-gw", 24 * time.Hour},
		{"172.7.2.0-24", "10.0.0.2", "host-gw", 24 * time.Hour},
		{"172.7.3.0-24", "10.0.0.3", "host-gw", 24 * time.Hour},
		{"172.7.3.0-24&fd00:10:244:3::-64", "10.0.0.3", "host-gw", 24 * time.Hour},
		{"172.7.4.0-24", "10.0.0.4", "vxlan", 24 * time.Hour},
		{"172.7.9.0-24", "10.0.0.99", "host-gw", 20 * time.Minute},
		{"10.99.1.0-24", "10.0.0.5", "host-gw", 24 * time.Hour},
	} {
		s.put(t, pfx+"/subnets/"+l.name, flanneldValue(l.ip, l.backend), s.grant(t, l.ttl))
	}
}

func findingKeys(rep *Report, kind FindingKind) [][]string {
	var out [][]string
	for _, f := range rep.Findings {
		if f.Kind == kind {
			out = append(out, f.Keys)
		}
	}
	return out
}

// crashHook is called before a write of the resume plan; it simulates the
// crash and returns the error the run should see (nil: the write itself must
// fail). resume brings the store back and returns a fresh registry.
type crashHook struct {
	crash  func(t *testing.T) error
	resume func(t *testing.T) *Registry
}

// runStory runs the fourth story end to end: audit, clean-up, a move, a move
// racing a lease renewal, and a network change interrupted by a crash and
// finished by a rerun.
func runStory(t *testing.T, ctx context.Context, s flanneldStore, reg *Registry, ch crashHook) {
	seedStory(t, s)

	// Audit.
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Leases, 7)
	require.NotNil(t, snap.Config.Resolved)
	l1 := snap.Lease(pfx + "/subnets/172.7.1.0-24")
	require.NotNil(t, l1)
	assert.NotZero(t, l1.LeaseID)
	assert.InDelta(t, 86400, l1.TTLSeconds, 60, "24 h etcd lease")
	assert.EqualValues(t, 86400, l1.GrantedTTLSeconds)

	rep := Audit(snap, AuditOptions{Nodes: storyNodes})
	dup := pfx + "/subnets/172.7.3.0-24&fd00:10:244:3::-64"
	stale := pfx + "/subnets/172.7.9.0-24"
	old := pfx + "/subnets/10.99.1.0-24"
	assert.Equal(t, [][]string{{pfx + "/subnets/172.7.3.0-24", dup}}, findingKeys(rep, FindingDuplicate))
	assert.Equal(t, [][]string{{old}}, findingKeys(rep, FindingOutsideNetwork))
	assert.Equal(t, [][]string{{pfx + "/subnets/172.7.3.0-24", dup}}, findingKeys(rep, FindingDuplicatePublicIP))
	assert.Equal(t, [][]string{{stale}}, findingKeys(rep, FindingUnknownNode))
	assert.Equal(t, [][]string{{stale}}, findingKeys(rep, FindingNotRenewed))
	assert.Equal(t, [][]string{{pfx + "/subnets/172.7.4.0-24"}}, findingKeys(rep, FindingBackendMismatch))
	require.Len(t, rep.Capacity, 1)
	assert.Equal(t, "255", rep.Capacity[0].Subnets.String())
	assert.Equal(t, "5", rep.Capacity[0].Leased.String(), "172.7.1-4 and 9; the duplicate counts once, 10.99.1 not at all")
	assert.Equal(t, "250", rep.Capacity[0].Free.String())
	assert.Equal(t, cidr.SeverityError, rep.Findings[0].Severity, "errors first")

	// Clean up the stale lease and the duplicate.
	del, err := PlanDelete(snap, append(rep.Keys(FindingUnknownNode), dup), "stale lease found by audit")
	require.NoError(t, err)
	res, err := reg.Apply(ctx, del, ApplyOptions{DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, []Outcome{OutcomeWouldApply, OutcomeWouldApply}, outcomes(res))
	assert.NotNil(t, s.get(t, stale), "the dry run wrote nothing")
	res, err = reg.Apply(ctx, del, ApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, []Outcome{OutcomeApplied, OutcomeApplied}, outcomes(res))
	assert.Nil(t, s.get(t, stale))
	assert.Nil(t, s.get(t, dup))
	res, err = reg.Apply(ctx, del, ApplyOptions{})
	require.NoError(t, err, "reapplying a finished plan does nothing")
	assert.Equal(t, []Outcome{OutcomeAlreadyDone, OutcomeAlreadyDone}, outcomes(res))

	// Move the lease from the old network into the network.
	snap, err = reg.Snapshot(ctx)
	require.NoError(t, err)
	before := snap.Lease(old)
	mv, err := PlanMove(snap, []MoveRequest{{Key: "10.99.1.0-24"}})
	require.NoError(t, err)
	require.Len(t, mv.Steps, 1)
	assert.Equal(t, pfx+"/subnets/172.7.5.0-24", mv.Steps[0].NewKey, "lowest free subnet flanneld would accept")
	_, err = yaml.Marshal(mv)
	require.NoError(t, err)
	_, err = reg.Apply(ctx, mv, ApplyOptions{})
	require.NoError(t, err)
	assert.Nil(t, s.get(t, old))
	moved := s.get(t, pfx+"/subnets/172.7.5.0-24")
	require.NotNil(t, moved)
	assert.Equal(t, before.Value, string(moved.Value), "same value, byte for byte")
	assert.Equal(t, before.LeaseID, moved.Lease, "same etcd lease attached")

	// A flanneld renewal racing a move is detected and not overwritten.
	snap, err = reg.Snapshot(ctx)
	require.NoError(t, err)
	keyB := pfx + "/subnets/172.7.2.0-24"
	mvB, err := PlanMove(snap, []MoveRequest{{Key: keyB, To: SubnetKey{IPv4: netip.MustParsePrefix("172.7.20.0/24")}}})
	require.NoError(t, err)
	var renewedLease int64
	_, err = reg.Apply(ctx, mvB, ApplyOptions{BeforeWrite: func(context.Context, int, Step) error {
		// flanneld's RenewLease: grant a fresh 24 h lease and put the key again.
		renewedLease = s.grant(t, 24*time.Hour)
		s.put(t, keyB, flanneldValue("10.0.0.2", "host-gw"), renewedLease)
		return nil
	}})
	var ce *ConflictError
	require.ErrorAs(t, err, &ce)
	assert.ErrorIs(t, err, ErrConflict)
	assert.Equal(t, keyB, ce.Key)
	assert.Contains(t, ce.Reason, "flanneld renewed it")
	kvB := s.get(t, keyB)
	require.NotNil(t, kvB)
	assert.Equal(t, renewedLease, kvB.Lease, "the renewal stands")
	assert.Nil(t, s.get(t, pfx+"/subnets/172.7.20.0-24"), "nothing was moved")

	// Move the whole network, keeping offsets; etcd goes down mid-plan.
	snap, err = reg.Snapshot(ctx)
	require.NoError(t, err)
	sn, err := PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("172.8.0.0/16"), MoveLeases: true})
	require.NoError(t, err)
	require.Len(t, sn.Steps, 6) // config + 172.7.{1,2,3,4,5}
	assert.Equal(t, ActionPutConfig, sn.Steps[0].Action)
	assert.JSONEq(t, `{"Network": "172.8.0.0/16", "Backend": {"Type": "host-gw"}}`, sn.Steps[0].Value)
	assert.Equal(t, `{"Network": "172.8.0.0/16", "Backend": {"Type": "host-gw"}}`, sn.Steps[0].Value, "minimal text edit")
	writes := 0
	_, err = reg.Apply(ctx, sn, ApplyOptions{BeforeWrite: func(context.Context, int, Step) error {
		writes++
		if writes == 3 {
			return ch.crash(t)
		}
		return nil
	}})
	require.Error(t, err, "the run dies with the store")
	reg = ch.resume(t)
	res, err = reg.Apply(ctx, sn, ApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, []Outcome{OutcomeAlreadyDone, OutcomeAlreadyDone, OutcomeApplied, OutcomeApplied, OutcomeApplied, OutcomeApplied}, outcomes(res))
	assert.True(t, res.Done)
	v, err := reg.Verify(ctx, sn)
	require.NoError(t, err)
	assert.True(t, v.Done)

	snap, err = reg.Snapshot(ctx)
	require.NoError(t, err)
	var keys []string
	for _, l := range snap.Leases {
		keys = append(keys, l.Key)
	}
	assert.Equal(t, []string{pfx + "/subnets/172.8.1.0-24", pfx + "/subnets/172.8.2.0-24", pfx + "/subnets/172.8.3.0-24",
		pfx + "/subnets/172.8.4.0-24", pfx + "/subnets/172.8.5.0-24"}, keys)
	rep = Audit(snap, AuditOptions{Nodes: storyNodes})
	assert.Zero(t, rep.Count(cidr.SeverityError), "%v", rep.Findings)
	assert.Equal(t, [][]string{{pfx + "/subnets/172.8.4.0-24"}}, findingKeys(rep, FindingBackendMismatch), "left for the operator")
}

func outcomes(r *ApplyResult) []Outcome {
	var out []Outcome
	for _, s := range r.Steps {
		out = append(out, s.Outcome)
	}
	return out
}

// faultKV fails every call while down is set, like an unreachable etcd.
type faultKV struct {
	KV
	down bool
}

var errStoreDown = errors.New("etcd unavailable (injected)")

func (f *faultKV) Get(ctx context.Context, key string, o GetOptions) (*GetResult, error) {
	if f.down {
		return nil, errStoreDown
	}
	return f.KV.Get(ctx, key, o)
}

func (f *faultKV) Txn(ctx context.Context, t Txn) (*TxnResult, error) {
	if f.down {
		return nil, errStoreDown
	}
	return f.KV.Txn(ctx, t)
}

func TestStoryMemKV(t *testing.T) {
	ctx := context.Background()
	m := NewMemKV(MemKVOptions{})
	fk := &faultKV{KV: m}
	reg, err := NewRegistry(fk, RegistryOptions{})
	require.NoError(t, err)
	runStory(t, ctx, memStore{m}, reg, crashHook{
		crash: func(*testing.T) error { fk.down = true; return nil },
		resume: func(t *testing.T) *Registry {
			fk.down = false
			return reg
		},
	})
}
