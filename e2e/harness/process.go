package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Status describes the process of a component.
type Status struct {
	// Running is true while the process is alive.
	Running bool
	// PID is the process id of the current or last process (0 if never
	// started).
	PID int
	// Starts counts how often the component has been started.
	Starts int
	// Exited is true once the last process has ended.
	Exited bool
	// ExitCode is the exit status of the last process, or -1 if it was
	// ended by a signal or is still running.
	ExitCode int
	// Signal is the signal that ended the last process, if any.
	Signal syscall.Signal
	// Uptime is how long the last process ran (or has run so far).
	Uptime time.Duration
}

// String renders the status for messages, e.g. "exited with status 1".
func (s Status) String() string {
	switch {
	case !s.Running && !s.Exited:
		return "never started"
	case s.Running:
		return fmt.Sprintf("running (pid %d)", s.PID)
	case s.Signal != 0:
		return fmt.Sprintf("killed by signal %v after %s", s.Signal, s.Uptime.Round(time.Millisecond))
	default:
		return fmt.Sprintf("exited with status %d after %s", s.ExitCode, s.Uptime.Round(time.Millisecond))
	}
}

// ExitError reports that a component's process ended while the harness
// expected it to run, e.g. while waiting for it to become healthy.
type ExitError struct {
	// Component is the component whose process ended.
	Component Component
	// Status is the final status of the process.
	Status Status
	// LogTail holds the last lines the process logged.
	LogTail string
}

// Error implements error.
func (e *ExitError) Error() string {
	return fmt.Sprintf("%s %s; last log lines:\n%s", e.Component, e.Status, e.LogTail)
}

// ErrNotRunning is returned when an operation needs a running component.
var ErrNotRunning = errors.New("component is not running")

// process is one run of a component's program.
type process struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed when Wait returns
	ended   time.Time
	state   *os.ProcessState
	waitErr error
}

// startProcess starts path with args and env, output appended to logFile,
// in a new process group that the kernel kills if the harness dies.
func startProcess(path string, args, env []string, logFile *os.File) (*process, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	p := &process{cmd: cmd, started: time.Now(), done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.ended = time.Now()
		p.state = cmd.ProcessState
		p.waitErr = err
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// status describes the process; starts is filled in by the caller.
func (p *process) status() Status {
	s := Status{PID: p.cmd.Process.Pid, ExitCode: -1}
	if !p.exited() {
		s.Running = true
		s.Uptime = time.Since(p.started)
		return s
	}
	s.Exited = true
	s.Uptime = p.ended.Sub(p.started)
	if p.state != nil {
		s.ExitCode = p.state.ExitCode()
		if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			s.Signal = ws.Signal()
		}
	}
	return s
}

// signal sends sig to the whole process group.
func (p *process) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		// Fall back to the process alone (e.g. group already gone).
		if err2 := p.cmd.Process.Signal(sig); err2 != nil && !errors.Is(err2, os.ErrProcessDone) {
			return fmt.Errorf("signal %v to pid %d: %w", sig, pid, err)
		}
	}
	return nil
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs the process group
// and waits for the process to be reaped.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	if grace > 0 {
		if err := p.signal(syscall.SIGTERM); err != nil {
			return err
		}
		select {
		case <-p.done:
			// Leftover children of the group, if any, go too.
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			return nil
		case <-time.After(grace):
		}
	}
	return p.kill()
}

// kill SIGKILLs the process group and waits for the process to be reaped.
func (p *process) kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("pid %d did not exit 30s after SIGKILL", p.cmd.Process.Pid)
	}
}

// tailLines returns the last n lines of s.
func tailLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	idx := len(s)
	for i := 0; i < n; i++ {
		j := strings.LastIndexByte(s[:idx], '\n')
		if j < 0 {
			return s
		}
		idx = j
	}
	return s[idx+1:]
}

// StartProcess starts cmd the way the harness starts its components: on Linux from
// one OS thread that never exits, so a Pdeathsig set in cmd.SysProcAttr
// fires only when the test binary dies. Packages that start processes of
// their own (the data plane) use it too.
func StartProcess(cmd *exec.Cmd) error { return spawn(cmd) }
