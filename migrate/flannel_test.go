package migrate_test

import (
	"encoding/json"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

const flNetConf = `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`

// flCluster: w1 and w3 share 10.244.1.0/24 (w1 older), w4 has no podCIDR.
func flCluster(netConf string) *fake.Clientset {
	cs, _ := nodecidrtest.New([]runtime.Object{
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: flannel.DefaultNetConfName, Namespace: flannel.DefaultNetConfNamespace, ResourceVersion: "1"},
			Data:       map[string]string{flannel.NetConfKey: netConf},
		},
		flNode("w1", "10.244.1.0/24", 0),
		flNode("w2", "10.244.2.0/24", 0),
		flNode("w3", "10.244.1.0/24", 3600),
		flNode("w4", "", 3600),
	}...)
	return cs
}

func flOptions(cs *fake.Clientset) migrate.FlannelPodCIDROptions {
	return migrate.FlannelPodCIDROptions{
		Kube:            cs,
		Network:         netip.MustParsePrefix("10.240.0.0/12"),
		Namespace:       flannel.DefaultNetConfNamespace,
		ConfigMap:       flannel.DefaultNetConfName,
		FlannelSelector: "app=flannel",
		PollInterval:    10 * time.Millisecond,
	}
}

func TestFlannelOptionsRefusedBeforeTheCluster(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name string
		edit func(*migrate.FlannelPodCIDROptions)
		want string
	}{
		{"no client", func(o *migrate.FlannelPodCIDROptions) { o.Kube = nil }, "Kube is required"},
		{"no network", func(o *migrate.FlannelPodCIDROptions) { o.Network = netip.Prefix{} }, "--network is required"},
		{"host bits", func(o *migrate.FlannelPodCIDROptions) {
			o.Network = netip.PrefixFrom(netip.MustParseAddr("10.240.0.1"), 12)
		}, "host bits"},
		{"ipv6", func(o *migrate.FlannelPodCIDROptions) { o.Network = p("fd00::/48") }, "only an IPv4 Network"},
		{"node range without rewrite", func(o *migrate.FlannelPodCIDROptions) { o.NodeRange = p("10.240.0.0/16") }, "needs --rewrite-nodes"},
		{"node range outside", func(o *migrate.FlannelPodCIDROptions) { o.RewriteNodes, o.NodeRange = true, p("10.20.0.0/16") }, "must lie inside --network"},
		{"empty selector", func(o *migrate.FlannelPodCIDROptions) { o.FlannelSelector = "" }, "selects every pod"},
		{"empty namespace", func(o *migrate.FlannelPodCIDROptions) { o.Namespace = "" }, "--namespace"},
		{"negative timeout", func(o *migrate.FlannelPodCIDROptions) { o.HealthTimeout = -1 }, "--health-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := flCluster(flNetConf)
			o := flOptions(cs)
			tc.edit(&o)
			_, err := migrate.FlannelPodCIDR(o)
			require.ErrorIs(t, err, migrate.ErrInvalidInput)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, cs.Actions(), "nothing read or written")
		})
	}
}

// set-network implements Checker: a run whose journal lacks the step but
// whose net-conf.json already holds the new Network does not rewrite it.
func TestFlannelSetNetworkFoundDone(t *testing.T) {
	cs := flCluster(strings.Replace(flNetConf, "10.244.0.0/16", "10.240.0.0/12", 1))
	o := flOptions(cs)
	o.From, o.Continue = netip.MustParsePrefix("10.244.0.0/16"), true
	m, err := migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	r := migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}
	rep, err := r.Run(t.Context(), m)
	require.NoError(t, err)
	require.Len(t, rep.Steps, 5)
	assert.Equal(t, migrate.FlannelStepNetwork, rep.Steps[1].Name)
	assert.Equal(t, migrate.StatusDone, rep.Steps[1].Status)
	assert.Contains(t, rep.Steps[1].Details[0], "found done: kube-flannel/kube-flannel-cfg net-conf.json holds Network 10.240.0.0/12")
	for _, a := range cs.Actions() {
		assert.False(t, a.GetVerb() == "update" && a.GetResource().Resource == "configmaps", "net-conf.json rewritten: %v", a)
	}
}

