package kubeadmcfg

import (
	"fmt"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/cidrshift/cidrshift/cidr"
)

// The kubeadm ClusterConfiguration versions this package reads and writes.
const (
	// KubeadmV1beta3 is the version kubeadm 1.22 to 1.30 stores (extraArgs are a map).
	KubeadmV1beta3 = "kubeadm.k8s.io/v1beta3"
	// KubeadmV1beta4 is the version kubeadm 1.31 and later stores (extraArgs are a list of {name, value}).
	KubeadmV1beta4 = "kubeadm.k8s.io/v1beta4"
	// KindClusterConfiguration is the kind of a kubeadm ClusterConfiguration.
	KindClusterConfiguration = "ClusterConfiguration"
	// DefaultServiceSubnet is kubeadm's default networking.serviceSubnet.
	DefaultServiceSubnet = "10.96.0.0/12"
	// DefaultDNSDomain is kubeadm's default networking.dnsDomain.
	DefaultDNSDomain = "cluster.local"
)

// KubeadmVersions returns the ClusterConfiguration apiVersions this package supports.
func KubeadmVersions() []string { return []string{KubeadmV1beta3, KubeadmV1beta4} }

// Component names a control-plane component section of a ClusterConfiguration.
type Component string

// The components whose extraArgs can be read and written.
const (
	APIServer         Component = "apiServer"
	ControllerManager Component = "controllerManager"
	Scheduler         Component = "scheduler"
)

// Networking is the networking section of a ClusterConfiguration, as written.
type Networking struct {
	PodSubnet     string `json:"podSubnet,omitempty"`
	ServiceSubnet string `json:"serviceSubnet,omitempty"`
	DNSDomain     string `json:"dnsDomain,omitempty"`
}

// Arg is one extra command-line argument of a component (without the
// leading dashes), the v1beta4 shape; v1beta3 maps are read into the same type.
type Arg struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ClusterConfiguration is a kubeadm ClusterConfiguration kept as the text it
// was read from. Reading it never changes it; every setter edits the text in
// place, so fields this package does not know, key order, comments and the
// apiVersion all survive, and Bytes returns the original bytes when nothing
// was set.
type ClusterConfiguration struct {
	d      *document
	source string
}

// ParseClusterConfiguration reads a ClusterConfiguration: the value of the
// kubeadm-config ConfigMap's ClusterConfiguration key, or a kubeadm config
// file (several documents; the ClusterConfiguration one is used and the
// others are kept). It fails with a *VersionError for an apiVersion other
// than v1beta3 and v1beta4, and with a *FieldError naming the field for a
// value of the wrong shape.
func ParseClusterConfiguration(data []byte) (*ClusterConfiguration, error) {
	return parseClusterConfiguration(KindClusterConfiguration, data)
}

