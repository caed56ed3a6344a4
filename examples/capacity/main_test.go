package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func runCapacity(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestFirstStoryText(t *testing.T) {
	code, out, errOut := runCapacity("--cluster-cidr", "10.233.64.0/18", "--node-mask", "24", "--service-cidr", "10.233.0.0/18", "--nodes", "76")
	assert.Equal(t, 1, code, "76 nodes do not fit")
	assert.Empty(t, errOut)
	assert.Contains(t, out, "IPv4 pods      10.233.64.0/18, /24 per node")
	assert.Contains(t, out, "nodes         64 max (76 planned)")
	assert.Contains(t, out, "range usable  16382 addresses")
	assert.Contains(t, out, "cluster DNS   10.233.0.10 (the tenth address)")
	assert.Contains(t, out, "error: 76 nodes planned but 10.233.64.0/18 with /24 node subnets holds only 64 nodes")
}

func TestHealthyLayoutExitsZero(t *testing.T) {
	code, out, _ := runCapacity("--cluster-cidr", "10.20.0.0/16", "--service-cidr", "10.233.0.0/18", "--nodes", "76")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "OK: no problems found")
	assert.Contains(t, out, "nodes         256 max (76 planned)")
}

func TestWideningSwallowsServiceCIDR(t *testing.T) {
	code, out, _ := runCapacity("--cluster-cidr", "10.233.0.0/16", "--service-cidr", "10.233.0.0/18")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "error: cluster-cidr 10.233.0.0/16 (--cluster-cidr) contains service-cidr 10.233.0.0/18 (--service-cidr)")
}

func TestJSONSchema(t *testing.T) {
	code, out, _ := runCapacity("--cluster-cidr", "100.96.0.0/11,fd00:10::/56", "--node-mask", "24", "--node-mask-ipv6", "64", "--service-cidr", "100.64.0.0/13", "-o", "json")
	assert.Equal(t, 1, code, "CGNAT overlap is a problem")
	var rep map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	pods := rep["pods"].([]any)
	require.Len(t, pods, 2)
	v4 := pods[0].(map[string]any)
	assert.Equal(t, "IPv4", v4["family"])
	assert.Equal(t, "100.96.0.0/11", v4["clusterCIDR"])
	assert.EqualValues(t, 8192, v4["maxNodes"])
	v6 := pods[1].(map[string]any)
	assert.Equal(t, "IPv6", v6["family"])
	assert.EqualValues(t, 256, v6["maxNodes"])
	svc := rep["services"].([]any)[0].(map[string]any)
	assert.Equal(t, "100.64.0.10", svc["dnsIP"])
	assert.Equal(t, "100.64.0.1", svc["kubernetesIP"])
	problems := rep["problems"].([]any)
	require.Len(t, problems, 2)
	assert.Equal(t, "warning", problems[0].(map[string]any)["severity"])
	assert.Contains(t, problems[0].(map[string]any)["message"], "Tailscale")
	assert.Len(t, rep["overlaps"].([]any), 2)
}

func TestYAMLKeepsHugeCountsExact(t *testing.T) {
	code, out, _ := runCapacity("--cluster-cidr", "2001:db8::/32", "--node-mask", "64", "-o", "yaml")
	assert.Equal(t, 1, code, "kube-controller-manager refuses a 32-bit IPv6 difference")
	assert.Contains(t, out, "usableAddresses: 79228162514264337593543950336")
	assert.Contains(t, out, "maxNodes: 4294967296")
	assert.Contains(t, out, "New CIDR set failed; the node CIDR size is too big")
}

func TestBadInputExitsTwoWithOneLine(t *testing.T) {
	tests := []struct {
		args []string
		msg  string
	}{
		{nil, "capacity: --cluster-cidr is required, e.g. --cluster-cidr 10.244.0.0/16"},
		{[]string{"--cluster-cidr", "10.233.64.1/16"}, "capacity: --cluster-cidr: 10.233.64.1/16 has host bits set; the network is 10.233.0.0/16"},
		{[]string{"--cluster-cidr", "10.0.0.0/16,10.1.0.0/16"}, "a dual-stack pair needs one IPv4 and one IPv6 CIDR"},
		{[]string{"--cluster-cidr", "10.0.0.0/16", "--service-cidr", "nope"}, `capacity: --service-cidr: "nope": missing /prefix-length`},
		{[]string{"--cluster-cidr", "10.0.0.0/16", "--node-mask", "40"}, `capacity: node mask: "40": an IPv4 node mask must be between 0 and 32`},
		{[]string{"--cluster-cidr", "10.0.0.0/16", "--node-mask", "abc"}, `capacity: invalid value "abc" for flag -node-mask`},
		{[]string{"--cluster-cidr", "10.0.0.0/16", "--nodes", "-3"}, "capacity: --nodes=-3: must not be negative"},
		{[]string{"--cluster-cidr", "10.0.0.0/16", "--node-mask-ipv6", "64"}, "capacity: --node-mask-ipv6=64: --cluster-cidr 10.0.0.0/16 has no IPv6 CIDR"},
		{[]string{"--cluster-cidr", "10.0.0.0/16", "-o", "xml"}, `capacity: -o "xml": want text, json or yaml`},
		{[]string{"--cluster-cidr", "10.0.0.0/16", "--node-network", "192.168.0.1/24"}, "capacity: --node-network: 192.168.0.1/24 has host bits set"},
		{[]string{"--bogus"}, "capacity: flag provided but not defined: -bogus"},
	}
	for _, tt := range tests {
		code, out, errOut := runCapacity(tt.args...)
		assert.Equal(t, 2, code, tt.args)
		assert.Empty(t, out)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
		assert.Contains(t, errOut, tt.msg)
	}
}

func TestNodeNetworkAndMaxPods(t *testing.T) {
	code, out, _ := runCapacity("--cluster-cidr", "10.0.0.0/16", "--node-mask", "26", "--max-pods", "110", "--node-network", "10.0.128.0/20")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "warning: maxPods 110 exceeds the 61 pod IPs of a /26 node subnet")
	assert.Contains(t, out, "overlap the node network")
}

func TestHelp(t *testing.T) {
	code, out, _ := runCapacity("--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "--cluster-cidr")
}
