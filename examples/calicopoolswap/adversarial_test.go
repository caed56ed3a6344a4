package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
	"github.com/cidrshift/cidrshift/internal/cli/clitest"
)

// advCluster is fakeCluster with a count of every write a swap could make:
// IPPool create/update/delete, workload patches and evictions.
func advCluster(t *testing.T) (connectFunc, *atomic.Int64) {
	t.Helper()
	two := int32(2)
	l := map[string]string{"app": "web"}
	kube, _ := calicotest.NewKube(&appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}},
	})
	accesstest.Authorize(kube)
	dyn, _ := calicotest.NewDynamic(
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": "default-ipv4-ippool"},
			"spec": map[string]any{"cidr": "10.233.64.0/18", "blockSize": int64(24), "ipipMode": "Always", "natOutgoing": true},
		}},
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": "other"},
			"spec": map[string]any{"cidr": "10.30.0.0/16", "blockSize": int64(26), "disabled": true},
		}})
	var writes atomic.Int64
	count := func(a k8stesting.Action) (bool, runtime.Object, error) {
		// Status is the simulated controllers' (calicotest.Loop runs in the
		// background); a swap never writes it.
		if a.GetSubresource() != "status" {
			writes.Add(1)
		}
		return false, nil, nil
	}
	for _, verb := range []string{"create", "update", "patch", "delete"} {
		dyn.PrependReactor(verb, "ippools", count)
		kube.PrependReactor(verb, "deployments", count)
	}
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			writes.Add(1)
		}
		return false, nil, nil
	})
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
	return func(context.Context, string, string) (calico.Cluster, error) { return cl, nil }, &writes
}

// advPlanBase are the flags of the plan every plan-file case edits.
var advPlanBase = []string{"--old-pool", "default-ipv4-ippool", "--new-cidr", "10.20.0.0/16", "--cluster-cidr", "10.20.0.0/16", "--service-cidr", "10.233.0.0/18"}

// editPlan returns a plan file: the valid plan of advPlanBase, changed by edit.
func editPlan(t *testing.T, planYAML string, edit func(p map[string]any)) string {
	t.Helper()
	var p map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(planYAML), &p))
	edit(p)
	data, err := yaml.Marshal(p)
	require.NoError(t, err)
	f := filepath.Join(t.TempDir(), "plan.yaml")
	require.NoError(t, os.WriteFile(f, data, 0o600))
	return f
}

func sub(p map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		p = p[k].(map[string]any)
	}
	return p
}

