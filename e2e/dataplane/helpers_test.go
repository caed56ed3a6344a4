package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/flannel"
)

// createNode registers the Node object of a namespace node, with its
// underlay address, and podCIDR if given (otherwise kube-controller-manager
// assigns one). It returns the node's podCIDR once set.
func createNode(t *testing.T, cs kubernetes.Interface, n *Node, podCIDR string) netip.Prefix {
	t.Helper()
	obj := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.IP.String()},
			{Type: corev1.NodeHostName, Address: n.Name},
		}},
	}
	if podCIDR != "" {
		obj.Spec.PodCIDR = podCIDR
		obj.Spec.PodCIDRs = []string{podCIDR}
	}
	_, err := cs.CoreV1().Nodes().Create(t.Context(), obj, metav1.CreateOptions{})
	require.NoError(t, err)
	return waitPodCIDR(t, cs, n.Name)
}

func waitPodCIDR(t *testing.T, cs kubernetes.Interface, name string) netip.Prefix {
	t.Helper()
	var got string
	require.Eventually(t, func() bool {
		node, err := cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		got = node.Spec.PodCIDR
		return got != ""
	}, 30*time.Second, 100*time.Millisecond, "node %s gets a podCIDR", name)
	return netip.MustParsePrefix(got)
}

// writeFile writes a file under the env's directory and returns its path.
func writeFile(t *testing.T, env *Env, name, content string) string {
	t.Helper()
	path := filepath.Join(env.Dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

// podTargets returns a PodTarget per pod, plus the outside target.
func podTargets(pods []*Pod) []Target {
	var ts []Target
	for _, p := range pods {
		ts = append(ts, PodTarget(p))
	}
	return append(ts, OutsideTarget())
}

// checkUntil runs Check until ok(m) or the attempts run out and returns the
// last matrix: routes appear a moment after flanneld learns of a lease.
func checkUntil(t *testing.T, pods []*Pod, targets []Target, ok func(*Matrix) bool) *Matrix {
	t.Helper()
	var m *Matrix
	for i := 0; i < 10; i++ {
		m = Check(pods, targets, ProbeOptions{})
		if ok(m) {
			return m
		}
		time.Sleep(time.Second)
	}
	// The matrix never became what the test expects: log what each node
	// holds and what its flanneld said, so a failure in CI can be read
	// without a rerun.
	seen := map[*Node]bool{}
	for _, p := range pods {
		if n := p.Node; !seen[n] {
			seen[n] = true
			hostDump(t, n, "when the matrix check gave up")
			if n.Flanneld != nil {
				t.Logf("flanneld on %s, last lines of its current run:\n%s", n.Name, tailLines(n.Flanneld.RunLog(), 30))
			}
		}
	}
	return m
}

// allPods lists the pods of the nodes, in node order.
func allPods(nodes ...*Node) []*Pod {
	var out []*Pod
	for _, n := range nodes {
		out = append(out, n.Pods()...)
	}
	return out
}

// registerPod creates the Pod object of a namespace pod in "default",
// bound to its node, with the address CNI gave it in its status (what the
// kubelet would report).
func registerPod(ctx context.Context, cs kubernetes.Interface, p *Pod) error {
	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: metav1.NamespaceDefault, Labels: map[string]string{"app": "echo"}},
		Spec: corev1.PodSpec{NodeName: p.Node.Name, Containers: []corev1.Container{{Name: "echo", Image: "cidrshift.local/echo",
			Ports: []corev1.ContainerPort{{ContainerPort: EchoPort}}}}},
	}
	created, err := cs.CoreV1().Pods(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: p.IP.String(), PodIPs: []corev1.PodIP{{IP: p.IP.String()}},
		HostIP: p.Node.IP.String(), Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	_, err = cs.CoreV1().Pods(obj.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// hostStepRunner executes flannel.CleanupSteps for one namespace node: the
// commands are those an operator would type on the node or with kubectl,
// mapped onto this node's namespace, files, flanneld process and pods.
// An unknown command is an error, so a new step in the library is noticed.
type hostStepRunner struct {
	cs   kubernetes.Interface
	node *Node
	// skip lists commands not to run (to show what breaks without them).
	skip map[string]bool
}

func (r hostStepRunner) run(ctx context.Context, steps []flannel.HostStep) error {
	for _, s := range steps {
		if r.skip[s.Command] {
			continue
		}
		if err := r.one(ctx, s); err != nil {
			return fmt.Errorf("step %q (%s): %w", s.Command, s.Where, err)
		}
	}
	return nil
}

func (r hostStepRunner) one(ctx context.Context, s flannel.HostStep) error {
	n := r.node
	f := strings.Fields(s.Command)
	switch {
	case len(f) == 3 && f[0] == "kubectl" && (f[1] == "cordon" || f[1] == "uncordon") && f[2] == n.Name:
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, f[1] == "cordon")
		_, err := r.cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	case s.Where == "node" && len(f) == 4 && f[0] == "ip" && f[1] == "link" && f[2] == "delete":
		_, err := n.Run("ip", "link", "delete", f[3])
		return err
	case s.Where == "node" && len(f) >= 7 && f[0] == "ip" && slices.Contains(f, "flush") && f[len(f)-2] == "proto" && f[len(f)-1] == "boot":
		_, err := n.Run("ip", f[1:]...)
		return err
	case s.Where == "node" && len(f) == 3 && f[0] == "rm" && f[1] == "-rf" && strings.HasPrefix(f[2], "/var/lib/cni/networks/"):
		return os.RemoveAll(filepath.Join(n.IPAMDir, strings.TrimPrefix(f[2], "/var/lib/cni/networks/")))
	case s.Where == "node" && len(f) == 3 && f[0] == "rm" && f[1] == "-f" && f[2] == n.SubnetFile:
		err := os.Remove(f[2])
		if os.IsNotExist(err) {
			return nil
		}
		return err
	case s.Where == "cluster" && len(f) >= 7 && f[0] == "kubectl" && f[3] == "delete" && f[4] == "pod" &&
		strings.Contains(s.Command, "spec.nodeName="+n.Name):
		// The flannel DaemonSet pod on the node: the DaemonSet recreates it.
		return n.RestartFlanneld(30 * time.Second)
	case s.Where == "node" && len(f) == 3 && f[0] == "systemctl" && f[1] == "restart":
		return n.RestartFlanneld(30 * time.Second)
	case s.Where == "cluster" && len(f) == 6 && f[0] == "kubectl" && f[1] == "delete" && f[2] == "pods" &&
		f[3] == "--all-namespaces" && f[4] == "--field-selector" && strings.Contains(f[5], "spec.nodeName="+n.Name):
		// The step's own field selector, against the real apiserver; each
		// deleted Pod's sandbox is torn down by CNI DEL and its
		// controller's replacement (same name here) set up by CNI ADD on
		// the new subnet and registered again.
		list, err := r.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: f[5]})
		if err != nil {
			return err
		}
		byName := map[string]*Pod{}
		for _, p := range n.Pods() {
			byName[p.Name] = p
		}
		var names []string
		for _, obj := range list.Items {
			if err := r.cs.CoreV1().Pods(obj.Namespace).Delete(ctx, obj.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				return err
			}
			if p := byName[obj.Name]; p != nil {
				names = append(names, p.Name)
				if err := n.DelPod(ctx, p); err != nil {
					return err
				}
			}
		}
		if len(names) != len(byName) {
			return fmt.Errorf("the selector %q matched %d of the node's %d pods", f[5], len(names), len(byName))
		}
		for _, name := range names {
			p, err := n.AddPod(ctx, name)
			if err != nil {
				return err
			}
			if err := registerPod(ctx, r.cs, p); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("the test does not know how to run this step")
}

// buildExample builds examples/<name> from the root module.
func buildExample(t *testing.T, name string) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), name)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/cidrshift/cidrshift/examples/"+name)
	cmd.Dir = filepath.Join(wd, "..", "..")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build examples/%s:\n%s", name, out)
	t.Logf("built %s in %s", bin, time.Since(start).Round(time.Millisecond))
	return bin
}

