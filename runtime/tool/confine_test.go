package tool

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolvePath(t *testing.T) {
	fx := newFixture(t)
	wd := fx.wd
	for _, tc := range []struct {
		path string
		want string // relative to wd; "" when the path must be refused
	}{
		{"a.txt", "a.txt"},
		{".", "."},
		{"", "."},
		{"./sub/../a.txt", "a.txt"},
		{wd + "/a.txt", "a.txt"},
		{wd, "."},
		{"new/dir/file.txt", "new/dir/file.txt"}, // does not exist yet
		{"link_in/b.txt", "sub/b.txt"},           // symlinked dir inside
		{"link_in/new.txt", "sub/new.txt"},       // new file under a symlinked dir inside
		{"link_file_in", "a.txt"},                // symlinked file inside
		{"link_in/../a.txt", "a.txt"},            // .. after a symlink applies to its target
		{"nothere/../a.txt", "a.txt"},            // .. after a missing dir
		{"a.txt/x", "a.txt/x"},                   // below a file: cannot exist, stays inside
		{"../../etc/passwd", ""},                 // climbing out
		{"sub/../../x", ""},                      // climbing out through a dir
		{"/etc/passwd", ""},                      // absolute outside
		{filepath.Dir(wd), ""},                   // the parent
		{wd + "x/a.txt", ""},                     // a sibling sharing the prefix
		{"link_file_out", ""},                    // symlink inside pointing to a file outside
		{"link_out", ""},                         // symlink to a dir outside
		{"link_out/secret.txt", ""},              // through it
		{"link_out_rel/dir/another.txt", ""},     // relative symlink outside
		{"link_out/new.txt", ""},                 // new file under a symlinked dir outside
		{"link_out/newdir/deeper/new.txt", ""},   // new dirs under it
		{"dangling_out", ""},                     // dangling symlink pointing outside
		{fx.outside + "/../wd/a.txt", "a.txt"},   // absolute, lexically back inside
	} {
		got, err := ResolvePath(wd, tc.path)
		if tc.want == "" {
			var oe *OutsideWorkdirError
			if !errors.Is(err, ErrOutsideWorkdir) || !errors.As(err, &oe) {
				t.Errorf("ResolvePath(%q) = %q, %v; want an outside-workdir error", tc.path, got, err)
				continue
			}
			if msg := "path " + tc.path + " is outside the session's workdir " + wd; err.Error() != msg {
				t.Errorf("message %q, want %q", err.Error(), msg)
			}
			continue
		}
		want := filepath.Join(wd, tc.want)
		if err != nil || got != want {
			t.Errorf("ResolvePath(%q) = %q, %v; want %q", tc.path, got, err, want)
		}
	}
}

func TestResolvePathErrors(t *testing.T) {
	fx := newFixture(t)
	if _, err := ResolvePath(fx.wd, "loop"); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Errorf("symlink loop: %v", err)
	}
	if _, err := ResolvePath("relative/wd", "a"); err == nil {
		t.Error("a relative workdir was accepted")
	}
	if _, err := ResolvePath(filepath.Join(fx.wd, "missing"), "a"); err == nil {
		t.Error("a missing workdir was accepted")
	}
	if _, err := ResolvePath(fx.wd, "a\x00b"); err == nil {
		t.Error("a NUL byte was accepted")
	}
}

func TestResolvePathSymlinkedWorkdir(t *testing.T) {
	fx := newFixture(t)
	alias := filepath.Join(t.TempDir(), "alias")
	if err := os.Symlink(fx.wd, alias); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a.txt", alias + "/a.txt", fx.wd + "/a.txt"} {
		got, err := ResolvePath(alias, p)
		if err != nil || got != filepath.Join(fx.wd, "a.txt") {
			t.Errorf("ResolvePath(alias, %q) = %q, %v", p, got, err)
		}
	}
	_, err := ResolvePath(alias, "../wd/../outside/secret.txt")
	if !errors.Is(err, ErrOutsideWorkdir) || !strings.Contains(err.Error(), alias) {
		t.Errorf("outside via an aliased workdir: %v (the message names the workdir as the session knows it)", err)
	}
}

// FuzzResolvePath checks that no accepted path ever leaves the workdir: the
// result is clean, absolute, under the resolved workdir, and holds no
// symlink (resolving it again changes nothing).
func FuzzResolvePath(f *testing.F) {
	fx := newFixture(f)
	base, err := filepath.EvalSymlinks(fx.wd)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		"a.txt", "../../etc/passwd", "/etc/passwd", "link_out/x", "link_in/../../outside",
		"dangling_out", "sub/./deep/../c", "link_out_rel/../wd/a.txt", fx.wd + "/link_in/b.txt",
		"loop/x", "a.txt/../link_file_out", "//..//..", "link_in/../link_in/../../wd",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := ResolvePath(fx.wd, p)
		if err != nil {
			return
		}
		if got != filepath.Clean(got) || !filepath.IsAbs(got) {
			t.Fatalf("ResolvePath(%q) = %q: not clean and absolute", p, got)
		}
		if !within(base, got) {
			t.Fatalf("ResolvePath(%q) = %q escapes %q", p, got, base)
		}
		again, err := walkSymlinks(got)
		if err != nil || again != got {
			t.Fatalf("ResolvePath(%q) = %q still holds a symlink (-> %q, %v)", p, got, again, err)
		}
	})
}
