package calico

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// WorkloadKind says what controls a pod, which decides how it can be moved.
type WorkloadKind string

// The workload kinds.
const (
	KindDeployment  WorkloadKind = "Deployment"
	KindStatefulSet WorkloadKind = "StatefulSet"
	KindDaemonSet   WorkloadKind = "DaemonSet"
	// KindReplicaSet is a ReplicaSet without a Deployment: its pods can be
	// evicted (the ReplicaSet replaces them) but not rolled.
	KindReplicaSet WorkloadKind = "ReplicaSet"
	// KindJob pods are evicted; the Job decides whether to retry them.
	KindJob WorkloadKind = "Job"
	// KindOther is any other controller (an operator's custom resource, a
	// ReplicationController, ...): its pods are evicted.
	KindOther WorkloadKind = "Other"
	// KindBare is a pod without a controller: nothing recreates it, so it
	// is deleted only with explicit consent.
	KindBare WorkloadKind = "Pod"
	// KindStatic is a mirror pod of a kubelet static pod: the API cannot move
	// it; the node's manifest must be changed or the kubelet restarted.
	KindStatic WorkloadKind = "StaticPod"
)

// WorkloadRef identifies the controller of a pod.
type WorkloadRef struct {
	Kind      WorkloadKind `json:"kind"`
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	UID       string       `json:"uid,omitempty"`
	// OwnerKind and OwnerAPIVersion describe the controller when Kind is KindOther.
	OwnerKind       string `json:"ownerKind,omitempty"`
	OwnerAPIVersion string `json:"ownerAPIVersion,omitempty"`
}

// Key is a stable identifier such as "Deployment/kube-system/coredns".
func (w WorkloadRef) Key() string { return string(w.Kind) + "/" + w.Namespace + "/" + w.Name }

// String returns e.g. "Deployment kube-system/coredns".
func (w WorkloadRef) String() string {
	k := string(w.Kind)
	if w.Kind == KindOther && w.OwnerKind != "" {
		k = w.OwnerKind
	}
	return k + " " + w.Namespace + "/" + w.Name
}

// Rollable reports whether a rolling restart can move the workload's pods.
func (w WorkloadRef) Rollable() bool {
	return w.Kind == KindDeployment || w.Kind == KindStatefulSet || w.Kind == KindDaemonSet
}

// PodRef is a pod holding an address in the scanned range.
type PodRef struct {
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	UID       string          `json:"uid"`
	Node      string          `json:"node,omitempty"`
	IPs       []netip.Addr    `json:"ips"`
	Phase     corev1.PodPhase `json:"phase,omitempty"`
	// Terminating is true when the pod is being deleted already.
	Terminating bool        `json:"terminating,omitempty"`
	Owner       WorkloadRef `json:"owner"`
	// DNS marks the cluster DNS pods (kube-system, k8s-app=kube-dns), moved first.
	DNS bool `json:"dns,omitempty"`
}

// String returns "namespace/name".
func (p PodRef) String() string { return p.Namespace + "/" + p.Name }

// PodScan is the result of ScanPods.
type PodScan struct {
	CIDR netip.Prefix `json:"cidr"`
	// Pods are live pods with an address in CIDR, sorted by namespace and name.
	Pods []PodRef `json:"pods"`
	// HostNetwork counts pods skipped because they use the node's network.
	HostNetwork int `json:"hostNetwork"`
	// Terminal are Succeeded or Failed pods whose status still shows an
	// address in CIDR; they hold no address any more and need no move.
	Terminal []PodRef `json:"terminal,omitempty"`
	// BadIPs lists status.podIPs values that did not parse ("ns/name: value").
	BadIPs []string `json:"badIPs,omitempty"`
}

// ScanOptions narrows ScanPods.
type ScanOptions struct {
	// Namespace limits the scan; empty means all namespaces.
	Namespace string
	// PageSize is the list page size; 0 means 500.
	PageSize int64
}

// ScanPods finds every pod whose status.podIPs (or status.podIP) fall inside
// prefix, skipping hostNetwork pods, and resolves each pod's controller
// (ReplicaSet to its Deployment).
func ScanPods(ctx context.Context, kube kubernetes.Interface, prefix netip.Prefix, opts ScanOptions) (PodScan, error) {
	if !prefix.IsValid() {
		return PodScan{}, fmt.Errorf("scanning pods: invalid prefix %v", prefix)
	}
	prefix = prefix.Masked()
	scan := PodScan{CIDR: prefix}
	limit := opts.PageSize
	if limit <= 0 {
		limit = 500
	}
	owners := newOwnerResolver(kube)
	cont := ""
	for {
		list, err := kube.CoreV1().Pods(opts.Namespace).List(ctx, metav1.ListOptions{Limit: limit, Continue: cont})
		if err != nil {
			return PodScan{}, fmt.Errorf("listing pods: %w", err)
		}
		for i := range list.Items {
			pod := &list.Items[i]
			if pod.Spec.HostNetwork {
				scan.HostNetwork++
				continue
			}
			in, bad := PodIPsIn(pod.Status.PodIP, podIPStrings(pod), prefix)
			for _, b := range bad {
				scan.BadIPs = append(scan.BadIPs, pod.Namespace+"/"+pod.Name+": "+b)
			}
			if len(in) == 0 {
				continue
			}
			ref := PodRef{
				Namespace:   pod.Namespace,
				Name:        pod.Name,
				UID:         string(pod.UID),
				Node:        pod.Spec.NodeName,
				IPs:         in,
				Phase:       pod.Status.Phase,
				Terminating: pod.DeletionTimestamp != nil,
				DNS:         isDNSPod(pod),
			}
			if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				scan.Terminal = append(scan.Terminal, ref)
				continue
			}
			owner, err := owners.resolve(ctx, pod)
			if err != nil {
				return PodScan{}, err
			}
			ref.Owner = owner
			scan.Pods = append(scan.Pods, ref)
		}
		cont = list.Continue
		if cont == "" {
			break
		}
	}
	sortPods(scan.Pods)
	sortPods(scan.Terminal)
	return scan, nil
}

