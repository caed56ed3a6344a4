package main

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/internal/cli/clitest"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

// TestAdversarialMigrateServiceCIDR: hostile runs of the runbook against the
// story-3 fake cluster (Services in 100.64.0.0/13). Each must exit with
// code, end stderr with one line naming the field and the value, write
// nothing to the cluster, and print no step to carry out.
func TestAdversarialMigrateServiceCIDR(t *testing.T) {
	type advCase struct {
		name string
		args []string
		code int
		msg  []string
		// setup returns extra arguments; it may prepare the cluster (its
		// writes are not counted) or files.
		setup func(t *testing.T, cl *servicecidrtest.Cluster) []string
	}
	journalArgs := func(t *testing.T, _ *servicecidrtest.Cluster) []string {
		return []string{"--journal", filepath.Join(t.TempDir(), "journal")}
	}
	manifests := func(files map[string]string) func(t *testing.T, cl *servicecidrtest.Cluster) []string {
		return func(t *testing.T, cl *servicecidrtest.Cluster) []string {
			dir := t.TempDir()
			for name, body := range files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
			}
			return append(journalArgs(t, cl), "--manifests", dir)
		}
	}
	cases := []advCase{
		// Issue 20, defect 3.
		{name: "wrong --from", args: []string{"--to", "172.24.0.0/15", "--from", "10.200.0.0/16", "--apply"}, setup: journalArgs,
			code: 2, msg: []string{"--from", "10.200.0.0/16", "100.64.0.0/13"}},
		{name: "wrong --from, plan only", args: []string{"--to", "172.24.0.0/15", "--from", "10.200.0.0/16"},
			code: 2, msg: []string{"--from", "10.200.0.0/16", "100.64.0.0/13"}},
		{name: "wrong --from, server dry run", args: []string{"--to", "172.24.0.0/15", "--from", "10.200.0.0/16", "--dry-run", "server"},
			code: 2, msg: []string{"--from", "10.200.0.0/16", "100.64.0.0/13"}},
		{name: "--from part of the range in use", args: []string{"--to", "172.24.0.0/15", "--from", "100.64.0.0/16", "--apply"}, setup: journalArgs,
			code: 2, msg: []string{"--from", "100.64.0.0/16", "100.64.0.0/13", "covers only part"}},
		{name: "--from of the other family", args: []string{"--to", "172.24.0.0/15", "--from", "fd00:64::/108", "--apply"}, setup: journalArgs,
			code: 2, msg: []string{"--to", "172.24.0.0/15", "IPv6"}},
		{name: "--to overlapping --from", args: []string{"--to", "100.64.0.0/16", "--from", "100.64.0.0/13", "--apply"}, setup: journalArgs,
			code: 2, msg: []string{"--to", "100.64.0.0/16", "100.64.0.0/13"}},
		{name: "--to well-known range", args: []string{"--to", "100.72.0.0/13", "--apply"}, setup: journalArgs,
			code: 2, msg: []string{"--to", "100.72.0.0/13"}},
		{name: "--to too small for kube-apiserver", args: []string{"--to", "172.24.0.0/30", "--apply"}, setup: journalArgs,
			code: 2, msg: []string{"--to", "172.24.0.0/30"}},
		{name: "target name taken by another range", args: []string{"--to", "172.24.0.0/15", "--apply"},
			setup: func(t *testing.T, cl *servicecidrtest.Cluster) []string {
				c := client(t, cl)
				_, err := c.Create(t.Context(), servicecidr.TargetName([]netip.Prefix{netip.MustParsePrefix("172.24.0.0/15")}),
					[]netip.Prefix{netip.MustParsePrefix("172.30.0.0/16")}, servicecidr.WriteOptions{})
				require.NoError(t, err)
				return journalArgs(t, cl)
			},
			code: 2, msg: []string{"cidrshift-172-24-0-0-15", "172.30.0.0/16"}},
		{name: "--apply with --dry-run client", args: []string{"--to", "172.24.0.0/15", "--apply", "--dry-run", "client"}, setup: journalArgs,
			code: 2, msg: []string{"--apply", "--dry-run", "client"}},
		{name: "negative --drain-timeout", args: []string{"--to", "172.24.0.0/15", "--apply", "--drain-timeout", "-1s"}, setup: journalArgs,
			code: 2, msg: []string{"--drain-timeout", "-1s"}},
		{name: "zero --ready-timeout", args: []string{"--to", "172.24.0.0/15", "--apply", "--ready-timeout", "0s"}, setup: journalArgs,
			code: 2, msg: []string{"--ready-timeout", "0s"}},
		{name: "negative --poll-interval", args: []string{"--to", "172.24.0.0/15", "--apply", "--poll-interval", "-5ms"}, setup: journalArgs,
			code: 2, msg: []string{"--poll-interval", "-5ms"}},
		{name: "stray argument", args: []string{"--to", "172.24.0.0/15", "--apply", "go"}, setup: journalArgs,
			code: 2, msg: []string{`"go"`}},
		{name: "--journal is a file", args: []string{"--to", "172.24.0.0/15", "--apply"},
			setup: func(t *testing.T, _ *servicecidrtest.Cluster) []string {
				f := filepath.Join(t.TempDir(), "j")
				require.NoError(t, os.WriteFile(f, nil, 0o600))
				return []string{"--journal", f}
			},
			code: 2, msg: []string{"--journal", "not a directory"}},
		{name: "--journal of another move", args: []string{"--to", "172.24.0.0/15", "--apply"},
			setup: func(t *testing.T, _ *servicecidrtest.Cluster) []string {
				dir := filepath.Join(t.TempDir(), "journal")
				j, err := journal.Open(dir)
				require.NoError(t, err)
				require.NoError(t, j.Put(migrate.IntentKey, migrate.ServiceCIDRIntent{From: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/13")}, To: []netip.Prefix{netip.MustParsePrefix("172.28.0.0/16")}}))
				require.NoError(t, j.Close())
				return []string{"--journal", dir}
			},
			code: 2, msg: []string{"--journal", "172.28.0.0/16"}},
		{name: "--manifests without either manifest", args: []string{"--to", "172.24.0.0/15", "--apply"}, setup: manifests(map[string]string{"etcd.yaml": "x: 1\n"}),
			code: 2, msg: []string{"--manifests", "kube-apiserver.yaml"}},
		{name: "--manifests with a garbage manifest", args: []string{"--to", "172.24.0.0/15", "--apply"}, setup: manifests(map[string]string{"kube-apiserver.yaml": "\x00\x01: [not yaml"}),
			code: 2, msg: []string{"--manifests", "kube-apiserver.yaml"}},
		{name: "--out without --manifests", args: []string{"--to", "172.24.0.0/15", "--apply", "--out", "/tmp/cidrshift-out"}, setup: journalArgs,
			code: 2, msg: []string{"--out", "/tmp/cidrshift-out", "--manifests"}},
		{name: "-o not a format", args: []string{"--to", "172.24.0.0/15", "--apply", "-o", "xml"}, setup: journalArgs,
			code: 2, msg: []string{"-o", "xml"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl := story3(t, true)
			a := append([]string{}, tc.args...)
			if tc.setup != nil {
				a = append(a, tc.setup(t, cl)...)
			}
			before := cl.Writes()
			// The fast waits first: a case's own duration flag comes later and wins.
			code, out, errs := runCLI(t, cl, append(append([]string{}, fast...), a...)...)
			assert.Equal(t, tc.code, code, "exit code of %v:\n%s%s", a, out, errs)
			lines := strings.Split(strings.TrimRight(errs, "\n"), "\n")
			last := lines[len(lines)-1]
			for _, m := range tc.msg {
				assert.Contains(t, last, m, "the last stderr line of %v", a)
			}
			assert.Equal(t, before, cl.Writes(), "%v must not write", a)
			assert.NotRegexp(t, clitest.NextStep, out+errs, "a refused run prints no next step")
			assert.NotContains(t, out, "WAITING", "a refused run prints no operator step")
		})
	}
}

// TestWrongFromLeavesNoJournal: a refused --from records nothing, so the
// same journal takes the right range afterwards.
func TestWrongFromLeavesNoJournal(t *testing.T) {
	cl := story3(t, true)
	dir := filepath.Join(t.TempDir(), "journal")
	code, _, errs := runCLI(t, cl, args("--to", "172.24.0.0/15", "--from", "10.200.0.0/16", "--journal", dir, "--apply")...)
	require.Equal(t, exitBad, code, errs)
	assert.Empty(t, cl.Writes())
	code, out, errs := runCLI(t, cl, args("--to", "172.24.0.0/15", "--from", "100.64.0.0/13", "--journal", dir, "--apply")...)
	assert.Equal(t, exitWaiting, code, "%s%s", out, errs)
	assert.Contains(t, out, "move-services [completed]")
}

func TestAdversarialKubeconfig(t *testing.T) {
	dir := t.TempDir()
	garbage := clitest.GarbageKubeconfig(t)
	kc := clitest.UnreachableKubeconfig(t)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--to", "172.24.0.0/15", "--apply", "--journal", filepath.Join(dir, "j1"), "--kubeconfig", garbage}, exitBad, "kubeconfig"},
		{[]string{"--to", "172.24.0.0/15", "--kubeconfig", kc, "--context", "nope"}, exitBad, `context "nope" does not exist`},
		{[]string{"--to", "172.24.0.0/15", "--apply", "--journal", filepath.Join(dir, "j2"), "--kubeconfig", kc}, 4, "127.0.0.1:1"},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		assert.Equal(t, tc.code, code, "%v: %s", tc.args, errb.String())
		lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
		assert.Contains(t, lines[len(lines)-1], tc.msg, "%v", tc.args)
		assert.NotRegexp(t, clitest.NextStep, out.String()+errb.String())
		assert.NotContains(t, out.String(), "runbook:", "a refused run prints no runbook")
	}
}

func client(t *testing.T, cl *servicecidrtest.Cluster) *servicecidr.Client {
	t.Helper()
	c, err := servicecidr.New(t.Context(), servicecidr.Options{Kube: cl.Kube, Dynamic: cl.Dynamic})
	require.NoError(t, err)
	return c
}
