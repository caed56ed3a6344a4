package nodecidr

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

func TestDecodeObjects(t *testing.T) {
	tests := []struct {
		name                string
		in                  string
		nodes, pods, others int
	}{
		{"v1 List", listYAML, 1, 1, 1},
		{"NodeList", "apiVersion: v1\nkind: NodeList\nitems:\n- metadata: {name: a}\n  kind: Node\n- metadata: {name: b}\n  kind: Node\n", 2, 0, 0},
		{"multi-document", "---\napiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n\n---\napiVersion: v1\nkind: Node\nmetadata: {name: b}\n", 2, 0, 0},
		{"JSON", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"a"}}]}`, 1, 0, 0},
		{"empty", "", 0, 0, 0},
		{"other group", "apiVersion: crd.projectcalico.org/v1\nkind: Node\nmetadata: {name: a}\n", 0, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := DecodeObjects([]byte(tc.in))
			require.NoError(t, err)
			assert.Len(t, d.Nodes, tc.nodes)
			assert.Len(t, d.Pods, tc.pods)
			assert.Equal(t, tc.others, d.Skipped)
		})
	}
	d, err := DecodeObjects([]byte(listYAML))
	require.NoError(t, err)
	assert.Equal(t, []string{"10.244.1.0/24"}, PodCIDRsOf(&d.Nodes[0]))
	assert.Equal(t, "a", d.Pods[0].Spec.NodeName)

	for _, bad := range []struct{ in, msg string }{
		{"a: [", "document 1"},
		{"apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\nkind: Node\nspec: {podCIDR: 10.0.0.0/24}\n", "document 2: Node without metadata.name"},
		{"just a string", "not a Kubernetes object"},
		{"apiVersion: v1\nkind: List\nitems:\n- {metadata: {name: x}}\n", "document 1 item 0: no kind"},
		{"kind: Node\nmetadata: {name: a}\nspec: {podCIDRs: 5}\n", "Node"},
	} {
		_, err := DecodeObjects([]byte(bad.in))
		require.ErrorIs(t, err, ErrDump, bad.in)
		assert.Contains(t, err.Error(), bad.msg)
	}
}
