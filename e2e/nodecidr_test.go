package e2e_test

// End-to-end tests of package nodecidr and the examples noderecreate and
// doctor against a real control plane (issue 4): the two field stories
// replayed, a run SIGKILLed again and again, a kube-apiserver outage in the
// middle of a run, and the minimal ClusterRole.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/timing"
	"github.com/cidrshift/cidrshift/nodecidr"
)

func nodeE2ELogGaps(t *testing.T, what string, g nodecidr.GapSummary) {
	t.Helper()
	t.Logf("%s: delete->create gap over %d nodes: p50 %s, p99 %s, max %s (pod GC quarantine %s)",
		what, g.Count, g.P50.Round(time.Microsecond), g.P99.Round(time.Microsecond), g.Max.Round(time.Microsecond), nodecidr.PodGCQuarantine)
}

// TestNodeCIDRFirstStoryReplayed replays the first field story on a real
// control plane: the workers are moved to the new range and the control-plane
// node is forgotten, the preflight names exactly that node, and
// kube-controller-manager with the new --cluster-cidr crashes on it. Then the
// right way: plan over every node (only the control plane is left), apply,
// and kube-controller-manager starts with the new flag and hands a joining
// node a podCIDR from the new range. Nothing is lost on the way.
func TestNodeCIDRFirstStoryReplayed(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	oldRange, newRange := cidr.MustParse("10.10.0.0/18"), cidr.MustParse("10.20.0.0/16")
	c := harness.Start(t, harness.Options{ClusterCIDR: oldRange.String(), NodeCIDRMaskSize: 24})
	ctx := t.Context()
	cs := nodeE2EClient(t, c)

	names := []string{"master1", "worker1", "worker2", "worker3"}
	var nodes []*corev1.Node
	for i, name := range names {
		n := harness.KwokNode(name, map[string]string{"topology.kubernetes.io/zone": "zone-" + strconv.Itoa(i%2)})
		n.Annotations["e2e.cidrshift.io/owner"] = "team-" + name
		if name == "master1" {
			n.Labels[nodecidr.LabelControlPlane] = ""
			n.Spec.Taints = []corev1.Taint{{Key: nodecidr.LabelControlPlane, Effect: corev1.TaintEffectNoSchedule}}
		} else {
			n.Labels["node-role.kubernetes.io/worker"] = ""
		}
		nodes = append(nodes, n)
	}
	nodeE2ECreateNodes(t, ctx, cs, nodes)
	before := nodeE2EWaitPodCIDRs(t, cs, names, 60*time.Second)
	settled := nodeE2ESettled(t, cs, len(names), 60*time.Second)
	meta := nodeE2ESnapshot(settled)
	t.Logf("podCIDRs before: %v", before)

	// What the operators did: move the workers only.
	rebase := []nodecidr.RebasePair{{From: oldRange, To: newRange}}
	plan, err := nodecidr.MakePlan(ctx, cs, nodecidr.PlanOptions{
		ListOptions: nodecidr.ListOptions{LabelSelector: "!" + nodecidr.LabelControlPlane},
		Mode:        nodecidr.ModeRebase, Rebase: rebase,
	})
	require.NoError(t, err)
	var planned []string
	for _, s := range plan.Steps {
		planned = append(planned, s.Node)
		assert.Equal(t, nodecidr.ActionRecreate, s.Action, "step %s", s.Node)
		assert.Equal(t, []string{nodeE2ERebase(t, before[s.Node], oldRange, newRange).String()}, s.NewPodCIDRs, "step %s", s.Node)
		assert.Equal(t, string(settled[s.Node].UID), string(s.UID), "step %s records the node's UID", s.Node)
	}
	require.Equal(t, []string{"worker1", "worker2", "worker3"}, planned)
	// The plan already says what will happen with the new --cluster-cidr.
	require.NotNil(t, plan.ControllerManager)
	assert.False(t, plan.ControllerManager.WouldStart, "the workers-only plan must predict the crash")
	if assert.Len(t, plan.ControllerManager.Crashes, 1) {
		assert.Equal(t, "master1", plan.ControllerManager.Crashes[0].Node)
	}
	assert.True(t, slices.ContainsFunc(plan.Warnings, func(w string) bool {
		return strings.Contains(w, "master1") && strings.Contains(w, "select it too")
	}), "warnings %q should tell to select master1 too", plan.Warnings)

	journalDir := filepath.Join(t.TempDir(), "journal")
	ev := nodeE2ENewEvents(t)
	res, err := nodecidr.Apply(ctx, cs, plan, nodecidr.ApplyOptions{JournalDir: journalDir, Cordon: true, OnEvent: ev.on})
	require.NoError(t, err)
	assert.Equal(t, planned, res.Changed)
	assert.Equal(t, 3, res.Gaps.Count)
	nodeE2ELogGaps(t, "workers", res.Gaps)
	v, err := nodecidr.Verify(ctx, cs, plan, nodecidr.VerifyOptions{JournalDir: journalDir})
	require.NoError(t, err)
	assert.True(t, v.OK, "verify: %+v", v.Findings)

	// The preflight with the new flag names exactly the forgotten node...
	serviceCIDR := c.Options().ServiceCIDR
	newFlags := cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: newRange.String(), NodeCIDRMaskSize: 24, ServiceClusterIPRange: serviceCIDR}
	pre, err := nodecidr.PreflightCluster(ctx, cs, newFlags, nodecidr.ListOptions{})
	require.NoError(t, err)
	require.False(t, pre.WouldStart)
	require.Len(t, pre.Crashes, 1, "crashes: %+v", pre.Crashes)
	assert.Equal(t, "master1", pre.Crashes[0].Node)
	assert.Equal(t, before["master1"].String(), pre.Crashes[0].PodCIDR)

	// ...and kube-controller-manager crashes on it, as in the story.
	logs := nodeE2EExpectCrash(t, ctx, c, "--cluster-cidr="+newRange.String())
	assert.Contains(t, logs, pre.Crashes[0].Message)
	assert.Contains(t, logs, "failed to mark cidr["+before["master1"].String()+"] at idx [0] as occupied for node: master1")
	assert.Contains(t, logs, "is out the range of cluster cidr "+newRange.String())

	// The right way: plan over every node; only the control plane is left.
	plan2, err := nodecidr.MakePlan(ctx, cs, nodecidr.PlanOptions{Mode: nodecidr.ModeRebase, Rebase: rebase})
	require.NoError(t, err)
	require.Len(t, plan2.Steps, 1)
	assert.Equal(t, "master1", plan2.Steps[0].Node)
	assert.True(t, plan2.Steps[0].ControlPlane)
	assert.Equal(t, 3, plan2.Unchanged)
	require.NotNil(t, plan2.ControllerManager)
	assert.True(t, plan2.ControllerManager.WouldStart, "crashes: %+v", plan2.ControllerManager.Crashes)
	assert.Empty(t, plan2.Warnings)
	// The same journal directory holds the finished first run; it is reused.
	res2, err := nodecidr.Apply(ctx, cs, plan2, nodecidr.ApplyOptions{JournalDir: journalDir, Cordon: true, OnEvent: ev.on})
	require.NoError(t, err)
	assert.Equal(t, []string{"master1"}, res2.Changed)
	nodeE2ELogGaps(t, "control plane", res2.Gaps)
	v, err = nodecidr.Verify(ctx, cs, plan2, nodecidr.VerifyOptions{JournalDir: journalDir})
	require.NoError(t, err)
	assert.True(t, v.OK, "verify: %+v", v.Findings)

	pre, err = nodecidr.PreflightCluster(ctx, cs, newFlags, nodecidr.ListOptions{})
	require.NoError(t, err)
	require.True(t, pre.WouldStart, "crashes: %+v", pre.Crashes)
	require.NoError(t, c.Restart(ctx, harness.ControllerManager, "--cluster-cidr="+newRange.String()))
	joined := nodeE2EJoinNode(t, ctx, cs, "worker4", newRange)
	st := c.Status(harness.ControllerManager)
	assert.True(t, st.Running, "kube-controller-manager: %s", st)
	assert.NotContains(t, c.RunLogs(harness.ControllerManager), "is out the range of cluster cidr")

	// Nothing lost: every node exists, recreated with the planned podCIDR and
	// its metadata (the taint the cordon left goes once the node is uncordoned).
	poll(t, 60*time.Second, "node metadata as before", func(ctx context.Context) error {
		after := nodeE2ENodes(t, ctx, cs)
		delete(after, "worker4")
		if d := nodeE2EMetaDiff(meta, nodeE2ESnapshot(after)); len(d) > 0 {
			return errors.New(strings.Join(d, "\n"))
		}
		return nil
	})
	after := nodeE2ENodes(t, ctx, cs)
	require.Len(t, after, 5)
	for _, name := range names {
		n := after[name]
		want := nodeE2ERebase(t, before[name], oldRange, newRange).String()
		assert.Equal(t, want, n.Spec.PodCIDR, "node %s", name)
		assert.Equal(t, []string{want}, n.Spec.PodCIDRs, "node %s", name)
		assert.NotEqual(t, settled[name].UID, n.UID, "node %s was recreated", name)
		assert.NotEqual(t, joined.String(), n.Spec.PodCIDR, "joined node got %s's podCIDR", name)
	}
}

