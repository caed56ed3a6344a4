package servicecidr_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// recorder collects progress events; Apply serialises the calls.
type recorder struct {
	mu     sync.Mutex
	events []servicecidr.Event
}

func (r *recorder) add(e servicecidr.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) kinds(k servicecidr.EventKind) []servicecidr.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []servicecidr.Event
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// assertMovedIntact checks that every planned Service exists at its new
// address with a new UID and every other field exactly as before.
func assertMovedIntact(t *testing.T, cl *servicecidrtest.Cluster, before map[string]corev1.Service, p *servicecidr.Plan) {
	t.Helper()
	for _, m := range p.Moves {
		orig := before[m.Key()]
		live, ok := cl.Service(m.Namespace, m.Name)
		require.True(t, ok, "Service %s is missing", m.Key())
		assert.NotEqual(t, orig.UID, live.UID, "%s was recreated", m.Key())
		want := orig.Spec.DeepCopy()
		want.ClusterIPs = nil
		for _, ip := range m.NewIPs {
			want.ClusterIPs = append(want.ClusterIPs, ip.String())
		}
		want.ClusterIP = want.ClusterIPs[0]
		assert.Equal(t, *want, live.Spec, "%s: every spec field but clusterIP(s) is preserved", m.Key())
		assert.Equal(t, orig.Labels, live.Labels)
		assert.Equal(t, orig.Annotations, live.Annotations)
		assert.Equal(t, orig.OwnerReferences, live.OwnerReferences)
		assert.NotContains(t, live.Finalizers, servicecidr.LoadBalancerCleanupFinalizer)
	}
}

func servicesByKey(cl *servicecidrtest.Cluster) map[string]corev1.Service {
	out := map[string]corev1.Service{}
	for _, s := range cl.Services() {
		out[svcKey(s)] = s
	}
	return out
}

func TestApplyStory3OnEveryVersion(t *testing.T) {
	ctx := context.Background()
	for _, v := range []string{"v1", "v1beta1", "v1alpha1"} {
		t.Run(v, func(t *testing.T) {
			cl, c := newStory3(t, v)
			before := servicesByKey(cl)
			p, err := c.Plan(ctx, story3PlanOptions())
			require.NoError(t, err)

			dir := t.TempDir()
			rec := &recorder{}
			o := fastApply(dir)
			o.Progress = rec.add
			o.DeleteOld = true
			res, err := c.Apply(ctx, p, o)
			require.NoError(t, err)

			assertMovedIntact(t, cl, before, p)
			web, _ := cl.Service("shop", "web")
			assert.Equal(t, int32(30080), web.Spec.Ports[0].NodePort, "the nodePort is kept")
			for _, key := range []string{"default/kubernetes", "shop/ingress", "shop/db", "shop/payments"} {
				ns, name, _ := strings.Cut(key, "/")
				live, ok := cl.Service(ns, name)
				require.True(t, ok, key)
				assert.Equal(t, before[key].UID, live.UID, "%s is left alone", key)
			}

			// The new ServiceCIDR came first, then the old one was marked, then DNS moved before anything else.
			w := cl.Writes()
			require.GreaterOrEqual(t, len(w), 4)
			assert.Equal(t, []string{"create servicecidrs cidrshift-172-24-0-0-15", "delete servicecidrs kubernetes",
				"delete services kube-system/kube-dns", "create services kube-system/kube-dns"}, w[:4])
			assert.Len(t, w, 8)

			assert.Len(t, res.Moved, 3)
			assert.Equal(t, 3, res.Gaps.Count)
			assert.Positive(t, res.Gaps.Max)
			assert.Len(t, rec.kinds(servicecidr.EventServiceCreated), 3)
			require.Len(t, res.Old, 1)
			assert.True(t, res.Old[0].Terminating)
			assert.Len(t, res.Old[0].Holders, 2, "default/kubernetes and the LoadBalancer still hold the old range")
			assert.Contains(t, res.Kubernetes, "left at 100.64.0.1")

			keys, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Len(t, keys, 5, "three Service records, the old ServiceCIDR's and the lock file")

			// Idempotent: a second run changes nothing.
			res2, err := c.Apply(ctx, p, o)
			require.NoError(t, err)
			assert.Equal(t, w, cl.Writes())
			assert.ElementsMatch(t, []string{"kube-system/kube-dns", "shop/api", "shop/web"}, res2.AlreadyMoved)
			assert.Empty(t, res2.Moved)

			ver, err := c.Verify(ctx, servicecidr.VerifyOptions{To: story3To, From: p.From, DNSIPs: addrs("172.24.0.10")})
			require.NoError(t, err)
			assert.True(t, ver.OK, "%+v", ver.Findings)
			assert.Equal(t, 5, ver.Services)
		})
	}
}

