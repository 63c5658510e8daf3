package tool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxSymlinks bounds symlink expansion, as the kernel's ELOOP does.
const maxSymlinks = 255

// ResolvePath returns the absolute, symlink-free path that p names in the
// session's workdir, or an *OutsideWorkdirError when it lies outside.
//
// p may be relative (to workdir) or absolute, and need not exist yet (a file
// write_file will create): every existing component is resolved, symlinks
// included (a dangling one is followed to where it points), and the
// components that do not exist are taken as they are written. The result is
// workdir itself or a path under it, where workdir is itself resolved.
func ResolvePath(workdir, p string) (string, error) {
	base, err := realWorkdir(workdir)
	if err != nil {
		return "", err
	}
	return resolveIn(base, workdir, p)
}

// realWorkdir returns workdir with every symlink resolved; it must exist.
func realWorkdir(workdir string) (string, error) {
	if !filepath.IsAbs(workdir) {
		return "", fmt.Errorf("the session's workdir %q is not absolute", workdir)
	}
	base, err := filepath.EvalSymlinks(filepath.Clean(workdir))
	if err != nil {
		return "", fmt.Errorf("the session's workdir %s cannot be used: %w", workdir, err)
	}
	return base, nil
}

// resolveIn is ResolvePath with the workdir already resolved to base;
// shown is the workdir as the session knows it, for messages.
func resolveIn(base, shown, p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q holds a NUL byte", p)
	}
	abs := p
	if !filepath.IsAbs(p) {
		abs = filepath.Join(base, p)
	}
	resolved, err := walkSymlinks(filepath.Clean(abs))
	if err != nil {
		return "", fmt.Errorf("path %s cannot be resolved: %w", p, err)
	}
	if !within(base, resolved) {
		return "", &OutsideWorkdirError{Path: p, Workdir: shown}
	}
	return resolved, nil
}

// within reports whether path is dir or below it; both are clean and absolute.
func within(dir, path string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// walkSymlinks resolves every symlink in the clean absolute path, component
// by component, like filepath.EvalSymlinks, but carries on through
// components that do not exist.
func walkSymlinks(path string) (string, error) {
	resolved := "/"
	rest := path
	links := 0
	for rest != "" {
		var comp string
		comp, rest, _ = strings.Cut(rest, "/")
		switch comp {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, comp)
		fi, err := os.Lstat(next)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				resolved = next // not there (yet): nothing to resolve
				continue
			}
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		links++
		if links > maxSymlinks {
			return "", errors.New("too many levels of symbolic links")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		rest = target + "/" + rest
	}
	return resolved, nil
}

// workspace is the session's workdir opened for confined file access. Paths
// are checked with resolveIn and then opened through an os.Root, which
// refuses to leave the directory even if a symlink changes in between.
type workspace struct {
	shown string // the workdir as the session knows it
	base  string // the workdir with symlinks resolved
	root  *os.Root
	guard *snapshot // the daemon's home, off limits
}

// openWorkspace opens the call's workdir with the call's guard.
func openWorkspace(call Call) (*workspace, error) {
	workdir := call.Workdir
	base, err := realWorkdir(workdir)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(base)
	if err != nil {
		return nil, fmt.Errorf("the session's workdir %s cannot be opened: %w", workdir, err)
	}
	return &workspace{shown: workdir, base: base, root: root, guard: call.Guard.snapshot()}, nil
}

// openPath opens the call's workdir and resolves p in it (name and display
// as resolve returns them); the caller closes the workspace.
func openPath(call Call, p string) (ws *workspace, name, display string, err error) {
	ws, err = openWorkspace(call)
	if err != nil {
		return nil, "", "", err
	}
	if name, display, err = ws.resolve(p); err != nil {
		ws.Close()
		return nil, "", "", err
	}
	return ws, name, display, nil
}

// protectedRel returns the workdir-relative names (/ separated) of the
// protected directories that lie inside the workdir, and the directory
// each stands for.
func (w *workspace) protectedRel() map[string]string {
	out := map[string]string{}
	if w.guard == nil {
		return out
	}
	for _, pr := range w.guard.paths {
		d := pr.path
		if within(w.base, d) && d != w.base {
			rel, err := filepath.Rel(w.base, d)
			if err == nil {
				out[filepath.ToSlash(rel)] = d
			}
		}
	}
	return out
}

// skipped returns the protected directory that the workdir-relative p (/
// separated) is or lies in, or "" — by path, and by inode when fi is given.
func (w *workspace) skipped(p string, fi fs.FileInfo) string {
	for rel, d := range w.protectedRel() {
		if p == rel || strings.HasPrefix(p, rel+"/") {
			return d
		}
	}
	return w.guard.byInode(fi)
}

func (w *workspace) Close() error { return w.root.Close() }

// resolve returns the root-relative name of p (for os.Root calls, "." for
// the workdir itself) and its display form (relative, / separated).
func (w *workspace) resolve(p string) (name, display string, err error) {
	abs, err := resolveIn(w.base, w.shown, p)
	if err != nil {
		return "", "", err
	}
	if err := w.guard.check(p, abs); err != nil {
		return "", "", err
	}
	rel, err := filepath.Rel(w.base, abs)
	if err != nil {
		return "", "", err
	}
	return rel, filepath.ToSlash(rel), nil
}
