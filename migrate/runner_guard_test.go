package migrate

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cidrshift/cidrshift/internal/kubetest"
)

// A rerun refused by Prepare (its input contradicts the journal, say)
// leaves the cluster journal of the run it resumes open: only a run that
// ends with every step done closes it.
func TestRunnerKeepsTheClusterJournalOfARunItRefuses(t *testing.T) {
	kube := fake.NewClientset()
	kubetest.EnforceCAS(kube, "configmaps")
	cj := &ClusterJournal{Client: kube, Namespace: "cidrshift"}
	open := func() int {
		cms, err := kube.CoreV1().ConfigMaps("cidrshift").List(t.Context(), metav1.ListOptions{LabelSelector: "journal.cidrshift.io/scope=cidrshift-migrate-toy,journal.cidrshift.io/state=open"})
		require.NoError(t, err)
		return len(cms.Items)
	}
	c := &toy{intent: map[string]string{"to": "b"}}
	r := Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "a"), Lock: &kubetest.Lock{ChecksLeft: -1}, ClusterJournal: cj}
	rep, err := r.Run(t.Context(), c)
	require.NoError(t, err)
	require.True(t, rep.Paused())
	require.Equal(t, 1, open())

	c.badInput = true
	r.JournalDir = filepath.Join(t.TempDir(), "b")
	_, err = r.Run(t.Context(), c)
	require.ErrorIs(t, err, ErrInvalidInput)
	assert.Equal(t, 1, open(), "the paused run's records stay open")
}

func TestEnvApplyingOnlyInModeApply(t *testing.T) {
	for mode, want := range map[Mode]bool{ModeApply: true, ModePlan: false, ModeServerDryRun: false} {
		assert.Equal(t, want, (&Env{Mode: mode}).Applying(), "%s", mode)
	}
}

// A plan run with the journal of an applying run shows the steps it
// recorded as done, and writes nothing to it.
func TestRunnerPlanShowsTheStepsItsJournalRecordsDone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	c := &toy{intent: map[string]string{"to": "b"}}
	rep, err := (&Runner{Mode: ModeApply, JournalDir: dir}).Run(t.Context(), c)
	require.NoError(t, err)
	require.True(t, rep.Paused())
	keys := func() []string { return JournalKeys(t, dir) }
	before := keys()

	for _, mode := range []Mode{ModePlan, ModeServerDryRun} {
		rep, err = (&Runner{Mode: mode, JournalDir: dir}).Run(t.Context(), c)
		require.NoError(t, err)
		want := map[Mode]string{ModePlan: StatusPlanned, ModeServerDryRun: StatusDryRun}[mode]
		assert.Equal(t, []string{want, StatusDone, want, want}, statuses(rep), "%s", mode)
		assert.Equal(t, dir, rep.Journal)
	}
	assert.Equal(t, 1, c.total, "step one ran once")
	assert.Equal(t, before, keys(), "nothing written")
}

// The report, the progress lines and the log number the steps from 1.
func TestRunnerNumbersTheStepsFromOne(t *testing.T) {
	var lines, logged []string
	log := funcr.New(func(_, args string) {
		if strings.Contains(args, `"msg"="step"`) {
			logged = append(logged, args)
		}
	}, funcr.Options{Verbosity: 1})
	c := &toy{open: true}
	r := Runner{Mode: ModeApply, JournalDir: t.TempDir(), Progress: func(l string) { lines = append(lines, l) }}
	rep, err := r.Run(logr.NewContext(t.Context(), log), c)
	require.NoError(t, err)
	var numbers []int
	for _, s := range rep.Steps {
		numbers = append(numbers, s.Number)
	}
	assert.Equal(t, []int{1, 2, 3, 4}, numbers)
	assert.Equal(t, []string{
		"step 1/4 check: read only",
		"step 2/4 one: add one", "step 2/4 one: completed",
		"step 3/4 gate: operator", "step 3/4 gate: completed",
		"step 4/4 ten: add ten", "step 4/4 ten: completed",
	}, lines)
	require.Len(t, logged, 4)
	for i, l := range logged {
		assert.Contains(t, l, `"number"=`+string(rune('1'+i)), "%s", l)
	}
}

// A step that finds nothing to do (skipped) is recorded as done like a
// completed one, so a rerun does not run it again, with its own note or
// else its last detail, which later runs show; a step without a note shows
// only when it was done.
func TestRunnerRecordsASkippedStepWithItsNote(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 30, 0, 0, time.UTC)
	calls := map[string]int{}
	step := func(name, status, note string, details ...string) Step {
		return StepFunc{StepName: name, DoFunc: func(_ context.Context, _ *Env, sr *StepReport) error {
			calls[name]++
			sr.Status, sr.Note, sr.Details = status, note, details
			return nil
		}}
	}
	comp := compositionOf(
		step("skip-detail", StatusSkipped, "", "looked at 3 nodes", "nothing to do: every node has 10.240.0.0/16"),
		step("skip-note", StatusSkipped, "found by its label", "looked"),
		step("skip-bare", StatusSkipped, ""),
		step("completed", "", "", "did it"),
	)
	r := Runner{Mode: ModeApply, JournalDir: t.TempDir(), Now: func() time.Time { return at }}
	rep, err := r.Run(t.Context(), comp)
	require.NoError(t, err)
	assert.Equal(t, []string{StatusSkipped, StatusSkipped, StatusSkipped, StatusCompleted}, statuses(rep))

	rep, err = r.Run(t.Context(), comp)
	require.NoError(t, err)
	assert.Equal(t, []string{StatusDone, StatusDone, StatusDone, StatusDone}, statuses(rep))
	assert.Equal(t, map[string]int{"skip-detail": 1, "skip-note": 1, "skip-bare": 1, "completed": 1}, calls, "none run again")
	var details []string
	for _, s := range rep.Steps {
		details = append(details, strings.Join(s.Details, "; "))
	}
	assert.Equal(t, []string{
		"done 2026-11-26T12:30:00Z (nothing to do: every node has 10.240.0.0/16)",
		"done 2026-11-26T12:30:00Z (found by its label)",
		"done 2026-11-26T12:30:00Z",
		"done 2026-11-26T12:30:00Z",
	}, details)
}

// A composition of read-only steps records its intent and plans at the
// end; when that fails, the run fails.
func TestRunnerFailsWhenAReadOnlyRunCannotRecordItsPlans(t *testing.T) {
	check := StepFunc{StepName: "check", Check: true, DoFunc: func(context.Context, *Env, *StepReport) error { return nil }}
	comp := savingComposition{steps: []Step{check}, save: func(context.Context, Journal) error { return errors.New("disk full") }}
	_, err := (&Runner{Mode: ModeApply, JournalDir: t.TempDir()}).Run(t.Context(), comp)
	require.EqualError(t, err, "disk full")
}

type savingComposition struct {
	steps []Step
	save  func(context.Context, Journal) error
}

func (c savingComposition) Kind() string { return "saving" }
func (c savingComposition) Prepare(context.Context, *Env) (*Prepared, error) {
	return &Prepared{Intent: "x", Steps: c.steps, Save: c.save}, nil
}
