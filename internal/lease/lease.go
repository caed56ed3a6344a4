// Package lease is the cluster-wide lock of a cidrshift run: one
// coordination.k8s.io/v1 Lease per migration scope (for example
// "cidrshift-nodecidr"), in a namespace the caller chooses (default
// kube-system), taken, renewed and released through client-go's
// leaderelection/resourcelock.LeaseLock and its LeaderElectionRecord, so two
// operators cannot run conflicting migrations at once.
//
// The holder identity is user@host/pid. Lock takes the Lease at once or
// fails at once: a Lease another live run holds is refused with a
// *HeldError (errors.Is ErrHeld) that names the holder and when the Lease
// expires. While held, the Lease is renewed in the background; Check says,
// without an API call, whether it still is, so a run stops before its next
// destructive step once renewal has failed for two thirds of the lease
// duration or someone else holds the Lease. Releasing clears the holder (as
// client-go's ReleaseOnCancel does), so the next run does not wait.
//
// A Lease is taken over only from a holder that cannot be running:
//
//   - Steal takes over a Lease whose holder let it expire (renewTime plus
//     leaseDurationSeconds has passed); a Lease that has not expired is never
//     stolen;
//   - a holder on this machine whose process is gone (same host name, same
//     boot and process namespace, recorded in the label
//     LabelProcessNamespace, and no such pid, or a zombie) is taken over at
//     once: a run killed with SIGKILL is resumed by running it again.
//
// Expiry is judged with the holder's renewTime against this machine's clock,
// so the clocks of the machines that share a Lease must agree to well within
// the lease duration.
//
// RBAC: get, create and update on leases.coordination.k8s.io in the Lease's
// namespace.
package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

const (
	// DefaultNamespace holds the Leases unless Options.Namespace says otherwise.
	DefaultNamespace = "kube-system"
	// DefaultDuration is how long a Lease stays valid after its last renewal.
	DefaultDuration = 60 * time.Second
	// ScopeNodeCIDR is the Lease of node podCIDR rewrites (package nodecidr).
	ScopeNodeCIDR = "cidrshift-nodecidr"
	// ScopeServiceCIDR is the Lease of Service CIDR moves (package servicecidr).
	ScopeServiceCIDR = "cidrshift-servicecidr"
	// ScopeCalicoPool is the Lease of Calico IPPool swaps (package calico).
	ScopeCalicoPool = "cidrshift-calico-pool"
	// ScopeFlannel is the Lease of flannel network and subnet changes
	// (package flannel).
	ScopeFlannel = "cidrshift-flannel"
	// ScopeKubeadmConfig is the Lease of kubeadm configuration rewrites
	// (package kubeadmcfg).
	ScopeKubeadmConfig = "cidrshift-kubeadmcfg"
	// LabelProcessNamespace records on the Lease the boot and PID namespace
	// of the holder's process, so a run on the same machine can tell that
	// the holder's process is gone.
	LabelProcessNamespace = "lease.cidrshift.io/process-namespace"
)

var (
	// ErrHeld is wrapped by *HeldError: another run holds the Lease.
	ErrHeld = errors.New("lease is held by another run")
	// ErrLost means a held Lease could not be renewed in time or was taken
	// over: the run must stop before its next destructive step.
	ErrLost = errors.New("lease lost")
	// ErrNotHeld means Check was called without the Lease held.
	ErrNotHeld = errors.New("lease not held")
	// ErrInvalid means invalid Options.
	ErrInvalid = errors.New("invalid lease options")
)

// HeldError says who holds the Lease and until when.
type HeldError struct {
	// Lease is namespace/name.
	Lease string
	// Holder is the holder's identity, user@host/pid.
	Holder string
	// Expires is when the Lease expires unless renewed.
	Expires time.Time
	// Expired is true when Expires has passed: the holder stopped renewing
	// without releasing, so its run may have been killed.
	Expired bool
	// Steal is true when taking over was asked for (and refused because the
	// Lease has not expired).
	Steal bool
	now   time.Time
}

// Error names the holder and when the Lease expires, and what would let the
// caller in.
func (e *HeldError) Error() string {
	at := e.Expires.UTC().Format(time.RFC3339)
	switch {
	case e.Expired:
		return fmt.Sprintf("lease %s is held by %s, which stopped renewing it: it expired at %s (%s ago) without being released, so that run may have been killed mid-way; steal the lease (--steal-lock) to take it over and resume",
			e.Lease, e.Holder, at, e.now.Sub(e.Expires).Round(time.Second))
	case e.Steal:
		return fmt.Sprintf("lease %s is held by %s until %s (in %s); stealing takes over only an expired lease: wait for that run to finish or for its lease to expire",
			e.Lease, e.Holder, at, e.Expires.Sub(e.now).Round(time.Second))
	}
	return fmt.Sprintf("lease %s is held by %s until %s (in %s, renewed while it runs): another run is in progress; wait for it to finish",
		e.Lease, e.Holder, at, e.Expires.Sub(e.now).Round(time.Second))
}

