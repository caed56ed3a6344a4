package clitest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/internal/access"
)

// Grant is one rule of a Job manifest's RBAC as its ServiceAccount gets
// it: from a ClusterRole bound cluster-wide (Namespace ""), or from a Role
// (or ClusterRole) bound in Namespace.
type Grant struct {
	Namespace string
	Rule      rbacv1.PolicyRule
	// From names the role and binding, for messages.
	From string
}

// RBAC is what a Job manifest grants its Job's ServiceAccount.
type RBAC struct {
	Path   string
	Grants []Grant
}

// Extra is a permission a manifest grants on purpose although no
// SelfSubjectAccessReview of the runbook asks for it: Verb on Resource
// (resource[/subresource]) of Group, cluster-wide (Namespace "") or in
// Namespace, and why.
type Extra struct {
	Verb, Group, Resource, Namespace string
	Reason                           string
}

// JobRBAC reads the ServiceAccount, Roles, ClusterRoles and their bindings
// of a multi-document manifest (an example's job.yaml) and returns the rules
// bound to the ServiceAccount its Job runs as. It fails the test on a role
// no binding gives that ServiceAccount, a binding of a role the manifest
// does not hold, or a rule this evaluator does not model (non-resource URLs).
func JobRBAC(t testing.TB, path string) *RBAC {
	t.Helper()
	var (
		sa, saNS     string
		roles        = map[string]rbacv1.Role{} // namespace/name
		clusterRoles = map[string]rbacv1.ClusterRole{}
		roleBindings []rbacv1.RoleBinding
		crBindings   []rbacv1.ClusterRoleBinding
	)
	for _, doc := range documents(t, path) {
		var err error
		switch doc.kind {
		case "Job":
			var j batchv1.Job
			err = yaml.UnmarshalStrict(doc.data, &j)
			sa, saNS = j.Spec.Template.Spec.ServiceAccountName, j.Namespace
		case "Role":
			var r rbacv1.Role
			err = yaml.UnmarshalStrict(doc.data, &r)
			roles[r.Namespace+"/"+r.Name] = r
		case "ClusterRole":
			var r rbacv1.ClusterRole
			err = yaml.UnmarshalStrict(doc.data, &r)
			clusterRoles[r.Name] = r
		case "RoleBinding":
			var b rbacv1.RoleBinding
			err = yaml.UnmarshalStrict(doc.data, &b)
			roleBindings = append(roleBindings, b)
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			err = yaml.UnmarshalStrict(doc.data, &b)
			crBindings = append(crBindings, b)
		}
		if err != nil {
			t.Fatalf("%s: %s: %v", path, doc.kind, err)
		}
	}
	if sa == "" {
		t.Fatalf("%s: no Job running as a ServiceAccount", path)
	}
	binds := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == saNS
		})
	}
	out := &RBAC{Path: path}
	bound := map[string]bool{}
	add := func(ns, from string, rules []rbacv1.PolicyRule) {
		for _, r := range rules {
			if len(r.NonResourceURLs) > 0 {
				t.Fatalf("%s: %s: non-resource URLs are not modelled", path, from)
			}
			out.Grants = append(out.Grants, Grant{Namespace: ns, Rule: r, From: from})
		}
	}
	for _, b := range crBindings {
		cr, ok := clusterRoles[b.RoleRef.Name]
		if !binds(b.Subjects) || b.RoleRef.Kind != "ClusterRole" || !ok {
			t.Fatalf("%s: ClusterRoleBinding %s binds %s %s to %v, want a ClusterRole of the manifest bound to ServiceAccount %s/%s", path, b.Name, b.RoleRef.Kind, b.RoleRef.Name, b.Subjects, saNS, sa)
		}
		bound["ClusterRole/"+cr.Name] = true
		add("", "ClusterRole "+cr.Name, cr.Rules)
	}
	for _, b := range roleBindings {
		var rules []rbacv1.PolicyRule
		switch b.RoleRef.Kind {
		case "Role":
			r, ok := roles[b.Namespace+"/"+b.RoleRef.Name]
			if !ok {
				t.Fatalf("%s: RoleBinding %s/%s binds Role %s, which the manifest does not hold in %s", path, b.Namespace, b.Name, b.RoleRef.Name, b.Namespace)
			}
			bound["Role/"+b.Namespace+"/"+r.Name], rules = true, r.Rules
		case "ClusterRole":
			r, ok := clusterRoles[b.RoleRef.Name]
			if !ok {
				t.Fatalf("%s: RoleBinding %s/%s binds ClusterRole %s, which the manifest does not hold", path, b.Namespace, b.Name, b.RoleRef.Name)
			}
			bound["ClusterRole/"+r.Name], rules = true, r.Rules
		}
		if !binds(b.Subjects) {
			t.Fatalf("%s: RoleBinding %s/%s does not bind ServiceAccount %s/%s", path, b.Namespace, b.Name, saNS, sa)
		}
		add(b.Namespace, fmt.Sprintf("%s %s (RoleBinding %s/%s)", b.RoleRef.Kind, b.RoleRef.Name, b.Namespace, b.Name), rules)
	}
	for k := range roles {
		if !bound["Role/"+k] {
			t.Fatalf("%s: Role %s is bound to nothing", path, k)
		}
	}
	for k := range clusterRoles {
		if !bound["ClusterRole/"+k] {
			t.Fatalf("%s: ClusterRole %s is bound to nothing", path, k)
		}
	}
	return out
}

