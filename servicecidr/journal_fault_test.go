package servicecidr_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/kubetest"
	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// TestApplyDeletesNothingItCouldNotJournal fails the write of the cluster
// journal at each of a run's journal writes in turn (the ConfigMap write
// answered with an error). Whatever write fails, no Service, no
// default/kubernetes and no ServiceCIDR is deleted unless its record is in
// the cluster journal when the delete is sent, and a run resumed with the
// same journals finishes with every Service moved and intact.
func TestApplyDeletesNothingItCouldNotJournal(t *testing.T) {
	ref := journalFaultRun(t, -1)
	require.NoError(t, ref.err)
	require.Empty(t, ref.unjournaled)
	require.Len(t, ref.deletes, 6, "the old ServiceCIDR, four Services and default/kubernetes")
	stopped := map[string]bool{}
	for n := range ref.writes {
		r := journalFaultRun(t, n)
		assert.Empty(t, r.unjournaled, "journal write %d of %d failed: deletes sent without their record", n+1, ref.writes)
		if r.err != nil {
			// The run stops at the delete whose record it could not write.
			assert.ErrorContains(t, r.err, "etcd: request timed out", "journal write %d of %d failed", n+1, ref.writes)
			what, _, ok := strings.Cut(strings.TrimPrefix(r.err.Error(), "journaling "), " before deleting it: ")
			require.True(t, ok, "journal write %d of %d failed: %v", n+1, ref.writes, r.err)
			kind, name, _ := strings.Cut(what, " ")
			key := map[string]string{"Service": "service/", "ServiceCIDR": "servicecidr/"}[kind] + name
			if name == servicecidr.KubernetesService {
				key = "kubernetes/" + name
			}
			assert.NotContains(t, r.deletes, key, "journal write %d of %d failed", n+1, ref.writes)
			assert.False(t, stopped[key], "two writes journal the delete of %s", key)
			stopped[key] = true
		} else {
			// A record written after its delete's create, or the run's
			// end: the run goes on and says so.
			assert.Contains(t, strings.Join(r.res.Warnings, "\n"), "journal", "journal write %d of %d failed", n+1, ref.writes)
		}
		res, err := r.c.Apply(context.Background(), r.p, r.opts(r.dir))
		require.NoError(t, err, "the run resumed after journal write %d of %d failed (first run: %v)", n+1, ref.writes, r.err)
		assertMovedIntact(t, r.cl, r.before, r.p)
		assert.Len(t, r.cl.Services(), len(r.before), "journal write %d of %d failed: no Service lost or duplicated", n+1, ref.writes)
		assert.NotContains(t, strings.Join(res.Warnings, "\n"), "not recreated")
	}
	assert.Len(t, stopped, len(ref.deletes), "each delete's own journal write, failed, stops the run before it: %v", stopped)
}

type journalFault struct {
	cl          *servicecidrtest.Cluster
	c           *servicecidr.Client
	p           *servicecidr.Plan
	before      map[string]corev1.Service
	dir         string
	writes      int
	unjournaled []string
	deletes     []string
	res         *servicecidr.Result
	err         error
}

func (r *journalFault) opts(dir string) servicecidr.ApplyOptions {
	o := faultApply(dir)
	o.Concurrency = 1 // the same order of writes in every run
	o.Lock = &kubetest.Lock{ChecksLeft: -1}
	o.ClusterJournal = &servicecidr.ClusterJournal{Namespace: "cidrshift"}
	return o
}

// journalFaultRun applies story 3 with its cluster journal's write number
// failAt (counted from 0; -1: none) failing, and returns what happened.
func journalFaultRun(t *testing.T, failAt int) *journalFault {
	t.Helper()
	r := &journalFault{cl: servicecidrtest.MustNew(faultOptions("v1")), dir: t.TempDir()}
	kubetest.EnforceCAS(r.cl.Kube, "configmaps")
	r.c = connect(t, r.cl)
	po := story3PlanOptions()
	po.IncludeLoadBalancers = true
	var err error
	r.p, err = r.c.Plan(context.Background(), po)
	require.NoError(t, err)
	r.before = servicesByKey(r.cl)

	var mu sync.Mutex
	fault := func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		r.writes++
		if r.writes-1 == failAt {
			return true, nil, errors.New("etcd: request timed out")
		}
		return false, nil, nil
	}
	r.cl.Kube.PrependReactor("create", "configmaps", fault)
	r.cl.Kube.PrependReactor("update", "configmaps", fault)
	journaled := func(key string) func(a k8stesting.Action) (bool, runtime.Object, error) {
		return func(a k8stesting.Action) (bool, runtime.Object, error) {
			d := a.(k8stesting.DeleteActionImpl)
			k := key + d.GetName()
			if key == "service/" {
				k = key + d.GetNamespace() + "/" + d.GetName()
				if d.GetNamespace()+"/"+d.GetName() == servicecidr.KubernetesService {
					k = "kubernetes/" + servicecidr.KubernetesService
				}
			}
			_, ok, err := clusterRecord(r.cl.Kube, k)
			mu.Lock()
			r.deletes = append(r.deletes, k)
			switch {
			case err != nil:
				r.unjournaled = append(r.unjournaled, k+": "+err.Error())
			case !ok:
				r.unjournaled = append(r.unjournaled, k+": not in the cluster journal")
			}
			mu.Unlock()
			return false, nil, nil
		}
	}
	r.cl.Kube.PrependReactor("delete", "services", journaled("service/"))
	r.cl.Dynamic.PrependReactor("delete", "servicecidrs", journaled("servicecidr/"))
	r.cl.Kube.PrependReactor("delete", "servicecidrs", journaled("servicecidr/"))
	r.res, r.err = r.c.Apply(context.Background(), r.p, r.opts(r.dir))
	return r
}
