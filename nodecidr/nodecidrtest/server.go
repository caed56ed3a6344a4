// Package nodecidrtest is an in-memory Kubernetes API for Nodes and Pods that
// plugs into a client-go fake clientset and enforces the API rules nodecidr
// depends on, so tests cannot pass because the fake is more forgiving than a
// real kube-apiserver:
//
//   - a Node update or patch may change spec.podCIDR(s) only from "" to a value
//     (`node updates may not change podCIDR except from "" to valid`), and
//     spec.providerID likewise; updates never change status (the main resource
//     ignores it, as nodeStrategy.PrepareForUpdate does);
//   - spec.podCIDR and spec.podCIDRs are reconciled as the v1 conversion does
//     (podCIDR wins when both are set and differ) and validated strictly
//     (canonical form, at most one per family), as kube-apiserver 1.36 does;
//   - create assigns a new UID, creationTimestamp and resourceVersion, drops
//     spec.configSource, and rejects a non-empty resourceVersion with
//     `resourceVersion should not be set on objects to be created`;
//   - create of an existing name fails with AlreadyExists (after validation, as
//     the real registry orders it), delete honours UID and resourceVersion
//     preconditions (409 Conflict), update and patch honour resourceVersion;
//   - server-side dry-run (metav1.DryRunAll) validates everything and stores nothing;
//   - list honours label selectors, the field selectors nodecidr uses
//     (metadata.name, spec.nodeName) and pagination (limit / continue).
//
// Other resources fall through to the fake clientset's own tracker. New also
// makes SelfSubjectAccessReviews answer "allowed", so permission preflights
// work; Authorize denies chosen verbs.
package nodecidrtest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/access/accesstest"
)

// PodCIDRImmutable is the message kube-apiserver returns when an update
// changes a podCIDR that is already set.
const PodCIDRImmutable = `node updates may not change podCIDR except from "" to valid`

// ResourceVersionOnCreate is the message kube-apiserver returns when an
// object to be created carries a resourceVersion.
const ResourceVersionOnCreate = "resourceVersion should not be set on objects to be created"

var (
	nodesGR = schema.GroupResource{Resource: "nodes"}
	podsGR  = schema.GroupResource{Resource: "pods"}
)

// Server holds the Nodes and Pods and answers the fake clientset's actions
// for them. It is safe for concurrent use.
type Server struct {
	mu    sync.Mutex
	rv    int64
	seq   int64
	nodes map[string]*corev1.Node
	pods  map[string]*corev1.Pod // key namespace/name
	// sorted keys, rebuilt lazily
	nodeKeys, podKeys []string
	nodesDirty        bool
	podsDirty         bool
	now               func() time.Time
	calls             int
}

// New returns a fake clientset whose Nodes and Pods are served by a new
// Server holding the Nodes and Pods among objs (other objects go to the
// clientset's tracker), with SelfSubjectAccessReviews allowed.
func New(objs ...runtime.Object) (*fake.Clientset, *Server) {
	var rest []runtime.Object
	s := NewServer()
	for _, o := range objs {
		switch v := o.(type) {
		case *corev1.Node:
			s.AddNode(v)
		case *corev1.Pod:
			s.AddPod(v)
		default:
			rest = append(rest, o)
		}
	}
	c := fake.NewClientset(rest...)
	s.Install(c)
	accesstest.Authorize(c)
	return c, s
}

// Deny is a permission a SelfSubjectAccessReview refuses: Verb on Resource
// (any group and namespace); an empty field matches anything.
type Deny struct {
	Verb     string
	Resource string
}

// Authorize makes c answer SelfSubjectAccessReviews like an RBAC authorizer
// that allows everything except the deny rules. It takes precedence over the
// allow-all reviews New installs.
func Authorize(c *fake.Clientset, deny ...Deny) {
	rules := make([]accesstest.Rule, len(deny))
	for i, d := range deny {
		rules[i] = accesstest.Rule{Verb: d.Verb, Resource: d.Resource}
	}
	accesstest.Authorize(c, rules...)
}

