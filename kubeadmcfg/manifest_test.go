package kubeadmcfg

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/cidr"
)

const smallManifest = `apiVersion: v1
kind: Pod
metadata:
  labels:
    component: kube-controller-manager
  name: kube-controller-manager
spec:
  containers:
  - name: sidecar
    image: busybox
    command: ["sleep", "inf"]
  - name: kube-controller-manager
    command:
    - kube-controller-manager
    # IPAM
    - --allocate-node-cidrs
    - "--cluster-cidr=10.244.0.0/16"   # pods
    - --node_cidr_mask_size=24
    - --service-cluster-ip-range
    - 10.96.0.0/12
    image: registry.k8s.io/kube-controller-manager:v1.33.1
    args:
    - --v=2
`

func TestManifestFlags(t *testing.T) {
	m, err := ParseManifest([]byte(smallManifest))
	require.NoError(t, err)
	assert.Equal(t, "kube-controller-manager", m.Component(), "the container named by the component label")
	assert.Equal(t, []string{"kube-controller-manager", "--allocate-node-cidrs", "--cluster-cidr=10.244.0.0/16", "--node_cidr_mask_size=24", "--service-cluster-ip-range", "10.96.0.0/12", "--v=2"}, m.Args())
	assert.Equal(t, map[string]string{"allocate-node-cidrs": "true", "cluster-cidr": "10.244.0.0/16", "node-cidr-mask-size": "24", "service-cluster-ip-range": "10.96.0.0/12", "v": "2"}, m.Flags())
	v, ok := m.Flag("--node-cidr-mask-size")
	assert.True(t, ok)
	assert.Equal(t, "24", v)
	_, ok = m.Flag("cidr-allocator-type")
	assert.False(t, ok)
	f, err := m.ControllerManagerFlags()
	require.NoError(t, err)
	assert.Equal(t, cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/16", NodeCIDRMaskSize: 24, ServiceClusterIPRange: "10.96.0.0/12"}, f)
	assert.Equal(t, 33, m.KubernetesMinor())
}

func TestManifestEdits(t *testing.T) {
	m, err := ParseManifest([]byte(smallManifest))
	require.NoError(t, err)
	require.NoError(t, m.Apply([]FlagChange{
		{Flag: "cluster-cidr", Value: "10.20.0.0/16"},
		{Flag: "node-cidr-mask-size", Value: "23"},
		{Flag: "service-cluster-ip-range", Value: "172.24.0.0/16"},
		{Flag: "allocate-node-cidrs", Value: "false"},
		{Flag: "node-cidr-mask-size-ipv6", Remove: true},
		{Flag: "leader-elect", Value: "true"},
	}))
	want := strings.NewReplacer(
		`    - --allocate-node-cidrs`+"\n", `    - --allocate-node-cidrs=false`+"\n",
		`"--cluster-cidr=10.244.0.0/16"`, `"--cluster-cidr=10.20.0.0/16"`,
		`--node_cidr_mask_size=24`, `--node_cidr_mask_size=23`,
		"    - --service-cluster-ip-range\n    - 10.96.0.0/12\n", "    - --service-cluster-ip-range=172.24.0.0/16\n",
		"    - --v=2\n", "    - --v=2\n    - --leader-elect=true\n",
	).Replace(smallManifest)
	assert.Equal(t, want, string(m.Bytes()))

	require.NoError(t, m.RemoveFlag("--cluster-cidr"))
	require.NoError(t, m.RemoveFlag("leader-elect"))
	require.NoError(t, m.RemoveFlag("absent"))
	_, ok := m.Flag("cluster-cidr")
	assert.False(t, ok)
	assert.NotContains(t, string(m.Bytes()), "# pods", "the comment goes with its line")
	assert.Contains(t, string(m.Bytes()), "    # IPAM\n", "other comments stay")
}

func TestManifestInsertAfterLastFlag(t *testing.T) {
	for _, version := range goldenVersions {
		t.Run(version, func(t *testing.T) {
			data := golden(t, version, "kube-controller-manager.yaml")
			m, err := ParseManifest(data)
			require.NoError(t, err)
			args := m.Args()
			require.NoError(t, m.SetFlag("cidr-allocator-type", "RangeAllocator"))
			assert.Equal(t, append(args, "--cidr-allocator-type=RangeAllocator"), m.Args())
			lastFlag := "    - " + args[len(args)-1] + "\n"
			assert.Contains(t, string(m.Bytes()), lastFlag+"    - --cidr-allocator-type=RangeAllocator\n    image:")
			require.NoError(t, m.RemoveFlag("cidr-allocator-type"))
			assert.Equal(t, string(data), string(m.Bytes()), "insert then remove gives the file back")
		})
	}
}

func TestManifestErrors(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		is     error
		substr string
		value  string // the FieldError's Value, when there is one
	}{
		{"not a pod", "apiVersion: v1\nkind: ConfigMap\n", ErrNotFound, "no Pod document", ""},
		{"pod v2", "apiVersion: v2\nkind: Pod\n", ErrUnsupportedVersion, `"v2"`, ""},
		{"no containers", "apiVersion: v1\nkind: Pod\nspec: {}\n", ErrNotFound, "spec.containers", ""},
		{"container not a mapping", "apiVersion: v1\nkind: Pod\nspec:\n  containers: [x]\n", ErrInvalid, "spec.containers[0]", "x"},
		{"container a list", "apiVersion: v1\nkind: Pod\nspec:\n  containers: [[x]]\n", ErrInvalid, "spec.containers[0]", "list"},
		{"command of maps", "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command:\n    - {a: b}\n", ErrInvalid, "spec.containers[0].command[0]", ""},
		{"no command", "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: x\n", ErrNotFound, "neither command nor args", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(tt.in))
			require.ErrorIs(t, err, tt.is)
			assert.Contains(t, err.Error(), tt.substr)
			if tt.value != "" {
				var fe *FieldError
				require.True(t, errors.As(err, &fe))
				assert.Equal(t, tt.value, fe.Value, "the error names the value")
			}
			_, err = ManifestArgs([]byte(tt.in))
			require.Error(t, err)
		})
	}

	m, err := ParseManifest([]byte("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command: [kube-controller-manager, --cluster-cidr=10.0.0.0/8]\n"))
	require.NoError(t, err)
	require.NoError(t, m.SetFlag("cluster-cidr", "10.1.0.0/16"), "a flow list item can be replaced in place")
	assert.Contains(t, string(m.Bytes()), "[kube-controller-manager, --cluster-cidr=10.1.0.0/16]")
	err = m.SetFlag("node-cidr-mask-size", "24")
	require.ErrorIs(t, err, ErrUnsupportedLayout, "a flow list cannot grow without reformatting the file")

	require.ErrorIs(t, m.SetFlag("bad name", "x"), ErrInvalid)
	require.ErrorIs(t, m.SetFlag("v", "a\nb"), ErrInvalid)

	bad, err := ParseManifest([]byte("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command:\n    - kcm\n    - --node-cidr-mask-size=wide\n    - --allocate-node-cidrs=maybe\n"))
	require.NoError(t, err)
	_, err = bad.ControllerManagerFlags()
	var fe *FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "--allocate-node-cidrs", fe.Field)
	assert.Equal(t, "maybe", fe.Value)
}

