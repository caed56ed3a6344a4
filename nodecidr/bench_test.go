package nodecidr

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

const (
	benchNodes       = 5000
	benchPodsPerNode = 30 // 150,000 pods
)

var bench struct {
	once  sync.Once
	c     *fake.Clientset
	nodes []corev1.Node
}

// benchCluster is 5,000 nodes in 10.64.0.0/10 with /24 podCIDRs, every
// 250th sharing its neighbour's subnet and every 500th without one, and
// 150,000 running pods, every 1000th with an IP outside its node's podCIDR.
func benchCluster() (*fake.Clientset, []corev1.Node) {
	bench.once.Do(func() {
		s := nodecidrtest.NewServer()
		for i := range benchNodes {
			sub := i
			if i%250 == 1 {
				sub = i - 1
			}
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%05d", i), Labels: map[string]string{"pool": fmt.Sprint(i % 7)}}}
			if i%500 != 7 {
				c := fmt.Sprintf("10.%d.%d.0/24", 64+sub/256, sub%256)
				n.Spec.PodCIDR, n.Spec.PodCIDRs = c, []string{c}
			}
			s.AddNode(n)
			for j := range benchPodsPerNode {
				ip := fmt.Sprintf("10.%d.%d.%d", 64+sub/256, sub%256, j+2)
				if (i*benchPodsPerNode+j)%1000 == 0 {
					ip = "10.255.255.9"
				}
				s.AddPod(&corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", j%20), Name: fmt.Sprintf("pod-%05d-%02d", i, j)},
					Spec:       corev1.PodSpec{NodeName: n.Name},
					Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
				})
			}
		}
		bench.c = fake.NewClientset()
		s.Install(bench.c)
		bench.nodes = s.Nodes()
	})
	return bench.c, bench.nodes
}

func benchLayout() cidr.NodeIPAMLayout {
	return cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{cidr.MustParse("10.64.0.0/10")}, NodeMasks: []int{24}}
}

// BenchmarkAudit audits 5,000 nodes and 150,000 pods through the fake API,
// page by page (500 per page).
func BenchmarkAudit(b *testing.B) {
	c, _ := benchCluster()
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		r, err := Audit(ctx, c, AuditOptions{Layout: benchLayout(), Pods: true})
		if err != nil || r.Nodes != benchNodes || r.Pods != benchNodes*benchPodsPerNode {
			b.Fatalf("audit: %v %+v", err, r)
		}
	}
}

// BenchmarkAuditNodes is the analysis alone: 5,000 nodes, no API.
func BenchmarkAuditNodes(b *testing.B) {
	_, nodes := benchCluster()
	b.ReportAllocs()
	for b.Loop() {
		if r := AuditNodes(nodes, nil, AuditOptions{Layout: benchLayout()}); len(r.Findings) == 0 {
			b.Fatal("no findings")
		}
	}
}

// BenchmarkPlanFix lists 5,000 nodes and plans new subnets for the broken ones.
func BenchmarkPlanFix(b *testing.B) {
	c, _ := benchCluster()
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		p, err := MakePlan(ctx, c, PlanOptions{Mode: ModeFix, Layout: benchLayout()})
		if err != nil || len(p.Steps) == 0 {
			b.Fatalf("plan: %v", err)
		}
	}
}

// BenchmarkPlanRebase lists 5,000 nodes and rebases the healthy ones to 10.128.0.0/10.
func BenchmarkPlanRebase(b *testing.B) {
	c, nodes := benchCluster()
	// Rebase needs a cluster without duplicates: plan for the nodes that are fine.
	var names []string
	bad := map[string]bool{}
	for _, n := range AuditNodes(nodes, nil, AuditOptions{Layout: benchLayout()}).Findings {
		for _, x := range n.Nodes {
			bad[x] = true
		}
	}
	for _, n := range nodes {
		if !bad[n.Name] {
			names = append(names, n.Name)
		}
	}
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		p, err := MakePlan(ctx, c, PlanOptions{Mode: ModeRebase, Names: names, Rebase: []RebasePair{{From: cidr.MustParse("10.64.0.0/10"), To: cidr.MustParse("10.128.0.0/10")}}})
		if err != nil || len(p.Steps) != len(names) {
			b.Fatalf("plan: %v", err)
		}
	}
}
