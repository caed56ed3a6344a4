// Package flannel audits and re-addresses flannel's pod network, in both of
// flannel's modes, without importing flannel itself: its rules are
// re-implemented from flannel v0.28's source with the cidr package and
// net/netip, and the places they come from are named in the doc comments.
//
// # etcd subnet manager
//
// flanneld (v0.18 and later) keeps its state in etcd through the v3 API
// under a prefix (--etcd-prefix, default /coreos.com/network): the network
// config at <prefix>/config and one lease per node at
// <prefix>/subnets/<subnet>, e.g. 10.5.34.0-24, or 10.5.34.0-24&fd00:10:244:5::-64
// for dual stack. A lease value is JSON naming the node's PublicIP and
// backend; it carries a 24 hour etcd lease that flanneld renews.
//
// Registry reads a consistent Snapshot (config, leases, their TTLs, and the
// keys flanneld cannot read), and Audit reports, with severities and the keys
// involved: leases outside the network or that flanneld would drop, duplicate
// and overlapping leases, leases of nodes that no longer exist, leases not
// renewed, mixed backends, and how many subnets are left.
//
// Changes follow Audit → Plan → Apply → Verify. PlanDelete, PlanMove,
// PlanSetNetwork and PlanPutConfig compute a Plan (plain data, serialisable
// with sigs.k8s.io/yaml) from a snapshot; Registry.Apply executes it, each step
// one etcd transaction that compares the key's mod revision with the one the
// plan read. A flanneld renewing its lease at the same moment changes that
// revision, so the step fails with a *ConflictError naming the key and the
// renewal is never overwritten. A lease move writes the unchanged value under
// the new key with the same etcd lease and deletes the old key in one
// transaction. Every step's result is visible in etcd, so Apply is idempotent:
// rerun after a crash or an etcd restart, it finishes the plan. The run is
// kept in etcd too, beside flannel's keys where flanneld never reads:
// <prefix>/cidrshift/run/<plan ID> holds the plan, and each step's
// transaction records there the key as it was before (RunKey, run.go), so
// another machine finds an unfinished run (UnfinishedRuns) and finishes it;
// a finished run's keys are deleted.
//
// The registry talks to etcd through the small KV interface: EtcdKV over
// go.etcd.io/etcd/client/v3 (TLS with client certificates, configured from
// flanneld's own --etcd-* inputs), or MemKV, an in-memory store with etcd's
// revision and lease semantics for tests and what-if runs.
//
// # kube subnet manager
//
// With --kube-subnet-mgr, node subnets are the nodes' podCIDRs and the
// network config is net-conf.json in the kube-flannel/kube-flannel-cfg
// ConfigMap. ReadNetConf and ReadNodes read them (with flanneld's node
// annotations), AuditKube predicts which nodes' flanneld will exit at start
// ("subnet ... doesn't contain ... PodCIDR"), and PlanNetConf / ApplyNetConf
// rewrite the network by editing only the Network value in the JSON text, with
// the ConfigMap's resourceVersion so a concurrent edit conflicts. Duplicate
// podCIDRs are the nodecidr package's concern.
//
// # On the nodes
//
// ParseSubnetEnv, SubnetEnv.Render and CheckSubnetEnv handle
// /run/flannel/subnet.env; CleanupSteps lists, as data, the commands an
// operator must run on a node whose subnet moved (delete cni0 and the backend
// device, clear the CNI IPAM directory, remove subnet.env, restart flanneld and
// the node's pods). The package never runs anything on a host.
package flannel
