package kubetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrLockLost is what a Lock's Check returns once it is lost.
var ErrLockLost = errors.New("test lock lost")

// Lock is a lock for the Lock options of the packages' Apply functions: held
// from Lock until every release has run, and lost (Check returns
// ErrLockLost) once ChecksLeft checks have passed; a negative ChecksLeft is
// never lost.
type Lock struct {
	mu         sync.Mutex
	holds      int
	ChecksLeft int
	// Name, when set, is in the error of a lost lock, as a Lease's
	// namespace/name is in its.
	Name string
}

// Lock takes the lock; it never fails.
func (l *Lock) Lock(context.Context) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holds++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.holds--
			l.mu.Unlock()
		})
	}, nil
}

// Check fails when the lock is not held or is lost.
func (l *Lock) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.holds == 0:
		return errors.New("test lock not held")
	case l.ChecksLeft == 0 && l.Name != "":
		return fmt.Errorf("%w: lease %s", ErrLockLost, l.Name)
	case l.ChecksLeft == 0:
		return ErrLockLost
	case l.ChecksLeft > 0:
		l.ChecksLeft--
	}
	return nil
}

// Lose makes the lock lost from now on, as a Lease another run took over.
func (l *Lock) Lose() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ChecksLeft = 0
}

// Held reports whether a Lock call has not been released.
func (l *Lock) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holds > 0
}
