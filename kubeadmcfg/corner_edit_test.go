package kubeadmcfg

import (
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestSetPodSubnetCorners edits podSubnet in documents that use YAML's less
// common forms, and compares the result with the reference: the original
// read by sigs.k8s.io/yaml (the reader kubeadm uses), with only
// networking.podSubnet changed. Every comment of the original must survive.
// A document the editor refuses must be refused with a typed error.
func TestSetPodSubnetCorners(t *testing.T) {
	const head = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n"
	for _, tc := range []struct{ name, doc string }{
		{"plain", head + "networking:\n  podSubnet: 10.0.0.0/8\n  serviceSubnet: 10.96.0.0/12\n"},
		{"single-quoted", head + "networking:\n  podSubnet: '10.0.0.0/8'\n"},
		{"double-quoted", head + "networking:\n  podSubnet: \"10.0.0.0/8\"\n"},
		{"comment after", head + "networking:\n  podSubnet: 10.0.0.0/8 # the pods\n  serviceSubnet: 10.96.0.0/12\n"},
		{"comment before the value", head + "networking:\n  podSubnet: # the pods\n    10.0.0.0/8\n"},
		{"value on the next line", head + "networking:\n  podSubnet:\n    10.0.0.0/8\n  serviceSubnet: 10.96.0.0/12\n"},
		{"flow map", head + "networking: {podSubnet: 10.0.0.0/8, serviceSubnet: 10.96.0.0/12}\n"},
		{"flow map on lines", head + "networking: {\n  podSubnet: 10.0.0.0/8,\n  serviceSubnet: 10.96.0.0/12\n}\n"},
		{"flow map, quoted", head + "networking: {\"podSubnet\": \"10.0.0.0/8\"}\n"},
		{"double-quoted with escapes", head + "networking:\n  podSubnet: \"10.0.0.0/8\\\"\\\\\" # x\n  serviceSubnet: \"a\\\"b\"\n"},
		{"single-quoted with a quote", head + "networking:\n  podSubnet: 'it''s' # x\n  serviceSubnet: 'b'\n"},
		{"flow map with quoted brackets", head + "networking: {dnsDomain: \"a}b\", podSubnet: '{x', serviceSubnet: \"[\\\"]\"} # x\n"},
		{"flow map, escapes before", head + "networking: {dnsDomain: 'it''s}', podSubnet: 10.0.0.0/8}\n"},
		{"literal block", head + "networking:\n  podSubnet: |-\n    10.0.0.0/8\n  serviceSubnet: 10.96.0.0/12\n"},
		{"folded block", head + "networking:\n  podSubnet: >-\n    10.0.0.0/8\n"},
		{"plain over two lines", head + "networking:\n  podSubnet: 10.0.0.0/8,\n    fd00::/48\n  serviceSubnet: 10.96.0.0/12\n"},
		{"dual-stack", head + "networking:\n  podSubnet: 10.0.0.0/8,fd00::/48\n"},
		{"tagged", head + "networking:\n  podSubnet: !!str 10.0.0.0/8\n"},
		{"anchored", head + "networking:\n  podSubnet: &pods 10.0.0.0/8\n"},
		{"quoted key", head + "networking:\n  \"podSubnet\": 10.0.0.0/8\n"},
		{"tab after colon", head + "networking:\n  podSubnet:\t10.0.0.0/8\n"},
		{"CRLF", strings.ReplaceAll(head+"networking:\n  podSubnet: 10.0.0.0/8 # pods\n  serviceSubnet: 10.96.0.0/12\n", "\n", "\r\n")},
		{"four-space indent", head + "networking:\n    podSubnet: 10.0.0.0/8\n    serviceSubnet: 10.96.0.0/12\n"},
		{"document markers", "---\n" + head + "networking:\n  podSubnet: 10.0.0.0/8\n...\n"},
		{"no trailing newline", head + "networking:\n  podSubnet: 10.0.0.0/8"},
		{"missing", head + "networking:\n  serviceSubnet: 10.96.0.0/12\n"},
		{"missing, flow", head + "networking: {serviceSubnet: 10.96.0.0/12}\n"},
		{"missing, flow with quoted brackets", head + "networking: {dnsDomain: \"a\\\"}\", serviceSubnet: 'x''}'} # x\n"},
		{"empty networking", head + "networking: {}\n"},
		{"null networking", head + "networking:\n"},
		{"no networking", head + "clusterName: kubernetes\n"},
		{"null value", head + "networking:\n  podSubnet: null\n"},
		{"tilde value", head + "networking:\n  podSubnet: ~\n"},
		{"empty value", head + "networking:\n  podSubnet:\n  serviceSubnet: 10.96.0.0/12\n"},
		{"empty quoted", head + "networking:\n  podSubnet: \"\"\n"},
		{"JSON", `{"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration", "networking": {"podSubnet": "10.0.0.0/8"}}`},
		{"JSON on lines", "{\n  \"apiVersion\": \"kubeadm.k8s.io/v1beta4\",\n  \"kind\": \"ClusterConfiguration\",\n  \"networking\": {\n    \"podSubnet\": \"10.0.0.0/8\"\n  }\n}\n"},
		{"comment lines around", "# kubeadm\n" + head + "networking:\n  # pods\n  podSubnet: 10.0.0.0/8\n  # services\n  serviceSubnet: 10.96.0.0/12\n# end\n"},
		{"key order", head + "networking:\n  serviceSubnet: 10.96.0.0/12\n  dnsDomain: cluster.local\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := referenceOf(t, tc.doc)
			c, err := ParseClusterConfiguration([]byte(tc.doc))
			if err != nil {
				if !typedError(err) {
					t.Fatalf("untyped error %T: %v", err, err)
				}
				t.Logf("refused: %v", err)
				return
			}
			if err := c.SetPodSubnet("10.20.0.0/16"); err != nil {
				if !typedError(err) {
					t.Fatalf("untyped error %T: %v", err, err)
				}
				t.Logf("edit refused: %v", err)
				return
			}
			out := string(c.Bytes())
			net, _ := want["networking"].(map[string]any)
			if net == nil {
				net = map[string]any{}
			}
			net["podSubnet"] = "10.20.0.0/16"
			want["networking"] = net
			checkEdited(t, tc.doc, out, want, nil)
		})
	}
}

