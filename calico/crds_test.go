package calico_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/calico"
)

// structural checks the rules of a structural schema that matter here:
// every node has a type (or preserves unknown fields), objects list their
// properties, arrays their items.
func structural(t *testing.T, path string, s map[string]any) {
	t.Helper()
	typ, _ := s["type"].(string)
	preserve, _ := s["x-kubernetes-preserve-unknown-fields"].(bool)
	if typ == "" && !preserve {
		t.Errorf("%s: no type", path)
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for k, v := range props {
			m, ok := v.(map[string]any)
			require.True(t, ok, "%s.%s", path, k)
			structural(t, path+"."+k, m)
		}
	}
	if typ == "array" {
		items, ok := s["items"].(map[string]any)
		require.True(t, ok, "%s: array without items", path)
		structural(t, path+"[]", items)
	}
	if ap, ok := s["additionalProperties"].(map[string]any); ok {
		structural(t, path+"{}", ap)
	}
}

func schemaAt(t *testing.T, root map[string]any, path ...string) map[string]any {
	t.Helper()
	cur := root
	for _, p := range path {
		props, ok := cur["properties"].(map[string]any)
		require.True(t, ok, "no properties at %v", path)
		next, ok := props[p].(map[string]any)
		require.True(t, ok, "no property %s in %v", p, path)
		cur = next
	}
	return cur
}

func TestCRDManifests(t *testing.T) {
	objs, err := calico.CRDObjects()
	require.NoError(t, err)
	byName := map[string]map[string]any{}
	for _, o := range objs {
		assert.Equal(t, "apiextensions.k8s.io/v1", o.GetAPIVersion())
		assert.Equal(t, "CustomResourceDefinition", o.GetKind())
		versions := o.Object["spec"].(map[string]any)["versions"].([]any)
		require.Len(t, versions, 1)
		v := versions[0].(map[string]any)
		assert.Equal(t, true, v["served"])
		assert.Equal(t, true, v["storage"])
		schema := v["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
		structural(t, o.GetName(), schema)
		byName[o.GetName()] = schema
	}
	require.Len(t, byName, 4)
	pools := byName["ippools.crd.projectcalico.org"]
	// Every field the stores write.
	for _, f := range []string{"cidr", "blockSize", "ipipMode", "vxlanMode", "natOutgoing", "disabled", "disableBGPExport",
		"nodeSelector", "namespaceSelector", "allowedUses", "assignmentMode"} {
		schemaAt(t, pools, "spec", f)
	}
	blocks := byName["ipamblocks.crd.projectcalico.org"]
	for _, f := range []string{"cidr", "affinity", "allocations", "attributes", "unallocated", "deleted", "strictAffinity", "sequenceNumber"} {
		schemaAt(t, blocks, "spec", f)
	}
	assert.Equal(t, true, schemaAt(t, blocks, "spec", "allocations")["items"].(map[string]any)["nullable"], "free addresses are null entries")
	schemaAt(t, blocks, "spec", "attributes")
	affs := byName["blockaffinities.crd.projectcalico.org"]
	assert.Equal(t, "string", schemaAt(t, affs, "spec", "deleted")["type"], "Calico stores deleted as a string")
	schemaAt(t, byName["installations.operator.tigera.io"], "spec", "calicoNetwork", "ipPools")

	// The manifests name what they are.
	for _, m := range calico.CRDManifests() {
		assert.True(t, strings.HasSuffix(m.File, ".yaml"))
		assert.Contains(t, string(m.YAML), "kind: CustomResourceDefinition", m.File)
		assert.Contains(t, string(m.YAML), fmt.Sprintf("name: %s", strings.TrimSuffix(strings.SplitN(m.File, "_", 2)[1], ".yaml")), m.File)
	}
}
