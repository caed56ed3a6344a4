// Package cli holds what the example programs share: machine-readable output
// that keeps big integers exact, and kubeconfig loading the kubectl way.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"go.yaml.in/yaml/v3"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// CheckFormat validates an -o value.
func CheckFormat(format string) error {
	switch format {
	case "text", "json", "yaml":
		return nil
	}
	return fmt.Errorf("-o %q: want text, json or yaml", format)
}

// Write encodes v as indented JSON or as YAML. YAML is produced from the JSON
// encoding, so field names and omitempty match, but unlike sigs.k8s.io/yaml it
// keeps integers of any size exact (an IPv6 /32 holds 2^96 addresses).
func Write(w io.Writer, format string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding output: %w", err)
	}
	if format == "json" {
		_, err = w.Write(append(data, '\n'))
		return err
	}
	if format != "yaml" {
		return CheckFormat(format)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return fmt.Errorf("encoding output: %w", err)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(toNode(tree)); err != nil {
		return fmt.Errorf("encoding output: %w", err)
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// toNode converts a JSON tree to YAML nodes, keeping object key order and
// writing numbers verbatim.
func toNode(v any) *yaml.Node {
	switch t := v.(type) {
	case map[string]any:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, k := range sortedKeys(t) {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, toNode(t[k]))
		}
		return n
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, e := range t {
			n.Content = append(n.Content, toNode(e))
		}
		return n
	case json.Number:
		// No tag: written plain, so readers see a number, however large.
		return &yaml.Node{Kind: yaml.ScalarNode, Value: t.String()}
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(t)}
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: fmt.Sprint(v)}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // as kubectl prints YAML
	return keys
}

// RESTConfig loads a client configuration the way kubectl does: an explicit
// kubeconfig path, else $KUBECONFIG, else ~/.kube/config, else the in-cluster
// configuration; context selects a kubeconfig context. Client-side
// throttling is raised from client-go's 5 QPS to 50 (burst 100): a Service or
// Node that is deleted and recreated must not wait on the client's own rate
// limiter between the two calls; each program paces its work itself.
func RESTConfig(kubeconfig, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: context}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		// A kubeconfig that cannot be loaded, or a context it lacks, is bad
		// input (exit code 2), not an unreachable cluster.
		return nil, &UsageError{Msg: "loading kubeconfig: " + OneLine(err)}
	}
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	return cfg, nil
}

// Connect is RESTConfig followed by Reach: a loaded configuration whose API
// server answered, or a bad-input (2) or unreachable (4) error within
// ReachTimeout. Progress lines go to progress while it retries.
func Connect(ctx context.Context, kubeconfig, kubeContext string, progress io.Writer) (*rest.Config, error) {
	cfg, err := RESTConfig(kubeconfig, kubeContext)
	if err != nil {
		return nil, err
	}
	if err := Reach(ctx, cfg, progress); err != nil {
		return nil, err
	}
	return cfg, nil
}
