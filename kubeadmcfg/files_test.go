package kubeadmcfg

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kube-controller-manager.yaml")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o640))
	require.NoError(t, WriteFileAtomic(path, []byte("new")))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "new", string(data))
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), st.Mode().Perm(), "the mode is kept")

	fresh := filepath.Join(dir, "new.yaml")
	require.NoError(t, WriteFileAtomic(fresh, []byte("x")))
	st, err = os.Stat(fresh)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 2, "no temporary file left behind")

	require.Error(t, WriteFileAtomic(dir, []byte("x")), "a directory is not replaced")
	require.Error(t, WriteFileAtomic(filepath.Join(dir, "missing", "f"), []byte("x")))
}

func TestApplyManifestChanges(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, ControllerManagerManifest)
	orig := golden(t, "v1.32", "kube-controller-manager.yaml")
	require.NoError(t, os.WriteFile(path, orig, 0o600))
	changes := []FlagChange{{Flag: FlagClusterCIDR, Value: "10.20.0.0/16"}, {Flag: FlagNodeCIDRMaskSize, Value: "23"}}

	changed, err := ApplyManifestChanges(ctx, path, changes)
	require.NoError(t, err)
	assert.True(t, changed)
	m, err := ReadManifestFile(path)
	require.NoError(t, err)
	f, err := m.ControllerManagerFlags()
	require.NoError(t, err)
	assert.Equal(t, "10.20.0.0/16", f.ClusterCIDR)
	assert.Equal(t, 23, f.NodeCIDRMaskSize)

	changed, err = ApplyManifestChanges(ctx, path, changes)
	require.NoError(t, err)
	assert.False(t, changed, "idempotent")

	_, err = ApplyManifestChanges(ctx, filepath.Join(dir, "absent.yaml"), changes)
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = ApplyManifestChanges(ctx, path, []FlagChange{{Flag: "bad flag", Value: "x"}})
	require.ErrorIs(t, err, ErrInvalid)
}
