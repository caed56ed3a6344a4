package calico

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/journal"
)

// RestartedAtAnnotation is the pod-template annotation `kubectl rollout
// restart` sets; changing it makes the controller replace every pod.
const RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// ErrRolloutTimeout is returned when a workload's rollout does not finish in time.
var ErrRolloutTimeout = errors.New("rollout did not finish in time")

// ErrEvictionBlocked is returned when a PodDisruptionBudget refuses an
// eviction for longer than ApplyOptions.PDBTimeout.
var ErrEvictionBlocked = errors.New("eviction refused by a PodDisruptionBudget")

// movePods moves every pod off the old pool, pass after pass, until none is
// left that the swap can move.
func (a *applier) movePods(ctx context.Context) error {
	rolled := map[string]bool{}
	var lastLeft []string
	for pass := 0; pass < a.opts.MaxPasses; pass++ {
		scan, err := ScanPods(ctx, a.cl.Kube, a.plan.OldCIDR, ScanOptions{})
		if err != nil {
			return err
		}
		moves, blocked, err := classify(ctx, a.cl.Kube, scan.Pods, a.plan.Move, a.plan.AllowDeleteBarePods)
		if err != nil {
			return err
		}
		a.res.Blocked = blocked
		for _, b := range blocked {
			if pass == 0 {
				a.emit(Event{Type: EventBlocked, Object: "Pod " + b.Pod.String(), Message: b.Reason})
			}
		}
		// A workload rolled in an earlier pass that still has pods here (a
		// StatefulSet partition, a stuck pod): evict what is left.
		for i := range moves {
			if moves[i].Method == MoveRollout && rolled[moves[i].Workload.Key()] {
				moves[i].Method = MoveEvict
				moves[i].Reason = "left behind by the rollout"
			}
		}
		var left []string
		for _, m := range moves {
			for _, p := range m.Pods {
				left = append(left, p.String()+"/"+p.UID)
			}
		}
		if len(moves) == 0 {
			return nil
		}
		if pass > 0 && slices.Equal(left, lastLeft) && a.opts.DryRun == DryRunNone {
			return fmt.Errorf("pods did not leave %s after a full pass: %s", a.plan.OldCIDR, strings.Join(left, ", "))
		}
		lastLeft = left
		var dns, rest []WorkloadMove
		for _, m := range moves {
			if m.DNS {
				dns = append(dns, m)
			} else {
				rest = append(rest, m)
			}
		}
		for _, m := range dns {
			if err := a.moveOne(ctx, m); err != nil {
				return err
			}
			if m.Method == MoveRollout {
				rolled[m.Workload.Key()] = true
			}
		}
		if err := a.moveAll(ctx, rest); err != nil {
			return err
		}
		for _, m := range rest {
			if m.Method == MoveRollout {
				rolled[m.Workload.Key()] = true
			}
		}
		if a.opts.DryRun != DryRunNone {
			return nil
		}
	}
	return nil
}

// moveAll moves workloads with bounded concurrency; the first error stops
// the rest from starting.
func (a *applier) moveAll(ctx context.Context, moves []WorkloadMove) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, a.opts.Concurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, m := range moves {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(m WorkloadMove) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := a.moveOne(ctx, m); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				cancel()
			}
		}(m)
	}
	wg.Wait()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return ctx.Err()
}

func (a *applier) moveOne(ctx context.Context, m WorkloadMove) error {
	switch m.Method {
	case MoveRollout:
		return a.rollout(ctx, m)
	default:
		for _, p := range m.Pods {
			if err := a.evict(ctx, p); err != nil {
				return err
			}
		}
		return nil
	}
}

// rollout restarts a workload like `kubectl rollout restart` and waits for
// the rollout to finish like `kubectl rollout status`.
func (a *applier) rollout(ctx context.Context, m WorkloadMove) error {
	w := m.Workload
	value, err := a.recordRestart(w.Key())
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": map[string]string{RestartedAtAnnotation: value}}}}})
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("rollout restart %s (%d pod(s) in %s)", w, len(m.Pods), a.plan.OldCIDR)
	if a.opts.DryRun == DryRunClient {
		a.emit(Event{Type: EventRestart, Object: w.String(), Message: "would " + msg})
		return nil
	}
	if err := a.wait(ctx); err != nil {
		return err
	}
	po := metav1.PatchOptions{DryRun: dryRun(a.opts.DryRun == DryRunServer)}
	apps := a.cl.Kube.AppsV1()
	switch w.Kind {
	case KindDeployment:
		_, err = apps.Deployments(w.Namespace).Patch(ctx, w.Name, types.StrategicMergePatchType, patch, po)
	case KindStatefulSet:
		_, err = apps.StatefulSets(w.Namespace).Patch(ctx, w.Name, types.StrategicMergePatchType, patch, po)
	case KindDaemonSet:
		_, err = apps.DaemonSets(w.Namespace).Patch(ctx, w.Name, types.StrategicMergePatchType, patch, po)
	default:
		return fmt.Errorf("cannot roll %s", w)
	}
	if apierrors.IsNotFound(err) {
		a.emit(Event{Type: EventSkip, Object: w.String(), Message: w.String() + " is gone"})
		return nil
	}
	if err != nil {
		return fmt.Errorf("restarting %s: %w", w, err)
	}
	a.emit(Event{Type: EventRestart, Object: w.String(), Message: msg})
	if a.opts.DryRun != DryRunNone {
		return nil
	}
	a.record(func(r *ApplyResult) { r.addRestarted(w) })
	return a.waitRollout(ctx, w)
}

