package servicecidr_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

func moveMap(p *servicecidr.Plan) map[string]string {
	out := map[string]string{}
	for _, m := range p.Moves {
		out[m.Key()] = fmt.Sprint(m.OldIPs) + "->" + fmt.Sprint(m.NewIPs)
	}
	return out
}

func TestPlanStory3(t *testing.T) {
	_, c := newStory3(t, "v1alpha1")
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)

	assert.Equal(t, []netip.Prefix{pfx("100.64.0.0/13")}, p.From, "from defaults to the kubernetes ServiceCIDR")
	assert.Equal(t, servicecidr.V1alpha1, p.ServiceCIDRAPI)
	assert.Equal(t, 29, p.Server.Minor)
	assert.False(t, p.Target.Exists)
	assert.Equal(t, "cidrshift-172-24-0-0-15", p.Target.Name)
	require.Len(t, p.Old, 1)
	assert.Equal(t, "kubernetes", p.Old[0].Name)

	// DNS first, keeping its tenth address; the rest keep their offsets.
	require.NotEmpty(t, p.Moves)
	assert.Equal(t, "kube-system/kube-dns", p.Moves[0].Key())
	assert.Equal(t, "dns", p.Moves[0].Role)
	assert.Equal(t, map[string]string{
		"kube-system/kube-dns": "[100.64.0.10]->[172.24.0.10]",
		"shop/api":             "[100.64.0.200]->[172.24.0.200]",
		"shop/web":             "[100.64.3.7]->[172.24.3.7]",
	}, moveMap(p))
	for _, m := range p.Moves {
		assert.NotEmpty(t, m.UID)
		assert.NotEmpty(t, m.ResourceVersion)
	}
	require.NotNil(t, p.DNS)
	assert.Equal(t, addrs("172.24.0.10"), p.DNS.NewIPs)

	// default/kubernetes is not recreated by us.
	require.NotNil(t, p.Kubernetes)
	assert.Equal(t, addrs("172.24.0.1"), p.Kubernetes.NewIPs)

	skipped := map[string]string{}
	for _, s := range p.Skipped {
		skipped[s.Namespace+"/"+s.Name] = s.Reason
	}
	assert.Contains(t, skipped["shop/ingress"], "external address may change")
	assert.Contains(t, skipped["shop/db"], "headless")
	assert.Contains(t, skipped["shop/payments"], "ExternalName")

	manual := map[string]servicecidr.ManualStep{}
	for _, m := range p.Manual {
		manual[m.Component] = m
	}
	assert.Equal(t, "100.64.0.10", manual["kubelet"].Old)
	assert.Equal(t, "172.24.0.10", manual["kubelet"].New)
	assert.Contains(t, manual["kubelet"].Action, "clusterDNS on every node")
	assert.Equal(t, "172.24.0.0/15", manual["kube-apiserver"].New)
	assert.Contains(t, manual["kube-apiserver"].Action, "--service-cluster-ip-range")
	assert.Contains(t, manual["kube-controller-manager"].Action, "--service-cluster-ip-range")
	assert.Equal(t, "172.24.0.1", manual["kube-apiserver certificate"].New)
	assert.Contains(t, manual["kube-apiserver certificate"].Action, "IP SANs")
	assert.Contains(t, manual["default/kubernetes"].Action, "after every kube-apiserver runs with the new range")
	assert.Contains(t, manual["pods"].Action, "restart the 3 pod(s)")
	assert.Equal(t, []string{"kube-system/cilium-y", "shop/api-1", "shop/web-1"}, p.PodsToRestart, "hostNetwork ClusterFirst and Default pods do not use cluster DNS")
}

func TestPlanRefusesStory3TargetInCGNAT(t *testing.T) {
	_, c := newStory3(t, "v1")
	o := story3PlanOptions()
	o.To = []netip.Prefix{pfx("100.72.0.0/13")}
	_, err := c.Plan(context.Background(), o)
	require.ErrorIs(t, err, servicecidr.ErrConflict)
	assert.ErrorContains(t, err, `--to "100.72.0.0/13": overlaps well-known 100.64.0.0/10 (shared address space / CGNAT, used by Tailscale (RFC 6598))`)
}

