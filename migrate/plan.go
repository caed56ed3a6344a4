package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cidrshift/cidrshift/internal/journal"
)

// ErrStalePlan means a reviewed Plan no longer matches what the migration
// would do now: the cluster (or the journal) moved on since it was made.
var ErrStalePlan = errors.New("stale plan")

// Plan is a migration's reviewable document: what was asked and every step
// with what it will change. Make it with Runner.Plan, review or commit it
// (it serialises with sigs.k8s.io/yaml or encoding/json), and carry it out
// with Runner.ApplyPlan, which refuses it when the cluster has moved on.
type Plan struct {
	Kind   string          `json:"kind"`
	Intent json.RawMessage `json:"intent,omitempty"`
	Steps  []PlannedStep   `json:"steps"`
}

// PlannedStep is one step of a Plan.
type PlannedStep struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	// Status is StatusPlanned, or StatusDone for a step an earlier run of
	// the same journal finished.
	Status string `json:"status"`
	// Changes says what the step will change.
	Changes []string `json:"changes,omitempty"`
}

// Plan runs the composition in ModePlan (whatever r.Mode says) and returns
// its Plan. It writes nothing.
func (r *Runner) Plan(ctx context.Context, c Composition) (*Plan, error) {
	pr := *r
	pr.Mode, pr.Lock = ModePlan, nil
	rep, err := pr.run(ctx, c)
	if err != nil {
		return nil, err
	}
	return planOf(rep)
}

func planOf(rep *Report) (*Plan, error) {
	p := &Plan{Kind: rep.Kind}
	if rep.Intent != nil {
		b, err := json.Marshal(rep.Intent)
		if err != nil {
			return nil, fmt.Errorf("encoding the %s intent: %w", rep.Kind, err)
		}
		p.Intent = b
	}
	for _, s := range rep.Steps {
		p.Steps = append(p.Steps, PlannedStep{Name: s.Name, Title: s.Title, Status: s.Status, Changes: s.Details})
	}
	return p, nil
}

// ApplyPlan carries out a reviewed Plan in r.Mode (ModeApply or
// ModeServerDryRun). Before the first write of a run that has not started
// (no intent in the journal) it plans again and refuses, with
// ErrStalePlan, a plan whose kind, intent or any step's changes differ
// from what the migration would do now. A run that has started resumes
// from its journal, which must record the plan's intent.
func (r *Runner) ApplyPlan(ctx context.Context, c Composition, p *Plan) (*Report, error) {
	if p == nil {
		return nil, inputf("plan: missing")
	}
	if p.Kind != c.Kind() {
		return nil, fmt.Errorf("%w: the plan is for a %q migration, not %q", ErrStalePlan, p.Kind, c.Kind())
	}
	if r.Mode != ModeApply && r.Mode != ModeServerDryRun {
		return nil, inputf("mode %q: a plan is carried out in %s or %s", r.Mode, ModeApply, ModeServerDryRun)
	}
	if r.Lock != nil {
		release, err := r.Lock.Lock(ctx)
		if err != nil {
			return nil, fmt.Errorf("taking the migration lock: %w", err)
		}
		defer release()
	}
	started, err := r.started()
	if err != nil {
		return nil, err
	}
	pr := *r
	pr.Mode = ModePlan
	rep, err := pr.run(ctx, c)
	if err != nil {
		return nil, err
	}
	now, err := planOf(rep)
	if err != nil {
		return nil, err
	}
	if err := now.matches(p, started); err != nil {
		return nil, err
	}
	return r.run(ctx, c)
}

// started reports whether the journal records an intent: a run began.
func (r *Runner) started() (bool, error) {
	if r.JournalDir == "" {
		return false, nil
	}
	if _, err := os.Stat(r.JournalDir); err != nil {
		return false, nil
	}
	j, err := journal.Open(r.JournalDir)
	if err != nil {
		return false, fmt.Errorf("journal %s: %w", r.JournalDir, err)
	}
	defer j.Close()
	return j.Get(IntentKey, new(any))
}

// matches checks the reviewed plan p against the fresh plan now. Once a run
// has started, earlier steps change what later ones would describe, so only
// the intent is compared.
func (now *Plan) matches(p *Plan, started bool) error {
	var a, b any
	if err := json.Unmarshal(orNull(now.Intent), &a); err != nil {
		return fmt.Errorf("decoding the intent: %w", err)
	}
	if err := json.Unmarshal(orNull(p.Intent), &b); err != nil {
		return inputf("plan: intent: %v", err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		return fmt.Errorf("%w: the plan asks for %s, the migration now resolves to %s", ErrStalePlan, jb, ja)
	}
	if started {
		return nil
	}
	if len(now.Steps) != len(p.Steps) {
		return fmt.Errorf("%w: the plan has %d steps, the migration now has %d", ErrStalePlan, len(p.Steps), len(now.Steps))
	}
	for i, s := range now.Steps {
		q := p.Steps[i]
		if s.Name != q.Name {
			return fmt.Errorf("%w: step %d is %q in the plan, %q now", ErrStalePlan, i+1, q.Name, s.Name)
		}
		if !slices.Equal(s.Changes, q.Changes) {
			return fmt.Errorf("%w: step %s would now change %q, the plan says %q", ErrStalePlan, s.Name, s.Changes, q.Changes)
		}
	}
	return nil
}

func orNull(b json.RawMessage) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}
