package calico_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
)

func apis() []calico.API { return []calico.API{calico.APICRDV1, calico.APIProjectCalicoV3} }

// podsIn returns "ns/name" of the live, non-hostNetwork pods with an address in prefix.
func (e *env) podsIn(prefix string) []string {
	e.t.Helper()
	pods, err := e.kube.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	require.NoError(e.t, err)
	var out []string
	for _, p := range pods.Items {
		if p.Spec.HostNetwork {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			if contains(prefix, ip.IP) {
				out = append(out, p.Namespace+"/"+p.Name)
				break
			}
		}
	}
	return out
}

func TestSwapRolloutBothAPIs(t *testing.T) {
	for _, api := range apis() {
		t.Run(string(api), func(t *testing.T) {
			e := newEnv(t, envOptions{api: api})
			ctx := context.Background()
			req := request()
			req.AllowDeleteBarePods = true
			plan, err := calico.Plan(ctx, e.cl, req)
			require.NoError(t, err)
			assert.Equal(t, api, plan.API)
			assert.Equal(t, calico.MoveRollout, plan.Move)
			// The new pool copies encapsulation, NAT, node selector, allowed uses and block size.
			assert.Equal(t, calico.EncapAlways, plan.NewPool.Spec.IPIPMode)
			assert.True(t, plan.NewPool.Spec.NATOutgoing)
			assert.Equal(t, "all()", plan.NewPool.Spec.NodeSelector)
			assert.Equal(t, 24, plan.NewPool.Spec.BlockSize)
			assert.Equal(t, []calico.AllowedUse{calico.UseWorkload, calico.UseTunnel}, plan.NewPool.Spec.AllowedUses)
			// DNS first; the OnDelete StatefulSet and the bare pod are evicted.
			require.NotEmpty(t, plan.Workloads)
			assert.Equal(t, "Deployment kube-system/coredns", plan.Workloads[0].Workload.String())
			assert.True(t, plan.Workloads[0].DNS)
			methods := map[string]calico.MoveMethod{}
			for _, w := range plan.Workloads {
				methods[w.Workload.String()] = w.Method
			}
			assert.Equal(t, map[string]calico.MoveMethod{
				"Deployment kube-system/coredns": calico.MoveRollout,
				"DaemonSet kube-system/agent":    calico.MoveRollout,
				"Deployment default/web":         calico.MoveRollout,
				"StatefulSet default/db":         calico.MoveRollout,
				"StatefulSet default/legacy":     calico.MoveEvict,
				"Pod default/debug":              calico.MoveDelete,
			}, methods)
			assert.Equal(t, 1, plan.HostNetworkPods)
			assert.Empty(t, plan.Blocked)
			// 2^(24-16) blocks of 256 addresses.
			assert.Equal(t, "256", plan.Capacity.Blocks.String())

			// The plan survives a YAML round trip.
			data, err := yaml.Marshal(plan)
			require.NoError(t, err)
			var back calico.SwapPlan
			require.NoError(t, yaml.Unmarshal(data, &back))
			assert.Equal(t, plan.ID, back.ID)
			assert.Equal(t, plan.OldPool.ResourceVersion, back.OldPool.ResourceVersion)

			opts := fastOptions(t.TempDir())
			opts.OnEvent = e.onEvent
			res, err := calico.Apply(ctx, e.cl, &back, opts)
			require.NoError(t, err, "events: %v", e.events)
			assert.True(t, res.Done)
			assert.True(t, res.CreatedPool)
			assert.True(t, res.DisabledPool)
			assert.True(t, res.OldPoolDeleted)
			assert.Equal(t, calico.PhaseDone, res.Phase)
			require.NotNil(t, res.Verify)
			assert.True(t, res.Verify.Clear(), res.Verify.Summary())
			assert.True(t, res.Verify.Blocks.Available)
			assert.NotEmpty(t, res.Verify.Blocks.Blocks, "the old blocks stay, empty")
			assert.Zero(t, res.Verify.Blocks.Allocated)

			// The first restart is cluster DNS, and it finished before any other restart.
			restarts := e.eventsOf(calico.EventRestart)
			require.NotEmpty(t, restarts)
			assert.Equal(t, "Deployment kube-system/coredns", restarts[0].Object)
			var dnsDone, otherRestart int
			for i, ev := range e.events {
				if ev.Type == calico.EventRolloutDone && ev.Object == "Deployment kube-system/coredns" && dnsDone == 0 {
					dnsDone = i
				}
				if ev.Type == calico.EventRestart && ev.Object != "Deployment kube-system/coredns" && otherRestart == 0 {
					otherRestart = i
				}
			}
			assert.Less(t, dnsDone, otherRestart, "DNS rollout must finish before other workloads restart")

			e.waitSettled(newCIDR)
			assert.Empty(t, e.podsIn(oldCIDR))
			_, err = e.pools.Get(ctx, oldPoolName)
			assert.ErrorIs(t, err, calico.ErrPoolNotFound)
			np, err := e.pools.Get(ctx, newPoolName)
			require.NoError(t, err)
			assert.False(t, np.AllocationStopped())

			// The bare pod was deleted (consented), nothing recreated it.
			_, err = e.kube.CoreV1().Pods("default").Get(ctx, "debug", metav1.GetOptions{})
			assert.True(t, isNotFound(err))

			v, err := calico.Verify(ctx, e.cl, plan.Target())
			require.NoError(t, err)
			assert.True(t, v.Clear(), v.Summary())
			assert.False(t, v.OldPoolExists)

			// Idempotent: a second Apply does nothing.
			before := len(writeActions(e))
			res2, err := calico.Apply(ctx, e.cl, plan, fastOptions(opts.JournalDir))
			require.NoError(t, err)
			assert.True(t, res2.Done)
			assert.Equal(t, calico.PhaseDone, res2.Phase, "a finished swap reports the done phase")
			assert.Equal(t, before, len(writeActions(e)), "a finished swap writes nothing")
			assert.Empty(t, e.simErrors())
		})
	}
}

func isNotFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), "not found")
}

// writeActions returns the writes our code (not the simulation) could have
// made: pool, workload patch and eviction actions.
func writeActions(e *env) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range e.kube.Actions() {
		switch {
		case a.GetVerb() == "patch":
			out = append(out, a)
		case a.GetVerb() == "create" && a.GetSubresource() == "eviction":
			out = append(out, a)
		}
	}
	for _, a := range e.dyn.Actions() {
		if a.GetResource().Resource == "ippools" && a.GetVerb() != "get" && a.GetVerb() != "list" {
			out = append(out, a)
		}
	}
	return out
}

func TestSwapBarePodBlocksDeletion(t *testing.T) {
	e := newEnv(t, envOptions{api: calico.APICRDV1})
	ctx := context.Background()
	plan, err := calico.Plan(ctx, e.cl, request())
	require.NoError(t, err)
	require.Len(t, plan.Blocked, 1)
	assert.Equal(t, "default/debug", plan.Blocked[0].Pod.String())
	assert.Contains(t, plan.Blocked[0].Reason, "bare pod")

	dir := t.TempDir()
	opts := fastOptions(dir)
	opts.OnEvent = e.onEvent
	res, err := calico.Apply(ctx, e.cl, plan, opts)
	require.Error(t, err)
	assert.ErrorIs(t, err, calico.ErrLeftovers)
	// The pod it cannot move is reported once, before anything moves, and
	// with a live pod left there is no waiting for leftovers to drain.
	blocked := e.eventsOf(calico.EventBlocked)
	require.Len(t, blocked, 1)
	assert.Equal(t, "Pod default/debug", blocked[0].Object)
	for _, ev := range e.events {
		if ev.Type == calico.EventBlocked {
			break
		}
		assert.NotEqual(t, calico.EventRestart, ev.Type, "a restart before the blocked pod was reported")
		assert.NotEqual(t, calico.EventEvict, ev.Type, "an eviction before the blocked pod was reported")
	}
	assert.Empty(t, e.eventsOf(calico.EventLeftoversWait), "a live pod is left: nothing to wait for")
	var le *calico.LeftoversError
	require.ErrorAs(t, err, &le)
	require.Len(t, le.Verify.PodsLeft, 1)
	assert.Equal(t, "default/debug", le.Verify.PodsLeft[0].String())
	assert.Contains(t, err.Error(), "default/debug")
	assert.False(t, res.Done)
	assert.Equal(t, calico.PhaseDeleteOldPool, res.Phase)
	// The old pool stays (disabled); the bare pod was not touched.
	old, err := e.pools.Get(ctx, oldPoolName)
	require.NoError(t, err)
	assert.True(t, old.Spec.Disabled)
	assert.Equal(t, []string{"default/debug"}, e.podsIn(oldCIDR))
	for _, a := range e.kube.Actions() {
		if a.GetResource().Resource == "pods" && (a.GetVerb() == "delete" || a.GetSubresource() == "eviction") {
			if n, ok := a.(k8stesting.DeleteAction); ok {
				assert.NotEqual(t, "debug", n.GetName())
			}
			if c, ok := a.(k8stesting.CreateAction); ok {
				assert.NotEqual(t, "debug", c.GetObject().(*policyv1.Eviction).Name)
			}
		}
	}

	// Resuming from the journal (stopped at delete-old-pool) looks again
	// and still refuses.
	res, err = calico.Apply(ctx, e.cl, plan, fastOptions(dir))
	assert.ErrorIs(t, err, calico.ErrLeftovers)
	assert.True(t, res.Resumed)
	_, err = e.pools.Get(ctx, oldPoolName)
	require.NoError(t, err)

	// Forced: the pool goes although the bare pod keeps its address.
	opts = fastOptions(dir)
	opts.Force = true
	opts.OnEvent = e.onEvent
	res, err = calico.Apply(ctx, e.cl, plan, opts)
	require.NoError(t, err)
	assert.True(t, res.OldPoolDeleted)
	deleted := e.eventsOf(calico.EventDeletePool)
	require.Len(t, deleted, 1)
	assert.Contains(t, deleted[0].Message, `delete IPPool "default-ipv4-ippool" (10.233.64.0/18) despite leftovers (forced): 1 pod(s) still have addresses in 10.233.64.0/18: default/debug`)
	assert.Equal(t, []string{"default/debug"}, e.podsIn(oldCIDR))
}

