package e2e_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/servicecidr"
)

// TestServiceCIDRKilledRightAfterDeletingDefaultKubernetes: the last step
// of a Service-range move deletes default/kubernetes so that kube-apiserver,
// now running with the new --service-cluster-ip-range, recreates it at the
// first address of the new range. The tool (the example binary) is
// SIGKILLed right after that delete was answered.
//
// Why the test holds kube-apiserver back: the real kube-apiserver recreates
// default/kubernetes on its own, from its --service-cluster-ip-range, at its
// next reconcile (every 10 s), so left alone this test would prove only that
// kube-apiserver works, and whether Verify saw the gap would depend on where
// in that 10 s the kill fell. What a user needs is what happens when the
// Service does NOT come straight back: kube-apiserver restarting, several
// kube-apiservers of which one still has the old range, an admission webhook
// that is down. In-cluster clients (every pod using the kubernetes.default
// Service) cannot reach the API meanwhile. So a ValidatingAdmissionPolicy
// refuses the create of default/kubernetes (kube-apiserver's own create goes
// through admission like any other) until the test releases it. Then, with
// the real kube-apiserver and the real binary:
//
//   - Verify, run right after the kill, reports default/kubernetes missing,
//     naming it and the address it is awaited at (the tool's verify exits 1);
//   - the journal holds the delete (recorded and fsynced before it was sent),
//     so Recover (a new process) reports it absent instead of nothing, and a
//     plan made with the journal still holds default/kubernetes, from its old
//     address to the first address of the new range;
//   - rerunning the same command waits for kube-apiserver (released while
//     the rerun waits) and records the Service recreated at 172.24.0.1,
//     where the plan said, then Verify is clean.
func TestServiceCIDRKilledRightAfterDeletingDefaultKubernetes(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	bin := scBuildTool(t)
	opts, minor := scClusterOptions()
	c := harness.Start(t, opts)
	ctx := t.Context()
	cs, err := c.Client()
	require.NoError(t, err)
	kubeconfig := c.AdminKubeconfig()
	sckFixture(t, ctx, cs)
	before, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, scOldKube.String(), before.Spec.ClusterIP)

	journalDir := filepath.Join(t.TempDir(), "journal")
	apply := []string{"apply", "--kubeconfig", kubeconfig, "--to", scNewRange.String(), "--journal", journalDir, "--apply"}

	// First pass: every Service but default/kubernetes moves.
	out := scRunTool(t, bin, 0, apply...)
	require.Contains(t, out, "default/kubernetes: left at "+scOldKube.String(), "first pass:\n%s", out)

	// The operator gives kube-apiserver and kube-controller-manager the new range.
	require.NoError(t, c.Restart(ctx, harness.APIServer, scAPIServerNewRange(minor)...), "restart kube-apiserver with the new range")
	require.NoError(t, c.Restart(ctx, harness.ControllerManager, scNewRangeFlag), "restart kube-controller-manager with the new range")

	// kube-apiserver is held back from recreating default/kubernetes.
	release := sckHoldKubernetesService(t, ctx, cs)

	// Second pass, SIGKILLed right after the delete of default/kubernetes.
	deleteKube := append(append([]string{}, apply...), "--delete-kubernetes-service")
	r := scStart(t, bin, deleteKube...)
	outcome := r.until(t, 3*time.Minute, func(line string) bool {
		return strings.HasPrefix(line, string(servicecidr.EventKubernetesDeleted)+" "+servicecidr.KubernetesService)
	})
	require.True(t, outcome.killed, "the run must be killed right after deleting default/kubernetes:\n%s", r.output())
	_, err = cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "default/kubernetes must be deleted and not recreated yet (err=%v)", err)
	assert.Equal(t, "pending", scJournalPhases(t, journalDir)[servicecidr.KubernetesService], "the journal recorded the delete before sending it")

	// Verify, right away: default/kubernetes is missing, and says where it is awaited.
	client := scClient(t, ctx, c)
	to := []netip.Prefix{scNewRange}
	v, err := client.Verify(ctx, servicecidr.VerifyOptions{To: to, DNSIPs: []netip.Addr{scNewDNS}})
	require.NoError(t, err)
	for _, f := range v.Findings {
		t.Logf("verify after the kill: %s %s: %s", f.Severity, f.Object, f.Message)
	}
	assert.False(t, v.OK, "Verify must not pass while default/kubernetes is missing")
	var kubeFindings []servicecidr.VerifyFinding
	for _, f := range v.Findings {
		if f.Object == "services/"+servicecidr.KubernetesService {
			kubeFindings = append(kubeFindings, f)
		}
	}
	require.Len(t, kubeFindings, 1, "one finding about default/kubernetes: %+v", v.Findings)
	assert.Equal(t, servicecidr.SeverityError, kubeFindings[0].Severity)
	assert.Contains(t, kubeFindings[0].Message, "default/kubernetes does not exist")
	assert.Contains(t, kubeFindings[0].Message, scNewKube.String())
	vr := scStart(t, bin, "verify", "--kubeconfig", kubeconfig, "--to", scNewRange.String(), "--dns-ip", scNewDNS.String())
	vo := vr.until(t, time.Minute, nil)
	assert.Equal(t, 1, vo.exitCode, "the tool's verify finds a problem:\n%s", vr.output())
	assert.Contains(t, vr.stdout.String(), "services/default/kubernetes: Service default/kubernetes does not exist")

	// A new process: Recover cannot create default/kubernetes (kube-apiserver
	// owns it) but reports it absent and what it waits for.
	ro := servicecidr.ApplyOptions{JournalDir: journalDir, ReadyTimeout: time.Second, PollInterval: 200 * time.Millisecond}
	res, err := client.Recover(ctx, ro)
	require.NoError(t, err)
	assert.Contains(t, res.Kubernetes, "absent", "Recover: %+v", res)
	assert.Contains(t, res.Kubernetes, scNewKube.String())
	assert.Contains(t, strings.Join(res.Warnings, "\n"), servicecidr.KubernetesService)

	// A plan made with the journal still holds default/kubernetes.
	p, err := client.Plan(ctx, servicecidr.PlanOptions{From: []netip.Prefix{scOldRange}, To: to, JournalDir: journalDir})
	require.NoError(t, err)
	require.NotNil(t, p.Kubernetes, "the journaled default/kubernetes is part of the plan")
	assert.Equal(t, before.UID, p.Kubernetes.UID)
	assert.Equal(t, []netip.Addr{scOldKube}, p.Kubernetes.OldIPs)
	assert.Equal(t, []netip.Addr{scNewKube}, p.Kubernetes.NewIPs)
	assert.Empty(t, p.Moves, "every other Service moved in the first pass")

	// The same command again. While it waits for default/kubernetes,
	// kube-apiserver is let go: it recreates the Service, the run sees it.
	rerun := scStart(t, bin, deleteKube...)
	released := false
	outcome = rerun.until(t, 3*time.Minute, func(line string) bool {
		if !released && strings.HasPrefix(line, string(servicecidr.EventKubernetesAwaited)+" "+servicecidr.KubernetesService) {
			release()
			released = true
		}
		return false
	})
	require.True(t, released, "the rerun must wait for default/kubernetes:\n%s", rerun.output())
	require.Equal(t, 0, outcome.exitCode, "the rerun finishes:\n%s", rerun.output())
	assert.Contains(t, rerun.stdout.String(), "default/kubernetes: recreated by kube-apiserver at "+scNewKube.String(), rerun.output())
	assert.NotContains(t, rerun.stdout.String(), "warning:", rerun.output())
	assert.Equal(t, "done", scJournalPhases(t, journalDir)[servicecidr.KubernetesService], "the journal records it recreated")

	kube, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, before.UID, kube.UID, "recreated by kube-apiserver")
	assert.Equal(t, []string{scNewKube.String()}, kube.Spec.ClusterIPs, "at the first address of the new range, as planned")
	v, err = client.Verify(ctx, servicecidr.VerifyOptions{To: to, DNSIPs: []netip.Addr{scNewDNS}, KubernetesIPs: []netip.Addr{scNewKube}})
	require.NoError(t, err)
	for _, f := range v.Findings {
		t.Logf("verify at the end: %s %s: %s", f.Severity, f.Object, f.Message)
	}
	assert.True(t, v.OK, "Verify after the rerun")

	// And once more: nothing left to do.
	out = scRunTool(t, bin, 0, deleteKube...)
	assert.Contains(t, out, "moved 0 Service(s)")
}

