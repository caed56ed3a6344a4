package e2e_test

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/e2e/harness"
)

// TestInterruptNoderecreateExits130AndResumes sends SIGINT (what Ctrl-C
// sends) to a node rewrite in the middle of its run. The program must exit
// 130 with one line that says it was interrupted, leave no node deleted and
// not recreated (a node whose delete went out is finished before it stops),
// and the same command run again must finish the job.
func TestInterruptNoderecreateExits130AndResumes(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	const nodeCount = 24
	oldRange, newRange := cidr.MustParse("10.10.0.0/16"), cidr.MustParse("10.20.0.0/16")
	bin := nodeE2EBuild(t, "noderecreate")
	c := harness.Start(t, harness.Options{ClusterCIDR: oldRange.String(), NodeCIDRMaskSize: 24})
	ctx := t.Context()
	cs := nodeE2EClient(t, c)
	var nodes []*corev1.Node
	var names []string
	for i := range nodeCount {
		n := harness.KwokNode(fmt.Sprintf("worker-%02d", i), nil)
		nodes = append(nodes, n)
		names = append(names, n.Name)
	}
	nodeE2ECreateNodes(t, ctx, cs, nodes)
	nodeE2EWaitPodCIDRs(t, cs, names, 2*time.Minute)
	nodeE2ESettled(t, cs, nodeCount, 2*time.Minute)

	args := []string{"--kubeconfig", c.AdminKubeconfig(), "--from", oldRange.String(), "--to", newRange.String(),
		"--apply", "--journal", filepath.Join(t.TempDir(), "journal"), "--concurrency", "2", "--rate", "4"}
	p := nodeE2EStart(t, bin, args...)
	done := 0
	deadline := time.After(3 * time.Minute)
	interrupted := false
	for !interrupted {
		select {
		case line, ok := <-p.lines:
			require.True(t, ok, "the run ended before it was interrupted:\n%s", p.output())
			if _, phase, ok := nodeE2EParseEvent(line); ok && phase == "done" {
				done++
			}
			if done == 6 {
				require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
				interrupted = true
			}
		case <-deadline:
			t.Fatalf("fewer than 6 nodes done in 3 minutes:\n%s", p.output())
		}
	}
	o := p.wait(t, time.Minute, nil)
	require.Equal(t, 130, o.exitCode, "SIGINT must end the run with 130:\n%s", p.output())
	lines := strings.Split(strings.TrimSpace(p.output()), "\n")
	assert.Contains(t, lines[len(lines)-1], "interrupted", p.output())

	live := nodeE2ENodes(t, ctx, cs)
	moved := 0
	for _, n := range names {
		require.NotNil(t, live[n], "node %s is absent after the interrupt: a delete was left without its create", n)
		if newRange.Contains(podCIDROf(t, live[n]).Addr()) {
			moved++
		}
	}
	require.Less(t, moved, nodeCount, "the interrupt came too late to prove anything")
	t.Logf("interrupted with %d of %d nodes moved", moved, nodeCount)

	_, code, rerun := nodeE2ERun(t, bin, args...)
	require.Equal(t, 0, code, "the same command must resume and finish:\n%s", rerun.output())
	live = nodeE2ENodes(t, ctx, cs)
	for _, n := range names {
		require.NotNil(t, live[n], n)
		assert.True(t, newRange.Contains(podCIDROf(t, live[n]).Addr()), "%s has %s after the resumed run", n, live[n].Spec.PodCIDR)
	}
}

// podCIDROf parses a node's podCIDR.
func podCIDROf(t *testing.T, n *corev1.Node) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(n.Spec.PodCIDR)
	require.NoError(t, err, "node %s podCIDR %q", n.Name, n.Spec.PodCIDR)
	return p
}