func TestApplyIncludingLoadBalancersKeepsEveryField(t *testing.T) {
	cl, c := newStory3(t, "v1")
	before := servicesByKey(cl)
	o := story3PlanOptions()
	o.IncludeLoadBalancers = true
	p, err := c.Plan(context.Background(), o)
	require.NoError(t, err)
	_, err = c.Apply(context.Background(), p, fastApply(t.TempDir()))
	require.NoError(t, err)
	assertMovedIntact(t, cl, before, p)
	lb, _ := cl.Service("shop", "ingress")
	assert.Equal(t, int32(31443), lb.Spec.Ports[0].NodePort)
	assert.Equal(t, int32(32000), lb.Spec.HealthCheckNodePort)
	assert.Equal(t, "example.com/lb", *lb.Spec.LoadBalancerClass)
	assert.Empty(t, lb.Finalizers, "the cloud controller adds its cleanup finalizer anew")
}

// TestStory3EndToEnd follows the documented procedure to the end: new
// ServiceCIDR, old one Terminating, Services moved, kube-apiserver restarted
// with the new range, default/kubernetes deleted and recreated, the old
// ServiceCIDR drained and gone.
func TestStory3EndToEnd(t *testing.T) {
	ctx := context.Background()
	o := story3Options("v1")
	o.APIServerRange = "100.64.0.0/13"
	cl := servicecidrtest.MustNew(o)
	c := connect(t, cl)
	po := story3PlanOptions()
	po.IncludeLoadBalancers = true
	p, err := c.Plan(ctx, po)
	require.NoError(t, err)
	ao := fastApply(t.TempDir())
	ao.DeleteOld = true
	ao.DrainTimeout = 20 * time.Millisecond
	res, err := c.Apply(ctx, p, ao)
	require.NoError(t, err)
	require.Len(t, res.Old, 1)
	assert.Len(t, res.Old[0].Holders, 1)
	assert.Equal(t, "services/default/kubernetes", res.Old[0].Holders[0].Parent.String())

	// The operator restarts kube-apiserver with the new range, then lets apply delete default/kubernetes.
	require.NoError(t, cl.SetAPIServerRange("172.24.0.0/15"))
	ao.DeleteKubernetesService = true
	ao.DrainTimeout = 2 * time.Second
	res, err = c.Apply(ctx, p, ao)
	require.NoError(t, err)
	assert.Equal(t, "recreated by kube-apiserver at 172.24.0.1", res.Kubernetes)
	kube, _ := cl.Service("default", "kubernetes")
	assert.Equal(t, []string{"172.24.0.1"}, kube.Spec.ClusterIPs)
	require.Len(t, res.Old, 1)
	assert.Equal(t, "ServiceCIDR kubernetes is gone", res.Old[0].Summary)

	ver, err := c.Verify(ctx, servicecidr.VerifyOptions{To: story3To, From: p.From, DNSIPs: addrs("172.24.0.10"), IncludeLoadBalancers: true})
	require.NoError(t, err)
	assert.True(t, ver.OK)
	for _, f := range ver.Findings {
		assert.NotEqual(t, servicecidr.SeverityError, f.Severity, f.Message)
	}
}

