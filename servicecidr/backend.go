package servicecidr

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	networkingv1beta1 "k8s.io/api/networking/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
)

// backend is one encoding of the ServiceCIDR API.
type backend interface {
	list(ctx context.Context) ([]ServiceCIDR, error)
	get(ctx context.Context, name string) (ServiceCIDR, error)
	// object is get that also returns the object as the API server sent it
	// (the version's typed object, or *unstructured.Unstructured), for the
	// journal.
	object(ctx context.Context, name string) (ServiceCIDR, any, error)
	create(ctx context.Context, sc ServiceCIDR, dryRun []string) (ServiceCIDR, error)
	// update writes spec.cidrs and labels, with sc.ResourceVersion as precondition when set.
	update(ctx context.Context, sc ServiceCIDR, dryRun []string) (ServiceCIDR, error)
	delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// ipBackend lists IPAddress objects.
type ipBackend interface {
	listIPs(ctx context.Context) ([]IPAddress, error)
}

// ServiceCIDRResource returns the GroupVersionResource of ServiceCIDR in version v.
func ServiceCIDRResource(v APIVersion) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: Group, Version: string(v), Resource: "servicecidrs"}
}

// IPAddressResource returns the GroupVersionResource of IPAddress in version v.
func IPAddressResource(v APIVersion) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: Group, Version: string(v), Resource: "ipaddresses"}
}

// --- conversion helpers shared by every version ---

func convert(name string, meta metav1.ObjectMeta, cidrs []string, conds []metav1.Condition) (ServiceCIDR, error) {
	out := ServiceCIDR{
		Name:            name,
		Finalizers:      append([]string(nil), meta.Finalizers...),
		UID:             meta.UID,
		ResourceVersion: meta.ResourceVersion,
	}
	if len(meta.Labels) > 0 {
		out.Labels = make(map[string]string, len(meta.Labels))
		for k, v := range meta.Labels {
			out.Labels[k] = v
		}
	}
	if meta.DeletionTimestamp != nil {
		t := meta.DeletionTimestamp.Time
		out.DeletionTimestamp = &t
	}
	for i, s := range cidrs {
		p, _, err := cidr.ParseLenient(s)
		if err != nil {
			return ServiceCIDR{}, &FieldError{Field: fmt.Sprintf("ServiceCIDR %s spec.cidrs[%d]", name, i), Value: s,
				Reason: "the API server returned a value that is not a CIDR", Err: ErrInvalid, Cause: err}
		}
		out.CIDRs = append(out.CIDRs, p)
	}
	for _, c := range conds {
		if c.Type == networkingv1.ServiceCIDRConditionReady {
			out.Ready = &Condition{Status: c.Status, Reason: c.Reason, Message: c.Message}
		}
	}
	return out, nil
}

func cidrStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

func objectMeta(sc ServiceCIDR) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: sc.Name, Labels: sc.Labels, ResourceVersion: sc.ResourceVersion}
}

func parseIPAddress(name string, labels map[string]string, ref ParentRef) (IPAddress, bool) {
	ip, err := netip.ParseAddr(name)
	if err != nil {
		return IPAddress{}, false
	}
	return IPAddress{IP: ip.Unmap(), ParentRef: ref, ManagedBy: labels[LabelManagedBy]}, true
}

// --- the typed clients: networking.k8s.io/v1 and v1beta1 ---

