package journal

import (
	"io/fs"
	"os"
)

// FS is the seam for the file-system calls a journal makes: the durable
// write (create the temporary file, write, fsync, close, rename, fsync the
// directory), the removal of a record and the reads. Open uses the
// operating system's; a test passes its own to OpenFS or WriteFileAtomicFS
// to see the order of the calls, to prove a record is durable before the
// destructive call it guards, or to make one of the calls fail. The lock
// file is always taken through the operating system.
type FS interface {
	// MkdirAll is os.MkdirAll.
	MkdirAll(path string, perm os.FileMode) error
	// Stat is os.Stat.
	Stat(name string) (fs.FileInfo, error)
	// CreateTemp is os.CreateTemp.
	CreateTemp(dir, pattern string) (File, error)
	// Rename is os.Rename.
	Rename(oldpath, newpath string) error
	// Remove is os.Remove.
	Remove(name string) error
	// SyncDir fsyncs the directory dir, which makes the creation, rename
	// or removal of its entries durable.
	SyncDir(dir string) error
	// ReadFile is os.ReadFile.
	ReadFile(name string) ([]byte, error)
	// ReadDir is os.ReadDir.
	ReadDir(name string) ([]os.DirEntry, error)
}

// File is the open temporary file of a durable write.
type File interface {
	// Name is the file's path.
	Name() string
	// Write writes data.
	Write(data []byte) (int, error)
	// Chmod sets the file's mode.
	Chmod(mode os.FileMode) error
	// KeepOwner gives the file the owner and group of the file described
	// by st, where the process may; it never fails.
	KeepOwner(st fs.FileInfo)
	// Sync fsyncs the file's data.
	Sync() error
	// Close closes the file.
	Close() error
}

// osFS is the operating system's FS.
type osFS struct{}

func (osFS) MkdirAll(path string, perm os.FileMode) error { return os.MkdirAll(path, perm) }
func (osFS) Stat(name string) (fs.FileInfo, error)        { return os.Stat(name) }
func (osFS) Rename(oldpath, newpath string) error         { return os.Rename(oldpath, newpath) }
func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) ReadFile(name string) ([]byte, error)         { return os.ReadFile(name) }
func (osFS) ReadDir(name string) ([]os.DirEntry, error)   { return os.ReadDir(name) }

func (osFS) CreateTemp(dir, pattern string) (File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

type osFile struct{ *os.File }

func (f osFile) KeepOwner(st fs.FileInfo) { keepOwner(f.File, st) }
