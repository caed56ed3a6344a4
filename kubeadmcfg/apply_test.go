package kubeadmcfg

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// liveStoryOne puts the story-one ConfigMaps in a fake cluster and reads them back.
func liveStoryOne(t *testing.T) (*fakeCluster, *Snapshot) {
	t.Helper()
	base := storyOne(t)
	var objs []runtime.Object
	for _, cm := range []*corev1.ConfigMap{
		configMap(KubeadmConfigMap, KubeadmConfigKey, string(base.Kubeadm.Bytes()), "100"),
		configMap(KubeProxyConfigMap, KubeProxyConfigKey, string(base.KubeProxy.Bytes()), "200"),
		configMap(KubeletConfigMap, KubeletConfigKey, string(base.Kubelet.Bytes()), "300"),
	} {
		objs = append(objs, cm)
	}
	for _, n := range base.Nodes {
		objs = append(objs, node(n.Name, n.PodCIDRs...))
	}
	f := newFakeCluster(t, objs...)
	s, err := Read(context.Background(), f, ReadOptions{Nodes: true})
	require.NoError(t, err)
	s.ControllerManager, s.APIServer = base.ControllerManager, base.APIServer
	return f, s
}

func getCM(t *testing.T, f *fakeCluster, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := f.CoreV1().ConfigMaps(Namespace).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return cm
}

