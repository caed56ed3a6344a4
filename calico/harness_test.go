package calico_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	v3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
)

// Story 1: pod CIDR 10.233.64.0/18, Service CIDR 10.233.0.0/18, new pool 10.20.0.0/16.
const (
	oldPoolName = "default-ipv4-ippool"
	oldCIDR     = "10.233.64.0/18"
	newPoolName = "new-ipv4-pool"
	newCIDR     = "10.20.0.0/16"
	serviceCIDR = "10.233.0.0/18"
)

type env struct {
	t     *testing.T
	kube  *fake.Clientset
	dyn   *dynamicfake.FakeDynamicClient
	pools calico.PoolStore
	cl    calico.Cluster
	ipam  *calicotest.IPAM
	work  *calicotest.Workloads
	stop  func()

	mu   sync.Mutex
	errs []error
	eventLog
}

// eventLog records the events an Apply emits, from whichever goroutine.
type eventLog struct {
	emu    sync.Mutex
	events []calico.Event
}

func int32p(v int32) *int32 { return &v }

func labelsFor(app string) map[string]string { return map[string]string{"app": app} }

func podTemplate(app string, extra map[string]string) corev1.PodTemplateSpec {
	l := labelsFor(app)
	for k, v := range extra {
		l[k] = v
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: l},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/" + app + ":1"}}},
	}
}

func sel(app string) *metav1.LabelSelector { return &metav1.LabelSelector{MatchLabels: labelsFor(app)} }

// workloadObjects is the cluster of the swap tests: cluster DNS, a web
// Deployment, a StatefulSet, a DaemonSet, a StatefulSet with OnDelete, a
// bare pod and a hostNetwork pod.
func workloadObjects() []runtime.Object {
	return []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system"},
			Spec: appsv1.DeploymentSpec{Replicas: int32p(2), Selector: sel("coredns"), Template: podTemplate("coredns", map[string]string{"k8s-app": "kube-dns"})}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: appsv1.DeploymentSpec{Replicas: int32p(3), Selector: sel("web"), Template: podTemplate("web", nil)}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
			Spec: appsv1.StatefulSetSpec{Replicas: int32p(2), Selector: sel("db"), Template: podTemplate("db", nil),
				UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: "default"},
			Spec: appsv1.StatefulSetSpec{Replicas: int32p(1), Selector: sel("legacy"), Template: podTemplate("legacy", nil),
				UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "kube-system"},
			Spec: appsv1.DaemonSetSpec{Selector: sel("agent"), Template: podTemplate("agent", nil),
				UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "debug", Namespace: "default", Labels: labelsFor("debug")},
			Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-a", Namespace: "kube-system"},
			Spec:   corev1.PodSpec{NodeName: "node-a", HostNetwork: true, Containers: []corev1.Container{{Name: "c", Image: "kube-proxy"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "192.168.1.10", PodIPs: []corev1.PodIP{{IP: "192.168.1.10"}}}},
	}
}

func oldPoolSpec() calico.PoolSpec {
	return calico.PoolSpec{CIDR: oldCIDR, BlockSize: 24, IPIPMode: calico.EncapAlways, VXLANMode: calico.EncapNever,
		NATOutgoing: true, NodeSelector: "all()", AllowedUses: []calico.AllowedUse{calico.UseWorkload, calico.UseTunnel}}
}

func v1PoolObject(name string, spec calico.PoolSpec, annotations map[string]string) *unstructured.Unstructured {
	s := map[string]any{"cidr": spec.CIDR}
	if spec.BlockSize != 0 {
		s["blockSize"] = int64(spec.BlockSize)
	}
	if spec.IPIPMode != "" {
		s["ipipMode"] = string(spec.IPIPMode)
	}
	if spec.VXLANMode != "" {
		s["vxlanMode"] = string(spec.VXLANMode)
	}
	if spec.NATOutgoing {
		s["natOutgoing"] = true
	}
	if spec.Disabled {
		s["disabled"] = true
	}
	if spec.NodeSelector != "" {
		s["nodeSelector"] = spec.NodeSelector
	}
	if len(spec.AllowedUses) > 0 {
		var u []any
		for _, x := range spec.AllowedUses {
			u = append(u, string(x))
		}
		s["allowedUses"] = u
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
		"metadata": map[string]any{"name": name}, "spec": s,
	}}
	if annotations != nil {
		obj.SetAnnotations(annotations)
	}
	return obj
}

