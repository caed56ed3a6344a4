package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// crashFS is an FS that does the real calls (in a test's temporary
// directory), logs each one, and keeps a model of what a crash of the
// machine would leave: a file's data is durable once the file is fsynced, a
// directory entry (created, renamed or removed) once its directory is.
// fail makes the named call fail instead.
type crashFS struct {
	mu  sync.Mutex
	log []string
	// fail maps a call ("sync", "syncdir", "rename", "write", "create",
	// "chmod", "close", "remove") to the error it returns.
	fail map[string]error
	// data is the content of each file as written (by the name it was
	// created with); synced is the content durable for it.
	data, synced map[string][]byte
	// entries maps a path to the file (its creation name) the directory
	// entry names now; durable is that map as a crash would leave it.
	entries, durable map[string]string
}

func newCrashFS() *crashFS {
	return &crashFS{fail: map[string]error{}, data: map[string][]byte{}, synced: map[string][]byte{},
		entries: map[string]string{}, durable: map[string]string{}}
}

func (c *crashFS) note(format string, args ...any) {
	c.log = append(c.log, fmt.Sprintf(format, args...))
}

// mark logs the destructive call a record guards, from the caller.
func (c *crashFS) mark(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.note("DESTRUCTIVE %s", what)
}

func (c *crashFS) calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

// afterCrash returns what a crash now would leave under path, and whether
// the entry would exist at all.
func (c *crashFS) afterCrash(path string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.durable[path]
	if !ok {
		return nil, false
	}
	return c.synced[f], true
}

func (c *crashFS) MkdirAll(path string, perm os.FileMode) error {
	c.mu.Lock()
	c.note("mkdir %s", path)
	c.mu.Unlock()
	return os.MkdirAll(path, perm)
}

