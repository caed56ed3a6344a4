package kubeadmcfg

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/cidr"
)

// consistent is a v1.36 cluster where every place agrees.
func consistent(t *testing.T) *Snapshot {
	t.Helper()
	s := &Snapshot{}
	require.NoError(t, s.AddConfigMap(configMap(KubeadmConfigMap, KubeadmConfigKey, string(golden(t, "v1.36", "cluster-configuration.yaml")), "10")))
	require.NoError(t, s.AddConfigMap(configMap(KubeProxyConfigMap, KubeProxyConfigKey, string(golden(t, "v1.36", "kube-proxy.conf")), "11")))
	require.NoError(t, s.AddConfigMap(configMap(KubeletConfigMap, KubeletConfigKey, string(golden(t, "v1.36", "kubelet.yaml")), "12")))
	var err error
	s.ControllerManager, err = parseManifest("kcm.yaml", golden(t, "v1.36", "kube-controller-manager.yaml"))
	require.NoError(t, err)
	s.APIServer, err = parseManifest("apiserver.yaml", golden(t, "v1.36", "kube-apiserver.yaml"))
	require.NoError(t, err)
	s.Nodes = []cidr.NodePodCIDRs{{Name: "cp1", PodCIDRs: []string{"10.244.0.0/24"}}, {Name: "w1", PodCIDRs: []string{"10.244.1.0/24"}}, {Name: "w2"}}
	s.Pools = []PodPool{{Name: "default-ipv4-ippool", Kind: cidr.KindCalicoPool, CIDR: "10.244.0.0/16"}}
	return s
}

