package migrate_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
	"github.com/cidrshift/cidrshift/nodenet"
)

// flStep is the step of rep named name.
func flStep(t *testing.T, rep *migrate.Report, name string) migrate.StepReport {
	t.Helper()
	for _, s := range rep.Steps {
		if s.Name == name {
			return s
		}
	}
	require.Failf(t, "no step", "%s in %+v", name, rep.Steps)
	return migrate.StepReport{}
}

// flNetConfUpdates are the dry-run options of every update of flannel's
// ConfigMap.
func flNetConfUpdates(cs *fake.Clientset) [][]string {
	var out [][]string
	for _, a := range cs.Actions() {
		if u, ok := a.(k8stesting.UpdateActionImpl); ok && a.GetResource().Resource == "configmaps" &&
			u.GetObject().(metav1.Object).GetName() == flannel.DefaultNetConfName {
			out = append(out, u.UpdateOptions.DryRun)
		}
	}
	return out
}

// set-network writes net-conf.json for real in an apply run, and with
// dryRun=All in a server-dry-run; a server-dry-run sends every one of its
// writes with dryRun=All (the fake keeps them, a real API server does not).
// The step reports the write's outcome.
func TestFlannelSetNetworkDryRunIsTheServers(t *testing.T) {
	t.Run("apply", func(t *testing.T) {
		cs := flCluster(flNetConf)
		m, err := migrate.FlannelPodCIDR(flOptions(cs))
		require.NoError(t, err)
		rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
		require.NoError(t, err)
		assert.Equal(t, [][]string{nil}, flNetConfUpdates(cs), "one update, for real")
		assert.Contains(t, flStep(t, rep, migrate.FlannelStepNetwork).Details, "net-conf.json: "+string(flannel.OutcomeApplied))
	})
	t.Run("server-dry-run", func(t *testing.T) {
		cs := flCluster(flNetConf)
		m, err := migrate.FlannelPodCIDR(flOptions(cs))
		require.NoError(t, err)
		rep, err := (&migrate.Runner{Mode: migrate.ModeServerDryRun}).Run(t.Context(), m)
		require.NoError(t, err)
		assert.Equal(t, [][]string{{metav1.DryRunAll}}, flNetConfUpdates(cs))
		assert.Contains(t, flStep(t, rep, migrate.FlannelStepNetwork).Details, "net-conf.json: "+string(flannel.OutcomeWouldApply))
		writes := 0
		for _, a := range cs.Actions() {
			var dry []string
			switch w := a.(type) {
			case k8stesting.CreateActionImpl:
				if strings.HasSuffix(a.GetResource().Resource, "accessreviews") {
					continue
				}
				dry = w.CreateOptions.DryRun
			case k8stesting.UpdateActionImpl:
				dry = w.UpdateOptions.DryRun
			case k8stesting.PatchActionImpl:
				dry = w.PatchOptions.DryRun
			case k8stesting.DeleteActionImpl:
				dry = w.DeleteOptions.DryRun
			default:
				continue
			}
			writes++
			assert.Equal(t, []string{metav1.DryRunAll}, dry, "%s %s", a.GetVerb(), a.GetResource().Resource)
		}
		assert.NotZero(t, writes)
	})
}

// flRunToTheControllerManager runs the migration of cs in apply mode up to
// the controller-manager step, where it pauses for the operator.
func flRunToTheControllerManager(t *testing.T, cs *fake.Clientset) (*migrate.FlannelPodCIDRMigration, *migrate.Runner, *migrate.Report) {
	t.Helper()
	m, err := migrate.FlannelPodCIDR(flOptions(cs))
	require.NoError(t, err)
	r := &migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}
	rep, err := r.Run(t.Context(), m)
	require.NoError(t, err)
	require.True(t, rep.Paused())
	require.Equal(t, migrate.FlannelStepControllerManager, rep.Waiting.Step)
	return m, r, rep
}

// kcmManifest writes a kube-controller-manager static-pod manifest into dir.
func kcmManifest(t *testing.T, dir string) {
	t.Helper()
	data := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-controller-manager\n  namespace: kube-system\nspec:\n  containers:\n  - name: kube-controller-manager\n" +
		"    image: registry.k8s.io/kube-controller-manager:v1.36.3\n    command:\n    - kube-controller-manager\n    - --cluster-cidr=10.244.0.0/16\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kube-controller-manager.yaml"), []byte(data), 0o600))
}

