package session

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"mime"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
)

// Artifact is one file under a session's artifacts/ directory.
type Artifact struct {
	Name     string // relative to artifacts/, with forward slashes
	Path     string // absolute
	Size     int64
	Modified time.Time
	MimeType string // "" when the extension says nothing
}

// maxArtifacts bounds what Artifacts lists (the newest ones).
const maxArtifacts = 1000

// Artifacts lists the regular files under the session workdir's
// artifacts/ directory and its subdirectories, newest first (at most
// maxArtifacts), and returns the workdir. A session without that
// directory has none.
func (s *Service) Artifacts(ctx context.Context, id string) ([]Artifact, string, error) {
	row, err := s.row(ctx, id)
	if err != nil {
		return nil, "", err
	}
	dir := filepath.Join(row.Workdir, "artifacts")
	var out []Artifact
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return nil // an unreadable entry is left out
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, Artifact{
			Name: filepath.ToSlash(rel), Path: p, Size: info.Size(), Modified: info.ModTime().UTC(),
			MimeType: mime.TypeByExtension(filepath.Ext(p)),
		})
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	slices.SortFunc(out, func(a, b Artifact) int {
		return cmp.Or(b.Modified.Compare(a.Modified), strings.Compare(a.Name, b.Name))
	})
	if len(out) > maxArtifacts {
		out = out[:maxArtifacts]
	}
	return out, row.Workdir, nil
}

// FileEntry is one completion of CompleteFile.
type FileEntry struct {
	Dir  bool
	Path string // relative to the workdir, forward slashes; a directory's ends in "/"
	Size int64  // a file's
}

// CompleteQuery is what CompleteFile completes.
type CompleteQuery struct {
	SessionID string // the session whose workdir to complete in
	Workdir   string // or this one, which Owner must be allowed to run in
	Owner     string // the caller ("" = the daemon token)
	Query     string // a partial path relative to the workdir
	Limit     int    // 1.., at most maxCompletions
}

// maxCompletions bounds CompleteFile's limit.
const maxCompletions = 200

// CompleteFile completes q.Query under a workdir: the directory part of
// the query is listed (never outside the workdir), and its entries whose
// names start with the last element (case-insensitively) come first, then
// those that contain it; directories before files, then by name. Hidden
// entries are offered only when the last element starts with ".". It
// reports whether more entries matched than q.Limit.
func (s *Service) CompleteFile(ctx context.Context, q CompleteQuery) ([]FileEntry, bool, error) {
	if q.Limit < 1 {
		return nil, false, errs.New(errcode.InvalidParams, "limit is %d; it must be at least 1", q.Limit)
	}
	q.Limit = min(q.Limit, maxCompletions)
	var root string
	switch {
	case q.SessionID != "":
		row, err := s.row(ctx, q.SessionID)
		if err != nil {
			return nil, false, err
		}
		root = row.Workdir
	case q.Workdir != "":
		wd, err := ResolveWorkdir(q.Workdir)
		if err != nil {
			return nil, false, err
		}
		if q.Owner != "" && s.deps.OwnerMayRun != nil {
			if err := s.deps.OwnerMayRun(ctx, q.Owner, "", wd); err != nil {
				return nil, false, err
			}
		}
		root = wd
	default:
		return nil, false, errs.New(errcode.InvalidParams, "give sessionId or workdir: where to complete the path")
	}
	if err := checkPathLen("query", q.Query); err != nil {
		return nil, false, err
	}
	query := filepath.ToSlash(q.Query)
	if path.IsAbs(query) {
		return nil, false, errs.New(errcode.InvalidParams, "query %q is absolute; it is relative to the workdir", q.Query)
	}
	dirPart, prefix := path.Split(query)
	dirPart = path.Clean("./" + dirPart)
	if dirPart == ".." || strings.HasPrefix(dirPart, "../") {
		return nil, false, errs.New(errcode.InvalidParams, "query %q leads out of the workdir", q.Query)
	}
	dir := filepath.Join(root, filepath.FromSlash(dirPart))
	if real, err := filepath.EvalSymlinks(dir); err != nil || (real != root && !strings.HasPrefix(real, root+string(filepath.Separator))) {
		return nil, false, nil // a directory that does not exist, or a link out of the workdir: nothing to offer
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, false, nil
	}
	lower := strings.ToLower(prefix)
	type hit struct {
		rank int
		e    FileEntry
	}
	var hits []hit
	for _, d := range ents {
		name := d.Name()
		ln := strings.ToLower(name)
		if strings.HasPrefix(name, ".") && !strings.HasPrefix(prefix, ".") {
			continue
		}
		rank := 0
		switch {
		case strings.HasPrefix(ln, lower):
		case strings.Contains(ln, lower):
			rank = 2
		default:
			continue
		}
		rel := name
		if dirPart != "." {
			rel = dirPart + "/" + name
		}
		e := FileEntry{Path: rel}
		info, err := d.Info()
		if err != nil {
			continue
		}
		if info.IsDir() || (d.Type()&fs.ModeSymlink != 0 && isDir(filepath.Join(dir, name))) {
			e.Dir, e.Path = true, rel+"/"
		} else {
			e.Size = info.Size()
			rank++
		}
		hits = append(hits, hit{rank, e})
	}
	slices.SortFunc(hits, func(a, b hit) int {
		return cmp.Or(a.rank-b.rank, strings.Compare(a.e.Path, b.e.Path))
	})
	out := make([]FileEntry, 0, min(len(hits), q.Limit))
	for _, h := range hits[:min(len(hits), q.Limit)] {
		out = append(out, h.e)
	}
	return out, len(hits) > q.Limit, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
