package servicecidr_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/internal/kubetest"
	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// A run that loses its lock stops before its next delete, with the Service
// it was about to move untouched; another machine (another journal
// directory) then resumes from the journal kept in the cluster and finishes.
// The old ServiceCIDR is in the journal, local and in the cluster, before
// its delete is sent.
func TestApplyStopsWhenTheLockIsLostAndResumesFromTheClusterJournal(t *testing.T) {
	ctx := context.Background()
	cl := servicecidrtest.MustNew(story3Options("v1"))
	kubetest.EnforceCAS(cl.Kube, "configmaps")
	c := connect(t, cl)
	p, err := c.Plan(ctx, story3PlanOptions())
	require.NoError(t, err)
	require.Len(t, p.Old, 1)
	old := p.Old[0]
	before := servicesByKey(cl)

	var mu sync.Mutex
	var deletes []string
	cl.Kube.PrependReactor("delete", "servicecidrs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteActionImpl).GetName()
		rec, err := clusterServiceCIDRRecord(cl.Kube, name)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			deletes = append(deletes, name+": "+err.Error())
		case rec == nil:
			deletes = append(deletes, name+": not in the cluster journal before its delete")
		default:
			deletes = append(deletes, name+": journaled "+rec.ServiceCIDR+" "+rec.APIVersion+" uid "+string(rec.Object.UID))
		}
		return false, nil, nil
	})

	lock := &kubetest.Lock{ChecksLeft: 2} // the old ServiceCIDR's delete, then one Service
	o := fastApply(t.TempDir())
	o.Concurrency = 1
	o.Lock = lock
	o.DeleteOld = true
	o.ClusterJournal = &servicecidr.ClusterJournal{Namespace: "cidrshift"}
	_, err = c.Apply(ctx, p, o)
	require.ErrorIs(t, err, kubetest.ErrLockLost)
	assert.ErrorContains(t, err, "the run no longer holds its lock")
	assert.False(t, lock.Held(), "released")
	mu.Lock()
	assert.Equal(t, []string{old.Name + ": journaled " + old.Name + " networking.k8s.io/v1 uid " + string(old.UID)}, deletes,
		"the live ServiceCIDR is in the cluster journal before its delete")
	mu.Unlock()
	sc, ok := cl.ServiceCIDR(old.Name)
	require.True(t, ok)
	assert.True(t, sc.Terminating, "its delete was sent")
	j, err := journal.Open(o.JournalDir)
	require.NoError(t, err)
	var local journaledServiceCIDR
	found, err := j.Get("servicecidr/"+old.Name, &local)
	require.NoError(t, j.Close())
	require.NoError(t, err)
	require.True(t, found, "the local journal has the ServiceCIDR too")
	assert.Equal(t, []string{"100.64.0.0/13"}, local.Object.Spec.CIDRs)
	moved := 0
	for _, m := range p.Moves {
		live, ok := cl.Service(m.Namespace, m.Name)
		require.True(t, ok, "%s is never lost", m.Key())
		if live.UID != before[m.Key()].UID {
			moved++
		}
	}
	assert.Equal(t, 1, moved, "one Service moved before the lock was lost, no delete after")
	cms, err := cl.Kube.CoreV1().ConfigMaps("cidrshift").List(ctx, metav1.ListOptions{LabelSelector: "journal.cidrshift.io/scope=" + servicecidr.LockScope + ",journal.cidrshift.io/state=open"})
	require.NoError(t, err)
	require.NotEmpty(t, cms.Items, "the run's records are in the cluster")

	o2 := fastApply(t.TempDir())
	o2.Lock = &kubetest.Lock{ChecksLeft: -1}
	o2.ClusterJournal = o.ClusterJournal
	res, err := c.Apply(ctx, p, o2)
	require.NoError(t, err)
	assert.Len(t, res.AlreadyMoved, 1)
	assert.Len(t, res.Moved, len(p.Moves)-1)
	assertMovedIntact(t, cl, before, p)
	cms, err = cl.Kube.CoreV1().ConfigMaps("cidrshift").List(ctx, metav1.ListOptions{LabelSelector: "journal.cidrshift.io/state=open"})
	require.NoError(t, err)
	assert.Empty(t, cms.Items, "a finished run leaves no open records")

	o3 := fastApply(t.TempDir())
	o3.ClusterJournal = o.ClusterJournal
	_, err = c.Apply(ctx, p, o3)
	require.ErrorIs(t, err, servicecidr.ErrInvalid, "a cluster journal without a lock is refused")
}

