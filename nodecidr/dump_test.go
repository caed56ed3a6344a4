package nodecidr

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

const listYAML = `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: a
    creationTimestamp: "2024-01-01T00:00:00Z"
  spec:
    podCIDR: 10.244.1.0/24
    podCIDRs: [10.244.1.0/24]
- apiVersion: v1
  kind: Service
  metadata: {name: kubernetes, namespace: default}
- apiVersion: v1
  kind: Pod
  metadata: {name: p, namespace: default}
  spec: {nodeName: a}
  status: {podIP: 10.241.12.6}
metadata:
  resourceVersion: ""
`

// kubectlList is `kubectl get nodes,pods -A -o yaml` as kubectl writes it.
const kubectlList = `apiVersion: v1
items:
- apiVersion: v1
  kind: Node
  metadata:
    annotations:
      node.alpha.kubernetes.io/ttl: "0"
    labels:
      kubernetes.io/hostname: a
    name: a
    uid: 6a0c2b2e
  spec:
    podCIDR: 10.244.1.0/24
    podCIDRs:
    - 10.244.1.0/24
  status:
    capacity:
      cpu: "8"
      pods: "110"
    daemonEndpoints:
      kubeletEndpoint:
        Port: 10250
- apiVersion: v1
  kind: Pod
  metadata:
    annotations:
      kubectl.kubernetes.io/last-applied-configuration: |
        {"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"}}
    labels:
      app: web
    name: web
    namespace: default
  spec:
    containers:
    - image: nginx
      name: web
      resources: {}
    nodeName: a
    securityContext: {}
  status:
    conditions:
    - lastProbeTime: null
      message: 'containers with unready status: [web]'
      status: "False"
      type: Ready
    phase: Running
    podIP: 10.244.1.7
    podIPs:
    - ip: 10.244.1.7
    - ip: fd00:10:244:1::7
- apiVersion: v1
  kind: Pod
  metadata:
    labels:
      component: kube-controller-manager
    name: kube-controller-manager-a
    namespace: kube-system
  spec:
    containers:
    - command:
      - kube-controller-manager
      - --cluster-cidr=10.244.0.0/16
      name: kube-controller-manager
    hostNetwork: true
    nodeName: a
  status:
    phase: Running
    podIP: 192.168.1.2
- apiVersion: v1
  kind: Service
  metadata:
    name: kubernetes
    namespace: default
kind: List
metadata:
  resourceVersion: ""
`

const kubectlJSON = `{
    "apiVersion": "v1",
    "items": [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "a"},
            "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]}
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": "a", "containers": [{"name": "web", "image": "nginx"}]},
            "status": {"phase": "Running", "podIP": "10.244.1.7", "podIPs": [{"ip": "10.244.1.7"}, {"ip": "fd00:10:244:1::7"}]}
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "kube-controller-manager-a", "namespace": "kube-system", "labels": {"component": "kube-controller-manager"}},
            "spec": {"nodeName": "a", "hostNetwork": true, "containers": [{"name": "kcm", "command": ["kube-controller-manager", "--cluster-cidr=10.244.0.0/16"]}]},
            "status": {"phase": "Running", "podIP": "192.168.1.2"}
        },
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kubernetes"}}
    ],
    "kind": "List",
    "metadata": {"resourceVersion": ""}
}
`

