// Package dataplane runs real packets for the e2e tests: every node is a
// network namespace on an underlay bridge that the test creates, running a
// real flanneld (and kube-proxy), and every pod is a network namespace made
// by a real CNI ADD (the flannel CNI plugin delegating to bridge and
// host-local) on its node.
//
// Nothing is ever added to the root network namespace except sockets on
// loopback: the control plane of the harness stays on 127.0.0.1, and a
// forwarder listening inside the "control" namespace on the underlay
// (198.51.100.1) relays node processes' connections to it. Every namespace name
// carries a per-run prefix (see Prefix); teardown removes everything, and a
// sweeper removes what runs killed before their teardown left behind.
//
// The tests need root and network namespaces. They skip with one line
// otherwise, unless CIDRSHIFT_REQUIRE_DATAPLANE=1, which turns a skip into a
// failure. They skip under -short.
package dataplane