func pdb(name, app string, minAvailable int) *policyv1.PodDisruptionBudget {
	ma := intstr.FromInt32(int32(minAvailable))
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &ma, Selector: sel(app)},
	}
}

// A PodDisruptionBudget that forbids every eviction makes the swap wait and
// report the budget; once relaxed, the swap continues. No web pod goes while
// the budget forbids it.
func TestSwapEvictWaitsForPDB(t *testing.T) {
	objs := append(workloadObjects(), pdb("web-pdb", "web", 3))
	e := newEnv(t, envOptions{api: calico.APIProjectCalicoV3, objs: objs})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := request()
	req.Move = calico.MoveEvict
	req.AllowDeleteBarePods = true
	plan, err := calico.Plan(ctx, e.cl, req)
	require.NoError(t, err)
	for _, w := range plan.Workloads {
		if w.Workload.Kind != calico.KindBare {
			assert.Equal(t, calico.MoveEvict, w.Method, w.Workload.String())
		}
	}
	webPods := func() []string {
		var out []string
		for _, p := range e.podsIn(oldCIDR) {
			if strings.HasPrefix(p, "default/web-") {
				out = append(out, p)
			}
		}
		return out
	}
	original := webPods()
	require.Len(t, original, 3)

	blocked := make(chan calico.Event, 1)
	opts := fastOptions(t.TempDir())
	opts.OnEvent = func(ev calico.Event) {
		e.onEvent(ev)
		if ev.Type == calico.EventEvictBlocked {
			select {
			case blocked <- ev:
			default:
			}
		}
	}
	type result struct {
		res *calico.ApplyResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := calico.Apply(ctx, e.cl, plan, opts)
		done <- result{res, err}
	}()

	var ev calico.Event
	select {
	case ev = <-blocked:
	case r := <-done:
		t.Fatalf("Apply returned before waiting for the budget: %v", r.err)
	case <-ctx.Done():
		t.Fatal("no evict-blocked event")
	}
	require.NotNil(t, ev.PDB)
	assert.Equal(t, "web-pdb", ev.PDB.Name)
	assert.Equal(t, int32(0), ev.PDB.DisruptionsAllowed)
	assert.Equal(t, int32(3), ev.PDB.DesiredHealthy)
	assert.Contains(t, ev.Message, "PodDisruptionBudget default/web-pdb allows 0 disruption(s)")
	// Let it retry a few times: still nothing evicted.
	require.Eventually(t, func() bool { return len(e.eventsOf(calico.EventEvictBlocked)) >= 3 }, 30*time.Second, time.Millisecond)
	assert.ElementsMatch(t, original, webPods(), "no web pod may go while the budget forbids it")

	// Relax the budget: one disruption at a time.
	b, err := e.kube.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web-pdb", metav1.GetOptions{})
	require.NoError(t, err)
	two := intstr.FromInt32(2)
	b.Spec.MinAvailable = &two
	_, err = e.kube.PolicyV1().PodDisruptionBudgets("default").Update(ctx, b, metav1.UpdateOptions{})
	require.NoError(t, err)

	r := <-done
	require.NoError(t, r.err)
	assert.True(t, r.res.Done)
	assert.Len(t, r.res.Restarted, 0)
	assert.GreaterOrEqual(t, len(r.res.Evicted), 3)
	e.waitSettled(newCIDR)
	assert.Empty(t, e.podsIn(oldCIDR))
	// Our code deleted no pod directly: every web pod left through an eviction.
	evicted := map[string]bool{}
	for _, a := range e.kube.Actions() {
		if c, ok := a.(k8stesting.CreateActionImpl); ok && a.GetSubresource() == "eviction" {
			evicted["default/"+c.GetObject().(*policyv1.Eviction).Name] = true
		}
	}
	for _, p := range original {
		assert.True(t, evicted[p], "%s left without an eviction", p)
	}
}

