package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodenet"
)

// agentManifest decodes examples/nodenet-agent/daemonset.yaml.
func agentManifest(t *testing.T) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile("../examples/nodenet-agent/daemonset.yaml")
	require.NoError(t, err)
	var objs []runtime.Object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		require.NoError(t, err, "%s", doc)
		objs = append(objs, obj)
	}
	return objs
}

// createAll creates the manifest's objects, every one with dryRun=All when
// dry is set.
func createAll(t *testing.T, cs kubernetes.Interface, objs []runtime.Object, dry bool) {
	t.Helper()
	ctx := t.Context()
	opts := metav1.CreateOptions{}
	if dry {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, opts)
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, opts)
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, opts)
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, opts)
		case *appsv1.DaemonSet:
			_, err = cs.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, opts)
		default:
			t.Fatalf("unexpected object %T in the manifest", o)
		}
		require.NoError(t, err, "create %T (dry run %v)", o, dry)
	}
}

// TestNodenetAgentManifestAndRBAC: the DaemonSet manifest passes the real
// kube-apiserver's server-side dry run, and its RBAC is enough, and only
// just, for the agent's protocol: as the agent's ServiceAccount the agent
// passes its permission check, creates and renews its Lease and reports on
// it, and the runbook side reads the report; the ServiceAccount may not
// write Nodes.
func TestNodenetAgentManifestAndRBAC(t *testing.T) {
	skipInShortMode(t)
	c := harness.Start(t, harness.Options{})
	ctx := t.Context()
	admin, err := c.Client()
	require.NoError(t, err)
	objs := agentManifest(t)
	require.Len(t, objs, 6)
	createAll(t, admin, objs, true)
	_, err = admin.AppsV1().DaemonSets("kube-system").Get(ctx, "nodenet-agent", metav1.GetOptions{})
	require.Error(t, err, "a dry run stores nothing")
	createAll(t, admin, objs[:5], false) // the ServiceAccount and RBAC, for real

	_, err = admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "agent-w1"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg, err := c.UserConfig("system:serviceaccount:kube-system:nodenet-agent", "system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated")
	require.NoError(t, err)
	asAgent, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	a := &migrate.Agent{Kube: asAgent, Node: "agent-w1", Identity: "nodenet-agent-x1"}
	require.NoError(t, a.Check(ctx), "the manifest's RBAC covers the agent")

	// A request tampered to name another node: the agent refuses it and
	// reports that on its Lease.
	req, err := json.Marshal(migrate.HostRequest{Generation: 1, Want: nodenet.Want{Node: "agent-w2", PodCIDR: netip.MustParsePrefix("10.244.3.0/24")}})
	require.NoError(t, err)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{migrate.HostWantAnnotation: string(req)}}})
	require.NoError(t, err)
	_, err = admin.CoreV1().Nodes().Patch(ctx, "agent-w1", types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	st, err := a.Once(ctx)
	require.NoError(t, err)
	assert.Equal(t, migrate.HostFailed, st.Phase)
	assert.Contains(t, st.Error, `the request names node "agent-w2"`)
	_, err = a.Once(ctx) // renews the Lease (update)
	require.NoError(t, err)

	h := &migrate.HostAgents{Kube: admin, PollInterval: 50 * time.Millisecond, Timeout: 10 * time.Second}
	present, err := h.Present(ctx, "agent-w1")
	require.NoError(t, err)
	assert.True(t, present)
	got, err := h.Status(ctx, "agent-w1")
	require.NoError(t, err)
	assert.Equal(t, int64(1), got.Generation)
	assert.Equal(t, migrate.HostFailed, got.Phase)

	// Least privilege: the agent cannot write Nodes.
	_, err = asAgent.CoreV1().Nodes().Patch(ctx, "agent-w1", types.MergePatchType, patch, metav1.PatchOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "forbidden")
}
