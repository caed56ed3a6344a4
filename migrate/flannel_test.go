package migrate_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

const flNetConf = `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`

// flCluster: w1 and w3 share 10.244.1.0/24 (w1 older), w4 has no podCIDR.
func flCluster(netConf string) *fake.Clientset {
	cs, _ := flClusterOf(netConf,
		flNode("w1", "10.244.1.0/24", 0),
		flNode("w2", "10.244.2.0/24", 0),
		flNode("w3", "10.244.1.0/24", 3600),
		flNode("w4", "", 3600),
	)
	return cs
}

// flClusterOf is a cluster of nodes whose flannel ConfigMap holds netConf.
func flClusterOf(netConf string, nodes ...runtime.Object) (*fake.Clientset, *nodecidrtest.Server) {
	return nodecidrtest.New(append([]runtime.Object{
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: flannel.DefaultNetConfName, Namespace: flannel.DefaultNetConfNamespace, ResourceVersion: "1"},
			Data:       map[string]string{flannel.NetConfKey: netConf},
		},
	}, nodes...)...)
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
		{"--out a file", func(o *migrate.FlannelPodCIDROptions) {
			o.Manifests = t.TempDir()
			o.Out = filepath.Join(o.Manifests, "kube-controller-manager.yaml")
			require.NoError(t, os.WriteFile(o.Out, nil, 0o600))
		}, "exists and is not a directory"},
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

// A rerun must ask for the move its journal records: the same --from (or
// none), --network and flags; any other is refused in Prepare, before the
// first write, naming what the journal holds.
func TestFlannelRerunMustAskForTheJournaledMove(t *testing.T) {
	cs := flCluster(flNetConf)
	dir := filepath.Join(t.TempDir(), "j")
	run := func(edit func(*migrate.FlannelPodCIDROptions)) (*migrate.Report, error) {
		o := flOptions(cs)
		edit(&o)
		m, err := migrate.FlannelPodCIDR(o)
		require.NoError(t, err)
		return (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: dir}).Run(t.Context(), m)
	}
	rep, err := run(func(*migrate.FlannelPodCIDROptions) {})
	require.NoError(t, err)
	require.True(t, rep.Paused(), "the controller-manager step waits for the operator")
	rep, err = run(func(o *migrate.FlannelPodCIDROptions) { o.From = netip.MustParsePrefix("10.244.0.0/16") })
	require.NoError(t, err, "--from as journaled")
	require.True(t, rep.Paused())
	for name, edit := range map[string]func(*migrate.FlannelPodCIDROptions){
		"another --from":    func(o *migrate.FlannelPodCIDROptions) { o.From = netip.MustParsePrefix("10.245.0.0/16") },
		"another --network": func(o *migrate.FlannelPodCIDROptions) { o.Network = netip.MustParsePrefix("10.224.0.0/11") },
		"make-before-break": func(o *migrate.FlannelPodCIDROptions) { o.MakeBeforeBreak = true },
	} {
		_, err := run(edit)
		require.ErrorIs(t, err, migrate.ErrInvalidInput, name)
		assert.Contains(t, err.Error(), "records a move 10.244.0.0/16 -> 10.240.0.0/12 (rewrite-nodes false, node-range none, make-before-break false, fix-only false)", name)
	}
}

// The fix step journals its node plan before its first write, and only a
// plan with work: an empty plan journaled would be carried out by a rerun
// in place of one that sees a node broken meanwhile. Its report counts the
// nodes moved.
func TestFlannelFixPlanJournaledOnlyWithWork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cs      *fake.Clientset
		journal bool
		report  string
	}{
		{"a duplicate and a node without podCIDR", flCluster(flNetConf), true, "moved 2 node(s), 0 already done; delete->create gap p50 "},
		{"every node healthy", func() *fake.Clientset {
			cs, _ := flClusterOf(flNetConf, flNode("w1", "10.244.1.0/24", 0), flNode("w2", "10.244.2.0/24", 0))
			return cs
		}(), false, "no node needs a change"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := migrate.FlannelPodCIDR(flOptions(tc.cs))
			require.NoError(t, err)
			dir := filepath.Join(t.TempDir(), "j")
			rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: dir}).Run(t.Context(), m)
			require.NoError(t, err)
			require.True(t, rep.Paused())
			require.Equal(t, migrate.FlannelStepFix, rep.Steps[0].Name)
			assert.Equal(t, tc.journal, slices.Contains(migrate.JournalKeys(t, dir), migrate.FlannelFixPlanKey))
			found := false
			for _, d := range rep.Steps[0].Details {
				found = found || strings.HasPrefix(d, tc.report)
			}
			assert.True(t, found, "%q in %q", tc.report, rep.Steps[0].Details)
			if tc.journal {
				assert.Contains(t, strings.Join(rep.Steps[0].Details, "\n"), " w4: (none) -> 10.244.", "a node without podCIDR")
			}
		})
	}
}

