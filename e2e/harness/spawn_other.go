//go:build unix && !linux

package harness

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts the child in its own process group. Outside Linux there
// is no parent-death signal: children of a killed test binary may linger.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// spawn starts cmd.
func spawn(cmd *exec.Cmd) error { return cmd.Start() }