// A reviewed Plan is carried out while the cluster matches it, and refused
// with ErrStalePlan once it has moved on.
func TestFlannelApplyPlan(t *testing.T) {
	cs := flCluster(flNetConf)
	m, err := migrate.FlannelPodCIDR(flOptions(cs))
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "j")
	r := migrate.Runner{Mode: migrate.ModeApply, JournalDir: dir}
	p, err := r.Plan(t.Context(), m)
	require.NoError(t, err)
	var intent migrate.FlannelPodCIDRIntent
	require.NoError(t, json.Unmarshal(p.Intent, &intent))
	assert.Equal(t, migrate.FlannelPodCIDRIntent{From: netip.MustParsePrefix("10.244.0.0/16"), To: netip.MustParsePrefix("10.240.0.0/12")}, intent)

	// Another node without a podCIDR joins: the fix step would change more.
	stale := flCluster(flNetConf)
	w5 := flNode("w5", "", 7200)
	w5.ResourceVersion = ""
	_, err = stale.CoreV1().Nodes().Create(t.Context(), w5, metav1.CreateOptions{})
	require.NoError(t, err)
	ms, err := migrate.FlannelPodCIDR(flOptions(stale))
	require.NoError(t, err)
	_, err = (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).ApplyPlan(t.Context(), ms, p)
	require.ErrorIs(t, err, migrate.ErrStalePlan)

	rep, err := r.ApplyPlan(t.Context(), m, p)
	require.NoError(t, err)
	require.True(t, rep.Paused(), "the controller-manager step waits for the operator")
	assert.Equal(t, migrate.FlannelStepControllerManager, rep.Waiting.Step)
	assert.Equal(t, migrate.StatusCompleted, rep.Steps[0].Status)
	assert.Equal(t, migrate.StatusCompleted, rep.Steps[1].Status)
}

// HostPlans: a node the fix step moved and the rewrite step renumbered
// appears once, from its first subnet to its last; a node that had no
// subnet has no host steps.
func TestFlannelHostPlans(t *testing.T) {
	cs := flCluster(flNetConf)
	o := flOptions(cs)
	o.RewriteNodes, o.NodeRange, o.Continue = true, netip.MustParsePrefix("10.240.0.0/16"), true
	o.FlannelSelector = "app in (flannel)" // the same pods, written otherwise: the host steps use it
	m, err := migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
	require.NoError(t, err)
	require.False(t, rep.Paused())
	hp := map[string]migrate.FlannelHostPlan{}
	var names []string
	for _, h := range m.HostPlans() {
		hp[h.Node] = h
		names = append(names, h.Node)
	}
	assert.Equal(t, []string{"w1", "w2", "w3", "w4"}, names)
	w3 := hp["w3"]
	assert.Equal(t, "10.244.1.0/24", w3.From.String(), "first subnet")
	assert.True(t, netip.MustParsePrefix("10.240.0.0/16").Contains(w3.To.Addr()), "last subnet %s", w3.To)
	assert.NotEmpty(t, w3.Steps)
	assert.True(t, slices.ContainsFunc(w3.Steps, func(s flannel.HostStep) bool {
		return strings.Contains(s.Command, "delete pod -l 'app in (flannel)' --field-selector spec.nodeName=w3")
	}), "the flannel pod is found with --flannel-selector, quoted for the shell: %v", w3.Steps)
	assert.Equal(t, "10.240.2.0/24", hp["w2"].To.String(), "the rebase keeps the offset")
	assert.Equal(t, "10.244.2.0/24", hp["w2"].From.String())
	// w4 had no subnet before the fix step, then was renumbered: its host
	// holds the fix step's subnet, which it must clean up.
	assert.True(t, hp["w4"].From.IsValid())
	// The printed host steps are these plans.
	cleanup := rep.Steps[4]
	for _, h := range m.HostPlans() {
		for _, s := range h.Steps {
			assert.Contains(t, cleanup.Details, "  ["+s.Where+"] "+s.Command+"   # "+s.Why)
		}
	}
}
