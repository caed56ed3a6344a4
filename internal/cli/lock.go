package cli

import (
	"context"
	"flag"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/internal/lease"
)

// LockFlags are the cluster-lock flags every mutating example takes:
// --lock-namespace, --steal-lock, --lock-duration and --no-lock.
//
// RBAC of the lock: get, create and update on leases.coordination.k8s.io in
// --lock-namespace.
type LockFlags struct {
	// Namespace of the Lease (--lock-namespace).
	Namespace string
	// Steal takes over a Lease that expired (--steal-lock).
	Steal bool
	// Duration of the Lease (--lock-duration).
	Duration time.Duration
	// Off takes no Lease (--no-lock).
	Off bool
}

// Register adds the flags to fs.
func (f *LockFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Namespace, "lock-namespace", lease.DefaultNamespace, "namespace of the Lease that keeps two runs apart (and of the journal kept in the cluster)")
	fs.BoolVar(&f.Steal, "steal-lock", false, "take over the Lease of a run that stopped renewing it and let it expire (a killed run on another machine); a Lease still renewed is never taken")
	fs.DurationVar(&f.Duration, "lock-duration", lease.DefaultDuration, "how long the Lease stays valid after each renewal (whole seconds): how long another machine waits before --steal-lock can take over a killed run")
	fs.BoolVar(&f.Off, "no-lock", false, "take no Lease and keep no journal in the cluster, for a caller that may not write Leases and ConfigMaps in --lock-namespace; nothing then stops a second run")
}

// Check validates the flags: a *UsageError naming the flag and the value.
func (f *LockFlags) Check() error {
	if f.Off && f.Steal {
		return Usagef("--steal-lock and --no-lock exclude each other")
	}
	// The rules are the Lease's own, checked one field at a time.
	if err := (lease.Options{Namespace: f.Namespace, Name: lease.ScopeNodeCIDR}).Validate(); err != nil || f.Namespace == "" {
		return Usagef("--lock-namespace %q: want a namespace name (a DNS label: lower-case letters, digits and '-')", f.Namespace)
	}
	if err := (lease.Options{Name: lease.ScopeNodeCIDR, Duration: f.Duration}).Validate(); err != nil || f.Duration == 0 {
		return Usagef("--lock-duration %s: want whole seconds, at least 1s", f.Duration)
	}
	return nil
}

// Lease returns the Lease of scope the flags describe, or nil with --no-lock.
func (f *LockFlags) Lease(client kubernetes.Interface, scope string) (*lease.Lease, error) {
	if f.Off {
		return nil, nil
	}
	return lease.New(client, lease.Options{Namespace: f.Namespace, Name: scope, Duration: f.Duration, Steal: f.Steal})
}

// Hold takes the Lease of scope around a library call that has no lock
// option of its own: it returns at once with a *lease.HeldError naming the
// holder when another run holds it. The Lease is renewed until release,
// which is never nil; with --no-lock nothing is taken.
func (f *LockFlags) Hold(ctx context.Context, client kubernetes.Interface, scope string) (release func(), err error) {
	l, err := f.Lease(client, scope)
	if err != nil || l == nil {
		return func() {}, err
	}
	release, err = l.Lock(ctx)
	if err != nil {
		return func() {}, fmt.Errorf("taking the lock: %w", err)
	}
	return release, nil
}

// Locker returns, for a run that writes (or server-dry-runs), the Leases of
// scopes held together (lease.Group); nil for a plan or with --no-lock.
func (f *LockFlags) Locker(client kubernetes.Interface, writes bool, scopes ...string) (lease.Locker, error) {
	if f.Off || !writes {
		return nil, nil
	}
	return lease.NewGroup(client, lease.Options{Namespace: f.Namespace, Duration: f.Duration, Steal: f.Steal}, scopes...)
}
