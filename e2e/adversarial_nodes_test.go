package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/internal/cli/clitest"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// The adversarial suite for the node programs: noderecreate and doctor
// against a real control plane. Every case is bad input that must leave the
// cluster exactly as it was.

// advNodesCluster starts a control plane without node IPAM (the podCIDRs
// below stay as created) and creates issue 20's nodes: master1, worker1 and
// worker2 in 10.20.0.0/16, and "other", outside any plan, in 10.30.9.0/24.
func advNodesCluster(t *testing.T) *harness.Cluster {
	t.Helper()
	c := harness.Start(t, harness.Options{ClusterCIDR: "10.20.0.0/16", NodeCIDRMaskSize: 24, DisableNodeIPAM: true})
	cs := nodeE2EClient(t, c)
	nodeE2ECreateNodes(t, t.Context(), cs, []*corev1.Node{
		nodeE2EWithPodCIDR(harness.KwokNode("master1", map[string]string{nodecidr.LabelControlPlane: ""}), "10.20.0.0/24"),
		nodeE2EWithPodCIDR(harness.KwokNode("worker1", nil), "10.20.1.0/24"),
		nodeE2EWithPodCIDR(harness.KwokNode("worker2", nil), "10.20.2.0/24"),
		nodeE2EWithPodCIDR(harness.KwokNode("other", nil), "10.30.9.0/24"),
	})
	return c
}

// advUseBinary lets a run point the suite at a prebuilt program (for
// example one built from the code before a fix, to watch a case fail):
// CIDRSHIFT_ADV_BIN_<program>=/path.
func advUseBinary(program string) {
	if bin := os.Getenv("CIDRSHIFT_ADV_BIN_" + program); bin != "" {
		advBinMu.Lock()
		advBins[program] = bin
		advBinMu.Unlock()
	}
}

// advNodePlan writes the plan of issue 20 (noderecreate --from 10.20.0.0/16
// --to 10.30.0.0/16 --nodes worker1,worker2,master1 --plan FILE, a read-only
// run), then edits it as a person could with a text editor.
func advNodePlan(c *harness.Cluster, mode []string, edit func(p *nodecidr.Plan)) func(t *testing.T) []string {
	return func(t *testing.T) []string {
		bin := advBuild(t, "noderecreate")
		dir := t.TempDir()
		file := filepath.Join(dir, "p.yaml")
		args := append(append([]string{}, mode...), "--plan", file, "--kubeconfig", c.AdminKubeconfig(), "--journal", filepath.Join(dir, "plan-journal"))
		out, err := exec.CommandContext(t.Context(), bin, args...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		p, err := nodecidr.DecodePlan(data)
		require.NoError(t, err)
		edit(p)
		y, err := yaml.Marshal(p)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(file, y, 0o644))
		return []string{"--plan", file}
	}
}

func advStep(p *nodecidr.Plan, node string) *nodecidr.Step {
	for i := range p.Steps {
		if p.Steps[i].Node == node {
			return &p.Steps[i]
		}
	}
	panic("no step for " + node)
}

