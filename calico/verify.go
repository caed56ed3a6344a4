package calico

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrInvalidTarget is wrapped by Verify's error when the target contradicts
// the cluster: an old CIDR other than the existing old pool's.
var ErrInvalidTarget = errors.New("verify target does not match the cluster")

// VerifyTarget is what Verify checks.
type VerifyTarget struct {
	// OldPool is the retired pool's name (it may be gone already).
	OldPool string `json:"oldPool"`
	// OldPoolUID, when set, must match the pool found under OldPool.
	OldPoolUID string `json:"oldPoolUID,omitempty"`
	// OldCIDR is the range no pod may use any more. When invalid, the
	// existing old pool's CIDR is used.
	OldCIDR netip.Prefix `json:"oldCIDR"`
	// NewPool, when set, must exist and be enabled.
	NewPool string `json:"newPool,omitempty"`
}

// VerifyResult is the proof (or disproof) that nothing is left on the old pool.
type VerifyResult struct {
	OldPool string       `json:"oldPool"`
	OldCIDR netip.Prefix `json:"oldCIDR"`
	// OldPoolExists and OldPoolStopped describe the old pool (stopped: it
	// gives no new addresses).
	OldPoolExists  bool   `json:"oldPoolExists"`
	OldPoolStopped bool   `json:"oldPoolStopped"`
	NewPool        string `json:"newPool,omitempty"`
	NewPoolExists  bool   `json:"newPoolExists,omitempty"`
	NewPoolEnabled bool   `json:"newPoolEnabled,omitempty"`
	// PodsLeft are live pods with an address in the old CIDR.
	PodsLeft []PodRef `json:"podsLeft,omitempty"`
	// Terminal counts finished pods whose status still shows an old address.
	Terminal int `json:"terminal,omitempty"`
	// Blocks is the IPAM state in the old CIDR.
	Blocks BlockReport `json:"blocks"`
	// Leaked are pod allocations in the old CIDR whose pod no longer exists;
	// Calico's kube-controllers release them after a grace period
	// (or `calicoctl ipam release`).
	Leaked []Allocation `json:"leaked,omitempty"`
	// Problems lists every reason the old pool is not yet clear, in words.
	Problems []string `json:"problems,omitempty"`
}

// Clear reports whether nothing is left on the old pool: no pod holds an
// address in it, the IPAM blocks hold none (when readable), and it gives no
// new addresses (or is gone).
func (v *VerifyResult) Clear() bool { return len(v.Problems) == 0 }

func (v *VerifyResult) liveLeft() int {
	n := 0
	for _, p := range v.PodsLeft {
		if !p.Terminating {
			n++
		}
	}
	return n
}

// Summary describes the result in one line.
func (v *VerifyResult) Summary() string {
	if v.Clear() {
		s := fmt.Sprintf("nothing left in %s: no pod address", v.OldCIDR)
		if v.Blocks.Available {
			s += fmt.Sprintf(", %d block(s) with no allocation", len(v.Blocks.Blocks))
		} else {
			s += " (IPAM blocks not checked: " + v.Blocks.Note + ")"
		}
		return s
	}
	return strings.Join(v.Problems, "; ")
}

