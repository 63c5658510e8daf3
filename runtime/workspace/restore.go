package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Restored says what Restore changed.
type Restored struct {
	// Written counts the files and symlinks written and the directories
	// made; Removed the paths deleted.
	Written, Removed int
	// Kept are the paths the manifest skipped, left as they are.
	Kept []Skip
}

// Restore makes root hold exactly m's entries: files with their content
// (read from blobs) and mode, symlinks with their target, directories;
// every other path is removed, except what m skipped and what m's ignore
// rules or root's present ones match, which are left as they are. Nothing
// is written through a symlink: a link is replaced, never followed.
func Restore(ctx context.Context, root string, m Manifest, blobs Blobs) (Restored, error) {
	var out Restored
	if err := m.Check(); err != nil {
		return out, err
	}
	current, err := Snapshot(ctx, root, Options{Ignore: union(m.Ignore, ReadIgnore(root))})
	if err != nil {
		return out, err
	}
	base, err := filepath.EvalSymlinks(root)
	if err != nil {
		return out, fmt.Errorf("workspace: restore into %s: %w", root, err)
	}
	keep := map[string]bool{}
	for _, s := range m.Skipped {
		keep[s.Path] = true
		out.Kept = append(out.Kept, s)
	}
	abs := func(rel string) string { return filepath.Join(base, filepath.FromSlash(rel)) }

	// Remove what m does not hold, or holds as another kind; files first,
	// then directories deepest first.
	var dirs []string
	for _, e := range current.Entries {
		want, ok := m.Lookup(e.Path)
		if ok && want.Kind == e.Kind || keep[e.Path] || underKept(keep, e.Path) {
			continue
		}
		if e.Kind == KindDir {
			if ok { // a file or link takes the directory's place
				if err := os.RemoveAll(abs(e.Path)); err != nil {
					return out, fmt.Errorf("workspace: remove %s: %w", e.Path, err)
				}
				out.Removed++
			} else {
				dirs = append(dirs, e.Path)
			}
			continue
		}
		if err := os.Remove(abs(e.Path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return out, fmt.Errorf("workspace: remove %s: %w", e.Path, err)
		}
		out.Removed++
	}
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		// A directory that still holds ignored or skipped paths stays.
		if err := os.Remove(abs(d)); err == nil {
			out.Removed++
		} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			return out, fmt.Errorf("workspace: remove %s: %w", d, err)
		}
	}

	// Write m's entries in path order: a directory before what it holds.
	for _, e := range m.Entries {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		p := abs(e.Path)
		if err := inside(base, filepath.Dir(p)); err != nil {
			return out, err
		}
		have, ok := current.Lookup(e.Path)
		if ok && have.Kind == e.Kind && have.SHA256 == e.SHA256 && have.Target == e.Target {
			if have.Mode != e.Mode && e.Kind != KindSymlink {
				if err := os.Chmod(p, e.Mode); err != nil {
					return out, fmt.Errorf("workspace: restore %s: %w", e.Path, err)
				}
			}
			continue
		}
		switch e.Kind {
		case KindDir:
			if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return out, fmt.Errorf("workspace: restore %s: %w", e.Path, err)
			}
		case KindSymlink:
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return out, fmt.Errorf("workspace: restore %s: %w", e.Path, err)
			}
			if err := os.Symlink(e.Target, p); err != nil {
				return out, fmt.Errorf("workspace: restore %s: %w", e.Path, err)
			}
		case KindFile:
			if err := writeBlob(ctx, blobs, p, e); err != nil {
				return out, err
			}
		}
		out.Written++
	}
	// Directory modes last, deepest first: a read-only directory is
	// written into before it becomes read-only.
	for i := len(m.Entries) - 1; i >= 0; i-- {
		if e := m.Entries[i]; e.Kind == KindDir {
			if err := os.Chmod(abs(e.Path), e.Mode); err != nil {
				return out, fmt.Errorf("workspace: restore %s: %w", e.Path, err)
			}
		}
	}
	return out, nil
}

// union is a's rules followed by those of b that a lacks.
func union(a, b []string) []string {
	out := append([]string{}, a...)
	have := map[string]bool{}
	for _, r := range a {
		have[r] = true
	}
	for _, r := range b {
		if !have[r] {
			have[r] = true
			out = append(out, r)
		}
	}
	return out
}

// underKept reports whether p lies inside a skipped directory.
func underKept(keep map[string]bool, p string) bool {
	for d := filepath.ToSlash(filepath.Dir(p)); d != "." && d != "/"; d = filepath.ToSlash(filepath.Dir(d)) {
		if keep[d] {
			return true
		}
	}
	return false
}

// inside checks that dir, with its symlinks resolved, is base or below it.
func inside(base, dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("workspace: restore into %s: %w", dir, err)
	}
	if real != base && !strings.HasPrefix(real, base+string(filepath.Separator)) {
		return fmt.Errorf("workspace: %s resolves outside the workdir", dir)
	}
	return nil
}

// writeBlob writes e's content to p through a temp file and a rename, so
// a reader never sees it half written and a symlink at p is replaced.
func writeBlob(ctx context.Context, blobs Blobs, p string, e Entry) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".restore-*")
	if err != nil {
		return fmt.Errorf("workspace: restore %s: %w", e.Path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	rc, err := Open(ctx, blobs, e.SHA256)
	if err != nil {
		f.Close()
		return fmt.Errorf("workspace: restore %s: %w", e.Path, err)
	}
	_, err = io.Copy(f, rc)
	rc.Close()
	if err == nil {
		err = f.Chmod(e.Mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		return fmt.Errorf("workspace: restore %s: %w", e.Path, err)
	}
	return nil
}
