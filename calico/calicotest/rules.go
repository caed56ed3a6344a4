// Package calicotest holds test helpers for code that uses package calico:
// fake clients whose reactors enforce the real API rules (so the fakes cannot
// lie in the caller's favour), a simulation of the Kubernetes workload and
// disruption-budget controllers for fake clientsets, and IPAM, a small
// controller that hands pods addresses from the enabled Calico pools. IPAM
// works against a fake clientset and against a real API server (where no
// Calico runs), so end-to-end tests can use the same helper.
package calicotest

import (
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"
)

// ResourceRules are the API server rules enforced for one resource.
type ResourceRules struct {
	// RequireResourceVersion rejects updates without metadata.resourceVersion,
	// as the API server does for custom resources (unconditional updates are
	// allowed only for some built-in kinds).
	RequireResourceVersion bool
	// Generation bumps metadata.generation when the spec changes.
	Generation bool
	// Immutable returns an error when an update changes a field that may not
	// change; nil allows everything.
	Immutable func(old, updated runtime.Object) error
	// Validate rejects objects the server would refuse on create and update;
	// others are the stored objects of the resource (when ListKind is set).
	Validate func(obj runtime.Object, others []runtime.Object) error
	// ListKind is the resource's kind (without "List"), needed to give
	// Validate the other objects.
	ListKind schema.GroupVersionKind
}

// Rules installs reactors on a fake client enforcing, for the listed
// resources (plural names), the API server's object rules:
//   - create: a set resourceVersion is refused ("resourceVersion should not be
//     set on objects to be created"); uid, resourceVersion, generation 1 and
//     creationTimestamp are assigned.
//   - update (and status update): a stale resourceVersion is a conflict; a
//     missing one is refused when RequireResourceVersion; uid and
//     creationTimestamp are kept; generation moves when the spec changes; a
//     status update cannot change the spec.
//   - patch: applied, then the same bookkeeping as update.
//   - delete: UID and resourceVersion preconditions are checked.
//   - dryRun=All: everything is checked, nothing is stored.
type Rules struct {
	tracker k8stesting.ObjectTracker
	rules   map[string]ResourceRules
	rv      atomic.Int64
	uid     atomic.Int64
	// mu serialises writes, so read-modify-write checks are atomic.
	mu sync.Mutex
}

// EnforceRules prepends the reactors to f. The tracker must be the one the
// fake client's default reactors use.
func EnforceRules(f *k8stesting.Fake, tracker k8stesting.ObjectTracker, rules map[string]ResourceRules) *Rules {
	r := &Rules{tracker: tracker, rules: rules}
	r.rv.Store(1000)
	f.PrependReactor("*", "*", r.react)
	return r
}

// Stamp assigns uid, resourceVersion, generation and creationTimestamp to
// objects about to be added to a tracker directly, as a create would.
func (r *Rules) Stamp(objs ...runtime.Object) {
	for _, o := range objs {
		acc, err := meta.Accessor(o)
		if err != nil {
			continue
		}
		r.stampNew(acc)
	}
}