// Verify checks, read-only, that no pod is left on the old pool: no live pod
// has an address in its CIDR, its IPAM blocks hold no allocation, it gives
// no new addresses, and the new pool (if named) exists and is enabled.
func Verify(ctx context.Context, cl Cluster, t VerifyTarget) (*VerifyResult, error) {
	if err := cl.check(); err != nil {
		return nil, err
	}
	v := &VerifyResult{OldPool: t.OldPool, OldCIDR: t.OldCIDR, NewPool: t.NewPool}
	if t.OldPool != "" {
		old, err := cl.Pools.Get(ctx, t.OldPool)
		switch {
		case errors.Is(err, ErrPoolNotFound):
		case err != nil:
			return nil, err
		default:
			if t.OldPoolUID != "" && old.UID != t.OldPoolUID {
				v.Problems = append(v.Problems, fmt.Sprintf("IPPool %q has UID %s, not %s: it was recreated", t.OldPool, old.UID, t.OldPoolUID))
			}
			v.OldPoolExists = true
			v.OldPoolStopped = old.AllocationStopped()
			pfx, err := old.Prefix()
			if err != nil {
				return nil, err
			}
			if v.OldCIDR.IsValid() && v.OldCIDR.Masked() != pfx {
				// Checking another range than the pool's would prove nothing.
				return nil, fmt.Errorf("%w: old CIDR %s is not the CIDR of IPPool %q (%s)", ErrInvalidTarget, v.OldCIDR, t.OldPool, pfx)
			}
			v.OldCIDR = pfx
			if !v.OldPoolStopped {
				v.Problems = append(v.Problems, fmt.Sprintf("IPPool %q is still enabled: new pods can get addresses from it", t.OldPool))
			}
		}
	}
	if !v.OldCIDR.IsValid() {
		return nil, fmt.Errorf("verify: old CIDR unknown: IPPool %q not found and no CIDR given", t.OldPool)
	}
	v.OldCIDR = v.OldCIDR.Masked()
	if t.NewPool != "" {
		np, err := cl.Pools.Get(ctx, t.NewPool)
		switch {
		case errors.Is(err, ErrPoolNotFound):
			v.Problems = append(v.Problems, fmt.Sprintf("new IPPool %q does not exist", t.NewPool))
		case err != nil:
			return nil, err
		default:
			v.NewPoolExists = true
			v.NewPoolEnabled = !np.AllocationStopped()
			if !v.NewPoolEnabled {
				v.Problems = append(v.Problems, fmt.Sprintf("new IPPool %q gives no addresses (disabled or nodeSelector %q)", t.NewPool, np.Spec.NodeSelector))
			}
		}
	}
	scan, err := ScanPods(ctx, cl.Kube, v.OldCIDR, ScanOptions{})
	if err != nil {
		return nil, err
	}
	v.PodsLeft = scan.Pods
	v.Terminal = len(scan.Terminal)
	if n := len(scan.Pods); n > 0 {
		names := make([]string, 0, min(n, 5))
		for _, p := range scan.Pods[:min(n, 5)] {
			names = append(names, p.String())
		}
		more := ""
		if n > 5 {
			more = fmt.Sprintf(" and %d more", n-5)
		}
		v.Problems = append(v.Problems, fmt.Sprintf("%d pod(s) still have addresses in %s: %s%s", n, v.OldCIDR, strings.Join(names, ", "), more))
	}
	v.Blocks, err = ReportBlocks(ctx, cl.Blocks, v.OldCIDR)
	if err != nil {
		return nil, err
	}
	if v.Blocks.Allocated > 0 {
		live, err := livePods(ctx, cl)
		if err != nil {
			return nil, err
		}
		for _, b := range v.Blocks.Blocks {
			for _, al := range b.Allocations {
				if al.Kind == AllocationPod && al.Pod != "" && !live[al.Namespace+"/"+al.Pod] {
					v.Leaked = append(v.Leaked, al)
				}
			}
		}
		msg := fmt.Sprintf("%d address(es) still allocated in %d IPAM block(s) in %s (%d pod, %d tunnel, %d other",
			v.Blocks.Allocated, countAllocated(v.Blocks.Blocks), v.OldCIDR, v.Blocks.PodAllocations, v.Blocks.TunnelAllocations, v.Blocks.OtherAllocations)
		if len(v.Leaked) > 0 {
			msg += fmt.Sprintf("; %d of them for pods that no longer exist, which Calico's kube-controllers release after a grace period", len(v.Leaked))
		}
		if v.Blocks.TunnelAllocations > 0 {
			msg += "; calico-node moves tunnel addresses to an enabled pool (restart calico-node if they stay)"
		}
		v.Problems = append(v.Problems, msg+")")
	}
	return v, nil
}

func countAllocated(bs []Block) int {
	n := 0
	for _, b := range bs {
		if len(b.Allocations) > 0 {
			n++
		}
	}
	return n
}

func livePods(ctx context.Context, cl Cluster) (map[string]bool, error) {
	out := map[string]bool{}
	cont := ""
	for {
		list, err := cl.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			return nil, fmt.Errorf("listing pods: %w", err)
		}
		for _, p := range list.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				out[p.Namespace+"/"+p.Name] = true
			}
		}
		cont = list.Continue
		if cont == "" {
			return out, nil
		}
	}
}
