package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/protocol/errcode"
)

type memoryHit struct {
	ID        string   `json:"id"`
	Text      string   `json:"text"`
	Tags      []string `json:"tags"`
	Score     float64  `json:"score"`
	Namespace string   `json:"namespace"`
}

func writeNote(t *testing.T, c client, params map[string]any) string {
	t.Helper()
	var res struct {
		ID string `json:"id"`
	}
	if err := c.Call(context.Background(), "memory.write", params, &res); err != nil {
		t.Fatalf("memory.write %v: %v", params, err)
	}
	if !strings.HasPrefix(res.ID, "m-") {
		t.Fatalf("memory.write id %q, want m-…", res.ID)
	}
	return res.ID
}

func searchNotes(t *testing.T, c client, params map[string]any) []memoryHit {
	t.Helper()
	var res struct {
		Hits []memoryHit `json:"hits"`
	}
	if err := c.Call(context.Background(), "memory.search", params, &res); err != nil {
		t.Fatalf("memory.search %v: %v", params, err)
	}
	return res.Hits
}

// TestMemoryWriteAndSearch: three notes come back ranked by relevance,
// filtered by namespace and cut by limit; bad params are invalid_params.
func TestMemoryWriteAndSearch(t *testing.T) {
	eachTransport(t, func(t *testing.T, d *daemon.Daemon, dial func() client) {
		c := dial()
		ctx := context.Background()
		once := writeNote(t, c, map[string]any{"text": "The database runs on port 5432"})
		twice := writeNote(t, c, map[string]any{"text": "Back up the database; the database is precious", "tags": []string{"ops", "backup"}})
		none := writeNote(t, c, map[string]any{"text": "Lunch is at noon", "namespace": "personal"})

		hits := searchNotes(t, c, map[string]any{"query": "database"})
		if len(hits) != 2 || hits[0].ID != twice || hits[1].ID != once || hits[0].Score <= hits[1].Score {
			t.Fatalf("database: %+v, want %s then %s", hits, twice, once)
		}
		if h := hits[0]; h.Namespace != "default" || !slices.Equal(h.Tags, []string{"ops", "backup"}) || !strings.Contains(h.Text, "precious") {
			t.Fatalf("hit %+v", h)
		}
		if hits := searchNotes(t, c, map[string]any{"query": "database", "limit": 1}); len(hits) != 1 || hits[0].ID != twice {
			t.Fatalf("limit 1: %+v", hits)
		}
		if hits := searchNotes(t, c, map[string]any{"query": "lunch"}); len(hits) != 0 {
			t.Fatalf("lunch in the default namespace: %+v", hits)
		}
		if hits := searchNotes(t, c, map[string]any{"query": "noon OR \"lunch", "namespace": "personal"}); len(hits) != 1 || hits[0].ID != none {
			t.Fatalf("personal: %+v", hits)
		}
		for _, tc := range []struct {
			method string
			params map[string]any
		}{
			{"memory.write", map[string]any{"text": ""}},
			{"memory.write", map[string]any{"text": "x", "tags": []string{" "}}},
			{"memory.search", map[string]any{"query": " "}},
			{"memory.search", map[string]any{"query": "x", "limit": 0}},
		} {
			err := c.Call(ctx, tc.method, tc.params, nil)
			if err == nil || !err.HasCode("invalid_params") {
				t.Errorf("%s %v: %v, want invalid_params", tc.method, tc.params, err)
			}
		}
	})
}

// memoryScript makes the model call the memory tools.
const memoryScript = `{"steps":[
 {"match":"remember","tool_calls":[{"name":"memory_write","arguments":{"text":"The deploy target is the blue cluster","tags":["deploy"]}}]},
 {"after_tool":"memory_write","text":"Noted."},
 {"match":"recall","tool_calls":[{"name":"memory_search","arguments":{"query":"deploy cluster"}}]},
 {"after_tool":"memory_search","text":"Found it."},
 {"default":true,"text":"ok"}
],"repeat":true}`