func TestPlanRefusesConflictsWithTheCluster(t *testing.T) {
	_, c := newStory3(t, "v1")
	tests := []struct {
		to, want string
	}{
		{"100.96.0.0/16", "overlaps cluster-cidr 100.96.0.0/11 (pod CIDR)"},
		{"172.20.0.0/16", "overlaps node-network 172.20.40.10/32"},
		{"100.64.0.0/12", "the range Services are moving away from"},
	}
	for _, tt := range tests {
		o := story3PlanOptions()
		o.To = []netip.Prefix{pfx(tt.to)}
		o.Validate.AllowWellKnown = true
		_, err := c.Plan(context.Background(), o)
		assert.ErrorIs(t, err, servicecidr.ErrConflict, tt.to)
		assert.ErrorContains(t, err, tt.want, tt.to)
	}
}

func snapshotOf(t *testing.T, cl *servicecidrtest.Cluster) *servicecidr.Snapshot {
	t.Helper()
	s, err := connect(t, cl).Snapshot(context.Background(), servicecidr.SnapshotOptions{Nodes: true, Pods: true})
	require.NoError(t, err)
	return s
}

func TestPlanOffsetFallsBackAndSaysWhy(t *testing.T) {
	o := story3Options("v1")
	taken := story3Services()[3].DeepCopy() // a Service already living in the new range at api's rebased address
	taken.Namespace, taken.Name, taken.Spec.ClusterIP = "other", "squatter", "172.24.0.200"
	o.ServiceCIDRs = append(o.ServiceCIDRs, servicecidrtest.InitialServiceCIDR{Name: "new", CIDRs: []string{"172.24.0.0/15"}})
	o.Services = append(o.Services, taken)
	s := snapshotOf(t, servicecidrtest.MustNew(o))

	p, err := servicecidr.BuildPlan(s, story3PlanOptions())
	require.NoError(t, err)
	assert.True(t, p.Target.Exists, "the existing ServiceCIDR with exactly --to is reused")
	assert.Equal(t, "new", p.Target.Name)
	var api servicecidr.Move
	for _, m := range p.Moves {
		if m.Name == "api" {
			api = m
		}
	}
	assert.Equal(t, addrs("172.24.0.2"), api.NewIPs, "lowest free address, skipping the kubernetes one")
	assert.Equal(t, "172.24.0.200 is already used by services/other/squatter; given free address 172.24.0.2", api.Note)

	// A smaller range: offsets beyond it fall back.
	opts := story3PlanOptions()
	opts.To = []netip.Prefix{pfx("10.200.0.0/24")}
	p, err = servicecidr.BuildPlan(s, opts)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"kube-system/kube-dns": "[100.64.0.10]->[10.200.0.10]",
		"shop/api":             "[100.64.0.200]->[10.200.0.200]",
		"shop/web":             "[100.64.3.7]->[10.200.0.2]",
	}, moveMap(p))
	for _, m := range p.Moves {
		if m.Name == "web" {
			assert.Equal(t, "offset of 100.64.3.7 does not fit in 10.200.0.0/24; given free address 10.200.0.2", m.Note)
		}
	}
}

func TestPlanDNSCannotKeepItsOffset(t *testing.T) {
	o := story3Options("v1")
	taken := story3Services()[3].DeepCopy()
	taken.Namespace, taken.Name, taken.Spec.ClusterIP = "other", "squatter", "172.24.0.10"
	o.ServiceCIDRs = append(o.ServiceCIDRs, servicecidrtest.InitialServiceCIDR{Name: "new", CIDRs: []string{"172.24.0.0/15"}})
	o.Services = append(o.Services, taken)
	p, err := servicecidr.BuildPlan(snapshotOf(t, servicecidrtest.MustNew(o)), story3PlanOptions())
	require.NoError(t, err)
	assert.Equal(t, addrs("172.24.0.2"), p.DNS.NewIPs)
	assert.Contains(t, strings.Join(p.Warnings, "\n"), "the DNS Service kube-system/kube-dns cannot keep its offset (172.24.0.10 is already used by services/other/squatter")
}

