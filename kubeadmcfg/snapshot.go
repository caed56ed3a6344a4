package kubeadmcfg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/cidr"
)

// Where kubeadm writes a cluster's configuration down.
const (
	// Namespace holds the ConfigMaps below.
	Namespace = "kube-system"
	// KubeadmConfigMap is the ConfigMap holding the ClusterConfiguration.
	KubeadmConfigMap = "kubeadm-config"
	// KubeadmConfigKey is the key of the ClusterConfiguration in KubeadmConfigMap.
	KubeadmConfigKey = "ClusterConfiguration"
	// KubeProxyConfigMap is the ConfigMap holding the KubeProxyConfiguration.
	KubeProxyConfigMap = "kube-proxy"
	// KubeProxyConfigKey is the key of the KubeProxyConfiguration in KubeProxyConfigMap.
	KubeProxyConfigKey = "config.conf"
	// KubeletConfigMap is the ConfigMap holding the KubeletConfiguration.
	KubeletConfigMap = "kubelet-config"
	// KubeletConfigKey is the key of the KubeletConfiguration in KubeletConfigMap.
	KubeletConfigKey = "kubelet"
	// DefaultManifestDir is where the kubelet reads static-pod manifests on a kubeadm node.
	DefaultManifestDir = "/etc/kubernetes/manifests"
	// ControllerManagerManifest is the file name of kube-controller-manager's manifest.
	ControllerManagerManifest = "kube-controller-manager.yaml"
	// APIServerManifest is the file name of kube-apiserver's manifest.
	APIServerManifest = "kube-apiserver.yaml"
)

