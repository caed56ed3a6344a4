package migrate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/internal/journal"
)

// toy is a composition over a counter: each step adds its value to the
// total once; "gate" pauses until open is set.
type toy struct {
	total    int
	open     bool
	failAt   string
	calls    map[string]int
	intent   any
	prepared int
	badInput bool
}

func (c *toy) Kind() string { return "toy" }

func (c *toy) Prepare(_ context.Context, env *Env) (*Prepared, error) {
	c.prepared++
	if c.badInput {
		return nil, inputf("--to %q: not a range", "x")
	}
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	add := func(name string, v int) Step {
		return StepFunc{StepName: name, StepTitle: "add " + name, DoFunc: func(_ context.Context, env *Env, sr *StepReport) error {
			c.calls[name]++
			if c.failAt == name {
				return errors.New("boom at " + name)
			}
			if env.Mode != ModeApply {
				sr.Addf("would add %d", v)
				return nil
			}
			c.total += v
			sr.Addf("added %d", v)
			return nil
		}}
	}
	return &Prepared{
		Intent: c.intent,
		Steps: []Step{
			StepFunc{StepName: "check", StepTitle: "read only", Check: true, DoFunc: func(_ context.Context, _ *Env, sr *StepReport) error {
				c.calls["check"]++
				if c.failAt == "check" {
					return errors.New("refused by the check")
				}
				sr.Addf("ok")
				return nil
			}},
			add("one", 1),
			StepFunc{StepName: "gate", StepTitle: "operator", DoFunc: func(_ context.Context, env *Env, sr *StepReport) error {
				c.calls["gate"]++
				if env.Mode == ModeApply && !c.open {
					return &Pause{Instructions: []string{"open the gate"}, Resume: "rerun"}
				}
				return nil
			}},
			add("ten", 10),
		},
	}, nil
}

func TestRunnerPausesResumesAndNeverRepeatsAStep(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	c := &toy{intent: map[string]string{"to": "b"}}
	var lines []string
	r := Runner{Mode: ModeApply, JournalDir: dir, Progress: func(l string) { lines = append(lines, l) }}

	rep, err := r.Run(t.Context(), c)
	require.NoError(t, err)
	require.True(t, rep.Paused())
	assert.Equal(t, "gate", rep.Waiting.Step, "the Pause names its step")
	assert.Equal(t, []string{StatusCompleted, StatusCompleted, StatusWaiting, StatusNotReached}, statuses(rep))
	assert.Equal(t, 1, c.total)
	assert.Contains(t, lines, "step 2/4 one: add one")

	c.open = true
	rep, err = r.Run(t.Context(), c)
	require.NoError(t, err)
	assert.False(t, rep.Paused())
	assert.Equal(t, []string{StatusCompleted, StatusDone, StatusCompleted, StatusCompleted}, statuses(rep))
	assert.Equal(t, 11, c.total, "step one is not repeated on resume")
	assert.Equal(t, 1, c.calls["one"])
	assert.Equal(t, 2, c.calls["check"], "a read-only step runs on every run")

	rep, err = r.Run(t.Context(), c)
	require.NoError(t, err)
	assert.Equal(t, []string{StatusCompleted, StatusDone, StatusDone, StatusDone}, statuses(rep))
	assert.Equal(t, 3, c.calls["check"])
	assert.Equal(t, 11, c.total, "a finished run changes nothing")
}

func TestRunnerFailedStepStopsAndIsNotRecorded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	c := &toy{failAt: "ten", open: true}
	r := Runner{Mode: ModeApply, JournalDir: dir}
	rep, err := r.Run(t.Context(), c)
	require.EqualError(t, err, "boom at ten")
	assert.Equal(t, []string{StatusCompleted, StatusCompleted, StatusCompleted, StatusFailed}, statuses(rep))

	rep, err = r.Run(t.Context(), c)
	require.EqualError(t, err, "boom at ten")
	assert.Equal(t, []string{StatusCompleted, StatusDone, StatusDone, StatusFailed}, statuses(rep))
	assert.Contains(t, rep.Steps[3].Details, "boom at ten")

	c.failAt = ""
	rep, err = r.Run(t.Context(), c)
	require.NoError(t, err)
	assert.Equal(t, StatusCompleted, rep.Steps[3].Status, "the failed step runs again")
	assert.Equal(t, 11, c.total)
}

