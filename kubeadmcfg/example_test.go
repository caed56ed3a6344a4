package kubeadmcfg_test

import (
	"fmt"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
)

const exampleKubeadmConfig = `apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v1.34.2
networking:
  dnsDomain: cluster.local
  podSubnet: 10.20.0.0/16 # edited by hand, nothing else was
  serviceSubnet: 10.233.0.0/18
`

const exampleManifest = `apiVersion: v1
kind: Pod
metadata:
  name: kube-controller-manager
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-controller-manager
    - --allocate-node-cidrs=true
    - --cluster-cidr=10.233.64.0/18
    - --node-cidr-mask-size=24
    - --service-cluster-ip-range=10.233.0.0/18
    image: registry.k8s.io/kube-controller-manager:v1.34.2
    name: kube-controller-manager
`

// The first field story: kubeadm-config was edited, the controller manager
// was not, and the control-plane node still holds a podCIDR of the old range.
// Check names both sides of the disagreement; the plan moves the node before
// the flag, and the manifest edit touches one line.
func Example() {
	cc, err := kubeadmcfg.ParseClusterConfiguration([]byte(exampleKubeadmConfig))
	if err != nil {
		fmt.Println(err)
		return
	}
	kcm, err := kubeadmcfg.ParseManifest([]byte(exampleManifest))
	if err != nil {
		fmt.Println(err)
		return
	}
	s := &kubeadmcfg.Snapshot{
		Kubeadm:           cc,
		ControllerManager: kcm,
		Nodes:             []cidr.NodePodCIDRs{{Name: "master1", PodCIDRs: []string{"10.233.64.0/24"}}},
	}
	for _, f := range kubeadmcfg.Check(s).Findings {
		fmt.Println(f.Severity, f.Code)
		for _, src := range f.Sources {
			fmt.Printf("  %s = %s\n", src.Where, src.Value)
		}
	}

	p, err := kubeadmcfg.NewPlan(s, kubeadmcfg.Intent{PodSubnet: "10.20.0.0/16"}, kubeadmcfg.PlanOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, st := range p.Steps {
		fmt.Printf("%d. %s\n", st.Number, st.Title)
	}
	fmt.Println("preflight now:", p.PreflightNow.WouldStart, "after the move:", p.PreflightAfterMove.WouldStart)
	fmt.Print(p.FileEdits[1].Diff)
	// Output:
	// error pod-subnet-mismatch
	//   ClusterConfiguration networking.podSubnet = 10.20.0.0/16
	//   static-pod manifest --cluster-cidr = 10.233.64.0/18
	// 1. Check the cluster as it is
	// 2. Make the CNI hand out pod addresses from 10.20.0.0/16
	// 3. On every control-plane node: pause node IPAM with --allocate-node-cidrs=false
	// 4. Rewrite every Node's podCIDR into 10.20.0.0/16 with /24 subnets BEFORE kube-controller-manager gets the new --cluster-cidr
	// 5. Preflight: kube-controller-manager must start with the new flags and the nodes as they are now
	// 6. On every control-plane node: kube-controller-manager --cluster-cidr=10.20.0.0/16 --allocate-node-cidrs=true
	// 7. Move the remaining pods off the old pod range 10.233.64.0/18 and remove it from the CNI
	// 8. Verify
	// preflight now: false after the move: true
	// --- static-pod manifest
	// +++ static-pod manifest
	// @@ -7,8 +7,8 @@
	//    containers:
	//    - command:
	//      - kube-controller-manager
	// -    - --allocate-node-cidrs=false
	// -    - --cluster-cidr=10.233.64.0/18
	// +    - --allocate-node-cidrs=true
	// +    - --cluster-cidr=10.20.0.0/16
	//      - --node-cidr-mask-size=24
	//      - --service-cluster-ip-range=10.233.0.0/18
	//      image: registry.k8s.io/kube-controller-manager:v1.34.2
}

// Setters change the value and nothing else: comments, order and the
// apiVersion stay.
func ExampleClusterConfiguration_SetPodSubnet() {
	cc, err := kubeadmcfg.ParseClusterConfiguration([]byte(exampleKubeadmConfig))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := cc.SetPodSubnet("10.233.64.1/16"); err != nil {
		fmt.Println(err)
	}
	if err := cc.SetServiceSubnet("172.24.0.0/16"); err != nil {
		fmt.Println(err)
	}
	if err := cc.SetExtraArg(kubeadmcfg.ControllerManager, "node-cidr-mask-size", "23"); err != nil {
		fmt.Println(err)
	}
	fmt.Print(string(cc.Bytes()))
	// Output:
	// ClusterConfiguration: networking.podSubnet "10.233.64.1/16": 10.233.64.1/16 has host bits set; the network is 10.233.0.0/16
	// apiVersion: kubeadm.k8s.io/v1beta4
	// controllerManager:
	//   extraArgs:
	//   - name: node-cidr-mask-size
	//     value: "23"
	// kind: ClusterConfiguration
	// kubernetesVersion: v1.34.2
	// networking:
	//   dnsDomain: cluster.local
	//   podSubnet: 10.20.0.0/16 # edited by hand, nothing else was
	//   serviceSubnet: 172.24.0.0/16
}

// ManifestArgs gives the command line a manifest starts, e.g. to run the real
// component in an end-to-end test.
func ExampleManifestArgs() {
	args, err := kubeadmcfg.ManifestArgs([]byte(exampleManifest))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(args)
	// Output: [kube-controller-manager --allocate-node-cidrs=true --cluster-cidr=10.233.64.0/18 --node-cidr-mask-size=24 --service-cluster-ip-range=10.233.0.0/18]
}
