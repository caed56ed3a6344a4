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

// --- networking.k8s.io/v1 ---

type v1Backend struct{ c kubernetes.Interface }

func fromV1(o *networkingv1.ServiceCIDR) (ServiceCIDR, error) {
	return convert(o.Name, o.ObjectMeta, o.Spec.CIDRs, o.Status.Conditions)
}

func (b v1Backend) list(ctx context.Context) ([]ServiceCIDR, error) {
	l, err := b.c.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]ServiceCIDR, 0, len(l.Items))
	for i := range l.Items {
		sc, err := fromV1(&l.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

func (b v1Backend) get(ctx context.Context, name string) (ServiceCIDR, error) {
	o, err := b.c.NetworkingV1().ServiceCIDRs().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ServiceCIDR{}, err
	}
	return fromV1(o)
}

func (b v1Backend) create(ctx context.Context, sc ServiceCIDR, dryRun []string) (ServiceCIDR, error) {
	m := objectMeta(sc)
	m.ResourceVersion = ""
	o, err := b.c.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{ObjectMeta: m,
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrStrings(sc.CIDRs)}}, metav1.CreateOptions{DryRun: dryRun})
	if err != nil {
		return ServiceCIDR{}, err
	}
	return fromV1(o)
}

func (b v1Backend) update(ctx context.Context, sc ServiceCIDR, dryRun []string) (ServiceCIDR, error) {
	live, err := b.c.NetworkingV1().ServiceCIDRs().Get(ctx, sc.Name, metav1.GetOptions{})
	if err != nil {
		return ServiceCIDR{}, err
	}
	live = live.DeepCopy()
	live.Spec.CIDRs = cidrStrings(sc.CIDRs)
	live.Labels = sc.Labels
	if sc.ResourceVersion != "" {
		live.ResourceVersion = sc.ResourceVersion
	}
	o, err := b.c.NetworkingV1().ServiceCIDRs().Update(ctx, live, metav1.UpdateOptions{DryRun: dryRun})
	if err != nil {
		return ServiceCIDR{}, err
	}
	return fromV1(o)
}

func (b v1Backend) delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return b.c.NetworkingV1().ServiceCIDRs().Delete(ctx, name, opts)
}

type v1IPBackend struct{ c kubernetes.Interface }

func (b v1IPBackend) listIPs(ctx context.Context) ([]IPAddress, error) {
	l, err := b.c.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]IPAddress, 0, len(l.Items))
	for _, o := range l.Items {
		var ref ParentRef
		if r := o.Spec.ParentRef; r != nil {
			ref = ParentRef{Group: r.Group, Resource: r.Resource, Namespace: r.Namespace, Name: r.Name}
		}
		if ip, ok := parseIPAddress(o.Name, o.Labels, ref); ok {
			out = append(out, ip)
		}
	}
	return out, nil
}

// --- networking.k8s.io/v1beta1 ---

type v1beta1Backend struct{ c kubernetes.Interface }

func fromV1beta1(o *networkingv1beta1.ServiceCIDR) (ServiceCIDR, error) {
	return convert(o.Name, o.ObjectMeta, o.Spec.CIDRs, o.Status.Conditions)
}

func (b v1beta1Backend) list(ctx context.Context) ([]ServiceCIDR, error) {
	l, err := b.c.NetworkingV1beta1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]ServiceCIDR, 0, len(l.Items))
	for i := range l.Items {
		sc, err := fromV1beta1(&l.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

func (b v1beta1Backend) get(ctx context.Context, name string) (ServiceCIDR, error) {
	o, err := b.c.NetworkingV1beta1().ServiceCIDRs().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ServiceCIDR{}, err
	}
	return fromV1beta1(o)
}

func (b v1beta1Backend) create(ctx context.Context, sc ServiceCIDR, dryRun []string) (ServiceCIDR, error) {
	m := objectMeta(sc)
	m.ResourceVersion = ""
	o, err := b.c.NetworkingV1beta1().ServiceCIDRs().Create(ctx, &networkingv1beta1.ServiceCIDR{ObjectMeta: m,
		Spec: networkingv1beta1.ServiceCIDRSpec{CIDRs: cidrStrings(sc.CIDRs)}}, metav1.CreateOptions{DryRun: dryRun})
	if err != nil {
		return ServiceCIDR{}, err
	}
	return fromV1beta1(o)
}

func (b v1beta1Backend) update(ctx context.Context, sc ServiceCIDR, dryRun []string) (ServiceCIDR, error) {
	live, err := b.c.NetworkingV1beta1().ServiceCIDRs().Get(ctx, sc.Name, metav1.GetOptions{})
	if err != nil {
		return ServiceCIDR{}, err
	}
	live = live.DeepCopy()
	live.Spec.CIDRs = cidrStrings(sc.CIDRs)
	live.Labels = sc.Labels
	if sc.ResourceVersion != "" {
		live.ResourceVersion = sc.ResourceVersion
	}
	o, err := b.c.NetworkingV1beta1().ServiceCIDRs().Update(ctx, live, metav1.UpdateOptions{DryRun: dryRun})
	if err != nil {
		return ServiceCIDR{}, err
	}
	return fromV1beta1(o)
}

func (b v1beta1Backend) delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return b.c.NetworkingV1beta1().ServiceCIDRs().Delete(ctx, name, opts)
}

type v1beta1IPBackend struct{ c kubernetes.Interface }

func (b v1beta1IPBackend) listIPs(ctx context.Context) ([]IPAddress, error) {
	l, err := b.c.NetworkingV1beta1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]IPAddress, 0, len(l.Items))
	for _, o := range l.Items {
		var ref ParentRef
		if r := o.Spec.ParentRef; r != nil {
			ref = ParentRef{Group: r.Group, Resource: r.Resource, Namespace: r.Namespace, Name: r.Name}
		}
		if ip, ok := parseIPAddress(o.Name, o.Labels, ref); ok {
			out = append(out, ip)
		}
	}
	return out, nil
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
	u, err := b.res().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ServiceCIDR{}, err
	}
	return FromUnstructured(u)
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
