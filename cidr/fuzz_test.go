package cidr

import (
	"errors"
	"net/netip"
	"testing"
)

// The fuzz targets check invariants that must hold for any input: no panic,
// errors are typed, accepted values are canonical and round-trip.

func FuzzParse(f *testing.F) {
	for _, s := range []string{"10.244.0.0/16", "10.233.64.1/16", "fd00::/64", "::ffff:1.2.3.4/128", "fe80::/64%eth0", "", "010.1.0.0/16", "1.2.3.4/033", "0.0.0.0/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) error %v is not a *ParseError", s, err)
			}
			if errors.Is(err, ErrHostBitsSet) && pe.Canonical != pe.Canonical.Masked() {
				t.Fatalf("canonical %s is not canonical", pe.Canonical)
			}
			_ = err.Error()
			return
		}
		if p != p.Masked() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			t.Fatalf("Parse(%q) = %s, not canonical", s, p)
		}
		back, err := Parse(p.String())
		if err != nil || back != p {
			t.Fatalf("round trip of %s: %v %v", p, back, err)
		}
		lp, _, err := ParseLenient(s)
		if err != nil || lp != p {
			t.Fatalf("lenient disagrees on %q: %s %v", s, lp, err)
		}
	})
}

func FuzzParseLenient(f *testing.F) {
	for _, s := range []string{"10.244.0.0/12", "010.001.0.0/16", "1.2.3.4/32", "fd00::1/64", "999.1.1.1/8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, w, err := ParseLenient(s)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("ParseLenient(%q) error %v is not a *ParseError", s, err)
			}
			return
		}
		if p != p.Masked() {
			t.Fatalf("not canonical: %s", p)
		}
		if w != nil && w.Canonical != p {
			t.Fatalf("warning canonical %s != %s", w.Canonical, p)
		}
	})
}

func FuzzParseList(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8,fd00::/48", "10.0.0.0/8,10.1.0.0/16", "a,b,c", ","} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParseList(s)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("ParseList(%q) error %v is not a *ParseError", s, err)
			}
			return
		}
		if len(ps) == 0 || len(ps) > 2 || (len(ps) == 2 && FamilyOf(ps[0]) == FamilyOf(ps[1])) {
			t.Fatalf("ParseList(%q) = %v", s, ps)
		}
	})
}

func FuzzPreflight(f *testing.F) {
	f.Add("10.20.0.0/16", 24, "10.10.2.0/24")
	f.Add("10.0.0.0/16,fd00::/48", 0, "fd00::/64")
	f.Add("garbage", -5, "")
	f.Fuzz(func(t *testing.T, cluster string, mask int, podCIDR string) {
		res := ControllerManagerPreflight(ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: cluster, NodeCIDRMaskSize: mask},
			[]NodePodCIDRs{{Name: "n", PodCIDRs: []string{podCIDR}}})
		if res.WouldStart && (len(res.FlagErrors) > 0 || len(res.Crashes) > 0) {
			t.Fatalf("inconsistent result %+v", res)
		}
		if !res.WouldStart && len(res.FlagErrors) == 0 && len(res.Crashes) == 0 {
			t.Fatalf("refused without a reason: %+v", res)
		}
	})
}

func FuzzRebase(f *testing.F) {
	f.Add("10.10.1.0/24", "10.10.0.0/18", "10.20.0.0/16")
	f.Add("fd00::/64", "fd00::/48", "fd01::/56")
	f.Fuzz(func(t *testing.T, s, from, to string) {
		p, err1 := netip.ParsePrefix(s)
		fp, err2 := netip.ParsePrefix(from)
		tp, err3 := netip.ParsePrefix(to)
		if err1 != nil || err2 != nil || err3 != nil {
			return
		}
		got, err := Rebase(p, fp, tp)
		if err != nil {
			return
		}
		if !ContainsPrefix(tp, got) || got.Bits() != p.Bits() {
			t.Fatalf("Rebase(%s, %s, %s) = %s outside the new range", p, fp, tp, got)
		}
	})
}