// After a node moves, its workload pods are deleted so their controllers
// recreate them with addresses of the new subnet, and the next node waits
// until this one is healthy: every pod on it runs, but those that ended or
// are being deleted. A server-dry-run recreates no node, so it deletes no
// pod and does not wait; an apply run deletes the pod a controller
// recreates, leaves the bare one, and stops once --health-timeout is over
// while that one does not run, naming it.
func TestFlannelNodeHooksInDryRunAndApply(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase, owned bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{NodeName: "w3"}, Status: corev1.PodStatus{Phase: phase}}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "uid-rs", Controller: ptr.To(true)}}
		}
		return p
	}
	ended := []runtime.Object{pod("job-done", corev1.PodSucceeded, false), pod("job-failed", corev1.PodFailed, false)}
	leaving := pod("leaving", corev1.PodPending, false)
	leaving.DeletionTimestamp, leaving.Finalizers = ptr.To(metav1.Now()), []string{"example.com/hold"}
	run := func(mode migrate.Mode, pods ...runtime.Object) (*fake.Clientset, *migrate.Report, error) {
		cs, _ := flClusterOf(flNetConf, append(pods,
			flNode("w1", "10.244.1.0/24", 0), flNode("w2", "10.244.2.0/24", 0), flNode("w3", "10.244.1.0/24", 3600))...)
		o := flOptions(cs)
		o.HealthTimeout = 50 * time.Millisecond
		m, err := migrate.FlannelPodCIDR(o)
		require.NoError(t, err)
		rep, err := (&migrate.Runner{Mode: mode, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
		return cs, rep, err
	}
	podDeletes := func(cs *fake.Clientset) []string {
		var out []string
		for _, a := range cs.Actions() {
			if d, ok := a.(k8stesting.DeleteActionImpl); ok && a.GetResource().Resource == "pods" {
				out = append(out, d.Name)
				assert.Empty(t, d.DeleteOptions.DryRun, "pod %s", d.Name)
			}
		}
		return out
	}

	t.Run("server-dry-run", func(t *testing.T) {
		cs, _, err := run(migrate.ModeServerDryRun, pod("web-1", corev1.PodRunning, true), pod("solo", corev1.PodPending, false))
		require.NoError(t, err, "no wait for the pending pod")
		assert.Empty(t, podDeletes(cs))
	})
	t.Run("apply, a pod that does not run", func(t *testing.T) {
		cs, _, err := run(migrate.ModeApply, pod("web-1", corev1.PodRunning, true), pod("solo", corev1.PodPending, false))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "node w3 not healthy after 50ms: pod default/solo is Pending")
		assert.Equal(t, []string{"web-1"}, podDeletes(cs), "the bare pod is left for the operator")
	})
	t.Run("apply, pods that ended or are being deleted", func(t *testing.T) {
		_, rep, err := run(migrate.ModeApply, append(ended, leaving)...)
		require.NoError(t, err)
		assert.True(t, rep.Paused(), "on to the operator's step")
	})
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

// A dual-stack flannel cluster (kube-controller-manager with
// --cluster-cidr=10.244.0.0/16,fd00:10:244::/56; w1 and w3 share their IPv4
// subnet, w4 has none): the fix step gives w3 a free IPv4 subnet and keeps
// its IPv6 one, gives w4 a pair, and the operator is asked for
// --cluster-cidr=10.240.0.0/12,fd00:10:244::/56, which the mirror pod then
// shows. Without the IPv6 range in the flags, the run is refused before the
// first write: the IPv4-only flag would crash-loop kube-controller-manager
// on every dual-stack node.
func TestFlannelDualStackKeepsIPv6(t *testing.T) {
	kcm := func(clusterCIDR string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-cp", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"component": "kube-controller-manager"}},
			Spec: corev1.PodSpec{NodeName: "cp", HostNetwork: true, Containers: []corev1.Container{{Name: "kube-controller-manager", Command: []string{"kube-controller-manager",
				"--allocate-node-cidrs=true", "--cluster-cidr=" + clusterCIDR, "--node-cidr-mask-size-ipv4=24", "--node-cidr-mask-size-ipv6=64", "--service-cluster-ip-range=10.96.0.0/12,fd00:10:96::/112"}}}},
		}
	}
	dual := func(n *corev1.Node, v6 string) *corev1.Node {
		if v6 != "" {
			n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, v6)
		}
		return n
	}
	cluster := func(flag string) (*fake.Clientset, *nodecidrtest.Server) {
		return nodecidrtest.New([]runtime.Object{
			&corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: flannel.DefaultNetConfName, Namespace: flannel.DefaultNetConfNamespace, ResourceVersion: "1"},
				Data:       map[string]string{flannel.NetConfKey: `{"Network": "10.244.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan"}}`},
			},
			kcm(flag),
			dual(flNode("w1", "10.244.1.0/24", 0), "fd00:10:244:1::/64"),
			dual(flNode("w2", "10.244.2.0/24", 0), "fd00:10:244:2::/64"),
			dual(flNode("w3", "10.244.1.0/24", 3600), "fd00:10:244:3::/64"),
			flNode("w4", "", 3600),
		}...)
	}

	for _, tc := range []struct{ name, flag, want string }{
		{"IPv4 flags only: refused", "10.244.0.0/16", "node w1 holds the IPv6 podCIDR fd00:10:244:1::/64, but kube-controller-manager's --cluster-cidr has no IPv6 range holding it (no IPv6 range found): the runbook would ask for --cluster-cidr=10.240.0.0/12 and kube-controller-manager would crash-loop"},
		{"an IPv6 range that does not hold the nodes': refused", "10.244.0.0/16,fd00:99::/56", "node w1 holds the IPv6 podCIDR fd00:10:244:1::/64, but kube-controller-manager's --cluster-cidr has no IPv6 range holding it (it has fd00:99::/56)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, _ := cluster(tc.flag)
			m, err := migrate.FlannelPodCIDR(flOptions(cs))
			require.NoError(t, err)
			_, err = (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
			require.ErrorIs(t, err, migrate.ErrInvalidInput)
			assert.Contains(t, err.Error(), tc.want)
			for _, a := range cs.Actions() {
				assert.Contains(t, []string{"get", "list", "watch", "create"}, a.GetVerb(), "nothing written but the access review: %v", a)
				if a.GetVerb() == "create" {
					assert.Contains(t, a.GetResource().Resource, "accessreviews")
				}
			}
		})
	}

	t.Run("dual-stack flags: IPv6 kept", func(t *testing.T) {
		cs, srv := cluster("10.244.0.0/16,fd00:10:244::/56")
		m, r, rep := flRunToTheControllerManager(t, cs)
		assert.Contains(t, strings.Join(rep.Waiting.Instructions, "\n"), "set --cluster-cidr=10.240.0.0/12,fd00:10:244::/56 in")
		pods := map[string][]string{}
		for _, n := range srv.Nodes() {
			pods[n.Name] = n.Spec.PodCIDRs
		}
		assert.Equal(t, []string{"10.244.1.0/24", "fd00:10:244:1::/64"}, pods["w1"])
		assert.Equal(t, []string{"10.244.2.0/24", "fd00:10:244:2::/64"}, pods["w2"])
		require.Len(t, pods["w3"], 2)
		assert.NotEqual(t, "10.244.1.0/24", pods["w3"][0], "w3 leaves w1's IPv4 subnet")
		assert.Equal(t, "fd00:10:244:3::/64", pods["w3"][1], "w3 keeps its IPv6 subnet")
		require.Len(t, pods["w4"], 2, "w4 gets a pair")
		assert.True(t, netip.MustParsePrefix("fd00:10:244::/56").Contains(netip.MustParsePrefix(pods["w4"][1]).Addr()))

		// The operator restarts kube-controller-manager: an IPv4-only flag
		// is not taken for the new one, the dual-stack one is.
		for _, flag := range []string{"10.240.0.0/12", "10.240.0.0/12,fd00:10:244::/56"} {
			srv.AddPod(kcm(flag)) // the kubelet's new mirror pod
			rep, err := r.Run(t.Context(), m)
			require.NoError(t, err)
			if flag == "10.240.0.0/12" {
				require.True(t, rep.Paused(), "an IPv4-only flag is not the new one")
				continue
			}
			require.False(t, rep.Paused(), "%+v", rep.Waiting)
		}
	})
}

