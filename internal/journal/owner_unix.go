//go:build unix

package journal

import (
	"io/fs"
	"os"
	"syscall"
)

// keepOwner gives f the owner and group of the file described by st, when
// the process may (as root, writing /etc/kubernetes/manifests); otherwise it
// leaves the new file's owner as created.
func keepOwner(f *os.File, st fs.FileInfo) {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		_ = f.Chown(int(s.Uid), int(s.Gid))
	}
}
