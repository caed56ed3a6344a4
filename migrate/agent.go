package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/nodenet"
)

// The host-agent protocol. A runbook publishes what a node's host must hold
// as the Node annotation HostWantAnnotation (a HostRequest: a generation and
// a nodenet.Want). The agent on that node (examples/nodenet-agent, one per
// node) audits its host, applies nodenet's plan, verifies, and reports a
// HostStatus for that generation in the annotation HostStatusAnnotation of
// its own Lease, AgentLeasePrefix+<node> in the agent's namespace. The Lease
// is renewed while the agent runs: a Lease renewed recently is how a runbook
// knows an agent is present. The agent needs to read Nodes and Pods and to
// write Leases in its namespace, nothing else.
const (
	HostWantAnnotation   = "hostplan.cidrshift.io/want"
	HostStatusAnnotation = "hostplan.cidrshift.io/status"
	AgentLeasePrefix     = "cidrshift-agent-"
	// DefaultAgentNamespace is where the agents' Leases live by default.
	DefaultAgentNamespace = "kube-system"
)

// HostRequest is what a runbook asks of one node's host.
type HostRequest struct {
	// Generation increases with every new request for the node.
	Generation int64 `json:"generation"`
	// Want is the node's wanted pod network. Its host-side fields (file
	// roots, NetNS, IPTablesBackend, LivePods) are the agent's to fill.
	Want nodenet.Want `json:"want"`
}

// HostPhase is where an agent is with a request.
type HostPhase string

// The phases of a HostStatus.
const (
	// HostConverged: the host holds the wanted state; Verify passed.
	HostConverged HostPhase = "converged"
	// HostDeferred: everything is done except actions that would take an
	// old range from pods still using it; the agent retries them until those
	// pods are gone.
	HostDeferred HostPhase = "deferred"
	// HostFailed: the request could not be carried out; Error says why.
	HostFailed HostPhase = "failed"
)

// HostStatus is an agent's report on one request.
type HostStatus struct {
	Generation int64     `json:"generation"`
	Phase      HostPhase `json:"phase"`
	// Actions are the outcomes of the last Apply, one line each.
	Actions []string `json:"actions,omitempty"`
	// Deferred are the actions waiting for pods to leave an old range.
	Deferred []string `json:"deferred,omitempty"`
	// Findings are what the last Verify still found.
	Findings []string  `json:"findings,omitempty"`
	Error    string    `json:"error,omitempty"`
	Time     time.Time `json:"time"`
}

// ErrHostAgent is matched by every failure an agent reported or a timeout
// waiting for one.
var ErrHostAgent = errors.New("host agent")

// HostAgents is the runbook side of the protocol.
type HostAgents struct {
	// Kube writes the Node annotations and reads the Leases. Required.
	Kube kubernetes.Interface
	// Namespace of the agents' Leases (default DefaultAgentNamespace).
	Namespace string
	// Timeout bounds the wait for one node's report (default 2m);
	// PollInterval is its period (default 1s).
	Timeout, PollInterval time.Duration
	// Fresh is how recently a Lease must have been renewed for its agent to
	// count as present (default 40s).
	Fresh time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
}

func (h *HostAgents) defaults() {
	if h.Namespace == "" {
		h.Namespace = DefaultAgentNamespace
	}
	if h.Timeout <= 0 {
		h.Timeout = 2 * time.Minute
	}
	if h.PollInterval <= 0 {
		h.PollInterval = time.Second
	}
	if h.Fresh <= 0 {
		h.Fresh = 40 * time.Second
	}
	if h.Now == nil {
		h.Now = time.Now
	}
}

// Present reports whether an agent serves node: its Lease was renewed
// within Fresh.
func (h *HostAgents) Present(ctx context.Context, node string) (bool, error) {
	h.defaults()
	l, err := h.Kube.CoordinationV1().Leases(h.Namespace).Get(ctx, AgentLeasePrefix+node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the host agent Lease %s/%s%s: %w", h.Namespace, AgentLeasePrefix, node, err)
	}
	if l.Spec.RenewTime == nil {
		return false, nil
	}
	return h.Now().Sub(l.Spec.RenewTime.Time) <= h.Fresh, nil
}

// Apply publishes want for its node (Publish) and waits until the node's
// agent reports on it (Wait). It returns the agent's status when it
// converged or deferred; a failed report or no report within Timeout is an
// error (ErrHostAgent) that names the node.
func (h *HostAgents) Apply(ctx context.Context, want nodenet.Want) (*HostStatus, error) {
	gen, err := h.Publish(ctx, want)
	if err != nil {
		return nil, err
	}
	return h.Wait(ctx, want.Node, gen)
}