// TestExtraArgEditCorners sets and removes a controller-manager extra
// argument in documents of both kubeadm versions written in YAML's less
// common forms, and compares each result with the reference: the original
// read by sigs.k8s.io/yaml, edited as the version's shape says (v1beta3: a
// map entry; v1beta4: the value of every {name, value} item of that name, or
// an item appended; a removal drops every item of that name, and extraArgs
// when it becomes empty, and changes nothing when there is none). Comments
// on other lines must survive.
func TestExtraArgEditCorners(t *testing.T) {
	const (
		v3 = "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\n"
		v4 = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n"
	)
	docs := []struct{ name, doc string }{
		{"v1beta4 block", v4 + "controllerManager:\n  extraArgs:\n  - name: cluster-cidr\n    value: 10.0.0.0/8\n  - name: node-cidr-mask-size\n    value: \"24\"\n"},
		{"v1beta4 indented items", v4 + "controllerManager:\n  extraArgs:\n    - name: cluster-cidr\n      value: 10.0.0.0/8\n    - name: v # verbosity\n      value: \"2\"\n"},
		{"v1beta4 flow items", v4 + "controllerManager:\n  extraArgs:\n  - {name: cluster-cidr, value: 10.0.0.0/8}\n  - {name: node-cidr-mask-size, value: \"24\"}\n"},
		{"v1beta4 flow list", v4 + "controllerManager:\n  extraArgs: [{name: cluster-cidr, value: 10.0.0.0/8}, {name: v, value: \"2\"}]\n"},
		{"v1beta4 flow list on lines", v4 + "controllerManager:\n  extraArgs: [\n    {name: cluster-cidr, value: 10.0.0.0/8},\n    {name: v, value: \"2\"}\n  ]\n"},
		{"v1beta4 twice", v4 + "controllerManager:\n  extraArgs:\n  - name: node-cidr-mask-size\n    value: \"24\"\n  - name: cluster-cidr\n    value: 10.0.0.0/8\n  - name: node-cidr-mask-size\n    value: \"25\"\n"},
		{"v1beta4 comments between items", v4 + "controllerManager:\n  extraArgs:\n  # the pods\n  - name: cluster-cidr\n    value: 10.0.0.0/8\n  # verbosity\n  - name: v\n    value: \"2\"\nscheduler: {}\n"},
		{"v1beta4 empty list", v4 + "controllerManager:\n  extraArgs: []\n"},
		{"v1beta4 null list", v4 + "controllerManager:\n  extraArgs:\napiServer: {}\n"},
		{"v1beta4 no extraArgs", v4 + "controllerManager: {}\n"},
		{"v1beta4 no controllerManager", v4 + "networking:\n  podSubnet: 10.0.0.0/8\n"},
		{"v1beta4 only cluster-cidr", v4 + "controllerManager:\n  extraArgs:\n  - name: cluster-cidr\n    value: 10.0.0.0/8\n"},
		{"v1beta4 CRLF", strings.ReplaceAll(v4+"controllerManager:\n  extraArgs:\n  - name: cluster-cidr\n    value: 10.0.0.0/8\n", "\n", "\r\n")},
		{"v1beta3 block", v3 + "controllerManager:\n  extraArgs:\n    cluster-cidr: 10.0.0.0/8\n    node-cidr-mask-size: \"24\"\n"},
		{"v1beta3 flow", v3 + "controllerManager:\n  extraArgs: {cluster-cidr: 10.0.0.0/8, v: \"2\"}\n"},
		{"v1beta3 quoted keys", v3 + "controllerManager:\n  extraArgs:\n    \"cluster-cidr\": '10.0.0.0/8'\n    'v': \"2\"\n"},
		{"v1beta3 only cluster-cidr", v3 + "controllerManager:\n  extraArgs:\n    cluster-cidr: 10.0.0.0/8 # pods\n"},
		{"v1beta3 empty", v3 + "controllerManager:\n  extraArgs: {}\n"},
		{"v1beta3 no controllerManager", v3 + "clusterName: kubernetes\n"},
	}
	type edit struct {
		name string
		do   func(*ClusterConfiguration) error
		ref  func(version string, args any) any
	}
	edits := []edit{
		{"set", func(c *ClusterConfiguration) error {
			return c.SetExtraArg(ControllerManager, "node-cidr-mask-size", "23")
		},
			func(version string, args any) any {
				if version == KubeadmV1beta3 {
					m, _ := args.(map[string]any)
					if m == nil {
						m = map[string]any{}
					}
					m["node-cidr-mask-size"] = "23"
					return m
				}
				items, _ := args.([]any)
				found := false
				for _, it := range items {
					if m := it.(map[string]any); m["name"] == "node-cidr-mask-size" {
						m["value"], found = "23", true
					}
				}
				if !found {
					items = append(items, map[string]any{"name": "node-cidr-mask-size", "value": "23"})
				}
				return items
			}},
		{"remove", func(c *ClusterConfiguration) error { return c.RemoveExtraArg(ControllerManager, "cluster-cidr") },
			func(version string, args any) any {
				if version == KubeadmV1beta3 {
					m, _ := args.(map[string]any)
					if _, ok := m["cluster-cidr"]; !ok {
						return args // removing an absent argument does nothing
					}
					delete(m, "cluster-cidr")
					if len(m) == 0 {
						return nil
					}
					return m
				}
				var kept []any
				for _, it := range args.([]any) {
					if it.(map[string]any)["name"] != "cluster-cidr" {
						kept = append(kept, it)
					}
				}
				switch {
				case len(kept) == len(args.([]any)):
					return args // removing an absent argument does nothing
				case len(kept) == 0:
					return nil
				}
				return kept
			}},
	}
	for _, tc := range docs {
		for _, e := range edits {
			t.Run(tc.name+"/"+e.name, func(t *testing.T) {
				want := referenceOf(t, tc.doc)
				c, err := ParseClusterConfiguration([]byte(tc.doc))
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				cm, _ := want["controllerManager"].(map[string]any)
				if e.name == "remove" && (cm == nil || cm["extraArgs"] == nil) {
					return // nothing to remove
				}
				if err := e.do(c); err != nil {
					t.Fatalf("%s: %v", e.name, err)
				}
				out := string(c.Bytes())
				if cm == nil {
					cm = map[string]any{}
				}
				if args := e.ref(c.APIVersion(), cm["extraArgs"]); args != nil {
					cm["extraArgs"] = args
				} else {
					delete(cm, "extraArgs")
				}
				want["controllerManager"] = cm
				checkEdited(t, tc.doc, out, want, func(line string) bool {
					return e.name == "remove" && strings.Contains(line, "cluster-cidr")
				})
			})
		}
	}
}

