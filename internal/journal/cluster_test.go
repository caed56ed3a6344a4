package journal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/kubetest"
)

const testScope = "cidrshift-test"

func clusterClient() *fake.Clientset {
	c := fake.NewClientset()
	kubetest.EnforceCAS(c, "configmaps")
	return c
}

func clusterOpts(c *fake.Clientset) ClusterOptions {
	return ClusterOptions{Client: c, Scope: testScope, Holder: "alice@laptop/41"}
}

func openCluster(t *testing.T, dir string, opts ClusterOptions) *Journal {
	t.Helper()
	j, err := OpenCluster(context.Background(), dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { j.Close() })
	return j
}

// chunks lists the scope's ConfigMaps sorted by name.
func chunks(t *testing.T, c *fake.Clientset) []corev1.ConfigMap {
	t.Helper()
	list, err := c.CoreV1().ConfigMaps("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: LabelScope + "=" + testScope})
	require.NoError(t, err)
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items
}

type bigRec struct {
	Name  string `json:"name"`
	Phase string `json:"phase"`
	Pad   string `json:"pad,omitempty"`
}

func TestClusterCopyOfEveryRecord(t *testing.T) {
	c := clusterClient()
	dir := filepath.Join(t.TempDir(), "j")
	// Records written before the cluster copy existed are copied up when
	// the run opens.
	j0, err := Open(dir)
	require.NoError(t, err)
	require.NoError(t, j0.Put("node/old", rec{"old", "done"}))
	require.NoError(t, j0.Close())

	j := openCluster(t, dir, clusterOpts(c))
	assert.Empty(t, chunks(t, c), "nothing is written before the first record")
	snap, err := ReadCluster(context.Background(), clusterOpts(c))
	require.NoError(t, err)
	assert.Nil(t, snap)

	require.NoError(t, j.PutContext(context.Background(), "node/worker-1", rec{"worker-1", "backed-up"}))
	require.NoError(t, j.PutContext(context.Background(), "node/worker-1", rec{"worker-1", "done"}))
	require.NoError(t, j.PutContext(context.Background(), "run", rec{"run", "started"}))
	cms := chunks(t, c)
	require.Len(t, cms, 1)
	cm := cms[0]
	assert.Regexp(t, `^cidrshift-test-\d{8}-\d{6}-[0-9a-f]{6}-0$`, cm.Name)
	assert.Equal(t, "kube-system", cm.Namespace)
	assert.Equal(t, StateOpen, cm.Labels[LabelState])
	assert.Equal(t, "0", cm.Labels[LabelChunk])
	assert.Equal(t, "alice@laptop/41", cm.Annotations[AnnotationStartedBy])
	assert.Equal(t, map[string]string{
		"node_2fold":      `{"name":"old","phase":"done"}`,
		"node_2fworker-1": `{"name":"worker-1","phase":"done"}`,
		"run":             `{"name":"run","phase":"started"}`,
	}, cm.Data)
	marker, err := os.ReadFile(filepath.Join(dir, markerFile))
	require.NoError(t, err)
	assert.Equal(t, cm.Labels[LabelRun]+"\n", string(marker))

	snap, err = ReadCluster(context.Background(), clusterOpts(c))
	require.NoError(t, err)
	require.NotNil(t, snap)
	assert.Equal(t, cm.Labels[LabelRun], snap.Run)
	assert.Equal(t, "alice@laptop/41", snap.StartedBy)
	var r rec
	ok, err := snap.Get("node/worker-1", &r)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, rec{"worker-1", "done"}, r)
	ok, _ = snap.Get("node/missing", &r)
	assert.False(t, ok)

	require.NoError(t, j.DeleteContext(context.Background(), "node/old"))
	assert.NotContains(t, chunks(t, c)[0].Data, "node_2fold")
	ok, _ = j.Get("node/old", &r)
	assert.False(t, ok)
}

