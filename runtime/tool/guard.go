package tool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Guard names what no tool may touch, whatever the session's workdir: the
// daemon's home (token, provider keys, database, logs), the secret files
// it reads from elsewhere (a shared token file, the secrets key, the
// database's password files) and the homes of the user's other daemons.
// File tools refuse paths inside them, the search tools skip them, and the
// shell sandbox gives commands no access to them. The files inside are
// also known by inode, so a hard link or a bind mount of the token
// elsewhere is refused too: see inodeIndex.
//
// A nil *Guard protects nothing.
type Guard struct {
	paths  []protected
	others func() []string // other daemons' homes, asked at each call
	index  *inodeIndex
}

// protected is one path a Guard refuses, with how messages name it.
type protected struct {
	path string // absolute, symlinks resolved
	what string // "the daemon's home directory", …
}

// Kinds of protected paths, as messages name them.
const (
	whatHome      = "the daemon's home directory"
	whatOtherHome = "the home directory of another Trellis daemon"
)

// NewGuard returns a guard protecting dirs, the daemon's home (made
// absolute and resolved; directories that do not exist yet are kept as
// written).
func NewGuard(dirs ...string) *Guard {
	g := &Guard{index: newInodeIndex()}
	return g.Protect(whatHome, dirs...)
}

// Protect adds paths (files or directories) to what g refuses; what names
// them in messages ("the daemon's token file"). It returns g, and must be
// called before g is used.
func (g *Guard) Protect(what string, paths ...string) *Guard {
	for _, p := range paths {
		if abs := cleanAbs(p); abs != "" {
			g.paths = append(g.paths, protected{path: abs, what: what})
		}
	}
	return g
}

// ProtectOthers makes g also refuse the paths others returns when a call
// starts (the homes of daemons started later). It returns g, and must be
// called before g is used.
func (g *Guard) ProtectOthers(others func() []string) *Guard {
	g.others = others
	return g
}

// cleanAbs returns p absolute with its symlinks resolved, "" for an empty p.
func cleanAbs(p string) string {
	if p == "" {
		return ""
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return ""
	}
	if r, err := walkSymlinks(filepath.Clean(abs)); err == nil {
		abs = r
	}
	return abs
}

// list returns every protected path now.
func (g *Guard) list() []protected {
	if g == nil {
		return nil
	}
	out := append([]protected(nil), g.paths...)
	if g.others != nil {
		for _, p := range g.others() {
			if abs := cleanAbs(p); abs != "" {
				out = append(out, protected{path: abs, what: whatOtherHome})
			}
		}
	}
	return out
}

// Dirs returns the protected paths (directories and files) now.
func (g *Guard) Dirs() []string {
	var out []string
	for _, p := range g.list() {
		out = append(out, p.path)
	}
	return out
}

// ErrProtected: a path is inside the daemon's home (or is one of its files
// under another name), or another protected path.
var ErrProtected = errors.New("path is inside the daemon's home directory")

// ProtectedError is the error for a path a Guard refuses.
type ProtectedError struct {
	Path string // as the caller gave it
	Home string // the protected path it is or lies in
	What string // what that is ("the daemon's home directory", …)
}

func (e *ProtectedError) Error() string {
	what := e.What
	if what == "" {
		what = whatHome
	}
	return fmt.Sprintf("%s is %s %s or inside it (or a link to one of its files); "+
		"tools can never read or write it, whatever the workdir", e.Path, what, e.Home)
}

// Is makes errors.Is(err, ErrProtected) true.
func (e *ProtectedError) Is(target error) bool { return target == ErrProtected }

// fileID identifies a file whatever its name.
type fileID struct{ dev, ino uint64 }

func idOf(fi fs.FileInfo) (fileID, bool) {
	if fi == nil {
		return fileID{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, true //nolint:unconvert // Dev is int on some platforms
}

// linksOf returns fi's hard link count (1 when unknown).
func linksOf(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink) //nolint:unconvert // Nlink is uint16 on some platforms
	}
	return 1
}

// snapshot is the guard's view for one call: the protected paths, and the
// inode index brought up to date when the call started.
type snapshot struct {
	g     *Guard
	paths []protected
	// resynced is set once this call brought the index up to date again
	// for a hard-linked file it did not know (at most once per call).
	resynced bool
}

// snapshot lists the protected paths and brings their inode index up to
// date (cheap: the index follows the protected directories as they
// change; see inodeIndex).
func (g *Guard) snapshot() *snapshot {
	s := &snapshot{g: g}
	if g == nil {
		return s
	}
	s.paths = g.list()
	if g.index != nil {
		g.index.sync(s.paths, false)
	}
	return s
}

// home returns the protected path that abs (absolute, resolved) is or
// lies in, or "".
func (s *snapshot) home(abs string) string {
	if p, ok := s.find(abs); ok {
		return p.path
	}
	return ""
}

func (s *snapshot) find(abs string) (protected, bool) {
	if s == nil {
		return protected{}, false
	}
	for _, p := range s.paths {
		if within(p.path, abs) {
			return p, true
		}
	}
	return protected{}, false
}

// byInode returns the protected path holding the same file as fi, or "".
func (s *snapshot) byInode(fi fs.FileInfo) string {
	p, _ := s.byInodeP(fi)
	return p.path
}

func (s *snapshot) byInodeP(fi fs.FileInfo) (protected, bool) {
	if s == nil || s.g == nil || s.g.index == nil || fi == nil {
		return protected{}, false
	}
	id, ok := idOf(fi)
	if !ok {
		return protected{}, false
	}
	if p, ok := s.g.index.lookup(id); ok {
		return p, true
	}
	// A file with other names may be a link to one created in a protected
	// directory since the index was last brought up to date: once per
	// call, bring it up to date again and look again. A file with one name
	// (not a directory, which may be a bind mount) is in the index if it
	// is protected at all.
	if (fi.IsDir() || linksOf(fi) > 1) && !s.resynced {
		s.resynced = true
		s.g.index.sync(s.paths, true)
		return s.g.index.lookup(id)
	}
	return protected{}, false
}

// check refuses abs when it is protected by path or, if it exists, by inode.
func (s *snapshot) check(shown, abs string) error {
	if p, ok := s.find(abs); ok {
		return &ProtectedError{Path: shown, Home: p.path, What: p.what}
	}
	if fi, err := os.Stat(abs); err == nil {
		if p, ok := s.byInodeP(fi); ok {
			return &ProtectedError{Path: shown, Home: p.path, What: p.what}
		}
	}
	return nil
}

// skipNote is what the search tools append when they left a protected
// path out.
func skipNote(home string) string {
	return fmt.Sprintf("[skipped the daemon's home directory or protected file %s: tools can never read it]", home)
}
