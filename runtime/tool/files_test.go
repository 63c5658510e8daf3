package tool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
)

const outsideMsg = "is outside the session's workdir"

func TestReadFile(t *testing.T) {
	runToolCases(t, "read_file", []toolCase{
		{name: "whole file", args: `{"path":"a.txt"}`, ok: true, check: func(t *testing.T, _ fixture, r Result) {
			if r.Output != "hello\nworld\n" {
				t.Errorf("output %q", r.Output)
			}
		}},
		{name: "offset", args: `{"path":"a.txt","offset":2}`, ok: true, check: func(t *testing.T, _ fixture, r Result) {
			if r.Output != "world\n" {
				t.Errorf("output %q", r.Output)
			}
		}},
		{name: "limit says where to go on", args: `{"path":"a.txt","limit":1}`, ok: true,
			want: []string{"hello\n", "lines 1-1", "offset=2"}},
		{name: "offset as 2.0", args: `{"path":"a.txt","offset":2.0}`, ok: true, want: []string{"world"}},
		{name: "past the end", args: `{"path":"a.txt","offset":10}`, ok: true, want: []string{"past the end", "has 2 lines"}},
		{name: "past the end, no final newline", args: `{"path":"nonl.txt","offset":5}`, ok: true, want: []string{"has 1 lines"}},
		{name: "via symlink inside", args: `{"path":"link_in/b.txt"}`, ok: true, want: []string{"bee"}},
		{name: "binary", args: `{"path":"bin.dat"}`, want: []string{"bin.dat is a binary file"}},
		{name: "directory", args: `{"path":"sub"}`, want: []string{"is a directory; use list_dir"}},
		{name: "missing", args: `{"path":"nope.txt"}`, want: []string{"nope.txt does not exist"}},
		{name: "climbing out", args: `{"path":"../../etc/passwd"}`, want: []string{"path ../../etc/passwd " + outsideMsg}},
		{name: "absolute outside", args: `{"path":"/etc/passwd"}`, want: []string{outsideMsg}},
		{name: "symlink to a file outside", args: `{"path":"link_file_out"}`, want: []string{outsideMsg}},
		{name: "symlinked dir outside", args: `{"path":"link_out/secret.txt"}`, want: []string{outsideMsg}},
		{name: "no path", args: `{}`, code: errcode.InvalidParams, want: []string{"read_file", "path"}},
		{name: "unknown field", args: `{"path":"a.txt","lines":3}`, code: errcode.InvalidParams, want: []string{"lines"}},
		{name: "offset zero", args: `{"path":"a.txt","offset":0}`, code: errcode.InvalidParams, want: []string{"offset"}},
		{name: "path not a string", args: `{"path":5}`, code: errcode.InvalidParams, want: []string{"path"}},
	})
}

func TestReadFileCapsOutput(t *testing.T) {
	fx := newFixture(t)
	line := strings.Repeat("x", 999) + "\n"
	if err := os.WriteFile(filepath.Join(fx.wd, "big.txt"), []byte(strings.Repeat(line, 300)), 0o644); err != nil {
		t.Fatal(err)
	}
	res := mustRun(t, "read_file", `{"path":"big.txt"}`, fx.wd)
	if !res.OK || len(res.Output) > MaxReadBytes+200 || !strings.Contains(res.Output, "call read_file with offset=103") {
		t.Errorf("OK %v, %d bytes, tail %q", res.OK, len(res.Output), res.Output[len(res.Output)-120:])
	}
}

func TestListDir(t *testing.T) {
	runToolCases(t, "list_dir", []toolCase{
		{name: "workdir", args: `{}`, ok: true, want: []string{
			"./ (", "a.txt (12 bytes)", "sub/", "link_in -> sub", ".git/",
		}},
		{name: "subdir", args: `{"path":"sub"}`, ok: true, want: []string{"sub/ (2 entries)", "b.txt (4 bytes)", "deep/"}},
		{name: "via symlink inside", args: `{"path":"link_in"}`, ok: true, want: []string{"sub/ (2 entries)"}},
		{name: "a file", args: `{"path":"a.txt"}`, want: []string{"not a directory"}},
		{name: "missing", args: `{"path":"nope"}`, want: []string{"does not exist"}},
		{name: "symlinked dir outside", args: `{"path":"link_out"}`, want: []string{outsideMsg}},
		{name: "parent", args: `{"path":".."}`, want: []string{outsideMsg}},
		{name: "bad type", args: `{"path":true}`, code: errcode.InvalidParams, want: []string{"path"}},
	})
}

