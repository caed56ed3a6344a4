package nodecidr

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

func kcmPod(args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-controller-manager-cp1", Labels: map[string]string{"component": "kube-controller-manager"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-controller-manager", Command: append([]string{"kube-controller-manager"}, args...)}}},
	}
}

func kubeadmConfig(text string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"}, Data: map[string]string{"ClusterConfiguration": text}}
}

const v1beta4 = `apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
networking:
  podSubnet: 10.233.64.0/18
  serviceSubnet: 10.233.0.0/18
controllerManager:
  extraArgs:
  - name: node-cidr-mask-size
    value: "24"
`

func TestDiscoverControllerManagerFlags(t *testing.T) {
	t.Run("static pod wins and disagreement is reported", func(t *testing.T) {
		c, _ := nodecidrtest.New(kcmPod("--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/12", "--node-cidr-mask-size", "24", "--service-cluster-ip-range=10.96.0.0/12"),
			kubeadmConfig(v1beta4))
		d, err := DiscoverControllerManagerFlags(ctxT(t), c)
		require.NoError(t, err)
		assert.Equal(t, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/12", NodeCIDRMaskSize: 24, ServiceClusterIPRange: "10.96.0.0/12"}, d.Flags)
		assert.Equal(t, "pod kube-system/kube-controller-manager-cp1", d.Source)
		require.Len(t, d.Warnings, 1)
		assert.Contains(t, d.Warnings[0], "kubeadm-config says")
	})
	t.Run("kubeadm-config v1beta4", func(t *testing.T) {
		c, _ := nodecidrtest.New(kubeadmConfig(v1beta4))
		d, err := DiscoverControllerManagerFlags(ctxT(t), c)
		require.NoError(t, err)
		assert.Equal(t, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.233.64.0/18", NodeCIDRMaskSize: 24, ServiceClusterIPRange: "10.233.0.0/18"}, d.Flags)
	})
	t.Run("kubeadm-config v1beta3 map", func(t *testing.T) {
		f, err := ParseKubeadmClusterConfiguration([]byte("networking: {podSubnet: 10.244.0.0/16}\ncontrollerManager: {extraArgs: {node-cidr-mask-size-ipv4: '25'}}\n"))
		require.NoError(t, err)
		assert.Equal(t, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/16", NodeCIDRMaskSizeIPv4: 25, ServiceClusterIPRange: DefaultKubeadmServiceSubnet}, f)
		_, err = ParseKubeadmClusterConfiguration([]byte("controllerManager: {extraArgs: 5}\n"))
		require.Error(t, err)
	})
	t.Run("nothing found", func(t *testing.T) {
		c, _ := nodecidrtest.New()
		_, err := DiscoverControllerManagerFlags(ctxT(t), c)
		require.ErrorIs(t, err, ErrNotDiscovered)
	})
	t.Run("forbidden reads count as not found", func(t *testing.T) {
		c, _ := nodecidrtest.New()
		c.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: a.GetResource().Resource}, "", errors.New("rbac"))
		})
		_, err := DiscoverControllerManagerFlags(ctxT(t), c)
		require.ErrorIs(t, err, ErrNotDiscovered)
		assert.Contains(t, err.Error(), "forbidden")
	})
}