// Publish publishes want for its node as a new generation, unless the same
// want is published already and did not fail, and returns the generation
// to Wait for. The write is conditional on the Node's resourceVersion, so
// requests published at once for one node (by goroutines, or by two
// runbooks) each get a generation of their own; one that lost the race is
// published again on top of the winner.
func (h *HostAgents) Publish(ctx context.Context, want nodenet.Want) (int64, error) {
	h.defaults()
	var lastErr error
	for range 10 {
		node, err := h.Kube.CoreV1().Nodes().Get(ctx, want.Node, metav1.GetOptions{})
		if err != nil {
			return 0, fmt.Errorf("node %s: %w", want.Node, err)
		}
		var cur HostRequest
		if v, ok := node.Annotations[HostWantAnnotation]; ok {
			if err := json.Unmarshal([]byte(v), &cur); err != nil {
				cur = HostRequest{} // unreadable: replaced by a new request
			}
		}
		gen := cur.Generation
		if gen != 0 && sameWant(cur.Want, want) {
			// A failed request is asked again: a rerun of the runbook retries.
			st, err := h.Status(ctx, want.Node)
			if !(err == nil && st != nil && st.Generation == gen && st.Phase == HostFailed) {
				return gen, nil
			}
		}
		gen++
		req, err := json.Marshal(HostRequest{Generation: gen, Want: want})
		if err != nil {
			return 0, fmt.Errorf("encoding the host request of node %s: %w", want.Node, err)
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": node.ResourceVersion,
			"annotations":     map[string]string{HostWantAnnotation: string(req)},
		}})
		if err != nil {
			return 0, err
		}
		_, err = h.Kube.CoreV1().Nodes().Patch(ctx, want.Node, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			logr.FromContextOrDiscard(ctx).V(1).Info("host request published", "node", want.Node, "generation", gen)
			return gen, nil
		}
		if !apierrors.IsConflict(err) {
			return 0, fmt.Errorf("node %s: publishing the host request: %w", want.Node, err)
		}
		lastErr = err
	}
	return 0, fmt.Errorf("node %s: publishing the host request: the Node kept changing: %w", want.Node, lastErr)
}

// Wait waits until node's agent reports on generation gen, or on a later
// one: a request published for the node after gen (computed from a later
// reading of the cluster) supersedes it, and the agent may never carry gen
// out. It returns the report when the agent converged or deferred; a failed
// report or none within Timeout is an error (ErrHostAgent) that names the
// node.
func (h *HostAgents) Wait(ctx context.Context, node string, gen int64) (*HostStatus, error) {
	got, err := h.WaitAll(ctx, map[string]int64{node: gen})
	return got[node], err
}

// WaitAll is Wait for many nodes at once (node -> generation), with one
// watch on the agents' Leases rather than a poll per node: on a large
// cluster, polling every node's Lease would exhaust the client's rate
// limit. It returns the reports received; its error names every node whose
// agent failed or did not report within Timeout.
func (h *HostAgents) WaitAll(ctx context.Context, gens map[string]int64) (map[string]*HostStatus, error) {
	h.defaults()
	got := map[string]*HostStatus{}
	last := map[string]string{}
	var failed []error
	pending := func() int { return len(gens) - len(got) - len(failed) }
	seen := func(l *coordinationv1.Lease) {
		node, ok := strings.CutPrefix(l.Name, AgentLeasePrefix)
		gen, want := gens[node]
		if !ok || !want || got[node] != nil || last[node] == "failed" {
			return
		}
		st, err := leaseStatus(l)
		switch {
		case err != nil:
			last[node] = err.Error()
		case st == nil:
			last[node] = "no report"
		case st.Generation < gen:
			last[node] = fmt.Sprintf("report for generation %d", st.Generation)
		case st.Phase == HostFailed:
			last[node] = "failed"
			failed = append(failed, fmt.Errorf("%w on node %s failed: %s", ErrHostAgent, node, st.Error))
		default:
			got[node] = st
		}
	}
	for node := range gens {
		last[node] = "no report"
	}
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	leases := h.Kube.CoordinationV1().Leases(h.Namespace)
	for pending() > 0 && ctx.Err() == nil {
		// The watch first, then the list: what changes in between is in
		// one or the other (a report seen twice counts once).
		w, werr := leases.Watch(ctx, metav1.ListOptions{})
		list, err := leases.List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range list.Items {
				seen(&list.Items[i])
			}
		}
		if werr != nil || err != nil {
			if w != nil {
				w.Stop()
			}
			for node := range gens {
				if got[node] == nil && last[node] != "failed" {
					last[node] = "reading the agents' Leases: " + errors.Join(werr, err).Error()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(h.PollInterval):
			}
			continue
		}
	events:
		for pending() > 0 {
			select {
			case <-ctx.Done():
				break events
			case ev, ok := <-w.ResultChan():
				if !ok { // closed (timeout, or the server ended it): watch again
					select {
					case <-ctx.Done():
					case <-time.After(h.PollInterval):
					}
					break events
				}
				if l, isLease := ev.Object.(*coordinationv1.Lease); isLease {
					seen(l)
				}
			}
		}
		w.Stop()
	}
	errs := failed
	for _, node := range slices.Sorted(maps.Keys(gens)) {
		if got[node] == nil && last[node] != "failed" {
			if err := context.Cause(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				errs = append(errs, err)
				break
			}
			errs = append(errs, fmt.Errorf("%w on node %s: no report on generation %d within %s (%s); is the agent running there?", ErrHostAgent, node, gens[node], h.Timeout, last[node]))
		}
	}
	return got, errors.Join(errs...)
}