func TestGlob(t *testing.T) {
	runToolCases(t, "glob", []toolCase{
		{name: "doublestar", args: `{"pattern":"**/*.go"}`, ok: true, check: func(t *testing.T, _ fixture, r Result) {
			if r.Output != "sub/deep/c.go" {
				t.Errorf("output %q (symlinked dirs must not be followed)", r.Output)
			}
		}},
		{name: "no secrets through symlinks", args: `{"pattern":"**/*.txt"}`, ok: true, check: func(t *testing.T, _ fixture, r Result) {
			if r.Output != "a.txt\nnonl.txt\nsub/b.txt" {
				t.Errorf("output %q", r.Output)
			}
		}},
		{name: "dirs end with slash", args: `{"pattern":"s*"}`, ok: true, want: []string{"sub/"}},
		{name: "leading ./", args: `{"pattern":"./sub/*.txt"}`, ok: true, want: []string{"sub/b.txt"}},
		{name: "no match", args: `{"pattern":"*.rs"}`, ok: true, want: []string{"no files match *.rs"}},
		{name: "climbing out", args: `{"pattern":"../*"}`, want: []string{outsideMsg}},
		{name: "climbing out midway", args: `{"pattern":"sub/../../outside/*"}`, want: []string{outsideMsg}},
		{name: "absolute outside", args: `{"pattern":"/etc/*"}`, want: []string{outsideMsg}},
		{name: "bad pattern", args: `{"pattern":"[a"}`, want: []string{"not a valid glob pattern"}},
		{name: "empty pattern", args: `{"pattern":""}`, code: errcode.InvalidParams, want: []string{"pattern"}},
	})
	fx := newFixture(t)
	if res := mustRun(t, "glob", `{"pattern":"`+fx.wd+`/sub/*.txt"}`, fx.wd); res.Output != "sub/b.txt" {
		t.Errorf("absolute pattern inside the workdir: %+v", res)
	}
}

func TestGrep(t *testing.T) {
	runToolCases(t, "grep", []toolCase{
		{name: "workdir", args: `{"pattern":"hel+o"}`, ok: true, check: func(t *testing.T, _ fixture, r Result) {
			if r.Output != "a.txt:1: hello\n[1 matching lines in 1 files]" {
				t.Errorf("output %q", r.Output)
			}
		}},
		{name: "case-insensitive in a dir", args: `{"pattern":"(?i)BEE","path":"sub"}`, ok: true, want: []string{"sub/b.txt:1: bee"}},
		{name: "one file", args: `{"pattern":"world","path":"a.txt"}`, ok: true, want: []string{"a.txt:2: world"}},
		{name: "glob on names", args: `{"pattern":"func","glob":"*.go"}`, ok: true, want: []string{"sub/deep/c.go:3: func C() {}"}},
		{name: "glob on paths", args: `{"pattern":"e","glob":"sub/**/*.txt"}`, ok: true, check: func(t *testing.T, _ fixture, r Result) {
			if !strings.HasPrefix(r.Output, "sub/b.txt:1: bee\n") || strings.Contains(r.Output, "a.txt") {
				t.Errorf("output %q", r.Output)
			}
		}},
		{name: "never through symlinks outside", args: `{"pattern":"secret"}`, ok: true, want: []string{"no matches"}},
		{name: ".git skipped", args: `{"pattern":"refs/heads"}`, ok: true, want: []string{"no matches"}},
		{name: "binary skipped", args: `{"pattern":"binary"}`, ok: true, want: []string{"no matches"}},
		{name: "bad regexp", args: `{"pattern":"("}`, want: []string{"invalid regular expression"}},
		{name: "bad glob", args: `{"pattern":"x","glob":"[x"}`, want: []string{"not a valid glob"}},
		{name: "path outside", args: `{"pattern":"x","path":"link_out"}`, want: []string{outsideMsg}},
		{name: "missing path", args: `{"pattern":"x","path":"nope"}`, want: []string{"does not exist"}},
		{name: "no pattern", args: `{"path":"."}`, code: errcode.InvalidParams, want: []string{"pattern"}},
	})
}

func TestGrepBoundsResults(t *testing.T) {
	fx := newFixture(t)
	if err := os.WriteFile(filepath.Join(fx.wd, "many.txt"), []byte(strings.Repeat("match me\n", 1000)), 0o644); err != nil {
		t.Fatal(err)
	}
	res := mustRun(t, "grep", `{"pattern":"match"}`, fx.wd)
	if got := strings.Count(res.Output, "many.txt:"); got != MaxGrepMatches || !strings.Contains(res.Output, "stopped after 200") {
		t.Errorf("%d matches shown, output tail %q", got, res.Output[len(res.Output)-80:])
	}
}

