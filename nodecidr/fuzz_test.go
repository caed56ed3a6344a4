package nodecidr

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/cidrshift/cidrshift/cidr"
)

// FuzzDecodeObjects feeds offline dumps to the reader and, when they decode,
// to the audit: neither may panic, and every decoded node is audited. The
// input is also taken as one object (a document, and a List item when it
// starts with "- "): whenever the fast path decodes it, the full decoder
// must succeed with the same result (checkFast).
func FuzzDecodeObjects(f *testing.F) {
	f.Add([]byte(listYAML))
	f.Add([]byte(kubectlList))
	f.Add([]byte(kubectlJSON))
	f.Add([]byte("---\nkind: Node\nmetadata: {name: a}\nspec: {podCIDRs: [10.0.0.1/24, '::/0', x]}\n"))
	f.Add([]byte(`{"kind":"List","items":[{"kind":"Node","metadata":{"name":"a"},"spec":{"podCIDR":"10.0.0.0/8"}}]}`))
	f.Add([]byte("- apiVersion: v1\n  kind: Pod\n  metadata:\n    labels:\n      component: kube-controller-manager\n    name: 'it''s'\n    namespace: \"0123\"\n  spec:\n    hostNetwork: yes\n    nodeName: a\n  status:\n    phase: Running\n    podIP: 10.0.0.1\n    podIPs:\n    - ip: 10.0.0.1\n    - ip: fd00::1\n"))
	f.Add([]byte("apiVersion: v1\nkind: Node\nmetadata:\n  annotations:\n    a: long words that were folded by the emitter because the line was longer than\n      eighty characters\n    b: |\n      {\"x\": 1}\n  labels:\n    1: x\n    yes: y\n  name: n\nspec:\n  podCIDRs:\n  - 10.0.0.0/24\n  taints: []\nstatus:\n  daemonEndpoints:\n    kubeletEndpoint:\n      Port: 0x10\n"))
	l := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{cidr.MustParse("10.240.0.0/12"), cidr.MustParse("fd00::/48")}, NodeMasks: []int{24, 64}}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFast(t, data, -1)
		checkFastJSON(t, data)
		checkJSONStream(t, data)
		if len(data) > 1 && data[0] == '-' && data[1] == ' ' {
			checkFast(t, data, 0)
		}
		d, err := DecodeObjects(data)
		if err != nil {
			return
		}
		r := AuditNodes(d.Nodes, d.Pods, AuditOptions{Layout: l, Pods: true})
		if r.Nodes != len(d.Nodes) {
			t.Fatalf("audited %d of %d nodes", r.Nodes, len(d.Nodes))
		}
		_ = Preflight(cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.240.0.0/12"}, d.Nodes)
		if _, err := PlanNodes(d.Nodes, PlanOptions{Mode: ModeFix, Layout: l}); err != nil && !strings.Contains(err.Error(), "cannot plan") && !strings.Contains(err.Error(), "invalid") {
			t.Fatalf("unexpected error kind: %v", err)
		}
	})
}

// FuzzDecodePlan: a plan file either fails to decode or is valid, and a
// decoded plan survives a round trip with the same ID.
func FuzzDecodePlan(f *testing.F) {
	f.Add([]byte("apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: rebase\nsteps:\n- {node: a, uid: u, resourceVersion: '1', action: recreate, oldPodCIDRs: [10.10.1.0/24], newPodCIDRs: [10.20.1.0/24]}\n"))
	f.Add([]byte("apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: fix\nsteps:\n- {node: b, uid: v, action: patch, newPodCIDRs: [10.20.2.0/24, 'fd00::/64']}\n"))
	for _, s := range planSeeds { // valid plans of every mode, and hand edits
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodePlan(data)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("decoded plan does not validate: %v", err)
		}
		y, err := p.YAML()
		if err != nil {
			t.Fatal(err)
		}
		q, err := DecodePlan(y)
		if err != nil {
			t.Fatalf("round trip: %v\n%s", err, y)
		}
		if p.ID() != q.ID() {
			t.Fatalf("round trip changed the plan ID")
		}
	})
}

// FuzzParseControllerManagerArgs: any command line parses without panicking
// and what it yields goes through the preflight.
func FuzzParseControllerManagerArgs(f *testing.F) {
	f.Add("kube-controller-manager --allocate-node-cidrs=true --cluster-cidr=10.244.0.0/12 --node-cidr-mask-size 24 --service-cluster-ip-range=10.96.0.0/12")
	f.Add("--cluster-cidr --node-cidr-mask-size-ipv6=x --allocate-node-cidrs=maybe")
	f.Fuzz(func(t *testing.T, line string) {
		flags, _, _ := ParseControllerManagerArgs(strings.Fields(line))
		_ = cidr.ControllerManagerPreflight(flags, []cidr.NodePodCIDRs{{Name: "a", PodCIDRs: []string{"10.244.1.0/24"}}})
	})
}

// FuzzParseKubeadmClusterConfiguration: any ConfigMap text parses or fails cleanly.
func FuzzParseKubeadmClusterConfiguration(f *testing.F) {
	f.Add([]byte("apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.244.0.0/16\ncontrollerManager:\n  extraArgs:\n  - name: node-cidr-mask-size\n    value: \"24\"\n"))
	f.Add([]byte("networking: {podSubnet: 10.233.64.0/18}\ncontrollerManager: {extraArgs: {node-cidr-mask-size: '24'}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		flags, err := ParseKubeadmClusterConfiguration(data)
		if err == nil {
			_ = Preflight(flags, []corev1.Node{*node("a", cidrs("10.244.1.0/24"))})
		}
	})
}
