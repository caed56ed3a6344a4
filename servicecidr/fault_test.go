package servicecidr_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// TestApplySurvivesACrashAtEveryRequest kills the applying process at every
// request of a full run, both before the request reaches the server and
// after the server processed it (answer lost), then runs apply again in a
// new process with the same journal. Whatever the instant, the end state is
// the same and no Service is lost.
func TestApplySurvivesACrashAtEveryRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("long: one run per request")
	}
	for _, v := range []string{"v1", "v1alpha1"} {
		for _, lose := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/answerLost=%v", v, lose), func(t *testing.T) {
				t.Parallel() // each has its own fake; most of the time is waits
				crashEveryRequest(t, v, lose)
			})
		}
	}
}

func faultOptions(v string) servicecidrtest.Options {
	o := story3Options(v)
	o.APIServerRange = "172.24.0.0/15" // kube-apiserver already restarted with the new range
	o.ControllerDelay = 2
	o.AllocatorDelay = 1
	return o
}

func faultApply(dir string) servicecidr.ApplyOptions {
	o := fastApply(dir)
	o.DeleteOld = true
	o.DeleteKubernetesService = true
	o.DrainTimeout = time.Second
	o.Concurrency = 2
	o.RetryTimeout = time.Second
	return o
}

func crashEveryRequest(t *testing.T, v string, lose bool) {
	// An uninterrupted run, to count its requests.
	ref := servicecidrtest.MustNew(faultOptions(v))
	refClient := connect(t, ref)
	po := story3PlanOptions()
	po.IncludeLoadBalancers = true
	refPlan, err := refClient.Plan(context.Background(), po)
	require.NoError(t, err)
	start := ref.Requests()
	_, err = refClient.Apply(context.Background(), refPlan, faultApply(t.TempDir()))
	require.NoError(t, err)
	total := ref.Requests() - start
	require.Greater(t, total, 20)

	for n := 0; n <= total; n++ {
		cl := servicecidrtest.MustNew(faultOptions(v))
		c := connect(t, cl)
		before := servicesByKey(cl)
		p, err := c.Plan(context.Background(), po)
		require.NoError(t, err)
		dir := t.TempDir()

		ctx, cancel := context.WithCancel(context.Background())
		if lose {
			cl.LoseResponseAfter(n, cancel)
		} else {
			cl.KillAfter(n, cancel)
		}
		_, firstErr := c.Apply(ctx, p, faultApply(dir))
		cancel()
		cl.Revive()
		t.Logf("crash after request %d of %d: %d Services left, first run: %v", n, total, len(cl.Services()), firstErr)

		// A new process resumes with the same plan and journal.
		c2 := connect(t, cl)
		res, err := c2.Apply(context.Background(), p, faultApply(dir))
		require.NoError(t, err, "crash after request %d (first run: %v)", n, firstErr)

		assertMovedIntact(t, cl, before, p)
		for _, key := range []string{"shop/db", "shop/payments"} {
			ns, name, _ := strings.Cut(key, "/")
			live, ok := cl.Service(ns, name)
			require.True(t, ok, key)
			assert.Equal(t, before[key].UID, live.UID)
		}
		kube, ok := cl.Service("default", "kubernetes")
		require.True(t, ok, "crash after request %d: default/kubernetes exists", n)
		assert.Equal(t, []string{"172.24.0.1"}, kube.Spec.ClusterIPs)
		assert.Len(t, cl.Services(), len(before), "crash after request %d: no Service lost or duplicated", n)
		cl.Reconcile()
		sc, ok := cl.ServiceCIDR("kubernetes")
		require.True(t, ok)
		assert.Equal(t, []string{"172.24.0.0/15"}, sc.CIDRs, "crash after request %d: the old range is gone", n)
		assert.NotContains(t, fmt.Sprint(res.Warnings), "not recreated")

		// Every delete of a Service is followed by its create; nothing pending
		// remains. (The old ServiceCIDR's record has no phase: nothing
		// recreates it.)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), "servicecidr%2F") {
				data, err := os.ReadFile(dir + "/" + e.Name())
				require.NoError(t, err)
				assert.Contains(t, string(data), `"phase": "done"`, "crash after request %d: %s", n, e.Name())
			}
		}
		ver, err := c2.Verify(context.Background(), servicecidr.VerifyOptions{To: story3To, DNSIPs: addrs("172.24.0.10"), IncludeLoadBalancers: true})
		require.NoError(t, err)
		assert.True(t, ver.OK, "crash after request %d: %+v", n, ver.Findings)
	}
}
