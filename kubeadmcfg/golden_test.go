package kubeadmcfg

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden *.edited files")

// Reading then writing with no change gives back identical bytes, for every
// file of every kubeadm version.
func TestGoldenRoundTrip(t *testing.T) {
	for _, version := range goldenVersions {
		t.Run(version, func(t *testing.T) {
			cc := golden(t, version, "cluster-configuration.yaml")
			c, err := ParseClusterConfiguration(cc)
			require.NoError(t, err)
			assert.Equal(t, string(cc), string(c.Bytes()))

			for _, f := range []string{"kube-controller-manager.yaml", "kube-apiserver.yaml"} {
				data := golden(t, version, f)
				m, err := ParseManifest(data)
				require.NoError(t, err)
				assert.Equal(t, string(data), string(m.Bytes()))
				// Setting a flag to the value it has is no change either.
				for name, v := range m.Flags() {
					require.NoError(t, m.SetFlag(name, v))
				}
				assert.Equal(t, string(data), string(m.Bytes()))
			}
			kp := golden(t, version, "kube-proxy.conf")
			p, err := ParseKubeProxyConfig(kp)
			require.NoError(t, err)
			assert.Equal(t, string(kp), string(p.Bytes()))
			kl := golden(t, version, "kubelet.yaml")
			k, err := ParseKubeletConfig(kl)
			require.NoError(t, err)
			require.NoError(t, k.SetClusterDNS(k.ClusterDNS()))
			assert.Equal(t, string(kl), string(k.Bytes()))
		})
	}
}

// The same edits on every version, compared with reviewed golden outputs.
func TestGoldenEdits(t *testing.T) {
	for _, version := range goldenVersions {
		t.Run(version, func(t *testing.T) {
			c, err := ParseClusterConfiguration(golden(t, version, "cluster-configuration.yaml"))
			require.NoError(t, err)
			require.NoError(t, c.SetPodSubnet("10.20.0.0/16"))
			require.NoError(t, c.SetServiceSubnet("172.24.0.0/16"))
			require.NoError(t, c.SetExtraArg(ControllerManager, FlagNodeCIDRMaskSize, "23"))
			require.NoError(t, c.SetExtraArg(APIServer, FlagServiceClusterIPRange, "172.24.0.0/16"))
			checkGolden(t, version, "cluster-configuration.yaml.edited", c.Bytes())

			kcm, err := ParseManifest(golden(t, version, "kube-controller-manager.yaml"))
			require.NoError(t, err)
			require.NoError(t, kcm.Apply([]FlagChange{
				{Flag: FlagClusterCIDR, Value: "10.20.0.0/16"},
				{Flag: FlagNodeCIDRMaskSize, Value: "23"},
				{Flag: FlagServiceClusterIPRange, Value: "172.24.0.0/16"},
				{Flag: FlagAllocateNodeCIDRs, Value: "true"},
			}))
			checkGolden(t, version, "kube-controller-manager.yaml.edited", kcm.Bytes())

			api, err := ParseManifest(golden(t, version, "kube-apiserver.yaml"))
			require.NoError(t, err)
			require.NoError(t, api.SetFlag(FlagServiceClusterIPRange, "172.24.0.0/16"))
			checkGolden(t, version, "kube-apiserver.yaml.edited", api.Bytes())

			// Only what was asked changed: everything else decodes the same.
			sameExcept(t, golden(t, version, "kube-apiserver.yaml"), api.Bytes())
		})
	}
}

func checkGolden(t *testing.T, version, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", version, name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -run TestGoldenEdits -update and review the files")
	assert.Equal(t, string(want), string(got))
}

// sameExcept checks that two manifests differ only in their command.
func sameExcept(t *testing.T, a, b []byte) {
	t.Helper()
	var x, y map[string]any
	require.NoError(t, yaml.Unmarshal(a, &x))
	require.NoError(t, yaml.Unmarshal(b, &y))
	for _, m := range []map[string]any{x, y} {
		c := m["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		delete(c, "command")
	}
	assert.Equal(t, x, y)
}