// A second machine with an empty directory takes the unfinished run over
// from the cluster, and a directory holding other records is refused.
func TestClusterResumeFromAnotherMachine(t *testing.T) {
	c := clusterClient()
	dir1 := filepath.Join(t.TempDir(), "machine-1")
	j1 := openCluster(t, dir1, clusterOpts(c))
	for i := range 5 {
		require.NoError(t, j1.PutContext(context.Background(), fmt.Sprintf("node/w-%d", i), rec{fmt.Sprintf("w-%d", i), "backed-up"}))
	}
	require.NoError(t, j1.Close())
	require.NoError(t, os.RemoveAll(dir1)) // the machine is lost

	other := filepath.Join(t.TempDir(), "other")
	jo, err := Open(other)
	require.NoError(t, err)
	require.NoError(t, jo.Put("node/x", rec{"x", "done"}))
	require.NoError(t, jo.Close())
	_, err = OpenCluster(context.Background(), other, clusterOpts(c))
	require.ErrorIs(t, err, ErrClusterRun)
	assert.ErrorContains(t, err, "holds the unfinished run")
	assert.ErrorContains(t, err, "started by alice@laptop/41")
	assert.ErrorContains(t, err, "resume that run with an empty journal directory")

	dir2 := filepath.Join(t.TempDir(), "machine-2")
	opts := clusterOpts(c)
	opts.Holder = "bob@desk/7"
	j2 := openCluster(t, dir2, opts)
	keys, err := j2.Keys("node/")
	require.NoError(t, err)
	assert.Len(t, keys, 5)
	var r rec
	ok, err := j2.Get("node/w-3", &r)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, rec{"w-3", "backed-up"}, r)
	// It continues the same run.
	require.NoError(t, j2.PutContext(context.Background(), "node/w-3", rec{"w-3", "done"}))
	cms := chunks(t, c)
	require.Len(t, cms, 1)
	assert.Equal(t, `{"name":"w-3","phase":"done"}`, cms[0].Data["node_2fw-3"])
}

// A directory that follows the run is brought back to the cluster's copy:
// a record written locally whose cluster write never happened (a crash in
// between) is an earlier, valid state of the run.
func TestClusterCopyWinsForFollowingDirectory(t *testing.T) {
	c := clusterClient()
	dir := t.TempDir()
	j := openCluster(t, dir, clusterOpts(c))
	require.NoError(t, j.PutContext(context.Background(), "node/a", rec{"a", "cordoned"}))
	require.NoError(t, j.Close())
	// Local only, as if the process died before the cluster write.
	jl, err := Open(dir)
	require.NoError(t, err)
	require.NoError(t, jl.Put("node/a", rec{"a", "backed-up"}))
	require.NoError(t, jl.Put("node/b", rec{"b", "cordoned"}))
	require.NoError(t, jl.Close())

	j = openCluster(t, dir, clusterOpts(c))
	var r rec
	ok, err := j.Get("node/a", &r)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, rec{"a", "cordoned"}, r)
	ok, err = j.Get("node/b", &r)
	require.NoError(t, err)
	assert.False(t, ok)
}

// Finishing a run deletes its records but leaves chunk 0 as an empty
// tombstone; a directory still following the run is refused, a new write
// opens a new run; with keep the records stay, labelled finished.
func TestClusterFinishRun(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%t", keep), func(t *testing.T) {
			c := clusterClient()
			opts := clusterOpts(c)
			opts.ChunkBytes = 100
			dir := t.TempDir()
			j := openCluster(t, dir, opts)
			for i := range 6 {
				require.NoError(t, j.PutContext(context.Background(), fmt.Sprintf("node/w-%d", i), rec{fmt.Sprintf("w-%d", i), "done"}))
			}
			require.Greater(t, len(chunks(t, c)), 2)
			run := chunks(t, c)[0].Labels[LabelRun]
			// A copy of the directory made before the finish (a machine
			// that was cut off).
			stale := t.TempDir()
			js := openCluster(t, stale, opts)
			require.NoError(t, js.Close())

			require.NoError(t, j.FinishRun(context.Background(), keep))
			cms := chunks(t, c)
			if keep {
				require.Greater(t, len(cms), 2)
				for _, cm := range cms {
					assert.Equal(t, StateFinished, cm.Labels[LabelState], cm.Name)
					assert.NotEmpty(t, cm.Data, cm.Name)
				}
			} else {
				require.Len(t, cms, 1)
				assert.Equal(t, run, cms[0].Labels[LabelRun])
				assert.Equal(t, StateFinished, cms[0].Labels[LabelState])
				assert.NotEmpty(t, cms[0].Annotations[AnnotationFinished])
				assert.Empty(t, cms[0].Data)
			}
			_, err := os.Stat(filepath.Join(dir, markerFile))
			assert.ErrorIs(t, err, os.ErrNotExist)
			snap, err := ReadCluster(context.Background(), opts)
			require.NoError(t, err)
			assert.Nil(t, snap, "no unfinished run")

			_, err = OpenCluster(context.Background(), stale, opts)
			require.ErrorIs(t, err, ErrClusterRun)
			assert.ErrorContains(t, err, "is finished: the records in the directory are out of date")

			// The same directory writes on: a new run, holding every record.
			require.NoError(t, j.PutContext(context.Background(), "run", rec{"run", "next"}))
			snap, err = ReadCluster(context.Background(), opts)
			require.NoError(t, err)
			require.NotNil(t, snap)
			assert.NotEqual(t, run, snap.Run)
			ok, err := snap.Get("node/w-5", new(rec))
			require.NoError(t, err)
			assert.True(t, ok)
		})
	}
}

