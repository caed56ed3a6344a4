package e2e_test

// End-to-end tests of the cluster lock and the journal kept in the cluster
// (issue 17) with the noderecreate binary on a real control plane: two runs
// of one plan at once, a run SIGKILLed in a node's delete→create window and
// finished from another journal directory, and a killed holder's Lease
// stolen once it expired.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/internal/lease"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// leaseE2ECluster starts a control plane with count workers carrying
// metadata a hand-made recreate loses (labels, annotations, taints, a
// cordoned node), waits until they have podCIDRs and settle, and returns the
// client, the node names, their podCIDRs and a metadata snapshot.
func leaseE2ECluster(t *testing.T, count int, hold string) (*harness.Cluster, kubernetes.Interface, []string, map[string]netip.Prefix, map[string]string) {
	t.Helper()
	c := harness.Start(t, harness.Options{ClusterCIDR: "10.10.0.0/16", NodeCIDRMaskSize: 24})
	cs := nodeE2EClient(t, c)
	var nodes []*corev1.Node
	var names []string
	for i := range count {
		n := harness.KwokNode(fmt.Sprintf("worker-%02d", i), map[string]string{"e2e.cidrshift.io/rack": "r" + strconv.Itoa(i%3)})
		n.Annotations["e2e.cidrshift.io/inventory"] = fmt.Sprintf(`{"serial":"SN%06d"}`, i*7919)
		if i%4 == 1 {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
		}
		if i%5 == 3 {
			n.Spec.Unschedulable = true // cordoned before the run: stays cordoned
		}
		if n.Name == hold {
			n.Labels[nodeE2EHoldLabel] = "true"
		}
		nodes = append(nodes, n)
		names = append(names, n.Name)
	}
	nodeE2ECreateNodes(t, t.Context(), cs, nodes)
	before := nodeE2EWaitPodCIDRs(t, cs, names, 2*time.Minute)
	settled := nodeE2ESettled(t, cs, count, 2*time.Minute)
	return c, cs, names, before, nodeE2ESnapshot(settled)
}

// leaseE2EMoved asserts that no node is lost, every node has its rebased
// podCIDR, and the metadata equals the snapshot.
func leaseE2EMoved(t *testing.T, cs kubernetes.Interface, names []string, before map[string]netip.Prefix, meta map[string]string) {
	t.Helper()
	oldRange, newRange := cidr.MustParse("10.10.0.0/16"), cidr.MustParse("10.20.0.0/16")
	after := nodeE2ENodes(t, t.Context(), cs)
	require.Len(t, after, len(names), "no node lost, none added")
	for _, n := range names {
		require.NotNil(t, after[n], "node %s lost", n)
		want := nodeE2ERebase(t, before[n], oldRange, newRange).String()
		assert.Equal(t, want, after[n].Spec.PodCIDR, "node %s", n)
		assert.Equal(t, []string{want}, after[n].Spec.PodCIDRs, "node %s", n)
	}
	poll(t, 60*time.Second, "node metadata byte-identical to the snapshot", func(ctx context.Context) error {
		if d := nodeE2EMetaDiff(meta, nodeE2ESnapshot(nodeE2ENodes(t, ctx, cs))); len(d) > 0 {
			return fmt.Errorf("%d nodes differ:\n%s", len(d), strings.Join(d[:min(len(d), 3)], "\n"))
		}
		return nil
	})
}

// leaseE2EReleased asserts that the Lease has no holder and the cluster
// holds no unfinished run.
func leaseE2EReleased(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	l, err := cs.CoordinationV1().Leases("kube-system").Get(t.Context(), nodecidr.LockScope, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, leaseE2EHolder(l.Spec.HolderIdentity), "the lease is released")
	st, err := nodecidr.ReadClusterJournal(t.Context(), cs, nodecidr.ClusterJournal{})
	require.NoError(t, err)
	assert.Nil(t, st, "no unfinished run in the cluster")
	cms, err := cs.CoreV1().ConfigMaps("kube-system").List(t.Context(), metav1.ListOptions{LabelSelector: journal.LabelScope + "=" + nodecidr.LockScope})
	require.NoError(t, err)
	for _, cm := range cms.Items {
		assert.Equal(t, journal.StateFinished, cm.Labels[journal.LabelState], cm.Name)
		assert.Empty(t, cm.Data, "a finished run keeps only its emptied first chunk: %s", cm.Name)
	}
}

