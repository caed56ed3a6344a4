package migrate

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/flannel"
)

// The constructors fill each zero option with the default its doc comment
// names, and keep every option given. A default lost (a zero poll interval
// spins, a zero timeout gives up at once) changes how a run waits without
// failing any run that sets the option, as the other tests do.
func TestConstructorsFillTheDocumentedDefaults(t *testing.T) {
	to := netip.MustParsePrefix("10.200.0.0/16")
	t.Run("calico", func(t *testing.T) {
		kube, _ := calicotest.NewKube()
		dyn, _ := calicotest.NewDynamic()
		cl := calico.Cluster{Kube: kube, Pools: calico.NewCRDStore(dyn)}
		m, err := CalicoPodCIDR(CalicoPodCIDROptions{Cluster: cl, To: to})
		require.NoError(t, err)
		assert.Equal(t, CalicoDefaultOldPool, m.o.OldPool)
		assert.Equal(t, calico.MoveRollout, m.o.Move)
		assert.Equal(t, 2*time.Second, m.o.PollInterval)
		assert.Equal(t, 10*time.Minute, m.o.RolloutTimeout)
		assert.Equal(t, 2*time.Minute, m.o.DrainTimeout)
		assert.Equal(t, 20*time.Second, m.o.ProbeTimeout)

		given := CalicoPodCIDROptions{Cluster: cl, To: to, OldPool: "pods", Move: calico.MoveEvict,
			PollInterval: time.Millisecond, RolloutTimeout: 3 * time.Second, DrainTimeout: 4 * time.Second, ProbeTimeout: 5 * time.Second}
		m, err = CalicoPodCIDR(given)
		require.NoError(t, err)
		assert.Equal(t, given, m.o)
	})
	t.Run("flannel", func(t *testing.T) {
		o := FlannelPodCIDROptions{Kube: fake.NewClientset(), Network: netip.MustParsePrefix("10.240.0.0/12"),
			Namespace: flannel.DefaultNetConfNamespace, ConfigMap: flannel.DefaultNetConfName, FlannelSelector: "app=flannel"}
		m, err := FlannelPodCIDR(o)
		require.NoError(t, err)
		assert.Equal(t, cidr.DefaultNodeMaskIPv4, m.o.NodeMask)
		assert.Equal(t, 2*time.Minute, m.o.HealthTimeout)
		assert.Equal(t, time.Second, m.o.PollInterval)

		o.NodeMask, o.HealthTimeout, o.PollInterval = 26, 3*time.Second, time.Millisecond
		m, err = FlannelPodCIDR(o)
		require.NoError(t, err)
		assert.Equal(t, o, m.o)
	})
	t.Run("servicecidr", func(t *testing.T) {
		_, c := scCluster(t)
		o := ServiceCIDROptions{Client: c, To: []netip.Prefix{netip.MustParsePrefix("172.24.0.0/15")}}
		m, err := ServiceCIDR(o)
		require.NoError(t, err)
		assert.Equal(t, 2*time.Minute, m.o.DrainTimeout)
		assert.Equal(t, 2*time.Minute, m.o.ReadyTimeout)
		assert.Equal(t, time.Second, m.o.PollInterval)

		o.DrainTimeout, o.ReadyTimeout, o.PollInterval = 3*time.Second, 4*time.Second, time.Millisecond
		m, err = ServiceCIDR(o)
		require.NoError(t, err)
		assert.Equal(t, o, m.o)
	})
}