// A write that conflicts with a change made meanwhile (resourceVersion
// compare-and-swap) reads the chunk again and applies itself to it: both
// changes survive.
func TestClusterConflictRetried(t *testing.T) {
	c := clusterClient()
	j := openCluster(t, t.TempDir(), clusterOpts(c))
	require.NoError(t, j.PutContext(context.Background(), "node/a", rec{"a", "cordoned"}))
	var updates atomic.Int32
	c.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n := updates.Add(1)
		if n > 2 {
			return false, nil, nil
		}
		// Someone (kubectl annotate) changes the chunk just before each of
		// the first two writes, which then conflict.
		cm := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		cur, err := c.Tracker().Get(a.GetResource(), cm.Namespace, cm.Name)
		if err != nil {
			return true, nil, err
		}
		other := cur.DeepCopyObject().(*corev1.ConfigMap)
		other.Annotations[fmt.Sprintf("note-%d", n)] = "x"
		other.ResourceVersion += "0"
		return false, nil, c.Tracker().Update(a.GetResource(), other, cm.Namespace)
	})
	require.NoError(t, j.PutContext(context.Background(), "node/a", rec{"a", "backed-up"}))
	assert.Equal(t, int32(3), updates.Load(), "two conflicts, then the write went through")
	cm := chunks(t, c)[0]
	assert.Equal(t, `{"name":"a","phase":"backed-up"}`, cm.Data["node_2fa"])
	assert.Equal(t, "x", cm.Annotations["note-1"])
	assert.Equal(t, "x", cm.Annotations["note-2"])
}

// Records are spread over ConfigMaps that stay under the chunk size, and so
// under the API server's 1 MiB limit (which kubetest enforces): 300 records
// of 3 KiB, then records of 100 KiB with the largest chunk size.
func TestClusterChunking(t *testing.T) {
	for _, tc := range []struct {
		name        string
		chunkBytes  int
		records     int
		recordBytes int
	}{
		{"default chunk size, 300 nodes of 3 KiB", 0, 300, 3 << 10},
		{"largest chunk size, records of 100 KiB", MaxChunkBytes, 30, 100 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clusterClient()
			opts := clusterOpts(c)
			opts.ChunkBytes = tc.chunkBytes
			j := openCluster(t, t.TempDir(), opts)
			pad := strings.Repeat("x", tc.recordBytes)
			for i := range tc.records {
				require.NoError(t, j.PutContext(context.Background(), fmt.Sprintf("node/w-%03d", i), bigRec{Name: fmt.Sprint(i), Phase: "backed-up", Pad: pad}))
			}
			budget := opts.ChunkBytes
			if budget == 0 {
				budget = DefaultChunkBytes
			}
			cms := chunks(t, c)
			total := 0
			for _, cm := range cms {
				assert.LessOrEqual(t, size(&cm), budget, cm.Name)
				total += len(cm.Data)
			}
			assert.Equal(t, tc.records, total, "each record once")
			want := tc.records * (tc.recordBytes + 40) / budget
			assert.GreaterOrEqual(t, len(cms), want, "chunks")
			snap, err := ReadCluster(context.Background(), opts)
			require.NoError(t, err)
			var r bigRec
			ok, err := snap.Get(fmt.Sprintf("node/w-%03d", tc.records-1), &r)
			require.NoError(t, err)
			assert.True(t, ok)
		})
	}
}

