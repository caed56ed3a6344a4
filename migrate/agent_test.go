package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/nodenet"
)

func agentNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func agentWant(node string) nodenet.Want {
	return nodenet.Want{Node: node, PodCIDR: netip.MustParsePrefix("10.244.7.0/24"), Network: netip.MustParsePrefix("10.244.0.0/16")}
}

// fakeAgent answers every request on node with phase, as an agent would.
func fakeAgent(cs *fake.Clientset, node string, phase HostPhase) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err == nil {
				var req HostRequest
				if v, ok := n.Annotations[HostWantAnnotation]; ok && json.Unmarshal([]byte(v), &req) == nil {
					st, _ := json.Marshal(HostStatus{Generation: req.Generation, Phase: phase, Error: map[bool]string{true: "bridge cni0: permission denied"}[phase == HostFailed]})
					now := metav1.NewMicroTime(time.Now())
					l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: AgentLeasePrefix + node, Namespace: DefaultAgentNamespace,
						Annotations: map[string]string{HostStatusAnnotation: string(st)}}, Spec: coordinationv1.LeaseSpec{RenewTime: &now}}
					if _, err := cs.CoordinationV1().Leases(DefaultAgentNamespace).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
						_, _ = cs.CoordinationV1().Leases(DefaultAgentNamespace).Create(ctx, l, metav1.CreateOptions{})
					}
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() { cancel(); wg.Wait() }
}

func countPatches(cs *fake.Clientset) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" {
			n++
		}
	}
	return n
}

func TestHostAgentsPublishWaitAndResume(t *testing.T) {
	cs := fake.NewClientset(agentNode("w1"))
	stop := fakeAgent(cs, "w1", HostConverged)
	defer stop()
	h := &HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 5 * time.Second}

	present, err := h.Present(t.Context(), "w1")
	require.NoError(t, err)
	assert.False(t, present, "no Lease yet: no agent")

	st, err := h.Apply(t.Context(), agentWant("w1"))
	require.NoError(t, err)
	assert.Equal(t, HostConverged, st.Phase)
	assert.Equal(t, int64(1), st.Generation)
	n, err := cs.CoreV1().Nodes().Get(t.Context(), "w1", metav1.GetOptions{})
	require.NoError(t, err)
	var req HostRequest
	require.NoError(t, json.Unmarshal([]byte(n.Annotations[HostWantAnnotation]), &req))
	assert.Equal(t, agentWant("w1"), req.Want, "the published request is the want")

	present, err = h.Present(t.Context(), "w1")
	require.NoError(t, err)
	assert.True(t, present, "a renewed Lease: an agent")

	// The same want again (a resumed runbook): no new request.
	patches := countPatches(cs)
	st, err = h.Apply(t.Context(), agentWant("w1"))
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.Generation)
	assert.Equal(t, patches, countPatches(cs))

	// Another want: the next generation.
	w := agentWant("w1")
	w.PodCIDR = netip.MustParsePrefix("10.244.9.0/24")
	st, err = h.Apply(t.Context(), w)
	require.NoError(t, err)
	assert.Equal(t, int64(2), st.Generation)
}

func TestHostAgentsFailureAndTimeoutNameTheNode(t *testing.T) {
	cs := fake.NewClientset(agentNode("w1"), agentNode("w2"))
	stop := fakeAgent(cs, "w1", HostFailed)
	defer stop()
	h := &HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 200 * time.Millisecond}
	_, err := h.Apply(t.Context(), agentWant("w1"))
	require.ErrorIs(t, err, ErrHostAgent)
	assert.Contains(t, err.Error(), "node w1 failed: bridge cni0: permission denied")

	_, err = h.Apply(t.Context(), agentWant("w2"))
	require.ErrorIs(t, err, ErrHostAgent)
	assert.Contains(t, err.Error(), "node w2: no report on generation 1 within 200ms")

	// A stale Lease is no agent.
	old := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	_, err = cs.CoordinationV1().Leases(DefaultAgentNamespace).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: AgentLeasePrefix + "w2", Namespace: DefaultAgentNamespace}, Spec: coordinationv1.LeaseSpec{RenewTime: &old}}, metav1.CreateOptions{})
	require.NoError(t, err)
	present, err := h.Present(t.Context(), "w2")
	require.NoError(t, err)
	assert.False(t, present)
}