// A run cancelled halfway (as by a crash) resumes from the journal: no
// workload is restarted twice, and the plan is not refused as stale although
// the old pool changed.
func TestSwapResumeAfterCancel(t *testing.T) {
	e := newEnv(t, envOptions{api: calico.APICRDV1})
	ctx := context.Background()
	req := request()
	req.AllowDeleteBarePods = true
	plan, err := calico.Plan(ctx, e.cl, req)
	require.NoError(t, err)
	dir := t.TempDir()

	cctx, cancel := context.WithCancel(ctx)
	opts := fastOptions(dir)
	opts.Concurrency = 1
	opts.OnEvent = func(ev calico.Event) {
		e.onEvent(ev)
		if ev.Type == calico.EventRestart && ev.Object == "Deployment default/web" {
			cancel() // "killed" right after restarting web, before its rollout finished
		}
	}
	res, err := calico.Apply(cctx, e.cl, plan, opts)
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, res.Done)
	assert.Equal(t, calico.PhaseMovePods, res.Phase)
	old, err := e.pools.Get(ctx, oldPoolName)
	require.NoError(t, err)
	assert.True(t, old.Spec.Disabled)
	assert.NotEqual(t, plan.OldPool.ResourceVersion, old.ResourceVersion)

	// Without the journal the changed pool makes the plan stale.
	_, err = calico.Apply(ctx, e.cl, plan, fastOptions(t.TempDir()))
	assert.ErrorIs(t, err, calico.ErrStalePlan)

	opts = fastOptions(dir)
	opts.OnEvent = e.onEvent
	res, err = calico.Apply(ctx, e.cl, plan, opts)
	require.NoError(t, err)
	assert.True(t, res.Resumed)
	assert.True(t, res.Done)
	assert.False(t, res.CreatedPool, "the pool was created by the first run")
	e.waitSettled(newCIDR)
	assert.Empty(t, e.podsIn(oldCIDR))

	// Every workload got exactly one restartedAt value across both runs.
	values := map[string]map[string]bool{}
	for _, a := range e.kube.Actions() {
		p, ok := a.(k8stesting.PatchAction)
		if !ok || a.GetSubresource() != "" {
			continue
		}
		key := a.GetResource().Resource + "/" + p.GetName()
		if values[key] == nil {
			values[key] = map[string]bool{}
		}
		values[key][string(p.GetPatch())] = true
	}
	require.NotEmpty(t, values)
	for k, v := range values {
		assert.Len(t, v, 1, "%s restarted with different values: %v", k, v)
	}
}