// A record that outgrows its chunk moves to the last one, is never in two
// chunks once the move is done, and a record larger than a ConfigMap is
// refused.
func TestClusterRecordMovesAndLimits(t *testing.T) {
	c := clusterClient()
	opts := clusterOpts(c)
	opts.ChunkBytes = 1000
	j := openCluster(t, t.TempDir(), opts)
	for _, n := range []string{"a", "b", "c"} {
		require.NoError(t, j.PutContext(context.Background(), "node/"+n, bigRec{Name: n, Phase: "cordoned", Pad: strings.Repeat("p", 200)}))
	}
	require.Len(t, chunks(t, c), 1)
	// a grows: it no longer fits in chunk 0 and moves to a new chunk.
	require.NoError(t, j.PutContext(context.Background(), "node/a", bigRec{Name: "a", Phase: "backed-up", Pad: strings.Repeat("p", 600)}))
	cms := chunks(t, c)
	require.Len(t, cms, 2)
	assert.NotContains(t, cms[0].Data, "node_2fa")
	assert.Contains(t, cms[1].Data, "node_2fa")
	// A record alone in its chunk may exceed the chunk size.
	require.NoError(t, j.PutContext(context.Background(), "node/a", bigRec{Name: "a", Phase: "done", Pad: strings.Repeat("p", 5000)}))
	cms = chunks(t, c)
	require.Len(t, cms, 2)
	assert.Contains(t, cms[1].Data["node_2fa"], `"phase":"done"`)

	err := j.PutContext(context.Background(), "node/huge", bigRec{Name: "huge", Pad: strings.Repeat("p", MaxChunkBytes)})
	require.ErrorIs(t, err, ErrRecordTooLarge)
	assert.ErrorContains(t, err, `record "node/huge"`)
}

// A crash between writing a moved record to its new chunk and removing it
// from the old one leaves it twice: the higher chunk wins, and the next
// write of the key removes the stale copy.
func TestClusterDuplicateHigherChunkWins(t *testing.T) {
	c := clusterClient()
	mk := func(n int, data map[string]string) {
		_, err := c.CoreV1().ConfigMaps("kube-system").Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-r1-%d", testScope, n), Namespace: "kube-system",
				Labels: map[string]string{LabelScope: testScope, LabelRun: "r1", LabelChunk: fmt.Sprint(n), LabelState: StateOpen}},
			Data: data,
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	mk(0, map[string]string{"node_2fa": `{"name":"a","phase":"cordoned"}`, "run": `{"name":"run"}`})
	mk(1, map[string]string{"node_2fa": `{"name":"a","phase":"backed-up"}`})
	snap, err := ReadCluster(context.Background(), clusterOpts(c))
	require.NoError(t, err)
	var r rec
	_, err = snap.Get("node/a", &r)
	require.NoError(t, err)
	assert.Equal(t, "backed-up", r.Phase)

	j := openCluster(t, t.TempDir(), clusterOpts(c))
	_, err = j.Get("node/a", &r)
	require.NoError(t, err)
	assert.Equal(t, "backed-up", r.Phase)
	require.NoError(t, j.PutContext(context.Background(), "node/a", rec{"a", "done"}))
	cms := chunks(t, c)
	assert.NotContains(t, cms[0].Data, "node_2fa")
	assert.Equal(t, `{"name":"a","phase":"done"}`, cms[1].Data["node_2fa"])

	// A second open run of the scope is refused by name.
	mk2 := func() {
		_, err := c.CoreV1().ConfigMaps("kube-system").Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: testScope + "-r2-0", Namespace: "kube-system",
				Labels: map[string]string{LabelScope: testScope, LabelRun: "r2", LabelChunk: "0", LabelState: StateOpen}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	mk2()
	_, err = ReadCluster(context.Background(), clusterOpts(c))
	require.ErrorIs(t, err, ErrClusterRun)
	assert.ErrorContains(t, err, "holds 2 unfinished runs: run r1")
}

func TestClusterOptionsChecked(t *testing.T) {
	c := clusterClient()
	for _, tc := range []struct {
		opts ClusterOptions
		msg  string
	}{
		{ClusterOptions{Scope: testScope}, "no client"},
		{ClusterOptions{Client: c}, `scope ""`},
		{ClusterOptions{Client: c, Scope: "Bad_Scope"}, `scope "Bad_Scope"`},
		{ClusterOptions{Client: c, Scope: testScope, Namespace: "a/b"}, `namespace "a/b"`},
		{ClusterOptions{Client: c, Scope: testScope, ChunkBytes: MaxChunkBytes + 1}, "chunk size 921601"},
	} {
		_, err := OpenCluster(context.Background(), t.TempDir(), tc.opts)
		assert.ErrorContains(t, err, tc.msg)
		_, err = ReadCluster(context.Background(), tc.opts)
		assert.ErrorContains(t, err, tc.msg)
	}
}

func TestKeyEncoding(t *testing.T) {
	for key, want := range map[string]string{
		"node/worker-1":                "node_2fworker-1",
		"run":                          "run",
		"service/kube-system/kube_dns": "service_2fkube-system_2fkube_5fdns",
		"a.b":                          "a.b",
	} {
		ek, err := encodeKey(key)
		require.NoError(t, err)
		assert.Equal(t, want, ek)
		back, err := decodeKey(ek)
		require.NoError(t, err)
		assert.Equal(t, key, back)
	}
	_, err := encodeKey(strings.Repeat("x", 300))
	assert.ErrorContains(t, err, "as ConfigMap key")
	for _, bad := range []string{"a_", "a_2", "a_zz"} {
		_, err := decodeKey(bad)
		assert.Error(t, err, bad)
	}
}

// FuzzKeyEncoding: decoding never panics, and every encodable key comes back.
func FuzzKeyEncoding(f *testing.F) {
	for _, s := range []string{"node/w-1", "run", "a_b", "_", "%2F", "ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		_, _ = decodeKey(key)
		ek, err := encodeKey(key)
		if err != nil {
			return
		}
		back, err := decodeKey(ek)
		if err != nil || back != key {
			t.Fatalf("%q -> %q -> %q, %v", key, ek, back, err)
		}
	})
}