// The controller-manager step asks the operator to copy the manifest it
// rendered into --out; with --manifests but no --out it shows the diff and
// asks for the flag by hand.
func TestFlannelControllerManagerStepRendersTheManifest(t *testing.T) {
	dir := t.TempDir()
	kcmManifest(t, dir)
	set := "on every control-plane node, set --cluster-cidr=10.240.0.0/12 in /etc/kubernetes/manifests/kube-controller-manager.yaml (the kubelet restarts kube-controller-manager); keep the --node-cidr-mask-size flags"
	for _, tc := range []struct {
		name, out string
	}{{"with --out", filepath.Join(t.TempDir(), "out")}, {"without --out", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			o := flOptions(flCluster(flNetConf))
			o.Manifests, o.Out = dir, tc.out
			m, err := migrate.FlannelPodCIDR(o)
			require.NoError(t, err)
			changes := manifestStepChanges(t, m, migrate.FlannelStepControllerManager, "10.240.0.0/12", tc.out, set)
			assert.NotContains(t, changes, "")
		})
	}
}

// manifestStepChanges plans m and checks its step: the diff of
// kube-controller-manager.yaml (kcmManifest's --cluster-cidr to cluster);
// with out, the instruction to copy the rendered file and not set; without,
// set. It returns the step's changes.
func manifestStepChanges(t *testing.T, m migrate.Composition, step, cluster, out, set string) []string {
	t.Helper()
	p, err := (&migrate.Runner{}).Plan(t.Context(), m)
	require.NoError(t, err)
	i := slices.IndexFunc(p.Steps, func(s migrate.PlannedStep) bool { return s.Name == step })
	require.GreaterOrEqual(t, i, 0)
	changes := p.Steps[i].Changes
	assert.Contains(t, strings.Join(changes, "\n"), "-    - --cluster-cidr=10.244.0.0/16\n+    - --cluster-cidr="+cluster)
	if out == "" {
		assert.Contains(t, changes, set)
		return changes
	}
	assert.Contains(t, changes, "copy "+filepath.Join(out, "kube-controller-manager.yaml")+" to /etc/kubernetes/manifests/kube-controller-manager.yaml on every control-plane node (the kubelet restarts the static pod)")
	assert.NotContains(t, changes, set)
	return changes
}

// The controller-manager step updates kubeadm-config's podSubnet and
// kube-proxy's clusterCIDR, each when its ConfigMap exists, and says so when
// neither does.
func TestFlannelKubeadmConfigMapsUpdatedWhereTheyExist(t *testing.T) {
	kubeadm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
		Data: map[string]string{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.244.0.0/16\n  serviceSubnet: 10.96.0.0/12\n"}}
	proxy := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"},
		Data: map[string]string{"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.244.0.0/16\nmode: iptables\n"}}
	for _, tc := range []struct {
		name string
		cms  []*corev1.ConfigMap
	}{{"neither", nil}, {"kubeadm-config", []*corev1.ConfigMap{kubeadm}}, {"kube-proxy", []*corev1.ConfigMap{proxy}}, {"both", []*corev1.ConfigMap{kubeadm, proxy}}} {
		t.Run(tc.name, func(t *testing.T) {
			cs := flCluster(flNetConf)
			for _, cm := range tc.cms {
				_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(t.Context(), cm.DeepCopy(), metav1.CreateOptions{})
				require.NoError(t, err)
			}
			m, err := migrate.FlannelPodCIDR(flOptions(cs))
			require.NoError(t, err)
			rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
			require.NoError(t, err)
			require.True(t, rep.Paused())
			details := flStep(t, rep, migrate.FlannelStepControllerManager).Details
			if len(tc.cms) == 0 {
				assert.Contains(t, details, "no kubeadm-config or kube-proxy ConfigMap: nothing to update in the API")
				return
			}
			assert.NotContains(t, details, "no kubeadm-config or kube-proxy ConfigMap: nothing to update in the API")
			for _, cm := range tc.cms {
				got, err := cs.CoreV1().ConfigMaps(cm.Namespace).Get(t.Context(), cm.Name, metav1.GetOptions{})
				require.NoError(t, err)
				for k, v := range cm.Data {
					assert.Equal(t, strings.Replace(v, "10.244.0.0/16", "10.240.0.0/12", 1), got.Data[k], cm.Name)
				}
			}
		})
	}
}

