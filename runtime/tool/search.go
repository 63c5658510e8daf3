package tool

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/trellis-run/trellis/runtime/approval"
)

// Limits of the search tools.
const (
	// MaxGlobResults is the most paths glob returns.
	MaxGlobResults = 1000
	// MaxGrepMatches is the most matching lines grep returns.
	MaxGrepMatches = 200
	// MaxGrepOutput bounds grep's output in bytes.
	MaxGrepOutput = 30 << 10
	// maxGrepFile is the largest file grep searches.
	maxGrepFile = 10 << 20
	// maxGrepLine is how much of a matching line grep shows.
	maxGrepLine = 300
)

var errEnough = errors.New("enough results")

// skippedDirs are version-control directories grep does not descend into.
var skippedDirs = map[string]bool{".git": true, ".hg": true, ".svn": true}

// globArgs are the arguments of glob.
type globArgs struct {
	Pattern string `json:"pattern" jsonschema:"minLength=1" jsonschema_description:"Pattern relative to the workdir, e.g. src/**/*.ts."`
}

// NewGlob returns the `glob` tool.
func NewGlob() Tool {
	return NewFunc("glob", approval.TagRead,
		"Find files in the session's working directory by a doublestar pattern relative to it "+
			"(`*` within a path segment, `**` across directories, `{a,b}` alternatives), e.g. "+
			"`**/*.go`. Symlinked directories are not followed. At most 1000 paths, sorted.",
		glob)
}

func glob(ctx context.Context, call Call, args globArgs) (Result, error) {
	ws, err := openWorkspace(call)
	if err != nil {
		return Failed("%v", err), nil
	}
	defer ws.Close()
	pattern, err := ws.relativePattern(args.Pattern)
	if err != nil {
		return Failed("%v", err), nil
	}
	if !doublestar.ValidatePattern(pattern) {
		return Failed("%q is not a valid glob pattern (check [ ] and { } pairs)", args.Pattern), nil
	}
	var paths []string
	more := false
	skippedHome := ""
	err = doublestar.GlobWalk(ws.root.FS(), pattern, func(p string, d fs.DirEntry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		var info fs.FileInfo
		if !d.IsDir() {
			info, _ = d.Info() // a hard link to a home file is refused by inode
		}
		if home := ws.skipped(p, info); home != "" {
			skippedHome = home
			return nil
		}
		if len(paths) == MaxGlobResults {
			more = true
			return errEnough
		}
		if d.IsDir() {
			p += "/"
		}
		paths = append(paths, p)
		return nil
	}, doublestar.WithNoFollow())
	switch {
	case ctx.Err() != nil:
		return Failed("glob was interrupted"), nil
	case err != nil && !errors.Is(err, errEnough):
		return Failed("glob %q failed: %v", args.Pattern, err), nil
	case len(paths) == 0:
		out := fmt.Sprintf("no files match %s", args.Pattern)
		if skippedHome != "" {
			out += "\n" + skipNote(skippedHome)
		}
		return Result{OK: true, Output: out}, nil
	}
	sort.Strings(paths)
	out := strings.Join(paths, "\n")
	if more {
		out += fmt.Sprintf("\n[more than %d matches; only the first %d found are shown: narrow the pattern]", MaxGlobResults, MaxGlobResults)
	}
	if skippedHome != "" {
		out += "\n" + skipNote(skippedHome)
	}
	return Result{OK: true, Output: out}, nil
}

// relativePattern turns a glob pattern into one relative to the workdir,
// refusing patterns that climb out of it.
func (w *workspace) relativePattern(pattern string) (string, error) {
	p := filepath.ToSlash(pattern)
	if filepath.IsAbs(pattern) {
		for _, dir := range []string{w.shown, w.base} {
			d := filepath.ToSlash(filepath.Clean(dir))
			if rest, ok := strings.CutPrefix(p, d+"/"); ok {
				p = rest
				break
			}
		}
		if strings.HasPrefix(p, "/") {
			return "", &OutsideWorkdirError{Path: pattern, Workdir: w.shown}
		}
	}
	for strings.HasPrefix(p, "./") {
		p = p[2:]
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", &OutsideWorkdirError{Path: pattern, Workdir: w.shown}
		}
	}
	if p == "" || p == "." {
		return "", fmt.Errorf("pattern %q matches only the workdir itself; use list_dir", pattern)
	}
	return p, nil
}

// grepArgs are the arguments of grep.
type grepArgs struct {
	Pattern string `json:"pattern" jsonschema:"minLength=1" jsonschema_description:"Go regular expression."`
	Path    string `json:"path,omitempty" jsonschema_description:"File or directory to search (default \".\")."`
	Glob    string `json:"glob,omitempty" jsonschema_description:"Only search files matching this pattern."`
}

