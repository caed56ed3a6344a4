package servicecidrtest

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	networkingv1beta1 "k8s.io/api/networking/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/access/accesstest"
)

// ErrKilled is what the client sees for every request once the simulated
// process died.
var ErrKilled = errors.New("servicecidrtest: the client process was killed")

const (
	group            = "networking.k8s.io"
	finalizer        = "networking.k8s.io/service-cidr-finalizer"
	managedByLabel   = "ipaddress.kubernetes.io/managed-by"
	familyLabel      = "ipaddress.kubernetes.io/ip-family"
	allocatorManager = "ipallocator.k8s.io"
	nodePortBase     = 30000
	nodePortMax      = 32767
)

// InitialServiceCIDR is a ServiceCIDR present (and Ready) from the start.
type InitialServiceCIDR struct {
	Name  string
	CIDRs []string
}

// DenyRule makes access reviews deny Verb on Resource; empty fields match anything.
type DenyRule struct {
	Verb     string
	Resource string
}

// Options configures a fake cluster.
type Options struct {
	// GitVersion is what discovery reports; default "v1.36.3".
	GitVersion string
	// Version is the ServiceCIDR version served: "v1" (default), "v1beta1",
	// "v1alpha1", or "none".
	Version string
	// IPAddressVersion is the IPAddress version served; default Version.
	IPAddressVersion string
	// ServiceCIDRs exist from the start, Ready, with the finalizer.
	ServiceCIDRs []InitialServiceCIDR
	// Services exist from the start; their ClusterIPs (and nodePorts) are
	// allocated as if created, and an empty ClusterIP gets one.
	Services []*corev1.Service
	// Objects (nodes, pods, ...) go to the stock tracker.
	Objects []runtime.Object
	// ControllerDelay is how many requests pass before the controllers act
	// on a change (Ready after create, finalizer removal after delete,
	// default/kubernetes recreation).
	ControllerDelay int
	// AllocatorDelay is how many requests after a ServiceCIDR turns Ready its
	// addresses are still refused (the API server's informer lag).
	AllocatorDelay int
	// DualWrite models Kubernetes 1.33 with DisableAllocatorDualWrite off
	// (its default): kube-apiserver mirrors ClusterIPs into the legacy
	// allocator, whose range is stored once (the first APIServerRange) and
	// does not follow the flag. While the "kubernetes" ServiceCIDR is
	// Terminating, a Service created without a clusterIP fails with
	// "Internal error occurred: failed to allocate a serviceIP: the provided
	// network does not match the current range"; once SetAPIServerRange has
	// given kube-apiserver another range, every address of that range is
	// refused with "failed to allocate IP X: the provided range does not
	// match the current range", default/kubernetes's included (as seen on
	// 1.33.13). SetDualWrite(false) models the restart with the gate on.
	DualWrite bool
	// APIServerRange is kube-apiserver's --service-cluster-ip-range: it
	// recreates the "kubernetes" ServiceCIDR and default/kubernetes (first
	// address) from it when they are missing. Empty: neither is recreated.
	APIServerRange string
	// Deny are access-review rules to deny; everything else is allowed.
	Deny []DenyRule
}

type scState struct {
	name       string
	cidrs      []string
	prefixes   []netip.Prefix
	uid        types.UID
	rv         string
	labels     map[string]string
	finalizers []string
	deleted    *metav1.Time
	created    metav1.Time
	ready      *metav1.Condition
	readyAt    int // request count at which the controller marks it Ready
	usableAt   int // request count from which the allocator hands out its addresses
	releaseAt  int // request count from which a Terminating one may lose its finalizer
}

// Cluster is a fake control plane. Its methods are safe for concurrent use.
type Cluster struct {
	// Kube is the typed fake clientset (Services, v1/v1beta1 ServiceCIDRs,
	// access reviews, discovery, stock objects).
	Kube *fake.Clientset
	// Dynamic serves the ServiceCIDR and IPAddress versions as unstructured
	// objects (the only way to reach v1alpha1).
	Dynamic *dynamicfake.FakeDynamicClient

	opts Options

	mu        sync.Mutex
	requests  int
	killAt    int // 0: never
	onKill    func()
	killed    bool
	loseResp  bool // the request at killAt is processed, its answer lost
	drop      map[*k8stesting.Fake]bool
	seq       int
	scs       map[string]*scState
	services  map[string]*corev1.Service
	ips       map[netip.Addr]string // address -> namespace/name
	nodePorts map[int32]string
	kubeAt    int // request count at which default/kubernetes is recreated; -1 none
	kubeHeld  bool
	apiRange  []netip.Prefix
	// legacyRange is the range the legacy allocator stored in etcd: the
	// first API server range; dualWrite is whether ClusterIPs are mirrored
	// into it.
	legacyRange []netip.Prefix
	dualWrite   bool
	createErr   func(*corev1.Service) error
	writes      []string
}

