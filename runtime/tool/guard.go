package tool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Guard names the directories no tool may touch, whatever the session's
// workdir: the daemon's home (token, provider keys, database, logs). File
// tools refuse paths inside them, the search tools skip them, and the shell
// sandbox gives commands no access to them. Files inside are also known by
// inode (checked afresh on every call), so a hard link or a bind mount of
// the token elsewhere is refused too.
//
// A nil *Guard protects nothing.
type Guard struct {
	dirs []string // absolute, symlinks resolved
}

// NewGuard returns a guard protecting dirs (made absolute and resolved;
// directories that do not exist yet are kept as written).
func NewGuard(dirs ...string) *Guard {
	g := &Guard{}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			continue
		}
		if r, err := walkSymlinks(filepath.Clean(abs)); err == nil {
			abs = r
		}
		g.dirs = append(g.dirs, abs)
	}
	return g
}

// Dirs returns the protected directories.
func (g *Guard) Dirs() []string {
	if g == nil {
		return nil
	}
	return append([]string(nil), g.dirs...)
}

// ErrProtected: a path is inside the daemon's home (or is one of its files
// under another name).
var ErrProtected = errors.New("path is inside the daemon's home directory")

// ProtectedError is the error for a path a Guard refuses.
type ProtectedError struct {
	Path string // as the caller gave it
	Home string
}

func (e *ProtectedError) Error() string {
	return fmt.Sprintf("%s is the daemon's home directory %s or inside it (or a link to one of its files); "+
		"tools can never read or write it, whatever the workdir", e.Path, e.Home)
}

// Is makes errors.Is(err, ErrProtected) true.
func (e *ProtectedError) Is(target error) bool { return target == ErrProtected }

// fileID identifies a file whatever its name.
type fileID struct{ dev, ino uint64 }

func idOf(fi fs.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || fi == nil {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, true //nolint:unconvert // Dev is int on some platforms
}

// snapshot is the guard's view taken at the start of one call: the inodes
// of the protected directories and of every file in them.
type snapshot struct {
	g   *Guard
	ids map[fileID]string // → the protected dir it belongs to
}

// maxProtectedEntries bounds the inode walk of a home (logs, outputs and
// skills may grow; the secrets sit near the top).
const maxProtectedEntries = 20000

// snapshot records the protected inodes now; files created later in the
// home are still refused by path.
func (g *Guard) snapshot() *snapshot {
	s := &snapshot{g: g, ids: map[fileID]string{}}
	if g == nil {
		return s
	}
	for _, dir := range g.dirs {
		n := 0
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			n++
			if n > maxProtectedEntries {
				return fs.SkipAll
			}
			if fi, err := d.Info(); err == nil {
				if id, ok := idOf(fi); ok {
					s.ids[id] = dir
				}
			}
			return nil
		})
	}
	return s
}

// home returns the protected directory that abs (absolute, resolved) lies
// in, or "".
func (s *snapshot) home(abs string) string {
	if s == nil || s.g == nil {
		return ""
	}
	for _, d := range s.g.dirs {
		if within(d, abs) {
			return d
		}
	}
	return ""
}

// byInode returns the protected directory holding the same file as fi, or "".
func (s *snapshot) byInode(fi fs.FileInfo) string {
	if s == nil || len(s.ids) == 0 || fi == nil {
		return ""
	}
	if id, ok := idOf(fi); ok {
		return s.ids[id]
	}
	return ""
}

// check refuses abs when it is protected by path or, if it exists, by inode.
func (s *snapshot) check(shown, abs string) error {
	if h := s.home(abs); h != "" {
		return &ProtectedError{Path: shown, Home: h}
	}
	if fi, err := os.Stat(abs); err == nil {
		if h := s.byInode(fi); h != "" {
			return &ProtectedError{Path: shown, Home: h}
		}
	}
	return nil
}

// skipNote is what the search tools append when they left the home out.
func skipNote(home string) string {
	return fmt.Sprintf("[skipped the daemon's home directory %s: tools can never read it]", home)
}
