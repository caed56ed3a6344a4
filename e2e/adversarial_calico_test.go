package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/internal/cli/clitest"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// The adversarial suite for the Calico programs (calicopoolswap,
// migrate-calico-podcidr) and kubeadmcfg against a real control plane with
// the Calico CRDs: every case is bad input that, without its check, would
// create or disable a pool, recreate a node or rewrite a ConfigMap. Each must
// leave the cluster exactly as it was.

const (
	advCalicoOldCIDR = "10.233.64.0/18"
	advCalicoSvcCIDR = "10.233.0.0/18"
	advCalicoOldPool = "default-ipv4-ippool"
)

// advCalicoCluster starts a control plane without node IPAM (the podCIDRs
// stay as created), installs the Calico CRDs and creates story 1: three
// nodes in 10.233.64.0/18, the old pool there, a disabled pool "other" in
// 10.30.0.0/16, and kubeadm's ConfigMaps when kubeadmFiles name them.
func advCalicoCluster(t *testing.T, kubeadmFiles ...string) (*harness.Cluster, kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	c := harness.Start(t, harness.Options{ClusterCIDR: advCalicoOldCIDR, NodeCIDRMaskSize: 24, ServiceCIDR: advCalicoSvcCIDR, DisableNodeIPAM: true})
	ctx := t.Context()
	cs := nodeE2EClient(t, c)
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	require.NoError(t, err)
	installCalicoCRDs(t, dyn)
	poll(t, 30*time.Second, "discovery serves crd.projectcalico.org/v1 ippools", func(ctx context.Context) error {
		api, err := calico.ServedAPI(ctx, cs.Discovery())
		if err != nil {
			return err
		}
		if api != calico.APICRDV1 {
			return fmt.Errorf("served API is %s", api)
		}
		return nil
	})
	for _, p := range []map[string]any{
		{"metadata": map[string]any{"name": advCalicoOldPool},
			"spec": map[string]any{"cidr": advCalicoOldCIDR, "blockSize": int64(26), "vxlanMode": "Always", "natOutgoing": true, "nodeSelector": "all()"}},
		{"metadata": map[string]any{"name": "other"},
			"spec": map[string]any{"cidr": "10.30.0.0/16", "blockSize": int64(26), "disabled": true}},
	} {
		p["apiVersion"], p["kind"] = calico.IPPoolsV1.GroupVersion().String(), "IPPool"
		_, err := dyn.Resource(calico.IPPoolsV1).Create(ctx, &unstructured.Unstructured{Object: p}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	nodeE2ECreateNodes(t, ctx, cs, []*corev1.Node{
		nodeE2EWithPodCIDR(harness.KwokNode("master1", map[string]string{nodecidr.LabelControlPlane: ""}), "10.233.66.0/24"),
		nodeE2EWithPodCIDR(harness.KwokNode("worker1", nil), "10.233.64.0/24"),
		nodeE2EWithPodCIDR(harness.KwokNode("worker2", nil), "10.233.65.0/24"),
	})
	// kwok and the node lifecycle controller change fresh nodes for a few
	// seconds (Ready, taints, annotations): wait, so a snapshot compares
	// only what the program did.
	nodeE2ESettled(t, cs, 3, 90*time.Second)
	for _, f := range kubeadmFiles {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		cm, err := kubeadmcfg.DecodeConfigMap(data)
		require.NoError(t, err)
		cm.ResourceVersion, cm.UID = "", ""
		_, err = cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, cm, metav1.CreateOptions{})
		require.NoError(t, err, "create ConfigMap from %s", f)
	}
	return c, cs, dyn
}

// advCalicoSwapPlan writes the plan `calicopoolswap plan -o yaml` makes for the
// move of the old pool to 10.20.0.0/16 (a read-only run), edited by edit as
// a person could with a text editor.
func advCalicoSwapPlan(c *harness.Cluster, edit func(p map[string]any)) func(t *testing.T) []string {
	return func(t *testing.T) []string {
		bin := advBuild(t, "calicopoolswap")
		out, err := exec.CommandContext(t.Context(), bin, "plan", "-o", "yaml", "--kubeconfig", c.AdminKubeconfig(),
			"--old-pool", advCalicoOldPool, "--new-cidr", "10.20.0.0/16", "--cluster-cidr", "10.20.0.0/16", "--service-cidr", advCalicoSvcCIDR).Output()
		require.NoError(t, err, "%s", out)
		var p map[string]any
		require.NoError(t, yaml.Unmarshal(out, &p))
		edit(p)
		y, err := yaml.Marshal(p)
		require.NoError(t, err)
		file := filepath.Join(t.TempDir(), "swap.yaml")
		require.NoError(t, os.WriteFile(file, y, 0o644))
		return []string{"--plan", file}
	}
}

func advCalicoMap(p map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		p = p[k].(map[string]any)
	}
	return p
}

