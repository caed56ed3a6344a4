package kubeadmcfg

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/cidr"
)

func TestParseClusterConfigurationErrors(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		is     error
		field  string
		substr string
	}{
		{"empty", "", ErrInvalid, "", "empty"},
		{"not yaml", "a: [", ErrInvalid, "", "not valid YAML"},
		{"a list", "- a\n", ErrInvalid, "", "must be a YAML mapping"},
		{"no kind", "apiVersion: kubeadm.k8s.io/v1beta4\n", ErrInvalid, "kind", "expected kind: ClusterConfiguration"},
		{"other kind", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n", ErrNotFound, "kind", "no ClusterConfiguration document"},
		{"no apiVersion", "kind: ClusterConfiguration\n", ErrInvalid, "apiVersion", "kubeadm.k8s.io/v1beta3, kubeadm.k8s.io/v1beta4"},
		{"v1beta2", "apiVersion: kubeadm.k8s.io/v1beta2\nkind: ClusterConfiguration\n", ErrUnsupportedVersion, "", `"kubeadm.k8s.io/v1beta2"; supported: kubeadm.k8s.io/v1beta3, kubeadm.k8s.io/v1beta4`},
		{"networking list", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking: [a]\n", ErrInvalid, "networking", "must be a mapping"},
		{"podSubnet map", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: {a: b}\n", ErrInvalid, "networking.podSubnet", "single value"},
		{"v1beta4 with a map", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrollerManager:\n  extraArgs:\n    cluster-cidr: 10.0.0.0/8\n", ErrInvalid, "controllerManager.extraArgs", "expects a list of {name, value}"},
		{"v1beta3 with a list", "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\napiServer:\n  extraArgs:\n  - name: a\n    value: b\n", ErrInvalid, "apiServer.extraArgs", "expects a mapping"},
		{"v1beta3 value a list", "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\ncontrollerManager:\n  extraArgs:\n    cluster-cidr: [10.0.0.0/8]\n", ErrInvalid, "controllerManager.extraArgs", "single value"},
		{"v1beta4 value a list", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrollerManager:\n  extraArgs:\n  - name: cluster-cidr\n    value: [10.0.0.0/8]\n", ErrInvalid, "controllerManager.extraArgs[0].value", "single value"},
		{"v1beta4 second value a mapping", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrollerManager:\n  extraArgs:\n  - name: allocate-node-cidrs\n    value: \"true\"\n  - name: cluster-cidr\n    value: {a: b}\n", ErrInvalid, "controllerManager.extraArgs[1].value", "single value"},
		{"v1beta4 item without name", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\napiServer:\n  extraArgs:\n  - value: b\n", ErrInvalid, "apiServer.extraArgs[0].name", "needs a name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseClusterConfiguration([]byte(tt.in))
			require.Error(t, err)
			assert.Nil(t, c)
			assert.ErrorIs(t, err, tt.is)
			assert.Contains(t, err.Error(), tt.substr)
			var fe *FieldError
			if tt.field != "" {
				require.True(t, errors.As(err, &fe), "%T", err)
				assert.Equal(t, tt.field, fe.Field)
			}
			var ve *VersionError
			if errors.As(err, &ve) {
				assert.Equal(t, "kubeadm.k8s.io/v1beta2", ve.APIVersion)
				assert.Equal(t, KubeadmVersions(), ve.Supported)
			}
		})
	}
}

func TestClusterConfigurationReadBothVersions(t *testing.T) {
	v3, err := ParseClusterConfiguration(golden(t, "v1.30", "cluster-configuration.yaml"))
	require.NoError(t, err)
	assert.Equal(t, KubeadmV1beta3, v3.APIVersion())
	assert.Equal(t, "v1.30.14", v3.KubernetesVersion())
	assert.Equal(t, 30, v3.KubernetesMinor())
	assert.Equal(t, Networking{PodSubnet: "10.244.0.0/16", ServiceSubnet: "10.96.0.0/12", DNSDomain: "cluster.local"}, v3.Networking())
	assert.Equal(t, []Arg{{Name: "node-cidr-mask-size", Value: "25"}}, v3.ExtraArgs(ControllerManager))
	v, ok := v3.ExtraArg(ControllerManager, "--node-cidr-mask-size")
	assert.True(t, ok)
	assert.Equal(t, "25", v)

	v4, err := ParseClusterConfiguration(golden(t, "v1.36", "cluster-configuration.yaml"))
	require.NoError(t, err)
	assert.Equal(t, KubeadmV1beta4, v4.APIVersion())
	assert.Equal(t, []Arg{{Name: "authorization-mode", Value: "Node,RBAC"}, {Name: "service-node-port-range", Value: "30000-32767"}}, v4.ExtraArgs(APIServer))
	assert.Nil(t, v4.ExtraArgs(ControllerManager))
	_, ok = v4.ExtraArg(ControllerManager, "cluster-cidr")
	assert.False(t, ok)
}

func TestClusterConfigurationDuplicateArgsLastWins(t *testing.T) {
	in := "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrollerManager:\n  extraArgs:\n  - name: node-cidr-mask-size\n    value: \"24\"\n  - name: v\n    value: \"2\"\n  - name: node-cidr-mask-size\n    value: \"25\"\n"
	c, err := ParseClusterConfiguration([]byte(in))
	require.NoError(t, err)
	v, _ := c.ExtraArg(ControllerManager, "node-cidr-mask-size")
	assert.Equal(t, "25", v)
	require.NoError(t, c.SetExtraArg(ControllerManager, "node-cidr-mask-size", "23"))
	for _, a := range c.ExtraArgs(ControllerManager) {
		if a.Name == "node-cidr-mask-size" {
			assert.Equal(t, "23", a.Value, "every occurrence is set")
		}
	}
	require.NoError(t, c.RemoveExtraArg(ControllerManager, "node-cidr-mask-size"))
	assert.Equal(t, []Arg{{Name: "v", Value: "2"}}, c.ExtraArgs(ControllerManager))
	require.NoError(t, c.RemoveExtraArg(ControllerManager, "v"))
	assert.Nil(t, c.ExtraArgs(ControllerManager))
	assert.Contains(t, string(c.Bytes()), "controllerManager: {}\n")
	require.NoError(t, c.RemoveExtraArg(ControllerManager, "absent"))
}

// TestRemoveExtraArgV1beta3: in v1beta3 extraArgs is a mapping; the key goes,
// the others and their order stay, "--name" names the same argument, and a
// value equal to the name is no key (nothing is removed for it).
func TestRemoveExtraArgV1beta3(t *testing.T) {
	in := "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\ncontrollerManager:\n  extraArgs:\n    v: \"2\"\n    node-cidr-mask-size: \"25\"\n    bind-address: 0.0.0.0\nnetworking:\n  podSubnet: 10.244.0.0/16\n"
	c, err := ParseClusterConfiguration([]byte(in))
	require.NoError(t, err)
	require.NoError(t, c.RemoveExtraArg(ControllerManager, "2"))
	assert.Equal(t, in, string(c.Bytes()))
	require.NoError(t, c.RemoveExtraArg(ControllerManager, "--node-cidr-mask-size"))
	assert.Equal(t, []Arg{{Name: "v", Value: "2"}, {Name: "bind-address", Value: "0.0.0.0"}}, c.ExtraArgs(ControllerManager))
	assert.Equal(t, "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\ncontrollerManager:\n  extraArgs:\n    v: \"2\"\n    bind-address: 0.0.0.0\nnetworking:\n  podSubnet: 10.244.0.0/16\n", string(c.Bytes()))
	require.NoError(t, c.RemoveExtraArg(ControllerManager, "v"))
	require.NoError(t, c.RemoveExtraArg(ControllerManager, "bind-address"))
	assert.Nil(t, c.ExtraArgs(ControllerManager))
	assert.Contains(t, string(c.Bytes()), "controllerManager: {}\n")
}

func TestClusterConfigurationSetters(t *testing.T) {
	for _, version := range []string{"v1.30", "v1.35"} {
		t.Run(version, func(t *testing.T) {
			c, err := ParseClusterConfiguration(golden(t, version, "cluster-configuration.yaml"))
			require.NoError(t, err)
			require.NoError(t, c.SetPodSubnet("10.20.0.0/16,fd00:20::/56"))
			require.NoError(t, c.SetServiceSubnet("172.24.0.0/16"))
			require.NoError(t, c.SetDNSDomain("corp.example"))
			require.NoError(t, c.SetExtraArg(APIServer, "service-cluster-ip-range", "172.24.0.0/16"))
			require.NoError(t, c.SetExtraArg(ControllerManager, "allocate-node-cidrs", "true"))
			assert.Equal(t, Networking{PodSubnet: "10.20.0.0/16,fd00:20::/56", ServiceSubnet: "172.24.0.0/16", DNSDomain: "corp.example"}, c.Networking())
			v, _ := c.ExtraArg(ControllerManager, "allocate-node-cidrs")
			assert.Equal(t, "true", v)
			// What was written reads back the same through a fresh parse.
			again, err := ParseClusterConfiguration(c.Bytes())
			require.NoError(t, err)
			assert.Equal(t, c.Networking(), again.Networking())
			assert.Equal(t, c.ExtraArgs(APIServer), again.ExtraArgs(APIServer))
			assert.Equal(t, c.APIVersion(), again.APIVersion(), "the version is kept")

			require.NoError(t, c.SetPodSubnet(""))
			assert.Empty(t, c.Networking().PodSubnet)
		})
	}
}

func TestClusterConfigurationSetterValidation(t *testing.T) {
	c, err := ParseClusterConfiguration(golden(t, "v1.31", "cluster-configuration.yaml"))
	require.NoError(t, err)
	before := string(c.Bytes())

	err = c.SetPodSubnet("10.233.64.1/16")
	require.ErrorIs(t, err, cidr.ErrHostBitsSet)
	var fe *FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "networking.podSubnet", fe.Field)
	assert.Equal(t, "10.233.64.1/16", fe.Value)
	assert.Contains(t, err.Error(), "the network is 10.233.0.0/16")

	require.ErrorIs(t, c.SetServiceSubnet("banana"), cidr.ErrSyntax)
	require.ErrorIs(t, c.SetServiceSubnet("10.0.0.0/16,10.1.0.0/16"), cidr.ErrDualStack)
	require.ErrorIs(t, c.SetDNSDomain("Not_A_Domain"), ErrInvalid)
	require.ErrorIs(t, c.SetExtraArg(APIServer, "--", "x"), ErrInvalid)
	assert.Equal(t, before, string(c.Bytes()), "failed setters change nothing")
}

func TestClusterConfigurationControllerManagerFlags(t *testing.T) {
	tests := []struct {
		version string
		want    cidr.ControllerManagerFlags
	}{
		{"v1.30", cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/16", ServiceClusterIPRange: "10.96.0.0/12", NodeCIDRMaskSize: 25}},
		{"v1.33", cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/16,fd00:10:244::/56", ServiceClusterIPRange: "10.96.0.0/16,fd00:10:96::/112", NodeCIDRMaskSizeIPv4: 24, NodeCIDRMaskSizeIPv6: 64}},
		{"v1.35", cidr.ControllerManagerFlags{}},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			c, err := ParseClusterConfiguration(golden(t, tt.version, "cluster-configuration.yaml"))
			require.NoError(t, err)
			f, err := c.ControllerManagerFlags()
			require.NoError(t, err)
			assert.Equal(t, tt.want, f)
			// kubeadm renders the same flags into the manifest of that version.
			m, err := ParseManifest(golden(t, tt.version, "kube-controller-manager.yaml"))
			require.NoError(t, err)
			mf, err := m.ControllerManagerFlags()
			require.NoError(t, err)
			assert.Equal(t, f, mf)
		})
	}
	c, err := ParseClusterConfiguration([]byte("apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\ncontrollerManager:\n  extraArgs:\n    node-cidr-mask-size: big\n"))
	require.NoError(t, err)
	_, err = c.ControllerManagerFlags()
	var fe *FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "--node-cidr-mask-size", fe.Field)
	assert.Equal(t, "big", fe.Value)
}

func TestClusterConfigurationMultiDocument(t *testing.T) {
	in := "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nlocalAPIEndpoint:\n  advertiseAddress: 10.0.0.1\n---\n" + string(golden(t, "v1.32", "cluster-configuration.yaml")) + "---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	c, err := ParseClusterConfiguration([]byte(in))
	require.NoError(t, err)
	assert.Equal(t, "10.244.0.0/16", c.Networking().PodSubnet)
	require.NoError(t, c.SetPodSubnet("10.20.0.0/16"))
	out := string(c.Bytes())
	assert.Equal(t, replaceOnce(t, in, "podSubnet: 10.244.0.0/16", "podSubnet: 10.20.0.0/16"), out)
}

func TestMinorOf(t *testing.T) {
	for in, want := range map[string]int{"v1.31.2": 31, "1.30": 30, "v1.36.0-rc.1": 36, "latest": 0, "v2.0.0": 0, "": 0, "v1.99999999999": 0, "v1.29.3": 29, "v1.1000.0": 1000, "v1.1001": 0} {
		assert.Equal(t, want, minorOf(in), in)
	}
}

// An empty v1beta4 extraArgs list gets the new item in place; the rest of the
// document is untouched.
func TestSetExtraArgIntoEmptyList(t *testing.T) {
	const doc = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrollerManager:\n  extraArgs: []\nnetworking:\n  podSubnet: 10.244.0.0/16\n"
	c, err := ParseClusterConfiguration([]byte(doc))
	require.NoError(t, err)
	require.NoError(t, c.SetExtraArg(ControllerManager, "cluster-cidr", "10.20.0.0/16"))
	assert.Equal(t, strings.Replace(doc, "extraArgs: []", "extraArgs: [{name: cluster-cidr, value: 10.20.0.0/16}]", 1), string(c.Bytes()))
	v, ok := c.ExtraArg(ControllerManager, "cluster-cidr")
	assert.True(t, ok)
	assert.Equal(t, "10.20.0.0/16", v)
}