func TestDecodeObjects(t *testing.T) {
	// The items indented by two more columns, as some tools write them.
	head, rest, _ := strings.Cut(kubectlList, "items:\n")
	body, tail, _ := strings.Cut(rest, "kind: List\n")
	indented := head + "items:\n  " + strings.ReplaceAll(strings.TrimSuffix(body, "\n"), "\n", "\n  ") + "\nkind: List\n" + tail
	tests := []struct {
		name                string
		in                  string
		nodes, pods, others int
	}{
		{"v1 List", listYAML, 1, 1, 1},
		{"kubectl List", kubectlList, 1, 2, 1},
		{"kubectl JSON", kubectlJSON, 1, 2, 1},
		{"JSON, compact", strings.Join(strings.Fields(kubectlJSON), ""), 1, 2, 1},
		{"NodeList", "apiVersion: v1\nkind: NodeList\nitems:\n- metadata: {name: a}\n  kind: Node\n- metadata: {name: b}\n  kind: Node\n", 2, 0, 0},
		{"PodList", "apiVersion: v1\nitems:\n- kind: Pod\n  metadata:\n    name: a\n- kind: Pod\n  metadata:\n    name: b\nkind: PodList\n", 0, 2, 0},
		{"multi-document", "---\napiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n\n---\napiVersion: v1\nkind: Node\nmetadata: {name: b}\n", 2, 0, 0},
		{"single objects", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Node\nmetadata:\n  name: b\n", 1, 1, 0},
		{"JSON", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"a"}}]}`, 1, 0, 0},
		{"JSON stream", `{"kind":"Node","metadata":{"name":"a"}} {"kind":"Pod","metadata":{"name":"p"}}`, 1, 1, 0},
		{"JSON items null", `{"kind":"List","items":null}`, 0, 0, 0},
		{"YAML flow List", `{kind: List, items: [{kind: Node, metadata: {name: a}}, {kind: Pod}]}`, 1, 1, 0},
		{"indented items", indented, 1, 2, 1},
		{"empty List", "apiVersion: v1\nitems: []\nkind: List\n", 0, 0, 0},
		{"items then blank lines and comments", "items:\n\n- kind: Node\n# a comment\n  metadata: {name: a}\n\n- kind: Node\n  metadata:\n    name: b # why\nkind: List\n", 2, 0, 0},
		{"CRLF", strings.ReplaceAll(kubectlList, "\n", "\r\n"), 1, 2, 1},
		{"tabs in values", strings.ReplaceAll(kubectlList, "app: web", "app: \"a\tb\""), 1, 2, 1},
		{"item on the next line", "items:\n-\n  kind: Node\n  metadata: {name: a}\nkind: List\n", 1, 0, 0},
		{"empty", "", 0, 0, 0},
		{"comments only", "# nothing\n---\n# here\n", 0, 0, 0},
		// A document of white space only is empty, even one YAML would
		// refuse to parse (a tab cannot start a token).
		{"documents of white space only", "---\n\t\n---\nkind: Node\nmetadata: {name: a}\n---\n \t \r\n", 1, 0, 0},
		// The first item of a typed List without a kind, with an escape
		// that sends it past the fast path to encoding/json.
		{"JSON PodList, kinds left out", `{"kind":"PodList","apiVersion":"v1","items":[{"metadata":{"name":"\u0061"}},{"metadata":{"name":"b"}}]}`, 0, 2, 0},
		{"other group", "apiVersion: crd.projectcalico.org/v1\nkind: Node\nmetadata: {name: a}\n", 0, 0, 1},
		// A line "items:" with no item under it is a List's null items,
		// before another field and at the document's end.
		{"items: then a field", "apiVersion: v1\nitems:\nkind: List\n", 0, 0, 0},
		{"items: at the end", "kind: List\nitems:\n\n", 0, 0, 0},
		{"JSON items empty after a field", `{"kind":"List","items":[]}`, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := DecodeObjects([]byte(tc.in))
			require.NoError(t, err)
			assert.Len(t, d.Nodes, tc.nodes)
			assert.Len(t, d.Pods, tc.pods)
			assert.Equal(t, tc.others, d.Skipped)
			if tc.in != "" && !strings.HasPrefix(tc.in, "{") {
				want, err := fullDump([]byte(tc.in))
				if err == nil { // fullDump splits documents naively
					assert.Equal(t, want, d, "the fast path changes nothing")
				}
			}
		})
	}

	for _, in := range []string{kubectlList, kubectlJSON} {
		d, err := DecodeObjects([]byte(in))
		require.NoError(t, err)
		assert.Equal(t, []string{"10.244.1.0/24"}, PodCIDRsOf(&d.Nodes[0]))
		assert.Equal(t, []PodSummary{
			{Namespace: "default", Name: "web", NodeName: "a", Phase: "Running", IPs: []string{"10.244.1.7", "fd00:10:244:1::7"}},
			{Namespace: "kube-system", Name: "kube-controller-manager-a", NodeName: "a", HostNetwork: true, Phase: "Running", IPs: []string{"192.168.1.2"}},
		}, d.Pods)
		require.Len(t, d.ControlPlanePods, 1)
		assert.Equal(t, []string{"kube-controller-manager", "--cluster-cidr=10.244.0.0/16"}, d.ControlPlanePods[0].Spec.Containers[0].Command)
	}
	d, err := DecodeObjects([]byte(listYAML))
	require.NoError(t, err)
	assert.Equal(t, PodSummary{Namespace: "default", Name: "p", NodeName: "a", IPs: []string{"10.241.12.6"}}, d.Pods[0])
}

func TestDecodeObjectsErrors(t *testing.T) {
	var many strings.Builder
	many.WriteString("apiVersion: v1\nitems:\n")
	for i := range 600 {
		if i == 517 {
			many.WriteString("- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: bad\n  spec:\n    hostNetwork: maybe\n")
			continue
		}
		fmt.Fprintf(&many, "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: p%d\n  spec:\n    nodeName: a\n", i)
	}
	many.WriteString("kind: List\n")
	for _, bad := range []struct{ name, in, msg string }{
		// Each position is matched up to its colon: "document 1" alone
		// is also the start of "document 1 item 1".
		{"YAML syntax", "a: [", "document 1: yaml: line 1"},
		{"a sequence in column 1", " - kind: Pod\n   metadata:\n     name: a\n", "document 1: not a Kubernetes object: json: cannot unmarshal array"},
		{"Node without name", "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\nkind: Node\nspec: {podCIDR: 10.0.0.0/24}\n", "document 2: Node without metadata.name"},
		{"not an object", "just a string", "not a Kubernetes object"},
		{"no kind", "apiVersion: v1\nkind: List\nitems:\n- {metadata: {name: x}}\n", "document 1 item 0: no kind"},
		{"no kind, block", "apiVersion: v1\nitems:\n- metadata:\n    name: x\nkind: List\n", "document 1 item 0: no kind"},
		// The fast path read a signed infinity as a string, and so
		// accepted the Pod that sigs.k8s.io/yaml refuses.
		{"a signed infinity", "kind: Pod\nmetadata:\n  name: a\nspec:\n  nodeName: -.inf\n", "document 1: json: unsupported value: -Inf"},
		{"Node field type", "kind: Node\nmetadata: {name: a}\nspec: {podCIDRs: 5}\n", "document 1: Node: json: cannot unmarshal number"},
		{"JSON Node field type", `{"kind":"Node","metadata":{"name":"a"}} {"kind":"Node","metadata":{"name":"b"},"spec":{"podCIDRs":5}}`, "document 2: Node: json: cannot unmarshal number"},
		{"Pod field type in item 517", many.String(), "document 1 item 517: Pod: json: cannot unmarshal string into Go struct field"},
		{"item syntax", "items:\n- kind: Pod\n  metadata: {name: [\n- kind: Pod\nkind: List\n", "document 1 item 0: yaml"},
		{"item syntax in item 2", "items:\n- kind: Node\n  metadata: {name: a}\n- kind: Node\n  metadata: {name: b}\n- kind: Pod\n  metadata: {name: [\nkind: List\n", "document 1 item 2: yaml: line 2"},
		{"separator", "kind: Node\nmetadata: {name: a}\n--- x\n", "document 1: invalid Yaml document separator: x"},
		{"items but not a List", "items:\n- kind: Node\n  metadata: {name: a}\nkind: Pod\n", `document 1: a "Pod" with items; want a List`},
		{"JSON syntax in item", `{"kind":"List","items":[{"kind":"Node","metadata":{"name":"a"}}, {"kind": }]}`, "document 1 item 1: not a Kubernetes object: invalid character"},
		{"JSON array", `{"kind":"Node","metadata":{"name":"a"}} [1]`, "document 2: not a Kubernetes object"},
		{"JSON Pod type", `{"kind":"List","items":[{"kind":"Pod","status":{"podIPs":"x"}}]}`, "document 1 item 0: Pod: json"},
		{"JSON after an item", `{"kind":"List","items":[{"kind":"Node","metadata":{"name":"a"}} x]}`, "document 1: invalid character 'x' after array element"},
		{"JSON cut after an item", `{"kind":"List","items":[{"kind":"Node","metadata":{"name":"a"}}`, "document 1: unexpected end of JSON input"},
		{"JSON cut after a comma", `{"kind":"List","items":[{"kind":"Node","metadata":{"name":"a"}},`, "document 1: item 1: unexpected end of JSON input"},
		{"YAML items twice, the second empty", "apiVersion: v1\nitems:\n- kind: Node\n  metadata:\n    name: a\nkind: List\nitems: []\n", "document 1: items given twice"},
		{"YAML items twice, the first empty", "apiVersion: v1\nitems: []\nkind: List\nitems:\n- kind: Node\n  metadata:\n    name: a\n", "document 1: items given twice"},
		{"YAML List end syntax", "apiVersion: v1\nitems:\n- kind: Node\n  metadata:\n    name: a\nkind: [\n", "document 1: yaml: line"},
		{"YAML List kind a number", "apiVersion: v1\nitems:\n- kind: Node\n  metadata:\n    name: a\nkind: 7\n", "document 1: not a Kubernetes object"},
		// The JSON reader's own errors, outside the items.
		{"JSON empty object", `{ } {"kind":"Node","metadata":{"name":"a"}}`, "document 1: no kind"},
		{"JSON items twice", `{"kind":"List","items":[{"kind":"Node","metadata":{"name":"a"}}],"items":[{"kind":"Node","metadata":{"name":"b"}}]}`, "document 1: items given twice"},
		{"JSON items a bad literal", `{"kind":"List","items":nul}`, `document 1: not a Kubernetes object: items is "nul", want a list`},
		{"JSON items a number", `{"kind":"List","items":5}`, "document 1: not a Kubernetes object: items is not a list"},
		{"JSON no comma", `{"kind":"Node" "metadata":{}}`, `document 1: invalid character '"' after object key:value pair`},
		{"JSON key a number", `{"kind":"Node",5:1}`, "document 1: invalid character '5' looking for beginning of object key string"},
		{"JSON no colon", `{"kind"5}`, "document 1: invalid character '5', want ':'"},
		{"JSON key escape", `{"k\x":1}`, "document 1: invalid character 'x' in string escape code"},
		{"JSON cut in a number", `{"kind":"Node","x":1`, "document 1: unexpected end of JSON input"},
		{"JSON cut in a string", `{"kind":"Node","x":"abc`, "document 1: unexpected end of JSON input"},
		{"JSON cut in an object", `{"kind":"Node","x":{"a":"b"`, "document 1: unexpected end of JSON input"},
		{"JSON cut after a comma between fields", `{"kind":"Node",`, "document 1: unexpected end of JSON input"},
		{"control-plane Pod type", "kind: Pod\nmetadata:\n  namespace: kube-system\n  labels: {component: kube-controller-manager}\nspec:\n  containers: 5\n", "document 1: Pod: json"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			_, err := DecodeObjects([]byte(bad.in))
			require.ErrorIs(t, err, ErrDump)
			assert.Contains(t, err.Error(), bad.msg)
		})
	}
}

func TestIsJSONLooksPastWhiteSpace(t *testing.T) {
	ws := func(n int) string { return strings.Repeat(" \t\r\n", n/4) }
	for _, tc := range []struct {
		name string
		in   string
		want bool
	}{
		{"object", `{"a":1}`, true},
		{"empty object", "{}", true},
		{"white space inside", "{ \n\t\"a\":1}", true},
		{"empty object with white space", "{ }", true},
		{"white space before", " \t\r\n{\"a\":1}", true},
		{"a whole peek of white space before", ws(64) + `{"a":1}`, true},
		{"a whole peek of white space inside", "{" + ws(64) + `"a":1}`, true},
		{"40 KiB of white space before", ws(40<<10) + `{"a":1}`, true},
		{"40 KiB of white space inside", "{" + ws(40<<10) + `"a":1}`, true},
		// Past 64 KiB it gives up: the YAML reader reads JSON too.
		{"70 KiB of white space before", ws(70<<10) + `{"a":1}`, false},
		{"YAML flow mapping", "{a: 1}", false},
		{"YAML flow mapping after white space", "{ \n a: 1}", false},
		{"YAML", "kind: List", false},
		{"a brace, then white space to the end", "{ \n", false},
		{"a brace, then a whole peek of white space to the end", "{" + ws(64), false},
		{"a brace", "{", false},
		{"white space", " \n", false},
		{"nothing", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, isJSON(bufio.NewReaderSize(strings.NewReader(tc.in), 1<<20)))
		})
	}
}

func TestDecodeObjectsKeepsBothControlPlaneComponentsInFull(t *testing.T) {
	pod := func(ns, name, component string) string {
		return fmt.Sprintf("- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: %s\n    namespace: %s\n    labels: {component: %s}\n  spec:\n    containers:\n    - command: [%s, --flag]\n", name, ns, component, component)
	}
	in := "apiVersion: v1\nitems:\n" +
		pod("kube-system", "coredns-1", "coredns") +
		pod("kube-system", "kube-apiserver-a", "kube-apiserver") +
		pod("team", "kube-apiserver-b", "kube-apiserver") +
		pod("kube-system", "kube-controller-manager-a", "kube-controller-manager") +
		"kind: List\n"
	js, err := yaml.YAMLToJSON([]byte(in))
	require.NoError(t, err)
	for name, in := range map[string]string{"YAML": in, "JSON": string(js)} {
		t.Run(name, func(t *testing.T) {
			d, err := DecodeObjects([]byte(in))
			require.NoError(t, err)
			var got []string
			for _, p := range d.ControlPlanePods {
				got = append(got, p.Name+" "+strings.Join(p.Spec.Containers[0].Command, " "))
			}
			assert.Equal(t, []string{"kube-apiserver-a kube-apiserver --flag", "kube-controller-manager-a kube-controller-manager --flag"}, got,
				"the kube-system Pods of both components, and only those")
			assert.Len(t, d.Pods, 4)
		})
	}
}

func TestReadDumpStreams(t *testing.T) {
	// A reader that fails mid-way: the error, not a partial dump.
	r := io.MultiReader(strings.NewReader(kubectlList[:400]), iotest.ErrReader(errors.New("disk on fire")))
	_, err := ReadDump(t.Context(), r)
	require.ErrorIs(t, err, ErrDump)
	assert.Contains(t, err.Error(), "disk on fire")

	// A cancelled context stops the read.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = ReadDump(ctx, strings.NewReader(kubectlList))
	require.ErrorIs(t, err, context.Canceled)

	// A cancelled context returns at once even while a read blocks (a pipe).
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte(kubectlList[:300])) }()
	ctx, cancel = context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		_, err := ReadDump(ctx, pr)
		done <- err
	}()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	// One byte at a time, and lines longer than any buffer.
	long := strings.Replace(kubectlList, "app: web", "app: web\n      big: "+strings.Repeat("x", 3<<20), 1)
	d, err := ReadDump(t.Context(), iotest.OneByteReader(strings.NewReader(kubectlList)))
	require.NoError(t, err)
	assert.Len(t, d.Pods, 2)
	d, err = ReadDump(t.Context(), strings.NewReader(long))
	require.NoError(t, err)
	assert.Len(t, d.Pods, 2)

	// Many items: batches come back in input order.
	var b strings.Builder
	b.WriteString("apiVersion: v1\nitems:\n")
	for i := range 5000 {
		fmt.Fprintf(&b, "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: p%d\n", i)
	}
	b.WriteString("kind: List\n")
	d, err = ReadDump(t.Context(), strings.NewReader(b.String()))
	require.NoError(t, err)
	require.Len(t, d.Pods, 5000)
	for i, p := range d.Pods {
		require.Equal(t, fmt.Sprintf("p%d", i), p.Name)
	}
}