// New builds a fake cluster. Invalid initial objects are an error.
func New(opts Options) (*Cluster, error) {
	if opts.GitVersion == "" {
		opts.GitVersion = "v1.36.3"
	}
	if opts.Version == "" {
		opts.Version = "v1"
	}
	if opts.IPAddressVersion == "" {
		opts.IPAddressVersion = opts.Version
	}
	for _, v := range []string{opts.Version, opts.IPAddressVersion} {
		if v != "v1" && v != "v1beta1" && v != "v1alpha1" && v != "none" {
			return nil, fmt.Errorf("servicecidrtest: version %q: want v1, v1beta1, v1alpha1 or none", v)
		}
	}
	c := &Cluster{
		Kube:      fake.NewClientset(opts.Objects...),
		opts:      opts,
		scs:       map[string]*scState{},
		services:  map[string]*corev1.Service{},
		ips:       map[netip.Addr]string{},
		nodePorts: map[int32]string{},
		kubeAt:    -1,
		drop:      map[*k8stesting.Fake]bool{},
		dualWrite: opts.DualWrite,
	}
	if opts.APIServerRange != "" {
		if err := c.SetAPIServerRange(opts.APIServerRange); err != nil {
			return nil, err
		}
	}
	scheme := runtime.NewScheme()
	c.Dynamic = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		{Group: group, Version: "v1", Resource: "servicecidrs"}:       "ServiceCIDRList",
		{Group: group, Version: "v1beta1", Resource: "servicecidrs"}:  "ServiceCIDRList",
		{Group: group, Version: "v1alpha1", Resource: "servicecidrs"}: "ServiceCIDRList",
		{Group: group, Version: "v1", Resource: "ipaddresses"}:        "IPAddressList",
		{Group: group, Version: "v1beta1", Resource: "ipaddresses"}:   "IPAddressList",
		{Group: group, Version: "v1alpha1", Resource: "ipaddresses"}:  "IPAddressList",
	})

	// Discovery.
	res := []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "services", Namespaced: true, Kind: "Service"}, {Name: "nodes", Kind: "Node"}, {Name: "pods", Namespaced: true, Kind: "Pod"}}}}
	byGV := map[string]*metav1.APIResourceList{}
	addRes := func(v, name, kind string) {
		if v == "none" {
			return
		}
		l, ok := byGV[v]
		if !ok {
			l = &metav1.APIResourceList{GroupVersion: group + "/" + v}
			byGV[v] = l
			res = append(res, l)
		}
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: name, Kind: kind})
	}
	addRes(opts.Version, "servicecidrs", "ServiceCIDR")
	addRes(opts.IPAddressVersion, "ipaddresses", "IPAddress")
	c.Kube.Resources = res
	minor := ""
	if m := strings.SplitN(strings.TrimPrefix(opts.GitVersion, "v"), ".", 3); len(m) >= 2 {
		minor = m[1]
	}
	c.Kube.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{Major: "1", Minor: minor, GitVersion: opts.GitVersion}

	// Reactors: the last prepended runs first.
	kf, df := &c.Kube.Fake, &c.Dynamic.Fake
	c.Kube.PrependReactor("*", "ipaddresses", c.wrap(kf, c.typedIPAddresses))
	c.Kube.PrependReactor("*", "servicecidrs", c.wrap(kf, c.typedServiceCIDRs))
	c.Kube.PrependReactor("*", "services", c.wrap(kf, c.services_))
	deny := make([]accesstest.Rule, len(opts.Deny))
	for i, d := range opts.Deny {
		deny[i] = accesstest.Rule{Verb: d.Verb, Resource: d.Resource}
	}
	accesstest.Authorize(c.Kube, deny...)
	c.Kube.PrependReactor("*", "*", c.gate(kf))
	c.Kube.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, fmt.Errorf("servicecidrtest: watch is not modelled; poll instead")
	})
	c.Dynamic.PrependReactor("*", "ipaddresses", c.wrap(df, c.dynamicIPAddresses))
	c.Dynamic.PrependReactor("*", "servicecidrs", c.wrap(df, c.dynamicServiceCIDRs))
	c.Dynamic.PrependReactor("*", "*", c.gate(df))

	for _, sc := range opts.ServiceCIDRs {
		st, err := c.newSC(sc.Name, sc.CIDRs, nil)
		if err != nil {
			return nil, err
		}
		st.finalizers = []string{finalizer}
		st.ready = readyCond()
		st.readyAt, st.usableAt = 0, 0
		c.scs[sc.Name] = st
	}
	for _, s := range opts.Services {
		if _, err := c.createService(s.DeepCopy(), false); err != nil {
			return nil, fmt.Errorf("servicecidrtest: initial Service %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	c.writes = nil
	return c, nil
}

// MustNew is New for tests: it panics on error.
func MustNew(opts Options) *Cluster {
	c, err := New(opts)
	if err != nil {
		panic(err)
	}
	return c
}

// SetAPIServerRange models restarting kube-apiserver with a new
// --service-cluster-ip-range (comma-separated).
func (c *Cluster) SetAPIServerRange(s string) error {
	var ps []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("servicecidrtest: API server range %q: %w", s, err)
		}
		ps = append(ps, p.Masked())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.apiRange = ps
	if c.legacyRange == nil {
		c.legacyRange = ps
	}
	return nil
}

// SetDualWrite models restarting kube-apiserver with
// --feature-gates=DisableAllocatorDualWrite=<!on> (see Options.DualWrite).
func (c *Cluster) SetDualWrite(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dualWrite = on
}

// HoldKubernetesService models a kube-apiserver that is slow or down: while
// held, a deleted default/kubernetes is not recreated (everything else still
// answers). Releasing the hold lets the reconciler recreate it at the next
// request (once ControllerDelay requests have passed since the delete), as a
// kube-apiserver that catches up or starts again does.
func (c *Cluster) HoldKubernetesService(hold bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kubeHeld = hold
}

// KillAfter lets n more requests through; the next one is not processed:
// it calls onKill (if not nil) and fails with ErrKilled, as does every later
// one, until Revive. It models a client killed before its request left.
func (c *Cluster) KillAfter(n int, onKill func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.killAt, c.onKill, c.killed, c.loseResp = c.requests+n+1, onKill, false, false
}

// LoseResponseAfter is KillAfter, except that the next request is
// processed by the server and only its answer is lost: the client died
// while waiting for it.
func (c *Cluster) LoseResponseAfter(n int, onKill func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.killAt, c.onKill, c.killed, c.loseResp = c.requests+n+1, onKill, false, true
}

// Revive lets requests through again (a new process).
func (c *Cluster) Revive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.killAt, c.onKill, c.killed, c.loseResp = 0, nil, false, false
}

