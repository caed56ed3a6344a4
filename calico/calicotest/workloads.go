package calicotest

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// Workloads simulates, on a fake clientset, the controllers a real cluster
// runs in kube-controller-manager: Deployments (through ReplicaSets),
// ReplicaSets, StatefulSets, DaemonSets and the PodDisruptionBudget status.
// Each Sync is one reconcile pass over everything; call it in a loop (see
// Loop) while the code under test runs. Pods are created without addresses
// (IPAM gives them one and marks them ready) on the nodes in Nodes.
//
// The simulation is deliberately simple but keeps the rules a pool swap
// depends on: a changed pod template replaces every pod (Deployments surge
// the new pods first, StatefulSets and DaemonSets replace one ready pod at a
// time, OnDelete strategies replace nothing), deleted pods are recreated,
// status fields follow what `kubectl rollout status` reads, and generation
// is observed only once the controller acted on it.
type Workloads struct {
	Kube kubernetes.Interface
	// Nodes to place pods on; empty means the Node objects, or "node-1".
	Nodes []string
	seq   atomic.Int64
}

// Sync runs one pass of every simulated controller.
func (w *Workloads) Sync(ctx context.Context) error {
	nodes, err := w.nodes(ctx)
	if err != nil {
		return err
	}
	deps, err := w.Kube.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range deps.Items {
		if err := w.syncDeployment(ctx, &deps.Items[i], nodes); err != nil {
			return err
		}
	}
	rss, err := w.Kube.AppsV1().ReplicaSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range rss.Items {
		if err := w.syncReplicaSet(ctx, &rss.Items[i], nodes); err != nil {
			return err
		}
	}
	stss, err := w.Kube.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range stss.Items {
		if err := w.syncStatefulSet(ctx, &stss.Items[i], nodes); err != nil {
			return err
		}
	}
	dss, err := w.Kube.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range dss.Items {
		if err := w.syncDaemonSet(ctx, &dss.Items[i], nodes); err != nil {
			return err
		}
	}
	return w.syncPDBs(ctx)
}

func (w *Workloads) nodes(ctx context.Context) ([]string, error) {
	if len(w.Nodes) > 0 {
		return w.Nodes, nil
	}
	list, err := w.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range list.Items {
		out = append(out, n.Name)
	}
	sort.Strings(out)
	if len(out) == 0 {
		out = []string{"node-1"}
	}
	return out, nil
}

// TemplateHash is the simulated pod-template-hash / controller revision.
func TemplateHash(t corev1.PodTemplateSpec) string {
	data, _ := json.Marshal(t)
	h := fnv.New32a()
	_, _ = h.Write(data)
	return strconv.FormatUint(uint64(h.Sum32()), 36)
}

func owned(pods []corev1.Pod, uid string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if c := metav1.GetControllerOf(&p); c != nil && string(c.UID) == uid && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func readyCount(pods []corev1.Pod) int32 {
	var n int32
	for i := range pods {
		if podReady(&pods[i]) {
			n++
		}
	}
	return n
}

func ctrlRef(obj metav1.Object, kind string) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: obj.GetName(), UID: obj.GetUID(), Controller: &t, BlockOwnerDeletion: &t}
}

