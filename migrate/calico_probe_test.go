package migrate_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
	"github.com/cidrshift/cidrshift/migrate"
)

// allocateProbe makes the fake API server give the probe Node podCIDRs on
// create, as kube-controller-manager's allocator would (none: it never
// does). It returns how many probes were created.
func allocateProbe(t *testing.T, cl calico.Cluster, podCIDRs ...string) *int {
	t.Helper()
	created := new(int)
	kube, ok := cl.Kube.(*fake.Clientset)
	require.True(t, ok)
	kube.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Node)
		if !ok || n.Name != migrate.CalicoProbeNodeName {
			return false, nil, nil
		}
		*created++
		if len(podCIDRs) > 0 {
			n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDRs[0], podCIDRs
		}
		return false, nil, nil // the node server stores it
	})
	return created
}

// TestCalicoPodCIDRProbeNodeObservesTheNewFlag: with ProbeNode and no
// kube-controller-manager mirror pod, the operator step creates a probe
// Node without podCIDR and reads the podCIDR kube-controller-manager gives
// it. One inside --to is the new flag observed and the run goes on to the
// end; one outside, or none within ProbeTimeout, pauses the run and says
// what the probe got. The probe is deleted every time. Of a dual-stack pair
// the podCIDR of --to's family counts, whatever its place.
func TestCalicoPodCIDRProbeNodeObservesTheNewFlag(t *testing.T) {
	for _, tc := range []struct {
		name     string
		podCIDRs []string
		observed string // the step's last line when observed
		paused   string // the Pause's Observed when not
	}{
		{name: "inside", podCIDRs: []string{"10.200.9.0/24"},
			observed: "observed: probe Node cidrshift-probe got podCIDR 10.200.9.0/24 inside 10.200.0.0/16"},
		{name: "dual-stack pair, IPv6 first", podCIDRs: []string{"fd00:10:244:9::/64", "10.200.9.0/24"},
			observed: "observed: probe Node cidrshift-probe got podCIDR 10.200.9.0/24 inside 10.200.0.0/16"},
		{name: "dual-stack pair, IPv4 first", podCIDRs: []string{"10.200.9.0/24", "fd00:10:244:9::/64"},
			observed: "observed: probe Node cidrshift-probe got podCIDR 10.200.9.0/24 inside 10.200.0.0/16"},
		{name: "outside", podCIDRs: []string{"10.233.70.0/24"},
			paused: "no kube-controller-manager mirror pod in kube-system; probe Node cidrshift-probe got podCIDR 10.233.70.0/24, outside 10.200.0.0/16"},
		{name: "none", paused: "no kube-controller-manager mirror pod in kube-system; probe Node cidrshift-probe got no podCIDR within 30ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, _ := calTestCluster(t, nil)
			created := allocateProbe(t, cl, tc.podCIDRs...)
			o := calOptions(cl)
			o.ProbeNode, o.ProbeTimeout = true, 30*time.Millisecond
			m, err := migrate.CalicoPodCIDR(o)
			require.NoError(t, err)
			var progress []string
			rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j"),
				Progress: func(l string) { progress = append(progress, l) }}).Run(context.Background(), m)
			require.NoError(t, err)
			assert.Equal(t, 1, *created, "one probe Node")
			assert.Contains(t, progress, "  probe Node cidrshift-probe created")
			assert.NotContains(t, strings.Join(progress, "\n"), "not deleted", "the probe was deleted without error")
			_, err = cl.Kube.CoreV1().Nodes().Get(context.Background(), migrate.CalicoProbeNodeName, metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "the probe Node is deleted: %v", err)
			flags := rep.Steps[5]
			require.Equal(t, migrate.CalicoStepFlags, flags.Name)
			if tc.paused != "" {
				require.True(t, rep.Paused())
				assert.Equal(t, tc.paused, rep.Waiting.Observed)
				assert.Contains(t, rep.Waiting.Resume, "or on the podCIDR of a probe Node")
				return
			}
			require.False(t, rep.Paused(), "waiting: %+v", rep.Waiting)
			require.NotEmpty(t, flags.Details)
			assert.Equal(t, tc.observed, flags.Details[len(flags.Details)-1])
			for _, s := range rep.Steps {
				assert.Contains(t, []string{migrate.StatusDone, migrate.StatusCompleted, migrate.StatusSkipped}, s.Status, "step %s", s.Name)
			}
			_, err = cl.Pools.Get(context.Background(), "default-ipv4-ippool")
			assert.ErrorIs(t, err, calico.ErrPoolNotFound, "the run went on to delete the old pool")
		})
	}
}