// NewServer returns an empty Server; Install attaches it to a clientset.
func NewServer() *Server {
	return &Server{
		nodes: make(map[string]*corev1.Node),
		pods:  make(map[string]*corev1.Pod),
		now:   time.Now,
	}
}

// Install prepends reactors that route every Node and Pod action of c to s.
func (s *Server) Install(c *fake.Clientset) {
	c.PrependReactor("*", "nodes", s.Handle)
	c.PrependReactor("*", "pods", s.Handle)
}

// SetClock replaces the clock used for creationTimestamp.
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// Calls returns how many Node and Pod actions s has served.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// AddNode stores a copy of n as it is (UID and creationTimestamp are kept,
// and assigned when missing), bypassing validation: use it to seed states a
// real cluster could have reached through older versions.
func (s *Server) AddNode(n *corev1.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n = n.DeepCopy()
	s.stamp(&n.ObjectMeta, true)
	s.nodes[n.Name] = n
	s.nodesDirty = true
}

// AddPod stores a copy of p, like AddNode.
func (s *Server) AddPod(p *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p = p.DeepCopy()
	if p.Namespace == "" {
		p.Namespace = metav1.NamespaceDefault
	}
	s.stamp(&p.ObjectMeta, true)
	s.pods[p.Namespace+"/"+p.Name] = p
	s.podsDirty = true
}

// Node returns a copy of the stored Node.
func (s *Server) Node(name string) (*corev1.Node, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[name]
	if !ok {
		return nil, false
	}
	return n.DeepCopy(), true
}

// Nodes returns copies of all Nodes sorted by name.
func (s *Server) Nodes() []corev1.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]corev1.Node, 0, len(s.nodes))
	for _, k := range s.sortedNodeKeys() {
		out = append(out, *s.nodes[k].DeepCopy())
	}
	return out
}

// Pods returns copies of all Pods sorted by namespace and name.
func (s *Server) Pods() []corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]corev1.Pod, 0, len(s.pods))
	for _, k := range s.sortedPodKeys() {
		out = append(out, *s.pods[k].DeepCopy())
	}
	return out
}

// Touch simulates a kubelet status update: the Node's heartbeat changes and
// its resourceVersion moves on.
func (s *Server) Touch(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[name]
	if !ok {
		return false
	}
	now := metav1.NewTime(s.now())
	if len(n.Status.Conditions) == 0 {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	}
	n.Status.Conditions[0].LastHeartbeatTime = now
	s.rv++
	n.ResourceVersion = strconv.FormatInt(s.rv, 10)
	return true
}

func (s *Server) stamp(m *metav1.ObjectMeta, keep bool) {
	s.seq++
	if !keep || m.UID == "" {
		m.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", s.seq))
	}
	if !keep || m.CreationTimestamp.IsZero() {
		m.CreationTimestamp = metav1.NewTime(s.now().Truncate(time.Second))
	}
	s.rv++
	m.ResourceVersion = strconv.FormatInt(s.rv, 10)
}

func (s *Server) sortedNodeKeys() []string {
	if s.nodesDirty || s.nodeKeys == nil {
		s.nodeKeys = s.nodeKeys[:0]
		for k := range s.nodes {
			s.nodeKeys = append(s.nodeKeys, k)
		}
		sort.Strings(s.nodeKeys)
		s.nodesDirty = false
	}
	return s.nodeKeys
}

func (s *Server) sortedPodKeys() []string {
	if s.podsDirty || s.podKeys == nil {
		s.podKeys = s.podKeys[:0]
		for k := range s.pods {
			s.podKeys = append(s.podKeys, k)
		}
		sort.Strings(s.podKeys)
		s.podsDirty = false
	}
	return s.podKeys
}

