package calicotest

import (
	"fmt"
	"reflect"
	"strconv"
	"time"

	v3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	calicofake "github.com/projectcalico/api/pkg/client/clientset_generated/clientset/fake"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/calico"
)

// PoolImmutable refuses an update that changes an IPPool's spec.cidr or
// spec.blockSize, which Calico never allows.
func PoolImmutable(old, updated runtime.Object) error {
	o, err := runtime.DefaultUnstructuredConverter.ToUnstructured(old)
	if err != nil {
		return err
	}
	n, err := runtime.DefaultUnstructuredConverter.ToUnstructured(updated)
	if err != nil {
		return err
	}
	for _, f := range []string{"cidr", "blockSize"} {
		ov, _, _ := unstructured.NestedFieldNoCopy(o, "spec", f)
		nv, _, _ := unstructured.NestedFieldNoCopy(n, "spec", f)
		if !reflect.DeepEqual(normNum(ov), normNum(nv)) {
			name, _, _ := unstructured.NestedString(n, "metadata", "name")
			return apierrors.NewInvalid(schema.GroupKind{Group: "projectcalico.org", Kind: "IPPool"}, name, field.ErrorList{
				field.Invalid(field.NewPath("spec", f), nv, fmt.Sprintf("field is immutable (was %v)", ov))})
		}
	}
	return nil
}

func normNum(v any) any {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case int:
		return float64(n)
	case int32:
		return float64(n)
	}
	return v
}

// NewV3 returns a fake projectcalico.org/v3 clientset holding objs, whose
// reactors enforce what the Calico API server does for IPPools: the object
// rules of Rules, cidr and blockSize immutable, Calico's validation
// (calico.Validate) and no overlap with another pool.
func NewV3(objs ...runtime.Object) (*calicofake.Clientset, *Rules) {
	cs := calicofake.NewSimpleClientset()
	r := EnforceRules(&cs.Fake, cs.Tracker(), map[string]ResourceRules{
		"ippools": {
			RequireResourceVersion: true,
			Generation:             true,
			Immutable:              PoolImmutable,
			Validate:               validateV3Pool,
			ListKind:               v3.SchemeGroupVersion.WithKind(v3.KindIPPool),
		},
	})
	for _, o := range objs {
		r.Stamp(o)
		if err := cs.Tracker().Add(o); err != nil {
			panic(fmt.Sprintf("calicotest.NewV3: adding %T: %v", o, err))
		}
	}
	return cs, r
}

func validateV3Pool(obj runtime.Object, others []runtime.Object) error {
	p, err := toPool(obj)
	if err != nil {
		return err
	}
	if err := calico.Validate(p); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	pfx, err := p.Prefix()
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	for _, o := range others {
		q, err := toPool(o)
		if err != nil || q.Name == p.Name {
			continue
		}
		qp, err := q.Prefix()
		if err == nil && qp.Overlaps(pfx) {
			return apierrors.NewBadRequest(fmt.Sprintf("IPPool(%s) CIDR overlaps with IPPool(%s) CIDR %s", p.Name, q.Name, q.Spec.CIDR))
		}
	}
	return nil
}

func toPool(obj runtime.Object) (calico.IPPool, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return calico.IPPool{}, err
	}
	return calico.PoolFromUnstructured(u)
}

// dynamicListKinds are the list kinds NewDynamic registers.
var dynamicListKinds = map[schema.GroupVersionResource]string{
	calico.IPPoolsV1:         "IPPoolList",
	calico.IPAMBlocksV1:      "IPAMBlockList",
	calico.BlockAffinitiesV1: "BlockAffinityList",
	calico.InstallationsV1:   "InstallationList",
}

// NewDynamic returns a fake dynamic client holding objs (unstructured), with
// crd.projectcalico.org/v1 ippools, ipamblocks, blockaffinities and
// operator.tigera.io/v1 installations registered. Its reactors enforce the
// API server's rules for custom resources (resourceVersion required on
// update, ...) and, for IPPools, cidr and blockSize immutable. Like the real
// CRDs, nothing else of Calico's validation is enforced.
func NewDynamic(objs ...runtime.Object) (*dynamicfake.FakeDynamicClient, *Rules) {
	c := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), dynamicListKinds)
	cr := ResourceRules{RequireResourceVersion: true, Generation: true}
	pr := cr
	pr.Immutable = PoolImmutable
	r := EnforceRules(&c.Fake, c.Tracker(), map[string]ResourceRules{
		"ippools": pr, "ipamblocks": cr, "blockaffinities": cr, "installations": cr,
	})
	for _, o := range objs {
		r.Stamp(o)
		if err := c.Tracker().Add(o); err != nil {
			panic(fmt.Sprintf("calicotest.NewDynamic: adding %T: %v", o, err))
		}
	}
	return c, r
}

