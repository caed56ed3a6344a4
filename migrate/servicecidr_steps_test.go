package migrate

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// scStory is story 3's cluster (FACTS.md): a Service range of
// 100.64.0.0/13 with kube-dns at its tenth address, a ClusterIP Service,
// a LoadBalancer and default/kubernetes, plus objs (nodes, pods,
// ConfigMaps).
func scStory(t *testing.T, deny []servicecidrtest.DenyRule, objs ...runtime.Object) (*servicecidrtest.Cluster, *servicecidr.Client) {
	t.Helper()
	svc := func(ns, name, ip string, typ corev1.ServiceType) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Type: typ, Ports: []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}}}}
	}
	return scConnect(t, servicecidrtest.Options{
		ServiceCIDRs:   []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"100.64.0.0/13"}}},
		APIServerRange: "100.64.0.0/13",
		Services: []*corev1.Service{
			svc("default", "kubernetes", "100.64.0.1", corev1.ServiceTypeClusterIP),
			svc("kube-system", "kube-dns", "100.64.0.10", corev1.ServiceTypeClusterIP),
			svc("shop", "web", "100.64.3.7", corev1.ServiceTypeClusterIP),
			svc("shop", "lb", "100.64.1.1", corev1.ServiceTypeLoadBalancer),
		},
		Objects: objs,
		Deny:    deny,
	})
}

// scConnect builds the fake cluster o describes and a client of it.
func scConnect(t *testing.T, o servicecidrtest.Options) (*servicecidrtest.Cluster, *servicecidr.Client) {
	t.Helper()
	cl := servicecidrtest.MustNew(o)
	c, err := servicecidr.New(t.Context(), servicecidr.Options{Kube: cl.Kube, Dynamic: cl.Dynamic})
	require.NoError(t, err)
	return cl, c
}

var scTo = []netip.Prefix{netip.MustParsePrefix("172.24.0.0/15")}

func scMigration(t *testing.T, c *servicecidr.Client, set ...func(*ServiceCIDROptions)) *ServiceCIDRMigration {
	t.Helper()
	o := ServiceCIDROptions{Client: c, To: scTo, PollInterval: time.Millisecond, ReadyTimeout: 2 * time.Second, DrainTimeout: 2 * time.Second}
	for _, f := range set {
		f(&o)
	}
	m, err := ServiceCIDR(o)
	require.NoError(t, err)
	return m
}

func scEvent(t *testing.T, cl *servicecidrtest.Cluster, name, reason, object, msg string) {
	t.Helper()
	_, err := cl.Kube.CoreV1().Events("default").Create(t.Context(), &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "ServiceCIDR", Name: object, APIVersion: "networking.k8s.io/v1"},
		Reason:         reason, Type: corev1.EventTypeWarning, Message: msg,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

func scPods(n int) []runtime.Object {
	var out []runtime.Object
	for i := range n {
		out = append(out, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("p%02d", i)}})
	}
	// Neither of these resolves through the cluster DNS.
	out = append(out,
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "host"}, Spec: corev1.PodSpec{HostNetwork: true}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "none"}, Spec: corev1.PodSpec{DNSPolicy: corev1.DNSNone}})
	return out
}

const scOldDNS = "kube-system/kube-dns 100.64.0.10 -> 172.24.0.10 (cluster DNS)"

// byHand splits a step's lines into the "by hand: " ones (their
// components) and the rest.
func byHand(lines []string) (components, rest []string) {
	for _, l := range lines {
		if c, ok := strings.CutPrefix(l, "by hand: "); ok {
			components = append(components, c[:strings.Index(c, ": ")])
			continue
		}
		rest = append(rest, l)
	}
	return components, rest
}