func TestAdversarialCalicoPoolSwap(t *testing.T) {
	advUseBinary("calicopoolswap")
	c, _, _ := advCalicoCluster(t)
	kc := []string{"--kubeconfig", c.AdminKubeconfig()}
	extra := func(t *testing.T) []string { return []string{"--journal", filepath.Join(t.TempDir(), "journal")} }
	applyPlan := []string{"apply", "--apply"}
	cases := []advCase{
		{name: "plan newCIDR disagrees with the pool's spec.cidr", args: applyPlan, code: 2, msg: []string{"newCIDR", "10.21.0.0/16", "10.20.0.0/16"},
			setup: advCalicoSwapPlan(c, func(p map[string]any) { p["newCIDR"] = "10.21.0.0/16" })},
		{name: "plan spec.cidr edited to overlap the old pool", args: applyPlan, code: 2, msg: []string{"newCIDR", "10.233.64.0/19"},
			setup: advCalicoSwapPlan(c, func(p map[string]any) { advCalicoMap(p, "newPool", "spec")["cidr"] = "10.233.64.0/19" })},
		{name: "plan new pool moved onto the Service CIDR", args: applyPlan, code: 2, msg: []string{"invalid plan", "10.233.0.0/20", "Service CIDR 10.233.0.0/18"},
			setup: advCalicoSwapPlan(c, func(p map[string]any) {
				advCalicoMap(p, "newPool", "spec")["cidr"] = "10.233.0.0/20"
				p["newCIDR"], p["clusterCIDRs"] = "10.233.0.0/20", []any{"10.233.0.0/16"}
			})},
		{name: "plan new pool outside its cluster CIDR", args: applyPlan, code: 2, msg: []string{"invalid plan", "10.40.0.0/16", "outside the cluster CIDR 10.20.0.0/16"},
			setup: advCalicoSwapPlan(c, func(p map[string]any) {
				advCalicoMap(p, "newPool", "spec")["cidr"] = "10.40.0.0/16"
				p["newCIDR"] = "10.40.0.0/16"
			})},
		{name: "plan blockSize out of range", args: applyPlan, code: 2, msg: []string{"newPool.spec.blockSize", `"40"`},
			setup: advCalicoSwapPlan(c, func(p map[string]any) { advCalicoMap(p, "newPool", "spec")["blockSize"] = 40 })},
		{name: "plan oldCIDR narrowed (verify would check the wrong range)", args: applyPlan, code: 2, msg: []string{"oldCIDR", "10.233.64.0/24", advCalicoOldCIDR},
			setup: advCalicoSwapPlan(c, func(p map[string]any) { p["oldCIDR"] = "10.233.64.0/24" })},
		{name: "plan new pool disabled", args: applyPlan, code: 2, msg: []string{"newPool.spec.disabled", "true"},
			setup: advCalicoSwapPlan(c, func(p map[string]any) { advCalicoMap(p, "newPool", "spec")["disabled"] = true })},
		{name: "plan truncated", args: applyPlan, code: 2, msg: []string{"--plan", "invalid plan"},
			setup: func(t *testing.T) []string {
				args := advCalicoSwapPlan(c, func(map[string]any) {})(t)
				data, err := os.ReadFile(args[1])
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(args[1], data[:len(data)/3], 0o644))
				return args
			}},
		{name: "plan with --new-cidr", args: []string{"apply", "--apply", "--new-cidr", "10.50.0.0/16"}, code: 2, msg: []string{"--plan", "--new-cidr"},
			setup: advCalicoSwapPlan(c, func(map[string]any) {})},
		{name: "--old-pool that does not exist", args: []string{"apply", "--apply", "--old-pool", "nope", "--new-cidr", "10.20.0.0/16", "--cluster-cidr", "10.20.0.0/16"},
			code: 2, msg: []string{"--old-pool", `"nope"`}},
		{name: "--new-cidr overlapping the Service CIDR", args: []string{"apply", "--apply", "--old-pool", advCalicoOldPool, "--new-cidr", "10.233.0.0/20", "--service-cidr", advCalicoSvcCIDR},
			code: 2, msg: []string{"10.233.0.0/20", "Service CIDR 10.233.0.0/18"}},
		{name: "--new-cidr outside --cluster-cidr", args: []string{"apply", "--apply", "--old-pool", advCalicoOldPool, "--new-cidr", "10.20.0.0/16", "--cluster-cidr", "10.21.0.0/16"},
			code: 2, msg: []string{"10.20.0.0/16", "outside the cluster CIDR 10.21.0.0/16"}},
		{name: "--new-cidr overlapping another pool", args: []string{"apply", "--apply", "--old-pool", advCalicoOldPool, "--new-cidr", "10.30.0.0/20"},
			code: 2, msg: []string{"10.30.0.0/20", "overlaps IPPool other"}},
		{name: "--new-name naming another pool", args: []string{"apply", "--apply", "--old-pool", advCalicoOldPool, "--new-cidr", "10.20.0.0/16", "--new-name", "other"},
			code: 2, msg: []string{"metadata.name", `"other"`}},
		{name: "stray positional argument", args: []string{"apply", "--apply", "--old-pool", advCalicoOldPool, "--new-cidr", "10.20.0.0/16", "now"},
			code: 2, msg: []string{`unexpected argument "now"`}},
		{name: "garbage kubeconfig", args: []string{"apply", "--apply", "--old-pool", advCalicoOldPool, "--new-cidr", "10.20.0.0/16"},
			code: 2, msg: []string{"kubeconfig"}, setup: func(t *testing.T) []string { return []string{"--kubeconfig", clitest.GarbageKubeconfig(t)} }},
		{name: "unreachable cluster", args: []string{"apply", "--apply", "--old-pool", advCalicoOldPool, "--new-cidr", "10.20.0.0/16"},
			code: 4, msg: []string{"unreachable"}, setup: func(t *testing.T) []string { return []string{"--kubeconfig", clitest.UnreachableKubeconfig(t)} }},
	}
	// Every case but the kubeconfig ones talks to the cluster.
	for i := range cases {
		if cases[i].setup == nil {
			cases[i].args = append(cases[i].args, kc...)
		} else if s := cases[i].setup; cases[i].name != "garbage kubeconfig" && cases[i].name != "unreachable cluster" {
			cases[i].setup = func(t *testing.T) []string { return append(s(t), kc...) }
		}
	}
	advRunCases(t, c, "calicopoolswap", extra, cases)
}

