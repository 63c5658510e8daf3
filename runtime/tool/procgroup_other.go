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

// groupMembers cannot list a group outside Linux.
func groupMembers(int) []int { return nil }

// pidNamespace: commands run in no PID namespace of their own outside Linux.
func pidNamespace(int) string { return "" }

// nsMembers: see pidNamespace.
func nsMembers(string, int) []int { return nil }
