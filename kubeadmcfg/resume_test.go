package kubeadmcfg

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cidrshift/cidrshift/cidr"
)

// liveConsistent puts the consistent v1.36 cluster's three ConfigMaps in a
// fake cluster.
func liveConsistent(t *testing.T) *fakeCluster {
	t.Helper()
	base := consistent(t)
	var objs []runtime.Object
	for _, cm := range []*corev1.ConfigMap{
		configMap(KubeadmConfigMap, KubeadmConfigKey, string(base.Kubeadm.Bytes()), "10"),
		configMap(KubeProxyConfigMap, KubeProxyConfigKey, string(base.KubeProxy.Bytes()), "11"),
		configMap(KubeletConfigMap, KubeletConfigKey, string(base.Kubelet.Bytes()), "12"),
	} {
		objs = append(objs, cm)
	}
	return newFakeCluster(t, objs...)
}

// readConfigMaps reads the ConfigMaps the way a fresh run does (no
// manifests: they live on the control-plane nodes).
func readConfigMaps(t *testing.T, f *fakeCluster) *Snapshot {
	t.Helper()
	s, err := Read(context.Background(), f, ReadOptions{})
	require.NoError(t, err)
	return s
}

func editIDs(p *Plan) []string {
	out := []string{}
	for _, e := range p.ConfigMapEdits {
		out = append(out, e.ID)
	}
	return out
}

func fileEditIDs(p *Plan) []string {
	out := []string{}
	for _, e := range p.FileEdits {
		out = append(out, e.ID)
	}
	return out
}

// stepShape is a plan's procedure without the wording: kind and edit of
// each step, in order.
func stepShape(steps []Step) []string {
	out := []string{}
	for _, s := range steps {
		out = append(out, string(s.Kind)+" "+s.Edit)
	}
	return out
}

// withoutEdits drops the steps that make one of the given edits.
func withoutEdits(steps []Step, ids ...string) []Step {
	return slices.DeleteFunc(slices.Clone(steps), func(s Step) bool { return s.Edit != "" && slices.Contains(ids, s.Edit) })
}

func hasCode(fs []Finding, c Code) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.Code == c })
}

// An Apply of a Service-CIDR change that stopped after kubeadm-config (the
// kubelet-config edit not made) is finished by a fresh plan: kubeadm-config
// already agrees, clusterDNS does not, so that is the work left, in the
// original order; once applied, nothing is left.
func TestPlanFinishesAHalfAppliedServiceChange(t *testing.T) {
	ctx := context.Background()
	in := Intent{ServiceSubnet: "172.24.0.0/16"}
	f := liveConsistent(t)
	p, err := NewPlan(readConfigMaps(t, f), in, PlanOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{EditKubeadmConfig, EditKubeletConfig}, editIDs(p))
	_, err = Apply(ctx, f, p, ApplyOptions{Edits: []string{EditKubeadmConfig}}) // killed after the first edit
	require.NoError(t, err)

	half := readConfigMaps(t, f)
	assert.True(t, hasCode(Check(half).Findings, CodeClusterDNSOutsideServiceSubnet), "Check sees the half-done change")

	again, err := NewPlan(half, in, PlanOptions{})
	require.NoError(t, err, "clusterDNS still points into the old range: not nothing to do")
	assert.Equal(t, []string{EditKubeletConfig}, editIDs(again), "kubeadm-config already agrees")
	e := again.ConfigMapEdits[0]
	assert.Equal(t, []string{"clusterDNS: 10.96.0.10 -> 172.24.0.10"}, e.Changes)
	assert.Equal(t, p.ConfigMapEdits[1].After, e.After, "the same edit as the first plan's")
	assert.Equal(t, []string{"172.24.0.10"}, again.Target.ClusterDNS)
	var warned []Value
	for _, f := range again.Findings {
		if f.Code == CodeClusterDNSOutsideServiceSubnet {
			warned = append(warned, f.Sources...)
		}
	}
	assert.Equal(t, []Value{{Where: half.Kubelet.Source() + " clusterDNS[0]", Value: "10.96.0.10"}}, warned,
		"no source read records the old range: the tenth address, with a warning naming the kubelet's setting")
	assert.Equal(t, fileEditIDs(p), fileEditIDs(again), "the manifests were not read: their edits stay")
	assert.Equal(t, stepShape(withoutEdits(p.Steps, EditKubeadmConfig)), stepShape(again.Steps), "the rest of the procedure, in the same order")
	for i, st := range again.Steps {
		assert.Equal(t, i+1, st.Number)
	}
	assert.False(t, again.Blocked())

	_, err = Apply(ctx, f, again, ApplyOptions{})
	require.NoError(t, err)
	done := readConfigMaps(t, f)
	assert.False(t, hasCode(Check(done).Findings, CodeClusterDNSOutsideServiceSubnet))
	_, err = NewPlan(done, in, PlanOptions{})
	require.ErrorIs(t, err, ErrNothingToDo)
}

