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
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	want := []byte(strconv.Itoa(pgid))
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
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
		if len(f) < 4 || !bytes.Equal(f[2], want) {
			continue
		}
		if state := f[0][0]; state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
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
