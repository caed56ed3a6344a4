package migrate_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/cidrshift/cidrshift/migrate"
)

// A dump (kubectl get nodes,pods,configmaps -A -o yaml) of a flannel
// cluster: two nodes share a podCIDR and one announces host-gw in a vxlan
// cluster. Diagnose names both and proposes the fixes.
func ExampleDiagnose() {
	const dump = `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: a
    uid: 0b6c1f4e-a
    annotations: {flannel.alpha.coreos.com/backend-type: vxlan, flannel.alpha.coreos.com/public-ip: 192.0.2.1}
  spec: {podCIDR: 10.244.0.0/24, podCIDRs: [10.244.0.0/24]}
- apiVersion: v1
  kind: Node
  metadata:
    name: b
    uid: 0b6c1f4e-b
    annotations: {flannel.alpha.coreos.com/backend-type: host-gw, flannel.alpha.coreos.com/public-ip: 192.0.2.2}
  spec: {podCIDR: 10.244.0.0/24, podCIDRs: [10.244.0.0/24]}
- apiVersion: v1
  kind: Pod
  metadata: {name: kube-controller-manager-a, namespace: kube-system, labels: {component: kube-controller-manager}}
  spec:
    containers:
    - name: kube-controller-manager
      command: [kube-controller-manager, --cluster-cidr=10.244.0.0/16, --node-cidr-mask-size=24]
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: kube-flannel-cfg, namespace: kube-flannel}
  data:
    net-conf.json: '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}'
`
	ctx := context.Background()
	snap, err := migrate.ReadSnapshot(ctx, migrate.Input{Name: "dump.yaml", R: strings.NewReader(dump)})
	if err != nil {
		fmt.Println(err)
		return
	}
	rep, err := migrate.Diagnose(ctx, snap, migrate.DoctorOptions{Pods: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range rep.Findings {
		fmt.Println(f.Severity, f.Code, f.Objects[0])
	}
	for _, s := range rep.FixPlan.Steps {
		fmt.Println("move", s.Node, s.OldPodCIDRs, "->", s.NewPodCIDRs)
	}
	for _, r := range rep.Repairs {
		fmt.Println("repair", r.Node, r.Commands[0])
	}
	fmt.Println("healthy:", rep.Healthy)
	// Output:
	// error duplicate-podcidr Node a
	// error flannel-backend-mismatch Node b
	// move b [10.244.0.0/24] -> [10.244.1.0/24]
	// repair b kubectl annotate node b flannel.alpha.coreos.com/backend-type=vxlan --overwrite
	// healthy: false
}
