package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/nodenet"
)

// reportOn stores, as node's agent would, a report on its Lease renewed at
// renewed.
func reportOn(t *testing.T, cs *fake.Clientset, node string, st HostStatus, renewed time.Time) {
	t.Helper()
	b, err := json.Marshal(st)
	require.NoError(t, err)
	at := metav1.NewMicroTime(renewed)
	_, err = cs.CoordinationV1().Leases(DefaultAgentNamespace).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: AgentLeasePrefix + node, Namespace: DefaultAgentNamespace, Annotations: map[string]string{HostStatusAnnotation: string(b)}},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &at}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// HostAgents left at its zero options waits up to 2 minutes for a report,
// polls a failed read every second and takes a Lease renewed within 40 s
// as a running agent: a zero Timeout does not end the wait at once.
func TestHostAgentsUnsetOptionsGetTheirDefaults(t *testing.T) {
	cs := fake.NewClientset(agentNode("w1"))
	renewed := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	reportOn(t, cs, "w1", HostStatus{Generation: 1, Phase: HostConverged}, renewed)

	h := &HostAgents{Kube: cs}
	// The deadline only makes a WaitAll that ignores the report fail
	// instead of waiting its 2 minutes.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := h.Wait(ctx, "w1", 1)
	require.NoError(t, err, "the report is there: a wait with the default Timeout sees it")
	assert.Equal(t, HostConverged, st.Phase)
	assert.Equal(t, DefaultAgentNamespace, h.Namespace)
	assert.Equal(t, 2*time.Minute, h.Timeout)
	assert.Equal(t, time.Second, h.PollInterval)
	assert.Equal(t, 40*time.Second, h.Fresh)

	// Fresh is inclusive: renewed exactly 40 s ago is present, a nanosecond
	// more is not.
	now := renewed.Add(40 * time.Second)
	h = &HostAgents{Kube: cs, Now: func() time.Time { return now }}
	present, err := h.Present(t.Context(), "w1")
	require.NoError(t, err)
	assert.True(t, present, "renewed exactly Fresh ago")
	now = now.Add(time.Nanosecond)
	present, err = h.Present(t.Context(), "w1")
	require.NoError(t, err)
	assert.False(t, present, "renewed more than Fresh ago")
}

// readsCounted is a watch whose ResultChan calls are counted.
type readsCounted struct {
	watch.Interface
	mu    *sync.Mutex
	reads *int
}

func (w readsCounted) ResultChan() <-chan watch.Event {
	w.mu.Lock()
	*w.reads++
	w.mu.Unlock()
	return w.Interface.ResultChan()
}

// WaitAll returns as soon as every node reported, a failure included: when
// every report is there already it lists the Leases once and neither waits
// on its watch nor lists again until its Timeout (here the API server ends
// every watch at once, so each watch is followed by a list).
func TestHostAgentsWaitAllStopsReadingOnceEveryNodeReported(t *testing.T) {
	cs := fake.NewClientset(agentNode("w1"), agentNode("w2"), agentNode("w3"))
	reportOn(t, cs, "w1", HostStatus{Generation: 2, Phase: HostConverged}, time.Now())
	reportOn(t, cs, "w2", HostStatus{Generation: 5, Phase: HostDeferred}, time.Now())
	reportOn(t, cs, "w3", HostStatus{Generation: 1, Phase: HostFailed, Error: "bridge cni0: permission denied"}, time.Now())
	var mu sync.Mutex
	lists, reads := 0, 0
	cs.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		lists++
		mu.Unlock()
		return false, nil, nil
	})
	cs.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFake()
		w.Stop() // ended by the server
		return true, readsCounted{Interface: w, mu: &mu, reads: &reads}, nil
	})
	h := &HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 200 * time.Millisecond}
	got, err := h.WaitAll(t.Context(), map[string]int64{"w1": 2, "w2": 4})
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, int64(2), got["w1"].Generation)
	assert.Equal(t, HostDeferred, got["w2"].Phase)

	got, err = h.WaitAll(t.Context(), map[string]int64{"w1": 2, "w3": 1})
	require.ErrorIs(t, err, ErrHostAgent)
	assert.Equal(t, "host agent on node w3 failed: bridge cni0: permission denied", err.Error())
	assert.Len(t, got, 1)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 2, lists, "one list per WaitAll")
	assert.Zero(t, reads, "nothing left to wait for on the watch")
}

