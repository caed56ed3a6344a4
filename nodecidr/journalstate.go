package nodecidr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

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
	// Cluster is set when the state was read from a cluster journal.
	Cluster *ClusterRun `json:"cluster,omitempty"`
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
	return readState(j, "journal "+dir)
}

// ReadClusterJournal reads, without writing anything, the unfinished run
// that the cluster copy of a journal (ApplyOptions.ClusterJournal) holds: a
// run started on another machine, to be resumed by applying its plan with
// the same ClusterJournal and an empty or new JournalDir (Apply takes the
// records over under its Lock). It returns (nil, nil) when the cluster holds
// no unfinished run.
func ReadClusterJournal(ctx context.Context, client kubernetes.Interface, cj ClusterJournal) (*JournalState, error) {
	opts := cj.options(client)
	snap, err := journal.ReadCluster(ctx, opts)
	if err != nil {
		if errors.Is(err, journal.ErrClusterRun) {
			err = fmt.Errorf("%w: %w", ErrJournalConflict, err)
		}
		return nil, fmt.Errorf("reading cluster journal: %w", err)
	}
	if snap == nil {
		return nil, nil
	}
	st, err := readState(snap, fmt.Sprintf("cluster journal %s/%s run %s", opts.Namespace, opts.Scope, snap.Run))
	if st != nil {
		st.Cluster = &ClusterRun{Run: snap.Run, StartedBy: snap.StartedBy, Started: snap.Started}
	}
	return st, err
}

// ClusterRun says which run of a cluster journal a JournalState comes from.
type ClusterRun struct {
	// Run is the run's id (label journal.cidrshift.io/run).
	Run string `json:"run"`
	// StartedBy is the holder that opened it, user@host/pid.
	StartedBy string `json:"startedBy"`
	// Started is when it was opened.
	Started time.Time `json:"started"`
}

// readState builds the JournalState of the run in a journal (where names it
// in errors).
func readState(j interface {
	Get(key string, v any) (bool, error)
}, where string) (*JournalState, error) {
	var run runRecord
	found, err := j.Get(runKey, &run)
	if err != nil || !found {
		return nil, err
	}
	if run.Plan == nil {
		return nil, fmt.Errorf("%w: %s holds a run record without a plan", ErrInvalidPlan, where)
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