// seed001NetConf writes seed 001's flannel config (vxlan, 10.244.0.0/16)
// to the kube-flannel-cfg ConfigMap and to a file for flanneld, whose path
// it returns.
func seed001NetConf(t *testing.T, env *Env, cs kubernetes.Interface) string {
	t.Helper()
	return netConfIn(t, env, cs, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
}

// seed001Cluster starts a control plane with cluster CIDR 10.244.0.0/16,
// writes seed 001's flannel config (seed001NetConf) and returns the
// cluster, its client, and the flags of a flanneld in kube subnet manager
// mode reading that config.
func seed001Cluster(t *testing.T, env *Env) (*ControlPlane, kubernetes.Interface, []string) {
	t.Helper()
	cp := env.StartControlPlane(t, harness.Options{ClusterCIDR: "10.244.0.0/16"})
	cs, err := cp.Client()
	require.NoError(t, err)
	netConf := seed001NetConf(t, env, cs)
	return cp, cs, []string{"--ip-masq", "--kube-subnet-mgr", "--kubeconfig-file=" + cp.NodeKubeconfig, "--net-config-path=" + netConf}
}

// addSeed001Pods starts seed 001's pods (a1 and a2 on a, b1, c1, d1) by
// CNI ADD, registers each as a Pod object, and returns them.
func addSeed001Pods(t *testing.T, cs kubernetes.Interface, nodes map[string]*Node) []*Pod {
	t.Helper()
	for _, pod := range []struct{ node, name string }{{"a", "a1"}, {"a", "a2"}, {"b", "b1"}, {"c", "c1"}, {"d", "d1"}} {
		_, err := nodes[pod.node].AddPod(t.Context(), pod.name)
		require.NoError(t, err)
	}
	pods := allPods(nodes["a"], nodes["b"], nodes["c"], nodes["d"])
	for _, p := range pods {
		t.Logf("pod %s on %s: %s", p.Name, p.Node.Name, p.IP)
		require.NoError(t, registerPod(t.Context(), cs, p))
	}
	return pods
}

// webOwner creates the Deployment web (paused, no replicas: the test plays
// its pods) and returns the owner reference its pods carry, so a
// migration finds them controller-owned and may evict them.
func webOwner(t *testing.T, cs kubernetes.Interface) metav1.OwnerReference {
	t.Helper()
	dep, err := cs.AppsV1().Deployments(metav1.NamespaceDefault).Create(t.Context(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: new(int32(0)), Paused: true,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web-owner"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web-owner"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "echo", Image: "cidrshift.local/echo"}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID, Controller: new(true)}
}

// netConfIn puts conf in the kube-flannel-cfg ConfigMap (namespace
// kube-flannel), as kube-flannel.yml does, and in the file flanneld reads
// (the ConfigMap's mount); it returns the file's path.
func netConfIn(t *testing.T, env *Env, cs kubernetes.Interface, conf string) string {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: flannel.DefaultNetConfNamespace}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().ConfigMaps(flannel.DefaultNetConfNamespace).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: flannel.DefaultNetConfName},
		Data:       map[string]string{flannel.NetConfKey: conf},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return writeFile(t, env, "net-conf.json", conf)
}

