package kubeadmcfg

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKubeProxyConfig(t *testing.T) {
	data := golden(t, "v1.36", "kube-proxy.conf")
	c, err := ParseKubeProxyConfig(data)
	require.NoError(t, err)
	assert.Equal(t, "10.244.0.0/16", c.ClusterCIDR())
	require.NoError(t, c.SetClusterCIDR("10.20.0.0/16,fd00:20::/56"))
	assert.Equal(t, "10.20.0.0/16,fd00:20::/56", c.ClusterCIDR())
	assert.Equal(t, replaceOnce(t, string(data), "clusterCIDR: 10.244.0.0/16", "clusterCIDR: 10.20.0.0/16,fd00:20::/56"), string(c.Bytes()))

	empty, err := ParseKubeProxyConfig(golden(t, "v1.35", "kube-proxy.conf"))
	require.NoError(t, err)
	assert.Equal(t, "", empty.ClusterCIDR())
	require.NoError(t, empty.SetClusterCIDR("10.20.0.0/16"))
	assert.Contains(t, string(empty.Bytes()), "\nclusterCIDR: 10.20.0.0/16\n")

	err = c.SetClusterCIDR("10.20.0.1/16")
	var fe *FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "clusterCIDR", fe.Field)

	_, err = ParseKubeProxyConfig([]byte("apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\n"))
	require.ErrorIs(t, err, ErrUnsupportedVersion)
	assert.Contains(t, err.Error(), "supported: kubeproxy.config.k8s.io/v1alpha1")
	_, err = ParseKubeProxyConfig([]byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: [a]\n"))
	require.ErrorIs(t, err, ErrInvalid)
}

func TestKubeletConfig(t *testing.T) {
	data := golden(t, "v1.33", "kubelet.yaml")
	c, err := ParseKubeletConfig(data)
	require.NoError(t, err)
	assert.Equal(t, []string{"10.96.0.10"}, c.ClusterDNS())
	assert.Equal(t, "cluster.local", c.ClusterDomain())

	require.NoError(t, c.SetClusterDNS([]string{"10.96.0.10", "fd00:10:96::a"}))
	assert.Equal(t, replaceOnce(t, string(data), "- 10.96.0.10\n", "- 10.96.0.10\n- fd00:10:96::a\n"), string(c.Bytes()))
	require.NoError(t, c.SetClusterDNS([]string{"172.24.0.10"}))
	assert.Equal(t, replaceOnce(t, string(data), "- 10.96.0.10\n", "- 172.24.0.10\n"), string(c.Bytes()))
	require.NoError(t, c.SetClusterDomain("corp.example"))
	assert.Equal(t, "corp.example", c.ClusterDomain())
	require.NoError(t, c.SetClusterDNS(nil))
	assert.Nil(t, c.ClusterDNS())
	require.NoError(t, c.SetClusterDNS([]string{"10.0.0.10"}), "the list comes back")
	assert.Equal(t, []string{"10.0.0.10"}, c.ClusterDNS())

	for _, bad := range [][]string{{"10.96.0.300"}, {"fe80::a%eth0"}, {"::ffff:10.0.0.1"}, {"10.0.0.0/24"}} {
		err := c.SetClusterDNS(bad)
		var fe *FieldError
		require.True(t, errors.As(err, &fe), bad)
		assert.Equal(t, "clusterDNS[0]", fe.Field)
	}
	require.ErrorIs(t, c.SetClusterDomain("-bad-"), ErrInvalid)
	_, err = ParseKubeletConfig([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS: 10.96.0.10\n"))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "clusterDNS")
}
