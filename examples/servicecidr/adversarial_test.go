package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/internal/cli/clitest"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// advCase is one hostile run against the story-3 fake cluster (Services in
// 100.64.0.0/13, the "kubernetes" ServiceCIDR): it must exit with code,
// print one last stderr line naming every msg, write nothing and print no
// next step.
type advCase struct {
	name string
	args []string
	code int
	msg  []string
	// plan, when set, edits a plan made for --to 172.24.0.0/15 and passes it
	// as --plan FILE.
	plan func(p map[string]any)
	// raw, when set, is written as the plan file instead.
	raw string
}

// editPlan writes the story-3 plan, edited, to a file.
func editPlan(t *testing.T, cl *servicecidrtest.Cluster, tc advCase) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "plan.yaml")
	if tc.raw != "" {
		require.NoError(t, os.WriteFile(file, []byte(tc.raw), 0o600))
		return file
	}
	code, out, errs := runCLI(t, cl, "plan", "--to", "172.24.0.0/15", "-o", "json")
	require.Equal(t, 0, code, errs)
	var p map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(out), &p))
	tc.plan(p)
	data, err := yaml.Marshal(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, data, 0o600))
	return file
}

func move(p map[string]any, i int) map[string]any {
	return p["moves"].([]any)[i].(map[string]any)
}