func TestAdversarialNoderecreate(t *testing.T) {
	advUseBinary("noderecreate")
	c := advNodesCluster(t)
	rebase := []string{"--from", "10.20.0.0/16", "--to", "10.30.0.0/16", "--nodes", "worker1,worker2,master1"}
	allocate := []string{"--allocate", "--cluster-cidr", "10.30.0.0/16", "--nodes", "worker1,worker2"}
	plan := func(edit func(p *nodecidr.Plan)) func(t *testing.T) []string { return advNodePlan(c, rebase, edit) }
	extra := func(t *testing.T) []string {
		return []string{"--kubeconfig", c.AdminKubeconfig(), "--journal", filepath.Join(t.TempDir(), "journal")}
	}
	advRunCases(t, c, "noderecreate", extra, []advCase{
		// Issue 20, defect 1.
		{name: "plan gives worker1 the range worker2 holds", args: []string{"--apply"}, code: 2,
			setup: plan(func(p *nodecidr.Plan) { advStep(p, "worker1").NewPodCIDRs = []string{"10.20.2.0/24"} }),
			msg:   []string{"invalid plan", "(node worker1).newPodCIDRs[0] 10.20.2.0/24", "outside the plan's target 10.30.0.0/16"}},
		{name: "plan podCIDR outside the target, server dry run", args: []string{"--dry-run=server"}, code: 2,
			setup: plan(func(p *nodecidr.Plan) { advStep(p, "worker1").NewPodCIDRs = []string{"10.99.0.0/24"} }),
			msg:   []string{"invalid plan", "10.99.0.0/24", "outside the plan's target 10.30.0.0/16"}},
		{name: "plan podCIDR outside the target", args: []string{"--apply"}, code: 2,
			setup: plan(func(p *nodecidr.Plan) { advStep(p, "worker1").NewPodCIDRs = []string{"10.99.0.0/24"} }),
			msg:   []string{"invalid plan", "10.99.0.0/24"}},
		{name: "plan changes the node mask", args: []string{"--apply"}, code: 2,
			setup: plan(func(p *nodecidr.Plan) { advStep(p, "worker1").NewPodCIDRs = []string{"10.30.1.0/25"} }),
			msg:   []string{"invalid plan", "10.30.1.0/25 is a /25"}},
		{name: "plan target edited to hold the edit", args: []string{"--apply"}, code: 2,
			setup: plan(func(p *nodecidr.Plan) { p.Rebase[0].To = p.Rebase[0].From }),
			msg:   []string{"invalid plan", "outside the plan's target 10.20.0.0/16"}},
		{name: "plan gives two nodes one range", args: []string{"--apply"}, code: 2,
			setup: plan(func(p *nodecidr.Plan) { advStep(p, "worker1").NewPodCIDRs = advStep(p, "worker2").NewPodCIDRs }),
			msg:   []string{"invalid plan", "10.30.2.0/24"}},
		{name: "allocate plan takes the range of a node outside it", args: []string{"--apply"}, code: 2,
			setup: advNodePlan(c, allocate, func(p *nodecidr.Plan) { advStep(p, "worker1").NewPodCIDRs = []string{"10.30.9.0/24"} }),
			msg:   []string{"invalid plan", "10.30.9.0/24 overlaps podCIDR 10.30.9.0/24 held by node other"}},
		{name: "truncated plan", args: []string{"--apply"}, code: 2,
			setup: func(t *testing.T) []string {
				f := filepath.Join(t.TempDir(), "p.yaml")
				require.NoError(t, os.WriteFile(f, []byte("apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: rebase\nsteps:\n- {node: worker1, uid: x, action: recre"), 0o644))
				return []string{"--plan", f}
			},
			msg: []string{"invalid plan"}},
		// Issue 20, defect 2.
		{name: "restart-cni selector", args: append(append([]string{}, allocate...), "--restart-cni", "kube-flannel/a in ((", "--apply"), code: 2,
			msg: []string{"--restart-cni", "a in (("}},
		{name: "select", args: append(append([]string{}, rebase...), "--select", "a in ((", "--apply"), code: 2,
			msg: []string{"--select", "a in (("}},
		{name: "node that does not exist", args: []string{"--from", "10.20.0.0/16", "--to", "10.30.0.0/16", "--nodes", "worker1,nope", "--apply"}, code: 2,
			msg: []string{"no node named nope"}},
		{name: "from is not the range in use", args: []string{"--from", "10.99.0.0/16", "--to", "10.30.0.0/16", "--nodes", "worker1", "--apply"}, code: 2,
			msg: []string{"10.20.1.0/24", "neither inside from 10.99.0.0/16"}},
		{name: "fix with a cluster CIDR not in use", args: []string{"--fix", "--cluster-cidr", "10.50.0.0/16", "--apply"}, code: 2,
			msg: []string{"10.50.0.0/16", "holds none of the 4 podCIDRs in use"}},
		{name: "select matches no node", args: append(append([]string{}, rebase...), "--select", "pool=nope", "--apply"), code: 2,
			msg: []string{"label selector", "pool=nope", "matches no node"}},
		{name: "negative create-grace", args: append(append([]string{}, rebase...), "--create-grace", "-5s", "--apply"), code: 2,
			msg: []string{"--create-grace", "-5s"}},
		{name: "plan file with --nodes", args: []string{"--nodes", "worker1", "--apply"}, code: 2,
			setup: plan(func(*nodecidr.Plan) {}), msg: []string{"--nodes", "--plan"}},
		{name: "allocate target too small", args: []string{"--allocate", "--cluster-cidr", "10.40.0.0/24", "--node-mask", "24", "--apply"}, code: 2,
			msg: []string{"10.40.0.0/24", "none left"}},
	})
	// The kubeconfig itself.
	garbage := clitest.GarbageKubeconfig(t)
	advRunCases(t, c, "noderecreate", func(t *testing.T) []string { return []string{"--journal", filepath.Join(t.TempDir(), "journal")} }, []advCase{
		{name: "missing context", args: append(append([]string{}, rebase...), "--kubeconfig", c.AdminKubeconfig(), "--context", "nope", "--apply"), code: 2,
			msg: []string{"loading kubeconfig", `"nope"`}},
		{name: "garbage kubeconfig", args: append(append([]string{}, rebase...), "--kubeconfig", garbage, "--apply"), code: 2,
			msg: []string{"loading kubeconfig"}},
	})
}