func TestPlanFreeAllocation(t *testing.T) {
	s := snapshotOf(t, servicecidrtest.MustNew(story3Options("v1")))
	o := story3PlanOptions()
	o.Allocate = servicecidr.AllocateFree
	o.IncludeLoadBalancers = true
	p, err := servicecidr.BuildPlan(s, o)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"kube-system/kube-dns": "[100.64.0.10]->[172.24.0.10]",
		"shop/api":             "[100.64.0.200]->[172.24.0.2]",
		"shop/ingress":         "[100.64.1.1]->[172.24.0.3]",
		"shop/web":             "[100.64.3.7]->[172.24.0.4]",
	}, moveMap(p), "DNS keeps the tenth address; the others take the lowest free ones")
	for _, sk := range p.Skipped {
		assert.NotEqual(t, "ingress", sk.Name)
	}
}

func TestPlanFindsDNSByLabel(t *testing.T) {
	o := story3Options("v1")
	o.Services = story3Services()
	o.Services[1].Name = "coredns" // not kube-dns, but labelled k8s-app=kube-dns
	p, err := servicecidr.BuildPlan(snapshotOf(t, servicecidrtest.MustNew(o)), story3PlanOptions())
	require.NoError(t, err)
	require.NotNil(t, p.DNS)
	assert.Equal(t, "coredns", p.DNS.Name)
	assert.Equal(t, "kube-system/coredns", p.Moves[0].Key())

	po := story3PlanOptions()
	po.DNSService = "kube-system/missing"
	_, err = servicecidr.BuildPlan(snapshotOf(t, servicecidrtest.MustNew(o)), po)
	// An explicit --dns-service is not guessed, and one that does not exist
	// is an error: a warning would silently drop the kubelet clusterDNS step.
	require.ErrorIs(t, err, servicecidr.ErrInvalid)
	assert.ErrorContains(t, err, `--dns-service "kube-system/missing": does not exist`)
}

func TestPlanDualStack(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "dual"}, Spec: corev1.ServiceSpec{
		ClusterIP: "10.96.0.50", ClusterIPs: []string{"10.96.0.50", "fd00:96::50"}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		IPFamilyPolicy: ptr(corev1.IPFamilyPolicyRequireDualStack), Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	cl := servicecidrtest.MustNew(servicecidrtest.Options{ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"10.96.0.0/16", "fd00:96::/108"}}},
		Services: []*corev1.Service{svc}})
	s := snapshotOf(t, cl)

	p, err := servicecidr.BuildPlan(s, servicecidr.PlanOptions{To: []netip.Prefix{pfx("10.128.0.0/16"), pfx("fd00:128::/108")}})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a/dual": "[10.96.0.50 fd00:96::50]->[10.128.0.50 fd00:128::50]"}, moveMap(p))

	// Moving only the IPv4 range keeps the IPv6 address.
	p, err = servicecidr.BuildPlan(s, servicecidr.PlanOptions{From: []netip.Prefix{pfx("10.96.0.0/16")}, To: []netip.Prefix{pfx("10.128.0.0/16")}})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a/dual": "[10.96.0.50 fd00:96::50]->[10.128.0.50 fd00:96::50]"}, moveMap(p))

	_, err = servicecidr.BuildPlan(s, servicecidr.PlanOptions{To: []netip.Prefix{pfx("10.128.0.0/16")}})
	assert.ErrorContains(t, err, `--to "10.128.0.0/16": has no IPv6 range for the old range fd00:96::/108`)
}

