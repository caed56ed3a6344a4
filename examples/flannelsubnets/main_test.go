package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/flannel"
)

const pfx = "/coreos.com/network"

// world is a fake etcd (MemKV) and a fake cluster for runWith.
type world struct {
	kv      *flannel.MemKV
	kube    *fake.Clientset
	dialed  []flannel.EtcdConfig
	envKube string
	// txnsLeft, when positive, is how many transactions etcd takes before
	// it stops answering them (the run's machine dies).
	txnsLeft int
}

// dyingKV is etcd as seen from a machine that dies after its txnsLeft
// transactions.
type dyingKV struct {
	flannel.KV
	left *int
}

func (k dyingKV) Txn(ctx context.Context, t flannel.Txn) (*flannel.TxnResult, error) {
	if *k.left == 0 {
		return nil, errors.New("the machine died")
	}
	*k.left--
	return k.KV.Txn(ctx, t)
}

func (w *world) deps() deps {
	return deps{
		dialEtcd: func(_ context.Context, cfg flannel.EtcdConfig) (flannel.KV, io.Closer, error) {
			w.dialed = append(w.dialed, cfg)
			if w.txnsLeft > 0 {
				return dyingKV{KV: w.kv, left: &w.txnsLeft}, io.NopCloser(nil), nil
			}
			return w.kv, io.NopCloser(nil), nil
		},
		kube: func(string, string) (kubernetes.Interface, error) {
			if w.kube == nil {
				return nil, errors.New("no cluster")
			}
			return w.kube, nil
		},
		getenv: func(k string) string {
			if k == "KUBECONFIG" {
				return w.envKube
			}
			return ""
		},
	}
}

func (w *world) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runWith(context.Background(), w.deps(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func value(ip, backend string) []byte {
	return []byte(`{"PublicIP":"` + ip + `","PublicIPv6":null,"BackendType":"` + backend + `"}`)
}

func node(name, ip, podCIDR string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
		"flannel.alpha.coreos.com/backend-type":        "vxlan",
		"flannel.alpha.coreos.com/public-ip":           ip,
		"flannel.alpha.coreos.com/kube-subnet-manager": "true",
	}}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	if podCIDR != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	}
	return n
}

// newKube returns a fake cluster whose reactors enforce resourceVersion on
// ConfigMap updates and allow every SelfSubjectAccessReview.
func newKube(objs ...runtime.Object) *fake.Clientset {
	cs := fake.NewClientset(objs...)
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
		cur, err := cs.Tracker().Get(gvr, cm.Namespace, cm.Name)
		if err != nil {
			return true, nil, err
		}
		if rv := cur.(*corev1.ConfigMap).ResourceVersion; rv != cm.ResourceVersion {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, cm.Name, errors.New("resourceVersion "+rv))
		}
		n, _ := strconv.Atoi(cm.ResourceVersion)
		cm.ResourceVersion = strconv.Itoa(n + 1)
		if len(a.(k8stesting.UpdateActionImpl).GetUpdateOptions().DryRun) > 0 {
			return true, cm, nil
		}
		return true, cm, cs.Tracker().Update(gvr, cm, cm.Namespace)
	})
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		r.Status.Allowed = true
		return true, r, nil
	})
	return cs
}

// storyWorld is the fourth story: a host-gw network with a stale lease and a
// lease outside the network; nodes a, c and e exist.
func storyWorld(t *testing.T) *world {
	t.Helper()
	m := flannel.NewMemKV(flannel.MemKVOptions{})
	_, err := m.Put(pfx+"/config", []byte(`{"Network": "172.7.0.0/16", "Backend": {"Type": "host-gw"}}`), 0)
	require.NoError(t, err)
	for name, ip := range map[string]string{"172.7.1.0-24": "10.0.0.1", "172.7.2.0-24": "10.0.0.99", "172.7.3.0-24": "10.0.0.3", "10.99.1.0-24": "10.0.0.5"} {
		_, err := m.Put(pfx+"/subnets/"+name, value(ip, "host-gw"), m.Grant(24*time.Hour))
		require.NoError(t, err)
	}
	return &world{kv: m, kube: newKube(node("node-a", "10.0.0.1", ""), node("node-c", "10.0.0.3", ""), node("node-e", "10.0.0.5", ""))}
}

func (w *world) has(t *testing.T, key string) bool {
	res, err := w.kv.Get(context.Background(), key, flannel.GetOptions{})
	require.NoError(t, err)
	return len(res.KVs) == 1
}