// Opening a run copies every local record up, chunk 0 last: a failure
// before chunk 0 exists leaves no run in the cluster (a directory following
// half a run would lose the records the cluster lacks), and the next write
// opens one whole.
func TestClusterOpenIsAllOrNothing(t *testing.T) {
	c := clusterClient()
	dir := t.TempDir()
	j0, err := Open(dir)
	require.NoError(t, err)
	for i := range 6 {
		require.NoError(t, j0.Put(fmt.Sprintf("node/w-%d", i), bigRec{Name: fmt.Sprint(i), Phase: "backed-up", Pad: strings.Repeat("p", 60)}))
	}
	require.NoError(t, j0.Close())
	opts := clusterOpts(c)
	opts.ChunkBytes = 300 // several chunks
	j := openCluster(t, dir, opts)
	var failChunk0 atomic.Bool
	failChunk0.Store(true)
	c.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm := a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap)
		if failChunk0.Load() && cm.Labels[LabelChunk] == "0" {
			return true, nil, fmt.Errorf("connection reset by peer")
		}
		return false, nil, nil
	})
	err = j.PutContext(context.Background(), "run", rec{"run", "started"})
	require.ErrorContains(t, err, "connection reset by peer")
	assert.Empty(t, chunks(t, c), "the chunks of the run that could not be opened are removed")
	_, err = os.Stat(filepath.Join(dir, markerFile))
	assert.ErrorIs(t, err, os.ErrNotExist, "the directory names no run")

	failChunk0.Store(false)
	require.NoError(t, j.PutContext(context.Background(), "run", rec{"run", "started"}))
	snap, err := ReadCluster(context.Background(), opts)
	require.NoError(t, err)
	require.NotNil(t, snap)
	for i := range 6 {
		ok, err := snap.Get(fmt.Sprintf("node/w-%d", i), new(bigRec))
		require.NoError(t, err)
		assert.True(t, ok, "w-%d copied up", i)
	}
	assert.Greater(t, len(chunks(t, c)), 2)

	// Chunks of a run whose opening died before chunk 0 are ignored.
	_, err = c.CoreV1().ConfigMaps("kube-system").Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: testScope + "-dead-1", Namespace: "kube-system",
			Labels: map[string]string{LabelScope: testScope, LabelRun: "dead", LabelChunk: "1", LabelState: StateOpen}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	again, err := ReadCluster(context.Background(), opts)
	require.NoError(t, err)
	assert.Equal(t, snap.Run, again.Run)
}

// A run copied up whole whose directory was not yet named (a crash between
// the two) is taken over by that directory.
func TestClusterDirectoryCopiedUpButNotNamed(t *testing.T) {
	c := clusterClient()
	dir := t.TempDir()
	j := openCluster(t, dir, clusterOpts(c))
	require.NoError(t, j.PutContext(context.Background(), "node/a", rec{"a", "backed-up"}))
	require.NoError(t, j.Close())
	require.NoError(t, os.Remove(filepath.Join(dir, markerFile)))
	j = openCluster(t, dir, clusterOpts(c))
	require.NoError(t, j.PutContext(context.Background(), "node/a", rec{"a", "done"}))
	cms := chunks(t, c)
	require.Len(t, cms, 1, "the same run")
	assert.Equal(t, `{"name":"a","phase":"done"}`, cms[0].Data["node_2fa"])
}
