package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cidrshift/cidrshift/internal/cli/clitest"
)

// TestAdversarialOffline: hostile input, each refused with its exit code and
// one line naming the flag and the value, and no ConfigMap written.
func TestAdversarialOffline(t *testing.T) {
	cs, updates := liveCluster(t)
	live := func(string, string) (kubernetes.Interface, error) { return cs, nil }
	// A cluster that is not a kubeadm cluster: nodes, no kubeadm ConfigMaps.
	bare := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{PodCIDR: "10.233.64.0/24"}})
	empty := func(string, string) (kubernetes.Interface, error) { return bare, nil }
	emptyDir := t.TempDir()
	garbage := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(garbage, []byte("{{{ not a kubeconfig"), 0o600))
	badNodes := filepath.Join(t.TempDir(), "nodes.yaml")
	require.NoError(t, os.WriteFile(badNodes, []byte("items: 7"), 0o600))
	manifests := td + "/manifests"

	cases := []struct {
		name   string
		client clientFunc
		args   []string
		code   int
		msg    []string
	}{
		{"stray positional argument", live, []string{"check", "--manifests", manifests, "now"}, 2, []string{`unexpected argument "now"`}},
		{"--manifests that does not exist", live, []string{"check", "--manifests", "/nonexistent/manifests"}, 2, []string{"--manifests", "/nonexistent/manifests"}},
		{"--manifests without a manifest", live, []string{"show", "--manifests", emptyDir}, 2, []string{"--manifests", emptyDir}},
		{"set --apply with a missing --manifests", live, []string{"set", "--pod-subnet", "10.30.0.0/16", "--manifests", "/nonexistent/manifests", "--apply"}, 2, []string{"--manifests", "/nonexistent/manifests"}},
		{"check a cluster without kubeadm ConfigMaps", empty, []string{"check", "--manifests", ""}, 2, []string{"kubeadm-config", "nothing"}},
		{"show a cluster without kubeadm ConfigMaps", empty, []string{"show", "--manifests", ""}, 2, []string{"kubeadm-config", "nothing"}},
		{"set --apply on a cluster without kubeadm ConfigMaps", empty, []string{"set", "--pod-subnet", "10.30.0.0/16", "--manifests", "", "--apply"}, 2, []string{"kubeadm-config", "nothing"}},
		{"--out equal to --manifests", live, []string{"set", "--pod-subnet", "10.30.0.0/16", "--manifests", manifests, "--out", manifests}, 2, []string{"--out", "--manifests", manifests}},
		{"--pool with a CIDR that does not parse", live, []string{"check", "--manifests", manifests, "--pool", "p=10.300.0.0/16"}, 2, []string{"--pool", "10.300.0.0/16"}},
		{"--pool without a name", live, []string{"check", "--manifests", manifests, "--pool", "=10.30.0.0/16"}, 2, []string{"--pool", "=10.30.0.0/16"}},
		{"--flannel-network with host bits", live, []string{"check", "--manifests", manifests, "--flannel-network", "10.30.0.1/16"}, 2, []string{"--flannel-network", "10.30.0.1/16"}},
		{"negative --node-mask", live, []string{"set", "--node-mask", "-1", "--manifests", manifests, "--apply"}, 2, []string{"--node-mask", "-1"}},
		{"--node-mask 33", live, []string{"set", "--node-mask", "33", "--manifests", manifests, "--apply"}, 2, []string{"--node-mask", "33"}},
		{"--pod-subnet overlapping the Service subnet, --apply", live, []string{"set", "--pod-subnet", "10.233.0.0/16", "--manifests", manifests, "--apply"}, 2, []string{"--pod-subnet", "10.233.0.0/16", "10.233.0.0/18"}},
		{"--pod-subnet with host bits, --apply", live, []string{"set", "--pod-subnet", "10.30.0.1/16", "--manifests", manifests, "--apply"}, 2, []string{"10.30.0.1/16", "host bits"}},
		{"--service-subnet too small for the Services, --apply", live, []string{"set", "--service-subnet", "10.30.0.0/33", "--manifests", manifests, "--apply"}, 2, []string{"10.30.0.0/33"}},
		{"--nodes file that is no node list", live, []string{"check", "--manifests", manifests, "--nodes", badNodes}, 2, []string{"--nodes", badNodes}},
		{"garbage kubeconfig", nil, []string{"check", "--kubeconfig", garbage, "--manifests", manifests}, 2, []string{"kubeconfig"}},
		{"missing kubeconfig context", nil, []string{"check", "--kubeconfig", clitest.UnreachableKubeconfig(t), "--context", "nope", "--manifests", manifests}, 2, []string{"kubeconfig", "nope"}},
		{"--dry-run without --apply", live, []string{"set", "--pod-subnet", "10.30.0.0/16", "--dry-run=server", "--manifests", manifests}, 2, []string{"--dry-run=server", "--apply"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := *updates
			var out, errb strings.Builder
			c := tc.client
			if c == nil {
				c = kubeClientWith(&errb)
			}
			code := runWith(context.Background(), tc.args, &out, &errb, c)
			ctxt := strings.Join(tc.args, " ") + "\nstdout:\n" + out.String() + "\nstderr:\n" + errb.String()
			assert.Equal(t, tc.code, code, ctxt)
			lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
			assert.Len(t, lines, 1, "one line: %s", ctxt)
			for _, m := range tc.msg {
				assert.Contains(t, lines[len(lines)-1], m, ctxt)
			}
			assert.Equal(t, before, *updates, "no ConfigMap written: %s", ctxt)
			assert.NotRegexp(t, clitest.NextStep, out.String()+errb.String(), ctxt)
		})
	}
}

// An unreachable API server is exit 4 within seconds, with progress shown.
func TestAdversarialUnreachable(t *testing.T) {
	var out, errb strings.Builder
	start := time.Now()
	code := runWith(context.Background(), []string{"check", "--kubeconfig", clitest.UnreachableKubeconfig(t), "--manifests", td + "/manifests"}, &out, &errb, kubeClientWith(&errb))
	assert.Equal(t, 4, code, out.String()+errb.String())
	assert.Less(t, time.Since(start), 30*time.Second)
	assert.Contains(t, errb.String(), "waiting for the API server")
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	assert.Contains(t, lines[len(lines)-1], "unreachable")
}
