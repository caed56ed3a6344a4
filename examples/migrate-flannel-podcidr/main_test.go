package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/nodecidr"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

const netConf = "{\n  \"Network\": \"10.244.0.0/16\",\n  \"Backend\": {\n    \"Type\": \"vxlan\"\n  }\n}\n"

func testNode(name, podCIDR string, age time.Duration) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-x" + name), ResourceVersion: "1",
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(age)),
			Labels:            map[string]string{"kubernetes.io/hostname": name},
			Annotations:       map[string]string{"flannel.alpha.coreos.com/kube-subnet-manager": "true", "flannel.alpha.coreos.com/backend-type": "vxlan"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	if podCIDR != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	}
	return n
}

func testPod(name, node string, owned bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("pod-x" + name)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if owned {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs", Controller: &yes}}
	}
	return p
}

// fixture: w1 and w3 share 10.244.1.0/24 (w1 older), w4 has no podCIDR.
func fixture() []runtime.Object {
	return []runtime.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-cfg", Namespace: "kube-flannel", UID: "cm", ResourceVersion: "1"},
			Data: map[string]string{"net-conf.json": netConf, "cni-conf.json": "{}"}},
		testNode("w1", "10.244.1.0/24", 0),
		testNode("w2", "10.244.2.0/24", 0),
		testNode("w3", "10.244.1.0/24", time.Hour),
		testNode("w4", "", time.Hour),
		testPod("web-a", "w3", true),
		testPod("bare", "w3", false),
		testPod("web-b", "w2", true),
	}
}

type env struct {
	cs *fake.Clientset
	// real makes run load the kubeconfig given on the command line.
	real bool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cs, _ := nodecidrtest.New(fixture()...)
	// The tracker stores dry-run writes; kube-apiserver does not.
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.UpdateActionImpl)
		if slices.Contains(u.UpdateOptions.DryRun, metav1.DryRunAll) {
			return true, u.GetObject(), nil
		}
		return false, nil, nil
	})
	return &env{cs: cs}
}

func (e *env) connect(context.Context, string, string) (kubernetes.Interface, error) {
	return e.cs, nil
}

func (e *env) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	connect := e.connect
	if e.real {
		connect = kubeconfigConnector
	}
	code := runWith(t.Context(), args, &out, &errb, connect)
	return code, out.String(), errb.String()
}

func (e *env) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return n
}

func (e *env) netConf(t *testing.T) string {
	t.Helper()
	cm, err := e.cs.CoreV1().ConfigMaps("kube-flannel").Get(t.Context(), "kube-flannel-cfg", metav1.GetOptions{})
	require.NoError(t, err)
	return cm.Data["net-conf.json"]
}

func (e *env) setMirror(t *testing.T, clusterCIDR string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-cp", Namespace: "kube-system",
			Labels: map[string]string{"component": "kube-controller-manager"}, Annotations: map[string]string{nodecidr.MirrorPodAnnotation: "x"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-controller-manager",
			Command: []string{"kube-controller-manager", "--allocate-node-cidrs=true", "--cluster-cidr=" + clusterCIDR, "--node-cidr-mask-size=24"}}}},
	}
	_ = e.cs.CoreV1().Pods("kube-system").Delete(t.Context(), p.Name, metav1.DeleteOptions{})
	_, err := e.cs.CoreV1().Pods("kube-system").Create(t.Context(), p, metav1.CreateOptions{})
	require.NoError(t, err)
}

func TestBadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no network", nil, "--network is required"},
		{"host bits", []string{"--network", "10.244.0.1/12"}, "host bits"},
		{"apply without journal", []string{"--network", "10.240.0.0/12", "--apply"}, "--journal DIR is required"},
		{"bad output", []string{"--network", "10.240.0.0/12", "-o", "xml"}, "want json or yaml"},
		{"bad dry-run", []string{"--network", "10.240.0.0/12", "--dry-run", "all"}, "want client or server"},
		{"not containing", []string{"--network", "10.20.0.0/16"}, "must strictly contain the current Network 10.244.0.0/16"},
		{"same network", []string{"--network", "10.244.0.0/16", "--from", "10.244.0.0/16"}, "must strictly contain"},
		{"node-range without rewrite", []string{"--network", "10.240.0.0/12", "--node-range", "10.240.0.0/16"}, "needs --rewrite-nodes"},
		{"rewrite without range", []string{"--network", "10.240.0.0/12", "--rewrite-nodes"}, "needs --node-range"},
		{"node-range outside", []string{"--network", "10.240.0.0/12", "--rewrite-nodes", "--node-range", "10.20.0.0/16"}, "must lie inside --network"},
		{"node-range too small", []string{"--network", "10.240.0.0/12", "--rewrite-nodes", "--node-range", "10.240.0.0/17"}, "at least /16"},
		{"ipv6", []string{"--network", "fd00::/48"}, "only an IPv4 Network"},
		{"extra arg", []string{"--network", "10.240.0.0/12", "foo"}, "unexpected argument"},
		{"make-before-break without agents", []string{"--network", "10.240.0.0/12", "--make-before-break"}, "--make-before-break needs --agents"},
		{"fix-only with another network", []string{"--fix-only", "--network", "10.240.0.0/12"}, "--fix-only keeps the Network in use, and net-conf.json in ConfigMap kube-flannel/kube-flannel-cfg holds 10.244.0.0/16"},
		{"fix-only with from", []string{"--fix-only", "--from", "10.244.0.0/16"}, "--from 10.244.0.0/16: --fix-only keeps the Network in use"},
		{"fix-only with rewrite", []string{"--fix-only", "--rewrite-nodes", "--node-range", "10.240.0.0/16"}, "--fix-only keeps every healthy node's podCIDR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			code, out, errOut := e.run(t, tt.args...)
			assert.Equal(t, exitBad, code)
			assert.Empty(t, out)
			assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
			assert.Contains(t, errOut, tt.want)
			assert.Equal(t, netConf, e.netConf(t), "bad input changes nothing")
		})
	}
}

