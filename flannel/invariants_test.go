package flannel

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
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
	_, _, err = SetNetworkText([]byte(`{"Network": "10.244.0.0/16"}`), SetNetworkRequest{}, true)
	assert.ErrorIs(t, err, ErrInvalidRequest)
	assert.ErrorContains(t, err, "give a new Network or IPv6Network")
}

// TestApplyRefusesAnEditedPlanBeforeAnyWrite: each edit of a valid plan that
// the planner could not have made is refused as an invalid plan, naming what
// was edited, and nothing reaches the store. The world is fuzzPlanWorld with
// two more leases: 10.5.8.9-24, a key not written by flanneld that holds
// 10.5.8.0/24, and 10.5.7.0-24, written last, so created at exactly the
// plan's revision.
func TestApplyRefusesAnEditedPlanBeforeAnyWrite(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		plan func(*Snapshot) (*Plan, error)
		edit func(*Step)
		want string
	}{
		{"a delete's From is another subnet",
			func(s *Snapshot) (*Plan, error) { return PlanDelete(s, []string{"10.5.2.0-24"}, "") },
			func(st *Step) { st.From = SubnetKey{IPv4: netip.MustParsePrefix("10.5.3.0/24")} },
			"from 10.5.3.0-24 does not match the key's subnet 10.5.2.0-24"},
		{"a move onto a lease created at the plan's revision",
			func(s *Snapshot) (*Plan, error) { return PlanMove(s, []MoveRequest{{Key: "10.5.1.0-24"}}) },
			func(st *Step) {
				st.NewKey, st.To = pfx+"/subnets/10.5.7.0-24", SubnetKey{IPv4: netip.MustParsePrefix("10.5.7.0/24")}
			},
			"destination " + pfx + "/subnets/10.5.7.0-24 was already held at the plan's revision 9 (created at 8): the plan was edited"},
		{"a move onto a subnet another key holds",
			func(s *Snapshot) (*Plan, error) { return PlanMove(s, []MoveRequest{{Key: "10.5.1.0-24"}}) },
			func(st *Step) {
				st.NewKey, st.To = pfx+"/subnets/10.5.8.0-24", SubnetKey{IPv4: netip.MustParsePrefix("10.5.8.0/24")}
			},
			"destination 10.5.8.0/24 overlaps " + pfx + "/subnets/10.5.8.9-24 (10.5.8.9/24), held by another lease"},
		{"a move onto a subnet a lease flanneld cannot read holds",
			func(s *Snapshot) (*Plan, error) { return PlanMove(s, []MoveRequest{{Key: "10.5.1.0-24"}}) },
			func(st *Step) {
				st.NewKey, st.To = pfx+"/subnets/10.5.6.0-24", SubnetKey{IPv4: netip.MustParsePrefix("10.5.6.0/24")}
			},
			"destination 10.5.6.0/24 overlaps " + pfx + "/subnets/10.5.6.9-24 (10.5.6.9/24), held by another lease"},
		{"a move writes another value for the same node",
			func(s *Snapshot) (*Plan, error) { return PlanMove(s, []MoveRequest{{Key: "10.5.1.0-24"}}) },
			func(st *Step) { st.Value = flanneldValue("192.168.0.1", "host-gw") },
			"the store holds another value or etcd lease for the key at mod revision 3: the plan was edited"},
		{"a move attaches another etcd lease",
			func(s *Snapshot) (*Plan, error) { return PlanMove(s, []MoveRequest{{Key: "10.5.1.0-24"}}) },
			func(st *Step) { st.LeaseID = 0 },
			"the store holds another value or etcd lease for the key at mod revision 3: the plan was edited"},
		// What a plan says about itself, checked before the store is read.
		{"a move's source is not a lease key",
			func(s *Snapshot) (*Plan, error) { return PlanMove(s, []MoveRequest{{Key: "10.5.1.0-24"}}) },
			func(st *Step) { st.Key = pfx + "/subnets/garbage" },
			"step 1 (move-lease " + pfx + "/subnets/garbage): the source key is not a lease key"},
		{"a move's new key is not a lease key",
			func(s *Snapshot) (*Plan, error) { return PlanMove(s, []MoveRequest{{Key: "10.5.1.0-24"}}) },
			func(st *Step) { st.NewKey = pfx + "/subnets/10.5.9.0" },
			`step 1 (move-lease ` + pfx + `/subnets/10.5.1.0-24): the new key is not a lease key: subnet key "10.5.9.0": flanneld expects`},
		{"a move onto its own key",
			func(s *Snapshot) (*Plan, error) { return PlanMove(s, []MoveRequest{{Key: "10.5.1.0-24"}}) },
			func(st *Step) {
				st.NewKey, st.To = st.Key, SubnetKey{IPv4: netip.MustParsePrefix("10.5.1.0/24")}
			},
			"a move needs the key's mod revision and a different new key"},
		{"a move's From is another subnet",
			func(s *Snapshot) (*Plan, error) { return PlanMove(s, []MoveRequest{{Key: "10.5.1.0-24"}}) },
			func(st *Step) { st.From = SubnetKey{IPv4: netip.MustParsePrefix("10.5.3.0/24")} },
			"from 10.5.3.0-24 does not match the key's subnet 10.5.1.0-24"},
		{"a move's To is not its new key's subnet",
			func(s *Snapshot) (*Plan, error) { return PlanMove(s, []MoveRequest{{Key: "10.5.1.0-24"}}) },
			func(st *Step) { st.To = SubnetKey{IPv4: netip.MustParsePrefix("10.5.99.0/24")} },
			"to 10.5.99.0-24 does not match the new key's subnet"},
		{"a move onto a subnet with host bits",
			func(s *Snapshot) (*Plan, error) { return PlanMove(s, []MoveRequest{{Key: "10.5.1.0-24"}}) },
			func(st *Step) {
				st.NewKey, st.To = pfx+"/subnets/10.5.9.1-24", SubnetKey{IPv4: netip.MustParsePrefix("10.5.9.1/24")}
			},
			"to 10.5.9.1-24 has host bits set"},
		{"a move writes a value flanneld cannot read",
			func(s *Snapshot) (*Plan, error) { return PlanMove(s, []MoveRequest{{Key: "10.5.1.0-24"}}) },
			func(st *Step) { st.Value = `{"PublicIP": 7}` },
			"the value is not a lease flanneld can read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, kv, reg := fuzzPlanWorld(t)
			for _, name := range []string{"10.5.8.9-24", "10.5.7.0-24"} {
				_, err := m.Put(pfx+"/subnets/"+name, []byte(flanneldValue("192.168.0.7", "vxlan")), 0)
				require.NoError(t, err)
			}
			_, err := m.Put(pfx+"/subnets/10.5.6.9-24", []byte(`{"PublicIP": 7}`), 0)
			require.NoError(t, err)
			snap, err := reg.Snapshot(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 9, snap.Revision)
			require.Len(t, snap.BadLeases, 2, "garbage and 10.5.6.9-24")
			p, err := tc.plan(snap)
			require.NoError(t, err)
			require.Len(t, p.Steps, 1)
			tc.edit(&p.Steps[0])
			_, err = reg.Apply(ctx, p, ApplyOptions{})
			assert.ErrorIs(t, err, ErrInvalidPlan)
			assert.ErrorContains(t, err, tc.want)
			assert.Zero(t, kv.writes)
		})
	}
}

