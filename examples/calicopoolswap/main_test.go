package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
)

func exec(t *testing.T, conn connectFunc, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	if conn == nil {
		conn = func(context.Context, string, string) (calico.Cluster, error) {
			t.Fatalf("%v must not connect to a cluster", args)
			return calico.Cluster{}, nil
		}
	}
	code := runWith(context.Background(), args, &out, &errb, conn)
	return code, out.String(), errb.String()
}

func TestBadInputExitsTwoWithOneLine(t *testing.T) {
	cases := []struct {
		args []string
		text string
	}{
		{nil, "usage"},
		{[]string{"swap"}, `unknown subcommand "swap"`},
		{[]string{"plan"}, "--old-pool is required"},
		{[]string{"plan", "--old-pool", "p"}, "--new-cidr is required"},
		{[]string{"plan", "--old-pool", "p", "--new-cidr", "10.233.64.1/16"}, "10.233.64.1/16 has host bits set; the network is 10.233.0.0/16"},
		{[]string{"plan", "--old-pool", "p", "--new-cidr", "10.20.0.0/16", "--move", "teleport"}, `--move "teleport": want rollout or evict`},
		{[]string{"plan", "--old-pool", "p", "--new-cidr", "10.20.0.0/16", "--block-size", "40"}, "--block-size 40"},
		{[]string{"plan", "--old-pool", "p", "--new-cidr", "10.20.0.0/16", "--service-cidr", "10.96.0.1/12"}, "--service-cidr"},
		{[]string{"plan", "--old-pool", "p", "--new-cidr", "10.20.0.0/16", "-o", "xml"}, `-o "xml"`},
		{[]string{"plan", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"plan", "--old-pool", "p", "--new-cidr", "10.20.0.0/16", "extra"}, `unexpected argument "extra"`},
		{[]string{"apply", "--old-pool", "p", "--new-cidr", "10.20.0.0/16", "--dry-run", "maybe"}, `--dry-run "maybe"`},
		{[]string{"apply", "--old-pool", "p", "--new-cidr", "10.20.0.0/16", "--dry-run=server", "--apply"}, "exclude each other"},
		{[]string{"apply", "--plan", "/nonexistent/plan.yaml"}, "--plan"},
		{[]string{"verify"}, "--old-pool or --old-cidr is required"},
		{[]string{"blocks", "--old-cidr", "10.0.0.0/33"}, "--old-cidr"},
		{[]string{"capacity"}, "--pool NAME or --new-cidr CIDR is required"},
		{[]string{"capacity", "--new-cidr", "10.20.0.0/16", "--block-size", "12"}, "spec.blockSize"},
		{[]string{"capacity", "--new-cidr", "10.20.0.0/16", "--cluster-cidr", "10.20.0.1/16"}, "host bits"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errOut := exec(t, nil, c.args...)
			assert.Equal(t, 2, code)
			assert.Empty(t, out)
			assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
			assert.Contains(t, errOut, c.text)
		})
	}
}

func TestCapacityOffline(t *testing.T) {
	code, out, errOut := exec(t, nil, "capacity", "--new-cidr", "10.20.0.0/16", "--cluster-cidr", "10.20.0.0/16", "--kube-proxy-cluster-cidr", "10.233.64.0/18")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "blocks:                  1024")
	assert.Contains(t, out, "kube-proxy's clusterCIDR 10.233.64.0/18 does not contain pool 10.20.0.0/16")

	code, out, _ = exec(t, nil, "capacity", "--new-cidr", "fd00:20::/64", "-o", "json")
	require.Equal(t, 0, code)
	var c map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&c))
	// Counts are JSON numbers, exact beyond 64 bits (as the capacity example's).
	assert.Equal(t, json.Number("288230376151711744"), c["blocks"])
	assert.Equal(t, json.Number("18446744073709551616"), c["addresses"])
	assert.Equal(t, json.Number("122"), c["blockSize"])
}

// fakeCluster is story 1 on fake clients, with the workload controllers and
// IPAM simulated.
func fakeCluster(t *testing.T) (connectFunc, calico.Cluster) {
	t.Helper()
	two := int32(2)
	l := map[string]string{"app": "web"}
	kube, _ := calicotest.NewKube(&appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}},
	})
	accesstest.Authorize(kube)
	dyn, _ := calicotest.NewDynamic(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": "default-ipv4-ippool"},
		"spec": map[string]any{"cidr": "10.233.64.0/18", "blockSize": int64(24), "ipipMode": "Always", "natOutgoing": true},
	}})
	pools := calico.NewCRDStore(dyn)
	cl := calico.Cluster{Kube: kube, Pools: pools, Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}
	work := &calicotest.Workloads{Kube: kube, Nodes: []string{"node-1"}}
	ipam := &calicotest.IPAM{Kube: kube, Pools: pools, Dynamic: dyn, MarkReady: true}
	stop := calicotest.Loop(context.Background(), time.Millisecond, nil, work.Sync, ipam.Sync)
	t.Cleanup(stop)
	require.Eventually(t, func() bool {
		v, err := calico.Verify(context.Background(), cl, calico.VerifyTarget{OldPool: "default-ipv4-ippool"})
		return err == nil && len(v.PodsLeft) == 2 && v.Blocks.Allocated == 2
	}, 20*time.Second, time.Millisecond)
	return func(context.Context, string, string) (calico.Cluster, error) { return cl, nil }, cl
}