func sortPods(ps []PodRef) {
	slices.SortFunc(ps, func(a, b PodRef) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

func podIPStrings(pod *corev1.Pod) []string {
	out := make([]string, 0, len(pod.Status.PodIPs))
	for _, ip := range pod.Status.PodIPs {
		out = append(out, ip.IP)
	}
	return out
}

// PodIPsIn parses a pod's status.podIP and status.podIPs values (written by
// the kubelet: outside input) and returns the distinct addresses inside
// prefix, plus the values that did not parse. podIP is only used when podIPs
// is empty, as the API defines.
func PodIPsIn(podIP string, podIPs []string, prefix netip.Prefix) (in []netip.Addr, bad []string) {
	vals := podIPs
	if len(vals) == 0 && podIP != "" {
		vals = []string{podIP}
	}
	for _, v := range vals {
		a, err := netip.ParseAddr(strings.TrimSpace(v))
		if err != nil || a.Zone() != "" {
			bad = append(bad, fmt.Sprintf("%q", v))
			continue
		}
		a = a.Unmap()
		if prefix.Contains(a) && !slices.Contains(in, a) {
			in = append(in, a)
		}
	}
	return in, bad
}

// DNSLabel is the label of the cluster DNS pods (CoreDNS and kube-dns) in kube-system.
const DNSLabel = "k8s-app"

func isDNSPod(pod *corev1.Pod) bool {
	return pod.Namespace == metav1.NamespaceSystem && pod.Labels[DNSLabel] == "kube-dns"
}

type ownerResolver struct {
	kube kubernetes.Interface
	rs   map[string]WorkloadRef
}

func newOwnerResolver(kube kubernetes.Interface) *ownerResolver {
	return &ownerResolver{kube: kube, rs: map[string]WorkloadRef{}}
}

func (o *ownerResolver) resolve(ctx context.Context, pod *corev1.Pod) (WorkloadRef, error) {
	ctrl := metav1.GetControllerOf(pod)
	if ctrl == nil {
		return WorkloadRef{Kind: KindBare, Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}, nil
	}
	group := ""
	if i := strings.Index(ctrl.APIVersion, "/"); i >= 0 {
		group = ctrl.APIVersion[:i]
	}
	ref := WorkloadRef{Namespace: pod.Namespace, Name: ctrl.Name, UID: string(ctrl.UID)}
	switch {
	case ctrl.Kind == "Node" && group == "":
		return WorkloadRef{Kind: KindStatic, Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), OwnerKind: "Node", OwnerAPIVersion: ctrl.APIVersion}, nil
	case ctrl.Kind == "StatefulSet" && group == "apps":
		ref.Kind = KindStatefulSet
	case ctrl.Kind == "DaemonSet" && group == "apps":
		ref.Kind = KindDaemonSet
	case ctrl.Kind == "Job" && group == "batch":
		ref.Kind = KindJob
	case ctrl.Kind == "ReplicaSet" && group == "apps":
		key := pod.Namespace + "/" + ctrl.Name
		if r, ok := o.rs[key]; ok {
			return r, nil
		}
		ref.Kind = KindReplicaSet
		rs, err := o.kube.AppsV1().ReplicaSets(pod.Namespace).Get(ctx, ctrl.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return WorkloadRef{}, fmt.Errorf("resolving owner of pod %s/%s: getting ReplicaSet %s: %w", pod.Namespace, pod.Name, ctrl.Name, err)
		default:
			if d := metav1.GetControllerOf(rs); d != nil && d.Kind == "Deployment" && strings.HasPrefix(d.APIVersion, "apps/") {
				ref = WorkloadRef{Kind: KindDeployment, Namespace: pod.Namespace, Name: d.Name, UID: string(d.UID)}
			}
		}
		o.rs[key] = ref
	default:
		ref.Kind = KindOther
		ref.OwnerKind = ctrl.Kind
		ref.OwnerAPIVersion = ctrl.APIVersion
	}
	return ref, nil
}
