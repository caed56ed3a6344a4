package main

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

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
}

// The Job's RBAC grants exactly what the runbook, run as the Job runs it
// (its args, the in-cluster journal and Leases) to the end, asks for in its
// access reviews, and the extras listed with their reason. The cluster
// has a workload of every kind the runbook rolls, in three namespaces.
func TestJobRBACMatchesTheAccessReviews(t *testing.T) {
	one := int32(1)
	labels := map[string]string{"app": "db"}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	objs := append(kubeadmConfigMaps(t),
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"},
			Spec: appsv1.StatefulSetSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "shop"},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}}, Spec: tmpl.Spec}}},
	)
	conn, cl := fakeCluster(t, objs...)
	rbac := clitest.JobRBAC(t, "job.yaml")
	reviews := rbac.Authorize(cl.Kube.(*fake.Clientset))
	args := append(clitest.LocalJournal(t, clitest.JobArgs(t, "job.yaml"), t.TempDir()), "--poll-interval", "5ms", "--drain-timeout", "10s")

	code, out, errOut := exec(t, conn, args...)
	rbac.Granted(t, reviews.Checks())
	require.Equal(t, exitWaiting, code, "%s\n%s", out, errOut)
	// The operator restarts kube-controller-manager with the new flag.
	_, err := cl.Kube.CoreV1().Pods("kube-system").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-master1", Namespace: "kube-system",
			Labels: map[string]string{"component": "kube-controller-manager"}},
		Spec: corev1.PodSpec{NodeName: "master1", HostNetwork: true, Containers: []corev1.Container{{Name: "kube-controller-manager", Image: "k",
			Command: []string{"kube-controller-manager", "--allocate-node-cidrs=true", "--cluster-cidr=10.200.0.0/16", "--service-cluster-ip-range=10.233.0.0/18"}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	code, out, errOut = exec(t, conn, args...)
	rbac.Granted(t, reviews.Checks())
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)

	rbac.Match(t, reviews.Checks(), jobExtras)
}
