package dataplane

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// failureEcho is a testify TestingT that passes every failure on to its test
// and keeps a one-line digest of it, logged again when the test ends.
type failureEcho struct {
	t  *testing.T
	mu sync.Mutex
	// digests holds one line per failure: testify's "Error:" and
	// "Messages:" fields.
	digests []string
}

// echoFailures returns a failureEcho for t. Call it before NewEnv: its
// clean-up, which logs the digests, then runs after the environment's
// teardown. A failed data-plane test's output ends with the last lines of
// every process it started (hundreds of lines), and CI shows only the start
// and the end of it; the assertion that failed is in the middle. The digests
// put it at the end.
func echoFailures(t *testing.T) *failureEcho {
	e := &failureEcho{t: t}
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for i, d := range e.digests {
			t.Logf("failure %d of %d, again: %s", i+1, len(e.digests), d)
		}
	})
	return e
}

func (e *failureEcho) Helper() { e.t.Helper() }

func (e *failureEcho) Errorf(format string, args ...any) {
	e.t.Helper()
	e.t.Errorf(format, args...)
	e.mu.Lock()
	e.digests = append(e.digests, digest(fmt.Sprintf(format, args...)))
	e.mu.Unlock()
}

func (e *failureEcho) FailNow() { e.t.FailNow() }

// digest reduces testify's failure report to its "Error:" and "Messages:"
// fields on one line, at most 300 characters in all.
func digest(report string) string {
	var parts []string
	lines := strings.Split(report, "\n")
	for i, l := range lines {
		l = strings.TrimSpace(l)
		for _, field := range []string{"Error:", "Messages:"} {
			if v, ok := strings.CutPrefix(l, field); ok {
				v = strings.TrimSpace(v)
				// "Error: Not equal:" and the like go on in the next lines,
				// which have no label.
				for j := i + 1; j < len(lines) && continued(lines[j]); j++ {
					v += " " + strings.TrimSpace(lines[j])
				}
				parts = append(parts, v)
			}
		}
	}
	d := strings.Join(parts, " | ")
	if d == "" {
		d = strings.Join(strings.Fields(report), " ")
	}
	if len(d) > 300 {
		d = d[:300] + "..."
	}
	return d
}

// continued reports whether a line of testify's report goes on the field
// above it: its label column is blank.
func continued(line string) bool {
	label, _, found := strings.Cut(strings.TrimLeft(line, "\t"), "\t")
	return found && strings.TrimSpace(label) == ""
}
