package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/kubeadmcfg"
)

const td = "testdata"

func offline(args ...string) []string {
	return append(args, "--manifests", td+"/manifests", "--kubeadm-config", td+"/kubeadm-config.yaml")
}

func everything(args ...string) []string {
	return append(offline(args...), "--kube-proxy-config", td+"/kube-proxy.yaml", "--kubelet-config", td+"/kubelet-config.yaml",
		"--nodes", td+"/nodes.yaml", "--pool", "default-pool=10.233.64.0/18", "--pool", "new-pool=10.20.0.0/16")
}

func noCluster(string, string) (kubernetes.Interface, error) {
	return nil, errors.New("no configuration has been provided")
}

func runT(t *testing.T, newClient clientFunc, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runWith(context.Background(), args, &out, &errOut, newClient)
	return code, out.String(), errOut.String()
}

// The README's first command shows the first story's finding.
func TestCheckOffline(t *testing.T) {
	code, out, errOut := runT(t, noCluster, offline("check")...)
	assert.Equal(t, 1, code, "an error finding")
	assert.Empty(t, errOut)
	assert.Contains(t, out, "ERROR   pod-subnet-mismatch: testdata/manifests/kube-controller-manager.yaml --cluster-cidr is 10.233.64.0/18 but ConfigMap kube-system/kubeadm-config ClusterConfiguration networking.podSubnet is 10.20.0.0/16")
	assert.Contains(t, out, "- ConfigMap kube-system/kubeadm-config ClusterConfiguration networking.podSubnet = 10.20.0.0/16")
	assert.Contains(t, out, "1 errors, 0 warnings")

	// run (the real entry point) does the same without a kubeconfig in sight.
	var o, e bytes.Buffer
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	assert.Equal(t, 1, run(offline("check"), &o, &e))
	assert.Equal(t, out, o.String())
}

func TestCheckEverything(t *testing.T) {
	code, out, _ := runT(t, noCluster, everything("check", "-o", "json")...)
	assert.Equal(t, 1, code)
	var rep kubeadmcfg.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	var got []kubeadmcfg.Code
	for _, f := range rep.Findings {
		got = append(got, f.Code)
	}
	assert.Equal(t, []kubeadmcfg.Code{
		kubeadmcfg.CodePodSubnetMismatch, kubeadmcfg.CodeNodeCrash, kubeadmcfg.CodeNodeCrash,
		kubeadmcfg.CodePoolOutsideKubeProxy, kubeadmcfg.CodePoolOutsideClusterCIDR,
	}, got)
	require.NotNil(t, rep.Preflight)
	assert.False(t, rep.Preflight.WouldStart)

	code, out, _ = runT(t, noCluster, everything("check")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "node worker1: failed to mark cidr[10.20.1.0/24] at idx [0] as occupied for node: worker1")
}

func TestShow(t *testing.T) {
	code, out, _ := runT(t, noCluster, everything("show", "-o", "json")...)
	require.Equal(t, 0, code)
	var v struct{ Values []kubeadmcfg.Value }
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	assert.Contains(t, v.Values, kubeadmcfg.Value{Where: "ConfigMap kube-system/kubelet-config kubelet clusterDNS", Value: "10.233.0.10"})
	assert.Contains(t, v.Values, kubeadmcfg.Value{Where: "Calico IPPool new-pool", Value: "10.20.0.0/16"})

	code, out, _ = runT(t, noCluster, everything("show")...)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "testdata/manifests/kube-apiserver.yaml --service-cluster-ip-range\n    10.233.0.0/18\n")

	// Reading nothing is an error, not an empty success.
	code, out, errOut := runT(t, noCluster, "show", "--offline", "--manifests", "")
	require.Equal(t, 2, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "nothing to check")
}

