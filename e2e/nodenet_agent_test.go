package e2e_test

import (
	"encoding/json"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodenet"
)

// TestNodenetAgentManifestAndRBAC: the DaemonSet manifest passes the real
// kube-apiserver's server-side dry run, and its RBAC is enough, and only
// just, for the agent's protocol: as the agent's ServiceAccount the agent
// passes its permission check, creates and renews its Lease and reports on
// it, and the runbook side reads the report; the ServiceAccount may not
// write Nodes.
func TestNodenetAgentManifestAndRBAC(t *testing.T) {
	skipInShortMode(t)
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	admin, err := c.Client()
	require.NoError(t, err)
	objs, err := harness.DecodeManifest("../examples/nodenet-agent/daemonset.yaml")
	require.NoError(t, err)
	require.Len(t, objs, 6)
	require.NoError(t, harness.CreateObjects(ctx, admin, objs, true))
	_, err = admin.AppsV1().DaemonSets("kube-system").Get(ctx, "nodenet-agent", metav1.GetOptions{})
	require.Error(t, err, "a dry run stores nothing")
	require.NoError(t, harness.CreateObjects(ctx, admin, objs[:5], false)) // the ServiceAccount and RBAC, for real

	_, err = admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "agent-w1"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg, err := c.UserConfig("system:serviceaccount:kube-system:nodenet-agent", "system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated")
	require.NoError(t, err)
	asAgent, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	a := &migrate.Agent{Kube: asAgent, Node: "agent-w1", Identity: "nodenet-agent-x1"}
	require.NoError(t, a.Check(ctx), "the manifest's RBAC covers the agent")

	// A request tampered to name another node: the agent refuses it and
	// reports that on its Lease.
	req, err := json.Marshal(migrate.HostRequest{Generation: 1, Want: nodenet.Want{Node: "agent-w2", PodCIDR: netip.MustParsePrefix("10.244.3.0/24")}})
	require.NoError(t, err)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{migrate.HostWantAnnotation: string(req)}}})
	require.NoError(t, err)
	_, err = admin.CoreV1().Nodes().Patch(ctx, "agent-w1", types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	st, err := a.Once(ctx)
	require.NoError(t, err)
	assert.Equal(t, migrate.HostFailed, st.Phase)
	assert.Contains(t, st.Error, `the request names node "agent-w2"`)
	_, err = a.Once(ctx) // renews the Lease (update)
	require.NoError(t, err)

	h := &migrate.HostAgents{Kube: admin, PollInterval: 50 * time.Millisecond, Timeout: 10 * time.Second}
	present, err := h.Present(ctx, "agent-w1")
	require.NoError(t, err)
	assert.True(t, present)
	got, err := h.Status(ctx, "agent-w1")
	require.NoError(t, err)
	assert.Equal(t, int64(1), got.Generation)
	assert.Equal(t, migrate.HostFailed, got.Phase)

	// Least privilege: the agent cannot write Nodes.
	_, err = asAgent.CoreV1().Nodes().Patch(ctx, "agent-w1", types.MergePatchType, patch, metav1.PatchOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "forbidden")

	// Requests published at once for one node (nodes moving together) each
	// get a generation of their own: kube-apiserver refuses a merge patch
	// whose resourceVersion is stale, and Publish reads again.
	const n = 8
	gens := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			w := nodenet.Want{Node: "agent-w1", PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(10 + i), 0}), 24)}
			gens[i], errs[i] = h.Publish(ctx, w)
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, []int64{2, 3, 4, 5, 6, 7, 8, 9}, slices.Sorted(slices.Values(gens)), "one generation per request after the tampered one")
	node, err := admin.CoreV1().Nodes().Get(ctx, "agent-w1", metav1.GetOptions{})
	require.NoError(t, err)
	var last migrate.HostRequest
	require.NoError(t, json.Unmarshal([]byte(node.Annotations[migrate.HostWantAnnotation]), &last))
	assert.Equal(t, int64(9), last.Generation)
	assert.Equal(t, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(10 + slices.Index(gens, 9)), 0}), 24), last.Want.PodCIDR)
}
