package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/cli/clitest"
)

// The adversarial suite (issue 20): hostile input, run with --apply where it
// could change something, must exit with its code, say one line naming the
// flag (or argument) and the value, write nothing to etcd or the cluster,
// and print no next step.

// kubeWrites lists the cluster writes of a run (access reviews excluded).
func kubeWrites(actions []k8stesting.Action) []string {
	var out []string
	for _, a := range actions {
		switch a.GetVerb() {
		case "create", "update", "delete", "patch", "deletecollection":
		default:
			continue
		}
		if r := a.GetResource().Resource; r == "selfsubjectaccessreviews" {
			continue
		}
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
	}
	return out
}

type advCase struct {
	name string
	args []string
	// kube runs against kubeWorld instead of the etcd story world.
	kube bool
	// files are created in a temp dir; "@name" in args becomes its path.
	files map[string]string
	code  int
	msg   []string
}

// kubeWorld: net-conf.json 10.244.0.0/16, node-a in it, node-b without a podCIDR.
func kubeWorld() *world {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-cfg", Namespace: "kube-flannel", UID: "u1", ResourceVersion: "7"},
		Data: map[string]string{"net-conf.json": "{\n  \"Network\": \"10.244.0.0/16\",\n  \"Backend\": {\n    \"Type\": \"vxlan\"\n  }\n}\n"}}
	return &world{kube: newKube(cm, node("node-a", "192.168.0.1", "10.244.1.0/24"), node("node-b", "192.168.0.2", ""))}
}