// Requests counts the requests the cluster has received.
func (c *Cluster) Requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests
}

// Writes lists the successful writes in order, e.g. "delete services default/web".
func (c *Cluster) Writes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.writes)
}

// FailServiceCreate installs f, called for every Service create before the
// allocator; a non-nil error is returned to the client as is.
func (c *Cluster) FailServiceCreate(f func(*corev1.Service) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.createErr = f
}

// AddService creates a Service as another client would, without going
// through the fake clientset (so it may be called from a hook such as
// FailServiceCreate). The allocator rules apply.
func (c *Cluster) AddService(svc *corev1.Service) (*corev1.Service, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.createService(svc.DeepCopy(), false)
}

// Service returns a copy of a stored Service.
func (c *Cluster) Service(namespace, name string) (*corev1.Service, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.services[namespace+"/"+name]
	if !ok {
		return nil, false
	}
	return s.DeepCopy(), true
}

// Services returns copies of every stored Service, sorted by namespace/name.
func (c *Cluster) Services() []corev1.Service {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]corev1.Service, 0, len(c.services))
	for _, s := range c.services {
		out = append(out, *s.DeepCopy())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return out
}

// IPAddresses maps every allocated address to its Service (namespace/name).
func (c *Cluster) IPAddresses() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]string{}
	for ip, k := range c.ips {
		out[ip.String()] = k
	}
	return out
}

// ServiceCIDRState is a stored ServiceCIDR as the test sees it.
type ServiceCIDRState struct {
	Name        string
	CIDRs       []string
	Ready       bool
	Terminating bool
	Finalizers  []string
}

// ServiceCIDR returns a stored ServiceCIDR.
func (c *Cluster) ServiceCIDR(name string) (ServiceCIDRState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.scs[name]
	if !ok {
		return ServiceCIDRState{}, false
	}
	return ServiceCIDRState{Name: st.name, CIDRs: slices.Clone(st.cidrs), Ready: st.ready != nil && st.ready.Status == metav1.ConditionTrue && st.deleted == nil,
		Terminating: st.deleted != nil, Finalizers: slices.Clone(st.finalizers)}, true
}

// Reconcile runs the controllers now, whatever their delay.
func (c *Cluster) Reconcile() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reconcile(true)
}

// gate counts requests, runs due controller work and kills the process.
func (c *Cluster) gate(f *k8stesting.Fake) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		c.mu.Lock()
		c.requests++
		c.drop[f] = false
		if c.killAt > 0 && c.requests >= c.killAt {
			first := !c.killed
			c.killed = true
			onKill := c.onKill
			if first && c.loseResp {
				c.drop[f] = true // processed below, answer lost
				c.reconcile(false)
			}
			c.mu.Unlock()
			if first && onKill != nil {
				onKill()
			}
			if first && c.loseResp {
				return false, nil, nil
			}
			return true, nil, ErrKilled
		}
		c.reconcile(false)
		c.mu.Unlock()
		return false, nil, nil
	}
}

// wrap drops the answer of a request the gate marked as lost.
func (c *Cluster) wrap(f *k8stesting.Fake, r k8stesting.ReactionFunc) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		handled, obj, err := r(a)
		c.mu.Lock()
		lost := c.drop[f]
		c.drop[f] = false
		c.mu.Unlock()
		if handled && lost {
			return true, nil, ErrKilled
		}
		return handled, obj, err
	}
}

func readyCond() *metav1.Condition {
	return &metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "", Message: "Kubernetes Service CIDR is ready", LastTransitionTime: metav1.Now()}
}

func (c *Cluster) nextRV() string {
	c.seq++
	return fmt.Sprint(c.seq)
}

func (c *Cluster) nextUID(kind string) types.UID {
	c.seq++
	return types.UID(fmt.Sprintf("%s-uid-%d", kind, c.seq))
}

// reconcile is kube-controller-manager's service-cidr-controller, the
// apiserver's default-ServiceCIDR controller and its kubernetes-Service
// reconciler. Call with c.mu held.
func (c *Cluster) reconcile(now bool) {
	due := func(at int) bool { return now || c.requests >= at }
	for name, st := range c.scs {
		if st.deleted == nil {
			if st.ready == nil && due(st.readyAt) {
				st.ready = readyCond()
				if !slices.Contains(st.finalizers, finalizer) {
					st.finalizers = append(st.finalizers, finalizer)
				}
				st.usableAt = c.requests + c.opts.AllocatorDelay
				if now {
					st.usableAt = 0
				}
				st.rv = c.nextRV()
			}
			continue
		}
		if !slices.Contains(st.finalizers, finalizer) {
			delete(c.scs, name)
			continue
		}
		if c.canDelete(st) {
			if due(st.releaseAt) {
				delete(c.scs, name)
			}
			continue
		}
		if st.ready == nil || st.ready.Reason != "Terminating" {
			st.ready = &metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Terminating",
				Message: "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR", LastTransitionTime: metav1.Now()}
			st.rv = c.nextRV()
		}
	}
	if len(c.apiRange) > 0 {
		if _, ok := c.scs["kubernetes"]; !ok {
			cidrs := make([]string, len(c.apiRange))
			for i, p := range c.apiRange {
				cidrs[i] = p.String()
			}
			if st, err := c.newSC("kubernetes", cidrs, nil); err == nil {
				st.readyAt = c.requests + c.opts.ControllerDelay
				c.scs["kubernetes"] = st
			}
		}
		if _, ok := c.services["default/kubernetes"]; !ok && !c.kubeHeld && c.kubeAt >= 0 && due(c.kubeAt) {
			var ips []string
			for _, p := range c.apiRange {
				ips = append(ips, p.Addr().Next().String())
			}
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes", Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ips[0], ClusterIPs: ips,
					Ports: []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443}}}}
			if _, err := c.createService(svc, false); err == nil {
				c.kubeAt = -1
			}
		}
	}
}

