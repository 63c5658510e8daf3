package browser

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Viewport is the size of the browser's window, and so of a screenshot.
const (
	ViewportWidth  = 1280
	ViewportHeight = 800
)

// reap kills the browsers that use a profile under root and removes the
// profiles: they belong to a daemon that did not stop cleanly.
func reap(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "profile-") {
			removeProfile(filepath.Join(root, e.Name()))
		}
	}
}

// removeProfile kills the processes of profile dir and removes it. A
// Chromium child that dies late may still write into the directory while
// it is removed (RemoveAll then fails, the directory not empty): the kill
// and the removal are tried again, a bounded number of times.
func removeProfile(dir string) {
	for try := 0; try < 20; try++ {
		killProfile(dir)
		if err := os.RemoveAll(dir); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killProfile kills the processes started with dir as their profile, until
// none is left: Chromium passes --user-data-dir to each of its children
// (zygote, renderers, network service), which can outlive the main process
// and fork while it dies, so one pass may miss a late child.
func killProfile(dir string) {
	deadline := time.Now().Add(3 * time.Second)
	for quiet := 0; quiet < 3 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if len(ProfileProcesses(dir, true)) == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
}

// ProfileProcesses returns the ids of the processes whose command line
// names dir as their profile (--user-data-dir), killing them when kill.
func ProfileProcesses(dir string, kill bool) []int {
	want := []byte("--user-data-dir=" + dir)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for arg := range bytes.SplitSeq(cmdline, []byte{0}) {
			if bytes.Equal(arg, want) {
				pids = append(pids, pid)
				if kill {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				break
			}
		}
	}
	return pids
}

// errNotFound: no element matches a selector.
var errNotFound = errors.New("no element matches")
