package e2e_test

// End-to-end test of the cross-layer doctor (issue 16): seed 001's cause
// chain built on a real control plane and found by the doctor binary, run as
// a user runs it against the cluster.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// doctorE2EReport is the part of `doctor -o json` this test reads.
type doctorE2EReport struct {
	Findings []migrate.DoctorFinding `json:"findings"`
	FixPlan  *nodecidr.Plan          `json:"fixPlan"`
	FixError string                  `json:"fixPlanError"`
	Repairs  []migrate.Repair        `json:"repairs"`
	Healthy  bool                    `json:"healthy"`
}

// codes lists the finding codes, sorted.
func (r *doctorE2EReport) codes() []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, string(f.Code)+"("+string(f.Severity)+")")
	}
	slices.Sort(out)
	return out
}

// with returns the findings of code c.
func (r *doctorE2EReport) with(c migrate.Code) []migrate.DoctorFinding {
	var out []migrate.DoctorFinding
	for _, f := range r.Findings {
		if f.Code == c {
			out = append(out, f)
		}
	}
	return out
}

// doctorE2ENodes names the Node objects a finding is about, sorted.
func doctorE2ENodes(f migrate.DoctorFinding) []string {
	var out []string
	for _, o := range f.Objects {
		if o.Kind == "Node" {
			out = append(out, o.Name)
		}
	}
	slices.Sort(out)
	return out
}

// doctorE2EFlannelNode is a kwok node as flanneld in kube mode leaves it:
// podCIDR set, and the annotations announcing its lease.
func doctorE2EFlannelNode(name, podCIDR, backend string, i int) *corev1.Node {
	n := harness.KwokNode(name, nil)
	p := flannel.DefaultAnnotationPrefix + "/"
	n.Annotations[p+"backend-type"] = backend
	n.Annotations[p+"kube-subnet-manager"] = "true"
	n.Annotations[p+"public-ip"] = fmt.Sprintf("192.168.0.%d", i+1)
	n.Annotations[p+"backend-data"] = fmt.Sprintf(`{"VNI":1,"VtepMAC":"02:42:00:00:00:%02x"}`, i+1)
	return nodeE2EWithPodCIDR(n, podCIDR)
}

// doctorE2EKubeProxy is kubeadm's kube-proxy ConfigMap with clusterCIDR.
func doctorE2EKubeProxy(clusterCIDR string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: kubeadmcfg.Namespace, Name: kubeadmcfg.KubeProxyConfigMap},
		Data: map[string]string{kubeadmcfg.KubeProxyConfigKey: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n" +
			"bindAddress: 0.0.0.0\nclusterCIDR: " + clusterCIDR + "\nmode: iptables\n"},
	}
}

// doctorE2EMirrorPod is the mirror Pod a kubeadm node's kubelet publishes
// for a static control-plane pod, with the component's real command line.
func doctorE2EMirrorPod(component, node string, flags []string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: component + "-" + node,
			Labels: map[string]string{"component": component, "tier": "control-plane"}},
		Spec: corev1.PodSpec{
			NodeName:    node,
			HostNetwork: true,
			Containers: []corev1.Container{{Name: component, Image: "registry.k8s.io/" + component + ":v1.36.3",
				Command: append([]string{component}, flags...)}},
		},
	}
}

// doctorE2ERun runs the doctor binary against the cluster with -o json.
func doctorE2ERun(t *testing.T, doctor string, c *harness.Cluster) (*doctorE2EReport, int, string) {
	t.Helper()
	out, code, proc := nodeE2ERun(t, doctor, "--kubeconfig", c.AdminKubeconfig(), "-o", "json")
	var rep doctorE2EReport
	nodeE2EJSON(t, out, &rep)
	return &rep, code, proc.output()
}