func TestAdversarialDoctor(t *testing.T) {
	advUseBinary("doctor")
	c := advNodesCluster(t)
	kc := func(t *testing.T) []string { return []string{"--kubeconfig", c.AdminKubeconfig()} }
	advRunCases(t, c, "doctor", kc, []advCase{
		{name: "bad new cluster CIDR", args: []string{"--cluster-cidr", "10.20.0.0/16", "--new-cluster-cidr", "10.300.0.0/16"}, code: 2,
			msg: []string{"--new-cluster-cidr", "10.300.0.0/16"}},
		{name: "new node mask without new cluster CIDR", args: []string{"--cluster-cidr", "10.20.0.0/16", "--new-node-mask", "25"}, code: 2,
			msg: []string{"--new-node-mask", "--new-cluster-cidr"}},
		{name: "node mask out of range", args: []string{"--cluster-cidr", "10.20.0.0/16", "--node-mask", "40"}, code: 2,
			msg: []string{"--node-mask", "40"}},
		{name: "bad cluster CIDR", args: []string{"--cluster-cidr", "banana"}, code: 2,
			msg: []string{"--cluster-cidr", "banana"}},
		{name: "bad service CIDR", args: []string{"--cluster-cidr", "10.20.0.0/16", "--service-cidr", "10.96.0.0/33"}, code: 2,
			msg: []string{"--service-cidr", "10.96.0.0/33"}},
		{name: "dump and cluster at once", args: []string{"--cluster-cidr", "10.20.0.0/16", "-f", "nodes.yaml"}, code: 2,
			msg: []string{"-f", "--kubeconfig"}},
		{name: "stray argument", args: []string{"--cluster-cidr", "10.20.0.0/16", "now"}, code: 2,
			msg: []string{`unexpected argument "now"`}},
		{name: "output format", args: []string{"--cluster-cidr", "10.20.0.0/16", "-o", "xml"}, code: 2,
			msg: []string{"-o", "xml"}},
	})
	garbage := clitest.GarbageKubeconfig(t)
	advRunCases(t, c, "doctor", nil, []advCase{
		{name: "missing context", args: []string{"--kubeconfig", c.AdminKubeconfig(), "--context", "nope"}, code: 2,
			msg: []string{"loading kubeconfig", `"nope"`}},
		{name: "garbage kubeconfig", args: []string{"--kubeconfig", garbage}, code: 2,
			msg: []string{"loading kubeconfig"}},
	})
}