// Unwrap returns ErrHeld.
func (e *HeldError) Unwrap() error { return ErrHeld }

// Options configures a Lease.
type Options struct {
	// Namespace of the Lease; empty means DefaultNamespace.
	Namespace string
	// Name of the Lease: the migration scope, such as ScopeNodeCIDR.
	Name string
	// Duration is how long the Lease stays valid after each renewal, in
	// whole seconds; zero means DefaultDuration. It is renewed every fifth
	// of it, and considered lost when not renewed for two thirds of it.
	Duration time.Duration
	// Steal takes the Lease over from a holder whose Lease has expired.
	Steal bool
	// Identity of the holder; empty means Identity().
	Identity string
}

// Lease is a cluster lock on one coordination.k8s.io/v1 Lease. Lock may be
// called again while held (for example by a composition and by the package
// call it makes): the Lease is released when every Lock's release has run.
type Lease struct {
	opts   Options
	client kubernetes.Interface
	lock   *resourcelock.LeaseLock
	procNS string
	gone   func(pid int) bool
	now    func() time.Time

	// api serialises the calls through lock, which is not safe for
	// concurrent use.
	api sync.Mutex

	mu      sync.Mutex
	holds   int
	record  resourcelock.LeaderElectionRecord // as last written
	renewed time.Time                         // when it was last written
	// renewErr is the last renewal's error; lost, once set, stays set
	// until the Lease is released.
	renewErr error
	lost     error
	stop     chan struct{}
	done     chan struct{}
	ctx      context.Context
	log      logr.Logger
}

// Validate checks the options (empty fields take their defaults), with
// errors wrapping ErrInvalid that name the field and the value.
func (o Options) Validate() error {
	if o.Namespace != "" {
		if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
			return fmt.Errorf("%w: namespace %q: %s", ErrInvalid, o.Namespace, strings.Join(errs, "; "))
		}
	}
	if errs := validation.IsDNS1123Subdomain(o.Name); len(errs) > 0 {
		return fmt.Errorf("%w: name %q: %s", ErrInvalid, o.Name, strings.Join(errs, "; "))
	}
	if o.Duration != 0 && (o.Duration < time.Second || o.Duration%time.Second != 0) {
		return fmt.Errorf("%w: duration %s: want whole seconds, at least 1s", ErrInvalid, o.Duration)
	}
	return nil
}

// New returns the Lease described by opts; nothing is read or written yet.
func New(client kubernetes.Interface, opts Options) (*Lease, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.Duration == 0 {
		opts.Duration = DefaultDuration
	}
	if opts.Identity == "" {
		opts.Identity = Identity()
	}
	procNS := processNamespace()
	return &Lease{
		opts:   opts,
		client: client,
		lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.Name},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: opts.Identity},
			Labels:     map[string]string{LabelProcessNamespace: procNS},
		},
		procNS: procNS,
		gone:   processGone,
		now:    time.Now,
	}, nil
}

// Identity returns this process's holder identity, user@host/pid.
func Identity() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s@%s/%d", name, host, os.Getpid())
}

// String is namespace/name.
func (l *Lease) String() string { return l.lock.Describe() }

// Holder returns the identity Lock writes into the Lease.
func (l *Lease) Holder() string { return l.opts.Identity }

// renewEvery is how often a held Lease is renewed.
func (l *Lease) renewEvery() time.Duration { return l.opts.Duration / 5 }

// deadline is how long a held Lease may go without renewal before Check
// reports it lost: others may take it only after the full duration.
func (l *Lease) deadline() time.Duration { return l.opts.Duration * 2 / 3 }

// Lock takes the Lease, or returns at once a *HeldError (errors.Is ErrHeld)
// naming the holder, or the API error. While held it is renewed in the
// background, beyond the end of ctx, until release is called; release clears
// the holder. ctx bounds the acquisition and gives the logger.
func (l *Lease) Lock(ctx context.Context) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holds > 0 {
		if err := l.checkLocked(); err != nil {
			return nil, err
		}
		l.holds++
		return l.releaser(), nil
	}
	l.log = logr.FromContextOrDiscard(ctx).WithValues("lease", l.String())
	l.ctx = context.WithoutCancel(ctx)
	if err := l.acquire(ctx); err != nil {
		return nil, err
	}
	l.holds, l.lost, l.renewErr = 1, nil, nil
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go l.renewLoop(l.stop, l.done)
	return l.releaser(), nil
}