// TestMemoryTools: notes the model writes with memory_write are found by
// memory.search and by the model's memory_search.
func TestMemoryTools(t *testing.T) {
	home := t.TempDir()
	script := filepath.Join(home, "script.json")
	if err := os.WriteFile(script, []byte(memoryScript), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + script})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	c := dialGRPC(t, d)
	ctx := context.Background()

	var tools struct {
		Tools []struct {
			Name          string `json:"name"`
			PermissionTag string `json:"permissionTag"`
			State         string `json:"state"`
		} `json:"tools"`
	}
	if err := c.Call(ctx, "tool.list", map[string]any{}, &tools); err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{}
	for _, tl := range tools.Tools {
		tags[tl.Name] = tl.PermissionTag + "/" + tl.State
	}
	if tags["memory_write"] != "write/active" || tags["memory_search"] != "read/active" {
		t.Fatalf("tool.list memory tools: write %q, search %q", tags["memory_write"], tags["memory_search"])
	}

	id := createSession(t, c, nil) // mode accept: write and read are allowed
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "remember the deploy target"}, nil); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, c.Events(id), "turn.done", 1)
	if res := toolResult(evs, "memory_write"); res == nil || res["ok"] != true {
		t.Fatalf("memory_write result %v in %v", res, eventKinds(evs))
	}
	hits := searchNotes(t, c, map[string]any{"query": "blue"})
	if len(hits) != 1 || hits[0].Text != "The deploy target is the blue cluster" || !slices.Equal(hits[0].Tags, []string{"deploy"}) {
		t.Fatalf("memory.search after memory_write: %+v", hits)
	}
	if err := c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "recall it"}, nil); err != nil {
		t.Fatal(err)
	}
	evs = collect(t, c.Events(id), "turn.done", 1)
	if res := toolResult(evs, "memory_search"); res == nil || res["ok"] != true || !strings.Contains(fmt.Sprint(res["output"]), "blue cluster") {
		t.Fatalf("memory_search result %v", res)
	}
}

func toolResult(evs []map[string]any, name string) map[string]any {
	for _, ev := range evs {
		if p := payloadOf(ev); ev["kind"] == "tool.result" && p["name"] == name {
			return p
		}
	}
	return nil
}