func TestSwapOperatorManagedPool(t *testing.T) {
	inst := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "operator.tigera.io/v1", "kind": "Installation",
		"metadata": map[string]any{"name": "default"},
		"spec": map[string]any{"calicoNetwork": map[string]any{"ipPools": []any{
			map[string]any{"name": oldPoolName, "cidr": oldCIDR, "encapsulation": "IPIP", "natOutgoing": "Enabled"},
		}}},
	}}
	e := newEnv(t, envOptions{api: calico.APICRDV1, dynObjs: []runtime.Object{inst}})
	ctx := context.Background()
	req := request()
	req.AllowDeleteBarePods = true
	plan, err := calico.Plan(ctx, e.cl, req)
	require.NoError(t, err)
	assert.True(t, plan.Operator.Installed)
	assert.True(t, plan.Operator.ManagesPool)
	require.NotNil(t, plan.OperatorChange)
	assert.Equal(t, "spec.calicoNetwork.ipPools[0].disableNewAllocations", plan.OperatorChange.Field)

	dir := t.TempDir()
	res, err := calico.Apply(ctx, e.cl, plan, fastOptions(dir))
	require.ErrorIs(t, err, calico.ErrWaitingForOperator)
	var oc *calico.OperatorChangeError
	require.ErrorAs(t, err, &oc)
	assert.Contains(t, err.Error(), "disableNewAllocations")
	require.NotNil(t, res.Waiting)
	assert.Contains(t, res.Waiting.Command, `"path":"/spec/calicoNetwork/ipPools/0/disableNewAllocations"`)
	old, err := e.pools.Get(ctx, oldPoolName)
	require.NoError(t, err)
	assert.False(t, old.Spec.Disabled, "Apply must not fight the operator")
	assert.True(t, res.CreatedPool)

	// With WaitForOperator, Apply polls; "the operator" disables the pool,
	// then removes it once asked.
	opts := fastOptions(dir)
	opts.WaitForOperator = true
	opts.OnEvent = e.onEvent
	// The operator runs on its own goroutine: it reports what went wrong
	// through a channel, and the test goroutine asserts it after Apply. When
	// it gives up it also stops Apply, which would otherwise wait for it.
	opCtx, stopOperator := context.WithCancel(ctx)
	defer stopOperator()
	applyCtx, stopApply := context.WithCancel(ctx)
	defer stopApply()
	operator := make(chan error, 1)
	go func() {
		err := func() error {
			if err := waitUntil(opCtx, "a wait-operator event", func() bool { return len(e.eventsOf(calico.EventWaitOperator)) > 0 }); err != nil {
				return err
			}
			p, err := e.pools.Get(ctx, oldPoolName)
			if err == nil {
				p.Spec.Disabled = true
				_, _ = e.pools.Update(ctx, p, calico.WriteOptions{})
			}
			if err := waitUntil(opCtx, "a wait-operator event asking to remove the old pool", func() bool {
				for _, ev := range e.eventsOf(calico.EventWaitOperator) {
					if strings.Contains(ev.Message, "remove") {
						return true
					}
				}
				return false
			}); err != nil {
				return err
			}
			_ = e.pools.Delete(ctx, oldPoolName, calico.DeleteOptions{})
			return nil
		}()
		if err != nil {
			stopApply()
		}
		operator <- err
	}()
	res, err = calico.Apply(applyCtx, e.cl, plan, opts)
	stopOperator()
	require.NoError(t, <-operator, "the operator goroutine")
	require.NoError(t, err)
	assert.True(t, res.Done)
	assert.True(t, res.OldPoolDeleted)
	assert.Empty(t, e.podsIn(oldCIDR))
}

func TestApplyRefusesStalePlan(t *testing.T) {
	e := newEnv(t, envOptions{api: calico.APIProjectCalicoV3})
	ctx := context.Background()
	plan, err := calico.Plan(ctx, e.cl, request())
	require.NoError(t, err)
	old, err := e.pools.Get(ctx, oldPoolName)
	require.NoError(t, err)
	old.Labels = map[string]string{"touched": "yes"}
	_, err = e.pools.Update(ctx, old, calico.WriteOptions{})
	require.NoError(t, err)
	_, err = calico.Apply(ctx, e.cl, plan, fastOptions(t.TempDir()))
	var se *calico.StalePlanError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "metadata.resourceVersion", se.Field)
	_, err = e.pools.Get(ctx, newPoolName)
	assert.ErrorIs(t, err, calico.ErrPoolNotFound, "nothing created for a stale plan")
}

