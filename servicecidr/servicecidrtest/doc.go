// Package servicecidrtest is a fake Kubernetes control plane for testing code
// that manages ServiceCIDRs and moves Services: a client-go fake clientset and
// a dynamic fake client whose reactors enforce the API server's real rules,
// so a fake cannot lie in the caller's favour.
//
// What it models (each from the Kubernetes source it mirrors):
//   - ServiceCIDR in networking.k8s.io v1, v1beta1 (typed clients) or
//     v1alpha1 (dynamic client only), with discovery serving exactly one;
//     spec.cidrs validation and immutability (only adding the second family);
//     the protection finalizer; Ready set by "kube-controller-manager" some
//     requests after creation; deletion that stays Terminating while an
//     address depends only on the ServiceCIDR.
//   - The ClusterIP allocator: a requested address outside every ServiceCIDR
//     fails with "failed to allocate IP X: the provided IP (X) is not in the
//     valid range. The range of valid IPs is ...", one in a ServiceCIDR that
//     is not Ready (yet) with "... the provided network does not match the
//     current range", a taken one with "... provided IP is already allocated";
//     IPAddress objects with spec.parentRef; NodePort allocation and
//     conflicts; optionally the Kubernetes 1.33 dual-write refusal.
//   - Services: clusterIP immutable on update, resourceVersion refused on
//     create, delete preconditions (UID, resourceVersion), dryRun=All stores
//     nothing, server-set uid/resourceVersion/creationTimestamp (the stock
//     fake sets none of them).
//   - kube-apiserver recreating default/kubernetes (and the "kubernetes"
//     ServiceCIDR) from its --service-cluster-ip-range, or not doing so yet
//     (HoldKubernetesService: a slow or stopped kube-apiserver).
//   - A process that dies: after KillAfter(n) every request fails.
//
// Nodes, pods and other objects go to the stock object tracker.
package servicecidrtest
