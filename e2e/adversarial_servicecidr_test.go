package e2e_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/internal/cli/clitest"
	"github.com/cidrshift/cidrshift/servicecidr"
)

// The adversarial suite for examples/servicecidr and the runbook
// examples/migrate-servicecidr on a real control plane whose Services live
// in 10.96.0.0/12: every case is bad input that would change the cluster
// if it were not refused (run with --apply), and must leave it unchanged,
// exit with the contract's code and name the field and the value.

const advSCRange = "10.96.0.0/12"

// advSCFixture creates the cluster DNS Service at the tenth address, a
// Service pinned outside 10.96.0.0/16 (so a --from of that /16 would strand
// it), one allocated, and a headless one.
func advSCFixture(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "adv"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	port := []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns", Labels: map[string]string{"k8s-app": "kube-dns"}},
			Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolUDP}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "adv", Name: "pinned"}, Spec: corev1.ServiceSpec{ClusterIP: "10.100.0.5", Ports: port}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "adv", Name: "web"}, Spec: corev1.ServiceSpec{Ports: port}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "adv", Name: "headless"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: port}},
	} {
		_, err := cs.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
		require.NoError(t, err, "create Service %s/%s", s.Namespace, s.Name)
	}
}

func TestAdversarialServiceCIDR(t *testing.T) {
	opts, _ := scWithServiceCIDRAPI(harness.Options{ServiceCIDR: advSCRange})
	c := harness.Start(t, opts)
	ctx := t.Context()
	cs, err := c.Client()
	require.NoError(t, err)
	advSCFixture(t, ctx, cs)
	client := scClient(t, ctx, c)
	to := []netip.Prefix{netip.MustParsePrefix("10.128.0.0/16")}

	// planFile writes the plan for 10.96.0.0/12 -> 10.128.0.0/16, edited.
	planFile := func(edit func(p map[string]any)) func(t *testing.T) []string {
		return func(t *testing.T) []string {
			p, err := client.Plan(t.Context(), servicecidr.PlanOptions{To: to})
			require.NoError(t, err)
			data, err := p.Marshal()
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, yaml.Unmarshal(data, &m))
			edit(m)
			data, err = yaml.Marshal(m)
			require.NoError(t, err)
			f := filepath.Join(t.TempDir(), "plan.yaml")
			require.NoError(t, os.WriteFile(f, data, 0o600))
			return []string{"--plan", f}
		}
	}
	mv := func(p map[string]any, i int) map[string]any { return p["moves"].([]any)[i].(map[string]any) }
	extra := func(t *testing.T) []string {
		return []string{"--kubeconfig", c.AdminKubeconfig(), "--journal", filepath.Join(t.TempDir(), "journal")}
	}
	advRunCases(t, c, "servicecidr", extra, []advCase{
		// Issue 20, defect 3: the exact reproduction.
		{name: "wrong --from", args: []string{"apply", "--to", "10.98.0.0/16", "--from", "10.200.0.0/16", "--apply"},
			code: 2, msg: []string{"--from", "10.200.0.0/16", advSCRange}},
		{name: "--from part of the range in use", args: []string{"apply", "--to", "10.128.0.0/16", "--from", "10.96.0.0/16", "--apply"},
			code: 2, msg: []string{"--from", "10.96.0.0/16", advSCRange, "adv/pinned 10.100.0.5"}},
		{name: "--dns-service that does not exist", args: []string{"apply", "--to", "10.128.0.0/16", "--dns-service", "kube-system/coredns", "--apply"},
			code: 2, msg: []string{"--dns-service", "kube-system/coredns", "does not exist"}},
		{name: "--dns-service headless", args: []string{"apply", "--to", "10.128.0.0/16", "--dns-service", "adv/headless", "--apply"},
			code: 2, msg: []string{"--dns-service", "adv/headless", "headless"}},
		{name: "plan file: two Services share a new IP", args: []string{"apply", "--apply"},
			setup: planFile(func(p map[string]any) { mv(p, 1)["newIPs"] = mv(p, 0)["newIPs"] }),
			code:  2, msg: []string{"invalid plan", "newIPs", "10.128.0.10", "also planned for"}},
		{name: "plan file: new IP outside the target", args: []string{"apply", "--apply"},
			setup: planFile(func(p map[string]any) { mv(p, 1)["newIPs"] = []any{"10.99.0.7"} }),
			code:  2, msg: []string{"invalid plan", "10.99.0.7", "10.128.0.0/16"}},
		{name: "plan file: from not in use", args: []string{"apply", "--apply"},
			setup: planFile(func(p map[string]any) {
				p["from"] = []any{"10.200.0.0/16"}
				p["moves"] = []any{}
				delete(p, "dns")
				delete(p, "kubernetes")
				delete(p, "old")
			}),
			code: 2, msg: []string{"from", "10.200.0.0/16", advSCRange}},
		{name: "plan file: old ServiceCIDR outside from", args: []string{"apply", "--apply", "--delete-old"},
			setup: planFile(func(p map[string]any) {
				p["old"] = []any{map[string]any{"name": "kubernetes", "cidrs": []any{"10.0.0.0/8"}}}
			}),
			code: 2, msg: []string{"old[0]", "10.0.0.0/8"}},
		{name: "plan file: dns disagrees with its move", args: []string{"apply", "--apply"},
			setup: planFile(func(p map[string]any) { p["dns"].(map[string]any)["newIPs"] = []any{"10.128.0.53"} }),
			code:  2, msg: []string{"invalid plan", "dns", "10.128.0.53"}},
		{name: "plan file: truncated", args: []string{"apply", "--apply"},
			setup: func(t *testing.T) []string {
				f := filepath.Join(t.TempDir(), "plan.yaml")
				require.NoError(t, os.WriteFile(f, []byte("apiVersion: cidrshift.io/v1alpha1\nkind: ServiceMovePlan\nfrom: [10.96.0.0/12]\nto: [10.128.0.0/16\n"), 0o600))
				return []string{"--plan", f}
			},
			code: 2, msg: []string{"invalid plan"}},
		{name: "--plan with --to", args: []string{"apply", "--to", "10.128.0.0/16", "--apply"},
			setup: planFile(func(map[string]any) {}), code: 2, msg: []string{"--plan", "--to"}},
		{name: "apply --apply with --dry-run client", args: []string{"apply", "--to", "10.128.0.0/16", "--apply", "--dry-run", "client"},
			code: 2, msg: []string{"--apply", "--dry-run", "client"}},
		{name: "negative --drain-timeout", args: []string{"apply", "--to", "10.128.0.0/16", "--apply", "--delete-old", "--drain-timeout", "-1s"},
			code: 2, msg: []string{"--drain-timeout", "-1s"}},
		{name: "stray argument", args: []string{"apply", "--to", "10.128.0.0/16", "--apply", "now"},
			code: 2, msg: []string{`"now"`}},
	})
	// add takes no --journal.
	advRunCases(t, c, "servicecidr", func(*testing.T) []string { return []string{"--kubeconfig", c.AdminKubeconfig()} }, []advCase{
		{name: "add --apply with --dry-run client", args: []string{"add", "--to", "10.128.0.0/16", "--apply", "--dry-run", "client"},
			code: 2, msg: []string{"--apply", "--dry-run", "client"}},
		{name: "add negative --wait", args: []string{"add", "--to", "10.128.0.0/16", "--apply", "--wait", "-5s"},
			code: 2, msg: []string{"--wait", "-5s"}},
		{name: "add invalid --name", args: []string{"add", "--to", "10.128.0.0/16", "--apply", "--name", "Bad_Name"},
			code: 2, msg: []string{"--name", "Bad_Name"}},
		{name: "add --to overlapping the range in use", args: []string{"add", "--to", "10.96.0.0/16", "--apply"},
			code: 2, msg: []string{"--to", "10.96.0.0/16"}},
	})
	garbage, unreachable := clitest.GarbageKubeconfig(t), clitest.UnreachableKubeconfig(t)
	advRunCases(t, c, "servicecidr", nil, []advCase{
		{name: "garbage kubeconfig", args: []string{"apply", "--to", "10.128.0.0/16", "--apply", "--journal", t.TempDir(), "--kubeconfig", garbage},
			code: 2, msg: []string{"kubeconfig"}},
		{name: "missing context", args: []string{"apply", "--to", "10.128.0.0/16", "--apply", "--journal", t.TempDir(), "--kubeconfig", c.AdminKubeconfig(), "--context", "nope"},
			code: 2, msg: []string{`"nope"`}},
		{name: "unreachable cluster", args: []string{"apply", "--to", "10.128.0.0/16", "--apply", "--journal", t.TempDir(), "--kubeconfig", unreachable},
			code: 4, msg: []string{"127.0.0.1:1"}},
	})
}