func leaseE2EHolder(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// leaseE2EUIDs returns every node's UID and podCIDR.
func leaseE2EUIDs(t *testing.T, cs kubernetes.Interface) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, n := range nodeE2ENodes(t, t.Context(), cs) {
		out[name] = string(n.UID) + " " + n.Spec.PodCIDR
	}
	return out
}

// TestLeaseTwoConcurrentAppliesOneRuns starts two processes applying the
// same plan file at the same instant, each with its own journal directory:
// exactly one runs, the other exits 1 before touching a node, naming the
// holder (user@host/pid of the winner) and when its Lease expires. No node
// is lost, and a third run after the first ended takes the released Lease
// at once and finds nothing to do.
func TestLeaseTwoConcurrentAppliesOneRuns(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	const count = 20
	bin := nodeE2EBuild(t, "noderecreate")
	c, cs, names, before, meta := leaseE2ECluster(t, count, "")
	dir := t.TempDir()
	planFile := filepath.Join(dir, "plan.yaml")
	_, code, p := nodeE2ERun(t, bin, "--kubeconfig", c.AdminKubeconfig(), "--from", "10.10.0.0/16", "--to", "10.20.0.0/16",
		"--plan", planFile, "--journal", filepath.Join(dir, "plan-journal"))
	require.Equal(t, 0, code, p.output())

	// At 2 nodes per second the run lasts about 10 s: both processes reach
	// the Lease long before either could finish.
	args := func(journalDir string) []string {
		return []string{"--kubeconfig", c.AdminKubeconfig(), "--plan", planFile, "--apply", "--cordon",
			"--journal", journalDir, "--concurrency", "1", "--rate", "2"}
	}
	procs := []*nodeE2EProc{
		nodeE2EStart(t, bin, args(filepath.Join(dir, "journal-a"))...),
		nodeE2EStart(t, bin, args(filepath.Join(dir, "journal-b"))...),
	}
	// Both run from here on; they are waited for one after the other, on
	// the test goroutine, where wait's t.Fatalf can stop the test (stderr
	// is read into a buffered channel meanwhile).
	outcomes := make([]nodeE2EOutcome, 2)
	for i, p := range procs {
		outcomes[i] = p.wait(t, 3*time.Minute, nil)
	}
	winner, loser := -1, -1
	for i, o := range outcomes {
		switch o.exitCode {
		case 0:
			winner = i
		case 1:
			loser = i
		}
	}
	require.True(t, winner >= 0 && loser >= 0, "exactly one run must succeed and the other exit 1:\n--- a (exit %d):\n%s\n--- b (exit %d):\n%s",
		outcomes[0].exitCode, procs[0].output(), outcomes[1].exitCode, procs[1].output())
	lost := procs[loser].output()
	lines := strings.Split(strings.TrimSpace(lost), "\n")
	last := lines[len(lines)-1]
	assert.Contains(t, last, "lease kube-system/cidrshift-nodecidr is held by", lost)
	assert.Regexp(t, fmt.Sprintf(`held by \S+@\S+/%d until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(in [0-9hms]+, renewed while it runs\)`, procs[winner].cmd.Process.Pid), last)
	for _, l := range lines {
		if _, _, ok := nodeE2EParseEvent(l); ok {
			t.Errorf("the refused run touched a node: %s", l)
		}
	}
	assert.Contains(t, procs[winner].output(), fmt.Sprintf("%d node(s) changed", count))
	t.Logf("process %d ran, process %d was refused: %s", procs[winner].cmd.Process.Pid, procs[loser].cmd.Process.Pid, last)

	leaseE2EMoved(t, cs, names, before, meta)
	leaseE2EReleased(t, cs)

	start := time.Now()
	_, code, p = nodeE2ERun(t, bin, args(filepath.Join(dir, "journal-c"))...)
	require.Equal(t, 0, code, p.output())
	assert.Contains(t, p.output(), fmt.Sprintf("0 node(s) changed, %d already done", count))
	t.Logf("a third run took the released lease and found nothing to do in %s", time.Since(start).Round(time.Millisecond))
	leaseE2EReleased(t, cs)
}

