package servicecidr_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

func ptr[T any](v T) *T { return &v }

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// story3Services is the third field story's kOps cluster: Service CIDR
// 100.64.0.0/13 (inside Tailscale's 100.64.0.0/10), pod CIDR 100.96.0.0/11.
func story3Services() []*corev1.Service {
	svc := func(ns, name string, spec corev1.ServiceSpec) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{"app": name}, Annotations: map[string]string{"team": "platform"}}, Spec: spec}
	}
	dns := svc("kube-system", "kube-dns", corev1.ServiceSpec{
		ClusterIP: "100.64.0.10", Selector: map[string]string{"k8s-app": "kube-dns"},
		Ports: []corev1.ServicePort{
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
			{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
			{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9153, TargetPort: intstr.FromInt32(9153)},
		},
	})
	dns.Labels["k8s-app"] = "kube-dns"
	web := svc("shop", "web", corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, ClusterIP: "100.64.3.7", Selector: map[string]string{"app": "web"},
		Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http"), NodePort: 30080, AppProtocol: ptr("http")}},
		SessionAffinity:       corev1.ServiceAffinityClientIP,
		SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(600))}},
		ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyLocal),
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: ptr(corev1.IPFamilyPolicySingleStack),
		PublishNotReadyAddresses: true, TrafficDistribution: ptr("PreferClose"), ExternalIPs: []string{"192.168.10.5"},
	})
	web.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "owner-uid"}}
	web.Annotations[servicecidr.LastAppliedAnnotation] = `{"spec":{"ports":[{"port":80}]}}`
	api := svc("shop", "api", corev1.ServiceSpec{ClusterIP: "100.64.0.200", Selector: map[string]string{"app": "api"},
		Ports: []corev1.ServicePort{{Port: 8080, Protocol: corev1.ProtocolTCP}}})
	lb := svc("shop", "ingress", corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "100.64.1.1",
		Ports: []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP, NodePort: 31443}}, LoadBalancerClass: ptr("example.com/lb"),
		ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 32000, LoadBalancerSourceRanges: []string{"10.0.0.0/8"}})
	lb.Finalizers = []string{servicecidr.LoadBalancerCleanupFinalizer}
	headless := svc("shop", "db", corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"},
		Ports: []corev1.ServicePort{{Port: 5432, Protocol: corev1.ProtocolTCP}}})
	ext := svc("shop", "payments", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "payments.example.com"})
	kube := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes", Labels: map[string]string{"component": "apiserver"}},
		Spec: corev1.ServiceSpec{ClusterIP: "100.64.0.1", Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}}}
	return []*corev1.Service{kube, dns, web, api, lb, headless, ext}
}

func story3Objects() []runtime.Object {
	node := func(name, podCIDR, ip string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	}
	pod := func(ns, name string, policy corev1.DNSPolicy, host bool) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{DNSPolicy: policy, HostNetwork: host},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	return []runtime.Object{
		node("master-1", "100.96.0.0/24", "172.20.40.10"),
		node("node-1", "100.96.1.0/24", "172.20.41.20"),
		pod("shop", "web-1", corev1.DNSClusterFirst, false),
		pod("shop", "api-1", "", false),
		pod("kube-system", "kube-proxy-x", corev1.DNSClusterFirst, true),
		pod("kube-system", "cilium-y", corev1.DNSClusterFirstWithHostNet, true),
		pod("shop", "static", corev1.DNSDefault, false),
	}
}

func story3Options(version string) servicecidrtest.Options {
	return servicecidrtest.Options{
		GitVersion:   map[string]string{"v1": "v1.36.3", "v1beta1": "v1.32.4", "v1alpha1": "v1.29.6"}[version],
		Version:      version,
		ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"100.64.0.0/13"}}},
		Services:     story3Services(),
		Objects:      story3Objects(),
	}
}

func newStory3(t testing.TB, version string) (*servicecidrtest.Cluster, *servicecidr.Client) {
	t.Helper()
	cl := servicecidrtest.MustNew(story3Options(version))
	return cl, connect(t, cl)
}

// withDefaultOnly is a cluster serving ServiceCIDR version v with only the
// "kubernetes" ServiceCIDR, 10.96.0.0/16, and a client of it.
func withDefaultOnly(t testing.TB, v string) (*servicecidrtest.Cluster, *servicecidr.Client) {
	t.Helper()
	cl := servicecidrtest.MustNew(servicecidrtest.Options{Version: v,
		ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16"}}}})
	return cl, connect(t, cl)
}

func connect(t testing.TB, cl *servicecidrtest.Cluster) *servicecidr.Client {
	t.Helper()
	c, err := servicecidr.New(context.Background(), servicecidr.Options{Kube: cl.Kube, Dynamic: cl.Dynamic})
	require.NoError(t, err)
	return c
}

var story3To = []netip.Prefix{netip.MustParsePrefix("172.24.0.0/15")}

func story3PlanOptions() servicecidr.PlanOptions {
	return servicecidr.PlanOptions{To: story3To, Validate: servicecidr.ValidateOptions{PodCIDRs: []netip.Prefix{pfx("100.96.0.0/11")}}}
}

// fastApply keeps tests quick: no real waiting.
func fastApply(dir string) servicecidr.ApplyOptions {
	return servicecidr.ApplyOptions{JournalDir: dir, PollInterval: time.Millisecond, ReadyTimeout: 2 * time.Second,
		RetryTimeout: 200 * time.Millisecond, QPS: 1e6, Burst: 1e6}
}

func svcKey(s corev1.Service) string { return fmt.Sprintf("%s/%s", s.Namespace, s.Name) }