// Handle serves one action; it has the signature of a client-go reactor so
// tests can wrap it (for example to inject a fault after the call is served).
// Actions on other resources are not handled.
func (s *Server) Handle(a k8stesting.Action) (bool, runtime.Object, error) {
	res := a.GetResource().Resource
	if a.GetResource().Group != "" || (res != "nodes" && res != "pods") {
		return false, nil, nil
	}
	if a.GetSubresource() != "" && a.GetSubresource() != "status" {
		return false, nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if res == "pods" {
		return s.handlePod(a)
	}
	return s.handleNode(a)
}

func (s *Server) handleNode(a k8stesting.Action) (bool, runtime.Object, error) {
	switch act := a.(type) {
	case k8stesting.GetActionImpl:
		n, ok := s.nodes[act.GetName()]
		if !ok {
			return true, nil, apierrors.NewNotFound(nodesGR, act.GetName())
		}
		return true, n.DeepCopy(), nil
	case k8stesting.ListActionImpl:
		return s.listNodes(act)
	case k8stesting.CreateActionImpl:
		n, ok := act.GetObject().(*corev1.Node)
		if !ok {
			return true, nil, apierrors.NewBadRequest("not a Node")
		}
		return s.createNode(n.DeepCopy(), isDryRun(act.CreateOptions.DryRun))
	case k8stesting.UpdateActionImpl:
		n, ok := act.GetObject().(*corev1.Node)
		if !ok {
			return true, nil, apierrors.NewBadRequest("not a Node")
		}
		return s.updateNode(n.DeepCopy(), a.GetSubresource() == "status", isDryRun(act.UpdateOptions.DryRun))
	case k8stesting.PatchActionImpl:
		return s.patchNode(act)
	case k8stesting.DeleteActionImpl:
		return s.deleteNode(act)
	}
	return true, nil, apierrors.NewMethodNotSupported(nodesGR, a.GetVerb())
}

func isDryRun(v []string) bool {
	for _, s := range v {
		if s == metav1.DryRunAll {
			return true
		}
	}
	return false
}

// normalizePodCIDRs applies the v1 → internal → v1 round trip of NodeSpec.
func normalizePodCIDRs(spec *corev1.NodeSpec) {
	if spec.PodCIDR != "" && len(spec.PodCIDRs) > 0 && spec.PodCIDR != spec.PodCIDRs[0] {
		spec.PodCIDRs = []string{spec.PodCIDR}
	}
	if spec.PodCIDR != "" && len(spec.PodCIDRs) == 0 {
		spec.PodCIDRs = []string{spec.PodCIDR}
	}
	if len(spec.PodCIDRs) > 0 {
		spec.PodCIDR = spec.PodCIDRs[0]
	} else {
		spec.PodCIDR = ""
	}
}

// validatePodCIDRs mirrors validateNodeSpec's podCIDRs rules with strict IP
// validation (the 1.36 default).
func validatePodCIDRs(cidrs []string) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec", "podCIDRs")
	var fams []bool
	for i, v := range cidrs {
		p, err := netip.ParsePrefix(v)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(path.Index(i), v, "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"))
			continue
		case p.Addr().Is4In6():
			errs = append(errs, field.Invalid(path.Index(i), v, "must not have an IPv4-mapped IPv6 address"))
		case p.Addr() != p.Masked().Addr():
			errs = append(errs, field.Invalid(path.Index(i), v, "must not have bits set beyond the prefix length"))
		}
		fams = append(fams, p.Addr().Is4())
	}
	if len(cidrs) > 1 && (len(cidrs) > 2 || len(fams) != 2 || fams[0] == fams[1]) {
		errs = append(errs, field.Invalid(path, cidrs, "may specify no more than one CIDR for each IP family"))
	}
	return errs
}

