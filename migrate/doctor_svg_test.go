package migrate

import (
	"encoding/xml"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/cidr"
)

// TestSpan holds the map's scale: IPv4 prefixes as they are, IPv6 ones by
// their upper 64 bits, host bits ignored.
func TestSpan(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		lo, hi uint64
	}{
		{"10.0.0.0/8", 0x0a000000, 0x0b000000},
		{"10.0.1.7/24", 0x0a000100, 0x0a000200},
		{"0.0.0.0/0", 0, 1 << 32},
		{"192.168.0.1/32", 0xc0a80001, 0xc0a80002},
		{"fd00::/48", 0xfd00000000000000, 0xfd00000000010000},
		{"fd00:0:0:5::/64", 0xfd00000000000005, 0xfd00000000000006},
		{"fd00::1/128", 0xfd00000000000000, 0xfd00000000000001},
		{"::/0", 0, ^uint64(0)},
	} {
		lo, hi := span(netip.MustParsePrefix(tc.prefix))
		assert.Equal(t, [2]uint64{tc.lo, tc.hi}, [2]uint64{lo, hi}, tc.prefix)
	}
}

// TestAddressMapSVGGeometry: the drawing's height has room for each family
// shown and no other, and each range sits on the family's scale, from the
// lowest to the highest address shown.
func TestAddressMapSVGGeometry(t *testing.T) {
	type rect struct {
		Title  string  `xml:"title"`
		Class  string  `xml:"class,attr"`
		X      float64 `xml:"x,attr"`
		Y      int     `xml:"y,attr"`
		Width  float64 `xml:"width,attr"`
		Height int     `xml:"height,attr"`
	}
	type text struct {
		Y    int    `xml:"y,attr"`
		Text string `xml:",chardata"`
	}
	type doc struct {
		Height int `xml:"height,attr"`
		Groups []struct {
			ID    string `xml:"id,attr"`
			Texts []text `xml:"text"`
			Rects []rect `xml:"rect"`
		} `xml:"g"`
	}
	draw := func(ranges ...MapRange) doc {
		var b strings.Builder
		require.NoError(t, WriteAddressMapSVG(&b, &DoctorReport{Source: "test", Ranges: ranges}))
		var d doc
		require.NoError(t, xml.Unmarshal([]byte(b.String()), &d), b.String())
		return d
	}
	perFamily := svgFamilyH + len(svgLanes)*svgLane + 20
	v4 := []MapRange{
		{Label: "cluster CIDR", Kind: cidr.KindClusterCIDR, Prefix: netip.MustParsePrefix("10.0.0.0/16")},
		{Label: "Node a", Kind: cidr.KindNodePodCIDR, Prefix: netip.MustParsePrefix("10.0.0.0/24")},
		{Label: "Node b", Kind: cidr.KindNodePodCIDR, Prefix: netip.MustParsePrefix("10.0.128.0/17")},
	}
	d := draw(v4...)
	assert.Equal(t, 60+perFamily, d.Height)
	require.Len(t, d.Groups, 1)
	// The family's heading, then one lane of svgLane pixels per kind.
	assert.Equal(t, text{75, "IPv4: 10.0.0.0 .. 10.0.255.255"}, d.Groups[0].Texts[0])
	for i, lane := range svgLanes {
		assert.Equal(t, text{60 + svgFamilyH + i*svgLane + 19, lane.name}, d.Groups[0].Texts[1+i])
	}
	scale := float64(svgWidth-svgLeft-10) / 65536
	byTitle := map[string]rect{}
	for _, r := range d.Groups[0].Rects {
		byTitle[r.Title] = r
	}
	assert.InDelta(t, svgLeft, byTitle["cluster CIDR 10.0.0.0/16"].X, 0.01)
	assert.InDelta(t, 65536*scale, byTitle["cluster CIDR 10.0.0.0/16"].Width, 0.01)
	assert.InDelta(t, svgLeft, byTitle["Node a 10.0.0.0/24"].X, 0.01)
	assert.InDelta(t, 256*scale, byTitle["Node a 10.0.0.0/24"].Width, 0.01)
	assert.InDelta(t, svgLeft+32768*scale, byTitle["Node b 10.0.128.0/17"].X, 0.01)
	for title, lane := range map[string]int{"cluster CIDR 10.0.0.0/16": 0, "Node a 10.0.0.0/24": 3, "Node b 10.0.128.0/17": 3} {
		assert.Equal(t, 60+svgFamilyH+lane*svgLane+3, byTitle[title].Y, title)
		assert.Equal(t, svgLane-6, byTitle[title].Height, title)
	}
	// A range too narrow for the scale is still a pixel wide.
	d = draw(append(v4, MapRange{Label: "Node c", Kind: cidr.KindNodePodCIDR, Prefix: netip.MustParsePrefix("10.0.1.0/30")})...)
	for _, r := range d.Groups[0].Rects {
		if r.Title == "Node c 10.0.1.0/30" {
			assert.InDelta(t, 1, r.Width, 0.001)
		}
	}

	d = draw(append(v4, MapRange{Label: "cluster CIDR", Kind: cidr.KindClusterCIDR, Prefix: netip.MustParsePrefix("fd00::/48")})...)
	assert.Equal(t, 60+2*perFamily, d.Height)
	require.Len(t, d.Groups, 2)
	assert.Equal(t, "IPv6: fd00:: .. fd00:0:0:ffff::", d.Groups[1].Texts[0].Text)
}

// TestAddressMapSVGDrawsProblemsLast: in a lane, a node subnet held twice
// or in conflict is drawn after its healthy neighbours (so on top of them),
// and one that is both after one that is either.
func TestAddressMapSVGDrawsProblemsLast(t *testing.T) {
	p := netip.MustParsePrefix("10.0.0.0/24")
	var b strings.Builder
	require.NoError(t, WriteAddressMapSVG(&b, &DoctorReport{Ranges: []MapRange{
		{Label: "both", Kind: cidr.KindNodePodCIDR, Prefix: p, Duplicate: true, Conflict: true},
		{Label: "dup", Kind: cidr.KindNodePodCIDR, Prefix: p, Duplicate: true},
		{Label: "ok", Kind: cidr.KindNodePodCIDR, Prefix: p},
		{Label: "conflict", Kind: cidr.KindNodePodCIDR, Prefix: p, Conflict: true},
		{Label: "ok2", Kind: cidr.KindNodePodCIDR, Prefix: p},
	}}))
	var d struct {
		Rects []struct {
			Class string `xml:"class,attr"`
			Title string `xml:"title"`
		} `xml:"g>rect"`
	}
	require.NoError(t, xml.Unmarshal([]byte(b.String()), &d))
	var got []string
	for _, r := range d.Rects {
		got = append(got, r.Title+": "+r.Class)
	}
	assert.Equal(t, []string{
		"ok 10.0.0.0/24: range kind-node-podcidr",
		"ok2 10.0.0.0/24: range kind-node-podcidr",
		"dup 10.0.0.0/24: range kind-node-podcidr duplicate",
		"conflict 10.0.0.0/24: range kind-node-podcidr conflict",
		"both 10.0.0.0/24: range kind-node-podcidr duplicate conflict",
	}, got)
}

// TestAddrAt writes a point of each family's scale as an address.
func TestAddrAt(t *testing.T) {
	assert.Equal(t, "10.0.255.255", addrAt(cidr.IPv4, 0x0a00ffff))
	assert.Equal(t, "fd00:0:0:ffff::", addrAt(cidr.IPv6, 0xfd0000000000ffff))
}
