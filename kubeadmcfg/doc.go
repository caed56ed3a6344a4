// Package kubeadmcfg reads, checks and rewrites every place a kubeadm
// cluster writes its CIDRs down:
//
//   - the ClusterConfiguration in ConfigMap kube-system/kubeadm-config
//     (kubeadm.k8s.io/v1beta3 and v1beta4): networking.podSubnet,
//     serviceSubnet, dnsDomain, and the apiServer / controllerManager
//     extraArgs in both shapes (a map in v1beta3, a list of {name, value} in
//     v1beta4);
//   - the static-pod manifests kube-controller-manager.yaml and
//     kube-apiserver.yaml: --cluster-cidr, --node-cidr-mask-size[-ipv4|-ipv6],
//     --service-cluster-ip-range, --allocate-node-cidrs;
//   - kube-proxy's clusterCIDR (ConfigMap kube-proxy, key config.conf) and the
//     kubelet's clusterDNS and clusterDomain (ConfigMap kubelet-config, key
//     kubelet).
//
// Documents are kept as the bytes they were read from. A setter edits only
// the value concerned (a scalar replaced, a line inserted or removed): fields
// this package does not know, key order, comments, quoting and the apiVersion
// survive, and a document read and written back without a change is
// byte-for-byte identical. Every edit is read back and must mean exactly what
// was asked, or it is refused. Static-pod manifests are never reformatted —
// the kubelet restarts the pod on any change — and are written atomically
// (WriteFileAtomic, ApplyManifestChanges).
//
// Check compares all of these with each other, with the nodes' podCIDRs and
// with the CNI's pools, and reports every disagreement as a Finding naming
// both sources; it runs cidr.ControllerManagerPreflight on
// kube-controller-manager's flags so a node that would crash-loop it is found
// before a restart does. NewPlan turns a new pod CIDR, Service CIDR or node
// mask into the list of edits and the order that keeps kube-controller-manager
// and kube-apiserver running (nodes move before --cluster-cidr changes; a new
// ServiceCIDR exists before --service-cluster-ip-range changes; clusterDNS
// moves with the DNS Service). Every source that disagrees with the intent is
// work (the nodes too, when kube-controller-manager's manifest is not read),
// so a plan made after a partial change finishes it. Apply makes the
// ConfigMap edits with the resourceVersion the plan read, so a concurrent
// edit is refused; the manifest edits are rendered as unified diffs and
// rewritten files for the operator to apply on each control-plane node.
//
// The package depends on cidr only among the cidrshift packages. Moving nodes,
// CNI pools and Services is the job of nodecidr, calico, flannel and
// servicecidr; a plan names those steps in order.
package kubeadmcfg
