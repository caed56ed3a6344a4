package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// The exit codes every example program uses.
const (
	// ExitOK: done, or healthy.
	ExitOK = 0
	// ExitProblems: problems found, or the run stopped on a failed check.
	ExitProblems = 1
	// ExitBadInput: bad input or usage (flags, arguments, a plan file, a
	// kubeconfig or context that cannot be loaded). Nothing was changed.
	ExitBadInput = 2
	// ExitWaiting: the run is waiting for an operator; rerun to resume.
	ExitWaiting = 3
	// ExitUnreachable: the cluster cannot be reached, or access is
	// forbidden or unauthorized.
	ExitUnreachable = 4
	// ExitInterrupted: stopped by SIGINT or SIGTERM (128+2, as a shell
	// reports it); the journal lets the same command resume.
	ExitInterrupted = 130
)

// UsageError is bad input: exit code 2, one line naming the field and the
// value.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef returns a *UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// UnreachableError says the API server could not be reached (or refused the
// caller): exit code 4.
type UnreachableError struct {
	Host string
	Err  error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cluster at %s is unreachable: %v", e.Host, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// ExitCode maps an error to the exit code contract. badInput lists the
// caller's own sentinel errors that mean bad input (a package's
// ErrInvalidPlan, ErrInvalidOptions, ...). Bad input wins over everything
// else: a refused input never reached the cluster.
func ExitCode(err error, badInput ...error) int {
	if err == nil {
		return ExitOK
	}
	var ue *UsageError
	if errors.As(err, &ue) || errors.Is(err, flag.ErrHelp) {
		return ExitBadInput
	}
	for _, s := range badInput {
		if s != nil && errors.Is(err, s) {
			return ExitBadInput
		}
	}
	if errors.Is(err, context.Canceled) {
		return ExitInterrupted
	}
	if IsUnreachable(err) {
		return ExitUnreachable
	}
	return ExitProblems
}

// IsUnreachable reports whether err means the cluster could not be reached,
// or refused the caller (401/403).
func IsUnreachable(err error) bool {
	var ur *UnreachableError
	if errors.As(err, &ur) {
		return true
	}
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return true
	}
	var ne net.Error
	var ue *url.Error
	var oe *net.OpError
	return errors.As(err, &oe) || errors.As(err, &ue) || (errors.As(err, &ne) && ne.Timeout()) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH)
}

// Fail prints err as one line, "prog: message", to w and returns its exit
// code (see ExitCode). It prints nothing and returns 0 for a nil error.
func Fail(w io.Writer, prog string, err error, badInput ...error) int {
	code := ExitCode(err, badInput...)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return code
	}
	msg := OneLine(err)
	if code == ExitInterrupted {
		msg = "interrupted: " + msg + "; run the same command again to resume"
	}
	fmt.Fprintf(w, "%s: %s\n", prog, msg)
	return code
}

// OneLine joins a multi-line error message into one line.
func OneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// NoArgs refuses positional arguments left after flag parsing.
func NoArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return Usagef("unexpected argument %q: %s takes only flags", fs.Arg(0), fs.Name())
	}
	return nil
}

// NonNegative refuses a negative duration flag.
func NonNegative(name string, d time.Duration) error {
	if d < 0 {
		return Usagef("--%s %s: must not be negative", name, d)
	}
	return nil
}

// SignalContext returns a context cancelled by SIGINT or SIGTERM, for main.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// ReachTimeout bounds how long Reach waits for the API server in all.
const ReachTimeout = 10 * time.Second

// Reach checks, before anything else is read or written, that the API server
// in cfg answers: GET /version, each attempt bounded, retried until
// ReachTimeout, with a line on progress for each failed attempt. It returns an
// *UnreachableError (exit code 4) when the server never answered, or when it
// refused the credentials.
func Reach(ctx context.Context, cfg *rest.Config, progress io.Writer) error {
	c := rest.CopyConfig(cfg)
	c.Timeout = 3 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(c)
	if err != nil {
		return Usagef("kubeconfig: %v", err)
	}
	deadline := time.Now().Add(ReachTimeout)
	for attempt := 1; ; attempt++ {
		_, err = dc.ServerVersion()
		if err == nil {
			return nil
		}
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return &UnreachableError{Host: cfg.Host, Err: err}
		}
		if time.Now().Add(time.Second).After(deadline) {
			return &UnreachableError{Host: cfg.Host, Err: err}
		}
		if progress != nil {
			fmt.Fprintf(progress, "waiting for the API server at %s (attempt %d): %s\n", cfg.Host, attempt, OneLine(err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