func (s *Server) createNode(n *corev1.Node, dryRun bool) (bool, runtime.Object, error) {
	if n.Name == "" && n.GenerateName != "" {
		n.Name = n.GenerateName + strconv.FormatInt(s.seq+1, 36)
	}
	var errs field.ErrorList
	if n.Name == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "name"), "name or generateName is required"))
	}
	normalizePodCIDRs(&n.Spec)
	errs = append(errs, validatePodCIDRs(n.Spec.PodCIDRs)...)
	if len(errs) > 0 {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, n.Name, errs)
	}
	// spec.configSource is dropped on create (DynamicKubeletConfig is gone).
	//lint:ignore SA1019 the fake drops it as the real registry does
	n.Spec.ConfigSource = nil
	n.Status.Config = nil
	if dryRun {
		// DryRunnableStorage.Create: existence is checked, the resourceVersion is not.
		if _, exists := s.nodes[n.Name]; exists {
			return true, nil, apierrors.NewAlreadyExists(nodesGR, n.Name)
		}
		out := n.DeepCopy()
		out.UID = types.UID("dry-run-" + n.Name)
		out.CreationTimestamp = metav1.NewTime(s.now())
		out.ResourceVersion = ""
		return true, out, nil
	}
	if n.ResourceVersion != "" {
		return true, nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
			Reason: metav1.StatusReasonUnknown, Message: ResourceVersionOnCreate,
		}}
	}
	if _, exists := s.nodes[n.Name]; exists {
		return true, nil, apierrors.NewAlreadyExists(nodesGR, n.Name)
	}
	n.DeletionTimestamp = nil
	n.DeletionGracePeriodSeconds = nil
	n.ManagedFields = nil
	n.Generation = 0
	s.stamp(&n.ObjectMeta, false)
	s.nodes[n.Name] = n
	s.nodesDirty = true
	return true, n.DeepCopy(), nil
}

func conflict(gr schema.GroupResource, name string, err error) error {
	return apierrors.NewConflict(gr, name, err)
}

var errModified = fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again")

// updateNode applies ValidateNodeUpdate's rules and nodeStrategy's status handling.
func (s *Server) updateNode(n *corev1.Node, status, dryRun bool) (bool, runtime.Object, error) {
	old, ok := s.nodes[n.Name]
	if !ok {
		return true, nil, apierrors.NewNotFound(nodesGR, n.Name)
	}
	if n.ResourceVersion != "" && n.ResourceVersion != old.ResourceVersion {
		return true, nil, conflict(nodesGR, n.Name, errModified)
	}
	if n.UID != "" && n.UID != old.UID {
		//lint:ignore ST1005 kube-apiserver's own wording
		return true, nil, conflict(nodesGR, n.Name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", n.UID, old.UID))
	}
	normalizePodCIDRs(&n.Spec)
	if status {
		// The status subresource only changes status.
		st := n.Status
		n = old.DeepCopy()
		n.Status = st
	} else {
		n.Status = *old.Status.DeepCopy()
	}
	var errs field.ErrorList
	errs = append(errs, validatePodCIDRs(n.Spec.PodCIDRs)...)
	if len(old.Spec.PodCIDRs) > 0 {
		changed := len(old.Spec.PodCIDRs) != len(n.Spec.PodCIDRs)
		for i := 0; !changed && i < len(old.Spec.PodCIDRs); i++ {
			changed = old.Spec.PodCIDRs[i] != n.Spec.PodCIDRs[i]
		}
		if changed {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "podCIDRs"), PodCIDRImmutable))
		}
	}
	if old.Spec.ProviderID != "" && old.Spec.ProviderID != n.Spec.ProviderID {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "providerID"), `node updates may not change providerID except from "" to valid`))
	}
	if len(errs) > 0 {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, n.Name, errs)
	}
	n.UID = old.UID
	n.CreationTimestamp = old.CreationTimestamp
	n.DeletionTimestamp = old.DeletionTimestamp
	if dryRun {
		n.ResourceVersion = old.ResourceVersion
		return true, n, nil
	}
	s.rv++
	n.ResourceVersion = strconv.FormatInt(s.rv, 10)
	s.nodes[n.Name] = n
	return true, n.DeepCopy(), nil
}

