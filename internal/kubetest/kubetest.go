// Package kubetest makes a client-go fake clientset keep the API server's
// optimistic-concurrency rules for chosen resources, so tests of code that
// relies on them (the Lease lock, the journal kept in ConfigMaps) cannot pass
// because the fake is more forgiving than kube-apiserver:
//
//   - create assigns a resourceVersion, a UID and a creationTimestamp, and
//     refuses an object that carries a resourceVersion;
//   - update refuses a resourceVersion other than the stored one (409
//     Conflict), as a compare-and-swap; an empty one updates unconditionally;
//   - delete honours UID and resourceVersion preconditions;
//   - a ConfigMap whose data and binaryData (keys plus values) exceed 1 MiB
//     is refused as invalid, as ValidateConfigMap does.
//
// Reads fall through to the clientset's tracker, which stores the objects
// with the versions assigned here.
package kubetest

import (
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// MaxConfigMapBytes is kube-apiserver's limit on a ConfigMap's data and
// binaryData, keys and values together (corev1.MaxSecretSize).
const MaxConfigMapBytes = corev1.MaxSecretSize

// EnforceCAS prepends reactors to c that keep the rules above for each named
// resource (for example "leases", "configmaps").
func EnforceCAS(c *fake.Clientset, resources ...string) {
	s := &store{c: c}
	for _, r := range resources {
		c.PrependReactor("create", r, s.create)
		c.PrependReactor("update", r, s.update)
		c.PrependReactor("delete", r, s.delete)
	}
}

type store struct {
	c  *fake.Clientset
	mu sync.Mutex
	rv int64
}

func (s *store) next() string {
	s.rv++
	return strconv.FormatInt(s.rv, 10)
}

func (s *store) create(a k8stesting.Action) (bool, runtime.Object, error) {
	ca := a.(k8stesting.CreateAction)
	obj := ca.GetObject().DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return true, nil, err
	}
	if m.GetResourceVersion() != "" {
		return true, nil, apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
	}
	if err := checkSize(obj, m.GetName()); err != nil {
		return true, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m.SetResourceVersion(s.next())
	m.SetUID(types.UID(fmt.Sprintf("uid-%s-%d", m.GetName(), s.rv)))
	m.SetCreationTimestamp(metav1.Now())
	if err := s.c.Tracker().Create(a.GetResource(), obj, a.GetNamespace()); err != nil {
		return true, nil, err
	}
	return true, obj.DeepCopyObject(), nil
}

func (s *store) update(a k8stesting.Action) (bool, runtime.Object, error) {
	ua := a.(k8stesting.UpdateAction)
	if a.GetSubresource() != "" {
		return false, nil, nil
	}
	obj := ua.GetObject().DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return true, nil, err
	}
	gr := a.GetResource().GroupResource()
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.c.Tracker().Get(a.GetResource(), a.GetNamespace(), m.GetName())
	if err != nil {
		return true, nil, err
	}
	cm, _ := meta.Accessor(cur)
	if rv := m.GetResourceVersion(); rv != "" && rv != cm.GetResourceVersion() {
		return true, nil, apierrors.NewConflict(gr, m.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again (have %s, stored %s)", rv, cm.GetResourceVersion()))
	}
	if err := checkSize(obj, m.GetName()); err != nil {
		return true, nil, err
	}
	m.SetUID(cm.GetUID())
	m.SetCreationTimestamp(cm.GetCreationTimestamp())
	m.SetResourceVersion(s.next())
	if err := s.c.Tracker().Update(a.GetResource(), obj, a.GetNamespace()); err != nil {
		return true, nil, err
	}
	return true, obj.DeepCopyObject(), nil
}

func (s *store) delete(a k8stesting.Action) (bool, runtime.Object, error) {
	da := a.(k8stesting.DeleteActionImpl)
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.c.Tracker().Get(a.GetResource(), a.GetNamespace(), da.GetName())
	if err != nil {
		return true, nil, err
	}
	cm, _ := meta.Accessor(cur)
	if p := da.DeleteOptions.Preconditions; p != nil {
		gr := a.GetResource().GroupResource()
		if p.UID != nil && *p.UID != cm.GetUID() {
			return true, nil, apierrors.NewConflict(gr, da.GetName(), fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", *p.UID, cm.GetUID()))
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != cm.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(gr, da.GetName(), fmt.Errorf("precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s", *p.ResourceVersion, cm.GetResourceVersion()))
		}
	}
	return true, nil, s.c.Tracker().Delete(a.GetResource(), a.GetNamespace(), da.GetName())
}

// checkSize refuses a ConfigMap above MaxConfigMapBytes.
func checkSize(obj runtime.Object, name string) error {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil
	}
	total := 0
	for k, v := range cm.Data {
		total += len(k) + len(v)
	}
	for k, v := range cm.BinaryData {
		total += len(k) + len(v)
	}
	if total > MaxConfigMapBytes {
		return apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind(), name, field.ErrorList{
			field.TooLong(field.NewPath(""), "", MaxConfigMapBytes),
		})
	}
	return nil
}