// Status reads the agent's last report for node; nil without one.
func (h *HostAgents) Status(ctx context.Context, node string) (*HostStatus, error) {
	h.defaults()
	l, err := h.Kube.CoordinationV1().Leases(h.Namespace).Get(ctx, AgentLeasePrefix+node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return leaseStatus(l)
}

func leaseStatus(l *coordinationv1.Lease) (*HostStatus, error) {
	v, ok := l.Annotations[HostStatusAnnotation]
	if !ok {
		return nil, nil
	}
	var st HostStatus
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		return nil, fmt.Errorf("host agent Lease %s/%s: annotation %s: %w", l.Namespace, l.Name, HostStatusAnnotation, err)
	}
	return &st, nil
}

func sameWant(a, b nodenet.Want) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

// Agent is the node side of the protocol: it carries out the HostRequests
// published on its Node with nodenet and reports on its Lease.
type Agent struct {
	// Kube reads the Node and its Pods and writes the Lease. Required.
	Kube kubernetes.Interface
	// Node is the node this agent serves. Required.
	Node string
	// Namespace of the Lease (default DefaultAgentNamespace).
	Namespace string
	// Identity is the Lease's holder, e.g. the pod name (default Node).
	Identity string
	// Host is the template of the host-side fields every request's Want is
	// completed with: RunFlannelDir, CNIDataDir, CNIConfDir (e.g. under
	// /host), NetNS, IPTablesBackend, and Bridge or VTEP when the request
	// leaves them empty.
	Host nodenet.Want
	// Interval is how often the agent renews its Lease, reads its Node,
	// retries deferred actions and verifies that the host still holds the
	// state of a converged request (default 5s).
	Interval time.Duration
	// LeaseDuration is written on the Lease (default 40s).
	LeaseDuration time.Duration
	// JournalDir, when set, is where the agent journals each Apply on the
	// host (nodenet.ApplyOptions.Journal: the plan, and every action before
	// it runs and with its outcome), so what it changed is on record after
	// a crash. examples/nodenet-agent keeps it at
	// /var/lib/cidrshift/nodenet-agent on the host.
	JournalDir string
	// Rounds is how many rounds of audit, apply and verify a request gets
	// before the agent reports it failed (default 5; the waits between
	// them double from 250ms, 3.75s in all).
	Rounds int

	host hostCalls // nodenet's, but in tests
	// after is time.After, but in tests: the wait between rounds.
	after func(time.Duration) <-chan time.Time
}

// hostCalls are the nodenet calls of an agent's round.
type hostCalls struct {
	audit  func(context.Context, nodenet.Want) (*nodenet.Report, error)
	apply  func(context.Context, nodenet.Want, *nodenet.Plan, nodenet.ApplyOptions) (*nodenet.Result, error)
	verify func(context.Context, nodenet.Want) (*nodenet.Report, error)
}

// roundBackoff is the wait after an agent's first round that did not
// converge.
const roundBackoff = 250 * time.Millisecond

