package nodecidr

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// MirrorPodAnnotation marks the API mirror of a static pod; deleting it does
// not restart the pod.
const MirrorPodAnnotation = "kubernetes.io/config.mirror"

// DeletePodsOptions selects the pods DeleteNodePods deletes on each node.
type DeletePodsOptions struct {
	// Namespace limits the pods to one namespace; empty means all.
	Namespace string
	// LabelSelector limits the pods by label, e.g. "app=flannel".
	LabelSelector string
	// IncludeHostNetwork also deletes hostNetwork pods. They use the node's
	// address, so only CNI agents (flannel, calico-node) need restarting.
	IncludeHostNetwork bool
}

// Validate checks the namespace (a DNS label, or empty) and the label
// selector; errors wrap ErrInvalidOptions and name the field and the value.
func (o DeletePodsOptions) Validate() error {
	if o.Namespace != "" {
		if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
			return fmt.Errorf("%w: namespace %q: %s", ErrInvalidOptions, o.Namespace, strings.Join(errs, "; "))
		}
	}
	if _, err := labels.Parse(o.LabelSelector); err != nil {
		return fmt.Errorf("%w: label selector %q: %w", ErrInvalidOptions, o.LabelSelector, err)
	}
	return nil
}

// DeleteNodePods returns a Hook that deletes the pods bound to each moved node
// that match opts (never mirror pods, never finished pods), so their
// controllers recreate them with addresses from the new podCIDR. Two common
// uses after a flannel node's podCIDR changed: first restart the node's
// flannel pod ({Namespace: "kube-flannel", LabelSelector: "app=flannel",
// IncludeHostNetwork: true}), then delete the node's other pods. (The stale
// cni0 bridge address must be removed on the host; no API can do that.)
//
// Each pod is deleted with a UID precondition, so a replacement with the same
// name is never deleted by a rerun.
func DeleteNodePods(client kubernetes.Interface, opts DeletePodsOptions) Hook {
	name := "delete-pods"
	if opts.Namespace != "" {
		name += " namespace=" + opts.Namespace
	}
	if opts.LabelSelector != "" {
		name += " selector=" + opts.LabelSelector
	}
	return Hook{
		Name:  name,
		Check: func() error { return opts.Validate() },
		Permissions: []Permission{
			{Verb: "list", Resource: "pods", Namespace: opts.Namespace},
			{Verb: "delete", Resource: "pods", Namespace: opts.Namespace},
		},
		Run: func(ctx context.Context, node *corev1.Node) error {
			var pods []corev1.Pod
			err := listPods(ctx, client, opts.Namespace, "spec.nodeName="+node.Name, opts.LabelSelector, DefaultPageSize,
				func() { pods = pods[:0] },
				func(p *corev1.Pod) {
					if _, mirror := p.Annotations[MirrorPodAnnotation]; mirror || (p.Spec.HostNetwork && !opts.IncludeHostNetwork) ||
						p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil {
						return
					}
					pods = append(pods, *p)
				})
			if err != nil {
				return fmt.Errorf("listing pods on node %s: %w", node.Name, err)
			}
			for i := range pods {
				p := &pods[i]
				uid := p.UID
				err := retryTransient(ctx, defaultRetry, "delete pod "+p.Namespace+"/"+p.Name, func(ctx context.Context) error {
					return client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
				})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					return fmt.Errorf("deleting pod %s/%s on node %s: %w", p.Namespace, p.Name, node.Name, err)
				}
			}
			return nil
		},
	}
}
