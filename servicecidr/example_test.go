package servicecidr_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// The third field story: a kOps cluster whose Service range 100.64.0.0/13
// collides with Tailscale moves its Services to 172.24.0.0/15.
func Example() {
	ctx := context.Background()
	svc := func(ns, name, ip string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}}}}
	}
	cluster := servicecidrtest.MustNew(servicecidrtest.Options{
		GitVersion:   "v1.29.6",
		Version:      "v1alpha1", // ServiceCIDR was alpha in 1.29
		ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"100.64.0.0/13"}}},
		Services: []*corev1.Service{
			svc("default", "kubernetes", "100.64.0.1"),
			svc("kube-system", "kube-dns", "100.64.0.10"),
			svc("shop", "web", "100.64.3.7"),
			svc("shop", "db", corev1.ClusterIPNone),
		},
	})
	client, err := servicecidr.New(ctx, servicecidr.Options{Kube: cluster.Kube, Dynamic: cluster.Dynamic})
	if err != nil {
		fmt.Println(err)
		return
	}

	// The old range is what the cluster is running away from.
	_, err = servicecidr.Validate([]netip.Prefix{netip.MustParsePrefix("100.64.0.0/13")}, servicecidr.ValidateOptions{})
	fmt.Println(err)

	plan, err := client.Plan(ctx, servicecidr.PlanOptions{To: []netip.Prefix{netip.MustParsePrefix("172.24.0.0/15")}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range plan.Moves {
		fmt.Println("move", m.Key(), m.OldIPs, "->", m.NewIPs)
	}
	for _, s := range plan.Skipped {
		fmt.Println("skip", s.Namespace+"/"+s.Name)
	}
	for _, m := range plan.Manual {
		if m.Component == "kubelet" {
			fmt.Println("kubelet clusterDNS:", m.Old, "->", m.New)
		}
	}

	dir, _ := os.MkdirTemp("", "journal")
	defer os.RemoveAll(dir)
	res, err := client.Apply(ctx, plan, servicecidr.ApplyOptions{JournalDir: dir, PollInterval: time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("moved", len(res.Moved), "Services")
	fmt.Println("default/kubernetes:", res.Kubernetes)
	// Output:
	// service CIDR "100.64.0.0/13": overlaps well-known 100.64.0.0/10 (shared address space / CGNAT, used by Tailscale (RFC 6598)): cluster addresses overlap a special-purpose range; traffic to them may be routed elsewhere; choose another range (or allow well-known overlaps explicitly)
	// move kube-system/kube-dns [100.64.0.10] -> [172.24.0.10]
	// move shop/web [100.64.3.7] -> [172.24.3.7]
	// skip shop/db
	// kubelet clusterDNS: 100.64.0.10 -> 172.24.0.10
	// moved 2 Services
	// default/kubernetes: left at 100.64.0.1: after every kube-apiserver runs with --service-cluster-ip-range=172.24.0.0/15, delete it (or apply with --delete-kubernetes-service) and kube-apiserver recreates it at 172.24.0.1
}