// TestSetClusterDNSCorners replaces the kubelet's clusterDNS list in
// documents whose list is written in YAML's less common forms, and compares
// the result with the reference: the original read by sigs.k8s.io/yaml with
// only clusterDNS changed. Every comment of the original must survive, and a
// flow list stays one.
func TestSetClusterDNSCorners(t *testing.T) {
	const head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	for _, tc := range []struct{ name, doc string }{
		{"block", head + "clusterDNS:\n- 10.96.0.10\nclusterDomain: cluster.local # domain\n"},
		{"block, indented", head + "clusterDNS:\n  - 10.96.0.10 # dns\n  - fd00::a\nclusterDomain: cluster.local\n"},
		{"flow", head + "clusterDNS: [10.96.0.10, fd00::a] # dns\n"},
		{"flow, double-quoted with escapes", head + "clusterDNS: [\"10.96.0.10\", \"a\\\"]\"] # dns\nclusterDomain: cluster.local\n"},
		{"flow, single-quoted with a quote", head + "clusterDNS: ['it''s]', '10.96.0.10'] # dns\nclusterDomain: cluster.local\n"},
		{"flow on lines", head + "clusterDNS: [\n  10.96.0.10,\n  fd00::a\n] # dns\n"},
		{"empty flow", head + "clusterDNS: [] # dns\nclusterDomain: cluster.local\n"},
		{"null", head + "clusterDNS:\nclusterDomain: cluster.local\n"},
		{"missing", head + "clusterDomain: cluster.local # domain\n"},
		{"CRLF", strings.ReplaceAll(head+"clusterDNS:\n- 10.96.0.10 # dns\nclusterDomain: cluster.local\n", "\n", "\r\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := referenceOf(t, tc.doc)
			k, err := ParseKubeletConfig([]byte(tc.doc))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			dns := []string{"172.24.0.10", "fd00:20::a"}
			if err := k.SetClusterDNS(dns); err != nil {
				t.Fatalf("SetClusterDNS: %v", err)
			}
			out := string(k.Bytes())
			want["clusterDNS"] = []any{dns[0], dns[1]}
			checkEdited(t, tc.doc, out, want, nil)
			if strings.Contains(tc.doc, "clusterDNS: [") && !strings.Contains(out, "clusterDNS: [") {
				t.Errorf("a flow list became a block list:\n%s", out)
			}
		})
	}
}

// referenceOf reads doc as kubeadm does, with sigs.k8s.io/yaml.
func referenceOf(t *testing.T, doc string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("the reference refuses the document: %v", err)
	}
	return m
}

// checkEdited checks out, the edited doc: it must read as want with
// sigs.k8s.io/yaml, and keep every comment of doc but those on the lines
// dropped reports (nil: none).
func checkEdited(t *testing.T, doc, out string, want map[string]any, dropped func(line string) bool) {
	t.Helper()
	var got map[string]any
	if err := yaml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("the reference refuses the edited document: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("edited:\n%s\nreads as %v\nwant %v", out, got, want)
	}
	for _, line := range strings.Split(doc, "\n") {
		i := strings.Index(line, "# ")
		if i >= 0 && !strings.Contains(out, strings.TrimRight(line[i:], "\r")) && (dropped == nil || !dropped(line)) {
			t.Errorf("comment %q lost:\n%s", line[i:], out)
		}
	}
	t.Logf("%q -> %q", doc, out)
}