// allows says whether g grants c, as the RBAC authorizer decides: a
// cluster-wide grant matches every namespace and cluster-wide requests, a
// namespaced one only requests in its namespace; resourceNames restrict a
// rule to requests naming one of them.
func (g Grant) allows(c access.Check) bool {
	r := g.Rule
	return (g.Namespace == "" || g.Namespace == c.Namespace) &&
		has(r.Verbs, c.Verb) && has(r.APIGroups, c.Group) && has(r.Resources, resource(c)) &&
		(len(r.ResourceNames) == 0 || c.Name != "" && slices.Contains(r.ResourceNames, c.Name))
}

func has(list []string, v string) bool {
	return slices.Contains(list, v) || slices.Contains(list, rbacv1.ResourceAll)
}

func resource(c access.Check) string {
	if c.Subresource != "" {
		return c.Resource + "/" + c.Subresource
	}
	return c.Resource
}

// Allows says whether the manifest grants c.
func (r *RBAC) Allows(c access.Check) bool {
	return slices.ContainsFunc(r.Grants, func(g Grant) bool { return g.allows(c) })
}

// Reviews records the SelfSubjectAccessReviews a fake clientset answered.
type Reviews struct {
	mu     sync.Mutex
	checks []access.Check
}

// Checks returns the reviews so far, in order.
func (v *Reviews) Checks() []access.Check {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.checks)
}

// Authorize makes c answer SelfSubjectAccessReviews as the API server's RBAC
// authorizer would with the manifest's rules, taking precedence over the
// reactors installed before, and records every review.
func (r *RBAC) Authorize(c *fake.Clientset) *Reviews {
	v := &Reviews{}
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		ra := review.Spec.ResourceAttributes
		if ra == nil {
			return true, nil, fmt.Errorf("%s: a review without resource attributes is not modelled", r.Path)
		}
		ch := access.Check{Verb: ra.Verb, Group: ra.Group, Resource: ra.Resource, Subresource: ra.Subresource, Namespace: ra.Namespace, Name: ra.Name}
		v.mu.Lock()
		v.checks = append(v.checks, ch)
		v.mu.Unlock()
		review.Status.Allowed = r.Allows(ch)
		if !review.Status.Allowed {
			review.Status.Reason = "not granted by " + r.Path
		}
		return true, review, nil
	})
	return v
}

// unit is one verb on one resource of one grant.
type unit struct {
	g                                Grant
	verb, group, resource, namespace string
}

func (u unit) String() string {
	s := u.verb + " " + u.resource
	if u.group != "" {
		s += "." + u.group
	}
	if len(u.g.Rule.ResourceNames) > 0 {
		s += " " + strings.Join(u.g.Rule.ResourceNames, ",")
	}
	if u.namespace != "" {
		s += " in namespace " + u.namespace
	}
	return s + " (" + u.g.From + ")"
}

