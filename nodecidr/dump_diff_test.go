package nodecidr

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// fullResult decodes one object (a document, or with indent >= 0 a List
// item starting with "- " in that column) with the full decoder only.
func fullResult(data []byte, indent int) (jobResult, error) {
	src := data
	if indent >= 0 {
		src = bytes.Clone(data)
		src[indent] = ' '
	}
	var r jobResult
	js, err := yaml.YAMLToJSON(src)
	if err != nil {
		return r, err
	}
	if indent < 0 && bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return r, nil
	}
	err = newWorker().decodeJSON(js, 1, -1, indent < 0, &r)
	return r, err
}

// checkFast asserts the fast path's promise on one object: when it decodes
// it, the full decoder succeeds and gives the same result; and when it
// converts it to JSON, sigs.k8s.io/yaml gives the same JSON value. It
// reports whether the fast path decoded the object.
func checkFast(t testing.TB, data []byte, indent int) bool {
	t.Helper()
	w := newWorker()
	var fr jobResult
	fast := w.fast(data, indent, indent < 0, &fr)
	if fast {
		full, err := fullResult(data, indent)
		if err != nil {
			t.Fatalf("fast path accepted what the full decoder rejects (%v):\n%s", err, data)
		}
		if !reflect.DeepEqual(normalize(fr), normalize(full)) {
			t.Fatalf("fast path and full decoder differ:\nfast %+v\nfull %+v\n%s", fr, full, data)
		}
	}
	var f fastPod
	if js, ok := f.toJSON(data, indent); ok {
		src := data
		if indent >= 0 {
			src = bytes.Clone(data)
			src[indent] = ' '
		}
		ref, err := yaml.YAMLToJSON(src)
		if err != nil {
			t.Fatalf("fast JSON conversion accepted what sigs.k8s.io/yaml rejects (%v):\n%s", err, data)
		}
		if a, b := jsonValue(t, js), jsonValue(t, ref); !reflect.DeepEqual(a, b) {
			t.Fatalf("fast JSON conversion differs:\nfast %s\nfull %s\n%s", js, ref, data)
		}
	}
	return fast
}

// checkFastJSON is checkFast for a JSON List item.
func checkFastJSON(t testing.TB, data []byte) bool {
	t.Helper()
	w := newWorker()
	var fr, full jobResult
	if !w.fastJSON(data, &fr) {
		return false
	}
	if err := newWorker().decodeJSON(data, 1, 0, false, &full); err != nil {
		t.Fatalf("JSON fast path accepted what encoding/json rejects (%v):\n%s", err, data)
	}
	if !reflect.DeepEqual(normalize(fr), normalize(full)) {
		t.Fatalf("JSON fast path and encoding/json differ:\nfast %+v\nfull %+v\n%s", fr, full, data)
	}
	return true
}

func normalize(r jobResult) jobResult {
	r.err = nil
	if len(r.pods) == 0 {
		r.pods = nil
	}
	if len(r.nodes) == 0 {
		r.nodes = nil
	}
	if len(r.cp) == 0 {
		r.cp = nil
	}
	return r
}

func jsonValue(t testing.TB, js []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("invalid JSON %s: %v", js, err)
	}
	return v
}

// asItem turns a document into a List item as kubectl writes it: "- " on
// the first line, two more spaces on the others.
func asItem(doc []byte) []byte {
	var b bytes.Buffer
	for i, line := range bytes.SplitAfter(doc, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if i == 0 {
			b.WriteString("- ")
		} else if len(bytes.TrimRight(line, "\n")) > 0 {
			b.WriteString("  ")
		}
		b.Write(line)
	}
	return b.Bytes()
}

