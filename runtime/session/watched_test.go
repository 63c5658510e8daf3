package session

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/trellis-run/trellis/runtime/workspace"
)

// inotifyFDs counts the process's inotify descriptors.
func inotifyFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && target == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// TestWatchedWorkdirsBounded: past maxWatchedWorkdirs sessions, the least
// recently recorded workdir stops being watched (its descriptor closed),
// and closeAll closes the rest.
func TestWatchedWorkdirsBounded(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no inotify here")
	}
	ctx := context.Background()
	before := inotifyFDs(t)
	var ws watchedWorkdirs
	watches := make([]*workspace.Watch, maxWatchedWorkdirs+8)
	for i := range watches {
		watches[i] = workspace.NewWatch()
		ws.use(watches[i])
		if _, err := workspace.Snapshot(ctx, t.TempDir(), workspace.Options{Watch: watches[i]}); err != nil {
			t.Fatal(err)
		}
	}
	if got := inotifyFDs(t) - before; got != maxWatchedWorkdirs {
		t.Fatalf("%d workdirs recorded: %d watched, want %d", len(watches), got, maxWatchedWorkdirs)
	}
	ws.closeAll()
	if got := inotifyFDs(t) - before; got != 0 {
		t.Fatalf("after closeAll: %d watched, want 0", got)
	}
}
