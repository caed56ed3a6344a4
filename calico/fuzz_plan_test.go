package calico_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
)

// fuzzCluster is a cluster with one pool (10.233.64.0/18, UID and
// resourceVersion fixed by calicotest's stamps) and no pods, and a count of
// every write a swap makes.
func fuzzCluster() (calico.Cluster, *atomic.Int64) {
	kube, _ := calicotest.NewKube()
	accesstest.Authorize(kube)
	dyn, _ := calicotest.NewDynamic(
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": "default-ipv4-ippool"},
			"spec": map[string]any{"cidr": "10.233.64.0/18", "blockSize": int64(26), "vxlanMode": "Always", "natOutgoing": true},
		}},
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": "other"},
			"spec": map[string]any{"cidr": "10.30.0.0/16", "disabled": true},
		}})
	var writes atomic.Int64
	count := func(k8stesting.Action) (bool, runtime.Object, error) {
		writes.Add(1)
		return false, nil, nil
	}
	for _, verb := range []string{"create", "update", "patch", "delete"} {
		dyn.PrependReactor(verb, "ippools", count)
		for _, r := range []string{"deployments", "statefulsets", "daemonsets", "nodes", "configmaps"} {
			kube.PrependReactor(verb, r, count)
		}
	}
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			writes.Add(1)
		}
		return false, nil, nil
	})
	pools := calico.NewCRDStore(dyn)
	return calico.Cluster{Kube: kube, Pools: pools, Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}, &writes
}

// fuzzSeedPlan is the plan Plan makes on fuzzCluster.
func fuzzSeedPlan(tb testing.TB) []byte {
	tb.Helper()
	cl, _ := fuzzCluster()
	p, err := calico.Plan(context.Background(), cl, calico.SwapRequest{
		OldPool: "default-ipv4-ippool", NewName: "new-pool", NewCIDR: "10.20.0.0/16",
		ClusterCIDR: "10.20.0.0/16", ServiceCIDR: "10.96.0.0/12", NodeNetwork: "192.168.0.0/24",
	})
	if err != nil {
		tb.Fatalf("seed plan: %v", err)
	}
	data, err := yaml.Marshal(p)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// FuzzPlanApply feeds random plan files to DecodePlan and Apply (against a
// fake cluster): a plan is either refused before any write, or valid and
// applied to the end. Never half-applied.
func FuzzPlanApply(f *testing.F) {
	seed := fuzzSeedPlan(f)
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add([]byte(`{"apiVersion":"cidrshift.io/v1alpha1","kind":"CalicoPoolSwapPlan","id":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		plan, err := calico.DecodePlan(data)
		if err != nil {
			if !errors.Is(err, calico.ErrInvalidPlan) {
				t.Fatalf("DecodePlan error does not wrap ErrInvalidPlan: %v", err)
			}
			return
		}
		cl, writes := fuzzCluster()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := calico.Apply(ctx, cl, plan, calico.ApplyOptions{
			JournalDir: t.TempDir(), PollInterval: time.Millisecond, DrainTimeout: time.Millisecond,
			RolloutTimeout: time.Second, PodGoneTimeout: time.Second, WritesPerSecond: 1000,
		})
		if err != nil {
			if n := writes.Load(); n > 0 {
				t.Fatalf("plan refused after %d write(s): half-applied: %v\nplan:\n%s", n, err, data)
			}
			return
		}
		if !res.Done {
			t.Fatalf("Apply returned no error but is not done (phase %s)", res.Phase)
		}
		np, err := cl.Pools.Get(ctx, plan.NewPool.Name)
		if err != nil {
			t.Fatalf("applied plan, but new pool %q: %v", plan.NewPool.Name, err)
		}
		if np.Spec.CIDR != plan.NewCIDR.String() {
			t.Fatalf("new pool %q has cidr %s, plan says newCIDR %s", np.Name, np.Spec.CIDR, plan.NewCIDR)
		}
		if _, err := cl.Pools.Get(ctx, plan.OldPool.Name); !errors.Is(err, calico.ErrPoolNotFound) {
			t.Fatalf("applied plan, but old pool %q is still there (%v)", plan.OldPool.Name, err)
		}
	})
}

// TestSeedPlanAppliesFully keeps the fuzz target honest: the seed plan is
// valid and applied to the end, and each edit of it is refused with no write.
func TestSeedPlanAppliesFully(t *testing.T) {
	seed := fuzzSeedPlan(t)
	plan, err := calico.DecodePlan(seed)
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	cl, writes := fuzzCluster()
	res, err := calico.Apply(context.Background(), cl, plan, calico.ApplyOptions{JournalDir: t.TempDir(), PollInterval: time.Millisecond, DrainTimeout: time.Millisecond, WritesPerSecond: 1000})
	if err != nil || !res.Done || writes.Load() == 0 {
		t.Fatalf("seed plan: done %v, %d writes, err %v", res != nil && res.Done, writes.Load(), err)
	}
}
