package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/nodecidr"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

const (
	oldPool = "default-ipv4-ippool"
	newCIDR = "10.200.0.0/16"
)

func testNode(name, podCIDR string, controlPlane bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name),
		Labels: map[string]string{"kubernetes.io/hostname": name}, Annotations: map[string]string{"x": name}}}
	if controlPlane {
		n.Labels[nodecidr.LabelControlPlane] = ""
	}
	n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.10." + map[string]string{"master1": "1", "worker1": "11", "worker2": "12"}[name]}}
	return n
}

// fakeCluster is story 1 on fake clients: three nodes (one control plane)
// in 10.233.64.0/18, a Deployment of three replicas and cluster DNS with
// addresses from the old Calico pool (and the pods of the StatefulSets and
// DaemonSets among objs), the workload controllers and Calico IPAM
// simulated, and Node rules enforced.
func fakeCluster(t *testing.T, objs ...runtime.Object) (connector, calico.Cluster) {
	t.Helper()
	three, one := int32(3), int32(1)
	deploy := func(ns, name string, n *int32, labels map[string]string) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.DeploymentSpec{Replicas: n, Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}},
		}
	}
	// Pods and workloads follow calicotest's rules, Nodes nodecidrtest's
	// (podCIDR set once, delete preconditions, UID and resourceVersion on
	// create), permissions are all granted.
	kube, _ := calicotest.NewKube(append([]runtime.Object{
		deploy("default", "web", &three, map[string]string{"app": "web"}),
		deploy("kube-system", "coredns", &one, map[string]string{"k8s-app": "kube-dns"}),
	}, objs...)...)
	accesstest.Authorize(kube)
	nodes := nodecidrtest.NewServer()
	for _, n := range []*corev1.Node{testNode("master1", "10.233.66.0/24", true), testNode("worker1", "10.233.64.0/24", false), testNode("worker2", "10.233.65.0/24", false)} {
		nodes.AddNode(n)
	}
	kube.PrependReactor("*", "nodes", nodes.Handle)
	dyn, _ := calicotest.NewDynamic(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": oldPool},
		"spec": map[string]any{"cidr": "10.233.64.0/18", "blockSize": int64(26), "vxlanMode": "Always", "natOutgoing": true},
	}})
	pools := calico.NewCRDStore(dyn)
	cl := calico.Cluster{Kube: kube, Pools: pools, Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}
	work := &calicotest.Workloads{Kube: kube, Nodes: []string{"worker1", "worker2"}}
	ipam := &calicotest.IPAM{Kube: kube, Pools: pools, Dynamic: dyn, MarkReady: true}
	stop := calicotest.Loop(context.Background(), time.Millisecond, func(err error) { t.Logf("sim: %v", err) }, work.Sync, ipam.Sync)
	t.Cleanup(stop)
	want := 4 // web's three pods and coredns's one
	for _, o := range objs {
		switch w := o.(type) {
		case *appsv1.StatefulSet:
			want += int(*w.Spec.Replicas)
		case *appsv1.DaemonSet:
			want += len(work.Nodes)
		}
	}
	require.Eventually(t, func() bool {
		v, err := calico.Verify(context.Background(), cl, calico.VerifyTarget{OldPool: oldPool})
		return err == nil && len(v.PodsLeft) == want
	}, 20*time.Second, 5*time.Millisecond)
	return func(context.Context, string, string) (calico.Cluster, error) { return cl, nil }, cl
}

// kubeadmConfigMaps are kubeadm-config (podSubnet 10.233.64.0/18, Service
// subnet 10.233.0.0/18, node mask 24) and kube-proxy's ConfigMap.
func kubeadmConfigMaps(t *testing.T) []runtime.Object {
	t.Helper()
	var out []runtime.Object
	for _, f := range []string{"kubeadm-config.yaml", "kube-proxy.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", f))
		require.NoError(t, err)
		cm, err := kubeadmcfg.DecodeConfigMap(data)
		require.NoError(t, err)
		out = append(out, cm)
	}
	return out
}

func exec(t *testing.T, conn connector, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runWith(context.Background(), args, &out, &errOut, conn)
	return code, out.String(), errOut.String()
}

func TestBadInputExits2WithOneLine(t *testing.T) {
	conn, _ := fakeCluster(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no --to", nil, "--to is required"},
		{"host bits", []string{"--to", "10.233.64.1/16"}, "has host bits set; the network is 10.233.0.0/16"},
		{"apply without journal", []string{"--to", newCIDR, "--apply"}, "--journal DIR is required"},
		{"bad move", []string{"--to", newCIDR, "--move", "delete"}, `--move "delete"`},
		{"bad output", []string{"--to", newCIDR, "-o", "xml"}, `-o "xml"`},
		{"out without manifests", []string{"--to", newCIDR, "--out", t.TempDir()}, "needs --manifests"},
		{"pool outside --to", []string{"--to", newCIDR, "--service-cidr", "10.233.0.0/18", "--new-pool-cidr", "10.201.0.0/16"}, "outside --to"},
		{"no service cidr in cluster", []string{"--to", newCIDR}, "--service-cidr is required"},
		{"overlaps the Service CIDR", []string{"--to", "10.233.0.0/16", "--service-cidr", "10.233.0.0/18"}, "10.233.0.0/18"},
		{"missing old pool", []string{"--to", newCIDR, "--service-cidr", "10.233.0.0/18", "--old-pool", "nope"}, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := exec(t, conn, tc.args...)
			assert.Equal(t, exitBad, code, "stdout: %s\nstderr: %s", out, errOut)
			assert.Empty(t, out)
			assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
			assert.Contains(t, errOut, tc.want)
		})
	}
}

