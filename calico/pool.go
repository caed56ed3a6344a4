package calico

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/lease"
)

// API names the Calico API a PoolStore talks to.
type API string

const (
	// APIProjectCalicoV3 is projectcalico.org/v3, served by the Calico API
	// server (or, from Calico 3.32, by native v3 CRDs). Calico validates every
	// write on this path.
	APIProjectCalicoV3 API = "projectcalico.org/v3"
	// APICRDV1 is crd.projectcalico.org/v1, the CRDs that back the Kubernetes
	// datastore. Writes on this path bypass Calico's own validation.
	APICRDV1 API = "crd.projectcalico.org/v1"
)

// MetadataAnnotation is the annotation in which Calico keeps a resource's
// projectcalico.org/v3 metadata on its crd.projectcalico.org/v1 backing
// object. Stores in this package never change or drop it on update, and never
// copy it to another pool.
const MetadataAnnotation = "projectcalico.org/metadata"

// ManagedByLabel is the label the Tigera operator puts on the pools it manages
// (value "tigera-operator").
const ManagedByLabel = "app.kubernetes.io/managed-by"

// EncapMode is an IPPool's ipipMode or vxlanMode. The empty value means Never.
type EncapMode string

// The encapsulation modes Calico accepts.
const (
	EncapNever       EncapMode = "Never"
	EncapAlways      EncapMode = "Always"
	EncapCrossSubnet EncapMode = "CrossSubnet"
)

// Enabled reports whether the mode turns the encapsulation on (Always or CrossSubnet).
func (m EncapMode) Enabled() bool { return m == EncapAlways || m == EncapCrossSubnet }

// AllowedUse is one entry of an IPPool's allowedUses.
type AllowedUse string

// The uses Calico knows.
const (
	UseWorkload     AllowedUse = "Workload"
	UseTunnel       AllowedUse = "Tunnel"
	UseLoadBalancer AllowedUse = "LoadBalancer"
)

// AssignmentMode is an IPPool's assignmentMode. The empty value means Automatic.
type AssignmentMode string

// The assignment modes Calico accepts.
const (
	AssignmentAutomatic AssignmentMode = "Automatic"
	AssignmentManual    AssignmentMode = "Manual"
)

// Default block sizes Calico applies when blockSize is 0.
const (
	DefaultBlockSizeIPv4 = 26
	DefaultBlockSizeIPv6 = 122
)

// Block size limits Calico enforces (inclusive).
const (
	MinBlockSizeIPv4 = 20
	MaxBlockSizeIPv4 = 32
	MinBlockSizeIPv6 = 116
	MaxBlockSizeIPv6 = 128
)

// DisabledNodeSelector is the node selector that matches no node. A pool with
// it gives no new addresses, like a disabled pool; the Tigera operator
// documents it as one way to retire a pool it manages.
const DisabledNodeSelector = "!all()"

// PoolSpec is the spec of a Calico IPPool, the same in projectcalico.org/v3
// and crd.projectcalico.org/v1. Values are kept as stored, so a pool read
// from the v1 CRDs (which Calico does not validate) can be inspected even
// when it is malformed; Validate says what Calico would refuse.
type PoolSpec struct {
	// CIDR is the pool's range as stored, e.g. "10.233.64.0/18".
	CIDR string `json:"cidr"`
	// BlockSize is the prefix length of the blocks Calico IPAM cuts the pool
	// into; 0 means the default (26 for IPv4, 122 for IPv6).
	BlockSize int `json:"blockSize,omitempty"`
	// IPIPMode is Never, Always or CrossSubnet; empty means Never.
	IPIPMode EncapMode `json:"ipipMode,omitempty"`
	// VXLANMode is Never, Always or CrossSubnet; empty means Never.
	VXLANMode EncapMode `json:"vxlanMode,omitempty"`
	// NATOutgoing masquerades traffic from the pool to destinations outside all pools.
	NATOutgoing bool `json:"natOutgoing,omitempty"`
	// Disabled stops Calico IPAM from assigning new addresses from the pool;
	// addresses already assigned stay until their pods go.
	Disabled bool `json:"disabled,omitempty"`
	// DisableBGPExport stops the pool's routes from being exported over BGP.
	DisableBGPExport bool `json:"disableBGPExport,omitempty"`
	// NodeSelector selects the nodes that may use the pool; empty means all().
	NodeSelector string `json:"nodeSelector,omitempty"`
	// NamespaceSelector selects the namespaces whose pods may use the pool.
	NamespaceSelector string `json:"namespaceSelector,omitempty"`
	// AllowedUses lists what the pool is for; empty means Workload and Tunnel.
	AllowedUses []AllowedUse `json:"allowedUses,omitempty"`
	// AssignmentMode is Automatic or Manual; empty means Automatic.
	AssignmentMode AssignmentMode `json:"assignmentMode,omitempty"`
}

