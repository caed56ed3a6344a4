// Package accesstest makes client-go fake clientsets answer
// SelfSubjectAccessReviews the way an RBAC authorizer would, so tests of the
// access preflight cannot pass by accident.
package accesstest

import (
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Rule denies Verb on Resource (any group and namespace) when both match;
// an empty field matches anything.
type Rule struct {
	Verb     string
	Resource string
}

// Authorize installs a reactor that allows every review except those matching
// a deny rule. Without it the fake returns an empty status, which means
// "denied" for every check.
func Authorize(c *fake.Clientset, deny ...Rule) {
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		attrs := review.Spec.ResourceAttributes
		review.Status.Allowed = true
		for _, d := range deny {
			if attrs != nil && (d.Verb == "" || d.Verb == attrs.Verb) && (d.Resource == "" || d.Resource == attrs.Resource) {
				review.Status.Allowed = false
				review.Status.Reason = "denied by test rule"
			}
		}
		return true, review, nil
	})
}