func TestAgentRefusesARequestForAnotherNodeAndReportsIt(t *testing.T) {
	req, err := json.Marshal(HostRequest{Generation: 4, Want: agentWant("w2")})
	require.NoError(t, err)
	n := agentNode("w1")
	n.Annotations = map[string]string{HostWantAnnotation: string(req)}
	cs := fake.NewClientset(n)
	a := &Agent{Kube: cs, Node: "w1"}
	st, err := a.Once(t.Context())
	require.NoError(t, err)
	assert.Equal(t, HostFailed, st.Phase)
	assert.Equal(t, int64(4), st.Generation)
	assert.Contains(t, st.Error, `the request names node "w2"; this agent serves "w1"`)

	l, err := cs.CoordinationV1().Leases(DefaultAgentNamespace).Get(t.Context(), AgentLeasePrefix+"w1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "w1", ptr.Deref(l.Spec.HolderIdentity, ""))
	got, err := leaseStatus(l)
	require.NoError(t, err)
	assert.Equal(t, HostFailed, got.Phase)

	// The runbook side sees the failure, naming the node.
	h := &HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: time.Second}
	status, err := h.Status(t.Context(), "w1")
	require.NoError(t, err)
	assert.Equal(t, int64(4), status.Generation)

	// Failed on this generation: the next round renews the Lease only.
	renewed := l.Spec.RenewTime.Time
	time.Sleep(2 * time.Millisecond)
	st, err = a.Once(t.Context())
	require.NoError(t, err)
	assert.Equal(t, HostFailed, st.Phase)
	l, err = cs.CoordinationV1().Leases(DefaultAgentNamespace).Get(t.Context(), AgentLeasePrefix+"w1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, l.Spec.RenewTime.After(renewed), "the Lease is renewed")
}

func TestAgentWithoutARequestOnlyRenews(t *testing.T) {
	cs := fake.NewClientset(agentNode("w1"))
	a := &Agent{Kube: cs, Node: "w1", Identity: "agent-x"}
	st, err := a.Once(t.Context())
	require.NoError(t, err)
	assert.Nil(t, st)
	present, err := (&HostAgents{Kube: cs}).Present(t.Context(), "w1")
	require.NoError(t, err)
	assert.True(t, present)
}

func TestAgentCheckNamesMissingPermissions(t *testing.T) {
	cs := fake.NewClientset(agentNode("w1"))
	accesstest.Authorize(cs, accesstest.Rule{Verb: "update", Resource: "leases"})
	err := (&Agent{Kube: cs, Node: "w1"}).Check(t.Context())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "update")
	assert.Contains(t, err.Error(), "leases")

	cs = fake.NewClientset()
	accesstest.Authorize(cs)
	err = (&Agent{Kube: cs, Node: "w9"}).Check(t.Context())
	require.ErrorIs(t, err, ErrInvalidInput)
	assert.Contains(t, err.Error(), "--node w9: no such Node")

	err = (&Agent{Kube: cs}).Check(t.Context())
	require.ErrorIs(t, err, ErrInvalidInput)
}

// A request whose agent failed is asked again when the runbook is rerun
// with the same want: a new generation, not the old failure.
func TestHostAgentsRetryAFailedRequest(t *testing.T) {
	cs := fake.NewClientset(agentNode("w1"))
	h := &HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 5 * time.Second}
	stop := fakeAgent(cs, "w1", HostFailed)
	_, err := h.Apply(t.Context(), agentWant("w1"))
	stop()
	require.ErrorIs(t, err, ErrHostAgent)

	type result struct {
		st  *HostStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := h.Apply(context.Background(), agentWant("w1"))
		done <- result{st, err}
	}()
	require.Eventually(t, func() bool {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), "w1", metav1.GetOptions{})
		var req HostRequest
		return err == nil && json.Unmarshal([]byte(n.Annotations[HostWantAnnotation]), &req) == nil && req.Generation == 2
	}, 5*time.Second, time.Millisecond, "the failed request is published again")
	stop = fakeAgent(cs, "w1", HostConverged)
	defer stop()
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, int64(2), r.st.Generation)
	assert.Equal(t, HostConverged, r.st.Phase)
}