// trickyStrings need quoting, fold, or look like other types to YAML.
var trickyStrings = []string{
	"plain", "0123", "123", "-1", "+1", "1_000", "0x1F", "0o17", "0b101", "1e3", ".5", "1.5", ".inf", "-.Inf", ".nan",
	"true", "True", "yes", "Yes", "on", "off", "n", "y", "null", "Null", "~", "", " ", "2024-01-01", "2024-01-01T10:00:00Z",
	"10.244.1.5", "fd00::5", "::1", "a: b", "a:b", "a #b", "a#b", "#x", "x:", "'q'", `"dq"`, `x\y`, " lead", "trail ",
	"@at", "%p", "*star", "&amp", "!bang", "|pipe", ">gt", "{brace}", "[br]", "-dash", "- item", "? q", "?q", ":colon",
	"a\nb", "a\n", "line1\nline2\n\nline4\n", "tab\there", "ünïcödé", "a  b", "it's", `say "hi"`, "<<", "=", "a,b",
	strings.Repeat("long words that fold ", 8), strings.Repeat("x", 130), "kube-system", "kube-controller-manager",
	strings.Repeat("a: b ", 30), "---", "...", "- - x",
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func randomMap(r *rand.Rand, n int) map[string]string {
	if r.IntN(4) == 0 {
		return nil
	}
	m := map[string]string{}
	for range r.IntN(n) {
		if k := pick(r, trickyStrings); k != "<<" { // go-yaml v2 writes it plain and cannot read it back
			m[k] = pick(r, trickyStrings)
		}
	}
	return m
}

func randomPod(r *rand.Rand, i int) *corev1.Pod {
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}}
	p.Name = fmt.Sprintf("pod-%d", i)
	if r.IntN(3) == 0 {
		p.Name = pick(r, trickyStrings)
	}
	p.Namespace = pick(r, []string{"default", "kube-system", "", "0123", "true", "ns-1"})
	p.Labels = randomMap(r, 5)
	if r.IntN(3) == 0 {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels["component"] = pick(r, []string{"kube-controller-manager", "etcd", "", "true", "0123"})
	}
	p.Annotations = randomMap(r, 4)
	if r.IntN(4) == 0 {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		last, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": p.Name, "annotations": p.Annotations}})
		p.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = string(last) + "\n"
	}
	if r.IntN(2) == 0 {
		p.CreationTimestamp = metav1.Unix(int64(r.IntN(2e9)), 0)
	}
	p.OwnerReferences = nil
	if r.IntN(2) == 0 {
		t := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: pick(r, trickyStrings), UID: "u", Controller: &t}}
	}
	p.Spec.NodeName = pick(r, []string{"node-1", "", "0123", "yes", "node: x", "10.0.0.1", strings.Repeat("n", 90)})
	p.Spec.HostNetwork = r.IntN(3) == 0
	c := corev1.Container{Name: "app", Image: "registry.example.com/app:1.0", Command: []string{pick(r, trickyStrings), "--flag=" + pick(r, trickyStrings)},
		Args: []string{pick(r, trickyStrings)}, Env: []corev1.EnvVar{{Name: "A", Value: pick(r, trickyStrings)}}}
	if r.IntN(2) == 0 {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("1.5Gi")}
		c.Ports = []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
	}
	p.Spec.Containers = []corev1.Container{c}
	p.Status.Phase = pick(r, []corev1.PodPhase{corev1.PodRunning, corev1.PodPending, corev1.PodSucceeded, corev1.PodFailed, "", "true"})
	switch r.IntN(5) {
	case 0: // none
	case 1:
		p.Status.PodIP = "10.244.1.5"
	case 2:
		p.Status.PodIP = "10.244.1.5"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}}
	case 3:
		p.Status.PodIP = "10.244.1.5"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00:10:244:1::5"}}
	case 4:
		p.Status.PodIPs = []corev1.PodIP{{IP: pick(r, trickyStrings)}, {IP: ""}}
	}
	if r.IntN(2) == 0 {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Message: pick(r, trickyStrings) + " " + strings.Repeat("0/5 nodes are available: untolerated taint, ", r.IntN(4))}}
	}
	return p
}

