package kubeadmcfg

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/cidr"
)

// kubeadmChanges returns the changes of the plan's kubeadm-config edit.
func kubeadmChanges(t *testing.T, p *Plan) []string {
	t.Helper()
	for _, e := range p.ConfigMapEdits {
		if e.ID == EditKubeadmConfig {
			return e.Changes
		}
	}
	t.Fatalf("no kubeadm-config edit in %v", editIDs(p))
	return nil
}

// Every place kubeadm-config writes a range down is rewritten: networking
// and the extraArgs that repeat it, a Service range set back to kubeadm's
// default included.
func TestPlanRewritesEveryKubeadmSetting(t *testing.T) {
	s := consistent(t)
	require.NoError(t, s.Kubeadm.SetExtraArg(ControllerManager, FlagClusterCIDR, "10.244.0.0/16"))
	require.NoError(t, s.Kubeadm.SetExtraArg(APIServer, FlagServiceClusterIPRange, "10.96.0.0/12"))
	require.NoError(t, s.Kubeadm.SetExtraArg(ControllerManager, FlagServiceClusterIPRange, "10.96.0.0/12"))
	p, err := NewPlan(s, Intent{PodSubnet: "10.30.0.0/16", ServiceSubnet: "172.24.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{
		"networking.podSubnet: 10.244.0.0/16 -> 10.30.0.0/16",
		"controllerManager.extraArgs cluster-cidr: 10.244.0.0/16 -> 10.30.0.0/16",
		"networking.serviceSubnet: 10.96.0.0/12 -> 172.24.0.0/16",
		"apiServer.extraArgs service-cluster-ip-range: 10.96.0.0/12 -> 172.24.0.0/16",
		"controllerManager.extraArgs service-cluster-ip-range: 10.96.0.0/12 -> 172.24.0.0/16",
	}, kubeadmChanges(t, p))

	// Back to the default range: written down, not left to the default.
	s = consistent(t)
	require.NoError(t, s.Kubeadm.SetServiceSubnet("10.112.0.0/12"))
	require.NoError(t, s.APIServer.SetFlag(FlagServiceClusterIPRange, "10.112.0.0/12"))
	require.NoError(t, s.ControllerManager.SetFlag(FlagServiceClusterIPRange, "10.112.0.0/12"))
	require.NoError(t, s.Kubelet.SetClusterDNS([]string{"10.112.0.10"}))
	p, err = NewPlan(s, Intent{ServiceSubnet: DefaultServiceSubnet}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"networking.serviceSubnet: 10.112.0.0/12 -> 10.96.0.0/12"}, kubeadmChanges(t, p))
}

// A single-stack cluster whose kube-controller-manager gives the mask with
// its family's flag keeps that form; the other family's flag goes.
func TestPlanKeepsTheFamilyMaskFlag(t *testing.T) {
	for _, tc := range []struct {
		name, pods      string
		flag, was       string // the family's flag and its value
		other, otherWas string // the other family's
		mask            int
	}{
		{"IPv4", "10.244.0.0/16", FlagNodeCIDRMaskSizeIPv4, "26", FlagNodeCIDRMaskSizeIPv6, "64", 25},
		{"IPv6", "fd00:10:244::/56", FlagNodeCIDRMaskSizeIPv6, "64", FlagNodeCIDRMaskSizeIPv4, "24", 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := consistent(t)
			require.NoError(t, s.ControllerManager.SetFlag(FlagClusterCIDR, tc.pods))
			require.NoError(t, s.ControllerManager.SetFlag(tc.flag, tc.was))
			require.NoError(t, s.ControllerManager.SetFlag(tc.other, tc.otherWas))
			s.Nodes = nil
			p, err := NewPlan(s, Intent{NodeMask: tc.mask}, PlanOptions{KeepNodeIPAM: true})
			require.NoError(t, err)
			assert.Equal(t, []FlagChange{{Flag: tc.flag, Value: strconv.Itoa(tc.mask)}, {Flag: tc.other, Remove: true}}, fileEdit(t, p, EditControllerFlags).Changes)

			// kubeadm-config's extraArgs follow, so that the next kubeadm
			// upgrade renders the same flags: the other family's goes there too.
			require.NoError(t, s.Kubeadm.SetExtraArg(ControllerManager, tc.flag, tc.was))
			require.NoError(t, s.Kubeadm.SetExtraArg(ControllerManager, tc.other, tc.otherWas))
			p, err = NewPlan(s, Intent{NodeMask: tc.mask}, PlanOptions{KeepNodeIPAM: true})
			require.NoError(t, err)
			assert.Contains(t, kubeadmChanges(t, p), "controllerManager.extraArgs "+tc.other+": removed")
			assert.Contains(t, kubeadmChanges(t, p), "controllerManager.extraArgs "+tc.flag+": "+tc.was+" -> "+strconv.Itoa(tc.mask))
		})
	}
}

