package servicecidr_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// TestPlanMovesTheDNSServiceFirstWhereverItSorts: the DNS Service is the
// first move even when other Services sort before it; the others follow in
// namespace/name order.
func TestPlanMovesTheDNSServiceFirstWhereverItSorts(t *testing.T) {
	o := story3Options("v1")
	early := story3Services()[3]
	early.Namespace, early.Name, early.Spec.ClusterIP = "apps", "early", "100.64.0.50"
	o.Services = append(o.Services, early)
	c := connect(t, servicecidrtest.MustNew(o))
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	var got []string
	for _, m := range p.Moves {
		got = append(got, m.Key())
	}
	assert.Equal(t, []string{"kube-system/kube-dns", "apps/early", "shop/api", "shop/web"}, got)
}

// TestPlanWarnsAboutLoadBalancersLeftInTheOldRange: the LoadBalancer
// Services a plan leaves behind keep the old ServiceCIDR Terminating; the
// plan says how many, and says nothing when it moves them.
func TestPlanWarnsAboutLoadBalancersLeftInTheOldRange(t *testing.T) {
	const warning = "LoadBalancer Service(s) stay in the old range (see skipped); the old ServiceCIDR stays Terminating until they move"
	for _, include := range []bool{false, true} {
		t.Run(map[bool]string{false: "left", true: "moved"}[include], func(t *testing.T) {
			_, c := newStory3(t, "v1")
			po := story3PlanOptions()
			po.IncludeLoadBalancers = include
			p, err := c.Plan(context.Background(), po)
			require.NoError(t, err)
			all := strings.Join(p.Warnings, "\n")
			if include {
				assert.NotContains(t, all, warning)
			} else {
				assert.Contains(t, p.Warnings, "1 "+warning)
			}
		})
	}
}

