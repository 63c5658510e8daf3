package tool

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/runtime/errs"
)

// fixture is a workdir with files, symlinks inside and out, and an outside
// directory holding a secret.
type fixture struct {
	wd      string // the workdir
	outside string // a directory next to it
}

func newFixture(t testing.TB) fixture {
	t.Helper()
	base := t.TempDir()
	fx := fixture{wd: filepath.Join(base, "wd"), outside: filepath.Join(base, "outside")}
	files := map[string]string{
		"wd/a.txt":                "hello\nworld\n",
		"wd/sub/b.txt":            "bee\n",
		"wd/sub/deep/c.go":        "package c\n\nfunc C() {}\n",
		"wd/.git/HEAD":            "ref: refs/heads/main\n",
		"wd/bin.dat":              "\x00\x01\x02binary",
		"wd/nonl.txt":             "no newline",
		"outside/secret.txt":      "top secret\n",
		"outside/dir/another.txt": "also secret\n",
	}
	for name, content := range files {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"wd/link_in":       "sub",                                        // dir inside
		"wd/link_file_in":  "a.txt",                                      // file inside
		"wd/link_out":      fx.outside,                                   // dir outside, absolute
		"wd/link_out_rel":  "../outside",                                 // dir outside, relative
		"wd/link_file_out": filepath.Join(fx.outside, "secret.txt"),      // file outside
		"wd/dangling_out":  filepath.Join(fx.outside, "created-by-tool"), // dangling, outside
		"wd/loop":          "loop",                                       // a loop
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(base, name)); err != nil {
			t.Fatal(err)
		}
	}
	return fx
}

// outsideUnchanged fails the test if anything was added to the outside dir.
func (fx fixture) outsideUnchanged(t *testing.T) {
	t.Helper()
	var got []string
	_ = filepath.WalkDir(fx.outside, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(fx.outside, p)
			got = append(got, rel)
		}
		return nil
	})
	if strings.Join(got, ",") != "dir/another.txt,secret.txt" {
		t.Errorf("outside directory changed: %v", got)
	}
	if b, _ := os.ReadFile(filepath.Join(fx.outside, "secret.txt")); string(b) != "top secret\n" {
		t.Errorf("outside secret changed: %q", b)
	}
}

func newTestRegistry(t testing.TB) *Registry {
	t.Helper()
	// The web_fetch cases fetch from a loopback test server.
	r, err := NewBuiltinRegistry(Options{WebFetchAllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// toolCase is one call through the Registry and what it must produce.
type toolCase struct {
	name string
	args string
	// code is the errs code Run must fail with ("" = Run returns a Result).
	code string
	ok   bool
	// want are substrings of Output (when ok) or Error (when not).
	want  []string
	check func(t *testing.T, fx fixture, res Result)
}

func runToolCases(t *testing.T, tool string, cases []toolCase) {
	t.Helper()
	r := newTestRegistry(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t)
			res, err := r.Run(context.Background(), tool, Call{ID: "c1", Args: json.RawMessage(tc.args), Workdir: fx.wd, OutputDir: t.TempDir()})
			if tc.code != "" {
				if errs.CodeOf(err) != tc.code {
					t.Fatalf("Run error = %v (code %q), want code %q", err, errs.CodeOf(err), tc.code)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.OK != tc.ok {
				t.Fatalf("OK = %v, want %v; output %q, error %q", res.OK, tc.ok, res.Output, res.Error)
			}
			text := res.Output
			if !res.OK {
				text = res.Error
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("%q does not contain %q", text, w)
				}
			}
			if tc.check != nil {
				tc.check(t, fx, res)
			}
			fx.outsideUnchanged(t)
		})
	}
}

// mustRun runs one call through a fresh builtin registry.
func mustRun(t *testing.T, tool, args, wd string) Result {
	t.Helper()
	res, err := newTestRegistry(t).Run(context.Background(), tool, Call{ID: "c1", Args: json.RawMessage(args), Workdir: wd, OutputDir: t.TempDir()})
	if err != nil {
		t.Fatalf("%s %s: %v", tool, args, err)
	}
	return res
}
