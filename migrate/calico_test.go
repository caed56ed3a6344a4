package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodecidr"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

// calTestCluster is story 1 on fake clients (no workloads): three nodes in
// 10.233.64.0/18, one of them the control plane, plus extra, and the old
// pool (plus pools). Nodes follow nodecidrtest's rules. writes counts every
// write to nodes, pools and ConfigMaps.
func calTestCluster(t *testing.T, extra []*corev1.Node, pools ...map[string]any) (cl calico.Cluster, writes *atomic.Int64) {
	t.Helper()
	kube, _ := calicotest.NewKube()
	accesstest.Authorize(kube)
	srv := nodecidrtest.NewServer()
	node := func(name, podCIDR, ip string) *corev1.Node {
		n := &corev1.Node{}
		n.Name, n.UID, n.Labels = name, types.UID("uid-"+name), map[string]string{}
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		return n
	}
	master := node("master1", "10.233.66.0/24", "192.168.10.1")
	master.Labels[nodecidr.LabelControlPlane] = ""
	for _, n := range append([]*corev1.Node{master, node("worker1", "10.233.64.0/24", "192.168.10.11"), node("worker2", "10.233.65.0/24", "192.168.10.12")}, extra...) {
		srv.AddNode(n)
	}
	objs := []runtime.Object{&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": "default-ipv4-ippool"},
		"spec": map[string]any{"cidr": "10.233.64.0/18", "blockSize": int64(26), "vxlanMode": "Always", "natOutgoing": true},
	}}}
	for _, p := range pools {
		objs = append(objs, &unstructured.Unstructured{Object: p})
	}
	dyn, _ := calicotest.NewDynamic(objs...)
	writes = new(atomic.Int64)
	count := func(a k8stesting.Action) (bool, runtime.Object, error) {
		writes.Add(1)
		return false, nil, nil
	}
	for _, verb := range []string{"create", "update", "patch", "delete"} {
		dyn.PrependReactor(verb, "ippools", count)
		kube.PrependReactor(verb, "configmaps", count)
		kube.PrependReactor(verb, "nodes", count)
	}
	kube.PrependReactor("*", "nodes", srv.Handle)
	return calico.Cluster{Kube: kube, Pools: calico.NewCRDStore(dyn), Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}, writes
}

func calOptions(cl calico.Cluster) migrate.CalicoPodCIDROptions {
	return migrate.CalicoPodCIDROptions{Cluster: cl, To: netip.MustParsePrefix("10.200.0.0/16"), ServiceCIDR: netip.MustParsePrefix("10.233.0.0/18"),
		NodeMask: 24, PollInterval: time.Millisecond}
}

