package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/internal/cli/clitest"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// editedPlan writes storyOne's rebase plan (10.10.0.0/18 -> 10.20.0.0/16)
// to a file after edit changed it, the way a person could by hand.
func editedPlan(edit func(p *nodecidr.Plan)) func(t *testing.T, dir string) []string {
	return func(t *testing.T, dir string) []string {
		c, _ := storyOne()
		file := filepath.Join(dir, "plan.yaml")
		r := runWith(t, c, "--from", "10.10.0.0/18", "--to", "10.20.0.0/16", "--plan", file, "--journal", filepath.Join(dir, "j0"))
		require.Equal(t, 0, r.code, r.stderr)
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		p, err := nodecidr.DecodePlan(data)
		require.NoError(t, err)
		require.Equal(t, "w1", p.Steps[0].Node)
		edit(p)
		y, err := yaml.Marshal(p) // no validation: what a text editor allows
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(file, y, 0o644))
		return []string{"--plan", file}
	}
}

func rawPlan(text string) func(t *testing.T, dir string) []string {
	return func(t *testing.T, dir string) []string {
		file := filepath.Join(dir, "plan.yaml")
		require.NoError(t, os.WriteFile(file, []byte(text), 0o644))
		return []string{"--plan", file}
	}
}

// TestAdversarial runs noderecreate with hostile input against a fake
// cluster that enforces the API's rules: each case exits with its code,
// prints one line naming the field and the value, prints no next step, and
// writes nothing.
func TestAdversarial(t *testing.T) {
	rebase := []string{"--from", "10.10.0.0/18", "--to", "10.20.0.0/16"}
	for _, tc := range []struct {
		name  string
		args  []string
		setup func(t *testing.T, dir string) []string
		code  int
		msg   []string
	}{
		// Issue 20, defect 1: a hand-edited plan.
		{"plan gives w1 the range w2 holds", []string{"--apply"}, editedPlan(func(p *nodecidr.Plan) { p.Steps[0].NewPodCIDRs = []string{"10.10.2.0/24"} }),
			2, []string{"invalid plan", "steps[0] (node w1).newPodCIDRs[0] 10.10.2.0/24", "outside the plan's target 10.20.0.0/16"}},
		{"plan podCIDR outside every target, server dry run", []string{"--dry-run=server"}, editedPlan(func(p *nodecidr.Plan) { p.Steps[0].NewPodCIDRs = []string{"10.99.0.0/24"} }),
			2, []string{"invalid plan", "10.99.0.0/24", "outside the plan's target 10.20.0.0/16"}},
		{"plan podCIDR outside every target, client dry run", []string{"--dry-run=client"}, editedPlan(func(p *nodecidr.Plan) { p.Steps[0].NewPodCIDRs = []string{"10.99.0.0/24"} }),
			2, []string{"invalid plan", "10.99.0.0/24"}},
		{"plan shares a range between two steps", []string{"--apply"}, editedPlan(func(p *nodecidr.Plan) { p.Steps[0].NewPodCIDRs = p.Steps[1].NewPodCIDRs }),
			2, []string{"invalid plan", "10.20.2.0/24"}},
		{"plan changes the node mask", []string{"--apply"}, editedPlan(func(p *nodecidr.Plan) { p.Steps[0].NewPodCIDRs = []string{"10.20.1.0/25"} }),
			2, []string{"invalid plan", "10.20.1.0/25 is a /25"}},
		{"plan target edited", []string{"--apply"}, editedPlan(func(p *nodecidr.Plan) { p.Rebase[0].To = p.Rebase[0].From }),
			2, []string{"invalid plan", "outside the plan's target 10.10.0.0/18"}},
		{"plan without its rebase pairs", []string{"--apply"}, editedPlan(func(p *nodecidr.Plan) { p.Rebase = nil }),
			2, []string{"invalid plan", "rebase needs one from/to pair"}},
		{"plan step without uid", []string{"--apply"}, editedPlan(func(p *nodecidr.Plan) { p.Steps[1].UID = "" }),
			2, []string{"invalid plan", "steps[1] (node w2).uid is empty"}},
		{"truncated plan", []string{"--apply"}, rawPlan("apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: rebase\nsteps:\n- {node: w1, uid: uid-w1, action: recre"),
			2, []string{"--plan", "invalid plan"}},
		{"plan with an unknown field", []string{"--apply"}, rawPlan("apiVersion: cidrshift.io/v1alpha1\nkind: NodePodCIDRPlan\nmode: rebase\nsteps: []\nforce: true\n"),
			2, []string{"invalid plan", `unknown field "force"`}},
		{"plan of another kind", []string{"--apply"}, rawPlan("apiVersion: v1\nkind: ConfigMap\nmode: rebase\nsteps: []\n"),
			2, []string{"invalid plan", `kind "ConfigMap"`}},
		// Issue 20, defect 2: a selector found bad only mid-apply.
		{"restart-cni selector", []string{"--allocate", "--cluster-cidr", "10.30.0.0/16", "--apply", "--restart-cni", "kube-flannel/a in (("}, nil,
			2, []string{"--restart-cni", `"kube-flannel/a in (("`}},
		{"restart-cni namespace", append(rebase, "--apply", "--restart-cni", "Kube_Flannel/app=flannel"), nil, 2, []string{"--restart-cni", "Kube_Flannel"}},
		{"restart-cni without selector", append(rebase, "--apply", "--restart-cni", "kube-flannel/"), nil, 2, []string{"--restart-cni", `"kube-flannel/"`}},
		{"select", append(rebase, "--apply", "--select", "a in (("), nil, 2, []string{"--select", `"a in (("`}},
		{"nodes with no name", append(rebase, "--apply", "--nodes", ","), nil, 2, []string{"--nodes", `","`}},
		{"nodes with a bad name", append(rebase, "--apply", "--nodes", "w1,W_2"), nil, 2, []string{"--nodes", `"W_2"`}},
		{"select matches no node", append(rebase, "--apply", "--select", "pool=nope"), nil, 2, []string{"label selector", `"pool=nope"`, "matches no node"}},
		{"fix with a cluster CIDR not in use", []string{"--fix", "--cluster-cidr", "10.50.0.0/16", "--apply"}, nil, 2, []string{"10.50.0.0/16", "holds none of the 3 podCIDRs in use"}},
		{"node that does not exist", append(rebase, "--apply", "--nodes", "w1,nope"), nil, 2, []string{"no node named nope"}},
		{"negative create-grace", append(rebase, "--apply", "--create-grace", "-1s"), nil, 2, []string{"--create-grace", "-1s"}},
		{"rate NaN", append(rebase, "--apply", "--rate", "NaN"), nil, 2, []string{"--rate", "NaN"}},
		{"negative rate", append(rebase, "--apply", "--rate", "-2"), nil, 2, []string{"--rate", "-2"}},
		{"negative verbosity", append(rebase, "-v", "-1"), nil, 2, []string{"-v", "-1"}},
		{"dry-run value", append(rebase, "--dry-run", "yes"), nil, 2, []string{"--dry-run", `"yes"`}},
		// Flags that conflict with a plan file, or with the mode.
		{"plan file with --select", []string{"--apply", "--select", "pool=a"}, editedPlan(func(*nodecidr.Plan) {}), 2, []string{"--select", "--plan"}},
		{"plan file with --nodes", []string{"--apply", "--nodes", "w1"}, editedPlan(func(*nodecidr.Plan) {}), 2, []string{"--nodes", "--plan"}},
		{"plan file with --cluster-cidr", []string{"--apply", "--cluster-cidr", "10.30.0.0/16"}, editedPlan(func(*nodecidr.Plan) {}), 2, []string{"--cluster-cidr", "--plan"}},
		{"rebase with --node-mask", append(rebase, "--apply", "--node-mask", "25"), nil, 2, []string{"--node-mask", "--from/--to"}},
		{"two modes", append(rebase, "--fix", "--apply"), nil, 2, []string{"choose one of --from/--to, --fix and --allocate"}},
		// Intent must match the cluster.
		{"from is not the range in use", []string{"--from", "10.99.0.0/16", "--to", "10.20.0.0/16", "--apply"}, nil, 2, []string{"10.10.1.0/24", "neither inside from 10.99.0.0/16"}},
		{"from with host bits", []string{"--from", "10.10.0.1/18", "--to", "10.20.0.0/16", "--apply"}, nil, 2, []string{"--from", "10.10.0.1/18"}},
		{"to is not a CIDR", []string{"--from", "10.10.0.0/18", "--to", "10.20.0.0", "--apply"}, nil, 2, []string{"--to", "10.20.0.0"}},
		{"allocate mask out of range", []string{"--allocate", "--cluster-cidr", "10.30.0.0/16", "--node-mask", "33", "--apply"}, nil, 2, []string{"--node-mask", "33"}},
		{"allocate target too small", []string{"--allocate", "--cluster-cidr", "10.30.0.0/23", "--node-mask", "24", "--apply"}, nil, 2, []string{"10.30.0.0/23", "none left"}},
		{"stray argument", append(rebase, "--apply", "now"), nil, 2, []string{`unexpected argument "now"`}},
		{"journal is a file", append(rebase, "--apply"), func(t *testing.T, dir string) []string {
			f := filepath.Join(dir, "j.txt")
			require.NoError(t, os.WriteFile(f, []byte("x"), 0o644))
			return []string{"--journal", f}
		}, 2, []string{"--journal", "j.txt", "is a file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append([]string{"--journal", filepath.Join(dir, "j")}, tc.args...)
			if tc.setup != nil {
				args = append(args, tc.setup(t, dir)...)
			}
			c, s := storyOne()
			before := s.Nodes()
			var writes []string
			c.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
				switch a.GetVerb() {
				case "get", "list", "watch":
				default:
					if a.GetResource().Resource != "selfsubjectaccessreviews" {
						writes = append(writes, a.GetVerb()+" "+a.GetResource().Resource)
					}
				}
				return false, nil, nil
			})
			r := runWith(t, c, args...)
			ctxt := strings.Join(args, " ") + "\nstdout:\n" + r.stdout + "\nstderr:\n" + r.stderr
			assert.Equal(t, tc.code, r.code, ctxt)
			lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
			require.Len(t, lines, 1, "one line on stderr: %s", ctxt)
			assert.True(t, strings.HasPrefix(lines[0], "noderecreate: "), ctxt)
			for _, m := range tc.msg {
				assert.Contains(t, lines[0], m, ctxt)
			}
			assert.NotRegexp(t, clitest.NextStep, r.stdout+r.stderr, ctxt)
			assert.Empty(t, writes, "nothing is written: %s", ctxt)
			assert.Equal(t, before, s.Nodes(), ctxt)
		})
	}
}