func (r *Rules) stampNew(acc metav1.Object) {
	if acc.GetUID() == "" {
		acc.SetUID(types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", r.uid.Add(1))))
	}
	acc.SetResourceVersion(strconv.FormatInt(r.rv.Add(1), 10))
	if acc.GetGeneration() == 0 {
		acc.SetGeneration(1)
	}
	if ts := acc.GetCreationTimestamp(); ts.IsZero() {
		acc.SetCreationTimestamp(metav1.NewTime(time.Now().Truncate(time.Second)))
	}
}

func isDryRun(opts []string) bool {
	for _, o := range opts {
		if o == metav1.DryRunAll {
			return true
		}
	}
	return false
}

func (r *Rules) react(action k8stesting.Action) (bool, runtime.Object, error) {
	gvr := action.GetResource()
	rr, ok := r.rules[gvr.Resource]
	if !ok {
		return false, nil, nil
	}
	sub := action.GetSubresource()
	if sub != "" && sub != "status" {
		return false, nil, nil
	}
	switch a := action.(type) {
	case k8stesting.CreateActionImpl:
		if sub != "" {
			return false, nil, nil
		}
		return r.create(gvr, a, rr)
	case k8stesting.UpdateActionImpl:
		return r.update(gvr, a.GetNamespace(), a.GetObject(), sub == "status", isDryRun(a.UpdateOptions.DryRun), rr)
	case k8stesting.PatchActionImpl:
		return r.patch(gvr, a, rr)
	case k8stesting.DeleteActionImpl:
		return r.delete(gvr, a)
	}
	return false, nil, nil
}

func (r *Rules) create(gvr schema.GroupVersionResource, a k8stesting.CreateActionImpl, rr ResourceRules) (bool, runtime.Object, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	obj := a.GetObject().DeepCopyObject()
	acc, err := meta.Accessor(obj)
	if err != nil {
		return true, nil, err
	}
	if acc.GetResourceVersion() != "" {
		return true, nil, apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
	}
	if acc.GetName() == "" && acc.GetGenerateName() != "" {
		acc.SetName(acc.GetGenerateName() + strconv.FormatInt(r.uid.Add(1), 36))
	}
	if acc.GetName() == "" {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: gvr.Group, Kind: gvr.Resource}, "", nil)
	}
	if acc.GetNamespace() == "" {
		acc.SetNamespace(a.GetNamespace())
	}
	if rr.Validate != nil {
		others, err := r.list(gvr, a.GetNamespace(), rr)
		if err != nil {
			return true, nil, err
		}
		if err := rr.Validate(obj, others); err != nil {
			return true, nil, err
		}
	}
	if _, err := r.tracker.Get(gvr, acc.GetNamespace(), acc.GetName()); err == nil {
		return true, nil, apierrors.NewAlreadyExists(gvr.GroupResource(), acc.GetName())
	}
	acc.SetUID("")
	r.stampNew(acc)
	if isDryRun(a.CreateOptions.DryRun) {
		return true, obj, nil
	}
	if err := r.tracker.Create(gvr, obj, acc.GetNamespace()); err != nil {
		return true, nil, err
	}
	return true, obj.DeepCopyObject(), nil
}

func (r *Rules) list(gvr schema.GroupVersionResource, ns string, rr ResourceRules) ([]runtime.Object, error) {
	if rr.ListKind.Kind == "" {
		return nil, nil
	}
	l, err := r.tracker.List(gvr, rr.ListKind, ns)
	if err != nil {
		return nil, err
	}
	return meta.ExtractList(l)
}

func specOf(obj runtime.Object) (any, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return u["spec"], nil
}

func (r *Rules) update(gvr schema.GroupVersionResource, ns string, in runtime.Object, status, dry bool, rr ResourceRules) (bool, runtime.Object, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	obj := in.DeepCopyObject()
	acc, err := meta.Accessor(obj)
	if err != nil {
		return true, nil, err
	}
	if acc.GetNamespace() == "" {
		acc.SetNamespace(ns)
	}
	old, err := r.tracker.Get(gvr, acc.GetNamespace(), acc.GetName())
	if err != nil {
		return true, nil, err
	}
	oldAcc, err := meta.Accessor(old)
	if err != nil {
		return true, nil, err
	}
	if acc.GetResourceVersion() == "" && rr.RequireResourceVersion {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: gvr.Group, Kind: gvr.Resource}, acc.GetName(), field.ErrorList{
			field.Invalid(field.NewPath("metadata", "resourceVersion"), 0, "must be specified for an update")})
	}
	if acc.GetResourceVersion() != "" && acc.GetResourceVersion() != oldAcc.GetResourceVersion() {
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), acc.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	return r.store(gvr, old, obj, status, dry, rr)
}

