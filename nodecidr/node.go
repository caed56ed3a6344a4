package nodecidr

import (
	"cmp"
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultPageSize is how many objects one list request asks for.
const DefaultPageSize = 500

// Control-plane role labels: a node carrying either key is moved last.
const (
	LabelControlPlane = "node-role.kubernetes.io/control-plane"
	LabelMaster       = "node-role.kubernetes.io/master"
)

// PodCIDRsOf returns a Node's podCIDRs the way kube-apiserver reads a v1 Node:
// spec.podCIDRs, or spec.podCIDR alone when podCIDRs is empty, and only
// spec.podCIDR when both are set and disagree (podCIDR is authoritative for
// older clients). The result is nil for a node without a podCIDR.
func PodCIDRsOf(n *corev1.Node) []string {
	switch {
	case n.Spec.PodCIDR != "" && len(n.Spec.PodCIDRs) > 0 && n.Spec.PodCIDR != n.Spec.PodCIDRs[0]:
		return []string{n.Spec.PodCIDR}
	case len(n.Spec.PodCIDRs) > 0:
		return slices.Clone(n.Spec.PodCIDRs)
	case n.Spec.PodCIDR != "":
		return []string{n.Spec.PodCIDR}
	}
	return nil
}

// IsControlPlane reports whether n carries a control-plane (or legacy master) role label.
func IsControlPlane(n *corev1.Node) bool {
	_, cp := n.Labels[LabelControlPlane]
	_, m := n.Labels[LabelMaster]
	return cp || m
}

// sortNodes orders nodes the way every nodecidr run processes them: workers by
// name, then control-plane nodes by name.
func sortNodes(nodes []*corev1.Node) {
	slices.SortFunc(nodes, func(a, b *corev1.Node) int {
		ca, cb := IsControlPlane(a), IsControlPlane(b)
		if ca != cb {
			if ca {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Name, b.Name)
	})
}

// ListOptions selects and pages the Nodes (or Pods) a read looks at.
type ListOptions struct {
	// LabelSelector limits the nodes, in kubectl syntax ("role=worker,zone in (a,b)").
	LabelSelector string `json:"labelSelector,omitempty"`
	// PageSize is the list page size; zero means DefaultPageSize.
	PageSize int64 `json:"pageSize,omitempty"`
}

func (o ListOptions) pageSize() int64 {
	if o.PageSize <= 0 {
		return DefaultPageSize
	}
	return o.PageSize
}

// ListNodes lists Nodes page by page (limit/continue), retrying transient
// errors of each page, and restarting from the first page when the continue
// token has expired. The result is sorted by name.
func ListNodes(ctx context.Context, client kubernetes.Interface, opts ListOptions) ([]corev1.Node, error) {
	return listNodes(ctx, client, opts, defaultRetry)
}

func listNodes(ctx context.Context, client kubernetes.Interface, opts ListOptions, retry Retry) ([]corev1.Node, error) {
	var out []corev1.Node
	err := listPages(ctx, opts, func() { out = out[:0] }, func(lo metav1.ListOptions) (string, error) {
		var list *corev1.NodeList
		err := retryTransient(ctx, retry, "list nodes", func(ctx context.Context) error {
			var err error
			list, err = client.CoreV1().Nodes().List(ctx, lo)
			return err
		})
		if err != nil {
			return "", err
		}
		if r := list.RemainingItemCount; r != nil && *r > 0 && *r < 1<<20 {
			out = slices.Grow(out, len(list.Items)+int(*r))
		}
		out = append(out, list.Items...)
		return list.Continue, nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// listPages drives a paginated list: fetch returns the next continue token.
// An expired token (410 Gone) restarts the listing from the first page.
func listPages(ctx context.Context, opts ListOptions, reset func(), fetch func(metav1.ListOptions) (string, error)) error {
	lo := metav1.ListOptions{LabelSelector: opts.LabelSelector, Limit: opts.pageSize()}
	restarts := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		next, err := fetch(lo)
		if err != nil {
			if apierrors.IsResourceExpired(err) && lo.Continue != "" && restarts < 3 {
				restarts++
				lo.Continue = ""
				reset()
				continue
			}
			return err
		}
		if next == "" {
			return nil
		}
		lo.Continue = next
	}
}

// listPods calls fn for every matching pod, page by page; reset is called when
// an expired continue token restarts the listing.
func listPods(ctx context.Context, client kubernetes.Interface, namespace, fieldSelector, labelSelector string, pageSize int64, reset func(), fn func(*corev1.Pod)) error {
	return listPages(ctx, ListOptions{LabelSelector: labelSelector, PageSize: pageSize}, reset, func(lo metav1.ListOptions) (string, error) {
		lo.FieldSelector = fieldSelector
		var list *corev1.PodList
		err := retryTransient(ctx, defaultRetry, "list pods", func(ctx context.Context) error {
			var err error
			list, err = client.CoreV1().Pods(namespace).List(ctx, lo)
			return err
		})
		if err != nil {
			return "", err
		}
		for i := range list.Items {
			fn(&list.Items[i])
		}
		return list.Continue, nil
	})
}

// newNodeFrom returns the Node to create from a backup: every field kept
// except those the API server sets (uid, resourceVersion, creationTimestamp,
// generation, managedFields, deletion fields, selfLink), with spec.podCIDR and
// spec.podCIDRs set to podCIDRs. Status is kept unless emptyStatus.
func newNodeFrom(backup *corev1.Node, podCIDRs []string, emptyStatus bool) *corev1.Node {
	n := backup.DeepCopy()
	n.UID = ""
	n.ResourceVersion = ""
	n.CreationTimestamp = metav1.Time{}
	n.Generation = 0
	n.ManagedFields = nil
	n.DeletionTimestamp = nil
	n.DeletionGracePeriodSeconds = nil
	//lint:ignore SA1019 an old server's backup may still carry it; a create must not
	n.SelfLink = ""
	n.GenerateName = ""
	n.Spec.PodCIDRs = slices.Clone(podCIDRs)
	n.Spec.PodCIDR = ""
	if len(podCIDRs) > 0 {
		n.Spec.PodCIDR = podCIDRs[0]
	}
	if emptyStatus {
		n.Status = corev1.NodeStatus{}
	}
	return n
}