func kcmFlag(name, value string) func(t *testing.T, s *Snapshot) {
	return func(t *testing.T, s *Snapshot) { require.NoError(t, s.ControllerManager.SetFlag(name, value)) }
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(t *testing.T, s *Snapshot)
		codes []Code
		// where lists texts that must appear among the findings' sources.
		where []string
	}{
		{name: "consistent", mod: func(*testing.T, *Snapshot) {}, codes: []Code{}},
		{
			name:  "podSubnet vs --cluster-cidr",
			mod:   func(t *testing.T, s *Snapshot) { require.NoError(t, s.Kubeadm.SetPodSubnet("10.20.0.0/16")) },
			codes: []Code{CodePodSubnetMismatch},
			where: []string{"ConfigMap kube-system/kubeadm-config ClusterConfiguration networking.podSubnet", "kcm.yaml --cluster-cidr"},
		},
		{
			name:  "host bits are a warning, not a mismatch",
			mod:   kcmFlag(FlagClusterCIDR, "10.244.7.1/16"),
			codes: []Code{CodeHostBits},
			where: []string{"kcm.yaml --cluster-cidr"},
		},
		{
			name:  "garbage",
			mod:   kcmFlag(FlagClusterCIDR, "10.244.0.0"),
			codes: []Code{CodeInvalidValue, CodeControllerManagerFlags},
		},
		{
			name: "three Service ranges",
			mod: func(t *testing.T, s *Snapshot) {
				require.NoError(t, s.APIServer.SetFlag(FlagServiceClusterIPRange, "10.96.0.0/16"))
			},
			codes: []Code{CodeServiceSubnetMismatch, CodeServiceSubnetMismatch},
			where: []string{"apiserver.yaml --service-cluster-ip-range", "kcm.yaml --service-cluster-ip-range", "ClusterConfiguration networking.serviceSubnet"},
		},
		{
			name:  "clusterDNS outside the Service range",
			mod:   func(t *testing.T, s *Snapshot) { require.NoError(t, s.Kubelet.SetClusterDNS([]string{"172.30.0.10"})) },
			codes: []Code{CodeClusterDNSOutsideServiceSubnet},
			where: []string{"ConfigMap kube-system/kubelet-config kubelet clusterDNS[0]", "apiserver.yaml --service-cluster-ip-range"},
		},
		{
			name:  "clusterDNS not the tenth address",
			mod:   func(t *testing.T, s *Snapshot) { require.NoError(t, s.Kubelet.SetClusterDNS([]string{"10.96.0.53"})) },
			codes: []Code{CodeClusterDNSNotTenth},
		},
		{
			name: "node mask in extraArgs but not in the manifest",
			mod: func(t *testing.T, s *Snapshot) {
				require.NoError(t, s.Kubeadm.SetExtraArg(ControllerManager, FlagNodeCIDRMaskSize, "25"))
			},
			codes: []Code{CodeNodeMaskMismatch},
			where: []string{"controllerManager.extraArgs node-cidr-mask-size", "kcm.yaml --node-cidr-mask-size"},
		},
		{
			name:  "the default node mask spelled out is no disagreement",
			mod:   kcmFlag(FlagNodeCIDRMaskSize, "24"),
			codes: []Code{},
		},
		{
			name: "a node mask that does not fit",
			mod: func(t *testing.T, s *Snapshot) {
				require.NoError(t, s.Kubeadm.SetExtraArg(ControllerManager, FlagNodeCIDRMaskSize, "8"))
				require.NoError(t, s.ControllerManager.SetFlag(FlagNodeCIDRMaskSize, "8"))
			},
			codes: []Code{CodeControllerManagerFlags},
		},
		{
			name:  "node podCIDR of another size",
			mod:   func(_ *testing.T, s *Snapshot) { s.Nodes[1].PodCIDRs = []string{"10.244.2.0/23"} },
			codes: []Code{CodeNodePodCIDRMask},
		},
		{
			name:  "a node outside the cluster CIDR crashes kube-controller-manager",
			mod:   func(_ *testing.T, s *Snapshot) { s.Nodes[0].PodCIDRs = []string{"10.10.0.0/24"} },
			codes: []Code{CodeNodeCrash},
			where: []string{"Node cp1 spec.podCIDRs[0]", "kcm.yaml --cluster-cidr"},
		},
		{
			name:  "two nodes share a podCIDR",
			mod:   func(_ *testing.T, s *Snapshot) { s.Nodes[2].PodCIDRs = []string{"10.244.1.0/24"} },
			codes: []Code{CodeOverlap},
			where: []string{"Node w1 spec.podCIDRs[0]", "Node w2 spec.podCIDRs[0]"},
		},
		{
			name:  "kube-proxy clusterCIDR",
			mod:   func(t *testing.T, s *Snapshot) { require.NoError(t, s.KubeProxy.SetClusterCIDR("10.233.64.0/18")) },
			codes: []Code{CodeKubeProxyClusterCIDR, CodePoolOutsideKubeProxy},
			where: []string{"ConfigMap kube-system/kube-proxy config.conf clusterCIDR", "Calico IPPool default-ipv4-ippool"},
		},
		{
			name:  "kube-proxy without clusterCIDR",
			mod:   func(t *testing.T, s *Snapshot) { require.NoError(t, s.KubeProxy.SetClusterCIDR("")) },
			codes: []Code{CodeKubeProxyClusterCIDR},
		},
		{
			name: "a Calico pool outside the cluster CIDR",
			mod: func(_ *testing.T, s *Snapshot) {
				s.Pools = append(s.Pools, PodPool{Name: "new-pool", Kind: cidr.KindCalicoPool, CIDR: "10.20.0.0/16"})
			},
			codes: []Code{CodePoolOutsideKubeProxy, CodePoolOutsideClusterCIDR},
			where: []string{"Calico IPPool new-pool"},
		},
		{
			name: "flannel Network narrower than the cluster CIDR",
			mod: func(_ *testing.T, s *Snapshot) {
				s.Pools = []PodPool{{Name: "kube-flannel-cfg", Kind: cidr.KindFlannelNetwork, CIDR: "10.244.0.0/17"}}
			},
			codes: []Code{CodeClusterCIDROutsideNetwork},
		},
		{
			name: "flannel Network wider than the cluster CIDR is fine",
			mod: func(_ *testing.T, s *Snapshot) {
				s.Pools = []PodPool{{Name: "kube-flannel-cfg", Kind: cidr.KindFlannelNetwork, CIDR: "10.240.0.0/12"}}
			},
			codes: []Code{},
		},
		{
			name: "DNS domain moved in kubeadm and the kubelet alike",
			mod: func(t *testing.T, s *Snapshot) {
				require.NoError(t, s.Kubeadm.SetDNSDomain("corp.example"))
				require.NoError(t, s.Kubelet.SetClusterDomain("corp.example"))
			},
			codes: []Code{},
		},
		{
			name: "two Calico pools overlap",
			mod: func(_ *testing.T, s *Snapshot) {
				s.Pools = append(s.Pools, PodPool{Name: "extra-ippool", Kind: cidr.KindCalicoPool, CIDR: "10.244.128.0/17"})
			},
			codes: []Code{CodeOverlap},
			where: []string{"extra-ippool"},
		},
		{
			name: "a pod range containing a special-purpose range",
			mod: func(_ *testing.T, s *Snapshot) {
				s.Pools = append(s.Pools, PodPool{Name: "wide-ippool", Kind: cidr.KindCalicoPool, CIDR: "100.0.0.0/8"})
			},
			codes: []Code{CodePoolOutsideClusterCIDR, CodePoolOutsideKubeProxy, CodeOverlap},
			where: []string{"wide-ippool", "shared address space / CGNAT"},
		},
		{
			name:  "a dual-stack node in a single-stack cluster",
			mod:   func(_ *testing.T, s *Snapshot) { s.Nodes[1].PodCIDRs = []string{"10.244.1.0/24", "fd00:10:244:1::/64"} },
			codes: []Code{CodeNodeCrash},
			where: []string{"Node w1 spec.podCIDRs[1]"},
		},
		{
			name:  "DNS domain",
			mod:   func(t *testing.T, s *Snapshot) { require.NoError(t, s.Kubelet.SetClusterDomain("corp.example")) },
			codes: []Code{CodeDNSDomainMismatch},
		},
		{
			name: "pods and Services overlap",
			mod: func(t *testing.T, s *Snapshot) {
				for _, m := range []*Manifest{s.ControllerManager, s.APIServer} {
					require.NoError(t, m.SetFlag(FlagServiceClusterIPRange, "10.244.128.0/20"))
				}
				require.NoError(t, s.Kubeadm.SetServiceSubnet("10.244.128.0/20"))
				require.NoError(t, s.Kubeadm.SetExtraArg(APIServer, FlagServiceClusterIPRange, "10.244.128.0/20"))
				require.NoError(t, s.Kubelet.SetClusterDNS([]string{"10.244.128.10"}))
			},
			codes: []Code{CodeOverlap, CodeOverlap},
		},
		{
			name: "Tailscale's range",
			mod: func(t *testing.T, s *Snapshot) {
				for _, m := range []*Manifest{s.ControllerManager, s.APIServer} {
					require.NoError(t, m.SetFlag(FlagServiceClusterIPRange, "100.64.0.0/13"))
				}
				require.NoError(t, s.Kubeadm.SetExtraArg(APIServer, FlagServiceClusterIPRange, "100.64.0.0/13"))
				require.NoError(t, s.Kubeadm.SetServiceSubnet("100.64.0.0/13"))
				require.NoError(t, s.Kubelet.SetClusterDNS([]string{"100.64.0.10"}))
			},
			codes: []Code{CodeOverlap},
		},
		{
			name: "a Service range kube-apiserver 1.33 refuses",
			mod: func(t *testing.T, s *Snapshot) {
				require.NoError(t, s.Kubeadm.d.s.set(ypath{"kubernetesVersion"}, strNode("v1.33.1")))
				for _, m := range []*Manifest{s.ControllerManager, s.APIServer} {
					require.NoError(t, m.SetFlag(FlagServiceClusterIPRange, "10.128.0.0/11"))
				}
				require.NoError(t, s.Kubeadm.SetExtraArg(APIServer, FlagServiceClusterIPRange, "10.128.0.0/11"))
				require.NoError(t, s.Kubeadm.SetServiceSubnet("10.128.0.0/11"))
				require.NoError(t, s.Kubelet.SetClusterDNS([]string{"10.128.0.10"}))
			},
			codes: []Code{CodeServiceRange},
		},
		{
			name:  "node IPAM off in the manifest",
			mod:   kcmFlag(FlagAllocateNodeCIDRs, "false"),
			codes: []Code{CodeAllocateNodeCIDRs},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := consistent(t)
			tt.mod(t, s)
			rep := Check(s)
			assert.ElementsMatch(t, tt.codes, codes(rep.Findings), "%v", rep.Findings)
			var where []string
			for _, f := range rep.Findings {
				assert.NotEmpty(t, f.Message)
				for _, src := range f.Sources {
					where = append(where, src.Where)
				}
			}
			for _, w := range tt.where {
				assert.True(t, containsSub(where, w), "no source %q in %v", w, where)
			}
			assert.NotEmpty(t, rep.Values)
		})
	}
}

