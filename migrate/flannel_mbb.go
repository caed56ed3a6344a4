package migrate

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/nodecidr"
	"github.com/cidrshift/cidrshift/nodenet"
)

// The make-before-break mode of the FlannelPodCIDR migration
// (FlannelPodCIDROptions.MakeBeforeBreak). Right before a node's Node is
// deleted (nodecidr's BeforeDelete), every other node's agent sets up the
// standby for the node's subnet (mbbStandby), so its pods stay reachable
// while flanneld there forgets the subnet at the delete and learns the new
// one at the re-creation. After the node has its new podCIDR and its
// flannel pod was restarted, per node and in order:
//
//  1. transition: the wants of every node (HostWants) are published to
//     every node's agent at once. The moved node keeps answering for the
//     subnet it left while live pods hold its addresses (nodenet's
//     transition), and every other node routes that subnet through the
//     moved node's new VTEP (vxlan) or address (host-gw).
//  2. replace-pods: the node's controller-owned pods holding old
//     addresses are evicted one at a time through the Eviction API, so
//     PodDisruptionBudgets set the pace: a refusal (429) is retried with
//     backoff, and each evicted pod is waited for until it is gone. A pod
//     that cannot be replaced within HealthTimeout stops the run for the
//     operator (a Pause: exit 3 in the runbook), naming the pods still on
//     old addresses and the `kubectl rollout restart` that replaces them.
//     A rerun tries again; a rerun with Continue after that pause goes on
//     and leaves them on their old addresses, still reachable.
//  3. health-check, as without MakeBeforeBreak.
//  4. teardown: the wants are published again. HostWants lists an old
//     subnet only while the API shows a live pod holding one of its
//     addresses, so the peers drop their routes to it only then; the moved
//     node's agent deletes the transition itself once its complete list of
//     live pods holds none (nodenet re-checks before it does).
//
// Each hook is idempotent: a run killed anywhere resumes through nodecidr's
// journal, which runs a node's hooks again until they all passed.

// mbbPausedKey is the journal key recording that replace-pods paused on a
// node: only then does Continue let the run go on with the node's pods on
// their old addresses.
const mbbPausedKey = "mbb-paused/"

// mbbPreflight checks what MakeBeforeBreak needs before the first write:
// host agents, and in ModeApply a running one on every node with a podCIDR
// (a node without one would keep no route to the others' old subnets).
func (m *FlannelPodCIDRMigration) mbbPreflight(ctx context.Context) error {
	if !m.o.MakeBeforeBreak {
		return nil
	}
	if m.agents == nil {
		return inputf("--make-before-break needs --agents: every node's host agent (examples/nodenet-agent) keeps the old subnets reachable while their pods are replaced")
	}
	if m.mode != ModeApply {
		return nil
	}
	m.agents.defaults()
	nodes, err := flannel.ReadNodes(ctx, m.o.Kube, m.kubeOptions())
	if err != nil {
		return err
	}
	var without []string
	for _, n := range nodes {
		if _, ok := flIPv4(n.PodCIDRs); !ok {
			continue
		}
		present, err := m.agents.Present(ctx, n.Name)
		if err != nil {
			return err
		}
		if !present {
			without = append(without, n.Name)
		}
	}
	if len(without) > 0 {
		return inputf("--make-before-break: no host agent runs on node(s) %s (no Lease %s<node> in namespace %s renewed recently); start examples/nodenet-agent on every node, or move without --make-before-break",
			strings.Join(without, ", "), AgentLeasePrefix, m.agents.Namespace)
	}
	return nil
}

// agentPermissions are what publishing the wants to the agents needs: the
// wants (computed from the nodes and their pods) go on the Nodes, the
// agents report in their Leases, which live in the agents' namespace (one
// watch on them waits for all the reports).
func (m *FlannelPodCIDRMigration) agentPermissions() []nodecidr.Permission {
	m.agents.defaults()
	return []nodecidr.Permission{{Verb: "list", Resource: "nodes"}, {Verb: "list", Resource: "pods"}, {Verb: "patch", Resource: "nodes"},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: m.agents.Namespace},
		{Verb: "list", Group: "coordination.k8s.io", Resource: "leases", Namespace: m.agents.Namespace},
		{Verb: "watch", Group: "coordination.k8s.io", Resource: "leases", Namespace: m.agents.Namespace}}
}