// TestStory3On133NeedsTheDualWriteGate replays what the e2e suite saw on
// Kubernetes 1.33.13: kube-apiserver restarted with the new range but with
// the allocator's dual-write still on cannot recreate default/kubernetes;
// restarted with DisableAllocatorDualWrite=true (the plan's manual step), the
// same Apply finishes.
func TestStory3On133NeedsTheDualWriteGate(t *testing.T) {
	t.Parallel() // two seconds of waiting
	ctx := context.Background()
	o := story3Options("v1")
	o.GitVersion, o.DualWrite, o.APIServerRange = "v1.33.13", true, "100.64.0.0/13"
	cl := servicecidrtest.MustNew(o)
	c := connect(t, cl)
	po := story3PlanOptions()
	po.IncludeLoadBalancers = true
	p, err := c.Plan(ctx, po)
	require.NoError(t, err)
	assert.Contains(t, strings.Join(p.Warnings, "\n"), "--feature-gates=DisableAllocatorDualWrite=true")
	ao := fastApply(t.TempDir())
	ao.DeleteOld = true
	ao.DrainTimeout = 20 * time.Millisecond
	_, err = c.Apply(ctx, p, ao)
	require.NoError(t, err, "explicit addresses of the new range pass while kube-apiserver has the old flag")

	// The operator restarts kube-apiserver with the new range only.
	require.NoError(t, cl.SetAPIServerRange("172.24.0.0/15"))
	ao.DeleteKubernetesService = true
	ao.DrainTimeout = 200 * time.Millisecond
	res, _ := c.Apply(ctx, p, ao)
	_, ok := cl.Service("default", "kubernetes")
	assert.False(t, ok, "kube-apiserver cannot recreate default/kubernetes at 172.24.0.1 with the dual-write on")
	if res != nil {
		assert.NotContains(t, res.Kubernetes, "recreated by kube-apiserver")
	}
	ver, err := c.Verify(ctx, servicecidr.VerifyOptions{To: story3To, From: p.From, IncludeLoadBalancers: true})
	require.NoError(t, err)
	assert.False(t, ver.OK, "Verify reports default/kubernetes missing")

	// Restarted again with the gate: the same command finishes.
	cl.SetDualWrite(false)
	ao.DrainTimeout = 2 * time.Second
	res, err = c.Apply(ctx, p, ao)
	require.NoError(t, err)
	assert.Equal(t, "recreated by kube-apiserver at 172.24.0.1", res.Kubernetes)
	ver, err = c.Verify(ctx, servicecidr.VerifyOptions{To: story3To, From: p.From, DNSIPs: addrs("172.24.0.10"), IncludeLoadBalancers: true})
	require.NoError(t, err)
	assert.True(t, ver.OK, "%v", ver.Findings)
}

func TestApplyKubernetesServiceBeforeTheFlagsChange(t *testing.T) {
	o := story3Options("v1")
	o.APIServerRange = "100.64.0.0/13"
	cl := servicecidrtest.MustNew(o)
	c := connect(t, cl)
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	ao := fastApply(t.TempDir())
	ao.DeleteKubernetesService = true
	res, err := c.Apply(context.Background(), p, ao)
	require.NoError(t, err)
	assert.Equal(t, "recreated by kube-apiserver at 100.64.0.1", res.Kubernetes)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "some kube-apiserver still runs with the old --service-cluster-ip-range")
}