func (c *crashFS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

func (c *crashFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

func (c *crashFS) ReadDir(name string) ([]os.DirEntry, error) { return os.ReadDir(name) }

func (c *crashFS) CreateTemp(dir, pattern string) (File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fail["create"]; err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	c.note("create %s", filepath.Base(f.Name()))
	c.entries[f.Name()] = f.Name()
	c.data[f.Name()] = nil
	return &crashFile{c: c, f: f, id: f.Name()}, nil
}

func (c *crashFS) Rename(oldpath, newpath string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fail["rename"]; err != nil {
		return err
	}
	if err := os.Rename(oldpath, newpath); err != nil {
		return err
	}
	c.note("rename %s %s", filepath.Base(oldpath), filepath.Base(newpath))
	c.entries[newpath] = c.entries[oldpath]
	delete(c.entries, oldpath)
	return nil
}

func (c *crashFS) Remove(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fail["remove"]; err != nil {
		return err
	}
	if err := os.Remove(name); err != nil {
		return err
	}
	c.note("remove %s", filepath.Base(name))
	delete(c.entries, name)
	return nil
}

func (c *crashFS) SyncDir(dir string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fail["syncdir"]; err != nil {
		return err
	}
	if err := (osFS{}).SyncDir(dir); err != nil {
		return err
	}
	c.note("syncdir %s", dir)
	for p := range c.durable {
		if filepath.Dir(p) == dir {
			delete(c.durable, p)
		}
	}
	for p, f := range c.entries {
		if filepath.Dir(p) == dir {
			c.durable[p] = f
		}
	}
	return nil
}

type crashFile struct {
	c  *crashFS
	f  *os.File
	id string
}

func (f *crashFile) Name() string { return f.f.Name() }

func (f *crashFile) Write(b []byte) (int, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if err := f.c.fail["write"]; err != nil {
		return 0, err
	}
	n, err := f.f.Write(b)
	f.c.note("write %s %d", filepath.Base(f.id), n)
	f.c.data[f.id] = append(f.c.data[f.id], b[:n]...)
	return n, err
}

func (f *crashFile) Chmod(mode os.FileMode) error {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if err := f.c.fail["chmod"]; err != nil {
		return err
	}
	return f.f.Chmod(mode)
}

func (f *crashFile) KeepOwner(fs.FileInfo) {}

func (f *crashFile) Sync() error {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if err := f.c.fail["sync"]; err != nil {
		return err
	}
	if err := f.f.Sync(); err != nil {
		return err
	}
	f.c.note("fsync %s", filepath.Base(f.id))
	f.c.synced[f.id] = append([]byte(nil), f.c.data[f.id]...)
	return nil
}

func (f *crashFile) Close() error {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	err := f.f.Close()
	if ferr := f.c.fail["close"]; ferr != nil {
		return ferr
	}
	if err == nil {
		f.c.note("close %s", filepath.Base(f.id))
	}
	return err
}

// index returns the position of the first call with the given prefix, or -1.
func index(calls []string, prefix string) int {
	for i, c := range calls {
		if strings.HasPrefix(c, prefix) {
			return i
		}
	}
	return -1
}

// TestPutIsDurableBeforeTheDestructiveCall: a record is written to a
// temporary file, that file is fsynced, renamed into place and the
// directory fsynced, all before Put returns, that is before the destructive
// call the record guards; a crash at that call leaves the complete record.
func TestPutIsDurableBeforeTheDestructiveCall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	cfs := newCrashFS()
	j, err := OpenFS(dir, cfs)
	require.NoError(t, err)
	defer j.Close()
	assert.Equal(t, []string{"mkdir " + dir, "syncdir " + filepath.Dir(dir)}, cfs.calls(), "the journal directory itself is made durable")

	require.NoError(t, j.Put("node/w1", rec{"w1", "backed-up"}))
	cfs.mark("delete node w1")

	calls := cfs.calls()[2:]
	tmp := strings.TrimPrefix(calls[0], "create ")
	require.True(t, strings.HasPrefix(tmp, ".node%2Fw1.json.tmp-"), "%v", calls)
	want := []string{
		"create " + tmp,
		fmt.Sprintf("write %s %d", tmp, len(mustRecord(t, rec{"w1", "backed-up"}))),
		"fsync " + tmp,
		"close " + tmp,
		"rename " + tmp + " node%2Fw1.json",
		"syncdir " + dir,
		"DESTRUCTIVE delete node w1",
	}
	assert.Equal(t, want, calls)
	// The same facts as orderings, so a reordering says which rule broke.
	w, s, r, d, x := index(calls, "write "), index(calls, "fsync "), index(calls, "rename "), index(calls, "syncdir "), index(calls, "DESTRUCTIVE")
	assert.True(t, w >= 0 && s > w, "temp file fsynced after it was written: %v", calls)
	assert.True(t, r > s, "renamed only once its data is durable: %v", calls)
	assert.True(t, d > r, "directory fsynced after the rename: %v", calls)
	assert.True(t, x > d, "the destructive call only after the record is durable: %v", calls)

	got, ok := cfs.afterCrash(filepath.Join(dir, "node%2Fw1.json"))
	require.True(t, ok, "a crash at the destructive call keeps the record's entry")
	assert.Equal(t, mustRecord(t, rec{"w1", "backed-up"}), got, "a crash at the destructive call keeps the whole record")

	// Replacing a record: a crash at any point leaves the old or the new one.
	require.NoError(t, j.Put("node/w1", rec{"w1", "deleted"}))
	got, ok = cfs.afterCrash(filepath.Join(dir, "node%2Fw1.json"))
	require.True(t, ok)
	assert.Equal(t, mustRecord(t, rec{"w1", "deleted"}), got)
}

// TestDeleteIsDurable: a record's removal is followed by a directory fsync
// before Delete returns.
func TestDeleteIsDurable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	cfs := newCrashFS()
	j, err := OpenFS(dir, cfs)
	require.NoError(t, err)
	defer j.Close()
	require.NoError(t, j.Put("node/w1", rec{"w1", "done"}))
	n := len(cfs.calls())
	require.NoError(t, j.Delete("node/w1"))
	assert.Equal(t, []string{"remove node%2Fw1.json", "syncdir " + dir}, cfs.calls()[n:])
	_, ok := cfs.afterCrash(filepath.Join(dir, "node%2Fw1.json"))
	assert.False(t, ok)
}