// NewGrep returns the `grep` tool.
func NewGrep() Tool {
	return NewFunc("grep", approval.TagRead,
		"Search file contents in the session's working directory with a Go regular expression "+
			"(RE2 syntax; (?i) for case-insensitive). path is a file or directory (default the "+
			"workdir); glob filters files (`*.go` matches names, `src/**/*.go` paths). Binary files, "+
			"files over 10 MiB and .git are skipped. Returns path:line: text, at most 200 lines.",
		grep)
}

func grep(ctx context.Context, call Call, args grepArgs) (Result, error) {
	re, err := regexp.Compile(args.Pattern)
	if err != nil {
		return Failed("invalid regular expression: %v", err), nil
	}
	if args.Glob != "" && !doublestar.ValidatePattern(args.Glob) {
		return Failed("%q is not a valid glob pattern", args.Glob), nil
	}
	if args.Path == "" {
		args.Path = "."
	}
	ws, name, disp, err := openPath(call, args.Path)
	if err != nil {
		return Failed("%v", err), nil
	}
	defer ws.Close()
	if _, err := ws.root.Stat(name); errors.Is(err, fs.ErrNotExist) {
		return Failed("%s does not exist", disp), nil
	}
	g := &grepper{ws: ws, re: re, glob: args.Glob}
	fsys := ws.root.FS()
	err = fs.WalkDir(fsys, filepath.ToSlash(name), func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			return nil // unreadable entries are skipped
		}
		if d.IsDir() {
			if home := ws.skipped(p, nil); home != "" {
				g.skippedHome = home
				return fs.SkipDir
			}
			if p != filepath.ToSlash(name) && skippedDirs[d.Name()] {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !g.wanted(p) {
			return nil // symlinks, devices, fifos, filtered out
		}
		if info, err := d.Info(); err != nil {
			return nil
		} else if home := ws.skipped(p, info); home != "" {
			g.skippedHome = home // a hard link to one of the home's files
			return nil
		}
		return g.file(fsys, p)
	})
	switch {
	case ctx.Err() != nil:
		return Failed("grep was interrupted"), nil
	case err != nil && !errors.Is(err, errEnough):
		return Failed("grep failed: %v", err), nil
	case g.matches == 0:
		out := fmt.Sprintf("no matches for %s in %s", args.Pattern, disp)
		if g.skippedHome != "" {
			out += "\n" + skipNote(g.skippedHome)
		}
		return Result{OK: true, Output: out}, nil
	}
	out := g.out.String()
	if errors.Is(err, errEnough) {
		out += fmt.Sprintf("[stopped after %d matching lines; narrow the pattern, path or glob]", g.matches)
	} else {
		out += fmt.Sprintf("[%d matching lines in %d files]", g.matches, g.files)
	}
	if g.skippedHome != "" {
		out += "\n" + skipNote(g.skippedHome)
	}
	return Result{OK: true, Output: out}, nil
}

type grepper struct {
	ws          *workspace
	skippedHome string // set when the walk left the daemon's home out
	re          *regexp.Regexp
	glob        string
	out         strings.Builder
	matches     int
	files       int
}

// wanted applies the glob filter: to the base name when the glob has no
// slash, else to the whole workdir-relative path.
func (g *grepper) wanted(p string) bool {
	if g.glob == "" {
		return true
	}
	if !strings.Contains(g.glob, "/") {
		return doublestar.MatchUnvalidated(g.glob, filepath.Base(p))
	}
	return doublestar.MatchUnvalidated(g.glob, p)
}

// file searches one file, returning errEnough once the limits are reached.
func (g *grepper) file(fsys fs.FS, p string) error {
	f, err := fsys.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() > maxGrepFile {
		return nil
	}
	br := bufio.NewReaderSize(f, 64<<10)
	if sample, _ := br.Peek(sniffBytes); isBinary(sample) {
		return nil
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	found := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if !g.re.Match(line) {
			continue
		}
		if !found {
			found = true
			g.files++
		}
		text := string(line)
		if len(line) > maxGrepLine {
			text = string(line[:completeRunes(line[:maxGrepLine])]) + "…"
		}
		entry := fmt.Sprintf("%s:%d: %s\n", p, n, strings.ToValidUTF8(text, "\uFFFD"))
		if g.out.Len()+len(entry) > MaxGrepOutput {
			return errEnough
		}
		g.out.WriteString(entry)
		g.matches++
		if g.matches == MaxGrepMatches {
			return errEnough
		}
	}
	return nil // a line over 1 MiB ends the file's search
}
