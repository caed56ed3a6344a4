package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/nodecidr"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

func testNode(name, podCIDR string, controlPlane bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name),
		Labels: map[string]string{"kubernetes.io/hostname": name, "pool": "a"}, Annotations: map[string]string{"x": name}}}
	if controlPlane {
		n.Labels[nodecidr.LabelControlPlane] = ""
	}
	if podCIDR != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	}
	n.Spec.Taints = []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}}
	return n
}

func storyOne() (*fake.Clientset, *nodecidrtest.Server) {
	return nodecidrtest.New(testNode("master1", "10.10.0.0/24", true), testNode("w1", "10.10.1.0/24", false), testNode("w2", "10.10.2.0/24", false))
}

type result struct {
	code           int
	stdout, stderr string
}

func runWith(t *testing.T, c kubernetes.Interface, args ...string) result {
	t.Helper()
	return runCtx(context.Background(), c, args...)
}

func runCtx(ctx context.Context, c kubernetes.Interface, args ...string) result {
	var out, errb bytes.Buffer
	a := &app{connect: func(string, string) (kubernetes.Interface, error) { return c, nil }}
	code := a.run(ctx, args, &out, &errb)
	return result{code, out.String(), errb.String()}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{nil, "choose what to do"},
		{[]string{"--from", "10.10.0.0/18"}, "--from and --to go together"},
		{[]string{"--fix", "--allocate"}, "choose one of"},
		{[]string{"--fix", "-o", "xml"}, `-o "xml"`},
		{[]string{"--fix", "--dry-run=maybe"}, "--dry-run"},
		{[]string{"--fix", "--concurrency=0"}, "--concurrency"},
		{[]string{"--bogus"}, "flag provided but not defined"},
		{[]string{"--fix", "extra"}, `unexpected argument "extra"`},
		{[]string{"--restart-cni", "flannel", "--fix"}, "NAMESPACE/SELECTOR"},
		{[]string{"--from", "10.10.0.1/18", "--to", "10.20.0.0/16", "--journal", dir}, "10.10.0.1/18 has host bits set; the network is 10.10.0.0/18"},
		{[]string{"--from", "10.10.0.0/18", "--to", "fd00::/48", "--journal", dir}, "has no IPv4 range"},
		{[]string{"--allocate", "--journal", dir}, "--allocate needs --cluster-cidr"},
		{[]string{"--allocate", "--cluster-cidr", "10.20.0.0/16", "--node-mask", "24,64", "--journal", dir}, "--node-mask"},
		{[]string{"--fix", "--journal", dir}, "--cluster-cidr is required"},
		{[]string{"--from", "10.10.0.0/18", "--to", "10.20.0.0/16", "--nodes", "nope", "--journal", dir}, "no node named nope"},
		{[]string{"--plan", filepath.Join(dir, "missing.yaml"), "--apply", "--journal", dir}, "--plan"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c, _ := storyOne()
			r := runWith(t, c, tc.args...)
			assert.Equal(t, 2, r.code, r.stderr)
			assert.Contains(t, r.stderr, tc.msg)
			if !strings.Contains(tc.msg, "flag provided") {
				assert.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %q", r.stderr)
			}
		})
	}
	// run() (real kubeconfig loading) rejects bad input before connecting.
	var out, errb bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), []string{"--fix", "-o", "xml"}, &out, &errb))
	assert.Equal(t, 0, run(context.Background(), []string{"-h"}, &out, &errb))
}

func TestPlanOnlyChangesNothing(t *testing.T) {
	c, s := storyOne()
	before := s.Nodes()
	r := runWith(t, c, "--from", "10.10.0.0/18", "--to", "10.20.0.0/16", "--journal", t.TempDir())
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "3 node(s) to change")
	assert.Regexp(t, `w1\s+recreate\s+10.10.1.0/24\s+10.20.1.0/24`, r.stdout)
	assert.Regexp(t, `master1 \(control plane\)\s+recreate`, r.stdout)
	assert.Contains(t, r.stdout, "would start once this plan is applied")
	assert.Contains(t, r.stdout, "Nothing was changed")
	assert.Equal(t, before, s.Nodes())

	r = runWith(t, c, "--from", "10.10.0.0/18", "--to", "10.20.0.0/16", "--nodes", "w1,w2", "--journal", t.TempDir())
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "WARNING: after this plan, kube-controller-manager with --cluster-cidr=10.20.0.0/16")
}