func TestApplyRBACPreflight(t *testing.T) {
	e := newEnv(t, envOptions{api: calico.APICRDV1, deny: []accesstest.Rule{{Verb: "patch", Resource: "deployments"}, {Verb: "delete", Resource: "ippools"}}})
	ctx := context.Background()
	plan, err := calico.Plan(ctx, e.cl, request())
	require.NoError(t, err)
	_, err = calico.Apply(ctx, e.cl, plan, fastOptions(t.TempDir()))
	require.ErrorIs(t, err, access.ErrDenied)
	assert.Contains(t, err.Error(), "patch deployments.apps in namespace default")
	assert.Contains(t, err.Error(), "delete ippools.crd.projectcalico.org")
	_, err = e.pools.Get(ctx, newPoolName)
	assert.ErrorIs(t, err, calico.ErrPoolNotFound, "nothing changes before the preflight passes")
}

func TestApplyDryRun(t *testing.T) {
	for _, mode := range []calico.DryRun{calico.DryRunClient, calico.DryRunServer} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, envOptions{api: calico.APICRDV1})
			ctx := context.Background()
			req := request()
			req.AllowDeleteBarePods = true
			plan, err := calico.Plan(ctx, e.cl, req)
			require.NoError(t, err)
			e.kube.ClearActions()
			e.dyn.ClearActions()
			opts := fastOptions("")
			opts.DryRun = mode
			opts.OnEvent = e.onEvent
			res, err := calico.Apply(ctx, e.cl, plan, opts)
			require.NoError(t, err)
			assert.False(t, res.Done)
			assert.Equal(t, mode, res.DryRun)
			for _, a := range writeActions(e) {
				if mode == calico.DryRunClient {
					t.Errorf("client dry run sent %s %s", a.GetVerb(), a.GetResource().Resource)
					continue
				}
				assert.True(t, hasDryRun(a), "server dry run sent %s %s without dryRun", a.GetVerb(), a.GetResource().Resource)
			}
			if mode == calico.DryRunServer {
				assert.NotEmpty(t, writeActions(e))
			}
			_, err = e.pools.Get(ctx, newPoolName)
			assert.ErrorIs(t, err, calico.ErrPoolNotFound)
			old, err := e.pools.Get(ctx, oldPoolName)
			require.NoError(t, err)
			assert.False(t, old.Spec.Disabled)
			assert.Len(t, e.podsIn(oldCIDR), 11)
			assert.NotEmpty(t, e.eventsOf(calico.EventRestart))
			for _, ev := range e.eventsOf(calico.EventRestart) {
				assert.Equal(t, mode, ev.DryRun)
			}
		})
	}
}

func hasDryRun(a k8stesting.Action) bool {
	all := func(v []string) bool { return len(v) == 1 && v[0] == metav1.DryRunAll }
	switch x := a.(type) {
	case k8stesting.CreateActionImpl:
		if ev, ok := x.GetObject().(*policyv1.Eviction); ok {
			return ev.DeleteOptions != nil && all(ev.DeleteOptions.DryRun)
		}
		return all(x.CreateOptions.DryRun)
	case k8stesting.UpdateActionImpl:
		return all(x.UpdateOptions.DryRun)
	case k8stesting.PatchActionImpl:
		return all(x.PatchOptions.DryRun)
	case k8stesting.DeleteActionImpl:
		return all(x.DeleteOptions.DryRun)
	}
	return false
}

