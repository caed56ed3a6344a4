package migrate

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/xml"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
)

// The address map's geometry, in SVG user units.
const (
	svgWidth   = 1000
	svgLeft    = 190 // room for the lane names
	svgLane    = 30
	svgFamilyH = 40 // the family heading and the axis labels
)

// svgLanes orders the lanes of each family.
var svgLanes = []struct {
	kind cidr.Kind
	name string
}{
	{cidr.KindClusterCIDR, "cluster CIDR"},
	{cidr.KindFlannelNetwork, "flannel Network"},
	{cidr.KindCalicoPool, "Calico pools"},
	{cidr.KindNodePodCIDR, "node subnets"},
	{cidr.KindServiceCIDR, "Service CIDR"},
}

// span is an address range as [lo, hi) on a 64-bit scale: IPv4 addresses
// as they are, IPv6 by their upper 64 bits.
func span(p netip.Prefix) (lo, hi uint64) {
	p = p.Masked()
	if p.Addr().Is4() {
		b := p.Addr().As4()
		lo = uint64(binary.BigEndian.Uint32(b[:]))
		return lo, lo + 1<<(32-p.Bits())
	}
	b := p.Addr().As16()
	lo = binary.BigEndian.Uint64(b[:8])
	if p.Bits() <= 0 {
		return 0, ^uint64(0)
	}
	if p.Bits() >= 64 {
		return lo, lo + 1
	}
	return lo, lo + 1<<(64-p.Bits())
}

// WriteAddressMapSVG draws the report's ranges as an SVG address map: per
// address family, one lane each for the cluster CIDR, flannel's Network,
// the Calico pools, the node subnets and the Service range, on one scale
// from the lowest to the highest address shown. Ranges in conflict are
// drawn with class "conflict" (red outline), node subnets held by more than
// one node with class "duplicate" (red fill); each shape has a <title> with
// its label and prefix.
func WriteAddressMapSVG(w io.Writer, r *DoctorReport) error {
	bw := bufio.NewWriter(w)
	byFamily := map[cidr.Family][]MapRange{}
	for _, rg := range r.Ranges {
		f := cidr.FamilyOf(rg.Prefix)
		byFamily[f] = append(byFamily[f], rg)
	}
	families := []cidr.Family{cidr.IPv4, cidr.IPv6}
	height := 60
	for _, f := range families {
		if len(byFamily[f]) > 0 {
			height += svgFamilyH + len(svgLanes)*svgLane + 20
		}
	}
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprint(bw, `<style>.range{fill:#9ecae1;stroke:#3182bd}.kind-service-cidr{fill:#c7e9c0;stroke:#31a354}.kind-calico-pool{fill:#fdd0a2;stroke:#e6550d}`+
		`.kind-flannel-network{fill:#dadaeb;stroke:#756bb1}.kind-node-podcidr{fill:#bdbdbd;stroke:#636363}.duplicate{fill:#de2d26}.conflict{stroke:#de2d26;stroke-width:3}</style>`+"\n")
	fmt.Fprintf(bw, "<text x=\"10\" y=\"20\" font-size=\"14\">cidrshift doctor: address map of %s</text>\n", esc(r.Source))
	fmt.Fprint(bw, "<text x=\"10\" y=\"40\">red outline: range in conflict; red fill: node subnet held by more than one node</text>\n")
	y := 60
	for _, f := range families {
		rs := byFamily[f]
		if len(rs) == 0 {
			continue
		}
		lo, hi := ^uint64(0), uint64(0)
		for _, rg := range rs {
			a, b := span(rg.Prefix)
			lo, hi = min(lo, a), max(hi, b)
		}
		scale := float64(svgWidth-svgLeft-10) / float64(hi-lo)
		x := func(v uint64) float64 { return svgLeft + float64(v-lo)*scale }
		fmt.Fprintf(bw, "<g class=\"family\" id=\"%s\">\n<text x=\"10\" y=\"%d\" font-weight=\"bold\">%s: %s .. %s</text>\n",
			f, y+15, f, esc(addrAt(f, lo)), esc(addrAt(f, hi-1)))
		y += svgFamilyH
		for _, lane := range svgLanes {
			fmt.Fprintf(bw, "<text class=\"lane\" x=\"10\" y=\"%d\">%s</text>\n", y+svgLane/2+4, lane.name)
			lr := slices.DeleteFunc(slices.Clone(rs), func(m MapRange) bool { return m.Kind != lane.kind })
			// Problems drawn last, so they stay visible over neighbours.
			slices.SortStableFunc(lr, func(a, b MapRange) int { return cmp.Compare(mark(a), mark(b)) })
			for _, rg := range lr {
				a, b := span(rg.Prefix)
				wd := max(x(b)-x(a), 1)
				class := "range kind-" + string(rg.Kind)
				if rg.Duplicate {
					class += " duplicate"
				}
				if rg.Conflict {
					class += " conflict"
				}
				fmt.Fprintf(bw, "<rect class=\"%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\"><title>%s %s</title></rect>\n",
					class, x(a), y+3, wd, svgLane-6, esc(rg.Label), rg.Prefix)
			}
			y += svgLane
		}
		fmt.Fprint(bw, "</g>\n")
		y += 20
	}
	fmt.Fprint(bw, "</svg>\n")
	return bw.Flush()
}

func mark(m MapRange) int {
	n := 0
	if m.Duplicate {
		n++
	}
	if m.Conflict {
		n++
	}
	return n
}

// addrAt is the address at v on the family's scale.
func addrAt(f cidr.Family, v uint64) string {
	if f == cidr.IPv4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(v))
		return netip.AddrFrom4(b).String()
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], v)
	return netip.AddrFrom16(b).String()
}

// esc escapes text for XML.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}
