package nodecidrtest

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every write, Touch and seeding moves the resourceVersion on, as etcd's
// revision does; UIDs are new for every object.
func TestResourceVersionsGrow(t *testing.T) {
	ctx := context.Background()
	c, s := New(testNode("a", "10.0.1.0/24"))
	rv := func(n *corev1.Node) int {
		v, err := strconv.Atoi(n.ResourceVersion)
		require.NoError(t, err, n.ResourceVersion)
		return v
	}
	a, _ := s.Node("a")
	last := rv(a)
	require.True(t, s.Touch("a"))
	a, _ = s.Node("a")
	assert.Greater(t, rv(a), last, "Touch")
	last = rv(a)
	assert.False(t, s.Touch("missing"))

	b, err := c.CoreV1().Nodes().Create(ctx, testNode("b", "10.0.2.0/24"), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Greater(t, rv(b), last, "create")
	assert.NotEqual(t, a.UID, b.UID)
	last = rv(b)
	b.Labels["edited"] = "yes"
	b, err = c.CoreV1().Nodes().Update(ctx, b, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Greater(t, rv(b), last, "update")
	last = rv(b)
	s.AddNode(testNode("c"))
	cn, _ := s.Node("c")
	assert.Greater(t, rv(cn), last, "AddNode")
	assert.NotEqual(t, b.UID, cn.UID)
}

// Lists see nodes and pods added after an earlier list.
func TestListsFollowAdds(t *testing.T) {
	ctx := context.Background()
	c, s := New(testNode("a"))
	l, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, l.Items, 1)
	s.AddNode(testNode("b"))
	l, err = c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, l.Items, 2)
	assert.Len(t, s.Nodes(), 2)

	s.AddPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1"}, Spec: corev1.PodSpec{NodeName: "a"}})
	p, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, p.Items, 1)
	assert.Equal(t, metav1.NamespaceDefault, p.Items[0].Namespace)
	s.AddPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p2", Namespace: "x"}, Spec: corev1.PodSpec{NodeName: "a"}})
	p, err = c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, p.Items, 2)
	assert.Len(t, s.Pods(), 2)
}

// The Server counts the calls it serves, a status update included, and
// leaves other subresources to the next reactor.
func TestCallsAndSubresources(t *testing.T) {
	ctx := context.Background()
	c, s := New(testNode("a", "10.0.1.0/24"))
	before := s.Calls()
	n, err := c.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, before+1, s.Calls())
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	_, err = c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, before+2, s.Calls(), "status is served")
	got, _ := s.Node("a")
	assert.Len(t, got.Status.Conditions, 1)
}

// podCIDRs validation follows the API server's: at most two, one per
// family; a podCIDR alone fills podCIDRs.
func TestPodCIDRsValidation(t *testing.T) {
	ctx := context.Background()
	c, _ := New()
	nodes := c.CoreV1().Nodes()
	for _, tc := range []struct {
		name  string
		cidrs []string
		ok    bool
	}{
		{"dual", []string{"10.0.1.0/24", "fd00::/64"}, true},
		{"v6 first", []string{"fd00:1::/64", "10.0.2.0/24"}, true},
		{"two v6", []string{"fd00:2::/64", "fd00:3::/64"}, false},
		{"three", []string{"10.0.4.0/24", "fd00:4::/64", "10.0.5.0/24"}, false},
		{"mapped", []string{"::ffff:10.0.6.0/120"}, false},
	} {
		_, err := nodes.Create(ctx, testNode(tc.name, tc.cidrs...), metav1.CreateOptions{})
		if tc.ok {
			assert.NoError(t, err, tc.name)
			continue
		}
		assert.True(t, apierrors.IsInvalid(err), "%s: %v", tc.name, err)
	}
	only := testNode("only")
	only.Spec.PodCIDR = "10.0.7.0/24"
	out, err := nodes.Create(ctx, only, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.7.0/24"}, out.Spec.PodCIDRs)
}

// An update that names another UID is a conflict; providerID may be set
// from empty but not changed; deletes move the resourceVersion on too.
func TestUpdateRules(t *testing.T) {
	ctx := context.Background()
	c, s := New(testNode("a", "10.0.1.0/24"))
	nodes := c.CoreV1().Nodes()
	n, err := nodes.Get(ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)

	other := n.DeepCopy()
	other.UID = "another"
	_, err = nodes.Update(ctx, other, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsConflict(err), "%v", err)
	assert.ErrorContains(t, err, "Precondition failed: UID in precondition: another")

	n.Spec.ProviderID = "kwok://a"
	n, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err, "from empty")
	n.Spec.ProviderID = "kwok://b"
	_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsInvalid(err), "%v", err)
	assert.ErrorContains(t, err, "node updates may not change providerID")

	got, _ := s.Node("a")
	before, err := strconv.Atoi(got.ResourceVersion)
	require.NoError(t, err)
	require.NoError(t, nodes.Delete(ctx, "a", metav1.DeleteOptions{}))
	again, err := nodes.Create(ctx, testNode("a", "10.0.1.0/24"), metav1.CreateOptions{})
	require.NoError(t, err)
	after, err := strconv.Atoi(again.ResourceVersion)
	require.NoError(t, err)
	assert.Greater(t, after, before+1, "the delete took a revision of its own")
}

// A continue token whose key and everything after it were deleted gives an
// empty last page, as etcd's range read does.
func TestContinueAfterTheLastKeyWasDeleted(t *testing.T) {
	ctx := context.Background()
	c, _ := New(testNode("a"), testNode("b"), testNode("c"))
	nodes := c.CoreV1().Nodes()
	p1, err := nodes.List(ctx, metav1.ListOptions{Limit: 1})
	require.NoError(t, err)
	p2, err := nodes.List(ctx, metav1.ListOptions{Limit: 1, Continue: p1.Continue})
	require.NoError(t, err)
	require.Len(t, p2.Items, 1)
	require.Equal(t, "b", p2.Items[0].Name)
	require.NotEmpty(t, p2.Continue)
	require.NoError(t, nodes.Delete(ctx, "b", metav1.DeleteOptions{}))
	require.NoError(t, nodes.Delete(ctx, "c", metav1.DeleteOptions{}))
	p3, err := nodes.List(ctx, metav1.ListOptions{Limit: 1, Continue: p2.Continue})
	require.NoError(t, err)
	assert.Empty(t, p3.Items)
	assert.Empty(t, p3.Continue)
}

// A Node created with generateName gets a name of that prefix; one with
// neither is refused.
func TestCreateWithGenerateName(t *testing.T) {
	ctx := context.Background()
	c, _ := New()
	nodes := c.CoreV1().Nodes()
	gen := testNode("")
	gen.GenerateName = "kwok-"
	out, err := nodes.Create(ctx, gen, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Regexp(t, `^kwok-[0-9a-z]+$`, out.Name)
	_, err = nodes.Create(ctx, testNode(""), metav1.CreateOptions{})
	assert.True(t, apierrors.IsInvalid(err), "%v", err)
	assert.ErrorContains(t, err, "name or generateName is required")
}
