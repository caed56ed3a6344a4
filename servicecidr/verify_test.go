package servicecidr_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/servicecidr"
)

// verifyService is a Service with ClusterIPs ips (one per family).
func verifyService(ns, name string, labels map[string]string, ips ...string) corev1.Service {
	s := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
	if len(ips) > 0 {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips
	}
	return s
}

// movedSnapshot is story 3 after the move: the new ServiceCIDR Ready, the
// old one still there, default/kubernetes at the first new address, and
// svcs.
func movedSnapshot(svcs ...corev1.Service) *servicecidr.Snapshot {
	ready := &servicecidr.Condition{Status: metav1.ConditionTrue}
	return &servicecidr.Snapshot{
		ServiceCIDRs: []servicecidr.ServiceCIDR{
			{Name: "kubernetes", CIDRs: []netip.Prefix{pfx("100.64.0.0/13")}, Ready: ready},
			{Name: "new", CIDRs: story3To, Ready: ready},
		},
		Services: append([]corev1.Service{verifyService("default", "kubernetes", nil, "172.24.0.1")}, svcs...),
	}
}

// findingMessages returns the messages of the findings of severity sev about object.
func findingMessages(v *servicecidr.Verification, sev servicecidr.Severity, object string) []string {
	var out []string
	for _, f := range v.Findings {
		if f.Severity == sev && f.Object == object {
			out = append(out, f.Message)
		}
	}
	return out
}

// TestVerifyChecksTheAddressOfTheDNSService: the DNS Service, named or found
// by its k8s-app=kube-dns label (the first one with a ClusterIP), must have
// the expected addresses; a Service of the same name in another namespace,
// or of another name, is not it; without expected addresses nothing is
// checked.
func TestVerifyChecksTheAddressOfTheDNSService(t *testing.T) {
	dnsLabel := map[string]string{servicecidr.DNSLabelKey: servicecidr.DNSLabelValue}
	wrong := []string{"the DNS Service has 172.24.0.99, expected 172.24.0.10 (kubelet clusterDNS must match it)"}
	for _, tc := range []struct {
		name     string
		svcs     []corev1.Service
		opts     servicecidr.VerifyOptions
		object   string
		want     []string
		okResult bool
	}{
		{name: "default name, expected address", okResult: true,
			svcs: []corev1.Service{verifyService("kube-system", "kube-dns", nil, "172.24.0.10")},
			opts: servicecidr.VerifyOptions{DNSIPs: addrs("172.24.0.10")}, object: "services/kube-system/kube-dns"},
		{name: "default name, wrong address",
			svcs: []corev1.Service{verifyService("other", "kube-dns", nil, "172.24.0.10"), verifyService("kube-system", "coredns", nil, "172.24.0.10"),
				verifyService("kube-system", "kube-dns", nil, "172.24.0.99")},
			opts: servicecidr.VerifyOptions{DNSIPs: addrs("172.24.0.10")}, object: "services/kube-system/kube-dns", want: wrong},
		{name: "named, wrong address",
			svcs: []corev1.Service{verifyService("dns", "coredns", nil, "172.24.0.99")},
			opts: servicecidr.VerifyOptions{DNSService: "dns/coredns", DNSIPs: addrs("172.24.0.10")}, object: "services/dns/coredns", want: wrong},
		{name: "no expected address", okResult: true,
			svcs:   []corev1.Service{verifyService("kube-system", "kube-dns", nil, "172.24.0.99")},
			object: "services/kube-system/kube-dns"},
		{name: "found by its label, after a headless one",
			svcs: []corev1.Service{verifyService("kube-system", "a-unlabelled", nil, "172.24.0.10"), verifyService("kube-system", "coredns-headless", dnsLabel, "None"),
				verifyService("kube-system", "coredns", dnsLabel, "172.24.0.99")},
			opts: servicecidr.VerifyOptions{DNSIPs: addrs("172.24.0.10")}, object: "services/kube-system/coredns", want: wrong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.To = story3To
			v, err := servicecidr.VerifySnapshot(movedSnapshot(tc.svcs...), o)
			require.NoError(t, err)
			assert.Equal(t, tc.want, findingMessages(v, servicecidr.SeverityError, tc.object), "%+v", v.Findings)
			assert.Equal(t, tc.okResult, v.OK, "%+v", v.Findings)
		})
	}
}

