package journal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/cidrshift/cidrshift/internal/access"
)

// The copy of a journal kept in the cluster.
//
// What is kept: every record of the local journal, as compact JSON, one
// ConfigMap data key per record, in ConfigMaps ("chunks") named
// <scope>-<run>-<n> in the chosen namespace, labelled LabelScope, LabelRun,
// LabelChunk and LabelState (open, then finished). A run is opened by its
// first write: every local record is copied up, into chunks created from the
// last to chunk 0, whose creation commits the run (a run without chunk 0 is
// ignored), and then the directory names the run in its CLUSTER-RUN file.
//
// Size: a chunk takes records until the next one would pass ChunkBytes
// (default 256 KiB; a record larger than that gets a chunk of its own), far
// below the API server's 1 MiB limit on a ConfigMap's data; a record above
// MaxChunkBytes (900 KiB) is refused with ErrRecordTooLarge before the
// destructive call it guards. A record that outgrows its chunk moves to the
// last one: it is written there first and then removed from the old chunk,
// and when a crash leaves it in both, the higher chunk wins. Every write is a
// compare-and-swap on the chunk's resourceVersion; a conflict re-reads the
// chunk and applies the change again.
//
// Retention: FinishRun, when the run is complete, marks chunk 0 finished and
// empties it, then deletes the other chunks; the emptied chunk 0 (a few
// hundred bytes) stays as a tombstone, so a directory that still follows the
// run (a machine that was cut off) is not resumed from its out-of-date
// records. With keep, the records stay, labelled finished. Either way,
// `kubectl delete configmap -n NAMESPACE -l journal.cidrshift.io/state=finished`
// removes finished runs; `-l journal.cidrshift.io/run=RUN` removes one run.
//
// RBAC: get, list, create, update and delete on configmaps in the namespace.

const (
	// DefaultChunkBytes is how many bytes of records a chunk takes before the
	// next record goes to a new one.
	DefaultChunkBytes = 256 << 10
	// MaxChunkBytes is the largest ChunkBytes and the largest record: the
	// API server refuses ConfigMaps whose data exceeds 1 MiB.
	MaxChunkBytes = 900 << 10

	// LabelScope names the scope of a cluster journal's ConfigMaps.
	LabelScope = "journal.cidrshift.io/scope"
	// LabelRun names the run a ConfigMap belongs to.
	LabelRun = "journal.cidrshift.io/run"
	// LabelChunk is the ConfigMap's chunk number within its run.
	LabelChunk = "journal.cidrshift.io/chunk"
	// LabelState is StateOpen or StateFinished.
	LabelState = "journal.cidrshift.io/state"
	// StateOpen marks the chunks of a run that is not finished.
	StateOpen = "open"
	// StateFinished marks the chunks of a finished run.
	StateFinished = "finished"
	// AnnotationStartedBy is the holder that opened the run.
	AnnotationStartedBy = "journal.cidrshift.io/started-by"
	// AnnotationStarted is when the run was opened (RFC 3339).
	AnnotationStarted = "journal.cidrshift.io/started"
	// AnnotationFinished is when the run was finished (RFC 3339).
	AnnotationFinished = "journal.cidrshift.io/finished"

	markerFile = "CLUSTER-RUN"
)

var (
	// ErrClusterRun means the journal directory and the cluster journal
	// disagree: the cluster holds an unfinished run the directory does not
	// follow, or the run the directory follows was finished elsewhere.
	ErrClusterRun = errors.New("journal directory and cluster journal disagree")
	// ErrRecordTooLarge means a record does not fit in a ConfigMap.
	ErrRecordTooLarge = errors.New("journal record too large for the cluster journal")
)