func TestApplyDryRunClientSendsNoWrite(t *testing.T) {
	cl, c := newStory3(t, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	before := cl.Requests()
	rec := &recorder{}
	res, err := c.Apply(context.Background(), p, servicecidr.ApplyOptions{DryRun: servicecidr.DryRunClient, Progress: rec.add, DeleteOld: true, DeleteKubernetesService: true})
	require.NoError(t, err)
	assert.Empty(t, cl.Writes())
	assert.Len(t, res.Moved, 3)
	assert.Len(t, rec.kinds(servicecidr.EventDryRunServiceMove), 4, "three Services and default/kubernetes")
	assert.Len(t, rec.kinds(servicecidr.EventDryRunServiceCIDROp), 2, "create the new ServiceCIDR, delete the old")
	assert.Empty(t, rec.kinds(servicecidr.EventAccessChecked), "a client dry run asks the server nothing it need not")
	assert.Less(t, cl.Requests()-before, 10)
}

func TestApplyDryRunServerStoresNothing(t *testing.T) {
	for _, targetExists := range []bool{false, true} {
		t.Run(fmt.Sprint("targetExists=", targetExists), func(t *testing.T) {
			cl, c := newStory3(t, "v1")
			if targetExists {
				_, err := c.Create(context.Background(), "new", story3To, servicecidr.WriteOptions{})
				require.NoError(t, err)
				_, err = c.WaitReady(context.Background(), "new", servicecidr.WaitOptions{Interval: time.Millisecond})
				require.NoError(t, err)
			}
			p, err := c.Plan(context.Background(), story3PlanOptions())
			require.NoError(t, err)
			w := cl.Writes()
			rec := &recorder{}
			res, err := c.Apply(context.Background(), p, servicecidr.ApplyOptions{DryRun: servicecidr.DryRunServer, Progress: rec.add, DeleteOld: true})
			require.NoError(t, err)
			assert.Equal(t, w, cl.Writes(), "nothing stored")
			assert.Len(t, res.Moved, 3)
			moves := rec.kinds(servicecidr.EventDryRunServiceMove)
			require.Len(t, moves, 3)
			if targetExists {
				assert.Contains(t, moves[0].Message, "server accepted the delete and the create")
			} else {
				assert.Contains(t, moves[0].Message, "the create is not checked because the new ServiceCIDR does not exist yet")
			}
		})
	}
}

func TestApplyDryRunServerReportsARefusedCreate(t *testing.T) {
	cl, c := newStory3(t, "v1")
	_, err := c.Create(context.Background(), "new", story3To, servicecidr.WriteOptions{})
	require.NoError(t, err)
	_, err = c.WaitReady(context.Background(), "new", servicecidr.WaitOptions{Interval: time.Millisecond})
	require.NoError(t, err)
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	cl.FailServiceCreate(func(s *corev1.Service) error {
		return apierrors.NewForbidden(corev1.Resource("services"), s.Name, errors.New("quota exceeded"))
	})
	_, err = c.Apply(context.Background(), p, servicecidr.ApplyOptions{DryRun: servicecidr.DryRunServer})
	assert.ErrorContains(t, err, "dry-run create of Service kube-system/kube-dns with clusterIPs 172.24.0.10")
	assert.Empty(t, cl.Writes()[1:], "only the ServiceCIDR made before planning")
}

func TestApplyChecksPermissionsFirst(t *testing.T) {
	o := story3Options("v1")
	o.Deny = []servicecidrtest.DenyRule{{Verb: "delete", Resource: "services"}, {Verb: "create", Resource: "servicecidrs"}}
	cl := servicecidrtest.MustNew(o)
	c := connect(t, cl)
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	_, err = c.Apply(context.Background(), p, fastApply(t.TempDir()))
	require.ErrorIs(t, err, access.ErrDenied)
	assert.ErrorContains(t, err, "cannot create servicecidrs.networking.k8s.io")
	assert.ErrorContains(t, err, "cannot delete services in namespace kube-system")
	assert.ErrorContains(t, err, "cannot delete services in namespace shop")
	assert.Empty(t, cl.Writes())
}

// TestApplyRefusesAStalePlan: a plan is stale once a planned Service
// changed, a new one took an address in the old range, or the target
// ServiceCIDR changed. With target, the plan was made onto an existing
// ServiceCIDR "new" of 172.24.0.0/15: it is stale once that ServiceCIDR is
// gone, being deleted or recreated, as its Services would land in a range
// that is going away, or in one the plan never saw.
func TestApplyRefusesAStalePlan(t *testing.T) {
	tests := []struct {
		name   string
		target bool
		change func(t *testing.T, cl *servicecidrtest.Cluster)
		want   string
	}{
		{"service changed", false, func(t *testing.T, cl *servicecidrtest.Cluster) {
			s, _ := cl.Service("shop", "api")
			s.Labels["tier"] = "backend"
			_, err := cl.Kube.CoreV1().Services("shop").Update(context.Background(), s, metav1.UpdateOptions{})
			require.NoError(t, err)
		}, "Service shop/api changed since planning (resourceVersion"},
		{"service deleted", false, func(t *testing.T, cl *servicecidrtest.Cluster) {
			require.NoError(t, cl.Kube.CoreV1().Services("shop").Delete(context.Background(), "web", metav1.DeleteOptions{}))
		}, "Service shop/web no longer exists"},
		{"service added in the old range", false, func(t *testing.T, cl *servicecidrtest.Cluster) {
			s := story3Services()[3]
			s.Name, s.Spec.ClusterIP = "late", "100.64.9.9"
			_, err := cl.AddService(s)
			require.NoError(t, err)
		}, "Service shop/late (100.64.9.9) appeared in the old range after planning"},
		{"service recreated", false, func(t *testing.T, cl *servicecidrtest.Cluster) {
			require.NoError(t, cl.Kube.CoreV1().Services("shop").Delete(context.Background(), "api", metav1.DeleteOptions{}))
			s := story3Services()[3]
			_, err := cl.AddService(s)
			require.NoError(t, err)
		}, "Service shop/api was recreated since planning"},
		{"target taken by another name", false, func(t *testing.T, cl *servicecidrtest.Cluster) {
			_, err := cl.Kube.NetworkingV1().ServiceCIDRs().Create(context.Background(), &networkingv1.ServiceCIDR{
				ObjectMeta: metav1.ObjectMeta{Name: "cidrshift-172-24-0-0-15"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"172.24.0.0/16"}}}, metav1.CreateOptions{})
			require.NoError(t, err)
		}, "ServiceCIDR cidrshift-172-24-0-0-15 now has CIDRs 172.24.0.0/16, the plan wants 172.24.0.0/15"},
		{"target deleted", true, func(t *testing.T, cl *servicecidrtest.Cluster) {
			require.NoError(t, cl.Kube.NetworkingV1().ServiceCIDRs().Delete(context.Background(), "new", metav1.DeleteOptions{}))
			cl.Reconcile()
		}, "ServiceCIDR new no longer exists"},
		{"target being deleted", true, func(t *testing.T, cl *servicecidrtest.Cluster) {
			// An address in it holds its finalizer.
			s := story3Services()[3]
			s.Namespace, s.Name, s.Spec.ClusterIP = "other", "holder", "172.25.255.200"
			_, err := cl.AddService(s)
			require.NoError(t, err)
			require.NoError(t, cl.Kube.NetworkingV1().ServiceCIDRs().Delete(context.Background(), "new", metav1.DeleteOptions{}))
			cl.Reconcile()
			st, ok := cl.ServiceCIDR("new")
			require.True(t, ok && st.Terminating, "ServiceCIDR new is terminating")
		}, "ServiceCIDR new is being deleted"},
		{"target recreated", true, func(t *testing.T, cl *servicecidrtest.Cluster) {
			require.NoError(t, cl.Kube.NetworkingV1().ServiceCIDRs().Delete(context.Background(), "new", metav1.DeleteOptions{}))
			cl.Reconcile()
			_, err := cl.Kube.NetworkingV1().ServiceCIDRs().Create(context.Background(), &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "new"},
				Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"172.24.0.0/15"}}}, metav1.CreateOptions{})
			require.NoError(t, err)
		}, "ServiceCIDR new was recreated since planning (uid "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := story3Options("v1")
			if tt.target {
				o.ServiceCIDRs = append(o.ServiceCIDRs, servicecidrtest.InitialServiceCIDR{Name: "new", CIDRs: []string{"172.24.0.0/15"}})
			}
			cl := servicecidrtest.MustNew(o)
			c := connect(t, cl)
			p, err := c.Plan(context.Background(), story3PlanOptions())
			require.NoError(t, err)
			require.Equal(t, tt.target, p.Target.Exists, "the plan moves the Services into an existing ServiceCIDR")
			tt.change(t, cl)
			w := cl.Writes()
			_, err = c.Apply(context.Background(), p, fastApply(t.TempDir()))
			require.ErrorIs(t, err, servicecidr.ErrStalePlan)
			assert.ErrorContains(t, err, tt.want)
			assert.ErrorContains(t, err, "nothing was changed")
			assert.Equal(t, w, cl.Writes(), "a stale plan changes nothing")
		})
	}
}

