package servicecidr_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// lostKubeDNS runs story 3 with every Service create refused, so the run
// stops with kube-dns deleted and its record pending in the journal dir it
// returns, as a crash between the delete and the create leaves it.
func lostKubeDNS(t *testing.T) (*servicecidrtest.Cluster, *servicecidr.Client, string) {
	t.Helper()
	cl, c := newStory3(t, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	cl.FailServiceCreate(func(*corev1.Service) error {
		return apierrors.NewInternalError(errors.New("failed to allocate a serviceIP: the provided network does not match the current range"))
	})
	dir := t.TempDir()
	_, err = c.Apply(context.Background(), p, fastApply(dir))
	require.ErrorIs(t, err, servicecidr.ErrServiceLost)
	_, ok := cl.Service("kube-system", "kube-dns")
	require.False(t, ok, "the run left kube-dns deleted")
	cl.FailServiceCreate(nil)
	return cl, c, dir
}

// kubeDNSRecord reads kube-dns's journal record as JSON fields.
func kubeDNSRecord(t *testing.T, dir string) map[string]any {
	t.Helper()
	j, err := journal.Open(dir)
	require.NoError(t, err)
	defer func() { require.NoError(t, j.Close()) }()
	var rec map[string]any
	ok, err := j.Get("service/kube-system/kube-dns", &rec)
	require.NoError(t, err)
	require.True(t, ok, "kube-dns's record is in the journal")
	return rec
}

// A pending record whose Service was created again by someone else, at
// other addresses, is not the run's to finish: Recover and Apply refuse it
// and change nothing; the Service and the record stay as they are.
func TestRecoverLeavesAServiceRecreatedBySomeoneElse(t *testing.T) {
	cl, c, dir := lostKubeDNS(t)
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns"},
		Spec: corev1.ServiceSpec{ClusterIP: "172.25.0.99", Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}
	theirs, err := cl.AddService(s)
	require.NoError(t, err)
	rec := kubeDNSRecord(t, dir)
	w := cl.Writes()

	_, err = c.Recover(context.Background(), fastApply(dir))
	require.ErrorIs(t, err, servicecidr.ErrStalePlan)
	assert.ErrorContains(t, err, "Service kube-system/kube-dns was recreated by someone else (uid "+string(theirs.UID)+", clusterIPs 172.25.0.99)")
	assert.ErrorContains(t, err, "expected 172.24.0.10; check it, then remove the record")

	again, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	_, err = c.Apply(context.Background(), again, fastApply(dir))
	require.ErrorIs(t, err, servicecidr.ErrStalePlan, "Apply resumes the journal first, and refuses it too")

	assert.Equal(t, w, cl.Writes(), "nothing is written")
	live, ok := cl.Service("kube-system", "kube-dns")
	require.True(t, ok)
	assert.Equal(t, theirs.UID, live.UID)
	assert.Equal(t, []string{"172.25.0.99"}, live.Spec.ClusterIPs)
	assert.Equal(t, rec, kubeDNSRecord(t, dir), "the record stays for the operator")
}

// A pending record without the object to create (edited, or written by
// something else) is refused before any request: there is nothing to
// recreate the Service from.
func TestRecoverRefusesARecordWithoutTheObjectToCreate(t *testing.T) {
	cl, c, dir := lostKubeDNS(t)
	rec := kubeDNSRecord(t, dir)
	delete(rec, "desired")
	j, err := journal.Open(dir)
	require.NoError(t, err)
	require.NoError(t, j.Put("service/kube-system/kube-dns", rec))
	require.NoError(t, j.Close())
	w := cl.Writes()

	_, err = c.Recover(context.Background(), fastApply(dir))
	assert.ErrorContains(t, err, `record "service/kube-system/kube-dns": no desired object; remove the record after checking Service kube-system/kube-dns by hand`)
	assert.Equal(t, w, cl.Writes(), "nothing is written")
	_, ok := cl.Service("kube-system", "kube-dns")
	assert.False(t, ok, "nothing was created")
}

// A pending record whose Service cannot be read is not guessed at: the
// run stops with the read's error, and creates nothing.
func TestRecoverStopsWhenThePendingServiceCannotBeRead(t *testing.T) {
	cl, c, dir := lostKubeDNS(t)
	cl.Kube.PrependReactor("get", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "kube-dns" {
			return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
		}
		return false, nil, nil
	})
	w := cl.Writes()

	_, err := c.Recover(context.Background(), fastApply(dir))
	require.ErrorContains(t, err, "reading Service kube-system/kube-dns to resume it: etcd leader changed")
	assert.True(t, apierrors.IsServiceUnavailable(err), "the read's error is wrapped: %v", err)
	assert.Equal(t, w, cl.Writes(), "nothing is written")
	assert.Equal(t, "pending", kubeDNSRecord(t, dir)["phase"], "the record stays pending")
}

