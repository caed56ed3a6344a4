package access_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
)

var checks = []access.Check{
	{Verb: "list", Resource: "nodes"},
	{Verb: "delete", Resource: "nodes"},
	{Verb: "create", Resource: "nodes"},
	{Verb: "patch", Resource: "services", Namespace: "kube-system"},
}

func TestPreflightAllowed(t *testing.T) {
	c := fake.NewClientset()
	accesstest.Authorize(c)
	require.NoError(t, access.Preflight(context.Background(), c, checks))
}

func TestPreflightDeniedListsEverything(t *testing.T) {
	c := fake.NewClientset()
	accesstest.Authorize(c, accesstest.Rule{Verb: "delete", Resource: "nodes"}, accesstest.Rule{Resource: "services"})
	err := access.Preflight(context.Background(), c, checks)
	require.Error(t, err)
	assert.ErrorIs(t, err, access.ErrDenied)
	var de *access.DeniedError
	require.True(t, errors.As(err, &de))
	assert.Len(t, de.Denied, 2)
	assert.Equal(t, "missing permissions, nothing was changed: cannot delete nodes (denied by test rule); cannot patch services in namespace kube-system (denied by test rule)", err.Error())
}

func TestPreflightFailsClosed(t *testing.T) {
	// A bare fake cannot answer reviews: the preflight must fail, never pass.
	err := access.Preflight(context.Background(), fake.NewClientset(), checks[:1])
	assert.ErrorContains(t, err, "checking permission to list nodes")
	// An answer without Allowed is a denial.
	c := fake.NewClientset()
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, a.(k8stesting.CreateAction).GetObject(), nil
	})
	err = access.Preflight(context.Background(), c, checks[:1])
	assert.ErrorIs(t, err, access.ErrDenied)
	assert.EqualError(t, err, "missing permissions, nothing was changed: cannot list nodes")
}

func TestPreflightReviewFails(t *testing.T) {
	c := fake.NewClientset()
	c.PrependReactor("create", "selfsubjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	err := access.Preflight(context.Background(), c, checks[:1])
	assert.EqualError(t, err, "checking permission to list nodes: connection refused")
	assert.Equal(t, "create pods/eviction.policy in namespace ns", access.Check{Verb: "create", Group: "policy", Resource: "pods", Subresource: "eviction", Namespace: "ns"}.String())
}
