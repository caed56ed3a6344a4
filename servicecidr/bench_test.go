package servicecidr_test

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/servicecidr"
)

// bigSnapshot is a cluster with n ClusterIP Services spread over
// 100.64.0.0/13, every one tracked by an IPAddress object.
func bigSnapshot(b *testing.B, n int) *servicecidr.Snapshot {
	b.Helper()
	from := pfx("100.64.0.0/13")
	s := &servicecidr.Snapshot{
		Server: servicecidr.ServerInfo{GitVersion: "v1.36.3", Minor: 36}, APIVersion: servicecidr.V1, IPAddressVersion: servicecidr.V1,
		ServiceCIDRs: []servicecidr.ServiceCIDR{{Name: "kubernetes", CIDRs: []netip.Prefix{from}, UID: "sc"}},
		IPAddresses:  []servicecidr.IPAddress{},
	}
	add := func(ns, name string, idx uint64) {
		ip, err := cidr.NthAddr(from, idx)
		if err != nil {
			b.Fatal(err)
		}
		s.Services = append(s.Services, corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1", Labels: map[string]string{"app": name}},
			Spec: corev1.ServiceSpec{ClusterIP: ip.String(), ClusterIPs: []string{ip.String()}, Type: corev1.ServiceTypeClusterIP,
				Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}})
		s.IPAddresses = append(s.IPAddresses, servicecidr.IPAddress{IP: ip, ManagedBy: servicecidr.ManagedByAllocator,
			ParentRef: servicecidr.ParentRef{Resource: "services", Namespace: ns, Name: name}})
	}
	add("default", "kubernetes", 1)
	add("kube-system", "kube-dns", 10)
	for i := range n - 2 {
		add(fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("svc-%d", i), uint64(100+i*37))
	}
	return s
}

func BenchmarkBuildPlan5000(b *testing.B) {
	s := bigSnapshot(b, 5000)
	for _, mode := range []servicecidr.AllocateMode{servicecidr.AllocateOffset, servicecidr.AllocateFree} {
		b.Run(string(mode), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, err := servicecidr.BuildPlan(s, servicecidr.PlanOptions{To: story3To, Allocate: mode})
				if err != nil {
					b.Fatal(err)
				}
				if len(p.Moves) != 4999 {
					b.Fatalf("%d moves", len(p.Moves))
				}
			}
		})
	}
}

func BenchmarkVerify5000(b *testing.B) {
	s := bigSnapshot(b, 5000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := servicecidr.VerifySnapshot(s, servicecidr.VerifyOptions{To: story3To}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshalPlan5000(b *testing.B) {
	p, err := servicecidr.BuildPlan(bigSnapshot(b, 5000), servicecidr.PlanOptions{To: story3To})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		data, err := p.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := servicecidr.ParsePlan(data); err != nil {
			b.Fatal(err)
		}
	}
}
