package nodecidr

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/cidrshift/cidrshift/cidr"
)

// planSeeds are plan files for the fuzzers: valid plans of every mode, and
// the hand edits of issue 20.
var planSeeds = []string{
	"apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: rebase\nrebase:\n- {from: 10.20.0.0/16, to: 10.30.0.0/16}\nsteps:\n" +
		"- {node: worker1, uid: uid-worker1, resourceVersion: '7', action: recreate, oldPodCIDRs: [10.20.1.0/24], newPodCIDRs: [10.30.1.0/24]}\n" +
		"- {node: worker2, uid: uid-worker2, resourceVersion: '7', action: recreate, oldPodCIDRs: [10.20.2.0/24], newPodCIDRs: [10.30.2.0/24]}\n" +
		"- {node: master1, uid: uid-master1, resourceVersion: '7', controlPlane: true, action: recreate, oldPodCIDRs: [10.20.0.0/24], newPodCIDRs: [10.30.0.0/24]}\n" +
		"unchanged: 0\n",
	// issue 20: worker1 is given worker2's current range.
	"apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: rebase\nrebase:\n- {from: 10.20.0.0/16, to: 10.30.0.0/16}\nsteps:\n" +
		"- {node: worker1, uid: uid-worker1, resourceVersion: '7', action: recreate, oldPodCIDRs: [10.20.1.0/24], newPodCIDRs: [10.20.2.0/24]}\n" +
		"- {node: worker2, uid: uid-worker2, resourceVersion: '7', action: recreate, oldPodCIDRs: [10.20.2.0/24], newPodCIDRs: [10.30.2.0/24]}\n",
	"apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: rebase\nrebase:\n- {from: 10.20.0.0/16, to: 10.30.0.0/16}\nsteps:\n" +
		"- {node: worker1, uid: uid-worker1, resourceVersion: '7', action: recreate, oldPodCIDRs: [10.20.1.0/24], newPodCIDRs: [10.99.0.0/24]}\n",
	"apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: allocate\nlayout: {clusterCIDRs: [10.40.0.0/16], nodeMasks: [24]}\nsteps:\n" +
		"- {node: worker1, uid: uid-worker1, action: recreate, oldPodCIDRs: [10.20.1.0/24], newPodCIDRs: [10.40.0.0/24]}\n" +
		"- {node: worker2, uid: uid-worker2, action: recreate, oldPodCIDRs: [10.20.2.0/24], newPodCIDRs: [10.40.1.0/24]}\n",
	"apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: allocate\nlayout: {clusterCIDRs: [10.30.0.0/16]}\nsteps:\n" +
		"- {node: worker1, uid: uid-worker1, action: recreate, oldPodCIDRs: [10.20.1.0/24], newPodCIDRs: [10.30.9.0/24]}\n",
	"apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: fix\nlayout: {clusterCIDRs: [10.20.0.0/16, 'fd00::/48'], nodeMasks: [24, 64]}\nsteps:\n" +
		"- {node: worker1, uid: uid-worker1, action: recreate, oldPodCIDRs: [10.20.1.0/24], newPodCIDRs: [10.20.1.0/24, 'fd00:0:0:1::/64']}\n",
	`{"apiVersion":"cidrshift.io/v1alpha1","kind":"NodePodCIDRPlan","mode":"rebase","rebase":[{"from":"10.20.0.0/16","to":"10.30.0.0/16"}],"steps":[{"node":"worker2","uid":"uid-worker2","action":"recreate","oldPodCIDRs":["10.20.2.0/24"],"newPodCIDRs":["10.30.2.0/24"]}]}`,
	"apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: rebase\nrebase:\n- {from: 10.20.0.0/16, to: 10.30.0.0/16}\nsteps:\n- {node: worker1, uid: uid-worker1, action: recrea",
}

// FuzzApplyPlan feeds random plan files to DecodePlan and Apply against a
// fake cluster that enforces the API's rules: a plan is either refused
// before the first write, or valid and applied in full (every step's node
// holds its new podCIDRs, Verify passes). Never half-applied.
func FuzzApplyPlan(f *testing.F) {
	for _, s := range planSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodePlan(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidPlan) {
				t.Fatalf("decode error does not wrap ErrInvalidPlan: %v", err)
			}
			return
		}
		c, s := newCluster(issueNodes()...)
		writes := clusterWrites(c)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = Apply(ctx, c, p, ApplyOptions{JournalDir: t.TempDir(), Retry: fastRetry(), CreateGrace: time.Second})
		if err != nil {
			if w := writes(); len(w) > 0 {
				t.Fatalf("refused after %d writes (%v): %v", len(w), w, err)
			}
			if !errors.Is(err, ErrInvalidPlan) && !errors.Is(err, ErrStalePlan) {
				t.Fatalf("refused for an unexpected reason: %v", err)
			}
			return
		}
		v, err := Verify(ctx, c, p, VerifyOptions{})
		if err != nil || !v.OK {
			t.Fatalf("applied plan does not verify: %v %+v", err, v)
		}
		nodes := map[string]*corev1.Node{}
		for _, n := range s.Nodes() {
			nodes[n.Name] = &n
		}
		for _, st := range p.Steps {
			n := nodes[st.Node]
			if n == nil || !sameCIDRs(PodCIDRsOf(n), st.NewPodCIDRs) {
				t.Fatalf("node %s not moved to %v: %+v", st.Node, st.NewPodCIDRs, n)
			}
			for _, t2 := range st.NewPodCIDRs {
				pr, _ := cidr.Parse(t2)
				if !targetHolds(p, pr) && !holds(st.OldPodCIDRs, pr) {
					t.Fatalf("node %s got %s outside the plan's target", st.Node, pr)
				}
			}
		}
	})
}

// targetHolds reports whether pr lies inside the plan's stated target.
func targetHolds(p *Plan, pr netip.Prefix) bool {
	for _, r := range p.Rebase {
		if cidr.ContainsPrefix(r.To, pr) {
			return true
		}
	}
	if p.Layout != nil {
		for _, c := range p.Layout.ClusterCIDRs {
			if cidr.ContainsPrefix(c, pr) {
				return true
			}
		}
	}
	return false
}

// TestPlanSeeds: the fuzz seeds cover both outcomes, applied in full and
// refused before any write.
func TestPlanSeeds(t *testing.T) {
	applied := map[int]bool{0: true, 3: true, 5: true, 6: true}
	for i, seed := range planSeeds {
		p, err := DecodePlan([]byte(seed))
		if err != nil {
			require.False(t, applied[i], "seed %d: %v", i, err)
			require.ErrorIs(t, err, ErrInvalidPlan)
			continue
		}
		c, _ := newCluster(issueNodes()...)
		writes := clusterWrites(c)
		_, err = Apply(ctxT(t), c, p, ApplyOptions{JournalDir: t.TempDir(), Retry: fastRetry()})
		if applied[i] {
			require.NoError(t, err, "seed %d", i)
			require.NotEmpty(t, writes(), "seed %d", i)
		} else {
			require.ErrorIs(t, err, ErrInvalidPlan, "seed %d", i)
			require.Empty(t, writes(), "seed %d", i)
		}
	}
}