// mbbHooks are the per-node hooks of MakeBeforeBreak: the transition is
// set up before the flannel pod's restart ("prepare") and again after it,
// then the old pods are replaced and the transition torn down.
//
// Why before: flanneld, when it starts with a new lease, first deletes the
// VTEP's old address and only then adds the new one
// (ip.EnsureV4AddressOnLink). The kernel deletes every route through a
// device that loses its last IPv4 address, so the node would have no route
// to any other node's pods until flanneld's backend adds them again, after
// its iptables set-up: seconds in which the node's old pods answer nobody.
// The moved node's agent gives the VTEP its new address first and then
// takes the old one (nodenet's set-address adds before it deletes), so
// flanneld finds the new address there and deletes nothing.
func (m *FlannelPodCIDRMigration) mbbHooks(restartFlannelPod nodecidr.Hook) []nodecidr.Hook {
	agentPerms := m.agentPermissions()
	return []nodecidr.Hook{
		{Name: "prepare", Permissions: agentPerms, Run: m.mbbPublish("before the flannel pod of node %s restarts")},
		restartFlannelPod,
		{Name: "transition", Permissions: agentPerms, Run: m.mbbPublish("after node %s moved")},
		{
			Name: "replace-pods",
			Permissions: []nodecidr.Permission{
				{Verb: "list", Resource: "pods"},
				{Verb: "get", Resource: "pods"},
				{Verb: "create", Resource: "pods", Subresource: "eviction"},
			},
			Run: m.replaceOldPods,
		},
		m.healthHook(),
		{Name: "transition-teardown", Permissions: agentPerms, Run: m.mbbTeardown},
	}
}

// beforeDelete are the hooks that run before each node of plan p is
// deleted: in MakeBeforeBreak, the standby (mbbStandby).
func (m *FlannelPodCIDRMigration) beforeDelete(p *nodecidr.Plan) []nodecidr.Hook {
	if !m.o.MakeBeforeBreak {
		return nil
	}
	return []nodecidr.Hook{{
		Name:        "standby",
		Permissions: m.agentPermissions(),
		Run:         func(ctx context.Context, node *corev1.Node) error { return m.mbbStandby(ctx, p, node) },
	}}
}

// mbbStandby runs right before a node's delete: every other node's agent
// gets the want in which the node lists the podCIDR plan p gives it as its
// NextPodCIDR, so each sets up the standby for the node's current subnet
// (nodenet's standby: a route at StandbyMetric through the next VTEP
// address, its neighbour entry, the default FDB entry) and the node's pods
// stay reachable while flanneld there forgets the subnet at the delete and
// learns the new one at the re-creation. The node's own want is not
// published: a changed one would change the Node the delete is conditional
// on, and cost a re-read. The NextPodCIDR stays in every want published
// until the node holds it (m.standby), so the wants published for a node
// moving at the same time keep the standby.
func (m *FlannelPodCIDRMigration) mbbStandby(ctx context.Context, p *nodecidr.Plan, node *corev1.Node) error {
	if m.agents == nil || m.mode != ModeApply {
		return nil
	}
	var next netip.Prefix
	for _, st := range p.Steps {
		if st.Node != node.Name {
			continue
		}
		for _, c := range st.NewPodCIDRs {
			if n, _, err := cidr.ParseLenient(c); err == nil && n.Addr().Is4() {
				next = n
				break
			}
		}
	}
	if !next.IsValid() {
		return nil
	}
	m.mu.Lock()
	if m.standby == nil {
		m.standby = map[string]netip.Prefix{}
	}
	m.standby[node.Name] = next
	m.mu.Unlock()
	return m.publishWants(ctx, "before node "+node.Name+" moves to "+next.String(), func(ctx context.Context) ([]nodenet.Want, error) {
		wants, err := m.HostWants(ctx)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(wants, func(w nodenet.Want) bool { return w.Node == node.Name }) {
			// A duplicate (or a node without a podCIDR): the subnet it
			// leaves is another node's, which keeps its routes.
			m.noStandby(node.Name, "the subnet it leaves stays another node's")
			return nil, nil
		}
		peers := wants[:0]
		for _, w := range wants {
			if w.Node == node.Name {
				continue
			}
			if w.Backend == nodenet.BackendVXLAN && slices.ContainsFunc(w.Peers, func(p nodenet.Peer) bool { return p.Name == node.Name && p.VTEPMAC == "" }) {
				m.noStandby(node.Name, "its flannel annotation announces no VtepMAC")
				return nil, nil
			}
			peers = append(peers, w)
		}
		return peers, nil
	})
}

// noStandby drops node's standby and notes why it has none.
func (m *FlannelPodCIDRMigration) noStandby(node, why string) {
	m.mu.Lock()
	delete(m.standby, node)
	m.mu.Unlock()
	m.note(fmt.Sprintf("node %s: no standby before its delete: %s", node, why))
}