// TestLeaseResumeFromClusterJournalAfterSIGKILL SIGKILLs a run inside a
// node's delete→create window (held there by a webhook), then deletes its
// journal directory, as if its machine were lost. A second process with
// another (empty) journal directory finds the unfinished run in the cluster
// and finishes it: the node comes back from the backup kept in the cluster,
// no node is lost and every node's metadata is byte-identical to before the
// run. (The killed holder's process is gone on this machine, so its Lease is
// taken over at once.)
func TestLeaseResumeFromClusterJournalAfterSIGKILL(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	const count, hold = 12, "worker-05"
	bin := nodeE2EBuild(t, "noderecreate")
	c, cs, names, before, meta := leaseE2ECluster(t, count, hold)
	ctx := t.Context()
	dir := t.TempDir()
	args := func(journalDir string) []string {
		return []string{"--kubeconfig", c.AdminKubeconfig(), "--from", "10.10.0.0/16", "--to", "10.20.0.0/16",
			"--apply", "--cordon", "--journal", journalDir, "--concurrency", "1", "--rate", "5"}
	}

	release := nodeE2EHoldCreates(t, ctx, cs)
	dirA := filepath.Join(dir, "machine-a")
	p := nodeE2EStart(t, bin, args(dirA)...)
	o := p.wait(t, 3*time.Minute, func(line string) bool {
		return strings.Contains(line, hold+": retrying: create")
	})
	require.True(t, o.killed, "the run ended (exit %d) before %s was held:\n%s", o.exitCode, hold, p.output())
	gone, err := nodeE2EAbsent(ctx, cs, hold)
	require.NoError(t, err)
	require.True(t, gone, "the kill left %s deleted and not recreated", hold)
	release()

	// The cluster holds the run, with the held node's full backup.
	st, err := nodecidr.ReadClusterJournal(ctx, cs, nodecidr.ClusterJournal{})
	require.NoError(t, err)
	require.NotNil(t, st, "the cluster holds the unfinished run")
	assert.False(t, st.Finished)
	assert.Equal(t, nodecidr.PhaseBackedUp, st.Phases[hold])
	backup, ok := st.Backup(hold)
	require.True(t, ok, "the backup of %s is in the cluster", hold)
	assert.Equal(t, "true", backup.Labels[nodeE2EHoldLabel])
	assert.True(t, backup.Spec.Unschedulable, "backed up after the cordon")
	assert.Contains(t, st.Cluster.StartedBy, fmt.Sprintf("/%d", p.cmd.Process.Pid))
	t.Logf("killed pid %d with %s absent; the cluster holds run %s, %d of %d nodes reached", p.cmd.Process.Pid, hold, st.Cluster.Run, len(st.Phases), len(st.Plan.Steps))

	require.NoError(t, os.RemoveAll(dirA)) // the machine is lost

	dirB := filepath.Join(dir, "machine-b")
	_, code, pb := nodeE2ERun(t, bin, args(dirB)...)
	require.Equal(t, 0, code, pb.output())
	out := pb.output()
	assert.Contains(t, out, "resuming plan "+st.PlanID+" from the cluster journal")
	assert.Contains(t, out, hold+": created")
	assert.Contains(t, out, "Verified: "+strconv.Itoa(count)+" node(s)")
	local, err := nodecidr.ReadJournal(dirB)
	require.NoError(t, err)
	require.NotNil(t, local)
	assert.True(t, local.Finished)
	assert.Equal(t, st.PlanID, local.PlanID)

	leaseE2EMoved(t, cs, names, before, meta)
	leaseE2EReleased(t, cs)
}