// TestReadDumpStreamsJSON is TestReadDumpStreams for `kubectl get -o json`:
// the JSON reader holds a window of 4 MiB and refills it, so every value
// that crosses a refill (a number, a string, an object), an item longer
// than the window and a read error mid-way are each read as the same
// bytes held whole are.
func TestReadDumpStreamsJSON(t *testing.T) {
	whole, err := DecodeObjects([]byte(kubectlJSON))
	require.NoError(t, err)
	require.Len(t, whole.Nodes, 1)
	require.Len(t, whole.Pods, 2)

	// A reader that fails mid-way, inside the items and inside the object
	// around them: the error, not a partial dump.
	for _, at := range []int{40, strings.Index(kubectlJSON, `"kind": "List"`)} {
		r := io.MultiReader(strings.NewReader(kubectlJSON[:at]), iotest.ErrReader(errors.New("disk on fire")))
		_, err := ReadDump(t.Context(), r)
		require.ErrorIs(t, err, ErrDump, "a read error at byte %d", at)
		assert.Contains(t, err.Error(), "disk on fire", "a read error at byte %d", at)
	}
	// A reader that fails once and would then go on: the error is kept,
	// not lost to a read that follows it, nor hidden by the error of an
	// item it cut short (after each token of the JSON and each line).
	for _, in := range []string{kubectlJSON, kubectlList} {
		for at := range len(in) {
			if at > 0 && !strings.ContainsRune("{}[],:\"\n", rune(in[at-1])) {
				continue
			}
			r := io.MultiReader(strings.NewReader(in[:at]), &failOnce{err: errors.New("connection reset")}, strings.NewReader(in[at:]))
			_, err := ReadDump(t.Context(), r)
			require.ErrorIs(t, err, ErrDump, "a read error at byte %d of\n%s", at, in)
			require.Contains(t, err.Error(), "connection reset", "a read error at byte %d of\n%s", at, in)
		}
	}

	// One byte at a time: every value crosses a refill, numbers and
	// literals included (the top level's items and fields, and a stream of
	// two documents).
	two := kubectlJSON + `{"kind":"Node","generation":12345,"x":true,"y":null,"metadata":{"name":"b","generation":12345},"spec":{"unschedulable":true,"podCIDR":null},"z":-1.5e3}`
	for name, in := range map[string]string{"a List": kubectlJSON, "two documents": two} {
		want, err := DecodeObjects([]byte(in))
		require.NoError(t, err, name)
		for rname, r := range map[string]io.Reader{
			"one byte":      iotest.OneByteReader(strings.NewReader(in)),
			"half":          iotest.HalfReader(strings.NewReader(in)),
			"data with EOF": iotest.DataErrReader(strings.NewReader(in)),
		} {
			got, err := ReadDump(t.Context(), r)
			require.NoError(t, err, "%s, %s", name, rname)
			assert.Equal(t, want, got, "%s, %s", name, rname)
		}
	}
	d, err := DecodeObjects([]byte(two))
	require.NoError(t, err)
	assert.Len(t, d.Nodes, 2, "the second document's Node")

	// An item longer than the window (an annotation of 5 MiB, with escaped
	// quotes across it), and a number at the window's end.
	big := strings.Repeat(`ab\\\"cd`, (5<<20)/10)
	long := strings.Replace(kubectlJSON, `"metadata": {"name": "web", "namespace": "default"}`,
		`"metadata": {"name": "web", "namespace": "default", "annotations": {"big": "`+big+`"}}`, 1)
	require.NotEqual(t, kubectlJSON, long)
	d, err = ReadDump(t.Context(), strings.NewReader(long))
	require.NoError(t, err)
	assert.Equal(t, whole, d, "an item longer than the window")

	// Many items, more than one window's worth: items come back in input
	// order, each whole.
	var b strings.Builder
	b.WriteString(`{"apiVersion":"v1","items":[`)
	const n = 60000
	for i := range n {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p%d","namespace":"default","generation":%d},"spec":{"nodeName":"a"},"status":{"podIP":"10.244.%d.%d"}}`, i, i, i/250, i%250)
	}
	b.WriteString(`],"kind":"List","metadata":{"resourceVersion":""}}`)
	require.Greater(t, b.Len(), 2*(4<<20), "the dump spans several windows")
	d, err = ReadDump(t.Context(), strings.NewReader(b.String()))
	require.NoError(t, err)
	require.Len(t, d.Pods, n)
	for i, p := range d.Pods {
		require.Equal(t, fmt.Sprintf("p%d", i), p.Name)
		require.Equal(t, []string{fmt.Sprintf("10.244.%d.%d", i/250, i%250)}, p.IPs, "pod p%d", i)
	}
}

