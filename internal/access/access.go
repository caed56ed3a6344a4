// Package access checks, before the first write, that the caller may do every
// verb an Apply will need, using SelfSubjectAccessReview. A run that lacks a
// permission fails before anything changes, not halfway through.
package access

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ErrDenied is wrapped by *DeniedError.
var ErrDenied = errors.New("permission denied")

// Check is one permission: a verb on a resource, optionally in a namespace,
// for a name or a subresource.
type Check struct {
	Verb        string
	Group       string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
}

func (c Check) String() string {
	r := c.Resource
	if c.Subresource != "" {
		r += "/" + c.Subresource
	}
	if c.Group != "" {
		r += "." + c.Group
	}
	s := c.Verb + " " + r
	if c.Namespace != "" {
		s += " in namespace " + c.Namespace
	}
	return s
}

// DeniedError lists every permission the caller lacks.
type DeniedError struct {
	Denied []Check
	// Reasons holds the authorizer's reason per denied check, where it gave one.
	Reasons []string
}

func (e *DeniedError) Error() string {
	parts := make([]string, len(e.Denied))
	for i, c := range e.Denied {
		parts[i] = c.String()
		if e.Reasons[i] != "" {
			parts[i] += " (" + e.Reasons[i] + ")"
		}
	}
	return "missing permissions, nothing was changed: cannot " + strings.Join(parts, "; cannot ")
}

// Unwrap returns ErrDenied.
func (e *DeniedError) Unwrap() error { return ErrDenied }

// Preflight asks the API server whether the caller may perform each check.
// It returns a *DeniedError naming every missing permission, or an error when
// the review itself fails.
func Preflight(ctx context.Context, client kubernetes.Interface, checks []Check) error {
	denied := &DeniedError{}
	for _, c := range checks {
		review := &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: c.Verb, Group: c.Group, Resource: c.Resource, Subresource: c.Subresource,
					Namespace: c.Namespace, Name: c.Name,
				},
			},
		}
		res, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("checking permission to %s: %w", c, err)
		}
		if !res.Status.Allowed {
			denied.Denied = append(denied.Denied, c)
			denied.Reasons = append(denied.Reasons, res.Status.Reason)
		}
	}
	if len(denied.Denied) > 0 {
		return denied
	}
	return nil
}
