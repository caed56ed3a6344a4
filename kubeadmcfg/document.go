package kubeadmcfg

import (
	"fmt"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// document is one typed document (apiVersion + kind) inside a YAML stream,
// edited in place through yamlStream.
type document struct {
	s          yamlStream
	kind       string
	apiVersion string
}

// parseDocument finds the document of the given kind in data, checks its
// apiVersion against the supported ones and returns it with its top node.
// A stream of several documents (a kubeadm config file) is accepted; the
// others are kept untouched.
func parseDocument(source, kind string, versions []string, data []byte) (*document, *yaml.Node, error) {
	docs, err := parseStream(data)
	if err != nil {
		return nil, nil, &FieldError{Source: source, Field: kind, Reason: "not valid YAML: " + err.Error(), Err: ErrInvalid}
	}
	var kinds []string
	for i, d := range docs {
		root := content(d)
		if root == nil {
			continue
		}
		if root.Kind != yaml.MappingNode {
			if len(docs) == 1 {
				return nil, nil, invalid(source, kind, shortValue(root), fmt.Sprintf("a %s must be a YAML mapping, found a %s", kind, kindName(root)))
			}
			continue
		}
		k, _ := scalarAt(root, ypath{"kind"})
		if k != kind {
			if k != "" {
				kinds = append(kinds, k)
			}
			continue
		}
		av, ok := scalarAt(root, ypath{"apiVersion"})
		if !ok || av == "" {
			return nil, nil, invalid(source, "apiVersion", "", fmt.Sprintf("missing; the %s must say its apiVersion (one of %s)", kind, strings.Join(versions, ", ")))
		}
		if !slices.Contains(versions, av) {
			return nil, nil, &VersionError{Source: source, Kind: kind, APIVersion: av, Supported: slices.Clone(versions)}
		}
		return &document{s: yamlStream{src: data, doc: i, reencode: true, what: source, top: root}, kind: kind, apiVersion: av}, root, nil
	}
	if len(kinds) > 0 {
		return nil, nil, &FieldError{Source: source, Field: "kind", Value: strings.Join(kinds, ","), Reason: fmt.Sprintf("no %s document found", kind), Err: ErrNotFound}
	}
	if len(docs) == 0 || allEmpty(docs) {
		return nil, nil, invalid(source, kind, "", "the document is empty")
	}
	return nil, nil, invalid(source, "kind", "", fmt.Sprintf("missing; expected kind: %s", kind))
}

func allEmpty(docs []*yaml.Node) bool {
	for _, d := range docs {
		if content(d) != nil {
			return false
		}
	}
	return true
}

// root returns the top node of the document as it is now; it must not be modified.
func (d *document) root() *yaml.Node {
	r, err := d.s.root()
	if err != nil {
		return nil // cannot happen: every edit leaves a stream that parses
	}
	return r
}

// bytes returns the whole stream as it is now.
func (d *document) bytes() []byte { return slices.Clone(d.s.src) }

// scalarAt returns the text of the scalar at p ("" and false when absent or null).
func scalarAt(root *yaml.Node, p ypath) (string, bool) {
	n := lookup(root, p)
	if n == nil || n.Kind != yaml.ScalarNode || isNull(n) {
		return "", false
	}
	return n.Value, true
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		return "scalar"
	case yaml.AliasNode:
		return "alias"
	}
	return "document"
}

// shortValue renders a node for an error message.
func shortValue(n *yaml.Node) string {
	if n == nil {
		return ""
	}
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	return kindName(n)
}

// checkScalar checks that p, when present and not null, is a scalar.
func checkScalar(source string, root *yaml.Node, p ypath) error {
	n := lookup(root, p)
	if n == nil || isNull(n) || n.Kind == yaml.ScalarNode {
		return nil
	}
	return invalid(source, p.String(), "", fmt.Sprintf("must be a single value, found a %s", kindName(n)))
}

// checkMapping checks that p, when present and not null, is a mapping.
func checkMapping(source string, root *yaml.Node, p ypath) error {
	n := lookup(root, p)
	if n == nil || isNull(n) || n.Kind == yaml.MappingNode {
		return nil
	}
	return invalid(source, p.String(), shortValue(n), fmt.Sprintf("must be a mapping, found a %s", kindName(n)))
}

// checkStringList checks that p, when present and not null, is a list of single values.
func checkStringList(source string, root *yaml.Node, p ypath) error {
	n := lookup(root, p)
	if n == nil || isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return invalid(source, p.String(), shortValue(n), fmt.Sprintf("must be a list, found a %s", kindName(n)))
	}
	for i, it := range n.Content {
		if it.Kind != yaml.ScalarNode {
			return invalid(source, fmt.Sprintf("%s[%d]", p, i), "", fmt.Sprintf("must be a single value, found a %s", kindName(it)))
		}
	}
	return nil
}

// stringList returns the values of the list at p.
func stringList(root *yaml.Node, p ypath) []string {
	n := lookup(root, p)
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for _, it := range n.Content {
		out = append(out, it.Value)
	}
	return out
}

// deleteKey removes the key at p, turning its parent into {} when it was the
// parent's last key, and does nothing when the key is absent.
func (d *document) deleteKey(p ypath) error {
	key, _ := p[len(p)-1].(string)
	if _, _, idx := mapGet(lookup(d.root(), p[:len(p)-1]), key); idx < 0 {
		return nil
	}
	return d.s.del(p)
}