// Make-before-break (explicit, or the default with --agents) refuses,
// before the first write, a cluster where a node with a podCIDR runs no
// agent; --make-before-break=false with --agents does not ask for it.
func TestMakeBeforeBreakNeedsRunningAgents(t *testing.T) {
	for _, args := range [][]string{{"--make-before-break", "--agents"}, {"--agents"}} {
		e := newEnv(t)
		code, out, errOut := e.run(t, append([]string{"--network", "10.240.0.0/12", "--apply", "--journal", filepath.Join(t.TempDir(), "j")}, args...)...)
		assert.Equal(t, exitBad, code, "%v", args)
		assert.Empty(t, out)
		assert.Contains(t, errOut, "no host agent runs on node(s) w1, w2, w3", "%v", args)
		assert.Equal(t, netConf, e.netConf(t), "bad input changes nothing")
		assert.Equal(t, "10.244.1.0/24", e.node(t, "w3").Spec.PodCIDR, "no node moved")
	}
	o, err := parseFlags([]string{"--network", "10.240.0.0/12", "--agents", "--make-before-break=false"}, io.Discard)
	require.NoError(t, err)
	assert.False(t, o.m.MakeBeforeBreak, "--make-before-break=false with --agents: drain-style")
	o, err = parseFlags([]string{"--network", "10.240.0.0/12"}, io.Discard)
	require.NoError(t, err)
	assert.False(t, o.m.MakeBeforeBreak, "without --agents: drain-style (the host steps are printed)")
}

// --fix-only (seed 001): the plan fixes w3 and w4 in the Network in use and
// asks the operator for nothing; applied, it moves them and only them.
func TestFixOnly(t *testing.T) {
	e := newEnv(t)
	code, out, errOut := e.run(t, "--fix-only")
	require.Equal(t, exitOK, code, errOut)
	for _, want := range []string{
		"runbook: repair in flannel Network 10.244.0.0/16 (--fix-only) (plan only",
		"1. fix-podcidrs [planned]", "recreate w3: 10.244.1.0/24 ->", "patch w4: (none) ->",
		"2. set-network [planned]", "net-conf.json already holds Network 10.244.0.0/16", "3. controller-manager [skipped]", "--cluster-cidr and kubeadm's podSubnet stay 10.244.0.0/16",
		"4. rewrite-nodes [skipped]", "5. host-cleanup [planned]", "node w3 moved 10.244.1.0/24 ->",
	} {
		assert.Contains(t, out, want)
	}
	assert.Equal(t, "uid-xw3", string(e.node(t, "w3").UID), "a plan changes nothing")

	code, out, errOut = e.run(t, "--fix-only", "--apply", "--journal", filepath.Join(t.TempDir(), "j"))
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	assert.Equal(t, netConf, e.netConf(t), "the Network stays")
	assert.Equal(t, "10.244.1.0/24", e.node(t, "w1").Spec.PodCIDR)
	w3, w4 := e.node(t, "w3").Spec.PodCIDR, e.node(t, "w4").Spec.PodCIDR
	assert.NotEqual(t, "10.244.1.0/24", w3)
	assert.NotEmpty(t, w4)
	assert.NotEqual(t, w3, w4)
	assert.True(t, strings.HasPrefix(w3, "10.244.") && strings.HasPrefix(w4, "10.244."), "%s %s", w3, w4)
}