func TestPlanChangesNothing(t *testing.T) {
	conn, cl := fakeCluster(t)
	ctx := context.Background()
	before, err := cl.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	code, out, errOut := exec(t, conn, "--to", newCIDR, "--service-cidr", "10.233.0.0/18")
	require.Equal(t, exitOK, code, errOut)
	for _, want := range []string{
		"runbook: move the pod range 10.233.64.0/18 -> 10.200.0.0/16 (Calico pool default-ipv4-ippool -> ippool-10-200-0-0-16) (plan only",
		"1. preflight [planned]",
		"capacity: 10.200.0.0/16 with /24 node subnets holds 256 nodes (was 64 in 10.233.64.0/18); 3 node(s) now",
		"kube-controller-manager would start with",
		"2. add-pool [planned]",
		"4. move-nodes [planned]",
		"recreate worker1: 10.233.64.0/24 -> 10.200.0.0/24",
		"recreate master1 (control plane): 10.233.66.0/24 -> 10.200.2.0/24",
		"6. controller-manager-flags [operator]",
		"rollout Deployment kube-system/coredns (1 pod(s) in 10.233.64.0/18) (cluster DNS)",
		"9. delete-old-pool [planned]",
	} {
		assert.Contains(t, out, want)
	}
	// The control plane moves after the workers.
	assert.Less(t, strings.Index(out, "recreate worker2"), strings.Index(out, "recreate master1"))
	after, err := cl.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for i := range before.Items {
		assert.Equal(t, before.Items[i].UID, after.Items[i].UID)
	}
	pools, err := cl.Pools.List(ctx)
	require.NoError(t, err)
	require.Len(t, pools, 1)
	assert.False(t, pools[0].Spec.Disabled)

	code, out, _ = exec(t, conn, "--to", newCIDR, "--service-cidr", "10.233.0.0/18", "-o", "json")
	require.Equal(t, exitOK, code)
	var rep Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Steps, 9)
	assert.Equal(t, "plan", rep.Mode)
	assert.Equal(t, netip.MustParsePrefix("10.233.64.0/18"), rep.From)
}

