package kubeadmcfg

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The current layout is read from the running components first, then from
// kubeadm-config, then from kube-proxy (pods) or kube-controller-manager
// (Services); each source differs here, so each case shows which one won.
func TestCurrentLayoutPrecedence(t *testing.T) {
	const (
		kcm = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command: [kube-controller-manager, --cluster-cidr=10.1.0.0/16, --node-cidr-mask-size=26, --service-cluster-ip-range=10.91.0.0/16]\n"
		api = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command: [kube-apiserver, --service-cluster-ip-range=10.94.0.0/16]\n"
		cc  = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.2.0.0/16\n  serviceSubnet: 10.92.0.0/16\ncontrollerManager:\n  extraArgs:\n  - name: node-cidr-mask-size\n    value: \"25\"\n"
		kp  = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.3.0.0/16\n"
	)
	build := func(t *testing.T, kcm, api, cc, kp string) *Snapshot {
		t.Helper()
		s := &Snapshot{}
		var err error
		if kcm != "" {
			s.ControllerManager, err = parseManifest("kube-controller-manager.yaml", []byte(kcm))
			require.NoError(t, err)
		}
		if api != "" {
			s.APIServer, err = parseManifest("kube-apiserver.yaml", []byte(api))
			require.NoError(t, err)
		}
		if cc != "" {
			require.NoError(t, s.AddConfigMap(configMap(KubeadmConfigMap, KubeadmConfigKey, cc, "1")))
		}
		if kp != "" {
			require.NoError(t, s.AddConfigMap(configMap(KubeProxyConfigMap, KubeProxyConfigKey, kp, "2")))
		}
		return s
	}
	kcmNoCIDR := "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command: [kube-controller-manager, --node-cidr-mask-size=26]\n"
	ccBadMask := replaceOnce(t, cc, `value: "25"`, `value: "x"`)
	for _, tc := range []struct {
		name             string
		kcm, api, cc, kp string
		pods, svc        string
		masks            []int
	}{
		{"every source", kcm, api, cc, kp, "10.1.0.0/16", "10.94.0.0/16", []int{26}},
		{"no controller manager", "", api, cc, kp, "10.2.0.0/16", "10.94.0.0/16", []int{25}},
		{"a controller manager without --cluster-cidr", kcmNoCIDR, api, cc, kp, "10.2.0.0/16", "10.94.0.0/16", []int{26}},
		{"kube-proxy only", "", api, "", kp, "10.3.0.0/16", "10.94.0.0/16", []int{24}},
		{"kubeadm-config whose flags do not parse", "", api, ccBadMask, kp, "10.3.0.0/16", "10.94.0.0/16", []int{24}},
		{"no apiserver", kcm, "", cc, kp, "10.1.0.0/16", "10.92.0.0/16", []int{26}},
		{"Services from the controller manager", kcm, "", "", kp, "10.1.0.0/16", "10.91.0.0/16", []int{26}},
		{"no pod CIDR anywhere", kcmNoCIDR, api, "", "", "", "10.94.0.0/16", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, pods, svc := current(build(t, tc.kcm, tc.api, tc.cc, tc.kp))
			assert.Equal(t, tc.pods, l.PodSubnet)
			assert.Equal(t, tc.svc, l.ServiceSubnet)
			assert.Equal(t, tc.masks, l.NodeMasks)
			assert.Equal(t, tc.pods, joinPrefixes(pods))
			assert.Equal(t, tc.svc, joinPrefixes(svc))
		})
	}
}
