package cidr

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func r(name string, kind Kind, p string) Range {
	return Range{Name: name, Kind: kind, Prefix: MustParse(p)}
}

func TestAnalyzeFirstStoryWidening(t *testing.T) {
	// Widening the pod CIDR 10.233.64.0/18 to a /16 swallows the Service CIDR.
	got := Analyze([]Range{
		r("proposed pod CIDR", KindClusterCIDR, "10.233.0.0/16"),
		r("service CIDR", KindServiceCIDR, "10.233.0.0/18"),
	}, AnalyzeOptions{})
	require.Len(t, got, 1)
	assert.Equal(t, "proposed pod CIDR", got[0].Outer.Name)
	assert.Equal(t, "service CIDR", got[0].Inner.Name)
	assert.Equal(t, Contains, got[0].Relation)
	assert.Equal(t, SeverityError, got[0].Severity)
	assert.Equal(t, "error: cluster-cidr 10.233.0.0/16 (proposed pod CIDR) contains service-cidr 10.233.0.0/18 (service CIDR): Service ClusterIPs and other addresses would collide", got[0].String())

	// The move they should have made: no overlaps at all.
	assert.Empty(t, Analyze([]Range{
		r("pod", KindClusterCIDR, "10.20.0.0/16"),
		r("svc", KindServiceCIDR, "10.233.0.0/18"),
	}, AnalyzeOptions{WellKnown: true}))
}

func TestAnalyzeThirdStoryCGNAT(t *testing.T) {
	got := Analyze([]Range{
		r("service CIDR", KindServiceCIDR, "100.64.0.0/13"),
		r("pod CIDR", KindClusterCIDR, "100.96.0.0/11"),
	}, AnalyzeOptions{WellKnown: true})
	require.Len(t, got, 2)
	for _, o := range got {
		assert.Equal(t, "100.64.0.0/10", o.Outer.Prefix.String())
		assert.Equal(t, SeverityWarning, o.Severity)
		assert.Contains(t, o.Outer.Name, "Tailscale")
	}
	assert.Equal(t, "service CIDR", got[0].Inner.Name)
	assert.Equal(t, "pod CIDR", got[1].Inner.Name)
	assert.Empty(t, Analyze([]Range{r("svc", KindServiceCIDR, "172.24.0.0/15")}, AnalyzeOptions{WellKnown: true}))
}

func TestAnalyzeDuplicatesAndExpected(t *testing.T) {
	ranges := []Range{
		r("cluster", KindClusterCIDR, "10.244.0.0/16"),
		r("node-a", KindNodePodCIDR, "10.244.1.0/24"),
		r("node-b", KindNodePodCIDR, "10.244.1.0/24"),
		r("node-c", KindNodePodCIDR, "10.244.2.0/24"),
		r("node-d", KindNodePodCIDR, "10.244.2.0/23"),
		r("nodes", KindNodeNetwork, "192.168.0.0/24"),
		r("pool", KindCalicoPool, "10.244.0.0/17"),
		r("pool2", KindCalicoPool, "10.244.64.0/18"),
	}
	got := Analyze(ranges, AnalyzeOptions{})
	var lines []string
	for _, o := range got {
		lines = append(lines, fmt.Sprintf("%s %s %s %s", o.Severity, o.Outer.Name, o.Relation, o.Inner.Name))
	}
	assert.ElementsMatch(t, []string{
		"error node-a equal node-b",
		"error node-d contains node-c",
		"error pool contains pool2",
	}, lines)

	withExpected := Analyze(ranges, AnalyzeOptions{Expected: true})
	assert.Greater(t, len(withExpected), len(got))
	for _, o := range withExpected {
		if o.Outer.Name == "cluster" {
			assert.Equal(t, SeverityInfo, o.Severity, o.String())
		}
	}
}

func TestAnalyzeKinds(t *testing.T) {
	tests := []struct {
		a, b Range
		sev  Severity
		why  string
	}{
		{r("n", KindNodeNetwork, "10.0.0.0/8"), r("c", KindClusterCIDR, "10.244.0.0/16"), SeverityError, "overlap the node network"},
		{r("c", KindClusterCIDR, "10.0.0.0/8"), r("n", KindNodeNetwork, "10.1.0.0/24"), SeverityError, "overlap the node network"},
		{r("x", Kind("other"), "10.0.0.0/8"), r("c", KindClusterCIDR, "10.1.0.0/16"), SeverityError, "ranges overlap"},
		{r("c", KindClusterCIDR, "10.244.0.0/24"), r("p", KindCalicoPool, "10.244.0.0/16"), SeverityError, "the cluster CIDR should contain the calico-pool"},
		{r("s1", KindServiceCIDR, "10.96.0.0/12"), r("s2", KindServiceCIDR, "10.96.0.0/16"), SeverityError, "Service ranges overlap"},
		{r("c1", KindClusterCIDR, "10.0.0.0/8"), r("c2", KindClusterCIDR, "10.1.0.0/16"), SeverityError, "two cluster-cidr ranges overlap"},
		{r("f", KindFlannelNetwork, "10.244.0.0/16"), r("c", KindClusterCIDR, "10.244.0.0/16"), SeverityInfo, "nest as expected"},
		{r("x", KindClusterCIDR, "169.254.0.0/20"), r("y", KindServiceCIDR, "fd00::/108"), SeverityWarning, "special-purpose"},
	}
	for _, tt := range tests {
		got := Analyze([]Range{tt.a, tt.b}, AnalyzeOptions{WellKnown: true, Expected: true})
		require.NotEmpty(t, got, "%v vs %v", tt.a, tt.b)
		assert.Equal(t, tt.sev, got[0].Severity, got[0].String())
		assert.Contains(t, got[0].Reason, tt.why)
	}
	// Invalid prefixes are skipped, not a panic.
	assert.Empty(t, Analyze([]Range{{Name: "zero"}, r("c", KindClusterCIDR, "10.0.0.0/8")}, AnalyzeOptions{}))
	// Families never overlap each other.
	assert.Empty(t, Analyze([]Range{r("a", KindClusterCIDR, "0.0.0.0/0"), r("b", KindServiceCIDR, "::/0")}, AnalyzeOptions{}))
}

func TestAnalyzeManyNodesIsLinear(t *testing.T) {
	ranges := []Range{r("cluster", KindClusterCIDR, "10.0.0.0/8")}
	for i := 0; i < 5000; i++ {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
		ranges = append(ranges, Range{Name: fmt.Sprint("n", i), Kind: KindNodePodCIDR, Prefix: p})
	}
	ranges = append(ranges, Range{Name: "dup", Kind: KindNodePodCIDR, Prefix: MustParse("10.0.7.0/24")})
	got := Analyze(ranges, AnalyzeOptions{})
	require.Len(t, got, 1)
	assert.Equal(t, "n7", got[0].Outer.Name)
	assert.Equal(t, "dup", got[0].Inner.Name)
}

// A cluster range that contains a special-purpose range (100.0.0.0/8 holds
// CGNAT's 100.64.0.0/10) is warned about, as one inside it is.
func TestAnalyzeWarnsWhenARangeContainsASpecialPurposeRange(t *testing.T) {
	got := Analyze([]Range{r("c", KindClusterCIDR, "100.0.0.0/8")}, AnalyzeOptions{WellKnown: true})
	require.Len(t, got, 1)
	assert.Equal(t, "c", got[0].Outer.Name)
	assert.Equal(t, "100.64.0.0/10", got[0].Inner.Prefix.String())
	assert.Equal(t, SeverityWarning, got[0].Severity)
}
