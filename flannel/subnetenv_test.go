package flannel

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const flanneldSubnetEnv = "FLANNEL_NETWORK=172.7.0.0/16\nFLANNEL_SUBNET=172.7.5.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=true\n"

func TestParseSubnetEnv(t *testing.T) {
	e, err := ParseSubnetEnv([]byte(flanneldSubnetEnv))
	require.NoError(t, err)
	assert.Equal(t, netip.MustParsePrefix("172.7.0.0/16"), e.Network)
	assert.Equal(t, netip.MustParsePrefix("172.7.5.1/24"), e.Subnet)
	assert.Equal(t, 1500, e.MTU)
	assert.True(t, e.IPMasq)
	assert.Equal(t, SubnetKey{IPv4: netip.MustParsePrefix("172.7.5.0/24")}, e.Lease())
	assert.Equal(t, flanneldSubnetEnv, string(e.Render()), "renders byte for byte what flanneld writes")

	dual := "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:3::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n"
	e, err = ParseSubnetEnv([]byte(dual))
	require.NoError(t, err)
	assert.Equal(t, dual, string(e.Render()))

	// dotenv syntax: comments, export, quotes, CRLF, other variables kept.
	e, err = ParseSubnetEnv([]byte("# written by hand\r\nexport FLANNEL_SUBNET=\"10.1.2.1/24\"\r\nFLANNEL_IPMASQ='true' # masq\nOTHER=a b\n\n"))
	require.NoError(t, err)
	assert.Equal(t, netip.MustParsePrefix("10.1.2.1/24"), e.Subnet)
	assert.True(t, e.IPMasq)
	assert.Equal(t, map[string]string{"OTHER": "a b"}, e.Extra)
	assert.Equal(t, "FLANNEL_SUBNET=10.1.2.1/24\nFLANNEL_IPMASQ=true\nOTHER=\"a b\"\n", string(e.Render()))
}

func TestParseSubnetEnvErrors(t *testing.T) {
	for name, in := range map[string]string{
		"no subnet":     "FLANNEL_NETWORK=10.0.0.0/8\n",
		"no equals":     "FLANNEL_SUBNET\n",
		"bad cidr":      "FLANNEL_SUBNET=10.1.2.1\n",
		"wrong family":  "FLANNEL_SUBNET=fd00::1/64\n",
		"list":          "FLANNEL_SUBNET=10.1.2.1/24,10.1.3.1/24\n",
		"bad mtu":       "FLANNEL_SUBNET=10.1.2.1/24\nFLANNEL_MTU=big\n",
		"bad masq":      "FLANNEL_SUBNET=10.1.2.1/24\nFLANNEL_IPMASQ=maybe\n",
		"bad key":       "1X=2\n",
		"open quote":    "FLANNEL_SUBNET=\"10.1.2.1/24\n",
		"after quote":   "FLANNEL_SUBNET=\"10.1.2.1/24\" x\n",
		"empty":         "",
		"ipv6 mismatch": "FLANNEL_IPV6_SUBNET=10.1.2.1/24\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseSubnetEnv([]byte(in))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrBadSubnetEnv)
		})
	}
}

// TestParseSubnetEnvErrorsNameTheLine: an error in a line names the line
// and quotes it; one about the whole file names neither.
func TestParseSubnetEnvErrorsNameTheLine(t *testing.T) {
	_, err := ParseSubnetEnv([]byte("FLANNEL_SUBNET=10.1.2.1/24\nFLANNEL_MTU=big\n"))
	var pe *ParseError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "subnet.env line 2", pe.What)
	assert.Equal(t, "FLANNEL_MTU=big", pe.Input)
	_, err = ParseSubnetEnv([]byte("FLANNEL_NETWORK=10.0.0.0/8\n"))
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, ParseError{What: "subnet.env", Reason: "neither FLANNEL_SUBNET nor FLANNEL_IPV6_SUBNET is set; it was not written by flanneld", Err: ErrBadSubnetEnv}, *pe)
}

func TestNewSubnetEnv(t *testing.T) {
	c, err := ParseConfig([]byte(`{"Network": "172.7.0.0/16", "Backend": {"Type": "host-gw"}}`))
	require.NoError(t, err)
	e := NewSubnetEnv(c, SubnetKey{IPv4: netip.MustParsePrefix("172.7.5.0/24")}, 1500, true)
	assert.Equal(t, flanneldSubnetEnv, string(e.Render()))
}