// The probe's poll reads the Node at least every 500 ms, however long
// PollInterval is, and no more often: over 1.2 s it polls four times,
// where a wait of zero would read it thousands of times.
func TestCalicoPodCIDRProbePollWaitsHalfASecond(t *testing.T) {
	t.Parallel()
	cl, _ := calTestCluster(t, nil)
	allocateProbe(t, cl)
	var reads atomic.Int64
	cl.Kube.(*fake.Clientset).PrependReactor("get", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == migrate.CalicoProbeNodeName {
			reads.Add(1)
		}
		return false, nil, nil
	})
	o := calOptions(cl)
	o.ProbeNode, o.ProbeTimeout, o.PollInterval = true, 1200*time.Millisecond, time.Hour
	m, err := migrate.CalicoPodCIDR(o)
	require.NoError(t, err)
	rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
	require.NoError(t, err)
	require.True(t, rep.Paused())
	assert.Contains(t, rep.Waiting.Observed, "probe Node cidrshift-probe got no podCIDR within 1.2s")
	// The poll's reads at 0, 0.5, 1.0 and 1.5 s, and three by deleteProbe:
	// a probe a killed run left (before the first write, and before the
	// create), and the deletion of this one.
	assert.InDelta(t, 7, reads.Load(), 2, "probe Node reads")
}

// TestCalicoPodCIDRProbeNodeRefusesAForeignNode: a Node that has the probe's
// name but not its label is not the runbook's to create or delete: the run
// stops with an input error before its first write (where it deletes a
// probe a killed run left), and the Node stays.
func TestCalicoPodCIDRProbeNodeRefusesAForeignNode(t *testing.T) {
	foreign := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: migrate.CalicoProbeNodeName, UID: "uid-foreign", Labels: map[string]string{}}}
	foreign.Spec.PodCIDR, foreign.Spec.PodCIDRs = "10.200.3.0/24", []string{"10.200.3.0/24"}
	cl, writes := calTestCluster(t, []*corev1.Node{foreign})
	o := calOptions(cl)
	o.ProbeNode, o.ProbeTimeout = true, 30*time.Millisecond
	m, err := migrate.CalicoPodCIDR(o)
	require.NoError(t, err)
	_, err = (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(context.Background(), m)
	require.ErrorIs(t, err, migrate.ErrInvalidInput)
	assert.Contains(t, err.Error(), "Node cidrshift-probe exists but is not a probe of this runbook")
	assert.Zero(t, writes.Load(), "refused before the first write")
	n, err := cl.Kube.CoreV1().Nodes().Get(context.Background(), migrate.CalicoProbeNodeName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "uid-foreign", string(n.UID), "the foreign Node stays")
}

// TestCalicoPodCIDRVerifyFailsForANodeThatLostItsPodCIDR: the run pauses
// for the operator; meanwhile the operator restarts kube-controller-manager
// with the new flag (its mirror pod shows it) and worker2's kubelet
// registers it again, with no podCIDR. The resumed run observes the flag,
// and its verify step fails on worker2: the old pool is not deleted.
func TestCalicoPodCIDRVerifyFailsForANodeThatLostItsPodCIDR(t *testing.T) {
	ctx := context.Background()
	cl, _ := calTestCluster(t, nil)
	m, err := migrate.CalicoPodCIDR(calOptions(cl))
	require.NoError(t, err)
	r := calRunToTheOperator(t, cl, m)
	w2, err := cl.Kube.CoreV1().Nodes().Get(ctx, "worker2", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, cl.Kube.CoreV1().Nodes().Delete(ctx, "worker2", metav1.DeleteOptions{}))
	again := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker2", Labels: w2.Labels}, Status: w2.Status}
	_, err = cl.Kube.CoreV1().Nodes().Create(ctx, again, metav1.CreateOptions{})
	require.NoError(t, err)

	rep, err := r.Run(ctx, m)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "verification failed: nodes: ")
	assert.Contains(t, err.Error(), "worker2")
	require.False(t, rep.Paused())
	assert.Equal(t, "observed: every kube-controller-manager pod (kube-controller-manager-master1) runs with --cluster-cidr=10.200.0.0/16", rep.Steps[5].Details[len(rep.Steps[5].Details)-1])
	verify := rep.Steps[7]
	require.Equal(t, migrate.CalicoStepVerify, verify.Name)
	assert.Equal(t, migrate.StatusFailed, verify.Status)
	require.NotEmpty(t, verify.Details)
	assert.Regexp(t, `^calico: `, verify.Details[0], "Calico's verify passes and is reported")
	assert.NotContains(t, err.Error(), "calico: ")
	assert.Contains(t, verify.Details, "nodes: 3 planned node(s) checked")
	assert.Contains(t, verify.Details, "kube-controller-manager starts with --cluster-cidr=10.200.0.0/16 against every live node")
	_, err = cl.Pools.Get(ctx, "default-ipv4-ippool")
	assert.NoError(t, err, "the old pool stays")
}