func TestWriteFile(t *testing.T) {
	runToolCases(t, "write_file", []toolCase{
		{name: "new file in new dirs", args: `{"path":"new/dir/f.txt","content":"x\n"}`, ok: true,
			want: []string{"created new/dir/f.txt (2 bytes); +1 -0 lines"},
			check: func(t *testing.T, fx fixture, r Result) {
				assertFile(t, filepath.Join(fx.wd, "new/dir/f.txt"), "x\n")
				assertDiff(t, r, "new/dir/f.txt", "--- /dev/null", "+++ b/new/dir/f.txt", "+x")
			}},
		{name: "overwrite", args: `{"path":"a.txt","content":"hello\nthere\n"}`, ok: true,
			want: []string{"updated a.txt", "+1 -1 lines"},
			check: func(t *testing.T, fx fixture, r Result) {
				assertFile(t, filepath.Join(fx.wd, "a.txt"), "hello\nthere\n")
				assertDiff(t, r, "a.txt", "--- a/a.txt", "+++ b/a.txt", "-world", "+there", " hello")
			}},
		{name: "new file under a symlinked dir inside", args: `{"path":"link_in/new.txt","content":"n"}`, ok: true,
			check: func(t *testing.T, fx fixture, r Result) {
				assertFile(t, filepath.Join(fx.wd, "sub/new.txt"), "n")
				assertDiff(t, r, "sub/new.txt", `\ No newline at end of file`)
			}},
		{name: "empty content", args: `{"path":"empty","content":""}`, ok: true, want: []string{"created empty (0 bytes)"}},
		{name: "new file under a symlinked dir outside", args: `{"path":"link_out/new.txt","content":"pwned"}`, want: []string{outsideMsg}},
		{name: "new dirs under a symlinked dir outside", args: `{"path":"link_out_rel/x/y.txt","content":"pwned"}`, want: []string{outsideMsg}},
		{name: "dangling symlink outside", args: `{"path":"dangling_out","content":"pwned"}`, want: []string{outsideMsg}},
		{name: "symlink to a file outside", args: `{"path":"link_file_out","content":"pwned"}`, want: []string{outsideMsg}},
		{name: "climbing out", args: `{"path":"../outside/x","content":"pwned"}`, want: []string{outsideMsg}},
		{name: "a directory", args: `{"path":"sub","content":"x"}`, want: []string{"sub is a directory"}},
		{name: "no content", args: `{"path":"x"}`, code: errcode.InvalidParams, want: []string{"content"}},
	})
}

func TestEditFile(t *testing.T) {
	runToolCases(t, "edit_file", []toolCase{
		{name: "unique", args: `{"path":"a.txt","old":"world","new":"there"}`, ok: true,
			want: []string{"edited a.txt: replaced 1 occurrence(s); +1 -1 lines"},
			check: func(t *testing.T, fx fixture, r Result) {
				assertFile(t, filepath.Join(fx.wd, "a.txt"), "hello\nthere\n")
				assertDiff(t, r, "a.txt", "@@ -1,2 +1,2 @@", "-world", "+there")
			}},
		{name: "ambiguous", args: `{"path":"a.txt","old":"l","new":"L"}`,
			want: []string{"occurs 3 times in a.txt", "replaceAll"},
			check: func(t *testing.T, fx fixture, r Result) {
				assertFile(t, filepath.Join(fx.wd, "a.txt"), "hello\nworld\n")
			}},
		{name: "replace all", args: `{"path":"a.txt","old":"l","new":"L","replaceAll":true}`, ok: true,
			want: []string{"replaced 3 occurrence(s)"},
			check: func(t *testing.T, fx fixture, r Result) {
				assertFile(t, filepath.Join(fx.wd, "a.txt"), "heLLo\nworLd\n")
			}},
		{name: "adds the final newline", args: `{"path":"nonl.txt","old":"newline","new":"newline\n"}`, ok: true,
			check: func(t *testing.T, fx fixture, r Result) {
				assertDiff(t, r, "nonl.txt", "-no newline\n\\ No newline at end of file\n+no newline\n")
			}},
		{name: "not found", args: `{"path":"a.txt","old":"nope","new":"x"}`, want: []string{"not found in a.txt"}},
		{name: "same text", args: `{"path":"a.txt","old":"world","new":"world"}`, want: []string{"nothing would change"}},
		{name: "binary", args: `{"path":"bin.dat","old":"binary","new":"x"}`, want: []string{"binary file"}},
		{name: "missing", args: `{"path":"nope.txt","old":"a","new":"b"}`, want: []string{"does not exist; use write_file"}},
		{name: "symlink to a file outside", args: `{"path":"link_file_out","old":"secret","new":"x"}`, want: []string{outsideMsg}},
		{name: "through a symlinked dir outside", args: `{"path":"link_out/secret.txt","old":"secret","new":"x"}`, want: []string{outsideMsg}},
		{name: "empty old", args: `{"path":"a.txt","old":"","new":"x"}`, code: errcode.InvalidParams, want: []string{"old"}},
		{name: "replaceAll not a bool", args: `{"path":"a.txt","old":"a","new":"b","replaceAll":"yes"}`, code: errcode.InvalidParams, want: []string{"replaceAll"}},
	})
}

func assertFile(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != want {
		t.Errorf("%s holds %q (%v), want %q", path, b, err, want)
	}
}

func assertDiff(t *testing.T, r Result, path string, parts ...string) {
	t.Helper()
	if len(r.Diffs) != 1 || r.Diffs[0].Path != path {
		t.Fatalf("diffs %+v, want one for %s", r.Diffs, path)
	}
	for _, p := range parts {
		if !strings.Contains(r.Diffs[0].Patch, p) {
			t.Errorf("patch %q lacks %q", r.Diffs[0].Patch, p)
		}
	}
}
