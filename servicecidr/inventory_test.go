package servicecidr_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// TestSnapshotReadsEveryNodeRangeAndAddress: a node's pod ranges come from
// spec.podCIDRs, or from the older spec.podCIDR when that is all it has;
// its addresses are its internal and external IPs (not its hostname), so
// that conflicts with them are found.
func TestSnapshotReadsEveryNodeRangeAndAddress(t *testing.T) {
	o := story3Options("v1")
	o.Objects = []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dual"},
			Spec: corev1.NodeSpec{PodCIDR: "100.96.0.0/24", PodCIDRs: []string{"100.96.0.0/24", "fd00:96::/64"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "10.9.9.9"},
				{Type: corev1.NodeInternalIP, Address: "172.20.40.10"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.7"}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}, Spec: corev1.NodeSpec{PodCIDR: "100.96.1.0/24"}},
	}
	c := connect(t, servicecidrtest.MustNew(o))
	s, err := c.Snapshot(context.Background(), servicecidr.SnapshotOptions{Nodes: true})
	require.NoError(t, err)
	assert.Equal(t, []servicecidr.NodeInfo{
		{Name: "dual", PodCIDRs: []netip.Prefix{pfx("100.96.0.0/24"), pfx("fd00:96::/64")}, Addresses: addrs("172.20.40.10", "203.0.113.7")},
		{Name: "legacy", PodCIDRs: []netip.Prefix{pfx("100.96.1.0/24")}},
	}, s.Nodes)
}

// TestClusterIPsReadsTheSingularFieldWhenThePluralIsEmpty: a Service object
// with only spec.clusterIP (as older clients and manifests write it) still
// has its address.
func TestClusterIPsReadsTheSingularFieldWhenThePluralIsEmpty(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec corev1.ServiceSpec
		want []netip.Addr
	}{
		{"singular only", corev1.ServiceSpec{ClusterIP: "10.96.0.7"}, addrs("10.96.0.7")},
		{"both", corev1.ServiceSpec{ClusterIP: "10.96.0.7", ClusterIPs: []string{"10.96.0.7", "fd00::7"}}, addrs("10.96.0.7", "fd00::7")},
		{"none", corev1.ServiceSpec{}, nil},
		{"headless", corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, servicecidr.ClusterIPs(&corev1.Service{Spec: tc.spec}))
		})
	}
}

// TestInventoryLeavesOutTheNetworkAndBroadcastAddresses: as the API
// server's allocator, an IPv4 range never hands out its first (network) and
// last (broadcast) address, an IPv6 range only never its first: a ClusterIP
// there is in no ServiceCIDR.
func TestInventoryLeavesOutTheNetworkAndBroadcastAddresses(t *testing.T) {
	s := &servicecidr.Snapshot{ServiceCIDRs: []servicecidr.ServiceCIDR{{Name: "v4", CIDRs: []netip.Prefix{pfx("10.96.0.0/15")}},
		{Name: "v6", CIDRs: []netip.Prefix{pfx("fd00:96::/108")}}}}
	for i, ip := range []string{"10.96.0.0", "10.96.0.1", "10.97.255.254", "10.97.255.255", "fd00:96::", "fd00:96::1", "fd00:96::f:ffff"} {
		svc := verifyService("a", "s"+string(rune('0'+i)), nil, ip)
		s.Services = append(s.Services, svc)
	}
	inv := servicecidr.BuildInventory(s)
	assert.Equal(t, []string{"a/s0=10.96.0.0", "a/s3=10.97.255.255", "a/s4=fd00:96::"}, inv.OutOfRange)
	require.Len(t, inv.ServiceCIDRs, 2)
	assert.Equal(t, 2, inv.ServiceCIDRs[0].ClusterIPs)
	assert.Equal(t, 2, inv.ServiceCIDRs[1].ClusterIPs)
}

// TestInventoryBroadcastAddressOfAWideRange: the broadcast address is found
// for a range wider than /8 too (its host part reaches the first byte).
func TestInventoryBroadcastAddressOfAWideRange(t *testing.T) {
	s := &servicecidr.Snapshot{ServiceCIDRs: []servicecidr.ServiceCIDR{{Name: "wide", CIDRs: []netip.Prefix{pfx("10.0.0.0/7")}}},
		Services: []corev1.Service{verifyService("a", "last", nil, "11.255.255.255"), verifyService("a", "before", nil, "11.255.255.254")}}
	inv := servicecidr.BuildInventory(s)
	assert.Equal(t, []string{"a/last=11.255.255.255"}, inv.OutOfRange)
}

