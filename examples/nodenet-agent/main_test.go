package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cidrshift/cidrshift/internal/access/accesstest"
	"github.com/cidrshift/cidrshift/internal/cli"
	"github.com/cidrshift/cidrshift/internal/cli/clitest"
)

func runAgent(t *testing.T, cs *fake.Clientset, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	conn := func(context.Context, string, string, io.Writer) (kubernetes.Interface, error) { return cs, nil }
	code := run(t.Context(), args, &out, &errb, conn)
	return code, out.String(), errb.String()
}

// Every bad input exits 2 with one line naming the flag and the value, and
// writes nothing.
func TestBadInput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	t.Setenv("NODE_NAME", "")
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--once"}, "--node is required"},
		{[]string{"--node", "w1", "--request", "{}"}, "--request needs --once"},
		{[]string{"--node", "w1", "--host-root", file}, "--host-root " + file + ": not a directory"},
		{[]string{"--node", "w1", "--once", "--request", `{"generation":1,"wnt":{}}`}, "--request"},
		{[]string{"--node", "w1", "--once", "--request", "@/nonexistent/req.json"}, "--request @/nonexistent/req.json"},
		{[]string{"--node", "w1", "--interval", "-1s"}, "--interval"},
		{[]string{"--node", "w1", "now"}, "now"},
		{[]string{"--bogus"}, "bogus"},
	} {
		cs := fake.NewClientset()
		code, _, errs := runAgent(t, cs, tc.args...)
		assert.Equal(t, cli.ExitBadInput, code, "%v: %s", tc.args, errs)
		assert.Contains(t, errs, tc.msg, tc.args)
		assert.Regexp(t, `^nodenet-agent: [^\n]*\n$`, errs, "one line")
		assert.NotRegexp(t, clitest.NextStep, errs)
		assert.Empty(t, cs.Actions(), "%v: nothing read or written", tc.args)
	}
}

// An agent that may not write its Lease says so before it does anything
// (exit 1, as every program's RBAC preflight).
func TestMissingPermissionIsNamedBeforeAnything(t *testing.T) {
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}})
	accesstest.Authorize(cs, accesstest.Rule{Verb: "create", Resource: "leases"})
	code, _, errs := runAgent(t, cs, "--node", "w1", "--once")
	assert.Equal(t, cli.ExitProblems, code, errs)
	assert.Contains(t, errs, "create")
	assert.Contains(t, errs, "leases")
	for _, a := range cs.Actions() {
		assert.Contains(t, []string{"create", "get"}, a.GetVerb(), "only access reviews and reads: %v", a)
		if a.GetVerb() == "create" {
			assert.Equal(t, "selfsubjectaccessreviews", a.GetResource().Resource)
		}
	}
}

// A request for another node, handed over by hand, fails naming both.
func TestOnceWithARequestForAnotherNode(t *testing.T) {
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}})
	accesstest.Authorize(cs)
	code, out, _ := runAgent(t, cs, "--node", "w1", "--once", "--request",
		`{"generation":3,"want":{"node":"w2","podCIDR":"10.244.7.0/24"}}`)
	assert.Equal(t, cli.ExitProblems, code, out)
	assert.Contains(t, out, "node w1: generation 3 failed")
	assert.Contains(t, out, `the request names node "w2"; this agent serves "w1"`)
}