// ConfigMapRef identifies one key of one ConfigMap, and records the UID and
// resourceVersion it was read at, so a plan made from it can be refused once
// the ConfigMap has changed.
type ConfigMapRef struct {
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	Key             string `json:"key"`
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// String returns e.g. "ConfigMap kube-system/kubeadm-config ClusterConfiguration".
func (r ConfigMapRef) String() string {
	return fmt.Sprintf("ConfigMap %s/%s %s", r.Namespace, r.Name, r.Key)
}

// PodPool is a range pods get addresses from that is not a kubeadm setting:
// a Calico IPPool (cidr.KindCalicoPool) or flannel's Network
// (cidr.KindFlannelNetwork). The calico and flannel packages read them; pass
// them here as plain CIDRs.
type PodPool struct {
	Name string    `json:"name"`
	Kind cidr.Kind `json:"kind"`
	CIDR string    `json:"cidr"`
}

// Snapshot is everything read about where a cluster's CIDRs are written
// down. Any part may be missing (nil): checks and plans use what is there.
type Snapshot struct {
	// Kubeadm is the ClusterConfiguration; KubeadmRef says where it came from
	// (zero when it was not read from a ConfigMap).
	Kubeadm    *ClusterConfiguration
	KubeadmRef ConfigMapRef
	// KubeProxy is kube-proxy's configuration.
	KubeProxy    *KubeProxyConfig
	KubeProxyRef ConfigMapRef
	// Kubelet is the kubelet configuration kubeadm distributes to nodes.
	Kubelet    *KubeletConfig
	KubeletRef ConfigMapRef
	// ControllerManager and APIServer are the static-pod manifests of one
	// control-plane node.
	ControllerManager *Manifest
	APIServer         *Manifest
	// Nodes are the live nodes' podCIDRs; nil when they were not read.
	Nodes []cidr.NodePodCIDRs
	// Pools are the CNI's pod ranges, when the caller knows them.
	Pools []PodPool
}

// DecodeConfigMap decodes a ConfigMap written as YAML or JSON, such as the
// output of kubectl get configmap -n kube-system kubeadm-config -o yaml.
func DecodeConfigMap(data []byte) (*corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(data, &cm); err != nil {
		return nil, &FieldError{Field: "ConfigMap", Reason: "not a valid ConfigMap: " + err.Error(), Err: ErrInvalid}
	}
	if cm.Kind != "ConfigMap" {
		return nil, invalid("", "kind", cm.Kind, "expected a ConfigMap (kind: ConfigMap)")
	}
	return &cm, nil
}

// AddConfigMap parses a ConfigMap and stores it in the snapshot according to
// the key it holds: ClusterConfiguration (kubeadm-config), config.conf
// (kube-proxy) or kubelet (kubelet-config). A ConfigMap holding none of them
// is an ErrNotFound error.
func (s *Snapshot) AddConfigMap(cm *corev1.ConfigMap) error {
	if cm == nil {
		return fmt.Errorf("%w: nil ConfigMap", ErrInvalid)
	}
	ref := func(key string) ConfigMapRef {
		ns := cm.Namespace
		if ns == "" {
			ns = Namespace
		}
		return ConfigMapRef{Namespace: ns, Name: cm.Name, Key: key, UID: string(cm.UID), ResourceVersion: cm.ResourceVersion}
	}
	found := false
	if v, ok := cm.Data[KubeadmConfigKey]; ok {
		r := ref(KubeadmConfigKey)
		c, err := parseClusterConfiguration(r.String(), []byte(v))
		if err != nil {
			return err
		}
		s.Kubeadm, s.KubeadmRef, found = c, r, true
	}
	if v, ok := cm.Data[KubeProxyConfigKey]; ok {
		r := ref(KubeProxyConfigKey)
		c, err := parseKubeProxyConfig(r.String(), []byte(v))
		if err != nil {
			return err
		}
		s.KubeProxy, s.KubeProxyRef, found = c, r, true
	}
	if v, ok := cm.Data[KubeletConfigKey]; ok {
		r := ref(KubeletConfigKey)
		c, err := parseKubeletConfig(r.String(), []byte(v))
		if err != nil {
			return err
		}
		s.Kubelet, s.KubeletRef, found = c, r, true
	}
	if !found {
		return &FieldError{Source: fmt.Sprintf("ConfigMap %s/%s", cm.Namespace, cm.Name), Field: "data",
			Reason: fmt.Sprintf("holds none of the keys %s, %s, %s", KubeadmConfigKey, KubeProxyConfigKey, KubeletConfigKey), Err: ErrNotFound}
	}
	return nil
}

// LoadManifests reads kube-controller-manager.yaml and kube-apiserver.yaml
// from dir. A missing file is skipped (a worker node has neither); a file
// that cannot be parsed is an error.
func (s *Snapshot) LoadManifests(dir string) error {
	for _, f := range []struct {
		name string
		dst  **Manifest
	}{{ControllerManagerManifest, &s.ControllerManager}, {APIServerManifest, &s.APIServer}} {
		m, err := ReadManifestFile(filepath.Join(dir, f.name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		*f.dst = m
	}
	return nil
}

// ReadOptions says what Read reads besides the three ConfigMaps.
type ReadOptions struct {
	// ManifestDir, when set, is where the static-pod manifests are read from
	// (DefaultManifestDir on a control-plane node).
	ManifestDir string
	// Nodes lists the nodes' podCIDRs.
	Nodes bool
}

// Read reads the kubeadm-config, kube-proxy and kubelet-config ConfigMaps
// (a missing one is skipped), the manifests and the nodes as asked.
func Read(ctx context.Context, client kubernetes.Interface, opts ReadOptions) (*Snapshot, error) {
	log := logr.FromContextOrDiscard(ctx)
	s := &Snapshot{}
	for _, name := range []string{KubeadmConfigMap, KubeProxyConfigMap, KubeletConfigMap} {
		cm, err := client.CoreV1().ConfigMaps(Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			log.V(1).Info("ConfigMap not found, skipped", "namespace", Namespace, "name", name)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", Namespace, name, err)
		}
		if err := s.AddConfigMap(cm); err != nil {
			return nil, err
		}
	}
	if opts.ManifestDir != "" {
		if err := s.LoadManifests(opts.ManifestDir); err != nil {
			return nil, err
		}
	}
	if opts.Nodes {
		nodes, err := ListNodePodCIDRs(ctx, client)
		if err != nil {
			return nil, err
		}
		s.Nodes = nodes
	}
	return s, nil
}

// ListNodePodCIDRs lists every node's name and podCIDRs (spec.podCIDRs, or
// spec.podCIDR when podCIDRs is empty), a page at a time.
func ListNodePodCIDRs(ctx context.Context, client kubernetes.Interface) ([]cidr.NodePodCIDRs, error) {
	out := []cidr.NodePodCIDRs{}
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		for _, n := range list.Items {
			out = append(out, NodePodCIDRs(&n))
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

// NodePodCIDRs returns what the checks need of a Node.
func NodePodCIDRs(n *corev1.Node) cidr.NodePodCIDRs {
	p := cidr.NodePodCIDRs{Name: n.Name, PodCIDRs: append([]string{}, n.Spec.PodCIDRs...)}
	if len(p.PodCIDRs) == 0 && n.Spec.PodCIDR != "" {
		p.PodCIDRs = []string{n.Spec.PodCIDR}
	}
	return p
}

// Value is one setting as written, and where.
type Value struct {
	// Where names the document and field, e.g.
	// "ConfigMap kube-system/kubeadm-config ClusterConfiguration networking.podSubnet"
	// or "/etc/kubernetes/manifests/kube-controller-manager.yaml --cluster-cidr".
	Where string `json:"where"`
	Value string `json:"value"`
}

// cidrFlags are the flags Values reports from the controller manager manifest.
func cidrFlags() []string {
	return []string{FlagAllocateNodeCIDRs, FlagClusterCIDR, FlagNodeCIDRMaskSize, FlagNodeCIDRMaskSizeIPv4, FlagNodeCIDRMaskSizeIPv6, FlagServiceClusterIPRange}
}

// Values lists every CIDR-related setting found in the snapshot, each naming where it is written.
func (s *Snapshot) Values() []Value {
	var out []Value
	add := func(where, v string, ok bool) {
		if ok {
			out = append(out, Value{Where: where, Value: v})
		}
	}
	if c := s.Kubeadm; c != nil {
		n := c.Networking()
		add(c.Source()+" kubernetesVersion", c.KubernetesVersion(), c.KubernetesVersion() != "")
		add(c.Source()+" networking.podSubnet", n.PodSubnet, n.PodSubnet != "")
		add(c.Source()+" networking.serviceSubnet", n.ServiceSubnet, n.ServiceSubnet != "")
		add(c.Source()+" networking.dnsDomain", n.DNSDomain, n.DNSDomain != "")
		for _, f := range cidrFlags() {
			v, ok := c.ExtraArg(ControllerManager, f)
			add(c.Source()+" controllerManager.extraArgs "+f, v, ok)
		}
		v, ok := c.ExtraArg(APIServer, FlagServiceClusterIPRange)
		add(c.Source()+" apiServer.extraArgs "+FlagServiceClusterIPRange, v, ok)
	}
	if m := s.ControllerManager; m != nil {
		for _, f := range cidrFlags() {
			v, ok := m.Flag(f)
			add(m.Source()+" --"+f, v, ok)
		}
	}
	if m := s.APIServer; m != nil {
		v, ok := m.Flag(FlagServiceClusterIPRange)
		add(m.Source()+" --"+FlagServiceClusterIPRange, v, ok)
	}
	if c := s.KubeProxy; c != nil {
		add(c.Source()+" clusterCIDR", c.ClusterCIDR(), true)
	}
	if c := s.Kubelet; c != nil {
		add(c.Source()+" clusterDNS", strings.Join(c.ClusterDNS(), ","), len(c.ClusterDNS()) > 0)
		add(c.Source()+" clusterDomain", c.ClusterDomain(), c.ClusterDomain() != "")
	}
	for _, n := range s.Nodes {
		add("Node "+n.Name+" spec.podCIDRs", strings.Join(n.PodCIDRs, ","), true)
	}
	for _, p := range s.Pools {
		add(poolWhere(p), p.CIDR, true)
	}
	return out
}

func poolWhere(p PodPool) string {
	switch p.Kind {
	case cidr.KindCalicoPool:
		return "Calico IPPool " + p.Name
	case cidr.KindFlannelNetwork:
		return "flannel Network " + p.Name
	}
	return string(p.Kind) + " " + p.Name
}
