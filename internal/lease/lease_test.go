package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/kubetest"
)

const ns, name = "kube-system", ScopeNodeCIDR

func newClient(objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	kubetest.EnforceCAS(c, "leases")
	return c
}

func newLease(t *testing.T, c *fake.Clientset, opts Options) *Lease {
	t.Helper()
	if opts.Name == "" {
		opts.Name = name
	}
	l, err := New(c, opts)
	require.NoError(t, err)
	return l
}

func getLease(t *testing.T, c *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := c.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return l
}

func to[T any](v T) *T { return &v }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func holderOf(t *testing.T, c *fake.Clientset) string {
	t.Helper()
	return deref(getLease(t, c).Spec.HolderIdentity)
}

// heldLease is a Lease object held by holder, renewed at renewed.
func heldLease(holder string, renewed time.Time, seconds int32, labels map[string]string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, ResourceVersion: "3"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       to(holder),
			LeaseDurationSeconds: to(seconds),
			AcquireTime:          &metav1.MicroTime{Time: renewed.Add(-time.Hour)},
			RenewTime:            &metav1.MicroTime{Time: renewed},
			LeaseTransitions:     to(int32(4)),
		},
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	c := newClient()
	for _, tc := range []struct {
		opts Options
		msg  string
	}{
		{Options{}, `name ""`},
		{Options{Name: "Bad_Name"}, `name "Bad_Name"`},
		{Options{Name: name, Namespace: "kube.system"}, `namespace "kube.system"`},
		{Options{Name: name, Duration: 1500 * time.Millisecond}, "duration 1.5s: want whole seconds, at least 1s"},
		{Options{Name: name, Duration: -time.Second}, "duration -1s"},
	} {
		_, err := New(c, tc.opts)
		require.ErrorIs(t, err, ErrInvalid)
		assert.ErrorContains(t, err, tc.msg)
	}
	l, err := New(c, Options{Name: name})
	require.NoError(t, err)
	assert.Equal(t, "kube-system/"+name, l.String())
	assert.Regexp(t, `^.+@.+/\d+$`, l.Holder())
	assert.ErrorIs(t, l.Check(), ErrNotHeld)
}

// The first run creates the Lease, holds and renews it, and its release
// clears the holder so the next run takes it at once.
func TestLockHoldsRenewsAndReleases(t *testing.T) {
	c := newClient()
	a := newLease(t, c, Options{Identity: "alice@laptop/41", Duration: time.Second})
	release, err := a.Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, a.Check())
	l := getLease(t, c)
	assert.Equal(t, "alice@laptop/41", *l.Spec.HolderIdentity)
	assert.Equal(t, int32(1), *l.Spec.LeaseDurationSeconds)
	assert.Contains(t, l.Labels, LabelProcessNamespace)
	first := l.Spec.RenewTime.Time

	// Eventually runs the condition on its own goroutine: no require in it.
	require.Eventually(t, func() bool {
		l, err := c.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime.After(first)
	}, 2*time.Second, 20*time.Millisecond, "renewed every fifth of the duration")
	time.Sleep(1200 * time.Millisecond) // longer than the duration: still held, because renewed
	require.NoError(t, a.Check())

	release()
	release() // idempotent
	assert.Equal(t, "", holderOf(t, c), "release clears the holder")
	assert.ErrorIs(t, a.Check(), ErrNotHeld)

	b := newLease(t, c, Options{Identity: "bob@desk/7"})
	release, err = b.Lock(context.Background())
	require.NoError(t, err, "a released lease is taken at once")
	assert.Equal(t, "bob@desk/7", holderOf(t, c))
	assert.Equal(t, int32(1), *getLease(t, c).Spec.LeaseTransitions)
	release()
}