func TestPlanRefusesBadOptions(t *testing.T) {
	s := snapshotOf(t, servicecidrtest.MustNew(story3Options("v1")))
	tests := []struct {
		o    servicecidr.PlanOptions
		want string
	}{
		{servicecidr.PlanOptions{}, "--to: at least one CIDR is required"},
		{servicecidr.PlanOptions{To: story3To, Allocate: "random"}, `--allocate "random": valid values are offset and free`},
		{servicecidr.PlanOptions{To: story3To, DNSService: "kube-dns"}, `--dns-service "kube-dns": want namespace/name`},
		{servicecidr.PlanOptions{To: story3To, ServiceCIDRName: "Bad_Name"}, `ServiceCIDR name "Bad_Name"`},
		{servicecidr.PlanOptions{To: story3To, ServiceCIDRName: "kubernetes"}, `a ServiceCIDR with this name exists with CIDRs 100.64.0.0/13`},
		{servicecidr.PlanOptions{To: []netip.Prefix{pfx("172.24.0.0/30")}}, `--to "172.24.0.0/30": has no free address left`},
	}
	for _, tt := range tests {
		_, err := servicecidr.BuildPlan(s, tt.o)
		assert.ErrorContains(t, err, tt.want)
	}
	noDefault := &servicecidr.Snapshot{}
	_, err := servicecidr.BuildPlan(noDefault, servicecidr.PlanOptions{To: story3To})
	assert.ErrorContains(t, err, `--from: not given and there is no "kubernetes" ServiceCIDR`)
	done := &servicecidr.Snapshot{ServiceCIDRs: []servicecidr.ServiceCIDR{{Name: "kubernetes", CIDRs: story3To}}}
	_, err = servicecidr.BuildPlan(done, servicecidr.PlanOptions{To: story3To})
	assert.ErrorContains(t, err, `--from: not given, and the "kubernetes" ServiceCIDR already has 172.24.0.0/15 (the --to range): nothing to move`)
	_, err = servicecidr.BuildPlan(nil, servicecidr.PlanOptions{To: story3To})
	assert.ErrorIs(t, err, servicecidr.ErrInvalid)
}

func TestPlanWarnsAbout133AndPinnedManifests(t *testing.T) {
	o := story3Options("v1")
	o.GitVersion = "v1.33.4"
	o.Services = story3Services()
	o.Services[3].Annotations[servicecidr.LastAppliedAnnotation] = `{"spec":{"clusterIP":"100.64.0.200"}}`
	p, err := servicecidr.BuildPlan(snapshotOf(t, servicecidrtest.MustNew(o)), story3PlanOptions())
	require.NoError(t, err)
	w := strings.Join(p.Warnings, "\n")
	assert.Contains(t, w, "Kubernetes 1.33 mirrors every ClusterIP into its legacy allocator")
	assert.Contains(t, w, "--feature-gates=DisableAllocatorDualWrite=true together with the new --service-cluster-ip-range")
	assert.Contains(t, w, "Service shop/api: its kubectl last-applied configuration pins clusterIP 100.64.0.200")
	gate := func(p *servicecidr.Plan) bool {
		for _, m := range p.Manual {
			if m.Component == "kube-apiserver" && m.New == "DisableAllocatorDualWrite=true" {
				return true
			}
		}
		return false
	}
	assert.True(t, gate(p), "1.33: the kube-apiserver restart also turns the dual-write off: %+v", p.Manual)

	o.GitVersion = "v1.34.1"
	p, err = servicecidr.BuildPlan(snapshotOf(t, servicecidrtest.MustNew(o)), story3PlanOptions())
	require.NoError(t, err)
	assert.NotContains(t, strings.Join(p.Warnings, "\n"), "DisableAllocatorDualWrite")
	assert.False(t, gate(p), "1.34+ needs no gate")
}

