package workspace

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/trellis-run/trellis/internal/dirwatch"
)

// Watch follows the changes made under a root between its snapshots
// (Options.Watch), so that recording a checkpoint costs what changed, not
// the size of the workdir. A snapshot with a Watch either walks the whole
// root, watching every directory it records (not those ignored), or, when
// its Previous is the manifest the Watch's last snapshot made and the
// ignore rules are the same, starts from Previous and looks again only at
// the paths the kernel reported changed since, and at the files with other
// hard links (a change through another of their names is not reported).
// It walks everything again whenever it cannot be sure: the kernel's queue
// overflowed, a watched directory was moved, the last snapshot failed, or
// the root is on a file system whose changes may come from elsewhere (a
// network one) or holds another file system.
//
// A Watch holds a kernel descriptor from its first snapshot until Close
// or Suspend. It is safe for concurrent use; its snapshots run one at a
// time.
type Watch struct {
	mu      sync.Mutex
	dw      *dirwatch.Watcher // nil: not watching
	root    string
	dev     uint64            // the root's device
	gen     uint64            // the generation of the last snapshot's manifest (0: none to start from)
	inos    map[string]uint64 // watched directories (relative) → their inode
	linked  map[string]bool   // files with other hard links: looked at by every snapshot
	refuse  bool              // the root cannot be watched: always walk
	closed  bool
	walks   int // whole walks so far, and updates from the previous snapshot
	updates int
}

// generations numbers the manifests Watch snapshots make, across Watches.
var generations atomic.Uint64

// NewWatch returns a Watch; it opens its descriptor at its first
// snapshot.
func NewWatch() *Watch { return &Watch{} }

// Suspend lets the descriptor go (the next snapshot walks everything and
// watches again).
func (w *Watch) Suspend() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stop()
}

// Close lets the descriptor go for good: later snapshots walk everything.
func (w *Watch) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stop()
	w.closed = true
}

func (w *Watch) stop() {
	if w.dw != nil {
		w.dw.Close()
		w.dw = nil
	}
	w.gen = 0
}

// snapshot records wk's root, from the previous snapshot when it can.
func (w *Watch) snapshot(wk *walker) (Manifest, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := wk.o.Previous
	if w.dw != nil && w.gen != 0 && w.root == wk.root && prev != nil && prev.gen == w.gen && slices.Equal(prev.Ignore, wk.m.Ignore) {
		if changed, ok := w.changes(); ok {
			fresh := *wk
			m, err := w.update(wk, changed)
			switch {
			case err == nil:
				w.updates++
				w.gen = generations.Add(1)
				m.gen = w.gen
				return m, nil
			case !errors.Is(err, errStopped):
				w.gen = 0
				return Manifest{}, err
			}
			*wk = fresh // the update gave the watching up: walk everything
		}
	}
	// Walk everything, watching anew: what the old descriptor queued is
	// covered by the walk.
	w.stop()
	if !w.closed && !w.refuse {
		w.start(wk.root)
	}
	wk.w = w
	if w.dw == nil {
		wk.w = nil
	}
	w.walks++
	m, err := wk.all()
	if err != nil || w.dw == nil {
		w.stop()
		return m, err
	}
	w.gen = generations.Add(1)
	m.gen = w.gen
	return m, nil
}

// start opens the descriptor for root, unless the root's file system may
// change without reporting it (then the Watch refuses for good) or cannot
// be looked at now.
func (w *Watch) start(root string) {
	dev, local, err := localDevice(root)
	if err != nil {
		return // the walk says what is wrong; try again next time
	}
	if !local {
		w.refuse = true
		return
	}
	dw, err := dirwatch.New(dirwatch.Created | dirwatch.Removed | dirwatch.Written | dirwatch.Moved)
	if err != nil {
		return // out of descriptors: walk, and try again next time
	}
	w.dw, w.root, w.dev = dw, root, dev
	w.inos, w.linked = map[string]uint64{}, map[string]bool{}
}

// watchDir watches the directory rel (at p; info nil for the root) as a
// walk records it. A directory on another device, or one that cannot be
// watched, stops the watching (the walk goes on).
func (w *Watch) watchDir(rel, p string, info fs.FileInfo) {
	if w.dw == nil {
		return
	}
	var ino uint64
	if info != nil {
		dev, i, ok := devIno(info)
		if !ok || dev != w.dev {
			w.refuse = dev != w.dev // another file system inside the root
			w.stop()
			return
		}
		ino = i
	}
	if err := w.dw.Add(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			// Gone meanwhile: its parent reports it. Unreadable: it is
			// recorded so, and its parent reports the change of mode that
			// makes it readable (then it is walked).
			return
		}
		w.stop() // out of watches: walk, and try again next time
		return
	}
	w.inos[rel] = ino
}