func TestRunnerRefusedRunLeavesNoRecord(t *testing.T) {
	for _, c := range []*toy{{badInput: true, intent: "x"}, {failAt: "check", intent: "x"}} {
		dir := filepath.Join(t.TempDir(), "j")
		_, err := (&Runner{Mode: ModeApply, JournalDir: dir}).Run(t.Context(), c)
		require.Error(t, err)
		assert.Equal(t, 0, c.total)
		j, err := journal.Open(dir)
		require.NoError(t, err)
		keys, err := j.Keys("")
		require.NoError(t, err)
		require.NoError(t, j.Close())
		assert.Empty(t, keys, "a run refused before its first write records nothing")
	}
	// The intent is recorded before the first writing step.
	dir := filepath.Join(t.TempDir(), "j")
	c := &toy{intent: map[string]string{"to": "b"}}
	_, err := (&Runner{Mode: ModeApply, JournalDir: dir}).Run(t.Context(), c)
	require.NoError(t, err)
	j, err := journal.Open(dir)
	require.NoError(t, err)
	defer j.Close()
	var got map[string]string
	ok, err := j.Get(IntentKey, &got)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "b", got["to"])
}

func TestRunnerPlanAndDryRunWriteNothing(t *testing.T) {
	for _, mode := range []Mode{ModePlan, ModeServerDryRun, ""} {
		dir := filepath.Join(t.TempDir(), "j")
		c := &toy{open: true}
		rep, err := (&Runner{Mode: mode, JournalDir: dir}).Run(t.Context(), c)
		require.NoError(t, err)
		assert.Equal(t, 0, c.total)
		_, serr := os.Stat(dir)
		assert.True(t, os.IsNotExist(serr), "mode %q created the journal", mode)
		want := StatusPlanned
		if mode == ModeServerDryRun {
			want = StatusDryRun
		}
		assert.Equal(t, want, rep.Steps[1].Status)
		assert.Equal(t, []string{"would add 1"}, rep.Steps[1].Details)
	}
}

func TestRunnerBadInput(t *testing.T) {
	_, err := (&Runner{Mode: ModeApply}).Run(t.Context(), &toy{})
	require.ErrorIs(t, err, ErrInvalidInput)
	assert.Contains(t, err.Error(), "journal directory is required")

	_, err = (&Runner{Mode: "later"}).Run(t.Context(), &toy{})
	require.ErrorIs(t, err, ErrInvalidInput)
	assert.Contains(t, err.Error(), `"later"`)

	f := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(f, nil, 0o600))
	_, err = (&Runner{Mode: ModeApply, JournalDir: f}).Run(t.Context(), &toy{})
	require.ErrorIs(t, err, ErrInvalidInput)
	assert.Contains(t, err.Error(), "not a directory")

	c := &toy{badInput: true}
	_, err = (&Runner{}).Run(t.Context(), c)
	require.ErrorIs(t, err, ErrInvalidInput)
}

func TestRunnerJournalLocked(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir)
	require.NoError(t, err)
	defer j.Close()
	c := &toy{}
	_, err = (&Runner{Mode: ModeApply, JournalDir: dir}).Run(t.Context(), c)
	require.ErrorIs(t, err, journal.ErrLocked)
	assert.Equal(t, 0, c.prepared, "nothing is read before the journal is ours")
}

type countingLock struct{ held, taken int }

func (l *countingLock) Lock(context.Context) (func(), error) {
	l.held++
	l.taken++
	return func() { l.held-- }, nil
}

func (l *countingLock) Check() error { return nil }

