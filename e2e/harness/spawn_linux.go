//go:build linux

package harness

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// sysProcAttr puts the child in its own process group (so it and anything
// it forks can be signalled together) and asks the kernel to SIGKILL it
// when its parent thread dies, so components never outlive a crashed or
// killed test binary.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

type spawnRequest struct {
	cmd  *exec.Cmd
	errc chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnRequest
)

// spawn starts cmd from one goroutine locked to its OS thread for the life
// of the process. Pdeathsig fires when the thread that forked the child
// exits, not the process, and Go may retire threads; a thread that never
// exits makes Pdeathsig mean "when the test binary dies".
func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread()
			// Never unlocked: the thread must outlive every child.
			for req := range spawnCh {
				req.errc <- req.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnCh <- spawnRequest{cmd: cmd, errc: errc}
	return <-errc
}
