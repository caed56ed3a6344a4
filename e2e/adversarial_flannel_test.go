package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/internal/cli/clitest"
)

// The adversarial suite for flannelsubnets (etcd mode against the harness's
// real etcd, kube subnet manager mode against the real apiserver) and for
// the migrate-flannel-podcidr runbook. Every case runs with --apply, so a
// missing check would change etcd or the cluster; advRunCases asserts the
// API objects are unchanged, and advFlannelEtcd adds the same assertion for
// every key under the flannel prefix in etcd.

const advFlannelPrefix = "/coreos.com/network"

// advFlannelConfig is the etcd network config: host-gw, 172.7.0.0/16.
const advFlannelConfig = `{"Network": "172.7.0.0/16", "Backend": {"Type": "host-gw"}}`

// advFlannelNetConf is net-conf.json of the kube-mode cluster.
const advFlannelNetConf = "{\n  \"Network\": \"10.244.0.0/16\",\n  \"Backend\": {\n    \"Type\": \"vxlan\"\n  }\n}\n"

// advEtcdSnapshot returns every key under the flannel prefix with its value,
// create and mod revision and etcd lease.
func advEtcdSnapshot(t *testing.T, ctx context.Context, kv flannel.KV) map[string]string {
	t.Helper()
	res, err := kv.Get(ctx, advFlannelPrefix+"/", flannel.GetOptions{Prefix: true})
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range res.KVs {
		out[e.Key] = fmt.Sprintf("value=%q create=%d mod=%d lease=%x", e.Value, e.CreateRevision, e.ModRevision, e.Lease)
	}
	return out
}

// advFlannelEtcd registers, for one case, a before/after comparison of
// every key under the flannel prefix: the snapshot is taken now (setup runs
// before the program) and compared when the case ends.
func advFlannelEtcd(kv flannel.KV) func(t *testing.T) []string {
	return func(t *testing.T) []string {
		before := advEtcdSnapshot(t, t.Context(), kv)
		require.NotEmpty(t, before)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			after := advEtcdSnapshot(t, ctx, kv)
			var diff []string
			for k, v := range before {
				if w, ok := after[k]; !ok {
					diff = append(diff, "deleted "+k)
				} else if w != v {
					diff = append(diff, "changed "+k+": "+v+" -> "+w)
				}
			}
			for k := range after {
				if _, ok := before[k]; !ok {
					diff = append(diff, "created "+k)
				}
			}
			sort.Strings(diff)
			assert.Empty(t, diff, "etcd under %s changed after bad input", advFlannelPrefix)
		})
		return nil
	}
}

// advFlannelSeedEtcd writes the config and three leases, each with an etcd
// lease as flanneld makes them.
func advFlannelSeedEtcd(t *testing.T, ctx context.Context, kv *flannel.EtcdKV) {
	t.Helper()
	put := func(key, value string, lease int64) {
		res, err := kv.Txn(ctx, flannel.Txn{Then: []flannel.Op{{Type: flannel.OpPut, Key: key, Value: []byte(value), Lease: lease}}})
		require.NoError(t, err)
		require.True(t, res.Succeeded)
	}
	put(advFlannelPrefix+"/config", advFlannelConfig, 0)
	for i, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		g, err := kv.Client().Grant(ctx, 3600)
		require.NoError(t, err)
		put(fmt.Sprintf("%s/subnets/172.7.%d.0-24", advFlannelPrefix, i+1), fmt.Sprintf(`{"PublicIP":%q,"PublicIPv6":null,"BackendType":"host-gw"}`, ip), int64(g.ID))
	}
}

// advFlannelKubeObjects creates kube-flannel/kube-flannel-cfg and three
// nodes in 10.244.0.0/16 (worker2 and worker3 share a podCIDR, so the
// runbook's fix step would recreate one of them).
func advFlannelKubeObjects(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().ConfigMaps("kube-flannel").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-cfg", Namespace: "kube-flannel", Labels: map[string]string{"app": "flannel"}},
		Data:       map[string]string{"net-conf.json": advFlannelNetConf, "cni-conf.json": flCNIConf},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	for i, pc := range []string{"10.244.1.0/24", "10.244.2.0/24", "10.244.2.0/24"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("worker%d", i+1), Annotations: map[string]string{
			"flannel.alpha.coreos.com/backend-type":        "vxlan",
			"flannel.alpha.coreos.com/kube-subnet-manager": "true",
			"flannel.alpha.coreos.com/public-ip":           fmt.Sprintf("192.168.0.%d", i+1),
		}}, Spec: corev1.NodeSpec{PodCIDR: pc, PodCIDRs: []string{pc}}}
		_, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err)
		time.Sleep(1100 * time.Millisecond) // distinct creation times: the older twin keeps its podCIDR
	}
}

