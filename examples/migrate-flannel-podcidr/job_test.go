package main

import (
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/cli/clitest"
	"github.com/cidrshift/cidrshift/migrate"
)

// The Job manifest runs the runbook with flags it accepts.
func TestJobManifest(t *testing.T) {
	o, err := parseFlags(clitest.JobArgs(t, "job.yaml"), io.Discard)
	require.NoError(t, err)
	clitest.AppliesInCluster(t, o.apply, o.journalDir, o.kubeconfig, o.lock)
}

// jobExtras are what job.yaml grants although no access review of the
// runbook asks for it.
var jobExtras = []clitest.Extra{
	{Verb: "create", Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews", Reason: "the access reviews themselves"},
	{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Reason: "the Leases (client-go's LeaseLock), taken rather than reviewed, created on the first run"},
	{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Reason: "the Leases, renewed and released"},
	{Verb: "get", Group: "apps", Resource: "replicasets", Reason: "with --agents, names the Deployment of a pod that cannot be evicted; denied, the pause gives a pod delete instead of the rollout restart"},
}

// The Job's RBAC grants exactly what the runbook asks for in its access
// reviews, and the extras listed with their reason: run as the Job runs it
// (its args, the in-cluster journal and Leases) to the end, and with
// --agents (make-before-break by default), which the manifest's header
// offers, up to the first node's host work (the node steps' preflight
// covers every hook).
func TestJobRBACMatchesTheAccessReviews(t *testing.T) {
	rbac := clitest.JobRBAC(t, "job.yaml")
	args := clitest.LocalJournal(t, clitest.JobArgs(t, "job.yaml"), filepath.Join(t.TempDir(), "j"))
	args = append(args, "--poll-interval", "10ms")

	e := newEnv(t)
	reviews := rbac.Authorize(e.cs)
	e.setMirror(t, "10.244.0.0/16")
	code, out, errOut := e.run(t, args...)
	rbac.Granted(t, reviews.Checks())
	require.Equal(t, exitWaiting, code, "%s\n%s", out, errOut)
	// The operator restarts kube-controller-manager with the new flag.
	e.setMirror(t, "10.240.0.0/12")
	code, out, errOut = e.run(t, args...)
	rbac.Granted(t, reviews.Checks())
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	checks := reviews.Checks()

	// With --agents: every node with a podCIDR has a live agent, which
	// never reports, so the run stops at the first node's standby, after
	// the node steps' preflight.
	e = newEnv(t)
	agents := rbac.Authorize(e.cs)
	for _, n := range []string{"w1", "w2", "w3"} {
		now := metav1.NewMicroTime(time.Now())
		_, err := e.cs.CoordinationV1().Leases(migrate.DefaultAgentNamespace).Create(t.Context(), &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: migrate.AgentLeasePrefix + n, Namespace: migrate.DefaultAgentNamespace},
			Spec:       coordinationv1.LeaseSpec{RenewTime: &now}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	args = clitest.LocalJournal(t, clitest.JobArgs(t, "job.yaml"), filepath.Join(t.TempDir(), "j"))
	code, out, errOut = e.run(t, append(args, "--agents", "--agent-timeout", "10ms")...)
	rbac.Granted(t, agents.Checks())
	require.Equal(t, exitFailed, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "standby", "stopped at the host work, after the preflight")
	require.Contains(t, agents.Checks(), access.Check{Verb: "create", Resource: "pods", Subresource: "eviction"}, "the make-before-break hooks were checked")

	rbac.Match(t, append(checks, agents.Checks()...), jobExtras)
}
