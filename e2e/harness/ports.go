package harness

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// healthPorts names the port a component's health endpoint is served on.
var healthPorts = map[Component]string{
	Etcd:              "client",
	APIServer:         "secure",
	ControllerManager: "secure",
	Scheduler:         "secure",
	Kwok:              "server",
}

// listens reports whether process pid holds a TCP socket listening on port.
// A health endpoint that answers is not proof enough: between freePort and
// the component's bind, another process (a parallel test's control plane)
// may take the port and answer the health check in its place, while the
// component dies with "address already in use".
func listens(pid, port int) (bool, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "net", table))
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return false, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 32); ok && err == nil && int(p) == port {
				inodes[fields[9]] = true
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return false, err
		}
	}
	if len(inodes) == 0 {
		return false, nil
	}
	fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(fdDir)
	if os.IsNotExist(err) {
		// The process ended after its namespace's table was read (which
		// lists every socket of the namespace, the other process's too).
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if ino, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(ino, "]")] {
			return true, nil
		}
	}
	return false, nil
}

// checkOwnPort returns an error when the component's health port is not
// held by its own process.
func (c *Cluster) checkOwnPort(name Component, proc *process) error {
	c.mu.Lock()
	port := c.comps[name].ports[healthPorts[name]]
	c.mu.Unlock()
	ok, err := listens(proc.cmd.Process.Pid, port)
	if proc.exited() {
		// It ended while the port answered: another process holds it.
		return fmt.Errorf("port %d answers, but %s (pid %d) has exited: another process took it", port, name, proc.cmd.Process.Pid)
	}
	if err != nil || ok {
		// Unreadable /proc: trust the health check as before.
		return nil
	}
	return fmt.Errorf("port %d answers, but %s (pid %d) does not listen on it: another process took it", port, name, proc.cmd.Process.Pid)
}