// nodeE2EDoctorReport is the part of `doctor -o json` these tests read.
type nodeE2EDoctorReport struct {
	Source         string   `json:"source"`
	LayoutWarnings []string `json:"layoutWarnings"`
	Audit          struct {
		Nodes    int                `json:"nodes"`
		Pods     int                `json:"pods"`
		Findings []nodecidr.Finding `json:"findings"`
	} `json:"audit"`
	ControllerManager struct {
		WouldStart bool `json:"wouldStart"`
	} `json:"controllerManager"`
	FixPlan      json.RawMessage `json:"fixPlan"`
	FixPlanError string          `json:"fixPlanError"`
	Healthy      bool            `json:"healthy"`
}

// nodeE2EErrorFindings returns kind → sorted nodes of the error findings
// (for duplicates: the nodes that must give up the subnet).
func nodeE2EErrorFindings(fs []nodecidr.Finding) map[nodecidr.FindingKind][]string {
	var errs []nodecidr.Finding
	for _, f := range fs {
		if f.Severity == cidr.SeverityError {
			errs = append(errs, f)
		}
	}
	rep := &nodecidr.Report{Findings: errs}
	out := map[nodecidr.FindingKind][]string{}
	for _, f := range errs {
		out[f.Kind] = rep.NodesWith(f.Kind)
	}
	return out
}

