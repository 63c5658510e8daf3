package tool

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/trellis-run/trellis/internal/dirwatch"
)

// inodeIndex knows the (device, inode) of every file and directory in the
// protected paths, whatever their number, so that a file reached under
// another name (a hard link to the token in the workdir, a bind mount of
// the home) is refused with one map lookup. Each protected directory is
// walked once, when first protected; from then on a watcher (inotify on
// Linux) reports what is created, moved and deleted in it, and the index
// applies those reports when a call starts (and again when a call meets a
// hard-linked file it does not know, so a link to a file created a moment
// ago is caught too). Protected files (not directories) are looked at
// again on every sync: they are few, and may be replaced by a rename.
// Where no watcher can be had (another system, no inotify watches left),
// a call that meets a hard-linked file the index does not know walks the
// protected directories again, once for that call.
type inodeIndex struct {
	mu      sync.Mutex
	ids     map[fileID]*indexed
	byPath  map[string]pathEntry
	roots   map[string]protected // the protected paths indexed
	files   map[string]protected // the protected paths that are files
	w       watcher              // nil: none
	started bool                 // start ran
	walks   int                  // directory walks so far (rebuilds show here)
}

type pathEntry struct {
	id  fileID
	dir bool
}

type indexed struct {
	p     protected
	names int // how many indexed paths have this id
}

// watcher follows directories for the index.
type watcher interface {
	// watch starts following dir; false when it cannot (out of watches).
	watch(dir string) bool
	// drain reports every change seen since the last drain, without
	// waiting: created (or moved in) and removed (or moved away) paths.
	// overflow says changes were lost (the index must be rebuilt).
	drain(created, removed func(path string)) (overflow bool)
	close()
}

// dirWatcher is the index's watcher on a dirwatch.Watcher.
type dirWatcher struct{ w *dirwatch.Watcher }

// newWatcher returns a watcher of created and removed paths, nil where
// none can be had.
func newWatcher() watcher {
	w, err := dirwatch.New(dirwatch.Created | dirwatch.Removed)
	if err != nil {
		return nil
	}
	return dirWatcher{w}
}

func (d dirWatcher) watch(dir string) bool {
	if d.w.Watching(dir) {
		return true
	}
	// Gone meanwhile (its removal is reported) is fine; out of watches
	// (ENOSPC) or memory is not.
	err := d.w.Add(dir)
	return err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrPermission)
}

func (d dirWatcher) drain(created, removed func(string)) bool {
	return d.w.Drain(func(e dirwatch.Event) {
		switch e.Op {
		case dirwatch.Created:
			created(e.Path)
		case dirwatch.Removed:
			removed(e.Path)
		}
	})
}

// close closes the descriptor once (the index closes a watcher it drops,
// and its cleanup closes the last one).
func (d dirWatcher) close() { d.w.Close() }

// newInodeIndex returns an empty index; its watcher is opened on first
// use and closed when the index is garbage.
func newInodeIndex() *inodeIndex {
	return &inodeIndex{
		ids: map[fileID]*indexed{}, byPath: map[string]pathEntry{},
		roots: map[string]protected{}, files: map[string]protected{},
	}
}

// start opens the watcher on first use.
func (x *inodeIndex) start() {
	if x.started {
		return
	}
	x.started = true
	if x.w = newWatcher(); x.w != nil {
		runtime.AddCleanup(x, func(w watcher) { w.close() }, x.w)
	}
}

// lookup returns the protected path holding the file id, if any.
func (x *inodeIndex) lookup(id fileID) (protected, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e := x.ids[id]; e != nil {
		return e.p, true
	}
	return protected{}, false
}

// sync indexes the paths not indexed yet and applies the watcher's reports;
// with force and no watcher, it walks every protected directory again.
func (x *inodeIndex) sync(paths []protected, force bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.start()
	if x.staleRoots(paths) {
		x.rebuild()
	}
	for _, p := range paths {
		if _, ok := x.roots[p.path]; !ok {
			x.addRoot(p)
		}
	}
	for path, p := range x.files {
		x.record(path, p) // it may have been replaced (a new inode)
	}
	switch {
	case x.w != nil:
		if x.w.drain(x.created, x.removed) {
			x.rebuild()
		}
	case force:
		x.rebuild()
	}
}