// Every input the cluster contradicts is refused by Prepare in ModeApply,
// before the first write: no intent, no plan, no pool, no node touched.
func TestCalicoPodCIDRRefusedBeforeTheFirstWrite(t *testing.T) {
	odd := &corev1.Node{}
	odd.Name, odd.UID = "odd", "uid-odd"
	odd.Spec.PodCIDR, odd.Spec.PodCIDRs = "10.233.67.0/24", []string{"10.233.67.0/24", "fd00:1::/64"}
	edge := &corev1.Node{}
	edge.Name, edge.UID = "edge", "uid-edge"
	edge.Spec.PodCIDR, edge.Spec.PodCIDRs = "10.233.67.0/24", []string{"10.233.67.0/24"}
	edge.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.10.20"}, {Type: corev1.NodeExternalIP, Address: "10.200.3.4"}}
	for _, tc := range []struct {
		name  string
		extra []*corev1.Node
		pools []map[string]any
		cms   []*corev1.ConfigMap
		edit  func(*migrate.CalicoPodCIDROptions)
		bad   bool
		want  string
	}{
		{name: "a node kube-controller-manager would crash on", extra: []*corev1.Node{odd}, want: "kube-controller-manager would not start"},
		{name: "--from not the old pool's range", bad: true, want: "--from 10.233.0.0/18 is not the range of IPPool",
			edit: func(o *migrate.CalicoPodCIDROptions) { o.From = netip.MustParsePrefix("10.233.0.0/18") }},
		{name: "no such old pool", bad: true, want: `"nope"`, edit: func(o *migrate.CalicoPodCIDROptions) { o.OldPool = "nope" }},
		{name: "--to too small", bad: true, want: "--to 10.200.0.0/23", edit: func(o *migrate.CalicoPodCIDROptions) { o.To = netip.MustParsePrefix("10.200.0.0/23") }},
		{name: "--to on the Service CIDR", bad: true, want: "10.233.0.0/18", edit: func(o *migrate.CalicoPodCIDROptions) { o.To = netip.MustParsePrefix("10.233.0.0/16") }},
		{name: "a node's external address inside --to", extra: []*corev1.Node{edge}, bad: true,
			want: "contains node-network 10.200.3.4/32 (node edge address): cluster addresses overlap the node network"},
		// Refused by the plan of step 5, which Prepare makes too: before,
		// only once steps 2 to 4 had written.
		{name: "kubeadm's serviceSubnet inside --to", bad: true, cms: []*corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
			Data: map[string]string{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.233.64.0/18\n  serviceSubnet: 10.200.96.0/20\n"}}},
			want: "the kubeadm ConfigMaps set to podSubnet 10.200.0.0/16 would hold a layout the components refuse: error overlap: error: cluster-cidr 10.200.0.0/16 (target pod CIDR) contains service-cidr 10.200.96.0/20 (target Service CIDR)"},
		// Refused by the Calico plan, which Prepare makes.
		{name: "the new pool's name taken by another range", pools: []map[string]any{{"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
			"metadata": map[string]any{"name": "ippool-10-200-0-0-16"}, "spec": map[string]any{"cidr": "10.201.0.0/16", "blockSize": int64(26)}}}, bad: true, want: `"ippool-10-200-0-0-16": a pool with this name exists with cidr 10.201.0.0/16`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, writes := calTestCluster(t, tc.extra, tc.pools...)
			for _, cm := range tc.cms {
				require.NoError(t, cl.Kube.(*fake.Clientset).Tracker().Add(cm))
			}
			o := calOptions(cl)
			if tc.edit != nil {
				tc.edit(&o)
			}
			m, err := migrate.CalicoPodCIDR(o)
			require.NoError(t, err)
			dir := filepath.Join(t.TempDir(), "journal")
			rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: dir}).Run(context.Background(), m)
			require.Error(t, err)
			assert.Nil(t, rep, "refused in Prepare")
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, tc.bad, calIsInvalid(err), "%v", err)
			assert.Zero(t, writes.Load(), "nothing written")
			j, err := journal.Open(dir)
			require.NoError(t, err)
			defer j.Close()
			keys, err := j.Keys("")
			require.NoError(t, err)
			assert.Empty(t, keys, "nothing journaled")
		})
	}
}

func calIsInvalid(err error) bool {
	return errors.Is(err, migrate.ErrInvalidInput) || errors.Is(err, calico.ErrPoolNotFound) || errors.Is(err, calico.ErrInvalidPool)
}

// A new pool that exists with the planned name and CIDR (another machine's
// run, a lost journal) is found done by add-pool's read-only check.
func TestCalicoPodCIDRAddPoolFoundDone(t *testing.T) {
	cl, _ := calTestCluster(t, nil, map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": "ippool-10-200-0-0-16"},
		"spec": map[string]any{"cidr": "10.200.0.0/16", "blockSize": int64(26), "vxlanMode": "Always", "natOutgoing": true},
	})
	m, err := migrate.CalicoPodCIDR(calOptions(cl))
	require.NoError(t, err)
	rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "journal")}).Run(context.Background(), m)
	require.NoError(t, err)
	require.True(t, rep.Paused(), "waits for the operator at step 6")
	assert.Equal(t, migrate.CalicoStepFlags, rep.Waiting.Step)
	add := rep.Steps[1]
	require.Equal(t, migrate.CalicoStepAddPool, add.Name)
	assert.Equal(t, migrate.StatusDone, add.Status)
	assert.Equal(t, []string{"found done: IPPool ippool-10-200-0-0-16 exists with cidr 10.200.0.0/16"}, add.Details)
	old, err := cl.Pools.Get(context.Background(), "default-ipv4-ippool")
	require.NoError(t, err)
	assert.True(t, old.Spec.Disabled, "the next step ran")
}