// A failed read of the agents' Leases is retried after PollInterval; when
// the reads keep failing, the error names each node left with the read's
// error, not a missing report.
func TestHostAgentsWaitAllRetriesAFailedReadAndNamesIt(t *testing.T) {
	for _, verb := range []string{"list", "watch"} {
		t.Run(verb+" fails once", func(t *testing.T) {
			cs := fake.NewClientset(agentNode("w1"))
			reportOn(t, cs, "w1", HostStatus{Generation: 1, Phase: HostConverged}, time.Now())
			var mu sync.Mutex
			calls := 0
			failOnce := func() error {
				mu.Lock()
				defer mu.Unlock()
				calls++
				if calls == 1 {
					return errors.New("etcdserver: leader changed")
				}
				return nil
			}
			if verb == "watch" {
				cs.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
					err := failOnce()
					return err != nil, nil, err
				})
			} else {
				cs.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
					err := failOnce()
					return err != nil, nil, err
				})
			}
			h := &HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 5 * time.Second}
			got, err := h.WaitAll(t.Context(), map[string]int64{"w1": 1})
			require.NoError(t, err)
			assert.Equal(t, HostConverged, got["w1"].Phase)
			if verb == "list" {
				mu.Lock()
				assert.Equal(t, 2, calls, "listed again after the failure")
				mu.Unlock()
			}
		})
	}
	for _, verb := range []string{"list", "watch"} {
		t.Run(verb+" keeps failing", func(t *testing.T) {
			cs := fake.NewClientset(agentNode("w1"), agentNode("w2"), agentNode("w3"))
			reportOn(t, cs, "w2", HostStatus{Generation: 1, Phase: HostFailed, Error: "bridge cni0: permission denied"}, time.Now())
			reportOn(t, cs, "w3", HostStatus{Generation: 1, Phase: HostConverged}, time.Now())
			if verb == "watch" {
				cs.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
					return true, nil, errors.New("leases is forbidden")
				})
			} else {
				cs.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("leases is forbidden")
				})
			}
			h := &HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 50 * time.Millisecond}
			got, err := h.WaitAll(t.Context(), map[string]int64{"w1": 1, "w2": 1, "w3": 1})
			require.ErrorIs(t, err, ErrHostAgent)
			assert.Contains(t, err.Error(), "node w1: no report on generation 1 within 50ms (reading the agents' Leases: leases is forbidden)")
			if verb == "watch" {
				// The list still works: w2's failure and w3's report are seen.
				assert.Contains(t, err.Error(), "node w2 failed: bridge cni0: permission denied")
				assert.NotContains(t, err.Error(), "node w2: no report", "a failure stays a failure")
				assert.NotContains(t, err.Error(), "node w3")
				assert.Equal(t, HostConverged, got["w3"].Phase)
			}
		})
	}
}