func (w *Workloads) newPod(ctx context.Context, ns, name string, t corev1.PodTemplateSpec, owner metav1.OwnerReference, node string, extra map[string]string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{}, Annotations: map[string]string{}, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec:       *t.Spec.DeepCopy(),
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	for k, v := range t.Labels {
		pod.Labels[k] = v
	}
	for k, v := range extra {
		pod.Labels[k] = v
	}
	for k, v := range t.Annotations {
		pod.Annotations[k] = v
	}
	pod.Spec.NodeName = node
	_, err := w.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (w *Workloads) name(prefix string) string {
	n := w.seq.Add(1)
	h := fnv.New32a()
	_, _ = fmt.Fprintf(h, "%s-%d", prefix, n)
	return fmt.Sprintf("%s-%05s", prefix, strconv.FormatUint(uint64(h.Sum32()%60466176), 36))
}

func (w *Workloads) podsIn(ctx context.Context, ns string) ([]corev1.Pod, error) {
	l, err := w.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

func (w *Workloads) syncDeployment(ctx context.Context, d *appsv1.Deployment, nodes []string) error {
	hash := TemplateHash(d.Spec.Template)
	rsName := d.Name + "-" + hash
	want := replicas(d.Spec.Replicas)
	rsl, err := w.Kube.AppsV1().ReplicaSets(d.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var cur *appsv1.ReplicaSet
	var olds []appsv1.ReplicaSet
	for i := range rsl.Items {
		rs := rsl.Items[i]
		if c := metav1.GetControllerOf(&rs); c == nil || c.UID != d.UID {
			continue
		}
		if rs.Name == rsName {
			cur = &rsl.Items[i]
		} else {
			olds = append(olds, rs)
		}
	}
	if cur == nil {
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: rsName, Namespace: d.Namespace, Labels: map[string]string{"pod-template-hash": hash},
				OwnerReferences: []metav1.OwnerReference{ctrlRef(d, "Deployment")}},
			Spec: appsv1.ReplicaSetSpec{Replicas: &want, Selector: d.Spec.Selector, Template: *d.Spec.Template.DeepCopy()},
		}
		if rs.Spec.Template.Labels == nil {
			rs.Spec.Template.Labels = map[string]string{}
		}
		rs.Spec.Template.Labels["pod-template-hash"] = hash
		cur, err = w.Kube.AppsV1().ReplicaSets(d.Namespace).Create(ctx, rs, metav1.CreateOptions{})
		if err != nil {
			return err
		}
	} else if replicas(cur.Spec.Replicas) != want {
		cur.Spec.Replicas = &want
		if cur, err = w.Kube.AppsV1().ReplicaSets(d.Namespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	pods, err := w.podsIn(ctx, d.Namespace)
	if err != nil {
		return err
	}
	newPods := owned(pods, string(cur.UID))
	newReady := readyCount(newPods)
	var oldCount, oldReady int32
	for i := range olds {
		op := owned(pods, string(olds[i].UID))
		oldCount += int32(len(op))
		oldReady += readyCount(op)
		// Surge first: old pods go once the new ones are all ready.
		if newReady >= want && replicas(olds[i].Spec.Replicas) != 0 {
			zero := int32(0)
			olds[i].Spec.Replicas = &zero
			if _, err := w.Kube.AppsV1().ReplicaSets(d.Namespace).Update(ctx, &olds[i], metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
	}
	st := appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation,
		Replicas:           int32(len(newPods)) + oldCount,
		UpdatedReplicas:    int32(len(newPods)),
		ReadyReplicas:      newReady + oldReady,
		AvailableReplicas:  newReady + oldReady,
	}
	st.UnavailableReplicas = max(0, want-st.AvailableReplicas)
	if !statusEqual(d.Status, st) {
		d.Status = st
		_, err = w.Kube.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
		return err
	}
	return nil
}

func statusEqual(a, b appsv1.DeploymentStatus) bool {
	return a.ObservedGeneration == b.ObservedGeneration && a.Replicas == b.Replicas && a.UpdatedReplicas == b.UpdatedReplicas &&
		a.ReadyReplicas == b.ReadyReplicas && a.AvailableReplicas == b.AvailableReplicas && a.UnavailableReplicas == b.UnavailableReplicas
}

func (w *Workloads) syncReplicaSet(ctx context.Context, rs *appsv1.ReplicaSet, nodes []string) error {
	pods, err := w.podsIn(ctx, rs.Namespace)
	if err != nil {
		return err
	}
	mine := owned(pods, string(rs.UID))
	want := int(replicas(rs.Spec.Replicas))
	for i := len(mine); i < want; i++ {
		node := nodes[(i+int(w.seq.Load()))%len(nodes)]
		if err := w.newPod(ctx, rs.Namespace, w.name(rs.Name), rs.Spec.Template, ctrlRef(rs, "ReplicaSet"), node, nil); err != nil {
			return err
		}
	}
	if len(mine) > want {
		// Delete surplus pods, not-ready ones first, then by name.
		slices.SortFunc(mine, func(a, b corev1.Pod) int {
			ra, rb := podReady(&a), podReady(&b)
			if ra != rb {
				if !ra {
					return -1
				}
				return 1
			}
			if a.Name < b.Name {
				return -1
			}
			return 1
		})
		for _, p := range mine[:len(mine)-want] {
			if err := w.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		mine = mine[len(mine)-want:]
	}
	st := appsv1.ReplicaSetStatus{Replicas: int32(len(mine)), ReadyReplicas: readyCount(mine), AvailableReplicas: readyCount(mine), ObservedGeneration: rs.Generation}
	if !reflect.DeepEqual(rs.Status, st) {
		rs.Status = st
		_, err = w.Kube.AppsV1().ReplicaSets(rs.Namespace).UpdateStatus(ctx, rs, metav1.UpdateOptions{})
		return err
	}
	return nil
}

const revisionLabel = "controller-revision-hash"

func (w *Workloads) syncStatefulSet(ctx context.Context, s *appsv1.StatefulSet, nodes []string) error {
	rev := s.Name + "-" + TemplateHash(s.Spec.Template)
	want := int(replicas(s.Spec.Replicas))
	pods, err := w.podsIn(ctx, s.Namespace)
	if err != nil {
		return err
	}
	mine := owned(pods, string(s.UID))
	byName := map[string]corev1.Pod{}
	for _, p := range mine {
		byName[p.Name] = p
	}
	for i := 0; i < want; i++ {
		name := fmt.Sprintf("%s-%d", s.Name, i)
		if _, ok := byName[name]; !ok {
			if err := w.newPod(ctx, s.Namespace, name, s.Spec.Template, ctrlRef(s, "StatefulSet"), nodes[i%len(nodes)], map[string]string{revisionLabel: rev}); err != nil {
				return err
			}
		}
	}
	partition := 0
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		partition = int(*ru.Partition)
	}
	ready := readyCount(mine)
	var updated int32
	current := s.Status.CurrentRevision
	for _, p := range mine {
		if p.Labels[revisionLabel] == rev {
			updated++
		} else if current == "" {
			current = p.Labels[revisionLabel]
		}
	}
	if s.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType && len(mine) == want && int(ready) == want {
		// Replace the highest outdated ordinal at or above the partition.
		for i := want - 1; i >= partition; i-- {
			p, ok := byName[fmt.Sprintf("%s-%d", s.Name, i)]
			if ok && p.Labels[revisionLabel] != rev {
				if err := w.Kube.CoreV1().Pods(s.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
				break
			}
		}
	}
	if int(updated) == want && len(mine) == want {
		current = rev
	}
	if current == "" {
		current = rev
	}
	st := appsv1.StatefulSetStatus{
		ObservedGeneration: s.Generation, Replicas: int32(len(mine)), ReadyReplicas: ready, AvailableReplicas: ready,
		CurrentReplicas: int32(len(mine)) - updated, UpdatedReplicas: updated, CurrentRevision: current, UpdateRevision: rev,
	}
	if current == rev {
		st.CurrentReplicas = updated
	}
	if s.Status.ObservedGeneration != st.ObservedGeneration || s.Status.Replicas != st.Replicas || s.Status.ReadyReplicas != st.ReadyReplicas ||
		s.Status.UpdatedReplicas != st.UpdatedReplicas || s.Status.CurrentRevision != st.CurrentRevision || s.Status.UpdateRevision != st.UpdateRevision ||
		s.Status.CurrentReplicas != st.CurrentReplicas {
		s.Status = st
		_, err = w.Kube.AppsV1().StatefulSets(s.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{})
		return err
	}
	return nil
}

func (w *Workloads) syncDaemonSet(ctx context.Context, d *appsv1.DaemonSet, nodes []string) error {
	rev := TemplateHash(d.Spec.Template)
	pods, err := w.podsIn(ctx, d.Namespace)
	if err != nil {
		return err
	}
	mine := owned(pods, string(d.UID))
	byNode := map[string]corev1.Pod{}
	for _, p := range mine {
		byNode[p.Spec.NodeName] = p
	}
	for _, n := range nodes {
		if _, ok := byNode[n]; !ok {
			if err := w.newPod(ctx, d.Namespace, w.name(d.Name), d.Spec.Template, ctrlRef(d, "DaemonSet"), n, map[string]string{revisionLabel: rev}); err != nil {
				return err
			}
		}
	}
	ready := readyCount(mine)
	var updated, updatedReady int32
	for i := range mine {
		if mine[i].Labels[revisionLabel] == rev {
			updated++
			if podReady(&mine[i]) {
				updatedReady++
			}
		}
	}
	if d.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType && len(mine) == len(nodes) && int(ready) == len(nodes) {
		for _, n := range nodes {
			if p := byNode[n]; p.Labels[revisionLabel] != rev {
				if err := w.Kube.CoreV1().Pods(d.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
				break
			}
		}
	}
	st := appsv1.DaemonSetStatus{
		ObservedGeneration: d.Generation, DesiredNumberScheduled: int32(len(nodes)), CurrentNumberScheduled: int32(len(mine)),
		UpdatedNumberScheduled: updated, NumberReady: ready, NumberAvailable: updatedReady,
	}
	st.NumberUnavailable = max(0, st.DesiredNumberScheduled-st.NumberAvailable)
	if !reflect.DeepEqual(d.Status, st) {
		d.Status = st
		_, err = w.Kube.AppsV1().DaemonSets(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
		return err
	}
	return nil
}

// syncPDBs recomputes every PodDisruptionBudget's status like the
// disruption controller: healthy pods, desired healthy, disruptions allowed
// (pods evicted but not yet gone count as disrupted).
func (w *Workloads) syncPDBs(ctx context.Context) error {
	list, err := w.Kube.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		b := &list.Items[i]
		pods, err := w.podsIn(ctx, b.Namespace)
		if err != nil {
			return err
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil {
			continue
		}
		var expected, healthy int32
		present := map[string]bool{}
		for j := range pods {
			p := &pods[j]
			if !sel.Matches(labels.Set(p.Labels)) || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			present[p.Name] = true
			expected++
			if _, disrupted := b.Status.DisruptedPods[p.Name]; podReady(p) && !disrupted {
				healthy++
			}
		}
		var desired int32
		switch {
		case b.Spec.MinAvailable != nil:
			v, err := intstr.GetScaledValueFromIntOrPercent(b.Spec.MinAvailable, int(expected), true)
			if err != nil {
				continue
			}
			desired = int32(v)
		case b.Spec.MaxUnavailable != nil:
			v, err := intstr.GetScaledValueFromIntOrPercent(b.Spec.MaxUnavailable, int(expected), true)
			if err != nil {
				continue
			}
			desired = max(0, expected-int32(v))
		}
		disrupted := map[string]metav1.Time{}
		for name, t := range b.Status.DisruptedPods {
			if present[name] {
				disrupted[name] = t
			}
		}
		st := policyv1.PodDisruptionBudgetStatus{
			ObservedGeneration: b.Generation, ExpectedPods: expected, CurrentHealthy: healthy, DesiredHealthy: desired,
			DisruptionsAllowed: max(0, healthy-desired), DisruptedPods: disrupted, Conditions: b.Status.Conditions,
		}
		if len(st.DisruptedPods) == 0 {
			st.DisruptedPods = nil
		}
		if b.Status.ObservedGeneration != st.ObservedGeneration || b.Status.ExpectedPods != st.ExpectedPods || b.Status.CurrentHealthy != st.CurrentHealthy ||
			b.Status.DesiredHealthy != st.DesiredHealthy || b.Status.DisruptionsAllowed != st.DisruptionsAllowed || len(b.Status.DisruptedPods) != len(st.DisruptedPods) {
			b.Status = st
			if _, err := w.Kube.PolicyV1().PodDisruptionBudgets(b.Namespace).UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
				return err
			}
		}
	}
	return nil
}
