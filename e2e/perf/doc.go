// Package perf measures cidrshift where speed and memory matter, on a real
// control plane (package harness) and on generated dumps:
//
//   - the node rewrite: the users' kubectl loop (get -o yaml | sed, delete,
//     apply) against examples/noderecreate and nodecidr.Apply on the same
//     500 kwok nodes, with API requests counted by the kube-apiserver
//     (apiserver_request_total, and an audit log that attributes each
//     request to its client by user agent), delete→create gaps, and the
//     apiserver's own ceiling for Node delete+create at rising concurrency;
//   - scale: examples/doctor on an offline dump of 5,000 nodes and 150,000
//     pods, and doctor and a noderecreate plan against a live cluster of
//     5,000 kwok nodes, under /usr/bin/time -v (wall time, peak RSS).
//
// None of it runs in CI: every test and benchmark skips unless
// CIDRSHIFT_PERF=1 is set, and under -short. Each test prints markdown
// tables that BENCHMARKS.md at the repository root is filled from:
//
//	cd e2e && CIDRSHIFT_PERF=1 go test -count=1 -timeout 60m -v -run TestNodeRewrite ./perf
//	cd e2e && CIDRSHIFT_PERF=1 go test -count=1 -timeout 30m -v -run TestScaleOffline ./perf
//	cd e2e && CIDRSHIFT_PERF=1 go test -count=1 -timeout 60m -v -run TestScaleLive ./perf
//
// CIDRSHIFT_PERF_NODES (default 500, node rewrite), CIDRSHIFT_PERF_SCALE_NODES
// (default 5000) and CIDRSHIFT_PERF_PODS (default 20000, live scale test)
// change the sizes; CIDRSHIFT_PERF_KWOK_LEASE (default 40, 0 for the
// harness's kwok as is), CIDRSHIFT_PERF_POD_WAIT_MIN (default 20) and
// CIDRSHIFT_PERF_MEM_LIMIT_MB (default 8192, the offline doctor's address-space
// limit) tune the runs, and CIDRSHIFT_PERF_OUT names a directory to write
// each test's markdown report to.
package perf
