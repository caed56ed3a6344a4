package migrate_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/migrate"
)

// agentsOn answers, as a converged agent would, every request published on
// the named nodes, and counts the requests per node.
func agentsOn(kube kubernetes.Interface, nodes ...string) (got func() map[string][]migrate.HostRequest, stop func()) {
	return gatedAgentsOn(kube, nil, nodes...)
}

// gatedAgentsOn is agentsOn whose agent on a node reports on a request only
// while open(node) is true (open nil: always); meanwhile it renews its
// Lease with its last report.
func gatedAgentsOn(kube kubernetes.Interface, open func(node string) bool, nodes ...string) (got func() map[string][]migrate.HostRequest, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	seen := map[string][]migrate.HostRequest{}
	var wg sync.WaitGroup
	for _, node := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leases := kube.CoordinationV1().Leases(migrate.DefaultAgentNamespace)
			last := int64(-1)
			var gen int64 // the generation reported
			for ctx.Err() == nil {
				if n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil && (open == nil || open(node)) {
					var req migrate.HostRequest
					if v, ok := n.Annotations[migrate.HostWantAnnotation]; ok && json.Unmarshal([]byte(v), &req) == nil {
						gen = req.Generation
						if gen != last {
							mu.Lock()
							seen[node] = append(seen[node], req)
							mu.Unlock()
							last = gen
						}
					}
				}
				st, _ := json.Marshal(migrate.HostStatus{Generation: gen, Phase: migrate.HostConverged})
				now := metav1.NewMicroTime(time.Now())
				l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: migrate.AgentLeasePrefix + node, Namespace: migrate.DefaultAgentNamespace,
					Annotations: map[string]string{migrate.HostStatusAnnotation: string(st)}}, Spec: coordinationv1.LeaseSpec{RenewTime: &now}}
				if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
					_, _ = leases.Create(ctx, l, metav1.CreateOptions{})
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	// Every agent holds its Lease before the caller goes on: a run that
	// looked for an agent before its goroutine first ran would find none.
	leases := kube.CoordinationV1().Leases(migrate.DefaultAgentNamespace)
	for _, node := range nodes {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if _, err := leases.Get(ctx, migrate.AgentLeasePrefix+node, metav1.GetOptions{}); err == nil {
				break
			}
		}
	}
	return func() map[string][]migrate.HostRequest {
			mu.Lock()
			defer mu.Unlock()
			out := map[string][]migrate.HostRequest{}
			for k, v := range seen {
				out[k] = append([]migrate.HostRequest(nil), v...)
			}
			return out
		}, func() {
			cancel()
			wg.Wait()
		}
}

// With agents, the host work is theirs: each moved node's agent gets its
// want right after its pods were restarted, every node's in host-cleanup
// (peers and the new Network), and a node without an agent gets the same
// request printed as the command to run on it.
func TestFlannelHostCleanupThroughAgents(t *testing.T) {
	cs := flCluster(flNetConf)
	got, stop := agentsOn(cs, "w1", "w2", "w3")
	defer stop()
	o := flOptions(cs)
	o.Continue = true
	m, err := migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	agents := &migrate.HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 5 * time.Second}
	rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j"), Agents: agents}).Run(t.Context(), m)
	require.NoError(t, err)
	require.False(t, rep.Paused())
	cleanup := strings.Join(rep.Steps[4].Details, "\n")
	for _, n := range []string{"w1", "w2", "w3"} {
		assert.Contains(t, cleanup, "node "+n+": host agent converged", "every node with an agent")
	}
	assert.Contains(t, cleanup, "node w4 has no host agent; run there:")
	assert.Contains(t, cleanup, "nodenet-agent --once --node w4 --request")
	assert.NotContains(t, cleanup, "ip link delete", "the person's steps are the agent's request, not a second list")
	// Every want was published right after w3 moved, in the fix step:
	// w4, which has no agent, is named there.
	assert.Contains(t, rep.Steps[0].Details, "node w4: no host agent runs there; it gets no want")

	reqs := got()
	require.NotEmpty(t, reqs["w3"], "the moved node's agent was asked")
	first := reqs["w3"][0].Want
	assert.Equal(t, "10.244.1.0/24", first.OldPodCIDR.String(), "w3 left the shared subnet")
	assert.NotEqual(t, first.OldPodCIDR, first.PodCIDR)
	assert.True(t, first.PeersComplete)
	var peers []string
	for _, p := range first.Peers {
		peers = append(peers, p.Name)
	}
	assert.Subset(t, peers, []string{"w1", "w2"}, "every other node with a podCIDR is a peer")
	assert.NotContains(t, peers, "w3")
	last := reqs["w1"][len(reqs["w1"])-1].Want
	assert.Equal(t, "10.240.0.0/12", last.Network.String(), "the new Network")
	assert.Equal(t, "10.244.0.0/16", last.OldNetwork.String())
	assert.False(t, last.OldPodCIDR.IsValid(), "w1 kept its subnet")
}
