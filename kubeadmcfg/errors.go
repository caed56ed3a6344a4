package kubeadmcfg

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error this package returns wraps one of them (or an
// error of the Kubernetes client), so callers can match the kind of failure
// with errors.Is and the details with errors.As.
var (
	// ErrUnsupportedVersion means a document has an apiVersion this package
	// does not read; the *VersionError names it and the supported ones.
	ErrUnsupportedVersion = errors.New("unsupported apiVersion")
	// ErrInvalid means input is not valid YAML or does not have the shape the
	// component expects (a *FieldError names the field and the value).
	ErrInvalid = errors.New("invalid configuration")
	// ErrNotFound means something looked up is absent: a ConfigMap key, a
	// container, a document of the right kind.
	ErrNotFound = errors.New("not found")
	// ErrUnsupportedLayout means an edit cannot be made as a minimal text
	// change (for example a flow-style command list in a static-pod
	// manifest), and rewriting the whole file is not allowed for that file.
	ErrUnsupportedLayout = errors.New("cannot edit this layout in place")
	// ErrStalePlan means the cluster no longer matches what a Plan assumed
	// (another resourceVersion, other contents): make a new plan.
	ErrStalePlan = errors.New("plan is stale")
	// ErrForbidden means the caller lacks a permission Apply needs.
	ErrForbidden = errors.New("permission denied")
	// ErrNothingToDo means an Intent asks for nothing that differs from the
	// cluster: every source read already agrees with it.
	ErrNothingToDo = errors.New("nothing to change")
)

// FieldError reports a value that cannot be read or written, naming where it
// is, the field, the offending value and what would be valid.
type FieldError struct {
	// Source names the document, e.g. "ConfigMap kube-system/kubeadm-config key ClusterConfiguration".
	Source string
	// Field is the field path or flag, e.g. "networking.podSubnet" or "--cluster-cidr".
	Field string
	// Value is the offending value as written.
	Value string
	// Reason says what is wrong and what would be valid.
	Reason string
	// Err is the sentinel or underlying error (ErrInvalid, a cidr error, ...).
	Err error
}

// Error names the source, the field, the value and the reason.
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		b.WriteString(": ")
	}
	b.WriteString(e.Field)
	if e.Value != "" {
		fmt.Fprintf(&b, " %q", e.Value)
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *FieldError) Unwrap() error { return e.Err }

// VersionError reports a document whose apiVersion this package does not support.
type VersionError struct {
	// Source names the document.
	Source string
	// Kind is the document's kind, e.g. "ClusterConfiguration".
	Kind string
	// APIVersion is the version found.
	APIVersion string
	// Supported lists the versions that are read.
	Supported []string
}

// Error names the version found and the supported ones.
func (e *VersionError) Error() string {
	src := ""
	if e.Source != "" {
		src = e.Source + ": "
	}
	return fmt.Sprintf("%sunsupported %s apiVersion %q; supported: %s", src, e.Kind, e.APIVersion, strings.Join(e.Supported, ", "))
}

// Unwrap returns ErrUnsupportedVersion.
func (e *VersionError) Unwrap() error { return ErrUnsupportedVersion }

// invalid builds a *FieldError wrapping ErrInvalid.
func invalid(source, field, value, reason string) error {
	return &FieldError{Source: source, Field: field, Value: value, Reason: reason, Err: ErrInvalid}
}
