package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/cidrshift/cidrshift/internal/cli/clitest"
)

// The adversarial suite (issue 20): hostile input, each case run with
// --apply where it could change the cluster, must exit with its code, say
// one line naming the flag (or field) and the value, write nothing to the
// cluster, and print no next step.

// writes lists the cluster writes a run made, access reviews and Leases
// excluded: an --apply takes its Leases before it reads the cluster and the
// journal kept there (only the holder reads a consistent run), so a run that
// the cluster's state refuses has taken and released them; released() checks
// that it left no holder.
func writes(actions []k8stesting.Action) []string {
	var out []string
	for _, a := range actions {
		switch a.GetVerb() {
		case "create", "update", "delete", "patch", "deletecollection":
		default:
			continue
		}
		if r := a.GetResource().Resource; r == "selfsubjectaccessreviews" || r == "subjectaccessreviews" || r == "leases" {
			continue
		}
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource+" "+a.GetNamespace())
	}
	return out
}

type advCase struct {
	name string
	args []string
	// setup prepares the world and returns extra arguments.
	setup func(t *testing.T, e *env) []string
	code  int
	msg   []string
}

func journalArgs(t *testing.T, _ *env) []string {
	return []string{"--journal", t.TempDir(), "--apply", "--poll-interval", "10ms"}
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

func TestAdversarial(t *testing.T) {
	apply := journalArgs
	cases := []advCase{
		// The named defect of issue 20: the selector was parsed only by the
		// hook that runs after the first node was recreated.
		{name: "malformed flannel selector", args: []string{"--network", "10.0.0.0/8", "--flannel-selector", "a in (("}, setup: apply,
			code: exitBad, msg: []string{"--flannel-selector", `"a in (("`}},
		{name: "empty flannel selector selects every pod", args: []string{"--network", "10.0.0.0/8", "--flannel-selector", ""}, setup: apply,
			code: exitBad, msg: []string{"--flannel-selector", `""`}},
		{name: "flannel selector with a bad label value", args: []string{"--network", "10.0.0.0/8", "--flannel-selector", "app=fl annel"}, setup: apply,
			code: exitBad, msg: []string{"--flannel-selector", `"app=fl annel"`}},
		{name: "bad namespace name", args: []string{"--network", "10.0.0.0/8", "--namespace", "Kube_Flannel"}, setup: apply,
			code: exitBad, msg: []string{"--namespace", `"Kube_Flannel"`}},
		{name: "bad configmap name", args: []string{"--network", "10.0.0.0/8", "--configmap", "a/b"}, setup: apply,
			code: exitBad, msg: []string{"--configmap", `"a/b"`}},
		{name: "configmap that does not exist", args: []string{"--network", "10.0.0.0/8", "--configmap", "nope"}, setup: apply,
			code: exitBad, msg: []string{"--configmap", "nope"}},
		{name: "from is not the Network in use", args: []string{"--network", "10.0.0.0/8", "--from", "10.0.0.0/16"}, setup: apply,
			code: exitBad, msg: []string{"--from 10.0.0.0/16", "10.244.0.0/16"}},
		{name: "from with host bits", args: []string{"--network", "10.0.0.0/8", "--from", "10.244.0.1/16"}, setup: apply,
			code: exitBad, msg: []string{"--from", "10.244.0.1/16"}},
		{name: "network equal to the current one", args: []string{"--network", "10.244.0.0/16"}, setup: apply,
			code: exitBad, msg: []string{"10.244.0.0/16"}},
		{name: "network not containing the current one", args: []string{"--network", "10.20.0.0/16"}, setup: apply,
			code: exitBad, msg: []string{"--network 10.20.0.0/16", "10.244.0.0/16"}},
		{name: "network not a CIDR", args: []string{"--network", "ten/8"}, setup: apply,
			code: exitBad, msg: []string{"--network", "ten/8"}},
		{name: "ipv6 network", args: []string{"--network", "fd00::/48"}, setup: apply,
			code: exitBad, msg: []string{"--network fd00::/48"}},
		{name: "negative health timeout", args: []string{"--network", "10.0.0.0/8", "--health-timeout", "-1s"}, setup: apply,
			code: exitBad, msg: []string{"--health-timeout", "-1s"}},
		{name: "zero poll interval", args: []string{"--network", "10.0.0.0/8", "--poll-interval", "0s"}, setup: func(t *testing.T, _ *env) []string {
			return []string{"--journal", t.TempDir(), "--apply"}
		}, code: exitBad, msg: []string{"--poll-interval", "0s"}},
		{name: "node mask out of range", args: []string{"--network", "10.0.0.0/8", "--node-mask", "40"}, setup: apply,
			code: exitBad, msg: []string{"--node-mask", "40"}},
		{name: "node mask wider than the Network", args: []string{"--network", "10.0.0.0/8", "--node-mask", "12"}, setup: apply,
			code: exitBad, msg: []string{"--node-mask", "12"}},
		{name: "stray positional argument", args: []string{"--network", "10.0.0.0/8", "now"}, setup: apply,
			code: exitBad, msg: []string{`"now"`}},
		{name: "node range outside the network", args: []string{"--network", "10.240.0.0/12", "--rewrite-nodes", "--node-range", "10.20.0.0/16"}, setup: apply,
			code: exitBad, msg: []string{"--node-range 10.20.0.0/16", "10.240.0.0/12"}},
		{name: "node range overlapping the old Network", args: []string{"--network", "10.0.0.0/8", "--rewrite-nodes", "--node-range", "10.244.0.0/15"}, setup: apply,
			code: exitBad, msg: []string{"--node-range 10.244.0.0/15"}},
		{name: "output format", args: []string{"--network", "10.0.0.0/8", "-o", "xml"}, setup: apply,
			code: exitBad, msg: []string{"-o", `"xml"`}},
		{name: "dry-run mode", args: []string{"--network", "10.0.0.0/8", "--dry-run", "all", "--apply"},
			code: exitBad, msg: []string{"--dry-run", `"all"`}},
		{name: "garbage kubeconfig", args: []string{"--network", "10.0.0.0/8"}, setup: func(t *testing.T, e *env) []string {
			e.real = true
			return append(journalArgs(t, e), "--kubeconfig", writeFile(t, t.TempDir(), "kc", "{{{ not yaml"))
		}, code: exitBad, msg: []string{"kubeconfig"}},
		{name: "missing kubeconfig context", args: []string{"--network", "10.0.0.0/8", "--context", "nope"}, setup: func(t *testing.T, e *env) []string {
			e.real = true
			kc := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: a, context: {cluster: c, user: u}}]\ncurrent-context: a\nusers: [{name: u, user: {token: x}}]\n"
			return append(journalArgs(t, e), "--kubeconfig", writeFile(t, t.TempDir(), "kc", kc))
		}, code: exitBad, msg: []string{"nope"}},
		{name: "manifests dir without the kube-controller-manager manifest", args: []string{"--network", "10.0.0.0/8"}, setup: func(t *testing.T, e *env) []string {
			return append(journalArgs(t, e), "--manifests", t.TempDir())
		}, code: exitBad, msg: []string{"--manifests", "kube-controller-manager.yaml"}},
		{name: "manifests with an unreadable kube-controller-manager manifest", args: []string{"--network", "10.0.0.0/8"}, setup: func(t *testing.T, e *env) []string {
			dir := t.TempDir()
			writeFile(t, dir, "kube-controller-manager.yaml", "kind: [[[")
			return append(journalArgs(t, e), "--manifests", dir)
		}, code: exitBad, msg: []string{"--manifests", "kube-controller-manager.yaml"}},
		{name: "out is a file", args: []string{"--network", "10.0.0.0/8"}, setup: func(t *testing.T, e *env) []string {
			dir := t.TempDir()
			writeFile(t, dir, "kube-controller-manager.yaml", kcmManifest)
			return append(journalArgs(t, e), "--manifests", dir, "--out", writeFile(t, t.TempDir(), "f", "x"))
		}, code: exitBad, msg: []string{"--out"}},
		{name: "journal of another move", args: []string{"--network", "10.0.0.0/8"}, setup: func(t *testing.T, e *env) []string {
			dir := t.TempDir()
			code, _, errOut := e.run(t, "--network", "10.240.0.0/12", "--journal", dir, "--apply", "--poll-interval", "10ms")
			require.Equal(t, exitWaiting, code, errOut)
			e.cs.ClearActions()
			return []string{"--journal", dir, "--apply"}
		}, code: exitBad, msg: []string{"--journal", "10.240.0.0/12"}},
		{name: "journal fix plan edited outside the Network", args: []string{"--network", "10.240.0.0/12"}, setup: func(t *testing.T, e *env) []string {
			dir := editedJournal(t, e, func(b string) string { return strings.Replace(b, `"10.244.3.0/24"`, `"10.99.3.0/24"`, 1) })
			return []string{"--journal", dir, "--apply", "--poll-interval", "10ms"}
		}, code: exitBad, msg: []string{"invalid plan", "fix-plan", "10.99.3.0/24", "10.244.0.0/16"}},
		{name: "journal fix plan step without a new podCIDR", args: []string{"--network", "10.240.0.0/12"}, setup: func(t *testing.T, e *env) []string {
			dir := editedJournal(t, e, func(b string) string { return strings.Replace(b, `"10.244.3.0/24"`, ``, 1) })
			return []string{"--journal", dir, "--apply", "--poll-interval", "10ms"}
		}, code: exitBad, msg: []string{"invalid plan", "fix-plan", "steps[1] (node w4).newPodCIDRs has 0 entries"}},
		{name: "journal fix plan truncated", args: []string{"--network", "10.240.0.0/12"}, setup: func(t *testing.T, e *env) []string {
			dir := editedJournal(t, e, func(b string) string { return b[:len(b)/2] })
			return []string{"--journal", dir, "--apply", "--poll-interval", "10ms"}
		}, code: exitBad, msg: []string{"invalid plan", "fix-plan"}},
		{name: "node podCIDR outside the current Network", args: []string{"--network", "10.0.0.0/8"}, setup: func(t *testing.T, e *env) []string {
			w5 := testNode("w5", "10.99.1.0/24", 0)
			w5.ResourceVersion = ""
			_, err := e.cs.CoreV1().Nodes().Create(t.Context(), w5, metaCreate)
			require.NoError(t, err)
			e.cs.ClearActions()
			return journalArgs(t, e)
		}, code: exitFailed, msg: []string{"w5", "10.99.1.0/24", "10.244.0.0/16"}},
		{name: "net-conf.json that does not parse", args: []string{"--network", "10.0.0.0/8"}, setup: func(t *testing.T, e *env) []string {
			cm, err := e.cs.CoreV1().ConfigMaps("kube-flannel").Get(t.Context(), "kube-flannel-cfg", metaGet)
			require.NoError(t, err)
			cm.Data["net-conf.json"] = `{"Network": 7}`
			_, err = e.cs.CoreV1().ConfigMaps("kube-flannel").Update(t.Context(), cm, metaUpdate)
			require.NoError(t, err)
			e.cs.ClearActions()
			return journalArgs(t, e)
		}, code: exitFailed, msg: []string{"net-conf.json", "Network"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			args := append([]string{}, tc.args...)
			if tc.setup != nil {
				args = append(args, tc.setup(t, e)...)
			}
			e.cs.ClearActions()
			before := e.netConf(t)
			code, stdout, stderr := e.run(t, args...)
			ctxt := strings.Join(args, " ") + "\nstdout:\n" + stdout + "\nstderr:\n" + stderr
			assert.Equal(t, tc.code, code, ctxt)
			assert.Empty(t, writes(e.cs.Actions()), "bad input must write nothing: %s", ctxt)
			leases, err := e.cs.CoordinationV1().Leases("").List(t.Context(), metav1.ListOptions{})
			require.NoError(t, err)
			for _, l := range leases.Items {
				assert.Empty(t, ptr.Deref(l.Spec.HolderIdentity, ""), "Lease %s released: %s", l.Name, ctxt)
			}
			assert.Equal(t, before, e.netConf(t), ctxt)
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			assert.Len(t, lines, 1, "one line on stderr: %s", ctxt)
			for _, m := range tc.msg {
				assert.Contains(t, lines[len(lines)-1], m, ctxt)
			}
			assert.NotRegexp(t, clitest.NextStep, stdout+stderr, "a refused run prints no next step: %s", ctxt)
		})
	}
}