func TestAdversarialMigrateCalico(t *testing.T) {
	advUseBinary("migrate-calico-podcidr")
	c, _, _ := advCalicoCluster(t, "../examples/migrate-calico-podcidr/testdata/kubeadm-config.yaml", "../examples/migrate-calico-podcidr/testdata/kube-proxy.yaml")
	base := []string{"--kubeconfig", c.AdminKubeconfig(), "--service-cidr", advCalicoSvcCIDR, "--apply"}
	extra := func(t *testing.T) []string { return []string{"--journal", filepath.Join(t.TempDir(), "journal")} }
	a := func(args ...string) []string { return append(append([]string{}, base...), args...) }
	cases := []advCase{
		{name: "--from is not the old pool's range", args: a("--to", "10.200.0.0/16", "--from", "10.233.128.0/18"), code: 2,
			msg: []string{"--from 10.233.128.0/18", advCalicoOldPool, advCalicoOldCIDR}},
		{name: "--from narrower than the old pool", args: a("--to", "10.200.0.0/16", "--from", "10.233.64.0/24"), code: 2,
			msg: []string{"--from 10.233.64.0/24", advCalicoOldCIDR}},
		{name: "--old-pool that does not exist, --from given", args: a("--to", "10.200.0.0/16", "--from", advCalicoOldCIDR, "--old-pool", "nope"), code: 2,
			msg: []string{"--old-pool", `"nope"`}},
		{name: "--to equal to the range in use", args: a("--to", advCalicoOldCIDR), code: 2, msg: []string{"--to " + advCalicoOldCIDR}},
		{name: "--to overlapping the old pool", args: []string{"--kubeconfig", c.AdminKubeconfig(), "--service-cidr", "10.96.0.0/12", "--apply", "--to", "10.233.0.0/17"}, code: 2,
			msg: []string{"10.233.0.0/17", "overlaps IPPool " + advCalicoOldPool}},
		{name: "--to overlapping the Service CIDR", args: a("--to", "10.233.0.0/16"), code: 2, msg: []string{"--to 10.233.0.0/16", advCalicoSvcCIDR}},
		{name: "--to overlapping another pool", args: a("--to", "10.30.0.0/20"), code: 2, msg: []string{"10.30.0.0/20", "overlaps IPPool other"}},
		{name: "--to too small for the nodes", args: a("--to", "10.200.0.0/23"), code: 2, msg: []string{"--to 10.200.0.0/23"}},
		{name: "--new-pool invalid name", args: a("--to", "10.200.0.0/16", "--new-pool", "Bad_Name"), code: 2, msg: []string{"metadata.name", `"Bad_Name"`}},
		{name: "--new-pool named as --old-pool", args: a("--to", "10.200.0.0/16", "--new-pool", advCalicoOldPool), code: 2, msg: []string{"--new-pool", advCalicoOldPool}},
		{name: "negative --poll-interval", args: a("--to", "10.200.0.0/16", "--poll-interval", "-1s"), code: 2, msg: []string{"--poll-interval", "-1s"}},
		{name: "--apply with --dry-run=server", args: a("--to", "10.200.0.0/16", "--dry-run", "server"), code: 2, msg: []string{"--apply", "--dry-run=server"}},
		{name: "--node-mask shorter than --to", args: a("--to", "10.200.0.0/16", "--node-mask", "12"), code: 2, msg: []string{"--to 10.200.0.0/16", "/12"}},
		{name: "stray positional argument", args: a("--to", "10.200.0.0/16", "now"), code: 2, msg: []string{`unexpected argument "now"`}},
		{name: "garbage kubeconfig", args: []string{"--to", "10.200.0.0/16", "--service-cidr", advCalicoSvcCIDR, "--apply"}, code: 2, msg: []string{"kubeconfig"},
			setup: func(t *testing.T) []string { return []string{"--kubeconfig", clitest.GarbageKubeconfig(t)} }},
		{name: "unreachable cluster", args: []string{"--to", "10.200.0.0/16", "--service-cidr", advCalicoSvcCIDR, "--apply"}, code: 4, msg: []string{"unreachable"},
			setup: func(t *testing.T) []string { return []string{"--kubeconfig", clitest.UnreachableKubeconfig(t)} }},
	}
	advRunCases(t, c, "migrate-calico-podcidr", extra, cases)
}