func TestApplyPausesThenResumesToTheEnd(t *testing.T) {
	conn, cl := fakeCluster(t, kubeadmConfigMaps(t)...)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "journal")
	outDir := filepath.Join(t.TempDir(), "out")
	// The Service CIDR and node mask come from kubeadm-config.
	args := []string{"--to", newCIDR, "--journal", dir, "--apply", "--poll-interval", "5ms", "--drain-timeout", "10s",
		"--manifests", filepath.Join("testdata", "manifests"), "--out", outDir}

	code, out, errOut := exec(t, conn, args...)
	require.Equal(t, exitWaiting, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "WAITING FOR AN OPERATOR (step controller-manager-flags)")
	assert.Contains(t, out, "--cluster-cidr=10.200.0.0/16")
	assert.Contains(t, out, "7. move-workloads [not-reached]")
	assert.Contains(t, out, "+    - --cluster-cidr=10.200.0.0/16")
	rendered, err := os.ReadFile(filepath.Join(outDir, "kube-controller-manager.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(rendered), "- --cluster-cidr=10.200.0.0/16\n")
	assert.NotContains(t, string(rendered), "10.233.64.0/18")
	src, err := os.ReadFile(filepath.Join("testdata", "manifests", "kube-controller-manager.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(src), "--cluster-cidr=10.233.64.0/18", "--manifests is only read")
	for _, tc := range []struct{ name, key, want string }{
		{kubeadmcfg.KubeadmConfigMap, kubeadmcfg.KubeadmConfigKey, "podSubnet: 10.200.0.0/16"},
		{kubeadmcfg.KubeProxyConfigMap, kubeadmcfg.KubeProxyConfigKey, "clusterCIDR: 10.200.0.0/16"},
	} {
		cm, err := cl.Kube.CoreV1().ConfigMaps("kube-system").Get(ctx, tc.name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Contains(t, cm.Data[tc.key], tc.want, tc.name)
	}
	// Paused: every node moved, the new pool exists, the old one is
	// disabled, the pods still hold old addresses.
	nodes, err := cl.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, nodes.Items, 3)
	for _, n := range nodes.Items {
		assert.True(t, strings.HasPrefix(n.Spec.PodCIDR, "10.200."), "%s has %s", n.Name, n.Spec.PodCIDR)
		assert.Equal(t, n.Name, n.Annotations["x"], "metadata kept")
	}
	old, err := cl.Pools.Get(ctx, oldPool)
	require.NoError(t, err)
	assert.True(t, old.Spec.Disabled)
	_, err = cl.Pools.Get(ctx, "ippool-10-200-0-0-16")
	require.NoError(t, err)
	v, err := calico.Verify(ctx, cl, calico.VerifyTarget{OldPool: oldPool})
	require.NoError(t, err)
	assert.Len(t, v.PodsLeft, 4, "no pod moved before kube-controller-manager runs with the new flag")

	// Rerun without the operator's change: still waiting.
	code, out, _ = exec(t, conn, args...)
	require.Equal(t, exitWaiting, code)
	assert.Contains(t, out, "4. move-nodes [done]")

	// The operator restarts kube-controller-manager; its mirror pod shows
	// the new flag and the rerun observes it.
	_, err = cl.Kube.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-master1", Namespace: "kube-system",
			Labels: map[string]string{"component": "kube-controller-manager"}},
		Spec: corev1.PodSpec{NodeName: "master1", HostNetwork: true, Containers: []corev1.Container{{Name: "kube-controller-manager", Image: "k",
			Command: []string{"kube-controller-manager", "--allocate-node-cidrs=true", "--cluster-cidr=10.200.0.0/16", "--service-cluster-ip-range=10.233.0.0/18"}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	code, out, errOut = exec(t, conn, args...)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "observed: every kube-controller-manager pod (kube-controller-manager-master1) runs with --cluster-cidr=10.200.0.0/16")
	for _, s := range []string{"7. move-workloads [completed]", "8. verify [completed]", "9. delete-old-pool [completed]"} {
		assert.Contains(t, out, s)
	}
	_, err = cl.Pools.Get(ctx, oldPool)
	assert.ErrorIs(t, err, calico.ErrPoolNotFound)
	v, err = calico.Verify(ctx, cl, calico.VerifyTarget{OldPool: oldPool, OldCIDR: netip.MustParsePrefix("10.233.64.0/18")})
	require.NoError(t, err)
	assert.Empty(t, v.PodsLeft)

	// Finished: a rerun reports every step done.
	code, out, _ = exec(t, conn, args...)
	require.Equal(t, exitOK, code)
	for _, s := range stepNames {
		assert.Contains(t, out, s+" [done]")
	}
	// Another move with the same journal is refused.
	code, _, errOut = exec(t, conn, "--to", "10.201.0.0/16", "--service-cidr", "10.233.0.0/18", "--journal", dir, "--apply")
	assert.Equal(t, exitBad, code)
	assert.Contains(t, errOut, "records a move")
}

func TestContinueAndProbeNode(t *testing.T) {
	conn, cl := fakeCluster(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "journal")
	args := []string{"--to", newCIDR, "--service-cidr", "10.233.0.0/18", "--journal", dir, "--apply", "--poll-interval", "5ms",
		"--probe-node", "--probe-timeout", "50ms", "--drain-timeout", "10s"}
	code, out, _ := exec(t, conn, args...)
	require.Equal(t, exitWaiting, code, out)
	assert.Contains(t, out, "probe Node cidrshift-probe got no podCIDR")
	_, err := cl.Kube.CoreV1().Nodes().Get(ctx, ProbeNodeName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the probe is deleted: %v", err)

	code, out, errOut := exec(t, conn, append(args, "--continue")...)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "--continue given")
	_, err = cl.Pools.Get(ctx, oldPool)
	assert.ErrorIs(t, err, calico.ErrPoolNotFound)
}

func TestServerDryRunStoresNothing(t *testing.T) {
	conn, cl := fakeCluster(t, kubeadmConfigMaps(t)...)
	ctx := context.Background()
	before, err := cl.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	code, out, errOut := exec(t, conn, "--to", newCIDR, "--dry-run=server")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	for _, s := range []string{"1. preflight [dry-run]", "2. add-pool [dry-run]", "4. move-nodes [dry-run]", "5. kubeadm-config [dry-run]",
		"6. controller-manager-flags [operator]", "7. move-workloads [not-run]", "9. delete-old-pool [not-run]"} {
		assert.Contains(t, out, s)
	}
	after, err := cl.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, after.Items, len(before.Items))
	for i := range before.Items {
		assert.Equal(t, before.Items[i].UID, after.Items[i].UID)
		assert.Equal(t, before.Items[i].Spec.PodCIDR, after.Items[i].Spec.PodCIDR)
	}
	pools, err := cl.Pools.List(ctx)
	require.NoError(t, err)
	require.Len(t, pools, 1)
	assert.False(t, pools[0].Spec.Disabled)
	cm, err := cl.Kube.CoreV1().ConfigMaps("kube-system").Get(ctx, kubeadmcfg.KubeadmConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, cm.Data[kubeadmcfg.KubeadmConfigKey], "podSubnet: 10.233.64.0/18")
}
