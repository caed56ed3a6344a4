package nodenet

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDataplaneDeleteRouteMatchesTheDevice: a route to delete names its
// device; a route to the same destination through another device is not
// it and stays (a route of flanneld's through flannel.1 is not a stale
// cni0 route of the same subnet).
func TestDataplaneDeleteRouteMatchesTheDevice(t *testing.T) {
	n := newTestNode(t)
	a := n.bridge("bra")
	n.bridge("brb")
	n.route("10.99.0.0/24", "", a, false, 0)
	h, err := openHost(n.want("n1", "10.244.1.0/24", ""))
	require.NoError(t, err)
	defer h.close()
	dst := netip.MustParsePrefix("10.99.0.0/24")

	st, _, err := h.deleteRoute(&Action{Kind: ActionDeleteRoute, Route: &Route{Dst: dst, Dev: "brb"}})
	require.NoError(t, err)
	assert.Equal(t, StatusUnchanged, st, "no route to 10.99.0.0/24 through brb")
	assert.Contains(t, n.routeLines(), "10.99.0.0/24 dev bra")

	st, _, err = h.deleteRoute(&Action{Kind: ActionDeleteRoute, Route: &Route{Dst: dst, Dev: "bra"}})
	require.NoError(t, err)
	assert.Equal(t, StatusDone, st)
	assert.NotContains(t, n.routeLines(), "10.99.0.0/24 dev bra")
}