// sckFixture creates the cluster DNS Service at the tenth address of the old
// range and two ordinary Services.
func sckFixture(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sck-shop"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	port := func(name string, p int32, proto corev1.Protocol) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Port: p, TargetPort: intstr.FromInt32(p), Protocol: proto}
	}
	for _, s := range []*corev1.Service{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns", Labels: map[string]string{servicecidr.DNSLabelKey: servicecidr.DNSLabelValue}},
		Spec: corev1.ServiceSpec{ClusterIP: scOldDNS.String(), Selector: map[string]string{"k8s-app": "kube-dns"},
			Ports: []corev1.ServicePort{port("dns", 53, corev1.ProtocolUDP), port("dns-tcp", 53, corev1.ProtocolTCP)}},
	}, {
		ObjectMeta: metav1.ObjectMeta{Namespace: "sck-shop", Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{port("http", 80, corev1.ProtocolTCP)}},
	}, {
		ObjectMeta: metav1.ObjectMeta{Namespace: "sck-shop", Name: "db"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "db"}, Ports: []corev1.ServicePort{port("pg", 5432, corev1.ProtocolTCP)}},
	}} {
		_, err := cs.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
		require.NoError(t, err, "create Service %s/%s", s.Namespace, s.Name)
	}
}

// sckHoldKubernetesService installs a ValidatingAdmissionPolicy that refuses
// every create of default/kubernetes, kube-apiserver's own included, and
// waits until it is in force. It returns a function that removes it and
// waits until creates of that name pass admission again.
func sckHoldKubernetesService(t *testing.T, ctx context.Context, cs kubernetes.Interface) (release func()) {
	t.Helper()
	// The probe (default/kubernetes itself) is refused by the policy once
	// it is in force, and by the registry (AlreadyExists) otherwise.
	return holdServiceCreates(t, ctx, cs, serviceHold{
		name:          "cidrshift-e2e-hold-default-kubernetes",
		resourceNames: []string{"kubernetes"},
		expression:    `object.metadata.namespace != 'default' || object.metadata.name != 'kubernetes'`,
		message:       "e2e: kube-apiserver is held back from recreating default/kubernetes",
		probe:         &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"}},
	})
}