func TestApplyAndRerun(t *testing.T) {
	c, s := storyOne()
	dir := filepath.Join(t.TempDir(), "j")
	args := []string{"--from", "10.10.0.0/18", "--to", "10.20.0.0/16", "--apply", "--cordon", "--journal", dir, "--rate", "0"}
	r := runWith(t, c, args...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "3 node(s) changed")
	assert.Contains(t, r.stdout, "delete->create gap p50")
	assert.Contains(t, r.stdout, "Verified: 3 node(s)")
	for _, n := range s.Nodes() {
		assert.True(t, strings.HasPrefix(n.Spec.PodCIDR, "10.20."), n.Name)
		assert.Equal(t, "a", n.Labels["pool"])
		assert.False(t, n.Spec.Unschedulable)
	}
	// Idempotent: the same command again finds nothing to do.
	r = runWith(t, c, args...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "0 node(s) to change")
}

func TestPlanFileRoundTrip(t *testing.T) {
	c, s := storyOne()
	dir := t.TempDir()
	file := filepath.Join(dir, "plan.yaml")
	r := runWith(t, c, "--allocate", "--cluster-cidr", "10.30.0.0/16", "--node-mask", "24", "--plan", file, "--journal", filepath.Join(dir, "j"))
	require.Equal(t, 0, r.code, r.stderr)
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Contains(t, string(data), "kind: NodePodCIDRPlan")

	r = runWith(t, c, "--plan", file, "--dry-run=server", "-o", "json", "--journal", filepath.Join(dir, "j"))
	require.Equal(t, 0, r.code, r.stderr)
	var out struct {
		Result nodecidr.Result `json:"result"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	assert.Equal(t, nodecidr.DryRunServer, out.Result.DryRun)
	assert.Len(t, out.Result.Changed, 3)
	n, _ := s.Node("w1")
	assert.Equal(t, "10.10.1.0/24", n.Spec.PodCIDR, "dry run changed nothing")

	r = runWith(t, c, "--plan", file, "--apply", "-o", "yaml", "--journal", filepath.Join(dir, "j"))
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "ok: true")
	n, _ = s.Node("w1")
	assert.Equal(t, "10.30.0.0/24", n.Spec.PodCIDR, "workers first, lowest free subnet")

	// The plan file is now stale for a new cluster state: applying it again
	// in a fresh journal finds every node done.
	r = runWith(t, c, "--plan", file, "--apply", "--journal", filepath.Join(dir, "j2"))
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "0 node(s) changed, 3 already done")
}

func TestStalePlanFile(t *testing.T) {
	c, s := storyOne()
	dir := t.TempDir()
	file := filepath.Join(dir, "plan.yaml")
	require.Equal(t, 0, runWith(t, c, "--from", "10.10.0.0/18", "--to", "10.20.0.0/16", "--plan", file, "--journal", dir).code)
	w1, _ := s.Node("w1")
	require.NoError(t, c.CoreV1().Nodes().Delete(context.Background(), "w1", metav1.DeleteOptions{}))
	w1.UID, w1.ResourceVersion = "", ""
	_, err := c.CoreV1().Nodes().Create(context.Background(), w1, metav1.CreateOptions{})
	require.NoError(t, err)
	r := runWith(t, c, "--plan", file, "--apply", "--journal", filepath.Join(dir, "j"))
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "plan no longer matches the cluster")
	assert.Contains(t, r.stderr, "node w1: uid")
}

// The e2e tests SIGKILL the command mid-run and run it again with the same
// arguments. Here the process "dies" at each of its API calls in turn (that
// call takes effect, its answer and every later call are lost) and the second
// run must finish the job from the journal.
func TestRerunResumes(t *testing.T) {
	c, _ := storyOne()
	counted := 0
	c.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		counted++
		return false, nil, nil
	})
	require.Equal(t, 0, runWith(t, c, "--from", "10.10.0.0/18", "--to", "10.20.0.0/16", "--apply", "--journal", filepath.Join(t.TempDir(), "j"), "--rate", "0").code)
	require.Greater(t, counted, 10, "plan, access reviews, a delete and a create per node, verify")
	for at := 1; at <= counted; at++ {
		t.Run(fmt.Sprintf("call=%d", at), func(t *testing.T) {
			c, s := storyOne()
			ctx, kill := context.WithCancel(context.Background())
			defer kill()
			var mu sync.Mutex
			calls, dead := 0, false
			c.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				calls++
				if calls == at {
					dead = true
					_, _, _ = s.Handle(a) // the call took effect, the answer was lost
					kill()
				}
				if dead {
					return true, nil, syscall.ECONNREFUSED
				}
				return false, nil, nil
			})
			dir := filepath.Join(t.TempDir(), "journal")
			args := []string{"--from", "10.10.0.0/18", "--to", "10.20.0.0/16", "--apply", "--journal", dir, "--rate", "0", "--create-grace", "50ms"}
			r := runCtx(ctx, c, args...)
			// Interrupted (130), the API server gone (4) or a failed step (1):
			// never success, never "bad input".
			require.Contains(t, []int{1, 4, 130}, r.code, r.stdout+r.stderr)

			// Another command may not take over the unfinished journal.
			mu.Lock()
			dead = false
			mu.Unlock()
			st, err := nodecidr.ReadJournal(dir)
			require.NoError(t, err)
			if st != nil && st.Finished {
				// The run is over only when the journal kept in the cluster
				// says so too: its copy of the last record may not have
				// been written before the kill.
				cst, err := nodecidr.ReadClusterJournal(context.Background(), c, nodecidr.ClusterJournal{})
				require.NoError(t, err)
				if cst != nil {
					st = cst
				}
			}
			if st != nil && !st.Finished {
				other := runWith(t, c, "--from", "10.10.0.0/18", "--to", "10.30.0.0/16", "--apply", "--journal", dir)
				assert.Equal(t, 2, other.code)
				assert.Contains(t, other.stderr, "unfinished run of another command")
			}

			r = runWith(t, c, args...)
			require.Equal(t, 0, r.code, r.stdout+r.stderr)
			require.Len(t, s.Nodes(), 3)
			for _, n := range s.Nodes() {
				assert.True(t, strings.HasPrefix(n.Spec.PodCIDR, "10.20."), n.Name)
				assert.Equal(t, "a", n.Labels["pool"], n.Name)
				assert.Len(t, n.Spec.Taints, 1, n.Name)
			}
			if st != nil && st.Finished {
				// Killed while verifying a finished run: nothing left to do.
				assert.Contains(t, r.stdout, "Nothing to do.")
			} else {
				assert.Contains(t, r.stdout, "Verified")
			}
		})
	}
}

func TestFixDiscoversFlags(t *testing.T) {
	kcm := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-controller-manager-m", Labels: map[string]string{"component": "kube-controller-manager"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Command: []string{"kube-controller-manager", "--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/12", "--node-cidr-mask-size=24"}}}}}
	c, s := nodecidrtest.New(kcm, testNode("a", "10.244.1.0/24", false), testNode("b", "10.244.1.0/24", false), testNode("c", "", false))
	r := runWith(t, c, "--fix", "--apply", "--journal", filepath.Join(t.TempDir(), "j"), "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "using kube-controller-manager's flags from pod kube-system/kube-controller-manager-m")
	assert.Contains(t, r.stderr, "warning: 10.244.0.0/12")
	b, _ := s.Node("b")
	cc, _ := s.Node("c")
	assert.Equal(t, "10.240.0.0/24", b.Spec.PodCIDR)
	assert.Equal(t, "10.240.1.0/24", cc.Spec.PodCIDR)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	assert.Contains(t, out, "verify")
}