func (a *Agent) defaults() error {
	if a.Kube == nil {
		return inputf("Agent.Kube is required")
	}
	if a.Node == "" {
		return inputf("--node is required: the name of the node this agent serves (the downward API's spec.nodeName)")
	}
	if a.Namespace == "" {
		a.Namespace = DefaultAgentNamespace
	}
	if a.Identity == "" {
		a.Identity = a.Node
	}
	if a.Interval <= 0 {
		a.Interval = 5 * time.Second
	}
	if a.LeaseDuration <= 0 {
		a.LeaseDuration = 40 * time.Second
	}
	if a.Rounds <= 0 {
		a.Rounds = 5
	}
	if a.host.audit == nil {
		a.host = hostCalls{nodenet.Audit, nodenet.Apply, nodenet.Verify}
	}
	if a.after == nil {
		a.after = time.After
	}
	return nil
}

// Check verifies, read-only, what the agent needs before it starts: the
// permissions (SelfSubjectAccessReview) and its Node.
func (a *Agent) Check(ctx context.Context) error {
	if err := a.defaults(); err != nil {
		return err
	}
	checks := []access.Check{
		{Verb: "get", Resource: "nodes", Name: a.Node},
		{Verb: "list", Resource: "nodes"},
		{Verb: "watch", Resource: "nodes"},
		{Verb: "list", Resource: "pods"},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: a.Namespace, Name: AgentLeasePrefix + a.Node},
		{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: a.Namespace},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: a.Namespace, Name: AgentLeasePrefix + a.Node},
	}
	if err := access.Preflight(ctx, a.Kube, checks); err != nil {
		return fmt.Errorf("host agent of node %s: %w", a.Node, err)
	}
	if _, err := a.Kube.CoreV1().Nodes().Get(ctx, a.Node, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return inputf("--node %s: no such Node", a.Node)
		}
		return fmt.Errorf("node %s: %w", a.Node, err)
	}
	return nil
}