// The plan of the whole runbook, step by step, as a reviewer reads it.
func TestServiceCIDRPlanDescribesEveryStep(t *testing.T) {
	restart := "after the kubelets: restart the %d pod(s) that use cluster DNS: shop/p00, shop/p01, shop/p02, shop/p03, shop/p04, shop/p05, shop/p06, shop/p07, shop/p08, shop/p09"
	for _, tc := range []struct {
		pods    int
		restart string
	}{
		{0, ""},
		{10, fmt.Sprintf(restart, 10)},
		{11, fmt.Sprintf(restart, 11) + " and 1 more"},
	} {
		t.Run(fmt.Sprint(tc.pods, " pods"), func(t *testing.T) {
			cl, c := scStory(t, nil, scPods(tc.pods)...)
			p, err := (&Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Plan(t.Context(), scMigration(t, c))
			require.NoError(t, err)
			assert.Empty(t, cl.Writes())
			var names []string
			for _, s := range p.Steps {
				names = append(names, s.Name)
			}
			require.Equal(t, []string{ServiceCIDRStepPreflight, ServiceCIDRStepAdd, ServiceCIDRStepMove, ServiceCIDRStepNodes, ServiceCIDRStepFlags, ServiceCIDRStepRetire}, names)
			assert.Equal(t, []string{
				"172.24.0.0/15: 131070 usable ClusterIPs, kubernetes Service 172.24.0.1, DNS 172.24.0.10",
				"ServiceCIDR API networking.k8s.io/v1 on Kubernetes v1.36.3; moving 100.64.0.0/13 -> 172.24.0.0/15",
				"permissions: all 13 checks allowed",
			}, p.Steps[0].Changes)
			assert.Equal(t, []string{"would create ServiceCIDR cidrshift-172-24-0-0-15 172.24.0.0/15 and wait until it is Ready"}, p.Steps[1].Changes)
			assert.Equal(t, []string{
				scOldDNS,
				"shop/web 100.64.3.7 -> 172.24.3.7",
				"left alone shop/lb: type LoadBalancer: recreating it makes the cloud controller replace its load balancer and the external address may change; move it with --include-loadbalancers when that is acceptable",
				"warning: 1 LoadBalancer Service(s) stay in the old range (see skipped); the old ServiceCIDR stays Terminating until they move",
				"would move 2 Service(s); the old ServiceCIDR stays until step 6",
			}, p.Steps[2].Changes)
			// The flag edits are step 5's, default/kubernetes step 6's:
			// neither is left to a person here.
			comps, rest := byHand(p.Steps[3].Changes)
			assert.Equal(t, []string{"kubeadm-config", "kube-apiserver certificate", "pods using in-cluster config", "kubelet", "pods", "other DNS consumers"}, comps)
			// A manual step without an old and new value has no "( -> )".
			assert.Contains(t, p.Steps[3].Changes, "by hand: pods using in-cluster config: restart pods created before default/kubernetes moved: their KUBERNETES_SERVICE_HOST environment variable holds the old address")
			want := []string{"no kubeadm-config or kubelet-config ConfigMap: nothing to update in the API"}
			if tc.restart != "" {
				want = append([]string{tc.restart}, want...)
			}
			assert.Equal(t, want, rest)
			assert.Equal(t, []string{
				"on every control-plane node, set --service-cluster-ip-range=172.24.0.0/15 in /etc/kubernetes/manifests/kube-apiserver.yaml and /etc/kubernetes/manifests/kube-controller-manager.yaml (the kubelet restarts both)",
				"restart kube-apiserver before kube-controller-manager; every kube-apiserver must run with the new range before step 6",
				"the runbook stops here (exit 3) until it observes the new flag, or is rerun with --continue",
			}, p.Steps[4].Changes)
			assert.Equal(t, []string{
				"mark the ServiceCIDR(s) inside 100.64.0.0/13 for deletion; move any Service created there since step 3",
				"delete default/kubernetes: kube-apiserver recreates it at the first address of 172.24.0.0/15",
				"wait up to 2s for the old range to drain, then verify every ClusterIP lies in 172.24.0.0/15",
				"LoadBalancer Services left in the old range keep it Terminating: rerun with --include-loadbalancers once recreating them is acceptable",
			}, p.Steps[5].Changes)
		})
	}
	// On Kubernetes 1.33 the operator step also carries kube-apiserver's
	// feature gate, which step 4 leaves out.
	_, c := scConnect(t, servicecidrtest.Options{GitVersion: "v1.33.13",
		ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"100.64.0.0/13"}}}})
	p, err := (&Runner{}).Plan(t.Context(), scMigration(t, c))
	require.NoError(t, err)
	gate := "kube-apiserver: Kubernetes 1.33: in the same restart, add --feature-gates=DisableAllocatorDualWrite=true (merged with any gates already set): " +
		"with the dual-write on, kube-apiserver keeps the legacy allocator's old range in etcd and refuses every address of the new one, default/kubernetes's included ( -> DisableAllocatorDualWrite=true)"
	assert.Equal(t, gate, p.Steps[4].Changes[1])
	assert.Len(t, p.Steps[4].Changes, 4)
	assert.NotContains(t, strings.Join(p.Steps[3].Changes, "\n"), "DisableAllocatorDualWrite")

	// With the LoadBalancers included, step 6 has no hint about them.
	_, c = scStory(t, nil)
	p, err = (&Runner{}).Plan(t.Context(), scMigration(t, c, func(o *ServiceCIDROptions) { o.IncludeLoadBalancers = true }))
	require.NoError(t, err)
	assert.Len(t, p.Steps[5].Changes, 3)
	assert.Contains(t, p.Steps[2].Changes, "shop/lb 100.64.1.1 -> 172.24.1.1")
}

