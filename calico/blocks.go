package calico

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// AllocationKind says what an IPAM allocation is for.
type AllocationKind string

// The allocation kinds.
const (
	AllocationPod    AllocationKind = "pod"
	AllocationTunnel AllocationKind = "tunnel"
	AllocationOther  AllocationKind = "other"
)

// Allocation is one address in use in an IPAM block.
type Allocation struct {
	IP       netip.Addr     `json:"ip"`
	Ordinal  int            `json:"ordinal"`
	HandleID string         `json:"handleID,omitempty"`
	Kind     AllocationKind `json:"kind"`
	// Namespace, Pod and Node come from the allocation's attributes, when Calico recorded them.
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Node      string `json:"node,omitempty"`
	// Type is Calico's attribute "type" (e.g. ipipTunnelAddress), when set.
	Type string `json:"type,omitempty"`
}

// Block is a Calico IPAM block (crd.projectcalico.org/v1 IPAMBlock).
type Block struct {
	Name string       `json:"name"`
	CIDR netip.Prefix `json:"cidr"`
	// Affinity is the raw affinity, e.g. "host:worker-1"; empty when the block
	// belongs to no host.
	Affinity string `json:"affinity,omitempty"`
	// Node is the host of a "host:" affinity.
	Node        string       `json:"node,omitempty"`
	Deleted     bool         `json:"deleted,omitempty"`
	Allocations []Allocation `json:"allocations,omitempty"`
}

// BlockAffinity is a crd.projectcalico.org/v1 BlockAffinity: a node's claim on a block.
type BlockAffinity struct {
	Name    string       `json:"name"`
	CIDR    netip.Prefix `json:"cidr"`
	Node    string       `json:"node"`
	State   string       `json:"state,omitempty"`
	Deleted bool         `json:"deleted,omitempty"`
}

// BlockSource reads Calico's IPAM state.
type BlockSource interface {
	// Blocks returns every IPAM block.
	Blocks(ctx context.Context) ([]Block, error)
	// Affinities returns every block affinity.
	Affinities(ctx context.Context) ([]BlockAffinity, error)
}

// ErrIPAMUnavailable means the IPAM CRDs are not served (for example with
// Calico's etcd datastore), so blocks cannot be inspected.
var ErrIPAMUnavailable = fmt.Errorf("calico IPAM CRDs (%s) are not served", IPAMBlocksV1.GroupResource())

// CRDBlockSource reads IPAMBlocks and BlockAffinities from the
// crd.projectcalico.org/v1 CRDs. Calico keeps them there with the Kubernetes
// datastore whichever API serves IPPools.
type CRDBlockSource struct {
	client dynamic.Interface
}

// NewCRDBlockSource returns a BlockSource over the dynamic client.
func NewCRDBlockSource(client dynamic.Interface) *CRDBlockSource {
	return &CRDBlockSource{client: client}
}

