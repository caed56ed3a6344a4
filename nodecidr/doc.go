// Package nodecidr audits, plans and rewrites the podCIDRs of Kubernetes
// Nodes without losing a node, and predicts whether kube-controller-manager
// will start afterwards.
//
// A Node's spec.podCIDR(s) can be set once: an update may only change them
// from "" to a value. Giving a node another subnet therefore means deleting
// the Node object and creating it again. Done by hand (kubectl get -o yaml |
// sed | kubectl delete | kubectl apply) this loses nodes, labels and taints,
// and leaves the cluster one kube-controller-manager restart away from a crash
// loop. This package does it in four steps:
//
//   - Audit (read-only) finds nodes without podCIDRs, duplicated or
//     overlapping podCIDRs, podCIDRs outside the cluster CIDR or with the
//     wrong mask, spec.podCIDR and spec.podCIDRs[0] that disagree, families in
//     the wrong order, non-canonical values, pods whose IPs lie outside their
//     node's podCIDR, and how many node subnets are left per family. It pages
//     through Nodes and Pods, so clusters of thousands of nodes are fine, and
//     AuditNodes does the same for an offline dump (ReadDump streams
//     `kubectl get nodes,pods -A -o yaml` or `-o json` output).
//   - Preflight wraps cidr.ControllerManagerPreflight for Nodes: with proposed
//     --cluster-cidr flags, would kube-controller-manager start, and which
//     nodes would crash it? PreflightAfter asks the same once a plan is applied.
//   - MakePlan / PlanNodes choose new podCIDRs for the selected nodes:
//     ModeRebase keeps each node's offset in a new range, ModeAllocate takes
//     fresh subnets from the target layout, ModeFix moves only broken nodes (of
//     nodes sharing a subnet, the one holding it longest keeps it). Workers
//     come first by name, control-plane nodes last. The Plan serialises to
//     YAML or JSON and records every node's UID, resourceVersion and podCIDRs.
//   - Apply carries the plan out node by node: optionally cordon, write the
//     full Node to an on-disk journal and fsync it, delete the Node with UID
//     and resourceVersion preconditions, create it again with the new podCIDRs
//     and everything else kept, verify it, uncordon it, run the caller's hooks.
//     Nodes without podCIDRs get theirs by a patch. The gap between delete and
//     create (far below the pod garbage collector's 40 s) is measured and
//     reported as p50/p99/max.
//   - Verify (read-only) proves the end state: planned podCIDRs, metadata equal
//     to the backups, no podCIDR shared anywhere.
//
// Apply is safe to kill at any instant. Every journal record is durable
// before the call it announces; calling Apply again with the same plan and
// journal resumes: a node deleted but not created is recreated from its
// backup, a node its kubelet registered again meanwhile gets its podCIDRs by
// the allowed update with the backup's metadata merged back, nodes already
// moved are skipped, and a finished plan changes nothing. Transient API errors
// (a kube-apiserver restarting) are retried with backoff everywhere; the
// create that follows a delete is retried until it succeeds, even for a grace
// period after the caller's context ends, and the run stops before the next
// node if it cannot. A stale plan (a node recreated or re-addressed since
// planning) is refused before anything changes, as is a run lacking any
// permission (ClusterRoleYAML is the minimal ClusterRole).
//
// Moving a cluster to a new pod range takes this order, which the first field
// story got wrong: plan and apply the rebase for every node, workers first and
// control-plane nodes last (Plan.ControllerManager and Plan.Warnings say
// whether a node left behind would crash kube-controller-manager with the new
// --cluster-cidr); only then change --cluster-cidr. While the old flag is
// still in force, kube-controller-manager only logs the moved nodes; it would
// crash at its next start if any node were left outside the new range.
//
// Across operators and machines (ApplyOptions.Lock and ClusterJournal): a run
// holds a cluster-wide lock, the Lease LockScope in the examples, so a second
// Apply of any plan is refused while one runs, and checks it before every
// node delete; and every journal record is also written to ConfigMaps in the
// cluster before the call it guards, so a run whose machine was lost is
// resumed from another machine: ReadClusterJournal finds the unfinished run,
// and Apply of its plan with an empty JournalDir finishes it.
//
// The package nodecidrtest provides a fake API server for tests that enforces
// the Node rules this package relies on.
package nodecidr