// A plan run and a server-dry-run describe each of the nine steps, the
// workloads to move included; the server-dry-run sends steps 2 and 3 as one
// dry-run Apply and reports the steps after the operator's as not run.
func TestCalicoPodCIDRPlanAndServerDryRunDescribeEachStep(t *testing.T) {
	const (
		add     = "new IPPool ippool-10-200-0-0-16 10.200.0.0/16 (blockSize 26, 1024 blocks), copying encapsulation and NAT of default-ipv4-ippool 10.233.64.0/18"
		disable = "set IPPool default-ipv4-ippool disabled: new pods get addresses from the new pool only; running pods keep theirs"
		move    = "rollout Deployment default/web (1 pod(s) in 10.233.64.0/18)"
	)
	flags := []string{"on every control-plane node, set --cluster-cidr=10.200.0.0/16 in /etc/kubernetes/manifests/kube-controller-manager.yaml (the kubelet restarts kube-controller-manager)",
		"the runbook stops here (exit 3) until it observes the new flag, or is rerun with --continue"}
	for _, tc := range []struct {
		mode     migrate.Mode
		statuses []string
		details  map[string][]string
	}{
		{migrate.ModePlan, []string{"planned", "planned", "planned", "planned", "planned", "operator", "planned", "planned", "planned"}, map[string][]string{
			migrate.CalicoStepAddPool: {add},
			migrate.CalicoStepDisable: {disable},
			migrate.CalicoStepKubeadm: {"no kubeadm-config or kube-proxy ConfigMap: nothing to update in the API"},
			migrate.CalicoStepFlags:   flags,
			migrate.CalicoStepMove:    {move},
		}},
		{migrate.ModeServerDryRun, []string{"dry-run", "dry-run", "dry-run", "dry-run", "dry-run", "operator", "not-run", "not-run", "not-run"}, map[string][]string{
			migrate.CalicoStepAddPool: {add, `create-pool IPPool ippool-10-200-0-0-16: create IPPool "ippool-10-200-0-0-16" cidr 10.200.0.0/16`,
				`disable-pool IPPool default-ipv4-ippool: disable IPPool "default-ipv4-ippool" (10.233.64.0/18): no new addresses from it`,
				"skip: stopping after phase disable-old-pool as asked; Apply again with the same plan and journal to go on"},
			migrate.CalicoStepDisable: {disable, "dry-run together with step 2"},
			migrate.CalicoStepKubeadm: {"no kubeadm-config or kube-proxy ConfigMap: nothing to update in the API"},
			migrate.CalicoStepFlags:   flags,
			migrate.CalicoStepMove:    {move},
		}},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			cl, _ := calTestCluster(t, nil)
			ctx := context.Background()
			controller := func(kind, name, uid string) []metav1.OwnerReference {
				return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(true)}}
			}
			_, err := cl.Kube.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web"}}, metav1.CreateOptions{})
			require.NoError(t, err)
			_, err = cl.Kube.AppsV1().ReplicaSets("default").Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-abc", UID: "uid-rs",
				OwnerReferences: controller("Deployment", "web", "uid-web")}}, metav1.CreateOptions{})
			require.NoError(t, err)
			_, err = cl.Kube.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-abc-1", OwnerReferences: controller("ReplicaSet", "web-abc", "uid-rs")},
				Spec: corev1.PodSpec{NodeName: "worker1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.233.64.5", PodIPs: []corev1.PodIP{{IP: "10.233.64.5"}}}}, metav1.CreateOptions{})
			require.NoError(t, err)
			m, err := migrate.CalicoPodCIDR(calOptions(cl))
			require.NoError(t, err)
			rep, err := (&migrate.Runner{Mode: tc.mode}).Run(ctx, m)
			require.NoError(t, err)
			var statuses []string
			for _, s := range rep.Steps {
				statuses = append(statuses, s.Status)
				if want, ok := tc.details[s.Name]; ok {
					assert.Equal(t, want, s.Details, "step %s", s.Name)
				}
			}
			assert.Equal(t, tc.statuses, statuses)
		})
	}
}

