package migrate

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/nodecidr"
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
		o.NodeMask = 32
		assert.NoError(t, o.Validate(), "--node-mask 32: the range 1..32 is inclusive")
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

// v3Pools reads pools through the CRD store but says it is the
// projectcalico.org/v3 API, as a V3Store does.
type v3Pools struct{ calico.PoolStore }

func (v3Pools) API() calico.API { return calico.APIProjectCalicoV3 }

// The permission checks name the API group the pools are written through:
// crd.projectcalico.org for the CRDs, projectcalico.org for the v3 API
// (the Calico API server). A check of the wrong group passes for a user
// who then cannot write the pools.
func TestCalicoAccessChecksNameThePoolsAPIGroup(t *testing.T) {
	dyn, _ := calicotest.NewDynamic()
	for _, tc := range []struct {
		pools calico.PoolStore
		group string
	}{{calico.NewCRDStore(dyn), "crd.projectcalico.org"}, {v3Pools{calico.NewCRDStore(dyn)}, "projectcalico.org"}} {
		m := &CalicoPodCIDRMigration{o: CalicoPodCIDROptions{Cluster: calico.Cluster{Pools: tc.pools}}}
		var verbs []string
		for _, c := range m.accessChecks() {
			if c.Resource == "ippools" {
				assert.Equal(t, tc.group, c.Group, "%s ippools", c.Verb)
				verbs = append(verbs, c.Verb)
			}
		}
		assert.Equal(t, []string{"get", "list", "create", "update", "delete"}, verbs)
	}
}

// calico.Apply's events reach the operator as progress lines, each naming
// its object when it has one, and the step report keeps those that say what
// was done: not the phase changes, nor the waits a rollout or Calico's
// release of the old pool repeats at every poll.
func TestCalicoEventsReportWhatWasDone(t *testing.T) {
	var progress []string
	env := &Env{progress: func(l string) { progress = append(progress, l) }}
	var sr StepReport
	on := calicoEvents(env, &sr)
	for _, e := range []calico.Event{
		{Type: calico.EventPhase, Message: "phase move-workloads"},
		{Type: calico.EventRolloutWait, Object: "Deployment default/web", Message: "waiting for Deployment default/web: 1 of 2 updated"},
		{Type: calico.EventLeftoversWait, Object: "IPPool old", Message: "waiting for Calico to release: 2 blocks"},
		{Type: calico.EventDisablePool, Object: "IPPool old", Message: `disable IPPool "old"`},
		{Type: calico.EventSkip, Message: "stopping after phase disable-old-pool as asked"},
	} {
		on(e)
	}
	assert.Equal(t, []string{
		"  calico rollout-wait Deployment default/web: waiting for Deployment default/web: 1 of 2 updated",
		"  calico leftovers-wait IPPool old: waiting for Calico to release: 2 blocks",
		`  calico disable-pool IPPool old: disable IPPool "old"`,
		"  calico skip: stopping after phase disable-old-pool as asked",
	}, progress)
	assert.Equal(t, []string{`disable-pool IPPool old: disable IPPool "old"`, "skip: stopping after phase disable-old-pool as asked"}, sr.Details)
}

// podFlag reads a flag as the component parses it: --flag=value or --flag
// value, the last one winning, from the named container (or the only one,
// whatever its name); a flag with no value after it is not set.
func TestPodFlagReadsTheNamedContainer(t *testing.T) {
	pod := func(cs ...corev1.Container) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{Containers: cs}} }
	c := func(name string, args ...string) corev1.Container {
		return corev1.Container{Name: name, Command: []string{"kube-controller-manager"}, Args: args}
	}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		want  string
		found bool
	}{
		{"equals form", pod(c("kube-controller-manager", "--cluster-cidr=10.200.0.0/16")), "10.200.0.0/16", true},
		{"separate value", pod(c("kube-controller-manager", "--cluster-cidr", "10.200.0.0/16")), "10.200.0.0/16", true},
		{"the last one wins", pod(c("kube-controller-manager", "--cluster-cidr=10.1.0.0/16", "--cluster-cidr", "10.2.0.0/16")), "10.2.0.0/16", true},
		{"no value after the flag", pod(c("kube-controller-manager", "--v=2", "--cluster-cidr")), "", false},
		{"a flag that starts the same", pod(c("kube-controller-manager", "--cluster-cidr-extra=1")), "", false},
		{"the only container, named otherwise", pod(c("controller", "--cluster-cidr=10.200.0.0/16")), "10.200.0.0/16", true},
		{"the named one of two", pod(c("sidecar", "--cluster-cidr=10.9.0.0/16"), c("kube-controller-manager", "--cluster-cidr=10.200.0.0/16")), "10.200.0.0/16", true},
		{"none of two named so", pod(c("sidecar", "--cluster-cidr=10.9.0.0/16"), c("other", "--cluster-cidr=10.8.0.0/16")), "", false},
	} {
		got, found := podFlag(tc.pod, "kube-controller-manager", "--cluster-cidr")
		assert.Equal(t, tc.want, got, tc.name)
		assert.Equal(t, tc.found, found, tc.name)
	}
}

