package e2e_test

import (
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/e2e/harness"
)

// TestKwokNudgeRestartsAStuckKwok proves the way out kwokNudge takes when
// nudges do not help: kwok is frozen (SIGSTOP) once its node has a podCIDR,
// and a pod is bound to the node. No annotation makes a frozen kwok run
// it, so nodeE2EWaitPodsRunning must restart kwok once, and the new
// process runs the pod with an address from the node's podCIDR.
func TestKwokNudgeRestartsAStuckKwok(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	c := harness.Start(t, harness.Options{ClusterCIDR: "10.30.0.0/16", NodeCIDRMaskSize: 24})
	ctx := t.Context()
	cs := nodeE2EClient(t, c)
	const node, ns = "kwok-stuck-0", metav1.NamespaceDefault
	nodeE2ECreateNodes(t, ctx, cs, []*corev1.Node{harness.KwokNode(node, nil)})
	podCIDR := nodeE2EWaitPodCIDRs(t, cs, []string{node}, 60*time.Second)[node]
	starts := c.Status(harness.Kwok).Starts
	require.NoError(t, c.Signal(harness.Kwok, syscall.SIGSTOP))
	_, err := cs.CoreV1().Pods(ns).Create(ctx, nodeE2EPod(ns, "stuck", node, map[string]string{"app": "stuck"}), metav1.CreateOptions{})
	require.NoError(t, err)

	pods := nodeE2EWaitPodsRunning(t, c, cs, ns, "app=stuck", 1, 3*time.Minute)
	assert.Equal(t, starts+1, c.Status(harness.Kwok).Starts, "kwok is restarted once")
	require.Contains(t, pods, "stuck")
	ip, err := netip.ParseAddr(pods["stuck"].Status.PodIP)
	require.NoError(t, err)
	assert.True(t, podCIDR.Contains(ip), "pod IP %s outside the node's podCIDR %s", ip, podCIDR)
}
