package dataplane

import (
	"encoding/json"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodecidr"
	"github.com/cidrshift/cidrshift/nodenet"
)

// agentIdentity is the user and groups of the nodenet-agent ServiceAccount
// of examples/nodenet-agent/daemonset.yaml.
var agentIdentity = []string{"system:serviceaccount:kube-system:nodenet-agent",
	"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}

// createAgentRBAC creates the ServiceAccount and RBAC objects of
// examples/nodenet-agent/daemonset.yaml (not its DaemonSet: the agent runs
// as a process in the node's namespace here).
func createAgentRBAC(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	objs, err := harness.DecodeManifest(filepath.Join("..", "..", "examples", "nodenet-agent", "daemonset.yaml"))
	require.NoError(t, err)
	var rbac []runtime.Object
	for _, o := range objs {
		if _, ds := o.(*appsv1.DaemonSet); !ds {
			rbac = append(rbac, o)
		}
	}
	require.Len(t, rbac, 5, "the manifest's ServiceAccount, ClusterRole(Binding) and Role(Binding)")
	require.NoError(t, harness.CreateObjects(t.Context(), cs, rbac, false))
}

// hostDump logs what a node holds (read only): addresses, routes, links,
// nat and filter rules.
func hostDump(t *testing.T, n *Node, when string) {
	t.Helper()
	var b strings.Builder
	for _, args := range [][]string{{"ip", "-4", "addr"}, {"ip", "-4", "route"}, {"ip", "-6", "route"}, {"ip", "-o", "link"}, {"iptables-save", "-t", "nat"}, {"iptables-save", "-t", "filter"}} {
		out, err := n.Run(args[0], args[1:]...)
		b.WriteString("$ " + strings.Join(args, " ") + "\n" + out)
		if err != nil {
			b.WriteString(err.Error() + "\n")
		}
	}
	t.Logf("node %s %s:\n%s", n.Name, when, b.String())
}

// TestSeed001AgentFixesHost replays seed 001 (as TestSeed001FlannelKube
// does, with every flanneld on vxlan: d's host-gw part is another story)
// up to the bridge plugin's error on the moved node c, and then lets the
// host agent fix c's host instead of the test running host steps: the
// runbook side publishes c's nodenet.Want with migrate.HostAgents, and
// examples/nodenet-agent, running in c's namespace with c's directories as
// its host root and the identity and RBAC of its manifest's ServiceAccount,
// carries it out. The test itself only reads c's host state; what changes
// it is the agent, flanneld, and CNI ADD and DEL (the kubelet's part).
//
//  1. The request is published while no agent runs: no report, Apply
//     times out naming the generation.
//  2. The agent starts and picks it up. c1 still holds an address of the
//     old subnet, so the agent reports HostDeferred, naming the bridge's
//     address change and c1; cni0 keeps c1's gateway, no route changed, and
//     c still refuses new pods. (c1 answers nobody off the bridge whatever
//     the agent does: its old subnet is b's, which c's own flanneld routes
//     to b and a's flanneld dropped when c's lease moved. The matrix of a's
//     pods and c1 is logged, not asserted.)
//  3. The agent stops; c1 is deleted (CNI DEL and its API object, the
//     runbook's restart-pods hook). The report stays deferred.
//  4. The agent starts again and resumes the request: HostConverged, cni0
//     holds c's new gateway only; Apply with the same want returns that
//     report without publishing a new generation.
//  5. A new pod c2 gets an address of c's new podCIDR by real CNI ADD, and
//     it and a's pods reach each other (and the outside) without SNAT.
func TestSeed001AgentFixesHost(t *testing.T) {
	env := NewEnv(t)
	agentBin := buildExample(t, "nodenet-agent")
	cp, cs, flags := seed001Cluster(t, env)
	ctx := t.Context()
	network := netip.MustParsePrefix("10.244.0.0/16")

	nodes, cidrs := seed001Nodes(t, env, cs)
	a, b, c, d := nodes["a"], nodes["b"], nodes["c"], nodes["d"]
	t.Logf("podCIDRs: a %s, b %s, c %s (duplicate), d %s", cidrs["a"], cidrs["b"], cidrs["c"], cidrs["d"])
	for _, n := range []*Node{a, b, c, d} {
		require.NoError(t, n.StartFlanneld([]string{"NODE_NAME=" + n.Name}, 30*time.Second, flags...))
	}
	pods := addSeed001Pods(t, cs, nodes)
	c1 := c.Pods()[0]
	m := checkUntil(t, pods, podTargets(pods), func(m *Matrix) bool { return m.BrokenExactly("b1", "c1") })
	t.Logf("before the fix:\n%s", m)
	require.True(t, m.BrokenExactly("b1", "c1"), "the pods of b and c (shared podCIDR) fail, nothing else")

	// nodecidr's fix plan gives c a free subnet; c's flanneld is restarted.
	layout := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{network}, NodeMasks: []int{24}}
	plan, err := nodecidr.MakePlan(ctx, cs, nodecidr.PlanOptions{Mode: nodecidr.ModeFix, Layout: layout})
	require.NoError(t, err)
	require.Len(t, plan.Steps, 1)
	require.Equal(t, "c", plan.Steps[0].Node)
	_, err = nodecidr.Apply(ctx, cs, plan, nodecidr.ApplyOptions{JournalDir: t.TempDir()})
	require.NoError(t, err)
	oldC, newC := cidrs["c"], waitPodCIDR(t, cs, "c")
	require.NotEqual(t, oldC, newC)
	t.Logf("c moved %s -> %s", oldC, newC)
	require.NoError(t, c.RestartFlanneld(30*time.Second))
	oldGW, gw := netip.PrefixFrom(oldC.Addr().Next(), oldC.Bits()), netip.PrefixFrom(newC.Addr().Next(), newC.Bits())
	senv, err := c.SubnetEnv()
	require.NoError(t, err)
	require.Equal(t, gw.String(), senv["FLANNEL_SUBNET"])
	_, err = c.AddPod(ctx, "c2")
	require.ErrorContains(t, err, `"cni0" already has an IP address different from `+gw.String())
	hostDump(t, c, "after the move and flanneld's restart")

	// The agent as its manifest has it: the ServiceAccount's RBAC and
	// identity (a client certificate here), c's CNI config on disk under
	// c's host root (the runtime's /etc/cni/net.d), --interval 500ms.
	createAgentRBAC(t, cs)
	agentKubeconfig, err := cp.NodeUserKubeconfig(agentIdentity[0], agentIdentity[1:]...)
	require.NoError(t, err)
	_, err = c.WriteCNIConfList()
	require.NoError(t, err)
	var agent *Proc
	startAgent := func() {
		t.Helper()
		p, err := env.StartProc(c.NS, "nodenet-agent-c", nil, agentBin, "--node=c", "--host-root="+c.Dir,
			"--interval=500ms", "--kubeconfig="+agentKubeconfig, "--namespace="+migrate.DefaultAgentNamespace)
		require.NoError(t, err)
		agent = p
	}

	want := nodenet.Want{Node: "c", PodCIDR: newC, Network: network, OldPodCIDR: oldC, Backend: nodenet.BackendVXLAN, PeersComplete: true}
	for _, n := range []*Node{a, b, d} {
		want.Peers = append(want.Peers, nodenet.Peer{Name: n.Name, PodCIDR: cidrs[n.Name], PublicIP: n.IP})
	}
	h := &migrate.HostAgents{Kube: cs, PollInterval: 200 * time.Millisecond, Timeout: 3 * time.Second}
	waitStatus := func(what string, ok func(*migrate.HostStatus) bool) *migrate.HostStatus {
		t.Helper()
		var st *migrate.HostStatus
		require.Eventually(t, func() bool {
			var err error
			st, err = h.Status(ctx, "c")
			return err == nil && st != nil && ok(st)
		}, 30*time.Second, 200*time.Millisecond, "the agent reports %s; last report %+v; agent log:\n%s", what, st, tailLines(agent.Log(), 30))
		t.Logf("agent report (%s): generation %d %s\n  actions: %s\n  deferred: %s\n  findings: %s\n  error: %s", what, st.Generation, st.Phase,
			strings.Join(st.Actions, "\n    "), strings.Join(st.Deferred, "\n    "), strings.Join(st.Findings, "\n    "), st.Error)
		return st
	}
	cni0 := func() string {
		t.Helper()
		out, err := c.Run("ip", "-4", "addr", "show", "cni0")
		require.NoError(t, err)
		return out
	}
	hasAddr := func(p netip.Prefix) string { return "inet " + p.String() + " " }

	// 1. The request is published while no agent runs: nobody reports.
	_, err = h.Apply(ctx, want)
	require.ErrorIs(t, err, migrate.ErrHostAgent)
	require.ErrorContains(t, err, "no report on generation 1")
	present, err := h.Present(ctx, "c")
	require.NoError(t, err)
	require.False(t, present)

	// 2. The agent starts and picks the request up. c1 still holds an
	// address of the old subnet: the bridge's old gateway (and with it the
	// old range) is only taken away once no live pod uses it.
	routesBefore, err := c.Run("ip", "-4", "route")
	require.NoError(t, err)
	startAgent()
	st := waitStatus("generation 1 while c1 lives", func(st *migrate.HostStatus) bool { return st.Generation == 1 })
	hostDump(t, c, "with the request deferred")
	require.Equal(t, migrate.HostDeferred, st.Phase, "c1 holds %s of the old subnet %s; error: %s", c1.IP, oldC, st.Error)
	assert.Contains(t, strings.Join(st.Deferred, "\n"), "set-address link cni0: deferred (live pods still use "+oldC.String()+": default/c1")
	present, err = h.Present(ctx, "c")
	require.NoError(t, err)
	assert.True(t, present, "the agent renews its Lease")
	assert.Contains(t, cni0(), hasAddr(oldGW), "c1's gateway stays on cni0 while c1 lives")
	assert.NotContains(t, cni0(), hasAddr(gw), "the bridge's address change is deferred as a whole")
	routesDeferred, err := c.Run("ip", "-4", "route")
	require.NoError(t, err)
	assert.Equal(t, routesBefore, routesDeferred, "the agent changed no route")
	out, err := runIn(c1.NS, "ip", "-4", "addr", "show", "eth0")
	require.NoError(t, err)
	assert.Contains(t, out, hasAddr(netip.PrefixFrom(c1.IP, oldC.Bits())), "c1 keeps its address")
	_, err = c.AddPod(ctx, "c2")
	assert.ErrorContains(t, err, `"cni0" already has an IP address different from `+gw.String(), "while deferred, c still refuses new pods")
	again, err := h.Apply(ctx, want)
	require.NoError(t, err)
	assert.Equal(t, int64(1), again.Generation, "the same want is not published again")
	assert.Equal(t, migrate.HostDeferred, again.Phase)
	ac1 := []*Pod{a.Pods()[0], a.Pods()[1], c1}
	t.Logf("a's pods and c1 while deferred (not asserted: c1's address is in b's subnet):\n%s",
		Check(ac1, podTargets(ac1), ProbeOptions{Attempts: 1}))

	// 3. The agent stops; c1 is deleted as a runbook's restart-pods hook
	// does (CNI DEL, and its API object). Nobody carries the request out.
	agent.Stop(5 * time.Second)
	require.NoError(t, c.DelPod(ctx, c1))
	require.NoError(t, cs.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, c1.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	time.Sleep(2 * time.Second) // four of the agent's intervals
	st, err = h.Status(ctx, "c")
	require.NoError(t, err)
	require.NotNil(t, st)
	assert.Equal(t, int64(1), st.Generation)
	assert.Equal(t, migrate.HostDeferred, st.Phase, "no agent, no progress")
	assert.Contains(t, cni0(), hasAddr(oldGW))

	// 4. The agent starts again and resumes the deferred request.
	startAgent()
	st = waitStatus("generation 1 converged", func(st *migrate.HostStatus) bool {
		return st.Generation == 1 && st.Phase != migrate.HostDeferred
	})
	hostDump(t, c, "after the agent converged")
	require.Equal(t, migrate.HostConverged, st.Phase, "error: %s", st.Error)
	assert.Empty(t, st.Deferred)
	assert.Empty(t, st.Findings)
	again, err = h.Apply(ctx, want)
	require.NoError(t, err)
	assert.Equal(t, int64(1), again.Generation)
	assert.Equal(t, migrate.HostConverged, again.Phase)
	assert.Contains(t, cni0(), hasAddr(gw), "cni0 holds c's new gateway")
	assert.NotContains(t, cni0(), hasAddr(oldGW))
	// Every action that ran is on record on c's host, with its outcome.
	journaled, err := filepath.Glob(filepath.Join(c.Dir, "var/lib/cidrshift/nodenet-agent", url.PathEscape(nodenet.JournalPrefix)+"*action-*"))
	require.NoError(t, err)
	assert.NotEmpty(t, journaled, "the agent journals its changes under the host root")
	for _, f := range journaled {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		var rec nodenet.JournalRecord
		require.NoError(t, json.Unmarshal(data, &rec), f)
		assert.Equal(t, "c", rec.Node, f)
		assert.NotNil(t, rec.Outcome, "%s: %s %s has its outcome", f, rec.Action.Kind, rec.Action.Object)
	}

	// 5. A new pod on c gets an address of the new podCIDR by real CNI ADD;
	// it and a's pods reach each other, without SNAT, and the outside.
	c2, err := c.AddPod(ctx, "c2")
	require.NoError(t, err)
	require.NoError(t, registerPod(ctx, cs, c2))
	t.Logf("pod c2 on c: %s", c2.IP)
	require.True(t, newC.Contains(c2.IP), "c2's address %s is in c's new podCIDR %s", c2.IP, newC)
	ac2 := []*Pod{a.Pods()[0], a.Pods()[1], c2}
	m = checkUntil(t, ac2, podTargets(ac2), (*Matrix).Full)
	t.Logf("a's pods and c2 after the agent's fix:\n%s", m)
	require.True(t, m.Full(), "a's pods and c2 reach each other and the outside:\n%s", m)
}