// The controller-manager step's observer finds kube-controller-manager's
// command line in the container of that name, or in a pod's only
// container whatever its name; in a cluster whose --cluster-cidr lists
// IPv6 first, it wants the IPv6 range first and the new Network second.
func TestFlannelObservesTheControllerManagersFlag(t *testing.T) {
	kcm := func(flag string, containers ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-cp", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"component": "kube-controller-manager"}},
			Spec: corev1.PodSpec{NodeName: "cp", HostNetwork: true}}
		for _, c := range containers {
			cmd := []string{"sleep", "infinity"}
			if c != "sidecar" {
				cmd = []string{"kube-controller-manager", "--allocate-node-cidrs=true", "--cluster-cidr=" + flag, "--node-cidr-mask-size-ipv4=24", "--node-cidr-mask-size-ipv6=64"}
			}
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Command: cmd})
		}
		return p
	}
	dual := func(name, v4, v6 string) *corev1.Node {
		n := flNode(name, v6, 0)
		n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, v4)
		return n
	}
	for _, tc := range []struct {
		name     string
		old, new string
		netConf  string
		nodes    []runtime.Object
		pod      []string
	}{
		{"a sidecar first", "10.244.0.0/16", "10.240.0.0/12", flNetConf,
			[]runtime.Object{flNode("w1", "10.244.1.0/24", 0), flNode("w2", "10.244.2.0/24", 0)}, []string{"sidecar", "kube-controller-manager"}},
		{"one container of another name", "10.244.0.0/16", "10.240.0.0/12", flNetConf,
			[]runtime.Object{flNode("w1", "10.244.1.0/24", 0), flNode("w2", "10.244.2.0/24", 0)}, []string{"controller-manager"}},
		{"IPv6 first", "fd00:10:244::/56,10.244.0.0/16", "fd00:10:244::/56,10.240.0.0/12",
			`{"Network": "10.244.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan"}}`,
			[]runtime.Object{dual("w1", "10.244.1.0/24", "fd00:10:244:1::/64"), dual("w2", "10.244.2.0/24", "fd00:10:244:2::/64")}, []string{"kube-controller-manager"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, srv := flClusterOf(tc.netConf, append(tc.nodes, kcm(tc.old, tc.pod...))...)
			m, r, rep := flRunToTheControllerManager(t, cs)
			assert.Contains(t, strings.Join(rep.Waiting.Instructions, "\n"), "set --cluster-cidr="+tc.new+" in")
			assert.Contains(t, rep.Waiting.Observed, "--cluster-cidr="+tc.old, "the old flag is not the new one")

			srv.AddPod(kcm(tc.new, tc.pod...)) // the kubelet's new mirror pod
			rep, err := r.Run(t.Context(), m)
			require.NoError(t, err)
			require.False(t, rep.Paused(), "%+v", rep.Waiting)
			assert.Equal(t, "observed: every kube-controller-manager pod (kube-controller-manager-cp) runs with --cluster-cidr="+tc.new,
				flStep(t, rep, migrate.FlannelStepControllerManager).Note)
		})
	}
}

// HostPlans' host steps follow the backend of net-conf.json: the VXLAN
// device is flannel.<VNI>, and host-gw has none.
func TestFlannelHostPlansFollowTheBackend(t *testing.T) {
	for _, tc := range []struct {
		backend string
		device  string
	}{{`{"Type": "vxlan", "VNI": 4}`, "flannel.4"}, {`{"Type": "host-gw"}`, ""}} {
		t.Run(tc.backend, func(t *testing.T) {
			o := flOptions(flCluster(`{"Network": "10.244.0.0/16", "Backend": ` + tc.backend + `}`))
			m, err := migrate.FlannelPodCIDR(o)
			require.NoError(t, err)
			_, err = (&migrate.Runner{}).Plan(t.Context(), m)
			require.NoError(t, err)
			var w3 *migrate.FlannelHostPlan
			for _, h := range m.HostPlans() {
				if h.Node == "w3" {
					w3 = &h
				}
			}
			require.NotNil(t, w3, "w3 leaves w1's subnet")
			require.NotEmpty(t, w3.Steps)
			var devices []string
			for _, s := range w3.Steps {
				if d, ok := strings.CutPrefix(s.Command, "ip link delete "); ok && d != "cni0" {
					devices = append(devices, d)
				}
			}
			if tc.device == "" {
				assert.Empty(t, devices)
				return
			}
			assert.Equal(t, []string{tc.device}, devices)
		})
	}
}