// Granted fails the test, naming them, unless the manifest grants every
// check: call it after each run, before its exit code says why it failed.
func (r *RBAC) Granted(t testing.TB, checks []access.Check) {
	t.Helper()
	seen := map[access.Check]bool{}
	var denied []string
	for _, c := range checks {
		if !seen[c] && !r.Allows(c) {
			denied = append(denied, c.String()+nameSuffix(c))
		}
		seen[c] = true
	}
	sort.Strings(denied)
	if len(denied) > 0 {
		t.Fatalf("%s: the runbook checks what the manifest does not grant: %s", r.Path, strings.Join(denied, "; "))
	}
}

// Match fails the test unless the manifest grants every check (what the
// runbook asks before its first write) and every verb on every resource it
// grants is asked for by some check, with no narrower rule granting the
// same, or listed in extras. An extra without a reason, the manifest does
// not grant, or a check asks for anyway, fails it too, so the list stays
// true.
func (r *RBAC) Match(t testing.TB, checks []access.Check, extras []Extra) {
	t.Helper()
	if len(checks) == 0 {
		t.Fatalf("%s: no permission was checked: the run did not reach its preflight", r.Path)
	}
	r.Granted(t, checks)
	usedExtra := make([]bool, len(extras))
	units := r.units()
	for ui, u := range units {
		// Needed: u is among the narrowest rules allowing some check. A
		// rule whose every check a narrower one allows too (a cluster-wide
		// rule next to a Role, a rule for any name next to one naming it)
		// is surplus.
		used, needed := false, false
		for _, c := range checks {
			if c.Verb != u.verb || c.Group != u.group || resource(c) != u.resource || !u.g.allows(c) {
				continue
			}
			used = true
			narrower := false
			for oi, o := range units {
				narrower = narrower || oi != ui && o.verb == c.Verb && o.group == c.Group && o.resource == resource(c) && o.g.allows(c) && o.breadth() < u.breadth()
			}
			needed = needed || !narrower
		}
		i := slices.IndexFunc(extras, func(e Extra) bool {
			return e.Verb == u.verb && e.Group == u.group && e.Resource == u.resource && e.Namespace == u.namespace
		})
		switch {
		case used && i >= 0:
			t.Errorf("%s: %s is listed as an extra but the runbook checks it: drop it from the extras", r.Path, u)
		case used && !needed:
			t.Errorf("%s: grants %s, but a narrower rule allows every check it allows: remove it", r.Path, u)
		case !used && i < 0:
			t.Errorf("%s: grants %s, which no check of the runbook asks for: remove it, or list it as a deliberate extra with its reason", r.Path, u)
		}
		if i >= 0 {
			usedExtra[i] = true
		}
	}
	for i, e := range extras {
		if e.Reason == "" {
			t.Errorf("%s: the extra %s %s (group %q, namespace %q) gives no reason", r.Path, e.Verb, e.Resource, e.Group, e.Namespace)
		}
		if !usedExtra[i] {
			t.Errorf("%s: the extra %s %s (group %q, namespace %q: %s) is not granted: drop it from the extras", r.Path, e.Verb, e.Resource, e.Group, e.Namespace, e.Reason)
		}
	}
}

func nameSuffix(c access.Check) string {
	if c.Name == "" {
		return ""
	}
	return " (name " + c.Name + ")"
}

// breadth ranks a unit's reach: a cluster-wide grant is broader than a
// namespaced one, a rule for any name broader than one naming them.
func (u unit) breadth() int {
	b := 0
	if u.namespace == "" {
		b++
	}
	if len(u.g.Rule.ResourceNames) == 0 {
		b++
	}
	return b
}

// units expands the grants into one unit per verb, group and resource.
func (r *RBAC) units() []unit {
	var out []unit
	for _, g := range r.Grants {
		for _, v := range g.Rule.Verbs {
			for _, gr := range g.Rule.APIGroups {
				for _, res := range g.Rule.Resources {
					out = append(out, unit{g: g, verb: v, group: gr, resource: res, namespace: g.Namespace})
				}
			}
		}
	}
	return out
}
