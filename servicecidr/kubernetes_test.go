package servicecidr_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// findingsFor returns the findings about one object.
func findingsFor(v *servicecidr.Verification, object string) []servicecidr.VerifyFinding {
	var out []servicecidr.VerifyFinding
	for _, f := range v.Findings {
		if f.Object == object {
			out = append(out, f)
		}
	}
	return out
}

// killedAfterKubernetesDelete runs story 3 with every kube-apiserver already
// on the new range but holding back the recreation of default/kubernetes,
// and kills the run right after it deleted default/kubernetes. It returns
// the cluster (revived), the plan and the journal directory.
func killedAfterKubernetesDelete(t *testing.T) (*servicecidrtest.Cluster, *servicecidr.Plan, string) {
	t.Helper()
	ctx := context.Background()
	o := story3Options("v1")
	o.APIServerRange = "172.24.0.0/15" // every kube-apiserver already runs with the new range
	cl := servicecidrtest.MustNew(o)
	cl.HoldKubernetesService(true) // ... but it does not recreate default/kubernetes yet
	c := connect(t, cl)
	p, err := c.Plan(ctx, story3PlanOptions())
	require.NoError(t, err)
	require.NotNil(t, p.Kubernetes)
	dir := t.TempDir()
	ao := fastApply(dir)
	ao.DeleteKubernetesService = true
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ao.Progress = func(e servicecidr.Event) {
		if e.Kind == servicecidr.EventKubernetesDeleted {
			cl.KillAfter(0, cancel) // SIGKILL right after the delete was answered
		}
	}
	_, err = c.Apply(runCtx, p, ao)
	require.ErrorIs(t, err, servicecidrtest.ErrKilled)
	cl.Revive()
	return cl, p, dir
}

// TestKilledRightAfterDeletingDefaultKubernetes: a run is killed right after
// it deleted default/kubernetes, and kube-apiserver is slow to recreate it.
// The journal keeps what was deleted: Recover reports it absent, a fresh
// plan made with the journal still knows it (old and new address), Verify
// says it is missing and where kube-apiserver will put it, and applying the
// fresh plan once kube-apiserver catches up waits for it and records it.
func TestKilledRightAfterDeletingDefaultKubernetes(t *testing.T) {
	ctx := context.Background()
	cl, p, dir := killedAfterKubernetesDelete(t)
	_, ok := cl.Service("default", "kubernetes")
	require.False(t, ok, "the killed run left default/kubernetes deleted")

	// A new process: Recover cannot create default/kubernetes (kube-apiserver
	// owns it) but says it is absent and what it waits for.
	c2 := connect(t, cl)
	ro := fastApply(dir)
	ro.ReadyTimeout = 20 * time.Millisecond
	res, err := c2.Recover(ctx, ro)
	require.NoError(t, err)
	assert.Contains(t, res.Kubernetes, "absent")
	assert.Contains(t, res.Kubernetes, "172.24.0.1")
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "default/kubernetes")

	// A fresh plan made with the journal knows the deleted Service.
	po2 := story3PlanOptions()
	po2.From = p.From // the "kubernetes" ServiceCIDR may already be the new range
	po2.JournalDir = dir
	p2, err := c2.Plan(ctx, po2)
	require.NoError(t, err)
	require.NotNil(t, p2.Kubernetes, "the journaled default/kubernetes is part of the plan")
	assert.Equal(t, servicecidr.KubernetesService, p2.Kubernetes.Key())
	assert.Equal(t, p.Kubernetes.UID, p2.Kubernetes.UID)
	assert.Equal(t, addrs("100.64.0.1"), p2.Kubernetes.OldIPs)
	assert.Equal(t, addrs("172.24.0.1"), p2.Kubernetes.NewIPs)
	assert.Contains(t, p2.Kubernetes.Note, "journal")
	assert.Contains(t, strings.Join(p2.Warnings, "\n"), "default/kubernetes")
	require.NoError(t, p2.Check())

	// Verify notices that it is missing.
	ver, err := c2.Verify(ctx, servicecidr.VerifyOptions{To: story3To, DNSIPs: addrs("172.24.0.10")})
	require.NoError(t, err)
	assert.False(t, ver.OK)
	fs := findingsFor(ver, "services/default/kubernetes")
	require.Len(t, fs, 1, "%+v", ver.Findings)
	assert.Equal(t, servicecidr.SeverityError, fs[0].Severity)
	assert.Contains(t, fs[0].Message, "default/kubernetes does not exist")
	assert.Contains(t, fs[0].Message, "--service-cluster-ip-range")
	assert.Contains(t, fs[0].Message, "172.24.0.1")

	// Applying the fresh plan waits for it; kube-apiserver catches up meanwhile.
	rec := &recorder{}
	ao2 := fastApply(dir)
	ao2.Progress = func(e servicecidr.Event) {
		rec.add(e)
		if e.Kind == servicecidr.EventKubernetesAwaited {
			cl.HoldKubernetesService(false)
		}
	}
	res, err = c2.Apply(ctx, p2, ao2)
	require.NoError(t, err)
	assert.Equal(t, "recreated by kube-apiserver at 172.24.0.1", res.Kubernetes)
	assert.Len(t, rec.kinds(servicecidr.EventKubernetesAwaited), 1)
	assert.Len(t, rec.kinds(servicecidr.EventKubernetesRecreated), 1)
	assert.Empty(t, res.Warnings)
	kube, ok := cl.Service("default", "kubernetes")
	require.True(t, ok)
	assert.Equal(t, []string{"172.24.0.1"}, kube.Spec.ClusterIPs)

	ver, err = c2.Verify(ctx, servicecidr.VerifyOptions{To: story3To, DNSIPs: addrs("172.24.0.10")})
	require.NoError(t, err)
	assert.True(t, ver.OK, "%+v", ver.Findings)

	// The journal records it as done: a later plan does not bring it back.
	p3, err := c2.Plan(ctx, po2)
	require.NoError(t, err)
	assert.Nil(t, p3.Kubernetes)
}

