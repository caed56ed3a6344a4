package cidr

import (
	"errors"
	"fmt"
	"net/netip"
)

// Sentinel errors. Every error this package returns wraps one of them, so callers
// can match the kind of failure with errors.Is and the details with errors.As.
var (
	// ErrEmpty means the input was empty or only white space.
	ErrEmpty = errors.New("empty CIDR")
	// ErrSyntax means the input is not an address/prefix-length pair.
	ErrSyntax = errors.New("not a valid CIDR")
	// ErrHostBitsSet means a CIDR typed for a new layout has bits set after its prefix.
	ErrHostBitsSet = errors.New("host bits set")
	// ErrMappedIPv6 means an IPv4-mapped IPv6 address (::ffff:a.b.c.d) was given.
	ErrMappedIPv6 = errors.New("IPv4-mapped IPv6 address")
	// ErrZone means an IPv6 zone (fe80::/64%eth0) was given.
	ErrZone = errors.New("IPv6 zone")
	// ErrDualStack means a CIDR list is not one CIDR or one CIDR of each family.
	ErrDualStack = errors.New("invalid dual-stack list")
	// ErrRule means a Kubernetes component would refuse a configuration.
	ErrRule = errors.New("configuration refused")
	// ErrOutOfRange means an address or subnet lies outside the range it must be in.
	ErrOutOfRange = errors.New("out of range")
	// ErrFull means an allocator has no free subnet left.
	ErrFull = errors.New("no free subnet left")
	// ErrOccupied means a subnet is already held.
	ErrOccupied = errors.New("subnet already occupied")
	// ErrNotHeld means a subnet being released is not held.
	ErrNotHeld = errors.New("subnet not held")
	// ErrMask means a subnet has the wrong prefix length for its range.
	ErrMask = errors.New("wrong mask size")
	// ErrFamily means IPv4 and IPv6 values were mixed where one family is required.
	ErrFamily = errors.New("IP family mismatch")
)

// ParseError reports input that is not an acceptable CIDR. Input is the text as
// given; Canonical is set when the input parsed but had host bits set.
type ParseError struct {
	// Field names the flag or setting the value came from, when the caller gave one.
	Field string
	// Input is the offending text.
	Input string
	// Canonical is the network the input denotes once its host bits are cleared.
	Canonical netip.Prefix
	// Err is the sentinel (ErrEmpty, ErrSyntax, ErrHostBitsSet, ...).
	Err error
	// Detail explains what is wrong and what would be valid.
	Detail string
}

func (e *ParseError) Error() string {
	prefix := ""
	if e.Field != "" {
		prefix = e.Field + ": "
	}
	switch {
	case errors.Is(e.Err, ErrHostBitsSet):
		return fmt.Sprintf("%s%s has host bits set; the network is %s", prefix, e.Input, e.Canonical)
	case errors.Is(e.Err, ErrEmpty):
		return prefix + "empty CIDR: want an address/prefix-length such as 10.244.0.0/16"
	}
	return fmt.Sprintf("%s%q: %s", prefix, e.Input, e.Detail)
}

// Unwrap returns the sentinel error.
func (e *ParseError) Unwrap() error { return e.Err }

// RuleError reports a configuration that a Kubernetes component would refuse,
// naming the component, the setting and its value.
type RuleError struct {
	// Component is the program that would refuse the value, e.g. "kube-controller-manager".
	Component string
	// Field is the flag or setting, e.g. "--node-cidr-mask-size".
	Field string
	// Value is the offending value as the component would see it.
	Value string
	// Reason says why it is refused and what would be valid.
	Reason string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("%s would refuse %s=%s: %s", e.Component, e.Field, e.Value, e.Reason)
}

// Unwrap returns ErrRule.
func (e *RuleError) Unwrap() error { return ErrRule }

// Component names used in RuleError.
const (
	KubeControllerManager = "kube-controller-manager"
	KubeAPIServer         = "kube-apiserver"
)