// HostWants name the backend of net-conf.json: host-gw hosts get no VXLAN
// device, neighbour or FDB entry.
func TestFlannelHostWantsFollowTheBackend(t *testing.T) {
	for _, backend := range []string{nodenet.BackendHostGW, nodenet.BackendVXLAN} {
		t.Run(backend, func(t *testing.T) {
			cs, _ := flClusterOf(`{"Network": "10.244.0.0/16", "Backend": {"Type": "`+backend+`"}}`,
				flNode("w1", "10.244.1.0/24", 0), flNode("w2", "10.244.2.0/24", 0))
			m, err := migrate.FlannelPodCIDR(flOptions(cs))
			require.NoError(t, err)
			_, err = (&migrate.Runner{}).Plan(t.Context(), m)
			require.NoError(t, err)
			wants, err := m.HostWants(t.Context())
			require.NoError(t, err)
			require.Len(t, wants, 2)
			for _, w := range wants {
				assert.Equal(t, backend, w.Backend, w.Node)
			}
		})
	}
}

// flDaemonSet is a DaemonSet in flannel's namespace whose pods are labelled
// app=<app>.
func flDaemonSet(name, app string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: flannel.DefaultNetConfNamespace, Name: name},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}}}}
}

// host-cleanup rolls flannel's DaemonSet, found by --flannel-selector on
// its pod template, and no other DaemonSet of the namespace: an apply run
// patches the template's restartedAt annotation, a server-dry-run sends
// the patch with dryRun=All, a plan prints the kubectl command, and a
// namespace without it gets the instruction to restart by hand.
func TestFlannelHostCleanupRestartsFlannelsDaemonSetOnly(t *testing.T) {
	cluster := func(dss ...*appsv1.DaemonSet) (*fake.Clientset, *migrate.FlannelPodCIDRMigration) {
		objs := []runtime.Object{flNode("w1", "10.244.1.0/24", 0), flNode("w2", "10.244.2.0/24", 0)}
		for _, d := range dss {
			objs = append(objs, d)
		}
		cs, _ := flClusterOf(flNetConf, objs...)
		o := flOptions(cs)
		o.Continue = true
		m, err := migrate.FlannelPodCIDR(o)
		require.NoError(t, err)
		return cs, m
	}
	patches := func(cs *fake.Clientset) map[string][]string {
		out := map[string][]string{}
		for _, a := range cs.Actions() {
			if p, ok := a.(k8stesting.PatchActionImpl); ok && a.GetResource().Resource == "daemonsets" {
				assert.Contains(t, string(p.Patch), `"`+migrate.FlannelRestartedAtAnnotation+`":`)
				out[p.Name] = p.PatchOptions.DryRun
			}
		}
		return out
	}

	t.Run("apply", func(t *testing.T) {
		cs, m := cluster(flDaemonSet("kube-flannel-ds", "flannel"), flDaemonSet("other", "other"))
		rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
		require.NoError(t, err)
		require.False(t, rep.Paused())
		assert.Equal(t, map[string][]string{"kube-flannel-ds": nil}, patches(cs))
		got, err := cs.AppsV1().DaemonSets(flannel.DefaultNetConfNamespace).Get(t.Context(), "kube-flannel-ds", metav1.GetOptions{})
		require.NoError(t, err)
		assert.NotEmpty(t, got.Spec.Template.Annotations[migrate.FlannelRestartedAtAnnotation])
		details := flStep(t, rep, migrate.FlannelStepCleanup).Details
		assert.Contains(t, details, "rolling restart of DaemonSet kube-flannel/kube-flannel-ds")
		assert.Contains(t, details, "no node's subnet moved: no host clean-up", "the wider Network holds every node's subnet")
	})
	t.Run("server-dry-run", func(t *testing.T) {
		cs, m := cluster(flDaemonSet("kube-flannel-ds", "flannel"), flDaemonSet("other", "other"))
		_, err := (&migrate.Runner{Mode: migrate.ModeServerDryRun}).Run(t.Context(), m)
		require.NoError(t, err)
		assert.Equal(t, map[string][]string{"kube-flannel-ds": {metav1.DryRunAll}}, patches(cs))
	})
	t.Run("plan", func(t *testing.T) {
		cs, m := cluster(flDaemonSet("kube-flannel-ds", "flannel"), flDaemonSet("other", "other"))
		p, err := (&migrate.Runner{}).Plan(t.Context(), m)
		require.NoError(t, err)
		assert.Empty(t, patches(cs))
		assert.Contains(t, p.Steps[len(p.Steps)-1].Changes, "kubectl -n kube-flannel rollout restart daemonset/kube-flannel-ds (every flanneld reads Network 10.240.0.0/12 at start)")
		assert.NotContains(t, strings.Join(p.Steps[len(p.Steps)-1].Changes, "\n"), "daemonset/other")
	})
	t.Run("no flannel DaemonSet", func(t *testing.T) {
		cs, m := cluster(flDaemonSet("other", "other"))
		rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
		require.NoError(t, err)
		assert.Empty(t, patches(cs))
		assert.Contains(t, flStep(t, rep, migrate.FlannelStepCleanup).Details,
			"no DaemonSet in namespace kube-flannel runs pods matching --flannel-selector app=flannel: restart every flanneld by hand (every flanneld reads Network 10.240.0.0/12 at start)")
	})
}