// A server-side dry run checks the deletes and the ServiceCIDR create with
// the server, says what it cannot check, and does not dry-run the last
// step, which needs the operator's restart.
func TestServiceCIDRServerDryRunChecksWhatItCan(t *testing.T) {
	cl, c := scStory(t, nil)
	rep, err := (&Runner{Mode: ModeServerDryRun}).Run(t.Context(), scMigration(t, c))
	require.NoError(t, err)
	assert.Empty(t, cl.Writes())
	web, _ := cl.Service("shop", "web")
	assert.Equal(t, "100.64.3.7", web.Spec.ClusterIP)
	assert.Equal(t, []string{"server accepted ServiceCIDR cidrshift-172-24-0-0-15 172.24.0.0/15 (dry run, not stored)"}, rep.Steps[1].Details)
	assert.Equal(t, []string{
		"the new ServiceCIDR does not exist yet (step 2 was a dry run): Service creates cannot be checked by the server",
		"server accepted the move of 2 Service(s), 0 already moved by an earlier run",
	}, rep.Steps[2].Details[4:])
	assert.Equal(t, StatusOperator, rep.Steps[4].Status)
	assert.Equal(t, StatusNotRun, rep.Steps[5].Status)
	assert.Equal(t, "not dry-run: it needs the operator step first", rep.Steps[5].Details[len(rep.Steps[5].Details)-1])

	// Once the new ServiceCIDR exists, the creates are checked too.
	_, err = c.Create(t.Context(), "next", scTo, servicecidr.WriteOptions{})
	require.NoError(t, err)
	writes := len(cl.Writes())
	for _, mode := range []Mode{ModeServerDryRun, ModePlan} {
		rep, err = (&Runner{Mode: mode}).Run(t.Context(), scMigration(t, c))
		require.NoError(t, err)
		assert.Equal(t, []string{"ServiceCIDR next already holds 172.24.0.0/15 (Ready)"}, rep.Steps[1].Details, mode)
		assert.NotContains(t, rep.Steps[2].Details, "the new ServiceCIDR does not exist yet (step 2 was a dry run): Service creates cannot be checked by the server", mode)
	}
	assert.Equal(t, writes, len(cl.Writes()))
}