func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"-o", "xml", "show"},
		{"--no-such-flag", "show"},
		{"show", "extra"},
		{"--dry-run=server", "rm", "172.7.1.0-24"},
		{"--dry-run=maybe", "check"},
		{"rm"},
		{"rm", "--stale", "172.7.1.0-24"},
		{"--kube-subnet-mgr", "rm", "172.7.1.0-24"},
		{"--kube-subnet-mgr", "move", "172.7.1.0-24"},
		{"--kube-subnet-mgr", "set-network", "10.0.0.0/16", "--move-leases"},
		{"--kube-subnet-mgr", "check", "--subnet-env", "x"},
		{"move"},
		{"set-network"},
		{"check", "--node", "a"},
		{"show", "--stale"},
		{"check", "--move-leases"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(args, &out, &errb)
			assert.Equal(t, 2, code)
			assert.Equal(t, 1, strings.Count(errb.String(), "\n"), "one clear line: %q", errb.String())
			assert.Empty(t, out.String())
		})
	}
	var out, errb bytes.Buffer
	assert.Equal(t, 0, run([]string{"-h"}, &out, &errb))
	assert.Contains(t, out.String(), "-etcd-endpoints")
	// Half a key pair is refused before connecting, naming the flags.
	out.Reset()
	errb.Reset()
	assert.Equal(t, 2, run([]string{"--etcd-certfile", "/nonexistent.pem", "show"}, &out, &errb))
	assert.Contains(t, errb.String(), "--etcd-keyfile")
}

