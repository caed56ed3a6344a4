package flannel

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"testing"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/.

// FuzzParseSubnetKey: never panics; a parsed key renders to a name that
// parses back to the same subnets.
func FuzzParseSubnetKey(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseSubnetKey(s)
		if err != nil {
			return
		}
		back, err := ParseSubnetKey(k.String())
		if err != nil {
			t.Fatalf("%q parsed to %v whose name %q does not parse: %v", s, k, k.String(), err)
		}
		if back != k {
			t.Fatalf("%q: %v round-trips to %v", s, k, back)
		}
		if !back.Canonical(k.String()) && k.IPv4.Masked() == k.IPv4 && (!k.IPv6.IsValid() || k.IPv6.Masked() == k.IPv6) {
			t.Fatalf("%q: rendered name %q is not canonical", s, k.String())
		}
	})
}

// FuzzParseLeaseAttrs: never panics; accepted values have an IPv4 PublicIP (or none).
func FuzzParseLeaseAttrs(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseLeaseAttrs(b)
		if err != nil {
			return
		}
		if a.PublicIP.IsValid() && !a.PublicIP.Is4() {
			t.Fatalf("accepted non-IPv4 PublicIP %v", a.PublicIP)
		}
		if _, err := json.Marshal(a); err != nil {
			t.Fatalf("accepted attrs do not marshal: %v", err)
		}
	})
}

// FuzzParseConfig: never panics, neither does Resolve; a resolved layout is
// consistent; rewriting the network of a parsed config keeps it parseable.
func FuzzParseConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if r, err := c.Resolve(); err == nil {
			for _, l := range []*Layout{r.IPv4, r.IPv6} {
				if l == nil {
					continue
				}
				if !l.Network.Contains(l.SubnetMin) || !l.Network.Contains(l.SubnetMax) || l.Subnets.Sign() < 0 {
					t.Fatalf("inconsistent layout %+v", l)
				}
				if l.Subnets.Sign() > 0 && !l.Compatible(netip.PrefixFrom(l.SubnetMin, l.SubnetLen)) {
					t.Fatalf("SubnetMin is not compatible with its own layout %+v", l)
				}
			}
		}
		out, _, err := SetNetworkText(b, SetNetworkRequest{Network: netip.MustParsePrefix("10.99.0.0/16")}, false)
		if err != nil {
			return
		}
		nc, err := ParseConfig(out)
		if err != nil {
			t.Fatalf("rewritten config does not parse: %v\n%s", err, out)
		}
		if nc.Network != netip.MustParsePrefix("10.99.0.0/16") {
			t.Fatalf("rewritten Network is %v\n%s", nc.Network, out)
		}
	})
}

// FuzzParseSubnetEnv: never panics; Render output parses back to the same value.
func FuzzParseSubnetEnv(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := ParseSubnetEnv(b)
		if err != nil {
			return
		}
		r := e.Render()
		back, err := ParseSubnetEnv(r)
		if err != nil {
			t.Fatalf("rendered file does not parse: %v\n%s", err, r)
		}
		if !bytes.Equal(back.Render(), r) {
			t.Fatalf("render is not stable:\n%s\n---\n%s", r, back.Render())
		}
	})
}