// The whole run: it waits for the operator until kube-apiserver reports the
// new range (an event that names another range, another object or another
// reason is no proof), then retires the old range, and says why the old
// range stays held while a LoadBalancer is left in it.
func TestServiceCIDRRunsToTheEnd(t *testing.T) {
	cl, c := scStory(t, nil)
	r := &Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}
	notSeen := "not observed yet: no kube-apiserver is seen running with --service-cluster-ip-range=172.24.0.0/15 (no mirror pods in kube-system, no KubernetesDefaultServiceCIDRInconsistent event on ServiceCIDR kubernetes)"
	rep, err := r.Run(t.Context(), scMigration(t, c))
	require.NoError(t, err)
	require.True(t, rep.Paused())
	assert.Equal(t, []string{"created ServiceCIDR cidrshift-172-24-0-0-15 172.24.0.0/15, Ready"}, rep.Steps[1].Details)
	assert.Equal(t, "moved 2 Service(s), 0 already moved by an earlier run", rep.Steps[2].Details[4])
	assert.Regexp(t, `^Services absent between delete and create: p50 \S+, max \S+$`, rep.Steps[2].Details[5])
	assert.Equal(t, []string{notSeen}, rep.Steps[4].Details)

	require.NoError(t, cl.SetAPIServerRange("172.24.0.0/15"))
	msg := "The default ServiceCIDR [100.64.0.0/13] does not match the controller flag configurations [%s]"
	scEvent(t, cl, "k.1", "SomethingElse", "kubernetes", fmt.Sprintf(msg, "172.24.0.0/15"))
	scEvent(t, cl, "k.2", ReasonServiceCIDRInconsistent, "other", fmt.Sprintf(msg, "172.24.0.0/15"))
	scEvent(t, cl, "k.3", ReasonServiceCIDRInconsistent, "kubernetes", fmt.Sprintf(msg, "172.24.0.0/16"))
	rep, err = r.Run(t.Context(), scMigration(t, c))
	require.NoError(t, err)
	require.True(t, rep.Paused())
	assert.Equal(t, []string{notSeen}, rep.Steps[4].Details)

	scEvent(t, cl, "k.4", ReasonServiceCIDRInconsistent, "kubernetes", fmt.Sprintf(msg, "172.24.0.0/15")+"\n")
	rep, err = r.Run(t.Context(), scMigration(t, c))
	require.EqualError(t, err, "the old range is still held: kubernetes 100.64.0.0/13 (Terminating); rerun to wait longer, or with --include-loadbalancers if LoadBalancer Services hold it")
	assert.Equal(t, []string{"observed: kube-apiserver reports: " + fmt.Sprintf(msg, "172.24.0.0/15") + "\n"}, rep.Steps[4].Details)
	d := rep.Steps[5].Details
	assert.Equal(t, "default/kubernetes: recreated by kube-apiserver at 172.24.0.1", d[0])
	assert.Contains(t, d, "default/kubernetes is at 172.24.0.1")
	assert.Contains(t, d, "warning: services/shop/lb: LoadBalancer Service left at 100.64.1.1, outside 172.24.0.0/15 (it keeps the old ServiceCIDR Terminating)")
	assert.NotContains(t, strings.Join(d, "\n"), "verified")

	rep, err = r.Run(t.Context(), scMigration(t, c, func(o *ServiceCIDROptions) { o.IncludeLoadBalancers = true }))
	require.NoError(t, err)
	assert.Equal(t, []string{
		"moved 1 Service(s) still in the old range",
		"ServiceCIDR kubernetes is gone",
		"default/kubernetes is at 172.24.0.1",
		"verified: 4 Service(s) with a ClusterIP, all in 172.24.0.0/15; no ServiceCIDR left in 100.64.0.0/13",
	}, rep.Steps[5].Details)
	lb, _ := cl.Service("shop", "lb")
	assert.Equal(t, "172.24.1.1", lb.Spec.ClusterIP)
}

func mirrorPod(name, comp string, args ...string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, Labels: map[string]string{"component": comp}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: comp, Command: append([]string{comp}, args...)}}}}
}

// Where kubeadm's mirror pods exist, they decide: every one must carry the
// new flag, and kube-apiserver's event does not stand in for a stale one.
func TestServiceCIDRObservesTheMirrorPods(t *testing.T) {
	cl, c := scStory(t, nil,
		mirrorPod("kube-apiserver-cp1", "kube-apiserver", "--service-cluster-ip-range=172.24.0.0/15"),
		mirrorPod("kube-controller-manager-cp1", "kube-controller-manager", "--service-cluster-ip-range=100.64.0.0/13"),
		mirrorPod("kube-controller-manager-cp2", "kube-controller-manager"))
	scEvent(t, cl, "k.1", ReasonServiceCIDRInconsistent, "kubernetes", "The default ServiceCIDR [100.64.0.0/13] does not match the controller flag configurations [172.24.0.0/15]")
	r := &Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}
	rep, err := r.Run(t.Context(), scMigration(t, c))
	require.NoError(t, err)
	require.True(t, rep.Paused())
	assert.Equal(t, []string{"not observed yet: kube-controller-manager-cp1 has --service-cluster-ip-range=100.64.0.0/13; kube-controller-manager-cp2 has --service-cluster-ip-range="}, rep.Steps[4].Details)

	for _, p := range []*corev1.Pod{
		mirrorPod("kube-controller-manager-cp1", "kube-controller-manager", "--service-cluster-ip-range", "172.24.0.0/15"),
		mirrorPod("kube-controller-manager-cp2", "kube-controller-manager", "--service-cluster-ip-range=172.24.0.0/15"),
	} {
		_, err := cl.Kube.CoreV1().Pods("kube-system").Update(t.Context(), p, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	require.NoError(t, cl.SetAPIServerRange("172.24.0.0/15"))
	rep, err = r.Run(t.Context(), scMigration(t, c, func(o *ServiceCIDROptions) { o.IncludeLoadBalancers = true }))
	require.NoError(t, err)
	assert.Equal(t, []string{"observed: every control-plane pod (kube-apiserver-cp1, kube-controller-manager-cp1, kube-controller-manager-cp2) runs with --service-cluster-ip-range=172.24.0.0/15"}, rep.Steps[4].Details)
}

// observeFlags takes the default ServiceCIDR already holding the new range
// (kube-apiserver recreated it from its new flag) as proof.
func TestServiceCIDRObservesTheDefaultServiceCIDRInTheNewRange(t *testing.T) {
	cl, c := scConnect(t, servicecidrtest.Options{ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"172.24.0.0/15"}}}})
	m := scMigration(t, c)
	m.to = scTo
	ok, why, err := m.observeFlags(t.Context())
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "ServiceCIDR kubernetes holds 172.24.0.0/15", why)

	m.to = []netip.Prefix{netip.MustParsePrefix("172.26.0.0/15")}
	ok, why, err = m.observeFlags(t.Context())
	require.NoError(t, err)
	assert.False(t, ok, why)

	cl.Kube.PrependReactor("list", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcd down")
	})
	_, _, err = m.observeFlags(t.Context())
	require.EqualError(t, err, "listing events: etcd down")
	cl.Kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcd down")
	})
	_, _, err = m.observeFlags(t.Context())
	require.EqualError(t, err, "listing kube-apiserver pods: etcd down")
}