// canDelete mirrors the service-cidr-controller's canDeleteCIDR.
func (c *Cluster) canDelete(st *scState) bool {
	covered := true
	for _, p := range st.prefixes {
		found := false
		for _, o := range c.scs {
			if o == st {
				continue
			}
			for _, q := range o.prefixes {
				if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
					found = true
				}
			}
		}
		covered = covered && found
	}
	if covered {
		return true
	}
	for ip := range c.ips {
		var holders []*scState
		for _, o := range c.scs {
			for _, q := range o.prefixes {
				if usable(q, ip) {
					holders = append(holders, o)
					break
				}
			}
		}
		if len(holders) == 1 && holders[0] == st {
			return false
		}
	}
	return true
}

func usable(p netip.Prefix, ip netip.Addr) bool {
	if !p.Contains(ip) || ip == p.Addr() {
		return false
	}
	if ip.Is4() && p.Bits() < 32 {
		b := p.Addr().As4()
		host := 32 - p.Bits()
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		v |= uint32(1)<<host - 1
		if ip == netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}) {
			return false
		}
	}
	return true
}

// newSC validates like ValidateServiceCIDR and builds the state.
func (c *Cluster) newSC(name string, cidrs []string, lbls map[string]string) (*scState, error) {
	fp := field.NewPath("spec", "cidrs")
	var errs field.ErrorList
	if name == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "name"), "name or generateName is required"))
	}
	switch {
	case len(cidrs) == 0:
		errs = append(errs, field.Required(fp, "at least one CIDR required"))
	case len(cidrs) > 2:
		errs = append(errs, field.Invalid(fp, cidrs, "may only hold up to 2 values"))
	}
	var ps []netip.Prefix
	for i, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(fp.Index(i), s, "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"))
		case p.Masked().String() != s:
			errs = append(errs, field.Invalid(fp.Index(i), s, fmt.Sprintf("must be in canonical form (%q)", p.Masked().String())))
		default:
			ps = append(ps, p)
		}
	}
	if len(ps) == 2 && ps[0].Addr().Is4() == ps[1].Addr().Is4() {
		errs = append(errs, field.Invalid(fp, cidrs, "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"))
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: group, Kind: "ServiceCIDR"}, name, errs)
	}
	return &scState{name: name, cidrs: slices.Clone(cidrs), prefixes: ps, uid: c.nextUID("servicecidr"), rv: c.nextRV(),
		labels: lbls, created: metav1.Now(), readyAt: c.requests + c.opts.ControllerDelay}, nil
}

func (st *scState) meta() metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: st.name, UID: st.uid, ResourceVersion: st.rv, Labels: st.labels,
		Finalizers: slices.Clone(st.finalizers), CreationTimestamp: st.created}
	if st.deleted != nil {
		t := *st.deleted
		m.DeletionTimestamp = &t
	}
	return m
}

func (st *scState) conditions() []metav1.Condition {
	if st.ready == nil {
		return nil
	}
	return []metav1.Condition{*st.ready}
}

func (st *scState) typed(v string) runtime.Object {
	if v == "v1beta1" {
		return &networkingv1beta1.ServiceCIDR{TypeMeta: metav1.TypeMeta{APIVersion: group + "/v1beta1", Kind: "ServiceCIDR"},
			ObjectMeta: st.meta(), Spec: networkingv1beta1.ServiceCIDRSpec{CIDRs: slices.Clone(st.cidrs)},
			Status: networkingv1beta1.ServiceCIDRStatus{Conditions: st.conditions()}}
	}
	return &networkingv1.ServiceCIDR{TypeMeta: metav1.TypeMeta{APIVersion: group + "/v1", Kind: "ServiceCIDR"},
		ObjectMeta: st.meta(), Spec: networkingv1.ServiceCIDRSpec{CIDRs: slices.Clone(st.cidrs)},
		Status: networkingv1.ServiceCIDRStatus{Conditions: st.conditions()}}
}

func (st *scState) unstructured(v string) (*unstructured.Unstructured, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st.typed("v1"))
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(group + "/" + v)
	return u, nil
}

func (c *Cluster) notServed(a k8stesting.Action, served string) error {
	if a.GetResource().Version == served {
		return nil
	}
	return apierrors.NewNotFound(a.GetResource().GroupResource(), "the server could not find the requested resource ("+a.GetResource().String()+")")
}

func unsupported(a k8stesting.Action) (bool, runtime.Object, error) {
	return true, nil, apierrors.NewMethodNotSupported(a.GetResource().GroupResource(), a.GetVerb()+" (not modelled by servicecidrtest)")
}

func dryRun(list []string) bool { return slices.Contains(list, metav1.DryRunAll) }

// --- ServiceCIDRs ---

type scRequest struct {
	verb    string
	name    string
	cidrs   []string
	labels  map[string]string
	rv      string
	dry     bool
	delOpts metav1.DeleteOptions
	sub     string
}

