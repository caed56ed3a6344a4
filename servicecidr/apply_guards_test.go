package servicecidr_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/internal/kubetest"
	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// notAllocatable is what kube-apiserver answers while the new range is not
// yet usable by its allocator.
func notAllocatable() error {
	return apierrors.NewInternalError(errors.New("failed to allocate a serviceIP: the provided network does not match the current range"))
}

// failFirstCreates makes the first n creates of Service name fail as not
// yet allocatable. The hook runs on an Apply goroutine: it only counts.
func failFirstCreates(cl *servicecidrtest.Cluster, name string, n int) {
	var mu sync.Mutex
	cl.FailServiceCreate(func(s *corev1.Service) error {
		mu.Lock()
		defer mu.Unlock()
		if s.Name != name || n == 0 {
			return nil
		}
		n--
		return notAllocatable()
	})
}

// TestApplyRetriesWithADoublingBackoff: each refused create is retried
// after twice the previous delay, from PollInterval, and the retry events
// count the attempts.
func TestApplyRetriesWithADoublingBackoff(t *testing.T) {
	cl, c := newStory3(t, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	failFirstCreates(cl, "kube-dns", 3)
	rec := &recorder{}
	ao := fastApply(t.TempDir())
	ao.RetryTimeout = 10 * time.Second
	ao.Progress = rec.add
	_, err = c.Apply(context.Background(), p, ao)
	require.NoError(t, err)
	var got []string
	for _, e := range rec.kinds(servicecidr.EventRetry) {
		got = append(got, e.Message[:strings.Index(e.Message, ":")])
	}
	assert.Equal(t, []string{"attempt 1 refused, retrying in 1ms", "attempt 2 refused, retrying in 2ms", "attempt 3 refused, retrying in 4ms"}, got)
}

// TestApplyRetriesAfterTheDefaultPollIntervalWhenUnset: a zero PollInterval
// means the default second between retries, not a busy loop. On
// testing/synctest's clock, so the second is exact and takes no wall time.
func TestApplyRetriesAfterTheDefaultPollIntervalWhenUnset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cl, c := newStory3(t, "v1")
		p, err := c.Plan(context.Background(), story3PlanOptions())
		require.NoError(t, err)
		var mu sync.Mutex
		var tries []time.Time
		cl.FailServiceCreate(func(s *corev1.Service) error {
			if s.Name != "kube-dns" {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if tries = append(tries, time.Now()); len(tries) == 1 {
				return notAllocatable()
			}
			return nil
		})
		rec := &recorder{}
		ao := fastApply(t.TempDir())
		ao.PollInterval = 0
		ao.RetryTimeout = 10 * time.Second
		ao.Progress = rec.add
		_, err = c.Apply(context.Background(), p, ao)
		require.NoError(t, err)
		retries := rec.kinds(servicecidr.EventRetry)
		require.Len(t, retries, 1)
		assert.Contains(t, retries[0].Message, "attempt 1 refused, retrying in 1s:")
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, tries, 2)
		assert.Equal(t, time.Second, tries[1].Sub(tries[0]), "the retry comes the default second after the refusal")
	})
}

// TestApplyWarnsToSetKubeletClusterDNSOnlyWhenTheDNSServiceFallsBack: when
// the DNS Service's planned address is taken during the move, the warning
// says which address kubelet's clusterDNS must now be; another Service
// falling back does not touch clusterDNS and gets no such warning.
func TestApplyWarnsToSetKubeletClusterDNSOnlyWhenTheDNSServiceFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name, addr, warning string
	}{
		{"kube-dns", "172.24.0.10", "the DNS Service kube-system/kube-dns did not get its planned address: 172.24.0.10 was taken meanwhile; given 172.24.0.2; kubelet clusterDNS must be set to 172.24.0.2"},
		{"api", "172.24.0.200", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, c := newStory3(t, "v1")
			p, err := c.Plan(context.Background(), story3PlanOptions())
			require.NoError(t, err)
			var once sync.Once
			var squatErr error
			cl.FailServiceCreate(func(s *corev1.Service) error {
				if s.Name == tc.name {
					once.Do(func() {
						sq := story3Services()[3]
						sq.Namespace, sq.Name, sq.Spec.ClusterIP = "other", "squatter", tc.addr
						_, squatErr = cl.AddService(sq)
					})
				}
				return nil
			})
			res, err := c.Apply(context.Background(), p, fastApply(t.TempDir()))
			require.NoError(t, squatErr)
			require.NoError(t, err)
			if tc.warning == "" {
				assert.Empty(t, res.Warnings)
			} else {
				assert.Equal(t, []string{tc.warning}, res.Warnings)
			}
		})
	}
}