// host-cleanup's verify proves the end state from the cluster as it is
// then: a node that registers during the run with a podCIDR another node
// holds or outside the new Network, or a net-conf.json set back to the
// old Network, fails the step, naming what is wrong.
func TestFlannelVerifyReadsTheEndState(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(cs *fake.Clientset, srv *nodecidrtest.Server) error
		want  string
	}{
		{"a late duplicate", func(_ *fake.Clientset, srv *nodecidrtest.Server) error {
			srv.AddNode(flNode("w9", "10.244.1.0/24", 7200))
			return nil
		}, "verify: error duplicate-podcidr: podCIDR 10.244.1.0/24 is shared by w1 (held longest) and w9"},
		{"a late node outside the Network", func(_ *fake.Clientset, srv *nodecidrtest.Server) error {
			srv.AddNode(flNode("w9", "192.168.5.0/24", 7200))
			return nil
		}, "verify: error podcidr-outside-network: podCIDR 192.168.5.0/24 is outside the Network"},
		{"net-conf.json set back", func(cs *fake.Clientset, _ *nodecidrtest.Server) error {
			return cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: flannel.DefaultNetConfName, Namespace: flannel.DefaultNetConfNamespace, ResourceVersion: "9"},
				Data:       map[string]string{flannel.NetConfKey: flNetConf},
			}, flannel.DefaultNetConfNamespace)
		}, "verify: net-conf.json does not hold Network 10.240.0.0/12"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, srv := flClusterOf(flNetConf, flNode("w1", "10.244.1.0/24", 0), flNode("w2", "10.244.2.0/24", 0), flDaemonSet("kube-flannel-ds", "flannel"))
			// The cluster changes while host-cleanup rolls flanneld.
			cs.PrependReactor("patch", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) {
				return false, nil, tc.spoil(cs, srv)
			})
			o := flOptions(cs)
			o.Continue = true
			m, err := migrate.FlannelPodCIDR(o)
			require.NoError(t, err)
			rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			require.NotNil(t, rep)
			assert.NotEqual(t, migrate.StatusDone, flStep(t, rep, migrate.FlannelStepCleanup).Status)
		})
	}
}

