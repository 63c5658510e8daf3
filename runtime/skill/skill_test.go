package skill_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/skill"
)

func manifest(name, description, body string) string {
	return fmt.Sprintf("---\nname: %s\ndescription: %s\n---\n%s\n", name, description, body)
}

// writeTree writes files (path → content; a content starting with "->"
// makes a symbolic link to the rest) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func newService(t *testing.T, opts skill.Options) *skill.Service {
	t.Helper()
	if opts.Home == "" {
		opts.Home = t.TempDir()
	}
	s, err := skill.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// entry is one archive member.
type entry struct {
	name, body, link string
	dir, hard        bool
}

func tarGz(t *testing.T, path string, entries ...entry) string {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		switch {
		case e.dir:
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		case e.hard:
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, e.link, 0
		case e.link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.link, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	gz.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func zipFile(t *testing.T, path string, entries ...entry) string {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		body := e.body
		switch {
		case e.dir:
			h.Name = strings.TrimSuffix(e.name, "/") + "/"
			h.SetMode(fs.ModeDir | 0o755)
		case e.link != "":
			h.SetMode(fs.ModeSymlink | 0o777)
			body = e.link
		default:
			h.SetMode(0o644)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	zw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// gitRepo makes a git repository holding files and returns its file:// URL.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := writeTree(t, t.TempDir(), files)
	for _, args := range [][]string{
		{"init", "--quiet", "-b", "main"},
		{"add", "-A"},
		{"-c", "user.name=Test", "-c", "user.email=test@example.com", "commit", "--quiet", "-m", "skill"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return "file://" + dir
}

func wantCode(t *testing.T, err error, sentinel error, code string) {
	t.Helper()
	if !errors.Is(err, sentinel) || errs.CodeOf(err) != code {
		t.Fatalf("error %v (code %q), want %s wrapping %v", err, errs.CodeOf(err), code, sentinel)
	}
}

func TestInstallFromFolder(t *testing.T) {
	ctx := context.Background()
	s := newService(t, skill.Options{})
	w := s.Watch(ctx)
	src := writeTree(t, t.TempDir(), map[string]string{
		"SKILL.md":          manifest("pdf-tools", "Work with PDF files", "Use scripts/fill.py to fill forms."),
		"scripts/fill.py":   "print('fill')\n",
		"docs/link.md":      "->../scripts/fill.py",
		".git/HEAD":         "ref: refs/heads/main\n",
		".trellis-source":   `{"source":"forged"}`,
		"reference/big.txt": strings.Repeat("x", 1000),
	})
	sk, err := s.Install(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if sk.Name != "pdf-tools" || sk.Source != src || !sk.Installed || sk.Path != filepath.Join(filepath.Dir(sk.Path), "pdf-tools") {
		t.Fatalf("installed %+v", sk)
	}
	if b, err := os.ReadFile(filepath.Join(sk.Path, "docs", "link.md")); err != nil || string(b) != "print('fill')\n" {
		t.Fatalf("link inside the skill: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(sk.Path, ".git")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf(".git was copied: %v", err)
	}
	if ev := <-w.Events(); ev.Reason != skill.ReasonInstall || ev.Name != "pdf-tools" {
		t.Errorf("event %+v", ev)
	}
	if list := s.List(); len(list) != 1 || list[0].Instructions != "Use scripts/fill.py to fill forms." {
		t.Fatalf("List = %+v", list)
	}

	// The same source again replaces it; another source with the name is refused.
	writeTree(t, src, map[string]string{"SKILL.md": manifest("pdf-tools", "Work with PDFs, v2", "v2")})
	if sk, err = s.Install(ctx, src+"/"); err != nil || sk.Description != "Work with PDFs, v2" {
		t.Fatalf("reinstall: %+v, %v", sk, err)
	}
	if got, _ := s.Get("pdf-tools"); got.Instructions != "v2" {
		t.Fatalf("after reinstall: %+v", got)
	}
	other := writeTree(t, t.TempDir(), map[string]string{"SKILL.md": manifest("pdf-tools", "Another", "x")})
	_, err = s.Install(ctx, other)
	wantCode(t, err, skill.ErrNameTaken, errcode.InvalidParams)
	if !strings.Contains(err.Error(), src) {
		t.Errorf("message %q does not name the installed source", err)
	}

	// A restart finds it, with its source.
	again := newService(t, skill.Options{Home: filepath.Dir(filepath.Dir(sk.Path))})
	if got, ok := again.Get("pdf-tools"); !ok || got.Source != src || got.Description != "Work with PDFs, v2" {
		t.Fatalf("after restart: %+v, %v", got, ok)
	}

	if err := s.Remove("pdf-tools"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sk.Path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("folder still there: %v", err)
	}
	wantCode(t, s.Remove("pdf-tools"), skill.ErrNotFound, errcode.NotFound)
	wantCode(t, s.Remove("../etc"), skill.ErrNotFound, errcode.NotFound)
	for _, reason := range []string{skill.ReasonInstall, skill.ReasonRemove} {
		if ev := <-w.Events(); ev.Reason != reason {
			t.Errorf("event %+v, want %s", ev, reason)
		}
	}
}

func TestInstallInvalid(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	s := newService(t, skill.Options{Home: home, Limits: skill.Limits{MaxFiles: 5, MaxBytes: 100}})
	dir := func(files map[string]string) string { return writeTree(t, t.TempDir(), files) }
	tmp := t.TempDir()
	outside := filepath.Join(tmp, "outside.txt")
	os.WriteFile(outside, []byte("secret"), 0o644)
	okManifest := manifest("ok", "d", "b")
	tests := []struct {
		name     string
		source   string
		sentinel error
		reason   string
		code     string // errcode.InvalidParams when empty
	}{
		{"empty source", " ", skill.ErrBadSource, "required", ""},
		{"missing path", filepath.Join(tmp, "nope"), skill.ErrBadSource, "does not exist", errcode.NotFound},
		{"plain file", outside, skill.ErrBadSource, "not a .tar.gz", ""},
		{"http URL", "http://example.com/x.git", skill.ErrBadSource, "https", ""},
		{"git URL scheme", "git://example.com/x.git", skill.ErrBadSource, "file://", ""},
		{"ext transport", "ext::sh -c touch% /tmp/pwned", skill.ErrBadSource, "does not exist", errcode.NotFound},
		{"no SKILL.md", dir(map[string]string{"README.md": "x"}), skill.ErrInvalidSkill, "no SKILL.md", ""},
		{"no name", dir(map[string]string{"SKILL.md": "---\ndescription: d\n---\nb"}), skill.ErrInvalidSkill, "no name", ""},
		{"bad name", dir(map[string]string{"SKILL.md": manifest("Bad_Name", "d", "b")}), skill.ErrInvalidSkill, "[a-z0-9-]+", ""},
		{"no description", dir(map[string]string{"SKILL.md": "---\nname: x\n---\nb"}), skill.ErrInvalidSkill, "no description", ""},
		{"link outside", dir(map[string]string{"SKILL.md": okManifest, "l": "->" + outside}), skill.ErrUnsafe, "inside the skill", ""},
		{"relative link outside", dir(map[string]string{"SKILL.md": okManifest, "sub/l": "->../../x"}), skill.ErrUnsafe, "leads", ""},
		{"dangling link", dir(map[string]string{"SKILL.md": okManifest, "l": "->nothing"}), skill.ErrUnsafe, "nowhere", ""},
		{"too many files", dir(map[string]string{"SKILL.md": okManifest, "a": "", "b": "", "c": "", "d": "", "e": ""}), skill.ErrTooLarge, "more than 5", ""},
		{"too many bytes", dir(map[string]string{"SKILL.md": okManifest, "a": strings.Repeat("x", 100)}), skill.ErrTooLarge, "more than 100 bytes", ""},
		{"two folders", dir(map[string]string{"a/SKILL.md": okManifest, "b/x": ""}), skill.ErrInvalidSkill, "no SKILL.md", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Install(ctx, tc.source)
			code := tc.code
			if code == "" {
				code = errcode.InvalidParams
			}
			wantCode(t, err, tc.sentinel, code)
			if !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("error %q does not say %q", err, tc.reason)
			}
		})
	}
	if list := s.List(); len(list) != 0 {
		t.Fatalf("installed %+v", list)
	}
	if entries, _ := os.ReadDir(filepath.Join(home, "skills")); len(entries) != 0 {
		t.Errorf("skills folder holds %v after failed installs", entries)
	}
}

func TestInstallFromArchives(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	s := newService(t, skill.Options{Home: home})
	tmp := t.TempDir()

	tgz := tarGz(t, filepath.Join(tmp, "notes.tar.gz"),
		entry{name: "notes/", dir: true},
		entry{name: "notes/SKILL.md", body: manifest("notes", "Keep notes", "Write notes.")},
		entry{name: "./notes/tpl/a.md", body: "template"},
		entry{name: "notes/latest", link: "tpl/a.md"},
	)
	sk, err := s.Install(ctx, tgz)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(sk.Path, "latest")); err != nil || string(b) != "template" {
		t.Fatalf("tar link: %q, %v", b, err)
	}

	zp := zipFile(t, filepath.Join(tmp, "lint.zip"),
		entry{name: "SKILL.md", body: manifest("lint", "Lint the code", "Run the linter.")},
		entry{name: "rules/", dir: true},
		entry{name: "rules/go.txt", body: "gofmt"},
		entry{name: "rules/current", link: "go.txt"},
		entry{name: "__MACOSX/._SKILL.md", body: "junk"},
	)
	if sk, err = s.Install(ctx, zp); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(sk.Path, "rules", "current")); err != nil || string(b) != "gofmt" {
		t.Fatalf("zip link: %q, %v", b, err)
	}
	if names := names(s.List()); names != "lint,notes" {
		t.Fatalf("installed %s", names)
	}
}

func names(ss []skill.Skill) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return strings.Join(out, ",")
}

// TestUnsafeArchives: no entry lands outside the staging folder, whatever
// the archive tries.
func TestUnsafeArchives(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	home := filepath.Join(base, "home")
	s := newService(t, skill.Options{Home: home, Limits: skill.Limits{MaxBytes: 1000, MaxFiles: 50}})
	m := entry{name: "SKILL.md", body: manifest("evil", "d", "b")}
	tests := []struct {
		name     string
		entries  []entry
		sentinel error
	}{
		{"dot-dot entry", []entry{m, {name: "../../../escaped.txt", body: "x"}}, skill.ErrUnsafe},
		{"absolute entry", []entry{m, {name: filepath.Join(base, "escaped.txt"), body: "x"}}, skill.ErrUnsafe},
		{"absolute link", []entry{m, {name: "l", link: "/etc/passwd"}}, skill.ErrUnsafe},
		{"link out", []entry{m, {name: "l", link: "../../../../etc"}}, skill.ErrUnsafe},
		{"write through a link", []entry{m, {name: "d", link: "../.."}, {name: "d/escaped.txt", body: "x"}}, skill.ErrUnsafe},
		{"write through a link to inside", []entry{m, {name: "sub/", dir: true}, {name: "d", link: "sub"}, {name: "d/x", body: "x"}}, skill.ErrUnsafe},
		{"link loop", []entry{m, {name: "a", link: "b"}, {name: "b", link: "a"}}, skill.ErrUnsafe},
		{"hard link", []entry{m, {name: "h", link: "SKILL.md", hard: true}}, skill.ErrUnsafe},
		{"bomb", []entry{m, {name: "big", body: strings.Repeat("z", 5000)}}, skill.ErrTooLarge},
	}
	for _, tc := range tests {
		for _, kind := range []string{"tar.gz", "zip"} {
			if tc.name == "hard link" && kind == "zip" {
				continue
			}
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				p := filepath.Join(t.TempDir(), "evil."+kind)
				if kind == "zip" {
					zipFile(t, p, tc.entries...)
				} else {
					tarGz(t, p, tc.entries...)
				}
				_, err := s.Install(ctx, p)
				wantCode(t, err, tc.sentinel, errcode.InvalidParams)
			})
		}
	}
	filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "escaped.txt" {
			t.Errorf("an archive wrote %s", p)
		}
		return nil
	})
	if entries, _ := os.ReadDir(filepath.Join(home, "skills")); len(entries) != 0 {
		t.Errorf("skills folder holds %v after failed installs", entries)
	}
}

func TestInstallFromGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	ctx := context.Background()
	s := newService(t, skill.Options{})
	url := gitRepo(t, map[string]string{
		"SKILL.md":     manifest("release", "Cut a release", "Tag and push."),
		"checklist.md": "- tests pass\n",
	})
	sk, err := s.Install(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if sk.Source != url {
		t.Errorf("source %q, want %q", sk.Source, url)
	}
	if _, err := os.Stat(filepath.Join(sk.Path, ".git")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf(".git kept: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(sk.Path, "checklist.md")); string(b) != "- tests pass\n" {
		t.Errorf("checklist.md = %q", b)
	}
	if _, err := s.Install(ctx, url); err != nil {
		t.Errorf("reinstall from the same URL: %v", err)
	}
	_, err = s.Install(ctx, "file://"+t.TempDir()+"/no-repo")
	wantCode(t, err, skill.ErrBadSource, errcode.InvalidParams)
	if !strings.Contains(err.Error(), "git clone") {
		t.Errorf("error %q does not say git clone failed", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Install(cancelled, gitRepo(t, map[string]string{"SKILL.md": manifest("other", "d", "b")})); err == nil {
		t.Error("install with a cancelled context succeeded")
	}
}

func TestSearchAndCatalog(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	writeTree(t, filepath.Join(home, "skill-catalog"), map[string]string{
		"pdf/SKILL.md":    manifest("pdf", "Fill PDF forms", "b"),
		"broken/SKILL.md": "no front matter",
		"dup/SKILL.md":    manifest("lint", "A catalog lint skill shadowed by the installed one", "b"),
	})
	extra := writeTree(t, t.TempDir(), map[string]string{"SKILL.md": manifest("deploy", "Deploy the service", "b")})
	s := newService(t, skill.Options{Home: home, Catalog: []string{extra, filepath.Join(home, "missing")}})
	if _, err := s.Install(ctx, writeTree(t, t.TempDir(), map[string]string{"SKILL.md": manifest("lint", "Lint Go code", "b")})); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		query, want string
	}{
		{"", "lint+,deploy-,pdf-"},
		{"PDF", "pdf-"},
		{"lint go", "lint+"},
		{"lint shadowed", ""},
		{"deploy service", "deploy-"},
		{"nothing", ""},
	}
	for _, tc := range tests {
		var got []string
		for _, sk := range s.Search(tc.query) {
			mark := "-"
			if sk.Installed {
				mark = "+"
			}
			got = append(got, sk.Name+mark)
			if !sk.Installed && (sk.Source != sk.Path || sk.Path == "") {
				t.Errorf("catalog entry %+v: source should be its folder", sk)
			}
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("Search(%q) = %v, want %s", tc.query, got, tc.want)
		}
	}
	// A catalog entry installs from the source it reports.
	for _, sk := range s.Search("pdf") {
		if _, err := s.Install(ctx, sk.Source); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Search("pdf"); len(got) != 1 || !got[0].Installed {
		t.Fatalf("after install: %+v", got)
	}
}

func TestReloadAndStartup(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	dir := filepath.Join(home, "skills")
	writeTree(t, dir, map[string]string{
		"good/SKILL.md":            manifest("good", "Good", "b"),
		"misnamed/SKILL.md":        manifest("other", "Name differs from the folder", "b"),
		"broken/SKILL.md":          "nope",
		".install-123/x/SKILL.md":  manifest("x", "a crashed install", "b"),
		".remove-456/old/SKILL.md": manifest("old", "a crashed removal", "b"),
	})
	s := newService(t, skill.Options{Home: home})
	if got := names(s.List()); got != "good" {
		t.Fatalf("loaded %s, want good", got)
	}
	for _, left := range []string{".install-123", ".remove-456"} {
		if _, err := os.Stat(filepath.Join(dir, left)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("leftover %s kept: %v", left, err)
		}
	}
	if got, _ := s.Get("good"); got.Source != got.Path {
		t.Errorf("a skill put there by hand: source %q, want its folder", got.Source)
	}

	w := s.Watch(ctx)
	writeTree(t, dir, map[string]string{"added/SKILL.md": manifest("added", "Added by hand", "b")})
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := names(s.List()); got != "added,good" {
		t.Fatalf("after reload %s", got)
	}
	select {
	case ev := <-w.Events():
		if ev.Reason != skill.ReasonReload {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reload event")
	}
	// A broken folder can be removed, then the name installed.
	if err := s.Remove("broken"); err != nil {
		t.Fatalf("remove a broken folder: %v", err)
	}
}

func TestWatchEnds(t *testing.T) {
	s := newService(t, skill.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	w := s.Watch(ctx)
	cancel()
	if _, open := <-w.Events(); open || w.Err() != nil {
		t.Fatalf("cancelled watch: open %v, err %v", open, w.Err())
	}
	lagging := s.Watch(context.Background())
	for range 300 {
		if err := s.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	for range lagging.Events() {
	}
	if !errors.Is(lagging.Err(), skill.ErrLagged) {
		t.Fatalf("lagging watch err %v", lagging.Err())
	}
	closing := s.Watch(context.Background())
	s.Close()
	for range closing.Events() {
	}
	if !errors.Is(closing.Err(), skill.ErrClosed) {
		t.Fatalf("closed watch err %v", closing.Err())
	}
}