func randomNode(r *rand.Rand, i int) *corev1.Node {
	n := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}}
	n.Name = fmt.Sprintf("node-%d", i)
	if s := pick(r, trickyStrings); r.IntN(4) == 0 && s != "" {
		n.Name = s
	}
	n.Labels = randomMap(r, 6)
	n.Annotations = randomMap(r, 4)
	n.CreationTimestamp = metav1.Unix(int64(r.IntN(2e9)), 0)
	n.UID = "uid"
	n.ResourceVersion = pick(r, []string{"123", "0123", "1"})
	if r.IntN(5) > 0 {
		c := fmt.Sprintf("10.%d.%d.0/24", r.IntN(256), r.IntN(256))
		n.Spec.PodCIDR, n.Spec.PodCIDRs = c, []string{c}
		if r.IntN(3) == 0 {
			n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, "fd00::/64")
		}
	}
	n.Spec.Taints = []corev1.Taint{{Key: pick(r, trickyStrings), Value: pick(r, trickyStrings), Effect: corev1.TaintEffectNoSchedule}}
	n.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceMemory: resource.MustParse("32062612Ki")}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.2"}, {Type: corev1.NodeHostName, Address: n.Name}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Message: pick(r, trickyStrings)}}
	return n
}

// TestFastPathEqualsFullDecoder writes pods and nodes as kubectl does
// (sigs.k8s.io/yaml.Marshal, the same emitter) with values that need
// quoting, fold, or look like numbers, booleans and nulls, and checks the
// fast path against the full decoder on each, alone and in a List.
func TestFastPathEqualsFullDecoder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var items []any
	fastPods, fastNodes, fastJSON, n := 0, 0, 0, 600
	if testing.Short() {
		n = 150
	}
	for i := range n {
		var obj any = randomPod(r, i)
		isNode := i%5 == 0
		if isNode {
			obj = randomNode(r, i)
		}
		items = append(items, obj)
		doc, err := yaml.Marshal(obj)
		require.NoError(t, err)
		if checkFast(t, doc, -1) {
			if isNode {
				fastNodes++
			} else {
				fastPods++
			}
		}
		checkFast(t, asItem(doc), 0)
		js, err := json.Marshal(obj)
		require.NoError(t, err)
		if checkFastJSON(t, js) && !isNode {
			fastJSON++
		}

		// The slim Pod decode agrees with a full corev1.Pod decode.
		if p, ok := obj.(*corev1.Pod); ok {
			full, err := fullResult(doc, -1)
			require.NoError(t, err)
			require.Len(t, full.pods, 1)
			assert.Equal(t, SummarizePod(p), full.pods[0])
			if isControlPlane(p.Namespace, p.Labels["component"]) {
				require.Len(t, full.cp, 1)
				assert.Equal(t, p.Spec.Containers[0].Command, full.cp[0].Spec.Containers[0].Command)
			}
		}
	}
	// Most objects must take the fast path, or it is not worth having.
	assert.Greater(t, fastPods, n*4/5/4, "pods decoded by the fast path")
	assert.Greater(t, fastNodes, n/5/4, "nodes decoded by the fast path")
	assert.Greater(t, fastJSON, n*4/5/2, "pods decoded by the JSON fast path")
	t.Logf("fast path: %d of %d pods, %d of %d nodes; JSON: %d pods", fastPods, n-n/5, fastNodes, n/5, fastJSON)

	// A whole List, as kubectl writes it, in YAML and in JSON.
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": items, "metadata": map[string]any{"resourceVersion": ""}}
	y, err := yaml.Marshal(list)
	require.NoError(t, err)
	want, err := fullDump(y)
	require.NoError(t, err)
	got, err := DecodeObjects(y)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	js, err := json.MarshalIndent(list, "", "    ")
	require.NoError(t, err)
	got, err = DecodeObjects(js)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// TestFastJSONEqualsEncodingJSON: JSON items that encoding/json reads in
