package calico_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/internal/access/accesstest"
	"github.com/cidrshift/cidrshift/internal/cli"
)

// Capacity counts are JSON numbers, as cidr.PodCapacity's are, exact at any
// size (an IPv6 /24 pool of /122 blocks holds 2^98 blocks).
func TestCapacityJSONNumbers(t *testing.T) {
	for _, tc := range []struct {
		name                                  string
		pool                                  calico.IPPool
		addresses, blocks, perBlock, maxNodes string
	}{
		{"IPv4", pool("new", "10.20.0.0/16"), "65536", "1024", "64", "1024"},
		{"IPv6 /64", pool("v6", "fd00:20::/64"), "18446744073709551616", "288230376151711744", "64", "288230376151711744"},
		{"IPv6 /24", pool("v6", "fd00::/24", func(s *calico.PoolSpec) { s.BlockSize = 122 }),
			"20282409603651670423947251286016", "316912650057057350374175801344", "64", "316912650057057350374175801344"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := calico.PoolCapacity(tc.pool, calico.CapacityOptions{})
			require.NoError(t, err)
			data, err := json.Marshal(c)
			require.NoError(t, err)
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			var m map[string]any
			require.NoError(t, dec.Decode(&m))
			for field, want := range map[string]string{"addresses": tc.addresses, "blocks": tc.blocks, "addressesPerBlock": tc.perBlock, "maxNodesOneBlockEach": tc.maxNodes} {
				assert.Equal(t, json.Number(want), m[field], "%s is a JSON number: %s", field, data)
			}

			var back calico.Capacity
			require.NoError(t, json.Unmarshal(data, &back))
			assert.Equal(t, tc.addresses, back.Addresses.String())
			assert.Equal(t, tc.blocks, back.Blocks.String())
			assert.Equal(t, tc.perBlock, back.AddressesPerBlock.String())
			assert.Equal(t, tc.maxNodes, back.MaxNodesOneBlockEach.String())
		})
	}
}

// Numbers beyond 64 bits come back exact from YAML however it was written:
// plain, as the example programs print it (internal/cli), or as
// sigs.k8s.io/yaml writes it (which turns such integers into floats).
// Plans written before the counts became numbers (decimal strings) still
// decode.
func TestCapacityDecodesYAMLExactly(t *testing.T) {
	c, err := calico.PoolCapacity(pool("v6", "fd00::/24", func(s *calico.PoolSpec) { s.BlockSize = 122 }), calico.CapacityOptions{})
	require.NoError(t, err)

	var plain bytes.Buffer
	require.NoError(t, cli.Write(&plain, "yaml", c))
	assert.Contains(t, plain.String(), "blocks: 316912650057057350374175801344\n")
	sigs, err := yaml.Marshal(c)
	require.NoError(t, err)
	old := []byte("addresses: \"20282409603651670423947251286016\"\naddressesPerBlock: \"64\"\nblockSize: 122\nblocks: \"316912650057057350374175801344\"\n" +
		"cidr: fd00::/24\nfamily: IPv6\nmaxNodesOneBlockEach: \"316912650057057350374175801344\"\npool: v6\n")
	for name, data := range map[string][]byte{"internal/cli": plain.Bytes(), "sigs.k8s.io/yaml": sigs, "strings": old} {
		var back calico.Capacity
		require.NoError(t, yaml.UnmarshalStrict(data, &back), "%s:\n%s", name, data)
		assert.Equal(t, "20282409603651670423947251286016", back.Addresses.String(), name)
		assert.Equal(t, "316912650057057350374175801344", back.Blocks.String(), name)
		assert.Equal(t, "316912650057057350374175801344", back.MaxNodesOneBlockEach.String(), name)
		assert.Equal(t, "64", back.AddressesPerBlock.String(), name)
	}

	// An inexact count that is not the pool's is refused, naming the field.
	var back calico.Capacity
	err = json.Unmarshal([]byte(`{"cidr":"fd00::/24","blockSize":122,"blocks":3.2e+29}`), &back)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "blocks")
	assert.Contains(t, err.Error(), "3.2e+29")
	for _, bad := range []string{`{"blocks":1.5}`, `{"blocks":-4}`, `{"blocks":"-4"}`, `{"blocks":true}`, `{"blocks":1e400}`} {
		assert.Error(t, json.Unmarshal([]byte(bad), &back), bad)
	}
}

