package nodecidr_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// ReadDump streams `kubectl get nodes,pods -A -o yaml` (or -o json), for
// example from os.Stdin or an opened file, and AuditNodes checks it.
func ExampleReadDump() {
	dump := `apiVersion: v1
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: worker-1
  spec:
    podCIDR: 10.244.1.0/24
    podCIDRs:
    - 10.244.1.0/24
- apiVersion: v1
  kind: Pod
  metadata:
    name: web
    namespace: default
  spec:
    nodeName: worker-1
  status:
    phase: Running
    podIP: 10.244.9.7
- apiVersion: v1
  kind: Service
  metadata:
    name: kubernetes
kind: List
metadata:
  resourceVersion: ""
`
	d, err := nodecidr.ReadDump(context.Background(), strings.NewReader(dump))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d node, %d pod %+v, %d skipped\n", len(d.Nodes), len(d.Pods), d.Pods[0], d.Skipped)
	layout := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, NodeMasks: []int{24}}
	for _, f := range nodecidr.AuditNodes(d.Nodes, d.Pods, nodecidr.AuditOptions{Layout: layout, Pods: true}).Findings {
		fmt.Println(f.Kind, f.Pods)
	}
	// Output:
	// 1 node, 1 pod {Namespace:default Name:web NodeName:worker-1 HostNetwork:false Phase:Running IPs:[10.244.9.7]}, 1 skipped
	// pod-ip-outside-podcidr [default/web 10.244.9.7]
}
