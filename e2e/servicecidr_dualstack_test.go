package e2e_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/servicecidr"
)

// A dual-stack control plane (issue 19, e2e bullet 1): kube-apiserver with
// --service-cluster-ip-range=<v4>,<v6>, kube-controller-manager with
// --cluster-cidr=<v4>,<v6> and the per-family node masks. Nodes get one
// podCIDR per family, the default ServiceCIDR holds both ranges, and the
// Services move from both old ranges to both new ones, keeping each one's
// ipFamilies, ipFamilyPolicy and (offset-preserving) the place of its
// addresses in each range; default/kubernetes comes back in the new IPv4
// range and the old dual-stack ServiceCIDR drains.

var (
	dsClusterV4 = netip.MustParsePrefix("10.244.0.0/16")
	dsClusterV6 = netip.MustParsePrefix("fd00:10:244::/56")
	dsOld       = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/112")}
	dsNew       = []netip.Prefix{netip.MustParsePrefix("10.100.0.0/16"), netip.MustParsePrefix("fd00:10:100::/112")}
	dsOldDNS    = []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00:10:96::a")}
	dsNewDNS    = []netip.Addr{netip.MustParseAddr("10.100.0.10"), netip.MustParseAddr("fd00:10:100::a")}
	dsNewKube   = netip.MustParseAddr("10.100.0.1")
)

const dsNamespace = "ds"

// dsRangeFlag is --service-cluster-ip-range for both families, IPv4 first.
func dsRangeFlag(r []netip.Prefix) string {
	return "--service-cluster-ip-range=" + r[0].String() + "," + r[1].String()
}

// dsFixture creates kube-dns dual-stack at the tenth address of each old
// range and one Service per family policy and order; it returns them all
// (with default/kubernetes) by namespace/name as the server stored them.
func dsFixture(t *testing.T, ctx context.Context, cs kubernetes.Interface) map[string]*corev1.Service {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dsNamespace}}, metav1.CreateOptions{})
	require.NoError(t, err)
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	svc := func(ns, name string, policy corev1.IPFamilyPolicy, families []corev1.IPFamily, ips ...string) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
			Spec: corev1.ServiceSpec{
				Selector:       map[string]string{"app": name},
				IPFamilyPolicy: &policy,
				IPFamilies:     families,
				Ports:          []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
			},
		}
		if len(ips) > 0 {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips
		}
		return s
	}
	dns := svc("kube-system", "kube-dns", corev1.IPFamilyPolicyRequireDualStack, []corev1.IPFamily{v4, v6}, dsOldDNS[0].String(), dsOldDNS[1].String())
	dns.Labels = map[string]string{"k8s-app": "kube-dns"}
	dns.Spec.Selector = map[string]string{"k8s-app": "kube-dns"}
	dns.Spec.Ports = []corev1.ServicePort{{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolUDP}}
	for _, s := range []*corev1.Service{
		dns,
		// Explicit addresses keep their offsets: 10.96.3.7 -> 10.100.3.7, fd00:10:96::105 -> fd00:10:100::105.
		svc(dsNamespace, "pinned-dual", corev1.IPFamilyPolicyRequireDualStack, []corev1.IPFamily{v4, v6}, "10.96.3.7", "fd00:10:96::307"),
		svc(dsNamespace, "pinned-v6", corev1.IPFamilyPolicySingleStack, []corev1.IPFamily{v6}, "fd00:10:96::105"),
		svc(dsNamespace, "prefer-dual", corev1.IPFamilyPolicyPreferDualStack, nil),
		svc(dsNamespace, "v6-first", corev1.IPFamilyPolicyRequireDualStack, []corev1.IPFamily{v6, v4}),
		svc(dsNamespace, "v4-only", corev1.IPFamilyPolicySingleStack, nil),
		svc(dsNamespace, "v6-only", corev1.IPFamilyPolicySingleStack, []corev1.IPFamily{v6}),
	} {
		_, err := cs.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
		require.NoError(t, err, "create Service %s/%s", s.Namespace, s.Name)
	}
	headless := svc(dsNamespace, "headless", corev1.IPFamilyPolicyPreferDualStack, nil, corev1.ClusterIPNone)
	_, err = cs.CoreV1().Services(dsNamespace).Create(ctx, headless, metav1.CreateOptions{})
	require.NoError(t, err)

	saved := scServices(t, ctx, cs)
	// What the server made of the requests: the family order and policy the
	// move must keep.
	for key, want := range map[string][]corev1.IPFamily{
		"kube-system/kube-dns":       {v4, v6},
		dsNamespace + "/prefer-dual": {v4, v6},
		dsNamespace + "/v6-first":    {v6, v4},
		dsNamespace + "/v4-only":     {v4},
		dsNamespace + "/v6-only":     {v6},
	} {
		require.NotNil(t, saved[key], "Service %s", key)
		require.Equal(t, want, saved[key].Spec.IPFamilies, "Service %s ipFamilies as created", key)
		require.Len(t, saved[key].Spec.ClusterIPs, len(want), "Service %s clusterIPs as created", key)
	}
	return saved
}