// Run watches its Node: a request published between two rounds is carried
// out at once, not at the next tick (the interval here is an hour).
func TestAgentRunWakesOnARequest(t *testing.T) {
	cs := fake.NewClientset(agentNode("w1"))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- (&Agent{Kube: cs, Node: "w1", Interval: time.Hour}).Run(ctx) }()
	h := &HostAgents{Kube: cs}
	require.Eventually(t, func() bool { ok, err := h.Present(ctx, "w1"); return err == nil && ok }, 10*time.Second, 5*time.Millisecond, "the first round creates the Lease")

	req, err := json.Marshal(HostRequest{Generation: 9, Want: agentWant("w2")}) // refused by the agent: a round is seen without touching the host
	require.NoError(t, err)
	n, err := cs.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
	require.NoError(t, err)
	n.Annotations = map[string]string{HostWantAnnotation: string(req)}
	_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := h.Status(ctx, "w1")
		return err == nil && st != nil && st.Generation == 9 && st.Phase == HostFailed
	}, 10*time.Second, 5*time.Millisecond, "the request is answered without waiting for the hour")
	cancel()
	require.NoError(t, <-done)
}

// hostFlaky plays a host on which another actor (flanneld) undoes the
// route an agent round puts back: Verify finds it missing in the first
// `undone` rounds.
type hostFlaky struct {
	undone, rounds int
}

func (h *hostFlaky) calls() hostCalls {
	return hostCalls{
		audit: func(_ context.Context, w nodenet.Want) (*nodenet.Report, error) {
			return &nodenet.Report{Node: w.Node, PodCIDR: w.PodCIDR, Network: w.Network, Bridge: "cni0", ReservationDir: "/var/lib/cni/networks/cbr0", SubnetEnvFile: "/run/flannel/subnet.env"}, nil
		},
		apply: func(_ context.Context, w nodenet.Want, _ *nodenet.Plan, _ nodenet.ApplyOptions) (*nodenet.Result, error) {
			h.rounds++
			return &nodenet.Result{Node: w.Node, Outcomes: []nodenet.Outcome{{Index: 0, Kind: nodenet.ActionSetRoute, Object: "route 10.244.2.0/24", Status: nodenet.StatusDone}}}, nil
		},
		verify: func(_ context.Context, w nodenet.Want) (*nodenet.Report, error) {
			if h.rounds <= h.undone {
				return nil, &nodenet.NotConvergedError{Node: w.Node, Findings: []nodenet.Finding{{Severity: cidr.SeverityError, Code: nodenet.CodeRouteMissing, Object: "route 10.244.2.0/24"}}}
			}
			return &nodenet.Report{Node: w.Node}, nil
		},
	}
}