// Check returns nil while the Lease is held and was renewed within two
// thirds of its duration; otherwise an error wrapping ErrLost (or
// ErrNotHeld). It makes no API call.
func (l *Lease) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checkLocked()
}

func (l *Lease) checkLocked() error {
	switch {
	case l.holds == 0:
		return fmt.Errorf("%w: lease %s", ErrNotHeld, l)
	case l.lost != nil:
		return l.lost
	}
	if since := l.now().Sub(l.renewed); since > l.deadline() {
		l.lost = fmt.Errorf("%w: lease %s was last renewed %s ago, more than %s: another run may take it over",
			ErrLost, l, since.Round(time.Millisecond), l.deadline())
		if l.renewErr != nil {
			l.lost = fmt.Errorf("%w; last renewal error: %w", l.lost, l.renewErr)
		}
		return l.lost
	}
	return nil
}

// acquire reads the Lease and takes it if it is free, ours, expired with
// Steal, or held by a process of this machine that is gone. A Lease created
// or changed by someone else meanwhile is looked at again.
func (l *Lease) acquire(ctx context.Context) error {
	l.api.Lock()
	defer l.api.Unlock()
	for attempt := 0; attempt < 3; attempt++ {
		now := l.now()
		rec, _, err := l.lock.Get(ctx)
		if apierrors.IsNotFound(err) {
			ler := l.newRecord(now, 0)
			err := l.lock.Create(ctx, ler)
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("creating lease %s: %w", l, err)
			}
			l.took(ler, now, "", "created")
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading lease %s: %w", l, err)
		}
		why, err := l.mayTake(ctx, rec, now)
		if errors.Is(err, errChanged) {
			continue
		}
		if err != nil {
			return err
		}
		transitions := rec.LeaderTransitions
		if rec.HolderIdentity != l.opts.Identity {
			transitions++
		}
		ler := l.newRecord(now, transitions)
		err = l.lock.Update(ctx, ler)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("taking lease %s (%s): %w", l, why, err)
		}
		l.took(ler, now, rec.HolderIdentity, why)
		return nil
	}
	return fmt.Errorf("taking lease %s: it kept changing while being taken; another run is starting: try again", l)
}

var errChanged = errors.New("lease changed while read")

func (l *Lease) newRecord(now time.Time, transitions int) resourcelock.LeaderElectionRecord {
	t := metav1.NewTime(now)
	return resourcelock.LeaderElectionRecord{
		HolderIdentity:       l.opts.Identity,
		LeaseDurationSeconds: int(l.opts.Duration / time.Second),
		AcquireTime:          t,
		RenewTime:            t,
		LeaderTransitions:    transitions,
	}
}

func (l *Lease) took(ler resourcelock.LeaderElectionRecord, now time.Time, previous, why string) {
	l.record, l.renewed = ler, now
	l.log.Info("took the lease", "holder", ler.HolderIdentity, "previousHolder", previous, "why", why, "duration", l.opts.Duration)
}

// mayTake says why the Lease in rec may be taken, or returns a *HeldError.
func (l *Lease) mayTake(ctx context.Context, rec *resourcelock.LeaderElectionRecord, now time.Time) (string, error) {
	holder := rec.HolderIdentity
	if holder == "" {
		return "free", nil
	}
	expires := rec.RenewTime.Add(time.Duration(rec.LeaseDurationSeconds) * time.Second)
	expired := !now.Before(expires)
	if host, pid, ok := parseIdentity(holder); ok && host == hostOf(l.opts.Identity) {
		// The holder ran on a machine of this name: its process namespace
		// label tells whether it is this machine (and boot).
		sameNS, err := l.sameProcessNamespace(ctx, rec)
		if err != nil {
			return "", err
		}
		switch {
		case sameNS && holder == l.opts.Identity:
			return "held by this process", nil
		case sameNS && l.procNS != "" && l.gone(pid):
			return fmt.Sprintf("holder %s: process %d is gone", holder, pid), nil
		}
	}
	if expired && l.opts.Steal {
		return fmt.Sprintf("stolen from %s, expired at %s", holder, expires.UTC().Format(time.RFC3339)), nil
	}
	return "", &HeldError{Lease: l.String(), Holder: holder, Expires: expires, Expired: expired, Steal: l.opts.Steal, now: now}
}