func (r *ApplyResult) addRestarted(w WorkloadRef) {
	for _, x := range r.Restarted {
		if x.Key() == w.Key() {
			return
		}
	}
	r.Restarted = append(r.Restarted, w)
}

// waitRollout polls until the workload's rollout is complete.
func (a *applier) waitRollout(ctx context.Context, w WorkloadRef) error {
	ctx, cancel := context.WithTimeout(ctx, a.opts.RolloutTimeout)
	defer cancel()
	last := ""
	for {
		done, status, err := a.rolloutStatus(ctx, w)
		if err != nil {
			return err
		}
		if done {
			a.emit(Event{Type: EventRolloutDone, Object: w.String(), Message: "rollout of " + w.String() + " complete"})
			return nil
		}
		if status != last {
			a.emit(Event{Type: EventRolloutWait, Object: w.String(), Message: "waiting for " + w.String() + ": " + status})
			last = status
		}
		if err := sleep(ctx, a.opts.PollInterval); err != nil {
			if ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("%w: %s after %s: %s", ErrRolloutTimeout, w, a.opts.RolloutTimeout, status)
			}
			return err
		}
	}
}

// rolloutStatus applies kubectl's rollout-status rules.
func (a *applier) rolloutStatus(ctx context.Context, w WorkloadRef) (bool, string, error) {
	apps := a.cl.Kube.AppsV1()
	switch w.Kind {
	case KindDeployment:
		d, err := apps.Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return DeploymentRolledOut(d)
	case KindStatefulSet:
		s, err := apps.StatefulSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		done, msg := StatefulSetRolledOut(s)
		return done, msg, nil
	case KindDaemonSet:
		d, err := apps.DaemonSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		done, msg := DaemonSetRolledOut(d)
		return done, msg, nil
	}
	return true, "", nil
}

// DeploymentRolledOut reports whether a Deployment's rollout is complete, by
// the rules of `kubectl rollout status`; it fails when the progress deadline
// was exceeded.
func DeploymentRolledOut(d *appsv1.Deployment) (bool, string, error) {
	if d.Generation > d.Status.ObservedGeneration {
		return false, fmt.Sprintf("spec generation %d not yet observed (at %d)", d.Generation, d.Status.ObservedGeneration), nil
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return false, "", fmt.Errorf("%w: Deployment %s/%s exceeded its progress deadline: %s", ErrRolloutTimeout, d.Namespace, d.Name, c.Message)
		}
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	switch {
	case st.UpdatedReplicas < want:
		return false, fmt.Sprintf("%d of %d updated replicas", st.UpdatedReplicas, want), nil
	case st.Replicas > st.UpdatedReplicas:
		return false, fmt.Sprintf("%d old replicas pending termination", st.Replicas-st.UpdatedReplicas), nil
	case st.AvailableReplicas < st.UpdatedReplicas:
		return false, fmt.Sprintf("%d of %d updated replicas available", st.AvailableReplicas, st.UpdatedReplicas), nil
	}
	return true, "", nil
}

// StatefulSetRolledOut reports whether a RollingUpdate StatefulSet's rollout
// is complete, by the rules of `kubectl rollout status`.
func StatefulSetRolledOut(s *appsv1.StatefulSet) (bool, string) {
	if s.Status.ObservedGeneration == 0 || s.Generation > s.Status.ObservedGeneration {
		return false, fmt.Sprintf("spec generation %d not yet observed (at %d)", s.Generation, s.Status.ObservedGeneration)
	}
	want := int32(1)
	if s.Spec.Replicas != nil {
		want = *s.Spec.Replicas
	}
	if s.Status.ReadyReplicas < want {
		return false, fmt.Sprintf("%d of %d pods ready", s.Status.ReadyReplicas, want)
	}
	if ru := s.Spec.UpdateStrategy.RollingUpdate; s.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType && ru != nil && ru.Partition != nil && *ru.Partition > 0 {
		if s.Status.UpdatedReplicas < want-*ru.Partition {
			return false, fmt.Sprintf("%d of %d pods updated (partition %d)", s.Status.UpdatedReplicas, want-*ru.Partition, *ru.Partition)
		}
		return true, ""
	}
	if s.Status.UpdateRevision != s.Status.CurrentRevision {
		return false, fmt.Sprintf("%d of %d pods at revision %s", s.Status.UpdatedReplicas, want, s.Status.UpdateRevision)
	}
	return true, ""
}

