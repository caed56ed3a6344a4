package calico

import (
	"context"
	"fmt"
	"maps"
	"slices"

	v3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	calicoclient "github.com/projectcalico/api/pkg/client/clientset_generated/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// V3Store is a PoolStore over projectcalico.org/v3, through the clientset
// of github.com/projectcalico/api. The Calico API server (or Calico's native
// v3 CRDs) validates every write, so this is the path to prefer when it is
// served.
type V3Store struct {
	client calicoclient.Interface
}

var _ PoolStore = (*V3Store)(nil)

// NewV3Store returns a store over the given Calico clientset.
func NewV3Store(client calicoclient.Interface) *V3Store { return &V3Store{client: client} }

// API returns APIProjectCalicoV3.
func (s *V3Store) API() API { return APIProjectCalicoV3 }

// List returns every pool, sorted by name.
func (s *V3Store) List(ctx context.Context) ([]IPPool, error) {
	list, err := s.client.ProjectcalicoV3().IPPools().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing %s ippools: %w", APIProjectCalicoV3, err)
	}
	out := make([]IPPool, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, fromV3(&list.Items[i]))
	}
	sortPools(out)
	return out, nil
}

// Get returns the named pool.
func (s *V3Store) Get(ctx context.Context, name string) (IPPool, error) {
	p, err := s.client.ProjectcalicoV3().IPPools().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return IPPool{}, notFound(name, err)
	}
	if err != nil {
		return IPPool{}, fmt.Errorf("getting %s ippool %q: %w", APIProjectCalicoV3, name, err)
	}
	return fromV3(p), nil
}

// Create creates the pool.
func (s *V3Store) Create(ctx context.Context, pool IPPool, opts WriteOptions) (IPPool, error) {
	obj := &v3.IPPool{
		TypeMeta:   metav1.TypeMeta{Kind: v3.KindIPPool, APIVersion: v3.GroupVersionCurrent},
		ObjectMeta: metav1.ObjectMeta{Name: pool.Name, Labels: maps.Clone(pool.Labels), Annotations: withoutMetadataAnnotation(pool.Annotations)},
	}
	specToV3(pool.Spec, &obj.Spec)
	release, err := holdFor(ctx, opts.Lock, opts.DryRun, fmt.Sprintf("not creating %s ippool %q", APIProjectCalicoV3, pool.Name))
	if err != nil {
		return IPPool{}, err
	}
	defer release()
	created, err := s.client.ProjectcalicoV3().IPPools().Create(ctx, obj, metav1.CreateOptions{DryRun: dryRun(opts.DryRun)})
	if err != nil {
		return IPPool{}, fmt.Errorf("creating %s ippool %q (cidr %s): %w", APIProjectCalicoV3, pool.Name, pool.Spec.CIDR, err)
	}
	return fromV3(created), nil
}

// Update writes labels, annotations and spec, keeping fields this package
// does not model.
func (s *V3Store) Update(ctx context.Context, pool IPPool, opts WriteOptions) (IPPool, error) {
	cur, err := s.client.ProjectcalicoV3().IPPools().Get(ctx, pool.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return IPPool{}, notFound(pool.Name, err)
	}
	if err != nil {
		return IPPool{}, fmt.Errorf("getting %s ippool %q for update: %w", APIProjectCalicoV3, pool.Name, err)
	}
	obj := cur.DeepCopy()
	if pool.ResourceVersion != "" {
		obj.ResourceVersion = pool.ResourceVersion
	}
	obj.Labels = maps.Clone(pool.Labels)
	obj.Annotations = maps.Clone(pool.Annotations)
	specToV3(pool.Spec, &obj.Spec)
	release, err := holdFor(ctx, opts.Lock, opts.DryRun, fmt.Sprintf("not updating %s ippool %q", APIProjectCalicoV3, pool.Name))
	if err != nil {
		return IPPool{}, err
	}
	defer release()
	updated, err := s.client.ProjectcalicoV3().IPPools().Update(ctx, obj, metav1.UpdateOptions{DryRun: dryRun(opts.DryRun)})
	if err != nil {
		return IPPool{}, fmt.Errorf("updating %s ippool %q: %w", APIProjectCalicoV3, pool.Name, err)
	}
	return fromV3(updated), nil
}

