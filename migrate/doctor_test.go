package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/nodecidr"
	"github.com/cidrshift/cidrshift/servicecidr"
)

// doctorCluster is a healthy cluster the tests break one way at a time:
// flannel (vxlan) with a Calico pool over the same range (canal), kubeadm's
// ConfigMaps, the control-plane Pods, the kubernetes and kube-dns Services
// and the default ServiceCIDR.
type doctorCluster struct {
	nodes    []*corev1.Node
	pods     []*corev1.Pod
	services []*corev1.Service
	cms      map[string]*corev1.ConfigMap // by name
	dyn      []*unstructured.Unstructured
}

func dnode(name, podCIDR, ip string) *corev1.Node {
	return &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Annotations: map[string]string{
			"flannel.alpha.coreos.com/backend-type": "vxlan", "flannel.alpha.coreos.com/kube-subnet-manager": "true",
			"flannel.alpha.coreos.com/public-ip": ip}},
		Spec:   corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
}

func dpod(ns, name, node, ip string, labels map[string]string, command ...string) *corev1.Pod {
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: name, Command: command}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}}
	p.Spec.HostNetwork = len(command) > 0
	return p
}

func dsvc(ns, name, ip string) *corev1.Service {
	return &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip}}}
}

func dcm(ns, name, key, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("cm-" + name)},
		Data: map[string]string{key: value}}
}

func dobj(apiVersion, kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}, "spec": spec}}
}