// A plan for an IPv6 pool swap, printed by the example program's writer,
// decodes and keeps its counts exact (the new pool's 2^64 addresses do not
// fit a uint64, so a YAML reader sees a float).
func TestDecodePlanIPv6CapacityExact(t *testing.T) {
	kube, _ := calicotest.NewKube()
	accesstest.Authorize(kube)
	dyn, _ := calicotest.NewDynamic(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": "default-ipv6-ippool"},
		"spec": map[string]any{"cidr": "fd00:10::/64", "blockSize": int64(122), "vxlanMode": "Always"},
	}})
	cl := calico.Cluster{Kube: kube, Pools: calico.NewCRDStore(dyn), Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}
	p, err := calico.Plan(context.Background(), cl, calico.SwapRequest{
		OldPool: "default-ipv6-ippool", NewName: "new-v6", NewCIDR: "fd00:20::/64", ClusterCIDR: "fd00::/16",
	})
	require.NoError(t, err)
	require.Equal(t, "18446744073709551616", p.Capacity.Addresses.String())

	var plain bytes.Buffer
	require.NoError(t, cli.Write(&plain, "yaml", p))
	asJSON, err := json.Marshal(p)
	require.NoError(t, err)
	sigs, err := yaml.Marshal(p)
	require.NoError(t, err)
	for name, data := range map[string][]byte{"internal/cli yaml": plain.Bytes(), "json": asJSON, "sigs.k8s.io/yaml": sigs} {
		back, err := calico.DecodePlan(data)
		require.NoError(t, err, "%s:\n%s", name, data)
		assert.Equal(t, "18446744073709551616", back.Capacity.Addresses.String(), name)
		assert.Equal(t, "288230376151711744", back.Capacity.Blocks.String(), name)
		assert.Equal(t, p.Capacity, back.Capacity, name)
	}
}

// PoolCapacity takes every block size Calico allows, the bounds included,
// and refuses one past them with an error naming the field. A pool of
// exactly one block holds one block; a smaller one none.
func TestPoolCapacityBlockSizeBounds(t *testing.T) {
	for _, tc := range []struct {
		cidr             string
		bs               int
		perBlock, blocks string
	}{
		{"10.0.0.0/8", 20, "4096", "4096"}, {"10.0.0.0/8", 32, "1", "16777216"},
		{"fd00::/104", 116, "4096", "4096"}, {"fd00::/104", 128, "1", "16777216"},
		{"10.0.0.0/26", 26, "64", "1"}, {"10.0.0.0/27", 26, "64", "0"},
	} {
		c, err := calico.PoolCapacity(pool("p", tc.cidr, func(s *calico.PoolSpec) { s.BlockSize = tc.bs }), calico.CapacityOptions{})
		require.NoError(t, err, "%s blockSize %d", tc.cidr, tc.bs)
		assert.Equal(t, tc.perBlock, c.AddressesPerBlock.String(), "%s blockSize %d", tc.cidr, tc.bs)
		assert.Equal(t, tc.blocks, c.Blocks.String(), "%s blockSize %d", tc.cidr, tc.bs)
		var codes []calico.WarningCode
		for _, w := range c.Warnings {
			codes = append(codes, w.Code)
		}
		if tc.blocks == "0" {
			assert.Equal(t, []calico.WarningCode{calico.WarnNoWholeBlock}, codes, "%s blockSize %d", tc.cidr, tc.bs)
		} else {
			assert.Empty(t, codes, "%s blockSize %d", tc.cidr, tc.bs)
		}
	}
	for _, tc := range []struct {
		cidr string
		bs   int
	}{{"10.0.0.0/8", 19}, {"10.0.0.0/8", 33}, {"fd00::/104", 115}, {"fd00::/104", 129}} {
		_, err := calico.PoolCapacity(pool("p", tc.cidr, func(s *calico.PoolSpec) { s.BlockSize = tc.bs }), calico.CapacityOptions{})
		var fe *calico.FieldError
		require.ErrorAs(t, err, &fe, "%s blockSize %d", tc.cidr, tc.bs)
		assert.Equal(t, "spec.blockSize", fe.Field)
		assert.Equal(t, calico.RuleBlockSizeRange, fe.Rule)
	}
}

// A count written as a float (0.0, 0e0, 12.0) is its integer when it is
// exact; a capacity without cidr and blockSize has nothing else to check
// it against.
func TestCapacityDecodesWholeFloats(t *testing.T) {
	for text, want := range map[string]string{"0.0": "0", "0e0": "0", "12.0": "12", "1.2e1": "12"} {
		var c calico.Capacity
		require.NoError(t, json.Unmarshal([]byte(`{"blocks":`+text+`}`), &c), text)
		assert.Equal(t, want, c.Blocks.String(), text)
	}
}
