package servicecidr

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LoadBalancerCleanupFinalizer is set by the cloud service controller on a
// Service it made a load balancer for; a recreated Service gets it anew from
// that controller, so Recreated does not copy it.
const LoadBalancerCleanupFinalizer = "service.kubernetes.io/load-balancer-cleanup"

// Recreated returns the Service to create in place of live, with newIPs as
// clusterIP/clusterIPs and every other field preserved: ports with their
// nodePorts, selector, labels, annotations, owner references, sessionAffinity
// and its config, ipFamilies, ipFamilyPolicy, internal and external traffic
// policy, healthCheckNodePort, loadBalancerClass, loadBalancerIP and source
// ranges, allocateLoadBalancerNodePorts, externalIPs,
// publishNotReadyAddresses, trafficDistribution. Server-set metadata (uid,
// resourceVersion, generation, creationTimestamp, deletion fields,
// managedFields) and the status are dropped: a create must not carry them.
// With no newIPs the live ClusterIPs are kept.
func Recreated(live *corev1.Service, newIPs []netip.Addr) *corev1.Service {
	out := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:            live.Name,
			Namespace:       live.Namespace,
			Labels:          cloneMap(live.Labels),
			Annotations:     cloneMap(live.Annotations),
			OwnerReferences: slices.Clone(live.OwnerReferences),
		},
		Spec: *live.Spec.DeepCopy(),
	}
	for _, f := range live.Finalizers {
		if f != LoadBalancerCleanupFinalizer {
			out.Finalizers = append(out.Finalizers, f)
		}
	}
	if len(newIPs) > 0 {
		out.Spec.ClusterIPs = make([]string, len(newIPs))
		for i, ip := range newIPs {
			out.Spec.ClusterIPs[i] = ip.String()
		}
		out.Spec.ClusterIP = out.Spec.ClusterIPs[0]
	}
	return out
}

// withoutNodePorts returns a copy with every nodePort and the
// healthCheckNodePort cleared, for a server-side dry run while the old
// Service still holds them.
func withoutNodePorts(s *corev1.Service) *corev1.Service {
	c := s.DeepCopy()
	for i := range c.Spec.Ports {
		c.Spec.Ports[i].NodePort = 0
	}
	c.Spec.HealthCheckNodePort = 0
	return c
}

// stripForJournal drops what a human reading the journal does not need.
func stripForJournal(s *corev1.Service) *corev1.Service {
	c := s.DeepCopy()
	c.ManagedFields = nil
	return c
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sameAddrs(a, b []netip.Addr) bool { return slices.Equal(a, b) }