func TestParseControllerManagerArgs(t *testing.T) {
	f, found, err := ParseControllerManagerArgs([]string{"--allocate-node-cidrs", "--node-cidr-mask-size-ipv4=24", "--node-cidr-mask-size-ipv6", "64", "--cluster-cidr", "10.0.0.0/16,fd00::/48", "--v=2"})
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.0.0.0/16,fd00::/48", NodeCIDRMaskSizeIPv4: 24, NodeCIDRMaskSizeIPv6: 64}, f)
	_, found, _ = ParseControllerManagerArgs([]string{"kube-scheduler", "--v=2"})
	assert.False(t, found)
	_, _, err = ParseControllerManagerArgs([]string{"--node-cidr-mask-size=abc", "--allocate-node-cidrs=maybe"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--node-cidr-mask-size=abc: want a number")
}

// TestDiscoverControllerManagerFlagsCorners: the first pod, by name, whose
// command line has IPAM flags counts, not the first pod; a mask that
// differs from kubeadm-config's is reported like a cluster CIDR that does;
// a kubeadm-config without extraArgs is read; and with nothing to report,
// the error is ErrNotDiscovered alone.
func TestDiscoverControllerManagerFlagsCorners(t *testing.T) {
	t.Run("the first pod with flags", func(t *testing.T) {
		bare := kcmPod("--v=2")
		bare.Name = "kube-controller-manager-a"
		flagged := kcmPod("--allocate-node-cidrs=true", "--cluster-cidr=10.233.64.0/18", "--node-cidr-mask-size=25")
		flagged.Name = "kube-controller-manager-b"
		c, _ := nodecidrtest.New(flagged, bare, kubeadmConfig(v1beta4))
		d, err := DiscoverControllerManagerFlags(ctxT(t), c)
		require.NoError(t, err)
		assert.Equal(t, "pod kube-system/kube-controller-manager-b", d.Source)
		assert.Equal(t, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.233.64.0/18", NodeCIDRMaskSize: 25}, d.Flags)
		assert.Equal(t, []string{"kubeadm-config says --allocate-node-cidrs=true --cluster-cidr=10.233.64.0/18 --node-cidr-mask-size=24 --service-cluster-ip-range=10.233.0.0/18 " +
			"but the running kube-controller-manager uses --allocate-node-cidrs=true --cluster-cidr=10.233.64.0/18 --node-cidr-mask-size=25; " +
			"the next kubeadm upgrade rewrites the manifest from kubeadm-config"}, d.Warnings, "only the mask differs")
	})
	t.Run("agreeing", func(t *testing.T) {
		c, _ := nodecidrtest.New(kcmPod("--allocate-node-cidrs=true", "--cluster-cidr=10.233.64.0/18", "--node-cidr-mask-size=24"), kubeadmConfig(v1beta4))
		d, err := DiscoverControllerManagerFlags(ctxT(t), c)
		require.NoError(t, err)
		assert.Empty(t, d.Warnings)
	})
	t.Run("kubeadm-config without extraArgs", func(t *testing.T) {
		f, err := ParseKubeadmClusterConfiguration([]byte("apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.244.0.0/16\n"))
		require.NoError(t, err)
		assert.Equal(t, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/16", ServiceClusterIPRange: DefaultKubeadmServiceSubnet}, f)
	})
	t.Run("nothing found, nothing to say", func(t *testing.T) {
		c, _ := nodecidrtest.New()
		_, err := DiscoverControllerManagerFlags(ctxT(t), c)
		assert.Equal(t, ErrNotDiscovered, err)
	})
	t.Run("a flag without its value, last", func(t *testing.T) {
		f, found, err := ParseControllerManagerArgs([]string{"--allocate-node-cidrs=true", "--cluster-cidr"})
		require.NoError(t, err)
		assert.True(t, found)
		assert.Equal(t, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true}, f)
	})
}

// The README's ClusterRole grants exactly what Apply checks for, no more.
func TestClusterRoleCoversApply(t *testing.T) {
	var role rbacv1.ClusterRole
	require.NoError(t, yaml.UnmarshalStrict([]byte(ClusterRoleYAML()), &role))
	assert.Equal(t, "ClusterRole", role.Kind)
	granted := map[Permission]bool{}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					granted[Permission{Verb: v, Group: g, Resource: res}] = true
				}
			}
		}
	}
	needed := map[Permission]bool{}
	opts := ApplyOptions{Hooks: []Hook{DeleteNodePods(nil, DeletePodsOptions{})}, ClusterJournal: &ClusterJournal{}}
	for _, p := range RequiredPermissions(opts) {
		p.Namespace = "" // a ClusterRole grants in every namespace
		needed[p] = true
	}
	// The Lease lock (package lease) takes, renews and clears its Lease.
	for _, v := range []string{"get", "create", "update"} {
		needed[Permission{Verb: v, Group: "coordination.k8s.io", Resource: "leases"}] = true
	}
	assert.Equal(t, needed, granted)
	for _, p := range RequiredPermissions(opts) {
		if p.Resource == "configmaps" {
			assert.Equal(t, "kube-system", p.Namespace, "the cluster journal's namespace")
		}
	}
}