// TestApplyRecordsEveryMoveDoneWithoutWarnings: a run that moves every
// Service records each as done in the journal and warns about nothing.
func TestApplyRecordsEveryMoveDoneWithoutWarnings(t *testing.T) {
	cl, c := newStory3(t, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	dir := t.TempDir()
	res, err := c.Apply(context.Background(), p, fastApply(dir))
	require.NoError(t, err)
	assert.Empty(t, res.Warnings)
	j, err := journal.Open(dir)
	require.NoError(t, err)
	defer j.Close()
	for _, m := range p.Moves {
		var rec struct {
			Phase  string `json:"phase"`
			NewUID string `json:"newUID"`
		}
		ok, err := j.Get("service/"+m.Key(), &rec)
		require.NoError(t, err)
		require.True(t, ok, m.Key())
		live, _ := cl.Service(m.Namespace, m.Name)
		assert.Equal(t, "done", rec.Phase, m.Key())
		assert.Equal(t, string(live.UID), rec.NewUID, m.Key())
	}
}

// TestApplyRefusesAPlanThatSkipsAClusterIPServiceOfTheOldRange: a plan file
// that leaves a ClusterIP Service of the old range out of its moves (in
// skipped) would strand it at the flag change; Apply refuses it and writes
// nothing.
func TestApplyRefusesAPlanThatSkipsAClusterIPServiceOfTheOldRange(t *testing.T) {
	cl, c := newStory3(t, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	var moves []servicecidr.Move
	for _, m := range p.Moves {
		if m.Key() != "shop/api" {
			moves = append(moves, m)
		}
	}
	require.Len(t, moves, len(p.Moves)-1)
	p.Moves = moves
	p.Skipped = append(p.Skipped, servicecidr.Skip{Namespace: "shop", Name: "api", Reason: "edited"})
	_, err = c.Apply(context.Background(), p, fastApply(t.TempDir()))
	require.ErrorIs(t, err, servicecidr.ErrPlanFormat)
	assert.ErrorContains(t, err, "holds 100.64.0.200 in the old range 100.64.0.0/13 and is a ClusterIP Service")
	assert.Empty(t, cl.Writes())
}

// TestApplyRefusesAPlanWhoseOldServiceCIDRIsOutsideFrom: a plan file whose
// old list names a live ServiceCIDR of another range (its CIDRs in the file
// edited to lie inside from) is refused before anything is written: with
// DeleteOld it would be deleted.
func TestApplyRefusesAPlanWhoseOldServiceCIDRIsOutsideFrom(t *testing.T) {
	cl, c := newStory3(t, "v1")
	_, err := cl.Kube.NetworkingV1().ServiceCIDRs().Create(context.Background(), &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.200.0.0/16"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	p.Old = append(p.Old, servicecidr.ObservedServiceCIDR{Name: "other", CIDRs: []netip.Prefix{pfx("100.64.0.0/13")}})
	w := cl.Writes()
	ao := fastApply(t.TempDir())
	ao.DeleteOld = true
	_, err = c.Apply(context.Background(), p, ao)
	require.ErrorIs(t, err, servicecidr.ErrPlanFormat)
	assert.ErrorContains(t, err, "the live ServiceCIDR other holds 10.200.0.0/16, outside from (100.64.0.0/13)")
	assert.Equal(t, w, cl.Writes())
	st, ok := cl.ServiceCIDR("other")
	require.True(t, ok)
	assert.False(t, st.Terminating)
}

// TestApplyDryRunServerReportsTheAcceptedServiceCIDR: a server dry run
// reports the new ServiceCIDR the server accepted, and stops on one it
// refuses.
func TestApplyDryRunServerReportsTheAcceptedServiceCIDR(t *testing.T) {
	for _, refused := range []bool{false, true} {
		t.Run(map[bool]string{false: "accepted", true: "refused"}[refused], func(t *testing.T) {
			cl, c := newStory3(t, "v1")
			p, err := c.Plan(context.Background(), story3PlanOptions())
			require.NoError(t, err)
			if refused {
				cl.Kube.PrependReactor("create", "servicecidrs", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(networkingv1.Resource("servicecidrs"), p.Target.Name, errors.New("quota exceeded"))
				})
			}
			rec := &recorder{}
			_, err = c.Apply(context.Background(), p, servicecidr.ApplyOptions{DryRun: servicecidr.DryRunServer, Progress: rec.add})
			created := rec.kinds(servicecidr.EventServiceCIDRCreated)
			if refused {
				require.Error(t, err)
				assert.ErrorContains(t, err, "quota exceeded")
				assert.Empty(t, created)
				assert.Empty(t, rec.kinds(servicecidr.EventDryRunServiceMove), "no Service is tried after the refusal")
				return
			}
			require.NoError(t, err)
			require.Len(t, created, 1)
			assert.Equal(t, "server accepted the ServiceCIDR (dry run, not stored)", created[0].Message)
		})
	}
}

// TestApplyJournalsTheOldServiceCIDRWithoutManagedFields: the record of an
// old ServiceCIDR is the live object without its managedFields.
func TestApplyJournalsTheOldServiceCIDRWithoutManagedFields(t *testing.T) {
	cl, c := newStory3(t, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	old, err := cl.Kube.NetworkingV1().ServiceCIDRs().Get(context.Background(), "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	old.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-apiserver", Operation: metav1.ManagedFieldsOperationUpdate}}
	cl.Kube.PrependReactor("get", "servicecidrs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() != "kubernetes" {
			return false, nil, nil
		}
		return true, old.DeepCopy(), nil
	})
	dir := t.TempDir()
	ao := fastApply(dir)
	ao.DeleteOld = true
	_, err = c.Apply(context.Background(), p, ao)
	require.NoError(t, err)
	j, err := journal.Open(dir)
	require.NoError(t, err)
	defer j.Close()
	var rec journaledServiceCIDR
	ok, err := j.Get("servicecidr/kubernetes", &rec)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, old.UID, rec.Object.UID)
	assert.Equal(t, []string{"100.64.0.0/13"}, rec.Object.Spec.CIDRs)
	assert.Empty(t, rec.Object.ManagedFields)
}

