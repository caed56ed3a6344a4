package journal

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// recOfSize is a record whose cluster entry (encoded key and compact JSON)
// is exactly entry bytes.
func recOfSize(t *testing.T, key, name string, pad byte, entry int) bigRec {
	t.Helper()
	ek, err := encodeKey(key)
	require.NoError(t, err)
	base, err := json.Marshal(bigRec{Name: name})
	require.NoError(t, err)
	n := entry - len(ek) - len(base) - len(`,"pad":""`)
	require.Positive(t, n, "entry %d too small for key %q", entry, key)
	r := bigRec{Name: name, Pad: strings.Repeat(string(pad), n)}
	got, err := json.Marshal(r)
	require.NoError(t, err)
	require.Equal(t, entry, len(ek)+len(got))
	return r
}

func chunkSize(cm *corev1.ConfigMap) int { return size(cm) }

// TestClusterRecordThatExactlyFillsAChunkStaysInIt: a chunk holds records up
// to exactly ChunkBytes: a record that fills it to the byte is added to it,
// and written again at the same size it stays in place, not moved to a new
// chunk.
func TestClusterRecordThatExactlyFillsAChunkStaysInIt(t *testing.T) {
	c := clusterClient()
	opts := clusterOpts(c)
	opts.ChunkBytes = 1000
	j := openCluster(t, t.TempDir(), opts)
	ctx := context.Background()
	require.NoError(t, j.PutContext(ctx, "node/a", bigRec{Name: "a", Phase: "cordoned"}))
	cms := chunks(t, c)
	require.Len(t, cms, 1)
	free := opts.ChunkBytes - chunkSize(&cms[0])

	require.NoError(t, j.PutContext(ctx, "node/b", recOfSize(t, "node/b", "b", 'p', free)))
	cms = chunks(t, c)
	require.Len(t, cms, 1, "the record fills chunk 0 to the byte")
	assert.Equal(t, opts.ChunkBytes, chunkSize(&cms[0]))

	require.NoError(t, j.PutContext(ctx, "node/b", recOfSize(t, "node/b", "b", 'q', free)))
	cms = chunks(t, c)
	require.Len(t, cms, 1, "rewritten at the same size, in place")
	assert.Contains(t, cms[0].Data["node_2fb"], "qqq")
}

// TestClusterOpenPacksRecordsUpToExactlyTheChunkSize: the records copied up
// when a run opens fill a chunk to exactly ChunkBytes before a second is
// made, and a record larger than a chunk gets one chunk of its own, with no
// empty chunk before it.
func TestClusterOpenPacksRecordsUpToExactlyTheChunkSize(t *testing.T) {
	dir := t.TempDir()
	local, err := Open(dir)
	require.NoError(t, err)
	require.NoError(t, local.Put("node/a", recOfSize(t, "node/a", "a", 'p', 400)))
	require.NoError(t, local.Put("node/b", recOfSize(t, "node/b", "b", 'p', 300)))
	require.NoError(t, local.Close())

	c := clusterClient()
	opts := clusterOpts(c)
	opts.ChunkBytes = 1000
	j := openCluster(t, dir, opts)
	require.NoError(t, j.PutContext(context.Background(), "node/c", recOfSize(t, "node/c", "c", 'p', 300)))
	cms := chunks(t, c)
	require.Len(t, cms, 1, "400 + 300 + 300 bytes fill one chunk of 1000")
	assert.Len(t, cms[0].Data, 3)

	c2 := clusterClient()
	opts2 := clusterOpts(c2)
	opts2.ChunkBytes = 100
	j2 := openCluster(t, t.TempDir(), opts2)
	require.NoError(t, j2.PutContext(context.Background(), "node/big", recOfSize(t, "node/big", "big", 'p', 300)))
	cms = chunks(t, c2)
	require.Len(t, cms, 1, "one chunk, holding the record larger than a chunk")
	assert.Contains(t, cms[0].Data, "node_2fbig")
}

// TestClusterRecordOfExactlyMaxChunkBytesFits: MaxChunkBytes is the largest
// record, key included, that a chunk takes: one of exactly that size is
// stored, when the run opens and after.
func TestClusterRecordOfExactlyMaxChunkBytesFits(t *testing.T) {
	c := clusterClient()
	opts := clusterOpts(c)
	opts.ChunkBytes = MaxChunkBytes
	j := openCluster(t, t.TempDir(), opts)
	ctx := context.Background()
	require.NoError(t, j.PutContext(ctx, "node/a", recOfSize(t, "node/a", "a", 'p', MaxChunkBytes)), "when the run opens")
	require.NoError(t, j.PutContext(ctx, "node/b", recOfSize(t, "node/b", "b", 'p', MaxChunkBytes)), "in a run already open")
	assert.Len(t, chunks(t, c), 2)
}

// TestClusterPutOfAnUnchangedRecordWritesNothing: writing a record again
// with the value the cluster holds sends no request.
func TestClusterPutOfAnUnchangedRecordWritesNothing(t *testing.T) {
	c := clusterClient()
	j := openCluster(t, t.TempDir(), clusterOpts(c))
	ctx := context.Background()
	rec := bigRec{Name: "a", Phase: "cordoned"}
	require.NoError(t, j.PutContext(ctx, "node/a", rec))
	require.NoError(t, j.PutContext(ctx, "node/b", rec))
	writes := func() int {
		n := 0
		for _, a := range c.Actions() {
			if a.GetResource().Resource == "configmaps" && a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
				n++
			}
		}
		return n
	}
	before := writes()
	require.NoError(t, j.PutContext(ctx, "node/a", rec))
	assert.Equal(t, before, writes())
}

// TestKeyEncodingKeepsLettersDigitsDashAndDot: the bytes a ConfigMap data
// key allows, but "_", are kept as they are, at both ends of each range; the
// bytes next to the ranges are encoded.
func TestKeyEncodingKeepsLettersDigitsDashAndDot(t *testing.T) {
	for key, want := range map[string]string{
		"09azAZ-.":   "09azAZ-.",
		"node/w-1":   "node_2fw-1",
		"a_b":        "a_5fb",
		"/:@[`{":     "_2f_3a_40_5b_60_7b",
		"Zz9.plan-A": "Zz9.plan-A",
	} {
		got, err := encodeKey(key)
		require.NoError(t, err)
		assert.Equal(t, want, got, key)
	}
}

// TestClusterOpeningARunSaysSo: the run a journal opens in the cluster is
// logged with its records and chunks, once the directory names it.
func TestClusterOpeningARunSaysSo(t *testing.T) {
	c := clusterClient()
	j := openCluster(t, t.TempDir(), clusterOpts(c))
	var lines []string
	ctx := logr.NewContext(context.Background(), funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}))
	require.NoError(t, j.PutContext(ctx, "node/a", bigRec{Name: "a"}))
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0], `"msg"="opened cluster journal run"`)
	assert.Contains(t, lines[0], `"records"=1 "chunks"=1`)
	marker, err := j.marker()
	require.NoError(t, err)
	assert.NotEmpty(t, marker, "the directory names the run")
}