// Run renews the agent's Lease and carries out its Node's requests until
// ctx ends. A request the agent was restarted in the middle of is carried
// out again: nodenet's Apply is idempotent.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.defaults(); err != nil {
		return err
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("node", a.Node)
	// A watch on the agent's own Node wakes it as soon as a runbook
	// publishes a request; the interval still renews the Lease and retries
	// deferred actions.
	wake := make(chan struct{}, 1)
	factory := informers.NewSharedInformerFactoryWithOptions(a.Kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.Node).String()
	}))
	notify := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && n.Name == a.Node {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
	}); err != nil {
		return fmt.Errorf("watching node %s: %w", a.Node, err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	tick := time.NewTicker(a.Interval)
	defer tick.Stop()
	for {
		st, err := a.Once(ctx)
		if err != nil && ctx.Err() == nil {
			log.Error(err, "host agent round")
		} else if st != nil {
			log.V(1).Info("host agent round", "generation", st.Generation, "phase", st.Phase)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-wake:
		}
	}
}

// Once renews the Lease and, when the Node carries a request the agent has
// not converged on, carries it out and reports. It returns the status
// written (nil when there is no request).
func (a *Agent) Once(ctx context.Context) (*HostStatus, error) {
	if err := a.defaults(); err != nil {
		return nil, err
	}
	lease, err := a.lease(ctx)
	if err != nil {
		return nil, err
	}
	node, err := a.Kube.CoreV1().Nodes().Get(ctx, a.Node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", a.Node, err)
	}
	v, ok := node.Annotations[HostWantAnnotation]
	if !ok {
		return nil, a.report(ctx, lease, nil)
	}
	prev, _ := leaseStatus(lease)
	var req HostRequest
	if err := json.Unmarshal([]byte(v), &req); err != nil {
		st := &HostStatus{Phase: HostFailed, Error: fmt.Sprintf("annotation %s of node %s: %v", HostWantAnnotation, a.Node, err)}
		if prev != nil {
			st.Generation = prev.Generation
		}
		return st, a.report(ctx, lease, st)
	}
	var drift []string
	if prev != nil && prev.Generation == req.Generation && prev.Phase != HostDeferred {
		// Done with it: a failed request waits for the runbook to ask
		// again; a converged one is verified every round, and carried out
		// again when something undid it (flanneld deletes the FDB entry,
		// neighbour entry and route of a shared subnet's holder it cached
		// last, whichever holder left, and retries a delete for tens of
		// seconds).
		if prev.Phase == HostFailed || req.Want.Node != a.Node {
			return prev, a.report(ctx, lease, prev)
		}
		if drift = a.drift(ctx, req); len(drift) == 0 {
			return prev, a.report(ctx, lease, prev)
		}
	}
	st, cut := a.carry(ctx, req)
	if cut != nil {
		// Not a failure of the request: the next round, of this agent or
		// of the next one, carries it out again. The Lease keeps its last
		// report.
		return nil, cut
	}
	if len(drift) > 0 {
		st.Actions = append([]string{"undone since the last report, done again: " + strings.Join(drift, ", ")}, st.Actions...)
	}
	return st, a.report(ctx, lease, st)
}

// Carry carries out req once, as Once does with the Node's request, but
// neither reads the Node nor writes the Lease: the path of a person who runs
// the agent by hand with the request a runbook printed (HostSteps).
func (a *Agent) Carry(ctx context.Context, req HostRequest) (*HostStatus, error) {
	if err := a.defaults(); err != nil {
		return nil, err
	}
	return a.carry(ctx, req)
}

// carry is carryOut, with the error that cut the round short (the agent is
// stopping: its context ended, or an iptables command it ran was killed by
// a signal, as systemd's stop of the agent's unit kills every process of it
// at once). Then the status says failed, but nothing is known to have
// failed: Once reports nothing, and the request is carried out again.
func (a *Agent) carry(ctx context.Context, req HostRequest) (*HostStatus, error) {
	var cut error
	st := a.carryOut(ctx, req, &cut)
	return st, cut
}

// hostWant completes req's want with the host-side fields of a.Host and
// the node's live pods.
func (a *Agent) hostWant(ctx context.Context, req HostRequest) (nodenet.Want, error) {
	want := req.Want
	h := a.Host
	want.RunFlannelDir, want.CNIDataDir, want.CNIConfDir, want.NetNS, want.IPTablesBackend = h.RunFlannelDir, h.CNIDataDir, h.CNIConfDir, h.NetNS, h.IPTablesBackend
	if want.Bridge == "" {
		want.Bridge = h.Bridge
	}
	if want.VTEP == "" {
		want.VTEP = h.VTEP
	}
	pods, err := a.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", a.Node).String()})
	if err != nil {
		return want, fmt.Errorf("listing the pods of node %s: %w", a.Node, err)
	}
	want.LivePods, want.LivePodsComplete = livePods(pods.Items), true
	return want, nil
}

// drift returns what Verify finds on a host that converged on req before
// (nothing when it still holds req's state, or when Verify cannot run).
func (a *Agent) drift(ctx context.Context, req HostRequest) []string {
	want, err := a.hostWant(ctx, req)
	if err != nil {
		return nil
	}
	var nc *nodenet.NotConvergedError
	if _, err := a.host.verify(ctx, want); !errors.As(err, &nc) {
		return nil
	}
	var out []string
	for _, f := range nc.Findings {
		out = append(out, string(f.Code)+" ("+f.Object+")")
	}
	return out
}

// carryOut audits, plans, applies and verifies one request; an error that
// cut the round short is stored in *cut (see carry).
func (a *Agent) carryOut(ctx context.Context, req HostRequest, cut *error) *HostStatus {
	st := &HostStatus{Generation: req.Generation}
	fail := func(err error) *HostStatus {
		if errors.Is(err, nodenet.ErrInterrupted) || ctx.Err() != nil {
			*cut = fmt.Errorf("node %s: generation %d cut short, not reported: %w", a.Node, req.Generation, err)
		}
		st.Phase, st.Error = HostFailed, oneLine(err.Error())
		return st
	}
	if req.Want.Node != a.Node {
		return fail(inputf("the request names node %q; this agent serves %q", req.Want.Node, a.Node))
	}
	want, err := a.hostWant(ctx, req)
	if err != nil {
		return fail(err)
	}
	// Rounds of audit, apply and verify until the host converges: flanneld
	// may undo an action meanwhile (it deletes the route and neighbour
	// entry of a shared subnet at each holder's removal, retrying a delete
	// that found nothing for tens of seconds, so it can remove what this
	// round put back), and the next round puts it back again.
	wait := roundBackoff
	for round := 1; ; round++ {
		rep, err := a.host.audit(ctx, want)
		if err != nil {
			return fail(err)
		}
		plan, err := nodenet.NewPlan(rep)
		if err != nil {
			return fail(err)
		}
		res, err := a.applyJournaled(ctx, want, plan)
		st.Deferred = nil
		if res != nil {
			for _, o := range res.Outcomes {
				line := o.String()
				if round > 1 {
					line = fmt.Sprintf("round %d: %s", round, line)
				}
				st.Actions = append(st.Actions, line)
			}
			for _, o := range res.Deferred() {
				st.Deferred = append(st.Deferred, o.String())
			}
		}
		if err != nil {
			return fail(err)
		}
		_, verr := a.host.verify(ctx, want)
		var nc *nodenet.NotConvergedError
		st.Findings = nil
		if errors.As(verr, &nc) {
			for _, f := range nc.Findings {
				st.Findings = append(st.Findings, f.String())
			}
		}
		switch {
		case verr == nil:
			st.Phase = HostConverged
			return st
		case nc != nil && (len(st.Deferred) > 0 || a.onlyDeferredLeft(ctx, want)):
			// What is left waits for pods to leave an old range (this
			// round's deferred actions, or the removal of rules this round
			// added to keep their addresses): retried every Interval until
			// they are gone.
			st.Phase = HostDeferred
			return st
		case nc == nil || round >= a.Rounds:
			return fail(verr)
		}
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-a.after(wait):
		}
		wait *= 2
	}
}