// journaledServiceCIDR is the part of a ServiceCIDR's journal record the
// tests read.
type journaledServiceCIDR struct {
	ServiceCIDR string `json:"serviceCIDR"`
	APIVersion  string `json:"apiVersion"`
	Object      struct {
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			CIDRs []string `json:"cidrs"`
		} `json:"spec"`
	} `json:"object"`
}

// clusterServiceCIDRRecord reads the record of ServiceCIDR name from the open
// run of the cluster journal in namespace cidrshift, nil when there is none.
// A reactor calls it, so it reads the tracker and returns its error.
func clusterServiceCIDRRecord(c *fake.Clientset, name string) (*journaledServiceCIDR, error) {
	v, ok, err := clusterRecord(c, "servicecidr/"+name)
	if !ok || err != nil {
		return nil, err
	}
	var rec journaledServiceCIDR
	if err := json.Unmarshal([]byte(v), &rec); err != nil {
		return nil, fmt.Errorf("record of ServiceCIDR %s: %w", name, err)
	}
	return &rec, nil
}

// clusterRecord returns the record at key in the open run of the cluster
// journal in namespace cidrshift. A reactor calls it, so it reads the
// tracker and returns its error.
func clusterRecord(c *fake.Clientset, key string) (string, bool, error) {
	list, err := c.Tracker().List(corev1.SchemeGroupVersion.WithResource("configmaps"), corev1.SchemeGroupVersion.WithKind("ConfigMap"), "cidrshift")
	if err != nil {
		return "", false, err
	}
	ek := strings.ReplaceAll(key, "/", "_2f") // the journal's encoding of the keys used here
	for _, cm := range list.(*corev1.ConfigMapList).Items {
		if v, ok := cm.Data[ek]; ok && cm.Labels[journal.LabelState] == journal.StateOpen {
			return v, true, nil
		}
	}
	return "", false, nil
}

// Create, AddFamily and Delete take the lock of their Lock option around
// their write and release it after; a lock the run no longer holds is
// refused before anything is sent, with an error naming it. Dry runs take
// no lock.
func TestWritesTakeAndCheckTheLock(t *testing.T) {
	ctx := context.Background()
	cl := servicecidrtest.MustNew(servicecidrtest.Options{ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}}})
	c := connect(t, cl)
	lost := func() *kubetest.Lock {
		return &kubetest.Lock{Name: "kube-system/" + servicecidr.LockScope, ChecksLeft: 0}
	}
	calls := []struct {
		what  string
		write func(l servicecidr.Locker, dry bool) error
	}{
		{"not creating ServiceCIDR extra", func(l servicecidr.Locker, dry bool) error {
			_, err := c.Create(ctx, "extra", []netip.Prefix{pfx("10.100.0.0/16")}, servicecidr.WriteOptions{Lock: l, DryRun: dry})
			return err
		}},
		{"not adding fd00:10:100::/108 to ServiceCIDR extra", func(l servicecidr.Locker, dry bool) error {
			_, err := c.AddFamily(ctx, "extra", pfx("fd00:10:100::/108"), servicecidr.WriteOptions{Lock: l, DryRun: dry})
			return err
		}},
		{"not deleting ServiceCIDR extra", func(l servicecidr.Locker, dry bool) error {
			return c.Delete(ctx, "extra", servicecidr.DeleteOptions{Lock: l, DryRun: dry})
		}},
	}
	for _, call := range calls {
		writes := len(cl.Writes())
		l := lost()
		err := call.write(l, false)
		require.ErrorIs(t, err, kubetest.ErrLockLost, call.what)
		assert.ErrorContains(t, err, call.what+": the run no longer holds its lock: test lock lost: lease kube-system/cidrshift-servicecidr")
		assert.Len(t, cl.Writes(), writes, "%s: nothing sent", call.what)
		assert.False(t, l.Held(), "%s: released", call.what)

		require.NoError(t, call.write(lost(), true), "%s: a dry run takes no lock", call.what)

		l = &kubetest.Lock{ChecksLeft: 1}
		require.NoError(t, call.write(l, false), call.what)
		assert.Len(t, cl.Writes(), writes+1, "%s: written", call.what)
		assert.False(t, l.Held(), "%s: released after the write", call.what)
		assert.Zero(t, l.ChecksLeft, "%s: checked once", call.what)
	}
	st, ok := cl.ServiceCIDR("extra")
	assert.True(t, !ok || st.Terminating, "created, made dual-stack, then deleted")
}
