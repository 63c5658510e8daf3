package main

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
)

// processAlive reports whether a process runs with this pid. A zombie (an
// exited process its parent has not reaped yet; a detached daemon's parent
// is init) counts as gone.
func processAlive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) == syscall.ESRCH {
		return false
	}
	// /proc/PID/stat is "pid (comm) state …"; comm may hold spaces and
	// parentheses, so the state follows the last ")".
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no procfs: trust kill
	}
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}