func bothChanges(t *testing.T, s *Snapshot) *Plan {
	t.Helper()
	p, err := NewPlan(s, Intent{PodSubnet: "10.30.0.0/16", ServiceSubnet: "172.24.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	require.Len(t, p.ConfigMapEdits, 3)
	return p
}

func TestApply(t *testing.T) {
	ctx := context.Background()
	f, s := liveStoryOne(t)
	p := bothChanges(t, s)
	var seen []Event
	res, err := Apply(ctx, f, p, ApplyOptions{Progress: func(e Event) { seen = append(seen, e) }})
	require.NoError(t, err)
	assert.Equal(t, res.Events, seen)
	require.Len(t, res.Events, 3)
	for _, e := range res.Events {
		assert.Equal(t, OutcomeUpdated, e.Outcome)
	}
	assert.Equal(t, 3, f.updates)
	for _, e := range p.ConfigMapEdits {
		cm := getCM(t, f, e.Ref.Name)
		assert.Equal(t, e.After, cm.Data[e.Ref.Key])
		assert.NotEqual(t, e.Ref.ResourceVersion, cm.ResourceVersion)
	}
	// What was written parses and says what was asked.
	again, err := Read(ctx, f, ReadOptions{})
	require.NoError(t, err)
	assert.Equal(t, "10.30.0.0/16", again.Kubeadm.Networking().PodSubnet)
	assert.Equal(t, "172.24.0.0/16", again.Kubeadm.Networking().ServiceSubnet)
	assert.Equal(t, "10.30.0.0/16", again.KubeProxy.ClusterCIDR())
	assert.Equal(t, []string{"172.24.0.10"}, again.Kubelet.ClusterDNS())

	// Applying the same plan again changes nothing.
	res, err = Apply(ctx, f, p, ApplyOptions{})
	require.NoError(t, err)
	for _, e := range res.Events {
		assert.Equal(t, OutcomeUnchanged, e.Outcome)
	}
	assert.Equal(t, 3, f.updates)
}

func TestApplyRefusesStalePlan(t *testing.T) {
	ctx := context.Background()
	f, s := liveStoryOne(t)
	p := bothChanges(t, s)

	// Someone edits kube-proxy after the plan was made.
	cm := getCM(t, f, KubeProxyConfigMap)
	cm.Data["extra"] = "x"
	_, err := f.CoreV1().ConfigMaps(Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	updates := f.updates

	_, err = Apply(ctx, f, p, ApplyOptions{Edits: []string{EditKubeProxy}})
	require.ErrorIs(t, err, ErrStalePlan)
	assert.Contains(t, err.Error(), "resourceVersion 201, the plan read 200")
	assert.Equal(t, updates, f.updates)

	// A ConfigMap whose content differs from what the plan read is refused
	// even when the plan recorded no resourceVersion (made offline).
	p.ConfigMapEdits[1].Ref.ResourceVersion, p.ConfigMapEdits[1].Ref.UID = "", ""
	p.ConfigMapEdits[1].Before = "something else"
	_, err = Apply(ctx, f, p, ApplyOptions{Edits: []string{p.ConfigMapEdits[1].ID}})
	require.ErrorIs(t, err, ErrStalePlan)
	assert.Contains(t, err.Error(), "does not hold what the plan read")

	_, err = Apply(ctx, f, p, ApplyOptions{Edits: []string{"no-such-edit"}})
	require.ErrorIs(t, err, ErrNotFound)
}

// A ConfigMap that was deleted and created again (its UID changed) or that
// lost the key the plan edits is refused before any write: the plan's Before
// no longer describes what is there.
func TestApplyRefusesARecreatedOrEmptiedConfigMap(t *testing.T) {
	ctx := context.Background()

	t.Run("recreated", func(t *testing.T) {
		f, s := liveStoryOne(t)
		p := bothChanges(t, s)
		cm := getCM(t, f, KubeProxyConfigMap)
		require.NoError(t, f.CoreV1().ConfigMaps(Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{}))
		cm.UID = "uid-recreated"
		_, err := f.CoreV1().ConfigMaps(Namespace).Create(ctx, cm, metav1.CreateOptions{})
		require.NoError(t, err)
		updates := f.updates

		_, err = Apply(ctx, f, p, ApplyOptions{Edits: []string{EditKubeProxy}})
		require.ErrorIs(t, err, ErrStalePlan)
		assert.Contains(t, err.Error(), "was recreated (uid uid-recreated, the plan read uid-kube-proxy)")
		assert.Equal(t, updates, f.updates)
	})

	t.Run("key removed", func(t *testing.T) {
		f, s := liveStoryOne(t)
		p := bothChanges(t, s)
		cm := getCM(t, f, KubeProxyConfigMap)
		delete(cm.Data, KubeProxyConfigKey)
		cm.Data["other"] = "x"
		_, err := f.CoreV1().ConfigMaps(Namespace).Update(ctx, cm, metav1.UpdateOptions{})
		require.NoError(t, err)
		updates := f.updates

		_, err = Apply(ctx, f, p, ApplyOptions{Edits: []string{EditKubeProxy}})
		require.ErrorIs(t, err, ErrStalePlan)
		assert.Contains(t, err.Error(), "has no key "+KubeProxyConfigKey+" any more")
		assert.Equal(t, updates, f.updates)
		assert.Equal(t, "x", getCM(t, f, KubeProxyConfigMap).Data["other"])
	})
}

// A write that races ours between our read and our update is caught by the
// API server's resourceVersion check (enforced by the fake's reactor). A plan
// made from a ConfigMap without a resourceVersion (a saved file) is guarded
// the same way: the update carries the resourceVersion Apply read.
func TestApplyConcurrentEditConflicts(t *testing.T) {
	for _, planned := range []bool{true, false} {
		t.Run(fmt.Sprintf("resourceVersion in the plan=%t", planned), func(t *testing.T) {
			ctx := context.Background()
			f, s := liveStoryOne(t)
			p := bothChanges(t, s)
			if !planned {
				for i := range p.ConfigMapEdits {
					p.ConfigMapEdits[i].Ref.ResourceVersion, p.ConfigMapEdits[i].Ref.UID = "", ""
				}
			}
			f.beforeUpdate = func() {
				cm, err := f.Tracker().Get(configMapsGVR, Namespace, KubeadmConfigMap)
				require.NoError(t, err)
				c := cm.(*corev1.ConfigMap).DeepCopy()
				c.ResourceVersion = "150"
				require.NoError(t, f.Tracker().Update(configMapsGVR, c, Namespace))
			}
			_, err := Apply(ctx, f, p, ApplyOptions{Edits: []string{EditKubeadmConfig}})
			require.ErrorIs(t, err, ErrStalePlan)
			assert.Contains(t, err.Error(), "changed by someone else")
			assert.Equal(t, 0, f.updates)
			assert.Equal(t, p.ConfigMapEdits[0].Before, getCM(t, f, KubeadmConfigMap).Data[KubeadmConfigKey])
		})
	}
}

func TestApplyDryRun(t *testing.T) {
	ctx := context.Background()
	for _, dry := range []DryRun{DryRunClient, DryRunServer} {
		t.Run(string(dry), func(t *testing.T) {
			f, s := liveStoryOne(t)
			p := bothChanges(t, s)
			res, err := Apply(ctx, f, p, ApplyOptions{DryRun: dry})
			require.NoError(t, err)
			want := OutcomeWouldUpdate
			if dry == DryRunServer {
				want = OutcomeUpdated
			}
			for _, e := range res.Events {
				assert.Equal(t, want, e.Outcome)
				assert.Equal(t, dry, e.DryRun)
			}
			assert.Equal(t, 0, f.updates, "nothing persisted")
			for _, e := range p.ConfigMapEdits {
				assert.Equal(t, e.Before, getCM(t, f, e.Ref.Name).Data[e.Ref.Key])
			}
			var dryRunSent bool
			for _, a := range f.Actions() {
				if a.GetVerb() == "update" {
					dryRunSent = true
				}
			}
			assert.Equal(t, dry == DryRunServer, dryRunSent, "client dry-run sends no write; server dry-run sends DryRunAll writes")
		})
	}
	_, err := Apply(ctx, newFakeCluster(t), &Plan{}, ApplyOptions{DryRun: "maybe"})
	require.ErrorIs(t, err, ErrInvalid)
}

func TestApplyChecksAccessFirst(t *testing.T) {
	ctx := context.Background()
	f, s := liveStoryOne(t)
	p := bothChanges(t, s)
	f.deny["update/"+KubeletConfigMap] = true
	_, err := Apply(ctx, f, p, ApplyOptions{})
	require.ErrorIs(t, err, ErrForbidden)
	assert.Contains(t, err.Error(), "cannot update ConfigMap kube-system/kubelet-config (RBAC: access denied); nothing was changed")
	assert.Equal(t, 0, f.updates, "refused before the first write")

	_, err = Apply(ctx, f, p, ApplyOptions{SkipAccessCheck: true})
	require.NoError(t, err)
	assert.Equal(t, 3, f.updates)
}

func TestApplyRefusesBlockedPlan(t *testing.T) {
	f, s := liveStoryOne(t)
	p, err := NewPlan(s, Intent{PodSubnet: "10.233.0.0/16"}, PlanOptions{})
	require.NoError(t, err)
	require.True(t, p.Blocked())
	_, err = Apply(context.Background(), f, p, ApplyOptions{})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, 0, f.updates)
	_, err = Apply(context.Background(), f, nil, ApplyOptions{})
	require.ErrorIs(t, err, ErrInvalid)
}