// TestVerifyWarnsAboutClusterIPsWithoutTheirIPAddress: where the IPAddress
// API is served, a ClusterIP whose IPAddress object is missing or names
// another Service is reported; where it is not served, nothing is.
func TestVerifyWarnsAboutClusterIPsWithoutTheirIPAddress(t *testing.T) {
	const untracked = "ClusterIP 172.24.3.7 has no IPAddress object naming this Service (the allocator's repair loop fixes this)"
	ref := func(ns, name string) servicecidr.ParentRef {
		return servicecidr.ParentRef{Resource: "services", Namespace: ns, Name: name}
	}
	kube := servicecidr.IPAddress{IP: netip.MustParseAddr("172.24.0.1"), ParentRef: ref("default", "kubernetes")}
	for _, tc := range []struct {
		name string
		ips  []servicecidr.IPAddress // nil: the API is not served
		want []string
	}{
		{name: "not served"},
		{name: "tracked", ips: []servicecidr.IPAddress{kube, {IP: netip.MustParseAddr("172.24.3.7"), ParentRef: ref("shop", "web")}}},
		{name: "missing", ips: []servicecidr.IPAddress{kube}, want: []string{untracked}},
		{name: "another namespace", ips: []servicecidr.IPAddress{kube, {IP: netip.MustParseAddr("172.24.3.7"), ParentRef: ref("other", "web")}}, want: []string{untracked}},
		{name: "another name", ips: []servicecidr.IPAddress{kube, {IP: netip.MustParseAddr("172.24.3.7"), ParentRef: ref("shop", "api")}}, want: []string{untracked}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := movedSnapshot(verifyService("shop", "web", nil, "172.24.3.7"))
			s.IPAddresses = tc.ips
			v, err := servicecidr.VerifySnapshot(s, servicecidr.VerifyOptions{To: story3To})
			require.NoError(t, err)
			assert.Equal(t, tc.want, findingMessages(v, servicecidr.SeverityWarning, "services/shop/web"))
			assert.Empty(t, findingMessages(v, servicecidr.SeverityWarning, "services/default/kubernetes"))
		})
	}
}

// TestVerifyMissingDefaultKubernetesNamesWhereItIsExpected: the finding
// names the first address of the new range, and of both families' ranges
// for a dual-stack move (kube-apiserver's primary range decides which).
func TestVerifyMissingDefaultKubernetesNamesWhereItIsExpected(t *testing.T) {
	ready := &servicecidr.Condition{Status: metav1.ConditionTrue}
	for _, tc := range []struct {
		name string
		to   []netip.Prefix
		want string
	}{
		{"single-stack", story3To, "expected at 172.24.0.1 (the first address of 172.24.0.0/15);"},
		{"dual-stack", []netip.Prefix{pfx("172.24.0.0/15"), pfx("fd00:24::/108")},
			"expected at 172.24.0.1 or fd00:24::1 (the first address of kube-apiserver's primary range, 172.24.0.0/15,fd00:24::/108);"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &servicecidr.Snapshot{ServiceCIDRs: []servicecidr.ServiceCIDR{{Name: "new", CIDRs: tc.to, Ready: ready}}}
			v, err := servicecidr.VerifySnapshot(s, servicecidr.VerifyOptions{To: tc.to})
			require.NoError(t, err)
			msgs := findingMessages(v, servicecidr.SeverityError, "services/default/kubernetes")
			require.Len(t, msgs, 1)
			assert.Contains(t, msgs[0], "Service default/kubernetes does not exist: kube-apiserver recreates it from its --service-cluster-ip-range within seconds, "+tc.want)
		})
	}
}

// TestVerifyReportsTheOldServiceCIDRs: a ServiceCIDR inside From is reported
// (still there, or Terminating and what holds it); none is without From,
// nor one outside From, nor one without CIDRs.
func TestVerifyReportsTheOldServiceCIDRs(t *testing.T) {
	for _, tc := range []struct {
		name string
		from []netip.Prefix
		want []string
	}{
		{"from given", []netip.Prefix{pfx("100.64.0.0/13")},
			[]string{"old ServiceCIDR kubernetes (100.64.0.0/13) still exists and can hand out addresses; delete it once nothing needs the old range"}},
		{"no from", nil, nil},
		{"another from", []netip.Prefix{pfx("10.96.0.0/12")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := movedSnapshot()
			s.ServiceCIDRs = append(s.ServiceCIDRs, servicecidr.ServiceCIDR{Name: "empty"})
			v, err := servicecidr.VerifySnapshot(s, servicecidr.VerifyOptions{To: story3To, From: tc.from})
			require.NoError(t, err)
			var got []string
			for _, f := range v.Findings {
				if f.Severity == servicecidr.SeverityInfo {
					got = append(got, f.Object+": "+f.Message)
				}
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, "servicecidrs/kubernetes: "+w)
			}
			assert.Equal(t, want, got)
			assert.True(t, v.OK, "%+v", v.Findings)
		})
	}
}
