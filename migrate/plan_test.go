package migrate

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Once a run has started (its journal records the intent), the steps it
// finished describe themselves as done: a plan reviewed before the start
// still carries the rest of the run, so only the intent is compared.
func TestApplyPlanResumesARunThePlanStarted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	c := &toy{intent: map[string]string{"to": "b"}}
	r := Runner{Mode: ModeApply, JournalDir: dir}
	p, err := r.Plan(t.Context(), c)
	require.NoError(t, err)
	rep, err := r.ApplyPlan(t.Context(), c, p)
	require.NoError(t, err)
	require.True(t, rep.Paused())
	assert.Equal(t, 1, c.total)

	now, err := r.Plan(t.Context(), c)
	require.NoError(t, err)
	require.NotEqual(t, p.Steps[1].Changes, now.Steps[1].Changes, "step one describes itself as done now")

	c.open = true
	rep, err = r.ApplyPlan(t.Context(), c, p)
	require.NoError(t, err)
	assert.Equal(t, []string{StatusCompleted, StatusDone, StatusCompleted, StatusCompleted}, statuses(rep))
	assert.Equal(t, 11, c.total)

	// A started run still refuses another intent.
	other := *p
	other.Intent = []byte(`{"to":"c"}`)
	_, err = r.ApplyPlan(t.Context(), c, &other)
	require.ErrorIs(t, err, ErrStalePlan)
	assert.Contains(t, err.Error(), `the plan asks for {"to":"c"}, the migration now resolves to {"to":"b"}`)
}

func TestApplyPlanRefusals(t *testing.T) {
	c := &toy{open: true, intent: map[string]string{"to": "b"}}
	r := Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}
	p, err := r.Plan(t.Context(), c)
	require.NoError(t, err)
	edit := func(f func(*Plan)) *Plan {
		q := *p
		q.Steps = append([]PlannedStep(nil), p.Steps...)
		f(&q)
		return &q
	}
	for _, tc := range []struct {
		p    *Plan
		is   error
		want string
	}{
		{nil, ErrInvalidInput, "plan: missing"},
		{edit(func(q *Plan) { q.Intent = []byte(`{"to":`) }), ErrInvalidInput, "plan: intent: unexpected end of JSON input"},
		{edit(func(q *Plan) { q.Intent = nil }), ErrStalePlan, `the plan asks for null, the migration now resolves to {"to":"b"}`},
		{edit(func(q *Plan) { q.Steps = q.Steps[:3] }), ErrStalePlan, "the plan has 3 steps, the migration now has 4"},
		{edit(func(q *Plan) { q.Steps[2].Name = "door" }), ErrStalePlan, `step 3 is "door" in the plan, "gate" now`},
	} {
		_, err := r.ApplyPlan(t.Context(), c, tc.p)
		require.ErrorIs(t, err, tc.is, tc.want)
		assert.Contains(t, err.Error(), tc.want)
	}
	assert.Equal(t, 0, c.total)

	locked := Runner{Mode: ModeApply, JournalDir: r.JournalDir, Lock: failingLock{}}
	_, err = locked.ApplyPlan(t.Context(), c, p)
	require.EqualError(t, err, "taking the migration lock: held by another run")
	assert.Equal(t, 0, c.total)

	// A composition without an intent plans and applies with none.
	bare := &toy{open: true}
	p, err = r.Plan(t.Context(), bare)
	require.NoError(t, err)
	assert.Nil(t, p.Intent)
	_, err = (&Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "k")}).ApplyPlan(t.Context(), bare, p)
	require.NoError(t, err)
	assert.Equal(t, 11, bare.total)
}

type failingLock struct{}

func (failingLock) Lock(context.Context) (func(), error) {
	return nil, errors.New("held by another run")
}
func (failingLock) Check() error { return nil }