// TestAdversarialOffline: hostile input, each refused with its exit code and
// one line naming the field and the value, and nothing written.
func TestAdversarialOffline(t *testing.T) {
	conn, writes := advCluster(t)
	code, planYAML, errOut := exec(t, conn, append([]string{"plan", "-o", "yaml"}, advPlanBase...)...)
	require.Equal(t, 0, code, errOut)
	writeFile := func(data string) string {
		f := filepath.Join(t.TempDir(), "plan.yaml")
		require.NoError(t, os.WriteFile(f, []byte(data), 0o600))
		return f
	}
	garbageKubeconfig := writeFile("this: is: not: a kubeconfig\n\t[")
	apply := func(f string) []string { return []string{"apply", "--plan", f, "--apply", "--journal", t.TempDir()} }

	cases := []struct {
		name string
		args func() []string
		code int
		msg  []string
		// offline cases must not connect at all
		offline bool
	}{
		{name: "stray positional argument", args: func() []string { return append([]string{"plan", "extra"}, advPlanBase...) }, code: 2, msg: []string{`unexpected argument "extra"`}, offline: true},
		{name: "--plan with --old-pool", args: func() []string {
			return []string{"apply", "--plan", writeFile(planYAML), "--old-pool", "x", "--apply", "--journal", t.TempDir()}
		}, code: 2, msg: []string{"--plan", "--old-pool"}, offline: true},
		{name: "--plan with --new-cidr", args: func() []string {
			return []string{"apply", "--plan", writeFile(planYAML), "--new-cidr", "10.50.0.0/16"}
		}, code: 2, msg: []string{"--plan", "--new-cidr"}, offline: true},
		{name: "--plan with --move", args: func() []string {
			return []string{"apply", "--plan", writeFile(planYAML), "--move", "evict"}
		}, code: 2, msg: []string{"--plan", "--move"}, offline: true},
		{name: "plan file not YAML", args: func() []string { return apply(writeFile("{{{ not yaml")) }, code: 2, msg: []string{"--plan", "invalid plan"}, offline: true},
		{name: "plan file truncated", args: func() []string { return apply(writeFile(planYAML[:len(planYAML)/3])) }, code: 2, msg: []string{"--plan", "invalid plan"}, offline: true},
		{name: "plan file with an unknown field", args: func() []string {
			return apply(editPlan(t, planYAML, func(p map[string]any) { p["newPoolCIDRs"] = "10.99.0.0/16" }))
		}, code: 2, msg: []string{"invalid plan", "newPoolCIDRs"}, offline: true},
		{name: "plan newCIDR disagrees with spec.cidr", args: func() []string {
			return apply(editPlan(t, planYAML, func(p map[string]any) { p["newCIDR"] = "10.21.0.0/16" }))
		}, code: 2, msg: []string{"newCIDR", "10.21.0.0/16", "10.20.0.0/16"}, offline: true},
		{name: "plan spec.cidr disagrees with newCIDR", args: func() []string {
			return apply(editPlan(t, planYAML, func(p map[string]any) { sub(p, "newPool", "spec")["cidr"] = "10.233.0.0/16" }))
		}, code: 2, msg: []string{"newCIDR", "10.233.0.0/16"}, offline: true},
		{name: "plan new pool overlaps the Service CIDR", args: func() []string {
			return apply(editPlan(t, planYAML, func(p map[string]any) {
				sub(p, "newPool", "spec")["cidr"] = "10.233.0.0/20"
				p["newCIDR"] = "10.233.0.0/20"
				p["clusterCIDRs"] = []any{"10.233.0.0/16"}
			}))
		}, code: 2, msg: []string{"invalid plan", "10.233.0.0/20", "Service CIDR 10.233.0.0/18"}, offline: true},
		{name: "plan new pool outside its cluster CIDR", args: func() []string {
			return apply(editPlan(t, planYAML, func(p map[string]any) {
				sub(p, "newPool", "spec")["cidr"] = "10.40.0.0/16"
				p["newCIDR"] = "10.40.0.0/16"
			}))
		}, code: 2, msg: []string{"invalid plan", "10.40.0.0/16", "outside the cluster CIDR 10.20.0.0/16"}, offline: true},
		{name: "plan new pool overlaps the old pool", args: func() []string {
			return apply(editPlan(t, planYAML, func(p map[string]any) {
				sub(p, "newPool", "spec")["cidr"] = "10.233.0.0/16"
				p["newCIDR"] = "10.233.0.0/16"
				p["clusterCIDRs"] = []any{"10.233.0.0/16"}
				p["serviceCIDRs"] = []any{"10.96.0.0/12"}
			}))
		}, code: 2, msg: []string{"invalid plan", "10.233.0.0/16", "overlaps IPPool default-ipv4-ippool"}, offline: true},
		{name: "plan blockSize out of range", args: func() []string {
			return apply(editPlan(t, planYAML, func(p map[string]any) { sub(p, "newPool", "spec")["blockSize"] = 40 }))
		}, code: 2, msg: []string{"newPool.spec.blockSize", `"40"`}, offline: true},
		{name: "plan oldCIDR disagrees with the old pool", args: func() []string {
			return apply(editPlan(t, planYAML, func(p map[string]any) { p["oldCIDR"] = "10.233.64.0/24" }))
		}, code: 2, msg: []string{"oldCIDR", "10.233.64.0/24", "10.233.64.0/18"}, offline: true},
		{name: "plan new pool disabled", args: func() []string {
			return apply(editPlan(t, planYAML, func(p map[string]any) { sub(p, "newPool", "spec")["disabled"] = true }))
		}, code: 2, msg: []string{"newPool.spec.disabled", "true"}, offline: true},
		{name: "plan new pool named as the old one", args: func() []string {
			return apply(editPlan(t, planYAML, func(p map[string]any) { sub(p, "newPool")["name"] = "default-ipv4-ippool" }))
		}, code: 2, msg: []string{"newPool.name", "default-ipv4-ippool"}, offline: true},
		{name: "plan move method unknown", args: func() []string {
			return apply(editPlan(t, planYAML, func(p map[string]any) { p["move"] = "delete" }))
		}, code: 2, msg: []string{"move", `"delete"`}, offline: true},
		{name: "plan of another kind", args: func() []string {
			return apply(editPlan(t, planYAML, func(p map[string]any) { p["kind"] = "NodeCIDRPlan" }))
		}, code: 2, msg: []string{"kind", "NodeCIDRPlan"}, offline: true},
		{name: "plan without the old pool's UID", args: func() []string {
			return apply(editPlan(t, planYAML, func(p map[string]any) { delete(sub(p, "oldPool"), "uid") }))
		}, code: 2, msg: []string{"oldPool.uid"}, offline: true},
		{name: "plan with a negative block size flag", args: func() []string {
			return []string{"plan", "--old-pool", "default-ipv4-ippool", "--new-cidr", "10.20.0.0/16", "--block-size", "-1"}
		}, code: 2, msg: []string{"--block-size", "-1"}, offline: true},
		{name: "garbage kubeconfig", args: func() []string {
			return append([]string{"plan", "--kubeconfig", garbageKubeconfig}, advPlanBase...)
		}, code: 2, msg: []string{"kubeconfig"}},
		{name: "--old-pool that does not exist", args: func() []string {
			return []string{"apply", "--old-pool", "nope", "--new-cidr", "10.20.0.0/16", "--cluster-cidr", "10.20.0.0/16", "--apply", "--journal", t.TempDir()}
		}, code: 2, msg: []string{"--old-pool", `"nope"`}},
		{name: "--new-cidr overlapping the Service CIDR", args: func() []string {
			return []string{"apply", "--old-pool", "default-ipv4-ippool", "--new-cidr", "10.233.0.0/20", "--service-cidr", "10.233.0.0/18", "--apply", "--journal", t.TempDir()}
		}, code: 2, msg: []string{"10.233.0.0/20", "Service CIDR 10.233.0.0/18"}},
		{name: "--new-cidr outside --cluster-cidr", args: func() []string {
			return []string{"apply", "--old-pool", "default-ipv4-ippool", "--new-cidr", "10.20.0.0/16", "--cluster-cidr", "10.21.0.0/16", "--apply", "--journal", t.TempDir()}
		}, code: 2, msg: []string{"10.20.0.0/16", "outside the cluster CIDR 10.21.0.0/16"}},
		{name: "--new-cidr overlapping another pool", args: func() []string {
			return []string{"apply", "--old-pool", "default-ipv4-ippool", "--new-cidr", "10.30.0.0/20", "--apply", "--journal", t.TempDir()}
		}, code: 2, msg: []string{"10.30.0.0/20", "overlaps IPPool other"}},
		{name: "--new-name naming another pool", args: func() []string {
			return []string{"apply", "--old-pool", "default-ipv4-ippool", "--new-cidr", "10.20.0.0/16", "--new-name", "other", "--apply", "--journal", t.TempDir()}
		}, code: 2, msg: []string{"metadata.name", `"other"`}},
		{name: "--new-name invalid", args: func() []string {
			return []string{"apply", "--old-pool", "default-ipv4-ippool", "--new-cidr", "10.20.0.0/16", "--new-name", "Bad_Name", "--apply", "--journal", t.TempDir()}
		}, code: 2, msg: []string{"metadata.name", `"Bad_Name"`}},
		{name: "--new-cidr of the other family", args: func() []string {
			return []string{"apply", "--old-pool", "default-ipv4-ippool", "--new-cidr", "fd00:20::/64", "--apply", "--journal", t.TempDir()}
		}, code: 2, msg: []string{"fd00:20::/64", "family"}},
		{name: "verify --old-cidr not the pool's", args: func() []string {
			return []string{"verify", "--old-pool", "default-ipv4-ippool", "--old-cidr", "10.99.0.0/16"}
		}, code: 2, msg: []string{"10.99.0.0/16", "default-ipv4-ippool", "10.233.64.0/18"}},
		{name: "blocks --old-cidr not the pool's", args: func() []string {
			return []string{"blocks", "--old-pool", "default-ipv4-ippool", "--old-cidr", "10.99.0.0/16"}
		}, code: 2, msg: []string{"10.99.0.0/16", "default-ipv4-ippool", "10.233.64.0/18"}},
		{name: "verify an old pool that does not exist", args: func() []string {
			return []string{"verify", "--old-pool", "nope"}
		}, code: 2, msg: []string{"--old-pool", `"nope"`}},
		{name: "capacity of a pool that does not exist", args: func() []string {
			return []string{"capacity", "--pool", "nope"}
		}, code: 2, msg: []string{"--pool", `"nope"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := writes.Load()
			c := conn
			if tc.offline {
				c = nil
			}
			args := tc.args()
			var code int
			var out, errOut string
			if tc.name == "garbage kubeconfig" {
				code, out, errOut = execReal(t, args...)
			} else {
				code, out, errOut = exec(t, c, args...)
			}
			ctxt := strings.Join(args, " ") + "\nstdout:\n" + out + "\nstderr:\n" + errOut
			assert.Equal(t, tc.code, code, ctxt)
			lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
			if tc.name != "garbage kubeconfig" {
				assert.Len(t, lines, 1, "one line: %s", ctxt)
			}
			for _, m := range tc.msg {
				assert.Contains(t, lines[len(lines)-1], m, ctxt)
			}
			assert.Equal(t, before, writes.Load(), "nothing written: %s", ctxt)
			assert.NotRegexp(t, clitest.NextStep, out+errOut, ctxt)
		})
	}
}

// execReal runs the program with the real connect function.
func execReal(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb strings.Builder
	code := runWith(context.Background(), args, &out, &errb, connectWith(&errb))
	return code, out.String(), errb.String()
}

// An unreachable API server is exit 4 within seconds, with progress shown.
func TestAdversarialUnreachable(t *testing.T) {
	kc := clitest.UnreachableKubeconfig(t)
	start := time.Now()
	code, out, errOut := execReal(t, append([]string{"plan", "--kubeconfig", kc}, advPlanBase...)...)
	assert.Equal(t, 4, code, out+errOut)
	assert.Less(t, time.Since(start), 30*time.Second)
	assert.Contains(t, errOut, "waiting for the API server")
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	assert.Contains(t, lines[len(lines)-1], "unreachable")
}