// TestNodeCIDRSecondStoryDoctorAndFix replays the second field story: 300
// flannel-style nodes after two --cluster-cidr changes, 20 of them sharing a
// twin's podCIDR (created later than the twin) and 5 without one, each
// running pods. The doctor (binary and package) finds exactly those nodes;
// the fix plan it prints is applied (cordon, recreate or patch, a hook that
// deletes one pod per moved node). No pod is lost to the pod garbage
// collector, although a canary node deleted for good shows it is active;
// pods recreated on the moved nodes get addresses from their new podCIDRs;
// metadata is kept; and kube-controller-manager with node IPAM on hands out
// a subnet nobody holds.
func TestNodeCIDRSecondStoryDoctorAndFix(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	nodeE2ELargeCluster(t)
	const (
		nodeCount = 300
		ns        = "story2"
		// The story's flag: host bits set, read by kube-controller-manager as 10.240.0.0/12.
		storyClusterCIDR = "10.244.0.0/12"
	)
	cluster := cidr.MustParse("10.240.0.0/12")
	// Node IPAM is off while the broken state is built (it would hand the
	// nodes without podCIDR one at once) and switched on at the end.
	c := harness.Start(t, harness.Options{ClusterCIDR: cluster.String(), NodeCIDRMaskSize: 24, DisableNodeIPAM: true})
	ctx := t.Context()
	cs := nodeE2EClient(t, c)
	serviceCIDR := c.Options().ServiceCIDR
	doctor := nodeE2EBuild(t, "doctor")

	name := func(i int) string { return fmt.Sprintf("node-%03d", i) }
	isDup := func(i int) bool { return i >= 10 && (i-10)%15 == 0 } // 10, 25, ..., 295: 20 nodes
	twin := func(i int) int { return i + 3 }                       // a later name, created earlier
	missing := map[int]bool{7: true, 77: true, 147: true, 217: true, 287: true}
	var dupNames, missingNames []string
	holder := map[string]string{} // duplicate → the twin that keeps the subnet
	podCIDRs := map[string]string{}
	mkNode := func(i int) *corev1.Node {
		n := harness.KwokNode(name(i), map[string]string{
			"topology.kubernetes.io/zone": "zone-" + strconv.Itoa(i%3),
			"e2e.cidrshift.io/index":      strconv.Itoa(i),
		})
		n.Annotations["flannel.alpha.coreos.com/backend-type"] = "vxlan"
		n.Annotations["flannel.alpha.coreos.com/kube-subnet-manager"] = "true"
		n.Annotations["flannel.alpha.coreos.com/public-ip"] = fmt.Sprintf("192.168.%d.%d", i/250, i%250+1)
		n.Annotations["flannel.alpha.coreos.com/backend-data"] = fmt.Sprintf(`{"VNI":1,"VtepMAC":"02:42:%02x:%02x:00:01"}`, i/256, i%256)
		if i%9 == 0 {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "storage", Effect: corev1.TaintEffectNoSchedule}}
		}
		switch {
		case missing[i]:
			missingNames = append(missingNames, n.Name)
		case isDup(i):
			dupNames = append(dupNames, n.Name)
			holder[n.Name] = name(twin(i))
			podCIDRs[n.Name] = nodeE2ESubnet(cluster, 24, twin(i)).String()
		default:
			podCIDRs[n.Name] = nodeE2ESubnet(cluster, 24, i).String()
		}
		return nodeE2EWithPodCIDR(n, podCIDRs[n.Name])
	}
	var first, later []*corev1.Node
	for i := range nodeCount {
		if isDup(i) {
			later = append(later, mkNode(i))
		} else {
			first = append(first, mkNode(i))
		}
	}
	require.Len(t, dupNames, 20)
	// A canary node, deleted for good during the fix: the pod garbage
	// collector must take its pod, proving it runs and the wait is long enough.
	canary := nodeE2EWithPodCIDR(harness.KwokNode("gc-canary", nil), nodeE2ESubnet(cluster, 24, 400).String())
	first = append(first, canary)

	start := time.Now()
	created := nodeE2ECreateNodes(t, ctx, cs, first)
	var newest time.Time
	for _, n := range created {
		if ts := n.CreationTimestamp.Time; ts.After(newest) {
			newest = ts
		}
	}
	// creationTimestamp has one-second resolution: the duplicates must be
	// strictly younger than their twins for "held longest" to be defined.
	time.Sleep(time.Until(newest.Add(1100 * time.Millisecond)))
	nodeE2ECreateNodes(t, ctx, cs, later)
	t.Logf("created %d nodes in %s", nodeCount+1, time.Since(start).Round(time.Millisecond))

	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	var pods []*corev1.Pod
	for i := range nodeCount {
		pods = append(pods,
			nodeE2EPod(ns, "keep-"+name(i), name(i), map[string]string{"app": "keep"}),
			nodeE2EPod(ns, "cycle-"+name(i), name(i), map[string]string{"app": "cycle"}))
	}
	pods = append(pods, nodeE2EPod(ns, "canary", canary.Name, map[string]string{"app": "canary"}))
	start = time.Now()
	require.NoError(t, nodeE2EParallel(len(pods), 16, func(i int) error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pods[i], metav1.CreateOptions{})
		return err
	}))
	podsBefore := nodeE2EWaitPodsRunning(t, c, cs, ns, "", len(pods), 3*time.Minute)
	t.Logf("%d pods running in %s", len(pods), time.Since(start).Round(time.Millisecond))
	settled := nodeE2ESettled(t, cs, nodeCount+1, 2*time.Minute)
	meta := nodeE2ESnapshot(settled)
	delete(meta, canary.Name)

	// The doctor, as a user runs it.
	out, code, proc := nodeE2ERun(t, doctor, "--kubeconfig", c.AdminKubeconfig(), "--cluster-cidr", storyClusterCIDR,
		"--node-mask", "24", "--service-cidr", serviceCIDR, "-o", "json")
	require.Equal(t, 1, code, "doctor exits 1 when it finds problems:\n%s", proc.output())
	var rep nodeE2EDoctorReport
	nodeE2EJSON(t, out, &rep)
	assert.False(t, rep.Healthy)
	assert.Equal(t, nodeCount+1, rep.Audit.Nodes)
	assert.Equal(t, len(pods), rep.Audit.Pods, "every pod with an IP is checked")
	assert.True(t, slices.ContainsFunc(rep.LayoutWarnings, func(w string) bool { return strings.Contains(w, "10.240.0.0/12") }),
		"the story's %s must be flagged as 10.240.0.0/12: %q", storyClusterCIDR, rep.LayoutWarnings)
	assert.True(t, rep.ControllerManager.WouldStart, "duplicates do not stop kube-controller-manager: that is why they go unnoticed")
	errFindings := nodeE2EErrorFindings(rep.Audit.Findings)
	assert.Equal(t, map[nodecidr.FindingKind][]string{nodecidr.FindingDuplicate: dupNames, nodecidr.FindingMissing: missingNames}, errFindings,
		"the doctor must find exactly the duplicated and the missing podCIDRs")
	for _, f := range rep.Audit.Findings {
		if f.Kind == nodecidr.FindingDuplicate && assert.Len(t, f.Nodes, 2, "%s", f) {
			assert.Equal(t, holder[f.Nodes[1]], f.Nodes[0], "the node created first holds the subnet: %s", f)
			assert.Equal(t, []string{podCIDRs[f.Nodes[0]]}, f.CIDRs, "%s", f)
		}
	}
	require.NotEmpty(t, rep.FixPlan, "doctor printed no fix plan (error %q)", rep.FixPlanError)
	fix, err := nodecidr.DecodePlan(rep.FixPlan)
	require.NoError(t, err)

	// The package, for the precise view: same findings, same plan.
	layout, warnings, err := cidr.ParseControllerManagerFlags(cidr.ControllerManagerFlags{AllocateNodeCIDRs: true,
		ClusterCIDR: storyClusterCIDR, NodeCIDRMaskSize: 24, ServiceClusterIPRange: serviceCIDR})
	require.NoError(t, err)
	assert.NotEmpty(t, warnings, "host bits in %s", storyClusterCIDR)
	audit, err := nodecidr.Audit(ctx, cs, nodecidr.AuditOptions{Layout: layout, Pods: true})
	require.NoError(t, err)
	assert.Equal(t, errFindings, nodeE2EErrorFindings(audit.Findings))
	assert.Equal(t, dupNames, audit.NodesWith(nodecidr.FindingDuplicate))
	assert.Equal(t, missingNames, audit.NodesWith(nodecidr.FindingMissing))
	own, err := nodecidr.MakePlan(ctx, cs, nodecidr.PlanOptions{Mode: nodecidr.ModeFix, Layout: layout})
	require.NoError(t, err)
	stepSummary := func(p *nodecidr.Plan) []string {
		var out []string
		for _, s := range p.Steps {
			out = append(out, fmt.Sprintf("%s %s %v->%v", s.Node, s.Action, s.OldPodCIDRs, s.NewPodCIDRs))
		}
		return out
	}
	assert.Equal(t, stepSummary(own), stepSummary(fix), "doctor's fix plan and MakePlan's")

	fixed := slices.Sorted(slices.Values(append(slices.Clone(dupNames), missingNames...)))
	used := map[string]string{}
	for n, p := range podCIDRs {
		used[p] = n
	}
	newCIDR := map[string]netip.Prefix{}
	var stepNames []string
	for _, s := range fix.Steps {
		stepNames = append(stepNames, s.Node)
		require.Len(t, s.NewPodCIDRs, 1)
		p := netip.MustParsePrefix(s.NewPodCIDRs[0])
		assert.True(t, cluster.Contains(p.Addr()) && p.Bits() == 24, "step %s: %s is not a /24 of %s", s.Node, p, cluster)
		if other, taken := used[p.String()]; taken {
			t.Errorf("step %s: new podCIDR %s is held by %s", s.Node, p, other)
		}
		used[p.String()] = s.Node
		newCIDR[s.Node] = p
		if missing[mustIndex(t, s.Node)] {
			assert.Equal(t, nodecidr.ActionPatch, s.Action, "step %s", s.Node)
		} else {
			assert.Equal(t, nodecidr.ActionRecreate, s.Action, "step %s", s.Node)
			assert.Equal(t, []string{podCIDRs[s.Node]}, s.OldPodCIDRs, "step %s", s.Node)
		}
	}
	slices.Sort(stepNames)
	require.Equal(t, fixed, stepNames, "the fix plan moves exactly the broken nodes")

	// Delete the canary node for good, then apply the doctor's plan.
	require.NoError(t, cs.CoreV1().Nodes().Delete(ctx, canary.Name, metav1.DeleteOptions{}))
	canaryDeleted := time.Now()
	journalDir := filepath.Join(t.TempDir(), "journal")
	ev := nodeE2ENewEvents(t)
	res, err := nodecidr.Apply(ctx, cs, fix, nodecidr.ApplyOptions{
		JournalDir:  journalDir,
		Cordon:      true,
		Concurrency: 4,
		Hooks:       []nodecidr.Hook{nodecidr.DeleteNodePods(cs, nodecidr.DeletePodsOptions{Namespace: ns, LabelSelector: "app=cycle"})},
		OnEvent:     ev.on,
		Note:        "doctor fix plan",
	})
	require.NoError(t, err)
	assert.Equal(t, fixed, res.Changed)
	assert.Equal(t, len(dupNames), res.Gaps.Count, "only the duplicates are recreated; the others are patched")
	assert.Equal(t, len(missingNames), ev.count(nodecidr.PhasePatched))
	assert.Equal(t, len(fixed), ev.count(nodecidr.PhaseHook))
	nodeE2ELogGaps(t, "second story fix", res.Gaps)
	assert.Less(t, res.Gaps.Max, nodecidr.PodGCQuarantine, "a node was absent longer than the pod GC quarantine")
	v, err := nodecidr.Verify(ctx, cs, fix, nodecidr.VerifyOptions{JournalDir: journalDir})
	require.NoError(t, err)
	assert.True(t, v.OK, "verify: %+v", v.Findings)

	after := nodeE2ENodes(t, ctx, cs)
	require.Len(t, after, nodeCount, "every node but the canary is there")
	for i := range nodeCount {
		n, isFixed := after[name(i)], slices.Contains(fixed, name(i))
		switch {
		case isFixed:
			assert.Equal(t, newCIDR[n.Name].String(), n.Spec.PodCIDR, "node %s", n.Name)
			assert.Equal(t, []string{newCIDR[n.Name].String()}, n.Spec.PodCIDRs, "node %s", n.Name)
		default:
			assert.Equal(t, podCIDRs[n.Name], n.Spec.PodCIDR, "node %s keeps its podCIDR", n.Name)
		}
		if isDup(i) {
			assert.NotEqual(t, settled[n.Name].UID, n.UID, "duplicate %s was recreated", n.Name)
		} else {
			assert.Equal(t, settled[n.Name].UID, n.UID, "node %s was not recreated", n.Name)
		}
	}

	// The pod GC: the canary's pod goes, every other pod stays.
	poll(t, 150*time.Second, "pod GC deletes the canary node's pod", func(ctx context.Context) error {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "canary", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err=%v)", err)
	})
	t.Logf("pod GC deleted the canary's pod %s after its node was deleted", time.Since(canaryDeleted).Round(time.Second))
	if d := time.Until(ev.lastCreate().Add(nodecidr.PodGCQuarantine + 5*time.Second)); d > 0 {
		t.Logf("waiting %s more: %s past the last recreation", d.Round(time.Millisecond), nodecidr.PodGCQuarantine+5*time.Second)
		time.Sleep(d) // deliberate: outlast the pod GC quarantine
	}
	st := c.Status(harness.ControllerManager)
	require.True(t, st.Running, "kube-controller-manager (pod GC) must run: %s", st)
	require.Contains(t, c.RunLogs(harness.ControllerManager), `"Starting GC controller"`, "the pod garbage collector runs")
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	podsAfter := map[string]*corev1.Pod{}
	for i := range list.Items {
		podsAfter[list.Items[i].Name] = &list.Items[i]
	}
	lost := 0
	for pname, p := range podsBefore {
		now, ok := podsAfter[pname]
		switch {
		case pname == "canary":
		case p.Labels["app"] == "cycle" && slices.Contains(fixed, p.Spec.NodeName):
			// The hook's part is the delete; finishing it is the kubelet's
			// (kwok's, which lags under load): a pod still terminating was
			// deleted.
			assert.False(t, ok && now.UID == p.UID && now.DeletionTimestamp == nil, "hook should have deleted %s on moved node %s", pname, p.Spec.NodeName)
		case !ok || now.UID != p.UID:
			lost++
			t.Errorf("pod %s on node %s was lost (present %t)", pname, p.Spec.NodeName, ok)
		case now.DeletionTimestamp != nil:
			t.Errorf("pod %s on node %s is being deleted", pname, p.Spec.NodeName)
		}
	}
	t.Logf("pods kept across the fix: %d of %d (0 lost), %s after the last recreation", len(podsBefore)-1-len(fixed)-lost, len(podsBefore)-1-len(fixed),
		time.Since(ev.lastCreate()).Round(time.Second))

	// The moved nodes' pods, recreated (as their controller would), get
	// addresses from the new podCIDRs.
	for _, node := range fixed {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, nodeE2EPod(ns, "cycle2-"+node, node, map[string]string{"app": "cycle2"}), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, p := range nodeE2EWaitPodsRunning(t, c, cs, ns, "app=cycle2", len(fixed), 3*time.Minute) {
		ip := netip.MustParseAddr(p.Status.PodIP)
		assert.True(t, newCIDR[p.Spec.NodeName].Contains(ip), "pod %s on %s has IP %s outside the new podCIDR %s", p.Name, p.Spec.NodeName, ip, newCIDR[p.Spec.NodeName])
	}

	// Metadata (labels, annotations, taints, unschedulable) as before.
	poll(t, 60*time.Second, "node metadata as before", func(ctx context.Context) error {
		if d := nodeE2EMetaDiff(meta, nodeE2ESnapshot(nodeE2ENodes(t, ctx, cs))); len(d) > 0 {
			return fmt.Errorf("%d nodes differ:\n%s", len(d), strings.Join(d[:min(len(d), 3)], "\n"))
		}
		return nil
	})

	// The doctor now finds no broken podCIDR; the only errors left are the
	// pods that kept addresses from before (exactly on the moved nodes).
	out, code, proc = nodeE2ERun(t, doctor, "--kubeconfig", c.AdminKubeconfig(), "--cluster-cidr", storyClusterCIDR,
		"--node-mask", "24", "--service-cidr", serviceCIDR, "--pods=false", "-o", "json")
	require.Equal(t, 0, code, "doctor after the fix:\n%s", proc.output())
	rep = nodeE2EDoctorReport{}
	nodeE2EJSON(t, out, &rep)
	assert.True(t, rep.Healthy)
	assert.Empty(t, nodeE2EErrorFindings(rep.Audit.Findings))
	audit, err = nodecidr.Audit(ctx, cs, nodecidr.AuditOptions{Layout: layout, Pods: true})
	require.NoError(t, err)
	assert.Equal(t, map[nodecidr.FindingKind][]string{nodecidr.FindingPodIPOutside: fixed}, nodeE2EErrorFindings(audit.Findings))

	// kube-controller-manager with node IPAM on (the story's flag) starts and
	// hands a joining node a subnet nobody holds.
	require.NoError(t, c.Restart(ctx, harness.ControllerManager, "--allocate-node-cidrs=true", "--cluster-cidr="+storyClusterCIDR, "--node-cidr-mask-size=24"))
	joined := nodeE2EJoinNode(t, ctx, cs, name(nodeCount), cluster)
	if other, taken := used[joined.String()]; taken {
		t.Errorf("kube-controller-manager gave the joining node %s, held by %s", joined, other)
	}
	st = c.Status(harness.ControllerManager)
	assert.True(t, st.Running, "kube-controller-manager: %s", st)
}