// mbbPublish returns a hook that publishes every node's want (HostWants)
// to its agent, all at once, and waits for their reports; when says when,
// with the node's name for its %s.
func (m *FlannelPodCIDRMigration) mbbPublish(when string) func(context.Context, *corev1.Node) error {
	return func(ctx context.Context, node *corev1.Node) error {
		if m.agents == nil || m.mode != ModeApply {
			return nil
		}
		return m.publishWants(ctx, fmt.Sprintf(when, node.Name), m.HostWants)
	}
}

// publishWants computes wants and publishes each to its agent, all at
// once, then waits for their reports; when says when, for errors and the
// log. Computing and publishing hold pubMu, so that the wants of nodes
// moving at once reach the agents in the order they were computed: an
// agent carries out the last, and a wait for an earlier generation ends at
// its report (HostAgents.Wait). Nodes without a running agent are named in
// the step report (mbbPreflight refused them at the start).
func (m *FlannelPodCIDRMigration) publishWants(ctx context.Context, when string, compute func(context.Context) ([]nodenet.Want, error)) error {
	wants, gens, without, err := m.publish(ctx, compute, true)
	if err != nil {
		return fmt.Errorf("%s: %w", when, err)
	}
	for _, w := range without {
		m.note(fmt.Sprintf("node %s: no host agent runs there; it gets no want", w.Node))
	}
	if _, err := m.agents.WaitAll(ctx, gens); err != nil {
		return fmt.Errorf("%s: %w", when, err)
	}
	var kept []string
	for _, w := range wants {
		for _, p := range w.Peers {
			if len(p.OldPodCIDRs) > 0 && !slices.Contains(kept, p.Name) {
				kept = append(kept, p.Name)
			}
		}
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("host wants published", "when", when, "nodes", len(wants), "keepingOldSubnetsOf", kept)
	return nil
}

// publish computes wants and, under pubMu, publishes each to its node's
// agent when apply is set, all at once. It returns the wants, the
// generations published (node -> generation) and the wants of the nodes
// without a running agent, in the wants' order.
func (m *FlannelPodCIDRMigration) publish(ctx context.Context, compute func(context.Context) ([]nodenet.Want, error), apply bool) ([]nodenet.Want, map[string]int64, []nodenet.Want, error) {
	m.agents.defaults() // once, before the goroutines read it
	m.pubMu.Lock()
	defer m.pubMu.Unlock()
	wants, err := compute(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	gens := make([]int64, len(wants))
	absent := make([]bool, len(wants))
	errs := make([]error, len(wants))
	var wg sync.WaitGroup
	for i, w := range wants {
		wg.Go(func() {
			present, err := m.agents.Present(ctx, w.Node)
			switch {
			case err != nil:
				errs[i] = err
			case !present:
				absent[i] = true
			case apply:
				gens[i], errs[i] = m.agents.Publish(ctx, w)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, nil, err
	}
	published := map[string]int64{}
	var without []nodenet.Want
	for i, w := range wants {
		if absent[i] {
			without = append(without, w)
		} else if gens[i] != 0 {
			published[w.Node] = gens[i]
		}
	}
	return wants, published, without, nil
}

// mbbTeardown publishes the wants again once the node's pods were replaced:
// the old subnets no live pod holds any more are listed nowhere, so the
// peers drop their routes to them. It then waits, within the agents'
// Timeout, for the moved node's agent to report the transition gone
// (converged); a node still deferred is noted, its agent retries.
func (m *FlannelPodCIDRMigration) mbbTeardown(ctx context.Context, node *corev1.Node) error {
	if m.agents == nil || m.mode != ModeApply {
		return nil
	}
	if err := m.mbbPublish("after the old pods of node %s were replaced")(ctx, node); err != nil {
		return err
	}
	old, err := m.oldPodsOn(ctx, node.Name)
	if err != nil {
		return err
	}
	if len(old) > 0 {
		m.note(fmt.Sprintf("node %s: the transition stays while %d pod(s) hold old addresses: %s", node.Name, len(old), strings.Join(podList(old), ", ")))
		return nil
	}
	deadline := m.agents.Now().Add(m.agents.Timeout)
	for {
		st, err := m.agents.Status(ctx, node.Name)
		if err == nil && st != nil && st.Phase == HostConverged {
			m.note(fmt.Sprintf("node %s: no pod holds an old address; transition torn down (host agent generation %d converged)", node.Name, st.Generation))
			return nil
		}
		if !m.agents.Now().Before(deadline) {
			m.note(fmt.Sprintf("node %s: no pod holds an old address, but its host agent has not converged within %s; it retries", node.Name, m.agents.Timeout))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(m.agents.PollInterval):
		}
	}
}

func (m *FlannelPodCIDRMigration) note(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.notes = append(m.notes, s)
}

// leftSubnets are the IPv4 subnets the node-moving steps took from node.
func (m *FlannelPodCIDRMigration) leftSubnets(node string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []*nodecidr.Plan{m.fixPlan, m.rebasePlan} {
		if p == nil {
			continue
		}
		for _, st := range p.Steps {
			if st.Node != node {
				continue
			}
			for _, s := range st.OldPodCIDRs {
				if o, _, err := cidr.ParseLenient(s); err == nil && o.Addr().Is4() && !slices.Contains(out, o) {
					out = append(out, o)
				}
			}
		}
	}
	return out
}

// oldPodsOn returns node's live pods (terminating ones included) holding
// an address in a subnet the node left.
func (m *FlannelPodCIDRMigration) oldPodsOn(ctx context.Context, node string) ([]corev1.Pod, error) {
	left := m.leftSubnets(node)
	if len(left) == 0 {
		return nil, nil
	}
	pods, err := flNodePods(ctx, m.o.Kube, node)
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range pods {
		if !ownAddress(&p) {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			a, err := netip.ParseAddr(ip.IP)
			if err == nil && slices.ContainsFunc(left, func(o netip.Prefix) bool { return o.Contains(a) }) {
				out = append(out, p)
				break
			}
		}
	}
	return out, nil
}

func podList(pods []corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// replaceOldPods evicts the moved node's controller-owned pods that hold
// old addresses, one at a time: each eviction is retried while the API
// refuses it (429, a PodDisruptionBudget), and the pod is waited for until
// it is gone before the next one; an old pod already terminating (evicted
// by a run that was killed) is waited for too. A pod not replaced within
// HealthTimeout pauses the run (see mbbPause).
func (m *FlannelPodCIDRMigration) replaceOldPods(ctx context.Context, node *corev1.Node) error {
	if m.mode == ModePlan {
		return nil
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("node", node.Name)
	acked := false
	if m.mode == ModeApply && m.o.Continue {
		var at time.Time
		ok, err := m.j.Get(mbbPausedKey+node.Name, &at)
		if err != nil {
			return err
		}
		acked = ok
	}
	tried := map[types.UID]bool{}
	for {
		old, err := m.oldPodsOn(ctx, node.Name)
		if err != nil {
			return err
		}
		var next, ending *corev1.Pod
		for i := range old {
			p := &old[i]
			if p.DeletionTimestamp != nil && ending == nil {
				ending = p // evicted (by an earlier run too): wait for its end
			}
			ok, manual := flRestartable(p)
			if manual && !tried[p.UID] {
				tried[p.UID] = true
				m.mu.Lock()
				m.manual = append(m.manual, p.Namespace+"/"+p.Name+" on "+node.Name+" (it keeps an old address; the transition stays for it)")
				m.mu.Unlock()
			}
			if ok && next == nil && (m.mode == ModeApply || !tried[p.UID]) {
				next = p
			}
		}
		if ending != nil && m.mode == ModeApply && !acked {
			why, err := m.waitGone(ctx, ending)
			if err != nil {
				return err
			}
			if why != "" {
				return m.mbbPause(ctx, node.Name, why)
			}
			continue
		}
		if next == nil {
			return nil
		}
		if acked {
			m.note(fmt.Sprintf("node %s: --continue after the pause: %s keep their old addresses; the transition stays for them", node.Name, strings.Join(podList(old), ", ")))
			return nil
		}
		tried[next.UID] = true
		why, err := m.evict(ctx, next)
		if err != nil {
			return err
		}
		if why == "" && m.mode == ModeApply {
			why, err = m.waitGone(ctx, next)
			if err != nil {
				return err
			}
		}
		if why != "" {
			return m.mbbPause(ctx, node.Name, why)
		}
		log.V(1).Info("old pod replaced", "pod", next.Namespace+"/"+next.Name)
		if m.mode == ModeApply {
			m.note(fmt.Sprintf("node %s: evicted %s/%s (old address %s)", node.Name, next.Namespace, next.Name, next.Status.PodIP))
		}
	}
}

// evict asks the Eviction API to evict p, retrying with backoff (from
// PollInterval, doubling, at most 16 times it) while the API answers 429
// (a PodDisruptionBudget allows no disruption now), until HealthTimeout.
// It returns why it gave up ("" once evicted or gone).
func (m *FlannelPodCIDRMigration) evict(ctx context.Context, p *corev1.Pod) (string, error) {
	uid := p.UID
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	if m.mode == ModeServerDryRun {
		ev.DeleteOptions.DryRun = []string{metav1.DryRunAll}
	}
	deadline := m.now().Add(m.o.HealthTimeout)
	wait := m.o.PollInterval
	refusals := 0
	for {
		if err := m.checkLock(fmt.Sprintf("not evicting pod %s/%s on node %s", p.Namespace, p.Name, p.Spec.NodeName)); err != nil {
			return "", err
		}
		err := m.o.Kube.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
		switch {
		case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
			return "", nil
		case !apierrors.IsTooManyRequests(err):
			return "", fmt.Errorf("evicting pod %s/%s (uid %s) on node %s: %w", p.Namespace, p.Name, uid, p.Spec.NodeName, err)
		}
		refusals++
		if m.mode != ModeApply || !m.now().Add(wait).Before(deadline) {
			return fmt.Sprintf("the eviction of %s/%s was refused %d time(s) within %s: %s", p.Namespace, p.Name, refusals, m.o.HealthTimeout, oneLine(err.Error())), nil
		}
		logr.FromContextOrDiscard(ctx).V(1).Info("eviction refused, retrying", "pod", p.Namespace+"/"+p.Name, "after", wait, "err", err.Error())
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-m.after(wait):
		}
		wait = min(2*wait, 16*m.o.PollInterval)
	}
}

// waitGone waits until the evicted pod p (this UID) is gone, within
// HealthTimeout; it returns why it gave up.
func (m *FlannelPodCIDRMigration) waitGone(ctx context.Context, p *corev1.Pod) (string, error) {
	deadline := time.Now().Add(m.o.HealthTimeout)
	for {
		cur, err := m.o.Kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && cur.UID != p.UID):
			return "", nil
		case err != nil:
			return "", fmt.Errorf("waiting for evicted pod %s/%s on node %s to end: %w", p.Namespace, p.Name, p.Spec.NodeName, err)
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("evicted pod %s/%s still exists after %s", p.Namespace, p.Name, m.o.HealthTimeout), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(m.o.PollInterval):
		}
	}
}

// mbbPause stops the run for the operator: the pods still holding old
// addresses on node, with the command that replaces each at its
// controller's pace. It journals the pause, so a rerun with Continue goes
// on without them.
func (m *FlannelPodCIDRMigration) mbbPause(ctx context.Context, node, why string) error {
	old, err := m.oldPodsOn(ctx, node)
	if err != nil {
		return err
	}
	var instr []string
	var cmds []string
	for i := range old {
		p := &old[i]
		instr = append(instr, fmt.Sprintf("pod %s/%s on node %s still holds the old address %s", p.Namespace, p.Name, node, p.Status.PodIP))
		if c := m.rolloutCommand(ctx, p); c != "" && !slices.Contains(cmds, c) {
			cmds = append(cmds, c)
		}
	}
	instr = append(instr, cmds...)
	if m.mode == ModeApply {
		if err := m.j.Put(mbbPausedKey+node, time.Now().UTC()); err != nil {
			return err
		}
	}
	return &Pause{Instructions: instr, Observed: why,
		Resume: "rerun the same command: it evicts what is left and goes on once no pod on node " + node + " holds an old address; add --continue to go on with them on their old addresses (the transition keeps them reachable and stays until they are gone)"}
}

// rolloutCommand is the command that replaces p at its controller's pace:
// `kubectl rollout restart` of its Deployment or StatefulSet, else the
// eviction of the pod itself.
func (m *FlannelPodCIDRMigration) rolloutCommand(ctx context.Context, p *corev1.Pod) string {
	c := metav1.GetControllerOf(p)
	switch {
	case c == nil:
		return ""
	case c.Kind == "StatefulSet":
		return fmt.Sprintf("kubectl -n %s rollout restart statefulset/%s", p.Namespace, c.Name)
	case c.Kind == "ReplicaSet":
		if rs, err := m.o.Kube.AppsV1().ReplicaSets(p.Namespace).Get(ctx, c.Name, metav1.GetOptions{}); err == nil {
			if d := metav1.GetControllerOf(rs); d != nil && d.Kind == "Deployment" {
				return fmt.Sprintf("kubectl -n %s rollout restart deployment/%s", p.Namespace, d.Name)
			}
		}
	}
	return fmt.Sprintf("kubectl -n %s delete pod %s   # its %s %s recreates it", p.Namespace, p.Name, c.Kind, c.Name)
}
