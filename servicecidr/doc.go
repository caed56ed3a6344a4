// Package servicecidr manages Kubernetes ServiceCIDRs on every API version
// that ever served them, and moves Services to a new range without breaking
// cluster DNS.
//
// # ServiceCIDR access
//
// New discovers the newest served version of networking.k8s.io ServiceCIDR:
// v1 (Kubernetes 1.33+, on by default), v1beta1 (1.31+, off by default until
// enabled with --runtime-config) through the typed clients, and v1alpha1
// (1.29-1.30, gone from k8s.io/api) through the dynamic client. When none is
// served, the error says what to enable for the cluster's version. A Client
// lists, gets, creates, deletes (never the last usable one) and waits for
// ServiceCIDRs, shows which ServiceCIDR holds each ClusterIP (through
// IPAddress objects where served, by range math otherwise) and explains a
// stuck deletion: which addresses and Services still hold a Terminating
// ServiceCIDR.
//
// # Moving Services: Audit, Plan, Apply, Verify
//
// Validate checks a new range: canonical CIDRs, one per family, usable size
// (including the IPv6 /64 floor and kube-apiserver's flag limit), and
// conflicts with pod ranges, node networks and special-purpose ranges such as
// 100.64.0.0/10, where Tailscale and carrier-grade NAT live.
//
// Client.Plan (or the pure BuildPlan) computes a serialisable Plan: every
// Service with a ClusterIP in the old range gets a new address, by default at
// the same offset (100.64.0.10 in 100.64.0.0/13 becomes 172.24.0.10 in
// 172.24.0.0/15, so the DNS Service keeps its tenth address and one kubelet
// clusterDNS change covers every node). Headless and ExternalName Services
// have nothing to move; LoadBalancer Services stay unless asked, because
// their external address may change. The DNS Service moves first;
// default/kubernetes is not recreated by Apply: kube-apiserver recreates it
// in the new range once it runs with the new --service-cluster-ip-range. The
// plan lists what it cannot change itself (apiserver and controller-manager
// flags, the serving certificate's SAN, kubelet clusterDNS, pods to restart)
// and records UIDs and resourceVersions, so Apply refuses a stale plan.
//
// Client.Apply follows the documented procedure: create the new ServiceCIDR
// and wait until it is Ready, optionally mark the old one for deletion (it
// stays Terminating), then delete and recreate each Service with every field
// but clusterIP/clusterIPs preserved (nodePorts included). Each Service is
// written to an on-disk journal and fsynced before its delete, so a process
// killed at any instant loses nothing: running Apply again with the same
// journal finishes the job, and running it on a finished plan does nothing.
// It checks permissions first, supports client and server dry runs, reports
// progress through a callback, measures how long each Service was absent,
// retries creates while the new range is not yet allocatable, and explains
// Kubernetes 1.33's allocator dual-write refusal: on 1.33 kube-apiserver must
// be restarted with --feature-gates=DisableAllocatorDualWrite=true along with
// the new --service-cluster-ip-range (the plan says so in its warnings and
// manual steps), or it refuses every address of the new range. Deleting default/kubernetes
// (when asked) is journaled too: if the run dies before kube-apiserver has
// recreated it, Recover reports it absent, Plan with the journal keeps it in
// the plan, and Apply waits for it. Each old ServiceCIDR Apply deletes is
// recorded in the journal, as it was, before its delete.
//
// Client.Verify proves the end state, including that default/kubernetes
// exists at the first address of the new range.
//
// The servicecidrtest subpackage is a fake control plane whose reactors
// enforce the API server's rules, for tests of code built on this package.
package servicecidr
