// Package cidrshift is an SDK for re-addressing live Kubernetes clusters: the
// pod CIDR, each node's podCIDR, Calico IP pools, flannel subnets, the Service
// CIDR and the kubeadm settings that must agree with them.
//
// The work is split into packages that import downward only:
//
//   - cidr: pure address arithmetic (parsing, capacity, conflicts, allocator,
//     rebase, the kube-controller-manager start-up preflight).
//   - kubeadmcfg: kubeadm ClusterConfiguration, static-pod manifest flags,
//     kube-proxy and kubelet configuration.
//   - nodecidr: Node podCIDR audit, plan and crash-safe rewrite.
//   - calico: IPPool swap on either Calico API.
//   - flannel: etcd v3 subnet registry, kube-mode annotations, subnet.env.
//   - servicecidr: ServiceCIDR objects and moving Services to a new range.
//   - migrate: the one composer: a Step engine (journal, resume, dry-run,
//     operator pause, cluster lock) and the three migrations that span the
//     packages above.
//
// Every mutating feature follows Audit → Plan → Apply → Verify; the programs
// under examples/ are flags and output around the packages. TestImportGraph
// holds the packages to their floors.
package cidrshift