var (
	metaCreate = metav1.CreateOptions{}
	metaGet    = metav1.GetOptions{}
	metaUpdate = metav1.UpdateOptions{}
)

// TestRestartsOnlyFlannelDaemonSets: step 5 rolls only the DaemonSets whose
// pods --flannel-selector selects; flannel may live in kube-system beside
// kube-proxy, which must not be restarted.
func TestRestartsOnlyFlannelDaemonSets(t *testing.T) {
	e := newEnv(t)
	for _, ds := range []*appsv1.DaemonSet{
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-ds", Namespace: "kube-flannel"},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "flannel", "tier": "node"}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-flannel"},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": "kube-proxy"}}}}},
	} {
		_, err := e.cs.AppsV1().DaemonSets(ds.Namespace).Create(t.Context(), ds, metaCreate)
		require.NoError(t, err)
	}
	args := []string{"--network", "10.240.0.0/12", "--journal", t.TempDir(), "--apply", "--poll-interval", "10ms", "--continue"}
	code, out, errOut := e.run(t, args...)
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	restarted := func(name string) bool {
		ds, err := e.cs.AppsV1().DaemonSets("kube-flannel").Get(t.Context(), name, metaGet)
		require.NoError(t, err)
		_, ok := ds.Spec.Template.Annotations[restartedAtAnnotation]
		return ok
	}
	assert.True(t, restarted("kube-flannel-ds"), out)
	assert.False(t, restarted("kube-proxy"), "kube-proxy is not flannel: %s", out)
}

// editedJournal runs the runbook until it waits for the operator (steps 1
// and 2 done), then rewrites its journal's fix plan with edit. The first run
// keeps no copy in the cluster (--no-lock): a directory that follows a run
// kept in the cluster gets the cluster's records back on the next run, which
// would undo the edit.
func editedJournal(t *testing.T, e *env, edit func(string) string) string {
	t.Helper()
	dir := t.TempDir()
	code, out, errOut := e.run(t, "--network", "10.240.0.0/12", "--journal", dir, "--apply", "--poll-interval", "10ms", "--no-lock")
	require.Equal(t, exitWaiting, code, "%s\n%s", out, errOut)
	path := filepath.Join(dir, keyFixPlan+".json")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(b), `"10.244.3.0/24"`)
	require.NoError(t, os.WriteFile(path, []byte(edit(string(b))), 0o600))
	e.cs.ClearActions()
	return dir
}