func TestPlanApplyVerifyWithFakes(t *testing.T) {
	conn, cl := fakeCluster(t)
	ctx := context.Background()
	base := []string{"--old-pool", "default-ipv4-ippool", "--new-cidr", "10.20.0.0/16", "--cluster-cidr", "10.20.0.0/16", "--service-cidr", "10.233.0.0/18"}

	code, out, errOut := exec(t, conn, append([]string{"plan"}, base...)...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "New pool: pool-10-20-0-0-16 10.20.0.0/16 (blockSize 24: 256 blocks of 256 addresses")
	assert.Contains(t, out, "rollout restart Deployment default/web (2 pod(s) in 10.233.64.0/18)")

	// An invalid new pool is bad input.
	code, _, errOut = exec(t, conn, "plan", "--old-pool", "default-ipv4-ippool", "--new-cidr", "10.233.0.0/16", "--service-cidr", "10.233.0.0/18")
	assert.Equal(t, 2, code)
	assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	assert.Contains(t, errOut, "overlaps the Service CIDR 10.233.0.0/18")

	// Saved plan, applied without --apply: printed, nothing changes.
	code, planYAML, errOut := exec(t, conn, append([]string{"plan", "-o", "yaml"}, base...)...)
	require.Equal(t, 0, code, errOut)
	planFile := filepath.Join(t.TempDir(), "plan.yaml")
	require.NoError(t, os.WriteFile(planFile, []byte(planYAML), 0o600))
	code, out, _ = exec(t, conn, "apply", "--plan", planFile)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "Not applied: pass --apply")
	_, err := cl.Pools.Get(ctx, "pool-10-20-0-0-16")
	assert.ErrorIs(t, err, calico.ErrPoolNotFound)

	// Server dry run: nothing changes either.
	code, out, errOut = exec(t, conn, "apply", "--plan", planFile, "--dry-run=server")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "(dry run server) rollout restart Deployment default/web")
	assert.Contains(t, out, "Result: dry run (server) finished; nothing changed")
	_, err = cl.Pools.Get(ctx, "pool-10-20-0-0-16")
	assert.ErrorIs(t, err, calico.ErrPoolNotFound)

	// Verify before: not clear, exit 1.
	code, out, _ = exec(t, conn, "verify", "--old-pool", "default-ipv4-ippool")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "NOT CLEAR")

	journal := filepath.Join(t.TempDir(), "journal")
	code, out, errOut = exec(t, conn, "apply", "--plan", planFile, "--apply", "--journal", journal, "-o", "json")
	require.Equal(t, 0, code, errOut)
	var res calico.ApplyResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	assert.True(t, res.Done)
	assert.True(t, res.OldPoolDeleted)
	assert.Contains(t, errOut, "[move-pods] rollout restart Deployment default/web")

	code, out, errOut = exec(t, conn, "verify", "--old-pool", "default-ipv4-ippool", "--old-cidr", "10.233.64.0/18", "--new-name", "pool-10-20-0-0-16")
	require.Equal(t, 0, code, errOut+out)
	assert.Contains(t, out, "CLEAR: nothing left in 10.233.64.0/18")

	code, out, errOut = exec(t, conn, "blocks", "--old-cidr", "10.233.64.0/18")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "1 block(s) in 10.233.64.0/18, 0 address(es) allocated")
	assert.Contains(t, out, "affinity 10.233.64.0/24 -> node-1 (confirmed)")

	code, out, errOut = exec(t, conn, "capacity", "--pool", "pool-10-20-0-0-16", "-o", "yaml")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "blocks: 256\n")

	// Applying the finished plan again is a no-op.
	code, out, errOut = exec(t, conn, "apply", "--plan", planFile, "--apply", "--journal", journal)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "Result: done")

	// So is rerunning the same command without a plan file, although the old
	// pool it names is gone (a rerun after a kill just past the delete).
	code, out, errOut = exec(t, conn, append([]string{"apply", "--apply", "--journal", journal}, base...)...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "Nothing to do: pool default-ipv4-ippool is gone and pool pool-10-20-0-0-16 (10.20.0.0/16) is in place")
	// But a pool that was never swapped in is still an error: bad input
	// naming the pool that does not exist.
	code, _, errOut = exec(t, conn, "apply", "--apply", "--journal", journal, "--old-pool", "default-ipv4-ippool", "--new-cidr", "10.30.0.0/16", "--cluster-cidr", "10.30.0.0/16")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `--old-pool "default-ipv4-ippool": no such IPPool`)
}

func TestApplyOperatorExitsThree(t *testing.T) {
	conn, cl := fakeCluster(t)
	dyn := cl.Dynamic
	_, err := dyn.Resource(calico.InstallationsV1).Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "operator.tigera.io/v1", "kind": "Installation", "metadata": map[string]any{"name": "default"},
		"spec": map[string]any{"calicoNetwork": map[string]any{"ipPools": []any{map[string]any{"name": "default-ipv4-ippool", "cidr": "10.233.64.0/18"}}}},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	code, _, errOut := exec(t, conn, "apply", "--old-pool", "default-ipv4-ippool", "--new-cidr", "10.20.0.0/16", "--apply", "--journal", t.TempDir())
	assert.Equal(t, 3, code)
	assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	assert.Contains(t, errOut, "spec.calicoNetwork.ipPools[0].disableNewAllocations")
}