// An agent whose round is undone meanwhile (flanneld deleting a shared
// subnet's route after the agent put it back) does the round again, and
// reports converged with every round's actions; it reports failed, with
// the findings left, only after its last round.
func TestAgentRoundsUntilTheHostConverges(t *testing.T) {
	req := HostRequest{Generation: 1, Want: agentWant("w1")}
	h := &hostFlaky{undone: 2}
	a := &Agent{Kube: fake.NewClientset(agentNode("w1")), Node: "w1", Rounds: 3, host: h.calls()}
	st, err := a.Carry(t.Context(), req)
	require.NoError(t, err)
	assert.Equal(t, HostConverged, st.Phase, "%+v", st)
	assert.Equal(t, 3, h.rounds)
	assert.Equal(t, []string{"#0 set-route route 10.244.2.0/24: done", "round 2: #0 set-route route 10.244.2.0/24: done", "round 3: #0 set-route route 10.244.2.0/24: done"}, st.Actions)
	assert.Empty(t, st.Findings)

	h = &hostFlaky{undone: 2}
	a = &Agent{Kube: fake.NewClientset(agentNode("w1")), Node: "w1", Rounds: 2, host: h.calls()}
	st, err = a.Carry(t.Context(), req)
	require.NoError(t, err)
	assert.Equal(t, 2, h.rounds)
	assert.Equal(t, HostFailed, st.Phase)
	assert.Contains(t, st.Error, "route-missing (route 10.244.2.0/24)")
	assert.Equal(t, []string{"error route-missing route 10.244.2.0/24: "}, st.Findings)
}

// hostDrift plays a host whose converged state something else undoes when
// the test sets broken; an apply repairs it.
type hostDrift struct {
	broken  bool
	applies int
}

func (h *hostDrift) calls() hostCalls {
	return hostCalls{
		audit: (&hostFlaky{}).calls().audit,
		apply: func(_ context.Context, w nodenet.Want, _ *nodenet.Plan, _ nodenet.ApplyOptions) (*nodenet.Result, error) {
			h.applies++
			h.broken = false
			return &nodenet.Result{Node: w.Node}, nil
		},
		verify: func(_ context.Context, w nodenet.Want) (*nodenet.Report, error) {
			if h.broken {
				return nil, &nodenet.NotConvergedError{Node: w.Node, Findings: []nodenet.Finding{{Severity: cidr.SeverityError, Code: nodenet.CodeFDBMissing, Object: "fdb 6e:00:00:00:00:05"}}}
			}
			return &nodenet.Report{Node: w.Node}, nil
		},
	}
}

// A converged request is verified every round: what something else undid
// since (flanneld deleting the FDB entry of a peer) is done again and
// reported, under the same generation; a host that still holds the state
// is not touched.
func TestAgentRepairsWhatWasUndoneAfterItConverged(t *testing.T) {
	req, err := json.Marshal(HostRequest{Generation: 3, Want: agentWant("w1")})
	require.NoError(t, err)
	n := agentNode("w1")
	n.Annotations = map[string]string{HostWantAnnotation: string(req)}
	h := &hostDrift{}
	a := &Agent{Kube: fake.NewClientset(n), Node: "w1", host: h.calls()}
	st, err := a.Once(t.Context())
	require.NoError(t, err)
	assert.Equal(t, HostConverged, st.Phase)
	assert.Equal(t, 1, h.applies)
	assert.Empty(t, st.Actions, "a first carry-out repairs nothing: no \"undone\" line")

	st, err = a.Once(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, h.applies, "the host holds the state: nothing done")
	assert.Equal(t, HostConverged, st.Phase)

	h.broken = true
	st, err = a.Once(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 2, h.applies, "the undone entry is put back")
	assert.Equal(t, HostConverged, st.Phase)
	assert.Equal(t, int64(3), st.Generation)
	require.NotEmpty(t, st.Actions)
	assert.Equal(t, "undone since the last report, done again: fdb-missing (fdb 6e:00:00:00:00:05)", st.Actions[0])
	got, err := (&HostAgents{Kube: a.Kube}).Status(t.Context(), "w1")
	require.NoError(t, err)
	assert.Equal(t, st.Actions, got.Actions, "reported on the Lease")
}

