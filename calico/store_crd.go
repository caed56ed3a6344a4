package calico

import (
	"context"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// CRDGroup is the API group of Calico's Kubernetes-datastore CRDs.
const CRDGroup = "crd.projectcalico.org"

// GroupVersionResources of the Calico CRDs this package reads or writes.
var (
	IPPoolsV1         = schema.GroupVersionResource{Group: CRDGroup, Version: "v1", Resource: "ippools"}
	IPAMBlocksV1      = schema.GroupVersionResource{Group: CRDGroup, Version: "v1", Resource: "ipamblocks"}
	BlockAffinitiesV1 = schema.GroupVersionResource{Group: CRDGroup, Version: "v1", Resource: "blockaffinities"}
	IPPoolsV3         = schema.GroupVersionResource{Group: "projectcalico.org", Version: "v3", Resource: "ippools"}
)

// CRDStore is a PoolStore over the crd.projectcalico.org/v1 IPPool CRD,
// through the dynamic client. Use it only when projectcalico.org/v3 is not
// served.
//
// Calico's own validation is bypassed on this path: the API server checks
// only the CRD's schema, so a pool with overlapping CIDRs, a bad block size
// or both IPIP and VXLAN on is stored as given and breaks Calico IPAM later.
// That is why this package validates every pool it writes (Validate,
// ValidateNewPool) before it calls Create or Update. The store keeps the
// projectcalico.org/metadata annotation, in which Calico keeps the v3
// metadata, intact on update and never copies it to a new pool.
type CRDStore struct {
	client dynamic.Interface
}

var _ PoolStore = (*CRDStore)(nil)

// NewCRDStore returns a store over the given dynamic client.
func NewCRDStore(client dynamic.Interface) *CRDStore { return &CRDStore{client: client} }

// API returns APICRDV1.
func (s *CRDStore) API() API { return APICRDV1 }

// List returns every pool, sorted by name.
func (s *CRDStore) List(ctx context.Context) ([]IPPool, error) {
	list, err := s.client.Resource(IPPoolsV1).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing %s ippools: %w", APICRDV1, err)
	}
	out := make([]IPPool, 0, len(list.Items))
	for i := range list.Items {
		p, err := PoolFromUnstructured(list.Items[i].Object)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	sortPools(out)
	return out, nil
}

// Get returns the named pool.
func (s *CRDStore) Get(ctx context.Context, name string) (IPPool, error) {
	u, err := s.client.Resource(IPPoolsV1).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return IPPool{}, notFound(name, err)
	}
	if err != nil {
		return IPPool{}, fmt.Errorf("getting %s ippool %q: %w", APICRDV1, name, err)
	}
	return PoolFromUnstructured(u.Object)
}

// Create creates the pool. MetadataAnnotation is not copied.
func (s *CRDStore) Create(ctx context.Context, pool IPPool, opts WriteOptions) (IPPool, error) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": IPPoolsV1.GroupVersion().String(),
		"kind":       "IPPool",
		"metadata":   map[string]any{"name": pool.Name},
		"spec":       map[string]any{},
	}}
	u.SetLabels(maps.Clone(pool.Labels))
	u.SetAnnotations(withoutMetadataAnnotation(pool.Annotations))
	spec, _ := u.Object["spec"].(map[string]any)
	specToUnstructured(pool.Spec, spec)
	release, err := holdFor(ctx, opts.Lock, opts.DryRun, fmt.Sprintf("not creating %s ippool %q", APICRDV1, pool.Name))
	if err != nil {
		return IPPool{}, err
	}
	defer release()
	created, err := s.client.Resource(IPPoolsV1).Create(ctx, u, metav1.CreateOptions{DryRun: dryRun(opts.DryRun)})
	if err != nil {
		return IPPool{}, fmt.Errorf("creating %s ippool %q (cidr %s): %w", APICRDV1, pool.Name, pool.Spec.CIDR, err)
	}
	return PoolFromUnstructured(created.Object)
}

