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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/internal/lease"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/servicecidr"
	"github.com/cidrshift/cidrshift/servicecidr/servicecidrtest"
)

const kubeadmConfig = `apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: kops-tailnet
kubernetesVersion: v1.36.3
networking:
  dnsDomain: cluster.local
  podSubnet: 100.96.0.0/11
  serviceSubnet: 100.64.0.0/13
`

const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
clusterDNS:
- 100.64.0.10
clusterDomain: cluster.local
`

// story3 is the kOps cluster of FACTS.md story 3 on a fake control plane
// whose kube-apiserver runs with --service-cluster-ip-range=100.64.0.0/13.
func story3(t *testing.T, withKubeadm bool, deny ...servicecidrtest.DenyRule) *servicecidrtest.Cluster {
	t.Helper()
	svc := func(ns, name, ip string, typ corev1.ServiceType) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Type: typ, Ports: []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}}}}
		if typ == corev1.ServiceTypeExternalName {
			s.Spec = corev1.ServiceSpec{Type: typ, ExternalName: "example.com"}
		}
		return s
	}
	var objs []runtime.Object
	if withKubeadm {
		objs = append(objs,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: kubeadmcfg.KubeadmConfigMap, ResourceVersion: "10", UID: "u-kubeadm"},
				Data: map[string]string{kubeadmcfg.KubeadmConfigKey: kubeadmConfig}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: kubeadmcfg.KubeletConfigMap, ResourceVersion: "11", UID: "u-kubelet"},
				Data: map[string]string{kubeadmcfg.KubeletConfigKey: kubeletConfig}},
		)
	}
	return servicecidrtest.MustNew(servicecidrtest.Options{
		ServiceCIDRs:   []servicecidrtest.InitialServiceCIDR{{Name: "kubernetes", CIDRs: []string{"100.64.0.0/13"}}},
		APIServerRange: "100.64.0.0/13",
		Services: []*corev1.Service{
			svc("default", "kubernetes", "100.64.0.1", corev1.ServiceTypeClusterIP),
			svc("kube-system", "kube-dns", "100.64.0.10", corev1.ServiceTypeClusterIP),
			svc("shop", "web", "100.64.3.7", corev1.ServiceTypeClusterIP),
			svc("shop", "api", "", corev1.ServiceTypeClusterIP),
			svc("shop", "lb", "100.64.1.1", corev1.ServiceTypeLoadBalancer),
			svc("shop", "db", corev1.ClusterIPNone, corev1.ServiceTypeClusterIP),
			svc("shop", "ext", "", corev1.ServiceTypeExternalName),
		},
		Objects: objs,
		Deny:    deny,
	})
}

func runCLI(t *testing.T, cl *servicecidrtest.Cluster, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	conn := func(ctx context.Context, kubeconfig, kubeContext string) (*servicecidr.Client, error) {
		return servicecidr.New(ctx, servicecidr.Options{Kube: cl.Kube, Dynamic: cl.Dynamic})
	}
	code := runWith(context.Background(), args, &out, &errb, conn)
	return code, out.String(), errb.String()
}

// fast are flags that keep the fake's waits short.
var fast = []string{"--poll-interval", "1ms", "--ready-timeout", "5s", "--drain-timeout", "5s"}

func args(a ...string) []string { return append(a, fast...) }

func TestBadInputExitsTwoWithOneLine(t *testing.T) {
	cl := story3(t, false)
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{nil, "migrate-servicecidr: --to is required: the new Service range, e.g. --to 172.24.0.0/15"},
		{[]string{"--to", "10.233.64.1/16"}, `migrate-servicecidr: --to "10.233.64.1/16": 10.233.64.1/16 has host bits set; the network is 10.233.0.0/16`},
		{[]string{"--to", "100.72.0.0/13"}, `migrate-servicecidr: --to "100.72.0.0/13": overlaps well-known 100.64.0.0/10`},
		{[]string{"--to", "100.64.0.0/16", "--from", "100.64.0.0/13"}, "migrate-servicecidr: --to 100.64.0.0/16 overlaps --from 100.64.0.0/13"},
		{[]string{"--to", "172.24.0.0/15", "--apply"}, "migrate-servicecidr: --journal DIR is required with --apply"},
		{[]string{"--to", "172.24.0.0/15", "--dry-run", "maybe"}, `migrate-servicecidr: --dry-run "maybe": want client or server`},
		{[]string{"--to", "172.24.0.0/15", "-o", "xml"}, `migrate-servicecidr: -o "xml": want json or yaml`},
		{[]string{"--to", "172.24.0.0/15", "--out", dir}, "migrate-servicecidr: --out " + dir + " needs --manifests DIR"},
		{[]string{"--to", "172.24.0.0/15", "--manifests", filepath.Join(dir, "nope")}, "migrate-servicecidr: --manifests " + filepath.Join(dir, "nope") + ": not a directory"},
		{[]string{"--to", "172.24.0.0/15", "--manifests", dir, "--out", dir}, "migrate-servicecidr: --out must differ from --manifests"},
		{[]string{"--bogus"}, "migrate-servicecidr: flag provided but not defined: -bogus"},
		{[]string{"--to", "172.24.0.0/15", "extra"}, `migrate-servicecidr: unexpected argument "extra"`},
		{[]string{"--to", "10.0.0.0/8,10.1.0.0/16"}, `migrate-servicecidr: --to "10.0.0.0/8,10.1.0.0/16"`},
	}
	for _, tt := range tests {
		code, out, errs := runCLI(t, cl, tt.args...)
		assert.Equal(t, exitBad, code, "%v", tt.args)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		assert.Len(t, lines, 1, "%v: one line: %q", tt.args, errs)
		assert.True(t, strings.HasPrefix(lines[0], tt.want), "%v: got %q", tt.args, lines[0])
		assert.Empty(t, out, "%v", tt.args)
	}
	assert.Empty(t, cl.Writes())
}

func TestHelpAndKubeconfig(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, exitOK, run([]string{"--help"}, &out, &errb))
	assert.Contains(t, out.String(), "usage: migrate-servicecidr")
	assert.Contains(t, out.String(), "-continue")

	out.Reset()
	errb.Reset()
	code := run([]string{"--to", "172.24.0.0/15", "--kubeconfig", filepath.Join(t.TempDir(), "missing")}, &out, &errb)
	assert.Equal(t, exitBad, code, "a kubeconfig that cannot be loaded is bad input")
	assert.Contains(t, errb.String(), "migrate-servicecidr: loading kubeconfig")
}

func TestPlanPrintsWholeRunbookAndWritesNothing(t *testing.T) {
	cl := story3(t, true)
	code, out, errs := runCLI(t, cl, args("--to", "172.24.0.0/15")...)
	require.Equal(t, exitOK, code, errs)
	for _, want := range []string{
		"runbook: move the Service range 100.64.0.0/13 -> 172.24.0.0/15 (plan only",
		"1. preflight [planned]",
		"172.24.0.0/15: 131070 usable ClusterIPs, kubernetes Service 172.24.0.1, DNS 172.24.0.10",
		"2. add-servicecidr [planned]",
		"would create ServiceCIDR cidrshift-172-24-0-0-15 172.24.0.0/15",
		"3. move-services [planned]",
		"kube-system/kube-dns 100.64.0.10 -> 172.24.0.10 (cluster DNS)",
		"shop/web 100.64.3.7 -> 172.24.3.7",
		"left alone shop/lb: type LoadBalancer",
		"4. node-config [planned]",
		"kubelet-config kubelet: clusterDNS: 100.64.0.10 -> 172.24.0.10",
		"by hand: kube-apiserver certificate: add the new kubernetes Service IP",
		"ConfigMap kube-system/kubeadm-config ClusterConfiguration",
		"would-update",
		"5. control-plane-flags [operator]",
		"--service-cluster-ip-range=172.24.0.0/15",
		"6. retire-old-range [planned]",
		"--include-loadbalancers",
	} {
		assert.Contains(t, out, want)
	}
	assert.Empty(t, cl.Writes(), "a plan changes nothing")

	// The same as JSON.
	code, out, _ = runCLI(t, cl, args("--to", "172.24.0.0/15", "-o", "json")...)
	require.Equal(t, exitOK, code)
	var rep Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Steps, 6)
	assert.Equal(t, "plan", rep.Mode)
	assert.Equal(t, "operator", rep.Steps[4].Status)

	// A server dry run sends writes with dryRun=All: nothing stored.
	code, out, errs = runCLI(t, cl, args("--to", "172.24.0.0/15", "--dry-run", "server")...)
	require.Equal(t, exitOK, code, errs+out)
	assert.Contains(t, out, "server accepted ServiceCIDR cidrshift-172-24-0-0-15")
	assert.Contains(t, out, "6. retire-old-range [not-run]")
	assert.Empty(t, cl.Writes())
}

func TestPreflightRefusesMissingPermissionBeforeAnyWrite(t *testing.T) {
	cl := story3(t, false, servicecidrtest.DenyRule{Verb: "delete", Resource: "services"})
	code, out, errs := runCLI(t, cl, args("--to", "172.24.0.0/15", "--journal", t.TempDir(), "--apply")...)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, errs, "delete")
	assert.Contains(t, out, "1. preflight [failed]")
	assert.Contains(t, out, "2. add-servicecidr [not-reached]")
	assert.Empty(t, cl.Writes())
}

func TestApplyPausesForOperatorThenResumes(t *testing.T) {
	cl := story3(t, true)
	journalDir := t.TempDir()
	manifests := t.TempDir()
	outDir := filepath.Join(t.TempDir(), "out")
	for _, n := range []string{kubeadmcfg.APIServerManifest, kubeadmcfg.ControllerManagerManifest} {
		data, err := os.ReadFile(filepath.Join("..", "kubeadmcfg", "testdata", "manifests", n))
		require.NoError(t, err)
		data = bytes.ReplaceAll(data, []byte("10.233.0.0/18"), []byte("100.64.0.0/13"))
		require.NoError(t, os.WriteFile(filepath.Join(manifests, n), data, 0o600))
	}
	base := args("--to", "172.24.0.0/15", "--journal", journalDir, "--apply", "--manifests", manifests, "--out", outDir)

	code, out, errs := runCLI(t, cl, base...)
	require.Equal(t, exitWaiting, code, "first run stops at the operator step\n%s\n%s", out, errs)
	assert.Contains(t, out, "3. move-services [completed]")
	assert.Contains(t, out, "5. control-plane-flags [waiting]")
	assert.Contains(t, out, "6. retire-old-range [not-reached]")
	assert.Contains(t, out, "WAITING FOR AN OPERATOR (step control-plane-flags)")
	assert.Contains(t, out, "+    - --service-cluster-ip-range=172.24.0.0/15")
	assert.NotContains(t, errs, "migrate-servicecidr:", "waiting is no error")

	// Services moved, DNS at its tenth address; default/kubernetes waits.
	dns, _ := cl.Service("kube-system", "kube-dns")
	assert.Equal(t, "172.24.0.10", dns.Spec.ClusterIP)
	web, _ := cl.Service("shop", "web")
	assert.Equal(t, "172.24.3.7", web.Spec.ClusterIP)
	lb, _ := cl.Service("shop", "lb")
	assert.Equal(t, "100.64.1.1", lb.Spec.ClusterIP, "LoadBalancers stay without --include-loadbalancers")
	kube, _ := cl.Service("default", "kubernetes")
	assert.Equal(t, "100.64.0.1", kube.Spec.ClusterIP)
	sc, ok := cl.ServiceCIDR("kubernetes")
	require.True(t, ok)
	assert.False(t, sc.Terminating, "the old range is retired only in step 6")

	// kubeadm ConfigMaps updated through kubeadmcfg.
	cm, err := cl.Kube.CoreV1().ConfigMaps("kube-system").Get(context.Background(), kubeadmcfg.KubeadmConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, cm.Data[kubeadmcfg.KubeadmConfigKey], "serviceSubnet: 172.24.0.0/15")
	assert.Contains(t, cm.Data[kubeadmcfg.KubeadmConfigKey], "clusterName: kops-tailnet", "other fields kept")
	cm, err = cl.Kube.CoreV1().ConfigMaps("kube-system").Get(context.Background(), kubeadmcfg.KubeletConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, cm.Data[kubeadmcfg.KubeletConfigKey], "- 172.24.0.10")

	// Rewritten manifests in --out, originals untouched.
	for _, n := range []string{kubeadmcfg.APIServerManifest, kubeadmcfg.ControllerManagerManifest} {
		data, err := os.ReadFile(filepath.Join(outDir, n))
		require.NoError(t, err)
		assert.Contains(t, string(data), "--service-cluster-ip-range=172.24.0.0/15")
		orig, err := os.ReadFile(filepath.Join(manifests, n))
		require.NoError(t, err)
		assert.Contains(t, string(orig), "--service-cluster-ip-range=100.64.0.0/13")
	}

	// A rerun before the operator acted waits again and writes nothing.
	writes := len(cl.Writes())
	code, out, _ = runCLI(t, cl, base...)
	assert.Equal(t, exitWaiting, code)
	assert.Contains(t, out, "3. move-services [done]")
	assert.Equal(t, writes, len(cl.Writes()), "no write while waiting")

	// The operator restarts kube-apiserver with the new range; it reports
	// that the default ServiceCIDR no longer matches its flag.
	require.NoError(t, cl.SetAPIServerRange("172.24.0.0/15"))
	_, err = cl.Kube.CoreV1().Events("default").Create(context.Background(), &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "kubernetes.1", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "ServiceCIDR", Name: "kubernetes", APIVersion: "networking.k8s.io/v1"},
		Reason:         reasonInconsistent, Type: corev1.EventTypeWarning,
		Message: "The default ServiceCIDR [100.64.0.0/13] does not match the controller flag configurations [172.24.0.0/15]",
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	code, out, errs = runCLI(t, cl, append(base, "--include-loadbalancers", "-o", "json")...)
	// The journal was started without --include-loadbalancers; that is
	// allowed for the last step (it only widens what moves).
	require.Equal(t, exitOK, code, "%s\n%s", out, errs)
	var rep Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, "completed", rep.Steps[4].Status)
	assert.Contains(t, strings.Join(rep.Steps[4].Details, "\n"), "observed: kube-apiserver reports")
	assert.Equal(t, "completed", rep.Steps[5].Status, "%v", rep.Steps[5].Details)

	kube, _ = cl.Service("default", "kubernetes")
	assert.Equal(t, "172.24.0.1", kube.Spec.ClusterIP, "kube-apiserver recreated default/kubernetes in the new range")
	lb, _ = cl.Service("shop", "lb")
	assert.Equal(t, "172.24.1.1", lb.Spec.ClusterIP)
	if sc, ok := cl.ServiceCIDR("kubernetes"); ok {
		assert.Equal(t, []string{"172.24.0.0/15"}, sc.CIDRs, "the default ServiceCIDR, if recreated, holds the new range")
	}
	for _, s := range cl.Services() {
		if s.Spec.ClusterIP != "" && s.Spec.ClusterIP != corev1.ClusterIPNone {
			assert.True(t, strings.HasPrefix(s.Spec.ClusterIP, "172.2"), "%s/%s at %s", s.Namespace, s.Name, s.Spec.ClusterIP)
		}
	}
	assert.Len(t, cl.Services(), 7, "no Service lost")

	// Finished: a rerun changes nothing.
	writes = len(cl.Writes())
	code, out, _ = runCLI(t, cl, base...)
	assert.Equal(t, exitOK, code, out)
	assert.Equal(t, writes, len(cl.Writes()))
	assert.Contains(t, out, "6. retire-old-range [done]")
}

func TestContinueSkipsObservation(t *testing.T) {
	cl := story3(t, false)
	journalDir := t.TempDir()
	base := args("--to", "172.24.0.0/15", "--journal", journalDir, "--apply", "--include-loadbalancers")
	code, out, _ := runCLI(t, cl, base...)
	require.Equal(t, exitWaiting, code, out)
	assert.Contains(t, out, "no kubeadm-config or kubelet-config ConfigMap")
	assert.Contains(t, out, "on every control-plane node, set --service-cluster-ip-range=172.24.0.0/15")

	require.NoError(t, cl.SetAPIServerRange("172.24.0.0/15"))
	code, out, errs := runCLI(t, cl, append(base, "--continue")...)
	require.Equal(t, exitOK, code, "%s\n%s", out, errs)
	assert.Contains(t, out, "--continue given")
	kube, _ := cl.Service("default", "kubernetes")
	assert.Equal(t, "172.24.0.1", kube.Spec.ClusterIP)

	// The journal belongs to this move: other ranges are refused.
	code, _, errs = runCLI(t, cl, args("--to", "172.28.0.0/15", "--journal", journalDir, "--apply")...)
	assert.Equal(t, exitBad, code)
	assert.Contains(t, errs, "records a move from 100.64.0.0/13 to 172.24.0.0/15")
}

// TestKilledAnywhereResumes kills the runbook before each of its requests in
// turn (up to the operator pause), reruns it, and checks that no Service was
// lost and the same state is reached.
func TestKilledAnywhereResumes(t *testing.T) {
	// How many requests a full run up to the pause makes.
	cl := story3(t, true)
	code, out, _ := runCLI(t, cl, args("--to", "172.24.0.0/15", "--journal", t.TempDir(), "--apply")...)
	require.Equal(t, exitWaiting, code, out)
	total := cl.Requests()
	require.Greater(t, total, 20)

	for n := 0; n < total; n += 3 {
		cl := story3(t, true)
		journalDir := t.TempDir()
		base := args("--to", "172.24.0.0/15", "--journal", journalDir, "--apply")
		cl.KillAfter(n, nil)
		code, _, _ := runCLI(t, cl, base...)
		cl.Revive()
		if code == exitWaiting {
			continue // the kill came after the last request
		}
		require.Equal(t, exitFailed, code, "killed after %d requests", n)
		code, out, errs := runCLI(t, cl, base...)
		require.Equal(t, exitWaiting, code, "killed after %d requests, rerun:\n%s\n%s", n, out, errs)
		ips := map[string]string{}
		for _, s := range cl.Services() {
			ips[s.Namespace+"/"+s.Name] = s.Spec.ClusterIP
		}
		require.Len(t, ips, 7, "killed after %d requests: no Service lost: %v", n, ips)
		assert.Equal(t, "172.24.0.10", ips["kube-system/kube-dns"], "killed after %d", n)
		assert.Equal(t, "172.24.3.7", ips["shop/web"], "killed after %d", n)
		assert.True(t, strings.HasPrefix(ips["shop/api"], "172.24."), "killed after %d: %s", n, ips["shop/api"])
		cm, err := cl.Kube.CoreV1().ConfigMaps("kube-system").Get(context.Background(), kubeadmcfg.KubeletConfigMap, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Contains(t, cm.Data[kubeadmcfg.KubeletConfigKey], "- 172.24.0.10", "killed after %d", n)
	}
}

// mirrorPod is the mirror pod the kubelet of a kubeadm control-plane node
// publishes for a static pod.
func mirrorPod(component, node, serviceRange string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: component + "-" + node,
			Labels: map[string]string{"component": component, "tier": "control-plane"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: component,
			Command: []string{component, "--secure-port=6443", "--service-cluster-ip-range=" + serviceRange}}}},
	}
}

func TestObservesKubeadmMirrorPods(t *testing.T) {
	cl := story3(t, false)
	ctx := context.Background()
	pods := cl.Kube.CoreV1().Pods("kube-system")
	for _, p := range []*corev1.Pod{
		mirrorPod("kube-apiserver", "cp1", "100.64.0.0/13"), mirrorPod("kube-apiserver", "cp2", "100.64.0.0/13"),
		mirrorPod("kube-controller-manager", "cp1", "100.64.0.0/13"),
	} {
		_, err := pods.Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	base := args("--to", "172.24.0.0/15", "--journal", t.TempDir(), "--apply", "--include-loadbalancers", "-o", "yaml")
	code, out, _ := runCLI(t, cl, base...)
	require.Equal(t, exitWaiting, code, out)
	assert.Contains(t, out, "mode: apply")
	assert.Contains(t, out, "kube-apiserver-cp1 has --service-cluster-ip-range=100.64.0.0/13")

	// One control-plane node done, the other not yet: still waiting.
	_, err := pods.Update(ctx, mirrorPod("kube-apiserver", "cp1", "172.24.0.0/15"), metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = pods.Update(ctx, mirrorPod("kube-controller-manager", "cp1", "172.24.0.0/15"), metav1.UpdateOptions{})
	require.NoError(t, err)
	code, out, _ = runCLI(t, cl, base...)
	require.Equal(t, exitWaiting, code, out)
	assert.Contains(t, out, "kube-apiserver-cp2 has --service-cluster-ip-range=100.64.0.0/13")
	assert.NotContains(t, out, "kube-apiserver-cp1 has")

	_, err = pods.Update(ctx, mirrorPod("kube-apiserver", "cp2", "172.24.0.0/15"), metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, cl.SetAPIServerRange("172.24.0.0/15"))
	code, out, errs := runCLI(t, cl, base...)
	require.Equal(t, exitOK, code, "%s\n%s", out, errs)
	assert.Contains(t, out, "observed: every control-plane pod (kube-apiserver-cp1, kube-apiserver-cp2, kube-controller-manager-cp1) runs with --service-cluster-ip-range=172.24.0.0/15")
}

func TestJournalLockedByAnotherRun(t *testing.T) {
	cl := story3(t, false)
	dir := t.TempDir()
	j, err := journal.Open(dir)
	require.NoError(t, err)
	defer j.Close()
	code, _, errs := runCLI(t, cl, args("--to", "172.24.0.0/15", "--journal", dir, "--apply")...)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, errs, "locked")
	assert.Empty(t, cl.Writes())
}

// A second operator's apply, while another run holds one of the runbook's
// Leases (here kubeadm's, from another machine), is refused at once naming
// the holder, with nothing moved; the Leases it took first are released.
func TestSecondOperatorRefusedByTheLease(t *testing.T) {
	cl := story3(t, false)
	other, err := lease.New(cl.Kube, lease.Options{Name: lease.ScopeKubeadmConfig, Identity: "alice@laptop/41"})
	require.NoError(t, err)
	release, err := other.Lock(context.Background())
	require.NoError(t, err)
	defer release()
	code, _, errs := runCLI(t, cl, args("--to", "172.24.0.0/15", "--journal", t.TempDir(), "--apply")...)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, errs, "held by alice@laptop/41 until")
	assert.Empty(t, cl.Writes(), "nothing moved")
	l, err := cl.Kube.CoordinationV1().Leases("kube-system").Get(context.Background(), lease.ScopeServiceCIDR, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, ptr.Deref(l.Spec.HolderIdentity, ""), "the Lease taken before the refusal is released")
}