// The last step waits for kube-apiserver to recreate default/kubernetes at
// the first new address, and says where it is when it gives up.
func TestServiceCIDRWaitsForDefaultKubernetes(t *testing.T) {
	cl, c := scStory(t, nil)
	m := scMigration(t, c, func(o *ServiceCIDROptions) { o.ReadyTimeout = 20 * time.Millisecond })
	m.to = scTo
	_, err := m.waitKubernetesService(t.Context())
	require.EqualError(t, err, "default/kubernetes is at 100.64.0.1, not at 172.24.0.1, after 20ms: every kube-apiserver must run with --service-cluster-ip-range=172.24.0.0/15; rerun to check again")

	cl.HoldKubernetesService(true)
	require.NoError(t, cl.Kube.CoreV1().Services("default").Delete(t.Context(), "kubernetes", metav1.DeleteOptions{}))
	_, err = m.waitKubernetesService(t.Context())
	require.EqualError(t, err, "default/kubernetes is absent, not at 172.24.0.1, after 20ms: every kube-apiserver must run with --service-cluster-ip-range=172.24.0.0/15; rerun to check again")

	m.o.ReadyTimeout = time.Hour
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err = m.waitKubernetesService(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	cl.Kube.PrependReactor("get", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "kubernetes", errors.New("no"))
	})
	_, err = m.waitKubernetesService(t.Context())
	require.True(t, apierrors.IsForbidden(err), "%v", err)
}

func nodeWith(name string, spec corev1.NodeSpec, addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec, Status: corev1.NodeStatus{Addresses: addrs}}
}

// The preflight checks the new range against every node's podCIDRs and
// addresses (internal and external, not host names), before the first
// write.
func TestServiceCIDRPreflightRefusesNodeNetworks(t *testing.T) {
	in := "172.24.9.9"
	for _, tc := range []struct {
		node *corev1.Node
		want string
	}{
		{nodeWith("n1", corev1.NodeSpec{PodCIDR: "172.25.1.0/24"}), "overlaps node-podcidr 172.25.1.0/24 (node n1 podCIDR)"},
		{nodeWith("n1", corev1.NodeSpec{PodCIDRs: []string{"10.1.0.0/24", "172.25.1.0/24"}}), "overlaps node-podcidr 172.25.1.0/24 (node n1 podCIDR)"},
		{nodeWith("n2", corev1.NodeSpec{}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: in}), "overlaps node-network 172.24.9.9/32 (node network)"},
		{nodeWith("n2", corev1.NodeSpec{}, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: in}), "overlaps node-network 172.24.9.9/32 (node network)"},
		{nodeWith("n3", corev1.NodeSpec{PodCIDR: "10.1.0.0/24"}, corev1.NodeAddress{Type: corev1.NodeHostName, Address: in}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}), ""},
	} {
		cl, c := scStory(t, nil, tc.node)
		_, err := (&Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), scMigration(t, c))
		if tc.want == "" {
			require.NoError(t, err)
			continue
		}
		require.ErrorIs(t, err, servicecidr.ErrConflict)
		assert.Contains(t, err.Error(), tc.want)
		assert.Empty(t, cl.Writes(), tc.want)
	}

	// Nodes and pods that may not be read are said to be unchecked.
	cl, c := scStory(t, nil)
	for _, res := range []string{"nodes", "pods"} {
		cl.Kube.PrependReactor("list", res, func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: res}, "", errors.New("no"))
		})
	}
	p, err := (&Runner{}).Plan(t.Context(), scMigration(t, c))
	require.NoError(t, err)
	assert.Contains(t, p.Steps[2].Changes, "warning: nodes not read, their networks are not checked for conflicts: nodes is forbidden: no")
	assert.Contains(t, p.Steps[2].Changes, "warning: pods not read, the pods to restart for the new DNS address are not listed: pods is forbidden: no")
}