func TestPlanRoundTripAndCheck(t *testing.T) {
	s := snapshotOf(t, servicecidrtest.MustNew(story3Options("v1")))
	p, err := servicecidr.BuildPlan(s, story3PlanOptions())
	require.NoError(t, err)
	data, err := p.Marshal()
	require.NoError(t, err)
	back, err := servicecidr.ParsePlan(data)
	require.NoError(t, err)
	assert.Equal(t, p, back)

	edit := func(f func(*servicecidr.Plan)) error {
		c, err := servicecidr.ParsePlan(data)
		require.NoError(t, err)
		f(c)
		again, err := c.Marshal()
		require.NoError(t, err)
		_, err = servicecidr.ParsePlan(again)
		return err
	}
	tests := []struct {
		name string
		f    func(*servicecidr.Plan)
		want string
	}{
		{"kind", func(p *servicecidr.Plan) { p.Kind = "Other" }, "want cidrshift.io/v1alpha1/ServiceMovePlan"},
		{"outside to", func(p *servicecidr.Plan) { p.Moves[1].NewIPs = addrs("10.0.0.1") }, `plan moves[1].newIPs[0] "10.0.0.1": is not a usable address of 172.24.0.0/15`},
		{"duplicate", func(p *servicecidr.Plan) { p.Moves[1].NewIPs = p.Moves[0].NewIPs }, "also planned for kube-system/kube-dns"},
		{"no uid", func(p *servicecidr.Plan) { p.Moves[0].UID = "" }, "the UID the plan saw is required"},
		{"twice", func(p *servicecidr.Plan) { p.Moves = append(p.Moves, p.Moves[0]) }, "Service listed twice"},
		{"family", func(p *servicecidr.Plan) { p.Moves[0].NewIPs = addrs("fd00::10") }, "same family"},
		{"network address", func(p *servicecidr.Plan) { p.Moves[0].NewIPs = addrs("172.24.0.0") }, "is not a usable address"},
		{"kubernetes in moves", func(p *servicecidr.Plan) { p.Moves = append(p.Moves, *p.Kubernetes) }, "default/kubernetes is recreated by kube-apiserver"},
		{"target", func(p *servicecidr.Plan) { p.Target.CIDRs = []netip.Prefix{pfx("10.0.0.0/8")} }, "must equal to"},
		{"allocate", func(p *servicecidr.Plan) { p.Allocate = "" }, "valid values are offset and free"},
		{"kubernetes address", func(p *servicecidr.Plan) { p.Moves[1].NewIPs = addrs("172.24.0.1") }, "reserved for default/kubernetes"},
		{"from overlaps to", func(p *servicecidr.Plan) { p.From = []netip.Prefix{pfx("172.0.0.0/8")} }, `plan from[0] "172.0.0.0/8": overlaps to 172.24.0.0/15`},
		{"from without its family in to", func(p *servicecidr.Plan) { p.From = append(p.From, pfx("fd00::/108")) }, `plan from[1] "fd00::/108": has no range of its family`},
		{"old outside from", func(p *servicecidr.Plan) {
			p.Old = []servicecidr.ObservedServiceCIDR{{Name: "other", CIDRs: []netip.Prefix{pfx("10.0.0.0/8")}}}
		}, `plan old[0].cidrs "10.0.0.0/8": must lie inside from`},
		{"old is the target", func(p *servicecidr.Plan) {
			p.Old = []servicecidr.ObservedServiceCIDR{{Name: p.Target.Name, CIDRs: p.From}}
		}, "is the target ServiceCIDR"},
		{"role", func(p *servicecidr.Plan) { p.Moves[1].Role = "boss" }, `plan moves[1].role "boss"`},
		{"two dns", func(p *servicecidr.Plan) { p.Moves[1].Role = "dns" }, "a second DNS Service"},
		{"dns missing", func(p *servicecidr.Plan) { p.DNS = nil }, "the kubelet clusterDNS step would be lost"},
		{"dns disagrees", func(p *servicecidr.Plan) { p.DNS.NewIPs = addrs("172.24.0.53") }, "disagrees with its move"},
		{"kubernetes not first", func(p *servicecidr.Plan) { p.Kubernetes.NewIPs = addrs("172.24.0.2") }, `plan kubernetes.newIPs[0] "172.24.0.2": must be 172.24.0.1`},
		{"bad name", func(p *servicecidr.Plan) { p.Moves[1].Name = "Web_1" }, "not a valid Service namespace/name"},
	}
	for _, tt := range tests {
		err := edit(tt.f)
		assert.ErrorIs(t, err, servicecidr.ErrPlanFormat, tt.name)
		assert.ErrorContains(t, err, tt.want, tt.name)
	}
	_, err = servicecidr.ParsePlan([]byte("apiVersion: cidrshift.io/v1alpha1\nkind: ServiceMovePlan\nsurprise: 1\n"))
	assert.ErrorIs(t, err, servicecidr.ErrPlanFormat)
	assert.ErrorContains(t, err, `unknown field "surprise"`)
	var fe *servicecidr.FieldError
	assert.True(t, errors.As(err, &fe))
}