// A create that kube-apiserver carried out but answered with a timeout is
// retried; the retry's AlreadyExists, for a Service at the addresses the
// run asked for, is the run's own create: the run goes on with it and
// creates no second one.
func TestApplyTakesACreateThatTimedOutAfterItWasDone(t *testing.T) {
	cl, c := newStory3(t, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	// The hook runs on Apply's goroutines: it records, the test asserts.
	var once bool
	var done *corev1.Service
	var doneErr error
	cl.FailServiceCreate(func(s *corev1.Service) error {
		if once {
			return nil
		}
		once = true
		done, doneErr = cl.AddService(s.DeepCopy())
		return apierrors.NewTimeoutError("the create is done, its answer timed out", 1)
	})
	rec := &recorder{}
	o := fastApply(t.TempDir())
	o.Progress = rec.add
	res, err := c.Apply(context.Background(), p, o)
	require.NoError(t, err)
	require.NoError(t, doneErr)
	require.NotNil(t, done, "a create timed out after it was done")
	name := done.Namespace + "/" + done.Name
	assert.Len(t, rec.kinds(servicecidr.EventRetry), 1, "the timed-out create is retried once")
	live, ok := cl.Service(done.Namespace, done.Name)
	require.True(t, ok)
	assert.Equal(t, done.UID, live.UID, "%s is the one the timed-out create made", name)
	var moved []string
	for _, m := range res.Moved {
		moved = append(moved, m.Service)
		if m.Service == name {
			assert.Equal(t, done.UID, m.NewUID, "the run reports the Service its create made")
		}
	}
	assert.Contains(t, moved, name)
	assert.Len(t, res.Moved, len(p.Moves))
}

// Someone else's Service of that name, created between the run's delete and
// its create, is not taken for the run's: the run stops on it, Service lost,
// with its record pending, and never deletes or changes it.
func TestApplyStopsAtAServiceOfItsNameCreatedBySomeoneElse(t *testing.T) {
	cl, c := newStory3(t, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	var theirs *corev1.Service
	var theirsErr error
	cl.FailServiceCreate(func(s *corev1.Service) error {
		if theirs == nil && theirsErr == nil {
			other := s.DeepCopy()
			other.Spec.ClusterIP, other.Spec.ClusterIPs = "", nil
			theirs, theirsErr = cl.AddService(other)
		}
		return nil
	})
	dir := t.TempDir()
	_, err = c.Apply(context.Background(), p, fastApply(dir))
	require.NoError(t, theirsErr)
	require.NotNil(t, theirs)
	require.ErrorIs(t, err, servicecidr.ErrServiceLost)
	assert.True(t, apierrors.IsAlreadyExists(err), "the create's answer is kept: %v", err)
	live, ok := cl.Service(theirs.Namespace, theirs.Name)
	require.True(t, ok)
	assert.Equal(t, theirs.UID, live.UID, "their Service stays")
	assert.Equal(t, theirs.Spec.ClusterIPs, live.Spec.ClusterIPs)
}
