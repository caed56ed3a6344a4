package nodecidrtest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func testNode(name string, cidrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"role": "worker"}}}
	n.Spec.PodCIDRs = cidrs
	if len(cidrs) > 0 {
		n.Spec.PodCIDR = cidrs[0]
	}
	return n
}

func TestNodeRules(t *testing.T) {
	ctx := context.Background()
	c, s := New(testNode("a", "10.0.1.0/24"), testNode("empty"))
	nodes := c.CoreV1().Nodes()

	got, err := nodes.Get(ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, got.UID)
	require.NotEmpty(t, got.ResourceVersion)

	t.Run("podCIDR is immutable once set", func(t *testing.T) {
		n := got.DeepCopy()
		n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.0.2.0/24", []string{"10.0.2.0/24"}
		_, err := nodes.Update(ctx, n, metav1.UpdateOptions{})
		require.True(t, apierrors.IsInvalid(err), "%v", err)
		assert.Contains(t, err.Error(), PodCIDRImmutable)

		_, err = nodes.Patch(ctx, "a", types.MergePatchType, []byte(`{"spec":{"podCIDR":"10.0.3.0/24","podCIDRs":["10.0.3.0/24"]}}`), metav1.PatchOptions{})
		assert.Contains(t, err.Error(), PodCIDRImmutable)
	})
	t.Run("podCIDR may be set from empty", func(t *testing.T) {
		out, err := nodes.Patch(ctx, "empty", types.MergePatchType, []byte(`{"spec":{"podCIDR":"10.0.9.0/24","podCIDRs":["10.0.9.0/24"]}}`), metav1.PatchOptions{})
		require.NoError(t, err)
		assert.Equal(t, []string{"10.0.9.0/24"}, out.Spec.PodCIDRs)
	})
	t.Run("podCIDR wins over a different podCIDRs[0]", func(t *testing.T) {
		n := testNode("mixed")
		n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.0.5.0/24", []string{"10.0.6.0/24", "fd00::/64"}
		out, err := nodes.Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equal(t, []string{"10.0.5.0/24"}, out.Spec.PodCIDRs)
	})
	t.Run("strict validation on create", func(t *testing.T) {
		_, err := nodes.Create(ctx, testNode("hostbits", "10.0.7.1/24"), metav1.CreateOptions{})
		require.True(t, apierrors.IsInvalid(err), "%v", err)
		_, err = nodes.Create(ctx, testNode("twov4", "10.0.7.0/24", "10.0.8.0/24"), metav1.CreateOptions{})
		require.True(t, apierrors.IsInvalid(err), "%v", err)
	})
	t.Run("resourceVersion on create is rejected", func(t *testing.T) {
		n := testNode("rv", "10.0.10.0/24")
		n.ResourceVersion = "42"
		_, err := nodes.Create(ctx, n, metav1.CreateOptions{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), ResourceVersionOnCreate)
	})
	t.Run("create of an existing name", func(t *testing.T) {
		_, err := nodes.Create(ctx, testNode("a", "10.0.11.0/24"), metav1.CreateOptions{})
		assert.True(t, apierrors.IsAlreadyExists(err), "%v", err)
	})
	t.Run("delete preconditions", func(t *testing.T) {
		wrong := types.UID("someone-else")
		err := nodes.Delete(ctx, "a", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrong}})
		require.True(t, apierrors.IsConflict(err), "%v", err)
		oldRV := "999"
		err = nodes.Delete(ctx, "a", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &got.UID, ResourceVersion: &oldRV}})
		require.True(t, apierrors.IsConflict(err), "%v", err)
		_, ok := s.Node("a")
		require.True(t, ok)
	})
	t.Run("server dry run stores nothing", func(t *testing.T) {
		err := nodes.Delete(ctx, "a", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &got.UID}, DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err)
		_, ok := s.Node("a")
		require.True(t, ok)
		_, err = nodes.Create(ctx, testNode("dry", "10.0.12.0/24"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err)
		_, ok = s.Node("dry")
		require.False(t, ok)
	})
	t.Run("delete and create gives a new uid and keeps status", func(t *testing.T) {
		require.NoError(t, nodes.Delete(ctx, "a", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &got.UID}}))
		n := testNode("a", "10.0.20.0/24")
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.9"}}
		out, err := nodes.Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.NotEqual(t, got.UID, out.UID)
		assert.Equal(t, "192.0.2.9", out.Status.Addresses[0].Address)
	})
	t.Run("update ignores status and honours resourceVersion", func(t *testing.T) {
		cur, err := nodes.Get(ctx, "a", metav1.GetOptions{})
		require.NoError(t, err)
		stale := cur.DeepCopy()
		require.True(t, s.Touch("a"))
		stale.Labels["x"] = "y"
		_, err = nodes.Update(ctx, stale, metav1.UpdateOptions{})
		require.True(t, apierrors.IsConflict(err), "%v", err)
		cur, _ = nodes.Get(ctx, "a", metav1.GetOptions{})
		cur.Status.Addresses = nil
		out, err := nodes.Update(ctx, cur, metav1.UpdateOptions{})
		require.NoError(t, err)
		assert.NotEmpty(t, out.Status.Addresses)
	})
}

func TestPagination(t *testing.T) {
	ctx := context.Background()
	var objs []*corev1.Node
	c, _ := New()
	for _, n := range []string{"e", "a", "d", "b", "c"} {
		objs = append(objs, testNode(n))
		_, err := c.CoreV1().Nodes().Create(ctx, objs[len(objs)-1], metav1.CreateOptions{})
		require.NoError(t, err)
	}
	var names []string
	opts := metav1.ListOptions{Limit: 2}
	pages := 0
	for {
		l, err := c.CoreV1().Nodes().List(ctx, opts)
		require.NoError(t, err)
		pages++
		for _, n := range l.Items {
			names = append(names, n.Name)
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	assert.Equal(t, []string{"a", "b", "c", "d", "e"}, names)
	assert.Equal(t, 3, pages)

	l, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "role=master"})
	require.NoError(t, err)
	assert.Empty(t, l.Items)
}

func TestPodFieldSelector(t *testing.T) {
	ctx := context.Background()
	p := func(ns, name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	c, _ := New(p("a", "1", "n1"), p("b", "2", "n2"), p("a", "3", ""), p("a", "4", "n1"))
	l, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
	require.NoError(t, err)
	require.Len(t, l.Items, 2)
	l, err = c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName!="})
	require.NoError(t, err)
	require.Len(t, l.Items, 3)
	l, err = c.CoreV1().Pods("b").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, l.Items, 1)
}

func TestAuthorize(t *testing.T) {
	c, _ := New()
	Authorize(c, Deny{Verb: "delete", Resource: "nodes"})
	review := func(verb string) bool {
		r, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "nodes"}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		return r.Status.Allowed
	}
	assert.True(t, review("create"))
	assert.False(t, review("delete"))
}
