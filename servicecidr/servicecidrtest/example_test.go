package servicecidrtest_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// The fake refuses what a real API server refuses.
func Example() {
	cluster := servicecidrtest.MustNew(servicecidrtest.Options{
		ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}},
	})
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: corev1.ServiceSpec{ClusterIP: "172.24.0.10", Ports: []corev1.ServicePort{{Port: 80}}}}
	_, err := cluster.Kube.CoreV1().Services("shop").Create(context.Background(), svc, metav1.CreateOptions{})
	fmt.Println(err)
	// Output:
	// Service "web" is invalid: spec.clusterIPs: Invalid value: ["172.24.0.10"]: failed to allocate IP 172.24.0.10: the provided IP (172.24.0.10) is not in the valid range. The range of valid IPs is 10.96.0.0/16
}