// TestApplyWaitsForAJournaledKubernetesServiceWithAnOldPlan: re-applying the
// plan of the killed run (which still has default/kubernetes at its old UID)
// and re-applying a plan made without the journal both wait for
// kube-apiserver to recreate it, instead of reporting it "left at" its old
// address.
func TestApplyWaitsForAJournaledKubernetesServiceWithAnOldPlan(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		t.Run(map[bool]string{false: "same plan", true: "plan made without the journal"}[fresh], func(t *testing.T) {
			ctx := context.Background()
			cl, p, dir := killedAfterKubernetesDelete(t)
			var err error
			c2 := connect(t, cl)
			if fresh {
				po := story3PlanOptions()
				po.From = p.From
				p, err = c2.Plan(ctx, po)
				require.NoError(t, err)
				require.Nil(t, p.Kubernetes, "made without the journal: it does not know")
			}
			rec := &recorder{}
			ao := fastApply(dir) // not asked to delete it: it is already deleted
			ao.Progress = func(e servicecidr.Event) {
				rec.add(e)
				if e.Kind == servicecidr.EventKubernetesAwaited {
					cl.HoldKubernetesService(false)
				}
			}
			res, err := c2.Apply(ctx, p, ao)
			require.NoError(t, err)
			assert.Len(t, rec.kinds(servicecidr.EventKubernetesAwaited), 1, "it waited for kube-apiserver")
			assert.Equal(t, "recreated by kube-apiserver at 172.24.0.1", res.Kubernetes)
			kube, ok := cl.Service("default", "kubernetes")
			require.True(t, ok)
			assert.Equal(t, []string{"172.24.0.1"}, kube.Spec.ClusterIPs)
		})
	}
}

// TestRecoverFindsDefaultKubernetesRecreated: kube-apiserver recreated it
// while no run was active; Recover records that and a fresh plan does not
// bring it back.
func TestRecoverFindsDefaultKubernetesRecreated(t *testing.T) {
	ctx := context.Background()
	cl, p, dir := killedAfterKubernetesDelete(t)
	cl.HoldKubernetesService(false)
	cl.Reconcile()

	c2 := connect(t, cl)
	res, err := c2.Recover(ctx, fastApply(dir))
	require.NoError(t, err)
	assert.Equal(t, "recreated by kube-apiserver at 172.24.0.1", res.Kubernetes)
	assert.Empty(t, res.Warnings)
	po := story3PlanOptions()
	po.From, po.JournalDir = p.From, dir
	p2, err := c2.Plan(ctx, po)
	require.NoError(t, err)
	assert.Nil(t, p2.Kubernetes)
}

