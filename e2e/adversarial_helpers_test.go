package e2e_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/internal/cli/clitest"
)

// The adversarial suite: every live case runs an example program with bad
// input against a real control plane and asserts (1) the exit code, (2) one
// line on stderr naming the field and the value, and (3) that the cluster is
// unchanged: every object the program may touch, compared before and after.

// advCase is one hostile run of an example program.
type advCase struct {
	name string
	args []string
	// code is the wanted exit code.
	code int
	// msg are substrings the one-line message must contain (the field and
	// the value it names).
	msg []string
	// setup runs before the snapshot (for example to write a plan file).
	setup func(t *testing.T) []string
}

// advTouchable lists every resource a cidrshift program may create, change
// or delete. Resources a server does not serve are skipped.
var advTouchable = []schema.GroupVersionResource{
	{Version: "v1", Resource: "nodes"},
	{Version: "v1", Resource: "pods"},
	{Version: "v1", Resource: "services"},
	{Version: "v1", Resource: "configmaps"},
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apps", Version: "v1", Resource: "daemonsets"},
	{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"},
	{Group: "networking.k8s.io", Version: "v1beta1", Resource: "servicecidrs"},
	{Group: "crd.projectcalico.org", Version: "v1", Resource: "ippools"},
	{Group: "crd.projectcalico.org", Version: "v1", Resource: "ipamblocks"},
	{Group: "crd.projectcalico.org", Version: "v1", Resource: "blockaffinities"},
}

// advSnapshot returns, for every object of advTouchable, its UID and a hash
// of what a program could change: labels, annotations, finalizers, spec and
// data, and for Nodes spec.unschedulable and taints. Status is left out: the
// control plane's own controllers move it (kwok heartbeats, kcm's Ready).
func advSnapshot(t *testing.T, ctx context.Context, dyn dynamic.Interface) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, gvr := range advTouchable {
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		require.NoError(t, err, "list %s", gvr)
		for _, o := range list.Items {
			if gvr.Resource == "configmaps" && o.GetName() == "kube-root-ca.crt" {
				continue
			}
			if gvr.Resource == "pods" && o.GetDeletionTimestamp() != nil {
				continue
			}
			key := fmt.Sprintf("%s/%s %s/%s", gvr.Group, gvr.Resource, o.GetNamespace(), o.GetName())
			body := map[string]any{
				"uid":         o.GetUID(),
				"labels":      o.GetLabels(),
				"annotations": advAnnotations(o.GetAnnotations()),
				"finalizers":  o.GetFinalizers(),
				"spec":        o.Object["spec"],
				"data":        o.Object["data"],
			}
			data, err := json.Marshal(body)
			require.NoError(t, err)
			sum := sha256.Sum256(data)
			out[key] = string(o.GetUID()) + " " + hex.EncodeToString(sum[:8])
		}
	}
	return out
}

// advAnnotations drops the annotations that components rewrite on their own.
func advAnnotations(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		if strings.HasPrefix(k, "node.alpha.kubernetes.io/") || k == "control-plane.alpha.kubernetes.io/leader" ||
			strings.HasPrefix(k, "deployment.kubernetes.io/") {
			continue
		}
		out[k] = v
	}
	return out
}

// advDiff lists what changed between two snapshots.
func advDiff(before, after map[string]string) []string {
	var diff []string
	for k, v := range before {
		switch w, ok := after[k]; {
		case !ok:
			diff = append(diff, "deleted "+k)
		case w != v:
			diff = append(diff, "changed "+k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			diff = append(diff, "created "+k)
		}
	}
	sort.Strings(diff)
	return diff
}

var (
	advBinMu  sync.Mutex
	advBinDir string
	advBins   = map[string]string{}
)

// advBuild builds an example program once per test binary.
func advBuild(t *testing.T, name string) string {
	t.Helper()
	advBinMu.Lock()
	defer advBinMu.Unlock()
	if bin, ok := advBins[name]; ok {
		return bin
	}
	if advBinDir == "" {
		dir, err := os.MkdirTemp("", "cidrshift-adv-bin-")
		require.NoError(t, err)
		advBinDir = dir
	}
	wd, err := os.Getwd()
	require.NoError(t, err)
	bin := filepath.Join(advBinDir, name)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/cidrshift/cidrshift/examples/"+name)
	cmd.Dir = filepath.Join(wd, "..")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build examples/%s:\n%s", name, out)
	advBins[name] = bin
	return bin
}

// advRunCases runs each case of one program against the cluster, as
// subtests, and asserts the exit code, the one-line message and an
// unchanged cluster. extra are appended to every case's arguments (the
// kubeconfig, a journal directory).
func advRunCases(t *testing.T, c *harness.Cluster, program string, extra func(t *testing.T) []string, cases []advCase) {
	t.Helper()
	bin := advBuild(t, program)
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	require.NoError(t, err)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{}, tc.args...)
			if tc.setup != nil {
				args = append(args, tc.setup(t)...)
			}
			if extra != nil {
				args = append(args, extra(t)...)
			}
			before := advSnapshot(t, t.Context(), dyn)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent-cidrshift-adv")
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			_ = cmd.Run()
			code := cmd.ProcessState.ExitCode()
			// Give anything the program set in motion a moment to show.
			time.Sleep(300 * time.Millisecond)
			after := advSnapshot(t, t.Context(), dyn)
			ctxt := fmt.Sprintf("%s %s\nstdout:\n%s\nstderr:\n%s", program, strings.Join(args, " "), stdout.String(), stderr.String())
			assert.Empty(t, advDiff(before, after), "the cluster changed after bad input: %s", ctxt)
			assert.Equal(t, tc.code, code, "exit code: %s", ctxt)
			advAssertMessage(t, stderr.String(), tc.msg, ctxt)
			assert.NotRegexp(t, clitest.NextStep, stdout.String()+stderr.String(), "a refused run must not print a next step: %s", ctxt)
		})
	}
}

// advAssertMessage checks that stderr ends in one line naming every want.
func advAssertMessage(t *testing.T, stderr string, want []string, ctxt string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	for _, w := range want {
		assert.Contains(t, last, w, "the last stderr line must name %q: %s", w, ctxt)
	}
}

// TestMain removes the example programs advBuild built, once every test of
// the package is done with them.
func TestMain(m *testing.M) {
	code := m.Run()
	if advBinDir != "" {
		if err := os.RemoveAll(advBinDir); err != nil {
			fmt.Fprintln(os.Stderr, "removing", advBinDir+":", err)
		}
	}
	os.Exit(code)
}
