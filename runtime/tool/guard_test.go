package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const guardSecret = "GUARDED-SECRET-c0ffee"

// homeFixture is a workdir holding the daemon's home (trellis run from ~),
// with links to the home's files in the workdir.
type homeFixture struct {
	wd, home, outside string
	reg               *Registry
}

func newHomeFixture(t *testing.T) homeFixture {
	t.Helper()
	base := t.TempDir()
	fx := homeFixture{wd: filepath.Join(base, "user"), outside: filepath.Join(base, "elsewhere")}
	fx.home = filepath.Join(fx.wd, ".trellis")
	for name, content := range map[string]string{
		".trellis/token":                  guardSecret,
		".trellis/secrets/openai.json":    `{"apiKey":"` + guardSecret + `"}`,
		".trellis/logs/trellisd.log":      guardSecret,
		"project/main.go":                 "package main\n",
		"notes.txt":                       "plain notes\n",
		"../elsewhere/hardlink-dir/.keep": "",
	} {
		p := filepath.Join(fx.wd, name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(filepath.Join(fx.home, "token"), filepath.Join(fx.wd, "link-to-token")))
	must(os.Symlink(fx.home, filepath.Join(fx.wd, "project", "link-to-home")))
	must(os.Symlink("../.trellis/secrets", filepath.Join(fx.wd, "project", "rel-link")))
	must(os.Link(filepath.Join(fx.home, "token"), filepath.Join(fx.wd, "project", "hardlink-token")))
	r, err := NewBuiltinRegistry(Options{Guard: NewGuard(fx.home)})
	must(err)
	fx.reg = r
	return fx
}

func (fx homeFixture) run(t *testing.T, tool, args string) Result {
	t.Helper()
	res, err := fx.reg.Run(context.Background(), tool, Call{ID: "g1", Args: json.RawMessage(args), Workdir: fx.wd, OutputDir: filepath.Join(fx.home, "outputs", "s1")})
	if err != nil {
		t.Fatalf("%s %s: %v", tool, args, err)
	}
	return res
}

// guardPaths is the traversal corpus: every way to name the home's files
// from a workdir that holds the home.
func guardPaths(fx homeFixture) []string {
	return []string{
		".trellis/token", "./.trellis/token", ".trellis//token", ".trellis/./token",
		"project/../.trellis/token", "project/../../user/.trellis/token",
		fx.home + "/token", fx.wd + "/project/../.trellis/token",
		".trellis/secrets/openai.json", ".trellis/secrets/../token", ".trellis/logs/trellisd.log",
		"link-to-token", "project/link-to-home/token", "project/rel-link/openai.json",
		"project/hardlink-token", ".trellis", ".trellis/secrets", "project/link-to-home",
		".trellis/new-file", "project/link-to-home/secrets/evil.json",
	}
}

func TestFileToolsNeverTouchTheHome(t *testing.T) {
	fx := newHomeFixture(t)
	for _, p := range guardPaths(fx) {
		pj, _ := json.Marshal(p)
		for _, c := range []struct{ tool, args string }{
			{"read_file", `{"path":` + string(pj) + `}`},
			{"list_dir", `{"path":` + string(pj) + `}`},
			{"grep", `{"pattern":".","path":` + string(pj) + `}`},
			{"write_file", `{"path":` + string(pj) + `,"content":"attacker"}`},
			{"edit_file", `{"path":` + string(pj) + `,"old":"GUARDED","new":"attacker"}`},
		} {
			res := fx.run(t, c.tool, c.args)
			if res.OK {
				t.Errorf("%s %s succeeded: %q", c.tool, p, res.Output)
			}
			if strings.Contains(res.Output+res.Error, guardSecret) {
				t.Errorf("%s %s returned the secret", c.tool, p)
			}
			if !strings.Contains(res.Error, "daemon's home directory") {
				t.Errorf("%s %s: error %q does not name the daemon's home", c.tool, p, res.Error)
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(fx.home, "token")); string(b) != guardSecret {
		t.Errorf("the token changed: %q", b)
	}
	for _, p := range []string{".trellis/new-file", ".trellis/secrets/evil.json"} {
		if _, err := os.Stat(filepath.Join(fx.wd, p)); err == nil {
			t.Errorf("%s was created", p)
		}
	}
}

func TestSearchToolsSkipTheHome(t *testing.T) {
	fx := newHomeFixture(t)
	for _, c := range []struct{ tool, args string }{
		{"grep", `{"pattern":"GUARDED"}`},
		{"grep", `{"pattern":"."}`},
		{"grep", `{"pattern":".","path":"project"}`},
		{"glob", `{"pattern":"**"}`},
		{"glob", `{"pattern":"**/*token*"}`},
		{"glob", `{"pattern":".trellis/*"}`},
		{"list_dir", `{}`},
	} {
		res := fx.run(t, c.tool, c.args)
		if !res.OK {
			t.Errorf("%s %s failed: %s", c.tool, c.args, res.Error)
			continue
		}
		if strings.Contains(res.Output, guardSecret) {
			t.Errorf("%s %s returned the secret", c.tool, c.args)
		}
		for _, name := range []string{"openai.json", "trellisd.log", "project/hardlink-token\n"} {
			if strings.Contains(res.Output+"\n", name) {
				t.Errorf("%s %s shows %s: %q", c.tool, c.args, name, res.Output)
			}
		}
		if !strings.Contains(res.Output, "off limits") && !strings.Contains(res.Output, "skipped the daemon's home") &&
			c.args != `{"pattern":".","path":"project"}` {
			t.Errorf("%s %s does not say the home was left out: %q", c.tool, c.args, res.Output)
		}
	}
	// The rest of the workdir is still searched.
	if res := fx.run(t, "grep", `{"pattern":"plain"}`); !strings.Contains(res.Output, "notes.txt:1: plain notes") {
		t.Errorf("grep outside the home: %q", res.Output)
	}
}

func TestGuardErrorIs(t *testing.T) {
	fx := newHomeFixture(t)
	ws, err := openWorkspace(Call{Workdir: fx.wd, Guard: NewGuard(fx.home)})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	_, _, err = ws.resolve("link-to-token")
	if !errors.Is(err, ErrProtected) {
		t.Errorf("err = %v, want ErrProtected", err)
	}
	if _, _, err := ws.resolve("notes.txt"); err != nil {
		t.Errorf("notes.txt: %v", err)
	}
	var g *Guard
	if g.Dirs() != nil || g.snapshot().home("/x") != "" {
		t.Error("a nil guard protects something")
	}
}

func TestShellSandboxKeepsTheHomeClosed(t *testing.T) {
	if !ProbeSandbox().Available() {
		t.Skip("no Landlock: ", ProbeSandbox().Problem)
	}
	fx := newHomeFixture(t)
	for _, cmd := range []string{
		"cat ~/.trellis/token .trellis/token .trellis/secrets/openai.json link-to-token project/link-to-home/token",
		"grep -r GUARDED . 2>&1",
		"ls -la .trellis .trellis/secrets",
		"cp -r .trellis project/copy; tar cf - .trellis | wc -c",
		"echo attacker > .trellis/token; echo x > .trellis/new; rm -f .trellis/token; mv .trellis moved",
		"ln .trellis/token project/stolen-link",
		"cat /proc/$PPID/environ /proc/1/environ",
	} {
		args, _ := json.Marshal(map[string]any{"command": "HOME=" + fx.wd + "; " + cmd})
		res := fx.run(t, "shell", string(args))
		if strings.Contains(res.Output, guardSecret) {
			t.Errorf("%s: the secret reached the output: %q", cmd, res.Output)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(fx.home, "token")); string(b) != guardSecret {
		t.Errorf("the token changed: %q", b)
	}
	for _, p := range []string{".trellis/new", "moved", "project/copy/token", "project/stolen-link"} {
		if _, err := os.Stat(filepath.Join(fx.wd, p)); err == nil {
			t.Errorf("%s exists", p)
		}
	}
	// Ordinary work still works: write in a subdirectory and the temp dir,
	// read the project, read the call's kept outputs.
	res := fx.run(t, "shell", `{"command":"echo hi > project/out.txt && cat project/out.txt project/main.go && t=$(mktemp) && echo tmp > $t && cat $t && rm $t"}`)
	if !res.OK || !strings.Contains(res.Output, "hi\npackage main\ntmp\n") {
		t.Errorf("ordinary command: %+v", res)
	}
	// The one thing the sandbox cannot express: new entries directly in a
	// directory holding the home (here the workdir itself).
	res = fx.run(t, "shell", `{"command":"echo x > top-level.txt"}`)
	if res.OK {
		t.Logf("creating a file next to the home worked (kernel allows it)")
	}
	// Without the sandbox (the explicit opt-out) the same command reads
	// the home: the sandbox is what keeps it closed.
	open := NewShellWith(ShellOptions{Unsandboxed: true})
	res, err := open.Run(context.Background(), Call{ID: "u", Args: json.RawMessage(`{"command":"cat .trellis/token"}`), Workdir: fx.wd, Guard: NewGuard(fx.home)})
	if err != nil || !strings.Contains(res.Output, guardSecret) {
		t.Errorf("unsandboxed control: %+v %v", res, err)
	}
}

func TestShellRefusesAWorkdirInsideTheHome(t *testing.T) {
	if !ProbeSandbox().Available() {
		t.Skip("no Landlock")
	}
	fx := newHomeFixture(t)
	res, err := fx.reg.Run(context.Background(), "shell", Call{ID: "x", Args: json.RawMessage(`{"command":"cat token"}`), Workdir: fx.home})
	if err != nil || res.OK || !strings.Contains(res.Error, "daemon's home directory") {
		t.Errorf("workdir inside the home: %+v %v", res, err)
	}
}

func TestCommandEnv(t *testing.T) {
	env := []string{
		"PATH=/usr/bin", "HOME=/home/u", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "EDITOR=vi",
		"GIT_AUTHOR_NAME=Ann", "GOPATH=/go", "KEYBOARD=us", "PWD=/w",
		"OPENAI_API_KEY=s1", "ANTHROPIC_API_KEY=s2", "GITHUB_TOKEN=s3", "AWS_ACCESS_KEY_ID=s4",
		"AWS_SECRET_ACCESS_KEY=s5", "AWS_SESSION_TOKEN=s6", "DATABASE_URL=s7", "GH_PAT=s8",
		"SMTP_PASS=s9", "PGPASSWORD=s10", "MYSQL_PWD=s11", "STRIPE_KEY=s12", "SENTRY_DSN=s13",
		"TRELLIS_HOME=s14", "SSH_AUTH_SOCK=s15", "NPM_CONFIG__AUTH=s16", "CLIENT_SECRET=s17",
		"DB_PASSPHRASE=s18", "AZURE_CLIENT_ID=s19", "GOOGLE_APPLICATION_CREDENTIALS=s20",
		"REDIS_URL=redis://:s21@cache:6379", "UPSTREAM=https://user:s22@example.com/x",
		"SLACK_BOT_TOKEN=s23", "HTTP_COOKIE=s24", "VAULT_ADDR=s25", "PAT=s26",
		"DOCKER_AUTH_CONFIG=s27", "SLACK_WEBHOOK_URL=s28", "STRIPE_SK=s29", "NPM_AUTH_TOKEN=s30",
		"DISCORD_WEBHOOK=s31", "TASK=plain",
	}
	got := strings.Join(CommandEnv(env, nil), " ")
	want := "PATH=/usr/bin HOME=/home/u LANG=C.UTF-8 LC_ALL=C TERM=xterm EDITOR=vi GIT_AUTHOR_NAME=Ann GOPATH=/go KEYBOARD=us PWD=/w TASK=plain"
	if got != want {
		t.Errorf("default filter:\n got %s\nwant %s", got, want)
	}
	// An allowlist passes exactly the basics and the names it lists, even
	// secret-looking ones (the operator asked for them).
	got = strings.Join(CommandEnv(env, []string{"GITHUB_TOKEN", "GOPATH"}), " ")
	want = "PATH=/usr/bin HOME=/home/u LANG=C.UTF-8 LC_ALL=C TERM=xterm GOPATH=/go GITHUB_TOKEN=s3"
	if got != want {
		t.Errorf("allowlist:\n got %s\nwant %s", got, want)
	}
}

// TestGuardKnowsEveryHomeFileByInode: a home with more than 20,000 entries
// before its token (the old walk stopped there), a hard link to the token
// made after the guard is in use, and a link to a file created in the home
// later still: each is refused, and calls do not walk the home again.
func TestGuardKnowsEveryHomeFileByInode(t *testing.T) {
	base := t.TempDir()
	wd, home := filepath.Join(base, "wd"), filepath.Join(base, "home")
	bulk := filepath.Join(home, "a-outputs")
	os.MkdirAll(bulk, 0o700)
	os.MkdirAll(wd, 0o700)
	for i := range 20001 {
		if err := os.WriteFile(filepath.Join(bulk, fmt.Sprintf("out-%05d.log", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(home, "token"), []byte(guardSecret), 0o600)
	g := NewGuard(home)
	r, err := NewBuiltinRegistry(Options{Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) Result {
		t.Helper()
		res, err := r.Run(context.Background(), "read_file", Call{ID: "r", Args: json.RawMessage(`{"path":"` + p + `"}`), Workdir: wd})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	os.WriteFile(filepath.Join(wd, "plain.txt"), []byte("plain"), 0o600)
	if res := read("plain.txt"); !res.OK {
		t.Fatalf("plain file: %+v", res)
	}
	walks := g.index.walks
	if err := os.Link(filepath.Join(home, "token"), filepath.Join(wd, "late-link")); err != nil {
		t.Fatal(err)
	}
	if res := read("late-link"); res.OK || strings.Contains(res.Output, guardSecret) || !strings.Contains(res.Error, "daemon's home directory") {
		t.Errorf("hard link to the token after 20,000 entries: %+v", res)
	}
	// A file created in the home after the index was built, linked out.
	os.MkdirAll(filepath.Join(home, "secrets"), 0o700)
	os.WriteFile(filepath.Join(home, "secrets", "new.json"), []byte(guardSecret), 0o600)
	if err := os.Link(filepath.Join(home, "secrets", "new.json"), filepath.Join(wd, "new-link")); err != nil {
		t.Fatal(err)
	}
	if res := read("new-link"); res.OK || strings.Contains(res.Output, guardSecret) {
		t.Errorf("hard link to a file created later in the home: %+v", res)
	}
	// The token replaced by a rename (a new inode), then linked out.
	os.WriteFile(filepath.Join(home, "token.tmp"), []byte(guardSecret), 0o600)
	os.Rename(filepath.Join(home, "token.tmp"), filepath.Join(home, "token"))
	os.Link(filepath.Join(home, "token"), filepath.Join(wd, "renamed-link"))
	if res := read("renamed-link"); res.OK || strings.Contains(res.Output, guardSecret) {
		t.Errorf("hard link to the renamed token: %+v", res)
	}
	if g.index.w != nil && g.index.walks != walks+1 { // +1: the new secrets directory
		t.Errorf("the home was walked %d times more for three calls, want 1 (the new directory)", g.index.walks-walks)
	}
	// A file removed from the home is forgotten: its inode may be reused.
	os.Remove(filepath.Join(wd, "new-link"))
	os.Remove(filepath.Join(home, "secrets", "new.json"))
	g.snapshot()
	if n := len(g.index.ids); n != 20001+4 { // the files, home, a-outputs, secrets, token
		t.Errorf("index holds %d ids, want %d", n, 20001+4)
	}
}

// TestGuardForgetsAHomeThatIsGone: another daemon's home that was removed,
// or that left the registry, is forgotten with every inode it held, so a
// workdir created later on a reused inode is not refused (a shell call in
// a fresh workdir failed as "protected" when the kernel gave it the inode
// of a home removed a moment before).
func TestGuardForgetsAHomeThatIsGone(t *testing.T) {
	base := t.TempDir()
	removed, dropped := filepath.Join(base, "removed-home"), filepath.Join(base, "dropped-home")
	for _, h := range []string{removed, dropped} {
		os.MkdirAll(filepath.Join(h, "sub"), 0o700)
		os.WriteFile(filepath.Join(h, "sub", "token"), []byte(guardSecret), 0o600)
	}
	others := []string{removed, dropped}
	g := NewGuard(filepath.Join(base, "own-home")).ProtectOthers(func() []string { return others })
	idsOf := func(home string) []fileID {
		var ids []fileID
		filepath.WalkDir(home, func(p string, _ fs.DirEntry, _ error) error {
			if fi, err := os.Lstat(p); err == nil {
				id, _ := idOf(fi)
				ids = append(ids, id)
			}
			return nil
		})
		return ids
	}
	removedIDs, droppedIDs := idsOf(removed), idsOf(dropped)
	g.snapshot()
	for _, id := range append(removedIDs, droppedIDs...) {
		if _, ok := g.index.lookup(id); !ok {
			t.Fatalf("a protected home's file %v is not indexed", id)
		}
	}
	os.RemoveAll(removed)
	others = others[:1] // dropped leaves the registry; it stays on disk
	g.snapshot()
	for _, id := range append(removedIDs, droppedIDs...) {
		if p, ok := g.index.lookup(id); ok {
			t.Errorf("inode %v of %s is still protected after the home is gone", id, p.path)
		}
	}
	if _, ok := g.index.roots[removed]; ok {
		t.Error("the removed home is still a root of the index")
	}
}
