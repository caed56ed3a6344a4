// Package clitest holds what the example programs' tests share to check the
// exit-code contract of package cli: kubeconfigs that cannot work, and the
// pattern of a next step that a refused run must not print.
package clitest

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// NextStep matches output that tells an operator what to do next. A refused
// run (bad input, exit 2) must print none of it.
var NextStep = regexp.MustCompile(`(?im)^\s*(next:|then:|carry it out with|apply again|rerun)`)

// UnreachableKubeconfig writes a valid kubeconfig whose API server
// (https://127.0.0.1:1) does not listen, and returns its path: exit code 4.
func UnreachableKubeconfig(t testing.TB) string {
	t.Helper()
	return write(t, "unreachable.kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
}

// GarbageKubeconfig writes a file that is no kubeconfig and returns its
// path: exit code 2.
func GarbageKubeconfig(t testing.TB) string {
	t.Helper()
	return write(t, "garbage.kubeconfig", "clusters: [{ this is not a kubeconfig")
}

func write(t testing.TB, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	return path
}