func TestApplyPlannedAddressTakenMeanwhileIsStale(t *testing.T) {
	o := story3Options("v1")
	o.ServiceCIDRs = append(o.ServiceCIDRs, servicecidrtest.InitialServiceCIDR{Name: "new", CIDRs: []string{"172.24.0.0/15"}})
	cl := servicecidrtest.MustNew(o)
	c := connect(t, cl)
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	s := story3Services()[3]
	s.Namespace, s.Name, s.Spec.ClusterIP = "other", "squatter", "172.24.3.7"
	_, err = cl.AddService(s)
	require.NoError(t, err)
	_, err = c.Apply(context.Background(), p, fastApply(t.TempDir()))
	assert.ErrorContains(t, err, "address 172.24.3.7 planned for Service shop/web is now used by other/squatter")
}

func TestApplyFallsBackWhenTheAddressIsTakenDuringTheMove(t *testing.T) {
	cl, c := newStory3(t, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	// The hook runs on an Apply worker goroutine: it keeps its error for the
	// test goroutine (sync.Once orders the write before Apply returns).
	once := sync.Once{}
	var squatErr error
	cl.FailServiceCreate(func(s *corev1.Service) error {
		if s.Name == "api" {
			once.Do(func() {
				sq := story3Services()[3]
				sq.Namespace, sq.Name, sq.Spec.ClusterIP = "other", "squatter", "172.24.0.200"
				_, squatErr = cl.AddService(sq)
			})
		}
		return nil
	})
	rec := &recorder{}
	o := fastApply(t.TempDir())
	o.Progress = rec.add
	res, err := c.Apply(context.Background(), p, o)
	require.NoError(t, squatErr, "adding the squatter")
	require.NoError(t, err)
	api, ok := cl.Service("shop", "api")
	require.True(t, ok)
	assert.Equal(t, []string{"172.24.0.2"}, api.Spec.ClusterIPs)
	fb := rec.kinds(servicecidr.EventFallback)
	require.Len(t, fb, 1)
	assert.Equal(t, "172.24.0.200 was taken meanwhile; given 172.24.0.2", fb[0].Message)
	for _, m := range res.Moved {
		if m.Service == "shop/api" {
			assert.Equal(t, addrs("172.24.0.2"), m.NewIPs)
		}
	}

	// A rerun knows from the journal that shop/api was moved by us, at another address.
	res, err = c.Apply(context.Background(), p, o)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"kube-system/kube-dns", "shop/api", "shop/web"}, res.AlreadyMoved)
}