// failOnce fails its first read and ends at its second.
type failOnce struct {
	err    error
	failed bool
}

func (f *failOnce) Read([]byte) (int, error) {
	if f.failed {
		return 0, io.EOF
	}
	f.failed = true
	return 0, f.err
}

func TestSummarizePod(t *testing.T) {
	d, err := DecodeObjects([]byte(kubectlList))
	require.NoError(t, err)
	cp := d.ControlPlanePods[0]
	assert.Equal(t, d.Pods[1], SummarizePod(&cp))
}

// TestReadDumpWithKeep: objects of other kinds that Keep accepts are kept as
// JSON (from YAML and JSON Lists), the rest counted; typed List items that
// name no kind (kubectl cluster-info dump) take the List's.
func TestReadDumpWithKeep(t *testing.T) {
	keep := func(apiVersion, kind string) bool {
		return kind == "Service" || apiVersion == "crd.projectcalico.org/v1"
	}
	yml := "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {name: web}\n- apiVersion: v1\n  kind: Secret\n  metadata: {name: s}\n" +
		"- apiVersion: crd.projectcalico.org/v1\n  kind: IPPool\n  metadata: {name: p}\n  spec: {cidr: 10.0.0.0/16}\n"
	d, err := ReadDumpWith(t.Context(), strings.NewReader(yml), DumpOptions{Keep: keep})
	require.NoError(t, err)
	require.Len(t, d.Objects, 2)
	assert.Equal(t, "Service", d.Objects[0].Kind)
	assert.JSONEq(t, `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web"}}`, string(d.Objects[0].JSON))
	assert.Equal(t, "IPPool", d.Objects[1].Kind)
	assert.Equal(t, 1, d.Skipped)

	js := `{"kind":"ServiceList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}` +
		`{"kind":"NodeList","apiVersion":"v1","items":[{"metadata":{"name":"n1"},"spec":{"podCIDR":"10.0.0.0/24"}}]}`
	d, err = ReadDumpWith(t.Context(), strings.NewReader(js), DumpOptions{Keep: keep})
	require.NoError(t, err)
	require.Len(t, d.Objects, 2)
	assert.Equal(t, "Service", d.Objects[1].Kind)
	require.Len(t, d.Nodes, 1)
	assert.Equal(t, "n1", d.Nodes[0].Name)

	// Without Keep, nothing is kept.
	d, err = ReadDump(t.Context(), strings.NewReader(yml))
	require.NoError(t, err)
	assert.Empty(t, d.Objects)
	assert.Equal(t, 3, d.Skipped)
}