// TestPlanCheckNamesTheFirstMoveByItsIndex: an error in the first move
// names moves[0], not the kubernetes entry, so the operator edits the right
// part of the plan file.
func TestPlanCheckNamesTheFirstMoveByItsIndex(t *testing.T) {
	_, c := newStory3(t, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	p.Moves[0].UID = ""
	assert.EqualError(t, p.Check(), `plan moves[0].uid "kube-system/kube-dns": the UID the plan saw is required to detect a stale plan`)
}

// TestPlanTargetIsTheNamedServiceCIDR: with a ServiceCIDR name given, an
// existing ServiceCIDR of another name with the same CIDRs is not taken as
// the target; the one of that name is.
func TestPlanTargetIsTheNamedServiceCIDR(t *testing.T) {
	o := story3Options("v1")
	o.ServiceCIDRs = append(o.ServiceCIDRs, servicecidrtest.InitialServiceCIDR{Name: "other", CIDRs: []string{"172.24.0.0/15"}})
	s := snapshotOf(t, servicecidrtest.MustNew(o))
	for _, name := range []string{"mine", "other"} {
		po := story3PlanOptions()
		po.ServiceCIDRName = name
		p, err := servicecidr.BuildPlan(s, po)
		require.NoError(t, err, name)
		assert.Equal(t, name, p.Target.Name)
		assert.Equal(t, name == "other", p.Target.Exists, name)
	}
}

// TestPlanNeverListsAServiceCIDRWithoutCIDRsAsOld: a ServiceCIDR whose CIDRs
// could not be read lies in no range: it is not an old one, which Apply
// with DeleteOld would delete.
func TestPlanNeverListsAServiceCIDRWithoutCIDRsAsOld(t *testing.T) {
	s := snapshotOf(t, servicecidrtest.MustNew(story3Options("v1")))
	s.ServiceCIDRs = append(s.ServiceCIDRs, servicecidr.ServiceCIDR{Name: "unreadable"})
	p, err := servicecidr.BuildPlan(s, story3PlanOptions())
	require.NoError(t, err)
	require.Len(t, p.Old, 1)
	assert.Equal(t, "kubernetes", p.Old[0].Name)
}

// TestPlanAvoidsAddressesOfLeakedIPAddresses: an address whose IPAddress
// object outlived its Service (more IPAddress objects than Services) is
// still taken: free allocation skips it.
func TestPlanAvoidsAddressesOfLeakedIPAddresses(t *testing.T) {
	s := snapshotOf(t, servicecidrtest.MustNew(story3Options("v1")))
	leaked := map[netip.Addr]bool{}
	for i := 2; i <= 12; i++ {
		ip := netip.AddrFrom4([4]byte{172, 24, 0, byte(i)})
		leaked[ip] = true
		s.IPAddresses = append(s.IPAddresses, servicecidr.IPAddress{IP: ip, ManagedBy: servicecidr.ManagedByAllocator,
			ParentRef: servicecidr.ParentRef{Resource: "services", Namespace: "gone", Name: fmt.Sprintf("s%d", i)}})
	}
	require.Greater(t, len(s.IPAddresses), len(s.Services))
	po := story3PlanOptions()
	po.Allocate = servicecidr.AllocateFree
	p, err := servicecidr.BuildPlan(s, po)
	require.NoError(t, err)
	for _, m := range p.Moves {
		for _, ip := range m.NewIPs {
			assert.False(t, leaked[ip], "%s planned at leaked %s", m.Key(), ip)
		}
	}
}

// TestPlanFindsTheLabelledDNSServiceWithAClusterIP: of the Services labelled
// k8s-app=kube-dns, the DNS Service is the first with a ClusterIP, not a
// headless one listed before it.
func TestPlanFindsTheLabelledDNSServiceWithAClusterIP(t *testing.T) {
	o := story3Options("v1")
	o.Services = story3Services()
	o.Services[1].Name = "coredns"
	headless := o.Services[1].DeepCopy()
	headless.Name, headless.Spec.ClusterIP, headless.Spec.ClusterIPs = "core-dns-headless", corev1.ClusterIPNone, nil
	o.Services = append(o.Services, headless)
	p, err := servicecidr.BuildPlan(snapshotOf(t, servicecidrtest.MustNew(o)), story3PlanOptions())
	require.NoError(t, err)
	require.NotNil(t, p.DNS)
	assert.Equal(t, "kube-system/coredns", p.DNS.Namespace+"/"+p.DNS.Name)
}

// TestPlanRefusesANamedDNSServiceWithoutAClusterIP: a DNS Service named by
// the caller must have a ClusterIP kubelet can use, and not be the API
// server's own.
func TestPlanRefusesANamedDNSServiceWithoutAClusterIP(t *testing.T) {
	s := snapshotOf(t, servicecidrtest.MustNew(story3Options("v1")))
	for name, want := range map[string]string{
		"shop/payments":      "is an ExternalName Service",
		"shop/db":            "is headless (clusterIP: None)",
		"default/kubernetes": "is the API server's own Service, not the cluster DNS",
	} {
		po := story3PlanOptions()
		po.DNSService = name
		_, err := servicecidr.BuildPlan(s, po)
		require.ErrorIs(t, err, servicecidr.ErrInvalid, name)
		assert.ErrorContains(t, err, want, name)
	}
}

// TestPlanKeepsNoDeletedDefaultKubernetesWithoutItsAddress: a journal record
// of a deleted default/kubernetes without addresses gives no move (one with
// no address to wait for).
func TestPlanKeepsNoDeletedDefaultKubernetesWithoutItsAddress(t *testing.T) {
	o := story3Options("v1")
	o.Services = story3Services()[1:]
	s := snapshotOf(t, servicecidrtest.MustNew(o))
	s.KubernetesDeleted = &servicecidr.KubernetesDeletion{UID: "deleted-uid"}
	p, err := servicecidr.BuildPlan(s, story3PlanOptions())
	require.NoError(t, err)
	assert.Nil(t, p.Kubernetes)
	s.KubernetesDeleted.OldIPs = addrs("100.64.0.1")
	p, err = servicecidr.BuildPlan(s, story3PlanOptions())
	require.NoError(t, err)
	require.NotNil(t, p.Kubernetes)
	assert.Equal(t, addrs("172.24.0.1"), p.Kubernetes.NewIPs)
}

// TestPlanCheckAcceptsADualStackMoveAndRefusesTheKubernetesAddressForDNS: a
// move holds one or two addresses (two for a dual-stack Service), and no
// move, the first included, may take the first address of the new range.
func TestPlanCheckAcceptsADualStackMoveAndRefusesTheKubernetesAddressForDNS(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "dual"}, Spec: corev1.ServiceSpec{
		ClusterIP: "10.96.0.50", ClusterIPs: []string{"10.96.0.50", "fd00:96::50"}, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	cl := servicecidrtest.MustNew(servicecidrtest.Options{ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16", "fd00:96::/108"}}},
		Services: []*corev1.Service{svc}})
	p, err := servicecidr.BuildPlan(snapshotOf(t, cl), servicecidr.PlanOptions{To: []netip.Prefix{pfx("10.128.0.0/16"), pfx("fd00:128::/108")}})
	require.NoError(t, err)
	require.Len(t, p.Moves, 1)
	require.Len(t, p.Moves[0].NewIPs, 2)
	require.NoError(t, p.Check())

	_, c := newStory3(t, "v1")
	p, err = c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	require.Equal(t, "dns", p.Moves[0].Role)
	p.Moves[0].NewIPs = addrs("172.24.0.1")
	p.DNS.NewIPs = addrs("172.24.0.1")
	assert.EqualError(t, p.Check(), `plan moves[0].newIPs[0] "172.24.0.1": is the first address of 172.24.0.0/15, reserved for default/kubernetes`)
}