// The controller-manager step renders kube-controller-manager.yaml from
// Manifests: with Out it asks the operator to copy the rendered file; with
// no Out it shows the diff and asks for the flag by hand.
func TestCalicoPodCIDRControllerManagerStepRendersTheManifest(t *testing.T) {
	dir := t.TempDir()
	kcmManifest(t, dir)
	set := "on every control-plane node, set --cluster-cidr=10.200.0.0/16 in /etc/kubernetes/manifests/kube-controller-manager.yaml (the kubelet restarts kube-controller-manager)"
	for _, tc := range []struct {
		name, out string
	}{{"with Out", filepath.Join(t.TempDir(), "out")}, {"without Out", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			cl, _ := calTestCluster(t, nil)
			o := calOptions(cl)
			o.Manifests, o.Out = dir, tc.out
			m, err := migrate.CalicoPodCIDR(o)
			require.NoError(t, err)
			manifestStepChanges(t, m, migrate.CalicoStepFlags, "10.200.0.0/16", tc.out, set)
		})
	}
}

// calLeakedBlock is an IPAMBlock of the old pool (10.233.64.0/26, worker1)
// that still holds an allocation of a pod that no longer exists.
func calLeakedBlock() map[string]any {
	allocs := make([]any, 64)
	var unalloc []any
	for o := range allocs {
		if o == 5 {
			allocs[o] = int64(0)
			continue
		}
		unalloc = append(unalloc, int64(o))
	}
	return map[string]any{
		"apiVersion": calico.IPAMBlocksV1.GroupVersion().String(), "kind": "IPAMBlock",
		"metadata": map[string]any{"name": calicotest.BlockName(netip.MustParsePrefix("10.233.64.0/26"))},
		"spec": map[string]any{"cidr": "10.233.64.0/26", "affinity": "host:worker1", "allocations": allocs,
			"attributes": []any{map[string]any{"handle_id": "k8s-pod-network.gone-uid",
				"secondary": map[string]any{"namespace": "default", "node": "worker1", "pod": "gone"}}},
			"unallocated": unalloc, "strictAffinity": false, "sequenceNumber": int64(0)},
	}
}

// TestCalicoPodCIDRMoveStepWaitsWhileTheOldPoolHoldsALeakedAllocation: no
// pod is left on the old pool, but its IPAM still holds the address of a pod
// that is gone. The move-workloads step fails, saying what is left, and the
// old pool stays for a rerun.
func TestCalicoPodCIDRMoveStepWaitsWhileTheOldPoolHoldsALeakedAllocation(t *testing.T) {
	ctx := context.Background()
	cl, _ := calTestCluster(t, nil, calLeakedBlock())
	o := calOptions(cl)
	o.DrainTimeout = 20 * time.Millisecond
	m, err := migrate.CalicoPodCIDR(o)
	require.NoError(t, err)
	r := calRunToTheOperator(t, cl, m)

	rep, err := r.Run(ctx, m)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the old pool is not clear yet: ")
	assert.Contains(t, err.Error(), "rerun to move again")
	require.False(t, rep.Paused())
	move := rep.Steps[6]
	require.Equal(t, migrate.CalicoStepMove, move.Name)
	assert.Equal(t, migrate.StatusFailed, move.Status)
	_, err = cl.Pools.Get(ctx, "default-ipv4-ippool")
	assert.NoError(t, err, "the old pool stays")
}

// TestCalicoPodCIDRDeleteStepReportsTheAPIError: the API server refuses to
// delete the old pool; the delete step fails with its error, and the pool
// stays.
func TestCalicoPodCIDRDeleteStepReportsTheAPIError(t *testing.T) {
	ctx := context.Background()
	cl, _ := calTestCluster(t, nil)
	dyn, ok := cl.Dynamic.(*dynamicfake.FakeDynamicClient)
	require.True(t, ok)
	dyn.PrependReactor("delete", "ippools", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
	m, err := migrate.CalicoPodCIDR(calOptions(cl))
	require.NoError(t, err)
	r := calRunToTheOperator(t, cl, m)

	rep, err := r.Run(ctx, m)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "etcd is down")
	del := rep.Steps[len(rep.Steps)-1]
	require.Equal(t, migrate.CalicoStepDelete, del.Name)
	assert.Equal(t, migrate.StatusFailed, del.Status)
	_, err = cl.Pools.Get(ctx, "default-ipv4-ippool")
	assert.NoError(t, err, "the old pool stays")
}

