package servicecidr_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/kubetest"
	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// TestApplyAsksForExactlyThePermissionsItNeeds: the access preflight asks for
// every permission the options and the plan need, before the first write,
// and for none they do not (a caller granted only what a run needs must not
// be refused).
func TestApplyAsksForExactlyThePermissionsItNeeds(t *testing.T) {
	sc := func(verb string) access.Check {
		return access.Check{Verb: verb, Group: servicecidr.Group, Resource: "servicecidrs"}
	}
	svcs := func(ns string) []access.Check {
		return []access.Check{{Verb: "get", Resource: "services", Namespace: ns},
			{Verb: "delete", Resource: "services", Namespace: ns}, {Verb: "create", Resource: "services", Namespace: ns}}
	}
	listIPs := access.Check{Verb: "list", Group: servicecidr.Group, Resource: "ipaddresses"}
	deleteKube := access.Check{Verb: "delete", Resource: "services", Namespace: "default", Name: "kubernetes"}
	var configMaps []access.Check
	for _, v := range []string{"get", "list", "create", "update", "delete"} {
		configMaps = append(configMaps, access.Check{Verb: v, Resource: "configmaps", Namespace: "cidrshift"})
	}
	moves := append(svcs("kube-system"), svcs("shop")...)
	join := func(parts ...[]access.Check) []access.Check {
		var out []access.Check
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	head := []access.Check{{Verb: "list", Resource: "services"}, sc("list"), sc("get")}
	journaled := func(o *servicecidr.ApplyOptions) {
		o.ClusterJournal = &servicecidr.ClusterJournal{Namespace: "cidrshift"}
		o.Lock = &kubetest.Lock{ChecksLeft: -1}
	}

	for _, tc := range []struct {
		name      string
		ipVersion string
		plan      func(p *servicecidr.Plan)
		opts      func(o *servicecidr.ApplyOptions)
		want      []access.Check
	}{
		{name: "move only",
			want: join(head, []access.Check{listIPs, sc("create")}, moves)},
		{name: "no IPAddress API served", ipVersion: "none",
			want: join(head, []access.Check{sc("create")}, moves)},
		{name: "delete old, default/kubernetes, cluster journal",
			opts: func(o *servicecidr.ApplyOptions) {
				o.DeleteOld, o.DeleteKubernetesService = true, true
				journaled(o)
			},
			want: join(head, []access.Check{listIPs, sc("create"), sc("delete")}, moves, []access.Check{deleteKube}, configMaps)},
		{name: "delete old with no old ServiceCIDR in the plan",
			plan: func(p *servicecidr.Plan) { p.Old = nil },
			opts: func(o *servicecidr.ApplyOptions) { o.DeleteOld = true },
			want: join(head, []access.Check{listIPs, sc("create")}, moves)},
		{name: "delete default/kubernetes when the plan does not have it",
			plan: func(p *servicecidr.Plan) { p.Kubernetes = nil },
			opts: func(o *servicecidr.ApplyOptions) { o.DeleteKubernetesService = true },
			want: join(head, []access.Check{listIPs, sc("create")}, moves)},
		{name: "server dry run with a cluster journal",
			opts: func(o *servicecidr.ApplyOptions) {
				o.DryRun = servicecidr.DryRunServer
				journaled(o)
			},
			want: join(head, []access.Check{listIPs, sc("create")}, moves)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := story3Options("v1")
			o.IPAddressVersion = tc.ipVersion
			o.Deny = []servicecidrtest.DenyRule{{}} // every review is denied: the error lists every check asked
			cl := servicecidrtest.MustNew(o)
			c := connect(t, cl)
			p, err := c.Plan(context.Background(), story3PlanOptions())
			require.NoError(t, err)
			require.NotEmpty(t, p.Old)
			require.NotNil(t, p.Kubernetes)
			if tc.plan != nil {
				tc.plan(p)
			}
			ao := fastApply(t.TempDir())
			if tc.opts != nil {
				tc.opts(&ao)
			}
			_, err = c.Apply(context.Background(), p, ao)
			var denied *access.DeniedError
			require.ErrorAs(t, err, &denied)
			assert.Equal(t, tc.want, denied.Denied)
			assert.Empty(t, cl.Writes())
		})
	}
}

