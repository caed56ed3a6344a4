// Package journal is the crash-safe on-disk record that every cidrshift Apply
// writes before a destructive call. Each record is one JSON file, written to a
// temporary file, fsynced, renamed into place and made durable by an fsync of
// the directory, so a process killed at any instant leaves either the old or
// the new record, never a torn one. A lock file keeps two runs from sharing a
// journal.
//
// OpenCluster adds a second copy of every record in ConfigMaps of the cluster
// (see cluster.go for what is kept, the size limits and retention), written
// after the local record and before the call returns, so a run whose machine
// is lost is resumed from any machine with the kubeconfig: packages call one
// Journal and get both.
package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// ErrLocked means another process holds the journal.
var ErrLocked = errors.New("journal is locked by another run")

const ext = ".json"

// Journal is a directory of records keyed by strings such as "node/worker-1",
// optionally copied to the cluster (OpenCluster).
type Journal struct {
	dir     string
	lock    *os.File
	fs      FS
	cluster *cluster
}

// Open creates dir if needed and takes an exclusive lock on it. Close releases it.
func Open(dir string) (*Journal, error) { return OpenFS(dir, nil) }

// OpenFS is Open with the file-system calls made through fsys (nil means the
// operating system's).
func OpenFS(dir string, fsys FS) (*Journal, error) {
	if fsys == nil {
		fsys = osFS{}
	}
	if dir == "" {
		return nil, fmt.Errorf("journal directory: empty path")
	}
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating journal directory %s: %w", dir, err)
	}
	if err := syncDir(fsys, filepath.Dir(filepath.Clean(dir))); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening journal lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrLocked, dir, err)
	}
	return &Journal{dir: dir, lock: f, fs: fsys}, nil
}

// Dir returns the journal's directory.
func (j *Journal) Dir() string { return j.dir }

// Close releases the lock.
func (j *Journal) Close() error {
	if j == nil || j.lock == nil {
		return nil
	}
	err := j.lock.Close()
	j.lock = nil
	return err
}

func (j *Journal) path(key string) string {
	return filepath.Join(j.dir, url.PathEscape(key)+ext)
}

// Put is PutContext without a deadline.
func (j *Journal) Put(key string, v any) error { return j.PutContext(context.Background(), key, v) }

// PutContext durably stores v (as JSON) under key, replacing any previous
// record: in the directory, then in the cluster copy if there is one. When
// it returns nil the record survives a crash of the process or machine (and,
// with a cluster copy, the loss of the machine).
func (j *Journal) PutContext(ctx context.Context, key string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding journal record %q: %w", key, err)
	}
	if err := WriteFileAtomicFS(j.fs, j.path(key), append(data, '\n'), 0o600); err != nil {
		return err
	}
	if j.cluster == nil {
		return nil
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		return fmt.Errorf("encoding journal record %q: %w", key, err)
	}
	return j.cluster.put(ctx, j, key, compact.Bytes())
}

// Get loads the record under key into v and reports whether it exists.
func (j *Journal) Get(key string, v any) (bool, error) {
	data, err := j.fs.ReadFile(j.path(key))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading journal record %q: %w", key, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("decoding journal record %q in %s: %w", key, j.dir, err)
	}
	return true, nil
}

// Delete is DeleteContext without a deadline.
func (j *Journal) Delete(key string) error { return j.DeleteContext(context.Background(), key) }

// DeleteContext removes the record under key, from the cluster copy first
// (a crash in between leaves it only in the directory, which a directory
// following the cluster's run then drops); a missing record is not an error.
func (j *Journal) DeleteContext(ctx context.Context, key string) error {
	if j.cluster != nil {
		if err := j.cluster.remove(ctx, key); err != nil {
			return err
		}
	}
	if err := j.fs.Remove(j.path(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deleting journal record %q: %w", key, err)
	}
	return syncDir(j.fs, j.dir)
}

// Keys returns the keys of all records with the given prefix, sorted.
func (j *Journal) Keys(prefix string) ([]string, error) {
	entries, err := j.fs.ReadDir(j.dir)
	if err != nil {
		return nil, fmt.Errorf("listing journal %s: %w", j.dir, err)
	}
	var keys []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ext) || strings.HasPrefix(name, ".") {
			continue
		}
		key, err := url.PathUnescape(strings.TrimSuffix(name, ext))
		if err != nil || !strings.HasPrefix(key, prefix) {
			continue
		}
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys, nil
}

// WriteFileAtomic writes data to path so that a reader (or a crash) sees
// either the old file or the complete new one, never a partial one: a hidden
// temporary file in the same directory (the kubelet ignores dot files in its
// manifest directory) is written, given the mode and, where permitted, the
// owner of the file it replaces (mode for a new file), synced and renamed
// over path, and the directory is synced so the rename survives a crash.
// path must be a regular file or not exist.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	return WriteFileAtomicFS(nil, path, data, mode)
}

// WriteFileAtomicFS is WriteFileAtomic with the file-system calls made
// through fsys (nil means the operating system's).
func WriteFileAtomicFS(fsys FS, path string, data []byte, mode os.FileMode) (err error) {
	if fsys == nil {
		fsys = osFS{}
	}
	st, err := fsys.Stat(path)
	switch {
	case err == nil:
		if !st.Mode().IsRegular() {
			return fmt.Errorf("writing %s: not a regular file", path)
		}
		mode = st.Mode().Perm()
	case errors.Is(err, os.ErrNotExist):
		st = nil
	default:
		return fmt.Errorf("writing %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	tmp, err := fsys.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = fsys.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = tmp.Chmod(mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if st != nil {
		tmp.KeepOwner(st)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = fsys.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	if err = syncDir(fsys, dir); err != nil {
		return fmt.Errorf("making the rename of %s durable: %w", path, err)
	}
	return nil
}

func syncDir(fsys FS, dir string) error {
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}