func TestApplyRetriesUntilTheAllocatorAcceptsTheRange(t *testing.T) {
	o := story3Options("v1beta1")
	o.ControllerDelay = 3
	o.AllocatorDelay = 6
	cl := servicecidrtest.MustNew(o)
	c := connect(t, cl)
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	rec := &recorder{}
	ao := fastApply(t.TempDir())
	ao.Progress = rec.add
	ao.RetryTimeout = 5 * time.Second
	_, err = c.Apply(context.Background(), p, ao)
	require.NoError(t, err)
	retries := rec.kinds(servicecidr.EventRetry)
	require.NotEmpty(t, retries)
	assert.Contains(t, retries[0].Message, "the provided network does not match the current range")
	dns, _ := cl.Service("kube-system", "kube-dns")
	assert.Equal(t, []string{"172.24.0.10"}, dns.Spec.ClusterIPs)
}

func TestApplyExplainsThe133DualWriteTrapAndResumes(t *testing.T) {
	o := story3Options("v1")
	o.GitVersion = "v1.33.2"
	cl := servicecidrtest.MustNew(o)
	c := connect(t, cl)
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	cl.FailServiceCreate(func(*corev1.Service) error {
		return apierrors.NewInternalError(errors.New("failed to allocate a serviceIP: the provided network does not match the current range"))
	})
	dir := t.TempDir()
	_, err = c.Apply(context.Background(), p, fastApply(dir))
	require.ErrorIs(t, err, servicecidr.ErrDualWrite)
	require.ErrorIs(t, err, servicecidr.ErrServiceLost)
	assert.ErrorContains(t, err, "this is the Kubernetes 1.33 allocator dual-write")
	assert.ErrorContains(t, err, "restart every kube-apiserver with --feature-gates=DisableAllocatorDualWrite=true and --service-cluster-ip-range set to the new range")
	assert.ErrorContains(t, err, "upgrade to Kubernetes 1.34 or newer")
	assert.ErrorContains(t, err, `record "service/kube-system/kube-dns"`)
	_, ok := cl.Service("kube-system", "kube-dns")
	assert.False(t, ok, "the DNS Service is absent, its definition is in the journal")
	assert.FileExists(t, filepath.Join(dir, "service%2Fkube-system%2Fkube-dns.json"))

	// The operator restarts kube-apiserver; the run resumes from the journal.
	cl.FailServiceCreate(nil)
	rec := &recorder{}
	ao := fastApply(dir)
	ao.Progress = rec.add
	res, err := c.Apply(context.Background(), p, ao)
	require.NoError(t, err)
	require.Len(t, rec.kinds(servicecidr.EventServiceRecovered), 1)
	dns, ok := cl.Service("kube-system", "kube-dns")
	require.True(t, ok)
	assert.Equal(t, []string{"172.24.0.10"}, dns.Spec.ClusterIPs)
	assert.Len(t, res.Moved, 3)
}