// skillFolder writes a skill folder (SKILL.md and files/notes.txt);
// skillTarGz and skillGitRepo turn one into the other kinds of source.
func skillFolder(t *testing.T, name, description, body string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(filepath.Join(dir, "files"), 0o755); err != nil {
		t.Fatal(err)
	}
	md := fmt.Sprintf("---\nname: %s\ndescription: %s\n---\n%s\n", name, description, body)
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "files", "notes.txt"), []byte("extra file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func skillTarGz(t *testing.T, dir string) string {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	base := filepath.Base(dir)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(dir), p)
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			tw.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	gz.Close()
	p := filepath.Join(t.TempDir(), base+".tar.gz")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func skillGitRepo(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
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

type skillRow struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Source      string `json:"source"`
	Path        string `json:"path"`
	Installed   bool   `json:"installed"`
}

func skillNames(rows []skillRow) string {
	var out []string
	for _, r := range rows {
		mark := "-"
		if r.Installed {
			mark = "+"
		}
		out = append(out, r.Name+mark)
	}
	return strings.Join(out, ",")
}

// TestSkillsInstallListSearchRemove installs skills from a folder, a
// .tar.gz and a file:// git repository, lists, searches (with the
// catalog), refuses bad ones and removes them.
func TestSkillsInstallListSearchRemove(t *testing.T) {
	eachTransport(t, func(t *testing.T, d *daemon.Daemon, dial func() client) {
		c := dial()
		ctx := context.Background()
		catalogDir := filepath.Join(d.Home(), "skill-catalog")
		if err := os.MkdirAll(catalogDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(skillFolder(t, "catalogued", "A skill waiting in the catalog", "x"), filepath.Join(catalogDir, "catalogued")); err != nil {
			t.Fatal(err)
		}

		folder := skillFolder(t, "from-folder", "Installed from a folder", "Folder instructions.")
		tgz := skillTarGz(t, skillFolder(t, "from-tarball", "Installed from a tarball", "Tarball instructions."))
		repo := skillGitRepo(t, skillFolder(t, "from-git", "Installed from git", "Git instructions."))
		for _, src := range []string{folder, tgz, repo} {
			if err := c.Call(ctx, "skill.install", map[string]any{"source": src}, nil); err != nil {
				t.Fatalf("skill.install %s: %v", src, err)
			}
		}
		var list struct {
			Skills []skillRow `json:"skills"`
		}
		if err := c.Call(ctx, "skill.list", map[string]any{}, &list); err != nil {
			t.Fatal(err)
		}
		if got := skillNames(list.Skills); got != "from-folder+,from-git+,from-tarball+" {
			t.Fatalf("skill.list = %s", got)
		}
		for _, r := range list.Skills {
			if r.Path != filepath.Join(d.Home(), "skills", r.Name) {
				t.Errorf("%s path %s", r.Name, r.Path)
			}
			if _, err := os.Stat(filepath.Join(r.Path, "files", "notes.txt")); err != nil {
				t.Errorf("%s lost its files: %v", r.Name, err)
			}
		}
		if list.Skills[1].Source != repo || list.Skills[0].Source != folder {
			t.Errorf("sources %+v", list.Skills)
		}

		var found struct {
			Skills []skillRow `json:"skills"`
		}
		for query, want := range map[string]string{
			"":          "from-folder+,from-git+,from-tarball+,catalogued-",
			"tarball":   "from-tarball+",
			"catalog":   "catalogued-",
			"INSTALLED": "from-folder+,from-git+,from-tarball+",
		} {
			if err := c.Call(ctx, "skill.search", map[string]any{"query": query}, &found); err != nil {
				t.Fatal(err)
			}
			if got := skillNames(found.Skills); got != want {
				t.Errorf("skill.search %q = %s, want %s", query, got, want)
			}
		}

		bad := skillFolder(t, "Bad_Name", "x", "y")
		err := c.Call(ctx, "skill.install", map[string]any{"source": bad}, nil)
		if err == nil || !err.HasCode("invalid_params") || !strings.Contains(err.Message, "[a-z0-9-]+") {
			t.Errorf("install of a bad name: %v", err)
		}
		clash := skillFolder(t, "from-folder", "Same name, other source", "x")
		if err := c.Call(ctx, "skill.install", map[string]any{"source": clash}, nil); err == nil || !err.HasCode("invalid_params") {
			t.Errorf("install of a taken name: %v", err)
		}
		if err := c.Call(ctx, "skill.install", map[string]any{"source": folder}, nil); err != nil {
			t.Errorf("reinstall from the same folder: %v", err)
		}

		if err := c.Call(ctx, "skill.remove", map[string]any{"name": "from-git"}, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Call(ctx, "skill.remove", map[string]any{"name": "from-git"}, nil); err == nil || !err.HasCode("not_found") {
			t.Errorf("second remove: %v, want not_found", err)
		}
		if err := c.Call(ctx, "skill.list", map[string]any{}, &list); err != nil || skillNames(list.Skills) != "from-folder+,from-tarball+" {
			t.Fatalf("after remove: %s, %v", skillNames(list.Skills), err)
		}
	})
}

// waitCommandsChanged reads the WebSocket client's notifications until a
// commands.changed arrives, or gives up after wait.
func waitCommandsChanged(c *wsClient, wait time.Duration) map[string]any {
	deadline := time.After(wait)
	for {
		select {
		case f := <-c.notes:
			if f.Method != "commands.changed" {
				continue
			}
			var p map[string]any
			_ = json.Unmarshal(f.Params, &p)
			return p
		case <-deadline:
			return nil
		}
	}
}

func commandSources(p map[string]any) map[string]string {
	out := map[string]string{}
	cmds, _ := p["commands"].([]any)
	for _, c := range cmds {
		if m, ok := c.(map[string]any); ok {
			out[fmt.Sprint(m["name"])] = fmt.Sprint(m["source"])
		}
	}
	return out
}

// TestSkillReloadNotifies: skill.reload, and an install by another
// client, reach a WebSocket client as commands.changed {commands, reason}.
func TestSkillReloadNotifies(t *testing.T) {
	d := startDaemon(t)
	ws := helloWS(t, d)
	other := dialGRPC(t, d)
	ctx := context.Background()
	// The connection's commands watch starts with hello, asynchronously:
	// reload until a notification shows that it is live.
	var got map[string]any
	deadline := time.Now().Add(15 * time.Second)
	for got == nil && time.Now().Before(deadline) {
		if err := ws.Call(ctx, "skill.reload", map[string]any{}, nil); err != nil {
			t.Fatal(err)
		}
		got = waitCommandsChanged(ws, 500*time.Millisecond)
	}
	if got == nil {
		t.Fatal("no commands.changed after skill.reload within 15 s")
	}
	if got["reason"] != "reload" || commandSources(got)["help"] != "builtin" {
		t.Fatalf("commands.changed = %v", got)
	}
	for waitCommandsChanged(ws, 200*time.Millisecond) != nil {
		// the extra reloads
	}

	steps := []struct {
		reason string
		do     func() *errcode.Error
		has    bool // whether "first" is a command after the step
	}{
		{"install", func() *errcode.Error {
			return other.Call(ctx, "skill.install", map[string]any{"source": skillFolder(t, "first", "The first skill", "x")}, nil)
		}, true},
		{"reload", func() *errcode.Error { return ws.Call(ctx, "skill.reload", map[string]any{}, nil) }, true},
		{"remove", func() *errcode.Error { return other.Call(ctx, "skill.remove", map[string]any{"name": "first"}, nil) }, false},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.reason, err)
		}
		got := waitCommandsChanged(ws, 15*time.Second)
		if got == nil || got["reason"] != st.reason {
			t.Fatalf("commands.changed after %s = %v", st.reason, got)
		}
		if src, ok := commandSources(got)["first"]; ok != st.has || ok && src != "skill" {
			t.Fatalf("after %s: /first is %q (listed %v), want listed %v", st.reason, src, ok, st.has)
		}
	}
}

// TestSkillCommandRunsTurn: an installed skill is a /name command; running
// it starts a turn whose prompt is the skill's instructions (the scripted
// model answers its "hello") followed by the args.
func TestSkillCommandRunsTurn(t *testing.T) {
	eachTransport(t, func(t *testing.T, d *daemon.Daemon, dial func() client) {
		c := dial()
		ctx := context.Background()
		src := skillFolder(t, "myskill", "Greets, then reviews", "Say hello to the reviewer, then review the change.")
		if err := c.Call(ctx, "skill.install", map[string]any{"source": src}, nil); err != nil {
			t.Fatal(err)
		}
		id := createSession(t, c, nil)
		var cmds struct {
			Commands []struct {
				Name    string `json:"name"`
				Summary string `json:"summary"`
				Source  string `json:"source"`
			} `json:"commands"`
		}
		if err := c.Call(ctx, "command.list", map[string]any{"sessionId": id}, &cmds); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(cmds.Commands, func(c struct {
			Name    string `json:"name"`
			Summary string `json:"summary"`
			Source  string `json:"source"`
		}) bool {
			return c.Name == "myskill"
		})
		if i < 0 || cmds.Commands[i].Source != "skill" || cmds.Commands[i].Summary != "Greets, then reviews" {
			t.Fatalf("command.list: %+v", cmds.Commands)
		}

		for n, run := range []func() *errcode.Error{
			func() *errcode.Error {
				return c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "/myskill main.go"}, nil)
			},
			func() *errcode.Error {
				return c.Call(ctx, "command.run", map[string]any{"sessionId": id, "name": "myskill", "args": "util.go"}, nil)
			},
		} {
			if err := run(); err != nil {
				t.Fatalf("run %d: %v", n, err)
			}
			evs := collect(t, c.Events(id), "turn.done", 1)
			var started, answer string
			for _, ev := range evs {
				switch ev["kind"] {
				case "turn.started":
					started = fmt.Sprint(payloadOf(ev)["prompt"])
				case "message.done":
					answer = fmt.Sprint(payloadOf(ev)["text"])
				}
			}
			last := payloadOf(evs[len(evs)-1])
			if !strings.HasPrefix(started, "/myskill ") || !strings.Contains(answer, "Hello from the scripted model") || last["reason"] != "complete" {
				t.Fatalf("run %d: turn.started %q, answer %q, turn.done %v", n, started, answer, last)
			}
		}
	})
}
