package migrate_test

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

// flNode is a Ready node of a kube-subnet-manager flannel cluster.
func flNode(name, podCIDR string, created int) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
			CreationTimestamp: metav1.Unix(int64(1767225600+created), 0),
			Annotations:       map[string]string{"flannel.alpha.coreos.com/kube-subnet-manager": "true"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	if podCIDR != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	}
	return n
}

// A plan-mode run of the flannel migration against a fake cluster whose
// nodes w1 and w3 share a podCIDR and w4 has none: it widens the Network
// from 10.244.0.0/16 to 10.240.0.0/12 and changes nothing.
func ExampleFlannelPodCIDR() {
	kube, _ := nodecidrtest.New([]runtime.Object{
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: flannel.DefaultNetConfName, Namespace: flannel.DefaultNetConfNamespace},
			Data:       map[string]string{flannel.NetConfKey: `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`},
		},
		flNode("w1", "10.244.1.0/24", 0),
		flNode("w2", "10.244.2.0/24", 0),
		flNode("w3", "10.244.1.0/24", 3600), // younger: it moves
		flNode("w4", "", 3600),
	}...)

	m, err := migrate.FlannelPodCIDR(migrate.FlannelPodCIDROptions{
		Kube:            kube,
		Network:         netip.MustParsePrefix("10.240.0.0/12"),
		Namespace:       flannel.DefaultNetConfNamespace,
		ConfigMap:       flannel.DefaultNetConfName,
		FlannelSelector: "app=flannel",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	runner := migrate.Runner{Mode: migrate.ModePlan}
	rep, err := runner.Run(context.Background(), m)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("flannel Network %s -> %s\n", m.From(), m.To())
	for _, s := range rep.Steps {
		fmt.Printf("%d. %s [%s]\n", s.Number, s.Name, s.Status)
	}
	// The host work of the nodes the plan moves, as data (w4 had no
	// subnet, so its host has nothing to clean up).
	for _, h := range m.HostPlans() {
		if !h.From.IsValid() {
			fmt.Printf("%s: new subnet %s, no host steps\n", h.Node, h.To)
			continue
		}
		fmt.Printf("%s: %s -> %s, first host step: %s\n", h.Node, h.From, h.To, h.Steps[0].Command)
	}
	// Output:
	// flannel Network 10.244.0.0/16 -> 10.240.0.0/12
	// 1. fix-podcidrs [planned]
	// 2. set-network [planned]
	// 3. controller-manager [operator]
	// 4. rewrite-nodes [skipped]
	// 5. host-cleanup [planned]
	// w3: 10.244.1.0/24 -> 10.244.0.0/24, first host step: kubectl cordon w3
	// w4: new subnet 10.244.3.0/24, no host steps
}