// DaemonSetRolledOut reports whether a RollingUpdate DaemonSet's rollout is
// complete, by the rules of `kubectl rollout status`.
func DaemonSetRolledOut(d *appsv1.DaemonSet) (bool, string) {
	if d.Generation > d.Status.ObservedGeneration {
		return false, fmt.Sprintf("spec generation %d not yet observed (at %d)", d.Generation, d.Status.ObservedGeneration)
	}
	st := d.Status
	if st.UpdatedNumberScheduled < st.DesiredNumberScheduled {
		return false, fmt.Sprintf("%d of %d updated pods scheduled", st.UpdatedNumberScheduled, st.DesiredNumberScheduled)
	}
	if st.NumberAvailable < st.DesiredNumberScheduled {
		return false, fmt.Sprintf("%d of %d updated pods available", st.NumberAvailable, st.DesiredNumberScheduled)
	}
	return true, ""
}

// evict evicts one pod through the Eviction API, retrying with backoff while
// a PodDisruptionBudget refuses (429) and reporting which budget it waits
// for, then waits for the pod to be gone.
func (a *applier) evict(ctx context.Context, p PodRef) error {
	obj := "Pod " + p.String()
	if p.Terminating {
		if a.opts.DryRun != DryRunNone {
			return nil
		}
		return a.waitGone(ctx, p)
	}
	msg := fmt.Sprintf("evict pod %s (%s) of %s", p, joinAddrs(p), p.Owner)
	if p.Owner.Kind == KindBare {
		msg = fmt.Sprintf("evict (delete) bare pod %s (%s); nothing will recreate it", p, joinAddrs(p))
	}
	if a.opts.DryRun == DryRunClient {
		a.emit(Event{Type: EventEvict, Object: obj, Message: "would " + msg})
		return nil
	}
	if a.opts.DryRun == DryRunNone {
		if err := a.recordEviction(p); err != nil {
			return err
		}
	}
	uid := types.UID(p.UID)
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, DryRun: dryRun(a.opts.DryRun == DryRunServer)},
	}
	backoff := a.opts.EvictionBackoff
	var deadline time.Time // PDBTimeout after the first refusal
	for {
		if err := a.wait(ctx); err != nil {
			return err
		}
		err := a.cl.Kube.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
		switch {
		case err == nil:
			a.emit(Event{Type: EventEvict, Object: obj, Message: msg})
			if a.opts.DryRun != DryRunNone {
				return nil
			}
			a.record(func(r *ApplyResult) { r.Evicted = append(r.Evicted, p) })
			return a.waitGone(ctx, p)
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone, or replaced by a pod with another UID: nothing to evict.
			a.emit(Event{Type: EventPodGone, Object: obj, Message: "pod " + p.String() + " is already gone"})
			return nil
		case apierrors.IsTooManyRequests(err):
			pdbs, perr := a.pdbsFor(ctx, p)
			if perr != nil {
				return perr
			}
			e := Event{Type: EventEvictBlocked, Object: obj}
			var why string
			if len(pdbs) > 0 {
				e.PDB = &pdbs[0]
				why = fmt.Sprintf("eviction of %s refused: PodDisruptionBudget %s/%s allows %d disruption(s) (healthy %d, needs %d)",
					p, pdbs[0].Namespace, pdbs[0].Name, pdbs[0].DisruptionsAllowed, pdbs[0].CurrentHealthy, pdbs[0].DesiredHealthy)
			} else {
				why = fmt.Sprintf("eviction of %s refused (429: %s)", p, err.Error())
			}
			wait := backoff
			if a.opts.PDBTimeout > 0 {
				if deadline.IsZero() {
					deadline = time.Now().Add(a.opts.PDBTimeout)
				}
				left := time.Until(deadline)
				if left <= 0 {
					e.Message = why + "; giving up: refused for PDBTimeout " + a.opts.PDBTimeout.String()
					a.emit(e)
					return fmt.Errorf("%w: pod %s refused for PDBTimeout %s: %s", ErrEvictionBlocked, p, a.opts.PDBTimeout, why)
				}
				// The last try comes at the deadline, not a backoff early.
				wait = min(wait, left)
			}
			e.Message = why + "; retrying in " + wait.String()
			a.emit(e)
			if err := sleep(ctx, wait); err != nil {
				return err
			}
			backoff = min(2*backoff, a.opts.MaxEvictionBackoff)
		default:
			return fmt.Errorf("evicting pod %s: %w", p, err)
		}
	}
}

