package dataplane

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/cidrshift/cidrshift/e2e/harness"
)

// Proc is a process started inside a node namespace with `ip netns exec`.
type Proc struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	// offset is where this run's output starts in the (appended) log.
	offset int64
}

// startInNS starts bin with args inside the named namespace, output to
// logPath, in its own process group, killed if the test binary dies.
func startInNS(ns, name, logPath string, env []string, bin string, args ...string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	var offset int64
	if st, err := f.Stat(); err == nil {
		offset = st.Size()
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := harness.StartProcess(cmd); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{}), offset: offset}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *Proc) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Log returns the process's output so far.
func (p *Proc) Log() string {
	data, _ := os.ReadFile(p.LogPath)
	return string(data)
}

// RunLog returns this run's output (the log file is shared by restarts).
func (p *Proc) RunLog() string {
	data, _ := os.ReadFile(p.LogPath)
	if int64(len(data)) < p.offset {
		return ""
	}
	return string(data[p.offset:])
}

// runIn runs a command inside the named namespace and returns its combined
// output.
func runIn(ns string, name string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), ns, err, strings.TrimSpace(string(out)))
		}
		return string(out), err
	}
	return string(out), nil
}
