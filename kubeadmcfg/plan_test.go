package kubeadmcfg

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/cidr"
)

func stepIndex(t *testing.T, p *Plan, match func(Step) bool, what string) int {
	t.Helper()
	for i, s := range p.Steps {
		if match(s) {
			return i
		}
	}
	t.Fatalf("no step %s in %+v", what, p.Steps)
	return -1
}

func byEdit(id string) func(Step) bool { return func(s Step) bool { return s.Edit == id } }

func byTitle(sub string) func(Step) bool {
	return func(s Step) bool { return strings.Contains(s.Title, sub) }
}

func fileEdit(t *testing.T, p *Plan, id string) FileEdit {
	t.Helper()
	for _, e := range p.FileEdits {
		if e.ID == id {
			return e
		}
	}
	t.Fatalf("no file edit %s", id)
	return FileEdit{}
}

func TestPlanPodSubnetStoryOne(t *testing.T) {
	s := storyOne(t)
	p, err := NewPlan(s, Intent{PodSubnet: "10.20.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	assert.False(t, p.Blocked())
	assert.Equal(t, "10.233.64.0/18", p.Current.PodSubnet, "the running flag is the current layout")
	assert.Equal(t, []int{24}, p.Target.NodeMasks)

	// The order that never crash-loops kube-controller-manager.
	pause := stepIndex(t, p, byEdit(EditPauseNodeIPAM), "pause")
	nodes := stepIndex(t, p, byTitle("Rewrite every Node's podCIDR"), "nodes")
	pre := stepIndex(t, p, func(s Step) bool { return s.Kind == StepPreflight }, "preflight")
	flags := stepIndex(t, p, byEdit(EditControllerFlags), "flags")
	assert.Less(t, pause, nodes)
	assert.Less(t, nodes, pre)
	assert.Less(t, pre, flags)
	assert.Contains(t, p.Steps[nodes].Title, "BEFORE kube-controller-manager gets the new --cluster-cidr")
	for i, st := range p.Steps {
		assert.Equal(t, i+1, st.Number)
	}

	assert.Equal(t, []NodeMove{
		{Name: "master1", From: []string{"10.233.64.0/24"}, To: []string{"10.20.0.0/24"}},
		{Name: "worker3", From: []string{"10.233.67.0/24"}, To: []string{"10.20.3.0/24"}},
	}, p.NodeMoves)
	require.NotNil(t, p.PreflightNow)
	assert.False(t, p.PreflightNow.WouldStart)
	require.Len(t, p.PreflightNow.Crashes, 2)
	assert.Equal(t, "master1", p.PreflightNow.Crashes[0].Node)
	require.NotNil(t, p.PreflightAfterMove)
	assert.True(t, p.PreflightAfterMove.WouldStart)
	assert.Equal(t, &cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.20.0.0/16", NodeCIDRMaskSize: 24, ServiceClusterIPRange: "10.233.0.0/18"}, p.ProposedFlags)

	pe := fileEdit(t, p, EditPauseNodeIPAM)
	assert.Equal(t, []FlagChange{{Flag: FlagAllocateNodeCIDRs, Value: "false"}}, pe.Changes)
	assert.Contains(t, pe.Diff, "-    - --allocate-node-cidrs=true\n+    - --allocate-node-cidrs=false\n")
	fe := fileEdit(t, p, EditControllerFlags)
	assert.Equal(t, []FlagChange{{Flag: FlagClusterCIDR, Value: "10.20.0.0/16"}, {Flag: FlagAllocateNodeCIDRs, Value: "true"}}, fe.Changes)
	assert.Contains(t, fe.Diff, "-    - --cluster-cidr=10.233.64.0/18\n+    - --cluster-cidr=10.20.0.0/16\n")
	assert.Contains(t, fe.Diff, "     # pod CIDR from kubeadm init; change only after every node is moved (OPS-1234)\n", "comments are context, untouched")
	assert.Equal(t, strings.Replace(string(s.ControllerManager.Bytes()), "--cluster-cidr=10.233.64.0/18", "--cluster-cidr=10.20.0.0/16", 1), fe.After)

	// kubeadm-config already says 10.20.0.0/16: only kube-proxy changes in the API.
	require.Len(t, p.ConfigMapEdits, 1)
	e := p.ConfigMapEdits[0]
	assert.Equal(t, EditKubeProxy, e.ID)
	assert.Equal(t, ConfigMapRef{Namespace: Namespace, Name: KubeProxyConfigMap, Key: KubeProxyConfigKey, UID: "uid-kube-proxy", ResourceVersion: "200"}, e.Ref)
	assert.Equal(t, []string{"clusterCIDR: 10.233.64.0/18 -> 10.20.0.0/16"}, e.Changes)
	assert.Contains(t, e.Diff, "-clusterCIDR: 10.233.64.0/18\n+clusterCIDR: 10.20.0.0/16\n")

	// The snapshot itself is not changed by planning.
	v, _ := s.ControllerManager.Flag(FlagClusterCIDR)
	assert.Equal(t, "10.233.64.0/18", v)
}

func TestPlanKeepNodeIPAM(t *testing.T) {
	p, err := NewPlan(storyOne(t), Intent{PodSubnet: "10.20.0.0/16"}, PlanOptions{KeepNodeIPAM: true})
	require.NoError(t, err)
	for _, e := range p.FileEdits {
		assert.NotEqual(t, EditPauseNodeIPAM, e.ID)
	}
	warn := stepIndex(t, p, byTitle("Do not restart kube-controller-manager"), "warning")
	assert.Less(t, warn, stepIndex(t, p, byEdit(EditControllerFlags), "flags"))
	assert.Equal(t, []FlagChange{{Flag: FlagClusterCIDR, Value: "10.20.0.0/16"}}, fileEdit(t, p, EditControllerFlags).Changes)
}

func TestPlanServiceSubnet(t *testing.T) {
	s := consistent(t)
	p, err := NewPlan(s, Intent{ServiceSubnet: "172.24.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"172.24.0.10"}, p.Target.ClusterDNS)

	serviceCIDR := stepIndex(t, p, byTitle("Create a ServiceCIDR for 172.24.0.0/16"), "ServiceCIDR")
	services := stepIndex(t, p, byTitle("Recreate every ClusterIP Service"), "services")
	kubelet := stepIndex(t, p, byEdit(EditKubeletConfig), "kubelet")
	api := stepIndex(t, p, byEdit(EditAPIServerFlags), "apiserver")
	kcm := stepIndex(t, p, byEdit(EditControllerFlags), "kcm")
	cert := stepIndex(t, p, byTitle("serving certificate"), "certificate")
	retire := stepIndex(t, p, byTitle("Retire the old Service range"), "retire")
	assert.Less(t, serviceCIDR, api, "the ServiceCIDR exists before kube-apiserver's flag changes")
	assert.Less(t, services, kubelet, "clusterDNS moves with the DNS Service")
	assert.Less(t, kubelet, api)
	assert.Less(t, api, kcm)
	assert.Less(t, cert, retire)
	assert.Contains(t, p.Steps[cert].Detail, "172.24.0.1")
	assert.Nil(t, p.NodeMoves)

	ids := map[string]ConfigMapEdit{}
	for _, e := range p.ConfigMapEdits {
		ids[e.ID] = e
	}
	require.Contains(t, ids, EditKubeadmConfig)
	require.Contains(t, ids, EditKubeletConfig)
	assert.NotContains(t, ids, EditKubeProxy)
	assert.Equal(t, []string{
		"networking.serviceSubnet: 10.96.0.0/12 -> 172.24.0.0/16",
	}, ids[EditKubeadmConfig].Changes)
	assert.Contains(t, ids[EditKubeletConfig].Diff, "-- 10.96.0.10\n+- 172.24.0.10\n")
	assert.Equal(t, []FlagChange{{Flag: FlagServiceClusterIPRange, Value: "172.24.0.0/16"}}, fileEdit(t, p, EditAPIServerFlags).Changes)
	assert.Equal(t, []FlagChange{{Flag: FlagServiceClusterIPRange, Value: "172.24.0.0/16"}}, fileEdit(t, p, EditControllerFlags).Changes)
}

func TestPlanNodeMask(t *testing.T) {
	s := consistent(t)
	p, err := NewPlan(s, Intent{NodeMask: 23}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []int{23}, p.Target.NodeMasks)
	assert.Equal(t, []FlagChange{{Flag: FlagNodeCIDRMaskSize, Value: "23"}, {Flag: FlagAllocateNodeCIDRs, Value: "true"}}, fileEdit(t, p, EditControllerFlags).Changes)
	require.Len(t, p.ConfigMapEdits, 1)
	assert.Equal(t, []string{"controllerManager.extraArgs node-cidr-mask-size: (not set) -> 23"}, p.ConfigMapEdits[0].Changes)
	// Both nodes hold /24s: both move to /23s.
	require.Len(t, p.NodeMoves, 2)
	assert.Equal(t, []string{"10.244.0.0/23"}, p.NodeMoves[0].To)
	assert.Equal(t, []string{"10.244.2.0/23"}, p.NodeMoves[1].To)
	assert.True(t, p.PreflightAfterMove.WouldStart)
}

func TestPlanDualStackMask(t *testing.T) {
	p, err := NewPlan(dualStackSnapshot(t), Intent{NodeMaskIPv6: 80}, PlanOptions{KeepNodeIPAM: true})
	require.NoError(t, err)
	assert.Equal(t, []int{24, 80}, p.Target.NodeMasks)
	assert.Equal(t, []FlagChange{{Flag: FlagNodeCIDRMaskSizeIPv6, Value: "80"}}, fileEdit(t, p, EditControllerFlags).Changes)
	assert.Contains(t, p.ConfigMapEdits[0].Diff, "-    value: \"64\"\n+    value: \"80\"\n")
	assert.True(t, p.PreflightNow == nil, "no nodes were read")
}

func TestPlanWithoutManifests(t *testing.T) {
	s := storyOne(t)
	s.ControllerManager, s.APIServer = nil, nil
	p, err := NewPlan(s, Intent{PodSubnet: "10.30.0.0/16", ServiceSubnet: "172.24.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	fe := fileEdit(t, p, EditControllerFlags)
	assert.Equal(t, ControllerManagerManifest, fe.Path)
	assert.Empty(t, fe.Diff, "nothing to diff against")
	assert.Contains(t, fe.Changes, FlagChange{Flag: FlagClusterCIDR, Value: "10.30.0.0/16"})
	assert.Contains(t, fe.Changes, FlagChange{Flag: FlagServiceClusterIPRange, Value: "172.24.0.0/16"})
	require.NotNil(t, p.ProposedFlags)
	assert.Equal(t, "10.30.0.0/16", p.ProposedFlags.ClusterCIDR)
	assert.Equal(t, 24, p.ProposedFlags.NodeCIDRMaskSize)
}

func TestPlanErrors(t *testing.T) {
	s := storyOne(t)
	_, err := NewPlan(consistent(t), Intent{PodSubnet: "10.244.0.0/16"}, PlanOptions{})
	require.ErrorIs(t, err, ErrNothingToDo)
	// kube-controller-manager runs with 10.233.64.0/18 but kubeadm-config
	// says 10.20.0.0/16: asking for the running range is not nothing to do,
	// kubeadm-config is set back; no node IPAM flag changes, no node moves.
	back, err := NewPlan(s, Intent{PodSubnet: "10.233.64.0/18"}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{EditKubeadmConfig}, editIDs(back))
	assert.Equal(t, []string{"networking.podSubnet: 10.20.0.0/16 -> 10.233.64.0/18"}, back.ConfigMapEdits[0].Changes)
	assert.Empty(t, back.FileEdits)
	assert.Empty(t, back.NodeMoves)

	_, err = NewPlan(s, Intent{PodSubnet: "10.233.64.1/16"}, PlanOptions{})
	require.ErrorIs(t, err, cidr.ErrHostBitsSet)
	var fe *FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "podSubnet", fe.Field)
	assert.Contains(t, err.Error(), "the network is 10.233.0.0/16")

	_, err = NewPlan(s, Intent{ServiceSubnet: "nope"}, PlanOptions{})
	require.ErrorIs(t, err, cidr.ErrSyntax)
	_, err = NewPlan(s, Intent{NodeMask: 40}, PlanOptions{})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "between 1 and 32")
	_, err = NewPlan(&Snapshot{}, Intent{NodeMask: 24}, PlanOptions{})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = NewPlan(nil, Intent{}, PlanOptions{})
	require.ErrorIs(t, err, ErrInvalid)

	// Widening to 10.233.0.0/16 swallows the Service range: a plan, but a blocked one.
	p, err := NewPlan(s, Intent{PodSubnet: "10.233.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	assert.True(t, p.Blocked())
	assert.Equal(t, []Code{CodeOverlap}, codes(p.Findings))
	assert.Contains(t, p.Findings[0].Message, "contains service-cidr 10.233.0.0/18")
}

func TestPlanSerialises(t *testing.T) {
	p, err := NewPlan(storyOne(t), Intent{PodSubnet: "10.20.0.0/16", ServiceSubnet: "172.24.0.0/16", NodeMask: 23}, PlanOptions{})
	require.NoError(t, err)
	data, err := yaml.Marshal(p)
	require.NoError(t, err)
	var back Plan
	require.NoError(t, yaml.Unmarshal(data, &back))
	assert.Equal(t, *p, back)
	assert.Contains(t, string(data), "resourceVersion: \"100\"")
}

// A cluster installed without a pod CIDR (Calico without node IPAM) gets one:
// node IPAM is switched on, as kubeadm renders it whenever podSubnet is set.
func TestPlanFirstPodSubnet(t *testing.T) {
	s := &Snapshot{}
	require.NoError(t, s.AddConfigMap(configMap(KubeadmConfigMap, KubeadmConfigKey, string(golden(t, "v1.35", "cluster-configuration.yaml")), "1")))
	require.NoError(t, s.AddConfigMap(configMap(KubeProxyConfigMap, KubeProxyConfigKey, string(golden(t, "v1.35", "kube-proxy.conf")), "2")))
	var err error
	s.ControllerManager, err = ParseManifest(golden(t, "v1.35", "kube-controller-manager.yaml"))
	require.NoError(t, err)
	s.Nodes = []cidr.NodePodCIDRs{{Name: "a"}, {Name: "b"}}
	p, err := NewPlan(s, Intent{PodSubnet: "10.244.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	assert.Empty(t, p.Current.PodSubnet)
	assert.Equal(t, []FlagChange{{Flag: FlagClusterCIDR, Value: "10.244.0.0/16"}, {Flag: FlagAllocateNodeCIDRs, Value: "true"}}, fileEdit(t, p, EditControllerFlags).Changes)
	assert.Nil(t, p.NodeMoves, "nodes without a podCIDR get one from the allocator")
	assert.True(t, p.PreflightNow.WouldStart)
	require.Len(t, p.ConfigMapEdits, 2)
	assert.Equal(t, []string{"networking.podSubnet: (not set) -> 10.244.0.0/16"}, p.ConfigMapEdits[0].Changes)
	assert.Equal(t, []string{"clusterCIDR: (not set) -> 10.244.0.0/16"}, p.ConfigMapEdits[1].Changes)
	assert.Contains(t, p.ConfigMapEdits[1].Diff, "-clusterCIDR: \"\"\n+clusterCIDR: 10.244.0.0/16\n")
}

func dualStackSnapshot(t testing.TB) *Snapshot {
	t.Helper()
	s := &Snapshot{}
	require.NoError(t, s.AddConfigMap(configMap(KubeadmConfigMap, KubeadmConfigKey, string(golden(t, "v1.33", "cluster-configuration.yaml")), "1")))
	var err error
	s.ControllerManager, err = ParseManifest(golden(t, "v1.33", "kube-controller-manager.yaml"))
	require.NoError(t, err)
	return s
}

// A node mask is checked against its family's bounds, 1 to 32 or 1 to 128,
// both ends included; the error names the intent's field that holds it.
func TestPlanNodeMaskBounds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		snap  func(testing.TB) *Snapshot
		in    Intent
		field string // "" when the mask is accepted
		value string
	}{
		{"IPv4 /1", storyOne, Intent{PodSubnet: "10.0.0.0/8", NodeMask: 1}, "", ""},
		{"IPv4 /32", storyOne, Intent{PodSubnet: "10.0.0.0/8", NodeMask: 32}, "", ""},
		{"IPv4 /33", storyOne, Intent{PodSubnet: "10.0.0.0/8", NodeMask: 33}, "nodeMask", "33"},
		{"IPv4 -1", storyOne, Intent{PodSubnet: "10.0.0.0/8", NodeMask: -1}, "nodeMask", "-1"},
		{"IPv6 /128", storyOne, Intent{PodSubnet: "fd00:10::/56", NodeMask: 128}, "", ""},
		{"single-stack IPv6 /129", storyOne, Intent{PodSubnet: "fd00:10::/56", NodeMask: 129}, "nodeMask", "129"},
		{"single-stack IPv6 /129 as nodeMaskIPv6", storyOne, Intent{PodSubnet: "fd00:10::/56", NodeMaskIPv6: 129}, "nodeMask", "129"},
		{"dual-stack IPv6 /129", dualStackSnapshot, Intent{NodeMaskIPv6: 129}, "nodeMaskIPv6", "129"},
		{"dual-stack IPv4 /33", dualStackSnapshot, Intent{NodeMask: 33}, "nodeMask", "33"},
		{"no pod CIDR, nodeMask", func(testing.TB) *Snapshot { return &Snapshot{} }, Intent{NodeMask: 24}, "nodeMask", "24"},
		{"no pod CIDR, nodeMaskIPv6", func(testing.TB) *Snapshot { return &Snapshot{} }, Intent{NodeMaskIPv6: 64}, "nodeMaskIPv6", "64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPlan(tc.snap(t), tc.in, PlanOptions{})
			if tc.field == "" {
				require.NoError(t, err)
				assert.Equal(t, []int{cmp0(tc.in.NodeMask, tc.in.NodeMaskIPv6)}, p.Target.NodeMasks)
				return
			}
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
			assert.Equal(t, tc.value, fe.Value)
			require.ErrorIs(t, err, ErrInvalid)
		})
	}
}

// A pod CIDR change keeps the node mask the cluster runs with when the
// intent names none, and the IPv6 one of a dual-stack cluster when only
// the IPv4 one is asked for.
func TestPlanKeepsTheRunningNodeMask(t *testing.T) {
	s := storyOne(t)
	var err error
	s.ControllerManager, err = parseManifest("kube-controller-manager.yaml", []byte(strings.Replace(string(golden(t, "v1.34", "kube-controller-manager.yaml")), "--node-cidr-mask-size=24", "--node-cidr-mask-size=26", 1)))
	require.NoError(t, err)
	p, err := NewPlan(s, Intent{PodSubnet: "10.20.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []int{26}, p.Current.NodeMasks)
	assert.Equal(t, []int{26}, p.Target.NodeMasks)

	p, err = NewPlan(dualStackSnapshot(t), Intent{NodeMask: 25}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []int{25, 64}, p.Target.NodeMasks)
}

// kube-controller-manager refuses --node-cidr-mask-size beside a family's
// mask flag. A plan for the mask keeps the first and removes the other, so
// the flags it proposes are ones the component starts with.
func TestPlanRemovesAConflictingMaskFlag(t *testing.T) {
	s := consistent(t)
	require.NoError(t, s.ControllerManager.SetFlag(FlagNodeCIDRMaskSize, "24"))
	require.NoError(t, s.ControllerManager.SetFlag(FlagNodeCIDRMaskSizeIPv4, "25"))
	p, err := NewPlan(s, Intent{NodeMask: 24}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []FlagChange{{Flag: FlagNodeCIDRMaskSizeIPv4, Remove: true}, {Flag: FlagAllocateNodeCIDRs, Value: "true"}},
		fileEdit(t, p, EditControllerFlags).Changes)
	require.NotNil(t, p.ProposedFlags)
	_, _, err = cidr.ParseControllerManagerFlags(*p.ProposedFlags)
	require.NoError(t, err, "the proposed flags start kube-controller-manager")
}

// clusterDNS keeps its offset in the new Service range (kubeadm's tenth
// address stays the tenth); an offset the new range cannot hold becomes its
// tenth address; an address in no old range, or not an address, is kept.
func TestMoveDNS(t *testing.T) {
	from := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00::/108")}
	to := []netip.Prefix{netip.MustParsePrefix("172.24.0.0/24"), netip.MustParsePrefix("fd01::/112")}
	assert.Equal(t,
		[]string{"172.24.0.10", "172.24.0.53", "172.24.0.10", "192.168.0.1", "x", "fd01::a", "fd01::10"},
		moveDNS([]string{"10.96.0.10", " 10.96.0.53", "10.100.0.1", "192.168.0.1", "x", "fd00::a", "fd00::10"}, from, to))
}