func TestCheckSubnetEnv(t *testing.T) {
	e, err := ParseSubnetEnv([]byte(flanneldSubnetEnv))
	require.NoError(t, err)
	want := SubnetEnvExpectation{Node: "node-a", Network: netip.MustParsePrefix("172.7.0.0/16"),
		Subnet: SubnetKey{IPv4: netip.MustParsePrefix("172.7.5.0/24")}, Source: "lease 172.7.5.0-24"}
	assert.Empty(t, CheckSubnetEnv(e, want))

	want.Subnet.IPv4 = netip.MustParsePrefix("172.7.9.0/24")
	want.Network = netip.MustParsePrefix("172.8.0.0/16")
	fs := CheckSubnetEnv(e, want)
	require.Len(t, fs, 2)
	assert.Equal(t, FindingSubnetEnvStale, fs[0].Kind)
	assert.Equal(t, cidr.SeverityError, fs[0].Severity)
	assert.Equal(t, []string{"node-a"}, fs[0].Nodes)
	assert.Contains(t, fs[0].Detail, `failed to set bridge addr: "cni0" already has an IP address different from 172.7.9.1/24`)
	assert.Equal(t, FindingSubnetEnvMismatch, fs[1].Kind)

	e.Subnet = netip.MustParsePrefix("172.7.9.7/24")
	want.Network = e.Network
	fs = CheckSubnetEnv(e, want)
	require.Len(t, fs, 1)
	assert.Contains(t, fs[0].Detail, "first address, 172.7.9.1/24")

	fs = CheckSubnetEnv(e, SubnetEnvExpectation{Subnet: SubnetKey{IPv4: want.Subnet.IPv4, IPv6: netip.MustParsePrefix("fd00::/64")}})
	require.Len(t, fs, 2)
	assert.Contains(t, fs[1].Detail, "no FLANNEL_IPV6_SUBNET")
}

func TestCleanupSteps(t *testing.T) {
	steps := CleanupSteps(CleanupOptions{Node: "node-a", BackendType: "vxlan", IPv6: true, KubeSubnetManager: true,
		From: SubnetKey{IPv4: netip.MustParsePrefix("10.244.3.0/24")}, To: SubnetKey{IPv4: netip.MustParsePrefix("10.244.9.0/24")}})
	var cmds []string
	for _, s := range steps {
		cmds = append(cmds, s.Where+": "+s.Command)
		assert.NotEmpty(t, s.Why)
	}
	assert.Equal(t, []string{
		"cluster: kubectl cordon node-a",
		"node: ip link delete cni0",
		"node: ip link delete flannel.1",
		"node: ip link delete flannel-v6.1",
		"node: rm -rf /var/lib/cni/networks/cbr0",
		"node: rm -f /run/flannel/subnet.env",
		"cluster: kubectl -n kube-flannel delete pod -l app=flannel --field-selector spec.nodeName=node-a",
		"node: ip route flush exact 10.244.9.0/24 proto boot",
		"cluster: kubectl delete pods --all-namespaces --field-selector spec.nodeName=node-a,spec.hostNetwork=false",
		"cluster: kubectl uncordon node-a",
	}, cmds)
	assert.Contains(t, steps[1].Why, "already has an IP address different from 10.244.9.1/24")

	// host-gw in etcd mode: no backend device, flanneld is a host service; VNI honoured for vxlan.
	steps = CleanupSteps(CleanupOptions{Node: "n", BackendType: "host-gw"})
	joined := ""
	for _, s := range steps {
		joined += s.Command + "\n"
	}
	assert.NotContains(t, joined, "flannel.1")
	assert.Contains(t, joined, "systemctl restart flanneld")
	steps = CleanupSteps(CleanupOptions{Node: "n", Backend: []byte(`{"Type":"vxlan","VNI":4}`)})
	assert.True(t, strings.Contains(steps[2].Command, "flannel.4"), steps[2].Command)
}

// TestCleanupDeletesTheVXLANDeviceFlanneldNamed: flanneld's vxlan backend
// names its device flannel.<VNI>, with VNI 1 when the config gives none (or
// null), and keeps a VNI of 0 when it is given (flannel-io/flannel v0.28.10,
// pkg/backend/vxlan parseVXLANConfig).
func TestCleanupDeletesTheVXLANDeviceFlanneldNamed(t *testing.T) {
	for backend, dev := range map[string]string{
		``:                            "flannel.1",
		`{"Type":"vxlan"}`:            "flannel.1",
		`{"Type":"vxlan","VNI":null}`: "flannel.1",
		`{"Type":"vxlan","VNI":0}`:    "flannel.0",
		`{"Type":"vxlan","vni":7}`:    "flannel.7",
	} {
		steps := CleanupSteps(CleanupOptions{Node: "n", BackendType: "vxlan", Backend: []byte(backend)})
		require.Greater(t, len(steps), 2, backend)
		assert.Equal(t, "ip link delete "+dev, steps[2].Command, backend)
	}
}
