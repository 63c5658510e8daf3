//go:build linux

package dirwatch

import (
	"fmt"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watcher follows directories with one inotify descriptor, opened
// non-blocking. It is not safe for concurrent use.
type Watcher struct {
	fd   int
	ops  Op
	mask uint32
	dirs map[int32]string // watch descriptor → directory
	wds  map[string]int32 // directory → watch descriptor
	buf  []byte
}

// New returns a watcher reporting the changes of ops (Created and
// Removed always come together; Moved is reported whenever asked for).
func New(ops Op) (*Watcher, error) {
	mask := uint32(unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW)
	if ops&(Created|Removed) != 0 {
		mask |= unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE | unix.IN_DELETE_SELF
	}
	if ops&Written != 0 {
		// IN_CLOSE_WRITE: a file written through a mapping (a linker's
		// output) reports no IN_MODIFY, but its close does.
		mask |= unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE
	}
	if ops&Moved != 0 {
		mask |= unix.IN_MOVE_SELF
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("dirwatch: %w", err)
	}
	return &Watcher{fd: fd, ops: ops, mask: mask, dirs: map[int32]string{}, wds: map[string]int32{}}, nil
}

// Add starts watching dir (again: a directory made anew under the same
// name gets a watch of its own). A dir that does not exist or is not a
// directory fails with an error wrapping unix.ENOENT or unix.ENOTDIR;
// running out of watches with unix.ENOSPC.
func (w *Watcher) Add(dir string) error {
	if w.fd < 0 {
		return fmt.Errorf("dirwatch: watch %s: closed", dir)
	}
	wd, err := unix.InotifyAddWatch(w.fd, dir, w.mask)
	if err != nil {
		return fmt.Errorf("dirwatch: watch %s: %w", dir, err)
	}
	if old, ok := w.dirs[int32(wd)]; ok && old != dir && w.wds[old] == int32(wd) {
		delete(w.wds, old) // the same directory under a new name (moved)
	}
	w.dirs[int32(wd)] = dir
	w.wds[dir] = int32(wd)
	return nil
}

// Watching reports whether dir has a watch that the kernel has not ended
// (as of the last Drain).
func (w *Watcher) Watching(dir string) bool {
	_, ok := w.wds[dir]
	return ok && w.fd >= 0
}

// Drain hands fn every change queued since the last Drain, in order, and
// returns without waiting. overflow true means the kernel's queue
// overflowed: changes were lost.
func (w *Watcher) Drain(fn func(Event)) (overflow bool) {
	if w.fd < 0 {
		return false
	}
	if w.buf == nil {
		w.buf = make([]byte, 64<<10)
	}
	for {
		n, err := unix.Read(w.fd, w.buf)
		if err != nil || n <= 0 {
			return overflow // EAGAIN: nothing more queued
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			name := cString(w.buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)])
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				overflow = true
				continue
			}
			dir, ok := w.dirs[ev.Wd]
			if !ok {
				continue
			}
			if ev.Mask&unix.IN_IGNORED != 0 { // the watch ended (deleted, unmounted)
				delete(w.dirs, ev.Wd)
				if w.wds[dir] == ev.Wd {
					delete(w.wds, dir)
				}
				continue
			}
			isDir := ev.Mask&unix.IN_ISDIR != 0
			if name == "" { // about the directory itself
				switch {
				case ev.Mask&unix.IN_MOVE_SELF != 0 && w.ops&Moved != 0:
					fn(Event{Path: dir, Op: Moved, Dir: true})
				case ev.Mask&unix.IN_ATTRIB != 0 && w.ops&Written != 0:
					fn(Event{Path: dir, Op: Written, Dir: true})
				} // deleted: its parent reports it
				continue
			}
			path := filepath.Join(dir, name)
			switch {
			case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
				fn(Event{Path: path, Op: Created, Dir: isDir})
			case ev.Mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
				fn(Event{Path: path, Op: Removed, Dir: isDir})
			case ev.Mask&(unix.IN_MODIFY|unix.IN_ATTRIB|unix.IN_CLOSE_WRITE) != 0:
				fn(Event{Path: path, Op: Written, Dir: isDir})
			}
		}
	}
}

// Close ends every watch; later calls do nothing.
func (w *Watcher) Close() error {
	if w.fd < 0 {
		return nil
	}
	err := unix.Close(w.fd)
	w.fd = -1
	return err
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