func TestPlanModeChangesNothing(t *testing.T) {
	e := newEnv(t)
	code, out, errOut := e.run(t, "--network", "10.240.0.0/12")
	require.Equal(t, exitOK, code, errOut)
	for _, want := range []string{
		"runbook: flannel Network 10.244.0.0/16 -> 10.240.0.0/12 (plan only",
		"1. fix-podcidrs [planned]", "recreate w3: 10.244.1.0/24 ->", "patch w4: (none) ->",
		"2. set-network [planned]", `"Network": "10.240.0.0/12"`,
		"3. controller-manager [operator]", "--cluster-cidr=10.240.0.0/12",
		"4. rewrite-nodes [skipped]", "only needed to renumber",
		"5. host-cleanup [planned]", "node w3 moved 10.244.1.0/24 ->",
	} {
		assert.Contains(t, out, want)
	}
	assert.Equal(t, netConf, e.netConf(t))
	assert.Equal(t, "uid-xw3", string(e.node(t, "w3").UID))
	assert.Empty(t, e.node(t, "w4").Spec.PodCIDR)

	code, out, _ = e.run(t, "--network", "10.240.0.0/12", "-o", "json")
	require.Equal(t, exitOK, code)
	var rep Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, "plan", rep.Mode)
	require.Len(t, rep.Steps, 5)
	assert.Equal(t, stepKCM, rep.Steps[2].Name)
}

func TestApplyPausesThenResumes(t *testing.T) {
	e := newEnv(t)
	e.setMirror(t, "10.244.0.0/16")
	dir := filepath.Join(t.TempDir(), "j")
	args := []string{"--network", "10.240.0.0/12", "--journal", dir, "--apply", "--poll-interval", "10ms"}

	code, out, errOut := e.run(t, args...)
	require.Equal(t, exitWaiting, code, "%s\n%s", out, errOut)
	assert.Contains(t, out, "WAITING FOR AN OPERATOR (step controller-manager)")
	assert.Contains(t, out, "kube-controller-manager-cp has --cluster-cidr=10.244.0.0/16")
	assert.Contains(t, out, "restart by hand (no controller would recreate it): default/bare on w3")
	// Steps 1 and 2 are done: duplicates fixed, Network widened, formatting kept.
	assert.Equal(t, strings.Replace(netConf, "10.244.0.0/16", "10.240.0.0/12", 1), e.netConf(t))
	w3, w4 := e.node(t, "w3"), e.node(t, "w4")
	assert.NotEqual(t, "uid-xw3", string(w3.UID), "w3 recreated")
	assert.NotEqual(t, "10.244.1.0/24", w3.Spec.PodCIDR)
	assert.NotEmpty(t, w4.Spec.PodCIDR)
	assert.Equal(t, "uid-xw1", string(e.node(t, "w1").UID), "the oldest holder keeps its subnet")
	_, err := e.cs.CoreV1().Pods("default").Get(t.Context(), "web-a", metav1.GetOptions{})
	assert.Error(t, err, "controller-owned pod on the moved node restarted")
	_, err = e.cs.CoreV1().Pods("default").Get(t.Context(), "bare", metav1.GetOptions{})
	assert.NoError(t, err, "bare pod kept")
	_, err = e.cs.CoreV1().Pods("default").Get(t.Context(), "web-b", metav1.GetOptions{})
	assert.NoError(t, err, "pods on untouched nodes kept")

	// Rerun with nothing changed: still waiting, nothing redone.
	code, out, _ = e.run(t, args...)
	require.Equal(t, exitWaiting, code)
	assert.Contains(t, out, "1. fix-podcidrs [done]")
	assert.Contains(t, out, "2. set-network [done]")

	// The operator restarts kube-controller-manager; the rerun observes it.
	e.setMirror(t, "10.240.0.0/12")
	code, out, errOut = e.run(t, args...)
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	assert.Contains(t, out, "observed: every kube-controller-manager pod (kube-controller-manager-cp) runs with --cluster-cidr=10.240.0.0/12")
	assert.Contains(t, out, "4. rewrite-nodes [skipped]")
	assert.Contains(t, out, "node w3 moved 10.244.1.0/24 -> "+w3.Spec.PodCIDR)
	assert.Contains(t, out, "ip link delete cni0")
	assert.Contains(t, out, "verified: 4 nodes")

	// Finished: a rerun changes nothing.
	code, out, _ = e.run(t, args...)
	require.Equal(t, exitOK, code)
	assert.NotContains(t, out, "[completed]")

	// Another move in the same journal is refused.
	code, _, errOut = e.run(t, "--network", "10.0.0.0/8", "--journal", dir, "--apply")
	assert.Equal(t, exitBad, code)
	assert.Contains(t, errOut, "records a move 10.244.0.0/16 -> 10.240.0.0/12")
}