func (s *Server) patchNode(a k8stesting.PatchActionImpl) (bool, runtime.Object, error) {
	old, ok := s.nodes[a.GetName()]
	if !ok {
		return true, nil, apierrors.NewNotFound(nodesGR, a.GetName())
	}
	orig, err := json.Marshal(old)
	if err != nil {
		return true, nil, apierrors.NewInternalError(err)
	}
	var patched []byte
	switch a.GetPatchType() {
	case types.MergePatchType:
		patched, err = jsonpatch.MergePatch(orig, a.GetPatch())
	case types.StrategicMergePatchType:
		patched, err = strategicpatch.StrategicMergePatch(orig, a.GetPatch(), corev1.Node{})
	case types.JSONPatchType:
		var p jsonpatch.Patch
		if p, err = jsonpatch.DecodePatch(a.GetPatch()); err == nil {
			patched, err = p.Apply(orig)
		}
	default:
		return true, nil, apierrors.NewBadRequest("unsupported patch type " + string(a.GetPatchType()))
	}
	if err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	n := &corev1.Node{}
	if err := json.Unmarshal(patched, n); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	if n.Name != old.Name {
		return true, nil, apierrors.NewBadRequest("the name of the object does not match the name on the URL")
	}
	dry := isDryRun(a.PatchOptions.DryRun)
	return s.updateNode(n, a.GetSubresource() == "status", dry)
}

func (s *Server) deleteNode(a k8stesting.DeleteActionImpl) (bool, runtime.Object, error) {
	old, ok := s.nodes[a.GetName()]
	if !ok {
		return true, nil, apierrors.NewNotFound(nodesGR, a.GetName())
	}
	opts := a.DeleteOptions
	if err := checkPreconditions(opts.Preconditions, &old.ObjectMeta); err != nil {
		return true, nil, conflict(nodesGR, old.Name, err)
	}
	if isDryRun(opts.DryRun) {
		return true, old.DeepCopy(), nil
	}
	delete(s.nodes, old.Name)
	s.nodesDirty = true
	s.rv++
	return true, old.DeepCopy(), nil
}

func checkPreconditions(p *metav1.Preconditions, m *metav1.ObjectMeta) error {
	if p == nil {
		return nil
	}
	if p.UID != nil && *p.UID != m.UID {
		//lint:ignore ST1005 kube-apiserver's own wording
		return fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, m.UID)
	}
	if p.ResourceVersion != nil && *p.ResourceVersion != m.ResourceVersion {
		//lint:ignore ST1005 kube-apiserver's own wording
		return fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, m.ResourceVersion)
	}
	return nil
}

// page returns the keys of one page after the continue token, the next token,
// and an error for a malformed token.
func page(keys []string, cont string, limit int64, match func(string) bool) ([]string, string, error) {
	start := 0
	if cont != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cont)
		if err != nil {
			return nil, "", apierrors.NewBadRequest("invalid continue token")
		}
		after := string(raw)
		start = sort.SearchStrings(keys, after)
		if start < len(keys) && keys[start] == after {
			start++
		}
	}
	var out []string
	for i := start; i < len(keys); i++ {
		if !match(keys[i]) {
			continue
		}
		if limit > 0 && int64(len(out)) == limit {
			return out, base64.RawURLEncoding.EncodeToString([]byte(out[len(out)-1])), nil
		}
		out = append(out, keys[i])
	}
	return out, "", nil
}

func selectors(a k8stesting.ListActionImpl) (labels.Selector, fields.Selector) {
	r := a.GetListRestrictions()
	l, f := r.Labels, r.Fields
	if l == nil {
		l = labels.Everything()
	}
	if f == nil {
		f = fields.Everything()
	}
	return l, f
}