func TestPlanRejectsBadNewPool(t *testing.T) {
	e := newEnv(t, envOptions{api: calico.APICRDV1})
	ctx := context.Background()
	cases := []struct {
		name   string
		mutate func(*calico.SwapRequest)
		rule   calico.Rule
		text   string
	}{
		{"host bits", func(r *calico.SwapRequest) { r.NewCIDR = "10.233.64.1/16" }, calico.RuleCIDRSyntax, "the network is 10.233.0.0/16"},
		{"overlaps service", func(r *calico.SwapRequest) { r.NewCIDR = "10.233.0.0/16"; r.ClusterCIDR = "10.233.0.0/16" }, calico.RuleServiceOverlap, "Service CIDR 10.233.0.0/18"},
		{"overlaps old pool", func(r *calico.SwapRequest) {
			r.NewCIDR = "10.233.96.0/20"
			r.ClusterCIDR = "10.233.0.0/16"
			r.ServiceCIDR = ""
		}, calico.RulePoolOverlap, oldPoolName},
		{"outside cluster", func(r *calico.SwapRequest) { r.ClusterCIDR = "10.30.0.0/16" }, calico.RuleOutsideClusterCIDR, "outside the cluster CIDR 10.30.0.0/16"},
		{"node network", func(r *calico.SwapRequest) { r.NodeNetwork = "10.20.5.0/24" }, calico.RuleNodeNetworkOverlap, "10.20.5.0/24"},
		{"block size", func(r *calico.SwapRequest) { r.BlockSize = 33 }, calico.RuleBlockSizeRange, "between 20 and 32"},
		{"family", func(r *calico.SwapRequest) { r.NewCIDR = "fd00:20::/64"; r.ClusterCIDR = "" }, calico.RuleFamily, "keeps the family"},
		{"ipip and vxlan", func(r *calico.SwapRequest) { m := calico.EncapCrossSubnet; r.Overrides.VXLANMode = &m }, calico.RuleEncapExclusive, "cannot both be enabled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := request()
			c.mutate(&req)
			_, err := calico.Plan(ctx, e.cl, req)
			require.Error(t, err)
			assert.ErrorIs(t, err, calico.ErrInvalidPool)
			fes := calico.FieldErrors(err)
			var rules []calico.Rule
			for _, fe := range fes {
				rules = append(rules, fe.Rule)
			}
			assert.Contains(t, rules, c.rule)
			assert.Contains(t, err.Error(), c.text)
		})
	}
}

func TestVerifyReportsLeftoversAndLeaks(t *testing.T) {
	e := newEnv(t, envOptions{api: calico.APICRDV1})
	ctx := context.Background()
	v, err := calico.Verify(ctx, e.cl, calico.VerifyTarget{OldPool: oldPoolName})
	require.NoError(t, err)
	assert.False(t, v.Clear())
	assert.Equal(t, netip.MustParsePrefix(oldCIDR), v.OldCIDR)
	assert.Len(t, v.PodsLeft, 11)
	assert.Equal(t, 11, v.Blocks.Allocated)
	assert.Equal(t, 11, v.Blocks.PodAllocations)
	assert.Contains(t, v.Summary(), "IPPool \"default-ipv4-ippool\" is still enabled")
	assert.Contains(t, v.Summary(), "11 pod(s) still have addresses in 10.233.64.0/18")
	nodes := map[string]bool{}
	for _, a := range v.Blocks.Affinities {
		nodes[a.Node] = true
		assert.Equal(t, "confirmed", a.State)
	}
	assert.Equal(t, map[string]bool{"node-a": true, "node-b": true}, nodes)
	assert.Empty(t, v.Leaked)

	// Stop the simulation: a pod deleted now leaves its allocation behind.
	e.stop()
	require.NoError(t, e.kube.CoreV1().Pods("default").Delete(ctx, "debug", metav1.DeleteOptions{}))
	v, err = calico.Verify(ctx, e.cl, calico.VerifyTarget{OldPool: oldPoolName})
	require.NoError(t, err)
	require.Len(t, v.Leaked, 1)
	assert.Equal(t, "debug", v.Leaked[0].Pod)
	assert.Contains(t, v.Summary(), "1 of them for pods that no longer exist")
}

func TestApplyNeedsJournal(t *testing.T) {
	e := newEnv(t, envOptions{api: calico.APICRDV1})
	plan, err := calico.Plan(context.Background(), e.cl, request())
	require.NoError(t, err)
	_, err = calico.Apply(context.Background(), e.cl, plan, calico.ApplyOptions{})
	assert.True(t, errors.Is(err, calico.ErrNoJournal))
}

// waitUntil polls cond every millisecond for up to 30 seconds, off the test
// goroutine: it returns an error (for the test goroutine to assert) instead of
// failing the test itself.
func waitUntil(ctx context.Context, what string, cond func() bool) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting for %s: %w", what, ctx.Err())
		case <-deadline:
			return fmt.Errorf("no %s within 30s", what)
		case <-tick.C:
		}
	}
	return nil
}