// TestPlanWithTheJournalRefusesWhileAServiceIsStillDeleted: a plan made
// while a journaled Service is absent could give its address to another
// Service; with the journal, Plan says to run Recover first.
func TestPlanWithTheJournalRefusesWhileAServiceIsStillDeleted(t *testing.T) {
	ctx := context.Background()
	cl, c := newStory3(t, "v1")
	p, err := c.Plan(ctx, story3PlanOptions())
	require.NoError(t, err)
	cl.FailServiceCreate(func(*corev1.Service) error {
		return apierrors.NewInternalError(errors.New("failed to allocate a serviceIP: the provided network does not match the current range"))
	})
	dir := t.TempDir()
	_, err = c.Apply(ctx, p, fastApply(dir))
	require.ErrorIs(t, err, servicecidr.ErrServiceLost)
	cl.FailServiceCreate(nil)

	po := story3PlanOptions()
	po.JournalDir = dir
	_, err = c.Plan(ctx, po)
	require.ErrorIs(t, err, servicecidr.ErrServiceLost)
	assert.ErrorContains(t, err, "kube-system/kube-dns")
	assert.ErrorContains(t, err, "run Recover")
	assert.ErrorContains(t, err, "172.24.0.10")

	_, err = c.Recover(ctx, fastApply(dir))
	require.NoError(t, err)
	p2, err := c.Plan(ctx, po)
	require.NoError(t, err)
	require.NotNil(t, p2.Kubernetes)
	assert.Empty(t, p2.Kubernetes.Note, "default/kubernetes exists: planned from the cluster, not the journal")
}

func TestVerifyDefaultKubernetes(t *testing.T) {
	kube := func(ips ...string) corev1.Service {
		return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
			Spec: corev1.ServiceSpec{ClusterIP: ips[0], ClusterIPs: ips}}
	}
	snap := func(svcs ...corev1.Service) *servicecidr.Snapshot {
		return &servicecidr.Snapshot{
			ServiceCIDRs: []servicecidr.ServiceCIDR{{Name: "new", CIDRs: story3To, Ready: &servicecidr.Condition{Status: metav1.ConditionTrue}}},
			Services:     svcs,
		}
	}
	for _, tc := range []struct {
		name     string
		services []corev1.Service
		opts     servicecidr.VerifyOptions
		severity servicecidr.Severity // "" means no finding about default/kubernetes
		want     []string
	}{
		{name: "at the first address", services: []corev1.Service{kube("172.24.0.1")}},
		{name: "missing", opts: servicecidr.VerifyOptions{},
			severity: servicecidr.SeverityError,
			want:     []string{"Service default/kubernetes does not exist", "kube-apiserver recreates it from its --service-cluster-ip-range", "172.24.0.1"}},
		{name: "missing, expected address given", opts: servicecidr.VerifyOptions{KubernetesIPs: addrs("172.24.0.1")},
			severity: servicecidr.SeverityError,
			want:     []string{"does not exist", "expected at 172.24.0.1"}},
		{name: "wrong address in the new range", services: []corev1.Service{kube("172.24.0.7")},
			severity: servicecidr.SeverityError,
			want:     []string{"ClusterIP 172.24.0.7", "172.24.0.1", "first address of 172.24.0.0/15"}},
		{name: "not the expected address", services: []corev1.Service{kube("172.24.0.1")}, opts: servicecidr.VerifyOptions{KubernetesIPs: addrs("172.24.0.5")},
			severity: servicecidr.SeverityError,
			want:     []string{"has ClusterIP 172.24.0.1", "expected 172.24.0.5"}},
		{name: "still in the old range", services: []corev1.Service{kube("100.64.0.1")},
			severity: servicecidr.SeverityWarning,
			want:     []string{"100.64.0.1 is outside 172.24.0.0/15", "recreates it at 172.24.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.To = story3To
			v, err := servicecidr.VerifySnapshot(snap(tc.services...), o)
			require.NoError(t, err)
			fs := findingsFor(v, "services/default/kubernetes")
			// ClusterIPs outside every ServiceCIDR are reported separately.
			var mine []servicecidr.VerifyFinding
			for _, f := range fs {
				if !strings.Contains(f.Message, "lies in no ServiceCIDR") && !strings.Contains(f.Message, "IPAddress object") {
					mine = append(mine, f)
				}
			}
			if tc.severity == "" {
				assert.Empty(t, mine)
				assert.True(t, v.OK, "%+v", v.Findings)
				return
			}
			require.Len(t, mine, 1, "%+v", v.Findings)
			assert.Equal(t, tc.severity, mine[0].Severity)
			for _, w := range tc.want {
				assert.Contains(t, mine[0].Message, w)
			}
			if tc.severity == servicecidr.SeverityError {
				assert.False(t, v.OK)
			}
		})
	}
}