func TestServiceCIDRDualStackControlPlane(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	opts, minor := scWithServiceCIDRAPI(harness.Options{
		ClusterCIDR:          dsClusterV4.String() + "," + dsClusterV6.String(),
		NodeCIDRMaskSize:     24,
		NodeCIDRMaskSizeIPv6: 64,
		ServiceCIDR:          dsOld[0].String() + "," + dsOld[1].String(),
		// Nodes are plain objects: node IPAM needs no kubelet; no pods here.
		Disable: []harness.Component{harness.Scheduler, harness.Kwok},
	})
	c := harness.Start(t, opts)
	ctx := t.Context()
	cs, err := c.Client()
	require.NoError(t, err)
	kcm := strings.Join(c.Flags(harness.ControllerManager), " ")
	for _, f := range []string{"--cluster-cidr=" + dsClusterV4.String() + "," + dsClusterV6.String(), "--node-cidr-mask-size-ipv4=24", "--node-cidr-mask-size-ipv6=64"} {
		require.Contains(t, kcm, f, "kube-controller-manager runs dual-stack")
	}

	// kube-controller-manager gives every node one podCIDR per family, IPv4
	// first (the order of --cluster-cidr), each inside its cluster CIDR.
	names := []string{"ds-a", "ds-b", "ds-c"}
	for _, n := range names {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	seen := map[netip.Prefix]string{}
	nodeE2EWaitPairs(t, cs, names)
	for _, n := range names {
		node, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		require.NoError(t, err)
		require.Len(t, node.Spec.PodCIDRs, 2)
		assert.Equal(t, node.Spec.PodCIDRs[0], node.Spec.PodCIDR, "node %s: podCIDR is the first of podCIDRs", n)
		v4, err := netip.ParsePrefix(node.Spec.PodCIDRs[0])
		require.NoError(t, err)
		v6, err := netip.ParsePrefix(node.Spec.PodCIDRs[1])
		require.NoError(t, err)
		assert.True(t, v4.Addr().Is4() && v4.Bits() == 24 && dsClusterV4.Contains(v4.Addr()), "node %s: IPv4 podCIDR %s in %s", n, v4, dsClusterV4)
		assert.True(t, v6.Addr().Is6() && v6.Bits() == 64 && dsClusterV6.Contains(v6.Addr()), "node %s: IPv6 podCIDR %s in %s", n, v6, dsClusterV6)
		for _, p := range []netip.Prefix{v4, v6} {
			assert.Empty(t, seen[p], "node %s: podCIDR %s is also %s's", n, p, seen[p])
			seen[p] = n
		}
	}

	// The default ServiceCIDR holds both ranges.
	saved := dsFixture(t, ctx, cs)
	client := scClient(t, ctx, c)
	assert.Equal(t, scWantAPIVersion(minor), client.APIVersion(), "ServiceCIDR API version on Kubernetes %s", client.Server().GitVersion)
	oldSC, err := client.Get(ctx, servicecidr.DefaultServiceCIDRName)
	require.NoError(t, err)
	require.Equal(t, dsOld, oldSC.CIDRs, "the default ServiceCIDR has both families, in the flag's order")

	// First pass: every Service moves, in both families, at its offsets.
	plan, err := client.Plan(ctx, servicecidr.PlanOptions{To: dsNew})
	require.NoError(t, err, "plan")
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := plan.Marshal()
			t.Logf("plan:\n%s", data)
		}
	})
	assert.Equal(t, dsOld, plan.From, "From defaults to the default ServiceCIDR's ranges")
	assert.Equal(t, dsNew, plan.Target.CIDRs, "one new ServiceCIDR for both families")
	assert.False(t, plan.Target.Exists)
	require.NotNil(t, plan.DNS)
	assert.Equal(t, dsNewDNS, plan.DNS.NewIPs, "kube-dns keeps its offset in each family")
	require.NotNil(t, plan.Kubernetes)
	assert.Equal(t, []netip.Addr{dsNewKube}, plan.Kubernetes.NewIPs)
	planned := map[string][]netip.Addr{}
	for _, m := range plan.Moves {
		planned[m.Key()] = m.NewIPs
	}
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("10.100.3.7"), netip.MustParseAddr("fd00:10:100::307")}, planned[dsNamespace+"/pinned-dual"])
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("fd00:10:100::105")}, planned[dsNamespace+"/pinned-v6"])
	var skipped []string
	for _, s := range plan.Skipped {
		skipped = append(skipped, s.Namespace+"/"+s.Name)
	}
	assert.Equal(t, []string{dsNamespace + "/headless"}, skipped)
	assert.Len(t, plan.Moves, len(saved)-2, "every Service but default/kubernetes and the headless one")

	journalDir := t.TempDir()
	res, err := client.Apply(ctx, plan, servicecidr.ApplyOptions{
		JournalDir: journalDir, DeleteOld: true, PollInterval: 200 * time.Millisecond, Progress: scLogEvent(t, "pass 1:"),
	})
	require.NoError(t, err, "apply, first pass")
	require.Len(t, res.Moved, len(plan.Moves))
	target, err := client.Get(ctx, plan.Target.Name)
	require.NoError(t, err, "the new ServiceCIDR")
	assert.Equal(t, dsNew, target.CIDRs)

	live := scServices(t, ctx, cs)
	for key, ips := range planned {
		scCheckMovedInto(t, saved[key], live[key], ips, dsNew)
	}

	// The operator gives both components both new ranges.
	apiFlags := scAPIServerRangeFlags(minor, dsRangeFlag(dsNew))
	require.NoError(t, c.Restart(ctx, harness.APIServer, apiFlags...), "restart kube-apiserver with %v", apiFlags)
	require.NoError(t, c.Restart(ctx, harness.ControllerManager, dsRangeFlag(dsNew)), "restart kube-controller-manager")

	// Second pass: default/kubernetes, and the old ServiceCIDR drains.
	plan2, err := client.Plan(ctx, servicecidr.PlanOptions{From: dsOld, To: dsNew})
	require.NoError(t, err, "plan, second pass")
	assert.Empty(t, plan2.Moves, "the first pass moved every Service")
	assert.True(t, plan2.Target.Exists)
	res2, err := client.Apply(ctx, plan2, servicecidr.ApplyOptions{
		JournalDir: journalDir, DeleteOld: true, DeleteKubernetesService: true, DrainTimeout: 2 * time.Minute,
		PollInterval: 200 * time.Millisecond, Progress: scLogEvent(t, "pass 2:"),
	})
	require.NoError(t, err, "apply, second pass")
	assert.Equal(t, "recreated by kube-apiserver at "+dsNewKube.String(), res2.Kubernetes)
	require.Len(t, res2.Old, 1)
	assert.Contains(t, res2.Old[0].Summary, "is gone", "the old dual-stack ServiceCIDR drained: %s", res2.Old[0].Summary)

	// kube-apiserver may recreate "kubernetes" from its new flag: both new ranges.
	poll(t, 30*time.Second, "old ServiceCIDR gone", func(ctx context.Context) error {
		sc, err := client.Get(ctx, servicecidr.DefaultServiceCIDRName)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		case sc.UID == oldSC.UID:
			return fmt.Errorf("the old ServiceCIDR (uid %s) still exists: %s %v", sc.UID, sc.State(), sc.CIDRs)
		case !slices.Equal(sc.CIDRs, dsNew):
			return fmt.Errorf("ServiceCIDR %s recreated with %v, want %v", sc.Name, sc.CIDRs, dsNew)
		}
		return nil
	})

	live = scServices(t, ctx, cs)
	kube := live[servicecidr.KubernetesService]
	require.NotNil(t, kube, "default/kubernetes")
	assert.Equal(t, []string{dsNewKube.String()}, kube.Spec.ClusterIPs, "default/kubernetes: the first address of the new primary range, single-stack")
	for key, ips := range planned {
		scCheckMovedInto(t, saved[key], live[key], ips, dsNew)
	}
	scCheckUntouched(t, saved[dsNamespace+"/headless"], live[dsNamespace+"/headless"], "headless")

	v, err := client.Verify(ctx, servicecidr.VerifyOptions{To: dsNew, From: dsOld, DNSIPs: dsNewDNS})
	require.NoError(t, err)
	for _, f := range v.Findings {
		t.Logf("verify: %s %s: %s", f.Severity, f.Object, f.Message)
	}
	assert.True(t, v.OK, "Verify after the dual-stack move")
}
