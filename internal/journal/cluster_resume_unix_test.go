//go:build unix

package journal

import (
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClusterResumeLeavesRecordsThatAgreeAlone: a journal opened again on
// the directory of its open run rewrites no local record the cluster copy
// agrees with (a rewrite is a rename: the file's inode changes).
func TestClusterResumeLeavesRecordsThatAgreeAlone(t *testing.T) {
	c := clusterClient()
	dir := t.TempDir()
	j := openCluster(t, dir, clusterOpts(c))
	require.NoError(t, j.PutContext(context.Background(), "node/a", bigRec{Name: "a", Phase: "cordoned"}))
	require.NoError(t, j.Close())
	inode := func() uint64 {
		fi, err := os.Stat(j.path("node/a"))
		require.NoError(t, err)
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	before := inode()
	openCluster(t, dir, clusterOpts(c))
	assert.Equal(t, before, inode(), "node/a was rewritten")
}
