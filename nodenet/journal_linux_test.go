package nodenet

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stateRecorder keeps every record Apply puts, with the node's state at
// that moment; failAt makes the Put of that key fail.
type stateRecorder struct {
	n      *testNode
	keys   []string
	recs   []any
	states []string
	failAt string
}

func (r *stateRecorder) Put(key string, v any) error {
	if key == r.failAt {
		return errors.New("disk full")
	}
	r.keys = append(r.keys, key)
	r.recs = append(r.recs, v)
	r.states = append(r.states, r.n.state())
	return nil
}

// TestDataplaneApplyJournalsEachActionBeforeItRuns: with a Journal, Apply
// records the plan before the first change, and each action that runs
// before it changes the node (the node is as it was at the record before)
// and with its outcome after. A record that cannot be made stops Apply
// before the action it guards.
func TestDataplaneApplyJournalsEachActionBeforeItRuns(t *testing.T) {
	n, w, plan := movedNodePlan(t)
	ctx := context.Background()
	start := n.state()
	rec := &stateRecorder{n: n}
	res, err := Apply(ctx, w, plan, ApplyOptions{Journal: rec})
	require.NoError(t, err)
	id := plan.ID()
	require.NotEmpty(t, rec.keys)
	assert.Equal(t, JournalPrefix+id+"/plan", rec.keys[0])
	assert.Equal(t, start, rec.states[0], "the plan is recorded before the first change")
	changed := 0
	ran := 0
	for i := 1; i < len(rec.keys); i += 2 {
		require.Less(t, i+1, len(rec.keys), "every started action has its outcome: %v", rec.keys)
		assert.Equal(t, rec.keys[i], rec.keys[i+1])
		assert.True(t, strings.HasPrefix(rec.keys[i], JournalPrefix+id+"/action-"), rec.keys[i])
		before, after := rec.recs[i].(JournalRecord), rec.recs[i+1].(JournalRecord)
		assert.Nil(t, before.Outcome, "%s: recorded before it runs", rec.keys[i])
		require.NotNil(t, after.Outcome, "%s: then with its outcome", rec.keys[i])
		assert.Equal(t, rec.states[i-1], rec.states[i], "%s: nothing changed between the previous record and this one", rec.keys[i])
		if rec.states[i] != rec.states[i+1] {
			changed++
		}
		ran++
	}
	done := statuses(res)[StatusDone] + statuses(res)[StatusUnchanged]
	assert.Equal(t, done, ran, "one pair of records per action that ran: %v", res.Outcomes)
	assert.Positive(t, changed, "some action changed the node between its two records")

	// A record that fails: the action it guards does not run.
	n2, w2, plan2 := movedNodePlan(t)
	before := n2.state()
	_, err = Apply(ctx, w2, plan2, ApplyOptions{Journal: &stateRecorder{n: n2, failAt: JournalPrefix + plan2.ID() + "/action-000"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "journaling action 0")
	assert.Equal(t, before, n2.state(), "nothing changed")
}
