// Package peerbench compares cidrshift's subnet allocator with the one
// kube-controller-manager runs (k8s.io/kubernetes pkg/controller/nodeipam/ipam/cidrset,
// v1.36.3) on the same workloads, in the same run. It is its own module because
// importing k8s.io/kubernetes requires pinning every staging module.
//
//	cd e2e/peerbench && go test -run '^$' -bench . -benchmem -count 6 | tee new.txt
package peerbench
