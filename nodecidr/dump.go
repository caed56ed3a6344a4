package nodecidr

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ErrDump means an offline dump could not be read.
var ErrDump = errors.New("cannot read dump")

// Dump is what an offline dump holds that nodecidr audits.
type Dump struct {
	Nodes []corev1.Node
	Pods  []corev1.Pod
	// Skipped counts objects of other kinds (Services, ...).
	Skipped int
}

type typeMeta struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Items      []json.RawMessage `json:"items"`
}

// DecodeObjects reads the output of `kubectl get nodes[,pods,...] -o yaml` (or
// -o json): a v1 List, a NodeList or PodList, single objects, or several YAML
// documents separated by "---". Objects of other kinds are counted and
// skipped. Errors name the document and item.
func DecodeObjects(data []byte) (*Dump, error) {
	d := &Dump{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for doc := 1; ; doc++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: document %d: %w", ErrDump, doc, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: document %d: %w", ErrDump, doc, err)
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		if err := d.add(js, fmt.Sprintf("document %d", doc), true); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (d *Dump) add(js []byte, where string, allowList bool) error {
	var tm typeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return fmt.Errorf("%w: %s: not a Kubernetes object: %w", ErrDump, where, err)
	}
	core := tm.APIVersion == "" || tm.APIVersion == "v1"
	switch {
	case allowList && strings.HasSuffix(tm.Kind, "List"):
		for i, it := range tm.Items {
			if err := d.add(it, fmt.Sprintf("%s item %d", where, i), false); err != nil {
				return err
			}
		}
	case tm.Kind == "Node" && core:
		var n corev1.Node
		if err := json.Unmarshal(js, &n); err != nil {
			return fmt.Errorf("%w: %s: Node: %w", ErrDump, where, err)
		}
		if n.Name == "" {
			return fmt.Errorf("%w: %s: Node without metadata.name", ErrDump, where)
		}
		d.Nodes = append(d.Nodes, n)
	case tm.Kind == "Pod" && core:
		var p corev1.Pod
		if err := json.Unmarshal(js, &p); err != nil {
			return fmt.Errorf("%w: %s: Pod: %w", ErrDump, where, err)
		}
		d.Pods = append(d.Pods, p)
	case tm.Kind == "":
		return fmt.Errorf("%w: %s: no kind; want a Node, a Pod or a List of them", ErrDump, where)
	default:
		d.Skipped++
	}
	return nil
}
