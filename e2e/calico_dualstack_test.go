package e2e_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cidrshift/cidrshift/calico"
)

// The dual-stack Calico layout: an IPv4 pool that stays and an IPv6 pool
// that is swapped for a new one.
const (
	calicoV4PoolName  = "default-ipv4-ippool"
	calicoV6PoolName  = "default-ipv6-ippool"
	calicoNewV6Name   = "new-ipv6-ippool"
	calicoV6OldCIDR   = "fd00:10:233:40::/116"
	calicoV6NewCIDR   = "fd00:10:200::/116"
	calicoV6Cluster   = "fd00:10:200::/56"
	calicoV6Service   = "fd00:10:96::/112"
	calicoDualReplica = 4
)

// createCalicoPool creates a crd.projectcalico.org/v1 IPPool.
func createCalicoPool(t *testing.T, e *calicoEnv, name, cidr string, blockSize int64, vxlan string) {
	t.Helper()
	_, err := e.dyn.Resource(calico.IPPoolsV1).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calico.IPPoolsV1.GroupVersion().String(), "kind": "IPPool",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"cidr": cidr, "blockSize": blockSize, "ipipMode": "Never", "vxlanMode": vxlan,
			"natOutgoing": true, "nodeSelector": "all()"},
	}}, metav1.CreateOptions{})
	require.NoError(t, err, "create IPPool %s", name)
}

// dualPodIPs returns the IPv4 and IPv6 address of each live pod of the
// Deployment web, and an error until there are calicoDualReplica of them,
// each Ready with one address per family inside v4 and v6.
func dualPodIPs(ctx context.Context, e *calicoEnv, v4, v6 netip.Prefix) (map[string][2]netip.Addr, error) {
	list, err := e.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		return nil, err
	}
	out := map[string][2]netip.Addr{}
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp != nil {
			return nil, fmt.Errorf("%s terminating", p.Name)
		}
		if !calicoPodReady(p) || len(p.Status.PodIPs) != 2 {
			return nil, fmt.Errorf("%s: %s, podIPs %v", p.Name, p.Status.Phase, p.Status.PodIPs)
		}
		a, b := netip.MustParseAddr(p.Status.PodIPs[0].IP), netip.MustParseAddr(p.Status.PodIPs[1].IP)
		if !v4.Contains(a) || !v6.Contains(b) {
			return nil, fmt.Errorf("%s has %s, %s; want %s, %s", p.Name, a, b, v4, v6)
		}
		out[p.Name] = [2]netip.Addr{a, b}
	}
	if len(out) != calicoDualReplica {
		return nil, fmt.Errorf("%d pods, want %d", len(out), calicoDualReplica)
	}
	return out, nil
}

// TestCalicoIPv6PoolSwapDualStack swaps the IPv6 pool of a dual-stack
// Calico cluster (issue 19) through crd.projectcalico.org/v1 on a real
// control plane: every pod of a Deployment holds an IPv4 address of the
// IPv4 pool and an IPv6 address of the IPv6 pool (Calico IPAM's order,
// IPv4 first). The swap plan for the IPv6 pool checks the new pool against
// the dual-stack cluster and Service CIDRs, copies the old pool's IPv6
// block size, and Apply (rolling restart) leaves each pod with an IPv4
// address of the untouched IPv4 pool and an IPv6 address of the new pool;
// the old IPv6 pool is deleted and Verify finds nothing left in it.
func TestCalicoIPv6PoolSwapDualStack(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	env := startCalicoBase(t)
	ctx := t.Context()
	v4, oldV6, newV6 := netip.MustParsePrefix(calicoOldCIDR), netip.MustParsePrefix(calicoV6OldCIDR), netip.MustParsePrefix(calicoV6NewCIDR)
	createCalicoPool(t, env, calicoV4PoolName, calicoOldCIDR, 26, "Always")
	createCalicoPool(t, env, calicoV6PoolName, calicoV6OldCIDR, 122, "Never")
	_, err := env.kube.AppsV1().Deployments("default").Create(ctx, calicoDeployment("default", "web", calicoDualReplica, nil), metav1.CreateOptions{})
	require.NoError(t, err)
	var before map[string][2]netip.Addr
	poll(t, 90*time.Second, "web pods with an address of each pool", func(ctx context.Context) (err error) {
		before, err = dualPodIPs(ctx, env, v4, oldV6)
		return err
	})
	v4Pool, err := env.cl.Pools.Get(ctx, calicoV4PoolName)
	require.NoError(t, err)

	req := calico.SwapRequest{OldPool: calicoV6PoolName, NewName: calicoNewV6Name, NewCIDR: calicoV6NewCIDR,
		ClusterCIDR: calicoClusterCIDR + "," + calicoV6Cluster, ServiceCIDR: calicoServiceCIDR + "," + calicoV6Service,
		NodeNetwork: calicoNodeNetwork, Move: calico.MoveRollout}
	// A new IPv6 pool outside the IPv6 cluster CIDR is refused.
	bad := req
	bad.NewCIDR = "fd00:99::/116"
	_, err = calico.Plan(ctx, env.cl, bad)
	require.Error(t, err, "a pool outside %s", calicoV6Cluster)
	assert.Contains(t, err.Error(), "fd00:99::/116")

	plan, err := calico.Plan(ctx, env.cl, req)
	require.NoError(t, err)
	assert.Equal(t, calicoV6NewCIDR, plan.NewPool.Spec.CIDR)
	assert.Equal(t, 122, plan.NewPool.Spec.BlockSize, "the old IPv6 pool's block size")
	moved := 0
	for _, w := range plan.Workloads {
		moved += len(w.Pods)
	}
	assert.Equal(t, calicoDualReplica, moved, "every web pod holds an address of the old IPv6 pool")

	res, err := calico.Apply(ctx, env.cl, plan, calico.ApplyOptions{
		JournalDir: t.TempDir(), WritesPerSecond: 20, PollInterval: 200 * time.Millisecond,
		DrainTimeout: 90 * time.Second, PodGoneTimeout: time.Minute,
	})
	require.NoError(t, err)
	require.NotNil(t, res)
	assert.True(t, res.Done)
	assert.True(t, res.OldPoolDeleted)
	require.NotNil(t, res.Verify)
	assert.Empty(t, res.Verify.PodsLeft, "Verify: %s", res.Verify.Summary())

	var after map[string][2]netip.Addr
	poll(t, 90*time.Second, "web pods on the IPv4 pool and the new IPv6 pool", func(ctx context.Context) (err error) {
		after, err = dualPodIPs(ctx, env, v4, newV6)
		return err
	})
	for name := range after {
		_, same := before[name]
		assert.False(t, same, "pod %s was not replaced", name)
	}
	_, err = env.cl.Pools.Get(ctx, calicoV6PoolName)
	assert.ErrorIs(t, err, calico.ErrPoolNotFound, "old IPv6 pool deleted")
	v4After, err := env.cl.Pools.Get(ctx, calicoV4PoolName)
	require.NoError(t, err)
	assert.Equal(t, v4Pool.Spec, v4After.Spec, "the IPv4 pool is untouched")
	assert.False(t, v4After.Spec.Disabled)
	v, err := calico.Verify(ctx, env.cl, calico.VerifyTarget{OldPool: calicoV6PoolName, OldCIDR: oldV6, NewPool: calicoNewV6Name})
	require.NoError(t, err)
	assert.Empty(t, v.PodsLeft)
	assert.True(t, v.NewPoolExists && v.NewPoolEnabled, "new pool: %s", v.Summary())
}