func (c *Cluster) typedServiceCIDRs(a k8stesting.Action) (bool, runtime.Object, error) {
	v := a.GetResource().Version
	if err := c.notServed(a, c.opts.Version); err != nil || c.opts.Version == "v1alpha1" {
		if err == nil {
			err = apierrors.NewNotFound(a.GetResource().GroupResource(), "v1alpha1 has no typed client")
		}
		return true, nil, err
	}
	req := scRequest{verb: a.GetVerb(), sub: a.GetSubresource()}
	switch act := a.(type) {
	case k8stesting.CreateAction:
		req.dry = dryRun(createOpts(a).DryRun)
		switch o := act.GetObject().(type) {
		case *networkingv1.ServiceCIDR:
			req.name, req.cidrs, req.labels, req.rv = o.Name, o.Spec.CIDRs, o.Labels, o.ResourceVersion
		case *networkingv1beta1.ServiceCIDR:
			req.name, req.cidrs, req.labels, req.rv = o.Name, o.Spec.CIDRs, o.Labels, o.ResourceVersion
		}
		if a.GetVerb() == "update" {
			req.dry = dryRun(updateOpts(a).DryRun)
		}
	case k8stesting.DeleteAction:
		req.name, req.delOpts = act.GetName(), act.GetDeleteOptions()
	case k8stesting.GetAction:
		req.name = act.GetName()
	}
	if a.GetVerb() == "list" {
		c.mu.Lock()
		defer c.mu.Unlock()
		names := c.scNames()
		if v == "v1beta1" {
			l := &networkingv1beta1.ServiceCIDRList{ListMeta: metav1.ListMeta{ResourceVersion: fmt.Sprint(c.seq)}}
			for _, n := range names {
				l.Items = append(l.Items, *c.scs[n].typed(v).(*networkingv1beta1.ServiceCIDR))
			}
			return true, l, nil
		}
		l := &networkingv1.ServiceCIDRList{ListMeta: metav1.ListMeta{ResourceVersion: fmt.Sprint(c.seq)}}
		for _, n := range names {
			l.Items = append(l.Items, *c.scs[n].typed(v).(*networkingv1.ServiceCIDR))
		}
		return true, l, nil
	}
	st, err := c.serveSC(a, req)
	if err != nil || st == nil {
		return true, nil, err
	}
	return true, st.typed(v), nil
}

func (c *Cluster) dynamicServiceCIDRs(a k8stesting.Action) (bool, runtime.Object, error) {
	v := a.GetResource().Version
	if err := c.notServed(a, c.opts.Version); err != nil {
		return true, nil, err
	}
	req := scRequest{verb: a.GetVerb(), sub: a.GetSubresource()}
	switch act := a.(type) {
	case k8stesting.CreateAction: // also UpdateAction: same method set
		u, ok := act.GetObject().(*unstructured.Unstructured)
		if !ok {
			return true, nil, apierrors.NewBadRequest("servicecidrtest: dynamic ServiceCIDR must be unstructured")
		}
		req.name, req.labels, req.rv = u.GetName(), u.GetLabels(), u.GetResourceVersion()
		cidrs, _, err := unstructured.NestedStringSlice(u.Object, "spec", "cidrs")
		if err != nil {
			return true, nil, apierrors.NewBadRequest("spec.cidrs: " + err.Error())
		}
		req.cidrs = cidrs
		if a.GetVerb() == "create" {
			req.dry = dryRun(createOpts(a).DryRun)
		} else {
			req.dry = dryRun(updateOpts(a).DryRun)
		}
	case k8stesting.DeleteAction:
		req.name, req.delOpts = act.GetName(), act.GetDeleteOptions()
	case k8stesting.GetAction:
		req.name = act.GetName()
	}
	if a.GetVerb() == "list" {
		c.mu.Lock()
		defer c.mu.Unlock()
		l := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": group + "/" + v, "kind": "ServiceCIDRList"}}
		l.SetResourceVersion(fmt.Sprint(c.seq))
		for _, n := range c.scNames() {
			u, err := c.scs[n].unstructured(v)
			if err != nil {
				return true, nil, apierrors.NewInternalError(err)
			}
			l.Items = append(l.Items, *u)
		}
		return true, l, nil
	}
	st, err := c.serveSC(a, req)
	if err != nil || st == nil {
		return true, nil, err
	}
	u, err := st.unstructured(v)
	if err != nil {
		return true, nil, apierrors.NewInternalError(err)
	}
	return true, u, nil
}

