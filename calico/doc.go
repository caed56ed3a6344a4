// Package calico retires a Calico IP pool in favour of a new one on a live
// cluster: it reads and writes IPPools through either Calico API, validates
// pools by Calico's rules and cidrshift's, computes their capacity, moves
// every pod off the old pool in ways that respect disruption budgets, and
// proves that nothing is left on it before deleting it.
//
// # Pools
//
// PoolStore is one interface over a version-neutral IPPool with two
// implementations: V3Store (projectcalico.org/v3, through the clientset of
// github.com/projectcalico/api; Calico validates every write) and CRDStore
// (crd.projectcalico.org/v1 through the dynamic client; Calico's validation
// is bypassed, which is why this package validates). NewPoolStore picks one
// by discovery. Validate applies Calico's own IPPool rules with Calico's
// meaning; ValidateNewPool adds cidrshift's: inside the intended cluster
// CIDR, no overlap with the Service CIDR, the node network or another pool.
// Every broken rule is a *FieldError naming the pool, field and value.
// PoolCapacity gives blocks, addresses per block and nodes that can hold a
// block each, with warnings when the pool and the cluster CIDR or
// kube-proxy's clusterCIDR disagree.
//
// # Swap
//
// The swap follows cidrshift's Plan → Apply → Verify shape, after Calico's
// documented migration (add a pool, disable the old one, recreate the pods
// that hold old addresses, delete the old pool):
//
//  1. Plan reads the old pool, builds the new one (copying encapsulation,
//     NAT, node selector and allowed uses unless overridden), validates it,
//     finds every pod whose status.podIPs lie in the old pool (hostNetwork
//     pods skipped), resolves its controller (ReplicaSet to Deployment), and
//     decides how each workload moves. The SwapPlan serialises to YAML and
//     records the old pool's UID and resourceVersion.
//  2. Apply creates the new pool; disables the old one, or, when the Tigera
//     operator manages it (Installation "default" lists it), says what to
//     change in the Installation and stops (*OperatorChangeError) or polls
//     until the change is observed; moves the pods, cluster DNS first — by
//     default with a rolling restart of the Deployment, StatefulSet or
//     DaemonSet (the annotation kubectl rollout restart sets) and a wait for
//     the rollout, otherwise through the Eviction API, which respects
//     PodDisruptionBudgets (429s are retried with backoff and reported with
//     the budget waited for); bare pods only with consent; then verifies and
//     deletes the old pool only when nothing is left (unless forced).
//     Progress is journaled (fsynced) before every write, so a run killed at
//     any point resumes; writes can be dry runs (client or server); every
//     needed permission is checked before the first write.
//  3. Verify proves the end state: no live pod holds an old address, the IPAM
//     blocks in the old CIDR (crd.projectcalico.org/v1 IPAMBlocks, with their
//     allocations and affinities) hold none, the old pool gives no addresses.
//
// CRDManifests returns structural CRDs for the crd.projectcalico.org/v1
// kinds used (and a minimal operator Installation) to install into a test
// API server; package calicotest has rule-enforcing fakes, a simulation of
// the workload controllers and a small IPAM controller that works against a
// real API server too.
package calico
