package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

func story3(t *testing.T) *servicecidrtest.Cluster {
	t.Helper()
	svc := func(ns, name, ip string, typ corev1.ServiceType) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Type: typ, Ports: []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}}}}
		if typ == corev1.ServiceTypeExternalName {
			s.Spec = corev1.ServiceSpec{Type: typ, ExternalName: "example.com"}
		}
		return s
	}
	return servicecidrtest.MustNew(servicecidrtest.Options{
		GitVersion:   "v1.29.6",
		Version:      "v1alpha1",
		ServiceCIDRs: []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"100.64.0.0/13"}}},
		Services: []*corev1.Service{
			svc("default", "kubernetes", "100.64.0.1", corev1.ServiceTypeClusterIP),
			svc("kube-system", "kube-dns", "100.64.0.10", corev1.ServiceTypeClusterIP),
			svc("shop", "web", "100.64.3.7", corev1.ServiceTypeClusterIP),
			svc("shop", "lb", "100.64.1.1", corev1.ServiceTypeLoadBalancer),
			svc("shop", "db", corev1.ClusterIPNone, corev1.ServiceTypeClusterIP),
			svc("shop", "ext", "", corev1.ServiceTypeExternalName),
		},
	})
}

// runCLI runs the command against a fake cluster.
func runCLI(t *testing.T, cl *servicecidrtest.Cluster, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	conn := func(ctx context.Context, kubeconfig, kubeContext string) (*servicecidr.Client, error) {
		return servicecidr.New(ctx, servicecidr.Options{Kube: cl.Kube, Dynamic: cl.Dynamic})
	}
	code := runWith(context.Background(), args, &out, &errb, conn)
	return code, out.String(), errb.String()
}

func TestBadInputExitsTwoWithOneLine(t *testing.T) {
	cl := story3(t)
	tests := []struct {
		args []string
		want string
	}{
		{nil, "servicecidr: no command given; want one of show, add, plan, apply, verify"},
		{[]string{"move"}, `servicecidr: unknown command "move"`},
		{[]string{"plan"}, "servicecidr: --to is required: the new Service range, e.g. --to 172.24.0.0/15"},
		{[]string{"plan", "--to", "10.233.64.1/16"}, `servicecidr: --to "10.233.64.1/16": 10.233.64.1/16 has host bits set; the network is 10.233.0.0/16`},
		{[]string{"plan", "--to", "100.72.0.0/13"}, `servicecidr: --to "100.72.0.0/13": overlaps well-known 100.64.0.0/10 (shared address space / CGNAT, used by Tailscale (RFC 6598))`},
		{[]string{"plan", "--to", "172.24.0.0/15", "--allocate", "random"}, `servicecidr: --allocate "random": want offset or free`},
		{[]string{"plan", "--to", "172.24.0.0/15", "--dns-service", "kube-dns"}, `servicecidr: --dns-service "kube-dns": want namespace/name`},
		{[]string{"plan", "--to", "172.24.0.0/15", "-o", "xml"}, `servicecidr: -o "xml": want json or yaml`},
		{[]string{"plan", "--bogus"}, "servicecidr: flag provided but not defined: -bogus"},
		{[]string{"plan", "--to", "172.24.0.0/15", "extra"}, `servicecidr: unexpected argument "extra"`},
		{[]string{"apply", "--to", "172.24.0.0/15", "--apply"}, "servicecidr: --journal DIR is required with --apply"},
		{[]string{"apply", "--to", "172.24.0.0/15", "--dry-run", "maybe"}, `servicecidr: --dry-run "maybe": want client or server`},
		{[]string{"apply", "--plan", "/nonexistent/plan.yaml"}, "servicecidr: --plan /nonexistent/plan.yaml: open /nonexistent/plan.yaml: no such file or directory"},
		{[]string{"verify"}, "servicecidr: --to is required"},
		{[]string{"verify", "--to", "172.24.0.0/15", "--dns-ip", "x"}, `servicecidr: --dns-ip "x": not an IP address`},
		{[]string{"add", "--to", "10.0.0.0/16,10.1.0.0/16"}, `servicecidr: --to "10.0.0.0/16,10.1.0.0/16"`},
	}
	for _, tt := range tests {
		code, out, errs := runCLI(t, cl, tt.args...)
		assert.Equal(t, 2, code, "%v", tt.args)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		last := lines[len(lines)-1]
		assert.True(t, strings.HasPrefix(last, tt.want), "%v: got %q", tt.args, last)
		if tt.args != nil {
			assert.Len(t, lines, 1, "%v: one line", tt.args)
		}
		assert.Empty(t, out)
	}
	assert.Empty(t, cl.Writes())
}