// A second holder is refused at once, with an error naming the holder and
// when the Lease expires, even with Steal.
func TestSecondHolderRefused(t *testing.T) {
	c := newClient()
	a := newLease(t, c, Options{Identity: "alice@laptop/41"})
	release, err := a.Lock(context.Background())
	require.NoError(t, err)
	defer release()
	expires := getLease(t, c).Spec.RenewTime.Add(DefaultDuration)

	for _, steal := range []bool{false, true} {
		b := newLease(t, c, Options{Identity: "bob@desk/7", Steal: steal})
		start := time.Now()
		_, err = b.Lock(context.Background())
		require.Less(t, time.Since(start), time.Second, "refused at once, not after waiting")
		require.ErrorIs(t, err, ErrHeld)
		var held *HeldError
		require.ErrorAs(t, err, &held)
		assert.Equal(t, "alice@laptop/41", held.Holder)
		assert.Equal(t, "kube-system/"+name, held.Lease)
		assert.WithinDuration(t, expires, held.Expires, time.Millisecond)
		assert.False(t, held.Expired)
		assert.Contains(t, err.Error(), "held by alice@laptop/41 until "+expires.UTC().Format(time.RFC3339))
		if steal {
			assert.Contains(t, err.Error(), "stealing takes over only an expired lease")
		}
		assert.ErrorIs(t, b.Check(), ErrNotHeld)
	}
	assert.Equal(t, "alice@laptop/41", holderOf(t, c), "the holder keeps it")
	require.NoError(t, a.Check())
}

// An expired Lease is taken over only with Steal.
func TestStealOnlyExpired(t *testing.T) {
	expiredAt := time.Now().Add(-90 * time.Second)
	c := newClient(heldLease("carol@gone/9", expiredAt.Add(-60*time.Second), 60, nil))

	b := newLease(t, c, Options{Identity: "bob@desk/7"})
	_, err := b.Lock(context.Background())
	var held *HeldError
	require.ErrorAs(t, err, &held)
	assert.True(t, held.Expired)
	assert.Contains(t, err.Error(), "held by carol@gone/9, which stopped renewing it: it expired at "+expiredAt.UTC().Format(time.RFC3339))
	assert.Contains(t, err.Error(), "--steal-lock")
	assert.Equal(t, "carol@gone/9", holderOf(t, c))

	s := newLease(t, c, Options{Identity: "bob@desk/7", Steal: true})
	release, err := s.Lock(context.Background())
	require.NoError(t, err)
	l := getLease(t, c)
	assert.Equal(t, "bob@desk/7", *l.Spec.HolderIdentity)
	assert.Equal(t, int32(5), *l.Spec.LeaseTransitions)
	release()
}

