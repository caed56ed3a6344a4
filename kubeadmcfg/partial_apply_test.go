package kubeadmcfg

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// liveWithNodes is liveConsistent with the cluster's two nodes, each holding
// a /24 of the pod range 10.244.0.0/16.
func liveWithNodes(t *testing.T) *fakeCluster {
	t.Helper()
	f := liveConsistent(t)
	for _, n := range []*corev1.Node{node("cp1", "10.244.0.0/24"), node("w1", "10.244.1.0/24")} {
		require.NoError(t, f.Tracker().Add(n))
	}
	return f
}

// readAsTheExample reads what the kubeadmcfg example reads from a
// workstation: the three ConfigMaps and the nodes, no manifest (they live on
// the control-plane nodes).
func readAsTheExample(t *testing.T, f *fakeCluster) *Snapshot {
	t.Helper()
	s, err := Read(context.Background(), f, ReadOptions{Nodes: true})
	require.NoError(t, err)
	require.NotEmpty(t, s.Nodes)
	return s
}

// failNthConfigMapUpdate makes the n-th ConfigMap update (counted from now)
// fail as a dropped connection would, before anything is stored.
func failNthConfigMapUpdate(f *fakeCluster, n int) {
	calls := 0
	f.PrependReactor("update", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		if calls == n {
			return true, nil, apierrors.NewInternalError(errors.New("connection reset by peer"))
		}
		return false, nil, nil
	})
}

// remainingShape is what a plan asks still to be done: ConfigMap edits with
// their changes, manifest edits with their flag changes, node moves, and
// the procedure's shape.
type remainingShape struct {
	ConfigMaps map[string][]string
	Files      map[string][]FlagChange
	Nodes      []NodeMove
	Steps      []string
}

func remaining(p *Plan) remainingShape {
	r := remainingShape{ConfigMaps: map[string][]string{}, Files: map[string][]FlagChange{}, Nodes: p.NodeMoves, Steps: stepShape(p.Steps)}
	for _, e := range p.ConfigMapEdits {
		r.ConfigMaps[e.ID] = e.Changes
	}
	for _, e := range p.FileEdits {
		r.Files[e.ID] = e.Changes
	}
	return r
}

