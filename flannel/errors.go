package flannel

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinel errors. Every error this package returns wraps one of them (or a
// context / transport error from the store), so callers can match the kind of
// failure with errors.Is and the details with errors.As.
var (
	// ErrInvalidConfig means a network config (etcd <prefix>/config or
	// net-conf.json) is malformed or would be refused by flanneld.
	ErrInvalidConfig = errors.New("invalid flannel network config")
	// ErrConfigNotFound means <prefix>/config does not exist in etcd.
	ErrConfigNotFound = errors.New("flannel network config not found")
	// ErrBadKey means a key under <prefix>/subnets/ is not a subnet lease key flanneld can read.
	ErrBadKey = errors.New("not a flannel subnet key")
	// ErrBadLease means a lease value is not JSON flanneld can read.
	ErrBadLease = errors.New("not a flannel lease value")
	// ErrBadSubnetEnv means a subnet.env file cannot be read.
	ErrBadSubnetEnv = errors.New("invalid subnet.env")
	// ErrConflict means the store changed since it was read: a write was refused
	// because a key's mod revision (etcd) or resourceVersion (Kubernetes) moved.
	ErrConflict = errors.New("conflict")
	// ErrLeaseNotFound means an etcd lease (TTL) no longer exists, usually
	// because it expired.
	ErrLeaseNotFound = errors.New("etcd lease not found")
	// ErrNotFound means a key, lease or object named in a request does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalidRequest means a request (a plan to build, a flag) is malformed.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrInvalidPlan means a plan breaks its own invariants (a step whose
	// fields disagree, a destination outside the network or overlapping
	// another lease, a key in two steps): it was edited or corrupted. Apply
	// refuses it before the first write. Such errors also wrap
	// ErrInvalidRequest.
	ErrInvalidPlan = errors.New("invalid plan")
	// ErrStalePlan means a plan does not belong to the store it is applied to
	// (another prefix, another ConfigMap UID).
	ErrStalePlan = errors.New("plan does not match the store")
	// ErrNoFreeSubnet means no free subnet is left for a lease move.
	ErrNoFreeSubnet = errors.New("no free subnet left")
	// ErrForbidden means the caller lacks a permission a change needs.
	ErrForbidden = errors.New("forbidden")
)

// ConfigError reports a network config field that is malformed or that
// flanneld would refuse. It wraps ErrInvalidConfig.
type ConfigError struct {
	// Field is the config field, e.g. "SubnetLen" or "Backend.Type".
	Field string
	// Value is the offending value as written (empty when the field is missing).
	Value string
	// Reason says what is wrong and what would be valid.
	Reason string
	// Flanneld is the message flanneld itself gives for the same problem, when it
	// has one (flanneld exits with it at start-up).
	Flanneld string
}

// Error implements error.
func (e *ConfigError) Error() string {
	msg := "flannel config: " + e.Field
	if e.Value != "" {
		msg += " " + strconv.Quote(e.Value)
	}
	msg += ": " + e.Reason
	if e.Flanneld != "" {
		msg += " (flanneld: " + strconv.Quote(e.Flanneld) + ")"
	}
	return msg
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// ParseError reports outside input (a lease key, a lease value, a subnet.env
// line) that cannot be read. It wraps one of ErrBadKey, ErrBadLease or
// ErrBadSubnetEnv.
type ParseError struct {
	// What names the input: a key, a file name, a field.
	What string
	// Input is the offending text (truncated when long).
	Input string
	// Reason says what is wrong and what would be valid.
	Reason string
	// Err is the sentinel.
	Err error
}

// Error implements error.
func (e *ParseError) Error() string {
	if e.Input == "" {
		return fmt.Sprintf("%s: %s", e.What, e.Reason)
	}
	return fmt.Sprintf("%s %s: %s", e.What, strconv.Quote(truncate(e.Input, 120)), e.Reason)
}

// Unwrap returns the sentinel.
func (e *ParseError) Unwrap() error { return e.Err }

// ConflictError reports that a write was refused because what it was based on
// changed: in etcd, the key's mod revision is no longer the one the plan read
// (flanneld renewed the lease, or someone else edited it); in Kubernetes, the
// object's resourceVersion moved. Nothing was written. It wraps ErrConflict.
type ConflictError struct {
	// Key is the etcd key, or "namespace/name" of the Kubernetes object.
	Key string
	// Expected is the mod revision (or resourceVersion) the plan assumed; "0"
	// means the key was expected to be absent.
	Expected string
	// Actual is what the store holds now; "0" means the key is absent.
	Actual string
	// Reason says what changed and what to do.
	Reason string
}

// Error implements error.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("conflict on %s: expected revision %s, found %s: %s", e.Key, e.Expected, e.Actual, e.Reason)
}

// Unwrap returns ErrConflict.
func (e *ConflictError) Unwrap() error { return ErrConflict }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