// TestLeaseStealAfterExpiry kills the holder of the Lease mid-run and makes
// it look like a process of another machine (whose death cannot be seen from
// here). Before the Lease expires, a second run is refused, with and without
// --steal-lock; once it expired, a run without --steal-lock is still refused
// (the holder may have been killed mid-way: taking over is the operator's
// call), and a run with --steal-lock takes over, resumes the run from the
// cluster journal with its own journal directory and finishes it.
func TestLeaseStealAfterExpiry(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	const count = 12
	bin := nodeE2EBuild(t, "noderecreate")
	c, cs, names, before, meta := leaseE2ECluster(t, count, "")
	ctx := t.Context()
	dir := t.TempDir()
	args := func(journalDir string, extra ...string) []string {
		return append([]string{"--kubeconfig", c.AdminKubeconfig(), "--from", "10.10.0.0/16", "--to", "10.20.0.0/16",
			"--apply", "--cordon", "--journal", journalDir, "--concurrency", "1", "--rate", "4", "--lock-duration", "20s"}, extra...)
	}
	done := 0
	p := nodeE2EStart(t, bin, args(filepath.Join(dir, "machine-a"))...)
	o := p.wait(t, 3*time.Minute, func(line string) bool {
		if _, phase, ok := nodeE2EParseEvent(line); ok && phase == "done" {
			done++
		}
		return done == 4
	})
	require.True(t, o.killed, "the run ended (exit %d) before it was killed:\n%s", o.exitCode, p.output())
	holder := fmt.Sprintf("/%d", p.cmd.Process.Pid)

	// The holder's process-namespace label now names another machine.
	l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, nodecidr.LockScope, metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(leaseE2EHolder(l.Spec.HolderIdentity), holder), "holder %v", l.Spec.HolderIdentity)
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"another-machine.1"}}}`, lease.LabelProcessNamespace)
	l, err = cs.CoordinationV1().Leases("kube-system").Patch(ctx, nodecidr.LockScope, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	expires := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	t.Logf("killed the holder %s after 4 nodes; its lease expires at %s", *l.Spec.HolderIdentity, expires.Format(time.RFC3339Nano))
	states := leaseE2EUIDs(t, cs)

	dirC := filepath.Join(dir, "machine-c")
	for _, extra := range [][]string{nil, {"--steal-lock"}} {
		_, code, pc := nodeE2ERun(t, bin, args(dirC, extra...)...)
		require.True(t, time.Now().Before(expires), "the refused run must end before the lease expires; make --lock-duration longer")
		assert.Equal(t, 1, code, pc.output())
		assert.Contains(t, pc.output(), "is held by "+*l.Spec.HolderIdentity+" until "+expires.UTC().Format(time.RFC3339), "%v", extra)
		if extra != nil {
			assert.Contains(t, pc.output(), "stealing takes over only an expired lease")
		}
	}
	assert.Equal(t, states, leaseE2EUIDs(t, cs), "the refused runs changed nothing")

	time.Sleep(time.Until(expires) + time.Second)
	_, code, pc := nodeE2ERun(t, bin, args(dirC)...)
	assert.Equal(t, 1, code, pc.output())
	assert.Contains(t, pc.output(), "which stopped renewing it: it expired at "+expires.UTC().Format(time.RFC3339))
	assert.Contains(t, pc.output(), "--steal-lock")
	assert.Equal(t, states, leaseE2EUIDs(t, cs), "the refused run changed nothing")

	_, code, pc = nodeE2ERun(t, bin, args(dirC, "--steal-lock")...)
	require.Equal(t, 0, code, pc.output())
	assert.Contains(t, pc.output(), "resuming plan")
	assert.Contains(t, pc.output(), "from the cluster journal")
	leaseE2EMoved(t, cs, names, before, meta)
	leaseE2EReleased(t, cs)
	l, err = cs.CoordinationV1().Leases("kube-system").Get(ctx, nodecidr.LockScope, metav1.GetOptions{})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, *l.Spec.LeaseTransitions, int32(1), "the lease changed hands")
}
