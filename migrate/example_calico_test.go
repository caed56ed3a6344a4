package migrate_test

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
	"github.com/cidrshift/cidrshift/migrate"
)

// Story 1 planned on fake clients: a Calico cluster whose pods use
// 10.233.64.0/18 (/24 per node), next to the Service CIDR 10.233.0.0/18,
// moves to 10.200.0.0/16. A plan-mode run reads the cluster, checks every
// input and describes the nine steps; it writes nothing.
func ExampleCalicoPodCIDR() {
	node := func(name, podCIDR, ip string, controlPlane bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if controlPlane {
			n.Labels["node-role.kubernetes.io/control-plane"] = ""
		}
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		return n
	}
	kube, _ := calicotest.NewKube(
		node("master1", "10.233.66.0/24", "192.168.10.1", true),
		node("worker1", "10.233.64.0/24", "192.168.10.11", false),
		node("worker2", "10.233.65.0/24", "192.168.10.12", false),
	)
	accesstest.Authorize(kube) // the fake answers permission checks: all allowed
	dyn, _ := calicotest.NewDynamic(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
		"metadata": map[string]any{"name": "default-ipv4-ippool"},
		"spec":     map[string]any{"cidr": "10.233.64.0/18", "blockSize": int64(26), "vxlanMode": "Always", "natOutgoing": true},
	}})

	m, err := migrate.CalicoPodCIDR(migrate.CalicoPodCIDROptions{
		Cluster:     calico.Cluster{Kube: kube, Pools: calico.NewCRDStore(dyn), Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn},
		To:          netip.MustParsePrefix("10.200.0.0/16"),
		ServiceCIDR: netip.MustParsePrefix("10.233.0.0/18"),
		NodeMask:    24,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	rep, err := (&migrate.Runner{Mode: migrate.ModePlan}).Run(context.Background(), m)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s -> %s, pool %s -> %s\n", m.From(), m.To(), m.OldPool(), m.NewPool())
	for _, s := range rep.Steps {
		fmt.Printf("%d. %s [%s]\n", s.Number, s.Name, s.Status)
		if s.Name == migrate.CalicoStepNodes {
			for _, d := range s.Details {
				fmt.Println("   " + d)
			}
		}
	}
	// Output:
	// 10.233.64.0/18 -> 10.200.0.0/16, pool default-ipv4-ippool -> ippool-10-200-0-0-16
	// 1. preflight [planned]
	// 2. add-pool [planned]
	// 3. disable-old-pool [planned]
	// 4. move-nodes [planned]
	//    recreate worker1: 10.233.64.0/24 -> 10.200.0.0/24
	//    recreate worker2: 10.233.65.0/24 -> 10.200.1.0/24
	//    recreate master1 (control plane): 10.233.66.0/24 -> 10.200.2.0/24
	// 5. kubeadm-config [planned]
	// 6. controller-manager-flags [operator]
	// 7. move-workloads [planned]
	// 8. verify [planned]
	// 9. delete-old-pool [planned]
}
