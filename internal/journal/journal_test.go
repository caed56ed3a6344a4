package journal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type rec struct {
	Name  string `json:"name"`
	Phase string `json:"phase"`
}

func TestJournalRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j, err := Open(dir)
	require.NoError(t, err)
	defer j.Close()

	require.NoError(t, j.Put("node/worker-1", rec{"worker-1", "deleted"}))
	require.NoError(t, j.Put("service/kube-system/kube-dns", rec{"kube-dns", "planned"}))
	require.NoError(t, j.Put("node/worker-1", rec{"worker-1", "done"}))

	var got rec
	ok, err := j.Get("node/worker-1", &got)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, rec{"worker-1", "done"}, got)

	ok, err = j.Get("node/missing", &got)
	require.NoError(t, err)
	assert.False(t, ok)

	keys, err := j.Keys("node/")
	require.NoError(t, err)
	assert.Equal(t, []string{"node/worker-1"}, keys)
	keys, err = j.Keys("")
	require.NoError(t, err)
	assert.Equal(t, []string{"node/worker-1", "service/kube-system/kube-dns"}, keys)

	require.NoError(t, j.Delete("node/worker-1"))
	require.NoError(t, j.Delete("node/worker-1"), "deleting twice is fine")
	keys, _ = j.Keys("node/")
	assert.Empty(t, keys)

	// No temporary files are left behind.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		assert.NotContains(t, e.Name(), ".tmp-")
	}
}

func TestJournalLock(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir)
	require.NoError(t, err)
	_, err = Open(dir)
	assert.ErrorIs(t, err, ErrLocked)
	require.NoError(t, j.Close())
	j2, err := Open(dir)
	require.NoError(t, err)
	require.NoError(t, j2.Close())
	require.NoError(t, j2.Close(), "closing twice is fine")
}

func TestJournalErrors(t *testing.T) {
	_, err := Open("")
	assert.EqualError(t, err, "journal directory: empty path")

	dir := t.TempDir()
	j, err := Open(dir)
	require.NoError(t, err)
	defer j.Close()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "node%2Fbad.json"), []byte("{not json"), 0o600))
	var r rec
	_, err = j.Get("node/bad", &r)
	assert.ErrorContains(t, err, `decoding journal record "node/bad"`)
	assert.ErrorContains(t, j.Put("x", func() {}), `encoding journal record "x"`)
}

func TestWriteFileAtomicKeepsMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kube-controller-manager.yaml")
	require.NoError(t, os.WriteFile(p, []byte("old"), 0o640))
	require.NoError(t, WriteFileAtomic(p, []byte("new"), 0o600))
	data, _ := os.ReadFile(p)
	assert.Equal(t, "new", string(data))
	st, _ := os.Stat(p)
	assert.Equal(t, os.FileMode(0o640), st.Mode().Perm())
	assert.ErrorContains(t, WriteFileAtomic(filepath.Join(t.TempDir(), "no", "such", "dir"), nil, 0o600), "writing")
}
