//go:build linux

package tool

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// groupAlive reports whether a process of group pgid is still running.
// Killed members can linger as zombies until their new parent (init, once
// the group leader is gone) reaps them, and kill(-pgid, 0) still finds
// those; so when it does, /proc tells whether any member is more than a
// zombie.
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return true // no /proc: kill(2) is all we know
	}
	return len(groupMembers(pgid)) > 0
}

// groupMembers returns the running (not zombie) processes of group pgid.
func groupMembers(pgid int) []int {
	var out []int
	eachProc(func(pid, pgrp int, state byte) {
		if pgrp == pgid && state != 'Z' && state != 'X' {
			out = append(out, pid)
		}
	})
	return out
}

// pidNamespace names the PID namespace of process pid ("pid:[inode]"), ""
// when the process is gone (or already a zombie) or /proc cannot say.
func pidNamespace(pid int) string {
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	if err != nil {
		return ""
	}
	return ns
}

// nsMembers returns the running (not zombie) processes of PID namespace
// ns other than except (its init), setsid ones included.
func nsMembers(ns string, except int) []int {
	var out []int
	eachProc(func(pid, _ int, state byte) {
		if pid != except && state != 'Z' && state != 'X' && pidNamespace(pid) == ns {
			out = append(out, pid)
		}
	})
	return out
}

// eachProc calls fn with the pid, process group and state of every process
// /proc lists.
func eachProc(fn func(pid, pgrp int, state byte)) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid pgrp ...": comm may hold spaces and ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 3 || len(f[0]) == 0 {
			continue
		}
		pgrp, err := strconv.Atoi(string(f[2]))
		if err != nil {
			continue
		}
		fn(pid, pgrp, f[0][0])
	}
}

// startTime returns the start time (clock ticks since boot) of process
// pid, or 0 when it does not run.
func startTime(pid int) uint64 {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := bytes.Fields(stat[i+1:])
	// After "(comm)": state is field 3 of stat(5), starttime field 22.
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(string(f[19]), 10, 64)
	return n
}