// Update writes labels, annotations and spec, keeping unknown fields and the
// stored MetadataAnnotation.
func (s *CRDStore) Update(ctx context.Context, pool IPPool, opts WriteOptions) (IPPool, error) {
	cur, err := s.client.Resource(IPPoolsV1).Get(ctx, pool.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return IPPool{}, notFound(pool.Name, err)
	}
	if err != nil {
		return IPPool{}, fmt.Errorf("getting %s ippool %q for update: %w", APICRDV1, pool.Name, err)
	}
	obj := cur.DeepCopy()
	if pool.ResourceVersion != "" {
		obj.SetResourceVersion(pool.ResourceVersion)
	}
	obj.SetLabels(maps.Clone(pool.Labels))
	ann := withoutMetadataAnnotation(pool.Annotations)
	if v, ok := cur.GetAnnotations()[MetadataAnnotation]; ok {
		if ann == nil {
			ann = map[string]string{}
		}
		ann[MetadataAnnotation] = v
	}
	obj.SetAnnotations(ann)
	spec, ok := obj.Object["spec"].(map[string]any)
	if !ok {
		spec = map[string]any{}
		obj.Object["spec"] = spec
	}
	specToUnstructured(pool.Spec, spec)
	release, err := holdFor(ctx, opts.Lock, opts.DryRun, fmt.Sprintf("not updating %s ippool %q", APICRDV1, pool.Name))
	if err != nil {
		return IPPool{}, err
	}
	defer release()
	updated, err := s.client.Resource(IPPoolsV1).Update(ctx, obj, metav1.UpdateOptions{DryRun: dryRun(opts.DryRun)})
	if err != nil {
		return IPPool{}, fmt.Errorf("updating %s ippool %q: %w", APICRDV1, pool.Name, err)
	}
	return PoolFromUnstructured(updated.Object)
}

// Delete deletes the named pool.
func (s *CRDStore) Delete(ctx context.Context, name string, opts DeleteOptions) error {
	release, err := holdFor(ctx, opts.Lock, opts.DryRun, fmt.Sprintf("not deleting %s ippool %q", APICRDV1, name))
	if err != nil {
		return err
	}
	defer release()
	err = s.client.Resource(IPPoolsV1).Delete(ctx, name, deleteOptions(opts))
	if apierrors.IsNotFound(err) {
		return notFound(name, err)
	}
	if err != nil {
		return fmt.Errorf("deleting %s ippool %q: %w", APICRDV1, name, err)
	}
	return nil
}

// specToUnstructured writes the fields PoolSpec models into spec, removing
// the ones that are at their zero value (as omitempty would) and leaving
// every other key (for example the deprecated "ipip" and "nat-outgoing").
func specToUnstructured(s PoolSpec, spec map[string]any) {
	setStr := func(k, v string) {
		if v == "" {
			delete(spec, k)
		} else {
			spec[k] = v
		}
	}
	setBool := func(k string, v bool) {
		if v {
			spec[k] = true
		} else {
			delete(spec, k)
		}
	}
	spec["cidr"] = s.CIDR
	if s.BlockSize != 0 {
		spec["blockSize"] = int64(s.BlockSize)
	} else {
		delete(spec, "blockSize")
	}
	setStr("ipipMode", string(s.IPIPMode))
	setStr("vxlanMode", string(s.VXLANMode))
	setBool("natOutgoing", s.NATOutgoing)
	setBool("disabled", s.Disabled)
	setBool("disableBGPExport", s.DisableBGPExport)
	setStr("nodeSelector", s.NodeSelector)
	setStr("namespaceSelector", s.NamespaceSelector)
	setStr("assignmentMode", string(s.AssignmentMode))
	if len(s.AllowedUses) == 0 {
		delete(spec, "allowedUses")
	} else {
		uses := make([]any, len(s.AllowedUses))
		for i, u := range s.AllowedUses {
			uses[i] = string(u)
		}
		spec["allowedUses"] = uses
	}
}