// TestAdversarialKubeconfig: a kubeconfig that cannot be loaded, or a context
// it lacks, is bad input (2); a server that does not answer is exit 4 within
// seconds.
func TestAdversarialKubeconfig(t *testing.T) {
	dir := t.TempDir()
	garbage := clitest.GarbageKubeconfig(t)
	dead := clitest.UnreachableKubeconfig(t)
	rebase := []string{"--from", "10.10.0.0/18", "--to", "10.20.0.0/16", "--apply", "--journal", filepath.Join(dir, "j")}
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"garbage kubeconfig", []string{"--kubeconfig", garbage}, 2, "loading kubeconfig"},
		{"missing kubeconfig", []string{"--kubeconfig", filepath.Join(dir, "none")}, 2, "loading kubeconfig"},
		{"missing context", []string{"--kubeconfig", dead, "--context", "nope"}, 2, `"nope"`},
		{"unreachable", []string{"--kubeconfig", dead}, 4, "127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.code == 4 && testing.Short() {
				t.Skip("waits for the reach timeout")
			}
			var out, errb strings.Builder
			start := time.Now()
			code := run(context.Background(), append(append([]string{}, rebase...), tc.args...), &out, &errb)
			assert.Equal(t, tc.code, code, errb.String())
			assert.Less(t, time.Since(start), 20*time.Second)
			lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
			assert.Contains(t, lines[len(lines)-1], tc.msg)
			assert.NotRegexp(t, clitest.NextStep, out.String()+errb.String())
		})
	}
}