// nodeE2EHoldLabel marks the node whose re-creation the hold webhook refuses.
const nodeE2EHoldLabel = "e2e.cidrshift.io/hold-create"

// nodeE2EHoldCreates installs a validating webhook for creates of nodes
// labelled nodeE2EHoldLabel=true whose endpoint refuses connections, with
// failurePolicy Fail: kube-apiserver answers 500 ("failed calling webhook"),
// which nodecidr treats as transient and retries. A run that deleted such a
// node sits in its create retry loop, inside the delete→create window. It
// returns a function that removes the webhook and waits until creates pass.
func nodeE2EHoldCreates(t *testing.T, ctx context.Context, cs kubernetes.Interface) (release func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "https://" + l.Addr().String() + "/hold"
	require.NoError(t, l.Close())
	const whName = "cidrshift-e2e-hold-node-create"
	fail, none, timeout := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, int32(2)
	_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: whName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "hold.nodes.e2e.cidrshift.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes"}},
			}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{nodeE2EHoldLabel: "true"}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          &timeout,
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	probe := func(ctx context.Context) error {
		n := harness.KwokNode("hold-probe", map[string]string{nodeE2EHoldLabel: "true"})
		_, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	poll(t, 30*time.Second, "hold webhook active", func(ctx context.Context) error {
		err := probe(ctx)
		if apierrors.IsInternalError(err) && nodecidr.IsTransient(err) {
			return nil
		}
		return fmt.Errorf("dry-run create of a held node: %v", err)
	})
	return func() {
		t.Helper()
		require.NoError(t, cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, whName, metav1.DeleteOptions{}))
		poll(t, 30*time.Second, "hold webhook gone", probe)
	}
}