// With JournalDir, nodenet's Apply gets a journal on the host, opened for
// the request and closed after it (another agent process may take it next).
func TestAgentJournalsTheHostsChanges(t *testing.T) {
	dir := t.TempDir()
	calls := (&hostDrift{}).calls()
	var got nodenet.Recorder
	calls.apply = func(_ context.Context, w nodenet.Want, _ *nodenet.Plan, opts nodenet.ApplyOptions) (*nodenet.Result, error) {
		got = opts.Journal
		if got == nil {
			return &nodenet.Result{Node: w.Node}, nil
		}
		return &nodenet.Result{Node: w.Node}, got.Put(nodenet.JournalPrefix+"p/plan", map[string]string{"node": w.Node})
	}
	a := &Agent{Kube: fake.NewClientset(agentNode("w1")), Node: "w1", JournalDir: dir, host: calls}
	st, err := a.Carry(t.Context(), HostRequest{Generation: 1, Want: agentWant("w1")})
	require.NoError(t, err)
	assert.Equal(t, HostConverged, st.Phase, "%+v", st)
	require.NotNil(t, got)
	j, err := journal.Open(dir) // the agent released it
	require.NoError(t, err)
	defer func() { _ = j.Close() }()
	var rec map[string]string
	ok, err := j.Get(nodenet.JournalPrefix+"p/plan", &rec)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "w1", rec["node"])

	got = nil
	a.JournalDir = ""
	_, err = a.Carry(t.Context(), HostRequest{Generation: 2, Want: agentWant("w1")})
	require.NoError(t, err)
	assert.Nil(t, got, "no JournalDir: no journal")
}

// A round cut short by a stop (an iptables command killed by a signal, as
// systemd's stop of the agent's unit kills every process of it at once) is
// not a failure of the request: Once reports nothing, the Lease keeps the
// last report (deferred here), and the next round carries the request out.
func TestAgentDoesNotReportARoundCutShortAsFailed(t *testing.T) {
	req, err := json.Marshal(HostRequest{Generation: 4, Want: agentWant("w1")})
	require.NoError(t, err)
	n := agentNode("w1")
	n.Annotations = map[string]string{HostWantAnnotation: string(req)}
	cs := fake.NewClientset(n)
	killed := true
	h := (&hostFlaky{}).calls()
	apply := h.apply
	h.apply = func(ctx context.Context, w nodenet.Want, p *nodenet.Plan, o nodenet.ApplyOptions) (*nodenet.Result, error) {
		if killed {
			return nil, fmt.Errorf("nodenet: iptables list nat POSTROUTING: %w (terminated): exit status -1", nodenet.ErrInterrupted)
		}
		return apply(ctx, w, p, o)
	}
	a := &Agent{Kube: cs, Node: "w1", host: h}
	hosts := &HostAgents{Kube: cs}
	// The last report before the stop: generation 4 deferred.
	require.NoError(t, a.defaults())
	lease, err := a.lease(t.Context())
	require.NoError(t, err)
	require.NoError(t, a.report(t.Context(), lease, &HostStatus{Generation: 4, Phase: HostDeferred}))

	st, err := a.Once(t.Context())
	require.ErrorIs(t, err, nodenet.ErrInterrupted)
	assert.ErrorContains(t, err, "node w1: generation 4 cut short, not reported")
	assert.Nil(t, st)
	rep, err := hosts.Status(t.Context(), "w1")
	require.NoError(t, err)
	require.NotNil(t, rep)
	assert.Equal(t, HostDeferred, rep.Phase, "the Lease keeps the last report")

	killed = false
	st, err = a.Once(t.Context())
	require.NoError(t, err)
	assert.Equal(t, HostConverged, st.Phase)
	rep, err = hosts.Status(t.Context(), "w1")
	require.NoError(t, err)
	assert.Equal(t, HostConverged, rep.Phase)
	assert.Equal(t, int64(4), rep.Generation)

	// A real failure is still reported as one.
	h.apply = func(context.Context, nodenet.Want, *nodenet.Plan, nodenet.ApplyOptions) (*nodenet.Result, error) {
		return nil, errors.New("nodenet: iptables insert nat FLANNEL-POSTRTG: exit status 4: iptables: Resource temporarily unavailable")
	}
	a = &Agent{Kube: cs, Node: "w1", host: h}
	st, err = a.Carry(t.Context(), HostRequest{Generation: 5, Want: agentWant("w1")})
	require.NoError(t, err)
	assert.Equal(t, HostFailed, st.Phase)
}
