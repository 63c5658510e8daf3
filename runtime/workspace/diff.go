package workspace

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/pmezard/go-difflib/difflib"
)

// MaxDiffBytes bounds the files Diff renders line by line (the diff is
// quadratic in the worst case); a larger change is named, not shown.
const MaxDiffBytes = 2 << 20

// Change statuses.
const (
	StatusAdded    = "added"
	StatusDeleted  = "deleted"
	StatusModified = "modified"
)

// Change is one path that differs between two states.
type Change struct {
	Path   string `json:"path"`
	Status string `json:"status"`
	// Kind is the path's kind after the change (before it, for a deleted
	// path).
	Kind string `json:"kind"`
	// Patch is the path's unified diff in git's form; empty for a
	// directory.
	Patch string `json:"patch"`
}

// Side is one state Diff compares: a manifest and where its contents are
// read from.
type Side struct {
	Manifest Manifest
	// Read returns the content of a file entry of Manifest.
	Read func(ctx context.Context, e Entry) ([]byte, error)
}

// StoredSide is a manifest whose contents are in blobs.
func StoredSide(m Manifest, blobs Blobs) Side {
	return Side{Manifest: m, Read: func(ctx context.Context, e Entry) ([]byte, error) {
		return ReadAll(ctx, blobs, e.SHA256)
	}}
}

// DirSide is a manifest of root (Snapshot's) whose contents are read from
// root.
func DirSide(m Manifest, root string) Side {
	return Side{Manifest: m, Read: func(_ context.Context, e Entry) ([]byte, error) {
		return os.ReadFile(filepath.Join(root, filepath.FromSlash(e.Path)))
	}}
}

// Diff returns the paths that differ from from to to, sorted, each with its
// patch. Paths that either side skipped are compared only by what the
// other side recorded.
func Diff(ctx context.Context, from, to Side) ([]Change, error) {
	var out []Change
	a, b := from.Manifest.Entries, to.Manifest.Entries
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ea, eb *Entry
		switch {
		case j >= len(b) || (i < len(a) && a[i].Path < b[j].Path):
			ea = &a[i]
			i++
		case i >= len(a) || b[j].Path < a[i].Path:
			eb = &b[j]
			j++
		default:
			ea, eb = &a[i], &b[j]
			i++
			j++
		}
		c, changed, err := diffEntry(ctx, from, to, ea, eb)
		if err != nil {
			return nil, err
		}
		if changed {
			out = append(out, c)
		}
	}
	return out, nil
}

// Unified joins the changes' patches into one unified diff.
func Unified(changes []Change) string {
	var sb strings.Builder
	for _, c := range changes {
		sb.WriteString(c.Patch)
	}
	return sb.String()
}

func diffEntry(ctx context.Context, from, to Side, ea, eb *Entry) (Change, bool, error) {
	switch {
	case ea == nil:
		c := Change{Path: eb.Path, Status: StatusAdded, Kind: eb.Kind}
		body, err := content(ctx, to, eb)
		if err != nil {
			return c, false, err
		}
		if eb.Kind != KindDir {
			c.Patch = patch(eb.Path, nil, eb, nil, body)
		}
		return c, true, nil
	case eb == nil:
		c := Change{Path: ea.Path, Status: StatusDeleted, Kind: ea.Kind}
		body, err := content(ctx, from, ea)
		if err != nil {
			return c, false, err
		}
		if ea.Kind != KindDir {
			c.Patch = patch(ea.Path, ea, nil, body, nil)
		}
		return c, true, nil
	}
	if ea.Kind == eb.Kind && ea.Mode == eb.Mode && ea.SHA256 == eb.SHA256 && ea.Target == eb.Target {
		return Change{}, false, nil
	}
	c := Change{Path: eb.Path, Status: StatusModified, Kind: eb.Kind}
	if ea.Kind == KindDir && eb.Kind == KindDir {
		return c, true, nil
	}
	before, err := content(ctx, from, ea)
	if err != nil {
		return c, false, err
	}
	after, err := content(ctx, to, eb)
	if err != nil {
		return c, false, err
	}
	c.Patch = patch(eb.Path, ea, eb, before, after)
	return c, true, nil
}

// content is what a patch shows of e: a file's bytes, a symlink's target.
func content(ctx context.Context, s Side, e *Entry) ([]byte, error) {
	switch e.Kind {
	case KindSymlink:
		return []byte(e.Target), nil
	case KindFile:
		b, err := s.Read(ctx, *e)
		if err != nil {
			return nil, fmt.Errorf("workspace: read %s: %w", e.Path, err)
		}
		return b, nil
	}
	return nil, nil
}

// gitMode is the mode git shows for e.
func gitMode(e *Entry) string {
	switch {
	case e.Kind == KindSymlink:
		return "120000"
	case e.Kind == KindDir:
		return "040000"
	case e.Mode&0o111 != 0:
		return "100755"
	}
	return "100644"
}

// patch renders one path's change in git's unified form: a nil entry is
// the side where the path does not exist (or is a directory).
func patch(p string, ea, eb *Entry, before, after []byte) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "diff --git a/%s b/%s\n", p, p)
	if ea != nil && ea.Kind == KindDir {
		ea, before = nil, nil
	}
	if eb != nil && eb.Kind == KindDir {
		eb, after = nil, nil
	}
	from, to := "a/"+p, "b/"+p
	switch {
	case ea == nil && eb == nil:
		return sb.String()
	case ea == nil:
		fmt.Fprintf(&sb, "new file mode %s\n", gitMode(eb))
		from = "/dev/null"
	case eb == nil:
		fmt.Fprintf(&sb, "deleted file mode %s\n", gitMode(ea))
		to = "/dev/null"
	case gitMode(ea) != gitMode(eb):
		fmt.Fprintf(&sb, "old mode %s\nnew mode %s\n", gitMode(ea), gitMode(eb))
	}
	if bytes.Equal(before, after) {
		return sb.String()
	}
	if binary(before) || binary(after) {
		fmt.Fprintf(&sb, "Binary files %s and %s differ\n", from, to)
		return sb.String()
	}
	if len(before) > MaxDiffBytes || len(after) > MaxDiffBytes {
		fmt.Fprintf(&sb, "--- %s\n+++ %s\n@@ the file is too large to show a diff @@\n", from, to)
		return sb.String()
	}
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(before), B: lines(after), FromFile: from, ToFile: to, Context: 3,
	})
	if err != nil { // difflib fails only writing to its buffer
		fmt.Fprintf(&sb, "--- %s\n+++ %s\n@@ the diff could not be rendered @@\n", from, to)
		return sb.String()
	}
	sb.WriteString(text)
	return sb.String()
}

// binary reports whether b is not text: it holds a NUL byte in its first
// 8000 bytes (git's rule) or is not UTF-8.
func binary(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 || !utf8.Valid(b)
}

// lines splits s into lines that keep their "\n"; a last line without one
// carries git's "\ No newline at end of file" marker.
func lines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	out := strings.SplitAfter(string(b), "\n")
	if out[len(out)-1] == "" {
		return out[:len(out)-1]
	}
	out[len(out)-1] += "\n\\ No newline at end of file\n"
	return out
}
