package lease

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
)

// processNamespace identifies this boot of this machine and this process's
// PID namespace: "<boot id>.<pid namespace inode>", a valid label value. Two
// processes with the same value see the same pids.
func processNamespace() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid") // pid:[4026531836]
	if err != nil {
		return ""
	}
	inode := strings.TrimSuffix(strings.TrimPrefix(ns, "pid:["), "]")
	if _, err := strconv.ParseUint(inode, 10, 64); err != nil {
		return ""
	}
	return strings.ReplaceAll(strings.TrimSpace(string(boot)), "-", "") + "." + inode
}

// processGone reports whether no process pid runs in this PID namespace: it
// does not exist, or it is a zombie (killed, not yet reaped).
func processGone(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return false
	}
	state := data[i+2]
	return state == 'Z' || state == 'X'
}
