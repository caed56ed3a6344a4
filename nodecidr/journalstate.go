package nodecidr

import (
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cidrshift/cidrshift/internal/journal"
)

// JournalState is what a journal directory says about the run it holds.
type JournalState struct {
	PlanID string `json:"planID"`
	// Plan is the plan the run applies.
	Plan *Plan `json:"plan"`
	// Note is ApplyOptions.Note of the run.
	Note    string    `json:"note,omitempty"`
	Started time.Time `json:"started"`
	// Phases has the last recorded phase of every planned node the run
	// reached; nodes it never reached are absent.
	Phases map[string]Phase `json:"phases"`
	// Finished is true when every planned node is done.
	Finished bool `json:"finished"`
	// backups are the nodes as deleted, by name.
	backups map[string]*nodeRecord
}

// ReadJournal reads the run held in a journal directory. It returns (nil,
// nil) when the directory does not exist or holds no run, and an error
// wrapping ErrJournalLocked while another process uses it.
func ReadJournal(dir string) (*JournalState, error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	j, err := journal.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("reading journal: %w", err)
	}
	defer j.Close()
	var run runRecord
	found, err := j.Get(runKey, &run)
	if err != nil || !found {
		return nil, err
	}
	if run.Plan == nil {
		return nil, fmt.Errorf("%w: journal %s holds a run record without a plan", ErrInvalidPlan, dir)
	}
	st := &JournalState{PlanID: run.PlanID, Plan: run.Plan, Note: run.Note, Started: run.Started,
		Phases: map[string]Phase{}, backups: map[string]*nodeRecord{}}
	done := 0
	for _, s := range run.Plan.Steps {
		var rec nodeRecord
		ok, err := j.Get(nodeKey(s.Node), &rec)
		if err != nil {
			return nil, err
		}
		if !ok || rec.PlanID != run.PlanID {
			continue
		}
		st.Phases[s.Node] = rec.Phase
		st.backups[s.Node] = &rec
		if rec.Phase == PhaseDone {
			done++
		}
	}
	st.Finished = done == len(run.Plan.Steps)
	return st, nil
}

// Backup returns the full Node as the run deleted it, if it did.
func (s *JournalState) Backup(node string) (*corev1.Node, bool) {
	rec := s.backups[node]
	if rec == nil || rec.Backup == nil {
		return nil, false
	}
	return rec.Backup.DeepCopy(), true
}
