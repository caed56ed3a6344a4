package e2e_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cidrshift/cidrshift/e2e/harness"
)

// The Job manifests of the three runbooks (examples/migrate-*/job.yaml)
// as the real kube-apiserver admits them: every object passes a
// server-side dry-run create (schema, RBAC rules, podFailurePolicy, the
// priority class, the ServiceAccount reference).
func TestRunbookJobManifestsServerDryRun(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	c := harness.Start(t, harness.Options{})
	cs, err := c.Client()
	require.NoError(t, err)
	for _, rb := range []string{"migrate-servicecidr", "migrate-flannel-podcidr", "migrate-calico-podcidr"} {
		objs, err := harness.DecodeManifest(filepath.Join("..", "examples", rb, "job.yaml"))
		require.NoError(t, err, rb)
		kinds := map[string]int{}
		for _, o := range objs {
			kinds[fmt.Sprintf("%T", o)]++
		}
		require.Equal(t, map[string]int{"*v1.ServiceAccount": 1, "*v1.ClusterRole": 1, "*v1.ClusterRoleBinding": 1,
			"*v1.Role": 1, "*v1.RoleBinding": 1, "*v1.Job": 1}, kinds, rb)
		require.NoError(t, harness.CreateObjects(t.Context(), cs, objs, true), rb)
	}
}

// TestRunbookServiceCIDRInCluster is story 3 carried out by the runbook as
// its Job runs it: as the Job's ServiceAccount with the Job's RBAC (created
// from job.yaml on the real apiserver), with the Job's arguments, and with
// the in-cluster configuration emulated (KUBERNETES_SERVICE_HOST and _PORT,
// and the ServiceAccount's token and the cluster CA at
// /var/run/secrets/kubernetes.io/serviceaccount, in a mount namespace of the
// runbook's own), no kubeconfig. The operator step and the end state are
// rbScenario's.
func TestRunbookServiceCIDRInCluster(t *testing.T) {
	skipInShortMode(t)
	requireRoot(t)
	t.Parallel()
	rbScenario(t, rbOptions{inCluster: true})
}

// rbInCluster creates the ServiceAccount and RBAC of
// examples/migrate-servicecidr/job.yaml, requests a token for it, and
// returns how to run bin as the Job's container does, and the container's
// args with its journal moved to a directory of the test.
func rbInCluster(t *testing.T, ctx context.Context, c *harness.Cluster, cs kubernetes.Interface, bin string) (func(args []string) *exec.Cmd, []string) {
	t.Helper()
	objs, err := harness.DecodeManifest(filepath.Join("..", "examples", "migrate-servicecidr", "job.yaml"))
	require.NoError(t, err)
	var job *batchv1.Job
	var rbac []runtime.Object
	for _, o := range objs {
		if j, ok := o.(*batchv1.Job); ok {
			job = j
			continue
		}
		rbac = append(rbac, o)
	}
	require.NotNil(t, job)
	sa := job.Spec.Template.Spec.ServiceAccountName
	_, err = cs.CoreV1().ServiceAccounts(job.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: sa}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := cs.CoreV1().ServiceAccounts(job.Namespace).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(t, err)

	secrets := t.TempDir()
	ca, err := os.ReadFile(c.CAFile())
	require.NoError(t, err)
	for name, data := range map[string]string{"token": tr.Status.Token, "ca.crt": string(ca), "namespace": job.Namespace} {
		require.NoError(t, os.WriteFile(filepath.Join(secrets, name), []byte(data), 0o600))
	}
	home := t.TempDir() // no ~/.kube/config
	journal := filepath.Join(t.TempDir(), "journal")
	var args []string
	for _, a := range job.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--journal=") {
			a = "--journal=" + journal
		}
		args = append(args, a)
	}
	// The token and CA appear where rest.InClusterConfig reads them, in a
	// mount namespace of the runbook's own: nothing is mounted on the host.
	const script = `set -e
mount -t tmpfs cidrshift-e2e-secrets /var/run
mkdir -p /var/run/secrets/kubernetes.io/serviceaccount
cp "$1"/token "$1"/ca.crt "$1"/namespace /var/run/secrets/kubernetes.io/serviceaccount/
shift
exec "$@"`
	command := func(args []string) *exec.Cmd {
		u, err := url.Parse(c.APIServerURL()) // read on every run: a restart may move it
		require.NoError(t, err)
		cmd := exec.Command("sh", append([]string{"-c", script, "sh", secrets, bin}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home,
			"KUBERNETES_SERVICE_HOST=" + u.Hostname(), "KUBERNETES_SERVICE_PORT=" + u.Port()}
		return cmd
	}
	// Before its RBAC exists, the runbook (in-cluster, no kubeconfig) is
	// refused as the ServiceAccount: exit 4, naming it.
	var stderr strings.Builder
	cmd := command([]string{"--to", rbNewRange.String()})
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", stderr.String())
	require.Equal(t, 4, ee.ExitCode(), "%s", stderr.String())
	require.Contains(t, stderr.String(), fmt.Sprintf(`"system:serviceaccount:%s:%s"`, job.Namespace, sa))
	var rest []runtime.Object
	for _, o := range rbac {
		if _, ok := o.(*corev1.ServiceAccount); !ok {
			rest = append(rest, o)
		}
	}
	require.NoError(t, harness.CreateObjects(ctx, cs, rest, false))
	return command, args
}

// requireRoot fails (or, outside CI, skips) a test that needs root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CIDRSHIFT_REQUIRE_DATAPLANE") != "" {
		t.Fatal("needs root (a mount namespace for the in-cluster emulation)")
	}
	t.Skip("needs root (a mount namespace for the in-cluster emulation)")
}