func TestAdversarialKubeadmcfg(t *testing.T) {
	advUseBinary("kubeadmcfg")
	// First without kubeadm's ConfigMaps: a run that reads nothing must fail.
	c, cs, _ := advCalicoCluster(t)
	kc := []string{"--kubeconfig", c.AdminKubeconfig()}
	manifests := "../examples/kubeadmcfg/testdata/manifests"
	advRunCases(t, c, "kubeadmcfg", nil, []advCase{
		{name: "check a cluster without kubeadm ConfigMaps", args: append([]string{"check", "--manifests", ""}, kc...), code: 2, msg: []string{"kubeadm-config", "nothing to check"}},
		{name: "set --apply on a cluster without kubeadm ConfigMaps", args: append([]string{"set", "--pod-subnet", "10.20.0.0/16", "--manifests", "", "--apply"}, kc...),
			code: 2, msg: []string{"kubeadm-config", "nothing"}},
		{name: "set --apply with manifests but no ConfigMaps", args: append([]string{"set", "--pod-subnet", "10.20.0.0/16", "--manifests", manifests, "--apply"}, kc...),
			code: 2, msg: []string{"--apply", "no kubeadm-config"}},
	})
	for _, f := range []string{"kubeadm-config.yaml", "kube-proxy.yaml", "kubelet-config.yaml"} {
		data, err := os.ReadFile(filepath.Join("../examples/kubeadmcfg/testdata", f))
		require.NoError(t, err)
		cm, err := kubeadmcfg.DecodeConfigMap(data)
		require.NoError(t, err)
		cm.ResourceVersion, cm.UID = "", ""
		_, err = cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(t.Context(), cm, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	advRunCases(t, c, "kubeadmcfg", nil, []advCase{
		{name: "--manifests that does not exist", args: append([]string{"set", "--pod-subnet", "10.30.0.0/16", "--manifests", "/nonexistent/manifests", "--apply"}, kc...),
			code: 2, msg: []string{"--manifests", "/nonexistent/manifests"}},
		{name: "--pod-subnet overlapping the Service subnet", args: append([]string{"set", "--pod-subnet", "10.233.0.0/16", "--manifests", manifests, "--apply"}, kc...),
			code: 2, msg: []string{"--pod-subnet", "10.233.0.0/16", "10.233.0.0/18"}},
		{name: "negative --node-mask", args: append([]string{"set", "--node-mask", "-1", "--manifests", manifests, "--apply"}, kc...),
			code: 2, msg: []string{"--node-mask", "-1"}},
		{name: "--node-mask 33", args: append([]string{"set", "--node-mask", "33", "--manifests", manifests, "--apply"}, kc...),
			code: 2, msg: []string{"--node-mask", "33"}},
		{name: "--pool that does not parse", args: append([]string{"set", "--pod-subnet", "10.30.0.0/16", "--pool", "p=10.300.0.0/16", "--manifests", manifests, "--apply"}, kc...),
			code: 2, msg: []string{"--pool", "10.300.0.0/16"}},
		{name: "stray positional argument", args: append([]string{"set", "--pod-subnet", "10.30.0.0/16", "--manifests", manifests, "--apply", "now"}, kc...),
			code: 2, msg: []string{`unexpected argument "now"`}},
		{name: "garbage kubeconfig", args: []string{"set", "--pod-subnet", "10.30.0.0/16", "--manifests", manifests, "--apply"}, code: 2, msg: []string{"kubeconfig"},
			setup: func(t *testing.T) []string { return []string{"--kubeconfig", clitest.GarbageKubeconfig(t)} }},
		{name: "unreachable cluster", args: []string{"set", "--pod-subnet", "10.30.0.0/16", "--manifests", manifests, "--apply"}, code: 4, msg: []string{"unreachable"},
			setup: func(t *testing.T) []string { return []string{"--kubeconfig", clitest.UnreachableKubeconfig(t)} }},
	})
}