// nodeE2EJournalGaps reads the delete→create gap of every node record in a
// nodecidr journal directory (files only; the lock is not taken).
func nodeE2EJournalGaps(t *testing.T, dir string) (gaps map[string]time.Duration, phases map[string]string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	phases, gaps = map[string]string{}, map[string]time.Duration{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasPrefix(e.Name(), "node%2F") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		var rec struct {
			Node  string        `json:"node"`
			Phase string        `json:"phase"`
			Gap   time.Duration `json:"gap"`
		}
		require.NoError(t, json.Unmarshal(data, &rec), "journal record %s: %q", e.Name(), data)
		phases[rec.Node] = rec.Phase
		if rec.Gap > 0 {
			gaps[rec.Node] = rec.Gap
		}
	}
	return gaps, phases
}

// TestNodeCIDRNoderecreateSurvivesSIGKILL rebases 200 nodes with the built
// noderecreate binary, SIGKILLed once inside a node's delete→create window
// (held there by a webhook; the node's kubelet then registers it again and
// kube-controller-manager gives it an old-range podCIDR) and then at five
// random moments (seeded), and rerun with the same command after each kill
// until it exits 0. No node is
// lost, every podCIDR is as planned, and labels, annotations, taints and
// unschedulable are byte-identical to a snapshot taken before the run.
// kube-controller-manager keeps running with the old --cluster-cidr during
// the move and starts with the new one afterwards.
func TestNodeCIDRNoderecreateSurvivesSIGKILL(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	nodeE2ELargeCluster(t)
	const (
		nodeCount = 200
		holdNode  = "worker-007"
	)
	// NODECIDR_E2E_SEED picks other kill moments; the default keeps runs comparable.
	seed := uint64(20260405)
	if env := os.Getenv("NODECIDR_E2E_SEED"); env != "" {
		v, err := strconv.ParseUint(env, 10, 64)
		require.NoError(t, err, "NODECIDR_E2E_SEED")
		seed = v
	}
	oldRange, newRange := cidr.MustParse("10.10.0.0/16"), cidr.MustParse("10.20.0.0/16")
	bin := nodeE2EBuild(t, "noderecreate")
	c := harness.Start(t, harness.Options{ClusterCIDR: oldRange.String(), NodeCIDRMaskSize: 24})
	ctx := t.Context()
	cs := nodeE2EClient(t, c)

	var nodes []*corev1.Node
	var names []string
	for i := range nodeCount {
		var n *corev1.Node
		if i < 3 {
			n = harness.KwokNode(fmt.Sprintf("cp-%d", i+1), map[string]string{nodecidr.LabelControlPlane: ""})
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: nodecidr.LabelControlPlane, Effect: corev1.TaintEffectNoSchedule})
		} else {
			n = harness.KwokNode(fmt.Sprintf("worker-%03d", i), map[string]string{"e2e.cidrshift.io/rack": "r" + strconv.Itoa(i%8)})
		}
		n.Labels["topology.kubernetes.io/zone"] = "zone-" + strconv.Itoa(i%3)
		n.Annotations["e2e.cidrshift.io/inventory"] = fmt.Sprintf(`{"serial":"SN%06d","bmc":"10.0.%d.%d"}`, i*7919, i/200, i%200)
		if i%10 == 4 {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
		}
		if i%7 == 2 {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "e2e.cidrshift.io/prefer-not", Effect: corev1.TaintEffectPreferNoSchedule})
		}
		if i%25 == 5 {
			n.Spec.Unschedulable = true // cordoned before the run: must stay cordoned
		}
		if n.Name == holdNode {
			n.Labels[nodeE2EHoldLabel] = "true"
		}
		nodes = append(nodes, n)
		names = append(names, n.Name)
	}
	start := time.Now()
	nodeE2ECreateNodes(t, ctx, cs, nodes)
	before := nodeE2EWaitPodCIDRs(t, cs, names, 2*time.Minute)
	settled := nodeE2ESettled(t, cs, nodeCount, 2*time.Minute)
	meta := nodeE2ESnapshot(settled)
	t.Logf("%d nodes with podCIDRs, settled, in %s", nodeCount, time.Since(start).Round(time.Millisecond))

	journalDir := filepath.Join(t.TempDir(), "journal")
	args := []string{"--kubeconfig", c.AdminKubeconfig(), "--from", oldRange.String(), "--to", newRange.String(),
		"--apply", "--cordon", "--journal", journalDir, "--concurrency", "4", "--rate", "25", "-o", "json"}
	var killedInWindow []string // nodes a kill left deleted and not recreated
	absentNow := func() []string {
		var out []string
		live := nodeE2ENodes(t, ctx, cs)
		for _, n := range names {
			if live[n] == nil {
				out = append(out, n)
			}
		}
		killedInWindow = append(killedInWindow, out...)
		return out
	}
	var killLog []string

	// Kill 1, deterministic: inside the delete→create window of holdNode.
	release := nodeE2EHoldCreates(t, ctx, cs)
	p := nodeE2EStart(t, bin, args...)
	o := p.wait(t, 3*time.Minute, func(line string) bool {
		node, phase, ok := nodeE2EParseEvent(line)
		// Not the conflict retry a cordon causes: the create that follows the delete.
		return ok && node == holdNode && phase == "retrying" && strings.Contains(line, holdNode+": retrying: create")
	})
	require.True(t, o.killed, "the run ended (exit %d) before %s was held:\n%s", o.exitCode, holdNode, p.output())
	gone, err := nodeE2EAbsent(ctx, cs, holdNode)
	require.NoError(t, err)
	require.True(t, gone, "the kill should have left %s deleted and not recreated", holdNode)
	killLog = append(killLog, fmt.Sprintf("kill 1 in %s's create retry loop: absent %v", holdNode, absentNow()))
	// Meanwhile the node's kubelet restarts and registers the Node again, as
	// a kubelet does (its own labels, none of the admin's metadata), and
	// kube-controller-manager gives it a podCIDR of the old range. The rerun
	// must replace that incarnation by the backup with the planned podCIDR.
	_, err = cs.CoreV1().Nodes().Create(ctx, harness.KwokNode(holdNode, nil), metav1.CreateOptions{})
	require.NoError(t, err)
	reregistered := nodeE2EWaitPodCIDRs(t, cs, []string{holdNode}, 30*time.Second)[holdNode]
	incarnation, err := cs.CoreV1().Nodes().Get(ctx, holdNode, metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, oldRange.Contains(reregistered.Addr()), "kube-controller-manager gave %s %s", holdNode, reregistered)
	killLog = append(killLog, fmt.Sprintf("  %s registered again by its kubelet meanwhile, given %s by kube-controller-manager", holdNode, reregistered))
	release()

	// Kills 2-6 at random moments: once the run has finished K nodes (K
	// random), at once or at the next backed-up / deleted / created event.
	rng := rand.New(rand.NewPCG(seed, 0x6e6f6465))
	// One target in each fifth of [20, 185], so the kills spread over the run.
	var targets []int
	for i := range 5 {
		targets = append(targets, 20+i*33+rng.IntN(33))
	}
	// Every kind of moment, in a random order; "deleted" (right after a
	// delete returned, before the create) twice.
	triggers := []string{"", "backed-up", "deleted", "created"}
	modes := []int{0, 1, 2, 2, 3}
	rng.Shuffle(len(modes), func(i, j int) { modes[i], modes[j] = modes[j], modes[i] })
	var killPlan []string
	for i := range targets {
		killPlan = append(killPlan, fmt.Sprintf("%d done then %q", targets[i], triggers[modes[i]]))
	}
	t.Logf("seed %d: random kills: %s", seed, strings.Join(killPlan, ", "))
	var doneOrder []string // nodes in the order runs reported them done
	k, runs, failures := 0, 1, 0
	var final *nodeE2EProc
	for {
		runs++
		done, armed := 0, false
		var at string
		p := nodeE2EStart(t, bin, args...)
		o := p.wait(t, 3*time.Minute, func(line string) bool {
			node, phase, ok := nodeE2EParseEvent(line)
			if ok && phase == "done" && k >= len(targets) {
				doneOrder = append(doneOrder, node)
			}
			if !ok || k >= len(targets) {
				return false
			}
			if phase == "done" || phase == "skipped" {
				done++
			}
			if phase == "done" {
				doneOrder = append(doneOrder, node)
			}
			if !armed && done >= targets[k] {
				armed = true
				if modes[k] == 0 {
					at = fmt.Sprintf("after %s %s", node, phase)
					return true
				}
				return false
			}
			if armed && phase == triggers[modes[k]] {
				at = fmt.Sprintf("at %s %s", node, phase)
				return true
			}
			return false
		})
		if o.killed {
			k++
			killLog = append(killLog, fmt.Sprintf("kill %d (run %d) with %d nodes done, %s: absent %v", k+1, runs, done, at, absentNow()))
			continue
		}
		if o.exitCode == 0 {
			final = p
			break
		}
		failures++
		t.Errorf("run %d exited %d without being killed:\n%s", runs, o.exitCode, p.output())
		require.Less(t, failures, 3, "too many failed runs")
	}
	for _, l := range killLog {
		t.Log(l)
	}
	require.Equal(t, len(targets), k, "every random kill happened before the run finished")
	// Workers first, control-plane nodes last, across all the runs.
	if assert.GreaterOrEqual(t, len(doneOrder), 3) {
		last := slices.Sorted(slices.Values(doneOrder[len(doneOrder)-3:]))
		assert.Equal(t, []string{"cp-1", "cp-2", "cp-3"}, last, "the control-plane nodes are moved last")
	}
	t.Logf("%d runs, %d SIGKILLs", runs, k+1)

	var result struct {
		Plan   *nodecidr.Plan         `json:"plan"`
		Result *nodecidr.Result       `json:"result"`
		Verify *nodecidr.VerifyReport `json:"verify"`
	}
	nodeE2EJSON(t, final.stdout.String(), &result)
	require.NotNil(t, result.Verify, final.output())
	assert.True(t, result.Verify.OK, "noderecreate's verify: %+v", result.Verify.Findings)
	assert.Equal(t, nodeCount, result.Verify.Checked)
	require.Len(t, result.Plan.Steps, nodeCount)

	gaps, phases := nodeE2EJournalGaps(t, journalDir)
	for _, n := range names {
		assert.Equal(t, "done", phases[n], "journal phase of %s", n)
	}
	for _, n := range killedInWindow {
		t.Logf("gap of %s, left deleted by a SIGKILL: %s", n, gaps[n].Round(time.Millisecond))
	}
	g := timing.Summarize(slices.Collect(maps.Values(gaps)))
	nodeE2ELogGaps(t, "200 nodes, 6 SIGKILLs (a killed node's gap includes the time until the rerun)",
		nodecidr.GapSummary{Count: g.Count, P50: g.P50, P99: g.P99, Max: g.Max})
	st, err := nodecidr.ReadJournal(journalDir)
	require.NoError(t, err)
	require.NotNil(t, st)
	assert.True(t, st.Finished)
	v, err := nodecidr.Verify(ctx, cs, st.Plan, nodecidr.VerifyOptions{JournalDir: journalDir})
	require.NoError(t, err)
	assert.True(t, v.OK, "verify: %+v", v.Findings)

	// 0 nodes lost, every podCIDR as planned, metadata byte-identical.
	poll(t, 60*time.Second, "node metadata byte-identical to the snapshot", func(ctx context.Context) error {
		if d := nodeE2EMetaDiff(meta, nodeE2ESnapshot(nodeE2ENodes(t, ctx, cs))); len(d) > 0 {
			return fmt.Errorf("%d nodes differ:\n%s", len(d), strings.Join(d[:min(len(d), 3)], "\n"))
		}
		return nil
	})
	after := nodeE2ENodes(t, ctx, cs)
	require.Len(t, after, nodeCount)
	for _, n := range names {
		want := nodeE2ERebase(t, before[n], oldRange, newRange).String()
		assert.Equal(t, want, after[n].Spec.PodCIDR, "node %s", n)
		assert.Equal(t, []string{want}, after[n].Spec.PodCIDRs, "node %s", n)
		assert.NotEqual(t, settled[n].UID, after[n].UID, "node %s was recreated", n)
	}
	assert.NotEqual(t, incarnation.UID, after[holdNode].UID, "the kubelet's incarnation of %s was replaced", holdNode)

	// kube-controller-manager ran through the move with the old flag; with
	// the new one it starts and allocates from the new range.
	st2 := c.Status(harness.ControllerManager)
	assert.True(t, st2.Running, "kube-controller-manager with the old --cluster-cidr: %s", st2)
	pre, err := nodecidr.PreflightCluster(ctx, cs, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: newRange.String(), NodeCIDRMaskSize: 24,
		ServiceClusterIPRange: c.Options().ServiceCIDR}, nodecidr.ListOptions{})
	require.NoError(t, err)
	require.True(t, pre.WouldStart, "crashes: %+v", pre.Crashes)
	require.NoError(t, c.Restart(ctx, harness.ControllerManager, "--cluster-cidr="+newRange.String()))
	joined := nodeE2EJoinNode(t, ctx, cs, "worker-new", newRange)
	for _, n := range names {
		assert.NotEqual(t, after[n].Spec.PodCIDR, joined.String(), "joined node got %s's podCIDR", n)
	}
	assert.True(t, c.Status(harness.ControllerManager).Running)
}