// TestDoctorSeed001ChainLive builds seed 001's cause chain on a real control
// plane, as flannel in kube mode and kubeadm leave it: kwok nodes carrying
// flanneld's annotations, kube-flannel/kube-flannel-cfg (vxlan, its Network
// kube-controller-manager's --cluster-cidr), kube-system's
// kube-proxy ConfigMap, and mirror Pods of kube-controller-manager and
// kube-apiserver with the harness's real command lines, which the doctor
// reads its flags from (it gets none on its command line). The healthy
// cluster first: exit 0, none of the chain's codes. Then it is broken as in
// the seed: a node joins with another's podCIDR, a node announces host-gw,
// kube-proxy's clusterCIDR disagrees with --cluster-cidr. The doctor exits 1,
// names the nodes, plans the duplicate's new subnet inside flannel's
// Network and proposes the host-gw node's repair.
func TestDoctorSeed001ChainLive(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	const (
		// flannel's Network is kube-controller-manager's --cluster-cidr, as
		// kubeadm and the flannel manifest set it up: a Network narrower
		// than the cluster CIDR is itself an error (flanneld refuses the
		// podCIDRs outside it; cluster-cidr-outside-flannel-network).
		clusterCIDR = "10.244.0.0/16"
		network     = clusterCIDR
		ns          = "seed001"
	)
	c := harness.Start(t, harness.Options{ClusterCIDR: clusterCIDR, NodeCIDRMaskSize: 24})
	ctx := t.Context()
	cs := nodeE2EClient(t, c)
	doctor := nodeE2EBuild(t, "doctor")
	netPrefix := netip.MustParsePrefix(network)

	// Healthy: a, b and d in flannel's Network, all vxlan, kube-proxy agreeing.
	nodes := nodeE2ECreateNodes(t, ctx, cs, []*corev1.Node{
		doctorE2EFlannelNode("node-a", "10.244.1.0/24", "vxlan", 1),
		doctorE2EFlannelNode("node-b", "10.244.2.0/24", "vxlan", 2),
		doctorE2EFlannelNode("node-d", "10.244.4.0/24", "vxlan", 4),
	})
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: flannel.DefaultNetConfNamespace}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().ConfigMaps(flannel.DefaultNetConfNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: flannel.DefaultNetConfNamespace, Name: flannel.DefaultNetConfName, Labels: map[string]string{"app": "flannel"}},
		Data:       map[string]string{flannel.NetConfKey: `{"Network": "` + network + `", "EnableNFTables": false, "Backend": {"Type": "vxlan"}}`},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().ConfigMaps(kubeadmcfg.Namespace).Create(ctx, doctorE2EKubeProxy(clusterCIDR), metav1.CreateOptions{})
	require.NoError(t, err)
	kcmFlags := c.Flags(harness.ControllerManager)
	require.Contains(t, kcmFlags, "--cluster-cidr="+clusterCIDR, "the harness's kube-controller-manager")
	for _, p := range []*corev1.Pod{
		doctorE2EMirrorPod(cidr.KubeControllerManager, "node-a", kcmFlags),
		doctorE2EMirrorPod(cidr.KubeAPIServer, "node-a", c.Flags(harness.APIServer)),
	} {
		_, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for _, n := range nodes {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, nodeE2EPod(ns, "app-"+n.Name, n.Name, map[string]string{"app": "seed"}), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	nodeE2EWaitPodsRunning(t, c, cs, ns, "", len(nodes), 2*time.Minute)

	chain := []migrate.Code{migrate.Code(nodecidr.FindingDuplicate), migrate.CodeFlannelBackendMismatch, migrate.CodeKubeProxyClusterCIDRMismatch}
	rep, code, output := doctorE2ERun(t, doctor, c)
	assert.Equal(t, 0, code, "doctor on the healthy cluster (findings %v):\n%s", rep.codes(), output)
	assert.True(t, rep.Healthy, "findings %v", rep.codes())
	for _, cd := range chain {
		assert.Empty(t, rep.with(cd), "healthy cluster: %s", cd)
	}
	assert.Nil(t, rep.FixPlan)
	assert.Empty(t, rep.Repairs)

	// Broken as in seed 001. node-c joins holding node-b's podCIDR; its
	// creationTimestamp (one-second resolution) must be later than b's for
	// b to be the one that keeps the subnet.
	time.Sleep(time.Until(nodes[1].CreationTimestamp.Add(1100 * time.Millisecond)))
	nodeE2ECreateNodes(t, ctx, cs, []*corev1.Node{doctorE2EFlannelNode("node-c", "10.244.2.0/24", "vxlan", 3)})
	doctorE2EPatchNode(t, ctx, cs, "node-d", func(n *corev1.Node) {
		n.Annotations[flannel.DefaultAnnotationPrefix+"/backend-type"] = "host-gw"
		n.Annotations[flannel.DefaultAnnotationPrefix+"/backend-data"] = "null"
	})
	_, err = cs.CoreV1().ConfigMaps(kubeadmcfg.Namespace).Update(ctx, doctorE2EKubeProxy("10.244.0.0/15"), metav1.UpdateOptions{})
	require.NoError(t, err)

	rep, code, output = doctorE2ERun(t, doctor, c)
	require.Equal(t, 1, code, "doctor exits 1 when it finds problems:\n%s", output)
	assert.False(t, rep.Healthy)
	t.Logf("findings: %v", rep.codes())

	if dups := rep.with(migrate.Code(nodecidr.FindingDuplicate)); assert.Len(t, dups, 1, "findings %v", rep.codes()) {
		assert.Equal(t, []string{"node-b", "node-c"}, doctorE2ENodes(dups[0]), "%s", dups[0].Message)
		assert.Contains(t, dups[0].Message, "10.244.2.0/24")
	}
	if mism := rep.with(migrate.CodeFlannelBackendMismatch); assert.Len(t, mism, 1, "findings %v", rep.codes()) {
		assert.Equal(t, []string{"node-d"}, doctorE2ENodes(mism[0]))
		assert.Equal(t, cidr.SeverityError, mism[0].Severity)
		// The line flanneld prints on the other nodes (flannel v0.28, vxlan).
		assert.Contains(t, mism[0].Message, "ignoring non-vxlan v4Subnet(10.244.4.0/24) v6Subnet(::/0): type=host-gw")
	}
	if kp := rep.with(migrate.CodeKubeProxyClusterCIDRMismatch); assert.Len(t, kp, 1, "findings %v", rep.codes()) {
		assert.Equal(t, cidr.SeverityError, kp[0].Severity)
		assert.Contains(t, kp[0].Message, "10.244.0.0/15")
		assert.Contains(t, kp[0].Message, clusterCIDR)
		assert.Contains(t, kp[0].Objects, migrate.ObjectRef{Kind: "ConfigMap", Namespace: kubeadmcfg.Namespace, Name: kubeadmcfg.KubeProxyConfigMap})
		assert.Contains(t, kp[0].Objects, migrate.ObjectRef{Kind: "Pod", Namespace: metav1.NamespaceSystem, Name: cidr.KubeControllerManager + "-node-a"},
			"--cluster-cidr is read from kube-controller-manager's Pod")
	}

	// The fix plan moves node-c (b, created first, keeps the subnet) into
	// free space of flannel's Network.
	require.NotNil(t, rep.FixPlan, "no fix plan (error %q)", rep.FixError)
	require.Len(t, rep.FixPlan.Steps, 1, "steps %+v", rep.FixPlan.Steps)
	step := rep.FixPlan.Steps[0]
	assert.Equal(t, "node-c", step.Node)
	assert.Equal(t, nodecidr.ActionRecreate, step.Action)
	assert.Equal(t, []string{"10.244.2.0/24"}, step.OldPodCIDRs)
	if assert.Len(t, step.NewPodCIDRs, 1) {
		p := netip.MustParsePrefix(step.NewPodCIDRs[0])
		assert.True(t, cidr.ContainsPrefix(netPrefix, p), "new podCIDR %s is not inside flannel's Network %s", p, network)
		assert.Equal(t, 24, p.Bits())
		for _, held := range []string{"10.244.1.0/24", "10.244.2.0/24", "10.244.4.0/24"} {
			assert.NotEqual(t, held, p.String(), "new podCIDR is held by another node")
		}
	}

	// The repair of the host-gw node.
	if assert.Len(t, rep.Repairs, 1) {
		r := rep.Repairs[0]
		assert.Equal(t, migrate.CodeFlannelBackendMismatch, r.Code)
		assert.Equal(t, "node-d", r.Node)
		assert.Equal(t, flannel.DefaultAnnotationPrefix+"/backend-type", r.Annotation)
		assert.Equal(t, "host-gw", r.From)
		assert.Equal(t, "vxlan", r.To)
		assert.True(t, slices.ContainsFunc(r.Commands, func(s string) bool {
			return strings.Contains(s, "kubectl annotate node node-d "+flannel.DefaultAnnotationPrefix+"/backend-type=vxlan")
		}), "commands %q", r.Commands)
	}
}

// doctorE2EPatchNode reads a node, changes it and writes it back.
func doctorE2EPatchNode(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string, change func(*corev1.Node)) {
	t.Helper()
	poll(t, 30*time.Second, "update node "+name, func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(n)
		_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}