func (c *Cluster) scNames() []string {
	names := make([]string, 0, len(c.scs))
	for n := range c.scs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// serveSC applies a ServiceCIDR request; it returns the state to render, or
// nil (and maybe an error) when there is nothing to render.
func (c *Cluster) serveSC(a k8stesting.Action, r scRequest) (*scState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gr := schema.GroupResource{Group: group, Resource: "servicecidrs"}
	if r.sub != "" {
		return nil, apierrors.NewMethodNotSupported(gr, r.verb+" "+r.sub+" (not modelled by servicecidrtest)")
	}
	switch r.verb {
	case "get":
		st, ok := c.scs[r.name]
		if !ok {
			return nil, apierrors.NewNotFound(gr, r.name)
		}
		return st.copy(), nil
	case "create":
		if r.rv != "" {
			return nil, apierrors.NewInternalError(errors.New("resourceVersion should not be set on objects to be created"))
		}
		st, err := c.newSC(r.name, r.cidrs, r.labels)
		if err != nil {
			return nil, err
		}
		if _, ok := c.scs[r.name]; ok {
			return nil, apierrors.NewAlreadyExists(gr, r.name)
		}
		if !r.dry {
			c.scs[r.name] = st
			c.writes = append(c.writes, "create servicecidrs "+r.name)
		}
		return st.copy(), nil
	case "update":
		st, ok := c.scs[r.name]
		if !ok {
			return nil, apierrors.NewNotFound(gr, r.name)
		}
		if r.rv != "" && r.rv != st.rv {
			return nil, apierrors.NewConflict(gr, r.name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		if err := validateSCUpdate(r.name, st.cidrs, r.cidrs); err != nil {
			return nil, err
		}
		next, err := c.newSC(r.name, r.cidrs, r.labels)
		if err != nil {
			return nil, err
		}
		if r.dry {
			return next, nil
		}
		st.cidrs, st.prefixes, st.labels, st.rv = next.cidrs, next.prefixes, r.labels, c.nextRV()
		c.writes = append(c.writes, "update servicecidrs "+r.name)
		return st.copy(), nil
	case "delete":
		st, ok := c.scs[r.name]
		if !ok {
			return nil, apierrors.NewNotFound(gr, r.name)
		}
		if err := preconditions(gr, r.name, r.delOpts.Preconditions, st.uid, st.rv); err != nil {
			return nil, err
		}
		if dryRun(r.delOpts.DryRun) {
			return nil, nil
		}
		c.writes = append(c.writes, "delete servicecidrs "+r.name)
		if len(st.finalizers) == 0 {
			delete(c.scs, r.name)
			return nil, nil
		}
		if st.deleted == nil {
			now := metav1.Now()
			st.deleted = &now
			st.releaseAt = c.requests + c.opts.ControllerDelay
			st.rv = c.nextRV()
		}
		return nil, nil
	}
	return nil, apierrors.NewMethodNotSupported(gr, r.verb+" (not modelled by servicecidrtest)")
}

func (st *scState) copy() *scState {
	c := *st
	c.cidrs = slices.Clone(st.cidrs)
	c.finalizers = slices.Clone(st.finalizers)
	return &c
}

// validateSCUpdate mirrors ValidateServiceCIDRUpdate.
func validateSCUpdate(name string, old, next []string) error {
	var errs field.ErrorList
	fp := field.NewPath("spec", "cidrs")
	switch {
	case len(old) == len(next):
		for i := range old {
			if old[i] != next[i] {
				errs = append(errs, field.Invalid(fp.Index(i), next[i], "field is immutable"))
			}
		}
	case len(old) == 1 && len(next) == 2:
		if next[0] != old[0] {
			errs = append(errs, field.Invalid(fp.Index(0), next[0], "field is immutable"))
		}
	default:
		errs = append(errs, field.Invalid(fp, next, "field is immutable"))
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Group: group, Kind: "ServiceCIDR"}, name, errs)
	}
	return nil
}

func preconditions(gr schema.GroupResource, name string, p *metav1.Preconditions, uid types.UID, rv string) error {
	if p == nil {
		return nil
	}
	if p.UID != nil && *p.UID != uid {
		//lint:ignore ST1005 the API server's own wording
		return apierrors.NewConflict(gr, name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, uid))
	}
	if p.ResourceVersion != nil && *p.ResourceVersion != rv {
		//lint:ignore ST1005 the API server's own wording
		return apierrors.NewConflict(gr, name, fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, rv))
	}
	return nil
}

func createOpts(a k8stesting.Action) metav1.CreateOptions {
	if o, ok := a.(interface{ GetCreateOptions() metav1.CreateOptions }); ok {
		return o.GetCreateOptions()
	}
	return metav1.CreateOptions{}
}

func updateOpts(a k8stesting.Action) metav1.UpdateOptions {
	if o, ok := a.(interface{ GetUpdateOptions() metav1.UpdateOptions }); ok {
		return o.GetUpdateOptions()
	}
	return metav1.UpdateOptions{}
}

// --- IPAddresses ---

