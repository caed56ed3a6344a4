package dataplane

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/cidrshift/cidrshift/e2e/harness"
)

// netnsDir is where `ip netns` (and netns.NewNamed) bind-mount named
// namespaces.
const netnsDir = "/run/netns"

// inNS runs fn on an OS thread switched into the named namespace. Sockets
// created by fn (listeners, dials) stay in that namespace for their whole
// life. If the thread cannot be switched back it stays locked, so Go
// retires it instead of reusing it in the wrong namespace.
func inNS(name string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open netns %s: %w", name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", name, err)
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: it dies with this goroutine.
		return fmt.Errorf("return from netns %s: %w (and %v)", name, err, fnErr)
	}
	runtime.UnlockOSThread()
	return fnErr
}

// newNamedNS creates a named network namespace with loopback up, without
// leaving the calling thread in it.
func newNamedNS(name string) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		_ = netns.Set(orig)
		return fmt.Errorf("create netns %s: %w", name, err)
	}
	defer h.Close()
	if err := netns.Set(orig); err != nil {
		panic(fmt.Sprintf("cannot return to the original netns: %v", err)) // thread state unknown
	}
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return err
	}
	defer nh.Close()
	lo, err := nh.LinkByName("lo")
	if err != nil {
		return err
	}
	return nh.LinkSetUp(lo)
}

// handleAt returns a netlink handle working inside the named namespace.
func handleAt(name string) (*netlink.Handle, error) {
	h, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	defer h.Close()
	return netlink.NewHandleAt(h)
}

// nsInode returns the inode of a named namespace's bind mount, which is the
// namespace's identity (as in /proc/PID/ns/net).
func nsInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// killProcessesIn SIGKILLs every process whose network namespace is the one
// bind-mounted at path; a namespace is only freed once no process uses it.
func killProcessesIn(path string) int {
	ino, err := nsInode(path)
	if err != nil {
		return 0
	}
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) != nil || st.Ino != ino {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// deleteNamedNS kills the processes in a named namespace and removes it.
func deleteNamedNS(name string) error {
	path := filepath.Join(netnsDir, name)
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return nil
	}
	killProcessesIn(path)
	if err := netns.DeleteNamed(name); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("delete netns %s: %w", name, err)
	}
	return nil
}

// prefixPattern matches the names this package gives: "cs" + the pid of
// the test process in base 36 + "-".
var prefixPattern = regexp.MustCompile(`^cs([0-9a-z]+)-`)

// runPrefix returns the name prefix of this process's run number seq.
func runPrefix(seq int) string {
	return fmt.Sprintf("cs%s-%d-", strconv.FormatInt(int64(os.Getpid()), 36), seq)
}

// pidAlive reports whether a process with this pid exists.
func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}

// SweepDead removes the namespaces (and the processes in them), run
// directories under os.TempDir() and root-namespace links left by test
// processes that died before their teardown (their pid, encoded in the
// prefix, is gone). It returns what it removed.
func SweepDead() ([]string, error) {
	var removed []string
	ents, err := os.ReadDir(netnsDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var errs []string
	for _, e := range ents {
		if dead(e.Name()) {
			if err := deleteNamedNS(e.Name()); err != nil {
				errs = append(errs, err.Error())
				continue
			}
			removed = append(removed, "netns "+e.Name())
		}
	}
	tmp := os.TempDir()
	files, _ := os.ReadDir(tmp)
	for _, f := range files {
		if f.IsDir() && dead(f.Name()) {
			if err := os.RemoveAll(filepath.Join(tmp, f.Name())); err != nil {
				errs = append(errs, err.Error())
				continue
			}
			removed = append(removed, "dir "+filepath.Join(tmp, f.Name()))
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		return removed, err
	}
	for _, l := range links {
		if name := l.Attrs().Name; dead(name) {
			if err := netlink.LinkDel(l); err != nil {
				errs = append(errs, err.Error())
				continue
			}
			removed = append(removed, "link "+name)
		}
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("sweep: %s", strings.Join(errs, "; "))
	}
	return removed, nil
}

func dead(name string) bool {
	m := prefixPattern.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	pid, err := strconv.ParseInt(m[1], 36, 64)
	if err != nil || pid <= 0 || pid > 1<<22 {
		return false
	}
	return !pidAlive(int(pid))
}

// rootLinks lists root-namespace links whose name starts with prefix, and
// every link holding a non-loopback address in the root namespace that
// this run could have added (none should exist: the run never adds one).
func rootLinks(prefix string) ([]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, prefix) {
			out = append(out, l.Attrs().Name)
		}
	}
	return out, nil
}

// leftovers lists named namespaces, root-namespace links and (unless
// E2E_KEEP_DIR is set) directories under os.TempDir() whose name starts
// with prefix.
func leftovers(prefix string) []string {
	var out []string
	ents, _ := os.ReadDir(netnsDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, "netns "+e.Name())
		}
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, prefix) {
			out = append(out, "link "+l.Attrs().Name)
		}
	}
	if os.Getenv(harness.KeepDirEnv) == "" {
		files, _ := os.ReadDir(os.TempDir())
		for _, f := range files {
			if strings.HasPrefix(f.Name(), prefix) {
				out = append(out, "dir "+filepath.Join(os.TempDir(), f.Name()))
			}
		}
	}
	return out
}