// A missing permission is a warning in a plan and a refusal before the
// first write of an apply.
func TestServiceCIDRPreflightChecksPermissions(t *testing.T) {
	cl, c := scStory(t, []servicecidrtest.DenyRule{{Verb: "delete", Resource: "services"}})
	p, err := (&Runner{}).Plan(t.Context(), scMigration(t, c))
	require.NoError(t, err)
	last := p.Steps[0].Changes[len(p.Steps[0].Changes)-1]
	assert.True(t, strings.HasPrefix(last, "warning: ") && strings.Contains(last, "delete services"), last)
	_, err = (&Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), scMigration(t, c))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "delete services")
	assert.Empty(t, cl.Writes())
}

func writeManifest(t *testing.T, dir, comp string) {
	t.Helper()
	data := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + comp + "\n  namespace: kube-system\nspec:\n  containers:\n  - name: " + comp +
		"\n    image: registry.k8s.io/" + comp + ":v1.36.3\n    command:\n    - " + comp + "\n    - --service-cluster-ip-range=100.64.0.0/13\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, comp+".yaml"), []byte(data), 0o600))
}

// --manifests is read and rewritten in memory before the first write, so
// that the operator step cannot fail on it after the Services moved.
func TestServiceCIDRChecksTheManifestsBeforeTheFirstWrite(t *testing.T) {
	empty := t.TempDir()
	broken := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(broken, "kube-controller-manager.yaml"), []byte("kind: Pod\nspec: [\n"), 0o600))
	writeManifest(t, broken, "kube-apiserver")
	for _, tc := range []struct{ dir, want string }{
		{empty, "--manifests " + empty + ": holds neither kube-apiserver.yaml nor kube-controller-manager.yaml; give the directory of the static-pod manifests"},
		{broken, "--manifests " + broken + ": kube-controller-manager.yaml: "},
	} {
		cl, c := scStory(t, nil)
		_, err := (&Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), scMigration(t, c, func(o *ServiceCIDROptions) { o.Manifests = tc.dir }))
		require.ErrorIs(t, err, ErrInvalidInput)
		assert.Contains(t, err.Error(), tc.want)
		assert.Empty(t, cl.Writes())
	}

	// One of the two is enough; the operator step renders what is there.
	one := t.TempDir()
	writeManifest(t, one, "kube-controller-manager")
	_, c := scStory(t, nil)
	out := filepath.Join(t.TempDir(), "out")
	p, err := (&Runner{}).Plan(t.Context(), scMigration(t, c, func(o *ServiceCIDROptions) { o.Manifests, o.Out = one, out }))
	require.NoError(t, err)
	flags := strings.Join(p.Steps[4].Changes, "\n")
	assert.Contains(t, flags, filepath.Join(one, "kube-apiserver.yaml")+": not found, skipped")
	assert.Contains(t, flags, "-    - --service-cluster-ip-range=100.64.0.0/13\n+    - --service-cluster-ip-range=172.24.0.0/15")
	assert.Contains(t, p.Steps[4].Changes, "copy "+filepath.Join(out, "kube-controller-manager.yaml")+" to /etc/kubernetes/manifests/kube-controller-manager.yaml on every control-plane node (the kubelet restarts the static pod)")
	assert.NotContains(t, flags, "on every control-plane node, set")
}

