package skill

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// cloneTimeout bounds a git clone.
const cloneTimeout = 2 * time.Minute

// maxLinkTarget bounds the target of a symbolic link in an archive.
const maxLinkTarget = 4096

// writer builds a skill's tree under root from entries of a source,
// counting them against the limits. Symbolic links are only created by
// finish, after every file: no file is ever written through a link, so an
// entry cannot leave root by way of an earlier one.
type writer struct {
	root  string
	lim   Limits
	from  string // the source, for messages
	files int
	bytes int64
	links []link
}

type link struct{ name, target string }

func newWriter(root, from string, lim Limits) (*writer, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("skill: stage %s: %w", from, err)
	}
	return &writer{root: root, lim: lim, from: from}, nil
}

// local checks an entry's name and returns it as a path below root.
func (w *writer) local(name string) (string, bool, error) {
	clean := path.Clean(strings.TrimPrefix(filepath.ToSlash(name), "./"))
	if clean == "." || clean == "" {
		return "", false, nil // the top folder itself
	}
	rel := filepath.FromSlash(clean)
	if !filepath.IsLocal(rel) || strings.HasPrefix(name, "/") {
		return "", false, unsafe("%s holds the entry %q, which would land outside the skill's folder", w.from, name)
	}
	if clean == sourceFile || slices.Contains(strings.Split(clean, "/"), ".git") {
		return "", false, nil // ours, or a repository's metadata
	}
	return filepath.Join(w.root, rel), true, nil
}

func (w *writer) count() error {
	w.files++
	if w.files > w.lim.MaxFiles {
		return errs.Wrap(errcode.InvalidParams, ErrTooLarge, "%s holds more than %d files and folders, the most a skill may", w.from, w.lim.MaxFiles)
	}
	return nil
}

func (w *writer) dir(name string) error {
	p, ok, err := w.local(name)
	if err != nil || !ok {
		return err
	}
	if err := w.count(); err != nil {
		return err
	}
	return os.MkdirAll(p, 0o755)
}

// file writes one regular file from r, counting its bytes as they come
// (sizes announced by headers are not trusted).
func (w *writer) file(name string, mode fs.FileMode, r io.Reader) error {
	p, ok, err := w.local(name)
	if err != nil || !ok {
		return err
	}
	if err := w.count(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("skill: stage %s: %w", name, err)
	}
	perm := fs.FileMode(0o644)
	if mode&0o111 != 0 {
		perm = 0o755
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("skill: stage %s: %w", name, err)
	}
	left := w.lim.MaxBytes - w.bytes
	n, err := io.Copy(f, io.LimitReader(r, left+1))
	w.bytes += n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return badSource("%s: read %s: %v", w.from, name, err)
	}
	if n > left {
		return errs.Wrap(errcode.InvalidParams, ErrTooLarge, "%s holds more than %d bytes, the most a skill may", w.from, w.lim.MaxBytes)
	}
	return nil
}

func (w *writer) symlink(name, target string) error {
	p, ok, err := w.local(name)
	if err != nil || !ok {
		return err
	}
	if err := w.count(); err != nil {
		return err
	}
	if target == "" || filepath.IsAbs(target) || strings.HasPrefix(target, "/") {
		return unsafe("%s holds the link %s to %q: links must point inside the skill, by a relative path", w.from, name, target)
	}
	w.links = append(w.links, link{p, target})
	return nil
}

// finish creates the links; checkTree then checks where they lead.
func (w *writer) finish() error {
	for _, l := range w.links {
		if err := os.MkdirAll(filepath.Dir(l.name), 0o755); err != nil {
			return fmt.Errorf("skill: stage a link: %w", err)
		}
		if err := os.Symlink(l.target, l.name); err != nil {
			return unsafe("%s: the link %s cannot be made: %v", w.from, l.name, err)
		}
	}
	return nil
}

// copyFolder copies src (following it if it is a link) to root.
func copyFolder(src, root string, lim Limits) error {
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		return badSource("source %s cannot be read: %v", src, err)
	}
	w, err := newWriter(root, src, lim)
	if err != nil {
		return err
	}
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return badSource("source %s: %v", src, err)
		}
		rel, err := filepath.Rel(real, p)
		if err != nil {
			return err
		}
		if rel == ".git" && d.IsDir() {
			return filepath.SkipDir
		}
		switch t := d.Type(); {
		case t.IsDir():
			return w.dir(rel)
		case t.IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return badSource("source %s: %v", src, err)
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return badSource("source %s: %v", src, err)
			}
			return w.file(rel, fi.Mode(), f)
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return badSource("source %s: %v", src, err)
			}
			return w.symlink(rel, target)
		default:
			return unsafe("source %s holds %s, which is not a file, folder or link", src, rel)
		}
	})
	if err != nil {
		return err
	}
	return w.finish()
}