func (s *Server) listNodes(a k8stesting.ListActionImpl) (bool, runtime.Object, error) {
	ls, fs := selectors(a)
	opts := a.ListOptions
	keys, cont, err := page(s.sortedNodeKeys(), opts.Continue, opts.Limit, func(k string) bool {
		n := s.nodes[k]
		return ls.Matches(labels.Set(n.Labels)) && fs.Matches(fields.Set{"metadata.name": n.Name})
	})
	if err != nil {
		return true, nil, err
	}
	list := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(s.rv, 10), Continue: cont}}
	list.Items = make([]corev1.Node, len(keys))
	for i, k := range keys {
		s.nodes[k].DeepCopyInto(&list.Items[i])
	}
	return true, list, nil
}

// podFields exposes the pod fields the API server lets you select on, without allocating.
type podFields struct{ p *corev1.Pod }

// Has reports whether field is selectable.
func (f podFields) Has(field string) bool {
	switch field {
	case "metadata.name", "metadata.namespace", "spec.nodeName", "status.phase":
		return true
	}
	return false
}

// Get returns the value of a selectable field.
func (f podFields) Get(field string) string {
	switch field {
	case "metadata.name":
		return f.p.Name
	case "metadata.namespace":
		return f.p.Namespace
	case "spec.nodeName":
		return f.p.Spec.NodeName
	case "status.phase":
		return string(f.p.Status.Phase)
	}
	return ""
}

func (s *Server) handlePod(a k8stesting.Action) (bool, runtime.Object, error) {
	ns := a.GetNamespace()
	switch act := a.(type) {
	case k8stesting.GetActionImpl:
		p, ok := s.pods[ns+"/"+act.GetName()]
		if !ok {
			return true, nil, apierrors.NewNotFound(podsGR, act.GetName())
		}
		return true, p.DeepCopy(), nil
	case k8stesting.ListActionImpl:
		ls, fs := selectors(act)
		opts := act.ListOptions
		keys, cont, err := page(s.sortedPodKeys(), opts.Continue, opts.Limit, func(k string) bool {
			p := s.pods[k]
			return (ns == "" || p.Namespace == ns) && ls.Matches(labels.Set(p.Labels)) && fs.Matches(podFields{p})
		})
		if err != nil {
			return true, nil, err
		}
		list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(s.rv, 10), Continue: cont}}
		list.Items = make([]corev1.Pod, len(keys))
		for i, k := range keys {
			s.pods[k].DeepCopyInto(&list.Items[i])
		}
		return true, list, nil
	case k8stesting.CreateActionImpl:
		p, ok := act.GetObject().(*corev1.Pod)
		if !ok {
			return true, nil, apierrors.NewBadRequest("not a Pod")
		}
		p = p.DeepCopy()
		if p.Namespace == "" {
			p.Namespace = ns
		}
		key := p.Namespace + "/" + p.Name
		if p.ResourceVersion != "" {
			return true, nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure,
				Code: http.StatusInternalServerError, Reason: metav1.StatusReasonUnknown, Message: ResourceVersionOnCreate}}
		}
		if _, exists := s.pods[key]; exists {
			return true, nil, apierrors.NewAlreadyExists(podsGR, p.Name)
		}
		if isDryRun(act.CreateOptions.DryRun) {
			return true, p, nil
		}
		s.stamp(&p.ObjectMeta, false)
		s.pods[key] = p
		s.podsDirty = true
		return true, p.DeepCopy(), nil
	case k8stesting.DeleteActionImpl:
		key := ns + "/" + act.GetName()
		p, ok := s.pods[key]
		if !ok {
			return true, nil, apierrors.NewNotFound(podsGR, act.GetName())
		}
		opts := act.DeleteOptions
		if err := checkPreconditions(opts.Preconditions, &p.ObjectMeta); err != nil {
			return true, nil, conflict(podsGR, p.Name, err)
		}
		if isDryRun(opts.DryRun) {
			return true, p.DeepCopy(), nil
		}
		delete(s.pods, key)
		s.podsDirty = true
		s.rv++
		return true, p.DeepCopy(), nil
	}
	return true, nil, apierrors.NewMethodNotSupported(podsGR, strings.ToLower(a.GetVerb()))
}