// A rerun must ask for the journaled move, and without --from the range in
// use comes from the default ServiceCIDR.
func TestServiceCIDRPrepareResolvesFrom(t *testing.T) {
	_, c := scStory(t, nil)
	dir := filepath.Join(t.TempDir(), "j")
	r := &Runner{Mode: ModeApply, JournalDir: dir}
	rep, err := r.Run(t.Context(), scMigration(t, c))
	require.NoError(t, err)
	require.True(t, rep.Paused())
	for _, set := range []func(*ServiceCIDROptions){
		func(o *ServiceCIDROptions) { o.To = []netip.Prefix{netip.MustParsePrefix("172.26.0.0/15")} },
		func(o *ServiceCIDROptions) { o.From = []netip.Prefix{netip.MustParsePrefix("100.64.0.0/12")} },
	} {
		_, err = r.Run(t.Context(), scMigration(t, c, set))
		require.ErrorIs(t, err, ErrInvalidInput)
		assert.Contains(t, err.Error(), "--journal "+dir+" records a move from 100.64.0.0/13 to 172.24.0.0/15; rerun with those ranges or use another journal")
	}
	// The journaled --from is used even though the default ServiceCIDR is
	// now another one's.
	m := scMigration(t, c, func(o *ServiceCIDROptions) { o.From = []netip.Prefix{netip.MustParsePrefix("100.64.0.0/13")} })
	_, err = r.Run(t.Context(), m)
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("100.64.0.0/13")}, m.From())
	assert.Equal(t, scTo, m.To())

	_, c = scConnect(t, servicecidrtest.Options{})
	_, err = (&Runner{}).Plan(t.Context(), scMigration(t, c))
	require.ErrorIs(t, err, ErrInvalidInput)
	assert.Contains(t, err.Error(), `--from not given and there is no default ServiceCIDR "kubernetes" to take it from`)
}

func TestEventLine(t *testing.T) {
	for _, tc := range []struct {
		e    servicecidr.Event
		want string
	}{
		{servicecidr.Event{Kind: "moved", Service: "shop/web", NewIPs: []netip.Addr{netip.MustParseAddr("172.24.3.7"), netip.MustParseAddr("fd00::7")}}, "moved shop/web -> 172.24.3.7,fd00::7"},
		{servicecidr.Event{Kind: "ready", ServiceCIDR: "next", Message: "Ready"}, "ready servicecidr/next: Ready"},
		{servicecidr.Event{Kind: "x"}, "x"},
	} {
		assert.Equal(t, tc.want, EventLine(tc.e))
	}
}

// The node step updates kubeadm's ConfigMaps through kubeadmcfg and warns
// when kubelet-config's clusterDNS would not follow the DNS Service.
func TestServiceCIDRNodeStepWarnsWhenClusterDNSDoesNotFollow(t *testing.T) {
	cm := func(name, key, data string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name}, Data: map[string]string{key: data}}
	}
	cl, c := scStory(t, nil,
		cm("kubeadm-config", "ClusterConfiguration", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 100.96.0.0/11\n  serviceSubnet: 100.64.0.0/13\n"),
		cm("kubelet-config", "kubelet", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS:\n- 100.64.0.53\n"))
	p, err := (&Runner{}).Plan(t.Context(), scMigration(t, c))
	require.NoError(t, err)
	comps, rest := byHand(p.Steps[3].Changes)
	assert.Equal(t, []string{"kube-apiserver certificate", "pods using in-cluster config", "kubelet", "pods", "other DNS consumers"}, comps, "kubeadm-config is done through the API")
	assert.Equal(t, []string{
		"warning: kubelet-config clusterDNS would become [172.24.0.53] but the DNS Service moved to [172.24.0.10]",
		"ConfigMap kube-system/kubeadm-config ClusterConfiguration: networking.serviceSubnet: 100.64.0.0/13 -> 172.24.0.0/15",
		"ConfigMap kube-system/kubelet-config kubelet: clusterDNS: 100.64.0.53 -> 172.24.0.53",
		"kubeadm-config ConfigMap kube-system/kubeadm-config ClusterConfiguration: would-update",
		"kubelet-config ConfigMap kube-system/kubelet-config kubelet: would-update",
	}, rest)
	assert.Empty(t, cl.Writes())

	rep, err := (&Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), scMigration(t, c))
	require.NoError(t, err)
	assert.Contains(t, rep.Steps[3].Details, "warning: kubelet-config clusterDNS would become [172.24.0.53] but the DNS Service moved to [172.24.0.10]")
	got, err := cl.Kube.CoreV1().ConfigMaps("kube-system").Get(t.Context(), "kubeadm-config", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, got.Data["ClusterConfiguration"], "serviceSubnet: 172.24.0.0/15")
}

// A ServiceCIDR for the new range that a killed run created before it
// recorded step 2 is found done, and not created again.
func TestServiceCIDRAddStepFindsTheNewServiceCIDRDone(t *testing.T) {
	cl, c := scStory(t, nil)
	_, err := c.Create(t.Context(), "next", scTo, servicecidr.WriteOptions{})
	require.NoError(t, err)
	cl.Reconcile()
	rep, err := (&Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), scMigration(t, c))
	require.NoError(t, err)
	assert.Equal(t, StatusDone, rep.Steps[1].Status)
	assert.Equal(t, []string{"found done: ServiceCIDR next holds 172.24.0.0/15, Ready"}, rep.Steps[1].Details)
	assert.NotContains(t, cl.Writes(), "create servicecidrs cidrshift-172-24-0-0-15")

	// One not Ready yet is waited for, not created again.
	cl, c = scConnect(t, servicecidrtest.Options{ControllerDelay: 300,
		ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"100.64.0.0/13"}}}})
	_, err = c.Create(t.Context(), "next", scTo, servicecidr.WriteOptions{})
	require.NoError(t, err)
	rep, err = (&Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), scMigration(t, c))
	require.NoError(t, err)
	assert.Equal(t, StatusCompleted, rep.Steps[1].Status)
	assert.Equal(t, []string{"ServiceCIDR next holds 172.24.0.0/15, Ready"}, rep.Steps[1].Details)
	assert.NotContains(t, cl.Writes(), "create servicecidrs cidrshift-172-24-0-0-15")
}