// extractTarGz extracts a gzip-compressed tar archive to root.
func extractTarGz(archive, root string, lim Limits) error {
	f, err := os.Open(archive)
	if err != nil {
		return badSource("source %s cannot be read: %v", archive, err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return badSource("source %s is not gzip-compressed: %v", archive, err)
	}
	defer gz.Close()
	w, err := newWriter(root, archive, lim)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return badSource("source %s is not a valid tar archive: %v", archive, err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = w.dir(hdr.Name)
		case tar.TypeReg: // the reader reports the old TypeRegA as TypeReg
			err = w.file(hdr.Name, hdr.FileInfo().Mode(), tr)
		case tar.TypeSymlink:
			err = w.symlink(hdr.Name, hdr.Linkname)
		case tar.TypeXGlobalHeader:
		case tar.TypeLink:
			err = unsafe("%s holds the hard link %s; a skill may hold files, folders and symbolic links only", archive, hdr.Name)
		default:
			err = unsafe("%s holds %s of tar type %q; a skill may hold files, folders and symbolic links only", archive, hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			return err
		}
	}
	return w.finish()
}

// extractZip extracts a zip archive to root.
func extractZip(archive, root string, lim Limits) error {
	zr, err := zip.OpenReader(archive)
	if err != nil {
		return badSource("source %s is not a valid zip archive: %v", archive, err)
	}
	defer zr.Close()
	w, err := newWriter(root, archive, lim)
	if err != nil {
		return err
	}
	for _, zf := range zr.File {
		mode := zf.Mode()
		switch {
		case mode.IsDir():
			err = w.dir(zf.Name)
		case mode&fs.ModeSymlink != 0:
			var target []byte
			target, err = readZipEntry(zf, maxLinkTarget)
			if err == nil {
				err = w.symlink(zf.Name, string(target))
			}
		case mode.IsRegular():
			err = func() error {
				rc, err := zf.Open()
				if err != nil {
					return badSource("%s: %s: %v", archive, zf.Name, err)
				}
				defer rc.Close()
				return w.file(zf.Name, mode, rc)
			}()
		default:
			err = unsafe("%s holds %s, which is not a file, folder or link", archive, zf.Name)
		}
		if err != nil {
			return err
		}
	}
	return w.finish()
}

func readZipEntry(zf *zip.File, limit int64) ([]byte, error) {
	rc, err := zf.Open()
	if err != nil {
		return nil, badSource("%s: %v", zf.Name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, badSource("%s: %v", zf.Name, err)
	}
	if int64(len(b)) > limit {
		return nil, unsafe("the link %s has a target longer than %d bytes", zf.Name, limit)
	}
	return b, nil
}

// clone fetches the tip of a git repository into dir, without its
// history, and drops its .git folder. Only the file, https and ssh
// transports are allowed, also for anything the clone itself fetches.
func (s *Service) clone(ctx context.Context, url, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, cloneTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.opts.Git,
		"-c", "protocol.allow=never",
		"-c", "protocol.file.allow=always",
		"-c", "protocol.https.allow=always",
		"-c", "protocol.ssh.allow=always",
		"clone", "--depth", "1", "--no-tags", "--quiet", "--", url, dir)
	// Never wait for a password: a clone that needs one fails.
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return badSource("installing from %s needs git, which is not installed: %v", url, err)
		}
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return badSource("git clone %s took longer than %s", url, cloneTimeout)
		}
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 1000 {
			msg = msg[len(msg)-1000:]
		}
		if msg == "" {
			msg = err.Error()
		}
		return badSource("git clone %s failed: %s", url, msg)
	}
	if err := os.RemoveAll(filepath.Join(dir, ".git")); err != nil {
		return fmt.Errorf("skill: drop the .git folder of %s: %w", url, err)
	}
	return nil
}

// checkTree checks a staged skill: every link resolves to something
// inside root, nothing is other than a file, folder or link, and the
// limits hold (a clone was not counted while it was written).
func checkTree(root string, lim Limits) error {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fmt.Errorf("skill: resolve the staged skill: %w", err)
	}
	files, size := 0, int64(0)
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		files++
		if files > lim.MaxFiles {
			return errs.Wrap(errcode.InvalidParams, ErrTooLarge, "the skill holds more than %d files and folders, the most a skill may", lim.MaxFiles)
		}
		switch t := d.Type(); {
		case t.IsDir():
		case t.IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			size += fi.Size()
			if size > lim.MaxBytes {
				return errs.Wrap(errcode.InvalidParams, ErrTooLarge, "the skill holds more than %d bytes, the most a skill may", lim.MaxBytes)
			}
		case t&fs.ModeSymlink != 0:
			target, err := filepath.EvalSymlinks(p)
			if err != nil {
				return unsafe("the link %s leads nowhere inside the skill: %v", rel, err)
			}
			if r, err := filepath.Rel(realRoot, target); err != nil || !filepath.IsLocal(r) {
				return unsafe("the link %s leads outside the skill's folder", rel)
			}
		default:
			return unsafe("the skill holds %s, which is not a file, folder or link", rel)
		}
		return nil
	})
}

func unsafe(format string, args ...any) error {
	return errs.Wrap(errcode.InvalidParams, ErrUnsafe, format, args...)
}