func (c *Cluster) ipObjects() []networkingv1.IPAddress {
	out := make([]networkingv1.IPAddress, 0, len(c.ips))
	for ip, key := range c.ips {
		ns, name, _ := strings.Cut(key, "/")
		fam := "IPv4"
		if ip.Is6() {
			fam = "IPv6"
		}
		out = append(out, networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ip.String(),
			Labels: map[string]string{familyLabel: fam, managedByLabel: allocatorManager}},
			Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: ns, Name: name}}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (c *Cluster) typedIPAddresses(a k8stesting.Action) (bool, runtime.Object, error) {
	if err := c.notServed(a, c.opts.IPAddressVersion); err != nil || c.opts.IPAddressVersion == "v1alpha1" {
		if err == nil {
			err = apierrors.NewNotFound(a.GetResource().GroupResource(), "v1alpha1 has no typed client")
		}
		return true, nil, err
	}
	if a.GetVerb() != "list" {
		return unsupported(a)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	objs := c.ipObjects()
	if a.GetResource().Version == "v1beta1" {
		l := &networkingv1beta1.IPAddressList{}
		for _, o := range objs {
			l.Items = append(l.Items, networkingv1beta1.IPAddress{ObjectMeta: o.ObjectMeta,
				Spec: networkingv1beta1.IPAddressSpec{ParentRef: &networkingv1beta1.ParentReference{Resource: o.Spec.ParentRef.Resource,
					Namespace: o.Spec.ParentRef.Namespace, Name: o.Spec.ParentRef.Name}}})
		}
		return true, l, nil
	}
	return true, &networkingv1.IPAddressList{Items: objs}, nil
}

func (c *Cluster) dynamicIPAddresses(a k8stesting.Action) (bool, runtime.Object, error) {
	if err := c.notServed(a, c.opts.IPAddressVersion); err != nil {
		return true, nil, err
	}
	if a.GetVerb() != "list" {
		return unsupported(a)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := a.GetResource().Version
	l := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": group + "/" + v, "kind": "IPAddressList"}}
	for _, o := range c.ipObjects() {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&o)
		if err != nil {
			return true, nil, err
		}
		u := unstructured.Unstructured{Object: obj}
		u.SetAPIVersion(group + "/" + v)
		u.SetKind("IPAddress")
		l.Items = append(l.Items, u)
	}
	return true, l, nil
}

// --- Services ---

func (c *Cluster) services_(a k8stesting.Action) (bool, runtime.Object, error) {
	gr := schema.GroupResource{Resource: "services"}
	if a.GetSubresource() != "" {
		return unsupported(a)
	}
	switch a.GetVerb() {
	case "get":
		c.mu.Lock()
		defer c.mu.Unlock()
		name := a.(k8stesting.GetAction).GetName()
		s, ok := c.services[a.GetNamespace()+"/"+name]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr, name)
		}
		return true, s.DeepCopy(), nil
	case "list":
		c.mu.Lock()
		defer c.mu.Unlock()
		r := a.(k8stesting.ListAction).GetListRestrictions()
		if r.Fields != nil && !r.Fields.Empty() {
			return true, nil, apierrors.NewBadRequest("servicecidrtest: field selectors are not modelled")
		}
		sel := r.Labels
		if sel == nil {
			sel = labels.Everything()
		}
		l := &corev1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: fmt.Sprint(c.seq)}}
		keys := make([]string, 0, len(c.services))
		for k, s := range c.services {
			if (a.GetNamespace() == "" || s.Namespace == a.GetNamespace()) && sel.Matches(labels.Set(s.Labels)) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			l.Items = append(l.Items, *c.services[k].DeepCopy())
		}
		return true, l, nil
	case "create":
		svc, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		if !ok {
			return true, nil, apierrors.NewBadRequest("not a Service")
		}
		svc = svc.DeepCopy()
		if svc.Namespace == "" {
			svc.Namespace = a.GetNamespace()
		}
		c.mu.Lock()
		f := c.createErr
		c.mu.Unlock()
		if f != nil {
			if err := f(svc.DeepCopy()); err != nil {
				return true, nil, err
			}
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		out, err := c.createService(svc, dryRun(createOpts(a).DryRun))
		if err != nil {
			return true, nil, err
		}
		return true, out, nil
	case "update":
		svc, ok := a.(k8stesting.UpdateAction).GetObject().(*corev1.Service)
		if !ok {
			return true, nil, apierrors.NewBadRequest("not a Service")
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		key := a.GetNamespace() + "/" + svc.Name
		old, ok := c.services[key]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr, svc.Name)
		}
		if svc.ResourceVersion != "" && svc.ResourceVersion != old.ResourceVersion {
			return true, nil, apierrors.NewConflict(gr, svc.Name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		oldIPs, newIPs := clusterIPStrings(old), clusterIPStrings(svc)
		if len(newIPs) > 0 && !slices.Equal(oldIPs, newIPs) {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, svc.Name, field.ErrorList{
				field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), svc.Spec.ClusterIPs, "may not change once set")})
		}
		next := svc.DeepCopy()
		next.UID, next.CreationTimestamp = old.UID, old.CreationTimestamp
		next.Spec.ClusterIP, next.Spec.ClusterIPs = old.Spec.ClusterIP, slices.Clone(old.Spec.ClusterIPs)
		if dryRun(updateOpts(a).DryRun) {
			return true, next, nil
		}
		next.ResourceVersion = c.nextRV()
		c.services[key] = next
		c.writes = append(c.writes, "update services "+key)
		return true, next.DeepCopy(), nil
	case "delete":
		da := a.(k8stesting.DeleteAction)
		c.mu.Lock()
		defer c.mu.Unlock()
		key := a.GetNamespace() + "/" + da.GetName()
		old, ok := c.services[key]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr, da.GetName())
		}
		opts := da.GetDeleteOptions()
		if err := preconditions(gr, da.GetName(), opts.Preconditions, old.UID, old.ResourceVersion); err != nil {
			return true, nil, err
		}
		if dryRun(opts.DryRun) {
			return true, nil, nil
		}
		c.release(old)
		delete(c.services, key)
		c.writes = append(c.writes, "delete services "+key)
		if key == "default/kubernetes" {
			c.kubeAt = c.requests + c.opts.ControllerDelay
		}
		return true, nil, nil
	}
	return unsupported(a)
}

func clusterIPStrings(s *corev1.Service) []string {
	if len(s.Spec.ClusterIPs) > 0 {
		return s.Spec.ClusterIPs
	}
	if s.Spec.ClusterIP != "" {
		return []string{s.Spec.ClusterIP}
	}
	return nil
}

func (c *Cluster) release(s *corev1.Service) {
	key := s.Namespace + "/" + s.Name
	for ip, k := range c.ips {
		if k == key {
			delete(c.ips, ip)
		}
	}
	for p, k := range c.nodePorts {
		if k == key {
			delete(c.nodePorts, p)
		}
	}
}

// allocatorReady reports whether st hands out addresses now.
func (c *Cluster) allocatorReady(st *scState) bool {
	return st.deleted == nil && st.ready != nil && st.ready.Status == metav1.ConditionTrue && c.requests >= st.usableAt
}