// staleRoots drops the indexed roots that are no longer protected (another
// daemon's home left the registry) or no longer hold the file they held
// (removed, or replaced by a rename): nothing reports the removal of a
// root itself, and the kernel gives its inode to the next file created,
// which would then be refused as protected. It reports whether any was
// dropped (the index must then be rebuilt from the roots left).
func (x *inodeIndex) staleRoots(paths []protected) bool {
	want := make(map[string]bool, len(paths))
	for _, p := range paths {
		want[p.path] = true
	}
	stale := false
	for r := range x.roots {
		if _, file := x.files[r]; file && want[r] {
			continue // sync records protected files again anyway
		}
		pe, had := x.byPath[r]
		fi, err := os.Lstat(r)
		id, ok := fileID{}, false
		if err == nil {
			id, ok = idOf(fi)
		}
		if !want[r] || err != nil || !had || !ok || id != pe.id {
			delete(x.roots, r)
			stale = true
		}
	}
	return stale
}

// addRoot indexes p; a path that does not exist yet is tried again at the
// next sync.
func (x *inodeIndex) addRoot(p protected) {
	fi, err := os.Lstat(p.path)
	if err != nil {
		return
	}
	x.roots[p.path] = p
	if !fi.IsDir() {
		x.files[p.path] = p
		x.record(p.path, p)
		return
	}
	x.walk(p.path, p)
}

// rebuild forgets everything and indexes every root again.
func (x *inodeIndex) rebuild() {
	roots := x.roots
	if x.w != nil {
		x.w.close()
		if x.w = newWatcher(); x.w != nil {
			runtime.AddCleanup(x, func(w watcher) { w.close() }, x.w)
		}
	}
	x.ids, x.byPath = map[fileID]*indexed{}, map[string]pathEntry{}
	x.roots, x.files = map[string]protected{}, map[string]protected{}
	for _, p := range roots {
		x.addRoot(p)
	}
}

// walk indexes dir and everything below it, following each directory
// before listing it (so nothing created meanwhile is missed).
func (x *inodeIndex) walk(dir string, p protected) {
	x.walks++
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && x.w != nil && !x.w.watch(path) {
			// Out of watches: from now on, walk again on a miss.
			x.w.close()
			x.w = nil
		}
		x.record(path, p)
		return nil
	})
}

// record indexes the file at path (its current inode) as part of p.
func (x *inodeIndex) record(path string, p protected) {
	fi, err := os.Lstat(path)
	if err != nil {
		x.forget(path)
		return
	}
	id, ok := idOf(fi)
	if !ok {
		return
	}
	if old, had := x.byPath[path]; had {
		if old.id == id {
			return
		}
		x.forget(path)
	}
	x.byPath[path] = pathEntry{id: id, dir: fi.IsDir()}
	if e := x.ids[id]; e != nil {
		e.names++
		return
	}
	x.ids[id] = &indexed{p: p, names: 1}
}

// forget drops path (and, for a directory, everything indexed below it).
func (x *inodeIndex) forget(path string) {
	drop := func(q string) {
		pe, ok := x.byPath[q]
		if !ok {
			return
		}
		delete(x.byPath, q)
		if e := x.ids[pe.id]; e != nil {
			if e.names--; e.names <= 0 {
				delete(x.ids, pe.id)
			}
		}
	}
	pe, ok := x.byPath[path]
	drop(path)
	if !ok || !pe.dir {
		return
	}
	prefix := path + "/"
	for q := range x.byPath {
		if strings.HasPrefix(q, prefix) {
			drop(q)
		}
	}
}

// created indexes a path that appeared in a followed directory.
func (x *inodeIndex) created(path string) {
	p, ok := x.rootOf(path)
	if !ok {
		return
	}
	if fi, err := os.Lstat(path); err == nil && fi.IsDir() {
		x.walk(path, p)
		return
	}
	x.record(path, p)
}

// removed forgets a path that left a followed directory.
func (x *inodeIndex) removed(path string) { x.forget(path) }

func (x *inodeIndex) rootOf(path string) (protected, bool) {
	for r, p := range x.roots {
		if within(r, path) {
			return p, true
		}
	}
	return protected{}, false
}