// TestReadDumpWithKeepFastMatchesFull: kept objects of a block-style YAML
// List (which take the fast path) hold the JSON sigs.k8s.io/yaml makes of
// each item, awkward scalars and block text included.
func TestReadDumpWithKeepFastMatchesFull(t *testing.T) {
	items := []string{
		"- apiVersion: v1\n  kind: Service\n  metadata:\n    annotations:\n      a: \"0123\"\n      b: 'yes'\n      c: \"true\"\n    labels:\n      n: \"1.5\"\n    name: web\n    namespace: shop\n  spec:\n    clusterIP: 10.96.0.20\n    clusterIPs:\n    - 10.96.0.20\n    ports:\n    - name: http\n      port: 80\n      targetPort: 8080\n    selector: {}\n  status:\n    loadBalancer: {}\n",
		"- apiVersion: v1\n  data:\n    config.conf: |-\n      apiVersion: kubeproxy.config.k8s.io/v1alpha1\n      clusterCIDR: 10.64.0.0/16\n\n      kind: KubeProxyConfiguration\n    net-conf.json: |\n      {\n        \"Network\": \"10.64.0.0/10\"\n      }\n    empty: \"\"\n    tilde: \"~\"\n  kind: ConfigMap\n  metadata:\n    name: kube-proxy\n    namespace: kube-system\n",
	}
	keep := func(_, kind string) bool { return kind == "Service" || kind == "ConfigMap" }
	d, err := ReadDumpWith(t.Context(), strings.NewReader("apiVersion: v1\nitems:\n"+strings.Join(items, "")+"kind: List\n"), DumpOptions{Keep: keep})
	require.NoError(t, err)
	require.Len(t, d.Objects, len(items))
	for i, it := range items {
		want, err := yaml.YAMLToJSON([]byte(" " + it[1:]))
		require.NoError(t, err)
		assert.JSONEq(t, string(want), string(d.Objects[i].JSON), "item %d", i)
	}
}