func newDoctorCluster() *doctorCluster {
	return &doctorCluster{
		nodes: []*corev1.Node{dnode("a", "10.244.0.0/24", "192.168.0.1"), dnode("b", "10.244.1.0/24", "192.168.0.2"), dnode("c", "10.244.2.0/24", "192.168.0.3")},
		pods: []*corev1.Pod{
			dpod("default", "web", "a", "10.244.0.5", nil),
			dpod("kube-system", "kube-controller-manager-a", "a", "192.168.0.1", map[string]string{"component": "kube-controller-manager"},
				"kube-controller-manager", "--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=24", "--service-cluster-ip-range=10.96.0.0/12"),
			dpod("kube-system", "kube-apiserver-a", "a", "192.168.0.1", map[string]string{"component": "kube-apiserver"}, "kube-apiserver", "--service-cluster-ip-range=10.96.0.0/12"),
		},
		services: []*corev1.Service{dsvc("default", "kubernetes", "10.96.0.1"), dsvc("kube-system", "kube-dns", "10.96.0.10"), dsvc("default", "web", "10.96.4.4")},
		cms: map[string]*corev1.ConfigMap{
			"kube-flannel-cfg": dcm("kube-flannel", "kube-flannel-cfg", "net-conf.json", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`),
			"kube-proxy":       dcm("kube-system", "kube-proxy", "config.conf", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.244.0.0/16\n"),
			"kubelet-config":   dcm("kube-system", "kubelet-config", "kubelet", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS:\n- 10.96.0.10\n"),
			"kubeadm-config": dcm("kube-system", "kubeadm-config", "ClusterConfiguration",
				"apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.244.0.0/16\n  serviceSubnet: 10.96.0.0/12\n"),
		},
		dyn: []*unstructured.Unstructured{
			dobj("crd.projectcalico.org/v1", "IPPool", "default", map[string]any{"cidr": "10.244.0.0/16", "blockSize": int64(26)}),
			dobj("crd.projectcalico.org/v1", "IPAMBlock", "10-244-0-0-26", map[string]any{"cidr": "10.244.0.0/26", "affinity": "host:a",
				"allocations": []any{nil, nil, nil, nil, nil, int64(0)}, "unallocated": []any{}, "attributes": []any{map[string]any{"handle_id": "k8s-pod-network.x"}}}),
			dobj("networking.k8s.io/v1", "ServiceCIDR", "kubernetes", map[string]any{"cidrs": []any{"10.96.0.0/12"}}),
		},
	}
}

func (c *doctorCluster) dynByName(name string) *unstructured.Unstructured {
	for _, o := range c.dyn {
		if o.GetName() == name {
			return o
		}
	}
	return nil
}

// core returns the cluster's Nodes, Pods, Services and ConfigMaps.
func (c *doctorCluster) core() []runtime.Object {
	var objs []runtime.Object
	for _, n := range c.nodes {
		objs = append(objs, n)
	}
	for _, p := range c.pods {
		objs = append(objs, p)
	}
	for _, s := range c.services {
		objs = append(objs, s)
	}
	for _, cm := range c.cms {
		objs = append(objs, cm)
	}
	return objs
}

// live loads the cluster through client-go fakes, as LoadSnapshot reads a real one.
func (c *doctorCluster) live(t *testing.T) *Snapshot {
	t.Helper()
	kube := fake.NewClientset(c.core()...)
	lists := map[schema.GroupVersionResource]string{calico.IPPoolsV1: "IPPoolList", calico.IPPoolsV3: "IPPoolList", calico.IPAMBlocksV1: "IPAMBlockList"}
	for _, v := range servicecidr.Versions() {
		lists[servicecidr.ServiceCIDRResource(v)] = "ServiceCIDRList"
	}
	var dobjs []runtime.Object
	for _, o := range c.dyn {
		dobjs = append(dobjs, o.DeepCopy())
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists, dobjs...)
	s, err := LoadSnapshot(context.Background(), kube, dyn)
	require.NoError(t, err)
	return s
}

// dump writes the cluster as one `kubectl get -o yaml` List.
func (c *doctorCluster) dump(t *testing.T) []byte {
	t.Helper()
	var items []any
	for _, o := range c.core() {
		items = append(items, o)
	}
	for _, o := range c.dyn {
		items = append(items, o.Object)
	}
	data, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	require.NoError(t, err)
	return data
}

func codes(r *DoctorReport) []Code {
	var out []Code
	for _, f := range r.Findings {
		out = append(out, f.Code)
	}
	return out
}

func TestDiagnoseHealthyCluster(t *testing.T) {
	c := newDoctorCluster()
	for name, s := range map[string]*Snapshot{"live": c.live(t), "offline": readDump(t, c.dump(t))} {
		r, err := Diagnose(context.Background(), s, DoctorOptions{Pods: true})
		require.NoError(t, err, name)
		assert.Empty(t, codes(r), name)
		assert.True(t, r.Healthy, name)
		assert.Equal(t, "Pod kube-system/kube-apiserver-a --service-cluster-ip-range", r.ServiceRangeSource, name)
		assert.Len(t, s.IPPools, 1, name)
		assert.Len(t, s.IPAMBlocks, 1, name)
		assert.Len(t, s.ServiceCIDRs, 1, name)
		// Each ConfigMap once, though kube-system's are listed by both queries.
		assert.Len(t, s.ConfigMaps, 4, name)
	}
}

func readDump(t *testing.T, data []byte) *Snapshot {
	t.Helper()
	s, err := ReadSnapshot(context.Background(), Input{Name: "dump", R: bytes.NewReader(data)})
	require.NoError(t, err)
	return s
}

// TestDiagnoseFindings breaks the healthy cluster one way at a time; each
// finding code must appear, for the objects named, live and offline.
func TestDiagnoseFindings(t *testing.T) {
	for _, tc := range []struct {
		code   Code
		break_ func(c *doctorCluster)
		object string // an object the finding must name
	}{
		{CodePodCIDROutsideFlannelNetwork, func(c *doctorCluster) {
			c.cms["kube-flannel-cfg"].Data["net-conf.json"] = `{"Network":"10.244.2.0/23","Backend":{"Type":"vxlan"}}`
		}, "Node a"},
		{CodeFlannelBackendMismatch, func(c *doctorCluster) { c.nodes[1].Annotations["flannel.alpha.coreos.com/backend-type"] = "host-gw" }, "Node b"},
		{CodeFlannelPublicIPDuplicate, func(c *doctorCluster) { c.nodes[2].Annotations["flannel.alpha.coreos.com/public-ip"] = "192.168.0.1" }, "Node c"},
		{CodeFlannelNotRunning, func(c *doctorCluster) { c.nodes[2].Annotations = nil }, "Node c"},
		{CodeCalicoPoolOverlap, func(c *doctorCluster) {
			c.dyn = append(c.dyn, dobj("crd.projectcalico.org/v1", "IPPool", "second", map[string]any{"cidr": "10.244.128.0/17"}))
		}, "IPPool second"},
		{CodeCalicoPoolOverlap, func(c *doctorCluster) {
			c.dyn = append(c.dyn, dobj("crd.projectcalico.org/v1", "IPPool", "nodes", map[string]any{"cidr": "192.168.0.0/24", "disabled": true}))
		}, "Node a"},
		{CodeCalicoDisabledPoolInUse, func(c *doctorCluster) { c.dynByName("default").Object["spec"].(map[string]any)["disabled"] = true }, "IPPool default"},
		{CodeCalicoBlockOrphaned, func(c *doctorCluster) {
			c.dynByName("10-244-0-0-26").Object["spec"].(map[string]any)["affinity"] = "host:gone"
		}, "Node gone"},
		{CodePodIPOutsidePools, func(c *doctorCluster) { c.pods[0].Status.PodIP = "10.250.0.5" }, "Pod default/web"},
		{CodeServiceIPOutsideRange, func(c *doctorCluster) {
			c.services[2].Spec.ClusterIP, c.services[2].Spec.ClusterIPs = "10.200.0.5", []string{"10.200.0.5"}
		}, "Service default/web"},
		{CodeServiceCIDRFlagMismatch, func(c *doctorCluster) {
			c.dynByName("kubernetes").Object["spec"] = map[string]any{"cidrs": []any{"10.96.0.0/11"}}
		}, "ServiceCIDR kubernetes"},
		{CodeKubernetesServiceIPWrong, func(c *doctorCluster) {
			c.services[0].Spec.ClusterIP, c.services[0].Spec.ClusterIPs = "10.96.0.2", []string{"10.96.0.2"}
		}, "Service default/kubernetes"},
		{CodeClusterDNSMismatch, func(c *doctorCluster) {
			c.cms["kubelet-config"].Data["kubelet"] = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS:\n- 10.96.0.11\n"
		}, "Service kube-system/kube-dns"},
		{CodeKubeProxyClusterCIDRMismatch, func(c *doctorCluster) {
			c.cms["kube-proxy"].Data["config.conf"] = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.245.0.0/16\n"
		}, "ConfigMap kube-system/kube-proxy"},
		{CodeKubeadmConfigMismatch, func(c *doctorCluster) {
			c.cms["kubeadm-config"].Data["ClusterConfiguration"] = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.245.0.0/16\n  serviceSubnet: 10.96.0.0/12\n"
		}, "ConfigMap kube-system/kubeadm-config"},
		{CodeRangeOverlapsCGNAT, func(c *doctorCluster) {
			c.dyn = append(c.dyn, dobj("networking.k8s.io/v1", "ServiceCIDR", "tailnet", map[string]any{"cidrs": []any{"100.64.0.0/24"}}))
		}, "ServiceCIDR tailnet"},
		{CodeRangeOverlapsNodeIP, func(c *doctorCluster) { c.nodes[2].Status.Addresses[0].Address = "10.96.5.5" }, "Node c"},
		{Code(kubeadmcfg.CodeClusterCIDROutsideNetwork), func(c *doctorCluster) {
			c.cms["kube-flannel-cfg"].Data["net-conf.json"] = `{"Network":"10.244.0.0/17","Backend":{"Type":"vxlan"}}`
		}, "Pod kube-system/kube-controller-manager-a"},
		{"duplicate-podcidr", func(c *doctorCluster) {
			c.nodes[2].Spec.PodCIDR, c.nodes[2].Spec.PodCIDRs = "10.244.1.0/24", []string{"10.244.1.0/24"}
		}, "Node c"},
	} {
		t.Run(string(tc.code), func(t *testing.T) {
			c := newDoctorCluster()
			tc.break_(c)
			for name, s := range map[string]*Snapshot{"live": c.live(t), "offline": readDump(t, c.dump(t))} {
				r, err := Diagnose(context.Background(), s, DoctorOptions{Pods: true})
				require.NoError(t, err, name)
				fs := r.With(tc.code)
				require.NotEmpty(t, fs, "%s: want %s in %v", name, tc.code, codes(r))
				var named []string
				for _, f := range fs {
					for _, o := range f.Objects {
						named = append(named, o.String())
					}
				}
				assert.Contains(t, named, tc.object, name)
				assert.NotEmpty(t, fs[0].Message, name)
				assert.NotEmpty(t, fs[0].Severity, name)
			}
		})
	}
}

// TestDiagnoseSeed001Chain: duplicate podCIDRs, a host-gw node in a vxlan
// cluster and kube-proxy disagreeing, in one report, with the fixes.
func TestDiagnoseSeed001Chain(t *testing.T) {
	c := newDoctorCluster()
	c.dyn = c.dyn[2:] // no Calico: flannel alone
	c.nodes[2].Spec.PodCIDR, c.nodes[2].Spec.PodCIDRs = "10.244.1.0/24", []string{"10.244.1.0/24"}
	c.nodes[0].Annotations["flannel.alpha.coreos.com/backend-type"] = "host-gw"
	c.cms["kube-proxy"].Data["config.conf"] = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.244.0.0/17\n"
	c.cms["kube-flannel-cfg"].Data["net-conf.json"] = `{"Network":"10.244.128.0/17","Backend":{"Type":"vxlan"}}`
	c.nodes[0].Spec.PodCIDR, c.nodes[0].Spec.PodCIDRs = "10.244.128.0/24", []string{"10.244.128.0/24"}
	c.nodes[1].Spec.PodCIDR, c.nodes[1].Spec.PodCIDRs = "10.244.129.0/24", []string{"10.244.129.0/24"}
	c.nodes[2].Spec.PodCIDR, c.nodes[2].Spec.PodCIDRs = "10.244.129.0/24", []string{"10.244.129.0/24"}
	c.pods[0].Status.PodIP = "10.244.128.5"
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{Pods: true})
	require.NoError(t, err)
	assert.Len(t, r.With("duplicate-podcidr"), 1)
	mm := r.With(CodeFlannelBackendMismatch)
	require.Len(t, mm, 1)
	assert.Contains(t, mm[0].Message, "`ignoring non-vxlan v4Subnet(10.244.128.0/24) v6Subnet(::/0): type=host-gw`")
	assert.Len(t, r.With(CodeKubeProxyClusterCIDRMismatch), 1)
	require.NotNil(t, r.FixPlan)
	require.Len(t, r.FixPlan.Steps, 1)
	assert.Equal(t, "c", r.FixPlan.Steps[0].Node)
	// The new subnet comes from the flannel Network, not the wider cluster CIDR.
	assert.True(t, strings.HasPrefix(r.FixPlan.Steps[0].NewPodCIDRs[0], "10.244.130."), r.FixPlan.Steps[0].NewPodCIDRs)
	require.Len(t, r.Repairs, 1)
	assert.Equal(t, Repair{Code: CodeFlannelBackendMismatch, Node: "a", Annotation: "flannel.alpha.coreos.com/backend-type", From: "host-gw", To: "vxlan",
		Commands: []string{"kubectl annotate node a flannel.alpha.coreos.com/backend-type=vxlan --overwrite",
			restartFlannel("kube-flannel", "kube-flannel-cfg", "a")}}, r.Repairs[0])
	assert.False(t, r.Healthy)
}

// TestReadSnapshotFilesClusterInfoDump reads a kubectl cluster-info dump
// directory: JSON typed Lists whose items name no kind, and logs beside them.
func TestReadSnapshotFilesClusterInfoDump(t *testing.T) {
	dir := t.TempDir()
	c := newDoctorCluster()
	list := func(kind string, items ...any) []byte {
		var raw []json.RawMessage
		for _, it := range items {
			b, err := json.Marshal(it)
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, json.Unmarshal(b, &m))
			delete(m, "kind")
			delete(m, "apiVersion")
			b, err = json.Marshal(m)
			require.NoError(t, err)
			raw = append(raw, b)
		}
		// kubectl writes a typed List's kind and apiVersion before its items.
		b, err := json.MarshalIndent(struct {
			Kind       string            `json:"kind"`
			APIVersion string            `json:"apiVersion"`
			Metadata   struct{}          `json:"metadata"`
			Items      []json.RawMessage `json:"items"`
		}{kind, "v1", struct{}{}, raw}, "", "    ")
		require.NoError(t, err)
		return b
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "kube-system", "kube-apiserver-a"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nodes.json"), list("NodeList", c.nodes[0], c.nodes[1], c.nodes[2]), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kube-system", "pods.json"), list("PodList", c.pods[1], c.pods[2]), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kube-system", "services.json"), list("ServiceList", c.services[1]), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kube-system", "kube-apiserver-a", "logs.txt"), []byte("not json"), 0o600))
	s, err := ReadSnapshotFiles(context.Background(), []string{dir, "-"}, strings.NewReader(string(c.dump(t))))
	require.NoError(t, err)
	assert.Len(t, s.Nodes, 6)
	assert.Len(t, s.Services, 4)
	assert.Len(t, s.ControlPlanePods, 4)

	_, err = ReadSnapshotFiles(context.Background(), []string{filepath.Join(dir, "kube-system", "kube-apiserver-a")}, nil)
	assert.ErrorIs(t, err, ErrNoInput)
	_, err = ReadSnapshot(context.Background(), Input{Name: "bad.yaml", R: strings.NewReader("apiVersion: v1\nkind: Service\nspec: {clusterIP: [1]}\n")})
	assert.ErrorContains(t, err, "bad.yaml")
}

// TestAddressMapSVG: the map parses as XML and holds a rect per range, with
// the duplicates and conflicts marked.
func TestAddressMapSVG(t *testing.T) {
	c := newDoctorCluster()
	c.nodes[2].Spec.PodCIDR, c.nodes[2].Spec.PodCIDRs = "10.244.1.0/24", []string{"10.244.1.0/24"}
	c.dyn = append(c.dyn, dobj("networking.k8s.io/v1", "ServiceCIDR", "tailnet", map[string]any{"cidrs": []any{"100.64.0.0/24"}}))
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{Pods: true})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, WriteAddressMapSVG(&buf, r))
	type rect struct {
		Class string `xml:"class,attr"`
		Title string `xml:"title"`
	}
	var doc struct {
		XMLName xml.Name `xml:"svg"`
		Groups  []struct {
			ID    string `xml:"id,attr"`
			Rects []rect `xml:"rect"`
		} `xml:"g"`
	}
	require.NoError(t, xml.Unmarshal(buf.Bytes(), &doc), buf.String())
	require.Len(t, doc.Groups, 1)
	assert.Equal(t, "IPv4", doc.Groups[0].ID)
	byTitle := map[string]string{}
	for _, r := range doc.Groups[0].Rects {
		byTitle[r.Title] = r.Class
	}
	assert.Len(t, doc.Groups[0].Rects, len(r.Ranges))
	assert.Equal(t, "range kind-node-podcidr duplicate", byTitle["Node b 10.244.1.0/24"])
	assert.Equal(t, "range kind-node-podcidr duplicate", byTitle["Node c 10.244.1.0/24"])
	assert.Equal(t, "range kind-node-podcidr", byTitle["Node a 10.244.0.0/24"])
	assert.Equal(t, "range kind-service-cidr conflict", byTitle["ServiceCIDR tailnet 100.64.0.0/24"])
	assert.Contains(t, byTitle, "IPPool default 10.244.0.0/16")
	assert.Contains(t, byTitle, "flannel Network (kube-flannel/kube-flannel-cfg) 10.244.0.0/16")
	require.NoError(t, xml.NewDecoder(io.MultiReader(&buf)).Decode(new(any)))
}

func TestDiagnoseErrors(t *testing.T) {
	_, err := Diagnose(context.Background(), &Snapshot{Source: "x"}, DoctorOptions{})
	assert.ErrorIs(t, err, ErrNoNodes)
	c := newDoctorCluster()
	c.pods = c.pods[:1]
	delete(c.cms, "kubeadm-config")
	_, err = Diagnose(context.Background(), c.live(t), DoctorOptions{})
	assert.ErrorIs(t, err, ErrNoFlags)
}

// Without a kube-controller-manager Pod, the flags given to the doctor stand
// for it: kube-proxy's clusterCIDR is compared with them.
func TestDiagnoseKubeProxyAgainstGivenFlags(t *testing.T) {
	c := newDoctorCluster()
	c.pods = c.pods[:1] // no control-plane Pods
	delete(c.cms, "kubeadm-config")
	c.cms["kube-proxy"].Data["config.conf"] = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.244.0.0/17\n"
	flags := cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/16", NodeCIDRMaskSize: 24, ServiceClusterIPRange: "10.96.0.0/12"}
	r, err := Diagnose(context.Background(), readDump(t, c.dump(t)), DoctorOptions{Flags: &flags, FlagsSource: "--cluster-cidr given"})
	require.NoError(t, err)
	require.Contains(t, codes(r), CodeKubeProxyClusterCIDRMismatch)
	f := r.With(CodeKubeProxyClusterCIDRMismatch)[0]
	assert.Contains(t, f.Message, "10.244.0.0/17")
	assert.Contains(t, f.Message, "--cluster-cidr given")
}

// TestDiagnoseFixPlanSeveralPools: with several Calico pools, the fix plan
// takes new subnets from the free space of every enabled pool, in order,
// and never from a disabled one, though the cluster CIDR holds it.
func TestDiagnoseFixPlanSeveralPools(t *testing.T) {
	c := newDoctorCluster()
	c.dyn[0] = dobj("crd.projectcalico.org/v1", "IPPool", "first", map[string]any{"cidr": "10.244.0.0/22"}) // a, b, c hold three of its four /24s
	c.dyn = append(c.dyn,
		dobj("crd.projectcalico.org/v1", "IPPool", "retired", map[string]any{"cidr": "10.244.4.0/22", "disabled": true}),
		dobj("crd.projectcalico.org/v1", "IPPool", "second", map[string]any{"cidr": "10.244.8.0/23"}))
	addBroken := func(c *doctorCluster) {
		dup, bare1, bare2 := dnode("d", "10.244.0.0/24", "192.168.0.4"), dnode("e", "", "192.168.0.5"), dnode("f", "", "192.168.0.6")
		bare1.Spec.PodCIDRs, bare2.Spec.PodCIDRs = nil, nil
		c.nodes = append(c.nodes, dup, bare1, bare2)
	}
	addBroken(c)
	checkFixes(t, c, "10.244.3.0/24", "10.244.8.0/24", "10.244.9.0/24")

	// No enabled pool: the free space of the cluster CIDR, less the disabled pool.
	c = newDoctorCluster()
	c.dyn[0] = dobj("crd.projectcalico.org/v1", "IPPool", "retired", map[string]any{"cidr": "10.244.3.0/24", "disabled": true})
	addBroken(c)
	checkFixes(t, c, "10.244.4.0/24", "10.244.5.0/24", "10.244.6.0/24")
}

// checkFixes diagnoses c, live and offline, and checks the new podCIDRs of its fix plan.
func checkFixes(t *testing.T, c *doctorCluster, want ...string) {
	t.Helper()
	for name, s := range map[string]*Snapshot{"live": c.live(t), "offline": readDump(t, c.dump(t))} {
		r, err := Diagnose(context.Background(), s, DoctorOptions{Pods: true})
		require.NoError(t, err, name)
		require.NotNil(t, r.FixPlan, "%s: %s", name, r.FixPlanError)
		var got []string
		for _, st := range r.FixPlan.Steps {
			got = append(got, st.NewPodCIDRs...)
		}
		assert.ElementsMatch(t, want, got, name)
	}
}

// TestDiagnosePodIPHostLocal: without Calico IPAM blocks the CNI may use
// host-local IPAM (Calico with usePodCidr, canal), which gives pods
// addresses from their node's podCIDR: such an address is no
// pod-ip-outside-pools finding, though it lies in no pool. An address in
// neither is, and so is any address in no pool once blocks show Calico IPAM.
func TestDiagnosePodIPHostLocal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		blocks bool
		podIP  string
		want   bool
	}{
		{"host-local, in the node's podCIDR", false, "10.244.0.5", false},
		{"host-local, outside the node's podCIDR", false, "10.244.1.5", true},
		{"host-local, outside every range", false, "10.250.0.5", true},
		{"calico-ipam, in the node's podCIDR", true, "10.244.0.5", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newDoctorCluster()
			c.dynByName("default").Object["spec"] = map[string]any{"cidr": "172.16.0.0/16"} // Calico's default, unrelated to the podCIDRs
			if !tc.blocks {
				c.dyn = slices.DeleteFunc(c.dyn, func(o *unstructured.Unstructured) bool { return o.GetKind() == "IPAMBlock" })
			}
			c.pods[0].Status.PodIP = tc.podIP
			for name, s := range map[string]*Snapshot{"live": c.live(t), "offline": readDump(t, c.dump(t))} {
				r, err := Diagnose(context.Background(), s, DoctorOptions{Pods: true})
				require.NoError(t, err, name)
				fs := r.With(CodePodIPOutsidePools)
				if !tc.want {
					assert.Empty(t, fs, name)
					continue
				}
				require.Len(t, fs, 1, name)
				assert.Equal(t, []ObjectRef{{Kind: "Pod", Namespace: "default", Name: "web"}}, fs[0].Objects, name)
				// Only host-local IPAM makes the node's podCIDR a place the address may be.
				assert.Equal(t, !tc.blocks, strings.Contains(fs[0].Message, " nor in their node's podCIDR"), fs[0].Message)
			}
		})
	}
}

// TestRestartFlannelCommand runs the template of the repair's restart
// command as kubectl does (a List read as JSON, missing keys allowed): it
// names the pods on the node that mount net-conf.json's ConfigMap, whatever
// their labels, and no other pod.
func TestRestartFlannelCommand(t *testing.T) {
	cmd := restartFlannel("kube-system", "kube-flannel-cfg", "n1")
	require.True(t, strings.HasPrefix(cmd, "kubectl -n kube-system get pods --field-selector spec.nodeName=n1 -o go-template='"), cmd)
	require.True(t, strings.HasSuffix(cmd, "' | xargs -r kubectl -n kube-system delete pod"), cmd)
	assert.NotContains(t, cmd, " -l ", "no label selector")
	_, rest, _ := strings.Cut(cmd, "go-template='")
	tmpl, _, _ := strings.Cut(rest, "'")
	pod := func(name string, labels map[string]string, vols ...corev1.Volume) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, Labels: labels}, Spec: corev1.PodSpec{NodeName: "n1", Volumes: vols}}
	}
	cmVol := func(name string) corev1.Volume {
		return corev1.Volume{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}
	}
	run := corev1.Volume{Name: "run", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/flannel"}}}
	list := corev1.PodList{Items: []corev1.Pod{
		pod("kube-proxy-x", map[string]string{"k8s-app": "kube-proxy"}, cmVol("kube-proxy")),
		pod("canal-x", map[string]string{"k8s-app": "canal"}, run, cmVol("kube-flannel-cfg")),
		pod("etcd-n1", nil),
		pod("kube-flannel-ds-y", map[string]string{"app": "flannel"}, cmVol("kube-flannel-cfg"), run),
	}}
	data, err := json.Marshal(list)
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, json.Unmarshal(data, &obj))
	tp, err := template.New("output").Option("missingkey=default").Parse(tmpl)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, tp.Execute(&out, obj))
	assert.Equal(t, "canal-x\nkube-flannel-ds-y\n", out.String())
}

// TestDiagnoseSources holds the report to where it says each setting came
// from: kube-controller-manager's Pod (and whether it was read from a dump),
// and the Service range from kube-apiserver's flag, else
// kube-controller-manager's, else kubeadm-config's serviceSubnet.
func TestDiagnoseSources(t *testing.T) {
	c := newDoctorCluster()
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	assert.Equal(t, "Pod kube-system/kube-controller-manager-a", r.FlagsSource)
	r, err = Diagnose(context.Background(), readDump(t, c.dump(t)), DoctorOptions{})
	require.NoError(t, err)
	assert.Equal(t, "Pod kube-system/kube-controller-manager-a in the dump", r.FlagsSource)

	c.pods = c.pods[:2] // no kube-apiserver Pod
	r, err = Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	assert.Equal(t, "10.96.0.0/12", r.ServiceRange)
	assert.Equal(t, "Pod kube-system/kube-controller-manager-a --service-cluster-ip-range", r.ServiceRangeSource)

	c.pods[1].Spec.Containers[0].Command = slices.DeleteFunc(slices.Clone(c.pods[1].Spec.Containers[0].Command),
		func(a string) bool { return strings.HasPrefix(a, "--service-cluster-ip-range") })
	c.cms["kubeadm-config"].Data["ClusterConfiguration"] = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.244.0.0/16\n  serviceSubnet: 10.96.0.0/16\n"
	r, err = Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	assert.Equal(t, "10.96.0.0/16", r.ServiceRange)
	assert.Equal(t, "ConfigMap kube-system/kubeadm-config ClusterConfiguration networking.serviceSubnet", r.ServiceRangeSource)

	c.cms["kubeadm-config"].Data["ClusterConfiguration"] = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.244.0.0/16\n"
	r, err = Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	assert.Empty(t, r.ServiceRange)
	assert.Empty(t, r.ServiceRangeSource)
}

// TestDiagnoseErrorsFirst: the findings are sorted errors, then warnings,
// then infos, whatever order the checks found them in (flannel's warning
// comes before the Services' error).
func TestDiagnoseErrorsFirst(t *testing.T) {
	c := newDoctorCluster()
	c.nodes[2].Annotations = nil
	c.services[2].Spec.ClusterIP, c.services[2].Spec.ClusterIPs = "10.200.0.5", []string{"10.200.0.5"}
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{Pods: true})
	require.NoError(t, err)
	var sevs []cidr.Severity
	for _, f := range r.Findings {
		sevs = append(sevs, f.Severity)
	}
	assert.Equal(t, []cidr.Severity{cidr.SeverityError, cidr.SeverityWarning}, sevs, codes(r))
	assert.Equal(t, []Code{CodeServiceIPOutsideRange, CodeFlannelNotRunning}, codes(r))
	assert.Equal(t, 1, r.Count(cidr.SeverityError))
	assert.Equal(t, 1, r.Count(cidr.SeverityWarning))
}

// TestDiagnoseFlannelConfigNotRead: nodes with flannel annotations and no
// net-conf.json say the flannel checks were skipped; a cluster without
// flannel says nothing of it.
func TestDiagnoseFlannelConfigNotRead(t *testing.T) {
	flannelNotRead := func(r *DoctorReport) []string {
		return slices.DeleteFunc(slices.Clone(r.NotRead), func(s string) bool { return !strings.Contains(s, "net-conf.json") })
	}
	c := newDoctorCluster()
	delete(c.cms, "kube-flannel-cfg")
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	assert.Len(t, flannelNotRead(r), 1, r.NotRead)

	c.nodes[0].Annotations = nil // one node annotated is enough
	c.nodes[1].Annotations = nil
	r, err = Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	assert.Len(t, flannelNotRead(r), 1, r.NotRead)

	c.nodes[2].Annotations = nil
	r, err = Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	assert.Empty(t, flannelNotRead(r), r.NotRead)
}

// TestDiagnoseWithoutPoolsOrServiceRange: a flannel cluster has no Calico
// pool, so a pod address outside its node's podCIDR is the node audit's
// finding, not pod-ip-outside-pools; and with no Service range and no
// ServiceCIDR read, no ClusterIP is called out of range.
func TestDiagnoseWithoutPoolsOrServiceRange(t *testing.T) {
	c := newDoctorCluster()
	c.dyn = c.dyn[2:] // no Calico
	c.pods[0].Status.PodIP = "10.244.1.5"
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{Pods: true})
	require.NoError(t, err)
	assert.Equal(t, []Code{Code(nodecidr.FindingPodIPOutside)}, codes(r))

	c = newDoctorCluster()
	c.dyn = c.dyn[:2] // no ServiceCIDR
	c.pods = c.pods[:2]
	c.pods[1].Spec.Containers[0].Command = slices.DeleteFunc(slices.Clone(c.pods[1].Spec.Containers[0].Command),
		func(a string) bool { return strings.HasPrefix(a, "--service-cluster-ip-range") })
	c.cms["kubeadm-config"].Data["ClusterConfiguration"] = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.244.0.0/16\n"
	r, err = Diagnose(context.Background(), c.live(t), DoctorOptions{Pods: true})
	require.NoError(t, err)
	assert.Empty(t, r.ServiceRange)
	assert.Empty(t, r.With(CodeServiceIPOutsideRange))
	// Not that no check runs: with a range, default/web is outside it.
	c.pods[1].Spec.Containers[0].Command = append(c.pods[1].Spec.Containers[0].Command, "--service-cluster-ip-range=10.96.0.0/24")
	r, err = Diagnose(context.Background(), c.live(t), DoctorOptions{Pods: true})
	require.NoError(t, err)
	assert.Len(t, r.With(CodeServiceIPOutsideRange), 1)
}

// TestDiagnoseClusterDNSNotComparable: a kubelet with no clusterDNS, or a
// kube-dns Service without a ClusterIP, has nothing to disagree with.
func TestDiagnoseClusterDNSNotComparable(t *testing.T) {
	c := newDoctorCluster()
	c.cms["kubelet-config"].Data["kubelet"] = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	assert.Empty(t, r.With(CodeClusterDNSMismatch))

	c = newDoctorCluster()
	c.services[1].Spec.ClusterIP, c.services[1].Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	r, err = Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	assert.Empty(t, r.With(CodeClusterDNSMismatch))
}

// diagnoseFlannelNetwork diagnoses the flannel-only cluster (no Calico)
// with net-conf.json's Network set to network.
func diagnoseFlannelNetwork(t *testing.T, network string) *DoctorReport {
	t.Helper()
	c := newDoctorCluster()
	c.dyn = c.dyn[2:]
	c.cms["kube-flannel-cfg"].Data["net-conf.json"] = `{"Network":"` + network + `","Backend":{"Type":"vxlan"}}`
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	return r
}

// TestDiagnoseFixPlanStaysInsideFlannelsNetwork: flannel's Network holds a
// single node subnet (its length is the node mask). The broken nodes cannot
// move inside it, and the doctor says so rather than plan subnets flannel
// would refuse.
func TestDiagnoseFixPlanStaysInsideFlannelsNetwork(t *testing.T) {
	r := diagnoseFlannelNetwork(t, "10.244.0.0/24")
	require.Len(t, r.With(CodePodCIDROutsideFlannelNetwork), 2)
	assert.Nil(t, r.FixPlan)
	require.NotEmpty(t, r.FixPlanError)
	for _, f := range r.With(CodePodCIDROutsideFlannelNetwork) {
		assert.Equal(t, "no fix plan could be made: "+r.FixPlanError, f.Fix, "no finding points at a plan the report does not hold")
	}
}

// TestDiagnoseAddressMapMarksConflicts: the ranges of an error overlap of
// the flags (the Service range inside the cluster CIDR) are marked on the
// map, and no other range is; a node outside the cluster CIDR is marked.
func TestDiagnoseAddressMapMarksConflicts(t *testing.T) {
	c := newDoctorCluster()
	c.dyn = c.dyn[2:]
	c.nodes[1].Spec.PodCIDR, c.nodes[1].Spec.PodCIDRs = "10.245.0.0/24", []string{"10.245.0.0/24"}
	flags := cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/16", NodeCIDRMaskSize: 24, ServiceClusterIPRange: "10.244.240.0/20"}
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{Flags: &flags, FlagsSource: "given"})
	require.NoError(t, err)
	require.NotEmpty(t, r.Conflicts)
	marked := map[string]bool{}
	for _, rg := range r.Ranges {
		marked[rg.Label+" "+rg.Prefix.String()] = rg.Conflict
	}
	assert.Equal(t, map[string]bool{
		"cluster CIDR (given) 10.244.0.0/16":                                       true,
		"Pod kube-system/kube-apiserver-a --service-cluster-ip-range 10.96.0.0/12": false,
		"flannel Network (kube-flannel/kube-flannel-cfg) 10.244.0.0/16":            true,
		"Node a 10.244.0.0/24": false,
		"Node b 10.245.0.0/24": true,
		"Node c 10.244.2.0/24": false,
	}, marked)
}

func TestKeptKind(t *testing.T) {
	for _, tc := range []struct {
		apiVersion, kind string
		want             bool
	}{
		{"v1", "Service", true},
		{"v1", "ConfigMap", true},
		{"example.com/v1", "ConfigMap", false},
		{"crd.projectcalico.org/v1", "IPPool", true},
		{"projectcalico.org/v3", "IPPool", true},
		{"example.com/v1", "IPPool", false},
		{"crd.projectcalico.org/v1", "IPAMBlock", true},
		{"projectcalico.org/v3", "IPAMBlock", false},
		{"networking.k8s.io/v1", "ServiceCIDR", true},
		{"example.com/v1", "ServiceCIDR", false},
		{"v1", "Secret", false},
	} {
		assert.Equal(t, tc.want, keptKind(tc.apiVersion, tc.kind), "%s %s", tc.apiVersion, tc.kind)
	}
}

func TestShort(t *testing.T) {
	var items []string
	for i := range 11 {
		items = append(items, strconv.Itoa(i))
	}
	assert.Equal(t, "0, 1, 2, 3, 4, 5, 6, 7, 8, 9", short(items[:10]))
	assert.Equal(t, "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 1 more", short(items))
}

// TestRefOf reads the object a kubeadmcfg source names, and nothing from a
// source that names none.
func TestRefOf(t *testing.T) {
	for _, tc := range []struct {
		where string
		want  ObjectRef
		ok    bool
	}{
		{"ConfigMap kube-system/kube-proxy config.conf clusterCIDR", ObjectRef{Kind: "ConfigMap", Namespace: "kube-system", Name: "kube-proxy"}, true},
		{"Pod kube-system/kube-controller-manager-a --cluster-cidr", ObjectRef{Kind: "Pod", Namespace: "kube-system", Name: "kube-controller-manager-a"}, true},
		{"Node a spec.podCIDRs[0]", ObjectRef{Kind: "Node", Name: "a"}, true},
		{"Node a", ObjectRef{Kind: "Node", Name: "a"}, true},
		{"Node", ObjectRef{}, false},
		{"flannel Network kube-flannel/kube-flannel-cfg", ObjectRef{}, false},
		{"Calico IPPool default", ObjectRef{}, false},
		{"", ObjectRef{}, false},
	} {
		got, ok := refOf(tc.where)
		assert.Equal(t, tc.ok, ok, tc.where)
		assert.Equal(t, tc.want, got, tc.where)
	}
}

// TestPages reads every page of a list, and stops at the first error or
// cancellation with that error.
func TestPages(t *testing.T) {
	var got []string
	conts := map[string]string{"": "p2", "p2": "p3", "p3": ""}
	err := pages(context.Background(), func(lo metav1.ListOptions) (string, error) {
		assert.Equal(t, int64(pageSize), lo.Limit)
		got = append(got, lo.Continue)
		return conts[lo.Continue], nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"", "p2", "p3"}, got)

	got = nil
	boom := errors.New("boom")
	err = pages(context.Background(), func(lo metav1.ListOptions) (string, error) {
		got = append(got, lo.Continue)
		if lo.Continue == "p2" {
			return "p3", boom
		}
		return conts[lo.Continue], nil
	})
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, []string{"", "p2"}, got)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = pages(ctx, func(metav1.ListOptions) (string, error) { t.Error("fetched after the context ended"); return "", nil })
	assert.ErrorIs(t, err, context.Canceled)
}

// TestDiagnoseDisabledPoolHeldByBlocksOnly: a disabled pool whose blocks
// still hold addresses is in use even when no pod was read.
func TestDiagnoseDisabledPoolHeldByBlocksOnly(t *testing.T) {
	c := newDoctorCluster()
	c.dynByName("default").Object["spec"].(map[string]any)["disabled"] = true
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	fs := r.With(CodeCalicoDisabledPoolInUse)
	require.Len(t, fs, 1, codes(r))
	assert.Contains(t, fs[0].Message, "its blocks still hold 1 and 0 pod(s) still use it")

	// Empty blocks hold nothing.
	c.dynByName("10-244-0-0-26").Object["spec"].(map[string]any)["allocations"] = []any{nil, nil}
	r, err = Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	assert.Empty(t, r.With(CodeCalicoDisabledPoolInUse))
}

// TestDiagnoseFlagsFromKubeadmConfig: without a kube-controller-manager Pod,
// the flags are those kubeadm renders from kubeadm-config.
func TestDiagnoseFlagsFromKubeadmConfig(t *testing.T) {
	c := newDoctorCluster()
	c.pods = slices.Delete(c.pods, 1, 2) // no kube-controller-manager Pod
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	assert.Equal(t, "ConfigMap kube-system/kubeadm-config ClusterConfiguration (flags kubeadm would render)", r.FlagsSource)
	assert.Equal(t, "10.244.0.0/16", r.Flags.ClusterCIDR)
	assert.True(t, r.Healthy, codes(r))
}

// TestDiagnoseClusterDNSByLabel: a DNS Service not named kube-dns is found
// by its k8s-app label, and no other Service stands for it.
func TestDiagnoseClusterDNSByLabel(t *testing.T) {
	for _, tc := range []struct {
		clusterDNS string
		want       []ObjectRef
	}{
		{"10.96.0.10", nil},
		{"10.96.0.11", []ObjectRef{{Kind: "Service", Namespace: "kube-system", Name: "coredns"}, {Kind: "ConfigMap", Namespace: "kube-system", Name: "kubelet-config"}}},
	} {
		c := newDoctorCluster()
		c.services[1].Name = "coredns"
		c.services[1].Labels = map[string]string{servicecidr.DNSLabelKey: servicecidr.DNSLabelValue}
		c.cms["kubelet-config"].Data["kubelet"] = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS:\n- " + tc.clusterDNS + "\n"
		r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{})
		require.NoError(t, err)
		var got []ObjectRef
		for _, f := range r.With(CodeClusterDNSMismatch) {
			got = append(got, f.Objects...)
		}
		assert.Equal(t, tc.want, got, tc.clusterDNS)
	}
}

// TestDiagnoseNoFixPlanWithoutAStep: flannel's Network lies apart from the
// cluster CIDR, so every node is outside it, but moving nodes inside the
// cluster CIDR fixes nothing (net-conf.json must change): no plan of no
// steps is offered.
func TestDiagnoseNoFixPlanWithoutAStep(t *testing.T) {
	r := diagnoseFlannelNetwork(t, "10.245.0.0/16")
	require.Len(t, r.With(CodePodCIDROutsideFlannelNetwork), 3)
	assert.Len(t, r.With(Code(kubeadmcfg.CodeClusterCIDROutsideNetwork)), 1)
	assert.Nil(t, r.FixPlan)
	assert.Empty(t, r.FixPlanError)
	for _, f := range r.With(CodePodCIDROutsideFlannelNetwork) {
		assert.Contains(t, f.Fix, "no node move fixes it", "no finding points at a plan the report does not hold")
		assert.Contains(t, f.Fix, "net-conf.json")
	}
}

// TestDiagnoseFixPointsAtThePlanItMade: flannel's Network is narrower than
// the cluster CIDR, node c lies outside it, and it has room for c; the
// plan moves c inside, and the finding says so.
func TestDiagnoseFixPointsAtThePlanItMade(t *testing.T) {
	c := newDoctorCluster()
	c.dyn = c.dyn[2:]
	c.nodes[2].Spec.PodCIDR, c.nodes[2].Spec.PodCIDRs = "10.244.8.0/24", []string{"10.244.8.0/24"}
	c.cms["kube-flannel-cfg"].Data["net-conf.json"] = `{"Network":"10.244.0.0/22","Backend":{"Type":"vxlan"}}`
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	fs := r.With(CodePodCIDROutsideFlannelNetwork)
	require.Len(t, fs, 1)
	require.NotNil(t, r.FixPlan, "plan error: %s", r.FixPlanError)
	require.Len(t, r.FixPlan.Steps, 1)
	assert.Equal(t, "c", r.FixPlan.Steps[0].Node)
	for _, f := range fs {
		assert.Equal(t, "the fix plan gives the node a free subnet inside the Network; then delete its cni0 bridge and restart its flanneld and pods", f.Fix)
	}
}

// TestDiagnoseFixPlanForFamilyOrder: a dual-stack node whose podCIDRs are
// in the other order than the cluster CIDRs is an error (kube-proxy and
// the CNI plugins read podCIDRs[0] as the primary family), and nodecidr's
// fix mode moves it by re-creating it with the same subnets in the
// cluster's order: the doctor offers that plan.
func TestDiagnoseFixPlanForFamilyOrder(t *testing.T) {
	c := newDoctorCluster()
	c.dyn = c.dyn[2:] // no Calico: flannel alone
	c.pods[1].Spec.Containers[0].Command = []string{"kube-controller-manager", "--allocate-node-cidrs=true",
		"--cluster-cidr=10.244.0.0/16,fd00:10:244::/56", "--node-cidr-mask-size-ipv4=24", "--node-cidr-mask-size-ipv6=64", "--service-cluster-ip-range=10.96.0.0/12"}
	c.cms["kube-flannel-cfg"].Data["net-conf.json"] = `{"Network":"10.244.0.0/16","IPv6Network":"fd00:10:244::/56","EnableIPv6":true,"Backend":{"Type":"vxlan"}}`
	c.cms["kube-proxy"].Data["config.conf"] = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.244.0.0/16,fd00:10:244::/56\n"
	c.cms["kubeadm-config"].Data["ClusterConfiguration"] = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.244.0.0/16,fd00:10:244::/56\n  serviceSubnet: 10.96.0.0/12\n"
	for i, n := range c.nodes {
		n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, "fd00:10:244:"+strconv.Itoa(i+1)+"::/64")
	}
	c.nodes[2].Spec.PodCIDR, c.nodes[2].Spec.PodCIDRs = "fd00:10:244:3::/64", []string{"fd00:10:244:3::/64", "10.244.2.0/24"}
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	fo := r.With(Code(nodecidr.FindingFamilyOrder))
	require.Len(t, fo, 2, "%v", codes(r)) // one per position
	assert.Equal(t, cidr.SeverityError, fo[0].Severity)
	assert.Equal(t, []Code{Code(nodecidr.FindingFamilyOrder), Code(nodecidr.FindingFamilyOrder)}, codes(r))
	assert.Contains(t, fo[0].Fix, "re-creates the node with the same subnets in the cluster CIDRs' order")
	require.NotNil(t, r.FixPlan, "fix plan: %q; findings %v", r.FixPlanError, codes(r))
	require.Len(t, r.FixPlan.Steps, 1)
	st := r.FixPlan.Steps[0]
	assert.Equal(t, "c", st.Node)
	assert.Equal(t, nodecidr.ActionRecreate, st.Action)
	assert.Equal(t, []string{"10.244.2.0/24", "fd00:10:244:3::/64"}, st.NewPodCIDRs)
}

// TestDiagnoseNoFixPlanForOtherErrors: errors that no node move fixes (here
// kube-controller-manager's mask wider than its cluster CIDR, which stops
// it at start-up) ask for no fix plan, and so report no failure to make
// one either.
func TestDiagnoseNoFixPlanForOtherErrors(t *testing.T) {
	c := newDoctorCluster()
	c.pods[1].Spec.Containers[0].Command = []string{"kube-controller-manager", "--allocate-node-cidrs=true",
		"--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=8", "--service-cluster-ip-range=10.96.0.0/12"}
	r, err := Diagnose(context.Background(), c.live(t), DoctorOptions{})
	require.NoError(t, err)
	assert.False(t, r.ControllerManager.WouldStart)
	assert.NotZero(t, r.Count(cidr.SeverityError), "%v", codes(r))
	assert.Nil(t, r.FixPlan)
	assert.Empty(t, r.FixPlanError)
}

// TestDiagnoseHealthyWeighsLayoutOverlaps: with no finding and flags
// kube-controller-manager starts with, an error overlap of the current or
// the proposed flags' ranges (the Service range inside the cluster CIDR)
// alone makes the cluster unhealthy, and a warning overlap (a range inside
// a special-purpose one) does not. A Propose that fails fails Diagnose.
func TestDiagnoseHealthyWeighsLayoutOverlaps(t *testing.T) {
	propose := func(f cidr.ControllerManagerFlags) func(cidr.ControllerManagerFlags) (cidr.ControllerManagerFlags, error) {
		return func(cidr.ControllerManagerFlags) (cidr.ControllerManagerFlags, error) { return f, nil }
	}
	for _, tc := range []struct {
		name    string
		opts    DoctorOptions
		healthy bool
	}{
		{"current flags, Service range inside the cluster CIDR", DoctorOptions{FlagsSource: "given", Flags: &cidr.ControllerManagerFlags{
			AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/16", NodeCIDRMaskSize: 24, ServiceClusterIPRange: "10.244.240.0/20"}}, false},
		{"proposed flags, Service range inside the cluster CIDR", DoctorOptions{Propose: propose(cidr.ControllerManagerFlags{
			AllocateNodeCIDRs: true, ClusterCIDR: "10.240.0.0/12", NodeCIDRMaskSize: 24, ServiceClusterIPRange: "10.241.0.0/16"})}, false},
		{"proposed flags, Service range in shared address space", DoctorOptions{Propose: propose(cidr.ControllerManagerFlags{
			AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/16", NodeCIDRMaskSize: 24, ServiceClusterIPRange: "100.64.0.0/16"})}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newDoctorCluster()
			c.dyn = c.dyn[2:]
			r, err := Diagnose(context.Background(), c.live(t), tc.opts)
			require.NoError(t, err)
			assert.Zero(t, r.Count(cidr.SeverityError), "no error finding: %v", r.Findings)
			assert.True(t, r.ControllerManager.WouldStart)
			conflicts := r.Conflicts
			if r.Proposed != nil {
				assert.True(t, r.Proposed.Result.WouldStart)
				conflicts = r.Proposed.Conflicts
			}
			require.Len(t, conflicts, 1)
			assert.Equal(t, !tc.healthy, conflicts[0].Severity == cidr.SeverityError, "%s", conflicts[0])
			assert.Equal(t, tc.healthy, r.Healthy)
		})
	}
	c := newDoctorCluster()
	_, err := Diagnose(context.Background(), c.live(t), DoctorOptions{Propose: func(cidr.ControllerManagerFlags) (cidr.ControllerManagerFlags, error) {
		return cidr.ControllerManagerFlags{}, errors.New("--new-node-mask 40: too long")
	}})
	assert.EqualError(t, err, "proposing flags: --new-node-mask 40: too long")
}