// Blocks lists every IPAMBlock.
func (s *CRDBlockSource) Blocks(ctx context.Context) ([]Block, error) {
	list, err := s.client.Resource(IPAMBlocksV1).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %w", ErrIPAMUnavailable, err)
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", IPAMBlocksV1.GroupResource(), err)
	}
	out := make([]Block, 0, len(list.Items))
	for i := range list.Items {
		b, err := BlockFromUnstructured(list.Items[i].Object)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// Affinities lists every BlockAffinity.
func (s *CRDBlockSource) Affinities(ctx context.Context) ([]BlockAffinity, error) {
	list, err := s.client.Resource(BlockAffinitiesV1).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %w", ErrIPAMUnavailable, err)
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", BlockAffinitiesV1.GroupResource(), err)
	}
	out := make([]BlockAffinity, 0, len(list.Items))
	for i := range list.Items {
		a, err := AffinityFromUnstructured(list.Items[i].Object)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// BlockFromUnstructured converts an IPAMBlock object, as decoded from JSON, to
// a Block. Values written by Calico are outside input: every type is checked,
// and an allocation pointing outside the block or its attributes is an error
// naming the field.
func BlockFromUnstructured(obj map[string]any) (Block, error) {
	u := unstructured.Unstructured{Object: obj}
	b := Block{Name: u.GetName()}
	bad := func(field string, v any, want string) error {
		return &ObjectError{Kind: "IPAMBlock", Name: b.Name, Field: field, Value: fmt.Sprint(v), Reason: "want " + want}
	}
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		return Block{}, bad("spec", obj["spec"], "an object")
	}
	cs, ok := spec["cidr"].(string)
	if !ok {
		return Block{}, bad("spec.cidr", spec["cidr"], "a CIDR string")
	}
	pfx, _, err := cidr.ParseLenient(cs)
	if err != nil {
		return Block{}, &ObjectError{Kind: "IPAMBlock", Name: b.Name, Field: "spec.cidr", Value: cs, Reason: err.Error(), err: err}
	}
	b.CIDR = pfx
	if v, ok := spec["affinity"]; ok && v != nil {
		s, ok := v.(string)
		if !ok {
			return Block{}, bad("spec.affinity", v, "a string")
		}
		b.Affinity = s
		b.Node = AffinityHost(s)
	}
	if v, ok := spec["deleted"]; ok && v != nil {
		d, ok := v.(bool)
		if !ok {
			return Block{}, bad("spec.deleted", v, "true or false")
		}
		b.Deleted = d
	}
	type attr struct {
		handle    string
		secondary map[string]string
	}
	var attrs []attr
	if v, ok := spec["attributes"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return Block{}, bad("spec.attributes", v, "a list")
		}
		for i, e := range list {
			m, ok := e.(map[string]any)
			if !ok && e != nil {
				return Block{}, bad(fmt.Sprintf("spec.attributes[%d]", i), e, "an object")
			}
			var a attr
			if h, ok := m["handle_id"]; ok && h != nil {
				s, ok := h.(string)
				if !ok {
					return Block{}, bad(fmt.Sprintf("spec.attributes[%d].handle_id", i), h, "a string")
				}
				a.handle = s
			}
			if sec, ok := m["secondary"]; ok && sec != nil {
				sm, ok := sec.(map[string]any)
				if !ok {
					return Block{}, bad(fmt.Sprintf("spec.attributes[%d].secondary", i), sec, "an object")
				}
				a.secondary = map[string]string{}
				for k, x := range sm {
					if s, ok := x.(string); ok {
						a.secondary[k] = s
					}
				}
			}
			attrs = append(attrs, a)
		}
	}
	if v, ok := spec["allocations"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return Block{}, bad("spec.allocations", v, "a list")
		}
		size := uint64(1) << min(63, uint(pfx.Addr().BitLen()-pfx.Bits()))
		if uint64(len(list)) > size {
			return Block{}, bad("spec.allocations", fmt.Sprintf("(%d entries)", len(list)), fmt.Sprintf("at most %d entries for a /%d block", size, pfx.Bits()))
		}
		for i, e := range list {
			if e == nil {
				continue
			}
			idx, ok := asInt(e)
			if !ok || idx < 0 || idx >= len(attrs) {
				return Block{}, bad(fmt.Sprintf("spec.allocations[%d]", i), e, fmt.Sprintf("an index into spec.attributes (0-%d)", len(attrs)-1))
			}
			ip, err := cidr.NthAddr(pfx, uint64(i))
			if err != nil {
				return Block{}, fmt.Errorf("IPAMBlock %q: spec.allocations[%d]: %w", b.Name, i, err)
			}
			a := attrs[idx]
			al := Allocation{IP: ip, Ordinal: i, HandleID: a.handle}
			if a.secondary != nil {
				al.Namespace = a.secondary["namespace"]
				al.Pod = a.secondary["pod"]
				al.Node = a.secondary["node"]
				al.Type = a.secondary["type"]
			}
			al.Kind = classifyAllocation(al)
			b.Allocations = append(b.Allocations, al)
		}
	}
	return b, nil
}

func classifyAllocation(a Allocation) AllocationKind {
	switch {
	case strings.HasSuffix(a.Type, "TunnelAddress"),
		strings.HasPrefix(a.HandleID, "ipip-tunnel-addr-"),
		strings.HasPrefix(a.HandleID, "vxlan-tunnel-addr-"),
		strings.HasPrefix(a.HandleID, "vxlan-v6-tunnel-addr-"),
		strings.HasPrefix(a.HandleID, "wireguard-tunnel-addr-"),
		strings.HasPrefix(a.HandleID, "wireguard-v6-tunnel-addr-"):
		return AllocationTunnel
	case a.Pod != "", strings.HasPrefix(a.HandleID, "k8s-pod-network."):
		return AllocationPod
	}
	return AllocationOther
}

// AffinityHost returns the node of a "host:<node>" affinity, or "".
func AffinityHost(affinity string) string {
	if h, ok := strings.CutPrefix(affinity, "host:"); ok {
		return h
	}
	return ""
}

