package nodecidr

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// TestApplyWithUnsetRateLimitAndConcurrencyMovesEveryNode: a zero RateLimit
// means no limit and a zero Concurrency means DefaultConcurrency. Read the
// other way (a token bucket of rate 0, or no worker), the first node moves
// and the run stops, or no node moves and the run waits for a worker that
// does not exist: the context's deadline ends it with an error.
func TestApplyWithUnsetRateLimitAndConcurrencyMovesEveryNode(t *testing.T) {
	c, s := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := Apply(ctx, c, p, ApplyOptions{JournalDir: t.TempDir(), Retry: fastRetry()})
	require.NoError(t, err)
	assert.Len(t, res.Changed, 4)
	for _, n := range s.Nodes() {
		assert.Regexp(t, `^10\.20\.`, n.Spec.PodCIDR, n.Name)
	}
}

// TestApplyStopsWhenTheRateLimitWouldOutlastTheContext: when the wait for
// the next node's token would end after the context's deadline, the rate
// limiter refuses at once, before the context is done. Apply must report
// that it stopped, with the nodes left to move; it returned success, with
// three of four nodes unmoved, and marked the run finished.
//
// The first node, handed to a worker on the bucket's one token, moves even
// though the refusal for the second comes at once: the refusal used to be
// recorded before the worker looked at its node, and the worker then
// skipped it (about 1 run in 30 on two cores). The runs are repeated so
// that a regression shows.
func TestApplyStopsWhenTheRateLimitWouldOutlastTheContext(t *testing.T) {
	for i := range 150 {
		c, s := newCluster(storyOne()...)
		p := rebasePlan(t, c)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := Apply(ctx, c, p, ApplyOptions{JournalDir: t.TempDir(), Retry: fastRetry(), RateLimit: 0.001})
		cancel()
		require.Error(t, err, "run %d", i)
		require.ErrorContains(t, err, "rate limit", "run %d", i)
		require.Len(t, res.Changed, 1, "run %d: the first node moves on the bucket's one token", i)
		moved := 0
		for _, n := range s.Nodes() {
			if n.Spec.PodCIDR[:6] == "10.20." {
				moved++
			}
		}
		require.Equal(t, 1, moved, "run %d", i)
	}
}

// TestApplyInterruptedWhileWaitingForTheRateLimitSaysHowToResume: a run
// cancelled while it waits for the next node's token is interrupted, not
// failed: its error says to apply the plan again.
func TestApplyInterruptedWhileWaitingForTheRateLimitSaysHowToResume(t *testing.T) {
	c, _ := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	c.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		cancel() // the first node is created again; the next waits for its token
		return false, nil, nil
	})
	_, err := Apply(ctx, c, p, ApplyOptions{JournalDir: t.TempDir(), Retry: fastRetry(), RateLimit: 0.5})
	require.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, "interrupted; apply it again to resume")
}