// Delete deletes the named pool.
func (s *V3Store) Delete(ctx context.Context, name string, opts DeleteOptions) error {
	release, err := holdFor(ctx, opts.Lock, opts.DryRun, fmt.Sprintf("not deleting %s ippool %q", APIProjectCalicoV3, name))
	if err != nil {
		return err
	}
	defer release()
	err = s.client.ProjectcalicoV3().IPPools().Delete(ctx, name, deleteOptions(opts))
	if apierrors.IsNotFound(err) {
		return notFound(name, err)
	}
	if err != nil {
		return fmt.Errorf("deleting %s ippool %q: %w", APIProjectCalicoV3, name, err)
	}
	return nil
}

func dryRun(on bool) []string {
	if on {
		return []string{metav1.DryRunAll}
	}
	return nil
}

func deleteOptions(opts DeleteOptions) metav1.DeleteOptions {
	out := metav1.DeleteOptions{DryRun: dryRun(opts.DryRun)}
	if opts.UID != "" || opts.ResourceVersion != "" {
		out.Preconditions = &metav1.Preconditions{}
		if opts.UID != "" {
			uid := types.UID(opts.UID)
			out.Preconditions.UID = &uid
		}
		if opts.ResourceVersion != "" {
			rv := opts.ResourceVersion
			out.Preconditions.ResourceVersion = &rv
		}
	}
	return out
}

func fromV3(p *v3.IPPool) IPPool {
	out := IPPool{
		Name:            p.Name,
		UID:             string(p.UID),
		ResourceVersion: p.ResourceVersion,
		Labels:          maps.Clone(p.Labels),
		Annotations:     maps.Clone(p.Annotations),
		Spec: PoolSpec{
			CIDR:              p.Spec.CIDR,
			BlockSize:         p.Spec.BlockSize,
			IPIPMode:          EncapMode(p.Spec.IPIPMode),
			VXLANMode:         EncapMode(p.Spec.VXLANMode),
			NATOutgoing:       p.Spec.NATOutgoing,
			Disabled:          p.Spec.Disabled,
			DisableBGPExport:  p.Spec.DisableBGPExport,
			NodeSelector:      p.Spec.NodeSelector,
			NamespaceSelector: p.Spec.NamespaceSelector,
		},
	}
	for _, u := range p.Spec.AllowedUses {
		out.Spec.AllowedUses = append(out.Spec.AllowedUses, AllowedUse(u))
	}
	if p.Spec.AssignmentMode != nil {
		out.Spec.AssignmentMode = AssignmentMode(*p.Spec.AssignmentMode)
	}
	return out
}

// specToV3 writes the fields PoolSpec models into dst, leaving the rest.
func specToV3(s PoolSpec, dst *v3.IPPoolSpec) {
	dst.CIDR = s.CIDR
	dst.BlockSize = s.BlockSize
	dst.IPIPMode = v3.IPIPMode(s.IPIPMode)
	dst.VXLANMode = v3.VXLANMode(s.VXLANMode)
	dst.NATOutgoing = s.NATOutgoing
	dst.Disabled = s.Disabled
	dst.DisableBGPExport = s.DisableBGPExport
	dst.NodeSelector = s.NodeSelector
	dst.NamespaceSelector = s.NamespaceSelector
	dst.AllowedUses = nil
	for _, u := range slices.Clone(s.AllowedUses) {
		dst.AllowedUses = append(dst.AllowedUses, v3.IPPoolAllowedUse(u))
	}
	dst.AssignmentMode = nil
	if s.AssignmentMode != "" {
		m := v3.AssignmentMode(s.AssignmentMode)
		dst.AssignmentMode = &m
	}
}