// A node the fix step moved (A to B) and the rewrite step moved again (B to
// C) keeps the transition for the subnet its live pods still hold: B, once
// a pod holds an address of it, and A, the subnet it first left, while
// none does. Every other node keeps a route to B while the pod lives.
func TestFlannelHostWantsKeepTheSubnetLivePodsHold(t *testing.T) {
	cs, srv := flClusterOf(flNetConf, flNode("w1", "10.244.1.0/24", 0), flNode("w2", "10.244.2.0/24", 0), flNode("w3", "10.244.1.0/24", 3600))
	o := flOptions(cs)
	o.RewriteNodes, o.NodeRange, o.Continue = true, netip.MustParsePrefix("10.240.0.0/16"), true
	m, err := migrate.FlannelPodCIDR(o)
	require.NoError(t, err)
	rep, err := (&migrate.Runner{Mode: migrate.ModeApply, JournalDir: filepath.Join(t.TempDir(), "j")}).Run(t.Context(), m)
	require.NoError(t, err)
	require.False(t, rep.Paused())
	var fixed netip.Prefix // B
	for _, d := range flStep(t, rep, migrate.FlannelStepFix).Details {
		if _, to, ok := strings.Cut(d, " w3: 10.244.1.0/24 -> "); ok {
			fixed = netip.MustParsePrefix(strings.Fields(to)[0])
		}
	}
	require.True(t, fixed.IsValid(), "the fix step moved w3: %q", flStep(t, rep, migrate.FlannelStepFix).Details)

	want := func(wants []nodenet.Want, node string) nodenet.Want {
		i := slices.IndexFunc(wants, func(w nodenet.Want) bool { return w.Node == node })
		require.GreaterOrEqual(t, i, 0, node)
		return wants[i]
	}
	wants, err := m.HostWants(t.Context())
	require.NoError(t, err)
	w3 := want(wants, "w3")
	assert.Equal(t, "10.244.1.0/24", w3.OldPodCIDR.String(), "no pod holds an address of B: the subnet w3 first left")
	assert.NotEqual(t, fixed, w3.PodCIDR)

	srv.AddPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bare"}, Spec: corev1.PodSpec{NodeName: "w3"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: fixed.Addr().Next().Next().String()}}}})
	wants, err = m.HostWants(t.Context())
	require.NoError(t, err)
	assert.Equal(t, fixed, want(wants, "w3").OldPodCIDR, "a live pod holds an address of B")
	peers := want(wants, "w1").Peers
	i := slices.IndexFunc(peers, func(p nodenet.Peer) bool { return p.Name == "w3" })
	require.GreaterOrEqual(t, i, 0, "w3 is a peer of w1")
	assert.Equal(t, []netip.Prefix{fixed}, peers[i].OldPodCIDRs)
}

// A server-dry-run with host agents publishes no want: host-cleanup says
// what each agent would make its host hold, and prints the steps for a
// node without one.
func TestFlannelServerDryRunPublishesNoWant(t *testing.T) {
	cs := flCluster(flNetConf)
	got, stop := agentsOn(cs, "w1", "w3")
	defer stop()
	m, err := migrate.FlannelPodCIDR(flOptions(cs))
	require.NoError(t, err)
	agents := &migrate.HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 5 * time.Second}
	require.Eventually(t, func() bool {
		for _, n := range []string{"w1", "w3"} {
			if ok, err := agents.Present(t.Context(), n); err != nil || !ok {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the agents' Leases")
	rep, err := (&migrate.Runner{Mode: migrate.ModeServerDryRun, Agents: agents}).Run(t.Context(), m)
	require.NoError(t, err)
	// The nodes did not move: w3 still shares w1's subnet and waits for
	// its move, w4 has no subnet; neither gets a want.
	details := flStep(t, rep, migrate.FlannelStepCleanup).Details
	assert.Contains(t, details, "node w1: its host agent will make the host hold podCIDR 10.244.1.0/24 in Network 10.240.0.0/12")
	assert.Contains(t, details, "node w2 has no host agent; run there:")
	all := strings.Join(details, "\n")
	assert.NotContains(t, all, "node w2: its host agent")
	assert.NotContains(t, all, "node w3", "w3 gets no want")
	nodes, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		assert.NotContains(t, n.Annotations, migrate.HostWantAnnotation, n.Name)
	}
	assert.Empty(t, got())
}