func parseClusterConfiguration(source string, data []byte) (*ClusterConfiguration, error) {
	d, root, err := parseDocument(source, KindClusterConfiguration, KubeadmVersions(), data)
	if err != nil {
		return nil, err
	}
	c := &ClusterConfiguration{d: d, source: source}
	if err := c.validate(root); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *ClusterConfiguration) validate(root *yaml.Node) error {
	checks := []error{
		checkScalar(c.source, root, ypath{"kubernetesVersion"}),
		checkMapping(c.source, root, ypath{"networking"}),
		checkScalar(c.source, root, ypath{"networking", "podSubnet"}),
		checkScalar(c.source, root, ypath{"networking", "serviceSubnet"}),
		checkScalar(c.source, root, ypath{"networking", "dnsDomain"}),
	}
	for _, comp := range []Component{APIServer, ControllerManager, Scheduler} {
		checks = append(checks, checkMapping(c.source, root, ypath{string(comp)}), c.checkExtraArgs(root, comp))
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *ClusterConfiguration) checkExtraArgs(root *yaml.Node, comp Component) error {
	p := ypath{string(comp), "extraArgs"}
	n := lookup(root, p)
	if n == nil || isNull(n) {
		return nil
	}
	if c.d.apiVersion == KubeadmV1beta3 {
		if n.Kind != yaml.MappingNode {
			return invalid(c.source, p.String(), shortValue(n), fmt.Sprintf("%s expects a mapping of flag name to value, found a %s", KubeadmV1beta3, kindName(n)))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Kind != yaml.ScalarNode || n.Content[i+1].Kind != yaml.ScalarNode {
				return invalid(c.source, p.String(), shortValue(n.Content[i]), "every extra argument must map a flag name to a single value")
			}
		}
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return invalid(c.source, p.String(), shortValue(n), fmt.Sprintf("%s expects a list of {name, value}, found a %s", KubeadmV1beta4, kindName(n)))
	}
	for i, it := range n.Content {
		ip := append(p, i)
		if it.Kind != yaml.MappingNode {
			return invalid(c.source, ip.String(), shortValue(it), "every extra argument must be a mapping with name and value")
		}
		name, ok := scalarAt(it, ypath{"name"})
		if !ok || name == "" {
			return invalid(c.source, append(ip, "name").String(), "", "every extra argument needs a name")
		}
		if err := checkScalar(c.source, root, append(ip, "value")); err != nil {
			return err
		}
	}
	return nil
}

// APIVersion returns the document's apiVersion (KubeadmV1beta3 or KubeadmV1beta4).
func (c *ClusterConfiguration) APIVersion() string { return c.d.apiVersion }

// KubernetesVersion returns kubernetesVersion as written, e.g. "v1.31.2".
func (c *ClusterConfiguration) KubernetesVersion() string {
	v, _ := scalarAt(c.d.root(), ypath{"kubernetesVersion"})
	return v
}

// KubernetesMinor returns the minor version of kubernetesVersion (31 for
// "v1.31.2"), or 0 when it is absent or not of that form.
func (c *ClusterConfiguration) KubernetesMinor() int { return minorOf(c.KubernetesVersion()) }

func minorOf(v string) int {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	rest, ok := strings.CutPrefix(v, "1.")
	if !ok {
		return 0
	}
	n := 0
	for _, r := range rest {
		if r < '0' || r > '9' {
			break
		}
		n = n*10 + int(r-'0')
		if n > 1000 {
			return 0
		}
	}
	return n
}

// Networking returns the networking section as written (empty strings for absent fields).
func (c *ClusterConfiguration) Networking() Networking {
	root := c.d.root()
	var n Networking
	n.PodSubnet, _ = scalarAt(root, ypath{"networking", "podSubnet"})
	n.ServiceSubnet, _ = scalarAt(root, ypath{"networking", "serviceSubnet"})
	n.DNSDomain, _ = scalarAt(root, ypath{"networking", "dnsDomain"})
	return n
}

// SetPodSubnet sets networking.podSubnet. The value is checked strictly
// (cidr.ParseList: one CIDR or a dual-stack pair, no host bits); an empty value
// removes the field.
func (c *ClusterConfiguration) SetPodSubnet(v string) error {
	return c.setSubnet("podSubnet", v)
}

// SetServiceSubnet sets networking.serviceSubnet, checked like SetPodSubnet.
func (c *ClusterConfiguration) SetServiceSubnet(v string) error {
	return c.setSubnet("serviceSubnet", v)
}

func (c *ClusterConfiguration) setSubnet(field, v string) error {
	p := ypath{"networking", field}
	if v == "" {
		return c.d.deleteKey(p)
	}
	if _, err := cidr.ParseList(v); err != nil {
		return &FieldError{Source: c.source, Field: p.String(), Value: v, Reason: err.Error(), Err: err}
	}
	return c.d.s.set(p, strNode(v))
}

// SetDNSDomain sets networking.dnsDomain, which must be a DNS subdomain
// (e.g. "cluster.local"); an empty value removes the field.
func (c *ClusterConfiguration) SetDNSDomain(v string) error {
	p := ypath{"networking", "dnsDomain"}
	if v == "" {
		return c.d.deleteKey(p)
	}
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return invalid(c.source, p.String(), v, strings.Join(errs, "; "))
	}
	return c.d.s.set(p, strNode(v))
}

// ExtraArgs returns the extra arguments of a component in the order written,
// whatever the version's shape.
func (c *ClusterConfiguration) ExtraArgs(comp Component) []Arg {
	n := lookup(c.d.root(), ypath{string(comp), "extraArgs"})
	if n == nil {
		return nil
	}
	var out []Arg
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			out = append(out, Arg{Name: n.Content[i].Value, Value: n.Content[i+1].Value})
		}
	case yaml.SequenceNode:
		for _, it := range n.Content {
			name, _ := scalarAt(it, ypath{"name"})
			value, _ := scalarAt(it, ypath{"value"})
			out = append(out, Arg{Name: name, Value: value})
		}
	}
	return out
}

// ExtraArg returns the value of one extra argument (name without dashes).
// When v1beta4 lists it more than once, the last wins, as it does on the
// component's command line.
func (c *ClusterConfiguration) ExtraArg(comp Component, name string) (string, bool) {
	name = strings.TrimLeft(name, "-")
	var v string
	var ok bool
	for _, a := range c.ExtraArgs(comp) {
		if a.Name == name {
			v, ok = a.Value, true
		}
	}
	return v, ok
}

