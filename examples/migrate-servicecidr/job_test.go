package main

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/internal/cli/clitest"
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
	{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Reason: "the Leases (client-go's LeaseLock), taken rather than reviewed"},
	{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Reason: "the Leases, created on the first run"},
	{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Reason: "the Leases, renewed and released"},
	{Verb: "list", Resource: "nodes", Reason: "read to keep the new range off the nodes' addresses and podCIDRs; forbidden, the run warns and goes on"},
}

// The Job's RBAC grants exactly what the runbook, run as the Job runs it
// (its args, the in-cluster journal and Leases) to the end, asks for in its
// access reviews, and the extras listed with their reason.
func TestJobRBACMatchesTheAccessReviews(t *testing.T) {
	rbac := clitest.JobRBAC(t, "job.yaml")
	cl := story3(t, true)
	// Without --include-loadbalancers (as the Job runs) a LoadBalancer
	// Service would keep the old range held to the end.
	require.NoError(t, cl.Kube.CoreV1().Services("shop").Delete(context.Background(), "lb", metav1.DeleteOptions{}))
	reviews := rbac.Authorize(cl.Kube)
	args := append(clitest.LocalJournal(t, clitest.JobArgs(t, "job.yaml"), t.TempDir()), fast...)

	code, out, errs := runCLI(t, cl, args...)
	rbac.Granted(t, reviews.Checks())
	require.Equal(t, exitWaiting, code, "%s\n%s", out, errs)
	// The operator restarts kube-apiserver with the new range.
	require.NoError(t, cl.SetAPIServerRange("172.24.0.0/15"))
	_, err := cl.Kube.CoreV1().Events("default").Create(context.Background(), &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "kubernetes.1", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "ServiceCIDR", Name: "kubernetes", APIVersion: "networking.k8s.io/v1"},
		Reason:         reasonInconsistent, Type: corev1.EventTypeWarning,
		Message: "The default ServiceCIDR [100.64.0.0/13] does not match the controller flag configurations [172.24.0.0/15]",
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	code, out, errs = runCLI(t, cl, args...)
	rbac.Granted(t, reviews.Checks())
	require.Equal(t, exitOK, code, "%s\n%s", out, errs)

	rbac.Match(t, reviews.Checks(), jobExtras)
}