// A caller that may not roll flannel's DaemonSet (the last step) is
// refused before the first write, naming the permission, not after every
// node moved.
func TestFlannelChecksTheDaemonSetRollBeforeTheFirstWrite(t *testing.T) {
	cs := flCluster(flNetConf)
	nodecidrtest.Authorize(cs, nodecidrtest.Deny{Verb: "patch", Resource: "daemonsets"})
	m, err := migrate.FlannelPodCIDR(flOptions(cs))
	require.NoError(t, err)
	_, err = (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
	require.ErrorIs(t, err, access.ErrDenied)
	assert.Contains(t, err.Error(), "patch daemonsets.apps in namespace "+flannel.DefaultNetConfNamespace)
	for _, a := range cs.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
		default:
			assert.Equal(t, "selfsubjectaccessreviews", a.GetResource().Resource, "nothing written: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// FixOnly (seed 001): the duplicate w3 and w4 without a podCIDR get free
// subnets of the Network in use; net-conf.json, --cluster-cidr and the
// other nodes stay, and the run does not pause for the operator. A rerun
// with the same journal and no --network resumes it; one asking for
// another Network, or for a move, is refused.
func TestFlannelFixOnlyRepairsInTheNetworkInUse(t *testing.T) {
	cs := flCluster(flNetConf)
	o := flOptions(cs)
	o.Network, o.FixOnly = netip.Prefix{}, true
	m, err := migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "j")
	rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: dir}).Run(t.Context(), m)
	require.NoError(t, err)
	require.False(t, rep.Paused(), "nothing for the operator: --cluster-cidr stays")
	assert.Equal(t, netip.MustParsePrefix("10.244.0.0/16"), m.From())
	assert.Equal(t, m.From(), m.To())
	status := map[string]string{}
	for _, s := range rep.Steps {
		status[s.Name] = s.Status
	}
	assert.Equal(t, map[string]string{migrate.FlannelStepFix: migrate.StatusCompleted, migrate.FlannelStepNetwork: migrate.StatusDone,
		migrate.FlannelStepControllerManager: migrate.StatusSkipped, migrate.FlannelStepRewrite: migrate.StatusSkipped,
		migrate.FlannelStepCleanup: migrate.StatusCompleted}, status)
	for _, a := range cs.Actions() {
		assert.False(t, a.GetVerb() == "update" && a.GetResource().Resource == "configmaps", "net-conf.json rewritten: %v", a)
	}
	held := map[string]string{}
	nodes, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		held[n.Name] = n.Spec.PodCIDR
		assert.True(t, netip.MustParsePrefix("10.244.0.0/16").Contains(netip.MustParsePrefix(n.Spec.PodCIDR).Addr()), "%s: %s", n.Name, n.Spec.PodCIDR)
	}
	assert.Equal(t, "10.244.1.0/24", held["w1"], "the oldest holder keeps it")
	assert.Equal(t, "10.244.2.0/24", held["w2"])
	assert.NotEqual(t, held["w1"], held["w3"])
	assert.NotEqual(t, held["w3"], held["w4"])
	var moved []string
	for _, h := range m.HostPlans() {
		moved = append(moved, h.Node)
	}
	assert.Equal(t, []string{"w3", "w4"}, moved)

	// The same journal, --network left out: the run is found finished.
	m2, err := migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	_, err = (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: dir}).Run(t.Context(), m2)
	require.NoError(t, err)
	// The same journal asked for a widening: refused, naming the record.
	wide := flOptions(cs)
	m3, err := migrate.FlannelPodCIDR(wide)
	require.NoError(t, err)
	_, err = (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: dir}).Run(t.Context(), m3)
	require.ErrorIs(t, err, migrate.ErrInvalidInput)
	assert.Contains(t, err.Error(), "fix-only true")
}

func TestFlannelFixOnlyRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*migrate.FlannelPodCIDROptions)
		want string
	}{
		{"rewrite nodes", func(o *migrate.FlannelPodCIDROptions) {
			o.RewriteNodes, o.NodeRange = true, netip.MustParsePrefix("10.240.0.0/16")
		}, "--fix-only keeps every healthy node's podCIDR"},
		{"from", func(o *migrate.FlannelPodCIDROptions) { o.From = netip.MustParsePrefix("10.244.0.0/16") }, "--from 10.244.0.0/16: --fix-only keeps the Network in use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := flCluster(flNetConf)
			o := flOptions(cs)
			o.FixOnly = true
			tc.edit(&o)
			_, err := migrate.FlannelPodCIDR(o)
			require.ErrorIs(t, err, migrate.ErrInvalidInput)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, cs.Actions(), "nothing read or written")
		})
	}
	// A Network that is not the one in use is refused before any write.
	cs := flCluster(flNetConf)
	o := flOptions(cs)
	o.FixOnly = true // Network 10.240.0.0/12
	m, err := migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	_, err = (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
	require.ErrorIs(t, err, migrate.ErrInvalidInput)
	assert.Contains(t, err.Error(), "--network 10.240.0.0/12: --fix-only keeps the Network in use, and net-conf.json in ConfigMap kube-flannel/kube-flannel-cfg holds 10.244.0.0/16")
	for _, a := range cs.Actions() {
		assert.Contains(t, []string{"get", "list", "watch", "create"}, a.GetVerb(), "no write but access reviews: %v", a)
		if a.GetVerb() == "create" {
			assert.Contains(t, []string{"selfsubjectaccessreviews"}, a.GetResource().Resource, "%v", a)
		}
	}
}

