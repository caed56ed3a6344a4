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
//     agent with the host mounted at /host works; of CNIConfDir it reads the
//     file the container runtime uses, picked by libcni's rules, and warns
//     when that file is not a bridge or flannel config), and returns
//     typed findings with severity, the object and the actions that fix each
//     one. Old ranges come from the Want or are inferred from the bridge,
//     subnet.env and the rules.
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
//   - set-transition: the bridge answers ARP for A.1 as a proxy (`ip neigh
//     add proxy A.1 dev <bridge>`), with `A.1/32 dev <bridge>-old` and
//     `A dev <bridge> metric 1` in the main table. <bridge>-old is a veth
//     whose peer <bridge>-olp stays down and out of the bridge
//     (TransitionLinks; the bridge's name is cut to 11 characters so both
//     fit IFNAMSIZ). The kernel answers from a proxy entry only when the
//     route to the target leaves through another device than the request's
//     (arp_process; forwarding on), which the /32 route provides; the
//     bridge plugin refuses a second IPv4 address on the bridge, and the
//     proxy entry is none. Then the bridge's set-address gives it the new
//     gateway and takes A.1 off it; Apply skips that while the proxy entry,
//     the /32 route or the route to A is missing.
//   - RETURN rules for A in both directions at the top of FLANNEL-POSTRTG
//     (masq-keep-missing), so flannel's MASQUERADE keeps old pods' source.
//   - on every other node, whose Want lists A in that node's
//     Peer.OldPodCIDRs, a route to A via the node's new VTEP address
//     (vxlan, `A via C.0 dev flannel.1 onlink`) or its node IP (host-gw).
//
// The standby, before the move. A podCIDR only changes by deleting and
// re-creating the Node, and flanneld on every other node forgets A at the
// delete (its route, A.0's neighbour entry and the FDB entry of the node's
// VTEP MAC) and learns C at the re-creation. A Want whose Peer lists a
// NextPodCIDR C (set by a runbook right before the delete) makes every other
// node stand by for A: `A via C.0 dev flannel.1 onlink metric 1`
// (StandbyMetric) beside flanneld's metric-0 route, a permanent neighbour
// entry C.0 -> the peer's VTEPMAC, and a default FDB entry (all-zeros MAC)
// to the peer's address, so frames for a MAC flanneld has just deleted
// still reach the node; with host-gw, `A via <node IP> metric 1`. flanneld's
// delete names its own next hop and MAC, so it leaves all of these alone.
// After the re-creation the standby route is the transition route above;
// the default FDB entry stays while the peer lists old subnets and goes
// with them (standby-left). Findings: standby-missing, standby-left.
//
// With vxlan, a peer's route `P via P.0 dev flannel.1 onlink` needs the
// permanent neighbour entry P.0 -> the peer's VTEPMAC; when a Peer names
// its VTEPMAC and is not about to move, a missing one is
// neighbour-missing, and Apply sets it as flanneld does. flanneld deletes
// it (with the route) when another node that had registered with P, a
// duplicate being fixed, is deleted; and a flanneld whose delete of an
// entry that is already gone fails retries it with backoff for up to a
// minute before it handles any other lease (seed 001 with several
// duplicates: the next duplicate's new subnet is learned only after that).
// flanneld keeps one lease per subnet, so the removal of a shared subnet's
// lease also deletes the FDB entry of the holder it cached last, and that
// holder's own removal then stalls on the failing delete. Want.FDB lists the
// entries the VTEP must hold (every other node's VTEP MAC and address, a
// duplicate's too); a missing one is fdb-missing, and Apply sets it.
//
// Audit reports the transition as transition-active (an error, so Verify
// does not pass, with its teardown planned and deferred) and a missing part
// as old-gateway-missing (neither the bridge nor the transition serves A.1:
// no /32 route through <bridge>-old, <bridge>-old down, the proxy entry or
// the route to A through the bridge missing), masq-keep-missing or
// route-missing, so an agent that audits again re-asserts it. Once the
// complete list of live pods holds no A address: transition-left removes
// the proxy entry and the route to A and deletes the veth pair, the RETURN
// rules go (rule-stale), peers' routes to A go (route-stale, or
// transition-route-left when PeersComplete is false), and Verify shows no
// trace of A.
//
// Why a proxy entry and not A.1 on a device beside the bridge. An earlier
// form kept A.1 on a veth whose peer was a port of the bridge. With
// br_netfilter (bridge-nf-call-iptables=1, every Kubernetes node), an old
// pod's frames to that veth's MAC are bridged first, and nat POSTROUTING
// sees them on the bridge hop, where flannel's `-s <Network> ! -d
// 224.0.0.0/4 -j MASQUERADE` rewrote traffic to destinations outside the
// pod network (the node's underlay address); conntrack binds NAT on that
// first pass and the routed pass cannot fix it. Whether it happened
// depended on which MAC the pod learned for A.1 (the bridge answered ARP
// for it too). Traffic from outside the pod network to old pods crossed the
// same extra bridged hop on its way in. With the proxy entry the only MAC
// for A.1 is the bridge's own, so old pods' traffic takes new pods' path:
// routed once by the bridge device, NATed once, and the host reaches them
// through the bridge. A.1/32 as a local address on another device (the
// bridge answers ARP for any local address when arp_ignore is 0) works
// too, but not with arp_ignore 1, which kube-proxy's IPVS strictARP sets;
// the proxy entry does not depend on arp_ignore. What it costs: A.1 is a
// next hop only, not a host address (packets to A.1 itself end at the
// down veth), and the kernel may delay its answer to a broadcast request
// by up to proxy_delay (0.8 s by default; answers to the unicast requests
// that refresh an entry are not delayed).
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
// reports the missing entry and the next Apply puts it back. A flanneld
// still running with the old lease when the node gets its new podCIDR
// takes the new lease for a peer's and routes the node's own new subnet
// through the VTEP; the restarted flanneld skips its own lease and never
// removes that route, which cuts off every new pod: Audit reports it as
// route-own-subnet and Apply deletes it.
//
// The bridge's MAC should be pinned (the bridge plugin does), so it does not
// change under the pods' ARP caches as ports come and go.
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
