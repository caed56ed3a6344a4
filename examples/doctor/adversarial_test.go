package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/cli/clitest"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

// TestAdversarial: every flag the doctor takes is validated before anything
// is read; bad input is exit 2 with one line naming the flag and the value.
// The doctor never writes, which a fake cluster counting writes checks.
func TestAdversarial(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "nodes.yaml")
	require.NoError(t, os.WriteFile(file, []byte(dump), 0o600))
	empty := filepath.Join(dir, "empty.yaml")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	garbage := clitest.GarbageKubeconfig(t)
	good := clitest.UnreachableKubeconfig(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  []string
		fake bool // against a fake cluster instead of real kubeconfig loading
	}{
		{"stray argument", []string{"now"}, 2, []string{`unexpected argument "now"`}, false},
		{"output format", []string{"-o", "xml"}, 2, []string{"-o", "xml"}, false},
		{"pods not a bool", []string{"--pods=maybe"}, 2, []string{"-pods", "maybe"}, false},
		{"cluster CIDR garbage", []string{"--cluster-cidr", "banana", "-f", file}, 2, []string{"--cluster-cidr", "banana"}, false},
		{"cluster CIDR octet", []string{"--cluster-cidr", "10.300.0.0/16", "-f", file}, 2, []string{"--cluster-cidr", "10.300.0.0/16"}, false},
		{"cluster CIDR empty", []string{"--cluster-cidr", " ", "-f", file}, 2, []string{"--cluster-cidr", "must not be empty"}, false},
		{"two IPv4 cluster CIDRs", []string{"-f", file, "--cluster-cidr", "10.20.0.0/16,10.30.0.0/16"}, 2, []string{"--cluster-cidr", "10.20.0.0/16,10.30.0.0/16", "would refuse"}, false},
		{"service CIDR /33", []string{"-f", file, "--cluster-cidr", "10.20.0.0/16", "--service-cidr", "10.96.0.0/33"}, 2, []string{"--service-cidr", "10.96.0.0/33"}, false},
		{"node mask 0", []string{"-f", file, "--cluster-cidr", "10.20.0.0/16", "--node-mask", "0"}, 2, []string{"--node-mask", `"0"`}, false},
		{"node mask 200", []string{"-f", file, "--cluster-cidr", "10.20.0.0/16", "--node-mask", "200"}, 2, []string{"--node-mask", `"200"`}, false},
		{"node mask 40 for IPv4", []string{"-f", file, "--cluster-cidr", "10.20.0.0/16", "--node-mask", "40"}, 2, []string{"--node-mask", `"40"`, "between 0 and 32"}, false},
		{"node mask word", []string{"-f", file, "--cluster-cidr", "10.20.0.0/16", "--node-mask", "abc"}, 2, []string{"--node-mask", `"abc"`}, false},
		{"new cluster CIDR host bits", []string{"--new-cluster-cidr", "10.233.64.1/16"}, 2, []string{"--new-cluster-cidr", "10.233.64.1/16"}, false},
		{"new cluster CIDR garbage", []string{"--new-cluster-cidr", "10.300.0.0/16"}, 2, []string{"--new-cluster-cidr", "10.300.0.0/16"}, false},
		{"new node mask alone", []string{"--new-node-mask", "24"}, 2, []string{"--new-node-mask", "--new-cluster-cidr"}, false},
		{"new node mask 40 for IPv4", []string{"--new-cluster-cidr", "10.20.0.0/16", "--new-node-mask", "40"}, 2, []string{"--new-node-mask", `"40"`}, false},
		{"dump and cluster", []string{"-f", file, "--kubeconfig", good}, 2, []string{"-f", "--kubeconfig"}, false},
		{"dump missing", []string{"-f", filepath.Join(dir, "none.yaml")}, 2, []string{"-f", "none.yaml"}, false},
		{"dump with no node", []string{"-f", empty, "--cluster-cidr", "10.0.0.0/8"}, 2, []string{"-f", "empty.yaml", "holds no Node"}, false},
		{"garbage kubeconfig", []string{"--kubeconfig", garbage}, 2, []string{"loading kubeconfig"}, false},
		{"missing context", []string{"--kubeconfig", good, "--context", "nope"}, 2, []string{"loading kubeconfig", `"nope"`}, false},
		// A layout conflict is a problem (1), by capacity's rules.
		{"cluster CIDR swallows the Service CIDR", []string{"-f", file, "--cluster-cidr", "10.0.0.0/8", "--service-cidr", "10.96.0.0/12"}, 1, nil, false},
		{"node mask shorter than the cluster CIDR", []string{"-f", file, "--cluster-cidr", "10.0.0.0/16", "--node-mask", "8"}, 1, nil, false},
		// A live cluster that holds nothing to audit is not healthy.
		{"cluster without nodes", []string{"--kubeconfig", "kc", "--cluster-cidr", "10.0.0.0/8"}, 1, []string{"no Node objects"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r result
			if tc.fake {
				c, _ := nodecidrtest.New()
				var writes []string
				c.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
					if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
						writes = append(writes, v)
					}
					return false, nil, nil
				})
				r = runApp(t, &app{connect: func(string, string) (kubernetes.Interface, dynamic.Interface, error) { return c, nil, nil }}, tc.args...)
				assert.Empty(t, writes)
			} else {
				r = runArgs(tc.args...)
			}
			ctxt := strings.Join(tc.args, " ") + "\n" + r.stdout + r.stderr
			assert.Equal(t, tc.code, r.code, ctxt)
			if tc.code == 2 {
				assert.Empty(t, r.stdout, ctxt)
			}
			if tc.msg != nil {
				lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
				require.Len(t, lines, 1, ctxt)
				assert.True(t, strings.HasPrefix(lines[0], "doctor: "), ctxt)
				for _, m := range tc.msg {
					assert.Contains(t, lines[0], m, ctxt)
				}
			}
			if tc.code == 1 && !tc.fake {
				assert.Contains(t, r.stdout, "PROBLEMS FOUND", ctxt)
			}
			if tc.code != 1 {
				assert.NotRegexp(t, clitest.NextStep, r.stdout+r.stderr, ctxt)
			}
		})
	}
}

// TestAdversarialUnreachable: a cluster that does not answer is exit 4
// within seconds, with progress lines while it retries.
func TestAdversarialUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the reach timeout")
	}
	kc := clitest.UnreachableKubeconfig(t)
	start := time.Now()
	r := runArgs("--kubeconfig", kc)
	assert.Equal(t, 4, r.code, r.stderr)
	assert.Less(t, time.Since(start), 20*time.Second)
	assert.Contains(t, r.stderr, "waiting for the API server at https://127.0.0.1:1")
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	assert.Contains(t, lines[len(lines)-1], "127.0.0.1:1")
}

// TestAdversarialForbidden: a caller the cluster refuses is exit 4.
func TestAdversarialForbidden(t *testing.T) {
	c, _ := nodecidrtest.New(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: types.UID("u")}})
	c.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, &forbidden
	})
	r := runApp(t, &app{connect: func(string, string) (kubernetes.Interface, dynamic.Interface, error) { return c, nil, nil }}, "--kubeconfig", "kc", "--cluster-cidr", "10.0.0.0/8")
	assert.Equal(t, 4, r.code, r.stderr)
	assert.Contains(t, r.stderr, "forbidden")
}

var forbidden = *apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("user cannot list nodes"))