// AffinityFromUnstructured converts a BlockAffinity object. spec.deleted is a
// string in the v1 CRD ("true"/"false", for compatibility with old releases);
// a boolean is accepted too.
func AffinityFromUnstructured(obj map[string]any) (BlockAffinity, error) {
	u := unstructured.Unstructured{Object: obj}
	a := BlockAffinity{Name: u.GetName()}
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		return BlockAffinity{}, &ObjectError{Kind: "BlockAffinity", Name: a.Name, Field: "spec", Value: fmt.Sprint(obj["spec"]), Reason: "want an object"}
	}
	cs, _ := spec["cidr"].(string)
	pfx, _, err := cidr.ParseLenient(cs)
	if err != nil {
		return BlockAffinity{}, &ObjectError{Kind: "BlockAffinity", Name: a.Name, Field: "spec.cidr", Value: cs, Reason: err.Error(), err: err}
	}
	a.CIDR = pfx
	a.Node, _ = spec["node"].(string)
	a.State, _ = spec["state"].(string)
	switch d := spec["deleted"].(type) {
	case bool:
		a.Deleted = d
	case string:
		a.Deleted = strings.EqualFold(d, "true")
	}
	return a, nil
}

// BlockReport is the IPAM state inside one range: the blocks, what they still
// hold, and which nodes claim them.
type BlockReport struct {
	CIDR netip.Prefix `json:"cidr"`
	// Available is false when the IPAM CRDs could not be read (Note says why).
	Available  bool            `json:"available"`
	Note       string          `json:"note,omitempty"`
	Blocks     []Block         `json:"blocks,omitempty"`
	Affinities []BlockAffinity `json:"affinities,omitempty"`
	// Allocated counts addresses in use, by kind.
	Allocated         int `json:"allocated"`
	PodAllocations    int `json:"podAllocations"`
	TunnelAllocations int `json:"tunnelAllocations"`
	OtherAllocations  int `json:"otherAllocations"`
}

// Clear reports whether the blocks were readable and hold no address.
// Affinities alone do not count: Calico releases them when the pool is deleted.
func (r BlockReport) Clear() bool { return r.Available && r.Allocated == 0 }

// ReportBlocks reads the blocks and affinities inside prefix. When the IPAM
// CRDs are not served it returns a report with Available false and no error.
func ReportBlocks(ctx context.Context, src BlockSource, prefix netip.Prefix) (BlockReport, error) {
	r := BlockReport{CIDR: prefix.Masked()}
	if src == nil {
		r.Note = "no IPAM block source configured"
		return r, nil
	}
	blocks, err := src.Blocks(ctx)
	if err != nil {
		if isUnavailable(err) {
			r.Note = err.Error()
			return r, nil
		}
		return BlockReport{}, err
	}
	affs, err := src.Affinities(ctx)
	if err != nil && !isUnavailable(err) {
		return BlockReport{}, err
	}
	r.Available = true
	for _, b := range blocks {
		if !r.CIDR.Overlaps(b.CIDR) {
			continue
		}
		r.Blocks = append(r.Blocks, b)
		for _, a := range b.Allocations {
			r.Allocated++
			switch a.Kind {
			case AllocationPod:
				r.PodAllocations++
			case AllocationTunnel:
				r.TunnelAllocations++
			default:
				r.OtherAllocations++
			}
		}
	}
	for _, a := range affs {
		if r.CIDR.Overlaps(a.CIDR) {
			r.Affinities = append(r.Affinities, a)
		}
	}
	slices.SortFunc(r.Blocks, func(a, b Block) int { return a.CIDR.Addr().Compare(b.CIDR.Addr()) })
	slices.SortFunc(r.Affinities, func(a, b BlockAffinity) int {
		if c := a.CIDR.Addr().Compare(b.CIDR.Addr()); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})
	return r, nil
}

func isUnavailable(err error) bool {
	return errors.Is(err, ErrIPAMUnavailable)
}

// ErrMalformed is wrapped by every *ObjectError.
var ErrMalformed = errors.New("malformed Calico object")

// ObjectError reports a Calico object read from the cluster whose field has
// a value this package cannot use.
type ObjectError struct {
	Kind   string
	Name   string
	Field  string
	Value  string
	Reason string
	err    error
}

// Error describes the problem in one line.
func (e *ObjectError) Error() string {
	return fmt.Sprintf("%s %q: %s %q: %s", e.Kind, e.Name, e.Field, e.Value, e.Reason)
}

// Is reports whether target is ErrMalformed.
func (e *ObjectError) Is(target error) bool { return target == ErrMalformed }

// Unwrap returns the underlying error, if any.
func (e *ObjectError) Unwrap() error { return e.err }