// A WaitAll its caller stops returns the caller's reason, once, not a
// timeout per node that would send the operator looking at the agents.
func TestHostAgentsWaitAllStoppedByItsCallerSaysSo(t *testing.T) {
	cs := fake.NewClientset(agentNode("w1"), agentNode("w2"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	h := &HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: time.Hour}
	_, err := h.WaitAll(ctx, map[string]int64{"w1": 1, "w2": 1})
	require.ErrorIs(t, err, context.Canceled)
	assert.NotContains(t, err.Error(), "no report")
	assert.Equal(t, "context canceled", err.Error())
}

// An Agent left at its zero options renews every 5 s, writes a 40 s
// LeaseDuration, and gives a request 5 rounds (not 0: a request that needs
// a second round still converges).
func TestAgentUnsetOptionsGetTheirDefaults(t *testing.T) {
	req, err := json.Marshal(HostRequest{Generation: 1, Want: agentWant("w1")})
	require.NoError(t, err)
	n := agentNode("w1")
	n.Annotations = map[string]string{HostWantAnnotation: string(req)}
	cs := fake.NewClientset(n)
	h := &hostFlaky{undone: 1}
	a := &Agent{Kube: cs, Node: "w1", host: h.calls()}
	st, err := a.Once(t.Context())
	require.NoError(t, err)
	assert.Equal(t, HostConverged, st.Phase, "%+v", st)
	assert.Equal(t, 2, h.rounds)
	l, err := cs.CoordinationV1().Leases(DefaultAgentNamespace).Get(t.Context(), AgentLeasePrefix+"w1", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, l.Spec.LeaseDurationSeconds)
	assert.Equal(t, int32(40), *l.Spec.LeaseDurationSeconds)
	assert.Equal(t, 5*time.Second, a.Interval)
	assert.Equal(t, 40*time.Second, a.LeaseDuration)
	assert.Equal(t, 5, a.Rounds)
}

// The agent waits between rounds, 250ms after the first and twice as long
// after each next one: flanneld's delete retries need the time to give up.
func TestAgentWaitsBetweenRounds(t *testing.T) {
	h := &hostFlaky{undone: 2}
	var waits []time.Duration
	a := &Agent{Kube: fake.NewClientset(agentNode("w1")), Node: "w1", Rounds: 3, host: h.calls(),
		after: func(d time.Duration) <-chan time.Time {
			waits = append(waits, d)
			c := make(chan time.Time, 1)
			c <- time.Time{}
			return c
		}}
	st, err := a.Carry(t.Context(), HostRequest{Generation: 1, Want: agentWant("w1")})
	require.NoError(t, err)
	assert.Equal(t, HostConverged, st.Phase)
	assert.Equal(t, []time.Duration{250 * time.Millisecond, 500 * time.Millisecond}, waits)
}

// A round that fails is logged by Run (the agent's only way to tell when it
// cannot even read its Node); a round without a request is not an error.
func TestAgentRunLogsAFailedRound(t *testing.T) {
	cs := fake.NewClientset() // no Node w1: every round fails
	var mu sync.Mutex
	var errs []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(args, `"msg"="host agent round"`) && strings.Contains(args, `"error"=`) {
			errs = append(errs, args)
		}
	}, funcr.Options{Verbosity: 1})
	ctx, cancel := context.WithCancel(logr.NewContext(t.Context(), log))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- (&Agent{Kube: cs, Node: "w1", Interval: time.Millisecond}).Run(ctx) }()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(errs) >= 2
	}, 10*time.Second, time.Millisecond, "each failed round is logged")
	cancel()
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, errs[0], `node w1: nodes \"w1\" not found`)
}

// A request annotation that is not JSON is reported failed, under the
// generation the agent last reported (0 without one), so the runbook's wait
// for a later generation is not taken for an answer.
func TestAgentReportsAnUnreadableRequestAsFailed(t *testing.T) {
	n := agentNode("w1")
	n.Annotations = map[string]string{HostWantAnnotation: "{not json"}
	cs := fake.NewClientset(n)
	a := &Agent{Kube: cs, Node: "w1"}
	st, err := a.Once(t.Context())
	require.NoError(t, err)
	assert.Equal(t, HostFailed, st.Phase)
	assert.Equal(t, int64(0), st.Generation)
	assert.Contains(t, st.Error, "annotation "+HostWantAnnotation+" of node w1")

	cs = fake.NewClientset(n)
	reportOn(t, cs, "w1", HostStatus{Generation: 4, Phase: HostConverged}, time.Now())
	a = &Agent{Kube: cs, Node: "w1"}
	st, err = a.Once(t.Context())
	require.NoError(t, err)
	assert.Equal(t, HostFailed, st.Phase)
	assert.Equal(t, int64(4), st.Generation, "the last generation reported")
	got, err := (&HostAgents{Kube: cs}).Status(t.Context(), "w1")
	require.NoError(t, err)
	assert.Equal(t, HostFailed, got.Phase)
	assert.Equal(t, int64(4), got.Generation)
}

