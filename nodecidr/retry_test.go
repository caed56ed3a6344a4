package nodecidr

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRetryZeroValueUsesTheDocumentedDefaults runs retryTransient with a zero
// Retry against a call that always answers 503, on synctest's fake clock. The
// waits must start at 200ms, double, stop growing at 10s (plus up to a fifth
// of jitter), and the retries must give up before 2 minutes have passed.
func TestRetryZeroValueUsesTheDocumentedDefaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unavailable := apierrors.NewServiceUnavailable("apiserver restarting")
		start := time.Now()
		var calls []time.Time
		err := retryTransient(context.Background(), Retry{}, "updating node w1", func(context.Context) error {
			calls = append(calls, time.Now())
			if len(calls) > 100 {
				return errors.New("100 attempts: the waits do not grow")
			}
			return unavailable
		})
		require.Error(t, err)
		assert.ErrorIs(t, err, unavailable)
		assert.Contains(t, err.Error(), fmt.Sprintf("updating node w1: still failing after %d attempts in ", len(calls)))
		assert.Equal(t, start, calls[0], "the first call is not delayed")

		want := 200 * time.Millisecond
		for i := 1; i < len(calls); i++ {
			gap := calls[i].Sub(calls[i-1])
			assert.GreaterOrEqual(t, gap, want, "wait before attempt %d", i+1)
			assert.LessOrEqual(t, gap, want+want/5, "wait before attempt %d", i+1)
			want = min(want*2, 10*time.Second)
		}
		last := calls[len(calls)-1].Sub(start)
		assert.LessOrEqual(t, last, 2*time.Minute, "no attempt after the 2-minute timeout")
		assert.Greater(t, last+want+want/5, 2*time.Minute, "the retries stop only when the next wait could pass the timeout")
		// 200ms..6.4s is 12.6s over 6 waits; the 10s waits fill the rest.
		assert.GreaterOrEqual(t, len(calls), 15)
		assert.LessOrEqual(t, len(calls), 18)
	})
}

// TestRetryTransientStopsAtTheFirstPermanentError checks that an answer that
// retrying cannot change is returned at once, unwrapped.
func TestRetryTransientStopsAtTheFirstPermanentError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "w1")
		answers := []error{apierrors.NewTooManyRequests("slow down", 1), notFound}
		calls := 0
		start := time.Now()
		err := retryTransient(context.Background(), Retry{}, "getting node w1", func(context.Context) error {
			calls++
			return answers[min(calls, len(answers))-1]
		})
		assert.Same(t, notFound, err)
		assert.Equal(t, 2, calls)
		assert.Less(t, time.Since(start), time.Second, "one 200ms wait, with its jitter")
	})
}

// TestRetryWithANanosecondWait: the jitter of the shortest wait there is
// (a 1ns Initial) is drawn from a range that is never empty.
func TestRetryWithANanosecondWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		err := retryTransient(context.Background(), Retry{Initial: time.Nanosecond, Max: time.Nanosecond, Timeout: time.Millisecond}, "x", func(context.Context) error {
			calls++
			if calls < 5 {
				return apierrors.NewServiceUnavailable("again")
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, 5, calls)
	})
}
