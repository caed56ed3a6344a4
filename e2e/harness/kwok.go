package harness

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kwok plays the kubelet of every Node carrying this annotation: it makes
// the Node Ready, keeps its Lease fresh, and runs its pods (Running, with
// an IP from the Node's spec.podCIDRs).
const (
	KwokNodeAnnotation      = "kwok.x-k8s.io/node"
	KwokNodeAnnotationValue = "fake"
)

// KwokNode returns a Node that kwok manages, labelled like a kubelet would
// label it (kubernetes.io/hostname, kubernetes.io/os, kubernetes.io/arch)
// plus labels. Set Spec.PodCIDR and Spec.PodCIDRs (both, to the same first
// value) to create it with a podCIDR instead of letting
// kube-controller-manager allocate one.
func KwokNode(name string, labels map[string]string) *corev1.Node {
	l := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"type":                   "kwok",
	}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      l,
			Annotations: map[string]string{KwokNodeAnnotation: KwokNodeAnnotationValue},
		},
	}
}