// TestPutFailsWhenTheRecordIsNotDurable: when any step of the durable write
// fails, Put returns an error (so the caller never makes the destructive
// call), the previous record is intact and no temporary file is left.
func TestPutFailsWhenTheRecordIsNotDurable(t *testing.T) {
	for _, call := range []string{"create", "write", "chmod", "sync", "close", "rename", "syncdir"} {
		t.Run(call, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "j")
			cfs := newCrashFS()
			j, err := OpenFS(dir, cfs)
			require.NoError(t, err)
			defer j.Close()
			require.NoError(t, j.Put("node/w1", rec{"w1", "backed-up"}))

			boom := errors.New("injected " + call + " failure")
			cfs.mu.Lock()
			cfs.fail[call] = boom
			cfs.mu.Unlock()
			err = j.Put("node/w1", rec{"w1", "deleted"})
			require.ErrorIs(t, err, boom)
			assert.ErrorContains(t, err, "node%2Fw1.json")
			cfs.mu.Lock()
			delete(cfs.fail, call)
			cfs.mu.Unlock()

			var got rec
			ok, err := j.Get("node/w1", &got)
			require.NoError(t, err)
			require.True(t, ok)
			if call == "syncdir" {
				// The rename happened but is not known to be durable: the
				// caller was told, and either record is whole.
				assert.Contains(t, []rec{{"w1", "backed-up"}, {"w1", "deleted"}}, got)
			} else {
				assert.Equal(t, rec{"w1", "backed-up"}, got, "the previous record is intact")
			}
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			for _, e := range entries {
				assert.NotContains(t, e.Name(), ".tmp-", "temporary file left behind")
			}
		})
	}
}

func TestOpenFailsWhenTheDirectoryIsNotDurable(t *testing.T) {
	cfs := newCrashFS()
	boom := errors.New("injected syncdir failure")
	cfs.fail["syncdir"] = boom
	_, err := OpenFS(filepath.Join(t.TempDir(), "j"), cfs)
	assert.ErrorIs(t, err, boom)
}

func mustRecord(t *testing.T, v rec) []byte {
	t.Helper()
	dir := t.TempDir()
	j, err := Open(dir)
	require.NoError(t, err)
	defer j.Close()
	require.NoError(t, j.Put("x", v))
	b, err := os.ReadFile(filepath.Join(dir, "x.json"))
	require.NoError(t, err)
	return b
}

// TestWriteFileAtomicRefusesANonRegularFile: a directory (or device) at the
// path is never replaced, and nothing is created beside it.
func TestWriteFileAtomicRefusesANonRegularFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "manifests")
	require.NoError(t, os.Mkdir(target, 0o700))
	cfs := newCrashFS()
	err := WriteFileAtomicFS(cfs, target, []byte("x"), 0o600)
	assert.ErrorContains(t, err, "not a regular file")
	assert.Empty(t, cfs.calls(), "nothing written")
	st, err := os.Stat(target)
	require.NoError(t, err)
	assert.True(t, st.IsDir())
}

// TestOSSyncDirFsyncsAndReportsItsError: the operating system's SyncDir
// opens the directory and fsyncs it, and reports either step's failure. A
// test cannot see an fsync reach the disk; on Linux /dev/null opens but
// refuses fsync (EINVAL), which shows the fsync is made and its error kept.
func TestOSSyncDirFsyncsAndReportsItsError(t *testing.T) {
	require.NoError(t, osFS{}.SyncDir(t.TempDir()))
	assert.Error(t, osFS{}.SyncDir(filepath.Join(t.TempDir(), "missing")))
	if runtime.GOOS != "linux" {
		t.Skip("fsync of /dev/null fails with EINVAL on Linux only")
	}
	err := osFS{}.SyncDir(os.DevNull)
	assert.ErrorIs(t, err, syscall.EINVAL, "the fsync was not made, or its error was dropped")
}