// TestApplyRefusesAnEditedNetworkMoveBeforeAnyWrite: the config the moves
// of a plan land in is checked before the first write, whether the plan
// writes it (a network move) or finds it stored: a config write edited to
// one that does not parse or that flanneld refuses, a config write moved
// after the moves, and a stored config that cannot be read, or that
// flanneld refuses, by the time the plan is applied.
func TestApplyRefusesAnEditedNetworkMoveBeforeAnyWrite(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		edit func(m *MemKV, p *Plan)
		want string
	}{
		{"a config write that does not parse",
			func(_ *MemKV, p *Plan) { p.Steps[0].Value = `{"Network": 5}` },
			`step 1 (put-config ` + pfx + `/config): flanneld would refuse the new config: flannel config: Network "5"`},
		{"a config write that flanneld refuses",
			func(_ *MemKV, p *Plan) {
				p.Steps[0].Value = `{"Network": "10.6.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlam"}}`
			},
			`flanneld would refuse the new config: flannel config: Backend.Type "vxlam"`},
		{"a config write after a move",
			func(_ *MemKV, p *Plan) { p.Steps[0], p.Steps[1] = p.Steps[1], p.Steps[0] },
			"step 2 (put-config " + pfx + "/config): a config write must be the plan's first step"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, kv, reg := fuzzPlanWorld(t)
			snap, err := reg.Snapshot(ctx)
			require.NoError(t, err)
			p, err := PlanSetNetwork(snap, SetNetworkRequest{Network: netip.MustParsePrefix("10.6.0.0/16"), MoveLeases: true})
			require.NoError(t, err)
			require.Greater(t, len(p.Steps), 1)
			require.Equal(t, ActionPutConfig, p.Steps[0].Action)
			tc.edit(m, p)
			_, err = reg.Apply(ctx, p, ApplyOptions{})
			assert.ErrorIs(t, err, ErrInvalidPlan)
			assert.ErrorContains(t, err, tc.want)
			assert.Zero(t, kv.writes)
		})
	}

	// A plan of moves alone runs under the stored config, which can have
	// changed since the plan was made.
	for _, tc := range []struct {
		name, config string
		is           error
		want         string
	}{
		{"a stored config that does not parse", `{"Network": `, ErrInvalidConfig, pfx + "/config cannot be read"},
		{"a stored config that flanneld refuses", `{"Network": "10.5.0.0/16", "Backend": {"Type": "vxlam"}}`, ErrInvalidPlan,
			`the network config the moves run under is refused by flanneld: flannel config: Backend.Type "vxlam"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, kv, reg := fuzzPlanWorld(t)
			snap, err := reg.Snapshot(ctx)
			require.NoError(t, err)
			p, err := PlanMove(snap, []MoveRequest{{Key: "10.5.1.0-24"}})
			require.NoError(t, err)
			_, err = m.Put(pfx+"/config", []byte(tc.config), 0)
			require.NoError(t, err)
			_, err = reg.Apply(ctx, p, ApplyOptions{})
			assert.ErrorIs(t, err, tc.is)
			assert.ErrorContains(t, err, tc.want)
			assert.Zero(t, kv.writes)
		})
	}
}

// TestApplyMovesADualStackLease: a planned move of a dual-stack lease passes
// the plan's checks and lands on both new subnets.
func TestApplyMovesADualStackLease(t *testing.T) {
	to := SubnetKey{IPv4: netip.MustParsePrefix("10.5.35.0/24"), IPv6: netip.MustParsePrefix("fd00:10:244:6::/64")}
	_, _, got := applyOneMove(t, `{"Network": "10.5.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan"}}`,
		"10.5.34.0-24&fd00:10:244:5::-64", to)
	assert.Equal(t, to, got)
}

// applyOneMove stores the lease key under config, plans its move to to,
// applies the plan, and returns the store, the registry and the subnet of
// the only lease left.
func applyOneMove(t *testing.T, config, key string, to SubnetKey) (*MemKV, *Registry, SubnetKey) {
	t.Helper()
	ctx := context.Background()
	m, _, reg := newConfiguredRegistry(t, config)
	putLease(t, m, key, "192.168.0.1", "vxlan")
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	p, err := PlanMove(snap, []MoveRequest{{Key: key, To: to}})
	require.NoError(t, err)
	res, err := reg.Apply(ctx, p, ApplyOptions{})
	require.NoError(t, err)
	assert.True(t, res.Done)
	snap, err = reg.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Leases, 1)
	return m, reg, snap.Leases[0].Subnet
}

// TestApplyMovesAnIPv6OnlyLease: in an IPv6-only network flanneld names a
// lease "0.0.0.0-0&<IPv6>-<len>". A move keeps that IPv4 part, which the
// config does not enable, and must pass the plan's checks all the same.
func TestApplyMovesAnIPv6OnlyLease(t *testing.T) {
	ctx := context.Background()
	to := SubnetKey{IPv6: netip.MustParsePrefix("fd00:10:244:6::/64")}
	m, reg, got := applyOneMove(t, `{"EnableIPv4": false, "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan"}}`,
		"0.0.0.0-0&fd00:10:244:5::-64", to)
	assert.Equal(t, SubnetKey{IPv4: netip.MustParsePrefix("0.0.0.0/0"), IPv6: to.IPv6}, got)

	// An IPv4 part that is not the lease's own is a destination in a family
	// the config does not enable.
	putLease(t, m, "0.0.0.0-0&fd00:10:244:7::-64", "192.168.0.2", "vxlan")
	snap, err := reg.Snapshot(ctx)
	require.NoError(t, err)
	p, err := PlanMove(snap, []MoveRequest{{Key: "0.0.0.0-0&fd00:10:244:7::-64", To: SubnetKey{IPv6: netip.MustParsePrefix("fd00:10:244:8::/64")}}})
	require.NoError(t, err)
	p.Steps[0].To.IPv4 = netip.MustParsePrefix("10.5.0.0/24")
	p.Steps[0].NewKey = strings.TrimSuffix(p.Steps[0].NewKey, "0.0.0.0-0&fd00:10:244:8::-64") + p.Steps[0].To.String()
	_, err = reg.Apply(ctx, p, ApplyOptions{})
	assert.ErrorIs(t, err, ErrInvalidPlan)
	assert.ErrorContains(t, err, "destination 10.5.0.0/24: the network config does not enable IPv4")
}

// TestApplyRefusesAnEditedTwoStepPlan: edits that make two steps of a plan
// collide, which the planner never does, are refused before any write,
// naming both steps: the same key in two steps (a lease moved twice), and
// a destination overlapping another step's (two nodes given one subnet).
func TestApplyRefusesAnEditedTwoStepPlan(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		edit func(p *Plan)
		want string
	}{
		{"the same key in two steps",
			func(p *Plan) { p.Steps[1] = p.Steps[0] },
			"step 2 (move-lease " + pfx + "/subnets/10.5.1.0-24): key " + pfx + "/subnets/10.5.1.0-24 is already changed by step 1; a key may appear in one step only"},
		{"a move onto the key another step moves",
			func(p *Plan) {
				p.Steps[1].NewKey, p.Steps[1].To = p.Steps[0].Key, p.Steps[0].From
			},
			"step 2 (move-lease " + pfx + "/subnets/10.5.2.0-24): key " + pfx + "/subnets/10.5.1.0-24 is already changed by step 1; a key may appear in one step only"},
		{"a destination overlapping another step's",
			func(p *Plan) {
				p.Steps[0].NewKey, p.Steps[0].To = pfx+"/subnets/10.5.21.0-24", SubnetKey{IPv4: netip.MustParsePrefix("10.5.21.0/24")}
				p.Steps[1].NewKey, p.Steps[1].To = pfx+"/subnets/10.5.20.0-23", SubnetKey{IPv4: netip.MustParsePrefix("10.5.20.0/23")}
			},
			"step 2 (move-lease " + pfx + "/subnets/10.5.2.0-24): destination 10.5.20.0/23 overlaps 10.5.21.0/24, the destination of step 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, reg := fuzzPlanWorld(t)
			snap, err := reg.Snapshot(ctx)
			require.NoError(t, err)
			p, err := PlanMove(snap, []MoveRequest{{Key: "10.5.1.0-24"}, {Key: "10.5.2.0-24"}})
			require.NoError(t, err)
			require.Len(t, p.Steps, 2)
			_, err = reg.Apply(ctx, p, ApplyOptions{})
			require.NoError(t, err, "the plan as made applies")
			_, kv, reg := fuzzPlanWorld(t)
			tc.edit(p)
			_, err = reg.Apply(ctx, p, ApplyOptions{})
			assert.ErrorIs(t, err, ErrInvalidPlan)
			assert.ErrorContains(t, err, tc.want)
			assert.Zero(t, kv.writes)
		})
	}
}

// blipKV fails one read, the one after the first left, and answers every
// other: an etcd that drops one request. It counts the transactions sent
// after that read failed: writes made blind.
type blipKV struct {
	KV
	left        int
	lost        bool
	blindWrites int
}

func (g *blipKV) Get(ctx context.Context, key string, o GetOptions) (*GetResult, error) {
	g.left--
	if g.left == -1 {
		g.lost = true
		return nil, errStoreDown
	}
	return g.KV.Get(ctx, key, o)
}

func (g *blipKV) Txn(ctx context.Context, t Txn) (*TxnResult, error) {
	if g.lost {
		g.blindWrites++
	}
	return g.KV.Txn(ctx, t)
}

// TestApplyStoreLostAtEveryRead: etcd fails each read of a two-step Apply
// in turn, and answers the others. Each run stops at the failed read with
// the store's error, says what it was reading, and writes nothing after it,
// although etcd answers again. The
// phases come in order, each of them seen: the network config and the
// registry; the checks before the run (no result, the step checked named);
// the run key; the steps (the step it was at reported failed and named);
// the end of the run. The run after each loss, with etcd back, finishes the
// plan: both leases moved, the old keys gone.
func TestApplyStoreLostAtEveryRead(t *testing.T) {
	ctx := context.Background()
	var phases []string
	for n := 0; ; n++ {
		m, _, reg := fuzzPlanWorld(t)
		snap, err := reg.Snapshot(ctx)
		require.NoError(t, err)
		p, err := PlanMove(snap, []MoveRequest{{Key: "10.5.1.0-24"}, {Key: "10.5.2.0-24"}})
		require.NoError(t, err)
		kv := &blipKV{KV: m, left: n}
		lossy, err := NewRegistry(kv, RegistryOptions{})
		require.NoError(t, err)
		res, err := lossy.Apply(ctx, p, ApplyOptions{})
		if err == nil {
			require.True(t, res.Done)
			require.False(t, kv.lost, "a read failed and the run went on (%d reads answered)", n)
			break
		}
		require.ErrorIs(t, err, errStoreDown, "reads answered: %d", n)
		assert.Zero(t, kv.blindWrites, "writes after the read that failed, with %d reads answered", n)
		phase, msg := "", err.Error()
		switch {
		case res == nil && (strings.HasPrefix(msg, "read the network config to check the plan: ") || strings.HasPrefix(msg, "read flannel registry ")):
			phase = "config and registry"
		case res == nil && strings.HasPrefix(msg, "step "):
			phase = "checks"
		case res == nil && strings.HasPrefix(msg, "read run key: "):
			phase = "run key"
		case res != nil && strings.HasPrefix(msg, "step ") && len(res.Steps) > 0:
			last := res.Steps[len(res.Steps)-1]
			assert.Equal(t, OutcomeFailed, last.Outcome, "reads answered: %d", n)
			assert.True(t, strings.HasPrefix(msg, fmt.Sprintf("step %d (%s %s): ", last.Index+1, last.Step.Action, last.Step.Key)), "%v names step %d", err, last.Index+1)
			phase = "steps"
		case res != nil && strings.HasPrefix(msg, "read the records of run "):
			assert.Len(t, res.Steps, len(p.Steps), "every step applied")
			phase = "end of the run"
		default:
			t.Errorf("with %d reads answered: result %+v, error %v", n, res, err)
		}
		if len(phases) == 0 || phases[len(phases)-1] != phase {
			phases = append(phases, phase)
		}
		_, err = reg.Apply(ctx, p, ApplyOptions{})
		require.NoError(t, err, "resume after a loss at read %d", n)
		for _, st := range p.Steps {
			old, err := m.Get(ctx, st.Key, GetOptions{})
			require.NoError(t, err)
			assert.Empty(t, old.KVs, "%s left after a loss at read %d", st.Key, n)
			moved, err := m.Get(ctx, st.NewKey, GetOptions{})
			require.NoError(t, err)
			assert.Len(t, moved.KVs, 1, "%s missing after a loss at read %d", st.NewKey, n)
		}
	}
	assert.Equal(t, []string{"config and registry", "checks", "run key", "steps", "end of the run"}, phases)
}
