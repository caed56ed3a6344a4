package nodecidr

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// pagedNodes makes a fake clientset list its five nodes in pages of the
// request's limit, as the API server does, with a continue token naming
// the next offset. The first expire requests that carry a continue token
// are answered 410 Gone (the token expired, as after an etcd compaction).
func pagedNodes(t *testing.T, expire int) (*fake.Clientset, *[]string) {
	t.Helper()
	var nodes []runtime.Object
	for i := range 5 {
		nodes = append(nodes, node(fmt.Sprintf("n%d", i), cidrs(fmt.Sprintf("10.240.%d.0/24", i))))
	}
	cs := fake.NewClientset(nodes...)
	var requests []string
	cs.PrependReactor("list", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		lo := a.(k8stesting.ListActionImpl).GetListOptions()
		requests = append(requests, "continue="+lo.Continue)
		if lo.Continue != "" && expire > 0 {
			expire--
			return true, nil, apierrors.NewResourceExpired("The provided continue parameter is too old")
		}
		all, err := cs.Tracker().List(corev1.SchemeGroupVersion.WithResource("nodes"), corev1.SchemeGroupVersion.WithKind("Node"), "")
		if err != nil {
			return true, nil, err
		}
		items := all.(*corev1.NodeList).Items
		from := 0
		if lo.Continue != "" {
			if from, err = strconv.Atoi(lo.Continue); err != nil {
				return true, nil, apierrors.NewBadRequest("continue " + lo.Continue)
			}
		}
		to := min(len(items), from+int(lo.Limit))
		page := &corev1.NodeList{Items: items[from:to]}
		if to < len(items) {
			page.Continue = strconv.Itoa(to)
		}
		return true, page, nil
	})
	return cs, &requests
}

// An expired continue token restarts the listing from the first page, and
// the nodes of the pages read before it are not listed twice. A token that
// keeps expiring fails the listing after three restarts.
func TestListNodesRestartsOnExpiredContinue(t *testing.T) {
	cs, requests := pagedNodes(t, 1)
	nodes, err := ListNodes(context.Background(), cs, ListOptions{PageSize: 2})
	require.NoError(t, err)
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	assert.Equal(t, []string{"n0", "n1", "n2", "n3", "n4"}, names)
	assert.Equal(t, []string{"continue=", "continue=2", "continue=", "continue=2", "continue=4"}, *requests)

	cs, requests = pagedNodes(t, 4)
	_, err = ListNodes(context.Background(), cs, ListOptions{PageSize: 2})
	assert.True(t, apierrors.IsResourceExpired(err), "%v", err)
	assert.Len(t, *requests, 8, "the first page and an expired second, four times: %v", *requests)
}

// TestListNodesPageSize: a zero or negative PageSize asks for pages of
// DefaultPageSize, never for the whole list at once.
func TestListNodesPageSize(t *testing.T) {
	for _, size := range []int64{0, -3, 7} {
		cs := fake.NewClientset(node("n1", cidrs("10.240.1.0/24")))
		var limits []int64
		cs.PrependReactor("list", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
			limits = append(limits, a.(k8stesting.ListActionImpl).GetListOptions().Limit)
			return false, nil, nil
		})
		nodes, err := ListNodes(context.Background(), cs, ListOptions{PageSize: size})
		require.NoError(t, err)
		assert.Len(t, nodes, 1)
		want := int64(DefaultPageSize)
		if size > 0 {
			want = size
		}
		assert.Equal(t, []int64{want}, limits, "PageSize %d", size)
	}
}

// TestNewNodeFromWithoutPodCIDRs: putting back a node that had no podCIDR
// (a rollback of an allocate step) creates it with none, spec.podCIDR
// included.
func TestNewNodeFromWithoutPodCIDRs(t *testing.T) {
	backup := node("none", nil)
	backup.ResourceVersion, backup.UID = "7", "uid-none"
	n := newNodeFrom(backup, nil, true)
	assert.Empty(t, n.Spec.PodCIDR)
	assert.Empty(t, n.Spec.PodCIDRs)
	assert.Empty(t, n.ResourceVersion)
	assert.Empty(t, n.UID)
	assert.Equal(t, "none", n.Name)
}

// TestPodCIDRsOf reads a Node as kube-apiserver does: spec.podCIDRs, or
// spec.podCIDR alone when podCIDRs is empty, and only spec.podCIDR when the
// two disagree.
func TestPodCIDRsOf(t *testing.T) {
	for _, tc := range []struct {
		podCIDR  string
		podCIDRs []string
		want     []string
	}{
		{"", nil, nil},
		{"10.0.1.0/24", nil, []string{"10.0.1.0/24"}},
		{"", []string{"10.0.1.0/24", "fd00::/64"}, []string{"10.0.1.0/24", "fd00::/64"}},
		{"10.0.1.0/24", []string{"10.0.1.0/24", "fd00::/64"}, []string{"10.0.1.0/24", "fd00::/64"}},
		{"10.0.2.0/24", []string{"10.0.1.0/24", "fd00::/64"}, []string{"10.0.2.0/24"}},
	} {
		n := &corev1.Node{Spec: corev1.NodeSpec{PodCIDR: tc.podCIDR, PodCIDRs: tc.podCIDRs}}
		assert.Equal(t, tc.want, PodCIDRsOf(n), "podCIDR %q podCIDRs %v", tc.podCIDR, tc.podCIDRs)
	}
}