// The same half-done change when the old range is still known from another
// source (a manifest): clusterDNS keeps its offset, as in the first plan.
func TestPlanHalfDoneServiceChangeWithManifests(t *testing.T) {
	s := consistent(t)
	// kubeadm-config, kubelet-config and kube-apiserver are done; the
	// controller manager still has the old range.
	require.NoError(t, s.Kubeadm.SetServiceSubnet("172.24.0.0/16"))
	require.NoError(t, s.Kubelet.SetClusterDNS([]string{"172.24.0.10"}))
	require.NoError(t, s.APIServer.SetFlag(FlagServiceClusterIPRange, "172.24.0.0/16"))

	p, err := NewPlan(s, Intent{ServiceSubnet: "172.24.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, "10.96.0.0/12", p.Current.ServiceSubnet, "the source still saying the old range")
	assert.Empty(t, p.ConfigMapEdits)
	assert.Equal(t, []string{EditControllerFlags}, fileEditIDs(p))
	assert.Equal(t, []FlagChange{{Flag: FlagServiceClusterIPRange, Value: "172.24.0.0/16"}}, fileEdit(t, p, EditControllerFlags).Changes)
	stepIndex(t, p, byEdit(EditControllerFlags), "kcm")
	stepIndex(t, p, byTitle("Retire the old Service range 10.96.0.0/12"), "retire")
	for _, st := range p.Steps {
		assert.NotEqual(t, EditAPIServerFlags, st.Edit, "kube-apiserver already has the new range")
		assert.NotEqual(t, EditKubeletConfig, st.Edit)
	}

	// Only clusterDNS left, the old range known from the controller manager.
	s = consistent(t)
	require.NoError(t, s.Kubeadm.SetServiceSubnet("172.24.0.0/16"))
	require.NoError(t, s.APIServer.SetFlag(FlagServiceClusterIPRange, "172.24.0.0/16"))
	require.NoError(t, s.Kubelet.SetClusterDNS([]string{"10.96.0.53"}))
	p, err = NewPlan(s, Intent{ServiceSubnet: "172.24.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"172.24.0.53"}, p.Target.ClusterDNS, "the offset in the old range 10.96.0.0/12 is kept")
	assert.Equal(t, []string{EditKubeletConfig}, editIDs(p))

	// Two old ranges still written down (an earlier change half done): the
	// controller manager says one, kubeadm-config the other, which holds
	// clusterDNS. Its offset is kept too, with no fallback warning.
	s = consistent(t)
	require.NoError(t, s.APIServer.SetFlag(FlagServiceClusterIPRange, "172.24.0.0/16"))
	require.NoError(t, s.Kubeadm.SetServiceSubnet("10.112.0.0/12"))
	require.NoError(t, s.Kubelet.SetClusterDNS([]string{"10.112.0.53"}))
	p, err = NewPlan(s, Intent{ServiceSubnet: "172.24.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, "10.96.0.0/12", p.Current.ServiceSubnet, "the first source still saying an old range")
	assert.Equal(t, []string{"172.24.0.53"}, p.Target.ClusterDNS, "the offset in the old range 10.112.0.0/12 is kept")
	assert.False(t, hasCode(p.Findings, CodeClusterDNSOutsideServiceSubnet))
}

// A pod-CIDR change stopped after kubeadm-config (kube-proxy not updated):
// a fresh plan updates kube-proxy, and keeps the rest of the procedure.
func TestPlanFinishesAHalfAppliedPodChange(t *testing.T) {
	ctx := context.Background()
	in := Intent{PodSubnet: "10.30.0.0/16"}
	f := liveConsistent(t)
	p, err := NewPlan(readConfigMaps(t, f), in, PlanOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{EditKubeadmConfig, EditKubeProxy}, editIDs(p))
	_, err = Apply(ctx, f, p, ApplyOptions{Edits: []string{EditKubeadmConfig}})
	require.NoError(t, err)

	half := readConfigMaps(t, f)
	assert.True(t, hasCode(Check(half).Findings, CodeKubeProxyClusterCIDR), "Check sees the half-done change")
	again, err := NewPlan(half, in, PlanOptions{})
	require.NoError(t, err, "kube-proxy still has the old clusterCIDR: not nothing to do")
	assert.Equal(t, "10.244.0.0/16", again.Current.PodSubnet, "the old range, from the source still saying it")
	assert.Equal(t, []string{EditKubeProxy}, editIDs(again))
	assert.Equal(t, []string{"clusterCIDR: 10.244.0.0/16 -> 10.30.0.0/16"}, again.ConfigMapEdits[0].Changes)
	assert.Equal(t, stepShape(withoutEdits(p.Steps, EditKubeadmConfig)), stepShape(again.Steps))
	stepIndex(t, again, byTitle("Move the remaining pods off the old pod range 10.244.0.0/16"), "old range")

	_, err = Apply(ctx, f, again, ApplyOptions{})
	require.NoError(t, err)
	_, err = NewPlan(readConfigMaps(t, f), in, PlanOptions{})
	require.ErrorIs(t, err, ErrNothingToDo)
}

// With the manifests read: kube-controller-manager already runs with the new
// cluster CIDR (the nodes moved before it), kube-proxy was not updated. The
// plan does only kube-proxy: no pause of node IPAM, no node rewrite, no
// controller manager restart.
func TestPlanHalfDonePodChangeWithManifests(t *testing.T) {
	s := consistent(t)
	require.NoError(t, s.Kubeadm.SetPodSubnet("10.30.0.0/16"))
	require.NoError(t, s.ControllerManager.SetFlag(FlagClusterCIDR, "10.30.0.0/16"))
	s.Nodes = []cidr.NodePodCIDRs{{Name: "cp1", PodCIDRs: []string{"10.30.0.0/24"}}, {Name: "w1", PodCIDRs: []string{"10.30.1.0/24"}}}
	s.Pools = []PodPool{{Name: "new", Kind: cidr.KindCalicoPool, CIDR: "10.30.0.0/16"}}

	p, err := NewPlan(s, Intent{PodSubnet: "10.30.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, "10.244.0.0/16", p.Current.PodSubnet)
	assert.Equal(t, []string{EditKubeProxy}, editIDs(p))
	assert.Empty(t, p.FileEdits, "kube-controller-manager already has its flags")
	assert.Empty(t, p.NodeMoves)
	for _, st := range p.Steps {
		assert.NotEqual(t, StepPreflight, st.Kind)
		assert.NotContains(t, st.Title, "Rewrite every Node")
	}
	assert.Less(t, stepIndex(t, p, byEdit(EditKubeProxy), "kube-proxy"), stepIndex(t, p, byTitle("Move the remaining pods"), "old pods"))

	// kube-controller-manager paused (an earlier plan's first file edit),
	// nodes moved, flags not changed yet: the plan resumes with the flags
	// and switches node IPAM back on, without pausing again.
	s = consistent(t)
	require.NoError(t, s.Kubeadm.SetPodSubnet("10.30.0.0/16"))
	require.NoError(t, s.ControllerManager.SetFlag(FlagAllocateNodeCIDRs, "false"))
	s.Nodes = []cidr.NodePodCIDRs{{Name: "cp1", PodCIDRs: []string{"10.30.0.0/24"}}, {Name: "w1", PodCIDRs: []string{"10.30.1.0/24"}}}
	p, err = NewPlan(s, Intent{PodSubnet: "10.30.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{EditControllerFlags}, fileEditIDs(p))
	assert.Equal(t, []FlagChange{{Flag: FlagClusterCIDR, Value: "10.30.0.0/16"}, {Flag: FlagAllocateNodeCIDRs, Value: "true"}}, fileEdit(t, p, EditControllerFlags).Changes)
	assert.Equal(t, []string{EditKubeProxy}, editIDs(p))
	require.NotNil(t, p.PreflightNow)
	assert.True(t, p.PreflightNow.WouldStart)
}

// ErrNothingToDo only when every source read agrees with the intent.
func TestPlanNothingToDoOnlyWhenEverySourceAgrees(t *testing.T) {
	tests := []struct {
		name string
		mod  func(t *testing.T, s *Snapshot)
		in   Intent
		// work names an edit the plan must make; "" means ErrNothingToDo.
		work string
	}{
		{name: "all agree on both ranges", in: Intent{PodSubnet: "10.244.0.0/16", ServiceSubnet: "10.96.0.0/12"}},
		{name: "all agree, mask too", in: Intent{PodSubnet: "10.244.0.0/16", NodeMask: 24}},
		{name: "manifests not read", mod: func(t *testing.T, s *Snapshot) { s.ControllerManager, s.APIServer = nil, nil },
			in: Intent{PodSubnet: "10.244.0.0/16", ServiceSubnet: "10.96.0.0/12"}},
		{name: "kube-proxy disagrees", mod: func(t *testing.T, s *Snapshot) { require.NoError(t, s.KubeProxy.SetClusterCIDR("10.240.0.0/16")) },
			in: Intent{PodSubnet: "10.244.0.0/16"}, work: EditKubeProxy},
		{name: "kubeadm podSubnet disagrees", mod: func(t *testing.T, s *Snapshot) { require.NoError(t, s.Kubeadm.SetPodSubnet("10.240.0.0/16")) },
			in: Intent{PodSubnet: "10.244.0.0/16"}, work: EditKubeadmConfig},
		{name: "kube-controller-manager --cluster-cidr disagrees", mod: kcmFlag(FlagClusterCIDR, "10.240.0.0/16"),
			in: Intent{PodSubnet: "10.244.0.0/16"}, work: EditControllerFlags},
		{name: "kubeadm serviceSubnet disagrees", mod: func(t *testing.T, s *Snapshot) { require.NoError(t, s.Kubeadm.SetServiceSubnet("10.112.0.0/12")) },
			in: Intent{ServiceSubnet: "10.96.0.0/12"}, work: EditKubeadmConfig},
		{name: "kube-apiserver disagrees", mod: func(t *testing.T, s *Snapshot) {
			require.NoError(t, s.APIServer.SetFlag(FlagServiceClusterIPRange, "10.112.0.0/12"))
		}, in: Intent{ServiceSubnet: "10.96.0.0/12"}, work: EditAPIServerFlags},
		{name: "kube-controller-manager --service-cluster-ip-range disagrees", mod: kcmFlag(FlagServiceClusterIPRange, "10.112.0.0/12"),
			in: Intent{ServiceSubnet: "10.96.0.0/12"}, work: EditControllerFlags},
		{name: "clusterDNS disagrees", mod: func(t *testing.T, s *Snapshot) { require.NoError(t, s.Kubelet.SetClusterDNS([]string{"10.112.0.10"})) },
			in: Intent{ServiceSubnet: "10.96.0.0/12"}, work: EditKubeletConfig},
		{name: "node mask disagrees", mod: kcmFlag(FlagNodeCIDRMaskSize, "23"),
			in: Intent{NodeMask: 24}, work: EditControllerFlags},
		{name: "kubeadm-config's mask disagrees", mod: func(t *testing.T, s *Snapshot) {
			require.NoError(t, s.Kubeadm.SetExtraArg(ControllerManager, FlagNodeCIDRMaskSize, "23"))
		}, in: Intent{NodeMask: 24}, work: EditKubeadmConfig},
		// Flags kube-controller-manager refuses (both mask forms) leave the
		// current masks at the default, which the intent asks for: the
		// flags are still work.
		{name: "kube-controller-manager mask flags conflict", mod: func(t *testing.T, s *Snapshot) {
			kcmFlag(FlagNodeCIDRMaskSize, "24")(t, s)
			kcmFlag(FlagNodeCIDRMaskSizeIPv4, "25")(t, s)
		}, in: Intent{NodeMask: 24}, work: EditControllerFlags},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := consistent(t)
			if tc.mod != nil {
				tc.mod(t, s)
			}
			p, err := NewPlan(s, tc.in, PlanOptions{KeepNodeIPAM: true})
			if tc.work == "" {
				require.ErrorIs(t, err, ErrNothingToDo)
				assert.Contains(t, err.Error(), "10.244.0.0/16")
				return
			}
			require.NoError(t, err)
			assert.Contains(t, append(editIDs(p), fileEditIDs(p)...), tc.work)
			for _, e := range p.FileEdits {
				assert.NotEmpty(t, e.Diff, "%s: a manifest edit that changes nothing is not planned", e.ID)
			}
			for _, st := range p.Steps {
				if st.Edit != "" {
					assert.Contains(t, append(editIDs(p), fileEditIDs(p)...), st.Edit, "step %d %q makes an edit the plan has", st.Number, st.Title)
				}
			}
		})
	}
}

// Without kube-controller-manager's manifest, nodes outside the target are
// work even when every ConfigMap already agrees and no mask is asked for:
// they are the only sign read that the node IPAM part is not done.
func TestPlanNodesLeftBehindAreWork(t *testing.T) {
	s := consistent(t)
	s.ControllerManager, s.APIServer = nil, nil
	require.NoError(t, s.Kubeadm.SetPodSubnet("10.30.0.0/16"))
	require.NoError(t, s.KubeProxy.SetClusterCIDR("10.30.0.0/16"))
	p, err := NewPlan(s, Intent{PodSubnet: "10.30.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	assert.Empty(t, p.ConfigMapEdits)
	assert.Equal(t, []string{"cp1", "w1"}, nodeNames(p.NodeMoves))
	st := p.Steps[stepIndex(t, p, byTitle("Rewrite every Node's podCIDR"), "node moves")]
	assert.True(t, strings.HasSuffix(st.Detail, " Nodes to move (suggested targets): cp1 10.244.0.0/24 -> 10.30.0.0/24; w1 10.244.1.0/24 -> 10.30.1.0/24."), st.Detail)

	s.Nodes = []cidr.NodePodCIDRs{{Name: "cp1", PodCIDRs: []string{"10.30.0.0/24"}}, {Name: "w1", PodCIDRs: []string{"10.30.1.0/24"}}}
	_, err = NewPlan(s, Intent{PodSubnet: "10.30.0.0/16"}, PlanOptions{})
	require.ErrorIs(t, err, ErrNothingToDo, "the nodes moved")
}

func nodeNames(moves []NodeMove) []string {
	var out []string
	for _, m := range moves {
		out = append(out, m.Name)
	}
	return out
}
