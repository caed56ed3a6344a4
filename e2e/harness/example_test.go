package harness_test

import (
	"context"
	"fmt"
	"log"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/e2e/harness"
)

// ExampleNew starts a control plane outside a test (in a test, use Start),
// registers a fake node and prints the podCIDR kube-controller-manager gave
// it. It is compiled, not run: it needs the built binaries.
func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := harness.New(ctx, harness.Options{ClusterCIDR: "10.10.0.0/18", Disable: []harness.Component{harness.Scheduler}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	cs, err := c.Client()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, harness.KwokNode("worker1", nil), metav1.CreateOptions{}); err != nil {
		log.Fatal(err)
	}
	for ctx.Err() == nil {
		n, err := cs.CoreV1().Nodes().Get(ctx, "worker1", metav1.GetOptions{})
		if err == nil && n.Spec.PodCIDR != "" {
			fmt.Println(n.Spec.PodCIDR)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
