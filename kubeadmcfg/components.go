package kubeadmcfg

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/cidrshift/cidrshift/cidr"
)

// Versions of the component configurations kubeadm stores in ConfigMaps.
const (
	// KubeProxyV1alpha1 is the KubeProxyConfiguration version (config.conf of ConfigMap kube-proxy).
	KubeProxyV1alpha1 = "kubeproxy.config.k8s.io/v1alpha1"
	// KubeletV1beta1 is the KubeletConfiguration version (key kubelet of ConfigMap kubelet-config).
	KubeletV1beta1 = "kubelet.config.k8s.io/v1beta1"
)

// KubeProxyConfig is a KubeProxyConfiguration kept as the text it was read
// from; SetClusterCIDR edits only the clusterCIDR value.
type KubeProxyConfig struct {
	d      *document
	source string
}

// ParseKubeProxyConfig reads a KubeProxyConfiguration (the config.conf key of
// ConfigMap kube-system/kube-proxy).
func ParseKubeProxyConfig(data []byte) (*KubeProxyConfig, error) {
	return parseKubeProxyConfig("KubeProxyConfiguration", data)
}

func parseKubeProxyConfig(source string, data []byte) (*KubeProxyConfig, error) {
	d, root, err := parseDocument(source, "KubeProxyConfiguration", []string{KubeProxyV1alpha1}, data)
	if err != nil {
		return nil, err
	}
	if err := checkScalar(source, root, ypath{"clusterCIDR"}); err != nil {
		return nil, err
	}
	return &KubeProxyConfig{d: d, source: source}, nil
}

// ClusterCIDR returns clusterCIDR as written ("" when unset).
func (c *KubeProxyConfig) ClusterCIDR() string {
	v, _ := scalarAt(c.d.root(), ypath{"clusterCIDR"})
	return v
}

// SetClusterCIDR sets clusterCIDR, checked strictly (one CIDR or a
// dual-stack pair, comma-separated, no host bits); "" clears it.
func (c *KubeProxyConfig) SetClusterCIDR(v string) error {
	if v != "" {
		if _, err := cidr.ParseList(v); err != nil {
			return &FieldError{Source: c.source, Field: "clusterCIDR", Value: v, Reason: err.Error(), Err: err}
		}
	}
	return c.d.s.set(ypath{"clusterCIDR"}, strNode(v))
}

// Bytes returns the document as it is now: the bytes read when nothing was set.
func (c *KubeProxyConfig) Bytes() []byte { return c.d.bytes() }

// Source names where the document was read from.
func (c *KubeProxyConfig) Source() string { return c.source }

// KubeletConfig is a KubeletConfiguration kept as the text it was read from;
// the setters edit only clusterDNS and clusterDomain.
type KubeletConfig struct {
	d      *document
	source string
}

// ParseKubeletConfig reads a KubeletConfiguration (the kubelet key of
// ConfigMap kube-system/kubelet-config, or /var/lib/kubelet/config.yaml).
func ParseKubeletConfig(data []byte) (*KubeletConfig, error) {
	return parseKubeletConfig("KubeletConfiguration", data)
}

func parseKubeletConfig(source string, data []byte) (*KubeletConfig, error) {
	d, root, err := parseDocument(source, "KubeletConfiguration", []string{KubeletV1beta1}, data)
	if err != nil {
		return nil, err
	}
	if err := checkStringList(source, root, ypath{"clusterDNS"}); err != nil {
		return nil, err
	}
	if err := checkScalar(source, root, ypath{"clusterDomain"}); err != nil {
		return nil, err
	}
	return &KubeletConfig{d: d, source: source}, nil
}

// ClusterDNS returns clusterDNS as written.
func (c *KubeletConfig) ClusterDNS() []string { return stringList(c.d.root(), ypath{"clusterDNS"}) }

// ClusterDomain returns clusterDomain as written.
func (c *KubeletConfig) ClusterDomain() string {
	v, _ := scalarAt(c.d.root(), ypath{"clusterDomain"})
	return v
}

// SetClusterDNS sets clusterDNS; each entry must be an IP address (no zone,
// no IPv4-mapped IPv6). An empty list removes the field.
func (c *KubeletConfig) SetClusterDNS(ips []string) error {
	if len(ips) == 0 {
		return c.d.deleteKey(ypath{"clusterDNS"})
	}
	for i, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || a.Is4In6() {
			return invalid(c.source, fmt.Sprintf("clusterDNS[%d]", i), s, "must be an IPv4 or IPv6 address such as 10.96.0.10")
		}
	}
	return c.d.s.set(ypath{"clusterDNS"}, strSeq(ips))
}

// SetClusterDomain sets clusterDomain, a DNS subdomain such as cluster.local;
// "" removes the field.
func (c *KubeletConfig) SetClusterDomain(v string) error {
	if v == "" {
		return c.d.deleteKey(ypath{"clusterDomain"})
	}
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return invalid(c.source, "clusterDomain", v, strings.Join(errs, "; "))
	}
	return c.d.s.set(ypath{"clusterDomain"}, strNode(v))
}

// Bytes returns the document as it is now: the bytes read when nothing was set.
func (c *KubeletConfig) Bytes() []byte { return c.d.bytes() }

// Source names where the document was read from.
func (c *KubeletConfig) Source() string { return c.source }
