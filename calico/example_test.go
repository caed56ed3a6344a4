package calico_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
)

// The first field story: pods in 10.233.64.0/18 move to a new pool
// 10.20.0.0/16. Fake clients stand in for the cluster; calicotest simulates
// the Deployment controller and Calico IPAM.
func Example() {
	ctx := context.Background()
	two := int32(2)
	web := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}},
	}
	kube, _ := calicotest.NewKube(web)
	accesstest.Authorize(kube) // the fake answers permission checks: all allowed
	dyn, _ := calicotest.NewDynamic(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
		"metadata": map[string]any{"name": "default-ipv4-ippool"},
		"spec": map[string]any{"cidr": "10.233.64.0/18", "blockSize": int64(24), "ipipMode": "Always",
			"natOutgoing": true, "nodeSelector": "all()"},
	}})
	pools := calico.NewCRDStore(dyn)
	cl := calico.Cluster{Kube: kube, Pools: pools, Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}

	work := &calicotest.Workloads{Kube: kube, Nodes: []string{"node-1"}}
	ipam := &calicotest.IPAM{Kube: kube, Pools: pools, Dynamic: dyn, MarkReady: true}
	stop := calicotest.Loop(ctx, time.Millisecond, nil, work.Sync, ipam.Sync)
	defer stop()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if scan, err := calico.ScanPods(ctx, kube, netip.MustParsePrefix("10.233.64.0/18"), calico.ScanOptions{}); err == nil && len(scan.Pods) == 2 {
			break
		}
	}

	plan, err := calico.Plan(ctx, cl, calico.SwapRequest{
		OldPool: "default-ipv4-ippool", NewName: "pods-10-20", NewCIDR: "10.20.0.0/16",
		ClusterCIDR: "10.20.0.0/16", ServiceCIDR: "10.233.0.0/18",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range plan.Steps {
		fmt.Println("-", s)
	}
	dir, _ := os.MkdirTemp("", "calico-swap")
	defer os.RemoveAll(dir)
	res, err := calico.Apply(ctx, cl, plan, calico.ApplyOptions{JournalDir: dir, PollInterval: time.Millisecond, WritesPerSecond: 100})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("done:", res.Done, "restarted:", res.Restarted[0], "old pool deleted:", res.OldPoolDeleted)
	fmt.Println(res.Verify.Summary())
	// Output:
	// - create IPPool "pods-10-20" cidr 10.20.0.0/16 blockSize 24 ipipMode Always vxlanMode Never natOutgoing true nodeSelector "all()"
	// - disable IPPool "default-ipv4-ippool" (spec.disabled: true)
	// - rollout restart Deployment default/web (2 pod(s) in 10.233.64.0/18)
	// - verify that no pod has an address in 10.233.64.0/18 and report the IPAM blocks left there
	// - delete IPPool "default-ipv4-ippool" once nothing is left
	// done: true restarted: Deployment default/web old pool deleted: true
	// nothing left in 10.233.64.0/18: no pod address, 1 block(s) with no allocation
}

func ExampleValidate() {
	err := calico.Validate(calico.IPPool{Name: "pods", Spec: calico.PoolSpec{
		CIDR: "10.233.64.1/16", BlockSize: 33, IPIPMode: calico.EncapAlways, VXLANMode: calico.EncapAlways}})
	for _, fe := range calico.FieldErrors(err) {
		fmt.Println(fe.Rule+":", fe)
	}
	// Output:
	// cidr-masked: IPPool "pods": spec.cidr "10.233.64.1/16": IP pool CIDR is not strictly masked; write 10.233.0.0/16
	// encap-exclusive: IPPool "pods": spec.vxlanMode "Always": IPIP (ipipMode Always) and VXLAN cannot both be enabled on one pool; set one of them to Never
	// block-size-range: IPPool "pods": spec.blockSize "33": block size for an IPv4 pool must be between 20 and 32 (default 26)
}

func ExamplePoolCapacity() {
	c, err := calico.PoolCapacity(calico.IPPool{Name: "pods", Spec: calico.PoolSpec{CIDR: "10.20.0.0/16"}},
		calico.CapacityOptions{ClusterCIDR: "10.20.0.0/16", KubeProxyClusterCIDR: "10.233.64.0/18"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %s blocks of /%d (%s addresses each), %s nodes with a block each\n",
		c.CIDR, c.Blocks, c.BlockSize, c.AddressesPerBlock, c.MaxNodesOneBlockEach)
	for _, w := range c.Warnings {
		fmt.Println(w.Code)
	}
	// Output:
	// 10.20.0.0/16: 1024 blocks of /26 (64 addresses each), 1024 nodes with a block each
	// kube-proxy-cluster-cidr
}
