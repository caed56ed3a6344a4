// Package nodenet audits, plans, repairs and verifies what a node's kernel
// and files hold for the pod network, after the node's podCIDR (or the
// cluster's pod network) moved. nodecidr is what the API says about a node;
// nodenet is what the node itself still believes.
//
// When a flannel node gets a new subnet, the old one lingers on the host:
// cni0 keeps the old gateway, so the bridge CNI plugin refuses every new pod
// with `failed to set bridge addr: "cni0" already has an IP address
// different from ...`; flannel.1 keeps the old VTEP address; routes lead to
// subnets no node holds any more; host-local keeps reservations outside the
// new range; subnet.env names the old subnet; MASQUERADE rules (flannel's
// FLANNEL-POSTRTG and FLANNEL-FWD chains, and hand-made ones such as
// `-s X ! -d 172.7.0.0/16 -j MASQUERADE`) name old ranges. The usual fix is a
// blind `ip link delete cni0; rm -rf /var/lib/cni/...; iptables -F`, which
// also cuts off the pods still running and drops their reservations. This
// package does it in four steps, make before break:
//
//   - Audit (read-only) reads the node through netlink and iptables (in the
//     network namespace Want.NetNS names, or the caller's) and the files under
//     configurable roots (Want.RunFlannelDir, CNIDataDir, CNIConfDir, so an
//     agent with the host mounted at /host works), and returns typed findings
//     with severity, the object and the actions that fix each one. Old ranges
//     come from the Want or are inferred from the bridge, subnet.env and the
//     rules.
//   - NewPlan turns a report into a Plan: pure data, serialisable with
//     sigs.k8s.io/yaml, naming the node. Actions are ordered so pods stay
//     reachable: subnet.env, the VTEP and routes (also to old subnets peers'
//     pods still hold) and the rewritten rules first; leaked reservations
//     next; old rules, stale routes and the bridge's old gateway last. Every
//     action that takes away a range a live pod still uses is marked
//     deferred; without the complete list of live pods nothing is released.
//   - Apply validates the plan (an edited plan is refused), refuses a plan for
//     another node (ErrWrongNode) or another podCIDR, network or host layout
//     (ErrStalePlan), checks the host before the first change, then runs each
//     action after reading the current state again: it is idempotent, and a
//     run killed at any point is resumed by running it again. It never
//     releases a live pod's reservation (host-local's lock held), moves the
//     bridge address only once no live pod holds an old address, and rewrites
//     a rule by inserting its new form just before it and deleting the old one
//     (deferred while pods use the old range), never delete first. While old
//     pods remain it keeps RETURN rules in FLANNEL-POSTRTG so flannel's
//     MASQUERADE does not rewrite their source address.
//   - Verify audits again and returns a NotConvergedError while any finding of
//     error severity is left.
//
// Bad input changes nothing and gets an error naming the field and the
// value: a malformed Want (*FieldError, ErrInvalidInput), no RunFlannelDir
// (ErrHostPathMissing), no iptables binary, i.e. an nftables-only host
// (ErrNoIPTables), an iptables binary that is neither iptables-nft nor
// iptables-legacy (ErrUnknownBackend; set Want.IPTablesBackend), a plan for
// another node. The iptables backend is detected from the binary on PATH and
// reported in Report.IPTables.
//
// Only IPv4 and the flannel vxlan and host-gw backends with the bridge CNI
// plugin are handled. Audit, Apply and Verify need Linux; elsewhere they
// return an error matching errors.ErrUnsupported, and the rest of the package
// (Want, Report, Plan, NewPlan, DecodePlan, ParseCNIConfig) works everywhere.
package nodenet
