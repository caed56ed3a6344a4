package flannel

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/cidrshift/cidrshift/cidr"
)

// countingKV counts the write transactions that reach the store.
type countingKV struct {
	KV
	writes int
}

func (c *countingKV) Txn(ctx context.Context, t Txn) (*TxnResult, error) {
	c.writes++
	return c.KV.Txn(ctx, t)
}

// fuzzPlanWorld is a registry with a vxlan 10.5.0.0/16 network, three
// leases (one with an etcd lease, one reservation, one IPv4 /24 at the top)
// and an unreadable key; it is rebuilt identically for every input, so the
// seed plans' mod revisions and lease IDs match it.
func fuzzPlanWorld(t testing.TB) (*MemKV, *countingKV, *Registry) {
	m := NewMemKV(MemKVOptions{Now: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }})
	must := func(_ int64, err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Put(pfx+"/config", []byte(`{"Network": "10.5.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan"}}`), 0))
	id := m.Grant(time.Hour)
	must(m.Put(pfx+"/subnets/10.5.1.0-24", []byte(flanneldValue("192.168.0.1", "vxlan")), id))
	must(m.Put(pfx+"/subnets/10.5.2.0-24", []byte(flanneldValue("192.168.0.2", "vxlan")), 0))
	must(m.Put(pfx+"/subnets/10.5.250.0-24", []byte(flanneldValue("192.168.0.3", "vxlan")), 0))
	must(m.Put(pfx+"/subnets/garbage", []byte(`not json`), 0))
	c := &countingKV{KV: m}
	reg, err := NewRegistry(c, RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m, c, reg
}

// fuzzPlanSeeds are valid plans for fuzzPlanWorld and hand-edited ones.
func fuzzPlanSeeds(t testing.TB) [][]byte {
	_, _, reg := fuzzPlanWorld(t)
	snap, err := reg.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var plans []*Plan
	add := func(p *Plan, err error) {
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
	}
	add(PlanMove(snap, []MoveRequest{{Key: "10.5.1.0-24"}}))
	add(PlanMove(snap, []MoveRequest{{Key: "10.5.1.0-24", To: SubnetKey{IPv4: netip.MustParsePrefix("10.5.9.0/24")}}, {Key: "10.5.2.0-24"}}))
	add(PlanDelete(snap, []string{"10.5.2.0-24", "garbage"}, ""))
	add(PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("10.6.0.0/16"), MoveLeases: true}))
	add(PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("10.4.0.0/15")}))
	var out [][]byte
	for _, p := range plans {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	// Edited: a move onto another node's subnet, a move outside the network,
	// a move whose To disagrees with its new key.
	edit := func(p *Plan, f func(*Plan)) {
		var q Plan
		b, _ := json.Marshal(p)
		_ = json.Unmarshal(b, &q)
		f(&q)
		b, _ = json.Marshal(&q)
		out = append(out, b)
	}
	edit(plans[0], func(q *Plan) {
		q.Steps[0].NewKey, q.Steps[0].To = pfx+"/subnets/10.5.2.0-24", SubnetKey{IPv4: netip.MustParsePrefix("10.5.2.0/24")}
	})
	edit(plans[0], func(q *Plan) {
		q.Steps[0].NewKey, q.Steps[0].To = pfx+"/subnets/10.99.0.0-24", SubnetKey{IPv4: netip.MustParsePrefix("10.99.0.0/24")}
	})
	edit(plans[1], func(q *Plan) { q.Steps[1].NewKey = pfx + "/subnets/10.5.250.0-23" })
	edit(plans[1], func(q *Plan) { q.Steps[0].Value = `{"PublicIP":"192.168.0.66","BackendType":"vxlan"}` })
	return out
}

// FuzzApplyPlan feeds random plan bytes to the plan decoder and Apply: a
// plan is either refused before any write, or valid and fully applied
// (Verify agrees, and no two leases overlap afterwards). Never half applied.
func FuzzApplyPlan(f *testing.F) {
	for _, s := range fuzzPlanSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(fuzzApplyPlanOnce)
}

func fuzzApplyPlanOnce(t *testing.T, data []byte) {
	{
		var p Plan
		if err := json.Unmarshal(data, &p); err != nil {
			return // not a plan: the decoder refuses it
		}
		_, kv, reg := fuzzPlanWorld(t)
		ctx := context.Background()
		res, err := reg.Apply(ctx, &p, ApplyOptions{})
		if err != nil {
			if kv.writes > 0 {
				t.Fatalf("plan refused after %d write(s): %v\nplan: %s", kv.writes, err, data)
			}
			if !errors.Is(err, ErrInvalidRequest) && !errors.Is(err, ErrStalePlan) && !errors.Is(err, ErrConflict) &&
				!errors.Is(err, ErrInvalidConfig) && !errors.Is(err, ErrInvalidPlan) {
				t.Fatalf("refused with an error of no known kind: %v", err)
			}
			return
		}
		if !res.Done {
			t.Fatalf("Apply returned no error but the plan is not done: %+v", res)
		}
		if _, err := reg.Verify(ctx, &p); err != nil {
			t.Fatalf("applied, but Verify fails: %v\nplan: %s", err, data)
		}
		snap, err := reg.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, fam := range []cidr.Family{cidr.IPv4, cidr.IPv6} {
			if fs := leaseOverlaps(snap.Leases, fam); len(fs) > 0 {
				t.Fatalf("applied plan left overlapping leases: %v\nplan: %s", fs, data)
			}
		}
		// Idempotent: applying it again writes nothing.
		before := kv.writes
		if _, err := reg.Apply(ctx, &p, ApplyOptions{}); err != nil {
			t.Fatalf("reapplying a finished plan: %v", err)
		}
		if kv.writes != before {
			t.Fatalf("reapplying a finished plan wrote %d time(s)", kv.writes-before)
		}
	}
}

// TestApplyPlanSeeds pins the seeds' outcomes, so the fuzz target is known to
// see both kinds: valid plans applied whole, edited ones refused unwritten.
func TestApplyPlanSeeds(t *testing.T) {
	seeds := fuzzPlanSeeds(t)
	for i, s := range seeds {
		var p Plan
		if err := json.Unmarshal(s, &p); err != nil {
			t.Fatal(err)
		}
		_, kv, reg := fuzzPlanWorld(t)
		res, err := reg.Apply(context.Background(), &p, ApplyOptions{})
		if i < 5 {
			if err != nil || !res.Done {
				t.Errorf("seed %d: a valid plan must apply: %v", i, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidPlan) || kv.writes != 0 {
			t.Errorf("seed %d: an edited plan must be refused as invalid before any write; got %v after %d write(s)", i, err, kv.writes)
		}
	}
}