// surprising ways are either read the same or left to it.
func TestFastJSONEqualsEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{"kind":"Pod","metadata":{"name":"a"}}`,
		`{"Kind":"Pod","metadata":{"name":"a"}}`,
		`{"kind":"Pod","kind":"Node","metadata":{"name":"a"}}`,
		`{"kind":"Pod","metadata":{"n\u0061me":"a"}}`,
		`{"kind":"Pod","metadata":{"name":"a\u00e9"}}`,
		`{"kind":"Pod","metadata":{"name":"\u00e9"},"spec":{"nodeName":"\"n\""}}`,
		`{"kind":"Pod","metadata":{"name":"é"}}`,
		`{"kind":"Pod","metadata":{"labels":{"component":"kube-controller-manager","Component":"x"},"namespace":"kube-system"}}`,
		`{"kind":"Pod","metadata":{"labels":{"component":5}}}`,
		`{"kind":"Pod","metadata":null,"spec":{"hostNetwork":null},"status":{"podIPs":null,"podIP":"1.2.3.4"}}`,
		`{"kind":"Pod","status":{"podIPs":[{"ip":"1.2.3.4","IP":"5.6.7.8"}]}}`,
		`{"kind":"Pod","status":{"podIPs":[null,{"ip":null}]}}`,
		`{"kind":"Pod","status":{"podIPs":[]}, "x": [1, -0.5e+3, true, null, "s\n", {"a": [[]]}]}`,
		`{"kind":"Pod","x": 01}`, `{"kind":"Pod","x": "a` + "\t" + `b"}`, `{"kind":"Pod","x": "\q"}`, `{"kind":"Pod",}`,
		`{"kind":"Pod","spec":{"hostNetwork":"true"}}`, `{"kind":"Pod","spec":{"hostNetwork":true}}`,
		`{"kind":"Node","metadata":{"name":"a"},"spec":{"podCIDRs":["10.0.0.0/24"]}}`,
		`{"kind":"Node","metadata":{}}`, `{"kind":5}`, `[]`, `"Pod"`, `{"kind":"Pod"} x`,
		`{"kind":"Pod","x":` + strings.Repeat("[", 1200) + strings.Repeat("]", 1200) + `}`,
	} {
		checkFastJSON(t, []byte(in))
	}
}

// fullJSONDump is the full decoder on JSON input: encoding/json reads each
// top-level value whole.
func fullJSONDump(data []byte) (*Dump, error) {
	d := &Dump{}
	dec := json.NewDecoder(bytes.NewReader(data))
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err == io.EOF {
			return d, nil
		} else if err != nil {
			return nil, err
		}
		if raw[0] != '{' {
			return nil, fmt.Errorf("document %d: not an object", doc)
		}
		var r jobResult
		if err := newWorker().decodeJSON(raw, doc, -1, true, &r); err != nil {
			return nil, err
		}
		if err := d.merge(&job{res: r}); err != nil {
			return nil, err
		}
	}
}

// checkJSONStream asserts that ReadDump reads JSON input as encoding/json does.
func checkJSONStream(t testing.TB, data []byte) {
	t.Helper()
	if !isJSON(bufio.NewReader(bytes.NewReader(data))) {
		return
	}
	// Items are streamed before kind is known: an object with items that
	// is not a List is refused (documented), whatever its items hold.
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var tm struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		if err := dec.Decode(&tm); err != nil {
			break
		}
		if len(tm.Items) > 0 && !strings.HasSuffix(tm.Kind, "List") {
			return
		}
	}
	want, werr := fullJSONDump(data)
	got, gerr := DecodeObjects(data)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("JSON stream: encoding/json says %v, ReadDump says %v:\n%s", werr, gerr, data)
	}
	if werr == nil && !reflect.DeepEqual(want, got) {
		t.Fatalf("JSON stream read differently:\nwant %+v\ngot  %+v\n%s", want, got, data)
	}
	// Read one byte at a time, every value crosses a refill of the
	// reader's window: the same dump, or the same error.
	one, oerr := ReadDump(context.Background(), iotest.OneByteReader(bytes.NewReader(data)))
	if fmt.Sprint(oerr) != fmt.Sprint(gerr) || !reflect.DeepEqual(one, got) {
		t.Fatalf("JSON stream read one byte at a time: %v, %+v; held whole: %v, %+v\n%s", oerr, one, gerr, got, data)
	}
}

// fullDump is the full decoder on a whole input: every document converted
// to JSON whole, as DecodeObjects did before the fast path.
func fullDump(data []byte) (*Dump, error) {
	d := &Dump{}
	for i, doc := range bytes.Split(data, []byte("\n---\n")) {
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		var r jobResult
		if err := newWorker().decodeJSON(js, i+1, -1, true, &r); err != nil {
			return nil, err
		}
		if err := d.merge(&job{res: r}); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// TestFastJSONNumberFormats: the fast path reads YAML 1.1 numbers as
// sigs.k8s.io/yaml does, as a value and as a mapping key: binary with and
// without sign (and with go-yaml v2's sign after 0b), up to the uint64 and
// int64 limits, octal, hex, underscores, and the forms that are strings. A float it leaves to the full decoder
// (it declines the object), and so a key beyond int64, which
// sigs.k8s.io/yaml refuses. checkFast compares each conversion with
// sigs.k8s.io/yaml's; value and key say whether the fast path took the
// object, so that the comparison ran.
func TestFastJSONNumberFormats(t *testing.T) {
	for _, tc := range []struct {
		scalar     string
		value, key bool
	}{
		{"5", true, true}, {"+1", true, true}, {"0x1F", true, true}, {"0o17", true, true}, {"017", true, true}, {"1_000", true, true},
		{"0b101", true, true}, {"-0b101", true, true}, {"0b1_0", true, true},
		{"0b" + strings.Repeat("1", 63), true, true},   // int64's largest
		{"0b" + strings.Repeat("1", 64), true, false},  // beyond int64: a uint64
		{"-0b1" + strings.Repeat("0", 63), true, true}, // int64's smallest
		{"-0b1" + strings.Repeat("0", 64), true, true}, // beyond: a string
		{"9223372036854775808", true, false},           // beyond int64: a uint64
		{"18446744073709551615", true, false},          // uint64's largest
		{"18446744073709551616", false, false},         // beyond: a float
		{"1e3", false, false}, {"-1.5E+3", false, false}, {"1.5e-3", false, false}, {".5", false, false}, {"1.", false, false}, {"-.5", false, false}, {"+.5e2", false, false},
		{"1e", true, true}, {"1e+", true, true}, {"0b", true, true}, {"-0b", true, true}, {"0b2", true, true}, {"1.5x", true, true},
		// go-yaml v2 reads a sign after 0b, not after -0b.
		{"0b-1", true, true}, {"0b+1", true, true}, {"-0b-1", true, true}, {"-0b+1", true, true},
		{"0b-1" + strings.Repeat("0", 63), true, true}, // int64's smallest
		{"0b-1" + strings.Repeat("0", 64), true, true}, // beyond: a string
	} {
		for _, c := range []struct {
			doc       string
			converted bool
		}{
			{"- apiVersion: v1\n  kind: Node\n  metadata:\n    name: a\n  status:\n    daemonEndpoints:\n      kubeletEndpoint:\n        Port: " + tc.scalar + "\n", tc.value},
			{"- apiVersion: v1\n  kind: Node\n  metadata:\n    annotations:\n      " + tc.scalar + ": x\n    name: a\n", tc.key},
		} {
			var f fastPod
			_, ok := f.toJSON([]byte(c.doc), 0)
			assert.Equal(t, c.converted, ok, "%s converted by the fast path:\n%s", tc.scalar, c.doc)
			checkFast(t, []byte(c.doc), 0)
		}
	}
}
