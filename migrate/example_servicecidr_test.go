package migrate_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// ExampleServiceCIDR moves story 3's Service range (100.64.0.0/13, which
// collides with Tailscale) to 172.24.0.0/15 on a fake control plane: the
// plan first, then the run, which pauses for the operator's kube-apiserver
// flag edit, and the rerun that finishes once the operator says so.
func ExampleServiceCIDR() {
	ctx := context.Background()
	svc := func(ns, name, ip string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}}}}
	}
	cluster := servicecidrtest.MustNew(servicecidrtest.Options{
		ServiceCIDRs:   []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"100.64.0.0/13"}}},
		APIServerRange: "100.64.0.0/13",
		Services: []*corev1.Service{
			svc("default", "kubernetes", "100.64.0.1"),
			svc("kube-system", "kube-dns", "100.64.0.10"),
			svc("shop", "web", "100.64.3.7"),
		},
	})
	client, err := servicecidr.New(ctx, servicecidr.Options{Kube: cluster.Kube, Dynamic: cluster.Dynamic})
	if err != nil {
		fmt.Println(err)
		return
	}
	opts := migrate.ServiceCIDROptions{Client: client, To: []netip.Prefix{netip.MustParsePrefix("172.24.0.0/15")},
		PollInterval: time.Millisecond, ReadyTimeout: 5 * time.Second, DrainTimeout: 5 * time.Second}
	m, err := migrate.ServiceCIDR(opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	dir, _ := os.MkdirTemp("", "journal")
	defer os.RemoveAll(dir)
	runner := migrate.Runner{JournalDir: filepath.Join(dir, "j")}

	plan, err := runner.Plan(ctx, m)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("plan:", m.From(), "->", m.To())
	for _, s := range plan.Steps {
		fmt.Printf("  %s [%s]\n", s.Name, s.Status)
	}

	runner.Mode = migrate.ModeApply
	rep, err := runner.ApplyPlan(ctx, m, plan)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("paused at", rep.Waiting.Step)

	// The operator restarted the control plane with the new range.
	if err := cluster.SetAPIServerRange("172.24.0.0/15"); err != nil {
		fmt.Println(err)
		return
	}
	opts.Continue = true
	if m, err = migrate.ServiceCIDR(opts); err != nil {
		fmt.Println(err)
		return
	}
	rep, err = runner.Run(ctx, m)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range rep.Steps {
		fmt.Printf("  %s [%s]\n", s.Name, s.Status)
	}
	web, _ := cluster.Service("shop", "web")
	fmt.Println("shop/web at", web.Spec.ClusterIP)
	// Output:
	// plan: [100.64.0.0/13] -> [172.24.0.0/15]
	//   preflight [planned]
	//   add-servicecidr [planned]
	//   move-services [planned]
	//   node-config [planned]
	//   control-plane-flags [operator]
	//   retire-old-range [planned]
	// paused at control-plane-flags
	//   preflight [completed]
	//   add-servicecidr [done]
	//   move-services [done]
	//   node-config [done]
	//   control-plane-flags [completed]
	//   retire-old-range [completed]
	// shop/web at 172.24.3.7
}