// noteLinks remembers a file with other hard links.
func (w *Watch) noteLinks(rel string, info fs.FileInfo) {
	if w.dw != nil && links(info) > 1 {
		w.linked[rel] = true
	}
}

// changes drains the reported changes, as paths relative to the root;
// ok false when the Watch cannot tell what changed.
func (w *Watch) changes() (changed []string, ok bool) {
	ok = true
	overflow := w.dw.Drain(func(e dirwatch.Event) {
		if e.Op == dirwatch.Moved {
			ok = false
			return
		}
		rel, err := filepath.Rel(w.root, e.Path)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			ok = false
			return
		}
		if rel != "." {
			changed = append(changed, filepath.ToSlash(rel))
		}
	})
	return changed, ok && !overflow
}

// update records the root as prev with the changed paths looked at again:
// each is dropped with what lies under it, then recorded again as it is
// now (a directory that is not the one watched under that name is walked
// whole).
func (w *Watch) update(wk *walker, changed []string) (Manifest, error) {
	prev := wk.o.Previous
	wk.w, wk.dirty = w, make(map[string]bool, len(changed))
	for _, rel := range changed {
		wk.dirty[rel] = true
	}
	// A file with other hard links is looked at again (its size and time
	// tell a change through another name, as a walk's do), but not read
	// unless reported changed.
	for rel := range w.linked {
		changed = append(changed, rel)
	}
	clear(w.linked)
	slices.Sort(changed)
	changed = slices.Compact(changed)
	dropTree, dropSelf := map[string]bool{}, map[string]bool{}
	for _, rel := range changed {
		if under(rel, dropTree) {
			continue // walked whole below
		}
		p := filepath.Join(wk.root, filepath.FromSlash(rel))
		info, err := os.Lstat(p)
		if err != nil {
			dropTree[rel] = true
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
				wk.m.Skipped = append(wk.m.Skipped, Skip{Path: rel, Reason: SkipUnreadable})
			}
			continue
		}
		if info.IsDir() && !wk.ign.ignored(rel, true) && w.watching(rel, p, info) {
			dropSelf[rel] = true // the same directory: what it holds reports its own changes
			if err := wk.visit(p, fs.FileInfoToDirEntry(info), nil); err != nil && !errors.Is(err, fs.SkipDir) {
				return Manifest{}, err
			}
			continue
		}
		dropTree[rel] = true
		if info.IsDir() {
			if err := filepath.WalkDir(p, wk.visit); err != nil {
				return Manifest{}, err
			}
			continue
		}
		if err := wk.visit(p, fs.FileInfoToDirEntry(info), nil); err != nil {
			return Manifest{}, err
		}
	}
	if w.dw == nil {
		return Manifest{}, errStopped // a walk gave the watching up
	}
	m := wk.m
	for _, e := range prev.Entries {
		if !dropSelf[e.Path] && !dropTree[e.Path] && !under(e.Path, dropTree) {
			m.Entries = append(m.Entries, e)
		}
	}
	for _, sk := range prev.Skipped {
		if !dropSelf[sk.Path] && !dropTree[sk.Path] && !under(sk.Path, dropTree) {
			m.Skipped = append(m.Skipped, sk)
		}
	}
	m.At = prev.At // only what changed was looked at: the rest is as sure as it was then
	sortManifest(&m)
	return m, nil
}

// watching reports whether the directory rel (at p) is the one watched
// under that name.
func (w *Watch) watching(rel, p string, info fs.FileInfo) bool {
	ino, ok := w.inos[rel]
	if !ok || !w.dw.Watching(p) {
		return false
	}
	_, i, ok := devIno(info)
	return ok && i == ino
}

// under reports whether a directory rel lies in is in dirs.
func under(rel string, dirs map[string]bool) bool {
	for i := range len(rel) {
		if rel[i] == '/' && dirs[rel[:i]] {
			return true
		}
	}
	return false
}

// errStopped: an update gave the watching up; Snapshot walks instead.
var errStopped = errors.New("workspace: the watch stopped")
