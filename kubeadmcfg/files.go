package kubeadmcfg

import (
	"bytes"
	"context"

	"github.com/go-logr/logr"

	"github.com/cidrshift/cidrshift/internal/journal"
)

// WriteFileAtomic replaces path with data so that a reader (the kubelet
// watching /etc/kubernetes/manifests) sees either the old or the new file,
// never a partial one: data goes to a hidden temporary file in the same
// directory (the kubelet ignores dot files), which is synced, given the mode
// (and, when permitted, the owner) of the file it replaces (0600 for a new
// file), and renamed over path; then the directory is synced so the rename
// survives a crash.
func WriteFileAtomic(path string, data []byte) error {
	return journal.WriteFileAtomic(path, data, 0o600)
}

// ApplyManifestChanges applies flag changes to the static-pod manifest at
// path and writes it back atomically (WriteFileAtomic), keeping every other
// byte. It is idempotent: a manifest that already has the changes is not
// written and changed is false. Use it on each control-plane node with the
// FlagChanges of a plan's FileEdit: the manifests of different control-plane
// nodes differ (advertise address), the flag changes do not.
func ApplyManifestChanges(ctx context.Context, path string, changes []FlagChange) (changed bool, err error) {
	m, err := ReadManifestFile(path)
	if err != nil {
		return false, err
	}
	before := m.Bytes()
	if err := m.Apply(changes); err != nil {
		return false, err
	}
	after := m.Bytes()
	if bytes.Equal(before, after) {
		logr.FromContextOrDiscard(ctx).V(1).Info("manifest already has the changes", "path", path)
		return false, nil
	}
	if err := WriteFileAtomic(path, after); err != nil {
		return false, err
	}
	logr.FromContextOrDiscard(ctx).Info("manifest rewritten", "path", path, "changes", len(changes))
	return true, nil
}