// keptFamilyOf reads the family a one-family move keeps from
// kube-controller-manager's flags: its range, whether it is listed first,
// and its node mask, the component's default when the flags leave it out.
func TestKeptFamilyOf(t *testing.T) {
	v4, v6 := netip.MustParsePrefix("10.200.0.0/16"), netip.MustParsePrefix("fd00:20::/56")
	for _, tc := range []struct {
		name  string
		flags cidr.ControllerManagerFlags
		moved netip.Prefix
		want  keptFamily
	}{
		{"single-stack", cidr.ControllerManagerFlags{ClusterCIDR: "10.244.0.0/16"}, v4, keptFamily{}},
		{"IPv6 kept, second, its mask", cidr.ControllerManagerFlags{ClusterCIDR: "10.244.0.0/16,fd00:10::/56", NodeCIDRMaskSizeIPv6: 80}, v4,
			keptFamily{cidr: netip.MustParsePrefix("fd00:10::/56"), mask: 80}},
		{"IPv6 kept, default mask", cidr.ControllerManagerFlags{ClusterCIDR: "10.244.0.0/16,fd00:10::/56"}, v4,
			keptFamily{cidr: netip.MustParsePrefix("fd00:10::/56"), mask: cidr.DefaultNodeMaskIPv6}},
		{"IPv4 kept, first, --node-cidr-mask-size", cidr.ControllerManagerFlags{ClusterCIDR: "10.244.0.0/16,fd00:10::/56", NodeCIDRMaskSize: 25}, v6,
			keptFamily{cidr: netip.MustParsePrefix("10.244.0.0/16"), first: true, mask: 25}},
		{"IPv4 kept, default mask", cidr.ControllerManagerFlags{ClusterCIDR: "10.244.0.0/16,fd00:10::/56"}, v6,
			keptFamily{cidr: netip.MustParsePrefix("10.244.0.0/16"), first: true, mask: cidr.DefaultNodeMaskIPv4}},
		{"unreadable", cidr.ControllerManagerFlags{ClusterCIDR: "nope"}, v4, keptFamily{}},
	} {
		assert.Equal(t, tc.want, keptFamilyOf(tc.flags, tc.moved), tc.name)
	}
}

// sharedGroups finds the worker steps that leave one IPv4 podCIDR, pairs
// included, in the order of their first step; a step alone on its subnet,
// and control-plane steps, are in no group.
func TestSharedGroupsOfAPlan(t *testing.T) {
	st := func(node, old string, cp bool) nodecidr.Step {
		return nodecidr.Step{Node: node, ControlPlane: cp, OldPodCIDRs: []string{old}, NewPodCIDRs: []string{"10.245.0.0/24"}}
	}
	p := &nodecidr.Plan{Steps: []nodecidr.Step{
		st("w1", "10.244.1.0/24", false), st("w2", "10.244.2.0/24", false), st("w3", "10.244.1.0/24", false),
		st("w4", "10.244.4.0/24", false), st("w5", "10.244.4.0/24", false), st("w6", "10.244.4.0/24", false),
		st("cp1", "10.244.2.0/24", true),
	}}
	assert.Equal(t, []sharedGroup{
		{subnet: netip.MustParsePrefix("10.244.1.0/24"), nodes: []string{"w1", "w3"}},
		{subnet: netip.MustParsePrefix("10.244.4.0/24"), nodes: []string{"w4", "w5", "w6"}},
	}, sharedGroups(p))
}