// TestApplyWarnsWhenThePlanWasMadeAgainstAnotherServiceCIDRVersion: a plan
// made while the cluster served another ServiceCIDR version is applied with
// a warning naming both; a plan of the version served gets none.
func TestApplyWarnsWhenThePlanWasMadeAgainstAnotherServiceCIDRVersion(t *testing.T) {
	for _, planned := range []servicecidr.APIVersion{"v1", "v1beta1"} {
		t.Run(string(planned), func(t *testing.T) {
			_, c := newStory3(t, "v1")
			p, err := c.Plan(context.Background(), story3PlanOptions())
			require.NoError(t, err)
			require.Equal(t, servicecidr.APIVersion("v1"), p.ServiceCIDRAPI)
			p.ServiceCIDRAPI = planned
			res, err := c.Apply(context.Background(), p, fastApply(t.TempDir()))
			require.NoError(t, err)
			warned := strings.Contains(strings.Join(res.Warnings, "\n"), "the plan was made against ServiceCIDR v1beta1, the cluster now serves v1")
			assert.Equal(t, planned != "v1", warned, "%q", res.Warnings)
		})
	}
}

// TestApplyReportsMovedServicesInNameOrder: Result.Moved is sorted by
// Service, whatever order the concurrent moves finished in.
func TestApplyReportsMovedServicesInNameOrder(t *testing.T) {
	_, c := newStory3(t, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	res, err := c.Apply(context.Background(), p, fastApply(t.TempDir()))
	require.NoError(t, err)
	var got []string
	for _, m := range res.Moved {
		got = append(got, m.Service)
	}
	assert.Equal(t, []string{"kube-system/kube-dns", "shop/api", "shop/web"}, got)
	assert.True(t, sort.StringsAreSorted(got))
}

// TestApplyUnsetRateAndRetryOptionsGetTheirDefaults: a zero QPS means the
// default 10 per second, not "no move at all" (a token bucket of rate 0 gives
// its burst and then refuses every further move), and a zero RetryTimeout
// means the default minute of retries, not none.
func TestApplyUnsetRateAndRetryOptionsGetTheirDefaults(t *testing.T) {
	t.Run("QPS", func(t *testing.T) {
		cl, c := newStory3(t, "v1")
		before := servicesByKey(cl)
		p, err := c.Plan(context.Background(), story3PlanOptions())
		require.NoError(t, err)
		ao := fastApply(t.TempDir())
		ao.QPS, ao.Burst = 0, 1 // one token, refilled at the default rate
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := c.Apply(ctx, p, ao)
		require.NoError(t, err)
		assert.Len(t, res.Moved, 3)
		assertMovedIntact(t, cl, before, p)
	})
	t.Run("RetryTimeout", func(t *testing.T) {
		o := story3Options("v1beta1")
		o.AllocatorDelay = 6
		cl := servicecidrtest.MustNew(o)
		c := connect(t, cl)
		p, err := c.Plan(context.Background(), story3PlanOptions())
		require.NoError(t, err)
		rec := &recorder{}
		ao := fastApply(t.TempDir())
		ao.RetryTimeout = 0
		ao.Progress = rec.add
		_, err = c.Apply(context.Background(), p, ao)
		require.NoError(t, err)
		assert.NotEmpty(t, rec.kinds(servicecidr.EventRetry), "the allocator refused the first attempts")
		dns, _ := cl.Service("kube-system", "kube-dns")
		assert.Equal(t, []string{"172.24.0.10"}, dns.Spec.ClusterIPs)
	})
}

// TestApplyWaitsForAnAbsentKubernetesServiceForTheDefaultReadyTimeout: the
// wait for kube-apiserver to recreate default/kubernetes, announced in its
// event, is the default two minutes when ReadyTimeout is unset.
func TestApplyWaitsForAnAbsentKubernetesServiceForTheDefaultReadyTimeout(t *testing.T) {
	o := story3Options("v1")
	o.APIServerRange = "100.64.0.0/13"
	cl := servicecidrtest.MustNew(o)
	cl.HoldKubernetesService(true) // kube-apiserver is down until Apply waits for it
	c := connect(t, cl)
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	require.NotNil(t, p.Kubernetes)
	require.NoError(t, cl.Kube.CoreV1().Services("default").Delete(context.Background(), "kubernetes", metav1.DeleteOptions{}))
	rec := &recorder{}
	ao := fastApply(t.TempDir())
	ao.ReadyTimeout = 0
	ao.Progress = func(e servicecidr.Event) {
		rec.add(e)
		if e.Kind == servicecidr.EventKubernetesAwaited {
			cl.HoldKubernetesService(false)
		}
	}
	res, err := c.Apply(context.Background(), p, ao)
	require.NoError(t, err)
	awaited := rec.kinds(servicecidr.EventKubernetesAwaited)
	require.Len(t, awaited, 1)
	assert.Contains(t, awaited[0].Message, "absent (deleted since planning); waiting up to 2m0s for it")
	assert.Equal(t, "recreated by kube-apiserver at 100.64.0.1", res.Kubernetes)
}