func TestRunEtcdShowAndCheck(t *testing.T) {
	w := storyWorld(t)
	// The TLS files must exist: they are checked before anything is dialled.
	dir := t.TempDir()
	ca, crt, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	for _, f := range []string{ca, crt, key} {
		require.NoError(t, os.WriteFile(f, []byte("pem"), 0o600))
	}
	code, out, _ := w.run(t, "--etcd-endpoints", "https://10.0.0.10:2379,https://10.0.0.11:2379", "--etcd-cafile", ca,
		"--etcd-certfile", crt, "--etcd-keyfile", key, "show")
	assert.Equal(t, 0, code)
	assert.Equal(t, flannel.EtcdConfig{Endpoints: []string{"https://10.0.0.10:2379", "https://10.0.0.11:2379"}, CAFile: ca, CertFile: crt, KeyFile: key}, w.dialed[0])
	assert.Contains(t, out, "IPv4: network 172.7.0.0/16, /24 subnets from 172.7.1.0 to 172.7.255.0 (255 subnets)")
	assert.Contains(t, out, "172.7.1.0-24")
	assert.NotContains(t, out, "node-a", "no node list without a kubeconfig")

	code, out, _ = w.run(t, "--kubeconfig", "kc", "show")
	assert.Equal(t, 0, code)
	assert.Regexp(t, `172\.7\.2\.0-24\s+10\.0\.0\.99\s+\(none\)\s+host-gw\s+2[34]h`, out)

	code, out, _ = w.run(t, "--kubeconfig", "kc", "check")
	assert.Equal(t, 1, code, "an error finding makes check exit 1")
	assert.Contains(t, out, "error   lease-outside-network "+pfx+"/subnets/10.99.1.0-24 (node node-e)")
	assert.Contains(t, out, "warning lease-unknown-node "+pfx+"/subnets/172.7.2.0-24")

	w.envKube = "/some/kubeconfig" // $KUBECONFIG works like --kubeconfig
	code, out, _ = w.run(t, "check", "-o", "json")
	assert.Equal(t, 1, code)
	var co struct {
		Report flannel.Report `json:"report"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &co))
	assert.Equal(t, []string{pfx + "/subnets/172.7.2.0-24"}, co.Report.Keys(flannel.FindingUnknownNode))

	code, out, _ = w.run(t, "show", "-o", "yaml")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "prefix: /coreos.com/network")

	w.kube = nil
	code, _, stderr := w.run(t, "check")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "reading the node list: no cluster")
}

func TestRunEtcdSubnetEnv(t *testing.T) {
	w := storyWorld(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.env")
	require.NoError(t, os.WriteFile(good, []byte("FLANNEL_NETWORK=172.7.0.0/16\nFLANNEL_SUBNET=172.7.3.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=true\n"), 0o600))
	stale := filepath.Join(dir, "stale.env")
	require.NoError(t, os.WriteFile(stale, []byte("FLANNEL_NETWORK=172.7.0.0/16\nFLANNEL_SUBNET=172.7.8.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=true\n"), 0o600))
	bad := filepath.Join(dir, "bad.env")
	require.NoError(t, os.WriteFile(bad, []byte("FLANNEL_SUBNET=nope\n"), 0o600))

	// The etcd store alone: the file's subnet must be leased.
	code, out, _ := w.run(t, "check", "--subnet-env", good, "-o", "json")
	assert.Equal(t, 1, code, "the audit has errors (10.99.1.0-24)")
	assert.NotContains(t, out, "subnetEnv")
	code, out, _ = w.run(t, "check", "--subnet-env", stale)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "no lease in /coreos.com/network/subnets/ matches FLANNEL_SUBNET 172.7.8.1/24")
	// By node (needs the node list) or PublicIP: the file must match that node's lease.
	code, out, _ = w.run(t, "--kubeconfig", "kc", "check", "--subnet-env", stale, "--node", "node-c")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "subnet.env says FLANNEL_SUBNET=172.7.8.1/24 but its lease /coreos.com/network/subnets/172.7.3.0-24 is 172.7.3.0/24")
	code, out, _ = w.run(t, "check", "--subnet-env", good, "--public-ip", "10.0.0.1")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "subnet.env says FLANNEL_SUBNET=172.7.3.1/24 but its lease /coreos.com/network/subnets/172.7.1.0-24 is 172.7.1.0/24")

	code, _, stderr := w.run(t, "check", "--subnet-env", bad)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "FLANNEL_SUBNET must be a CIDR")
	code, _, _ = w.run(t, "check", "--subnet-env", filepath.Join(dir, "missing"))
	assert.Equal(t, 2, code)
	code, _, _ = w.run(t, "check", "--subnet-env", good, "--node", "node-c")
	assert.Equal(t, 2, code, "--node without a node list")
	code, _, _ = w.run(t, "check", "--subnet-env", good, "--public-ip", "x")
	assert.Equal(t, 2, code)
}

func TestRunEtcdChanges(t *testing.T) {
	w := storyWorld(t)
	stale := pfx + "/subnets/172.7.2.0-24"

	code, out, _ := w.run(t, "--kubeconfig", "kc", "rm", "--stale")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "delete "+stale)
	assert.Contains(t, out, "Nothing written: rerun with --apply")
	assert.True(t, w.has(t, stale))

	code, out, _ = w.run(t, "--kubeconfig", "kc", "rm", "--stale", "--dry-run=client")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "step 1: would-apply")
	assert.True(t, w.has(t, stale))

	journal := t.TempDir()
	code, out, _ = w.run(t, "--kubeconfig", "kc", "rm", "--stale", "--apply", "--journal-dir", journal)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "step 1: applied")
	assert.False(t, w.has(t, stale))
	code, out, _ = w.run(t, "--kubeconfig", "kc", "rm", "--stale")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "no stale lease")
	code, _, stderr := w.run(t, "rm", "--stale")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "needs the node list")
	code, _, stderr = w.run(t, "rm", "172.7.200.0-24")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "is not in the registry")

	// Move the lease from the old network; the plan names the node's clean-up.
	code, out, _ = w.run(t, "--kubeconfig", "kc", "move", "10.99.1.0-24", "--apply")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "move "+pfx+"/subnets/10.99.1.0-24 -> "+pfx+"/subnets/172.7.2.0-24")
	assert.Contains(t, out, "Host clean-up for node-e (10.0.0.5, 10.99.1.0-24 -> 172.7.2.0-24)")
	assert.Contains(t, out, "[node] ip link delete cni0")
	assert.Contains(t, out, "[node] systemctl restart flanneld")
	assert.True(t, w.has(t, pfx+"/subnets/172.7.2.0-24"))

	code, _, stderr = w.run(t, "move", "172.7.1.0-24", "172.7.3.0/24")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "overlaps")
	code, _, stderr = w.run(t, "move", "172.7.1.0-24", "172.7.9.1/24")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "host bits set; the network is 172.7.9.0/24")
	code, out, _ = w.run(t, "move", "172.7.1.0-24", "172.7.9.0-24", "-o", "json")
	assert.Equal(t, 0, code)
	var co changeOutput
	require.NoError(t, json.Unmarshal([]byte(out), &co))
	assert.Equal(t, "plan", co.Mode)
	require.Len(t, co.Cleanup, 1)
	assert.Equal(t, "NODE", co.Cleanup[0].Node, "no node list: the node is named by its IP only")

	// Move the whole network with the leases.
	code, out, _ = w.run(t, "set-network", "172.8.0.0/16", "--move-leases", "--apply", "--no-lock", "-o", "yaml")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "mode: apply")
	assert.Contains(t, out, "done: true")
	assert.True(t, w.has(t, pfx+"/subnets/172.8.3.0-24"))
	code, out, _ = w.run(t, "check")
	assert.Equal(t, 0, code, out)

	code, _, stderr = w.run(t, "set-network", "172.8.0.1/16")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "host bits set")
	code, _, stderr = w.run(t, "set-network", "172.8.0.0/30")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "network is too small")
}

// A change whose machine died after its first step is found in etcd by
// another machine (another --journal-dir) and finished with resume --apply.
func TestRunEtcdResume(t *testing.T) {
	w := storyWorld(t)
	code, out, _ := w.run(t, "resume")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "no unfinished change under "+pfx+"/cidrshift/run/")

	w.txnsLeft = 1 // the config (and the run key)
	code, out, stderr := w.run(t, "set-network", "172.8.0.0/16", "--move-leases", "--apply", "--no-lock", "--journal-dir", t.TempDir())
	require.Equal(t, 1, code, out+stderr)
	assert.Contains(t, stderr, "the machine died")
	assert.True(t, w.has(t, pfx+"/subnets/172.7.3.0-24"), "not moved yet")

	w.txnsLeft = 0
	code, out, _ = w.run(t, "resume")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "Unfinished change "+pfx+"/cidrshift/run/")
	assert.Contains(t, out, "move the flannel network to 172.8.0.0/16")
	assert.Contains(t, out, "Nothing written")
	code, out, stderr = w.run(t, "resume", "--apply", "--no-lock", "--journal-dir", t.TempDir())
	require.Equal(t, 0, code, out+stderr)
	assert.Contains(t, out, "step 1: already-done")
	assert.Contains(t, out, "Done.")
	assert.True(t, w.has(t, pfx+"/subnets/172.8.3.0-24"))
	assert.False(t, w.has(t, pfx+"/subnets/172.7.3.0-24"))
	code, out, _ = w.run(t, "resume")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "no unfinished change")

	code, _, stderr = w.run(t, "--kube-subnet-mgr", "resume")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "resume works on the etcd registry")
}

// In etcd mode --apply holds the Lease cidrshift-flannel, which needs a
// cluster: without --kubeconfig or $KUBECONFIG it is refused before etcd is
// dialled, naming the flags, unless --no-lock is given; a dry run takes no
// lock and needs none.
func TestRunEtcdApplyNeedsAClusterForTheLock(t *testing.T) {
	w := storyWorld(t)
	lease := pfx + "/subnets/10.99.1.0-24"
	rev := w.kv.Revision()
	code, out, stderr := w.run(t, "move", "10.99.1.0-24", "--apply")
	assert.Equal(t, 2, code, out)
	assert.Equal(t, "flannelsubnets: --apply in etcd mode holds the Lease cidrshift-flannel, which needs a cluster: give --kubeconfig (or set KUBECONFIG), or --no-lock to write without a lock (nothing then stops a second run)\n", stderr)
	assert.Empty(t, w.dialed, "refused before etcd is dialled")
	assert.Equal(t, rev, w.kv.Revision(), "nothing written")

	code, out, _ = w.run(t, "move", "10.99.1.0-24", "--dry-run=client")
	assert.Equal(t, 0, code, out)
	assert.True(t, w.has(t, lease), "a dry run writes nothing")

	code, out, _ = w.run(t, "move", "10.99.1.0-24", "--apply", "--no-lock")
	assert.Equal(t, 0, code, out)
	assert.False(t, w.has(t, lease), "moved without a lock")
	leases, err := w.kube.CoordinationV1().Leases("kube-system").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, leases.Items, "--no-lock takes no Lease")

	// $KUBECONFIG is a cluster too: the Lease is taken there.
	w.envKube = "kc"
	code, out, _ = w.run(t, "move", "172.7.3.0-24", "--apply")
	assert.Equal(t, 0, code, out)
	assert.False(t, w.has(t, pfx+"/subnets/172.7.3.0-24"), "moved")
	_, err = w.kube.CoordinationV1().Leases("kube-system").Get(context.Background(), "cidrshift-flannel", metav1.GetOptions{})
	require.NoError(t, err, "the Lease was taken")
}

// A lease renewed between plan and apply: the change is refused, exit 1.
func TestRunEtcdConflict(t *testing.T) {
	w := storyWorld(t)
	d := w.deps()
	dial := d.dialEtcd
	d.dialEtcd = func(ctx context.Context, cfg flannel.EtcdConfig) (flannel.KV, io.Closer, error) {
		kv, c, err := dial(ctx, cfg)
		return renewingKV{KV: kv, m: w.kv}, c, err
	}
	var out, errb bytes.Buffer
	code := runWith(context.Background(), d, []string{"move", "172.7.3.0-24", "--apply", "--no-lock"}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "conflict on "+pfx+"/subnets/172.7.3.0-24")
	assert.Contains(t, out.String(), "step 1: conflict")
}

// renewingKV renews every lease (as flanneld would) right before each transaction.
type renewingKV struct {
	flannel.KV
	m *flannel.MemKV
}

func (r renewingKV) Txn(ctx context.Context, t flannel.Txn) (*flannel.TxnResult, error) {
	for _, c := range t.If {
		if strings.Contains(c.Key, "/subnets/") && c.ModRevision != 0 {
			if _, err := r.m.Put(c.Key, value("10.0.0.3", "host-gw"), r.m.Grant(24*time.Hour)); err != nil {
				return nil, err
			}
		}
	}
	return r.KV.Txn(ctx, t)
}

func TestRunKube(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-cfg", Namespace: "kube-flannel", UID: "u1", ResourceVersion: "7"},
		Data: map[string]string{"net-conf.json": "{\n  \"Network\": \"10.244.0.0/16\",\n  \"Backend\": {\n    \"Type\": \"vxlan\"\n  }\n}\n", "cni-conf.json": "{}"}}
	w := &world{kube: newKube(cm, node("node-a", "192.168.0.1", "10.244.1.0/24"), node("node-b", "192.168.0.2", "10.20.2.0/24"))}

	code, out, _ := w.run(t, "--kube-subnet-mgr", "show")
	assert.Equal(t, 0, code)
	assert.Regexp(t, `node-a\s+10\.244\.1\.0/24\s+vxlan\s+192\.168\.0\.1\s+true`, out)
	code, out, _ = w.run(t, "--kube-subnet-mgr", "show", "-o", "json")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, `"netConf"`)

	code, out, _ = w.run(t, "--kube-subnet-mgr", "check")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `subnet "10.244.0.0/16" specified in the flannel net config doesn't contain "10.20.2.0/24" PodCIDR of the "node-b" node`)

	env := filepath.Join(t.TempDir(), "subnet.env")
	require.NoError(t, os.WriteFile(env, []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.9.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"), 0o600))
	code, out, _ = w.run(t, "--kube-subnet-mgr", "check", "--subnet-env", env, "--node", "node-a")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "but its podCIDR is 10.244.1.0/24")
	code, _, _ = w.run(t, "--kube-subnet-mgr", "check", "--subnet-env", env, "--node", "node-z")
	assert.Equal(t, 2, code)

	// A Network that leaves node-a's podCIDR outside is refused (issue 20:
	// flanneld on node-a would exit at its next start); this run used to
	// plan and apply it with a warning.
	code, out, stderr := w.run(t, "--kube-subnet-mgr", "set-network", "10.20.0.0/16", "--apply")
	assert.Equal(t, 2, code, out)
	assert.Contains(t, stderr, "set-network 10.20.0.0/16: node(s) node-a have a podCIDR outside it")
	code, out, _ = w.run(t, "--kube-subnet-mgr", "set-network", "10.0.0.0/8")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "-   \"Network\": \"10.244.0.0/16\",\n  +   \"Network\": \"10.0.0.0/8\",")
	assert.NotContains(t, out, "Nodes outside the new network")
	code, out, _ = w.run(t, "--kube-subnet-mgr", "set-network", "10.0.0.0/8", "--dry-run=server")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "result: would-apply")
	code, out, _ = w.run(t, "--kube-subnet-mgr", "set-network", "10.0.0.0/8", "--apply")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "result: applied (resourceVersion 8)")
	got, err := w.kube.CoreV1().ConfigMaps("kube-flannel").Get(context.Background(), "kube-flannel-cfg", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "{\n  \"Network\": \"10.0.0.0/8\",\n  \"Backend\": {\n    \"Type\": \"vxlan\"\n  }\n}\n", got.Data["net-conf.json"])
	assert.Equal(t, "{}", got.Data["cni-conf.json"])

	// A ConfigMap that does not exist is bad input naming the flags (was exit 1).
	code, _, stderr = w.run(t, "--kube-subnet-mgr", "--namespace", "kube-system", "show")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--namespace kube-system --configmap kube-flannel-cfg")
}