// A dual-stack ServiceCIDR left in the old range is named once, although
// both of its ranges are in it.
func TestServiceCIDRNamesADualStackOldRangeOnce(t *testing.T) {
	lb := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "lb"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "100.64.1.1", ClusterIPs: []string{"100.64.1.1", "fd00:64::1:1"},
			IPFamilyPolicy: ptrTo(corev1.IPFamilyPolicyRequireDualStack), IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	kube := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
		Spec: corev1.ServiceSpec{ClusterIP: "100.64.0.1", Ports: []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP}}}}
	cl, c := scConnect(t, servicecidrtest.Options{
		ServiceCIDRs:   []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"100.64.0.0/13", "fd00:64::/108"}}},
		APIServerRange: "100.64.0.0/13,fd00:64::/108",
		Services:       []*corev1.Service{kube, lb},
	})
	to := []netip.Prefix{netip.MustParsePrefix("172.24.0.0/15"), netip.MustParsePrefix("fd00:172::/108")}
	require.NoError(t, cl.SetAPIServerRange("172.24.0.0/15,fd00:172::/108"))
	_, err := (&Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(),
		scMigration(t, c, func(o *ServiceCIDROptions) { o.To, o.Continue, o.DrainTimeout = to, true, 100*time.Millisecond }))
	require.EqualError(t, err, "the old range is still held: kubernetes 100.64.0.0/13,fd00:64::/108 (Terminating); rerun to wait longer, or with --include-loadbalancers if LoadBalancer Services hold it")
}

func ptrTo[T any](v T) *T { return &v }

// The last step verifies the DNS Service at the address step 3 gave it
// (the one every kubelet's clusterDNS now names), not merely in the new
// range.
func TestServiceCIDRVerifiesTheDNSServiceAtItsPlannedAddress(t *testing.T) {
	cl, c := scStory(t, nil)
	r := &Runner{Mode: ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}
	rep, err := r.Run(t.Context(), scMigration(t, c))
	require.NoError(t, err)
	require.True(t, rep.Paused())
	// Someone recreates kube-dns elsewhere in the new range.
	require.NoError(t, cl.Kube.CoreV1().Services("kube-system").Delete(t.Context(), "kube-dns", metav1.DeleteOptions{}))
	_, err = cl.AddService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns"},
		Spec: corev1.ServiceSpec{ClusterIP: "172.24.0.99", Ports: []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}}}})
	require.NoError(t, err)
	require.NoError(t, cl.SetAPIServerRange("172.24.0.0/15"))
	_, err = r.Run(t.Context(), scMigration(t, c, func(o *ServiceCIDROptions) { o.Continue, o.IncludeLoadBalancers = true, true }))
	require.EqualError(t, err, "verification failed: services/kube-system/kube-dns: the DNS Service has 172.24.0.99, expected 172.24.0.10 (kubelet clusterDNS must match it)")
}

// The node step of a run that has no plan recorded (the Services were moved
// by an earlier run) plans again. When that planning fails, the step fails
// with its error, keeps no plan, and writes nothing.
func TestServiceCIDRNodeStepStopsWhenItsPlanningFails(t *testing.T) {
	cl, c := scStory(t, nil)
	m := scMigration(t, c)
	cl.Kube.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcd down")
	})
	sr := &StepReport{}
	require.EqualError(t, m.nodeConfig(t.Context(), nil, sr), "listing Nodes: etcd down")
	assert.Nil(t, m.plan)
	assert.Empty(t, sr.Details)
	assert.Empty(t, cl.Writes())
}