// Without kube-controller-manager's manifest, its edit takes the form of
// its flags from kubeadm-config's controllerManager.extraArgs, and sets the
// node mask only when the intent names one.
func TestPlanWithoutTheManifestFollowsKubeadmExtraArgs(t *testing.T) {
	unread := func(t *testing.T, name, value string) *Snapshot {
		s := consistent(t)
		s.ControllerManager, s.APIServer = nil, nil
		require.NoError(t, s.Kubeadm.SetExtraArg(ControllerManager, name, value))
		return s
	}
	p, err := NewPlan(unread(t, FlagNodeCIDRMaskSizeIPv4, "24"), Intent{NodeMask: 25}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []FlagChange{{Flag: FlagNodeCIDRMaskSizeIPv4, Value: "25"}, {Flag: FlagAllocateNodeCIDRs, Value: "true"}},
		fileEdit(t, p, EditControllerFlags).Changes, "the mask in kubeadm-config's form, the pod CIDR not asked for")

	p, err = NewPlan(unread(t, FlagNodeCIDRMaskSize, "24"), Intent{PodSubnet: "10.30.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []FlagChange{{Flag: FlagClusterCIDR, Value: "10.30.0.0/16"}, {Flag: FlagAllocateNodeCIDRs, Value: "true"}},
		fileEdit(t, p, EditControllerFlags).Changes, "no mask asked for: the manifest's own mask is left alone")
}

// The target Service range is held to kube-apiserver's rule for the
// cluster's version: more than 20 host bits is refused up to 1.33 only. The
// version comes from kubeadm-config, else from kube-apiserver's image.
func TestPlanServiceRangeRuleFollowsTheVersion(t *testing.T) {
	const wide = "11.0.0.0/11" // 21 host bits
	for _, tc := range []struct {
		name      string
		kubeadm   string // kubernetesVersion; "" drops kubeadm-config
		apiserver bool
		refused   bool
	}{
		{"kubeadm 1.36, no apiserver", "v1.36.3", false, false},
		{"kubeadm 1.33, apiserver 1.36", "v1.33.3", true, true},
		{"no kubeadm, apiserver 1.36", "", true, false},
		{"neither: the older rule", "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Snapshot{}
			if tc.kubeadm != "" {
				cc := replaceOnce(t, string(golden(t, "v1.36", "cluster-configuration.yaml")), "kubernetesVersion: v1.36.3", "kubernetesVersion: "+tc.kubeadm)
				require.NoError(t, s.AddConfigMap(configMap(KubeadmConfigMap, KubeadmConfigKey, cc, "1")))
			}
			if tc.apiserver {
				var err error
				s.APIServer, err = parseManifest("apiserver.yaml", golden(t, "v1.36", "kube-apiserver.yaml"))
				require.NoError(t, err)
			}
			p, err := NewPlan(s, Intent{PodSubnet: "10.30.0.0/16", ServiceSubnet: wide}, PlanOptions{})
			require.NoError(t, err)
			assert.Equal(t, tc.refused, hasCode(p.Findings, CodeServiceRange), "%+v", p.Findings)
			assert.Equal(t, tc.refused, p.Blocked())
		})
	}
}