// Prepare refuses, before the first write, a node mask wider than the
// Network in use, a --manifests directory without kube-controller-
// manager's manifest, and a Network the kubeadm ConfigMaps could not hold
// (it would contain kubeadm's serviceSubnet): that last one was refused
// only at the kubeadm step, after the nodes and net-conf.json were written. A node mask as wide as the Network passes that check
// and is refused by the fix plan, which finds no such subnet free for the
// nodes without one.
func TestFlannelPreflightRefusals(t *testing.T) {
	kubeadmConfig := func(serviceSubnet string) func(*migrate.FlannelPodCIDROptions) {
		return func(o *migrate.FlannelPodCIDROptions) {
			_, err := o.Kube.CoreV1().ConfigMaps("kube-system").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
				Data: map[string]string{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.244.0.0/16\n  serviceSubnet: " + serviceSubnet + "\n"}}, metav1.CreateOptions{})
			require.NoError(t, err)
			o.Kube.(*fake.Clientset).ClearActions()
		}
	}
	for _, tc := range []struct {
		name    string
		edit    func(*migrate.FlannelPodCIDROptions)
		invalid bool
		want    string
	}{
		{"node mask wider than the Network", func(o *migrate.FlannelPodCIDROptions) { o.NodeMask = 15 }, true, "--node-mask 15: a node subnet /15 is larger than the Network 10.244.0.0/16"},
		{"node mask as wide as the Network", func(o *migrate.FlannelPodCIDROptions) { o.NodeMask = 16 }, false, "2 nodes (w3, w4) need a new /16 but 10.244.0.0/16 has none left"},
		{"no kube-controller-manager manifest", func(o *migrate.FlannelPodCIDROptions) { o.Manifests = t.TempDir() }, true, "kube-controller-manager.yaml: open"},
		{"a Network that does not hold the current one", func(o *migrate.FlannelPodCIDROptions) { o.Network = netip.MustParsePrefix("10.250.0.0/16") }, true,
			"--network 10.250.0.0/16 must strictly contain the current Network 10.244.0.0/16, so no node's podCIDR is outside it during the move (e.g. 10.244.0.0/14)"},
		{"--from another Network than net-conf.json's", func(o *migrate.FlannelPodCIDROptions) { o.From = netip.MustParsePrefix("10.245.0.0/16") }, true,
			"--from 10.245.0.0/16: net-conf.json in ConfigMap kube-flannel/kube-flannel-cfg holds Network 10.244.0.0/16; --from must be the Network in use"},
		{"kubeadm's serviceSubnet elsewhere", kubeadmConfig("10.96.0.0/12"), false, ""},
		{"kubeadm's serviceSubnet inside the new Network", kubeadmConfig("10.241.0.0/16"), true, "the kubeadm ConfigMaps set to podSubnet 10.240.0.0/12 would hold a layout the components refuse: error overlap: error: cluster-cidr 10.240.0.0/12 (target pod CIDR) contains service-cidr 10.241.0.0/16 (target Service CIDR)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := flCluster(flNetConf)
			o := flOptions(cs)
			tc.edit(&o)
			m, err := migrate.FlannelPodCIDR(o)
			require.NoError(t, err)
			for _, mode := range []migrate.Mode{migrate.ModePlan, migrate.ModeApply} {
				rep, err := (&migrate.Runner{Mode: mode, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
				if tc.want == "" {
					require.NoError(t, err, mode)
					assert.Equal(t, mode == migrate.ModeApply, rep.Paused(), "an apply run waits for the operator")
					continue
				}
				require.Error(t, err, mode)
				assert.Equal(t, tc.invalid, errors.Is(err, migrate.ErrInvalidInput), "%s: %v", mode, err)
				assert.Contains(t, err.Error(), tc.want, mode)
			}
			for _, a := range cs.Actions() {
				if tc.want == "" {
					break
				}
				assert.Contains(t, []string{"get", "list", "watch", "create"}, a.GetVerb(), "no write but access reviews: %v", a)
				if a.GetVerb() == "create" {
					assert.Equal(t, "selfsubjectaccessreviews", a.GetResource().Resource, "%v", a)
				}
			}
		})
	}
}

// HostWants while w1 and w3 share 10.244.1.0/24 and the fix plan moves w3:
// w3 gets no want and is no peer until it moved, so every want is valid
// (a want lists a subnet once) and routes 10.244.1.0/24 to w1, the node
// that keeps it. Before the fix plan exists, HostWants refuses.
func TestFlannelHostWantsWhileADuplicateWaitsForItsMove(t *testing.T) {
	cs := flCluster(flNetConf)
	o := flOptions(cs)
	o.FixOnly, o.Network = true, netip.Prefix{}
	m, err := migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	_, err = m.HostWants(t.Context())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nodes w1, w3 share podCIDR 10.244.1.0/24, and no fix plan says which keeps it")

	for i, name := range []string{"w1", "w2", "w3"} {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(t, err)
		n.Annotations["flannel.alpha.coreos.com/backend-data"] = fmt.Sprintf(`{"VNI":1,"VtepMAC":"6e:00:00:00:00:0%d"}`, i+1)
		n.Annotations["flannel.alpha.coreos.com/public-ip"] = fmt.Sprintf("192.0.2.%d", i+1)
		_, err = cs.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	_, err = (&migrate.Runner{Mode: migrate.ModePlan}).Run(t.Context(), m)
	require.NoError(t, err)
	wants, err := m.HostWants(t.Context())
	require.NoError(t, err)
	// w3 is no peer, but its VTEP's FDB entry is in every other want: a
	// flanneld that lost it (it deletes the entry of the holder it cached
	// last when another holder's lease goes) would stall on w3's removal.
	for _, w := range wants {
		var fdb []string
		for _, e := range w.FDB {
			fdb = append(fdb, e.MAC+" "+e.Dst.String())
		}
		all := map[string]string{"w1": "6e:00:00:00:00:01 192.0.2.1", "w2": "6e:00:00:00:00:02 192.0.2.2", "w3": "6e:00:00:00:00:03 192.0.2.3"}
		delete(all, w.Node)
		assert.ElementsMatch(t, slices.Collect(maps.Values(all)), fdb, "FDB entries in the want of %s", w.Node)
	}
	var names []string
	for _, w := range wants {
		names = append(names, w.Node)
		held := []netip.Prefix{w.PodCIDR}
		for _, p := range w.Peers {
			for _, h := range held {
				assert.False(t, h.Overlaps(p.PodCIDR), "want of %s lists %s twice (peer %s): nodenet refuses it", w.Node, p.PodCIDR, p.Name)
			}
			held = append(held, p.PodCIDR)
			assert.NotEqual(t, "w3", p.Name, "w3 is no peer of %s while it shares w1's subnet", w.Node)
			if p.Name == "w1" {
				assert.Equal(t, "10.244.1.0/24", p.PodCIDR.String())
			}
		}
	}
	assert.Equal(t, []string{"w1", "w2"}, names, "w3 waits for its move; w4 has no podCIDR yet")
}