// store finishes an update: immutability, generation, bookkeeping, write.
func (r *Rules) store(gvr schema.GroupVersionResource, old, obj runtime.Object, status, dry bool, rr ResourceRules) (bool, runtime.Object, error) {
	acc, _ := meta.Accessor(obj)
	oldAcc, _ := meta.Accessor(old)
	oldSpec, err := specOf(old)
	if err != nil {
		return true, nil, err
	}
	newSpec, err := specOf(obj)
	if err != nil {
		return true, nil, err
	}
	if status && !reflect.DeepEqual(oldSpec, newSpec) {
		// A status update cannot change the spec: the server keeps the old one.
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return true, nil, err
		}
		if oldSpec == nil {
			delete(u, "spec")
		} else {
			u["spec"] = runtime.DeepCopyJSONValue(oldSpec)
		}
		fresh := obj.DeepCopyObject()
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, fresh); err != nil {
			return true, nil, err
		}
		obj, newSpec = fresh, oldSpec
		acc, _ = meta.Accessor(obj)
	}
	if rr.Immutable != nil {
		if err := rr.Immutable(old, obj); err != nil {
			return true, nil, err
		}
	}
	if rr.Validate != nil && !status {
		others, err := r.list(gvr, acc.GetNamespace(), rr)
		if err != nil {
			return true, nil, err
		}
		if err := rr.Validate(obj, others); err != nil {
			return true, nil, err
		}
	}
	acc.SetUID(oldAcc.GetUID())
	acc.SetCreationTimestamp(oldAcc.GetCreationTimestamp())
	acc.SetGeneration(oldAcc.GetGeneration())
	if rr.Generation && !reflect.DeepEqual(oldSpec, newSpec) {
		acc.SetGeneration(oldAcc.GetGeneration() + 1)
	}
	acc.SetResourceVersion(strconv.FormatInt(r.rv.Add(1), 10))
	if dry {
		return true, obj, nil
	}
	if err := r.tracker.Update(gvr, obj, acc.GetNamespace()); err != nil {
		return true, nil, err
	}
	return true, obj.DeepCopyObject(), nil
}

func (r *Rules) patch(gvr schema.GroupVersionResource, a k8stesting.PatchActionImpl, rr ResourceRules) (bool, runtime.Object, error) {
	r.mu.Lock()
	old, err := r.tracker.Get(gvr, a.GetNamespace(), a.GetName())
	if err != nil {
		r.mu.Unlock()
		return true, nil, err
	}
	if isDryRun(a.PatchOptions.DryRun) {
		// The patch is not computed on a dry run: the object is returned as is.
		r.mu.Unlock()
		return true, old, nil
	}
	// Let the tracker apply the patch (it knows JSON, merge and strategic
	// merge patches), then redo the bookkeeping on the result.
	_, patched, err := k8stesting.ObjectReaction(r.tracker)(a)
	if err != nil {
		r.mu.Unlock()
		return true, nil, err
	}
	ok, out, err := func() (bool, runtime.Object, error) {
		defer r.mu.Unlock()
		ok, out, err := r.store(gvr, old, patched.DeepCopyObject(), a.GetSubresource() == "status", false, rr)
		if err != nil {
			// Roll the tracker back to the old object.
			_ = r.tracker.Update(gvr, old, a.GetNamespace())
		}
		return ok, out, err
	}()
	return ok, out, err
}

func (r *Rules) delete(gvr schema.GroupVersionResource, a k8stesting.DeleteActionImpl) (bool, runtime.Object, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, err := r.tracker.Get(gvr, a.GetNamespace(), a.GetName())
	if err != nil {
		return true, nil, err
	}
	acc, err := meta.Accessor(old)
	if err != nil {
		return true, nil, err
	}
	if p := a.DeleteOptions.Preconditions; p != nil {
		if p.UID != nil && *p.UID != acc.GetUID() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), a.GetName(),
				//lint:ignore ST1005 the API server's message, verbatim
				fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", *p.UID, acc.GetUID()))
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != acc.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), a.GetName(),
				//lint:ignore ST1005 the API server's message, verbatim
				fmt.Errorf("Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s", *p.ResourceVersion, acc.GetResourceVersion()))
		}
	}
	if isDryRun(a.DeleteOptions.DryRun) {
		return true, old, nil
	}
	if err := r.tracker.Delete(gvr, a.GetNamespace(), a.GetName()); err != nil {
		return true, nil, err
	}
	return true, old, nil
}