// TestPlanRefusesFromNotInUse: issue 20, defect 3. A --from that is not the
// range holding default/kubernetes and the ClusterIPs is refused, naming what
// is in use, before anything could be written.
func TestPlanRefusesFromNotInUse(t *testing.T) {
	s := snapshotOf(t, servicecidrtest.MustNew(story3Options("v1")))
	for _, tt := range []struct {
		name string
		from []netip.Prefix
		want []string
	}{
		{"elsewhere", []netip.Prefix{pfx("10.200.0.0/16")}, []string{`--from "10.200.0.0/16"`, "default/kubernetes is at 100.64.0.1", "ServiceCIDR kubernetes 100.64.0.0/13 (5 ClusterIP(s), default/kubernetes 100.64.0.1)"}},
		{"part", []netip.Prefix{pfx("100.64.0.0/24")}, []string{`--from "100.64.0.0/24"`, "covers only part of ServiceCIDR kubernetes (100.64.0.0/13)", "shop/ingress 100.64.1.1", "shop/web 100.64.3.7", "give --from 100.64.0.0/13"}},
		{"part holding every ClusterIP", []netip.Prefix{pfx("100.64.0.0/14")}, []string{"covers only part of ServiceCIDR kubernetes (100.64.0.0/13): none of its ClusterIPs lies outside it yet, but kube-apiserver's --service-cluster-ip-range is the whole range; give --from 100.64.0.0/13"}},
	} {
		po := story3PlanOptions()
		po.From = tt.from
		_, err := servicecidr.BuildPlan(s, po)
		require.ErrorIs(t, err, servicecidr.ErrInvalid, tt.name)
		for _, w := range tt.want {
			assert.ErrorContains(t, err, w, tt.name)
		}
	}
	// The range in use, and a rerun after the flag change (default/kubernetes
	// already in To), are accepted.
	po := story3PlanOptions()
	po.From = []netip.Prefix{pfx("100.64.0.0/13")}
	_, err := servicecidr.BuildPlan(s, po)
	require.NoError(t, err)
	for i := range s.Services {
		if s.Services[i].Namespace == "default" && s.Services[i].Name == "kubernetes" {
			s.Services[i].Spec.ClusterIP, s.Services[i].Spec.ClusterIPs = "172.24.0.1", []string{"172.24.0.1"}
		}
	}
	_, err = servicecidr.BuildPlan(s, po)
	require.NoError(t, err, "default/kubernetes already in --to: a rerun after the flag change")
	po.From = []netip.Prefix{pfx("10.200.0.0/16")}
	_, err = servicecidr.BuildPlan(s, po)
	require.ErrorIs(t, err, servicecidr.ErrInvalid, "Services are still in 100.64.0.0/13: a From holding none of them is refused")
	assert.ErrorContains(t, err, "is still outside the new range")

	// A finished move: every Service but the LoadBalancer (which may stay
	// behind) is in --to. A rerun is accepted whatever --from says, and the
	// LoadBalancer left in 100.64.0.0/13 does not count as "still outside".
	var lbs int
	for i := range s.Services {
		svc := &s.Services[i]
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			lbs++
			require.False(t, story3To[0].Contains(netip.MustParseAddr(svc.Spec.ClusterIP)), "the LoadBalancer stays outside --to")
			continue
		}
		if ip, ok := strings.CutPrefix(svc.Spec.ClusterIP, "100.64."); ok {
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "172.24."+ip, []string{"172.24." + ip}
		}
	}
	require.Equal(t, 1, lbs)
	_, err = servicecidr.BuildPlan(s, po)
	require.NoError(t, err, "only a LoadBalancer is left outside --to: a rerun of a finished move")
}

// Nodes or pods that may not be read leave their checks undone: the plan
// says so among its warnings, and a list failing otherwise is an error.
func TestPlanSaysWhatItMayNotRead(t *testing.T) {
	cl, c := newStory3(t, "v1")
	for _, res := range []string{"nodes", "pods"} {
		cl.Kube.PrependReactor("list", res, func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: res}, "", errors.New("no"))
		})
	}
	p, err := c.Plan(context.Background(), story3PlanOptions())
	require.NoError(t, err)
	assert.Contains(t, p.Warnings, "nodes not read, their networks are not checked for conflicts: nodes is forbidden: no")
	assert.Contains(t, p.Warnings, "pods not read, the pods to restart for the new DNS address are not listed: pods is forbidden: no")
	assert.Empty(t, p.PodsToRestart)

	cl.Kube.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcd down")
	})
	_, err = c.Plan(context.Background(), story3PlanOptions())
	require.EqualError(t, err, "listing Nodes: etcd down")
}
