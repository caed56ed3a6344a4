package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

var errSentinel = errors.New("invalid plan")

func TestExitCode(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("no"))
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"usage", Usagef("--to %q: not a CIDR", "x"), ExitBadInput},
		{"wrapped usage", fmt.Errorf("plan: %w", Usagef("bad")), ExitBadInput},
		{"help", flag.ErrHelp, ExitBadInput},
		{"caller sentinel", fmt.Errorf("node a: %w", errSentinel), ExitBadInput},
		{"interrupted", fmt.Errorf("apply: %w", context.Canceled), ExitInterrupted},
		{"refused", fmt.Errorf("list nodes: %w", refused), ExitUnreachable},
		{"forbidden", fmt.Errorf("list nodes: %w", forbidden), ExitUnreachable},
		{"unauthorized", apierrors.NewUnauthorized("who"), ExitUnreachable},
		{"unreachable", &UnreachableError{Host: "h", Err: errors.New("x")}, ExitUnreachable},
		{"other", errors.New("verify: 2 nodes outside 10.20.0.0/16"), ExitProblems},
		{"not found is a problem, not unreachable", apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "x"), ExitProblems},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ExitCode(tc.err, errSentinel))
		})
	}
}

func TestFailPrintsOneLine(t *testing.T) {
	var b bytes.Buffer
	assert.Equal(t, ExitBadInput, Fail(&b, "prog", Usagef("--from %q:\nnot in use", "10.0.0.0/8")))
	assert.Equal(t, "prog: --from \"10.0.0.0/8\":; not in use\n", b.String())
	b.Reset()
	assert.Equal(t, ExitInterrupted, Fail(&b, "prog", context.Canceled))
	assert.Equal(t, "prog: interrupted: context canceled; run the same command again to resume\n", b.String())
	b.Reset()
	assert.Equal(t, ExitOK, Fail(&b, "prog", nil))
	assert.Equal(t, ExitBadInput, Fail(&b, "prog", flag.ErrHelp))
	assert.Empty(t, b.String(), "-h already printed the usage")
}

func TestNoArgsAndNonNegative(t *testing.T) {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	require.NoError(t, fs.Parse([]string{"stray"}))
	assert.EqualError(t, NoArgs(fs), `unexpected argument "stray": doctor takes only flags`)
	require.NoError(t, fs.Parse(nil))
	assert.NoError(t, NoArgs(fs))
	assert.EqualError(t, NonNegative("timeout", -time.Second), "--timeout -1s: must not be negative")
	assert.NoError(t, NonNegative("timeout", 0))
}

func TestRESTConfigBadInputIsExit2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "garbage")
	require.NoError(t, os.WriteFile(path, []byte("{not yaml: ["), 0o600))
	_, err := RESTConfig(path, "")
	assert.Equal(t, ExitBadInput, ExitCode(err))
	assert.ErrorContains(t, err, "loading kubeconfig")
	_, err = RESTConfig(filepath.Join(t.TempDir(), "missing"), "")
	assert.Equal(t, ExitBadInput, ExitCode(err))
}

func TestReach(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Authorization") {
		case "Bearer good":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"major":"1","minor":"36","gitVersion":"v1.36.3"}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`)
		}
	}))
	defer srv.Close()
	require.NoError(t, Reach(t.Context(), &rest.Config{Host: srv.URL, BearerToken: "good"}, nil))

	err := Reach(t.Context(), &rest.Config{Host: srv.URL, BearerToken: "bad"}, nil)
	assert.Equal(t, ExitUnreachable, ExitCode(err), "%v", err)

	// A port nobody listens on: refused at once, retried with progress
	// lines, and given up within ReachTimeout.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	var progress bytes.Buffer
	err = Reach(t.Context(), &rest.Config{Host: "https://" + addr}, &progress)
	assert.Equal(t, ExitUnreachable, ExitCode(err), "%v", err)
	assert.Contains(t, progress.String(), "waiting for the API server at https://"+addr+" (attempt 1)")
}