// A plan with several changes (pod CIDR, node mask and Service CIDR) whose
// Apply stopped on its second write (kubeadm-config written, kube-proxy and
// kubelet-config not; no manifest edited, no node moved). A fresh plan, read
// as the example reads (ConfigMaps and nodes, no manifest), lists exactly
// what the first one still had to do: the two ConfigMap edits left, every
// manifest edit with every flag (the node mask included, although
// kubeadm-config already has it: kube-controller-manager was not read and
// has not been touched) and every node move, in the same order.
//
// Then the rest of the ConfigMap edits is applied, so every ConfigMap agrees
// with the intent, but the nodes are still in the old range: the plan is
// not "nothing to change", it is the node moves and the
// kube-controller-manager edits. Once the nodes have moved, nothing read
// disagrees any more.
func TestPlanAfterAnApplyStoppedOnItsSecondWrite(t *testing.T) {
	ctx := context.Background()
	in := Intent{PodSubnet: "10.30.0.0/16", NodeMask: 25, ServiceSubnet: "172.24.0.0/16"}
	f := liveWithNodes(t)
	first, err := NewPlan(readAsTheExample(t, f), in, PlanOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{EditKubeadmConfig, EditKubeProxy, EditKubeletConfig}, editIDs(first))
	require.Equal(t, []string{EditPauseNodeIPAM, EditControllerFlags, EditAPIServerFlags}, fileEditIDs(first))
	require.Equal(t, []FlagChange{{Flag: FlagClusterCIDR, Value: "10.30.0.0/16"}, {Flag: FlagNodeCIDRMaskSize, Value: "25"},
		{Flag: FlagServiceClusterIPRange, Value: "172.24.0.0/16"}, {Flag: FlagAllocateNodeCIDRs, Value: "true"}},
		fileEdit(t, first, EditControllerFlags).Changes)
	require.Len(t, first.NodeMoves, 2)

	failNthConfigMapUpdate(f, 2)
	res, err := Apply(ctx, f, first, ApplyOptions{})
	require.Error(t, err, "the second write fails")
	require.Len(t, res.Events, 1)
	require.Equal(t, EditKubeadmConfig, res.Events[0].Edit)
	require.Equal(t, OutcomeUpdated, res.Events[0].Outcome)

	half := readAsTheExample(t, f)
	again, err := NewPlan(half, in, PlanOptions{})
	require.NoError(t, err, "kube-proxy, kubelet-config, the manifests and the nodes are still to do")
	want := remaining(first)
	delete(want.ConfigMaps, EditKubeadmConfig)
	want.Steps = stepShape(withoutEdits(first.Steps, EditKubeadmConfig))
	assert.Equal(t, want, remaining(again), "exactly what the first plan still had to do")
	for i, e := range again.ConfigMapEdits {
		assert.Equal(t, first.ConfigMapEdits[i+1].After, e.After, "%s: the same content as the first plan's", e.ID)
	}
	assert.Equal(t, first.Target, again.Target)
	assert.Equal(t, first.ProposedFlags, again.ProposedFlags)

	// The ConfigMap edits left are applied: every ConfigMap agrees with the
	// intent, nothing else has changed.
	_, err = Apply(ctx, f, again, ApplyOptions{})
	require.NoError(t, err)
	cms := readAsTheExample(t, f)
	last, err := NewPlan(cms, in, PlanOptions{})
	require.NoError(t, err, "every node is still in 10.244.0.0/16 with a /24: not nothing to change")
	assert.Empty(t, last.ConfigMapEdits)
	assert.Equal(t, first.NodeMoves, last.NodeMoves)
	assert.Equal(t, map[string][]FlagChange{
		EditPauseNodeIPAM:   fileEdit(t, first, EditPauseNodeIPAM).Changes,
		EditControllerFlags: fileEdit(t, first, EditControllerFlags).Changes,
	}, remaining(last).Files, "kube-controller-manager was not read: it gets its whole edit; the Service range is done where it can be seen")
	stepIndex(t, last, byTitle("Rewrite every Node's podCIDR into 10.30.0.0/16 with /25 subnets"), "node moves")
	assert.Less(t, stepIndex(t, last, byEdit(EditPauseNodeIPAM), "pause"), stepIndex(t, last, byEdit(EditControllerFlags), "flags"))
	for _, st := range last.Steps {
		assert.NotContains(t, st.Title, "off the old pod range 10.30.0.0/16", "the range being left is not the target")
	}

	// The nodes move (as nodecidr would): nothing read disagrees any more.
	for _, m := range last.NodeMoves {
		n, err := f.CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{})
		require.NoError(t, err)
		n.Spec.PodCIDR, n.Spec.PodCIDRs = m.To[0], m.To
		require.NoError(t, f.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), n, ""))
	}
	_, err = NewPlan(readAsTheExample(t, f), in, PlanOptions{})
	require.ErrorIs(t, err, ErrNothingToDo)
}

// A cluster installed without a pod CIDR gets one with the node mask asked
// for: kubeadm-config records it and kube-controller-manager gets it, in the
// first plan (not only in a plan made after kubeadm-config was applied).
func TestPlanFirstPodSubnetKeepsTheNodeMask(t *testing.T) {
	s := &Snapshot{}
	require.NoError(t, s.AddConfigMap(configMap(KubeadmConfigMap, KubeadmConfigKey, string(golden(t, "v1.35", "cluster-configuration.yaml")), "1")))
	require.NoError(t, s.AddConfigMap(configMap(KubeProxyConfigMap, KubeProxyConfigKey, string(golden(t, "v1.35", "kube-proxy.conf")), "2")))
	var err error
	s.ControllerManager, err = ParseManifest(golden(t, "v1.35", "kube-controller-manager.yaml"))
	require.NoError(t, err)
	p, err := NewPlan(s, Intent{PodSubnet: "10.244.0.0/16", NodeMask: 25}, PlanOptions{})
	require.NoError(t, err)
	assert.Equal(t, []int{25}, p.Target.NodeMasks)
	require.Equal(t, []string{EditKubeadmConfig, EditKubeProxy}, editIDs(p))
	assert.Equal(t, []string{"networking.podSubnet: (not set) -> 10.244.0.0/16", "controllerManager.extraArgs node-cidr-mask-size: (not set) -> 25"}, p.ConfigMapEdits[0].Changes)
	assert.Equal(t, []FlagChange{{Flag: FlagClusterCIDR, Value: "10.244.0.0/16"}, {Flag: FlagNodeCIDRMaskSize, Value: "25"}, {Flag: FlagAllocateNodeCIDRs, Value: "true"}},
		fileEdit(t, p, EditControllerFlags).Changes)
	require.NotNil(t, p.ProposedFlags)
	assert.Equal(t, 25, p.ProposedFlags.NodeCIDRMaskSize)
}