// PoolFromUnstructured converts a crd.projectcalico.org/v1 (or
// projectcalico.org/v3) IPPool object, as decoded from JSON or built by
// hand (Go ints are read as JSON's integers), to an IPPool. It fails with a
// *FieldError naming the field when a value has the wrong type.
func PoolFromUnstructured(obj map[string]any) (IPPool, error) {
	u := unstructured.Unstructured{Object: obj}
	name := u.GetName()
	var p IPPool
	var err error
	p.Name = name
	p.UID = string(u.GetUID())
	p.ResourceVersion = u.GetResourceVersion()
	p.Labels = u.GetLabels()
	p.Annotations = u.GetAnnotations()
	// Not NestedMap: it deep-copies, and panics on a value no JSON decoder
	// makes (an int in a map built by hand); the spec is only read.
	raw, found, _ := unstructured.NestedFieldNoCopy(obj, "spec")
	if !found || raw == nil {
		return p, nil
	}
	spec, ok := raw.(map[string]any)
	if !ok {
		return IPPool{}, badType(name, "spec", raw, "an object")
	}
	str := func(k string) string {
		if err != nil {
			return ""
		}
		v, ok := spec[k]
		if !ok || v == nil {
			return ""
		}
		s, ok := v.(string)
		if !ok {
			err = badType(name, "spec."+k, v, "a string")
		}
		return s
	}
	boolean := func(k string) bool {
		if err != nil {
			return false
		}
		v, ok := spec[k]
		if !ok || v == nil {
			return false
		}
		b, ok := v.(bool)
		if !ok {
			err = badType(name, "spec."+k, v, "true or false")
		}
		return b
	}
	p.Spec.CIDR = str("cidr")
	p.Spec.IPIPMode = EncapMode(str("ipipMode"))
	p.Spec.VXLANMode = EncapMode(str("vxlanMode"))
	p.Spec.NodeSelector = str("nodeSelector")
	p.Spec.NamespaceSelector = str("namespaceSelector")
	p.Spec.AssignmentMode = AssignmentMode(str("assignmentMode"))
	p.Spec.NATOutgoing = boolean("natOutgoing")
	p.Spec.Disabled = boolean("disabled")
	p.Spec.DisableBGPExport = boolean("disableBGPExport")
	if err != nil {
		return IPPool{}, err
	}
	if v, ok := spec["blockSize"]; ok && v != nil {
		n, ok := asInt(v)
		if !ok {
			return IPPool{}, badType(name, "spec.blockSize", v, "an integer")
		}
		p.Spec.BlockSize = n
	}
	if v, ok := spec["allowedUses"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return IPPool{}, badType(name, "spec.allowedUses", v, "a list of strings")
		}
		for i, e := range list {
			s, ok := e.(string)
			if !ok {
				return IPPool{}, badType(name, fmt.Sprintf("spec.allowedUses[%d]", i), e, "a string")
			}
			p.Spec.AllowedUses = append(p.Spec.AllowedUses, AllowedUse(s))
		}
	}
	return p, nil
}

// asInt accepts the number types JSON decoders produce, within int32 range.
func asInt(v any) (int, bool) {
	const limit = 1 << 31
	switch n := v.(type) {
	case int64:
		if n > -limit && n < limit {
			return int(n), true
		}
	case int:
		if n > -limit && n < limit {
			return n, true
		}
	case int32:
		return int(n), true
	case float64:
		if n == float64(int64(n)) && n > -limit && n < limit {
			return int(n), true
		}
	}
	return 0, false
}

func badType(pool, field string, v any, want string) error {
	return &FieldError{Pool: pool, Field: field, Value: fmt.Sprintf("%v", v), Rule: RuleType,
		Reason: fmt.Sprintf("has type %T; want %s", v, want)}
}
