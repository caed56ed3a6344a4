package servicecidr

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error this package returns for a condition it
// recognises wraps one of them, so callers can match it with errors.Is and
// get the details with errors.As on the typed errors below.
var (
	// ErrNotServed means the cluster serves no ServiceCIDR API version.
	ErrNotServed = errors.New("ServiceCIDR API not served")
	// ErrInvalid means a value given by the caller is not acceptable.
	ErrInvalid = errors.New("invalid value")
	// ErrImmutable means an update would change what the API server keeps immutable.
	ErrImmutable = errors.New("field is immutable")
	// ErrConflict means ranges or addresses collide.
	ErrConflict = errors.New("conflict")
	// ErrLastServiceCIDR means a delete would remove the last ServiceCIDR
	// that can still hand out ClusterIPs.
	ErrLastServiceCIDR = errors.New("refusing to delete the last usable ServiceCIDR")
	// ErrNotReady means a ServiceCIDR did not become Ready in time.
	ErrNotReady = errors.New("ServiceCIDR not ready")
	// ErrDeletionBlocked means a ServiceCIDR stays Terminating because
	// addresses still depend on it.
	ErrDeletionBlocked = errors.New("ServiceCIDR deletion is blocked")
	// ErrStalePlan means the cluster no longer matches what a plan assumed.
	ErrStalePlan = errors.New("plan is stale")
	// ErrRangeFull means a Service range has no free address left.
	ErrRangeFull = errors.New("no free address left in the range")
	// ErrDualWrite means Kubernetes 1.33's allocator dual-write refused a ClusterIP.
	ErrDualWrite = errors.New("ClusterIP refused by the Kubernetes 1.33 allocator dual-write")
	// ErrServiceLost means a Service was deleted and could not be recreated;
	// its full definition is kept in the journal.
	//lint:ignore ST1005 "Service" is the Kubernetes kind
	ErrServiceLost = errors.New("Service deleted but not recreated")
	// ErrPlanFormat means a plan file could not be read.
	ErrPlanFormat = errors.New("malformed plan")
)

// NotServedError says that no ServiceCIDR API version is served and what to
// enable for the cluster's Kubernetes version.
type NotServedError struct {
	// ServerVersion is the API server's gitVersion, when known.
	ServerVersion string
	// Minor is the Kubernetes 1.x minor version, 0 when unknown.
	Minor int
	// Advice says what to enable.
	Advice string
}

// Error implements error.
func (e *NotServedError) Error() string {
	v := e.ServerVersion
	if v == "" {
		v = "unknown version"
	}
	return fmt.Sprintf("no ServiceCIDR API (networking.k8s.io v1, v1beta1 or v1alpha1 servicecidrs) is served by this cluster (%s): %s", v, e.Advice)
}

// Unwrap returns ErrNotServed.
func (e *NotServedError) Unwrap() error { return ErrNotServed }

// FieldError names a field, the value found there and why it is not acceptable.
type FieldError struct {
	// Field is the flag or field path, e.g. "--to" or "spec.cidrs[1]".
	Field string
	// Value is the offending value as given.
	Value string
	// Reason says what is wrong and what would be valid.
	Reason string
	// Err is the sentinel: ErrInvalid, ErrImmutable, ErrConflict, ...
	Err error
	// Cause is the underlying error, such as a *cidr.ParseError or a
	// *cidr.RuleError, when there is one.
	Cause error
}

// Error implements error.
func (e *FieldError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("%s %q: %s", e.Field, e.Value, e.Reason)
}

// Unwrap returns the sentinel and the cause.
func (e *FieldError) Unwrap() []error {
	var out []error
	for _, err := range []error{e.Err, e.Cause} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// StalePlanError lists every way the cluster differs from what a plan assumed.
type StalePlanError struct {
	Differences []string
	// Midway is set when Apply found the difference after its first
	// writes (a Service changed while the run moved others): it stopped
	// there, what it changed before stays (its Result says what), and a
	// new plan takes up the rest.
	Midway bool
}

// Error implements error.
func (e *StalePlanError) Error() string {
	if e.Midway {
		return "plan went stale during the run, which stopped there; what it changed before stays; plan again: " + strings.Join(e.Differences, "; ")
	}
	return "plan is stale, nothing was changed; plan again: " + strings.Join(e.Differences, "; ")
}

// Unwrap returns ErrStalePlan.
func (e *StalePlanError) Unwrap() error { return ErrStalePlan }

// DeletionBlockedError is returned when waiting for a ServiceCIDR to go away
// times out; Report says what still holds it.
type DeletionBlockedError struct {
	Report DeletionReport
}

// Error implements error.
func (e *DeletionBlockedError) Error() string {
	return e.Report.String()
}

// Unwrap returns ErrDeletionBlocked.
func (e *DeletionBlockedError) Unwrap() error { return ErrDeletionBlocked }

// DualWriteError explains the Kubernetes 1.33 allocator trap: with
// DisableAllocatorDualWrite off (the 1.33 default) kube-apiserver mirrors
// every ClusterIP into the legacy bitmap allocator, whose range is stored in
// etcd and does not follow --service-cluster-ip-range, and refuses the
// Service with "the provided range does not match the current range".
type DualWriteError struct {
	// Service is namespace/name.
	Service string
	// ServerVersion is the API server's gitVersion.
	ServerVersion string
	// Err is the API server's answer.
	Err error
}

// Error implements error.
func (e *DualWriteError) Error() string {
	return fmt.Sprintf("creating Service %s on %s: %v: this is the Kubernetes 1.33 allocator dual-write "+
		"(DisableAllocatorDualWrite is off by default in 1.33; the legacy allocator's range is stored in etcd and does not follow the flag): "+
		"restart every kube-apiserver with --feature-gates=DisableAllocatorDualWrite=true and --service-cluster-ip-range set to the new range, "+
		"or upgrade to Kubernetes 1.34 or newer, then run apply again (the journal resumes)", e.Service, e.ServerVersion, e.Err)
}

// Unwrap returns both ErrDualWrite and the API server's error.
func (e *DualWriteError) Unwrap() []error { return []error{ErrDualWrite, e.Err} }

// ServiceLostError says a Service is absent because its recreation failed;
// the journal file holds the full object so nothing is lost.
type ServiceLostError struct {
	// Service is namespace/name.
	Service string
	// JournalKey is the key of the journal record holding the object.
	JournalKey string
	// JournalDir is the journal directory.
	JournalDir string
	Err        error
}

// Error implements error.
func (e *ServiceLostError) Error() string {
	return fmt.Sprintf("Service %s was deleted and could not be recreated: %v; its full definition is in journal %s record %q: fix the cause and run apply again with the same --journal to recreate it",
		e.Service, e.Err, e.JournalDir, e.JournalKey)
}

// Unwrap returns both ErrServiceLost and the cause.
func (e *ServiceLostError) Unwrap() []error { return []error{ErrServiceLost, e.Err} }