func TestAdversarialServiceCIDR(t *testing.T) {
	cases := []advCase{
		// Issue 20, defect 3: a --from that is not the range in use.
		{name: "apply wrong --from", args: []string{"apply", "--to", "172.24.0.0/15", "--from", "10.200.0.0/16", "--apply"},
			code: 2, msg: []string{"--from", "10.200.0.0/16", "100.64.0.0/13"}},
		{name: "plan wrong --from", args: []string{"plan", "--to", "172.24.0.0/15", "--from", "10.200.0.0/16"},
			code: 2, msg: []string{"--from", "10.200.0.0/16", "100.64.0.0/13"}},
		{name: "apply --from part of the range in use", args: []string{"apply", "--to", "172.24.0.0/15", "--from", "100.64.0.0/16", "--apply"},
			code: 2, msg: []string{"--from", "100.64.0.0/16", "100.64.0.0/13"}},
		{name: "dns-service that does not exist", args: []string{"apply", "--to", "172.24.0.0/15", "--dns-service", "kube-system/coredns", "--apply"},
			code: 2, msg: []string{"--dns-service", "kube-system/coredns", "does not exist"}},
		{name: "dns-service that is headless", args: []string{"apply", "--to", "172.24.0.0/15", "--dns-service", "shop/db", "--apply"},
			code: 2, msg: []string{"--dns-service", "shop/db", "headless"}},
		{name: "plan file: two Services share a new IP", plan: func(p map[string]any) {
			move(p, 1)["newIPs"] = move(p, 0)["newIPs"]
		}, args: []string{"apply", "--apply"}, code: 2, msg: []string{"newIPs", "172.24.0.10", "also planned for"}},
		{name: "plan file: new IP outside the target", plan: func(p map[string]any) {
			move(p, 1)["newIPs"] = []any{"10.99.0.7"}
		}, args: []string{"apply", "--apply"}, code: 2, msg: []string{"newIPs", "10.99.0.7", "172.24.0.0/15"}},
		{name: "plan file: new IP is the kubernetes address", plan: func(p map[string]any) {
			move(p, 1)["newIPs"] = []any{"172.24.0.1"}
		}, args: []string{"apply", "--apply"}, code: 2, msg: []string{"newIPs", "172.24.0.1", "default/kubernetes"}},
		{name: "plan file: target cidrs differ from to", plan: func(p map[string]any) {
			p["target"].(map[string]any)["cidrs"] = []any{"172.30.0.0/16"}
		}, args: []string{"apply", "--apply"}, code: 2, msg: []string{"target.cidrs", "172.30.0.0/16"}},
		{name: "plan file: from not in use", plan: func(p map[string]any) {
			p["from"] = []any{"10.200.0.0/16"}
			p["moves"] = []any{}
			delete(p, "kubernetes")
			delete(p, "dns")
			delete(p, "old")
		}, args: []string{"apply", "--apply"}, code: 2, msg: []string{"from", "10.200.0.0/16", "100.64.0.0/13"}},
		{name: "plan file: to overlaps from", plan: func(p map[string]any) {
			p["from"] = []any{"172.0.0.0/8"}
		}, args: []string{"apply", "--apply"}, code: 2, msg: []string{"from", "172.0.0.0/8", "172.24.0.0/15"}},
		{name: "plan file: dns disagrees with its move", plan: func(p map[string]any) {
			p["dns"].(map[string]any)["newIPs"] = []any{"172.24.0.53"}
		}, args: []string{"apply", "--apply"}, code: 2, msg: []string{"dns", "172.24.0.53"}},
		{name: "plan file: kubernetes not at the first address", plan: func(p map[string]any) {
			p["kubernetes"].(map[string]any)["newIPs"] = []any{"172.24.0.2"}
		}, args: []string{"apply", "--apply"}, code: 2, msg: []string{"kubernetes", "172.24.0.2", "172.24.0.1"}},
		{name: "plan file: old ServiceCIDR outside from", plan: func(p map[string]any) {
			p["old"] = []any{map[string]any{"name": "kubernetes", "cidrs": []any{"10.0.0.0/8"}}}
		}, args: []string{"apply", "--apply", "--delete-old"}, code: 2, msg: []string{"old", "10.0.0.0/8"}},
		{name: "plan file: truncated", raw: "apiVersion: cidrshift.io/v1alpha1\nkind: ServiceMovePlan\nfrom: [100.64.0.0/13]\nto: [172.24.0.0/15\n",
			args: []string{"apply", "--apply"}, code: 2, msg: []string{"invalid plan"}},
		{name: "plan file: unknown role", plan: func(p map[string]any) {
			move(p, 1)["role"] = "kubernetes-ish"
		}, args: []string{"apply", "--apply"}, code: 2, msg: []string{"role", "kubernetes-ish"}},
		{name: "plan file: a ClusterIP Service skipped", plan: func(p map[string]any) {
			ms := p["moves"].([]any)
			web := ms[1].(map[string]any)
			p["moves"] = ms[:1]
			p["skipped"] = append(p["skipped"].([]any), map[string]any{"namespace": web["namespace"], "name": web["name"], "reason": "later"})
		}, args: []string{"apply", "--apply"}, code: 2, msg: []string{"skipped", "shop/web", "100.64.3.7"}},
		{name: "add a range inside one in use", args: []string{"add", "--to", "100.64.0.0/16", "--apply", "--allow-well-known"},
			code: 2, msg: []string{"--to", "100.64.0.0/16", "kubernetes", "100.64.0.0/13"}},
		{name: "--plan with --to", plan: func(map[string]any) {}, args: []string{"apply", "--to", "172.24.0.0/15", "--apply"},
			code: 2, msg: []string{"--plan", "--to"}},
		{name: "--plan with --allocate", plan: func(map[string]any) {}, args: []string{"apply", "--allocate", "free", "--apply"},
			code: 2, msg: []string{"--plan", "--allocate"}},
		{name: "--plan with --dns-service", plan: func(map[string]any) {}, args: []string{"apply", "--dns-service", "kube-system/kube-dns", "--apply"},
			code: 2, msg: []string{"--plan", "--dns-service"}},
		{name: "--apply with --dry-run client", args: []string{"apply", "--to", "172.24.0.0/15", "--apply", "--dry-run", "client"},
			code: 2, msg: []string{"--apply", "--dry-run", "client"}},
		{name: "negative --drain-timeout", args: []string{"apply", "--to", "172.24.0.0/15", "--apply", "--delete-old", "--drain-timeout", "-1s"},
			code: 2, msg: []string{"--drain-timeout", "-1s"}},
		{name: "--drain-timeout without --delete-old", args: []string{"apply", "--to", "172.24.0.0/15", "--apply", "--drain-timeout", "1m"},
			code: 2, msg: []string{"--drain-timeout", "--delete-old"}},
		{name: "negative add --wait", args: []string{"add", "--to", "172.24.0.0/15", "--apply", "--wait", "-5s"},
			code: 2, msg: []string{"--wait", "-5s"}},
		{name: "add invalid --name", args: []string{"add", "--to", "172.24.0.0/15", "--apply", "--name", "Bad_Name"},
			code: 2, msg: []string{"--name", "Bad_Name"}},
		{name: "add --apply with --dry-run client", args: []string{"add", "--to", "172.24.0.0/15", "--apply", "--dry-run", "client"},
			code: 2, msg: []string{"--apply", "--dry-run", "client"}},
		{name: "stray argument", args: []string{"apply", "--to", "172.24.0.0/15", "--apply", "now"},
			code: 2, msg: []string{`"now"`}},
		{name: "apply invalid --name", args: []string{"apply", "--to", "172.24.0.0/15", "--apply", "--name", "-x-"},
			code: 2, msg: []string{"--name", "-x-"}},
		{name: "--to overlapping an existing ServiceCIDR", args: []string{"apply", "--to", "100.64.0.0/12", "--from", "100.64.0.0/13", "--apply", "--allow-well-known"},
			code: 2, msg: []string{"--to", "100.64.0.0/12"}},
		{name: "verify --dns-service that does not exist", args: []string{"verify", "--to", "100.64.0.0/13", "--dns-service", "kube-system/coredns"},
			code: 2, msg: []string{"--dns-service", "kube-system/coredns", "does not exist"}},
		{name: "verify --dns-ip without its family in --to", args: []string{"verify", "--to", "100.64.0.0/13", "--dns-ip", "fd00::a"},
			code: 2, msg: []string{"--dns-ip", "fd00::a"}},
		{name: "--qps not a number", args: []string{"apply", "--to", "172.24.0.0/15", "--qps", "NaN", "--apply"},
			code: 2, msg: []string{"--qps", "NaN"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl := story3(t)
			args := append([]string{}, tc.args...)
			if tc.plan != nil || tc.raw != "" {
				args = append(args, "--plan", editPlan(t, cl, tc))
			}
			if tc.args[0] == "apply" {
				args = append(args, "--journal", filepath.Join(t.TempDir(), "journal"))
			}
			code, out, errs := runCLI(t, cl, args...)
			assert.Equal(t, tc.code, code, "exit code of %v:\n%s%s", args, out, errs)
			lines := strings.Split(strings.TrimRight(errs, "\n"), "\n")
			last := lines[len(lines)-1]
			for _, m := range tc.msg {
				assert.Contains(t, last, m, "the last stderr line of %v", args)
			}
			assert.Empty(t, cl.Writes(), "%v must not write", args)
			assert.NotRegexp(t, clitest.NextStep, out+errs, "a refused run prints no next step")
			assert.NotContains(t, out, "move Services from", "a refused run prints no plan")
		})
	}
}