func v3PoolObject(name string, spec calico.PoolSpec) *v3.IPPool {
	p := &v3.IPPool{TypeMeta: metav1.TypeMeta{Kind: "IPPool", APIVersion: "projectcalico.org/v3"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.CIDR = spec.CIDR
	p.Spec.BlockSize = spec.BlockSize
	p.Spec.IPIPMode = v3.IPIPMode(spec.IPIPMode)
	p.Spec.VXLANMode = v3.VXLANMode(spec.VXLANMode)
	p.Spec.NATOutgoing = spec.NATOutgoing
	p.Spec.Disabled = spec.Disabled
	p.Spec.NodeSelector = spec.NodeSelector
	for _, u := range spec.AllowedUses {
		p.Spec.AllowedUses = append(p.Spec.AllowedUses, v3.IPPoolAllowedUse(u))
	}
	return p
}

type envOptions struct {
	api     calico.API
	dynObjs []runtime.Object
	objs    []runtime.Object
	deny    []accesstest.Rule
}

// newEnv builds fake clients for one of the two Calico APIs with the old
// pool, runs the simulated controllers and IPAM, and waits until every pod
// holds an address from the old pool.
func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	objs := o.objs
	if objs == nil {
		objs = workloadObjects()
	}
	kube, _ := calicotest.NewKube(objs...)
	accesstest.Authorize(kube, o.deny...)
	e := &env{t: t, kube: kube}
	dynObjs := append([]runtime.Object{}, o.dynObjs...)
	switch o.api {
	case calico.APIProjectCalicoV3:
		cs, _ := calicotest.NewV3(v3PoolObject(oldPoolName, oldPoolSpec()))
		e.pools = calico.NewV3Store(cs)
	default:
		dynObjs = append(dynObjs, v1PoolObject(oldPoolName, oldPoolSpec(), map[string]string{calico.MetadataAnnotation: `{"creationTimestamp":"2023-03-21T06:17:28Z"}`}))
	}
	e.dyn, _ = calicotest.NewDynamic(dynObjs...)
	if e.pools == nil {
		e.pools = calico.NewCRDStore(e.dyn)
	}
	e.cl = calico.Cluster{Kube: kube, Pools: e.pools, Blocks: calico.NewCRDBlockSource(e.dyn), Dynamic: e.dyn}
	e.ipam = &calicotest.IPAM{Kube: kube, Pools: e.pools, Dynamic: e.dyn, MarkReady: true}
	e.work = &calicotest.Workloads{Kube: kube}
	e.stop = calicotest.Loop(context.Background(), time.Millisecond, func(err error) {
		e.mu.Lock()
		e.errs = append(e.errs, err)
		e.mu.Unlock()
	}, e.work.Sync, e.ipam.Sync)
	t.Cleanup(e.stop)
	e.waitSettled(oldCIDR)
	return e
}

// waitSettled waits until every non-hostNetwork pod is ready with an address in cidr.
func (e *env) waitSettled(prefix string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		pods, err := e.kube.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
		if err != nil || len(pods.Items) < 10 {
			return false
		}
		for _, p := range pods.Items {
			if p.Spec.HostNetwork {
				continue
			}
			if len(p.Status.PodIPs) == 0 || !contains(prefix, p.Status.PodIPs[0].IP) || p.Status.Phase != corev1.PodRunning {
				return false
			}
		}
		return true
	}, 30*time.Second, 5*time.Millisecond, "pods did not settle in %s", prefix)
	// One more IPAM pass, so the IPAM blocks mirror every address.
	require.NoError(e.t, e.ipam.Sync(context.Background()))
}

func contains(prefix, ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && netip.MustParsePrefix(prefix).Contains(a)
}

func (l *eventLog) onEvent(ev calico.Event) {
	l.emu.Lock()
	defer l.emu.Unlock()
	l.events = append(l.events, ev)
}

func (l *eventLog) eventsOf(typ calico.EventType) []calico.Event {
	l.emu.Lock()
	defer l.emu.Unlock()
	var out []calico.Event
	for _, ev := range l.events {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func (e *env) simErrors() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.errs...)
}

func fastOptions(dir string) calico.ApplyOptions {
	return calico.ApplyOptions{
		JournalDir:         dir,
		PollInterval:       time.Millisecond,
		EvictionBackoff:    time.Millisecond,
		MaxEvictionBackoff: 5 * time.Millisecond,
		WritesPerSecond:    100000,
		DrainTimeout:       5 * time.Second,
		RolloutTimeout:     30 * time.Second,
		PodGoneTimeout:     30 * time.Second,
		Concurrency:        2,
	}
}

func request() calico.SwapRequest {
	return calico.SwapRequest{
		OldPool: oldPoolName, NewName: newPoolName, NewCIDR: newCIDR,
		ClusterCIDR: newCIDR, ServiceCIDR: serviceCIDR, NodeNetwork: "192.168.1.0/24",
	}
}
