package e2e_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cidrshift/cidrshift/e2e/harness"
)

// poll calls check every 200ms until it returns nil or timeout passes, and
// fails the test with check's last error then.
func poll(t *testing.T, timeout time.Duration, what string, check func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	for {
		err := check(ctx)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not done after %s: %v", what, timeout, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func skipInShortMode(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: starts a real control plane; skipped with -short")
	}
}

// TestSmokeNodeIPAMAndClusterCIDRCrash walks through FACTS.md's first
// story on a real control plane: kube-controller-manager hands out node
// podCIDRs, podCIDR is immutable, kwok runs a pod with an IP from its node's
// podCIDR, and after two workers are recreated in a new range and
// --cluster-cidr is switched to it, kube-controller-manager exits because
// the control-plane node still holds a podCIDR outside the new range.
func TestSmokeNodeIPAMAndClusterCIDRCrash(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	c := harness.Start(t, harness.Options{ClusterCIDR: "10.10.0.0/18", NodeCIDRMaskSize: 24})
	ctx := t.Context()
	cs, err := c.Client()
	require.NoError(t, err)
	oldRange := netip.MustParsePrefix("10.10.0.0/18")

	nodes := []string{"master1", "worker1", "worker2"}
	for _, name := range nodes {
		var labels map[string]string
		if name == "master1" {
			labels = map[string]string{"node-role.kubernetes.io/control-plane": ""}
		}
		_, err := cs.CoreV1().Nodes().Create(ctx, harness.KwokNode(name, labels), metav1.CreateOptions{})
		require.NoError(t, err, "create node %s", name)
	}

	// kube-controller-manager allocates a distinct /24 inside the cluster
	// CIDR to every node.
	podCIDR := map[string]netip.Prefix{}
	poll(t, 60*time.Second, "podCIDRs allocated", func(ctx context.Context) error {
		for _, name := range nodes {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if n.Spec.PodCIDR == "" {
				return fmt.Errorf("node %s has no podCIDR yet", name)
			}
			p, err := netip.ParsePrefix(n.Spec.PodCIDR)
			if err != nil {
				return fmt.Errorf("node %s podCIDR %q: %w", name, n.Spec.PodCIDR, err)
			}
			assert.Equal(t, []string{n.Spec.PodCIDR}, n.Spec.PodCIDRs, "node %s podCIDRs", name)
			podCIDR[name] = p
		}
		return nil
	})
	seen := map[netip.Prefix]string{}
	for name, p := range podCIDR {
		assert.Equal(t, 24, p.Bits(), "node %s podCIDR %s", name, p)
		assert.True(t, oldRange.Contains(p.Addr()), "node %s podCIDR %s outside %s", name, p, oldRange)
		if other, dup := seen[p]; dup {
			t.Errorf("nodes %s and %s share podCIDR %s", name, other, p)
		}
		seen[p] = name
	}

	// podCIDR can only go from "" to a value: a patch is refused.
	_, err = cs.CoreV1().Nodes().Patch(ctx, "worker1", types.MergePatchType,
		[]byte(`{"spec":{"podCIDR":"10.10.63.0/24","podCIDRs":["10.10.63.0/24"]}}`), metav1.PatchOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
	assert.Contains(t, err.Error(), `node updates may not change podCIDR except from "" to valid`)

	// The scheduler binds a pod to worker1 once kwok made it Ready, and kwok
	// runs it with an IP from worker1's podCIDR.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": "worker1"},
			Containers:   []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	_, err = cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	poll(t, 60*time.Second, "pod web running", func(ctx context.Context) error {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("pod on %q is %s with IP %q", p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
		}
		pod = p
		return nil
	})
	assert.Equal(t, "worker1", pod.Spec.NodeName)
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	require.NoError(t, err)
	assert.True(t, podCIDR["worker1"].Contains(ip), "pod IP %s outside worker1's podCIDR %s", ip, podCIDR["worker1"])

	// The operators' move: recreate the workers with podCIDRs in the new
	// range (delete + create, as podCIDR is immutable), leave master1 alone.
	newCIDR := map[string]string{"worker1": "10.20.0.0/24", "worker2": "10.20.1.0/24"}
	for name, cidr := range newCIDR {
		require.NoError(t, cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}))
		poll(t, 30*time.Second, "node "+name+" deleted", func(ctx context.Context) error {
			_, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (err=%v)", err)
		})
		n := harness.KwokNode(name, nil)
		n.Spec.PodCIDR = cidr
		n.Spec.PodCIDRs = []string{cidr}
		_, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err, "recreate node %s", name)
	}

	// kube-controller-manager restarted with the new --cluster-cidr must
	// crash: master1 still holds a podCIDR outside 10.20.0.0/16.
	restartErr := c.Restart(ctx, harness.ControllerManager, "--cluster-cidr=10.20.0.0/16")
	var exitErr *harness.ExitError
	if restartErr != nil && !errors.As(restartErr, &exitErr) {
		t.Fatalf("restart %s: %v", harness.ControllerManager, restartErr)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	st, err := c.WaitExit(waitCtx, harness.ControllerManager)
	require.NoError(t, err, "kube-controller-manager kept running with a node outside --cluster-cidr")
	assert.Equal(t, 1, st.ExitCode, "kube-controller-manager %s", st)
	logs := c.RunLogs(harness.ControllerManager)
	assert.Contains(t, logs, "is out the range of cluster cidr")
	assert.Contains(t, logs, "failed to mark cidr["+podCIDR["master1"].String()+"]")
	assert.Contains(t, logs, "for node: master1")

	master, err := cs.CoreV1().Nodes().Get(ctx, "master1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, podCIDR["master1"].String(), master.Spec.PodCIDR, "master1 keeps its old podCIDR")
}

// TestSmokeUserKubeconfigAndRestart checks the generated client
// certificates: a user with no RBAC is Forbidden, the same user gets in
// through a binding to one of its certificate's groups, and that survives
// kube-apiserver being SIGKILLed and started again (data lives in etcd).
func TestSmokeUserKubeconfigAndRestart(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	c := harness.Start(t, harness.Options{
		Disable: []harness.Component{harness.ControllerManager, harness.Scheduler, harness.Kwok},
	})
	ctx := t.Context()
	admin, err := c.Client()
	require.NoError(t, err)

	path, err := c.UserKubeconfig("alice", "dev-team")
	require.NoError(t, err)
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	require.NoError(t, err)
	alice, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	_, err = alice.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
	assert.Contains(t, err.Error(), `User "alice" cannot list resource "nodes"`)

	_, err = admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-node-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-node-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-node-reader"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "dev-team"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	poll(t, 30*time.Second, "alice lists nodes through group dev-team", func(ctx context.Context) error {
		_, err := alice.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err
	})

	// Another identity without the group stays locked out.
	bobCfg, err := c.UserConfig("bob", "other-team")
	require.NoError(t, err)
	bob, err := kubernetes.NewForConfig(bobCfg)
	require.NoError(t, err)
	_, err = bob.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "bob: want Forbidden, got %v", err)

	// SIGKILL kube-apiserver, see it reported, start it again.
	require.NoError(t, c.Kill(harness.APIServer))
	st := c.Status(harness.APIServer)
	assert.False(t, st.Running)
	assert.Equal(t, syscall.SIGKILL, st.Signal, "status %s", st)
	assert.ErrorIs(t, c.Kill(harness.APIServer), harness.ErrNotRunning)
	require.NoError(t, c.StartComponent(ctx, harness.APIServer))
	assert.Equal(t, 2, c.Status(harness.APIServer).Starts)
	poll(t, 30*time.Second, "alice lists nodes after kube-apiserver restart", func(ctx context.Context) error {
		_, err := alice.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err
	})
	assert.Contains(t, c.Logs(harness.APIServer), "==== harness: start #2 of kube-apiserver")
}

// TestSmokeEtcdOnlyWithTLS runs etcd alone, serving TLS with client
// certificate authentication, as flannel's etcd-backed tests will.
func TestSmokeEtcdOnlyWithTLS(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	c := harness.Start(t, harness.Options{
		Disable: []harness.Component{harness.APIServer, harness.ControllerManager, harness.Scheduler, harness.Kwok},
		EtcdTLS: true,
	})
	files := c.EtcdTLS()
	require.NotNil(t, files)
	require.True(t, strings.HasPrefix(c.EtcdEndpoint(), "https://127.0.0.1:"), c.EtcdEndpoint())
	_, err := c.Client()
	assert.Error(t, err, "no kube-apiserver, no client")

	caPEM, err := os.ReadFile(files.CAFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	get := func(certs []tls.Certificate) (*http.Response, error) {
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12},
		}}
		return client.Get(c.EtcdEndpoint() + "/version")
	}
	pair, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	require.NoError(t, err)
	resp, err := get([]tls.Certificate{pair})
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), `"etcdserver":"3.`)

	// Without a client certificate the handshake is refused.
	if resp, err := get(nil); err == nil {
		resp.Body.Close()
		t.Errorf("etcd accepted a client without certificate: %s", resp.Status)
	}
}