// TestApplyRerunsWhileDefaultKubernetesIsDeletedAndTheOldRangeIsGone: once
// the old ServiceCIDR is gone and default/kubernetes deleted (kube-apiserver
// slow to recreate it), nothing lies in from any more; the deleted
// Service's old address, from the plan or from the journal, still says from
// was the range in use, and a rerun is not refused because a Service of a
// third range stays where it is.
func TestApplyRerunsWhileDefaultKubernetesIsDeletedAndTheOldRangeIsGone(t *testing.T) {
	ctx := context.Background()
	o := story3Options("v1")
	o.ServiceCIDRs = append(o.ServiceCIDRs, servicecidrtest.InitialServiceCIDR{Name: "extra", CIDRs: []string{"10.50.0.0/16"}})
	legacy := story3Services()[3]
	legacy.Name, legacy.Spec.ClusterIP = "legacy", "10.50.0.5"
	o.Services = append(o.Services, legacy)
	o.APIServerRange = "172.24.0.0/15" // every kube-apiserver runs with the new range ...
	cl := servicecidrtest.MustNew(o)
	cl.HoldKubernetesService(true) // ... but does not recreate default/kubernetes yet
	c := connect(t, cl)
	po := story3PlanOptions()
	po.IncludeLoadBalancers = true
	p, err := c.Plan(ctx, po)
	require.NoError(t, err)
	require.NotNil(t, p.Kubernetes)
	dir := t.TempDir()
	ao := fastApply(dir)
	ao.DeleteOld, ao.DeleteKubernetesService = true, true
	ao.DrainTimeout, ao.ReadyTimeout = time.Second, 50*time.Millisecond
	res, err := c.Apply(ctx, p, ao)
	require.NoError(t, err)
	require.Equal(t, "deleted; kube-apiserver has not recreated it yet", res.Kubernetes)
	require.Len(t, res.Old, 1)
	require.Equal(t, "ServiceCIDR kubernetes is gone", res.Old[0].Summary)

	rerun := func(t *testing.T, p *servicecidr.Plan, dir string) {
		t.Helper()
		ao := fastApply(dir)
		ao.ReadyTimeout = 50 * time.Millisecond
		res, err := c.Apply(ctx, p, ao)
		require.NoError(t, err)
		assert.Len(t, res.AlreadyMoved, len(p.Moves))
		assert.Equal(t, "deleted; kube-apiserver has not recreated it yet", res.Kubernetes)
	}
	t.Run("the plan knows it", func(t *testing.T) {
		rerun(t, p, t.TempDir()) // another machine: no journal
	})
	t.Run("the journal knows it", func(t *testing.T) {
		q := *p
		q.Kubernetes = nil
		rerun(t, &q, dir)
	})
	t.Run("the journal's record has no address", func(t *testing.T) {
		// The plan's address stands.
		j, err := journal.Open(dir)
		require.NoError(t, err)
		var rec map[string]any
		ok, err := j.Get("kubernetes/default/kubernetes", &rec)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "pending", rec["phase"])
		delete(rec, "oldIPs")
		require.NoError(t, j.Put("kubernetes/default/kubernetes", rec))
		require.NoError(t, j.Close())
		rerun(t, p, dir)
	})
}