// The want handed to nodenet is the request's, completed with the host's
// paths, its bridge and VTEP where the request names none, and the node's
// pods that hold an address of their own (not hostNetwork, not finished),
// as a complete list (the fake clientset ignores the field selector
// spec.nodeName: every pod here is on w1).
func TestAgentCompletesTheRequestWithTheHostAndItsLivePods(t *testing.T) {
	pod := func(name, node string, phase corev1.PodPhase, hostNet bool, ips ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: node, HostNetwork: hostNet},
			Status: corev1.PodStatus{Phase: phase}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return p
	}
	cs := fake.NewClientset(agentNode("w1"),
		pod("web", "w1", corev1.PodRunning, false, "10.244.1.5", "fd00::5"),
		pod("pending", "w1", corev1.PodPending, false, "10.244.1.6"),
		pod("done", "w1", corev1.PodSucceeded, false, "10.244.1.7"),
		pod("crashed", "w1", corev1.PodFailed, false, "10.244.1.8"),
		pod("proxy", "w1", corev1.PodRunning, true, "192.0.2.1"),
		pod("odd", "w1", corev1.PodRunning, false, "not-an-ip"),
	)
	var got []nodenet.Want
	calls := (&hostDrift{}).calls()
	audit := calls.audit
	calls.audit = func(ctx context.Context, w nodenet.Want) (*nodenet.Report, error) {
		got = append(got, w)
		return audit(ctx, w)
	}
	host := nodenet.Want{RunFlannelDir: "/host/run/flannel", CNIDataDir: "/host/var/lib/cni", CNIConfDir: "/host/etc/cni/net.d", NetNS: "/proc/1/ns/net",
		IPTablesBackend: "nft", Bridge: "cni0", VTEP: "flannel.1"}
	a := &Agent{Kube: cs, Node: "w1", Host: host, host: calls}

	req := HostRequest{Generation: 1, Want: agentWant("w1")}
	_, err := a.Carry(t.Context(), req)
	require.NoError(t, err)
	req.Want.Bridge, req.Want.VTEP = "br-pods", "vxlan.7"
	_, err = a.Carry(t.Context(), req)
	require.NoError(t, err)

	require.Len(t, got, 2)
	want := agentWant("w1")
	want.RunFlannelDir, want.CNIDataDir, want.CNIConfDir, want.NetNS, want.IPTablesBackend = host.RunFlannelDir, host.CNIDataDir, host.CNIConfDir, host.NetNS, host.IPTablesBackend
	want.Bridge, want.VTEP = "cni0", "flannel.1"
	want.LivePods = []nodenet.Pod{
		{Name: "default/pending", IP: netip.MustParseAddr("10.244.1.6")},
		{Name: "default/web", IP: netip.MustParseAddr("10.244.1.5")},
		{Name: "default/web", IP: netip.MustParseAddr("fd00::5")},
	}
	want.LivePodsComplete = true
	assert.Equal(t, want, got[0], "the host's bridge and VTEP when the request names none")
	want.Bridge, want.VTEP = "br-pods", "vxlan.7"
	assert.Equal(t, want, got[1], "the request's bridge and VTEP over the host's")
}