// TestNodeCIDRApplySurvivesAPIServerOutage SIGKILLs kube-apiserver in the
// middle of nodecidr.Apply (right after a node was deleted) and starts it
// again 5 s later. The run retries, finishes without error, and every node is
// there as planned with its metadata.
func TestNodeCIDRApplySurvivesAPIServerOutage(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	const nodeCount = 60
	oldRange, newRange := cidr.MustParse("10.10.0.0/16"), cidr.MustParse("10.20.0.0/16")
	c := harness.Start(t, harness.Options{ClusterCIDR: oldRange.String(), NodeCIDRMaskSize: 24})
	ctx := t.Context()
	cs := nodeE2EClient(t, c)

	var nodes []*corev1.Node
	var names []string
	for i := range nodeCount {
		n := harness.KwokNode(fmt.Sprintf("node-%02d", i), map[string]string{"e2e.cidrshift.io/pool": "p" + strconv.Itoa(i%4)})
		n.Annotations["e2e.cidrshift.io/asset"] = strconv.Itoa(1000 + i)
		if i%5 == 0 {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
		}
		nodes = append(nodes, n)
		names = append(names, n.Name)
	}
	nodeE2ECreateNodes(t, ctx, cs, nodes)
	before := nodeE2EWaitPodCIDRs(t, cs, names, 60*time.Second)
	settled := nodeE2ESettled(t, cs, nodeCount, 90*time.Second)
	meta := nodeE2ESnapshot(settled)

	plan, err := nodecidr.MakePlan(ctx, cs, nodecidr.PlanOptions{Mode: nodecidr.ModeRebase,
		Rebase: []nodecidr.RebasePair{{From: oldRange, To: newRange}}})
	require.NoError(t, err)
	require.Len(t, plan.Steps, nodeCount)

	var (
		outage                       sync.WaitGroup
		once                         sync.Once
		mu                           sync.Mutex
		killedAt, restartAt, healthy time.Time
		doneAtKill, doneAfterRestart int
		killErr, startErr            error
	)
	ev := nodeE2ENewEvents(t)
	ev.hook = func(e nodecidr.Event) {
		mu.Lock()
		defer mu.Unlock()
		if !restartAt.IsZero() && e.Phase == nodecidr.PhaseDone {
			doneAfterRestart++
		}
		if e.Phase != nodecidr.PhaseDeleted || ev.count(nodecidr.PhaseDone) < nodeCount/3 {
			return
		}
		once.Do(func() {
			doneAtKill = ev.count(nodecidr.PhaseDone)
			outage.Go(func() {
				err := c.Kill(harness.APIServer)
				mu.Lock()
				killErr, killedAt = err, time.Now()
				mu.Unlock()
				time.Sleep(5 * time.Second) // the outage
				mu.Lock()
				restartAt = time.Now()
				mu.Unlock()
				err = c.StartComponent(ctx, harness.APIServer)
				mu.Lock()
				startErr, healthy = err, time.Now()
				mu.Unlock()
			})
		})
	}
	journalDir := filepath.Join(t.TempDir(), "journal")
	start := time.Now()
	res, err := nodecidr.Apply(ctx, cs, plan, nodecidr.ApplyOptions{JournalDir: journalDir, Concurrency: 2, RateLimit: 10, OnEvent: ev.on})
	finished := time.Now()
	outage.Wait()
	require.NoError(t, killErr)
	require.NoError(t, startErr)
	require.NoError(t, err, "Apply must ride out the outage; retries: %q", ev.retryLines())
	require.False(t, killedAt.IsZero(), "kube-apiserver was never killed")
	t.Logf("Apply took %s; kube-apiserver SIGKILLed after %d nodes done (right after a delete), %s in; started again 5s later, healthy after %s more; "+
		"%d nodes done after the restart; %d retry events",
		finished.Sub(start).Round(time.Millisecond), doneAtKill, killedAt.Sub(start).Round(time.Millisecond),
		healthy.Sub(restartAt).Round(time.Millisecond), doneAfterRestart, len(ev.retryLines()))
	assert.True(t, finished.After(restartAt), "the run must have lasted through the outage")
	assert.Positive(t, doneAfterRestart, "nodes moved after the restart")
	assert.NotEmpty(t, ev.retryLines(), "the outage must have been seen and retried")
	if slices.ContainsFunc(ev.retryLines(), func(l string) bool { return strings.Contains(l, ": retrying: create") }) {
		t.Log("the outage caught a node between its delete and its create; the create was retried until kube-apiserver was back")
	}
	assert.Len(t, res.Changed, nodeCount)
	nodeE2ELogGaps(t, "apiserver outage", res.Gaps)

	v, err := nodecidr.Verify(ctx, cs, plan, nodecidr.VerifyOptions{JournalDir: journalDir})
	require.NoError(t, err)
	assert.True(t, v.OK, "verify: %+v", v.Findings)
	after := nodeE2ENodes(t, ctx, cs)
	require.Len(t, after, nodeCount)
	for _, n := range names {
		want := nodeE2ERebase(t, before[n], oldRange, newRange).String()
		assert.Equal(t, []string{want}, after[n].Spec.PodCIDRs, "node %s", n)
	}
	poll(t, 30*time.Second, "node metadata as before", func(ctx context.Context) error {
		if d := nodeE2EMetaDiff(meta, nodeE2ESnapshot(nodeE2ENodes(t, ctx, cs))); len(d) > 0 {
			return fmt.Errorf("%d nodes differ:\n%s", len(d), strings.Join(d[:min(len(d), 3)], "\n"))
		}
		return nil
	})
}