// TestRecoverWithAClusterJournalNeedsALock: only the holder of the lock may
// write the cluster journal.
func TestRecoverWithAClusterJournalNeedsALock(t *testing.T) {
	cl, c := newStory3(t, "v1")
	cj := &servicecidr.ClusterJournal{Namespace: "cidrshift"}
	ao := fastApply(t.TempDir())
	ao.ClusterJournal = cj
	_, err := c.Recover(context.Background(), ao)
	require.ErrorIs(t, err, servicecidr.ErrInvalid)
	assert.ErrorContains(t, err, "a cluster journal needs a Lock")
	ao.Lock = &kubetest.Lock{ChecksLeft: -1}
	res, err := c.Recover(context.Background(), ao)
	require.NoError(t, err)
	assert.Empty(t, res.Moved)
	assert.Empty(t, cl.Writes())
}

// denyEveryReview makes every later access review of cl answer denied.
func denyEveryReview(cl *servicecidrtest.Cluster) {
	cl.Kube.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		r.Status.Allowed = false
		return true, r, nil
	})
}

// TestRecoverAsksForWhatItsJournalNeeds: Recover asks to get Services, and to
// create them only when its journal has Service records (a journal with
// only default/kubernetes's record recreates nothing).
func TestRecoverAsksForWhatItsJournalNeeds(t *testing.T) {
	get := access.Check{Verb: "get", Resource: "services"}
	create := access.Check{Verb: "create", Resource: "services"}
	for _, tc := range []struct {
		name         string
		keepServices bool
		want         []access.Check
	}{
		{"Service records", true, []access.Check{get, create}},
		{"only default/kubernetes", false, []access.Check{get}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, _, dir := killedAfterKubernetesDelete(t)
			if !tc.keepServices {
				j, err := journal.Open(dir)
				require.NoError(t, err)
				keys, err := j.Keys("service/")
				require.NoError(t, err)
				for _, k := range keys {
					require.NoError(t, j.Delete(k))
				}
				require.NoError(t, j.Close())
			}
			denyEveryReview(cl)
			c := connect(t, cl)
			_, err := c.Recover(context.Background(), fastApply(dir))
			var denied *access.DeniedError
			require.ErrorAs(t, err, &denied)
			assert.Equal(t, tc.want, denied.Denied)
		})
	}
}

