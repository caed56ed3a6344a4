package calico_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/calico"
)

// TestApplyGivesUpOnAnEvictionRefusedPastPDBTimeout: an eviction refused
// with 429 every time is retried after the documented default waits (1s,
// doubling, capped at 30s), the last wait cut short so that the last try
// comes exactly PDBTimeout after the first refusal; refused then too, Apply
// stops with ErrEvictionBlocked: it neither waits on nor goes on to delete
// the old pool. On testing/synctest's clock, so the two minutes take no
// wall time and the times are exact.
func TestApplyGivesUpOnAnEvictionRefusedPastPDBTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQuiet(t, lonelyPods("default", "lonely", "10.233.64.4"))
		start := time.Now()
		var mu sync.Mutex
		var tries []time.Duration
		q.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "eviction" {
				return false, nil, nil
			}
			mu.Lock()
			tries = append(tries, time.Since(start))
			mu.Unlock()
			return true, nil, apierrors.NewTooManyRequests("the server is busy", 0)
		})
		// Fake time too: an Apply that never gives up fails the test at
		// 10 minutes instead of hanging it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		plan := q.plan(t)
		opts := fastOptions(t.TempDir())
		opts.OnEvent = q.onEvent
		opts.EvictionBackoff, opts.MaxEvictionBackoff = 0, 0 // the defaults
		opts.PDBTimeout = 2 * time.Minute
		res, err := calico.Apply(ctx, q.cl, plan, opts)
		require.Error(t, err)
		assert.True(t, errors.Is(err, calico.ErrEvictionBlocked), "%v", err)
		assert.Equal(t, "eviction refused by a PodDisruptionBudget: pod default/lonely-1 refused for PDBTimeout 2m0s: eviction of default/lonely-1 refused (429: the server is busy)", err.Error())
		var said []string
		for _, ev := range q.eventsOf(calico.EventEvictBlocked) {
			said = append(said, ev.Message[len("eviction of default/lonely-1 refused (429: the server is busy); "):])
		}
		assert.Equal(t, []string{"retrying in 1s", "retrying in 2s", "retrying in 4s", "retrying in 8s", "retrying in 16s", "retrying in 30s", "retrying in 30s", "retrying in 29s",
			"giving up: refused for PDBTimeout 2m0s"}, said, "each refusal is reported, the last one as the end")
		s := time.Second
		mu.Lock()
		require.NotEmpty(t, tries)
		first := tries[0] // after the writes before it, paced by WritesPerSecond
		var since []time.Duration
		for _, d := range tries {
			since = append(since, d-first)
		}
		mu.Unlock()
		assert.Equal(t, []time.Duration{0, 1 * s, 3 * s, 7 * s, 15 * s, 31 * s, 61 * s, 91 * s, 120 * s}, since,
			"the attempts, from the first: waits of 1s, 2s, 4s, 8s, 16s, 30s, 30s, and 29s to the deadline instead of 30s past it")
		assert.Equal(t, 120*s, time.Since(start)-first, "Apply returns at the last refusal, at the deadline")
		require.NotNil(t, res)
		assert.False(t, res.Done)
		assert.False(t, res.OldPoolDeleted)
		_, err = q.pools.Get(ctx, oldPoolName)
		assert.NoError(t, err, "the old pool is still there")
	})
}
