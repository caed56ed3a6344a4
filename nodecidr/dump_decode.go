package nodecidr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/cidr"
)

// The reference semantics of one object (the "full decoder"): its YAML is
// converted to JSON by sigs.k8s.io/yaml, apiVersion and kind are read,
// and then a core/v1 Node is decoded into corev1.Node, a core/v1 Pod into
// podJSON (the fields a PodSummary holds; fields the audit does not read are
// not type-checked), and a kube-controller-manager Pod also into corev1.Pod.
// The fast path (dump_fast.go) gives exactly this result or defers to it.

// listMeta is what is read from a document first.
type listMeta struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Items      []json.RawMessage `json:"items"`
}

// itemMeta is what is read from a List item whose podJSON did not decode.
type itemMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// podJSON is the part of an object a PodSummary is made of.
type podJSON struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string                     `json:"name"`
		Namespace string                     `json:"namespace"`
		Labels    map[string]json.RawMessage `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		NodeName    string `json:"nodeName"`
		HostNetwork bool   `json:"hostNetwork"`
	} `json:"spec"`
	Status struct {
		Phase  corev1.PodPhase `json:"phase"`
		PodIP  string          `json:"podIP"`
		PodIPs []struct {
			IP string `json:"ip"`
		} `json:"podIPs"`
	} `json:"status"`
}

func isCore(apiVersion string) bool { return apiVersion == "" || apiVersion == "v1" }

// isControlPlane reports whether a Pod is decoded in full for ControlPlanePods.
func isControlPlane(namespace, component string) bool {
	return namespace == "kube-system" && (component == cidr.KubeControllerManager || component == cidr.KubeAPIServer)
}

// kept reports whether an object of another kind goes to Dump.Objects.
func (w *worker) kept(apiVersion, kind []byte) bool {
	return w.keep != nil && w.keep(string(apiVersion), string(kind))
}

// keepObject adds a kept object to r: decoded by DumpOptions.Decode when
// set (js is only borrowed then), else as a copy of its JSON.
func (w *worker) keepObject(apiVersion, kind string, js []byte, r *jobResult) error {
	if w.decode == nil {
		r.objects = append(r.objects, Object{APIVersion: apiVersion, Kind: kind, JSON: bytes.Clone(js)})
		return nil
	}
	v, err := w.decode(apiVersion, kind, js)
	switch {
	case err != nil:
		return err
	case v == nil:
		r.skipped++
	default:
		r.objects = append(r.objects, Object{APIVersion: apiVersion, Kind: kind, Value: v})
	}
	return nil
}

// worker decodes jobs; each pipeline goroutine has its own.
type worker struct {
	keep   func(apiVersion, kind string) bool
	decode func(apiVersion, kind string, js []byte) (any, error)
	// defKind and defAPIVersion are given to List items that name no kind
	// (see job.defKind).
	defKind, defAPIVersion string
	fp                     fastPod
	jp                     jsonPod
	intern                 map[string]string
}

func newWorker() *worker { return &worker{intern: make(map[string]string, 1024)} }

// str returns b as a string, shared with earlier equal values (namespaces,
// node names and phases repeat across thousands of pods).
func (w *worker) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if s, ok := w.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(w.intern) < 1<<16 {
		w.intern[s] = s
	}
	return s
}

func (w *worker) run(j *job) {
	r := &j.res
	switch j.kind {
	case jobYAMLItems:
		for i := range j.ends {
			if err := w.yamlItem(j, i); err != nil {
				r.err = err
				return
			}
		}
	case jobYAMLDoc:
		if len(bytes.TrimSpace(j.buf)) > 0 {
			r.err = w.yamlDoc(j.buf, j.doc, r)
		}
	case jobJSONItems:
		w.defKind, w.defAPIVersion = j.defKind, j.defAPIVersion
		defer func() { w.defKind, w.defAPIVersion = "", "" }()
		for i := range j.ends {
			if w.fastJSON(j.item(i), r) {
				continue
			}
			if err := w.decodeJSON(j.item(i), j.doc, j.firstItem+i, false, r); err != nil {
				r.err = err
				return
			}
		}
	case jobJSONDoc:
		r.err = w.decodeJSON(j.buf, j.doc, -1, true, r)
	case jobYAMLListEnd, jobJSONListEnd:
		r.err = listEnd(j.buf, j.doc, j.kind == jobJSONListEnd)
	}
}

// yamlItem decodes item i of a batch of List items.
func (w *worker) yamlItem(j *job, i int) error {
	raw := j.item(i)
	if w.fast(raw, j.indent, false, &j.res) {
		return nil
	}
	// "- kind: ..." becomes "  kind: ...": the item as a document of its own.
	raw[j.indent] = ' '
	js, err := yaml.YAMLToJSON(raw)
	raw[j.indent] = '-'
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrDump, where(j.doc, j.firstItem+i), err)
	}
	return w.decodeJSON(js, j.doc, j.firstItem+i, false, &j.res)
}

func (w *worker) yamlDoc(data []byte, doc int, r *jobResult) error {
	if w.fast(data, -1, true, r) {
		return nil
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrDump, where(doc, -1), err)
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return nil
	}
	return w.decodeJSON(js, doc, -1, true, r)
}

// fast runs the fast path on one object; false means the full decoder must
// decode it (or report its error).
func (w *worker) fast(raw []byte, indent int, allowList bool, r *jobResult) bool {
	f := &w.fp
	if !f.parse(raw, indent) {
		return false
	}
	if allowList && f.items {
		return false // the full decoder reads a document's items as a List's
	}
	core := len(f.apiVersion) == 0 || string(f.apiVersion) == "v1"
	switch {
	case string(f.kind) == "Pod" && core:
		if isControlPlane(string(f.namespace), string(f.component)) {
			return false
		}
		r.pods = append(r.pods, w.summary(f))
	case string(f.kind) == "Node" && core:
		js, ok := f.toJSON(raw, indent)
		if !ok {
			return false
		}
		var n corev1.Node
		if err := json.Unmarshal(js, &n); err != nil || n.Name == "" {
			return false // the full decoder reports it
		}
		r.nodes = append(r.nodes, n)
	case len(f.kind) == 0, allowList && bytes.HasSuffix(f.kind, []byte("List")):
		return false
	case w.kept(f.apiVersion, f.kind):
		// Kept objects are turned into JSON by the same parser as Nodes:
		// going through sigs.k8s.io/yaml costs about ten times more.
		// A Decode error goes to the full decoder, which reports it.
		apiVersion, kind := string(f.apiVersion), string(f.kind)
		js, ok := f.toJSON(raw, indent)
		if !ok || !json.Valid(js) || w.keepObject(apiVersion, kind, js, r) != nil {
			return false
		}
	default:
		r.skipped++
	}
	return true
}

func (w *worker) summary(f *fastPod) PodSummary {
	s := PodSummary{Namespace: w.str(f.namespace), Name: string(f.name), NodeName: w.str(f.nodeName),
		HostNetwork: f.hostNetwork, Phase: corev1.PodPhase(w.str(f.phase))}
	switch {
	case len(f.podIPs) > 0:
		s.IPs = make([]string, len(f.podIPs))
		for i, ip := range f.podIPs {
			s.IPs[i] = string(ip)
		}
	case len(f.podIP) > 0:
		s.IPs = []string{string(f.podIP)}
	}
	return s
}

// decodeJSON decodes one object (or, with allowList, a List of them) given as JSON.
func (w *worker) decodeJSON(js []byte, doc, item int, allowList bool, r *jobResult) error {
	if allowList {
		var tm listMeta
		if err := json.Unmarshal(js, &tm); err != nil {
			return fmt.Errorf("%w: %s: not a Kubernetes object: %w", ErrDump, where(doc, item), err)
		}
		if strings.HasSuffix(tm.Kind, "List") {
			for i, it := range tm.Items {
				if err := w.decodeJSON(it, doc, i, false, r); err != nil {
					return err
				}
			}
			return nil
		}
	}
	var p podJSON
	err := json.Unmarshal(js, &p)
	if err != nil {
		var tm itemMeta
		if err := json.Unmarshal(js, &tm); err != nil {
			return fmt.Errorf("%w: %s: not a Kubernetes object: %w", ErrDump, where(doc, item), err)
		}
		if tm.Kind == "Pod" && isCore(tm.APIVersion) {
			return fmt.Errorf("%w: %s: Pod: %w", ErrDump, where(doc, item), err)
		}
		p.Kind, p.APIVersion = tm.Kind, tm.APIVersion
	}
	if p.Kind == "" && item >= 0 && w.defKind != "" {
		p.Kind, p.APIVersion = w.defKind, w.defAPIVersion
	}
	core := isCore(p.APIVersion)
	switch {
	case p.Kind == "Pod" && core:
		var component string
		if c, ok := p.Metadata.Labels["component"]; ok {
			if err := json.Unmarshal(c, &component); err != nil {
				return fmt.Errorf("%w: %s: Pod: label component: %w", ErrDump, where(doc, item), err)
			}
		}
		if isControlPlane(p.Metadata.Namespace, component) {
			var full corev1.Pod
			if err := json.Unmarshal(js, &full); err != nil {
				return fmt.Errorf("%w: %s: Pod: %w", ErrDump, where(doc, item), err)
			}
			r.cp = append(r.cp, full)
		}
		s := PodSummary{Namespace: p.Metadata.Namespace, Name: p.Metadata.Name, NodeName: p.Spec.NodeName,
			HostNetwork: p.Spec.HostNetwork, Phase: p.Status.Phase}
		switch {
		case len(p.Status.PodIPs) > 0:
			s.IPs = make([]string, len(p.Status.PodIPs))
			for i, ip := range p.Status.PodIPs {
				s.IPs[i] = ip.IP
			}
		case p.Status.PodIP != "":
			s.IPs = []string{p.Status.PodIP}
		}
		r.pods = append(r.pods, s)
	case p.Kind == "Node" && core:
		var n corev1.Node
		if err := json.Unmarshal(js, &n); err != nil {
			return fmt.Errorf("%w: %s: Node: %w", ErrDump, where(doc, item), err)
		}
		if n.Name == "" {
			return fmt.Errorf("%w: %s: Node without metadata.name", ErrDump, where(doc, item))
		}
		r.nodes = append(r.nodes, n)
	case p.Kind == "":
		return fmt.Errorf("%w: %s: no kind; want a Node, a Pod or a List of them", ErrDump, where(doc, item))
	case w.keep != nil && w.keep(p.APIVersion, p.Kind):
		if err := w.keepObject(p.APIVersion, p.Kind, js, r); err != nil {
			return fmt.Errorf("%w: %s: %s: %w", ErrDump, where(doc, item), p.Kind, err)
		}
	default:
		r.skipped++
	}
	return nil
}

// listEnd checks a streamed List's own fields (its items replaced by an
// empty list): its kind must end in "List", and a YAML List has no second
// items key (the JSON reader refuses one as it streams).
func listEnd(data []byte, doc int, isJSON bool) error {
	js := data
	if !isJSON {
		var err error
		if js, err = yaml.YAMLToJSON(data); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrDump, where(doc, -1), err)
		}
		// The streamed items left "items: []" in their place. A second
		// items key, even an empty one, is refused as in a JSON List:
		// sigs.k8s.io/yaml keeps the last, so the document would not mean
		// the items read.
		var top yamlv2.MapSlice
		if err := yamlv2.Unmarshal(data, &top); err == nil {
			n := 0
			for _, kv := range top {
				if k, ok := kv.Key.(string); ok && k == "items" {
					n++
				}
			}
			if n > 1 {
				return fmt.Errorf("%w: %s: items given twice", ErrDump, where(doc, -1))
			}
		}
	}
	var tm listMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return fmt.Errorf("%w: %s: not a Kubernetes object: %w", ErrDump, where(doc, -1), err)
	}
	if !strings.HasSuffix(tm.Kind, "List") {
		return fmt.Errorf("%w: %s: a %q with items; want a List (kind List, NodeList, PodList, ...)", ErrDump, where(doc, -1), tm.Kind)
	}
	return nil
}
