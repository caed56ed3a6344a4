package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// TestKubeadmcfgDualStackPodSubnetMove moves a dual-stack kubeadm cluster's
// pod subnet, "v4,v6", end to end (issue 19): the kubeadm v1.33
// ClusterConfiguration (podSubnet 10.244.0.0/16,fd00:10:244::/56) in a real
// kubeadm-config ConfigMap and its kube-controller-manager manifest on disk,
// the nodes as the real dual-stack kube-controller-manager allocated them.
// kubeadmcfg plans the move to 10.20.0.0/16,fd00:20:244::/56: both families
// in podSubnet and --cluster-cidr, one node move per node with a subnet of
// each family. Apply edits kubeadm-config; the manifest rewrite gives the
// flags the real kube-controller-manager then runs with: it crashes as the
// preflight predicts while the nodes hold the old pairs, and runs once
// nodecidr has rebased both families of every node, handing a joining node
// a pair in the new ranges.
func TestKubeadmcfgDualStackPodSubnetMove(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	const (
		oldPod = "10.244.0.0/16,fd00:10:244::/56"
		newPod = "10.20.0.0/16,fd00:20:244::/56"
	)
	oldV4, oldV6 := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")
	newV4, newV6 := netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("fd00:20:244::/56")
	c := harness.Start(t, harness.Options{ClusterCIDR: oldPod, NodeCIDRMaskSize: 24, NodeCIDRMaskSizeIPv6: 64,
		ServiceCIDR: "10.96.0.0/16,fd00:10:96::/112", Disable: []harness.Component{harness.Scheduler}})
	ctx := t.Context()
	cs, err := c.Client()
	require.NoError(t, err)

	golden := filepath.Join("..", "kubeadmcfg", "testdata", "golden", "v1.33")
	ccData, err := os.ReadFile(filepath.Join(golden, "cluster-configuration.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(ccData), "podSubnet: "+oldPod, "the golden file is the dual-stack layout this cluster runs")
	_, err = cs.CoreV1().ConfigMaps(kubeadmcfg.Namespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: kubeadmcfg.KubeadmConfigMap, Namespace: kubeadmcfg.Namespace},
		Data:       map[string]string{kubeadmcfg.KubeadmConfigKey: string(ccData)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	manifests := t.TempDir()
	kcmData, err := os.ReadFile(filepath.Join(golden, "kube-controller-manager.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(manifests, kubeadmcfg.ControllerManagerManifest), kcmData, 0o600))

	nodes := []string{"dsk-1", "dsk-2", "dsk-3"}
	for _, name := range nodes {
		_, err := cs.CoreV1().Nodes().Create(ctx, harness.KwokNode(name, nil), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	before := nodeE2EWaitPairs(t, cs, nodes)

	s, err := kubeadmcfg.Read(ctx, cs, kubeadmcfg.ReadOptions{ManifestDir: manifests, Nodes: true})
	require.NoError(t, err)
	p, err := kubeadmcfg.NewPlan(s, kubeadmcfg.Intent{PodSubnet: newPod}, kubeadmcfg.PlanOptions{KeepNodeIPAM: true})
	require.NoError(t, err)
	assert.Equal(t, oldPod, p.Current.PodSubnet)
	assert.Equal(t, newPod, p.Target.PodSubnet)
	assert.Equal(t, []int{24, 64}, p.Target.NodeMasks)
	require.NotNil(t, p.ProposedFlags)
	assert.Equal(t, newPod, p.ProposedFlags.ClusterCIDR)
	require.NotNil(t, p.PreflightNow)
	assert.False(t, p.PreflightNow.WouldStart, "the new flags against the nodes as they are")
	require.NotNil(t, p.PreflightAfterMove)
	assert.True(t, p.PreflightAfterMove.WouldStart, "after the suggested moves: %+v", p.PreflightAfterMove.Crashes)
	require.Len(t, p.NodeMoves, len(nodes))
	suggested := map[string][]string{}
	for _, m := range p.NodeMoves {
		assert.Equal(t, before[m.Name], m.From, "node %s", m.Name)
		require.Len(t, m.To, 2, "node %s: a subnet per family", m.Name)
		v4, v6 := netip.MustParsePrefix(m.To[0]), netip.MustParsePrefix(m.To[1])
		assert.True(t, newV4.Contains(v4.Addr()) && v4.Bits() == 24, "node %s: %s", m.Name, v4)
		assert.True(t, newV6.Contains(v6.Addr()) && v6.Bits() == 64, "node %s: %s", m.Name, v6)
		suggested[m.Name] = m.To
	}

	// kubeadm-config, through the API.
	_, err = kubeadmcfg.Apply(ctx, cs, p, kubeadmcfg.ApplyOptions{})
	require.NoError(t, err)
	cm, err := cs.CoreV1().ConfigMaps(kubeadmcfg.Namespace).Get(ctx, kubeadmcfg.KubeadmConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	cc, err := kubeadmcfg.ParseClusterConfiguration([]byte(cm.Data[kubeadmcfg.KubeadmConfigKey]))
	require.NoError(t, err)
	assert.Equal(t, newPod, cc.Networking().PodSubnet)
	assert.Equal(t, "10.96.0.0/16,fd00:10:96::/112", cc.Networking().ServiceSubnet, "the Service subnet is not touched")

	// The manifest, as on a control-plane node.
	var edited bool
	for _, fe := range p.FileEdits {
		if filepath.Base(fe.Path) != kubeadmcfg.ControllerManagerManifest {
			continue
		}
		changed, err := kubeadmcfg.ApplyManifestChanges(ctx, filepath.Join(manifests, kubeadmcfg.ControllerManagerManifest), fe.Changes)
		require.NoError(t, err)
		edited = edited || changed
	}
	require.True(t, edited, "the plan edits kube-controller-manager's manifest")
	m, err := kubeadmcfg.ReadManifestFile(filepath.Join(manifests, kubeadmcfg.ControllerManagerManifest))
	require.NoError(t, err)
	args := ipamArgs(t, m)
	assert.Contains(t, args, "--cluster-cidr="+newPod)
	assert.Contains(t, args, "--node-cidr-mask-size-ipv4=24")
	assert.Contains(t, args, "--node-cidr-mask-size-ipv6=64")

	// The real kube-controller-manager with those flags, before the nodes
	// move: it exits, with the message the preflight predicted.
	restartErr := c.Restart(ctx, harness.ControllerManager, args...)
	var exitErr *harness.ExitError
	if restartErr != nil && !errors.As(restartErr, &exitErr) {
		t.Fatalf("restart kube-controller-manager: %v", restartErr)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := c.WaitExit(waitCtx, harness.ControllerManager)
	require.NoError(t, err, "kube-controller-manager kept running although the preflight predicted a crash")
	assert.Equal(t, 1, st.ExitCode)
	require.NotEmpty(t, p.PreflightNow.Crashes)
	assert.Contains(t, c.RunLogs(harness.ControllerManager), p.PreflightNow.Crashes[0].Message)

	// nodecidr rebases both families of every node.
	rebase, err := nodecidr.MakePlan(ctx, cs, nodecidr.PlanOptions{Mode: nodecidr.ModeRebase,
		Rebase: []nodecidr.RebasePair{{From: oldV4, To: newV4}, {From: oldV6, To: newV6}}})
	require.NoError(t, err)
	require.Len(t, rebase.Steps, len(nodes))
	for _, step := range rebase.Steps {
		assert.Equal(t, suggested[step.Node], step.NewPodCIDRs, "kubeadmcfg's suggestion and nodecidr's rebase agree for %s", step.Node)
	}
	_, err = nodecidr.Apply(ctx, cs, rebase, nodecidr.ApplyOptions{JournalDir: filepath.Join(t.TempDir(), "journal"), Cordon: true})
	require.NoError(t, err)
	live, err := kubeadmcfg.ListNodePodCIDRs(ctx, cs)
	require.NoError(t, err)
	flags, err := m.ControllerManagerFlags()
	require.NoError(t, err)
	pre := cidr.ControllerManagerPreflight(flags, live)
	require.True(t, pre.WouldStart, "crashes: %+v", pre.Crashes)

	// The same flags now run, and a joining node gets a pair in the new ranges.
	require.NoError(t, c.Restart(ctx, harness.ControllerManager, args...))
	_, err = cs.CoreV1().Nodes().Create(ctx, harness.KwokNode("dsk-new", nil), metav1.CreateOptions{})
	require.NoError(t, err)
	poll(t, time.Minute, "dsk-new gets a pair in the new ranges", func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, "dsk-new", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(n.Spec.PodCIDRs) != 2 {
			return errors.New("podCIDRs " + strings.Join(n.Spec.PodCIDRs, ","))
		}
		for i, in := range []netip.Prefix{newV4, newV6} {
			if p := netip.MustParsePrefix(n.Spec.PodCIDRs[i]); !in.Contains(p.Addr()) {
				return fmt.Errorf("podCIDRs[%d] %s outside %s", i, p, in)
			}
		}
		return nil
	})
	assert.True(t, c.Status(harness.ControllerManager).Running, "kube-controller-manager keeps running")
}