// IPPool is a Calico IP pool, independent of the API it was read through.
type IPPool struct {
	Name            string            `json:"name"`
	UID             string            `json:"uid,omitempty"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	// Annotations as stored. On the crd.projectcalico.org/v1 path this
	// includes MetadataAnnotation, which stores keep intact.
	Annotations map[string]string `json:"annotations,omitempty"`
	Spec        PoolSpec          `json:"spec"`
}

// DeepCopy returns a copy of p that shares no maps or slices with it.
func (p IPPool) DeepCopy() IPPool {
	out := p
	out.Labels = maps.Clone(p.Labels)
	out.Annotations = maps.Clone(p.Annotations)
	out.Spec.AllowedUses = slices.Clone(p.Spec.AllowedUses)
	return out
}

// Prefix parses the pool's CIDR the way Calico reads it (host bits dropped).
// Use Validate to learn whether Calico would accept the value as written.
func (p IPPool) Prefix() (netip.Prefix, error) {
	pfx, _, err := cidr.ParseLenient(p.Spec.CIDR)
	if err != nil {
		return netip.Prefix{}, &FieldError{Pool: p.Name, Field: "spec.cidr", Value: p.Spec.CIDR,
			Rule: RuleCIDRSyntax, Reason: "not a CIDR (want e.g. 10.20.0.0/16): " + err.Error(), err: err}
	}
	return pfx, nil
}

// EffectiveBlockSize returns the block size Calico uses for the pool: the
// spec value, or the family default when it is 0. It returns 0 when the CIDR
// cannot be parsed and no block size is set.
func (p IPPool) EffectiveBlockSize() int {
	if p.Spec.BlockSize != 0 {
		return p.Spec.BlockSize
	}
	pfx, err := p.Prefix()
	if err != nil {
		return 0
	}
	if pfx.Addr().Is4() {
		return DefaultBlockSizeIPv4
	}
	return DefaultBlockSizeIPv6
}

// EffectiveAllowedUses returns allowedUses with Calico's default applied.
func (p IPPool) EffectiveAllowedUses() []AllowedUse {
	if len(p.Spec.AllowedUses) == 0 {
		return []AllowedUse{UseWorkload, UseTunnel}
	}
	return slices.Clone(p.Spec.AllowedUses)
}

// AllocationStopped reports whether Calico IPAM gives no new addresses from
// the pool: it is disabled, or its node selector matches no node.
func (p IPPool) AllocationStopped() bool {
	return p.Spec.Disabled || p.Spec.NodeSelector == DisabledNodeSelector
}

// ManagedByOperator reports whether the pool carries the Tigera operator's
// managed-by label.
func (p IPPool) ManagedByOperator() bool {
	return p.Labels[ManagedByLabel] == "tigera-operator"
}

// WriteOptions tunes a create or update.
type WriteOptions struct {
	// DryRun asks the API server to validate the write without persisting it
	// (metav1.DryRunAll).
	DryRun bool
	// Lock, when set, is taken before the write and held until the call
	// returns (a dry run takes none). A run may pass the lock it holds: one
	// it no longer holds is refused before the write. Use the Lease of
	// LockScope.
	Lock Locker
}

// DeleteOptions tunes a delete.
type DeleteOptions struct {
	// DryRun asks the API server to validate the delete without persisting it.
	DryRun bool
	// UID, when set, is a precondition: the delete fails with a conflict when
	// the pool with that name has another UID (it was recreated meanwhile).
	UID string
	// ResourceVersion, when set, is a precondition on the pool's version.
	ResourceVersion string
	// Lock, when set, is taken before the delete and held until the call
	// returns (a dry run takes none). A run may pass the lock it holds: one
	// it no longer holds is refused before the delete. Use the Lease of
	// LockScope.
	Lock Locker
}

// holdFor takes l around one pool write that is not a dry run; what says
// what is not done when it cannot be taken or is no longer held.
func holdFor(ctx context.Context, l Locker, dryRun bool, what string) (release func(), err error) {
	if dryRun {
		return func() {}, nil
	}
	return lease.HoldFor(ctx, l, what)
}

// PoolStore reads and writes Calico IP pools through one Calico API.
// Implementations: V3Store (projectcalico.org/v3) and CRDStore
// (crd.projectcalico.org/v1); NewPoolStore picks one by discovery.
//
// Errors from the API server are wrapped with %w, so apierrors.IsConflict and
// friends still work; a missing pool wraps ErrPoolNotFound as well.
type PoolStore interface {
	// API names the API the store uses.
	API() API
	// List returns every pool, sorted by name.
	List(ctx context.Context) ([]IPPool, error)
	// Get returns the named pool.
	Get(ctx context.Context, name string) (IPPool, error)
	// Create creates a pool. UID and ResourceVersion are ignored, and on the
	// v1 path MetadataAnnotation is not copied (it belongs to another object).
	Create(ctx context.Context, pool IPPool, opts WriteOptions) (IPPool, error)
	// Update writes the pool's labels, annotations and spec. It reads the
	// stored object first and changes only the fields this package models, so
	// fields it does not know survive; pool.ResourceVersion, when set, must
	// match (optimistic concurrency), otherwise the stored version is used.
	Update(ctx context.Context, pool IPPool, opts WriteOptions) (IPPool, error)
	// Delete deletes the named pool.
	Delete(ctx context.Context, name string, opts DeleteOptions) error
}

// ErrPoolNotFound means the named pool does not exist.
var ErrPoolNotFound = errors.New("IPPool not found")

// ErrNoCalicoAPI means neither projectcalico.org/v3 nor crd.projectcalico.org/v1
// ippools are served by the cluster.
var ErrNoCalicoAPI = errors.New("no Calico IPPool API served (neither projectcalico.org/v3 nor crd.projectcalico.org/v1 ippools)")

func notFound(name string, err error) error {
	return fmt.Errorf("%w: %q: %w", ErrPoolNotFound, name, err)
}

func sortPools(pools []IPPool) {
	slices.SortFunc(pools, func(a, b IPPool) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
}

// withoutMetadataAnnotation returns a copy of m without MetadataAnnotation (nil if empty).
func withoutMetadataAnnotation(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k != MetadataAnnotation {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
