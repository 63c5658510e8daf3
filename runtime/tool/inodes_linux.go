//go:build linux

package tool

import (
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inotifyWatcher follows directories with inotify. Its descriptor is
// non-blocking: drain reads what the kernel queued and returns.
type inotifyWatcher struct {
	fd   int
	dirs map[int32]string // watch descriptor → directory
	wds  map[string]int32
}

const inotifyMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
	unix.IN_DELETE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

func newWatcher() watcher {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	return &inotifyWatcher{fd: fd, dirs: map[int32]string{}, wds: map[string]int32{}}
}

func (w *inotifyWatcher) watch(dir string) bool {
	if _, ok := w.wds[dir]; ok || w.fd < 0 {
		return w.fd >= 0
	}
	wd, err := unix.InotifyAddWatch(w.fd, dir, inotifyMask)
	if err != nil {
		// Gone meanwhile (its removal is reported) is fine; out of
		// watches (ENOSPC) or memory is not.
		return err == unix.ENOENT || err == unix.ENOTDIR || err == unix.EACCES
	}
	if old, ok := w.dirs[int32(wd)]; ok && old != dir {
		delete(w.wds, old) // the same directory under a new name (moved)
	}
	w.dirs[int32(wd)] = dir
	w.wds[dir] = int32(wd)
	return true
}

func (w *inotifyWatcher) drain(created, removed func(string)) bool {
	if w.fd < 0 {
		return false
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if err != nil || n <= 0 {
			return false // EAGAIN: nothing more queued
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				return true
			}
			dir, ok := w.dirs[ev.Wd]
			if !ok {
				continue
			}
			if ev.Mask&unix.IN_IGNORED != 0 {
				delete(w.dirs, ev.Wd)
				if w.wds[dir] == ev.Wd {
					delete(w.wds, dir)
				}
				continue
			}
			name := cString(nameBytes)
			if name == "" {
				continue // about the directory itself (deleted): its parent reports it
			}
			path := filepath.Join(dir, name)
			switch {
			case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
				created(path)
			case ev.Mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
				removed(path)
			}
		}
	}
}

// close closes the descriptor once (the index closes a watcher it drops,
// and its cleanup closes the last one).
func (w *inotifyWatcher) close() {
	if w.fd >= 0 {
		_ = unix.Close(w.fd)
		w.fd = -1
	}
}

// cString returns b up to its first NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
