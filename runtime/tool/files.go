package tool

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/trellis-run/trellis/runtime/approval"
)

// Limits of the file tools.
const (
	// MaxReadBytes is the most read_file returns in one call.
	MaxReadBytes = 100 << 10
	// DefaultReadLines is read_file's default limit.
	DefaultReadLines = 2000
	// MaxEditBytes is the largest file edit_file changes.
	MaxEditBytes = 10 << 20
	// MaxListEntries is the most entries list_dir shows.
	MaxListEntries = 1000
	// sniffBytes is how much of a file decides whether it is text.
	sniffBytes = 8 << 10
)

// decodeArgs decodes arguments that already passed the tool's schema.
func decodeArgs(tool string, call Call, v any) error {
	if err := json.Unmarshal(call.Args, v); err != nil {
		return fmt.Errorf("%s: decode validated args: %w", tool, err)
	}
	return nil
}

// isBinary reports whether the start of a file looks like binary data: a
// NUL byte or invalid UTF-8 (a rune cut at the end of the sample is fine).
func isBinary(sample []byte) bool {
	if bytes.IndexByte(sample, 0) >= 0 {
		return true
	}
	return !utf8.Valid(sample[:completeRunes(sample)])
}

// readFileArgs are the arguments of read_file.
type readFileArgs struct {
	Path   string  `json:"path" jsonschema:"minLength=1" jsonschema_description:"File path, relative to the workdir or absolute inside it."`
	Offset float64 `json:"offset,omitempty" jsonschema:"type=integer,minimum=1" jsonschema_description:"First line to return (1-based)."`
	Limit  float64 `json:"limit,omitempty" jsonschema:"type=integer,minimum=1,maximum=100000" jsonschema_description:"Number of lines to return (default 2000)."`
}

// NewReadFile returns the `read_file` tool.
func NewReadFile() Tool {
	return NewFunc("read_file", approval.TagRead,
		"Read a text file in the session's working directory. offset is the first line "+
			"(1-based, default 1) and limit the number of lines (default 2000); at most 100 KiB "+
			"is returned per call, with a note saying where to continue. Binary files are refused.",
		readFile)
}

func readFile(ctx context.Context, call Call, args readFileArgs) (Result, error) {
	offset, limit := max(int(args.Offset), 1), int(args.Limit)
	if limit == 0 {
		limit = DefaultReadLines
	}
	ws, name, disp, err := openPath(call, args.Path)
	if err != nil {
		return Failed("%v", err), nil
	}
	defer ws.Close()
	fi, err := ws.root.Stat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Failed("%s does not exist", disp), nil
	case err != nil:
		return Failed("%s cannot be read: %v", disp, err), nil
	case fi.IsDir():
		return Failed("%s is a directory; use list_dir to see what it holds", disp), nil
	case !fi.Mode().IsRegular():
		return Failed("%s is not a regular file", disp), nil
	}
	f, err := ws.root.Open(name)
	if err != nil {
		return Failed("%s cannot be read: %v", disp, err), nil
	}
	defer f.Close()

	br := bufio.NewReaderSize(f, 64<<10)
	sample, _ := br.Peek(sniffBytes)
	if isBinary(sample) {
		return Failed("%s is a binary file (%s, %d bytes); read_file shows text only",
			disp, http.DetectContentType(sample), fi.Size()), nil
	}

	var out bytes.Buffer
	line, last := 1, offset+limit-1
	endsInNewline := true
	var note string
	for line <= last {
		chunk, err := br.ReadSlice('\n')
		if line >= offset && len(chunk) > 0 {
			if room := MaxReadBytes - out.Len(); len(chunk) > room {
				out.Write(chunk[:completeRunes(chunk[:room])])
				note = fmt.Sprintf("[cut at %d KiB inside line %d; call read_file with offset=%d and a smaller limit to read on]",
					MaxReadBytes>>10, line, line)
				break
			}
			out.Write(chunk)
		}
		if len(chunk) > 0 {
			endsInNewline = chunk[len(chunk)-1] == '\n'
			if endsInNewline {
				line++
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return Failed("reading %s failed: %v", disp, err), nil
		}
		if line%4096 == 0 && ctx.Err() != nil {
			return Failed("read_file was interrupted"), nil
		}
	}
	if note == "" && line > last {
		if _, err := br.Peek(1); err == nil {
			note = fmt.Sprintf("[showing lines %d-%d; the file goes on: call read_file with offset=%d to read on]",
				offset, last, last+1)
		}
	}
	if note == "" && out.Len() == 0 {
		if fi.Size() == 0 {
			return Result{OK: true, Output: "(empty file)"}, nil
		}
		lines := line - 1
		if !endsInNewline {
			lines++
		}
		return Result{OK: true, Output: fmt.Sprintf("(offset %d is past the end: %s has %d lines)", offset, disp, lines)}, nil
	}
	text := out.String()
	if note != "" {
		if !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		text += note
	}
	return Result{OK: true, Output: text}, nil
}

// listDirArgs are the arguments of list_dir.
type listDirArgs struct {
	Path string `json:"path,omitempty" jsonschema_description:"Directory, relative to the workdir or absolute inside it (default \".\")."`
}

// NewListDir returns the `list_dir` tool.
func NewListDir() Tool {
	return NewFunc("list_dir", approval.TagRead,
		"List a directory of the session's working directory (default: the workdir itself): "+
			"directories end with /, symlinks show their target, files their size.",
		listDir)
}

func listDir(ctx context.Context, call Call, args listDirArgs) (Result, error) {
	if args.Path == "" {
		args.Path = "."
	}
	ws, name, disp, err := openPath(call, args.Path)
	if err != nil {
		return Failed("%v", err), nil
	}
	defer ws.Close()
	f, err := ws.root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return Failed("%s does not exist", disp), nil
	} else if err != nil {
		return Failed("%s cannot be listed: %v", disp, err), nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.IsDir() {
		return Failed("%s is not a directory; use read_file to read it", disp), nil
	}
	entries, err := f.ReadDir(-1)
	if err != nil {
		return Failed("%s cannot be listed: %v", disp, err), nil
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	var b strings.Builder
	fmt.Fprintf(&b, "%s/ (%d entries)\n", disp, len(entries))
	for i, e := range entries {
		if i == MaxListEntries {
			fmt.Fprintf(&b, "[%d more entries not shown; use glob to narrow down]\n", len(entries)-i)
			break
		}
		info, _ := e.Info()
		if home := ws.skipped(filepath.ToSlash(filepath.Join(name, e.Name())), info); home != "" {
			fmt.Fprintf(&b, "%s [off limits: the daemon's home directory or one of its files; tools can never read it]\n", e.Name())
			continue
		}
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			target, _ := ws.root.Readlink(filepath.Join(name, e.Name()))
			fmt.Fprintf(&b, "%s -> %s\n", e.Name(), target)
		case e.IsDir():
			fmt.Fprintf(&b, "%s/\n", e.Name())
		default:
			size := int64(-1)
			if info != nil {
				size = info.Size()
			}
			fmt.Fprintf(&b, "%s (%d bytes)\n", e.Name(), size)
		}
	}
	return Result{OK: true, Output: strings.TrimSuffix(b.String(), "\n")}, nil
}
