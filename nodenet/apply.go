package nodenet

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
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