func joinAddrs(p PodRef) string {
	s := make([]string, len(p.IPs))
	for i, ip := range p.IPs {
		s[i] = ip.String()
	}
	return strings.Join(s, ",")
}

// pdbsFor returns the PodDisruptionBudgets that select the pod.
func (a *applier) pdbsFor(ctx context.Context, p PodRef) ([]PDBStatus, error) {
	pod, err := a.cl.Kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading pod %s: %w", p, err)
	}
	list, err := a.cl.Kube.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing PodDisruptionBudgets in %s: %w", p.Namespace, err)
	}
	var out []PDBStatus
	for _, b := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		out = append(out, PDBStatus{Namespace: b.Namespace, Name: b.Name, DisruptionsAllowed: b.Status.DisruptionsAllowed,
			CurrentHealthy: b.Status.CurrentHealthy, DesiredHealthy: b.Status.DesiredHealthy, ExpectedPods: b.Status.ExpectedPods})
	}
	return out, nil
}

// waitGone polls until the pod (this UID) no longer exists.
func (a *applier) waitGone(ctx context.Context, p PodRef) error {
	ctx, cancel := context.WithTimeout(ctx, a.opts.PodGoneTimeout)
	defer cancel()
	for {
		pod, err := a.cl.Kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && string(pod.UID) != p.UID) {
			a.emit(Event{Type: EventPodGone, Object: "Pod " + p.String(), Message: "pod " + p.String() + " is gone"})
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("waiting for pod %s to go: %w", p, err)
		}
		if err := sleep(ctx, a.opts.PollInterval); err != nil {
			if ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("pod %s still exists %s after its eviction", p, a.opts.PodGoneTimeout)
			}
			return err
		}
	}
}

// permissions lists every permission Apply needs, for the RBAC preflight.
func (a *applier) permissions() []access.Check {
	group := IPPoolsV3.Group
	if a.cl.Pools.API() == APICRDV1 {
		group = CRDGroup
	}
	checks := []access.Check{
		{Verb: "get", Group: group, Resource: "ippools"},
		{Verb: "list", Group: group, Resource: "ippools"},
		{Verb: "create", Group: group, Resource: "ippools"},
		{Verb: "update", Group: group, Resource: "ippools"},
		{Verb: "list", Resource: "pods"},
		{Verb: "get", Resource: "pods"},
	}
	if !a.opts.KeepOldPool {
		checks = append(checks, access.Check{Verb: "delete", Group: group, Resource: "ippools"})
	}
	if a.cl.Blocks != nil {
		checks = append(checks,
			access.Check{Verb: "list", Group: CRDGroup, Resource: "ipamblocks"},
			access.Check{Verb: "list", Group: CRDGroup, Resource: "blockaffinities"})
	}
	if a.cl.Dynamic != nil {
		checks = append(checks, access.Check{Verb: "get", Group: InstallationsV1.Group, Resource: "installations"})
	}
	namespaces := map[string]bool{}
	rollKinds := map[string]bool{}
	for _, w := range a.plan.Workloads {
		namespaces[w.Workload.Namespace] = true
		if w.Method == MoveRollout {
			rollKinds[w.Workload.Namespace+"|"+resourceOf(w.Workload.Kind)] = true
		}
	}
	nsList := make([]string, 0, len(namespaces))
	for ns := range namespaces {
		nsList = append(nsList, ns)
	}
	slices.Sort(nsList)
	for _, ns := range nsList {
		checks = append(checks,
			access.Check{Verb: "get", Group: "apps", Resource: "replicasets", Namespace: ns},
			access.Check{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: ns},
			access.Check{Verb: "list", Group: "policy", Resource: "poddisruptionbudgets", Namespace: ns})
		for _, r := range []string{"deployments", "statefulsets", "daemonsets"} {
			if rollKinds[ns+"|"+r] {
				checks = append(checks,
					access.Check{Verb: "get", Group: "apps", Resource: r, Namespace: ns},
					access.Check{Verb: "patch", Group: "apps", Resource: r, Namespace: ns})
			}
		}
	}
	if cj := a.opts.ClusterJournal.options(a.cl.Kube); cj != nil && a.opts.DryRun == DryRunNone {
		checks = append(checks, journal.ClusterChecks(cj.Namespace)...)
	}
	return checks
}

func resourceOf(k WorkloadKind) string {
	switch k {
	case KindDeployment:
		return "deployments"
	case KindStatefulSet:
		return "statefulsets"
	case KindDaemonSet:
		return "daemonsets"
	}
	return ""
}
