package kubeadmcfg

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/cidrshift/cidrshift/cidr"
)

// The command-line flags this package reads and rewrites (names without dashes).
const (
	FlagClusterCIDR           = "cluster-cidr"
	FlagNodeCIDRMaskSize      = "node-cidr-mask-size"
	FlagNodeCIDRMaskSizeIPv4  = "node-cidr-mask-size-ipv4"
	FlagNodeCIDRMaskSizeIPv6  = "node-cidr-mask-size-ipv6"
	FlagServiceClusterIPRange = "service-cluster-ip-range"
	FlagAllocateNodeCIDRs     = "allocate-node-cidrs"
)

// isBoolFlag reports whether a flag never takes its value from the next argument.
func isBoolFlag(name string) bool {
	switch name {
	case FlagAllocateNodeCIDRs, "leader-elect", "use-service-account-credentials", "allow-privileged",
		"enable-bootstrap-token-auth", "profiling", "configure-cloud-routes", "enable-hostpath-provisioner",
		"enable-garbage-collector":
		return true
	}
	return false
}

// Manifest is a static-pod manifest (kube-controller-manager.yaml,
// kube-apiserver.yaml) kept as the text it was read from. Flags are read from
// the container's command and args, and rewritten by editing only the
// "- --flag=value" lines concerned: every other byte — comments, flag order,
// quoting, the kubelet annotations — stays as it was, so the kubelet sees
// exactly the intended change. An edit that cannot be made that way fails with
// ErrUnsupportedLayout instead of reformatting the file.
type Manifest struct {
	d         *document
	source    string
	container int
}

// flagItem is one flag occurrence in the container's command or args.
type flagItem struct {
	list  string // "command" or "args"
	index int    // index in that list
	name  string // as written, without dashes
	value string
	// form is how the value is written: "=" (--name=value), "next" (--name value) or "" (--name alone).
	form string
}

// ParseManifest reads a static-pod manifest. The pod must have a container
// with a command or args list; the container named by the pod's component
// label (or the pod's name) is used, else the first one.
func ParseManifest(data []byte) (*Manifest, error) {
	return parseManifest("static-pod manifest", data)
}

// ParseManifestFrom is ParseManifest with the source that errors and
// findings name, such as "Pod kube-system/kube-apiserver-cp1" for a
// control-plane Pod read from the API server or a dump.
func ParseManifestFrom(source string, data []byte) (*Manifest, error) {
	return parseManifest(source, data)
}

// ReadManifestFile reads a static-pod manifest from a file; errors and
// findings name the file.
func ReadManifestFile(path string) (*Manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseManifest(path, data)
}

// ManifestArgs returns the command line of a static-pod manifest's
// container: command followed by args, as the kubelet would start it. It is
// what an end-to-end test needs to start the real component from a manifest
// rewritten by this package.
func ManifestArgs(data []byte) ([]string, error) {
	m, err := ParseManifest(data)
	if err != nil {
		return nil, err
	}
	return m.Args(), nil
}

func parseManifest(source string, data []byte) (*Manifest, error) {
	d, root, err := parseDocument(source, "Pod", []string{"v1"}, data)
	if err != nil {
		return nil, err
	}
	d.s.reencode = false
	m := &Manifest{d: d, source: source}
	cs := lookup(root, ypath{"spec", "containers"})
	if cs == nil || cs.Kind != yaml.SequenceNode || len(cs.Content) == 0 {
		return nil, &FieldError{Source: source, Field: "spec.containers", Reason: "the pod has no containers", Err: ErrNotFound}
	}
	want, _ := scalarAt(root, ypath{"metadata", "labels", "component"})
	if want == "" {
		want, _ = scalarAt(root, ypath{"metadata", "name"})
	}
	for i, c := range cs.Content {
		if c.Kind != yaml.MappingNode {
			return nil, invalid(source, fmt.Sprintf("spec.containers[%d]", i), shortValue(c), "a container must be a mapping")
		}
		if name, _ := scalarAt(c, ypath{"name"}); name == want && want != "" {
			m.container = i
		}
	}
	for _, list := range []string{"command", "args"} {
		if err := checkStringList(source, root, m.path(list)); err != nil {
			return nil, err
		}
	}
	if len(m.Args()) == 0 {
		return nil, &FieldError{Source: source, Field: m.path("command").String(), Reason: "the container has neither command nor args", Err: ErrNotFound}
	}
	return m, nil
}