// SetExtraArg sets an extra argument of a component (name without dashes),
// in the shape of the document's version: a map entry in v1beta3, every
// {name, value} item of that name in v1beta4 (appended when there is none).
func (c *ClusterConfiguration) SetExtraArg(comp Component, name, value string) error {
	name = strings.TrimLeft(name, "-")
	if name == "" {
		return invalid(c.source, string(comp)+".extraArgs", "", "an extra argument needs a name")
	}
	base := ypath{string(comp), "extraArgs"}
	if c.d.apiVersion == KubeadmV1beta3 {
		return c.d.s.set(append(base, name), strNode(value))
	}
	n := lookup(c.d.root(), base)
	found := false
	if n != nil && n.Kind == yaml.SequenceNode {
		for i, it := range n.Content {
			if v, _ := scalarAt(it, ypath{"name"}); v == name {
				found = true
				if err := c.d.s.set(ypath{string(comp), "extraArgs", i, "value"}, strNode(value)); err != nil {
					return err
				}
			}
		}
	}
	if found {
		return nil
	}
	item := mapNode(strNode("name"), strNode(name), strNode("value"), strNode(value))
	if n != nil && n.Kind == yaml.SequenceNode {
		return c.d.s.insertItem(base, len(n.Content), item)
	}
	return c.d.s.set(base, seqNode(item))
}

// RemoveExtraArg removes every extra argument of that name; extraArgs itself
// is removed when it becomes empty. Removing an absent argument does nothing.
func (c *ClusterConfiguration) RemoveExtraArg(comp Component, name string) error {
	name = strings.TrimLeft(name, "-")
	base := ypath{string(comp), "extraArgs"}
	for {
		n := lookup(c.d.root(), base)
		if n == nil {
			return nil
		}
		var idx []int
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == name {
					idx = append(idx, i/2)
				}
			}
		case yaml.SequenceNode:
			for i, it := range n.Content {
				if v, _ := scalarAt(it, ypath{"name"}); v == name {
					idx = append(idx, i)
				}
			}
		}
		if len(idx) == 0 {
			return nil
		}
		entries := len(n.Content)
		if n.Kind == yaml.MappingNode {
			entries /= 2
		}
		if entries == 1 {
			return c.d.deleteKey(base)
		}
		var err error
		if n.Kind == yaml.MappingNode {
			err = c.d.s.del(append(base, name))
		} else {
			err = c.d.s.del(append(base, idx[len(idx)-1]))
		}
		if err != nil {
			return err
		}
	}
}

// Bytes returns the document as it is now: the bytes read when nothing was set.
func (c *ClusterConfiguration) Bytes() []byte { return c.d.bytes() }

// Source names where the document was read from, as used in errors and findings.
func (c *ClusterConfiguration) Source() string { return c.source }

// ControllerManagerFlags returns the node IPAM flags kubeadm renders into the
// kube-controller-manager manifest from this configuration
// (cmd/kubeadm/app/phases/controlplane getControllerManagerCommand):
// --allocate-node-cidrs=true, --cluster-cidr=podSubnet and
// --service-cluster-ip-range=serviceSubnet when podSubnet is set, each
// overridden by controllerManager.extraArgs.
func (c *ClusterConfiguration) ControllerManagerFlags() (cidr.ControllerManagerFlags, error) {
	args := map[string]string{}
	net := c.Networking()
	if net.PodSubnet != "" {
		args[FlagAllocateNodeCIDRs] = "true"
		args[FlagClusterCIDR] = net.PodSubnet
		if net.ServiceSubnet != "" {
			args[FlagServiceClusterIPRange] = net.ServiceSubnet
		}
	}
	for _, a := range c.ExtraArgs(ControllerManager) {
		args[a.Name] = a.Value
	}
	return controllerManagerFlags(c.source+" (as kubeadm renders kube-controller-manager)", func(name string) (string, bool) {
		v, ok := args[name]
		return v, ok
	})
}

// APIServerServiceRange returns the --service-cluster-ip-range kubeadm renders
// into the kube-apiserver manifest: apiServer.extraArgs, else networking.serviceSubnet.
func (c *ClusterConfiguration) APIServerServiceRange() string {
	if v, ok := c.ExtraArg(APIServer, FlagServiceClusterIPRange); ok {
		return v
	}
	return c.Networking().ServiceSubnet
}