// TestCalicoPodCIDRPlanWarnsOfMissingPermissionsApplyRefuses: a user who may
// not delete nodes gets a plan that warns of it, and an apply run that
// stops in the preflight, before the first write.
func TestCalicoPodCIDRPlanWarnsOfMissingPermissionsApplyRefuses(t *testing.T) {
	cl, writes := calTestCluster(t, nil)
	kube, ok := cl.Kube.(*fake.Clientset)
	require.True(t, ok)
	accesstest.Authorize(kube, accesstest.Rule{Verb: "delete", Resource: "nodes"})
	m, err := migrate.CalicoPodCIDR(calOptions(cl))
	require.NoError(t, err)
	rep, err := (&migrate.Runner{Mode: migrate.ModePlan}).Run(t.Context(), m)
	require.NoError(t, err)
	pre := rep.Steps[0]
	require.Equal(t, migrate.CalicoStepPreflight, pre.Name)
	require.NotEmpty(t, pre.Details)
	last := pre.Details[len(pre.Details)-1]
	assert.Regexp(t, `^warning: .*delete nodes`, last)
	assert.NotContains(t, strings.Join(pre.Details, "\n"), "permissions: all")

	_, err = (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "delete nodes")
	assert.Zero(t, writes.Load(), "refused before the first write")
}

// calRunToTheOperator runs m in ModeApply until it pauses for the operator,
// then plays the operator: kube-controller-manager's mirror pod now runs
// with --cluster-cidr=10.200.0.0/16. It returns the runner, to resume.
func calRunToTheOperator(t *testing.T, cl calico.Cluster, m migrate.Composition) *migrate.Runner {
	t.Helper()
	r := &migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}
	rep, err := r.Run(t.Context(), m)
	require.NoError(t, err)
	require.True(t, rep.Paused())
	_, err = cl.Kube.CoreV1().Pods(metav1.NamespaceSystem).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-master1", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"component": "kube-controller-manager"}},
		Spec: corev1.PodSpec{NodeName: "master1", Containers: []corev1.Container{{Name: "kube-controller-manager",
			Command: []string{"kube-controller-manager", "--cluster-cidr=10.200.0.0/16"}}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return r
}

// The preflight warns, without refusing, of a --to inside a special-purpose
// range (here the CGNAT space Tailscale answers), and says nothing of a node
// address in one.
func TestCalicoPodCIDRPlanWarnsOfASpecialPurposeTo(t *testing.T) {
	tailnet := &corev1.Node{}
	tailnet.Name, tailnet.UID = "tailnet", "uid-tailnet"
	tailnet.Spec.PodCIDR, tailnet.Spec.PodCIDRs = "10.233.67.0/24", []string{"10.233.67.0/24"}
	tailnet.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "100.100.1.2"}}
	for _, tc := range []struct {
		to   string
		warn bool
	}{{"100.64.0.0/16", true}, {"10.200.0.0/16", false}} {
		cl, _ := calTestCluster(t, []*corev1.Node{tailnet})
		o := calOptions(cl)
		o.To = netip.MustParsePrefix(tc.to)
		m, err := migrate.CalicoPodCIDR(o)
		require.NoError(t, err)
		rep, err := (&migrate.Runner{Mode: migrate.ModePlan}).Run(t.Context(), m)
		require.NoError(t, err, tc.to)
		pre := rep.Steps[0]
		require.Equal(t, migrate.CalicoStepPreflight, pre.Name)
		var warnings []string
		for _, d := range pre.Details {
			if strings.HasPrefix(d, "warning: ") {
				warnings = append(warnings, d)
			}
		}
		if tc.warn {
			require.Len(t, warnings, 1, tc.to)
			assert.Contains(t, warnings[0], "cluster-cidr "+tc.to+" (new cluster CIDR (--to))")
			assert.Contains(t, warnings[0], "shared address space / CGNAT")
		} else {
			assert.Empty(t, warnings, tc.to)
		}
		assert.Contains(t, strings.Join(pre.Details, "\n"), "conflicts: none", tc.to)
	}
}
