package calico_test

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/cidrshift/cidrshift/calico"
)

// Objects read from the cluster are outside input: IPPools (written to the
// v1 CRDs without Calico's validation), IPAMBlocks, BlockAffinities and pod
// IPs. None may panic the parsers, and what parses must validate and size
// without panicking.

func FuzzPoolFromUnstructured(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"p"},"spec":{"cidr":"10.233.64.0/18","blockSize":24,"ipipMode":"Always","natOutgoing":true,"allowedUses":["Workload","Tunnel"]}}`))
	f.Add([]byte(`{"metadata":{"name":"p"},"spec":{"cidr":"10.233.64.1/16","blockSize":1e9}}`))
	f.Add([]byte(`{"spec":{"cidr":"fd00::/127","blockSize":-3,"vxlanMode":"Always","ipipMode":"Always"}}`))
	f.Add([]byte(`{"spec":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj map[string]any
		if json.Unmarshal(data, &obj) != nil {
			return
		}
		p, err := calico.PoolFromUnstructured(obj)
		if err != nil {
			if len(calico.FieldErrors(err)) == 0 {
				t.Fatalf("error without a FieldError: %v", err)
			}
			return
		}
		_ = calico.Validate(p)
		_ = calico.ValidateNewPool(p, calico.Environment{Pools: []calico.IPPool{p}, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
		if c, err := calico.PoolCapacity(p, calico.CapacityOptions{}); err == nil && c.Blocks.Sign() < 0 {
			t.Fatalf("negative block count for %+v", p.Spec)
		}
	})
}

func FuzzBlockFromUnstructured(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"b"},"spec":{"cidr":"10.233.64.0/30","affinity":"host:node-a","allocations":[0,null,1,null],"attributes":[{"handle_id":"k8s-pod-network.x","secondary":{"pod":"p","namespace":"n"}},{"handle_id":"ipip-tunnel-addr-node-a"}],"unallocated":[1,3]}}`))
	f.Add([]byte(`{"spec":{"cidr":"fd00::/126","allocations":[5],"attributes":[]}}`))
	f.Add([]byte(`{"spec":{"cidr":"10.0.0.0/0","allocations":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"attributes":[{}]}}`))
	f.Add([]byte(`{"spec":{"cidr":"10.233.64.0/26","node":"n","state":"confirmed","deleted":"true"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj map[string]any
		if json.Unmarshal(data, &obj) != nil {
			return
		}
		if b, err := calico.BlockFromUnstructured(obj); err == nil {
			for _, a := range b.Allocations {
				if !b.CIDR.Contains(a.IP) {
					t.Fatalf("allocation %s outside block %s", a.IP, b.CIDR)
				}
			}
		}
		_, _ = calico.AffinityFromUnstructured(obj)
	})
}

func FuzzPodIPsIn(f *testing.F) {
	f.Add("10.233.64.5", "10.233.64.5,fd00::5", "10.233.64.0/18")
	f.Add("", "::ffff:10.233.64.7, fe80::1%eth0", "10.233.64.0/18")
	f.Add("300.1.1.1", "", "fd00::/8")
	f.Fuzz(func(t *testing.T, podIP, ips, prefix string) {
		p, err := netip.ParsePrefix(prefix)
		if err != nil {
			return
		}
		p = p.Masked()
		in, _ := calico.PodIPsIn(podIP, strings.Split(ips, ","), p)
		for _, a := range in {
			if !p.Contains(a) {
				t.Fatalf("%s reported inside %s", a, p)
			}
		}
	})
}

func FuzzValidate(f *testing.F) {
	f.Add("10.20.0.0/16", 26, "Always", "Never", false, "Workload")
	f.Add("10.233.64.1/16", 0, "", "", true, "")
	f.Add("fe80::/64", 130, "CrossSubnet", "Always", false, "LoadBalancer,Tunnel")
	f.Fuzz(func(t *testing.T, c string, bs int, ipip, vxlan string, disabled bool, uses string) {
		p := calico.IPPool{Name: "fuzz", Spec: calico.PoolSpec{CIDR: c, BlockSize: bs, IPIPMode: calico.EncapMode(ipip),
			VXLANMode: calico.EncapMode(vxlan), Disabled: disabled}}
		for _, u := range strings.Split(uses, ",") {
			if u != "" {
				p.Spec.AllowedUses = append(p.Spec.AllowedUses, calico.AllowedUse(u))
			}
		}
		err := calico.Validate(p)
		for _, fe := range calico.FieldErrors(err) {
			if fe.Field == "" || fe.Reason == "" {
				t.Fatalf("unnamed error: %#v", fe)
			}
		}
		if err == nil {
			if _, cerr := calico.PoolCapacity(p, calico.CapacityOptions{}); cerr != nil {
				t.Fatalf("valid pool %+v has no capacity: %v", p.Spec, cerr)
			}
		}
	})
}