// NewKube returns a fake clientset holding objs whose reactors enforce the
// API server's object rules (Rules) for the kinds a pool swap touches, with
// metadata.generation following spec changes of Deployments, ReplicaSets,
// StatefulSets, DaemonSets and PodDisruptionBudgets, and a pods/eviction
// subresource that behaves like the API server's: it refuses with 429 while
// a PodDisruptionBudget allows no disruption, consumes one allowed
// disruption per eviction, honours UID preconditions and dry runs, and
// fails when more than one budget selects the pod.
//
// It does not answer SelfSubjectAccessReviews: install a reactor for them
// (within this module, accesstest.Authorize).
func NewKube(objs ...runtime.Object) (*fake.Clientset, *Rules) {
	cs := fake.NewClientset()
	gen := ResourceRules{Generation: true}
	r := EnforceRules(&cs.Fake, cs.Tracker(), map[string]ResourceRules{
		"pods": {}, "nodes": {}, "deployments": gen, "replicasets": gen, "statefulsets": gen,
		"daemonsets": gen, "poddisruptionbudgets": gen, "configmaps": {},
	})
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		return r.evict(a.(k8stesting.CreateActionImpl))
	})
	for _, o := range objs {
		r.Stamp(o)
		if err := cs.Tracker().Add(o); err != nil {
			panic(fmt.Sprintf("calicotest.NewKube: adding %T: %v", o, err))
		}
	}
	return cs, r
}

var (
	podsGVR = corev1.SchemeGroupVersion.WithResource("pods")
	pdbGVR  = policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets")
)

// evict implements the eviction subresource (pkg/registry/core/pod/storage/eviction.go).
func (r *Rules) evict(a k8stesting.CreateActionImpl) (bool, runtime.Object, error) {
	ev, ok := a.GetObject().(*policyv1.Eviction)
	if !ok {
		return true, nil, apierrors.NewBadRequest(fmt.Sprintf("eviction: unexpected object %T", a.GetObject()))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := a.GetNamespace()
	obj, err := r.tracker.Get(podsGVR, ns, ev.Name)
	if err != nil {
		return true, nil, err
	}
	pod := obj.(*corev1.Pod)
	var opts metav1.DeleteOptions
	if ev.DeleteOptions != nil {
		opts = *ev.DeleteOptions
	}
	if p := opts.Preconditions; p != nil && p.UID != nil && *p.UID != pod.UID {
		return true, nil, apierrors.NewConflict(podsGVR.GroupResource(), pod.Name,
			//lint:ignore ST1005 the API server's message, verbatim
			fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", *p.UID, pod.UID))
	}
	dry := isDryRun(opts.DryRun)
	del := func() (bool, runtime.Object, error) {
		if dry {
			return true, &metav1.Status{Status: metav1.StatusSuccess}, nil
		}
		if err := r.tracker.Delete(podsGVR, ns, pod.Name); err != nil {
			return true, nil, err
		}
		return true, &metav1.Status{Status: metav1.StatusSuccess}, nil
	}
	// Terminal and pending pods, and pods already being deleted, need no budget.
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed ||
		pod.Status.Phase == corev1.PodPending || pod.DeletionTimestamp != nil {
		return del()
	}
	l, err := r.tracker.List(pdbGVR, policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"), ns)
	if err != nil {
		return true, nil, err
	}
	var match []*policyv1.PodDisruptionBudget
	for _, b := range l.(*policyv1.PodDisruptionBudgetList).Items {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		match = append(match, b.DeepCopy())
	}
	if len(match) == 0 {
		return del()
	}
	if len(match) > 1 {
		//lint:ignore ST1005 the API server's message, verbatim
		return true, nil, apierrors.NewInternalError(fmt.Errorf("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."))
	}
	pdb := match[0]
	if !podReady(pod) && pdb.Spec.UnhealthyPodEvictionPolicy != nil && *pdb.Spec.UnhealthyPodEvictionPolicy == policyv1.AlwaysAllow {
		return del()
	}
	if pdb.Status.ObservedGeneration < pdb.Generation {
		return true, nil, tooMany(pdb, "Cannot evict pod as it would violate the pod's disruption budget.")
	}
	if pdb.Status.DisruptionsAllowed < 0 {
		return true, nil, apierrors.NewForbidden(podsGVR.GroupResource(), pod.Name, fmt.Errorf("pdb disruptions allowed is negative"))
	}
	if pdb.Status.DisruptionsAllowed == 0 {
		return true, nil, tooMany(pdb, "Cannot evict pod as it would violate the pod's disruption budget.")
	}
	if dry {
		return true, &metav1.Status{Status: metav1.StatusSuccess}, nil
	}
	pdb.Status.DisruptionsAllowed--
	if pdb.Status.DisruptedPods == nil {
		pdb.Status.DisruptedPods = map[string]metav1.Time{}
	}
	pdb.Status.DisruptedPods[pod.Name] = metav1.NewTime(time.Now())
	pdb.ResourceVersion = strconv.FormatInt(r.rv.Add(1), 10)
	if err := r.tracker.Update(pdbGVR, pdb, ns); err != nil {
		return true, nil, err
	}
	return del()
}

func tooMany(pdb *policyv1.PodDisruptionBudget, msg string) error {
	err := apierrors.NewTooManyRequests(msg, 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type:    policyv1.DisruptionBudgetCause,
		Message: fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy),
	})
	return err
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