// Without --service-cidr and --node-mask, Prepare takes them from
// kube-controller-manager's flags (its mirror pod); a node mask that is not
// the default shows that it was read, not assumed. A --to that holds exactly
// as many node subnets as there are nodes is enough; one fewer is refused.
func TestCalicoPodCIDRDiscoversTheServiceRangeAndNodeMask(t *testing.T) {
	for _, tc := range []struct {
		to, want string
	}{
		{"10.200.0.0/23", "capacity: 10.200.0.0/23 with /25 node subnets holds 4 nodes (was 128 in 10.233.64.0/18); 4 node(s) now"},
		{"10.200.0.0/24", "--to 10.200.0.0/24 holds only 2 node subnets of /25, the cluster has 4 nodes"},
	} {
		t.Run(tc.to, func(t *testing.T) {
			kube, _ := calicotest.NewKube(&corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-master1", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"component": "kube-controller-manager"}},
				Spec: corev1.PodSpec{NodeName: "master1", Containers: []corev1.Container{{Name: "kube-controller-manager", Command: []string{"kube-controller-manager",
					"--allocate-node-cidrs=true", "--cluster-cidr=10.233.64.0/18", "--node-cidr-mask-size=25", "--service-cluster-ip-range=10.233.0.0/18"}}}},
			})
			accesstest.Authorize(kube)
			srv := nodecidrtest.NewServer()
			for i, name := range []string{"worker1", "worker2", "worker3", "master1"} {
				n := &corev1.Node{}
				n.Name, n.UID, n.Labels = name, types.UID("uid-"+name), map[string]string{}
				n.Spec.PodCIDR = fmt.Sprintf("10.233.64.%d/25", 128*(i%2))
				if i > 1 {
					n.Spec.PodCIDR = fmt.Sprintf("10.233.65.%d/25", 128*(i%2))
				}
				n.Spec.PodCIDRs = []string{n.Spec.PodCIDR}
				n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.10.%d", 11+i)}, {Type: corev1.NodeHostName, Address: name}}
				if name == "master1" {
					// Checked too: an external address; not an address of
					// another kind.
					n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.7"},
						corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "10.200.0.9"})
					n.Labels[nodecidr.LabelControlPlane] = ""
				}
				srv.AddNode(n)
			}
			kube.PrependReactor("*", "nodes", srv.Handle)
			dyn, _ := calicotest.NewDynamic(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": "default-ipv4-ippool"},
				"spec": map[string]any{"cidr": "10.233.64.0/18", "blockSize": int64(26), "vxlanMode": "Always", "natOutgoing": true}}})
			cl := calico.Cluster{Kube: kube, Pools: calico.NewCRDStore(dyn), Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}
			m, err := migrate.CalicoPodCIDR(migrate.CalicoPodCIDROptions{Cluster: cl, To: netip.MustParsePrefix(tc.to), PollInterval: time.Millisecond})
			require.NoError(t, err)
			rep, err := (&migrate.Runner{Mode: migrate.ModePlan}).Run(context.Background(), m)
			if strings.HasPrefix(tc.want, "--to") {
				require.ErrorIs(t, err, migrate.ErrInvalidInput)
				assert.Contains(t, err.Error(), tc.want)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, netip.MustParsePrefix("10.233.0.0/18"), m.ServiceCIDR())
			assert.Contains(t, rep.Steps[0].Details, tc.want)
			assert.Contains(t, rep.Steps[0].Details, "conflicts: none between 10.200.0.0/23, the Service CIDR 10.233.0.0/18 and 5 node address(es)")
		})
	}
}

