package servicecidr_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// FuzzApplyPlan: a plan file is untrusted. Random plan bytes go through the
// decoder and Apply (with --delete-old) against a fresh fake cluster that
// records every write. A plan is either refused before the first write, or
// valid and applied completely: every planned Service holds its planned
// addresses, the target ServiceCIDR exists and holds To, and no two Services
// share an address. It is never half-applied. Seeds: the story-3 plan
// (testdata/fuzz/FuzzApplyPlan holds it and edited variants).
func FuzzApplyPlan(f *testing.F) {
	_, c := newStory3(f, "v1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(f, err)
	data, err := p.Marshal()
	require.NoError(f, err)
	f.Add(data)
	f.Add([]byte("apiVersion: cidrshift.io/v1alpha1\nkind: ServiceMovePlan\nfrom: [100.64.0.0/13]\nto: [172.24.0.0/15]\nallocate: offset\ntarget: {name: t, cidrs: [172.24.0.0/15]}\nmoves: []\nmanual: []\n"))
	f.Add([]byte("apiVersion: cidrshift.io/v1alpha1\nkind: ServiceMovePlan\nfrom: [10.200.0.0/16]\nto: [172.24.0.0/15]\nallocate: offset\ntarget: {name: t, cidrs: [172.24.0.0/15]}\nmoves: []\nmanual: []\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cl := servicecidrtest.MustNew(story3Options("v1"))
		p, err := servicecidr.ParsePlan(data)
		if err != nil {
			if !errors.Is(err, servicecidr.ErrPlanFormat) {
				t.Fatalf("a refused plan must be ErrPlanFormat: %v", err)
			}
			return
		}
		c := connect(t, cl)
		opts := fastApply(t.TempDir())
		opts.DeleteOld = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = c.Apply(ctx, p, opts)
		if ctx.Err() != nil {
			t.Fatalf("Apply did not finish within 5s on the fake cluster (writes %v): %v", cl.Writes(), err)
		}
		writes := cl.Writes()
		if err != nil {
			if len(writes) > 0 {
				t.Fatalf("half-applied: Apply failed after %d write(s) %v: %v", len(writes), writes, err)
			}
			return
		}
		sc, ok := cl.ServiceCIDR(p.Target.Name)
		if !ok {
			t.Fatalf("applied, but the target ServiceCIDR %s does not exist", p.Target.Name)
		}
		for _, q := range p.To {
			if !slices.Contains(sc.CIDRs, q.String()) {
				t.Fatalf("target ServiceCIDR %s holds %v, not %s", sc.Name, sc.CIDRs, q)
			}
		}
		for _, m := range p.Moves {
			svc, ok := cl.Service(m.Namespace, m.Name)
			if !ok {
				t.Fatalf("applied, but Service %s is gone", m.Key())
			}
			got := servicecidr.ClusterIPs(svc)
			if !slices.Equal(got, m.NewIPs) {
				t.Fatalf("applied, but Service %s has %v, the plan says %v", m.Key(), got, m.NewIPs)
			}
			for _, ip := range got {
				inTo := false
				for _, q := range p.To {
					inTo = inTo || q.Contains(ip)
				}
				if !inTo && slices.ContainsFunc(p.From, func(f netip.Prefix) bool { return f.Contains(ip) }) {
					t.Fatalf("Service %s left at %s in the old range", m.Key(), ip)
				}
			}
		}
		// Applied means the move is done but for what the flag change and
		// the load balancers leave: every other ClusterIP lies in To.
		for _, s := range cl.Services() {
			if s.Spec.Type == corev1.ServiceTypeLoadBalancer || (s.Namespace == "default" && s.Name == "kubernetes") {
				continue
			}
			for _, ip := range servicecidr.ClusterIPs(&s) {
				if !slices.ContainsFunc(p.To, func(q netip.Prefix) bool { return q.Contains(ip) }) {
					t.Fatalf("applied, but Service %s/%s is still at %s, outside to %v", s.Namespace, s.Name, ip, p.To)
				}
			}
		}
		owner := map[string]string{}
		for _, s := range cl.Services() {
			for _, ip := range servicecidr.ClusterIPs(&s) {
				if o, dup := owner[ip.String()]; dup {
					t.Fatalf("Services %s and %s/%s share %s", o, s.Namespace, s.Name, ip)
				}
				owner[ip.String()] = s.Namespace + "/" + s.Name
			}
		}
	})
}
