package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// Locker is what the mutating entry points of the packages accept as their
// lock option (each package declares the same two methods as its own
// Locker): a *Lease, a *Group of them, or a test double.
type Locker interface {
	// Lock takes the lock or fails at once; it may be called again by the
	// holder, and release then runs once per call.
	Lock(ctx context.Context) (release func(), err error)
	// Check returns nil while the lock is still held.
	Check() error
}

// Hold takes l before a run's first write and returns its release, which
// is never nil; a nil l takes nothing.
func Hold(ctx context.Context, l Locker) (release func(), err error) {
	if l == nil {
		return func() {}, nil
	}
	release, err = l.Lock(ctx)
	if err != nil {
		return func() {}, fmt.Errorf("taking the lock: %w", err)
	}
	return release, nil
}

// HoldFor takes l around one write of a mutating call that has a lock
// option, and returns its release, which is never nil; a nil l takes
// nothing. The caller may pass the lock of its own run (its holder may take
// it again): a lock not held any more is refused with CheckHeld's error, so
// a run that lost its lock does not write. what says what is not done
// ("not creating ServiceCIDR new").
func HoldFor(ctx context.Context, l Locker, what string) (release func(), err error) {
	release, err = Hold(ctx, l)
	if err != nil {
		return release, fmt.Errorf("%s: %w", what, err)
	}
	if err := CheckHeld(l, what); err != nil {
		release()
		return func() {}, err
	}
	return release, nil
}

// CheckHeld returns nil when l is nil or still held, and otherwise an error
// that says what is not done ("not deleting Service default/dns"), to be
// returned before that destructive call.
func CheckHeld(l Locker, what string) error {
	if l == nil {
		return nil
	}
	if err := l.Check(); err != nil {
		return fmt.Errorf("%s: the run no longer holds its lock: %w", what, err)
	}
	return nil
}

// Group is several Leases held together, for a run that spans several
// migration scopes (a pod-CIDR runbook rewrites nodes, the CNI's
// configuration and kubeadm's). Lock takes them in order and, when one is
// refused, releases those it took; Check fails when any is lost. Like a
// Lease, a Group may be locked again by its holder.
type Group struct {
	leases []*Lease
}

// NewGroup returns the Group of the Leases named scopes, with the other
// options shared. Scopes named twice are taken once.
func NewGroup(client kubernetes.Interface, opts Options, scopes ...string) (*Group, error) {
	if len(scopes) == 0 {
		return nil, fmt.Errorf("%w: no lock scope", ErrInvalid)
	}
	g := &Group{}
	seen := map[string]bool{}
	for _, s := range scopes {
		if seen[s] {
			continue
		}
		seen[s] = true
		o := opts
		o.Name = s
		l, err := New(client, o)
		if err != nil {
			return nil, err
		}
		g.leases = append(g.leases, l)
	}
	return g, nil
}

// String lists the Leases, namespace/name, comma-separated.
func (g *Group) String() string {
	names := make([]string, len(g.leases))
	for i, l := range g.leases {
		names[i] = l.String()
	}
	return strings.Join(names, ", ")
}

// Lock takes every Lease of the group, or none: a *HeldError of the first
// Lease another run holds is returned after the ones taken are released.
func (g *Group) Lock(ctx context.Context) (release func(), err error) {
	releases := make([]func(), 0, len(g.leases))
	all := func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	for _, l := range g.leases {
		r, err := l.Lock(ctx)
		if err != nil {
			all()
			return nil, err
		}
		releases = append(releases, r)
	}
	return all, nil
}

// Check returns nil while every Lease of the group is held.
func (g *Group) Check() error {
	var errs []error
	for _, l := range g.leases {
		if err := l.Check(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