func (m *Manifest) path(list string) ypath {
	return ypath{"spec", "containers", m.container, list}
}

// Source names where the manifest was read from (its path for ReadManifestFile).
func (m *Manifest) Source() string { return m.source }

// Component returns the name of the container whose flags are read, e.g. "kube-controller-manager".
func (m *Manifest) Component() string {
	n, _ := scalarAt(m.d.root(), ypath{"spec", "containers", m.container, "name"})
	return n
}

// Args returns the container's command followed by its args.
func (m *Manifest) Args() []string {
	root := m.d.root()
	return append(stringList(root, m.path("command")), stringList(root, m.path("args"))...)
}

// Bytes returns the manifest as it is now: the bytes read when nothing was changed.
func (m *Manifest) Bytes() []byte { return m.d.bytes() }

func normFlag(name string) string {
	return strings.ReplaceAll(strings.TrimLeft(name, "-"), "_", "-")
}

// items lists every flag occurrence, in command-line order.
func (m *Manifest) items() []flagItem {
	root := m.d.root()
	var out []flagItem
	done := false
	for _, list := range []string{"command", "args"} {
		vals := stringList(root, m.path(list))
		for i := 0; i < len(vals); i++ {
			v := vals[i]
			if done || !strings.HasPrefix(v, "--") {
				continue
			}
			if v == "--" {
				done = true
				continue
			}
			name, value, eq := strings.Cut(v[2:], "=")
			it := flagItem{list: list, index: i, name: name, value: value, form: "="}
			if !eq {
				it.form, it.value = "", "true"
				if !isBoolFlag(normFlag(name)) && i+1 < len(vals) && !strings.HasPrefix(vals[i+1], "-") {
					it.form, it.value = "next", vals[i+1]
					i++
				}
			}
			out = append(out, it)
		}
	}
	return out
}

func (m *Manifest) occurrences(name string) []flagItem {
	name = normFlag(name)
	var out []flagItem
	for _, it := range m.items() {
		if normFlag(it.name) == name {
			out = append(out, it)
		}
	}
	return out
}

// Flags returns every flag as name (without dashes) to value; a flag given
// more than once keeps its last value, as the component does.
func (m *Manifest) Flags() map[string]string {
	out := map[string]string{}
	for _, it := range m.items() {
		out[normFlag(it.name)] = it.value
	}
	return out
}

// Flag returns the value of a flag (name with or without dashes; '_' and '-'
// are the same, as in the components). A flag given more than once returns
// its last value; a flag given without a value returns "true".
func (m *Manifest) Flag(name string) (string, bool) {
	occ := m.occurrences(name)
	if len(occ) == 0 {
		return "", false
	}
	return occ[len(occ)-1].value, true
}

func (m *Manifest) checkFlag(name, value string) (string, error) {
	n := strings.TrimLeft(name, "-")
	if n == "" || strings.ContainsAny(n, "= \t\r\n") {
		return "", invalid(m.source, "flag", name, "a flag name is letters, digits and dashes, e.g. cluster-cidr")
	}
	if strings.ContainsAny(value, "\r\n") {
		return "", invalid(m.source, "--"+n, value, "a flag value must be one line")
	}
	return n, nil
}

