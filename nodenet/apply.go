package nodenet

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// ApplyOptions tunes Apply.
type ApplyOptions struct {
	// LivePods are the node's pods as seen just before Apply, added to the
	// plan's: Apply never releases their reservations and defers every action
	// that takes away a range one of them uses.
	LivePods []Pod
	// DryRun reports what Apply would do and changes nothing.
	DryRun bool
	// OnEvent receives each action's outcome as it happens.
	OnEvent func(Outcome)
	// Journal, when set, durably records the plan before the first change,
	// and each action before it runs (JournalRecord without an Outcome) and
	// with its outcome after, so what Apply changed on a node survives a
	// crash of the caller. cidrshift's internal journal (a directory of
	// fsynced files) is one; the agent keeps it on the host. A failed
	// record stops Apply before the action it guards.
	Journal Recorder
}

// Recorder stores records durably under keys; Put returns once v is on
// stable storage, replacing an earlier record of the key.
type Recorder interface {
	Put(key string, v any) error
}

// JournalRecord is Apply's record of one action: Outcome is nil while it
// runs (a crash then leaves "started"), set once it has run.
type JournalRecord struct {
	Node    string    `json:"node"`
	Plan    string    `json:"plan"`
	Action  Action    `json:"action"`
	Outcome *Outcome  `json:"outcome,omitempty"`
	At      time.Time `json:"at"`
}

// JournalPrefix is the key prefix of Apply's records: JournalPrefix+<plan
// ID>+"/plan" holds the plan, JournalPrefix+<plan ID>+"/action-<index>"
// each action's JournalRecord.
const JournalPrefix = "nodenet/"

// ID identifies the plan's content: the journal keys of its Apply.
func (p *Plan) ID() string {
	data, _ := json.Marshal(p)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// Status is what happened to an action.
type Status string

// The statuses of an outcome.
const (
	// StatusDone: the action changed the node.
	StatusDone Status = "done"
	// StatusUnchanged: the node already was as the action wants (a re-run, or
	// someone else did it).
	StatusUnchanged Status = "unchanged"
	// StatusDeferred: the action takes away a range live pods still use; it
	// runs in a later plan, once they have moved.
	StatusDeferred Status = "deferred"
	// StatusSkipped: what the action was planned against changed (a
	// reservation now held by another container, a rule or link gone, a
	// subnet.env flanneld rewrote); audit and plan again.
	StatusSkipped Status = "skipped"
	// StatusDryRun: the action would run (ApplyOptions.DryRun).
	StatusDryRun Status = "dry-run"
)

// Outcome is what Apply did with one action.
type Outcome struct {
	// Index is the action's position in the plan.
	Index  int        `json:"index"`
	Kind   ActionKind `json:"kind"`
	Object string     `json:"object"`
	Status Status     `json:"status"`
	// Detail says what was done, or why not.
	Detail string `json:"detail,omitempty"`
}

// String renders "#index kind object: status (detail)".
func (o Outcome) String() string {
	s := "#" + strconv.Itoa(o.Index) + " " + string(o.Kind) + " " + o.Object + ": " + string(o.Status)
	if o.Detail != "" {
		s += " (" + o.Detail + ")"
	}
	return s
}

// Result is what Apply did.
type Result struct {
	Node     string    `json:"node"`
	Outcomes []Outcome `json:"outcomes"`
}

// Deferred returns the outcomes of deferred actions: the plan is not finished
// while there are any.
func (r *Result) Deferred() []Outcome {
	var out []Outcome
	for _, o := range r.Outcomes {
		if o.Status == StatusDeferred {
			out = append(out, o)
		}
	}
	return out
}

// capNetAdmin is CAP_NET_ADMIN's bit in the capability sets.
const capNetAdmin = 12

// hasNetAdmin reports whether a /proc/PID/status file shows CAP_NET_ADMIN in
// the effective set.
func hasNetAdmin(status []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<capNetAdmin) != 0
		}
	}
	return false
}