// advFlannelCluster starts etcd + kube-apiserver only: no controller moves
// nodes or pods, so any change is the program's.
func advFlannelCluster(t *testing.T) (*harness.Cluster, kubernetes.Interface) {
	skipInShortMode(t)
	c := harness.Start(t, harness.Options{
		ClusterCIDR: "10.244.0.0/16", NodeCIDRMaskSize: 24, DisableNodeIPAM: true,
		Disable: []harness.Component{harness.ControllerManager, harness.Scheduler, harness.Kwok},
	})
	cs := nodeE2EClient(t, c)
	advFlannelKubeObjects(t, t.Context(), cs)
	return c, cs
}

func TestAdversarialFlannelSubnets(t *testing.T) {
	c, _ := advFlannelCluster(t)
	ctx := t.Context()
	kv, err := flannel.DialEtcd(ctx, flannel.EtcdConfig{Endpoints: []string{c.EtcdEndpoint()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kv.Close() })
	advFlannelSeedEtcd(t, ctx, kv)
	kubeconfig := c.AdminKubeconfig()
	etcdArgs := func(*testing.T) []string {
		return []string{"--etcd-endpoints", c.EtcdEndpoint(), "--kubeconfig", kubeconfig}
	}
	guard := advFlannelEtcd(kv)

	t.Run("etcd", func(t *testing.T) {
		advRunCases(t, c, "flannelsubnets", etcdArgs, []advCase{
			{name: "rm a key no lease holds", args: []string{"rm", "172.7.9.0-24", "--apply"}, setup: guard, code: 2, msg: []string{"172.7.9.0-24"}},
			{name: "rm the config key", args: []string{"rm", advFlannelPrefix + "/config", "--apply"}, setup: guard, code: 2, msg: []string{advFlannelPrefix + "/config"}},
			{name: "move a key no lease holds", args: []string{"move", "172.7.9.0-24", "--apply"}, setup: guard, code: 2, msg: []string{"172.7.9.0-24"}},
			{name: "move onto another lease", args: []string{"move", "172.7.1.0-24", "172.7.3.0/24", "--apply"}, setup: guard, code: 2, msg: []string{"172.7.3.0/24"}},
			{name: "move outside the network", args: []string{"move", "172.7.1.0-24", "10.1.0.0/24", "--apply"}, setup: guard, code: 2, msg: []string{"10.1.0.0/24"}},
			{name: "move to host bits", args: []string{"move", "172.7.1.0-24", "172.7.5.1/24", "--apply"}, setup: guard, code: 2, msg: []string{"172.7.5.1/24"}},
			{name: "set-network to the current network", args: []string{"set-network", "172.7.0.0/16", "--apply"}, setup: guard, code: 2, msg: []string{"172.7.0.0/16", "already"}},
			{name: "set-network ipv6 on an IPv4 config", args: []string{"set-network", "fd00::/48", "--apply"}, setup: guard, code: 2, msg: []string{"fd00::/48", "EnableIPv6"}},
			{name: "set-network not a CIDR", args: []string{"set-network", "172.7.0.0/33", "--apply"}, setup: guard, code: 2, msg: []string{"172.7.0.0/33"}},
			{name: "etcd CA file that does not exist", args: []string{"--etcd-cafile", "/nonexistent/ca.pem", "rm", "172.7.2.0-24", "--apply"}, setup: guard, code: 2, msg: []string{"--etcd-cafile", "/nonexistent/ca.pem"}},
			{name: "etcd client cert that does not exist", args: []string{"--etcd-certfile", "/nonexistent/c.pem", "--etcd-keyfile", "/nonexistent/k.pem", "rm", "172.7.2.0-24", "--apply"}, setup: guard, code: 2, msg: []string{"--etcd-certfile", "/nonexistent/c.pem"}},
			{name: "relative etcd prefix", args: []string{"--etcd-prefix", "coreos.com/network", "rm", "172.7.2.0-24", "--apply"}, setup: guard, code: 2, msg: []string{"--etcd-prefix", `"coreos.com/network"`}},
			{name: "apply with show", args: []string{"show", "--apply"}, setup: guard, code: 2, msg: []string{"--apply", "show"}},
		})
	})
	t.Run("etcd-unreachable", func(t *testing.T) {
		advRunCases(t, c, "flannelsubnets", nil, []advCase{
			{name: "etcd endpoint not a URL", args: []string{"--etcd-endpoints", "127.0.0.1:2379", "rm", "172.7.2.0-24", "--apply"}, setup: guard, code: 2, msg: []string{"--etcd-endpoints", "127.0.0.1:2379"}},
			{name: "etcd nobody answers", args: []string{"--etcd-endpoints", "http://127.0.0.1:1", "rm", "172.7.2.0-24", "--apply"}, setup: guard, code: 4, msg: []string{"unreachable", "127.0.0.1:1"}},
		})
	})
	t.Run("kube", func(t *testing.T) {
		kubeArgs := func(*testing.T) []string { return []string{"--kubeconfig", kubeconfig} }
		advRunCases(t, c, "flannelsubnets", kubeArgs, []advCase{
			{name: "set-network leaving nodes outside", args: []string{"--kube-subnet-mgr", "set-network", "10.20.0.0/16", "--apply"}, code: 2, msg: []string{"10.20.0.0/16", "worker1"}},
			{name: "set-network to the current network", args: []string{"--kube-subnet-mgr", "set-network", "10.244.0.0/16", "--apply"}, code: 2, msg: []string{"10.244.0.0/16", "already"}},
			{name: "set-network ipv6 on an IPv4 config", args: []string{"--kube-subnet-mgr", "set-network", "fd00::/48", "--apply"}, code: 2, msg: []string{"fd00::/48"}},
			{name: "set-network with host bits", args: []string{"--kube-subnet-mgr", "set-network", "10.0.0.1/8", "--apply"}, code: 2, msg: []string{"10.0.0.1/8"}},
			{name: "configmap that does not exist", args: []string{"--kube-subnet-mgr", "--configmap", "nope", "set-network", "10.0.0.0/8", "--apply"}, code: 2, msg: []string{"--configmap nope"}},
			{name: "bad namespace name", args: []string{"--kube-subnet-mgr", "--namespace", "Kube_Flannel", "set-network", "10.0.0.0/8", "--apply"}, code: 2, msg: []string{"--namespace", `"Kube_Flannel"`}},
			{name: "move-leases in kube mode", args: []string{"--kube-subnet-mgr", "set-network", "10.0.0.0/8", "--move-leases", "--apply"}, code: 2, msg: []string{"--move-leases"}},
			{name: "server dry-run in etcd mode", args: []string{"--dry-run=server", "rm", "172.7.2.0-24"}, setup: guard, code: 2, msg: []string{"--dry-run=server"}},
		})
	})
	t.Run("kubeconfig", func(t *testing.T) {
		advRunCases(t, c, "flannelsubnets", nil, []advCase{
			{name: "garbage kubeconfig", args: []string{"--kube-subnet-mgr", "set-network", "10.0.0.0/8", "--apply", "--kubeconfig", clitest.GarbageKubeconfig(t)}, code: 2, msg: []string{"kubeconfig"}},
			{name: "unreachable API server", args: []string{"--kube-subnet-mgr", "set-network", "10.0.0.0/8", "--apply", "--kubeconfig", clitest.UnreachableKubeconfig(t)}, code: 4, msg: []string{"unreachable", "127.0.0.1:1"}},
		})
	})
}

func TestAdversarialMigrateFlannel(t *testing.T) {
	c, cs := advFlannelCluster(t)
	kubeconfig := c.AdminKubeconfig()
	apply := func(t *testing.T) []string {
		return []string{"--kubeconfig", kubeconfig, "--journal", t.TempDir(), "--apply", "--poll-interval", "100ms"}
	}
	// outsideNode adds, for one case, a node whose podCIDR lies outside the
	// current Network, and removes it afterwards.
	outsideNode := func(t *testing.T) []string {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stray"}, Spec: corev1.NodeSpec{PodCIDR: "10.99.1.0/24", PodCIDRs: []string{"10.99.1.0/24"}}}
		_, err := cs.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = cs.CoreV1().Nodes().Delete(context.Background(), "stray", metav1.DeleteOptions{})
		})
		return nil
	}
	manifests := func(body string) func(t *testing.T) []string {
		return func(t *testing.T) []string {
			dir := t.TempDir()
			if body != "" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "kube-controller-manager.yaml"), []byte(body), 0o600))
			}
			return []string{"--manifests", dir}
		}
	}
	t.Run("apply", func(t *testing.T) {
		advRunCases(t, c, "migrate-flannel-podcidr", apply, []advCase{
			// The named defect of issue 20: worker3 was recreated before the
			// selector was parsed.
			{name: "malformed flannel selector", args: []string{"--network", "10.0.0.0/8", "--flannel-selector", "a in (("}, code: 2, msg: []string{"--flannel-selector", `"a in (("`}},
			{name: "empty flannel selector", args: []string{"--network", "10.0.0.0/8", "--flannel-selector", ""}, code: 2, msg: []string{"--flannel-selector", `""`}},
			{name: "from is not the Network in use", args: []string{"--network", "10.0.0.0/8", "--from", "10.0.0.0/16"}, code: 2, msg: []string{"--from 10.0.0.0/16", "10.244.0.0/16"}},
			{name: "network equal to the current one", args: []string{"--network", "10.244.0.0/16"}, code: 2, msg: []string{"10.244.0.0/16"}},
			{name: "network not containing the current one", args: []string{"--network", "10.20.0.0/16"}, code: 2, msg: []string{"--network 10.20.0.0/16", "10.244.0.0/16"}},
			{name: "bad namespace", args: []string{"--network", "10.0.0.0/8", "--namespace", "Kube_Flannel"}, code: 2, msg: []string{"--namespace", `"Kube_Flannel"`}},
			{name: "configmap that does not exist", args: []string{"--network", "10.0.0.0/8", "--configmap", "nope"}, code: 2, msg: []string{"--configmap nope"}},
			{name: "negative health timeout", args: []string{"--network", "10.0.0.0/8", "--health-timeout", "-1s"}, code: 2, msg: []string{"--health-timeout", "-1s"}},
			{name: "node mask wider than the Network", args: []string{"--network", "10.0.0.0/8", "--node-mask", "12"}, code: 2, msg: []string{"--node-mask", "12"}},
			{name: "node range overlapping the old Network", args: []string{"--network", "10.0.0.0/8", "--rewrite-nodes", "--node-range", "10.244.0.0/15"}, code: 2, msg: []string{"--node-range 10.244.0.0/15"}},
			{name: "stray positional argument", args: []string{"--network", "10.0.0.0/8", "now"}, code: 2, msg: []string{`"now"`}},
			{name: "manifests without the kube-controller-manager manifest", args: []string{"--network", "10.0.0.0/8"}, setup: manifests(""), code: 2, msg: []string{"--manifests", "kube-controller-manager.yaml"}},
			{name: "unreadable kube-controller-manager manifest", args: []string{"--network", "10.0.0.0/8"}, setup: manifests("kind: [[["), code: 2, msg: []string{"--manifests", "kube-controller-manager.yaml"}},
			{name: "node podCIDR outside the current Network", args: []string{"--network", "10.0.0.0/8"}, setup: outsideNode, code: 1, msg: []string{"stray", "10.99.1.0/24", "10.244.0.0/16"}},
		})
	})
	t.Run("kubeconfig", func(t *testing.T) {
		advRunCases(t, c, "migrate-flannel-podcidr", nil, []advCase{
			{name: "garbage kubeconfig", args: []string{"--network", "10.0.0.0/8", "--journal", t.TempDir(), "--apply", "--kubeconfig", clitest.GarbageKubeconfig(t)}, code: 2, msg: []string{"kubeconfig"}},
			{name: "unreachable API server", args: []string{"--network", "10.0.0.0/8", "--journal", t.TempDir(), "--apply", "--kubeconfig", clitest.UnreachableKubeconfig(t)}, code: 4, msg: []string{"unreachable", "127.0.0.1:1"}},
		})
	})
	// The cluster still needs the fix (a sanity check that the cases above
	// ran against a cluster the runbook would have changed).
	nodes, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	var cidrs []string
	for _, n := range nodes.Items {
		cidrs = append(cidrs, n.Name+"="+n.Spec.PodCIDR)
	}
	sort.Strings(cidrs)
	assert.Equal(t, "worker1=10.244.1.0/24 worker2=10.244.2.0/24 worker3=10.244.2.0/24", strings.Join(cidrs, " "))
}