// createService is the Service REST create: validation, ClusterIP and
// NodePort allocation, IPAddress objects. Call with c.mu held.
func (c *Cluster) createService(svc *corev1.Service, dry bool) (*corev1.Service, error) {
	gr := schema.GroupResource{Resource: "services"}
	gk := schema.GroupKind{Kind: "Service"}
	key := svc.Namespace + "/" + svc.Name
	if svc.ResourceVersion != "" {
		return nil, apierrors.NewInternalError(errors.New("resourceVersion should not be set on objects to be created"))
	}
	if svc.Name == "" && svc.GenerateName != "" {
		svc.Name = svc.GenerateName + fmt.Sprint(c.seq+1)
		key = svc.Namespace + "/" + svc.Name
	}
	if svc.Name == "" {
		return nil, apierrors.NewInvalid(gk, "", field.ErrorList{field.Required(field.NewPath("metadata", "name"), "name or generateName is required")})
	}
	if _, ok := c.services[key]; ok {
		return nil, apierrors.NewAlreadyExists(gr, svc.Name)
	}
	if svc.Spec.Type == "" {
		svc.Spec.Type = corev1.ServiceTypeClusterIP
	}
	if svc.Spec.ClusterIP != "" && len(svc.Spec.ClusterIPs) > 0 && svc.Spec.ClusterIP != svc.Spec.ClusterIPs[0] {
		return nil, apierrors.NewInvalid(gk, svc.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), svc.Spec.ClusterIPs,
			"must be equal to clusterIP")})
	}
	var newIPs []netip.Addr
	headless := svc.Spec.ClusterIP == corev1.ClusterIPNone || svc.Spec.Type == corev1.ServiceTypeExternalName
	if !headless {
		want := clusterIPStrings(svc)
		if len(want) == 0 {
			if c.dualWrite {
				if k, ok := c.scs["kubernetes"]; ok && k.deleted != nil {
					return nil, apierrors.NewInternalError(errors.New("failed to allocate a serviceIP: the provided network does not match the current range"))
				}
			}
			fam4 := !(len(svc.Spec.IPFamilies) > 0 && svc.Spec.IPFamilies[0] == corev1.IPv6Protocol)
			ip, ok := c.nextFree(fam4, newIPs)
			if !ok {
				return nil, apierrors.NewInternalError(fmt.Errorf("failed to allocate a serviceIP for Service %q: range is full", svc.Name))
			}
			newIPs = append(newIPs, ip)
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ip.String(), []string{ip.String()}
		} else {
			for _, s := range want {
				ip, err := netip.ParseAddr(s)
				if err != nil {
					return nil, apierrors.NewInvalid(gk, svc.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs"), want, "must be a valid IP address")})
				}
				if err := c.canAllocate(ip); err != nil {
					return nil, apierrors.NewInvalid(gk, svc.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs"), want,
						fmt.Sprintf("failed to allocate IP %v: %v", ip, err))})
				}
				if slices.Contains(newIPs, ip) {
					return nil, apierrors.NewInvalid(gk, svc.Name, field.ErrorList{field.Duplicate(field.NewPath("spec", "clusterIPs"), s)})
				}
				newIPs = append(newIPs, ip)
			}
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = want[0], slices.Clone(want)
		}
	}
	// NodePorts.
	var newPorts []int32
	needsNodePorts := svc.Spec.Type == corev1.ServiceTypeNodePort ||
		(svc.Spec.Type == corev1.ServiceTypeLoadBalancer && (svc.Spec.AllocateLoadBalancerNodePorts == nil || *svc.Spec.AllocateLoadBalancerNodePorts))
	take := func(fp *field.Path, p *int32) error {
		if *p != 0 {
			if *p < nodePortBase || *p > nodePortMax {
				return apierrors.NewInvalid(gk, svc.Name, field.ErrorList{field.Invalid(fp, *p, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", nodePortBase, nodePortMax))})
			}
			if _, used := c.nodePorts[*p]; used || slices.Contains(newPorts, *p) {
				return apierrors.NewInvalid(gk, svc.Name, field.ErrorList{field.Invalid(fp, *p, "provided port is already allocated")})
			}
		} else {
			for q := int32(nodePortBase); q <= nodePortMax; q++ {
				if _, used := c.nodePorts[q]; !used && !slices.Contains(newPorts, q) {
					*p = q
					break
				}
			}
		}
		newPorts = append(newPorts, *p)
		return nil
	}
	if needsNodePorts {
		for i := range svc.Spec.Ports {
			if err := take(field.NewPath("spec", "ports").Index(i).Child("nodePort"), &svc.Spec.Ports[i].NodePort); err != nil {
				return nil, err
			}
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		if err := take(field.NewPath("spec", "healthCheckNodePort"), &svc.Spec.HealthCheckNodePort); err != nil {
			return nil, err
		}
	}
	svc.UID = c.nextUID("service")
	svc.CreationTimestamp = metav1.NewTime(time.Now().Truncate(time.Second))
	svc.Generation = 1
	svc.Status = corev1.ServiceStatus{}
	if dry {
		return svc, nil
	}
	svc.ResourceVersion = c.nextRV()
	for _, ip := range newIPs {
		c.ips[ip] = key
	}
	for _, p := range newPorts {
		c.nodePorts[p] = key
	}
	c.services[key] = svc.DeepCopy()
	c.writes = append(c.writes, "create services "+key)
	return svc, nil
}

// canAllocate is MetaAllocator.AllocateService for a requested address.
func (c *Cluster) canAllocate(ip netip.Addr) error {
	var inSome, inReady bool
	var valid []string
	for _, n := range c.scNames() {
		st := c.scs[n]
		for _, p := range st.prefixes {
			if c.allocatorReady(st) {
				valid = append(valid, p.String())
			}
			if usable(p, ip) {
				inSome = true
				inReady = inReady || c.allocatorReady(st)
			}
		}
	}
	switch {
	case !inSome:
		return fmt.Errorf("the provided IP (%v) is not in the valid range. The range of valid IPs is %s", ip, strings.Join(valid, ","))
	case !inReady:
		return errors.New("the provided network does not match the current range")
	}
	if c.dualWrite && !slices.Equal(c.apiRange, c.legacyRange) && slices.ContainsFunc(c.apiRange, func(p netip.Prefix) bool { return p.Contains(ip) }) {
		return errors.New("the provided range does not match the current range")
	}
	if _, used := c.ips[ip]; used {
		return errors.New("provided IP is already allocated")
	}
	return nil
}

func (c *Cluster) nextFree(v4 bool, taken []netip.Addr) (netip.Addr, bool) {
	for _, n := range c.scNames() {
		st := c.scs[n]
		if !c.allocatorReady(st) {
			continue
		}
		for _, p := range st.prefixes {
			if p.Addr().Is4() != v4 {
				continue
			}
			for a := p.Addr().Next(); a.IsValid() && p.Contains(a); a = a.Next() {
				if _, used := c.ips[a]; !used && usable(p, a) && !slices.Contains(taken, a) {
					return a, true
				}
			}
		}
	}
	return netip.Addr{}, false
}
