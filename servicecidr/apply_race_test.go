package servicecidr_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// TestApplyStopsAtAServiceChangedWhileApplying: a Service that changes
// after the run's check of the plan, once another Service was moved, is
// not deleted. Read changed just before its delete, the run stops there
// with ErrStalePlan; changed between that read and the delete (the
// delete's preconditions fail with a conflict), the run stops too, and the
// record it journaled for the delete is removed, since nothing was
// deleted. Both times the Service keeps its UID, the Service moved
// before it stays moved, and the error says so rather than "nothing was
// changed".
func TestApplyStopsAtAServiceChangedWhileApplying(t *testing.T) {
	for _, tc := range []struct {
		name string
		verb string
		// react is the reaction to shop/web's get or delete once another
		// Service was moved.
		react func(cl *servicecidrtest.Cluster) (runtime.Object, error)
		want  string
	}{
		{"read changed before its delete", "get", func(cl *servicecidrtest.Cluster) (runtime.Object, error) {
			s, _ := cl.Service("shop", "web")
			s.ResourceVersion += "0"
			return s, nil
		}, "Service shop/web changed while applying (uid"},
		{"changed between its read and its delete", "delete", func(*servicecidrtest.Cluster) (runtime.Object, error) {
			return nil, apierrors.NewConflict(corev1.Resource("services"), "web", assert.AnError)
		}, "Service shop/web changed while applying: Operation cannot be fulfilled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cl, c := newStory3(t, "v1")
			p, err := c.Plan(ctx, story3PlanOptions())
			require.NoError(t, err)
			before := servicesByKey(cl)

			var mu sync.Mutex
			var deleted []string
			cl.Kube.PrependReactor("delete", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				deleted = append(deleted, a.GetNamespace()+"/"+a.(k8stesting.DeleteAction).GetName())
				return false, nil, nil
			})
			reacted := false
			cl.Kube.PrependReactor(tc.verb, "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				name := a.(interface{ GetName() string }).GetName()
				if a.GetNamespace() != "shop" || name != "web" || len(deleted) == 0 || reacted {
					return false, nil, nil
				}
				reacted = true
				obj, err := tc.react(cl)
				return true, obj, err
			})
			dir := t.TempDir()
			o := fastApply(dir)
			o.Concurrency = 1
			_, err = c.Apply(ctx, p, o)
			require.ErrorIs(t, err, servicecidr.ErrStalePlan)
			assert.ErrorContains(t, err, tc.want)
			// Not "nothing was changed": the run moved a Service first.
			assert.ErrorContains(t, err, "plan went stale during the run, which stopped there; what it changed before stays; plan again: ")

			mu.Lock()
			require.True(t, reacted, "shop/web was reached after another Service was moved")
			assert.NotContains(t, deleted, "shop/web")
			first := deleted[0]
			mu.Unlock()
			web, ok := cl.Service("shop", "web")
			require.True(t, ok)
			assert.Equal(t, before["shop/web"].UID, web.UID, "shop/web is the Service it was")
			moved, ok := cl.Service(before[first].Namespace, before[first].Name)
			require.True(t, ok)
			assert.NotEqual(t, before[first].UID, moved.UID, "%s, moved before, stays moved", first)

			j, err := journal.Open(dir)
			require.NoError(t, err)
			var rec map[string]any
			found, err := j.Get("service/shop/web", &rec)
			require.NoError(t, j.Close())
			require.NoError(t, err)
			assert.False(t, found, "no record of a delete that was not made: %v", rec)
		})
	}
}