func TestManifestArgsGolden(t *testing.T) {
	for _, version := range goldenVersions {
		for _, file := range []string{"kube-controller-manager.yaml", "kube-apiserver.yaml"} {
			args, err := ManifestArgs(golden(t, version, file))
			require.NoError(t, err, version+"/"+file)
			assert.Equal(t, strings.TrimSuffix(file, ".yaml"), args[0])
			for _, a := range args[1:] {
				assert.True(t, strings.HasPrefix(a, "--") && strings.Contains(a, "="), "%s %s: %q", version, file, a)
			}
		}
	}
}

// The component label picks the container; a mirror pod's name (with the
// node's name added) does not. Without the label, the pod's name does.
func TestManifestContainerFromComponentLabel(t *testing.T) {
	renamed := replaceOnce(t, smallManifest, "  name: kube-controller-manager\nspec:", "  name: kube-controller-manager-cp1\nspec:")
	m, err := ParseManifest([]byte(renamed))
	require.NoError(t, err)
	assert.Equal(t, "--cluster-cidr=10.244.0.0/16", m.Args()[2], "the label names the container, not the pod's name")

	unlabelled := replaceOnce(t, smallManifest, "  labels:\n    component: kube-controller-manager\n", "")
	m, err = ParseManifest([]byte(unlabelled))
	require.NoError(t, err)
	assert.Equal(t, "--cluster-cidr=10.244.0.0/16", m.Args()[2], "without the label, the pod's name names the container")
}

// A flag that takes a value but is the last item of its list has none:
// it reads as "true" and nothing past the list is read.
func TestManifestFlagAtTheEndOfTheList(t *testing.T) {
	m, err := ParseManifest([]byte("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command: [kcm, --cluster-cidr]\n    args: [--node-cidr-mask-size, \"24\"]\n"))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"cluster-cidr": "true", "node-cidr-mask-size": "24"}, m.Flags())
}