// The plans are journaled once the intent is, in ModeApply only, so a rerun
// carries out the plans this run made: a plan run over an existing journal
// leaves it as it was, and an apply run that pauses for the operator has
// journaled the Calico swap it started and the node moves it carried out.
func TestCalicoPodCIDRJournalsItsPlansInApplyOnly(t *testing.T) {
	cl, _ := calTestCluster(t, nil)
	dir := filepath.Join(t.TempDir(), "journal")
	keys := func() []string { return migrate.JournalKeys(t, dir) }
	require.Empty(t, keys(), "the journal exists and is empty")

	m, err := migrate.CalicoPodCIDR(calOptions(cl))
	require.NoError(t, err)
	_, err = (&migrate.Runner{Mode: migrate.ModePlan, JournalDir: dir}).Run(context.Background(), m)
	require.NoError(t, err)
	assert.Empty(t, keys(), "a plan run journals nothing")

	rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: dir}).Run(context.Background(), m)
	require.NoError(t, err)
	require.True(t, rep.Paused(), "waits for the operator at step 6")
	assert.Equal(t, []string{"every node lies in 10.200.0.0/16: kube-controller-manager will start with the new flag",
		"not observed yet: no kube-controller-manager mirror pod in kube-system"}, rep.Steps[5].Details)
	assert.Subset(t, keys(), []string{"calico-plan", "nodecidr-plan"})
	j, err := journal.Open(dir)
	require.NoError(t, err)
	defer j.Close()
	var swap calico.SwapPlan
	ok, err := j.Get("calico-plan", &swap)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "default-ipv4-ippool", swap.OldPool.Name)
	assert.Equal(t, "ippool-10-200-0-0-16", swap.NewPool.Name)
	assert.Equal(t, netip.MustParsePrefix("10.200.0.0/16"), swap.NewCIDR)
	var nodes nodecidr.Plan
	ok, err = j.Get("nodecidr-plan", &nodes)
	require.NoError(t, err)
	require.True(t, ok)
	moved := map[string][]string{}
	for _, s := range nodes.Steps {
		moved[s.Node] = s.NewPodCIDRs
	}
	require.Len(t, moved, 3, "every node moves")
	for name, want := range moved {
		n, err := cl.Kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, want, n.Spec.PodCIDRs, "node %s has the journaled podCIDRs", name)
	}
	nodeLines := rep.Steps[3].Details
	require.Len(t, nodeLines, 4)
	assert.Regexp(t, `^moved 3 node\(s\); absent for p50 \S+, max \S+$`, nodeLines[3])

	// Killed after the node moves but before the step was recorded: the
	// rerun carries out the journaled node plan again, and finds every node
	// moved by the earlier run.
	require.NoError(t, j.Delete("step/"+migrate.CalicoStepNodes))
	require.NoError(t, j.Close())
	rep, err = (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: dir}).Run(context.Background(), m)
	require.NoError(t, err)
	require.True(t, rep.Paused())
	assert.Equal(t, append(nodeLines[:3:3], "3 node(s) moved by an earlier run"), rep.Steps[3].Details)

	// A journaled node plan whose own preflight says kube-controller-manager
	// would not start is not carried out.
	j, err = journal.Open(dir)
	require.NoError(t, err)
	nodes.ControllerManager = &cidr.PreflightResult{FlagErrors: []string{"invalid CIDR"}}
	require.NoError(t, j.Put("nodecidr-plan", &nodes))
	require.NoError(t, j.Delete("step/"+migrate.CalicoStepNodes))
	require.NoError(t, j.Close())
	_, err = (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: dir}).Run(context.Background(), m)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kube-controller-manager would not start with --cluster-cidr=10.200.0.0/16 after this plan: invalid CIDR")
}

