package servicecidr_test

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/version"

	"github.com/cidrshift/cidrshift/servicecidr"
)

// FuzzParsePlan: a plan file is outside input. Whatever it holds, ParsePlan
// must not panic, and a plan it accepts must pass Check and survive a round trip.
func FuzzParsePlan(f *testing.F) {
	f.Add([]byte("apiVersion: cidrshift.io/v1alpha1\nkind: ServiceMovePlan\nfrom: [100.64.0.0/13]\nto: [172.24.0.0/15]\nallocate: offset\ntarget: {name: new, cidrs: [172.24.0.0/15]}\nmoves: []\nmanual: []\n"))
	f.Add([]byte(`{"apiVersion":"cidrshift.io/v1alpha1","kind":"ServiceMovePlan","from":["10.96.0.0/12"],"to":["10.128.0.0/16"],"allocate":"free","target":{"name":"t","cidrs":["10.128.0.0/16"]},"moves":[{"namespace":"a","name":"b","uid":"u","resourceVersion":"1","oldIPs":["10.96.0.5"],"newIPs":["10.128.0.5"]}],"manual":[]}`))
	f.Add([]byte("moves: [{oldIPs: [\"::1\"], newIPs: [\"1.2.3.4\"]}]"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := servicecidr.ParsePlan(data)
		if err != nil {
			return
		}
		if err := p.Check(); err != nil {
			t.Fatalf("accepted a plan that fails Check: %v", err)
		}
		out, err := p.Marshal()
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		if _, err := servicecidr.ParsePlan(out); err != nil {
			t.Fatalf("round trip refused: %v\n%s", err, out)
		}
	})
}

// FuzzFromUnstructured: a v1alpha1 ServiceCIDR comes from the server as
// arbitrary JSON. Conversion must never panic, and what it accepts is valid.
func FuzzFromUnstructured(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"networking.k8s.io/v1alpha1","kind":"ServiceCIDR","metadata":{"name":"kubernetes","uid":"u","deletionTimestamp":"2024-05-01T10:00:00Z","finalizers":["networking.k8s.io/service-cidr-finalizer"]},"spec":{"cidrs":["100.64.0.0/13"]},"status":{"conditions":[{"type":"Ready","status":"False","reason":"Terminating"}]}}`))
	f.Add([]byte(`{"spec":{"cidrs":"10.0.0.0/8"}}`))
	f.Add([]byte(`{"spec":{"cidrs":["10.0.0.1/8", 7]},"status":{"conditions":[3,{"type":1}]}}`))
	f.Add([]byte(`{"metadata":{"deletionTimestamp":"yesterday"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj map[string]any
		if json.Unmarshal(data, &obj) != nil {
			return
		}
		sc, err := servicecidr.FromUnstructured(&unstructured.Unstructured{Object: obj})
		if err != nil {
			return
		}
		for _, p := range sc.CIDRs {
			if !p.IsValid() || p != p.Masked() {
				t.Fatalf("accepted a non-canonical prefix %v", p)
			}
		}
		back := servicecidr.ToUnstructured(sc, servicecidr.V1alpha1)
		if _, err := servicecidr.FromUnstructured(back); err != nil {
			t.Fatalf("round trip refused: %v", err)
		}
	})
}

// FuzzValidate: --to and --from are typed by users.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{"172.24.0.0/15", "100.64.0.0/13", "10.233.64.1/16", "fd00::/48", "10.0.0.0/8,fd00:1::/108", "0.0.0.0/0", "::/0", "1.2.3.4/32", ",", "10.0.0.0/16,10.1.0.0/16"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := servicecidr.ParseCIDRs("--to", s)
		if err != nil {
			return
		}
		if err := servicecidr.ValidateCIDRs("--to", ps); err != nil {
			t.Fatalf("ParseCIDRs accepted %q but ValidateCIDRs refuses: %v", s, err)
		}
		_, _ = servicecidr.Validate(ps, servicecidr.ValidateOptions{ForFlag: true})
	})
}

// FuzzParseServerVersion: discovery answers from providers vary.
func FuzzParseServerVersion(f *testing.F) {
	f.Add("1", "33+", "v1.33.4-gke.100")
	f.Add("", "", "v1.29.2-eks-1234")
	f.Add("1", "999999999999999999999", "v1.999999999999999999.0")
	f.Fuzz(func(t *testing.T, major, minor, git string) {
		got := servicecidr.ParseServerVersion(&version.Info{Major: major, Minor: minor, GitVersion: git})
		if got.Minor < 0 || got.Minor > 9999 {
			t.Fatalf("minor %d out of range", got.Minor)
		}
		_ = servicecidr.Advice(got.Minor)
	})
}