func TestAdversarialMigrateServiceCIDR(t *testing.T) {
	opts, _ := scWithServiceCIDRAPI(harness.Options{ServiceCIDR: advSCRange})
	c := harness.Start(t, opts)
	ctx := t.Context()
	cs, err := c.Client()
	require.NoError(t, err)
	advSCFixture(t, ctx, cs)
	extra := func(t *testing.T) []string {
		return []string{"--kubeconfig", c.AdminKubeconfig(), "--journal", filepath.Join(t.TempDir(), "journal"),
			"--poll-interval", "100ms"}
	}
	manifests := func(files map[string]string) func(t *testing.T) []string {
		return func(t *testing.T) []string {
			dir := t.TempDir()
			for name, body := range files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
			}
			return []string{"--manifests", dir}
		}
	}
	advRunCases(t, c, "migrate-servicecidr", extra, []advCase{
		// Issue 20, defect 3: the exact reproduction.
		{name: "wrong --from", args: []string{"--to", "10.98.0.0/16", "--from", "10.200.0.0/16", "--apply"},
			code: 2, msg: []string{"--from", "10.200.0.0/16", advSCRange}},
		{name: "wrong --from, server dry run", args: []string{"--to", "10.128.0.0/16", "--from", "10.200.0.0/16", "--dry-run", "server"},
			code: 2, msg: []string{"--from", "10.200.0.0/16", advSCRange}},
		{name: "--from part of the range in use", args: []string{"--to", "10.128.0.0/16", "--from", "10.96.0.0/16", "--apply"},
			code: 2, msg: []string{"--from", "10.96.0.0/16", advSCRange, "adv/pinned 10.100.0.5"}},
		{name: "--to overlapping --from", args: []string{"--to", "10.96.0.0/16", "--from", advSCRange, "--apply"},
			code: 2, msg: []string{"--to", "10.96.0.0/16", advSCRange}},
		{name: "--to too small", args: []string{"--to", "10.128.0.0/30", "--apply"},
			code: 2, msg: []string{"--to", "10.128.0.0/30"}},
		{name: "--apply with --dry-run client", args: []string{"--to", "10.128.0.0/16", "--apply", "--dry-run", "client"},
			code: 2, msg: []string{"--apply", "--dry-run", "client"}},
		{name: "negative --drain-timeout", args: []string{"--to", "10.128.0.0/16", "--apply", "--drain-timeout", "-1s"},
			code: 2, msg: []string{"--drain-timeout", "-1s"}},
		{name: "zero --ready-timeout", args: []string{"--to", "10.128.0.0/16", "--apply", "--ready-timeout", "0s"},
			code: 2, msg: []string{"--ready-timeout", "0s"}},
		{name: "stray argument", args: []string{"--to", "10.128.0.0/16", "--apply", "go"},
			code: 2, msg: []string{`"go"`}},
		{name: "--manifests without either manifest", args: []string{"--to", "10.128.0.0/16", "--apply"},
			setup: manifests(map[string]string{"etcd.yaml": "x: 1\n"}), code: 2, msg: []string{"--manifests", "kube-apiserver.yaml"}},
		{name: "--manifests with a garbage manifest", args: []string{"--to", "10.128.0.0/16", "--apply"},
			setup: manifests(map[string]string{"kube-apiserver.yaml": "\x00\x01: [not yaml"}), code: 2, msg: []string{"--manifests", "kube-apiserver.yaml"}},
	})
	garbage, unreachable := clitest.GarbageKubeconfig(t), clitest.UnreachableKubeconfig(t)
	advRunCases(t, c, "migrate-servicecidr", nil, []advCase{
		{name: "garbage kubeconfig", args: []string{"--to", "10.128.0.0/16", "--apply", "--journal", filepath.Join(t.TempDir(), "j1"), "--kubeconfig", garbage},
			code: 2, msg: []string{"kubeconfig"}},
		{name: "missing context", args: []string{"--to", "10.128.0.0/16", "--apply", "--journal", filepath.Join(t.TempDir(), "j2"), "--kubeconfig", c.AdminKubeconfig(), "--context", "nope"},
			code: 2, msg: []string{`"nope"`}},
		{name: "unreachable cluster", args: []string{"--to", "10.128.0.0/16", "--apply", "--journal", filepath.Join(t.TempDir(), "j3"), "--kubeconfig", unreachable},
			code: 4, msg: []string{"127.0.0.1:1"}},
		{name: "--journal is a file", args: []string{"--to", "10.128.0.0/16", "--apply", "--kubeconfig", c.AdminKubeconfig()},
			setup: func(t *testing.T) []string {
				f := filepath.Join(t.TempDir(), "j")
				require.NoError(t, os.WriteFile(f, nil, 0o600))
				return []string{"--journal", f}
			},
			code: 2, msg: []string{"--journal", "not a directory"}},
	})
}