// Two runs starting together on a free Lease: exactly one gets it (the
// compare-and-swap of the update decides), the other is refused naming it.
func TestConcurrentLockOneWins(t *testing.T) {
	for round := range 20 {
		c := newClient(heldLease("", time.Now().Add(-time.Hour), 1, nil))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		releases := make([]func(), 2)
		start := make(chan struct{})
		for i := range 2 {
			l := newLease(t, c, Options{Identity: fmt.Sprintf("op%d@host%d/1", i, i)})
			wg.Go(func() {
				<-start
				releases[i], errs[i] = l.Lock(context.Background())
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			if err == nil {
				won++
				assert.Equal(t, fmt.Sprintf("op%d@host%d/1", i, i), holderOf(t, c))
				continue
			}
			var held *HeldError
			require.ErrorAs(t, err, &held, "round %d", round)
			assert.Equal(t, fmt.Sprintf("op%d@host%d/1", 1-i, 1-i), held.Holder)
		}
		require.Equal(t, 1, won, "round %d: exactly one run holds the lease: %v", round, errs)
		for _, r := range releases {
			if r != nil {
				r()
			}
		}
	}
}

// A Lease someone else took over is reported lost by Check.
func TestLostWhenTakenOver(t *testing.T) {
	c := newClient()
	a := newLease(t, c, Options{Identity: "alice@laptop/41", Duration: time.Second})
	release, err := a.Lock(context.Background())
	require.NoError(t, err)
	l := getLease(t, c)
	l.Spec.HolderIdentity = to("mallory@elsewhere/66")
	_, err = c.CoordinationV1().Leases(ns).Update(context.Background(), l, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.Check() != nil }, 2*time.Second, 10*time.Millisecond)
	err = a.Check()
	require.ErrorIs(t, err, ErrLost)
	assert.ErrorContains(t, err, `taken over by "mallory@elsewhere/66"`)
	release()
	assert.Equal(t, "mallory@elsewhere/66", holderOf(t, c), "a lost lease is not cleared on release")
}

// A Lease that cannot be renewed is reported lost once two thirds of its
// duration passed since the last renewal, before anyone may take it.
func TestLostWhenRenewalFails(t *testing.T) {
	c := newClient()
	a := newLease(t, c, Options{Identity: "alice@laptop/41", Duration: 3 * time.Second})
	release, err := a.Lock(context.Background())
	require.NoError(t, err)
	defer release()
	taken := time.Now()
	var mu sync.Mutex
	failing := true
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	require.Eventually(t, func() bool { return a.Check() != nil }, 4*time.Second, 10*time.Millisecond)
	lostAfter := time.Since(taken)
	err = a.Check()
	require.ErrorIs(t, err, ErrLost)
	assert.GreaterOrEqual(t, lostAfter, 2*time.Second-100*time.Millisecond, "not before two thirds of the duration")
	assert.Less(t, lostAfter, 3*time.Second, "before the lease expires for the others")
	assert.ErrorContains(t, err, "etcd is down")
	mu.Lock()
	failing = false
	mu.Unlock()
	time.Sleep(1200 * time.Millisecond)
	assert.ErrorIs(t, a.Check(), ErrLost, "a lost lease stays lost, though renewals would pass again")
}

// Lock is re-entrant: the Lease is released when the last hold is.
func TestLockReentrant(t *testing.T) {
	c := newClient()
	a := newLease(t, c, Options{Identity: "alice@laptop/41"})
	outer, err := a.Lock(context.Background())
	require.NoError(t, err)
	inner, err := a.Lock(context.Background())
	require.NoError(t, err)
	inner()
	require.NoError(t, a.Check())
	assert.Equal(t, "alice@laptop/41", holderOf(t, c))
	outer()
	assert.Equal(t, "", holderOf(t, c))
}

// A holder on this machine is taken over at once when its process is gone,
// and only then; a holder elsewhere (another process namespace) waits for
// expiry.
func TestHolderGoneOnThisMachine(t *testing.T) {
	me := Identity()
	host := hostOf(me)
	dead := "alice@" + host + "/123456"
	for _, tc := range []struct {
		name    string
		holder  string
		label   string
		gone    bool
		procNS  string
		refused bool
	}{
		{"dead process, same machine", dead, "boot1.42", true, "boot1.42", false},
		{"live process, same machine", dead, "boot1.42", false, "boot1.42", true},
		{"same name, other machine or boot", dead, "boot2.42", true, "boot1.42", true},
		{"other host name", "alice@elsewhere/123456", "boot1.42", true, "boot1.42", true},
		{"process namespace unknown", dead, "", true, "", true},
		{"this process, lost connection", me, "boot1.42", false, "boot1.42", false},
		{"this identity, another machine", me, "boot2.42", false, "boot1.42", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(heldLease(tc.holder, time.Now(), 60, map[string]string{LabelProcessNamespace: tc.label}))
			l := newLease(t, c, Options{})
			l.procNS, l.lock.Labels[LabelProcessNamespace] = tc.procNS, tc.procNS
			l.gone = func(pid int) bool {
				assert.Equal(t, 123456, pid)
				return tc.gone
			}
			release, err := l.Lock(context.Background())
			if tc.refused {
				require.ErrorIs(t, err, ErrHeld)
				assert.Equal(t, tc.holder, holderOf(t, c))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, me, holderOf(t, c))
			assert.Equal(t, tc.procNS, getLease(t, c).Labels[LabelProcessNamespace])
			release()
		})
	}
}

func TestProcessGone(t *testing.T) {
	assert.False(t, processGone(1) && processNamespace() != "", "pid 1 runs")
	if processNamespace() == "" {
		t.Skip("no /proc")
	}
	assert.Regexp(t, `^[0-9a-f]{32}\.\d+$`, processNamespace())
	assert.True(t, processGone(1<<22+12345), "no such pid")
}

func TestParseIdentity(t *testing.T) {
	host, pid, ok := parseIdentity("a@b@host-1/42")
	assert.True(t, ok)
	assert.Equal(t, "host-1", host)
	assert.Equal(t, 42, pid)
	for _, id := range []string{"nohost", "user@host/x", "user@host/0", "user@/3"} {
		_, _, ok := parseIdentity(id)
		assert.False(t, ok, id)
	}
}

// An API error other than a conflict is returned as it is, wrapped.
func TestLockAPIError(t *testing.T) {
	c := newClient()
	c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, name, errors.New("RBAC"))
	})
	l := newLease(t, c, Options{})
	_, err := l.Lock(context.Background())
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err))
	assert.ErrorContains(t, err, "reading lease kube-system/"+name)
}
