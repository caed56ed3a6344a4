// Package harness runs a real Kubernetes control plane for cidrshift's
// end-to-end tests: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok (which plays the kubelets of fake nodes), all on
// 127.0.0.1 with free ports and a throw-away CA, in one temporary
// directory.
//
// The binaries are built from Go modules the first time they are needed
// (EnsureBinaries) into e2e/.cache/<k8s-version>/bin, for the Kubernetes
// release named by K8S_VERSION (default DefaultK8sVersion). Building takes
// minutes on two cores; later runs reuse the cache.
//
// A test starts a cluster with Start, which stops every process and removes
// every file when the test ends:
//
//	c := harness.Start(t, harness.Options{ClusterCIDR: "10.10.0.0/18"})
//	cs, err := c.Client()
//	...
//	_, err = cs.CoreV1().Nodes().Create(ctx, harness.KwokNode("worker1", nil), metav1.CreateOptions{})
//	...
//	err = c.Restart(ctx, harness.ControllerManager, "--cluster-cidr=10.20.0.0/16")
//	st, err := c.WaitExit(ctx, harness.ControllerManager)
//
// The package is Linux-first: components run in their own process group
// with a parent-death signal, so none outlives a killed test binary.
package harness