// seed001Nodes makes seed 001's nodes a, b, c and d, c holding b's podCIDR.
func seed001Nodes(t *testing.T, env *Env, cs kubernetes.Interface) (map[string]*Node, map[string]netip.Prefix) {
	t.Helper()
	nodes := map[string]*Node{}
	cidrs := map[string]netip.Prefix{}
	for _, name := range []string{"a", "b", "c", "d"} {
		n, err := env.AddNode(name)
		require.NoError(t, err)
		nodes[name] = n
		preset := ""
		if name == "c" {
			preset = cidrs["b"].String() // the duplicate
		}
		cidrs[name] = createNode(t, cs, n, preset)
	}
	require.Equal(t, cidrs["b"], cidrs["c"])
	return nodes, cidrs
}

// etcdRegistry opens the flannel registry in the harness's etcd and returns
// it with a function that applies a plan to it (journal in a test
// directory), failing the test on error.
func etcdRegistry(t *testing.T, cfg flannel.EtcdConfig) (*flannel.Registry, func(*flannel.Plan)) {
	t.Helper()
	kv, err := flannel.DialEtcd(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = kv.Close() })
	reg, err := flannel.NewRegistry(kv, flannel.RegistryOptions{})
	require.NoError(t, err)
	return reg, func(p *flannel.Plan) {
		t.Helper()
		_, err := reg.Apply(t.Context(), p, flannel.ApplyOptions{JournalDir: t.TempDir()})
		require.NoError(t, err)
	}
}
