package migrate_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/migrate"
)

// The duplicates of one podCIDR move together: until the last of them has
// moved its pods answer few nodes (every other node routes the subnet to
// one holder), so waiting for each in turn would keep the last cut off for
// all their moves. Here w3, w5 and w6 share w1's subnet and w4 has none:
// the fix plan moves w3, w5 and w6 first and at once, then w4. The agent
// on w2, which every moved node's transition waits for, answers only once
// all three hold their new podCIDRs: one at a time, the first would wait
// for it until the agents' timeout and the run would fail. The earlier
// transitions' waits end at the report on a later request (each published
// want supersedes the one before).
func TestFlannelDuplicatesOfASubnetMoveTogether(t *testing.T) {
	cs, srv := flClusterOf(flNetConf,
		flNode("w1", "10.244.1.0/24", 0),
		flNode("w2", "10.244.2.0/24", 0),
		flNode("w3", "10.244.1.0/24", 3600),
		flNode("w4", "", 3600),
		flNode("w5", "10.244.1.0/24", 3600),
		flNode("w6", "10.244.1.0/24", 3600),
	)
	o := flOptions(cs)
	o.Network, o.FixOnly, o.MakeBeforeBreak, o.HealthTimeout = netip.Prefix{}, true, true, 10*time.Second
	moved := func() bool {
		for _, n := range []string{"w3", "w5", "w6"} {
			if node, ok := srv.Node(n); !ok || node.Spec.PodCIDR == "10.244.1.0/24" {
				return false
			}
		}
		return true
	}
	_, stop := gatedAgentsOn(cs, func(node string) bool { return node != "w2" || moved() }, "w1", "w2", "w3", "w5", "w6")
	defer stop()
	agents := &migrate.HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 3 * time.Second}
	waitAgents(t, agents, "w1", "w2", "w3", "w5", "w6")

	var mu sync.Mutex
	var writes []string // the first write of each node's move, in order
	cs.PrependReactor("*", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := ""
		switch a := a.(type) {
		case k8stesting.DeleteAction:
			name = a.GetName()
		case k8stesting.PatchAction:
			if strings.Contains(string(a.GetPatch()), `"spec":`) { // not a want's annotation
				name = a.GetName()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if name != "" && !slices.Contains(writes, name) {
			writes = append(writes, name)
		}
		return false, nil, nil
	})

	m, err := migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	plan, err := (&migrate.Runner{Mode: migrate.ModePlan, Agents: agents}).Run(t.Context(), m)
	require.NoError(t, err)
	assert.Contains(t, strings.Join(plan.Steps[0].Details, "\n"), "w3, w5, w6 leave podCIDR 10.244.1.0/24, which they share: they move together")

	m, err = migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j"), Agents: agents}).Run(ctx, m)
	require.NoError(t, err)
	require.False(t, rep.Paused(), "%+v", rep.Waiting)
	mu.Lock()
	assert.Equal(t, []string{"w3", "w5", "w6"}, slices.Sorted(slices.Values(writes[:3])), "the duplicates first, together")
	assert.Equal(t, []string{"w4"}, writes[3:], "w4 after them")
	mu.Unlock()
	held := map[string]bool{}
	for _, n := range srv.Nodes() {
		assert.False(t, held[n.Spec.PodCIDR], "%s: %s held twice", n.Name, n.Spec.PodCIDR)
		held[n.Spec.PodCIDR] = true
	}
}