// SetFlag sets a flag to value. Every occurrence is rewritten in place as
// --name=value; a missing flag is inserted after the last flag of the list
// that holds the flags, with the same indentation.
func (m *Manifest) SetFlag(name, value string) error {
	n, err := m.checkFlag(name, value)
	if err != nil {
		return err
	}
	occ := m.occurrences(n)
	if len(occ) == 0 {
		list, at := "command", len(stringList(m.d.root(), m.path("command")))
		if items := m.items(); len(items) > 0 {
			last := items[len(items)-1]
			list, at = last.list, last.index+1
			if last.form == "next" {
				at++
			}
		}
		return m.d.s.insertItem(m.path(list), at, strNode("--"+n+"="+value))
	}
	for i := len(occ) - 1; i >= 0; i-- {
		it := occ[i]
		if it.form == "=" && it.value == value {
			continue
		}
		if it.form == "next" {
			if err := m.d.s.del(append(m.path(it.list), it.index+1)); err != nil {
				return err
			}
		}
		if err := m.d.s.set(append(m.path(it.list), it.index), strNode("--"+it.name+"="+value)); err != nil {
			return err
		}
	}
	return nil
}

// RemoveFlag removes every occurrence of a flag (and its value argument).
// Removing an absent flag does nothing.
func (m *Manifest) RemoveFlag(name string) error {
	n, err := m.checkFlag(name, "")
	if err != nil {
		return err
	}
	occ := m.occurrences(n)
	for i := len(occ) - 1; i >= 0; i-- {
		it := occ[i]
		if it.form == "next" {
			if err := m.d.s.del(append(m.path(it.list), it.index+1)); err != nil {
				return err
			}
		}
		if err := m.d.s.del(append(m.path(it.list), it.index)); err != nil {
			return err
		}
	}
	return nil
}

// ControllerManagerFlags returns the node IPAM flags of a
// kube-controller-manager manifest. A value that is not a number or a boolean
// where one is needed is a *FieldError naming the flag.
func (m *Manifest) ControllerManagerFlags() (cidr.ControllerManagerFlags, error) {
	return controllerManagerFlags(m.source, m.Flag)
}

func controllerManagerFlags(source string, get func(string) (string, bool)) (cidr.ControllerManagerFlags, error) {
	var f cidr.ControllerManagerFlags
	if v, ok := get(FlagAllocateNodeCIDRs); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return f, &FieldError{Source: source, Field: "--" + FlagAllocateNodeCIDRs, Value: v, Reason: "must be true or false", Err: ErrInvalid}
		}
		f.AllocateNodeCIDRs = b
	}
	f.ClusterCIDR, _ = get(FlagClusterCIDR)
	f.ServiceClusterIPRange, _ = get(FlagServiceClusterIPRange)
	for _, mk := range []struct {
		name string
		dst  *int
	}{
		{FlagNodeCIDRMaskSize, &f.NodeCIDRMaskSize},
		{FlagNodeCIDRMaskSizeIPv4, &f.NodeCIDRMaskSizeIPv4},
		{FlagNodeCIDRMaskSizeIPv6, &f.NodeCIDRMaskSizeIPv6},
	} {
		v, ok := get(mk.name)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n > 128 {
			return f, &FieldError{Source: source, Field: "--" + mk.name, Value: v, Reason: "must be a prefix length between 0 and 128 (e.g. 24)", Err: ErrInvalid}
		}
		*mk.dst = n
	}
	return f, nil
}

// FlagChange is one change to a static-pod manifest's command line.
type FlagChange struct {
	// Flag is the flag name without dashes, e.g. "cluster-cidr".
	Flag string `json:"flag"`
	// Value is the new value; ignored when Remove is set.
	Value string `json:"value,omitempty"`
	// Remove removes the flag instead of setting it.
	Remove bool `json:"remove,omitempty"`
}

// String renders the change as it reads on a command line.
func (c FlagChange) String() string {
	if c.Remove {
		return "remove --" + c.Flag
	}
	return "--" + c.Flag + "=" + c.Value
}

// Apply makes the changes in order.
func (m *Manifest) Apply(changes []FlagChange) error {
	for _, c := range changes {
		var err error
		if c.Remove {
			err = m.RemoveFlag(c.Flag)
		} else {
			err = m.SetFlag(c.Flag, c.Value)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// clone returns an independent copy.
func (m *Manifest) clone() *Manifest {
	c := *m
	d := *m.d
	d.s.src = slices.Clone(m.d.s.src) // the cached tree is shared read-only
	c.d = &d
	return &c
}