// deferredRoute is a report whose only fix deletes the route to the old
// subnet 10.244.1.0/24, deferred while the live pods are not known.
func deferredRoute(w nodenet.Want, runnable bool) *nodenet.Report {
	old := netip.MustParsePrefix("10.244.1.0/24")
	r := &nodenet.Report{Node: w.Node, PodCIDR: w.PodCIDR, Network: w.Network, Bridge: "cni0", ReservationDir: "/var/lib/cni/networks/cbr0",
		SubnetEnvFile: "/run/flannel/subnet.env", OldPodCIDRs: []netip.Prefix{old}}
	fix := []nodenet.Action{{Kind: nodenet.ActionDeleteRoute, Object: "route " + old.String(), Route: &nodenet.Route{Dst: old, Dev: "flannel.1"}, Retires: []netip.Prefix{old}}}
	if runnable {
		stray := netip.MustParsePrefix("10.244.3.0/24")
		fix = append(fix, nodenet.Action{Kind: nodenet.ActionDeleteRoute, Object: "route " + stray.String(), Route: &nodenet.Route{Dst: stray, Dev: "flannel.1"}})
	}
	r.Findings = []nodenet.Finding{{Severity: cidr.SeverityError, Code: nodenet.CodeRouteMissing, Object: "route " + old.String(), Fix: fix}}
	return r
}

// A request whose only actions left wait for pods to leave an old range is
// reported deferred (the agent retries it), not failed: whether this
// round's Apply deferred them, or a fresh plan holds nothing else. A fresh
// plan with an action that could run, or with none, is a failure.
func TestAgentReportsDeferredOnlyWhenNothingButDeferredActionsIsLeft(t *testing.T) {
	notConverged := func(_ context.Context, w nodenet.Want) (*nodenet.Report, error) {
		return nil, &nodenet.NotConvergedError{Node: w.Node, Findings: []nodenet.Finding{{Severity: cidr.SeverityError, Code: nodenet.CodeRouteMissing, Object: "route 10.244.1.0/24"}}}
	}
	carry := func(audit func(context.Context, nodenet.Want) (*nodenet.Report, error), outcomes ...nodenet.Outcome) *HostStatus {
		t.Helper()
		calls := hostCalls{
			audit: audit,
			apply: func(_ context.Context, w nodenet.Want, _ *nodenet.Plan, _ nodenet.ApplyOptions) (*nodenet.Result, error) {
				return &nodenet.Result{Node: w.Node, Outcomes: outcomes}, nil
			},
			verify: notConverged,
		}
		a := &Agent{Kube: fake.NewClientset(agentNode("w1")), Node: "w1", Rounds: 1, host: calls}
		st, err := a.Carry(t.Context(), HostRequest{Generation: 1, Want: agentWant("w1")})
		require.NoError(t, err)
		return st
	}
	clean := (&hostFlaky{}).calls().audit

	st := carry(clean, nodenet.Outcome{Index: 0, Kind: nodenet.ActionDeleteRoute, Object: "route 10.244.1.0/24", Status: nodenet.StatusDeferred, Detail: "live pods still use 10.244.1.0/24"})
	assert.Equal(t, HostDeferred, st.Phase, "this round deferred an action: %+v", st)
	assert.Equal(t, []string{"#0 delete-route route 10.244.1.0/24: deferred (live pods still use 10.244.1.0/24)"}, st.Deferred)

	st = carry(func(_ context.Context, w nodenet.Want) (*nodenet.Report, error) { return deferredRoute(w, false), nil })
	assert.Equal(t, HostDeferred, st.Phase, "a fresh plan holds only a deferred action: %+v", st)
	assert.Empty(t, st.Deferred)

	st = carry(func(_ context.Context, w nodenet.Want) (*nodenet.Report, error) { return deferredRoute(w, true), nil })
	assert.Equal(t, HostFailed, st.Phase, "a fresh plan holds an action that can run: %+v", st)

	st = carry(clean)
	assert.Equal(t, HostFailed, st.Phase, "a fresh plan holds nothing: %+v", st)

	audits := 0
	st = carry(func(_ context.Context, w nodenet.Want) (*nodenet.Report, error) {
		audits++
		if audits > 1 {
			return nil, errors.New("reading the routes: permission denied")
		}
		return deferredRoute(w, false), nil
	})
	assert.Equal(t, HostFailed, st.Phase, "no fresh plan: %+v", st)
}