func TestApplyRewriteNodesWithContinue(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(t.TempDir(), "j")
	args := []string{"--network", "10.240.0.0/12", "--rewrite-nodes", "--node-range", "10.240.0.0/16", "--journal", dir, "--apply", "--poll-interval", "10ms"}
	code, out, _ := e.run(t, args...)
	require.Equal(t, exitWaiting, code, out)
	assert.Contains(t, out, "no kube-controller-manager mirror pod in kube-system")

	code, out, errOut := e.run(t, append(args, "--continue")...)
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	assert.Contains(t, out, "--continue given")
	seen := map[string]string{}
	for _, name := range []string{"w1", "w2", "w3", "w4"} {
		n := e.node(t, name)
		p := cidr.MustParse(n.Spec.PodCIDR)
		assert.True(t, cidr.ContainsPrefix(cidr.MustParse("10.240.0.0/16"), p), "%s: %s", name, p)
		assert.NotContains(t, seen, n.Spec.PodCIDR, "duplicate %s", n.Spec.PodCIDR)
		seen[n.Spec.PodCIDR] = name
	}
	assert.Equal(t, "10.240.2.0/24", e.node(t, "w2").Spec.PodCIDR, "rebase keeps the offset")
	assert.Contains(t, out, "node w2 moved 10.244.2.0/24 -> 10.240.2.0/24")
	assert.Contains(t, out, "verified: 4 nodes")
}

func TestServerDryRunChangesNothing(t *testing.T) {
	e := newEnv(t)
	code, out, errOut := e.run(t, "--network", "10.240.0.0/12", "--dry-run", "server")
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	assert.Contains(t, out, "server dry run")
	assert.Equal(t, netConf, e.netConf(t))
	assert.Equal(t, "uid-xw3", string(e.node(t, "w3").UID))
	assert.Empty(t, e.node(t, "w4").Spec.PodCIDR)
	_, err := e.cs.CoreV1().Pods("default").Get(t.Context(), "web-a", metav1.GetOptions{})
	assert.NoError(t, err)
}

const kcmManifest = `apiVersion: v1
kind: Pod
metadata:
  labels:
    component: kube-controller-manager
  name: kube-controller-manager
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-controller-manager
    - --allocate-node-cidrs=true
    - --cluster-cidr=10.244.0.0/16
    - --node-cidr-mask-size=24
    - --service-cluster-ip-range=10.96.0.0/12
    image: registry.k8s.io/kube-controller-manager:v1.36.3
    name: kube-controller-manager
  hostNetwork: true
`

func TestPlanRendersManifest(t *testing.T) {
	e := newEnv(t)
	in, out := t.TempDir(), filepath.Join(t.TempDir(), "out")
	require.NoError(t, os.WriteFile(filepath.Join(in, "kube-controller-manager.yaml"), []byte(kcmManifest), 0o600))
	code, stdout, errOut := e.run(t, "--network", "10.240.0.0/12", "--manifests", in, "--out", out)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, stdout, "+    - --cluster-cidr=10.240.0.0/12")
	got, err := os.ReadFile(filepath.Join(out, "kube-controller-manager.yaml"))
	require.NoError(t, err)
	assert.Equal(t, strings.Replace(kcmManifest, "10.244.0.0/16", "10.240.0.0/12", 1), string(got), "only the flag changes")
	orig, err := os.ReadFile(filepath.Join(in, "kube-controller-manager.yaml"))
	require.NoError(t, err)
	assert.Equal(t, kcmManifest, string(orig), "--manifests is read only")

	code, _, errOut = e.run(t, "--network", "10.240.0.0/12", "--manifests", in, "--out", in)
	assert.Equal(t, exitBad, code)
	assert.Contains(t, errOut, "--out must differ from --manifests")
}

const clusterConfiguration = `apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v1.36.3
networking:
  dnsDomain: cluster.local
  podSubnet: 10.244.0.0/16
  serviceSubnet: 10.96.0.0/12
`

func TestApplyUpdatesKubeadmConfig(t *testing.T) {
	e := newEnv(t)
	_, err := e.cs.CoreV1().ConfigMaps("kube-system").Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kubeadm-config", Namespace: "kube-system", UID: "kc", ResourceVersion: "1"},
		Data:       map[string]string{"ClusterConfiguration": clusterConfiguration},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	e.setMirror(t, "10.240.0.0/12")
	dir := filepath.Join(t.TempDir(), "j")
	code, out, errOut := e.run(t, "--network", "10.240.0.0/12", "--journal", dir, "--apply", "--poll-interval", "10ms")
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	cm, err := e.cs.CoreV1().ConfigMaps("kube-system").Get(t.Context(), "kubeadm-config", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, strings.Replace(clusterConfiguration, "podSubnet: 10.244.0.0/16", "podSubnet: 10.240.0.0/12", 1), cm.Data["ClusterConfiguration"])
	assert.Contains(t, out, "kube-system/kubeadm-config")
}
