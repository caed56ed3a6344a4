package nodecidr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Retry says how transient API errors (kube-apiserver restarting, timeouts,
// 429 and 5xx answers) are retried, with exponential backoff and jitter.
type Retry struct {
	// Initial is the first wait; zero means 200ms.
	Initial time.Duration `json:"initial,omitempty"`
	// Max caps the wait between two attempts; zero means 10s.
	Max time.Duration `json:"max,omitempty"`
	// Timeout bounds the retries of one call; zero means 2 minutes. The create
	// that follows a delete is not bounded by it: it is retried until it
	// succeeds or its context ends.
	Timeout time.Duration `json:"timeout,omitempty"`
}

var defaultRetry = Retry{}

func (r Retry) initial() time.Duration {
	if r.Initial <= 0 {
		return 200 * time.Millisecond
	}
	return r.Initial
}

func (r Retry) max() time.Duration {
	if r.Max <= 0 {
		return 10 * time.Second
	}
	return r.Max
}

func (r Retry) timeout() time.Duration {
	if r.Timeout <= 0 {
		return 2 * time.Minute
	}
	return r.Timeout
}

// IsTransient reports whether err is worth retrying: the API server could not
// be reached or answered "try again" (connection refused or reset, EOF, a
// timeout, 429 Too Many Requests, any 5xx).
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err) {
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Code >= 500
	}
	if utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		utilnet.IsTimeout(err) || utilnet.IsHTTP2ConnectionLost(err) {
		return true
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "TLS handshake timeout") ||
		strings.Contains(msg, "http2: client connection lost")
}

// retryTransient calls fn until it succeeds, fails with an error that is not
// transient, r.Timeout has passed, or ctx ends.
func retryTransient(ctx context.Context, r Retry, what string, fn func(context.Context) error) error {
	return retryUntil(ctx, r, what, time.Now().Add(r.timeout()), IsTransient, fn)
}

// retryUntil is retryTransient with an explicit deadline (zero: none) and
// retry predicate.
func retryUntil(ctx context.Context, r Retry, what string, deadline time.Time, retryable func(error) bool, fn func(context.Context) error) error {
	log := logr.FromContextOrDiscard(ctx)
	wait := r.initial()
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil || !retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		}
		d := wait + time.Duration(rand.Int64N(int64(wait)/5+1)) // with its jitter
		if !deadline.IsZero() && time.Now().Add(d).After(deadline) {
			return fmt.Errorf("%s: still failing after %d attempts in %s: %w", what, attempt, time.Since(start).Round(time.Millisecond), err)
		}
		log.V(1).Info("retrying", "call", what, "attempt", attempt, "wait", d, "err", err.Error())
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		case <-t.C:
		}
		wait = min(wait*2, r.max())
	}
}
