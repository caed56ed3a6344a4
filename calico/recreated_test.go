package calico_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/calico"
)

// TestApplyNeverTouchesAnOldPoolRecreatedUnderItsName: from the moment a
// phase starts, the old pool's name answers with another UID, as after a
// delete and a create by someone else. Whichever phase it is, the run
// stops with a StalePlanError on metadata.uid before it disables or
// deletes that pool: at the run's first check (recreated before the run:
// nothing is created), at the disable, and at the delete after
// verification.
func TestApplyNeverTouchesAnOldPoolRecreatedUnderItsName(t *testing.T) {
	for _, from := range []calico.Phase{"", calico.PhaseDisableOldPool, calico.PhaseDeleteOldPool} {
		name := "from " + string(from)
		if from == "" {
			name = "before the run"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, envOptions{api: calico.APICRDV1})
			ctx := context.Background()
			req := request()
			req.AllowDeleteBarePods = true
			plan, err := calico.Plan(ctx, e.cl, req)
			require.NoError(t, err)

			var mu sync.Mutex
			recreated := from == ""
			var writes []string
			e.dyn.PrependReactor("*", "ippools", func(a k8stesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				var name string
				switch a := a.(type) {
				case interface{ GetName() string }:
					name = a.GetName()
				case k8stesting.UpdateAction:
					name = a.GetObject().(*unstructured.Unstructured).GetName()
				default: // a list, a watch or a create
					return false, nil, nil
				}
				switch a.GetVerb() {
				case "get":
					if !recreated || name != oldPoolName {
						return false, nil, nil
					}
					obj, err := e.dyn.Tracker().Get(a.GetResource(), "", name)
					if err != nil {
						return true, nil, err
					}
					u := obj.(*unstructured.Unstructured).DeepCopy()
					u.SetUID("uid-of-a-pool-created-since")
					return true, u, nil
				case "update", "patch", "delete":
					if name == oldPoolName {
						writes = append(writes, a.GetVerb())
					}
				}
				return false, nil, nil
			})
			opts := fastOptions(t.TempDir())
			opts.OnEvent = func(ev calico.Event) {
				e.onEvent(ev)
				if ev.Type == calico.EventPhase && calico.Phase(ev.Message) == from {
					mu.Lock()
					recreated = true
					mu.Unlock()
				}
			}
			_, err = calico.Apply(ctx, e.cl, plan, opts)
			requireStale(t, err, "metadata.uid", "uid-of-a-pool-created-since")
			mu.Lock()
			got := append([]string{}, writes...)
			mu.Unlock()
			switch from {
			case calico.PhaseDeleteOldPool:
				assert.Equal(t, []string{"update"}, got, "the old pool was disabled, then left alone")
			default:
				assert.Empty(t, got, "the old pool was left alone")
			}
			_, err = e.pools.Get(ctx, oldPoolName)
			require.NoError(t, err, "the old pool's name is not deleted")
			if from == "" {
				_, err = e.pools.Get(ctx, newPoolName)
				assert.ErrorIs(t, err, calico.ErrPoolNotFound, "a run that starts on a recreated pool creates nothing")
			}
		})
	}
}

// TestApplyRefusesAJournalOfAnotherOldPool: a journal whose run was for
// another old pool (its UID), under the same plan ID, as a plan edited
// after a first run leaves, is refused before anything is read or written.
func TestApplyRefusesAJournalOfAnotherOldPool(t *testing.T) {
	e := newEnv(t, envOptions{api: calico.APICRDV1})
	ctx := context.Background()
	plan, err := calico.Plan(ctx, e.cl, request())
	require.NoError(t, err)
	dir := t.TempDir()
	opts := fastOptions(dir)
	opts.StopAfter = calico.PhaseCreatePool
	_, err = calico.Apply(ctx, e.cl, plan, opts)
	require.NoError(t, err)

	edited := *plan
	edited.OldPool.UID = "uid-of-another-pool"
	_, err = calico.Apply(ctx, e.cl, &edited, fastOptions(dir))
	se := requireStale(t, err, "oldPoolUID", plan.OldPool.UID)
	assert.Equal(t, "journal "+dir, se.Object)
	assertOldPoolEnabled(t, e)
}

// TestApplyRefusesANewPoolNameTakenByAnotherRange: the new pool's name,
// free when the plan was made, holds a pool of another CIDR when the run
// comes to create it: the run stops there and changes nothing else.
func TestApplyRefusesANewPoolNameTakenByAnotherRange(t *testing.T) {
	e := newEnv(t, envOptions{api: calico.APICRDV1})
	ctx := context.Background()
	plan, err := calico.Plan(ctx, e.cl, request())
	require.NoError(t, err)
	other := plan.NewPool
	other.Spec.CIDR = "10.99.0.0/16"
	_, err = e.pools.Create(ctx, other, calico.WriteOptions{})
	require.NoError(t, err)

	_, err = calico.Apply(ctx, e.cl, plan, fastOptions(t.TempDir()))
	requireStale(t, err, "spec.cidr", "10.99.0.0/16")
	assertOldPoolEnabled(t, e)
}

// requireStale asserts that err is a StalePlanError on field, which found
// found, and returns it.
func requireStale(t *testing.T, err error, field, found string) *calico.StalePlanError {
	t.Helper()
	var se *calico.StalePlanError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, field, se.Field)
	assert.Equal(t, found, se.Found)
	return se
}

// assertOldPoolEnabled asserts that the old pool exists and still gives
// addresses: the run stopped before its disable.
func assertOldPoolEnabled(t *testing.T, e *env) {
	t.Helper()
	old, err := e.pools.Get(context.Background(), oldPoolName)
	require.NoError(t, err)
	assert.False(t, old.AllocationStopped(), "the old pool is not disabled")
}
