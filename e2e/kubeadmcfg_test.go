package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
)

// ipamArgs returns the node IPAM flags of a kube-controller-manager manifest
// (the rest point at files under /etc/kubernetes that this cluster does not have).
func ipamArgs(t *testing.T, m *kubeadmcfg.Manifest) []string {
	t.Helper()
	var out []string
	for _, a := range m.Args() {
		for _, f := range []string{"--allocate-node-cidrs=", "--cluster-cidr=", "--node-cidr-mask-size", "--service-cluster-ip-range="} {
			if strings.HasPrefix(a, f) {
				out = append(out, a)
			}
		}
	}
	require.NotEmpty(t, out, "manifest has no node IPAM flags")
	return out
}

// TestKubeadmcfgRewrittenManifestDrivesRealControllerManager rewrites a
// kubeadm v1.36 kube-controller-manager manifest with kubeadmcfg, shows that
// the shared preflight predicts exactly what the real kube-controller-manager
// then does with those flags (crash while nodes are in the old range, run
// once they are moved), and that the running process uses the new flags.
func TestKubeadmcfgRewrittenManifestDrivesRealControllerManager(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	oldRange, newRange := cidr.MustParse("10.244.0.0/16"), cidr.MustParse("10.20.0.0/16")
	c := harness.Start(t, harness.Options{ClusterCIDR: oldRange.String(), NodeCIDRMaskSize: 24, ServiceCIDR: "10.96.0.0/12"})
	ctx := t.Context()
	cs, err := c.Client()
	require.NoError(t, err)

	nodes := []string{"cp-1", "worker-a", "worker-b"}
	for _, name := range nodes {
		_, err := cs.CoreV1().Nodes().Create(ctx, harness.KwokNode(name, nil), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	poll(t, 60*time.Second, "podCIDRs allocated", func(ctx context.Context) error {
		for _, name := range nodes {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if n.Spec.PodCIDR == "" {
				return fmt.Errorf("node %s has no podCIDR yet", name)
			}
		}
		return nil
	})

	// The kubeadm manifest, rewritten by the package: one line changes.
	golden, err := os.ReadFile(filepath.Join("..", "kubeadmcfg", "testdata", "golden", "v1.36", "kube-controller-manager.yaml"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "kube-controller-manager.yaml")
	require.NoError(t, os.WriteFile(path, golden, 0o600))
	changed, err := kubeadmcfg.ApplyManifestChanges(ctx, path, []kubeadmcfg.FlagChange{{Flag: "cluster-cidr", Value: newRange.String()}})
	require.NoError(t, err)
	require.True(t, changed)
	rewritten, err := os.ReadFile(path)
	require.NoError(t, err)
	oldLines, newLines := bytes.Split(golden, []byte("\n")), bytes.Split(rewritten, []byte("\n"))
	require.Equal(t, len(oldLines), len(newLines))
	var diff []string
	for i := range oldLines {
		if !bytes.Equal(oldLines[i], newLines[i]) {
			diff = append(diff, string(newLines[i]))
		}
	}
	assert.Equal(t, []string{"    - --cluster-cidr=10.20.0.0/16"}, diff, "only the flag line changes")

	m, err := kubeadmcfg.ReadManifestFile(path)
	require.NoError(t, err)
	flags, err := m.ControllerManagerFlags()
	require.NoError(t, err)
	args := ipamArgs(t, m)

	// While the nodes are in the old range, the preflight predicts a crash...
	live, err := kubeadmcfg.ListNodePodCIDRs(ctx, cs)
	require.NoError(t, err)
	pre := cidr.ControllerManagerPreflight(flags, live)
	require.False(t, pre.WouldStart)
	require.Len(t, pre.Crashes, len(nodes), "every node is outside the new range")

	// ...and the real kube-controller-manager does exactly that, logging the
	// first node it meets with the predicted text.
	restartErr := c.Restart(ctx, harness.ControllerManager, args...)
	var exitErr *harness.ExitError
	if restartErr != nil && !errors.As(restartErr, &exitErr) {
		t.Fatalf("restart kube-controller-manager: %v", restartErr)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	st, err := c.WaitExit(waitCtx, harness.ControllerManager)
	require.NoError(t, err, "kube-controller-manager kept running although the preflight predicted a crash")
	assert.Equal(t, 1, st.ExitCode)
	assert.Contains(t, c.RunLogs(harness.ControllerManager), pre.Crashes[0].Message)

	// Move every node to the same offset in the new range (delete + create).
	for _, name := range nodes {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		moved, err := cidr.Rebase(netip.MustParsePrefix(n.Spec.PodCIDR), oldRange, newRange)
		require.NoError(t, err)
		require.NoError(t, cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}))
		poll(t, 30*time.Second, "node "+name+" deleted", func(ctx context.Context) error {
			if _, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (err=%v)", err)
			}
			return nil
		})
		fresh := harness.KwokNode(name, n.Labels)
		fresh.Spec.PodCIDR, fresh.Spec.PodCIDRs = moved.String(), []string{moved.String()}
		_, err = cs.CoreV1().Nodes().Create(ctx, fresh, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	live, err = kubeadmcfg.ListNodePodCIDRs(ctx, cs)
	require.NoError(t, err)
	pre = cidr.ControllerManagerPreflight(flags, live)
	require.True(t, pre.WouldStart, "crashes: %+v", pre.Crashes)

	// Now the same flags run, and a joining node gets a podCIDR from the new range.
	require.NoError(t, c.Restart(ctx, harness.ControllerManager, args...))
	assert.Contains(t, c.Flags(harness.ControllerManager), "--cluster-cidr=10.20.0.0/16")
	_, err = cs.CoreV1().Nodes().Create(ctx, harness.KwokNode("worker-new", nil), metav1.CreateOptions{})
	require.NoError(t, err)
	poll(t, 60*time.Second, "new node gets a podCIDR in the new range", func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, "worker-new", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Spec.PodCIDR == "" {
			return errors.New("no podCIDR yet")
		}
		if p := netip.MustParsePrefix(n.Spec.PodCIDR); !newRange.Contains(p.Addr()) {
			return fmt.Errorf("podCIDR %s outside %s", p, newRange)
		}
		return nil
	})
	assert.True(t, c.Status(harness.ControllerManager).Running, "kube-controller-manager keeps running")
}