func TestApplyKeepsRecreatingAfterCancel(t *testing.T) {
	cl, c := newStory3(t, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := fastApply(t.TempDir())
	o.Concurrency = 1
	o.Progress = func(e servicecidr.Event) {
		if e.Kind == servicecidr.EventServiceDeleted && e.Service == "shop/api" {
			cancel() // Ctrl-C right between delete and create
		}
	}
	_, err = c.Apply(ctx, p, o)
	require.ErrorIs(t, err, context.Canceled)
	api, ok := cl.Service("shop", "api")
	require.True(t, ok, "a cancelled run still recreates the Service it deleted")
	assert.Equal(t, []string{"172.24.0.200"}, api.Spec.ClusterIPs)
	web, _ := cl.Service("shop", "web")
	assert.Equal(t, []string{"100.64.3.7"}, web.Spec.ClusterIPs, "nothing new is started after the cancel")
}

func TestApplyOptionErrors(t *testing.T) {
	_, c := newStory3(t, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	_, err = c.Apply(context.Background(), p, servicecidr.ApplyOptions{})
	assert.EqualError(t, err, "--journal: a journal directory is required to apply: each Service is recorded there before it is deleted, so a crash loses nothing")
	_, err = c.Apply(context.Background(), p, servicecidr.ApplyOptions{DryRun: "maybe"})
	assert.EqualError(t, err, `--dry-run "maybe": valid values are client and server`)
	_, err = c.Apply(context.Background(), nil, servicecidr.ApplyOptions{})
	assert.ErrorIs(t, err, servicecidr.ErrInvalid)

	dir := t.TempDir()
	j, err := journal.Open(dir)
	require.NoError(t, err)
	defer j.Close()
	_, err = c.Apply(context.Background(), p, fastApply(dir))
	assert.ErrorIs(t, err, journal.ErrLocked, "two runs never share a journal")
}

func TestApplyTouchesNothingOldUntilTheNewRangeIsReady(t *testing.T) {
	o := story3Options("v1")
	o.ControllerDelay = 1 << 30 // kube-controller-manager never marks the new ServiceCIDR Ready
	cl := servicecidrtest.MustNew(o)
	c := connect(t, cl)
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	ao := fastApply(t.TempDir())
	ao.DeleteOld = true
	ao.ReadyTimeout = 20 * time.Millisecond
	_, err = c.Apply(context.Background(), p, ao)
	assert.ErrorIs(t, err, servicecidr.ErrNotReady)
	st, _ := cl.ServiceCIDR("kubernetes")
	assert.False(t, st.Terminating, "the old range is untouched while the new one is not Ready")
	assert.Equal(t, []string{"create servicecidrs cidrshift-172-24-0-0-15"}, cl.Writes())
}

func TestApplyDeleteOldAgainAfterKubeAPIServerRecreatedIt(t *testing.T) {
	// After the old "kubernetes" ServiceCIDR is gone, kube-apiserver creates a
	// new one of that name from its new flags; a later run must not delete it.
	o := story3Options("v1")
	o.APIServerRange = "172.24.0.0/15"
	o.Services = story3Services()[1:] // default/kubernetes already moved
	cl := servicecidrtest.MustNew(o)
	c := connect(t, cl)
	po := story3PlanOptions()
	po.IncludeLoadBalancers = true
	p, err := c.Plan(context.Background(), po)
	require.NoError(t, err)
	ao := fastApply(t.TempDir())
	ao.DeleteOld = true
	ao.DrainTimeout = time.Second
	_, err = c.Apply(context.Background(), p, ao)
	require.NoError(t, err)
	cl.Reconcile()
	st, ok := cl.ServiceCIDR("kubernetes")
	require.True(t, ok)
	assert.Equal(t, []string{"172.24.0.0/15"}, st.CIDRs, "recreated from the new flags")

	res, err := c.Apply(context.Background(), p, ao)
	require.NoError(t, err)
	st, _ = cl.ServiceCIDR("kubernetes")
	assert.False(t, st.Terminating, "the new incarnation is left alone")
	require.Len(t, res.Old, 1)
	assert.Contains(t, res.Old[0].Summary, "is gone")
}

// TestRecoverBeforeReplanning: after a crash that left kube-dns deleted, a
// new plan made without recovering first would not see kube-dns at all;
// Recover brings it back at its journaled address, so the new plan keeps it.
func TestRecoverBeforeReplanning(t *testing.T) {
	cl, c, dir := lostKubeDNS(t)
	_, err := c.Recover(context.Background(), servicecidr.ApplyOptions{})
	assert.ErrorContains(t, err, "Recover needs the journal directory")
	res, err := c.Recover(context.Background(), fastApply(dir))
	require.NoError(t, err)
	require.Len(t, res.Moved, 1)
	dns, ok := cl.Service("kube-system", "kube-dns")
	require.True(t, ok, "Recover recreates kube-dns from the journal")
	assert.Equal(t, []string{"172.24.0.10"}, dns.Spec.ClusterIPs)

	again, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	for _, m := range again.Moves {
		for _, ip := range m.NewIPs {
			assert.NotEqual(t, "172.24.0.10", ip.String(), "the new plan must not reuse kube-dns's address for %s", m.Key())
		}
	}
	_, err = c.Apply(context.Background(), again, fastApply(dir))
	require.NoError(t, err)
	dns, _ = cl.Service("kube-system", "kube-dns")
	assert.Equal(t, []string{"172.24.0.10"}, dns.Spec.ClusterIPs, "kube-dns keeps its tenth address")
}