// sameProcessNamespace reports whether the Lease as read into rec carries
// this process's LabelProcessNamespace. LeaseLock returns only the record, so
// the labels are read with a second GET, accepted only if its record is the
// same (errChanged otherwise).
func (l *Lease) sameProcessNamespace(ctx context.Context, rec *resourcelock.LeaderElectionRecord) (bool, error) {
	obj, err := l.client.CoordinationV1().Leases(l.opts.Namespace).Get(ctx, l.opts.Name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("reading lease %s: %w", l, err)
	}
	again := resourcelock.LeaseSpecToLeaderElectionRecord(&obj.Spec)
	if again.HolderIdentity != rec.HolderIdentity || !again.RenewTime.Equal(&rec.RenewTime) {
		return false, errChanged
	}
	return obj.Labels[LabelProcessNamespace] == l.procNS, nil
}

// parseIdentity splits user@host/pid.
func parseIdentity(id string) (host string, pid int, ok bool) {
	i := strings.LastIndexByte(id, '/')
	if i < 0 {
		return "", 0, false
	}
	pid, err := strconv.Atoi(id[i+1:])
	if err != nil || pid <= 0 {
		return "", 0, false
	}
	host = hostOf(id)
	return host, pid, host != ""
}

// hostOf returns the host of user@host/pid.
func hostOf(id string) string {
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		id = id[:i]
	}
	return id[strings.LastIndexByte(id, '@')+1:]
}

// renewLoop renews the Lease until stop is closed, and marks it lost when
// it was taken over or could not be renewed within the deadline.
func (l *Lease) renewLoop(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(l.renewEvery())
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		err := l.renew()
		l.mu.Lock()
		if l.lost == nil {
			switch {
			case err == nil:
				l.renewed, l.renewErr = l.now(), nil
			case errors.Is(err, ErrLost):
				l.lost = err
			default:
				l.renewErr = err
				l.log.Info("renewing the lease failed; retrying", "err", err.Error())
				_ = l.checkLocked() // lost once past the deadline
			}
		}
		lost := l.lost
		l.mu.Unlock()
		if lost != nil {
			l.log.Info("lost the lease; the run stops before its next destructive step", "err", lost.Error())
			return
		}
	}
}

// renew writes a new renewTime; a Lease someone else now holds is ErrLost.
func (l *Lease) renew() error {
	l.api.Lock()
	defer l.api.Unlock()
	ctx, cancel := context.WithTimeout(l.ctx, l.deadline()/2)
	defer cancel()
	ler := l.record
	ler.RenewTime = metav1.NewTime(l.now())
	err := l.lock.Update(ctx, ler)
	if apierrors.IsConflict(err) {
		rec, _, gerr := l.lock.Get(ctx)
		if gerr != nil {
			return fmt.Errorf("renewing lease %s: %w (then: %w)", l, err, gerr)
		}
		if rec.HolderIdentity != l.opts.Identity {
			return fmt.Errorf("%w: lease %s was taken over by %q", ErrLost, l, rec.HolderIdentity)
		}
		err = l.lock.Update(ctx, ler)
	}
	if err != nil {
		return fmt.Errorf("renewing lease %s: %w", l, err)
	}
	l.record = ler
	return nil
}

// releaser returns the release function of one Lock call.
func (l *Lease) releaser() func() {
	var once sync.Once
	return func() { once.Do(l.release) }
}

// release drops one hold; the last one stops the renewal and clears the
// holder, unless someone else holds the Lease now.
func (l *Lease) release() {
	l.mu.Lock()
	l.holds--
	if l.holds > 0 {
		l.mu.Unlock()
		return
	}
	stop, done := l.stop, l.done
	l.mu.Unlock()
	close(stop)
	<-done
	// Cleared by compare-and-swap: a Lease someone else took over is left
	// to them.
	if err := l.clear(); err != nil {
		l.log.Info("releasing the lease failed; it expires on its own", "err", err.Error(), "expires", l.record.RenewTime.Add(l.opts.Duration))
		return
	}
	l.log.V(1).Info("released the lease")
}

// clear writes a record without holder, as client-go's ReleaseOnCancel does.
func (l *Lease) clear() error {
	l.api.Lock()
	defer l.api.Unlock()
	ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
	defer cancel()
	// Read first: the update is a compare-and-swap against what was read,
	// and only a Lease this run still holds is cleared.
	rec, _, err := l.lock.Get(ctx)
	if err != nil {
		return err
	}
	if rec.HolderIdentity != l.opts.Identity {
		return nil // taken over: not ours to clear
	}
	now := metav1.NewTime(l.now())
	return l.lock.Update(ctx, resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1, AcquireTime: now, RenewTime: now, LeaderTransitions: rec.LeaderTransitions})
}