// TestReadDumpWithDecode: DumpOptions.Decode decodes kept objects in the
// workers, from YAML and JSON Lists, fast path or not: its value is kept,
// nil drops the object (counted in Skipped), and its error names the item.
func TestReadDumpWithDecode(t *testing.T) {
	keep := func(_, kind string) bool { return kind == "Service" }
	decode := func(apiVersion, kind string, js []byte) (any, error) {
		var o struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := json.Unmarshal(js, &o); err != nil {
			return nil, err
		}
		switch o.Metadata.Name {
		case "drop":
			return nil, nil
		case "bad":
			return nil, errors.New("refused")
		}
		return apiVersion + " " + kind + " " + o.Metadata.Name, nil
	}
	for name, in := range map[string]string{
		"yaml":           "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata:\n    name: web\n- apiVersion: v1\n  kind: Service\n  metadata:\n    name: drop\n- apiVersion: v1\n  kind: Service\n  metadata: {name: flow}\n",
		"json":           `{"kind":"List","apiVersion":"v1","items":[{"apiVersion":"v1","kind":"Service","metadata":{"name":"web"}},{"apiVersion":"v1","kind":"Service","metadata":{"name":"drop"}},{"apiVersion":"v1","kind":"Service","metadata":{"name":"fl\u006fw"}}]}`,
		"typed json":     `{"kind":"ServiceList","apiVersion":"v1","items":[{"metadata":{"name":"web"}},{"metadata":{"name":"drop"}},{"metadata":{"name":"flow"}}]}`,
		"yaml documents": "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: drop\n---\n{apiVersion: v1, kind: Service, metadata: {name: flow}}\n",
	} {
		d, err := ReadDumpWith(t.Context(), strings.NewReader(in), DumpOptions{Keep: keep, Decode: decode})
		require.NoError(t, err, name)
		require.Len(t, d.Objects, 2, name)
		assert.Equal(t, Object{APIVersion: "v1", Kind: "Service", Value: "v1 Service web"}, d.Objects[0], name)
		assert.Equal(t, "v1 Service flow", d.Objects[1].Value, name)
		assert.Equal(t, 1, d.Skipped, name)

		_, err = ReadDumpWith(t.Context(), strings.NewReader(strings.Replace(in, "drop", "bad", 1)), DumpOptions{Keep: keep, Decode: decode})
		require.ErrorIs(t, err, ErrDump, name)
		assert.ErrorContains(t, err, "refused", name)
		where := "document 1 item 1"
		if name == "yaml documents" {
			where = "document 2"
		}
		assert.ErrorContains(t, err, where, name)
	}
}
