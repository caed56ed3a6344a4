package main

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/cli/clitest"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/migrate"
)

// countWrites counts every write the runbook could make to the cluster:
// IPPools, Nodes, workloads (not their status), ConfigMaps, evictions.
func countWrites(t *testing.T, conn connector) *atomic.Int64 {
	t.Helper()
	cl, err := conn(context.Background(), "", "")
	require.NoError(t, err)
	kube := cl.Kube.(*fake.Clientset)
	dyn := cl.Dynamic.(*dynamicfake.FakeDynamicClient)
	var n atomic.Int64
	count := func(a k8stesting.Action) (bool, runtime.Object, error) {
		// Status is the simulated controllers' (calicotest.Loop runs in the
		// background); the runbook never writes it.
		if a.GetSubresource() != "status" {
			n.Add(1)
		}
		return false, nil, nil
	}
	for _, verb := range []string{"create", "update", "patch", "delete"} {
		dyn.PrependReactor(verb, "ippools", count)
		for _, r := range []string{"nodes", "deployments", "statefulsets", "daemonsets", "configmaps"} {
			kube.PrependReactor(verb, r, count)
		}
	}
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			n.Add(1)
		}
		return false, nil, nil
	})
	return &n
}

// TestAdversarialOffline: hostile input, each refused with exit 2 (or 4) and
// one line naming the flag and the value, before any write.
func TestAdversarialOffline(t *testing.T) {
	conn, _ := fakeCluster(t, kubeadmConfigMaps(t)...)
	writes := countWrites(t, conn)
	svc := []string{"--service-cidr", "10.233.0.0/18"}
	applyArgs := func(extra ...string) []string {
		return append(append([]string{"--journal", t.TempDir(), "--apply"}, svc...), extra...)
	}
	garbage := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(garbage, []byte("{{{ not a kubeconfig"), 0o600))
	manifests := t.TempDir()
	recorded := t.TempDir()
	cases := []struct {
		name  string
		args  []string
		setup func(t *testing.T)
		code  int
		msg   []string
		real  bool
	}{
		{name: "stray positional argument", args: applyArgs("--to", newCIDR, "now"), code: 2, msg: []string{`unexpected argument "now"`}},
		{name: "--from is not the old pool's range", args: applyArgs("--to", newCIDR, "--from", "10.233.128.0/18"), code: 2,
			msg: []string{"--from 10.233.128.0/18", oldPool, "10.233.64.0/18"}},
		{name: "--from inside the old pool's range", args: applyArgs("--to", newCIDR, "--from", "10.233.64.0/24"), code: 2,
			msg: []string{"--from 10.233.64.0/24", "10.233.64.0/18"}},
		{name: "--old-pool that does not exist, --from given", args: applyArgs("--to", newCIDR, "--from", "10.233.64.0/18", "--old-pool", "nope"), code: 2,
			msg: []string{"--old-pool", `"nope"`}},
		{name: "--to equal to the old range", args: applyArgs("--to", "10.233.64.0/18", "--service-cidr", "10.96.0.0/12"), code: 2,
			msg: []string{"--to 10.233.64.0/18"}},
		{name: "--to overlapping the old pool", args: applyArgs("--to", "10.233.0.0/17", "--service-cidr", "10.96.0.0/12"), code: 2,
			msg: []string{"10.233.0.0/17", "overlaps IPPool " + oldPool}},
		{name: "--to overlapping the Service CIDR", args: applyArgs("--to", "10.233.0.0/16"), code: 2, msg: []string{"--to 10.233.0.0/16", "10.233.0.0/18"}},
		{name: "--to holding a node address", args: applyArgs("--to", "192.168.0.0/16"), code: 2, msg: []string{"--to 192.168.0.0/16", "node"}},
		{name: "--to too small for the nodes", args: applyArgs("--to", "10.200.0.0/23"), code: 2, msg: []string{"--to 10.200.0.0/23"}},
		{name: "--new-pool invalid name", args: applyArgs("--to", newCIDR, "--new-pool", "Bad_Name"), code: 2, msg: []string{"metadata.name", `"Bad_Name"`}},
		{name: "--new-pool named as --old-pool", args: applyArgs("--to", newCIDR, "--new-pool", oldPool), code: 2, msg: []string{"--new-pool", oldPool}},
		{name: "negative --poll-interval", args: applyArgs("--to", newCIDR, "--poll-interval", "-1s"), code: 2, msg: []string{"--poll-interval", "-1s"}},
		{name: "zero --rollout-timeout", args: applyArgs("--to", newCIDR, "--rollout-timeout", "0s"), code: 2, msg: []string{"--rollout-timeout", "0s"}},
		{name: "negative --drain-timeout", args: applyArgs("--to", newCIDR, "--drain-timeout", "-5m"), code: 2, msg: []string{"--drain-timeout", "-5m0s"}},
		{name: "--apply with --dry-run=server", args: applyArgs("--to", newCIDR, "--dry-run", "server"), code: 2, msg: []string{"--apply", "--dry-run=server"}},
		{name: "--apply with --dry-run=client", args: applyArgs("--to", newCIDR, "--dry-run", "client"), code: 2, msg: []string{"--apply", "--dry-run=client"}},
		{name: "--node-mask 33", args: applyArgs("--to", newCIDR, "--node-mask", "33"), code: 2, msg: []string{"--node-mask 33"}},
		{name: "--node-mask shorter than --to", args: applyArgs("--to", newCIDR, "--node-mask", "12"), code: 2, msg: []string{"--to 10.200.0.0/16", "/12"}},
		{name: "--to IPv6, --service-cidr IPv4", args: applyArgs("--to", "fd00:200::/48"), code: 2, msg: []string{"--service-cidr 10.233.0.0/18", "not of --to fd00:200::/48's family"}},
		{name: "--from with host bits", args: applyArgs("--to", newCIDR, "--from", "10.233.64.1/18"), code: 2, msg: []string{"--from 10.233.64.1/18", "host bits"}},
		{name: "--manifests missing", args: applyArgs("--to", newCIDR, "--manifests", "/nonexistent/manifests"), code: 2, msg: []string{"--manifests /nonexistent/manifests"}},
		{name: "--out equal to --manifests", args: applyArgs("--to", newCIDR, "--manifests", manifests, "--out", manifests), code: 2, msg: []string{"--out", "--manifests"}},
		{name: "journal records another move", setup: func(t *testing.T) {
			j, err := journal.Open(recorded)
			require.NoError(t, err)
			require.NoError(t, j.Put(migrate.IntentKey, migrate.CalicoPodCIDRIntent{From: netip.MustParsePrefix("10.233.64.0/18"), To: netip.MustParsePrefix(newCIDR),
				ServiceCIDR: netip.MustParsePrefix("10.233.0.0/18"), OldPool: oldPool, NewPool: "ippool-10-200-0-0-16", NewPoolCIDR: netip.MustParsePrefix(newCIDR)}))
			require.NoError(t, j.Close())
		}, args: []string{"--to", "10.201.0.0/16", "--service-cidr", "10.233.0.0/18", "--journal", recorded, "--apply"}, code: 2,
			msg: []string{"--journal", "10.200.0.0/16"}},
		{name: "garbage kubeconfig", args: applyArgs("--to", newCIDR, "--kubeconfig", garbage), code: 2, msg: []string{"kubeconfig"}, real: true},
		{name: "missing kubeconfig context", args: applyArgs("--to", newCIDR, "--kubeconfig", clitest.UnreachableKubeconfig(t), "--context", "nope"), code: 2, msg: []string{"kubeconfig", "nope"}, real: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup(t)
			}
			before := writes.Load()
			var out, errb bytes.Buffer
			c := conn
			if tc.real {
				c = connectorWith(&errb)
			}
			code := runWith(context.Background(), tc.args, &out, &errb, c)
			ctxt := strings.Join(tc.args, " ") + "\nstdout:\n" + out.String() + "\nstderr:\n" + errb.String()
			assert.Equal(t, tc.code, code, ctxt)
			lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
			assert.Len(t, lines, 1, "one line: %s", ctxt)
			for _, m := range tc.msg {
				assert.Contains(t, lines[len(lines)-1], m, ctxt)
			}
			assert.Equal(t, before, writes.Load(), "nothing written: %s", ctxt)
			assert.NotRegexp(t, clitest.NextStep, out.String()+errb.String(), ctxt)
		})
	}
}

// An unreachable API server is exit 4 within seconds, with progress shown.
func TestAdversarialUnreachable(t *testing.T) {
	kc := clitest.UnreachableKubeconfig(t)
	var out, errb bytes.Buffer
	start := time.Now()
	code := runWith(context.Background(), []string{"--to", newCIDR, "--service-cidr", "10.233.0.0/18", "--kubeconfig", kc, "--journal", t.TempDir(), "--apply"}, &out, &errb, connectorWith(&errb))
	assert.Equal(t, 4, code, out.String()+errb.String())
	assert.Less(t, time.Since(start), 30*time.Second)
	assert.Contains(t, errb.String(), "waiting for the API server")
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	assert.Contains(t, lines[len(lines)-1], "unreachable")
}