// TestRecoverReportsDefaultKubernetesWhateverTheNumberOfServiceRecords: the
// journal of a run that moved one Service and then deleted
// default/kubernetes (one Service record, one default/kubernetes record) is
// not taken for an empty one: Recover reports default/kubernetes absent.
func TestRecoverReportsDefaultKubernetesWhateverTheNumberOfServiceRecords(t *testing.T) {
	cl, _, dir := killedAfterKubernetesDelete(t)
	j, err := journal.Open(dir)
	require.NoError(t, err)
	keys, err := j.Keys("service/")
	require.NoError(t, err)
	require.Len(t, keys, 3)
	for _, k := range keys[1:] {
		require.NoError(t, j.Delete(k))
	}
	require.NoError(t, j.Close())
	c := connect(t, cl)
	res, err := c.Recover(context.Background(), fastApply(dir))
	require.NoError(t, err)
	assert.Contains(t, res.Kubernetes, "absent: deleted by an interrupted run")
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "Service default/kubernetes does not exist: an interrupted run deleted it")
	assert.Contains(t, strings.Join(res.Warnings, "\n"), "check that every kube-apiserver is running, with --service-cluster-ip-range=172.24.0.0/15;",
		"the journal's target range is named")
}

// TestApplyKeepsRetryingTheCreateForTheWholeRetryTimeout: once a Service is
// deleted its create is retried until RetryTimeout has passed, and the
// attempt started before then is not cut short: the create's context lasts
// a PollInterval longer. The API server refuses the address for 5.5 s;
// with PollInterval 2s and RetryTimeout 7s the attempts are at 0, 2 and
// 6 s, and the third gets through. With the context a PollInterval
// shorter, the wait ends at 5 s and the third attempt is refused (the fake
// ignores the context). On testing/synctest's clock: the times are exact
// and take no wall time.
func TestApplyKeepsRetryingTheCreateForTheWholeRetryTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cl, c := newStory3(t, "v1")
		p, err := c.Plan(context.Background(), story3PlanOptions())
		require.NoError(t, err)
		var mu sync.Mutex
		var first time.Time
		var tries []time.Duration
		cl.FailServiceCreate(func(s *corev1.Service) error {
			if s.Name != "kube-dns" {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if first.IsZero() {
				first = time.Now()
			}
			tries = append(tries, time.Since(first))
			if time.Since(first) < 5500*time.Millisecond {
				return notAllocatable()
			}
			return nil
		})
		rec := &recorder{}
		ao := fastApply(t.TempDir())
		ao.PollInterval, ao.RetryTimeout = 2*time.Second, 7*time.Second
		ao.Progress = rec.add
		_, err = c.Apply(context.Background(), p, ao)
		require.NoError(t, err)
		assert.Len(t, rec.kinds(servicecidr.EventRetry), 2)
		mu.Lock()
		assert.Equal(t, []time.Duration{0, 2 * time.Second, 6 * time.Second}, tries)
		mu.Unlock()
		dns, ok := cl.Service("kube-system", "kube-dns")
		require.True(t, ok)
		assert.Equal(t, []string{"172.24.0.10"}, dns.Spec.ClusterIPs)
	})
}
