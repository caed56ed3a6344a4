package kubeadmcfg

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/cidr"
)

func TestRead(t *testing.T) {
	ctx := context.Background()
	var nodes []runtime.Object
	for i := 0; i < 3; i++ {
		nodes = append(nodes, node("n"+string(rune('a'+i)), "10.244."+string(rune('0'+i))+".0/24"))
	}
	nodes = append(nodes, &corev1.Node{ObjectMeta: node("old").ObjectMeta, Spec: corev1.NodeSpec{PodCIDR: "10.244.9.0/24"}})
	f := newFakeCluster(t, append(nodes, configMap(KubeadmConfigMap, KubeadmConfigKey, string(golden(t, "v1.31", "cluster-configuration.yaml")), "5"))...)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ControllerManagerManifest), golden(t, "v1.31", "kube-controller-manager.yaml"), 0o600))

	s, err := Read(ctx, f, ReadOptions{ManifestDir: dir, Nodes: true})
	require.NoError(t, err)
	require.NotNil(t, s.Kubeadm)
	assert.Equal(t, ConfigMapRef{Namespace: Namespace, Name: KubeadmConfigMap, Key: KubeadmConfigKey, UID: "uid-kubeadm-config", ResourceVersion: "5"}, s.KubeadmRef)
	assert.Nil(t, s.KubeProxy, "a missing ConfigMap is skipped")
	assert.Nil(t, s.Kubelet)
	require.NotNil(t, s.ControllerManager)
	assert.Equal(t, filepath.Join(dir, ControllerManagerManifest), s.ControllerManager.Source())
	assert.Nil(t, s.APIServer, "a missing manifest is skipped")
	assert.ElementsMatch(t, []cidr.NodePodCIDRs{
		{Name: "na", PodCIDRs: []string{"10.244.0.0/24"}}, {Name: "nb", PodCIDRs: []string{"10.244.1.0/24"}},
		{Name: "nc", PodCIDRs: []string{"10.244.2.0/24"}}, {Name: "old", PodCIDRs: []string{"10.244.9.0/24"}},
	}, s.Nodes)

	vals := s.Values()
	assert.Contains(t, vals, Value{Where: "ConfigMap kube-system/kubeadm-config ClusterConfiguration networking.podSubnet", Value: "192.168.0.0/16"})
	assert.Contains(t, vals, Value{Where: filepath.Join(dir, ControllerManagerManifest) + " --cluster-cidr", Value: "192.168.0.0/16"})
	assert.Contains(t, vals, Value{Where: "Node old spec.podCIDRs", Value: "10.244.9.0/24"})
}

func TestReadErrors(t *testing.T) {
	ctx := context.Background()
	f := newFakeCluster(t)
	f.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, KubeadmConfigMap, errors.New("no"))
	})
	_, err := Read(ctx, f, ReadOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err))
	assert.Contains(t, err.Error(), "reading ConfigMap kube-system/kubeadm-config")

	bad := newFakeCluster(t, configMap(KubeadmConfigMap, KubeadmConfigKey, "apiVersion: kubeadm.k8s.io/v1beta2\nkind: ClusterConfiguration\n", "1"))
	_, err = Read(ctx, bad, ReadOptions{})
	require.ErrorIs(t, err, ErrUnsupportedVersion)
	assert.Contains(t, err.Error(), "ConfigMap kube-system/kubeadm-config ClusterConfiguration")

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, APIServerManifest), []byte("apiVersion: v1\nkind: Pod\n"), 0o600))
	s := &Snapshot{}
	err = s.LoadManifests(dir)
	require.ErrorIs(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), APIServerManifest)
}

func TestDecodeConfigMap(t *testing.T) {
	data, err := os.ReadFile("../examples/kubeadmcfg/testdata/kubeadm-config.yaml")
	require.NoError(t, err)
	cm, err := DecodeConfigMap(data)
	require.NoError(t, err)
	s := &Snapshot{}
	require.NoError(t, s.AddConfigMap(cm))
	assert.Equal(t, "10.20.0.0/16", s.Kubeadm.Networking().PodSubnet)
	assert.Equal(t, "3481977", s.KubeadmRef.ResourceVersion)

	_, err = DecodeConfigMap([]byte("kind: Secret\n"))
	require.ErrorIs(t, err, ErrInvalid)
	_, err = DecodeConfigMap([]byte("kind: [\n"))
	require.ErrorIs(t, err, ErrInvalid)
	err = s.AddConfigMap(&corev1.ConfigMap{Data: map[string]string{"other": "x"}})
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorIs(t, s.AddConfigMap(nil), ErrInvalid)
}

// Values lists a setting only where it is written: an empty serviceSubnet,
// dnsDomain, clusterDNS or clusterDomain is not a value to compare. A
// ConfigMap given without a namespace is kube-system's.
func TestValuesListOnlyWhatIsWritten(t *testing.T) {
	for _, written := range []bool{false, true} {
		kubeadm := "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.244.0.0/16\n"
		kubelet := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
		if written {
			kubeadm += "  serviceSubnet: 10.96.0.0/12\n  dnsDomain: cluster.local\n"
			kubelet += "clusterDNS:\n- 10.96.0.10\nclusterDomain: cluster.local\n"
		}
		s := &Snapshot{}
		require.NoError(t, s.AddConfigMap(configMap(KubeadmConfigMap, KubeadmConfigKey, kubeadm, "1")))
		cm := configMap(KubeletConfigMap, KubeletConfigKey, kubelet, "2")
		cm.Namespace = ""
		require.NoError(t, s.AddConfigMap(cm))
		assert.Equal(t, Namespace, s.KubeletRef.Namespace, "a ConfigMap without a namespace is kube-system's")
		got := map[string]string{}
		for _, v := range s.Values() {
			got[v.Where] = v.Value
		}
		want := map[string]string{"ConfigMap kube-system/kubeadm-config ClusterConfiguration networking.podSubnet": "10.244.0.0/16"}
		if written {
			want["ConfigMap kube-system/kubeadm-config ClusterConfiguration networking.serviceSubnet"] = "10.96.0.0/12"
			want["ConfigMap kube-system/kubeadm-config ClusterConfiguration networking.dnsDomain"] = "cluster.local"
			want["ConfigMap kube-system/kubelet-config kubelet clusterDNS"] = "10.96.0.10"
			want["ConfigMap kube-system/kubelet-config kubelet clusterDomain"] = "cluster.local"
		}
		assert.Equal(t, want, got, "written=%t", written)
	}
}