// TestInventoryKeepsTheListOrderOfEqualServiceCIDRs: ServiceCIDRs holding an
// address through the same prefix are listed in the order the API server
// lists them (by name), and the address is counted for the first.
func TestInventoryKeepsTheListOrderOfEqualServiceCIDRs(t *testing.T) {
	s := &servicecidr.Snapshot{
		ServiceCIDRs: []servicecidr.ServiceCIDR{{Name: "a", CIDRs: []netip.Prefix{pfx("10.96.0.0/16")}},
			{Name: "b", CIDRs: []netip.Prefix{pfx("10.96.0.0/16")}}, {Name: "c", CIDRs: []netip.Prefix{pfx("10.96.0.0/16")}}},
		Services: []corev1.Service{verifyService("a", "web", nil, "10.96.0.7")},
	}
	inv := servicecidr.BuildInventory(s)
	require.Len(t, inv.Services, 1)
	assert.Equal(t, []string{"a", "b", "c"}, inv.Services[0].IPs[0].ServiceCIDRs)
	require.Len(t, inv.ServiceCIDRs, 3)
	assert.Equal(t, []int{1, 0, 0}, []int{inv.ServiceCIDRs[0].ClusterIPs, inv.ServiceCIDRs[1].ClusterIPs, inv.ServiceCIDRs[2].ClusterIPs})
}

// TestDeletionReportSummary: the summary names the holders (the first 20,
// then how many more), counts only addresses the Service allocator manages
// (or that carry no manager label), gives the finalizer hint only when
// nothing holds a Terminating ServiceCIDR, and quotes its Ready condition.
func TestDeletionReportSummary(t *testing.T) {
	deleted := time.Now()
	ref := func(name string) servicecidr.ParentRef {
		return servicecidr.ParentRef{Resource: "services", Namespace: "a", Name: name}
	}
	snap := func(ips ...servicecidr.IPAddress) *servicecidr.Snapshot {
		return &servicecidr.Snapshot{IPAddressVersion: servicecidr.V1, IPAddresses: ips,
			ServiceCIDRs: []servicecidr.ServiceCIDR{{Name: "old", CIDRs: []netip.Prefix{pfx("10.96.0.0/16")}, DeletionTimestamp: &deleted,
				Ready: &servicecidr.Condition{Status: metav1.ConditionFalse, Reason: "Terminating", Message: "There are still IPAddresses referencing the ServiceCIDR"}}}}
	}
	const head = "ServiceCIDR old (10.96.0.0/16) is Terminating"
	const ready = " (condition Ready=False Terminating: There are still IPAddresses referencing the ServiceCIDR)"
	const recreate = ". Recreate those Services with ClusterIPs in another ServiceCIDR; default/kubernetes moves only after every kube-apiserver runs with the new --service-cluster-ip-range and the Service is deleted"

	t.Run("holders", func(t *testing.T) {
		rep := servicecidr.BuildDeletionReport(snap(
			servicecidr.IPAddress{IP: netip.MustParseAddr("10.96.0.7"), ParentRef: ref("web"), ManagedBy: servicecidr.ManagedByAllocator},
			servicecidr.IPAddress{IP: netip.MustParseAddr("10.96.0.8"), ParentRef: ref("api")},
			servicecidr.IPAddress{IP: netip.MustParseAddr("10.96.0.9"), ParentRef: ref("ext"), ManagedBy: "example.com/other"},
		), "old")
		assert.Equal(t, head+"; 2 address(es) depend only on it, found through IPAddress objects (networking.k8s.io/v1): "+
			"10.96.0.7 (services/a/web), 10.96.0.8 (services/a/api)"+recreate+ready, rep.Summary)
	})
	t.Run("more than 20 holders", func(t *testing.T) {
		var ips []servicecidr.IPAddress
		for i := 1; i <= 22; i++ {
			ips = append(ips, servicecidr.IPAddress{IP: netip.AddrFrom4([4]byte{10, 96, 0, byte(i)}), ParentRef: ref(fmt.Sprintf("s%d", i))})
		}
		rep := servicecidr.BuildDeletionReport(snap(ips...), "old")
		assert.Contains(t, rep.Summary, "; 22 address(es) depend only on it")
		assert.Contains(t, rep.Summary, ", 10.96.0.20 (services/a/s20), and 2 more"+recreate)
		assert.NotContains(t, rep.Summary, "10.96.0.21")
	})
	t.Run("no holder", func(t *testing.T) {
		rep := servicecidr.BuildDeletionReport(snap(), "old")
		assert.Equal(t, head+"; no address depends on it; kube-controller-manager's service-cidr-controller removes the finalizer "+servicecidr.Finalizer+
			" about 10 s after deletion: if it stays, check that kube-controller-manager runs (and before 1.33 has --feature-gates=MultiCIDRServiceAllocator=true)"+ready, rep.Summary)
	})
	t.Run("no Ready condition", func(t *testing.T) {
		s := snap()
		s.ServiceCIDRs[0].Ready = nil
		rep := servicecidr.BuildDeletionReport(s, "old")
		assert.NotContains(t, rep.Summary, "condition Ready")
	})
}
