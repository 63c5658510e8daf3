package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Options bound a snapshot.
type Options struct {
	// MaxFile is the largest file recorded, in bytes; larger ones are
	// skipped as SkipTooLarge. 0 means no limit.
	MaxFile int64
	// Ignore are the ignore rules (ReadIgnore's); nil reads them from the
	// root.
	Ignore []string
	// Previous, when set, is an earlier manifest of the same root: a file
	// whose size and modification time are unchanged, and were already
	// racyWindow before Previous was taken, keeps its hash without being
	// read again.
	Previous *Manifest
	// Exclude are absolute paths the snapshot leaves out, as ignored, when
	// they lie inside the root (Exclude's rules, after Ignore's).
	Exclude []string
	// Watch, when set, follows the root's changes between snapshots:
	// with it, a snapshot whose Previous is the manifest the last snapshot
	// with the same Watch made reads again only the paths that changed
	// since (and, each time, the files that have other hard links, whose
	// changes through another path are not reported); any other walks
	// the whole root, and watches each directory it records.
	Watch *Watch
	// Keep is how many bytes of the files it reads the snapshot keeps in
	// memory (0: none), so that Save stores them as they were hashed
	// instead of reading and hashing them again. Release lets them go.
	Keep int64
}

// racyWindow is how long before a snapshot a file must have been modified
// for a later snapshot to trust its size and time: a file rewritten within
// the clock's granularity of an earlier snapshot may keep both (git's
// "racy clean" rule).
const racyWindow = 2 * time.Second

// Snapshot records the directory root. Symlinks are recorded as links,
// never followed. An error means root itself could not be walked or ctx
// ended; a file that cannot be read is skipped as SkipUnreadable.
func Snapshot(ctx context.Context, root string, o Options) (Manifest, error) {
	if o.Ignore == nil {
		o.Ignore = ReadIgnore(root)
	}
	if rules := Exclude(root, o.Exclude); rules != nil {
		o.Ignore = union(o.Ignore, rules)
	}
	wk := &walker{ctx: ctx, root: root, o: o, ign: newMatcher(o.Ignore), keep: o.Keep,
		m: Manifest{Entries: []Entry{}, Skipped: []Skip{}, Ignore: append([]string{}, o.Ignore...), At: time.Now().UnixNano()}}
	if o.Watch != nil {
		return o.Watch.snapshot(wk)
	}
	return wk.all()
}

// walker records the paths of one snapshot into m.
type walker struct {
	ctx  context.Context
	root string
	o    Options
	ign  matcher
	keep int64
	m    Manifest
	w    *Watch // watching the directories it records (nil: none)
	// dirty are the paths reported changed: their files are read again,
	// whatever their size and time.
	dirty map[string]bool
}

func (wk *walker) changed(rel string) bool { return wk.dirty[rel] }

// all walks the whole root.
func (wk *walker) all() (Manifest, error) {
	if err := filepath.WalkDir(wk.root, wk.visit); err != nil {
		return Manifest{}, fmt.Errorf("workspace: record %s: %w", wk.root, err)
	}
	sortManifest(&wk.m)
	return wk.m, nil
}

func sortManifest(m *Manifest) {
	sort.Slice(m.Entries, func(i, j int) bool { return m.Entries[i].Path < m.Entries[j].Path })
	sort.Slice(m.Skipped, func(i, j int) bool { return m.Skipped[i].Path < m.Skipped[j].Path })
}

// visit records the path p (WalkDir's function, for the root or a
// directory under it).
func (wk *walker) visit(p string, d fs.DirEntry, err error) error {
	if cerr := wk.ctx.Err(); cerr != nil {
		return cerr
	}
	m := &wk.m
	if p == wk.root {
		if err == nil && wk.w != nil {
			wk.w.watchDir("", p, nil)
		}
		return err
	}
	rel, rerr := filepath.Rel(wk.root, p)
	if rerr != nil {
		return rerr
	}
	rel = filepath.ToSlash(rel)
	if err != nil {
		m.Skipped = append(m.Skipped, Skip{Path: rel, Reason: SkipUnreadable})
		if d != nil && d.IsDir() {
			return fs.SkipDir
		}
		return nil
	}
	isDir := d.IsDir()
	if wk.ign.ignored(rel, isDir) {
		m.Skipped = append(m.Skipped, Skip{Path: rel, Reason: SkipIgnored})
		if isDir {
			return fs.SkipDir
		}
		return nil
	}
	info, err := d.Info()
	if err != nil {
		m.Skipped = append(m.Skipped, Skip{Path: rel, Reason: SkipUnreadable})
		return nil
	}
	mode := info.Mode()
	switch {
	case isDir:
		m.Entries = append(m.Entries, Entry{Path: rel, Kind: KindDir, Mode: perm(mode)})
		if wk.w != nil {
			wk.w.watchDir(rel, p, info)
		}
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			m.Skipped = append(m.Skipped, Skip{Path: rel, Reason: SkipUnreadable})
			return nil
		}
		m.Entries = append(m.Entries, Entry{Path: rel, Kind: KindSymlink, Mode: perm(mode), Target: target})
	case mode.IsRegular():
		if wk.w != nil {
			wk.w.noteLinks(rel, info)
		}
		if wk.o.MaxFile > 0 && info.Size() > wk.o.MaxFile {
			m.Skipped = append(m.Skipped, Skip{Path: rel, Reason: SkipTooLarge, Size: info.Size()})
			return nil
		}
		e := Entry{Path: rel, Kind: KindFile, Mode: perm(mode), Size: info.Size(), MTime: info.ModTime().UnixNano()}
		if prev, ok := previous(wk.o.Previous, rel); ok && prev.Kind == KindFile && prev.Size == e.Size && prev.MTime == e.MTime &&
			prev.SHA256 != "" && prev.MTime < wk.o.Previous.At-int64(racyWindow) && !wk.changed(rel) {
			e.SHA256 = prev.SHA256
		} else {
			sum, n, content, err := hashFile(p, wk.keep)
			if err != nil {
				m.Skipped = append(m.Skipped, Skip{Path: rel, Reason: SkipUnreadable})
				return nil
			}
			e.SHA256, e.Size = sum, n
			if content != nil {
				m.keep(sum, content)
				wk.keep -= n
			}
		}
		m.Entries = append(m.Entries, e)
	default:
		m.Skipped = append(m.Skipped, Skip{Path: rel, Reason: SkipSpecial})
	}
	return nil
}

func previous(m *Manifest, rel string) (Entry, bool) {
	if m == nil {
		return Entry{}, false
	}
	return m.Lookup(rel)
}

// perm keeps the bits a restore sets again.
func perm(m fs.FileMode) fs.FileMode {
	return m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// hashFile returns the SHA-256 of the file at p and its size, and its
// content when it is at most keep bytes (nil otherwise).
func hashFile(p string, keep int64) (string, int64, []byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, nil, err
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.Size() <= keep {
		buf := make([]byte, info.Size()+1)
		n, err := io.ReadFull(f, buf)
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			content := buf[:n]
			sum := sha256.Sum256(content)
			return hex.EncodeToString(sum[:]), int64(n), content, nil
		case err != nil:
			return "", 0, nil, err
		}
		h := sha256.New() // it grew since its size was read: hash it all, keep none
		h.Write(buf)
		more, err := io.Copy(h, f)
		return hex.EncodeToString(h.Sum(nil)), int64(n) + more, nil, err
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, nil, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil, nil
}

// ErrChanged means a file changed while it was being recorded: its
// content no longer has the hash the snapshot found. Snapshot again.
var ErrChanged = errors.New("workspace: a file changed while it was recorded")