func TestFlagsEndAtDoubleDash(t *testing.T) {
	m, err := ParseManifest([]byte("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command: [x, --a=1, --, --b=2]\n"))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "1"}, m.Flags())
}

// The minor version comes from the image's tag, the text after the last
// colon that is not part of a registry host:port; an image with no tag, or
// with no name before the tag, has none.
func TestManifestKubernetesMinorFromImage(t *testing.T) {
	const tag = "image: registry.k8s.io/kube-controller-manager:v1.33.1"
	require.Contains(t, smallManifest, tag)
	for image, want := range map[string]int{
		"registry.k8s.io/kube-controller-manager:v1.33.1": 33,
		"localhost:5000/kube-controller-manager:v1.29.0":  29,
		"localhost:5000/kube-controller-manager":          0,
		"kube-controller-manager":                         0,
		":v1.34.2":                                        0,
	} {
		m, err := ParseManifest([]byte(strings.Replace(smallManifest, tag, "image: "+strconv.Quote(image), 1)))
		require.NoError(t, err, image)
		assert.Equal(t, want, m.KubernetesMinor(), image)
	}
}

// A flag given more than once is set, or removed, at every occurrence: the
// component reads the last one, and a later edit must not find an old value
// left in an earlier one.
func TestManifestEditsEveryOccurrence(t *testing.T) {
	const in = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command:\n    - kcm\n    - --cluster-cidr=10.0.0.0/8\n    - --v=2\n    - --cluster-cidr\n    - 10.1.0.0/16\n    args:\n    - --cluster_cidr=10.2.0.0/16\n"
	m, err := ParseManifest([]byte(in))
	require.NoError(t, err)
	require.NoError(t, m.SetFlag("cluster-cidr", "10.20.0.0/16"))
	assert.Equal(t, "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command:\n    - kcm\n    - --cluster-cidr=10.20.0.0/16\n    - --v=2\n    - --cluster-cidr=10.20.0.0/16\n    args:\n    - --cluster_cidr=10.20.0.0/16\n", string(m.Bytes()))

	m, err = ParseManifest([]byte(in))
	require.NoError(t, err)
	require.NoError(t, m.RemoveFlag("cluster-cidr"))
	assert.Equal(t, "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command:\n    - kcm\n    - --v=2\n    args: []\n", string(m.Bytes()))
}

// SetFlag writes every occurrence as --name=value, as its doc says: one that
// already reads --name=value is left as it is; a flag that has the value
// already, but as two items or as a bare boolean, is rewritten as one item.
func TestManifestSetFlagToTheValueItHas(t *testing.T) {
	const in = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command:\n    - kcm\n    - \"--cluster-cidr=10.0.0.0/8\"\n    - --allocate-node-cidrs\n    - --service-cluster-ip-range\n    - 10.96.0.0/12\n"
	m, err := ParseManifest([]byte(in))
	require.NoError(t, err)
	require.NoError(t, m.SetFlag("cluster-cidr", "10.0.0.0/8"))
	assert.Equal(t, in, string(m.Bytes()), "--cluster-cidr=10.0.0.0/8 already reads so")
	require.NoError(t, m.SetFlag("allocate-node-cidrs", "true"))
	require.NoError(t, m.SetFlag("service-cluster-ip-range", "10.96.0.0/12"))
	assert.Equal(t, "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command:\n    - kcm\n    - \"--cluster-cidr=10.0.0.0/8\"\n    - --allocate-node-cidrs=true\n    - --service-cluster-ip-range=10.96.0.0/12\n", string(m.Bytes()))
}

// A node mask flag is read as a prefix length from 0 to 128; the families'
// own bounds are checked later, by cidr.ParseControllerManagerFlags.
func TestManifestMaskFlagBounds(t *testing.T) {
	for v, want := range map[string]int{"0": 0, "128": 128, " 24 ": 24, "-1": -1, "129": -1, "x": -1} {
		m, err := ParseManifest([]byte("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command: [kcm, " + strconv.Quote("--node-cidr-mask-size-ipv6="+v) + "]\n"))
		require.NoError(t, err, v)
		f, err := m.ControllerManagerFlags()
		if want < 0 {
			var fe *FieldError
			require.ErrorAs(t, err, &fe, v)
			assert.Equal(t, "--node-cidr-mask-size-ipv6", fe.Field)
			assert.Equal(t, v, fe.Value)
			continue
		}
		require.NoError(t, err, v)
		assert.Equal(t, want, f.NodeCIDRMaskSizeIPv6, v)
	}
}
