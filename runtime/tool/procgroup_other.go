//go:build !linux

package tool

import "syscall"

// groupAlive reports whether a process of group pgid still exists (zombies
// included, which is the best kill(2) can tell).
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}

// startTime is unknown outside Linux.
func startTime(int) uint64 { return 0 }
