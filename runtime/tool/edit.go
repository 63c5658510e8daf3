package tool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/trellis-run/trellis/runtime/approval"
)

// maxDiffBytes bounds the files diffed for a diff event (difflib is
// quadratic in the worst case); larger changes get an empty patch.
const maxDiffBytes = 2 << 20

// writeFileArgs are the arguments of write_file.
type writeFileArgs struct {
	Path    string `json:"path" jsonschema:"minLength=1" jsonschema_description:"File path, relative to the workdir or absolute inside it."`
	Content string `json:"content" jsonschema_description:"The whole new content of the file."`
}

// NewWriteFile returns the `write_file` tool.
func NewWriteFile() Tool {
	return NewFunc("write_file", approval.TagWrite,
		"Create or overwrite a file in the session's working directory with content, "+
			"creating missing parent directories. Returns a summary; the change is shown as a diff.",
		writeFile)
}

func writeFile(ctx context.Context, call Call, args writeFileArgs) (Result, error) {
	ws, name, disp, err := openPath(call, args.Path)
	if err != nil {
		return Failed("%v", err), nil
	}
	defer ws.Close()
	var before string
	perm := fs.FileMode(0o644)
	created := false
	fi, err := ws.root.Stat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		created = true
	case err != nil:
		return Failed("%s cannot be written: %v", disp, err), nil
	case fi.IsDir():
		return Failed("%s is a directory", disp), nil
	case !fi.Mode().IsRegular():
		return Failed("%s is not a regular file", disp), nil
	default:
		perm = fi.Mode().Perm()
		if fi.Size() <= maxDiffBytes {
			b, err := ws.root.ReadFile(name)
			if err != nil {
				return Failed("%s cannot be read: %v", disp, err), nil
			}
			before = string(b)
		}
	}
	if dir := filepath.Dir(name); dir != "." {
		if err := ws.root.MkdirAll(dir, 0o755); err != nil {
			return Failed("the directories of %s cannot be created: %v", disp, err), nil
		}
	}
	if err := ws.root.WriteFile(name, []byte(args.Content), perm); err != nil {
		return Failed("%s cannot be written: %v", disp, err), nil
	}
	d := fileDiff(disp, before, args.Content, created, !created && fi.Size() > maxDiffBytes)
	verb := "updated"
	if created {
		verb = "created"
	}
	return Result{
		OK:     true,
		Output: fmt.Sprintf("%s %s (%d bytes)%s", verb, disp, len(args.Content), d.summary()),
		Diffs:  []Diff{d.Diff},
	}, nil
}

// editFileArgs are the arguments of edit_file.
type editFileArgs struct {
	Path       string `json:"path" jsonschema:"minLength=1" jsonschema_description:"File path, relative to the workdir or absolute inside it."`
	Old        string `json:"old" jsonschema:"minLength=1" jsonschema_description:"The exact text to replace."`
	New        string `json:"new" jsonschema_description:"The replacement text."`
	ReplaceAll bool   `json:"replaceAll,omitempty" jsonschema_description:"Replace every occurrence instead of requiring exactly one."`
}

// NewEditFile returns the `edit_file` tool.
func NewEditFile() Tool {
	return NewFunc("edit_file", approval.TagWrite,
		"Replace exact text in a file of the session's working directory: old must occur "+
			"exactly once (whitespace included) unless replaceAll is true. Read the file first and "+
			"copy old from it. The change is shown as a diff.",
		editFile)
}

func editFile(ctx context.Context, call Call, args editFileArgs) (Result, error) {
	ws, name, disp, err := openPath(call, args.Path)
	if err != nil {
		return Failed("%v", err), nil
	}
	defer ws.Close()
	fi, err := ws.root.Stat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Failed("%s does not exist; use write_file to create it", disp), nil
	case err != nil:
		return Failed("%s cannot be read: %v", disp, err), nil
	case fi.IsDir():
		return Failed("%s is a directory", disp), nil
	case !fi.Mode().IsRegular():
		return Failed("%s is not a regular file", disp), nil
	case fi.Size() > MaxEditBytes:
		return Failed("%s is %d bytes, larger than edit_file handles (%d); use the shell", disp, fi.Size(), MaxEditBytes), nil
	}
	b, err := ws.root.ReadFile(name)
	if err != nil {
		return Failed("%s cannot be read: %v", disp, err), nil
	}
	if isBinary(b[:min(len(b), sniffBytes)]) {
		return Failed("%s is a binary file; edit_file changes text only", disp), nil
	}
	before := string(b)
	if args.Old == args.New {
		return Failed("old and new are the same; nothing would change"), nil
	}
	n := strings.Count(before, args.Old)
	switch {
	case n == 0:
		return Failed("the old text was not found in %s; read the file again and copy the text exactly, whitespace included", disp), nil
	case n > 1 && !args.ReplaceAll:
		return Failed("the old text occurs %d times in %s; include more surrounding lines to make it unique, or set replaceAll", n, disp), nil
	}
	after := strings.Replace(before, args.Old, args.New, -1)
	if err := ws.root.WriteFile(name, []byte(after), fi.Mode().Perm()); err != nil {
		return Failed("%s cannot be written: %v", disp, err), nil
	}
	d := fileDiff(disp, before, after, false, len(before)+len(after) > 2*maxDiffBytes)
	return Result{
		OK:     true,
		Output: fmt.Sprintf("edited %s: replaced %d occurrence(s)%s", disp, n, d.summary()),
		Diffs:  []Diff{d.Diff},
	}, nil
}

// diffStat is a Diff with its line counts.
type diffStat struct {
	Diff
	added, removed int
	tooLarge       bool
}

func (d diffStat) summary() string {
	if d.tooLarge {
		return "; the file is too large to show a diff"
	}
	return fmt.Sprintf("; +%d -%d lines", d.added, d.removed)
}

// fileDiff returns the unified diff of one file from before to after
// (paths a/<disp> and b/<disp>, /dev/null for a created file). A file too
// large to diff gets an empty patch.
func fileDiff(disp, before, after string, created, tooLarge bool) diffStat {
	d := diffStat{Diff: Diff{Path: disp}}
	if tooLarge || len(after) > maxDiffBytes {
		d.tooLarge = true
		return d
	}
	from := "a/" + disp
	if created {
		from = "/dev/null"
	}
	patch, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A:        splitLines(before),
		B:        splitLines(after),
		FromFile: from,
		ToFile:   "b/" + disp,
		Context:  3,
	})
	if err != nil { // difflib only fails writing to its buffer
		d.tooLarge = true
		return d
	}
	d.Patch = patch
	for _, l := range strings.Split(patch, "\n") {
		switch {
		case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
		case strings.HasPrefix(l, "+"):
			d.added++
		case strings.HasPrefix(l, "-"):
			d.removed++
		}
	}
	return d
}

// splitLines splits s into lines that keep their "\n". A last line
// without one carries git's "\ No newline at end of file" marker, so that
// adding or removing the final newline shows in the patch.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if last := lines[len(lines)-1]; last == "" {
		lines = lines[:len(lines)-1]
	} else {
		lines[len(lines)-1] = last + "\n\\ No newline at end of file\n"
	}
	return lines
}