// typedClient is what backends use of a typed ServiceCIDR client; T is the
// object pointer type and L the list pointer type of one API version.
type typedClient[T, L any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// typedBackend implements backend over one version's typed client; the
// version-specific parts are its functions.
type typedBackend[T, L any] struct {
	client typedClient[T, L]
	// from converts an object; items returns pointers to a list's objects.
	from  func(T) (ServiceCIDR, error)
	items func(L) []T
	// build makes a new object; set returns a copy of obj with these CIDRs
	// and labels.
	build func(meta metav1.ObjectMeta, cidrs []string) T
	set   func(obj T, cidrs []string, labels map[string]string, resourceVersion string) T
}

func (b typedBackend[T, L]) list(ctx context.Context) ([]ServiceCIDR, error) {
	l, err := b.client.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	items := b.items(l)
	out := make([]ServiceCIDR, 0, len(items))
	for _, o := range items {
		sc, err := b.from(o)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

func (b typedBackend[T, L]) get(ctx context.Context, name string) (ServiceCIDR, error) {
	sc, _, err := b.object(ctx, name)
	return sc, err
}

func (b typedBackend[T, L]) object(ctx context.Context, name string) (ServiceCIDR, any, error) {
	o, err := b.client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ServiceCIDR{}, nil, err
	}
	sc, err := b.from(o)
	return sc, o, err
}

func (b typedBackend[T, L]) create(ctx context.Context, sc ServiceCIDR, dryRun []string) (ServiceCIDR, error) {
	m := objectMeta(sc)
	m.ResourceVersion = ""
	o, err := b.client.Create(ctx, b.build(m, cidrStrings(sc.CIDRs)), metav1.CreateOptions{DryRun: dryRun})
	if err != nil {
		return ServiceCIDR{}, err
	}
	return b.from(o)
}

func (b typedBackend[T, L]) update(ctx context.Context, sc ServiceCIDR, dryRun []string) (ServiceCIDR, error) {
	live, err := b.client.Get(ctx, sc.Name, metav1.GetOptions{})
	if err != nil {
		return ServiceCIDR{}, err
	}
	o, err := b.client.Update(ctx, b.set(live, cidrStrings(sc.CIDRs), sc.Labels, sc.ResourceVersion), metav1.UpdateOptions{DryRun: dryRun})
	if err != nil {
		return ServiceCIDR{}, err
	}
	return b.from(o)
}

func (b typedBackend[T, L]) delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return b.client.Delete(ctx, name, opts)
}

// setMeta applies update's metadata rule to a live object's copy.
func setMeta(m *metav1.ObjectMeta, labels map[string]string, resourceVersion string) {
	m.Labels = labels
	if resourceVersion != "" {
		m.ResourceVersion = resourceVersion
	}
}

func ptrs[E any](items []E) []*E {
	out := make([]*E, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

func v1Backend(c kubernetes.Interface) backend {
	return typedBackend[*networkingv1.ServiceCIDR, *networkingv1.ServiceCIDRList]{
		client: c.NetworkingV1().ServiceCIDRs(),
		from: func(o *networkingv1.ServiceCIDR) (ServiceCIDR, error) {
			return convert(o.Name, o.ObjectMeta, o.Spec.CIDRs, o.Status.Conditions)
		},
		items: func(l *networkingv1.ServiceCIDRList) []*networkingv1.ServiceCIDR { return ptrs(l.Items) },
		build: func(m metav1.ObjectMeta, cidrs []string) *networkingv1.ServiceCIDR {
			return &networkingv1.ServiceCIDR{ObjectMeta: m, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
		},
		set: func(o *networkingv1.ServiceCIDR, cidrs []string, labels map[string]string, rv string) *networkingv1.ServiceCIDR {
			o = o.DeepCopy()
			o.Spec.CIDRs = cidrs
			setMeta(&o.ObjectMeta, labels, rv)
			return o
		},
	}
}

func v1beta1Backend(c kubernetes.Interface) backend {
	return typedBackend[*networkingv1beta1.ServiceCIDR, *networkingv1beta1.ServiceCIDRList]{
		client: c.NetworkingV1beta1().ServiceCIDRs(),
		from: func(o *networkingv1beta1.ServiceCIDR) (ServiceCIDR, error) {
			return convert(o.Name, o.ObjectMeta, o.Spec.CIDRs, o.Status.Conditions)
		},
		items: func(l *networkingv1beta1.ServiceCIDRList) []*networkingv1beta1.ServiceCIDR { return ptrs(l.Items) },
		build: func(m metav1.ObjectMeta, cidrs []string) *networkingv1beta1.ServiceCIDR {
			return &networkingv1beta1.ServiceCIDR{ObjectMeta: m, Spec: networkingv1beta1.ServiceCIDRSpec{CIDRs: cidrs}}
		},
		set: func(o *networkingv1beta1.ServiceCIDR, cidrs []string, labels map[string]string, rv string) *networkingv1beta1.ServiceCIDR {
			o = o.DeepCopy()
			o.Spec.CIDRs = cidrs
			setMeta(&o.ObjectMeta, labels, rv)
			return o
		},
	}
}

// typedIPBackend lists IPAddress objects through one version's typed client.
type typedIPBackend[L any] struct {
	list func(ctx context.Context, opts metav1.ListOptions) (L, error)
	// each calls f with every object's name, labels and parent reference.
	each func(l L, f func(name string, labels map[string]string, ref ParentRef))
}

func (b typedIPBackend[L]) listIPs(ctx context.Context) ([]IPAddress, error) {
	l, err := b.list(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := []IPAddress{}
	b.each(l, func(name string, labels map[string]string, ref ParentRef) {
		if ip, ok := parseIPAddress(name, labels, ref); ok {
			out = append(out, ip)
		}
	})
	return out, nil
}

func v1IPBackend(c kubernetes.Interface) ipBackend {
	return typedIPBackend[*networkingv1.IPAddressList]{
		list: c.NetworkingV1().IPAddresses().List,
		each: func(l *networkingv1.IPAddressList, f func(string, map[string]string, ParentRef)) {
			for _, o := range l.Items {
				var ref ParentRef
				if r := o.Spec.ParentRef; r != nil {
					ref = ParentRef{Group: r.Group, Resource: r.Resource, Namespace: r.Namespace, Name: r.Name}
				}
				f(o.Name, o.Labels, ref)
			}
		},
	}
}

func v1beta1IPBackend(c kubernetes.Interface) ipBackend {
	return typedIPBackend[*networkingv1beta1.IPAddressList]{
		list: c.NetworkingV1beta1().IPAddresses().List,
		each: func(l *networkingv1beta1.IPAddressList, f func(string, map[string]string, ParentRef)) {
			for _, o := range l.Items {
				var ref ParentRef
				if r := o.Spec.ParentRef; r != nil {
					ref = ParentRef{Group: r.Group, Resource: r.Resource, Namespace: r.Namespace, Name: r.Name}
				}
				f(o.Name, o.Labels, ref)
			}
		},
	}
}

// --- any version through the dynamic client (v1alpha1 is gone from k8s.io/api) ---

type dynamicBackend struct {
	c dynamic.Interface
	v APIVersion
}

// FromUnstructured converts a ServiceCIDR read through the dynamic client
// (any version: the schema is the same). Malformed content is an error that
// names the field, never a panic.
func FromUnstructured(u *unstructured.Unstructured) (ServiceCIDR, error) {
	if u == nil {
		return ServiceCIDR{}, &FieldError{Field: "ServiceCIDR", Reason: "no object", Err: ErrInvalid}
	}
	name := u.GetName()
	cidrs, _, err := unstructured.NestedStringSlice(u.Object, "spec", "cidrs")
	if err != nil {
		return ServiceCIDR{}, &FieldError{Field: "ServiceCIDR " + name + " spec.cidrs", Reason: err.Error(), Err: ErrInvalid}
	}
	var conds []metav1.Condition
	raw, _, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil {
		return ServiceCIDR{}, &FieldError{Field: "ServiceCIDR " + name + " status.conditions", Reason: err.Error(), Err: ErrInvalid}
	}
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		conds = append(conds, metav1.Condition{Type: str("type"), Status: metav1.ConditionStatus(str("status")),
			Reason: str("reason"), Message: str("message")})
	}
	meta := metav1.ObjectMeta{
		Labels:          u.GetLabels(),
		Finalizers:      u.GetFinalizers(),
		UID:             u.GetUID(),
		ResourceVersion: u.GetResourceVersion(),
	}
	if ts, found, _ := unstructured.NestedString(u.Object, "metadata", "deletionTimestamp"); found && ts != "" {
		t, err := time.Parse(time.RFC3339, ts)
		if err != nil {
			return ServiceCIDR{}, &FieldError{Field: "ServiceCIDR " + name + " metadata.deletionTimestamp", Value: ts, Reason: "not an RFC 3339 time", Err: ErrInvalid}
		}
		mt := metav1.NewTime(t)
		meta.DeletionTimestamp = &mt
	}
	return convert(name, meta, cidrs, conds)
}

// ToUnstructured renders sc as a ServiceCIDR object of version v, as the
// dynamic client sends it (name, labels, spec.cidrs).
func ToUnstructured(sc ServiceCIDR, v APIVersion) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion(v.GroupVersion())
	u.SetKind("ServiceCIDR")
	u.SetName(sc.Name)
	if len(sc.Labels) > 0 {
		u.SetLabels(sc.Labels)
	}
	if sc.ResourceVersion != "" {
		u.SetResourceVersion(sc.ResourceVersion)
	}
	cidrs := make([]any, len(sc.CIDRs))
	for i, p := range sc.CIDRs {
		cidrs[i] = p.String()
	}
	u.Object["spec"] = map[string]any{"cidrs": cidrs}
	return u
}

func (b dynamicBackend) res() dynamic.ResourceInterface {
	return b.c.Resource(ServiceCIDRResource(b.v))
}

func (b dynamicBackend) list(ctx context.Context) ([]ServiceCIDR, error) {
	l, err := b.res().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]ServiceCIDR, 0, len(l.Items))
	for i := range l.Items {
		sc, err := FromUnstructured(&l.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

func (b dynamicBackend) get(ctx context.Context, name string) (ServiceCIDR, error) {
	sc, _, err := b.object(ctx, name)
	return sc, err
}

func (b dynamicBackend) object(ctx context.Context, name string) (ServiceCIDR, any, error) {
	u, err := b.res().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ServiceCIDR{}, nil, err
	}
	sc, err := FromUnstructured(u)
	return sc, u, err
}

func (b dynamicBackend) create(ctx context.Context, sc ServiceCIDR, dryRun []string) (ServiceCIDR, error) {
	sc.ResourceVersion = ""
	u, err := b.res().Create(ctx, ToUnstructured(sc, b.v), metav1.CreateOptions{DryRun: dryRun})
	if err != nil {
		return ServiceCIDR{}, err
	}
	return FromUnstructured(u)
}

func (b dynamicBackend) update(ctx context.Context, sc ServiceCIDR, dryRun []string) (ServiceCIDR, error) {
	live, err := b.res().Get(ctx, sc.Name, metav1.GetOptions{})
	if err != nil {
		return ServiceCIDR{}, err
	}
	live = live.DeepCopy()
	cidrs := make([]any, len(sc.CIDRs))
	for i, p := range sc.CIDRs {
		cidrs[i] = p.String()
	}
	if err := unstructured.SetNestedSlice(live.Object, cidrs, "spec", "cidrs"); err != nil {
		return ServiceCIDR{}, err
	}
	live.SetLabels(sc.Labels)
	if sc.ResourceVersion != "" {
		live.SetResourceVersion(sc.ResourceVersion)
	}
	u, err := b.res().Update(ctx, live, metav1.UpdateOptions{DryRun: dryRun})
	if err != nil {
		return ServiceCIDR{}, err
	}
	return FromUnstructured(u)
}

func (b dynamicBackend) delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return b.res().Delete(ctx, name, opts)
}

type dynamicIPBackend struct {
	c dynamic.Interface
	v APIVersion
}

func (b dynamicIPBackend) listIPs(ctx context.Context) ([]IPAddress, error) {
	l, err := b.c.Resource(IPAddressResource(b.v)).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]IPAddress, 0, len(l.Items))
	for _, o := range l.Items {
		ref := ParentRef{}
		if m, found, _ := unstructured.NestedStringMap(o.Object, "spec", "parentRef"); found {
			ref = ParentRef{Group: m["group"], Resource: m["resource"], Namespace: m["namespace"], Name: m["name"]}
		}
		if ip, ok := parseIPAddress(o.GetName(), o.GetLabels(), ref); ok {
			out = append(out, ip)
		}
	}
	return out, nil
}