func TestCalicoPodCIDROptionsValidate(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name string
		o    migrate.CalicoPodCIDROptions
		want string
	}{
		{"no --to", migrate.CalicoPodCIDROptions{}, "--to is required"},
		{"host bits", migrate.CalicoPodCIDROptions{To: netip.PrefixFrom(netip.MustParseAddr("10.200.0.1"), 16)}, "--to 10.200.0.1/16: has host bits set; the network is 10.200.0.0/16"},
		{"families mixed", migrate.CalicoPodCIDROptions{To: p("fd00::/48"), From: p("10.233.64.0/18")}, "--from 10.233.64.0/18: not of --to fd00::/48's family"},
		{"IPv6 node mask", migrate.CalicoPodCIDROptions{To: p("fd00::/48"), NodeMask: 129}, "--node-mask 129: want 1-128"},
		{"pool outside --to", migrate.CalicoPodCIDROptions{To: p("10.200.0.0/16"), NewPoolCIDR: p("10.201.0.0/16")}, "outside --to"},
		{"bad move", migrate.CalicoPodCIDROptions{To: p("10.200.0.0/16"), Move: "delete"}, `--move "delete"`},
		{"node mask", migrate.CalicoPodCIDROptions{To: p("10.200.0.0/16"), NodeMask: 33}, "--node-mask 33"},
		{"negative timeout", migrate.CalicoPodCIDROptions{To: p("10.200.0.0/16"), ProbeTimeout: -1}, "--probe-timeout"},
		{"new pool named as the old", migrate.CalicoPodCIDROptions{To: p("10.200.0.0/16"), NewPool: migrate.CalicoDefaultOldPool}, "--new-pool"},
		{"out without manifests", migrate.CalicoPodCIDROptions{To: p("10.200.0.0/16"), Out: "x"}, "needs --manifests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			require.ErrorIs(t, err, migrate.ErrInvalidInput)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// The error's range is inclusive: a node mask of the address length
	// is the last one accepted.
	for _, o := range []migrate.CalicoPodCIDROptions{{To: p("10.200.0.0/16"), NodeMask: 32}, {To: p("fd00::/48"), NodeMask: 128}} {
		assert.NoError(t, o.Validate(), "--node-mask %d", o.NodeMask)
	}
	_, err := migrate.CalicoPodCIDR(migrate.CalicoPodCIDROptions{To: p("10.200.0.0/16")})
	assert.ErrorIs(t, err, migrate.ErrInvalidInput, "clients are required")
}

// A dual-stack cluster (kube-controller-manager with --cluster-cidr
// 10.233.64.0/18,fd00:10:233::/56, an IPv4 and an IPv6 pool, every node
// with a pair) moves one family and keeps the other: the node plan moves
// only that family's podCIDR, the flag the operator is asked for keeps the
// other family's range in its place, and the IPv6 move discovers the IPv6
// node mask and Service range.
func TestCalicoPodCIDRDualStackMovesOneFamily(t *testing.T) {
	for _, tc := range []struct {
		name       string
		to         string
		oldPool    string
		wantNodes  []string
		wantFlag   string
		wantChecks string
		wantSvc    string
	}{
		{name: "IPv4", to: "10.200.0.0/16", oldPool: "default-ipv4-ippool",
			wantNodes: []string{"recreate worker1: 10.233.64.0/24,fd00:10:233::/64 -> 10.200.0.0/24,fd00:10:233::/64",
				"recreate worker2: 10.233.65.0/24,fd00:10:233:1::/64 -> 10.200.1.0/24,fd00:10:233:1::/64",
				"recreate master1 (control plane): 10.233.66.0/24,fd00:10:233:2::/64 -> 10.200.2.0/24,fd00:10:233:2::/64"},
			wantFlag:   "--cluster-cidr=10.200.0.0/16,fd00:10:233::/56",
			wantChecks: "--cluster-cidr=10.200.0.0/16,fd00:10:233::/56 --node-cidr-mask-size-ipv4=24 --node-cidr-mask-size-ipv6=64 --service-cluster-ip-range=10.233.0.0/18,fd00:10:96::/112",
			wantSvc:    "10.233.0.0/18"},
		{name: "IPv6", to: "fd00:20::/56", oldPool: "default-ipv6-ippool",
			wantNodes: []string{"recreate worker1: 10.233.64.0/24,fd00:10:233::/64 -> 10.233.64.0/24,fd00:20::/64",
				"recreate worker2: 10.233.65.0/24,fd00:10:233:1::/64 -> 10.233.65.0/24,fd00:20:0:1::/64",
				"recreate master1 (control plane): 10.233.66.0/24,fd00:10:233:2::/64 -> 10.233.66.0/24,fd00:20:0:2::/64"},
			wantFlag:   "--cluster-cidr=10.233.64.0/18,fd00:20::/56",
			wantChecks: "capacity: fd00:20::/56 with /64 node subnets holds 256 nodes",
			wantSvc:    "fd00:10:96::/112"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube, _ := calicotest.NewKube(&corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-master1", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"component": "kube-controller-manager"}},
				Spec: corev1.PodSpec{NodeName: "master1", Containers: []corev1.Container{{Name: "kube-controller-manager", Command: []string{"kube-controller-manager",
					"--allocate-node-cidrs=true", "--cluster-cidr=10.233.64.0/18,fd00:10:233::/56", "--node-cidr-mask-size-ipv4=24", "--node-cidr-mask-size-ipv6=64",
					"--service-cluster-ip-range=10.233.0.0/18,fd00:10:96::/112"}}}},
			})
			accesstest.Authorize(kube)
			srv := nodecidrtest.NewServer()
			for i, name := range []string{"worker1", "worker2", "master1"} {
				n := &corev1.Node{}
				n.Name, n.UID, n.Labels = name, types.UID("uid-"+name), map[string]string{}
				v4, v6 := fmt.Sprintf("10.233.%d.0/24", 64+i), netip.PrefixFrom(netip.MustParseAddr("fd00:10:233::"), 64).Addr().As16()
				v6[7] = byte(i)
				n.Spec.PodCIDR, n.Spec.PodCIDRs = v4, []string{v4, netip.PrefixFrom(netip.AddrFrom16(v6), 64).String()}
				// The IPv6 addresses share the first 32 bits of the IPv6
				// move's --to, outside it: no conflict.
				n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.10.%d", 11+i)}, {Type: corev1.NodeInternalIP, Address: fmt.Sprintf("fd00:20:1::%d", 11+i)}}
				if name == "master1" {
					n.Labels[nodecidr.LabelControlPlane] = ""
				}
				srv.AddNode(n)
			}
			kube.PrependReactor("*", "nodes", srv.Handle)
			dyn, _ := calicotest.NewDynamic(
				&unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": "default-ipv4-ippool"},
					"spec": map[string]any{"cidr": "10.233.64.0/18", "blockSize": int64(26), "vxlanMode": "Always", "natOutgoing": true}}},
				&unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": "default-ipv6-ippool"},
					"spec": map[string]any{"cidr": "fd00:10:233::/56", "blockSize": int64(122), "vxlanMode": "Never", "natOutgoing": false}}},
			)
			cl := calico.Cluster{Kube: kube, Pools: calico.NewCRDStore(dyn), Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}
			m, err := migrate.CalicoPodCIDR(migrate.CalicoPodCIDROptions{Cluster: cl, To: netip.MustParsePrefix(tc.to), OldPool: tc.oldPool, PollInterval: time.Millisecond})
			require.NoError(t, err)
			rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "journal")}).Run(context.Background(), m)
			require.NoError(t, err)
			require.True(t, rep.Paused(), "waits for the operator at step 6")
			assert.Equal(t, netip.MustParsePrefix(tc.wantSvc), m.ServiceCIDR(), "the Service range of the moved family")
			assert.Contains(t, strings.Join(rep.Steps[0].Details, "\n"), tc.wantChecks)
			assert.Contains(t, strings.Join(rep.Steps[0].Details, "\n"), "the Service CIDR "+tc.wantSvc+" and 3 node address(es)", "one address a node of the family")
			assert.Equal(t, tc.wantNodes, rep.Steps[3].Details[:3], "%v", rep.Steps[3].Details)
			assert.Contains(t, strings.Join(rep.Waiting.Instructions, "\n"), tc.wantFlag)
			for _, n := range srv.Nodes() {
				assert.Len(t, n.Spec.PodCIDRs, 2, "node %s keeps a pair", n.Name)
			}
			other := "default-ipv6-ippool"
			if tc.oldPool == other {
				other = "default-ipv4-ippool"
			}
			kept, err := cl.Pools.Get(context.Background(), other)
			require.NoError(t, err)
			assert.False(t, kept.Spec.Disabled, "the other family's pool is left alone")
			old, err := cl.Pools.Get(context.Background(), tc.oldPool)
			require.NoError(t, err)
			assert.True(t, old.Spec.Disabled, "the moved family's old pool gives no new addresses")
		})
	}
}