func containsSub(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func TestCheckStoryOne(t *testing.T) {
	s := storyOne(t)
	s.Pools = []PodPool{{Name: "default-pool", Kind: cidr.KindCalicoPool, CIDR: "10.233.64.0/18"}, {Name: "new-pool", Kind: cidr.KindCalicoPool, CIDR: "10.20.0.0/16"}}
	rep := Check(s)
	assert.Equal(t, []Code{CodePodSubnetMismatch, CodeNodeCrash, CodeNodeCrash, CodePoolOutsideKubeProxy, CodePoolOutsideClusterCIDR}, codes(rep.Findings))
	assert.Equal(t, 4, rep.Count(cidr.SeverityError))
	require.NotNil(t, rep.Preflight)
	assert.False(t, rep.Preflight.WouldStart)
	assert.Equal(t, "kube-controller-manager.yaml", rep.PreflightSource)
	assert.Contains(t, rep.Findings[1].Message, "failed to mark cidr[10.20.1.0/24] at idx [0] as occupied for node: worker1: cidr 10.20.1.0/24 is out the range of cluster cidr 10.233.64.0/18")
}

// With only kubeadm-config and the nodes (say, from a workstation), the
// preflight runs on the flags kubeadm would render.
func TestCheckKubeadmOnly(t *testing.T) {
	s := storyOne(t)
	s.ControllerManager, s.APIServer, s.KubeProxy, s.Kubelet = nil, nil, nil, nil
	rep := Check(s)
	require.NotNil(t, rep.Preflight)
	assert.Contains(t, rep.PreflightSource, "flags kubeadm would render")
	assert.Equal(t, []Code{CodeNodeCrash, CodeNodeCrash}, codes(rep.Findings))
	assert.Contains(t, rep.Findings[0].Message, "master1")

	assert.Equal(t, []Finding{}, Check(&Snapshot{}).Findings, "nothing read, nothing found")
}

// The pod CIDR is written in kubeadm-config (controllerManager.extraArgs
// cluster-cidr before networking.podSubnet, as kubeadm renders the flag) and
// in kube-controller-manager's manifest. A value on one side only is a
// warning that names what kubeadm upgrade would do; two values that differ
// are an error.
func TestCheckPodSubnetOnOneSideOnly(t *testing.T) {
	podFindings := func(rep Report) []Finding {
		var out []Finding
		for _, f := range rep.Findings {
			if f.Code == CodePodSubnetMismatch {
				out = append(out, f)
			}
		}
		return out
	}

	t.Run("controllerManager.extraArgs cluster-cidr is the kubeadm side", func(t *testing.T) {
		s := consistent(t)
		require.NoError(t, s.Kubeadm.SetExtraArg(ControllerManager, FlagClusterCIDR, "10.20.0.0/16"))
		fs := podFindings(Check(s))
		require.Len(t, fs, 1, "%v", fs)
		assert.Equal(t, cidr.SeverityError, fs[0].Severity)
		assert.Contains(t, fs[0].Message, "kcm.yaml --cluster-cidr is 10.244.0.0/16 but ConfigMap kube-system/kubeadm-config ClusterConfiguration controllerManager.extraArgs cluster-cidr is 10.20.0.0/16")

		// The same value in extraArgs and the manifest agrees, whatever podSubnet says.
		require.NoError(t, s.Kubeadm.SetExtraArg(ControllerManager, FlagClusterCIDR, "10.244.0.0/16"))
		require.NoError(t, s.Kubeadm.SetPodSubnet("10.99.0.0/16"))
		assert.Empty(t, podFindings(Check(s)))
	})

	for _, tt := range []struct {
		name string
		mod  func(t *testing.T, s *Snapshot)
		want string
	}{
		{
			name: "kube-controller-manager without --cluster-cidr",
			mod:  func(t *testing.T, s *Snapshot) { require.NoError(t, s.ControllerManager.RemoveFlag(FlagClusterCIDR)) },
			want: "ConfigMap kube-system/kubeadm-config ClusterConfiguration networking.podSubnet is 10.244.0.0/16 but kcm.yaml has no --cluster-cidr: kubeadm upgrade would add it",
		},
		{
			name: "kubeadm-config without podSubnet",
			mod:  func(t *testing.T, s *Snapshot) { require.NoError(t, s.Kubeadm.SetPodSubnet("")) },
			want: "kcm.yaml --cluster-cidr is 10.244.0.0/16 but ConfigMap kube-system/kubeadm-config ClusterConfiguration sets no podSubnet: kubeadm upgrade would drop the flag",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := consistent(t)
			tt.mod(t, s)
			fs := podFindings(Check(s))
			require.Len(t, fs, 1, "%v", fs)
			assert.Equal(t, cidr.SeverityWarning, fs[0].Severity)
			assert.Equal(t, tt.want, fs[0].Message)
		})
	}

	t.Run("neither side", func(t *testing.T) {
		s := consistent(t)
		require.NoError(t, s.Kubeadm.SetPodSubnet(""))
		require.NoError(t, s.ControllerManager.RemoveFlag(FlagClusterCIDR))
		assert.Empty(t, podFindings(Check(s)))
	})
}
