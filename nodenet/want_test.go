package nodenet

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// TestWantNormalize: defaults are filled in, and every bad field is refused
// with an error naming the field and the value.
func TestWantNormalize(t *testing.T) {
	w, err := Want{Node: "node-1", PodCIDR: pfx("10.244.9.0/24")}.normalize()
	require.NoError(t, err)
	assert.Equal(t, BackendVXLAN, w.Backend)
	assert.Equal(t, DefaultVTEP, w.VTEP)
	assert.Equal(t, "", w.Bridge, "the bridge comes from the CNI config when not given")
	assert.Equal(t, []string{DefaultRunFlannelDir, DefaultCNIDataDir, DefaultCNIConfDir}, []string{w.RunFlannelDir, w.CNIDataDir, w.CNIConfDir})

	w, err = Want{Node: "n", PodCIDR: pfx("10.244.9.0/24"), VTEPMAC: "6E-00-00-00-09-00", RunFlannelDir: "/host/run/flannel/"}.normalize()
	require.NoError(t, err)
	assert.Equal(t, "6e:00:00:00:09:00", w.VTEPMAC)
	assert.Equal(t, "/host/run/flannel", w.RunFlannelDir)

	ok := Want{Node: "node-1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16")}
	for _, tc := range []struct {
		name  string
		edit  func(w *Want)
		err   error
		field string
		value string
	}{
		{"no node", func(w *Want) { w.Node = "" }, ErrInvalidInput, "Want.Node", `""`},
		{"upper-case node", func(w *Want) { w.Node = "Node1" }, ErrInvalidInput, "Want.Node", `"Node1"`},
		{"no podCIDR", func(w *Want) { w.PodCIDR = netip.Prefix{} }, ErrInvalidInput, "Want.PodCIDR", `""`},
		{"host bits", func(w *Want) { w.PodCIDR = netip.PrefixFrom(netip.MustParseAddr("10.244.9.1"), 24) }, ErrInvalidInput, "Want.PodCIDR", `"10.244.9.1/24"`},
		{"ipv6", func(w *Want) { w.PodCIDR = pfx("fd00::/64") }, ErrInvalidInput, "Want.PodCIDR", `"fd00::/64"`},
		{"tiny", func(w *Want) { w.PodCIDR, w.Network = pfx("10.244.9.0/31"), netip.Prefix{} }, ErrInvalidInput, "Want.PodCIDR", `"10.244.9.0/31"`},
		{"outside network", func(w *Want) { w.Network = pfx("10.20.0.0/16") }, ErrInvalidInput, "Want.PodCIDR", "outside Network 10.20.0.0/16"},
		{"old overlaps", func(w *Want) { w.OldPodCIDR = pfx("10.244.8.0/23") }, ErrInvalidInput, "Want.OldPodCIDR", `"10.244.8.0/23"`},
		{"old network same", func(w *Want) { w.OldNetwork = w.Network }, ErrInvalidInput, "Want.OldNetwork", `"10.244.0.0/16"`},
		{"backend", func(w *Want) { w.Backend = "udp" }, ErrInvalidInput, "Want.Backend", `"udp"`},
		{"bridge", func(w *Want) { w.Bridge = "a/b" }, ErrInvalidInput, "Want.Bridge", `"a/b"`},
		{"vtep", func(w *Want) { w.VTEP = "a-very-long-name-x" }, ErrInvalidInput, "Want.VTEP", `"a-very-long-name-x"`},
		{"mac", func(w *Want) { w.VTEPMAC = "nope" }, ErrInvalidInput, "Want.VTEPMAC", `"nope"`},
		{"relative dir", func(w *Want) { w.CNIDataDir = "var/lib/cni" }, ErrInvalidInput, "Want.CNIDataDir", `"var/lib/cni"`},
		{"relative netns", func(w *Want) { w.NetNS = "ns1" }, ErrInvalidInput, "Want.NetNS", `"ns1"`},
		{"backend name", func(w *Want) { w.IPTablesBackend = "nf_tables" }, ErrUnknownBackend, "Want.IPTablesBackend", `"nf_tables"`},
		{"peer is self", func(w *Want) { w.Peers = []Peer{{Name: "node-1", PodCIDR: pfx("10.244.1.0/24")}} }, ErrInvalidInput, "Want.Peers[0].Name", `"node-1"`},
		{"peer overlaps node", func(w *Want) { w.Peers = []Peer{{Name: "b", PodCIDR: pfx("10.244.9.0/24")}} }, ErrInvalidInput, "Want.Peers[0].PodCIDR", `"10.244.9.0/24"`},
		{"peers overlap", func(w *Want) {
			w.Peers = []Peer{{Name: "b", PodCIDR: pfx("10.244.1.0/24")}, {Name: "c", PodCIDR: pfx("10.244.2.0/24"), OldPodCIDRs: []netip.Prefix{pfx("10.244.1.0/24")}}}
		}, ErrInvalidInput, "Want.Peers[1].OldPodCIDRs[0]", `"10.244.1.0/24"`},
		{"host-gw peer without IP", func(w *Want) { w.Backend, w.Peers = BackendHostGW, []Peer{{Name: "b", PodCIDR: pfx("10.244.1.0/24")}} }, ErrInvalidInput, "Want.Peers[0].PublicIP", `""`},
		{"next overlaps a peer", func(w *Want) {
			w.Peers = []Peer{{Name: "b", PodCIDR: pfx("10.244.1.0/24")}, {Name: "c", PodCIDR: pfx("10.244.2.0/24"), NextPodCIDR: pfx("10.244.1.0/24"), VTEPMAC: "6e:00:00:00:02:00"}}
		}, ErrInvalidInput, "Want.Peers[1].NextPodCIDR", `"10.244.1.0/24"`},
		{"next overlaps node", func(w *Want) {
			w.Peers = []Peer{{Name: "b", PodCIDR: pfx("10.244.1.0/24"), NextPodCIDR: pfx("10.244.9.0/24"), VTEPMAC: "6e:00:00:00:02:00"}}
		}, ErrInvalidInput, "Want.Peers[0].NextPodCIDR", `"10.244.9.0/24"`},
		{"next without the peer's MAC", func(w *Want) {
			w.Peers = []Peer{{Name: "b", PodCIDR: pfx("10.244.1.0/24"), NextPodCIDR: pfx("10.244.2.0/24")}}
		},
			ErrInvalidInput, "Want.Peers[0].VTEPMAC", "NextPodCIDR 10.244.2.0/24"},
		{"peer MAC all zeros", func(w *Want) {
			w.Peers = []Peer{{Name: "b", PodCIDR: pfx("10.244.1.0/24"), VTEPMAC: "00:00:00:00:00:00"}}
		},
			ErrInvalidInput, "Want.Peers[0].VTEPMAC", `"00:00:00:00:00:00"`},
		{"peer IPv6 address", func(w *Want) {
			w.Peers = []Peer{{Name: "b", PodCIDR: pfx("10.244.1.0/24"), PublicIP: netip.MustParseAddr("fd00::1")}}
		},
			ErrInvalidInput, "Want.Peers[0].PublicIP", `"fd00::1"`},
		{"fdb MAC", func(w *Want) { w.FDB = []FDBEntry{{MAC: "nope", Dst: netip.MustParseAddr("192.0.2.12")}} }, ErrInvalidInput, "Want.FDB[0].MAC", `"nope"`},
		{"fdb MAC all zeros", func(w *Want) { w.FDB = []FDBEntry{{MAC: "00:00:00:00:00:00", Dst: netip.MustParseAddr("192.0.2.12")}} }, ErrInvalidInput, "Want.FDB[0].MAC", `"00:00:00:00:00:00"`},
		{"fdb IPv6", func(w *Want) { w.FDB = []FDBEntry{{MAC: "6e:00:00:00:02:00", Dst: netip.MustParseAddr("fd00::1")}} }, ErrInvalidInput, "Want.FDB[0].Dst", `"fd00::1"`},
		{"fdb with host-gw", func(w *Want) {
			w.Backend, w.FDB = BackendHostGW, []FDBEntry{{MAC: "6e:00:00:00:02:00", Dst: netip.MustParseAddr("192.0.2.12")}}
		}, ErrInvalidInput, "Want.FDB[0].MAC", "vxlan's"},
		{"pod without IP or ID", func(w *Want) { w.LivePods = []Pod{{Name: "x"}} }, ErrInvalidInput, "Want.LivePods[0]", `"x"`},
		{"pod IPv6", func(w *Want) { w.LivePods = []Pod{{IP: netip.MustParseAddr("fd00::1")}} }, ErrInvalidInput, "Want.LivePods[0].IP", `"fd00::1"`},
		{"pod ID", func(w *Want) { w.LivePods = []Pod{{ContainerID: "../x"}} }, ErrInvalidInput, "Want.LivePods[0].ContainerID", `"../x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := ok
			tc.edit(&w)
			_, err := w.normalize()
			require.Error(t, err)
			assert.True(t, errors.Is(err, tc.err), "%v", err)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
			assert.Contains(t, err.Error(), tc.value)
		})
	}
}

// TestParseCNIConfig reads the configs flannel, the bridge plugin and
// others install, and refuses what host-local or libcni would.
func TestParseCNIConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		want CNIConfig
	}{
		"kube-flannel conflist": {`{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}`,
			CNIConfig{Name: "cbr0", Plugin: "flannel", Bridge: "cni0", IPAM: "host-local"}},
		"flannel with delegate bridge and dataDir": {`{"name":"k8s-pod-network","type":"flannel","delegate":{"bridge":"kbr0","ipam":{"type":"host-local","dataDir":"/var/lib/cni/x"}}}`,
			CNIConfig{Name: "k8s-pod-network", Plugin: "flannel", Bridge: "kbr0", IPAM: "host-local", DataDir: "/var/lib/cni/x"}},
		"bridge conf with subnet": {`{"cniVersion":"0.4.0","name":"mynet","type":"bridge","bridge":"mynet0","ipam":{"type":"host-local","subnet":"10.22.0.0/16"}}`,
			CNIConfig{Name: "mynet", Plugin: "bridge", Bridge: "mynet0", IPAM: "host-local", Subnets: []netip.Prefix{pfx("10.22.0.0/16")}}},
		"bridge conflist with ranges": {`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"fd00::/64"}]]}},{"type":"firewall"}]}`,
			CNIConfig{Name: "n", Plugin: "bridge", Bridge: "cni0", IPAM: "host-local", Subnets: []netip.Prefix{pfx("10.1.2.0/24"), pfx("fd00::/64")}}},
		"other ipam": {`{"name":"n","type":"bridge","ipam":{"type":"whereabouts"}}`,
			CNIConfig{Name: "n", Plugin: "bridge", Bridge: "cni0", IPAM: "whereabouts"}},
		"flannel without delegate": {`{"name":"cbr0","type":"flannel"}`,
			CNIConfig{Name: "cbr0", Plugin: "flannel", Bridge: "cni0", IPAM: "host-local"}},
		"flannel with null delegate": {`{"name":"cbr0","type":"flannel","delegate":null}`,
			CNIConfig{Name: "cbr0", Plugin: "flannel", Bridge: "cni0", IPAM: "host-local"}},
		// host-local's directory is named after the network: a file name
		// of at most 255 bytes.
		"longest name": {`{"name":"` + strings.Repeat("n", 255) + `","type":"bridge"}`,
			CNIConfig{Name: strings.Repeat("n", 255), Plugin: "bridge", Bridge: "cni0", IPAM: "host-local"}},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := ParseCNIConfig([]byte(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.want, *c)
		})
	}
	for name, tc := range map[string]struct{ in, field string }{
		"not json":         {`{`, "(file)"},
		"no name":          {`{"type":"bridge"}`, "name"},
		"traversal name":   {`{"name":"../etc","type":"bridge"}`, "name"},
		"name too long":    {`{"name":"` + strings.Repeat("n", 256) + `","type":"bridge"}`, "name"},
		"no bridge plugin": {`{"name":"n","plugins":[{"type":"calico"}]}`, "plugins"},
		"other type":       {`{"name":"n","type":"ptp"}`, "type"},
		"bad delegate":     {`{"name":"n","type":"flannel","delegate":{"type":"ipvlan"}}`, "delegate.type"},
		"bad bridge":       {`{"name":"n","plugins":[{"type":"bridge","bridge":"a b"}]}`, "plugins[0].bridge"},
		"relative dataDir": {`{"name":"n","type":"bridge","ipam":{"dataDir":"var/lib"}}`, "ipam.dataDir"},
		"unclean dataDir":  {`{"name":"n","type":"bridge","ipam":{"dataDir":"/var/lib/../etc"}}`, "ipam.dataDir"},
		"host bits":        {`{"name":"n","type":"bridge","ipam":{"subnet":"10.1.2.1/24"}}`, "ipam.subnet"},
		"bad range":        {`{"name":"n","type":"bridge","ipam":{"ranges":[[{"subnet":"x"}]]}}`, "ipam.ranges[0][0].subnet"},
		// What is not an object at all is named by its index, with the value.
		"plugin not object":   {`{"name":"n","plugins":["bridge",{"type":"bridge"}]}`, "plugins[0]"},
		"delegate not object": {`{"name":"n","plugins":[{"type":"portmap"},{"type":"flannel","delegate":["bridge"]}]}`, "plugins[1].delegate"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseCNIConfig([]byte(tc.in))
			require.ErrorIs(t, err, ErrBadCNIConfig)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
			if strings.HasSuffix(name, "not object") {
				assert.Contains(t, []string{`"bridge"`, `["bridge"]`}, fe.Value, "%v", err)
				assert.Contains(t, err.Error(), "is not")
			}
		})
	}
}

// TestLayout: host-local's directory follows the CNI config's name and
// dataDir, moved under CNIDataDir when the host is mounted elsewhere.
func TestLayout(t *testing.T) {
	w := Want{CNIDataDir: "/host/var/lib/cni"}
	b, dir := layout(w, nil)
	assert.Equal(t, []string{"cni0", "/host/var/lib/cni/networks/cbr0"}, []string{b, dir})
	b, dir = layout(w, &CNIConfig{Name: "n", Bridge: "kbr0", DataDir: "/var/lib/cni/custom"})
	assert.Equal(t, []string{"kbr0", "/host/var/lib/cni/custom/n"}, []string{b, dir})
	w.Bridge = "mine"
	b, dir = layout(w, &CNIConfig{Name: "n", Bridge: "kbr0", DataDir: "/srv/ipam"})
	assert.Equal(t, []string{"mine", "/srv/ipam/n"}, []string{b, dir})
}

// TestParseRuleLine reads iptables -S lines, quotes included, and renders
// them back the same way.
func TestParseRuleLine(t *testing.T) {
	line := `-A FLANNEL-POSTRTG -s 10.244.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully`
	chain, spec, ok, err := parseRuleLine(line)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "FLANNEL-POSTRTG", chain)
	assert.Equal(t, []string{"-s", "10.244.0.0/16", "!", "-d", "224.0.0.0/4", "-m", "comment", "--comment", "flanneld masq", "-j", "MASQUERADE", "--random-fully"}, spec)
	assert.Equal(t, line, "-A "+chain+" "+joinSpec(spec))
	assert.Equal(t, []ruleCIDR{{index: 1, prefix: pfx("10.244.0.0/16")}, {index: 4, prefix: pfx("224.0.0.0/4"), neg: true}}, ruleCIDRs(spec))
	assert.Equal(t, "MASQUERADE", ruleTarget(spec))

	_, spec, _, err = parseRuleLine(`-A X -m comment --comment "a \"q\" \\ b" -d 10.0.0.1 -j RETURN`)
	require.NoError(t, err)
	assert.Equal(t, `a "q" \ b`, spec[3])
	assert.Equal(t, []ruleCIDR{{index: 5, prefix: pfx("10.0.0.1/32")}}, ruleCIDRs(spec))
	assert.Empty(t, ruleCIDRs([]string{"-j", "ACCEPT", "-s"}), "a match with no value names nothing")
	assert.Empty(t, ruleTarget([]string{"-s", "10.0.0.0/8", "-j"}), "a -j with no value is no target")
	assert.False(t, hasComment([]string{"-j", "RETURN", "--comment"}, ""), "a --comment with no value is no comment")

	_, _, ok, err = parseRuleLine("-N FLANNEL-FWD")
	assert.NoError(t, err)
	assert.False(t, ok)
	// A rule with no match and no target (it only counts packets) is a rule.
	chain, spec, ok, err = parseRuleLine("-A FORWARD")
	assert.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "FORWARD", chain)
	assert.Empty(t, spec)
	_, _, _, err = parseRuleLine(`-A X --comment "open`)
	assert.Error(t, err)
	_, _, _, err = parseRuleLine(`-A X --comment "open\`)
	assert.Error(t, err, "a quoted backslash at the end of the line escapes nothing")
}

// TestHasNetAdmin reads CAP_NET_ADMIN from /proc/PID/status.
func TestHasNetAdmin(t *testing.T) {
	assert.True(t, hasNetAdmin([]byte("Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001fffeffffff\n")))
	assert.True(t, hasNetAdmin([]byte("CapEff:\t0000000000001000\n")))
	assert.False(t, hasNetAdmin([]byte("CapEff:\t00000000a80425fb\n")), "docker's default set has no NET_ADMIN")
	assert.False(t, hasNetAdmin([]byte("CapEff:\tzz\n")))
	assert.False(t, hasNetAdmin(nil))
}