// ClusterOptions configures the copy of a journal kept in the cluster.
type ClusterOptions struct {
	// Client reaches the cluster.
	Client kubernetes.Interface
	// Namespace holds the ConfigMaps; empty means kube-system.
	Namespace string
	// Scope names and labels the ConfigMaps, a DNS label such as
	// "cidrshift-nodecidr". A scope has at most one open run; only the
	// holder of the scope's lock may write it.
	Scope string
	// Holder is recorded on the ConfigMaps, e.g. user@host/pid.
	Holder string
	// ChunkBytes is how many bytes of records a ConfigMap takes; zero means
	// DefaultChunkBytes, at most MaxChunkBytes.
	ChunkBytes int
}

func (o *ClusterOptions) check() error {
	if o.Client == nil {
		return errors.New("cluster journal: no client")
	}
	if o.Namespace == "" {
		o.Namespace = metav1.NamespaceSystem
	}
	if o.ChunkBytes == 0 {
		o.ChunkBytes = DefaultChunkBytes
	}
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return fmt.Errorf("cluster journal namespace %q: %s", o.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(o.Scope); len(errs) > 0 {
		return fmt.Errorf("cluster journal scope %q: %s", o.Scope, strings.Join(errs, "; "))
	}
	if o.ChunkBytes < 0 || o.ChunkBytes > MaxChunkBytes {
		return fmt.Errorf("cluster journal chunk size %d: want 1 to %d bytes", o.ChunkBytes, MaxChunkBytes)
	}
	return nil
}

// cluster is the cluster copy of one Journal.
type cluster struct {
	opts ClusterOptions

	mu      sync.Mutex
	run     string              // "" until the first write opens a run
	started string              // the run's AnnotationStarted
	chunks  []*corev1.ConfigMap // by chunk number
	// where maps an encoded key to the chunks holding it, ascending; the
	// last one holds its current value.
	where map[string][]int
}

// clusterRun is a run as listed.
type clusterRun struct {
	id       string
	chunks   []*corev1.ConfigMap
	finished bool
}

func (r *clusterRun) annotation(key string) string {
	if len(r.chunks) == 0 {
		return ""
	}
	return r.chunks[0].Annotations[key]
}

func (r *clusterRun) describe() string {
	return fmt.Sprintf("run %s (started by %s at %s)", r.id, r.annotation(AnnotationStartedBy), r.annotation(AnnotationStarted))
}

// records returns the run's records by key; a key found in several chunks
// takes the value of the highest.
func (r *clusterRun) records() (map[string][]byte, map[string][]int, error) {
	recs, where := map[string][]byte{}, map[string][]int{}
	for i, cm := range r.chunks {
		for ek, v := range cm.Data {
			key, err := decodeKey(ek)
			if err != nil {
				return nil, nil, fmt.Errorf("cluster journal ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
			}
			recs[key] = []byte(v)
			where[ek] = append(where[ek], i)
		}
	}
	return recs, where, nil
}

// listRuns lists the scope's runs by id.
func listRuns(ctx context.Context, o ClusterOptions) (map[string]*clusterRun, error) {
	sel := labels.Set{LabelScope: o.Scope}.String()
	runs := map[string]*clusterRun{}
	err := retry.OnError(backoff, retriable, func() error {
		clear(runs)
		list, err := o.Client.CoreV1().ConfigMaps(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		for i := range list.Items {
			cm := &list.Items[i]
			id := cm.Labels[LabelRun]
			n, err := strconv.Atoi(cm.Labels[LabelChunk])
			if id == "" || err != nil || n < 0 {
				continue // not a chunk
			}
			r := runs[id]
			if r == nil {
				r = &clusterRun{id: id}
				runs[id] = r
			}
			for len(r.chunks) <= n {
				r.chunks = append(r.chunks, nil)
			}
			r.chunks[n] = cm
			r.finished = r.finished || cm.Labels[LabelState] == StateFinished
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing cluster journal %s in namespace %s: %w", o.Scope, o.Namespace, err)
	}
	for id, r := range runs {
		switch {
		case r.chunks[0] == nil:
			// Its opening never finished: it holds nothing a run relies on.
			delete(runs, id)
		case slices.Contains(r.chunks, nil) && !r.finished:
			return nil, fmt.Errorf("%w: cluster journal %s %s lacks a chunk (ConfigMaps deleted by hand?): %s", ErrClusterRun, o.Scope, r.describe(), chunkNames(r.chunks))
		}
	}
	return runs, nil
}

func chunkNames(chunks []*corev1.ConfigMap) string {
	var names []string
	for i, cm := range chunks {
		if cm == nil {
			names = append(names, fmt.Sprintf("chunk %d missing", i))
		} else {
			names = append(names, cm.Name)
		}
	}
	return strings.Join(names, ", ")
}

// openRun returns the scope's one open run, or nil.
func openRun(runs map[string]*clusterRun, o ClusterOptions) (*clusterRun, error) {
	var open []*clusterRun
	for _, r := range runs {
		if !r.finished {
			open = append(open, r)
		}
	}
	switch len(open) {
	case 0:
		return nil, nil
	case 1:
		return open[0], nil
	}
	slices.SortFunc(open, func(a, b *clusterRun) int { return strings.Compare(a.id, b.id) })
	var d []string
	for _, r := range open {
		d = append(d, r.describe())
	}
	return nil, fmt.Errorf("%w: cluster journal %s in namespace %s holds %d unfinished runs: %s; only one may be open: remove the one not to resume (kubectl delete configmap -n %s -l %s=RUN)",
		ErrClusterRun, o.Scope, o.Namespace, len(open), strings.Join(d, "; "), o.Namespace, LabelRun)
}

// Snapshot is the unfinished run of a cluster journal, as read.
type Snapshot struct {
	// Run is the run's id.
	Run string
	// StartedBy is the holder that opened the run.
	StartedBy string
	// Started is when the run was opened.
	Started time.Time
	records map[string][]byte
}

// ReadCluster reads the scope's unfinished run without writing anything; it
// returns nil when there is none.
func ReadCluster(ctx context.Context, opts ClusterOptions) (*Snapshot, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	runs, err := listRuns(ctx, opts)
	if err != nil {
		return nil, err
	}
	r, err := openRun(runs, opts)
	if err != nil || r == nil {
		return nil, err
	}
	recs, _, err := r.records()
	if err != nil {
		return nil, err
	}
	started, _ := time.Parse(time.RFC3339, r.annotation(AnnotationStarted))
	return &Snapshot{Run: r.id, StartedBy: r.annotation(AnnotationStartedBy), Started: started, records: recs}, nil
}

// Get loads the record under key into v and reports whether it exists.
func (s *Snapshot) Get(key string, v any) (bool, error) {
	data, ok := s.records[key]
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("decoding cluster journal record %q of run %s: %w", key, s.Run, err)
	}
	return true, nil
}

// OpenCluster is Open with a second copy of every record in the cluster.
// Call it holding the scope's lock. When the cluster holds an unfinished run
// of the scope, the cluster's records replace the directory's if the
// directory follows that run (its last record may not have reached the
// cluster before a crash, and nothing was done after it: an earlier state of
// the run, as valid as the later one) or holds nothing the run lacks (it is
// empty: another machine started the run). It refuses, with ErrClusterRun, a
// directory holding records the unfinished run lacks, and a directory that
// follows a run the cluster marks finished (its records are out of date).
func OpenCluster(ctx context.Context, dir string, opts ClusterOptions) (*Journal, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	j, err := Open(dir)
	if err != nil {
		return nil, err
	}
	if err := j.attach(ctx, opts); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

func (j *Journal) attach(ctx context.Context, opts ClusterOptions) error {
	c := &cluster{opts: opts, where: map[string][]int{}}
	runs, err := listRuns(ctx, opts)
	if err != nil {
		return err
	}
	open, err := openRun(runs, opts)
	if err != nil {
		return err
	}
	marker, err := j.marker()
	if err != nil {
		return err
	}
	keys, err := j.Keys("")
	if err != nil {
		return err
	}
	switch {
	case open != nil:
		recs, where, err := open.records()
		if err != nil {
			return err
		}
		if marker != open.id {
			// Taken over only when the directory holds nothing the run
			// lacks: empty (another machine), or copied up whole before a
			// crash kept it from naming the run.
			if lacking := j.lacking(recs, keys); len(lacking) > 0 {
				return fmt.Errorf("%w: cluster journal %s in namespace %s holds the unfinished %s, and journal %s holds records it lacks (%s): resume that run with an empty journal directory",
					ErrClusterRun, opts.Scope, opts.Namespace, open.describe(), j.dir, strings.Join(lacking[:min(len(lacking), 3)], ", "))
			}
		}
		if err := j.replaceWith(recs, keys); err != nil {
			return err
		}
		if marker != open.id {
			if err := j.setMarker(open.id); err != nil {
				return err
			}
		}
		c.run, c.started, c.chunks, c.where = open.id, open.annotation(AnnotationStarted), open.chunks, where
	case marker != "" && runs[marker] != nil:
		return fmt.Errorf("%w: journal %s follows cluster journal %s %s, which is finished: the records in the directory are out of date; use another journal directory",
			ErrClusterRun, j.dir, opts.Scope, runs[marker].describe())
	}
	// Otherwise the next write opens a run (a directory following a run the
	// cluster never received, or lost, copies its records up again).
	j.cluster = c
	return nil
}

// lacking lists the local keys whose record recs lacks or holds otherwise.
func (j *Journal) lacking(recs map[string][]byte, keys []string) []string {
	var out []string
	for _, key := range keys {
		local, err := j.fs.ReadFile(j.path(key))
		if data, ok := recs[key]; !ok || err != nil || !sameJSON(local, data) {
			out = append(out, key)
		}
	}
	return out
}

// replaceWith makes the local records equal to recs: changed and new ones
// are written, local ones absent from recs removed.
func (j *Journal) replaceWith(recs map[string][]byte, localKeys []string) error {
	for key, data := range recs {
		local, err := j.fs.ReadFile(j.path(key))
		if err == nil && sameJSON(local, data) {
			continue
		}
		var buf bytes.Buffer
		if err := json.Indent(&buf, data, "", "  "); err != nil {
			return fmt.Errorf("cluster journal record %q: %w", key, err)
		}
		buf.WriteByte('\n')
		if err := WriteFileAtomicFS(j.fs, j.path(key), buf.Bytes(), 0o600); err != nil {
			return err
		}
	}
	for _, key := range localKeys {
		if _, ok := recs[key]; !ok {
			if err := j.fs.Remove(j.path(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("deleting journal record %q: %w", key, err)
			}
		}
	}
	return syncDir(j.fs, j.dir)
}

func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

func (j *Journal) marker() (string, error) {
	data, err := j.fs.ReadFile(filepath.Join(j.dir, markerFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading %s in journal %s: %w", markerFile, j.dir, err)
	}
	return strings.TrimSpace(string(data)), nil
}

func (j *Journal) setMarker(run string) error {
	return WriteFileAtomicFS(j.fs, filepath.Join(j.dir, markerFile), []byte(run+"\n"), 0o600)
}

func (j *Journal) clearMarker() error {
	if err := j.fs.Remove(filepath.Join(j.dir, markerFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s in journal %s: %w", markerFile, j.dir, err)
	}
	return syncDir(j.fs, j.dir)
}

// put stores data under key in the cluster, opening the run first.
func (c *cluster) put(ctx context.Context, j *Journal, key string, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run == "" {
		// The local records, key's included, are copied up.
		return c.open(ctx, j)
	}
	ek, err := encodeKey(key)
	if err != nil {
		return err
	}
	entry := len(ek) + len(data)
	if entry > MaxChunkBytes {
		return fmt.Errorf("%w: record %q is %d bytes, at most %d fit", ErrRecordTooLarge, key, entry, MaxChunkBytes)
	}
	value := string(data)
	at := c.where[ek]
	if n := len(at); n > 0 {
		cm := c.chunks[at[n-1]]
		if n == 1 && cm.Data[ek] == value {
			return nil
		}
		if size(cm)-len(ek)-len(cm.Data[ek])+entry <= c.opts.ChunkBytes || len(cm.Data) == 1 {
			if err := c.modify(ctx, at[n-1], func(cm *corev1.ConfigMap) { cm.Data[ek] = value }); err != nil {
				return err
			}
			return c.drop(ctx, ek, at[:n-1], at[n-1:])
		}
	}
	last := len(c.chunks) - 1
	if last >= 0 && size(c.chunks[last])+entry <= c.opts.ChunkBytes && !slices.Contains(at, last) {
		if err := c.modify(ctx, last, func(cm *corev1.ConfigMap) { cm.Data[ek] = value }); err != nil {
			return err
		}
	} else {
		last = len(c.chunks)
		if err := c.create(ctx, last, map[string]string{ek: value}); err != nil {
			return err
		}
	}
	// Written in its new chunk first, then removed from the old ones.
	return c.drop(ctx, ek, at, []int{last})
}

// drop removes ek from the chunks in from and records it in keep.
func (c *cluster) drop(ctx context.Context, ek string, from, keep []int) error {
	for _, i := range from {
		if err := c.modify(ctx, i, func(cm *corev1.ConfigMap) { delete(cm.Data, ek) }); err != nil {
			return err
		}
	}
	if len(keep) == 0 {
		delete(c.where, ek)
	} else {
		c.where[ek] = slices.Clone(keep)
	}
	return nil
}

// remove deletes key from the cluster.
func (c *cluster) remove(ctx context.Context, key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ek, err := encodeKey(key)
	if err != nil {
		return err
	}
	return c.drop(ctx, ek, c.where[ek], nil)
}

// open opens a new run holding every local record: the chunks are created
// from the last to chunk 0, whose creation commits the run; then the
// directory names it. A failure before chunk 0 exists leaves no run (its
// chunks are removed, as far as possible), and the next write starts over.
func (c *cluster) open(ctx context.Context, j *Journal) error {
	var id [3]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	now := time.Now().UTC()
	run := now.Format("20060102-150405") + "-" + hex.EncodeToString(id[:])
	keys, err := j.Keys("")
	if err != nil {
		return err
	}
	batches := []map[string]string{{}}
	used := 0
	for _, key := range keys {
		local, err := j.fs.ReadFile(j.path(key))
		if err != nil {
			return fmt.Errorf("reading journal record %q: %w", key, err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, local); err != nil {
			return fmt.Errorf("journal record %q in %s: %w", key, j.dir, err)
		}
		ek, err := encodeKey(key)
		if err != nil {
			return err
		}
		entry := len(ek) + compact.Len()
		if entry > MaxChunkBytes {
			return fmt.Errorf("%w: record %q is %d bytes, at most %d fit", ErrRecordTooLarge, key, entry, MaxChunkBytes)
		}
		if last := batches[len(batches)-1]; len(last) > 0 && used+entry > c.opts.ChunkBytes {
			batches, used = append(batches, map[string]string{}), 0
		}
		batches[len(batches)-1][ek] = compact.String()
		used += entry
	}
	c.run, c.started, c.chunks, c.where = run, now.Format(time.RFC3339), make([]*corev1.ConfigMap, len(batches)), map[string][]int{}
	for i := len(batches) - 1; i >= 0; i-- {
		if err := c.create(ctx, i, batches[i]); err != nil {
			c.abandon(ctx)
			return err
		}
	}
	if err := j.setMarker(run); err != nil {
		return err
	}
	logFrom(ctx).Info("opened cluster journal run", "namespace", c.opts.Namespace, "scope", c.opts.Scope, "run", run, "records", len(keys), "chunks", len(c.chunks))
	return nil
}

// abandon removes the chunks of a run whose opening failed.
func (c *cluster) abandon(ctx context.Context) {
	for _, cm := range c.chunks {
		if cm == nil {
			continue
		}
		if err := c.opts.Client.CoreV1().ConfigMaps(c.opts.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			logFrom(ctx).Info("removing a chunk of a cluster journal run that could not be opened failed; it is ignored", "configmap", cm.Name, "err", err.Error())
		}
	}
	c.run, c.started, c.chunks, c.where = "", "", nil, map[string][]int{}
}

// create creates chunk n holding data.
func (c *cluster) create(ctx context.Context, n int, data map[string]string) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-%s-%d", c.opts.Scope, c.run, n),
			Namespace: c.opts.Namespace,
			Labels: map[string]string{
				"app.kubernetes.io/managed-by": "cidrshift",
				LabelScope:                     c.opts.Scope,
				LabelRun:                       c.run,
				LabelChunk:                     strconv.Itoa(n),
				LabelState:                     StateOpen,
			},
			Annotations: map[string]string{AnnotationStartedBy: c.opts.Holder, AnnotationStarted: c.started},
		},
		Data: data,
	}
	var out *corev1.ConfigMap
	err := retry.OnError(backoff, retriable, func() error {
		var err error
		out, err = c.opts.Client.CoreV1().ConfigMaps(c.opts.Namespace).Create(ctx, cm, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// An earlier attempt went through, or a stale chunk: take it
			// only if it is this run's.
			got, gerr := c.opts.Client.CoreV1().ConfigMaps(c.opts.Namespace).Get(ctx, cm.Name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			if got.Labels[LabelRun] != c.run {
				return err
			}
			cur := got.DeepCopy()
			cur.Data = data
			out, err = c.opts.Client.CoreV1().ConfigMaps(c.opts.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("creating cluster journal ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	for len(c.chunks) <= n {
		c.chunks = append(c.chunks, nil)
	}
	c.chunks[n] = out
	for ek := range data {
		c.where[ek] = append(c.where[ek], n)
		slices.Sort(c.where[ek])
	}
	return nil
}

// modify changes chunk i by compare-and-swap: on a conflict it reads the
// chunk again and applies mutate to what it read.
func (c *cluster) modify(ctx context.Context, i int, mutate func(cm *corev1.ConfigMap)) error {
	cms := c.opts.Client.CoreV1().ConfigMaps(c.opts.Namespace)
	err := retry.OnError(backoff, retriable, func() error {
		cm := c.chunks[i].DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		mutate(cm)
		out, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
		if err == nil {
			c.chunks[i] = out
			return nil
		}
		if apierrors.IsConflict(err) {
			fresh, gerr := cms.Get(ctx, cm.Name, metav1.GetOptions{})
			if gerr != nil {
				return fmt.Errorf("%w; reading it again: %w", err, gerr)
			}
			if fresh.Labels[LabelRun] != c.run || fresh.Labels[LabelState] != StateOpen {
				return fmt.Errorf("%w: ConfigMap %s/%s no longer belongs to open run %s (labels %v)", ErrClusterRun, fresh.Namespace, fresh.Name, c.run, fresh.Labels)
			}
			c.chunks[i] = fresh
			logFrom(ctx).V(1).Info("cluster journal write conflicted; retrying on the chunk as it is now", "configmap", cm.Name)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("writing cluster journal ConfigMap %s/%s: %w", c.opts.Namespace, c.chunks[i].Name, err)
	}
	return nil
}

// FinishRun ends the journal's run in the cluster once it is complete:
// chunk 0 is marked finished (and emptied unless keep) and the other chunks
// are deleted (or, with keep, marked finished too); the directory stops
// following the run, so its next write opens a new one. Without a cluster
// copy, or before the run's first write, it does nothing.
func (j *Journal) FinishRun(ctx context.Context, keep bool) error {
	c := j.cluster
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run == "" {
		return nil
	}
	now := time.Now().UTC().Format(time.RFC3339)
	for i := range c.chunks {
		if i > 0 && !keep {
			err := retry.OnError(backoff, retriable, func() error {
				return c.opts.Client.CoreV1().ConfigMaps(c.opts.Namespace).Delete(ctx, c.chunks[i].Name, metav1.DeleteOptions{})
			})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting cluster journal ConfigMap %s/%s: %w", c.opts.Namespace, c.chunks[i].Name, err)
			}
			continue
		}
		err := c.modify(ctx, i, func(cm *corev1.ConfigMap) {
			cm.Labels[LabelState] = StateFinished
			cm.Annotations[AnnotationFinished] = now
			if !keep {
				cm.Data = nil
			}
		})
		if err != nil {
			return err
		}
	}
	logFrom(ctx).Info("finished cluster journal run", "namespace", c.opts.Namespace, "scope", c.opts.Scope, "run", c.run, "kept", keep)
	c.run, c.started, c.chunks, c.where = "", "", nil, map[string][]int{}
	return j.clearMarker()
}

// size is what counts against the API server's limit: keys and values.
func size(cm *corev1.ConfigMap) int {
	n := 0
	for k, v := range cm.Data {
		n += len(k) + len(v)
	}
	return n
}

// encodeKey turns a journal key into a ConfigMap data key ([-._a-zA-Z0-9]+):
// other bytes, and "_", become _XX (hex), so "node/w-1" is "node_2fw-1".
func encodeKey(key string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		ch := key[i]
		if ch == '-' || ch == '.' || ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' {
			b.WriteByte(ch)
		} else {
			fmt.Fprintf(&b, "_%02x", ch)
		}
	}
	ek := b.String()
	if errs := validation.IsConfigMapKey(ek); len(errs) > 0 {
		return "", fmt.Errorf("journal key %q as ConfigMap key %q: %s", key, ek, strings.Join(errs, "; "))
	}
	return ek, nil
}

func decodeKey(ek string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(ek); i++ {
		if ek[i] != '_' {
			b.WriteByte(ek[i])
			continue
		}
		if i+2 >= len(ek) {
			return "", fmt.Errorf("data key %q: truncated escape", ek)
		}
		v, err := hex.DecodeString(ek[i+1 : i+3])
		if err != nil {
			return "", fmt.Errorf("data key %q: %w", ek, err)
		}
		b.WriteByte(v[0])
		i += 2
	}
	return b.String(), nil
}

func logFrom(ctx context.Context) logr.Logger { return logr.FromContextOrDiscard(ctx) }

// backoff paces the retries of a cluster journal call: conflicts and
// transient errors, about 2 s in all.
var backoff = wait.Backoff{Steps: 7, Duration: 20 * time.Millisecond, Factor: 2, Jitter: 0.2}

// retriable: a conflict (the chunk is read again) or an API server that is
// briefly unavailable.
func retriable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
}

// OpenWithCluster is OpenCluster when opts is set, and Open otherwise: the
// journal of an Apply whose caller may or may not keep a copy in the
// cluster.
func OpenWithCluster(ctx context.Context, dir string, opts *ClusterOptions) (*Journal, error) {
	if opts == nil {
		return Open(dir)
	}
	return OpenCluster(ctx, dir, *opts)
}

// ClusterChecks lists the permissions a cluster journal in namespace needs
// (empty means kube-system): get, list, create, update and delete on
// configmaps.
func ClusterChecks(namespace string) []access.Check {
	if namespace == "" {
		namespace = metav1.NamespaceSystem
	}
	out := make([]access.Check, 0, 5)
	for _, v := range []string{"get", "list", "create", "update", "delete"} {
		out = append(out, access.Check{Verb: v, Resource: "configmaps", Namespace: namespace})
	}
	return out
}

// ClusterIn is the ClusterOptions of a package's cluster journal: in
// namespace (empty: kube-system), scope name or, when empty, defaultScope
// (the package's Lease scope), held by holder (user@host/pid).
func ClusterIn(client kubernetes.Interface, namespace, name, defaultScope, holder string) *ClusterOptions {
	if name == "" {
		name = defaultScope
	}
	return &ClusterOptions{Client: client, Namespace: namespace, Scope: name, Holder: holder}
}