func TestSetPrintsPlanAndDiffs(t *testing.T) {
	code, out, errOut := runT(t, noCluster, everything("set", "--pod-subnet", "10.20.0.0/16")...)
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{
		"target:  pod 10.20.0.0/16, service 10.233.0.0/18, node masks [24]",
		"(file) On every control-plane node: pause node IPAM with --allocate-node-cidrs=false",
		"BEFORE kube-controller-manager gets the new --cluster-cidr",
		"master1 10.233.64.0/24 -> 10.20.0.0/24",
		"preflight with the nodes as they are: kube-controller-manager would NOT start (0 flag errors, 2 nodes would crash it)",
		"preflight once the nodes are moved: kube-controller-manager would start",
		"-    - --cluster-cidr=10.233.64.0/18\n+    - --cluster-cidr=10.20.0.0/16\n",
		"-clusterCIDR: 10.233.64.0/18\n+clusterCIDR: 10.20.0.0/16\n",
		"nothing applied: run again with --apply",
	} {
		assert.Contains(t, out, want)
	}
	// Files are not touched without --out.
	data, err := os.ReadFile(td + "/manifests/kube-controller-manager.yaml")
	require.NoError(t, err)
	assert.Contains(t, string(data), "--cluster-cidr=10.233.64.0/18")

	dir := t.TempDir()
	code, out, _ = runT(t, noCluster, everything("set", "--pod-subnet", "10.20.0.0/16", "--service-subnet", "172.24.0.0/16", "--out", dir, "-o", "yaml")...)
	require.Equal(t, 0, code)
	var doc struct {
		Plan kubeadmcfg.Plan `json:"plan"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(out), &doc))
	assert.Len(t, doc.Plan.ConfigMapEdits, 3)
	assert.Equal(t, []string{"networking.serviceSubnet: 10.233.0.0/18 -> 172.24.0.0/16"}, doc.Plan.ConfigMapEdits[0].Changes)
	args, err := kubeadmcfg.ManifestArgs(mustRead(t, filepath.Join(dir, kubeadmcfg.ControllerManagerManifest)))
	require.NoError(t, err)
	assert.Contains(t, args, "--cluster-cidr=10.20.0.0/16")
	assert.Contains(t, args, "--service-cluster-ip-range=172.24.0.0/16")
	assert.Contains(t, args, "--allocate-node-cidrs=true", "the written file is the final one, not the paused one")
	args, err = kubeadmcfg.ManifestArgs(mustRead(t, filepath.Join(dir, kubeadmcfg.APIServerManifest)))
	require.NoError(t, err)
	assert.Contains(t, args, "--service-cluster-ip-range=172.24.0.0/16")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

func TestBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "missing command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"check", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"check", "extra"}, `unexpected argument "extra"`},
		{offline("check", "-o", "xml"), `-o "xml"`},
		{offline("set"), "set needs --pod-subnet"},
		{offline("set", "--pod-subnet", "10.233.64.1/16"), "10.233.64.1/16 has host bits set; the network is 10.233.0.0/16"},
		{offline("set", "--pod-subnet", "10.20.0.0/16", "--dry-run=server"), "--dry-run=server needs --apply"},
		{offline("set", "--pod-subnet", "10.20.0.0/16", "--apply"), "--apply updates ConfigMaps in a cluster"},
		{offline("set", "--pod-subnet", "10.20.0.0/16", "--apply", "--dry-run=later"), "must be none, client or server"},
		{offline("set", "--service-subnet", "10.233.0.0/18"), "nothing to change"},
		{[]string{"check", "--kubeadm-config", "testdata/missing.yaml"}, "--kubeadm-config: open testdata/missing.yaml"},
		{[]string{"check", "--kubeadm-config", "testdata/nodes.yaml"}, "no ClusterConfiguration document"},
		{[]string{"check", "--offline", "--kubeconfig", "x"}, "--offline contradicts"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := runT(t, noCluster, tt.args...)
			assert.Equal(t, 2, code, errOut)
			assert.Empty(t, out)
			assert.Contains(t, errOut, tt.want)
			if !strings.Contains(tt.want, "missing command") && !strings.Contains(errOut, "usage:") {
				assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
			}
		})
	}
	// An explicit kubeconfig that does not work is an error, not a silent fallback.
	code, _, errOut := runT(t, noCluster, "check", "--kubeconfig", "/nonexistent")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "kubeconfig: no configuration has been provided")
}

// liveCluster serves the testdata ConfigMaps and nodes from a fake API
// server whose update enforces resourceVersions and honours dry-run.
func liveCluster(t *testing.T) (*fake.Clientset, *int) {
	t.Helper()
	var objs []runtime.Object
	for _, f := range []string{"kubeadm-config.yaml", "kube-proxy.yaml", "kubelet-config.yaml"} {
		cm, err := kubeadmcfg.DecodeConfigMap(mustRead(t, filepath.Join(td, f)))
		require.NoError(t, err)
		objs = append(objs, cm)
	}
	var nodes corev1.NodeList
	require.NoError(t, yaml.Unmarshal(mustRead(t, td+"/nodes.yaml"), &nodes))
	for i := range nodes.Items {
		objs = append(objs, &nodes.Items[i])
	}
	cs := fake.NewClientset(objs...)
	updates := 0
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ua := a.(k8stesting.UpdateActionImpl)
		cm := ua.GetObject().(*corev1.ConfigMap).DeepCopy()
		cur, err := cs.Tracker().Get(gvr, ua.GetNamespace(), cm.Name)
		if err != nil {
			return true, nil, err
		}
		if rv := cur.(*corev1.ConfigMap).ResourceVersion; cm.ResourceVersion != rv {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), cm.Name, errors.New("the object has been modified"))
		}
		n, _ := strconv.Atoi(cm.ResourceVersion)
		cm.ResourceVersion = strconv.Itoa(n + 1)
		if len(ua.UpdateOptions.DryRun) > 0 {
			return true, cm, nil
		}
		updates++
		return true, cm, cs.Tracker().Update(gvr, cm, ua.GetNamespace())
	})
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		r.Status.Allowed = true
		return true, r, nil
	})
	return cs, &updates
}

func TestSetApplyAgainstACluster(t *testing.T) {
	cs, updates := liveCluster(t)
	client := func(kubeconfig, ctx string) (kubernetes.Interface, error) { return cs, nil }
	args := []string{"set", "--pod-subnet", "10.20.0.0/16", "--service-subnet", "172.24.0.0/16", "--manifests", td + "/manifests", "--apply"}

	code, out, errOut := runT(t, client, append(args, "--dry-run=server")...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "applied kube-proxy: updated (ConfigMap kube-system/kube-proxy config.conf) [dry-run=server]")
	assert.Equal(t, 0, *updates)

	code, out, errOut = runT(t, client, args...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "applied kubeadm-config: updated")
	assert.Contains(t, out, "applied kubelet-config: updated")
	assert.Equal(t, 3, *updates)
	cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kubelet-config", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, cm.Data["kubelet"], "clusterDNS:\n- 172.24.0.10\n")

	// The nodes came from the cluster: the plan names the ones to move.
	assert.Contains(t, out, "worker3 10.233.67.0/24 -> 10.20.3.0/24")

	// The ConfigMaps now say 10.20.0.0/16 while the manifest (edited by the
	// operator later, step by step) does not: check says so.
	code, out, _ = runT(t, client, "check", "--manifests", td+"/manifests")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "kube-proxy config.conf clusterCIDR is 10.20.0.0/16")
}