// A node mask the target pod CIDR cannot hold is an error finding.
func TestPlanNodeMaskWiderThanThePodCIDR(t *testing.T) {
	p, err := NewPlan(consistent(t), Intent{PodSubnet: "10.30.0.0/16", NodeMask: 12}, PlanOptions{})
	require.NoError(t, err)
	assert.True(t, hasCode(p.Findings, CodeControllerManagerFlags), "%+v", p.Findings)
	assert.True(t, p.Blocked())
}

// Without kube-controller-manager's manifest (and no nodes read), a mask
// change given with the pod CIDR it already has sets --cluster-cidr too (the
// manifest's is not known); with KeepNodeIPAM there is no pause edit.
func TestPlanWithoutTheManifestSetsTheWholeNodeIPAM(t *testing.T) {
	s := consistent(t)
	s.ControllerManager, s.APIServer, s.Nodes = nil, nil, nil
	p, err := NewPlan(s, Intent{PodSubnet: "10.244.0.0/16", NodeMask: 25}, PlanOptions{KeepNodeIPAM: true})
	require.NoError(t, err)
	assert.Equal(t, []string{EditControllerFlags}, fileEditIDs(p))
	assert.Equal(t, []FlagChange{{Flag: FlagClusterCIDR, Value: "10.244.0.0/16"}, {Flag: FlagNodeCIDRMaskSize, Value: "25"}},
		fileEdit(t, p, EditControllerFlags).Changes)
	st := p.Steps[stepIndex(t, p, byTitle("Rewrite every Node's podCIDR"), "node moves")]
	assert.NotContains(t, st.Detail, "Nodes to move", "no nodes were read")
}

// A cluster whose node IPAM is off (--allocate-node-cidrs=false) still gets
// the flags its kube-controller-manager would run with.
func TestPlanProposesFlagsWithNodeIPAMOff(t *testing.T) {
	s := consistent(t)
	require.NoError(t, s.ControllerManager.SetFlag(FlagAllocateNodeCIDRs, "false"))
	p, err := NewPlan(s, Intent{ServiceSubnet: "172.24.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	require.NotNil(t, p.ProposedFlags)
	assert.Equal(t, cidr.ControllerManagerFlags{ClusterCIDR: "10.244.0.0/16", ServiceClusterIPRange: "172.24.0.0/16"}, *p.ProposedFlags)
}

// The suggested node subnets avoid the Service range of their family, as
// kube-controller-manager's allocator does, in each family of a dual-stack
// cluster.
func TestPlanNodeMovesAvoidTheServiceRange(t *testing.T) {
	s := consistent(t)
	p, err := NewPlan(s, Intent{PodSubnet: "10.96.0.0/11"}, PlanOptions{})
	require.NoError(t, err)
	assert.True(t, p.Blocked(), "the Service range inside the pod CIDR is an error finding")
	assert.Equal(t, []NodeMove{
		{Name: "cp1", From: []string{"10.244.0.0/24"}, To: []string{"10.112.0.0/24"}},
		{Name: "w1", From: []string{"10.244.1.0/24"}, To: []string{"10.112.1.0/24"}},
	}, p.NodeMoves, "10.96.0.0/24 and 10.96.1.0/24 are in the Service range 10.96.0.0/12")

	s = dualStackSnapshot(t)
	s.Nodes = []cidr.NodePodCIDRs{{Name: "a", PodCIDRs: []string{"10.244.3.0/24", "fd00:10:244:3::/64"}}}
	p, err = NewPlan(s, Intent{PodSubnet: "10.30.0.0/16,fd00:30::/56"}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []NodeMove{{Name: "a", From: []string{"10.244.3.0/24", "fd00:10:244:3::/64"}, To: []string{"10.30.3.0/24", "fd00:30:0:3::/64"}}}, p.NodeMoves)
}