func TestRunnerHoldsTheLockForWritingRuns(t *testing.T) {
	l := &countingLock{}
	c := &toy{open: true}
	_, err := (&Runner{Mode: ModePlan, Lock: l}).Run(t.Context(), c)
	require.NoError(t, err)
	assert.Equal(t, 0, l.taken, "a plan takes no lock")
	_, err = (&Runner{Mode: ModeApply, JournalDir: t.TempDir(), Lock: l}).Run(t.Context(), c)
	require.NoError(t, err)
	assert.Equal(t, 1, l.taken)
	assert.Equal(t, 0, l.held, "released at the end")
}

type checkedStep struct {
	StepFunc
	done bool
}

func (s *checkedStep) Done(context.Context, *Env) (bool, string, error) {
	return s.done, "seen in the cluster", nil
}

func TestRunnerCheckerAndVerifier(t *testing.T) {
	ran := 0
	s := &checkedStep{StepFunc: StepFunc{StepName: "s", DoFunc: func(context.Context, *Env, *StepReport) error { ran++; return nil }}, done: true}
	comp := compositionOf(s)
	rep, err := (&Runner{Mode: ModeApply, JournalDir: t.TempDir()}).Run(t.Context(), comp)
	require.NoError(t, err)
	assert.Equal(t, 0, ran, "a step found done is not run")
	assert.Equal(t, StatusDone, rep.Steps[0].Status)
	assert.Contains(t, rep.Steps[0].Details, "found done: seen in the cluster")

	bad := StepFunc{StepName: "v", DoFunc: func(context.Context, *Env, *StepReport) error { return nil },
		VerifyFunc: func(context.Context, *Env, *StepReport) error { return errors.New("not there") }}
	dir := t.TempDir()
	rep, err = (&Runner{Mode: ModeApply, JournalDir: dir}).Run(t.Context(), compositionOf(bad))
	require.EqualError(t, err, "verify: not there")
	assert.Equal(t, StatusFailed, rep.Steps[0].Status)
	rep, err = (&Runner{Mode: ModeApply, JournalDir: dir}).Run(t.Context(), compositionOf(bad))
	require.Error(t, err, "a step that failed its Verify is not recorded as done")
	assert.Equal(t, StatusFailed, rep.Steps[0].Status)
}

type fixed []Step

func (f fixed) Kind() string { return "fixed" }
func (f fixed) Prepare(context.Context, *Env) (*Prepared, error) {
	return &Prepared{Steps: f}, nil
}

func compositionOf(s ...Step) Composition { return fixed(s) }

func TestPlanApplyRefusesAStalePlan(t *testing.T) {
	c := &toy{open: true, intent: map[string]string{"to": "b"}}
	r := Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}
	p, err := r.Plan(t.Context(), c)
	require.NoError(t, err)
	assert.Equal(t, "toy", p.Kind)
	assert.Equal(t, []string{"would add 1"}, p.Steps[1].Changes)
	assert.Equal(t, 0, c.total, "Plan writes nothing whatever the Runner's mode")

	stale := *p
	stale.Steps = append([]PlannedStep(nil), p.Steps...)
	stale.Steps[3].Changes = []string{"would add 9"}
	_, err = r.ApplyPlan(t.Context(), c, &stale)
	require.ErrorIs(t, err, ErrStalePlan)
	assert.Contains(t, err.Error(), "step ten")
	assert.Equal(t, 0, c.total)

	other := *p
	other.Intent = []byte(`{"to":"c"}`)
	_, err = r.ApplyPlan(t.Context(), c, &other)
	require.ErrorIs(t, err, ErrStalePlan)

	wrongKind := *p
	wrongKind.Kind = "servicecidr"
	_, err = r.ApplyPlan(t.Context(), c, &wrongKind)
	require.ErrorIs(t, err, ErrStalePlan)

	rep, err := r.ApplyPlan(t.Context(), c, p)
	require.NoError(t, err)
	assert.Equal(t, 11, c.total)
	assert.Equal(t, StatusCompleted, rep.Steps[3].Status)

	_, err = (&Runner{Mode: ModePlan}).ApplyPlan(t.Context(), c, p)
	require.ErrorIs(t, err, ErrInvalidInput)
}

func statuses(rep *Report) []string {
	var s []string
	for _, st := range rep.Steps {
		s = append(s, st.Status)
	}
	return s
}
