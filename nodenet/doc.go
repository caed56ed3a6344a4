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
//     reachable: subnet.env, the VTEP, the transition, the bridge's new
//     gateway, routes (also to old subnets peers' pods still hold) and the
//     rewritten rules first; leaked reservations next; old rules, stale
//     routes, the transition's teardown and a bridge's old gateway no pod
//     uses last. Every action that takes away a range a live pod still uses
//     is marked deferred; without the complete list of live pods nothing is
//     released.
//   - Apply validates the plan (an edited plan is refused), refuses a plan for
//     another node (ErrWrongNode) or another podCIDR, network or host layout
//     (ErrStalePlan), checks the host before the first change, then runs each
//     action after reading the current state again: it is idempotent, and a
//     run killed at any point is resumed by running it again. It never
//     releases a live pod's reservation (host-local's lock held), and
//     rewrites a rule by inserting its new form just before it and deleting
//     the old one (deferred while pods use the old range), never delete
//     first.
//   - Verify audits again and returns a NotConvergedError while any finding of
//     error severity is left.
//
// Make before break. While live pods hold addresses in the node's old subnet
// A (or the live pods are not known), the plan does not keep A's gateway on
// the bridge, which would make the bridge plugin refuse every new pod; it
// builds a transition:
//
//   - set-transition: the veth pair TransitionLinks(bridge), <bridge>-old
//     holding A.1/len and <bridge>-obr, its peer, a port of the bridge (the
//     bridge plugin refuses a second IPv4 address on the bridge itself); the
//     bridge's name is cut to 11 characters so both fit IFNAMSIZ. Then the
//     bridge's set-address gives it the new gateway and takes A.1 off it;
//     Apply skips that while the veth does not hold A.1.
//   - RETURN rules for A in both directions at the top of FLANNEL-POSTRTG
//     (masq-keep-missing), so flannel's MASQUERADE keeps old pods' source.
//   - on every other node, whose Want lists A in that node's
//     Peer.OldPodCIDRs, a route to A via the node's new VTEP address
//     (vxlan, `A via C.0 dev flannel.1 onlink`) or its node IP (host-gw).
//
// Audit reports the transition as transition-active (an error, so Verify
// does not pass, with its teardown planned and deferred) and a missing part
// as old-gateway-missing (no device holds A.1, or the veth is down or not a
// bridge port), masq-keep-missing or route-missing, so an agent that audits
// again re-asserts it. Once the complete list of live pods holds no A
// address: transition-left deletes the veth pair, the RETURN rules go
// (rule-stale), peers' routes to A go (route-stale, or transition-route-left
// when PeersComplete is false), and Verify shows no trace of A.
//
// What flanneld v0.28 removes of it: at start it clears FLANNEL-POSTRTG
// (CreateIP4Chain uses ClearChain), dropping the RETURN rules; its periodic
// iptables check deletes and re-appends only its own rules, leaving rules
// inserted above them. On a lease removal it deletes the route to that
// lease's subnet through that lease's next hop: with vxlan that is
// `A via A.0`, not the transition's `A via C.0`, but with host-gw it is
// `A via <node IP>`, exactly the transition route, when the old lease is
// deleted after the route was added. Its host-gw route check only re-adds
// its own routes. It never touches cni0 or the veth. In every case Audit
// reports the missing entry and the next Apply puts it back.
//
// The bridge's MAC should be pinned (the bridge plugin does), or adding and
// removing the veth port may change it under the pods' ARP caches. Known gap:
// with br_netfilter (bridge-nf-call-iptables=1), an old pod's packets to the
// veth's MAC are bridged, so nat POSTROUTING sees them on the bridge hop
// first and flannel's MASQUERADE may rewrite traffic to destinations
// outside the pod network (the node's own underlay address, the internet);
// traffic inside the pod network is kept by the RETURN rules.
//
// Bad input changes nothing and gets an error naming the field and the
// value: a malformed Want (*FieldError, ErrInvalidInput), no RunFlannelDir
// (ErrHostPathMissing), no iptables binary, i.e. an nftables-only host
// (ErrNoIPTables), an iptables binary that is neither iptables-nft nor
// iptables-legacy (ErrUnknownBackend; set Want.IPTablesBackend), a plan for
// another node, an OldPodCIDR too small for a gateway, a live pod at the old
// gateway, a VTEP named like the transition veth. The iptables backend is
// detected from the binary on PATH and reported in Report.IPTables.
//
// Only IPv4, iptables (not nftables) and the flannel vxlan and host-gw
// backends with the bridge CNI plugin are handled. Audit, Apply and Verify
// need Linux; elsewhere they return an error matching
// errors.ErrUnsupported, and the rest of the package (Want, Report, Plan, NewPlan, DecodePlan, ParseCNIConfig) works everywhere.
package nodenet