// TestAdversarialKubeconfig: a kubeconfig that cannot be loaded, or a
// context it lacks, is bad input (2); a cluster that does not answer is
// exit 4, within seconds.
func TestAdversarialKubeconfig(t *testing.T) {
	dir := t.TempDir()
	garbage := clitest.GarbageKubeconfig(t)
	kc := clitest.UnreachableKubeconfig(t)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"apply", "--to", "172.24.0.0/15", "--apply", "--journal", dir, "--kubeconfig", garbage}, 2, "kubeconfig"},
		{[]string{"show", "--kubeconfig", filepath.Join(dir, "missing")}, 2, "kubeconfig"},
		{[]string{"plan", "--to", "172.24.0.0/15", "--kubeconfig", kc, "--context", "nope"}, 2, `context "nope" does not exist`},
		{[]string{"apply", "--to", "172.24.0.0/15", "--apply", "--journal", dir, "--kubeconfig", kc}, 4, "127.0.0.1:1"},
	} {
		var out, errb strings.Builder
		code := run(tc.args, &out, &errb)
		assert.Equal(t, tc.code, code, "%v: %s", tc.args, errb.String())
		lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
		assert.Contains(t, lines[len(lines)-1], tc.msg, "%v", tc.args)
		assert.NotRegexp(t, clitest.NextStep, out.String()+errb.String())
	}
}