// applyJournaled applies plan, journaled in JournalDir when set.
func (a *Agent) applyJournaled(ctx context.Context, want nodenet.Want, plan *nodenet.Plan) (*nodenet.Result, error) {
	opts := nodenet.ApplyOptions{LivePods: want.LivePods}
	if a.JournalDir != "" {
		j, err := journal.Open(a.JournalDir)
		if err != nil {
			return nil, fmt.Errorf("host agent journal: %w", err)
		}
		defer func() { _ = j.Close() }()
		opts.Journal = j
	}
	return a.host.apply(ctx, want, plan, opts)
}

// onlyDeferredLeft reports whether a fresh plan for want holds actions and
// every one of them is deferred.
func (a *Agent) onlyDeferredLeft(ctx context.Context, want nodenet.Want) bool {
	rep, err := a.host.audit(ctx, want)
	if err != nil {
		return false
	}
	plan, err := nodenet.NewPlan(rep)
	if err != nil || len(plan.Actions) == 0 {
		return false
	}
	for _, a := range plan.Actions {
		if a.Deferred == "" {
			return false
		}
	}
	return true
}

// livePods are the pods with their own address on the node (hostNetwork
// pods use the node's).
func livePods(pods []corev1.Pod) []nodenet.Pod {
	var out []nodenet.Pod
	for _, p := range pods {
		if !ownAddress(&p) {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				out = append(out, nodenet.Pod{Name: p.Namespace + "/" + p.Name, IP: a})
			}
		}
	}
	return out
}

// ownAddress reports whether p holds an address of its own on its node:
// not hostNetwork, not finished (a terminating pod still holds one).
func ownAddress(p *corev1.Pod) bool {
	return !p.Spec.HostNetwork && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// lease returns the agent's Lease, created if missing, renewed.
func (a *Agent) lease(ctx context.Context) (*coordinationv1.Lease, error) {
	leases := a.Kube.CoordinationV1().Leases(a.Namespace)
	name := AgentLeasePrefix + a.Node
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		now := metav1.NewMicroTime(time.Now())
		l, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: a.Namespace, Labels: map[string]string{"app.kubernetes.io/name": "nodenet-agent"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(a.Identity), LeaseDurationSeconds: ptr.To(int32(a.LeaseDuration / time.Second)),
				AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("host agent Lease %s/%s: %w", a.Namespace, name, err)
	}
	return l, nil
}

// report writes st (nil keeps the last one) on the Lease and renews it.
func (a *Agent) report(ctx context.Context, l *coordinationv1.Lease, st *HostStatus) error {
	l = l.DeepCopy()
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime, l.Spec.HolderIdentity = &now, ptr.To(a.Identity)
	if st != nil {
		st.Time = now.UTC().Truncate(time.Second)
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[HostStatusAnnotation] = string(b)
	}
	if _, err := a.Kube.CoordinationV1().Leases(a.Namespace).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("host agent Lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	return nil
}

// HostSteps renders want as the steps a person runs on the node when no
// agent serves it: the same request the agent would carry out, handed to
// the agent binary once, by hand.
func HostSteps(want nodenet.Want) ([]string, error) {
	b, err := json.Marshal(HostRequest{Generation: 1, Want: want})
	if err != nil {
		return nil, err
	}
	return []string{
		"on node " + want.Node + ": nodenet-agent --once --node " + want.Node + " --request " + strconv.Quote(string(b)),
	}, nil
}
