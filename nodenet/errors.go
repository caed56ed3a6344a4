package nodenet

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Sentinel errors. Every error this package returns wraps one of them (or, off
// Linux, errors.ErrUnsupported), so callers can match the kind of failure with
// errors.Is and the details with errors.As.
var (
	// ErrInvalidInput means a field of a Want, of ApplyOptions or of a CNI
	// config is malformed. Such errors are *FieldError values.
	ErrInvalidInput = errors.New("invalid input")
	// ErrHostPathMissing means a configured host directory does not exist,
	// such as RunFlannelDir when flanneld never ran on the node or the host's
	// root is not mounted where the Want says.
	ErrHostPathMissing = errors.New("host directory missing")
	// ErrNoIPTables means the host has no usable iptables: no iptables binary
	// (an nftables-only host) or a backend whose kernel tables are missing.
	ErrNoIPTables = errors.New("no usable iptables")
	// ErrUnknownBackend means the iptables binary is neither the nf_tables nor
	// the legacy variant, or Want.IPTablesBackend names another backend.
	ErrUnknownBackend = errors.New("unknown iptables backend")
	// ErrNoPrivilege means the process lacks CAP_NET_ADMIN, which every
	// change to links, routes and rules needs. Apply checks it before the
	// first change.
	ErrNoPrivilege = errors.New("missing privilege")
	// ErrInvalidPlan means a plan breaks its own invariants: it was edited or
	// corrupted. Apply refuses it before the first change.
	ErrInvalidPlan = errors.New("invalid plan")
	// ErrWrongNode means a plan names another node than the Want it is applied
	// with. Apply refuses it before the first change.
	ErrWrongNode = errors.New("plan is for another node")
	// ErrStalePlan means a plan was made for another podCIDR, network or host
	// layout than the Want it is applied with.
	ErrStalePlan = errors.New("plan does not match the want")
	// ErrNotConverged means Verify found error-severity findings: the node's
	// state is not (yet) what the Want says.
	ErrNotConverged = errors.New("node network not converged")
	// ErrInterrupted means an iptables command was killed by a signal before
	// it answered: the process stopping nodenet's caller (systemd stops a
	// unit's whole control group at once) or someone else ended it. What it
	// did is not known, and nothing says the host refused it: run again.
	ErrInterrupted = errors.New("iptables command killed by a signal")
)

// FieldError reports one field whose value is wrong, and what would be valid.
// It wraps Err (one of the sentinels above).
type FieldError struct {
	// Field names the field, e.g. "Want.PodCIDR" or "plan.actions[3].path".
	Field string
	// Value is the offending value as given.
	Value string
	// Reason says what is wrong and what would be valid.
	Reason string
	// Err is the sentinel.
	Err error
}

// Error implements error.
func (e *FieldError) Error() string {
	return fmt.Sprintf("nodenet: %s: %s %s: %s", e.Err, e.Field, strconv.Quote(e.Value), e.Reason)
}

// Unwrap returns the sentinel.
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(sentinel error, field, value, reason string, args ...any) *FieldError {
	return &FieldError{Field: field, Value: value, Reason: fmt.Sprintf(reason, args...), Err: sentinel}
}

// NotConvergedError is what Verify returns when the node's state is not yet
// the wanted one. It wraps ErrNotConverged.
type NotConvergedError struct {
	// Node is the node verified.
	Node string
	// Findings are the error-severity findings left.
	Findings []Finding
}

// Error implements error.
func (e *NotConvergedError) Error() string {
	codes := make([]string, 0, len(e.Findings))
	for _, f := range e.Findings {
		codes = append(codes, string(f.Code)+" ("+f.Object+")")
	}
	return fmt.Sprintf("nodenet: node %s: %s: %d error finding(s): %s", e.Node, ErrNotConverged, len(e.Findings), strings.Join(codes, ", "))
}

// Unwrap returns ErrNotConverged.
func (e *NotConvergedError) Unwrap() error { return ErrNotConverged }