func TestAdversarial(t *testing.T) {
	cases := []advCase{
		// etcd mode
		{name: "rm a key no lease holds", args: []string{"rm", "172.7.9.0-24", "--apply"}, code: 2, msg: []string{"172.7.9.0-24"}},
		{name: "rm the config key", args: []string{"rm", pfx + "/config", "--apply"}, code: 2, msg: []string{pfx + "/config"}},
		{name: "move a key no lease holds", args: []string{"move", "172.7.9.0-24", "--apply"}, code: 2, msg: []string{"172.7.9.0-24"}},
		{name: "move onto another lease's subnet", args: []string{"move", "172.7.1.0-24", "172.7.3.0/24", "--apply"}, code: 2, msg: []string{"172.7.3.0/24"}},
		{name: "move outside the network", args: []string{"move", "172.7.1.0-24", "10.1.0.0/24", "--apply"}, code: 2, msg: []string{"10.1.0.0/24"}},
		{name: "move to a subnet with host bits", args: []string{"move", "172.7.1.0-24", "172.7.5.1/24", "--apply"}, code: 2, msg: []string{"172.7.5.1/24"}},
		{name: "move to garbage", args: []string{"move", "172.7.1.0-24", "nope", "--apply"}, code: 2, msg: []string{`"nope"`}},
		{name: "move to a subnet of another length", args: []string{"move", "172.7.1.0-24", "172.7.8.0/23", "--apply"}, code: 2, msg: []string{"172.7.8.0/23"}},
		{name: "set-network to the current network", args: []string{"set-network", "172.7.0.0/16", "--apply"}, code: 2, msg: []string{"172.7.0.0/16", "already"}},
		{name: "set-network garbage", args: []string{"set-network", "172.7.0.0/33", "--apply"}, code: 2, msg: []string{"172.7.0.0/33"}},
		{name: "set-network moving a lease onto another", args: []string{"set-network", "10.99.0.0/16", "--move-leases", "--apply"}, code: 2, msg: []string{"172.7.1.0-24", "10.99.1.0"}},
		{name: "etcd CA file that does not exist", args: []string{"--etcd-cafile", "/nonexistent/ca.pem", "rm", "172.7.2.0-24", "--apply"}, code: 2, msg: []string{"--etcd-cafile", "/nonexistent/ca.pem"}},
		{name: "etcd cert and key files that do not exist", args: []string{"--etcd-certfile", "/nonexistent/c.pem", "--etcd-keyfile", "/nonexistent/k.pem", "rm", "172.7.2.0-24", "--apply"}, code: 2, msg: []string{"--etcd-certfile", "/nonexistent/c.pem"}},
		{name: "etcd CA file that is a directory", args: []string{"--etcd-cafile", "@.", "rm", "172.7.2.0-24", "--apply"}, code: 2, msg: []string{"--etcd-cafile", "not a regular file"}},
		{name: "half an etcd key pair", args: []string{"--etcd-keyfile", "@k.pem", "rm", "172.7.2.0-24", "--apply"}, files: map[string]string{"k.pem": "x"}, code: 2, msg: []string{"--etcd-certfile", "--etcd-keyfile"}},
		{name: "etcd endpoint not a URL", args: []string{"--etcd-endpoints", "10.0.0.1:2379", "rm", "172.7.2.0-24", "--apply"}, code: 2, msg: []string{"--etcd-endpoints", "10.0.0.1:2379"}},
		{name: "empty etcd endpoints", args: []string{"--etcd-endpoints", ",", "rm", "172.7.2.0-24", "--apply"}, code: 2, msg: []string{"--etcd-endpoints", `","`}},
		{name: "relative etcd prefix", args: []string{"--etcd-prefix", "coreos.com/network", "rm", "172.7.2.0-24", "--apply"}, code: 2, msg: []string{"--etcd-prefix", `"coreos.com/network"`}},
		{name: "root etcd prefix", args: []string{"--etcd-prefix", "/", "rm", "--stale", "--apply"}, code: 2, msg: []string{"--etcd-prefix", `"/"`}},
		{name: "password without username", args: []string{"--etcd-password", "x", "rm", "172.7.2.0-24", "--apply"}, code: 2, msg: []string{"--etcd-password"}},
		{name: "journal dir in kube mode", args: []string{"--kube-subnet-mgr", "--journal-dir", "/tmp/j", "set-network", "10.0.0.0/8", "--apply"}, kube: true, code: 2, msg: []string{"--journal-dir", "/tmp/j"}},
		{name: "apply with show", args: []string{"show", "--apply"}, code: 2, msg: []string{"--apply", "show"}},
		{name: "dry-run with check", args: []string{"check", "--dry-run=client"}, code: 2, msg: []string{"--dry-run=client", "check"}},
		{name: "public-ip not an address", args: []string{"check", "--subnet-env", "@subnet.env", "--public-ip", "10.0.0.x"}, files: map[string]string{"subnet.env": "FLANNEL_SUBNET=172.7.1.1/24\n"}, code: 2, msg: []string{"--public-ip", `"10.0.0.x"`}},
		{name: "subnet-env that does not exist", args: []string{"check", "--subnet-env", "/nonexistent/subnet.env"}, code: 2, msg: []string{"--subnet-env", "/nonexistent/subnet.env"}},
		{name: "stray positional argument", args: []string{"rm", "--stale", "now", "--apply"}, code: 2, msg: []string{"--stale"}},
		{name: "bad annotation prefix", args: []string{"--kube-annotation-prefix", "Not A Prefix!", "rm", "172.7.2.0-24", "--apply"}, code: 2, msg: []string{"--kube-annotation-prefix", `"Not A Prefix!"`}},
		// kube subnet manager mode
		{name: "kube: set-network leaving a node outside", args: []string{"--kube-subnet-mgr", "set-network", "10.20.0.0/16", "--apply"}, kube: true, code: 2, msg: []string{"10.20.0.0/16", "node-a"}},
		{name: "kube: set-network to the current network", args: []string{"--kube-subnet-mgr", "set-network", "10.244.0.0/16", "--apply"}, kube: true, code: 2, msg: []string{"10.244.0.0/16", "already"}},
		{name: "kube: set-network with host bits", args: []string{"--kube-subnet-mgr", "set-network", "10.0.0.1/8", "--apply"}, kube: true, code: 2, msg: []string{"10.0.0.1/8"}},
		{name: "kube: bad namespace", args: []string{"--kube-subnet-mgr", "--namespace", "Kube_Flannel", "set-network", "10.0.0.0/8", "--apply"}, kube: true, code: 2, msg: []string{"--namespace", `"Kube_Flannel"`}},
		{name: "kube: bad configmap name", args: []string{"--kube-subnet-mgr", "--configmap", "a/b", "set-network", "10.0.0.0/8", "--apply"}, kube: true, code: 2, msg: []string{"--configmap", `"a/b"`}},
		{name: "kube: configmap that does not exist", args: []string{"--kube-subnet-mgr", "--configmap", "nope", "set-network", "10.0.0.0/8", "--apply"}, kube: true, code: 2, msg: []string{"--configmap nope"}},
		{name: "kube: move", args: []string{"--kube-subnet-mgr", "move", "10.244.1.0-24", "--apply"}, kube: true, code: 2, msg: []string{"move"}},
		{name: "kube: move-leases", args: []string{"--kube-subnet-mgr", "set-network", "10.0.0.0/8", "--move-leases", "--apply"}, kube: true, code: 2, msg: []string{"--move-leases"}},
		{name: "kube: ipv6 network on an IPv4 config", args: []string{"--kube-subnet-mgr", "set-network", "fd00::/48", "--apply"}, kube: true, code: 2, msg: []string{"fd00::/48"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
			}
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				if strings.HasPrefix(a, "@") {
					a = filepath.Join(dir, a[1:])
				}
				args[i] = a
			}
			var w *world
			if tc.kube {
				w = kubeWorld()
			} else {
				w = storyWorld(t)
				w.envKube = "kc"
			}
			var rev int64
			if w.kv != nil {
				rev = w.kv.Revision()
			}
			w.kube.ClearActions()
			code, stdout, stderr := w.run(t, args...)
			ctxt := strings.Join(args, " ") + "\nstdout:\n" + stdout + "\nstderr:\n" + stderr
			assert.Equal(t, tc.code, code, ctxt)
			if w.kv != nil {
				assert.Equal(t, rev, w.kv.Revision(), "etcd must not be written: %s", ctxt)
			}
			assert.Empty(t, kubeWrites(w.kube.Actions()), "the cluster must not be written: %s", ctxt)
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			assert.Len(t, lines, 1, "one line on stderr: %s", ctxt)
			for _, m := range tc.msg {
				assert.Contains(t, lines[len(lines)-1], m, ctxt)
			}
			assert.NotRegexp(t, clitest.NextStep, stdout+stderr, "a refused run prints no next step: %s", ctxt)
		})
	}
}