func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, 0, run([]string{"--help"}, &out, &errb))
	assert.Contains(t, out.String(), "usage: servicecidr <command>")
	out.Reset()
	assert.Equal(t, 0, run([]string{"apply", "-h"}, &out, &errb))
	assert.Contains(t, out.String(), "-delete-old")
	assert.Contains(t, out.String(), "-journal")
}

func TestRunReadsKubeconfig(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"show", "--kubeconfig", filepath.Join(t.TempDir(), "missing")}, &out, &errb)
	assert.Equal(t, 2, code, "a kubeconfig that cannot be loaded is bad input")
	assert.Contains(t, errb.String(), "servicecidr: loading kubeconfig")
	assert.Equal(t, 1, strings.Count(errb.String(), "\n"))

	// A missing context is bad input (2); a kubeconfig pointing at nothing
	// is an unreachable cluster (4); either way one line.
	kc := filepath.Join(t.TempDir(), "config")
	require.NoError(t, os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
contexts: [{name: ctx-x, context: {cluster: c, user: u}}, {name: ctx-y, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: t}}]
current-context: ctx-x
`), 0o600))
	errb.Reset()
	code = run([]string{"show", "--kubeconfig", kc, "--context", "nope"}, &out, &errb)
	assert.Equal(t, 2, code)
	assert.Contains(t, errb.String(), `context "nope" does not exist`)
	errb.Reset()
	code = run([]string{"show", "--kubeconfig", kc, "--context", "ctx-y"}, &out, &errb)
	assert.Equal(t, 4, code)
	assert.Contains(t, errb.String(), "127.0.0.1:1")
}

func TestShow(t *testing.T) {
	cl := story3(t)
	code, out, errs := runCLI(t, cl, "show")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "Kubernetes v1.29.6, ServiceCIDR networking.k8s.io/v1alpha1, ClusterIP owners from IPAddress objects (networking.k8s.io/v1alpha1)")
	assert.Regexp(t, `kubernetes\s+100\.64\.0\.0/13\s+Ready\s+4`, out)
	assert.Regexp(t, `kube-system/kube-dns\s+ClusterIP\s+100\.64\.0\.10\s+kubernetes`, out)
	assert.NotContains(t, out, "shop/db")

	code, out, _ = runCLI(t, cl, "show", "-o", "json")
	require.Equal(t, 0, code)
	var inv servicecidr.Inventory
	require.NoError(t, json.Unmarshal([]byte(out), &inv))
	assert.Len(t, inv.Services, 4)
}

func TestAdd(t *testing.T) {
	cl := story3(t)
	code, out, errs := runCLI(t, cl, "add", "--to", "172.24.0.0/15")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "IPv4 172.24.0.0/15: 131070 usable ClusterIPs, kubernetes Service 172.24.0.1, DNS 172.24.0.10")
	assert.Contains(t, out, "would create ServiceCIDR cidrshift-172-24-0-0-15 172.24.0.0/15 (run with --apply)")
	assert.Empty(t, cl.Writes())

	code, out, _ = runCLI(t, cl, "add", "--to", "172.24.0.0/15", "--dry-run", "server")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "server accepted ServiceCIDR cidrshift-172-24-0-0-15")
	assert.Empty(t, cl.Writes())

	code, out, errs = runCLI(t, cl, "add", "--to", "172.24.0.0/15", "--name", "new", "--apply")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "created ServiceCIDR new 172.24.0.0/15, Ready")
	st, ok := cl.ServiceCIDR("new")
	require.True(t, ok)
	assert.True(t, st.Ready)
}

func TestPlanApplyVerify(t *testing.T) {
	cl := story3(t)
	code, out, errs := runCLI(t, cl, "plan", "--to", "172.24.0.0/15")
	require.Equal(t, 0, code, errs)
	assert.Regexp(t, `1\s+kube-system/kube-dns\s+ClusterIP\s+100\.64\.0\.10\s+172\.24\.0\.10\s+cluster DNS`, out)
	assert.Regexp(t, `last\s+default/kubernetes\s+ClusterIP\s+100\.64\.0\.1\s+172\.24\.0\.1`, out)
	assert.Contains(t, out, "shop/lb: type LoadBalancer")
	assert.Contains(t, out, "kubelet: set clusterDNS on every node")
	assert.Contains(t, out, "(100.64.0.10 -> 172.24.0.10)")

	// Save the plan, review it, apply it later.
	code, out, _ = runCLI(t, cl, "plan", "--to", "172.24.0.0/15", "-o", "yaml")
	require.Equal(t, 0, code)
	planFile := filepath.Join(t.TempDir(), "plan.yaml")
	require.NoError(t, os.WriteFile(planFile, []byte(out), 0o600))

	// Without --apply: a client dry run.
	code, out, errs = runCLI(t, cl, "apply", "--plan", planFile)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "would move (dry run: client) 2 Service(s)")
	assert.Contains(t, errs, "dry-run-service-move kube-system/kube-dns -> 172.24.0.10")
	assert.Empty(t, cl.Writes())

	code, out, errs = runCLI(t, cl, "apply", "--plan", planFile, "--apply", "--dry-run", "server")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "would move (dry run: server) 2 Service(s)")
	assert.Empty(t, cl.Writes())

	// The cluster must not be verified yet.
	code, out, _ = runCLI(t, cl, "verify", "--to", "172.24.0.0/15")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "NOT OK")
	assert.Contains(t, out, "no Ready ServiceCIDR holds 172.24.0.0/15")

	journal := t.TempDir()
	code, out, errs = runCLI(t, cl, "apply", "--plan", planFile, "--apply", "--journal", journal, "--delete-old")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "moved 2 Service(s)")
	assert.Contains(t, out, "kube-system/kube-dns 100.64.0.10 -> 172.24.0.10")
	assert.Contains(t, out, "Services absent between delete and create: p50")
	assert.Contains(t, out, "next: set kubelet clusterDNS 100.64.0.10 -> 172.24.0.10 on every node")
	assert.Contains(t, out, "ServiceCIDR kubernetes (100.64.0.0/13) is Terminating; 2 address(es) depend only on it")
	assert.Contains(t, errs, "service-created kube-system/kube-dns -> 172.24.0.10 (absent ")

	// Running it again does nothing.
	w := cl.Writes()
	code, out, _ = runCLI(t, cl, "apply", "--plan", planFile, "--apply", "--journal", journal, "-o", "json")
	require.Equal(t, 0, code)
	var res servicecidr.Result
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	assert.Len(t, res.AlreadyMoved, 2)
	assert.Equal(t, w, cl.Writes())

	code, out, errs = runCLI(t, cl, "verify", "--to", "172.24.0.0/15", "--from", "100.64.0.0/13", "--dns-ip", "172.24.0.10")
	assert.Equal(t, 0, code, errs)
	assert.Contains(t, out, "OK: 4 Service(s) with a ClusterIP checked against 172.24.0.0/15: 0 error(s), 3 warning(s)")
	assert.Contains(t, out, "warning\tservices/shop/lb: LoadBalancer Service left at 100.64.1.1")

	// Later, the LoadBalancer too, planned afresh from --to.
	code, _, errs = runCLI(t, cl, "apply", "--to", "172.24.0.0/15", "--include-loadbalancers", "--apply", "--journal", journal)
	assert.Equal(t, 0, code, errs)
	lb, _ := cl.Service("shop", "lb")
	assert.Equal(t, "172.24.1.1", lb.Spec.ClusterIP)
}

func TestApplyRefusesStalePlanWithExitOne(t *testing.T) {
	cl := story3(t)
	code, out, _ := runCLI(t, cl, "plan", "--to", "172.24.0.0/15", "-o", "json")
	require.Equal(t, 0, code)
	planFile := filepath.Join(t.TempDir(), "plan.json")
	require.NoError(t, os.WriteFile(planFile, []byte(out), 0o600))
	require.NoError(t, cl.Kube.CoreV1().Services("shop").Delete(context.Background(), "web", metav1.DeleteOptions{}))
	code, _, errs := runCLI(t, cl, "apply", "--plan", planFile, "--apply", "--journal", t.TempDir())
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "servicecidr: plan is stale, nothing was changed; plan again: Service shop/web no longer exists")

	require.NoError(t, os.WriteFile(planFile, []byte("kind: Nope\n"), 0o600))
	code, _, errs = runCLI(t, cl, "apply", "--plan", planFile)
	assert.Equal(t, 2, code)
	assert.Contains(t, errs, "want cidrshift.io/v1alpha1/ServiceMovePlan")
}