// nodeE2ENodeState is what must not change when a run is refused.
type nodeE2ENodeState struct {
	UID             types.UID
	ResourceVersion string
	PodCIDRs        []string
	Unschedulable   bool
}

func nodeE2EStates(nodes map[string]*corev1.Node) map[string]nodeE2ENodeState {
	out := map[string]nodeE2ENodeState{}
	for name, n := range nodes {
		out[name] = nodeE2ENodeState{UID: n.UID, ResourceVersion: n.ResourceVersion, PodCIDRs: n.Spec.PodCIDRs, Unschedulable: n.Spec.Unschedulable}
	}
	return out
}

// TestNodeCIDRRBACMinimalClusterRole binds nodecidr's ClusterRole to a user,
// who moves every node with noderecreate (with --cordon and --delete-pods).
// Before that, a user bound to the same role without `delete nodes` is
// refused before anything changes, by the package and by the binary.
func TestNodeCIDRRBACMinimalClusterRole(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	oldRange, newRange := cidr.MustParse("10.10.0.0/18"), cidr.MustParse("10.20.0.0/16")
	bin := nodeE2EBuild(t, "noderecreate")
	c := harness.Start(t, harness.Options{ClusterCIDR: oldRange.String(), NodeCIDRMaskSize: 24})
	ctx := t.Context()
	admin := nodeE2EClient(t, c)

	names := []string{"cp-1", "worker-1", "worker-2", "worker-3", "worker-4", "worker-5"}
	var nodes []*corev1.Node
	for _, name := range names {
		var labels map[string]string
		if name == "cp-1" {
			labels = map[string]string{nodecidr.LabelControlPlane: ""}
		}
		nodes = append(nodes, harness.KwokNode(name, labels))
	}
	nodeE2ECreateNodes(t, ctx, admin, nodes)
	nodeE2EWaitPodCIDRs(t, admin, names, 60*time.Second)
	// A workload, so --delete-pods has pods to delete (the Deployment recreates them).
	replicas := int32(4)
	_, err := admin.AppsV1().Deployments(metav1.NamespaceDefault).Create(ctx, nodeE2EDeployment("web", replicas), metav1.CreateOptions{})
	require.NoError(t, err)
	nodeE2EWaitPodsRunning(t, c, admin, metav1.NamespaceDefault, "app=web", int(replicas), 90*time.Second)
	settled := nodeE2ESettled(t, admin, len(names), 60*time.Second)

	// The ClusterRole exactly as shipped, and the same minus `delete nodes`.
	var role rbacv1.ClusterRole
	require.NoError(t, yaml.UnmarshalStrict([]byte(nodecidr.ClusterRoleYAML()), &role))
	require.Equal(t, "ClusterRole", role.Kind)
	noDelete := role.DeepCopy()
	noDelete.Name += "-no-delete"
	removed := false
	for i, r := range noDelete.Rules {
		if slices.Contains(r.Resources, "nodes") && slices.Contains(r.Verbs, "delete") {
			noDelete.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == "delete" })
			removed = true
		}
	}
	require.True(t, removed, "the ClusterRole has no `delete nodes`:\n%s", nodecidr.ClusterRoleYAML())
	for user, r := range map[string]*rbacv1.ClusterRole{"noder": &role, "noder-limited": noDelete} {
		_, err := admin.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: r.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	userClient := func(user string) kubernetes.Interface {
		cfg, err := c.UserConfig(user)
		require.NoError(t, err)
		cs, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		poll(t, 30*time.Second, user+" may list nodes", func(ctx context.Context) error {
			_, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		})
		return cs
	}
	limited := userClient("noder-limited")
	userClient("noder")
	rebase := []nodecidr.RebasePair{{From: oldRange, To: newRange}}

	// The limited user can plan (reads only) but Apply refuses before any write.
	plan, err := nodecidr.MakePlan(ctx, limited, nodecidr.PlanOptions{Mode: nodecidr.ModeRebase, Rebase: rebase})
	require.NoError(t, err)
	require.Len(t, plan.Steps, len(names))
	journalDir := filepath.Join(t.TempDir(), "journal")
	_, err = nodecidr.Apply(ctx, limited, plan, nodecidr.ApplyOptions{JournalDir: journalDir, Cordon: true,
		Hooks: []nodecidr.Hook{nodecidr.DeleteNodePods(limited, nodecidr.DeletePodsOptions{})}})
	require.Error(t, err)
	require.ErrorIs(t, err, access.ErrDenied)
	var denied *access.DeniedError
	require.ErrorAs(t, err, &denied)
	var missingPerms []string
	for _, d := range denied.Denied {
		missingPerms = append(missingPerms, d.String())
	}
	assert.Equal(t, []string{"delete nodes"}, missingPerms, "error: %v", err)
	st, err := nodecidr.ReadJournal(journalDir)
	require.NoError(t, err)
	assert.Nil(t, st, "a refused run records nothing")

	limitedKubeconfig, err := c.UserKubeconfig("noder-limited")
	require.NoError(t, err)
	args := func(kubeconfig, journal string) []string {
		return []string{"--kubeconfig", kubeconfig, "--from", oldRange.String(), "--to", newRange.String(),
			"--apply", "--cordon", "--delete-pods", "--journal", journal, "-o", "json"}
	}
	_, code, proc := nodeE2ERun(t, bin, args(limitedKubeconfig, filepath.Join(t.TempDir(), "journal-bin"))...)
	assert.Equal(t, 1, code, "noderecreate as the limited user:\n%s", proc.output())
	assert.Contains(t, proc.output(), "delete nodes")

	// Nothing changed: same UIDs, resourceVersions, podCIDRs, cordon state.
	assert.Equal(t, nodeE2EStates(settled), nodeE2EStates(nodeE2ENodes(t, ctx, admin)), "nodes changed although the run was refused")

	// The user with the shipped role runs the whole move.
	kubeconfig, err := c.UserKubeconfig("noder")
	require.NoError(t, err)
	binJournal := filepath.Join(t.TempDir(), "journal-noder")
	out, code, proc := nodeE2ERun(t, bin, args(kubeconfig, binJournal)...)
	require.Equal(t, 0, code, "noderecreate as noder:\n%s", proc.output())
	var result struct {
		Result *nodecidr.Result       `json:"result"`
		Verify *nodecidr.VerifyReport `json:"verify"`
	}
	nodeE2EJSON(t, out, &result)
	require.NotNil(t, result.Verify)
	assert.True(t, result.Verify.OK, "verify: %+v", result.Verify.Findings)
	assert.Len(t, result.Result.Changed, len(names))
	nodeE2ELogGaps(t, "noder", result.Result.Gaps)
	after := nodeE2ENodes(t, ctx, admin)
	for _, name := range names {
		p := netip.MustParsePrefix(after[name].Spec.PodCIDR)
		assert.True(t, newRange.Contains(p.Addr()), "node %s podCIDR %s", name, p)
		assert.False(t, after[name].Spec.Unschedulable, "node %s left cordoned", name)
	}
	// --delete-pods deleted the pods on every moved node; the Deployment's
	// replacements run with addresses from the new range. They are bound to
	// re-created nodes, so kwok may never start one of them (kwokNudge).
	nudges := newKwokWatch(c)
	poll(t, 90*time.Second, "web pods in the new range", func(ctx context.Context) error {
		list, err := admin.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		ready := 0
		var others []string
		for i := range list.Items {
			p := &list.Items[i]
			kwokNudge(t, ctx, admin, p, nudges)
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
				why := ""
				for _, c := range p.Status.Conditions {
					if c.Status != corev1.ConditionTrue && c.Message != "" {
						why += "; " + string(c.Type) + ": " + c.Message
					}
				}
				others = append(others, fmt.Sprintf("%s (phase %s, node %q, deleting %t%s)", p.Name, p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil, why))
				continue
			}
			if ip := netip.MustParseAddr(p.Status.PodIP); !newRange.Contains(ip) {
				return fmt.Errorf("pod %s on %s has IP %s", p.Name, p.Spec.NodeName, ip)
			}
			ready++
		}
		if ready != int(replicas) {
			return fmt.Errorf("%d of %d pods running in %s; the others: %s", ready, replicas, newRange, strings.Join(others, ", "))
		}
		return nil
	})
}
