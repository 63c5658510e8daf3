package e2e

// The contract suite of snowpea 1.7's session methods that Trellis added
// for issue 32 item 9 (session.setModel, session.setEffort, session.rename,
// session.notice, session.artifacts, file.complete, session.toolContent): each is called the
// way snowpea 1.7.0's protocol reference describes it, over WebSocket
// after a protocol 1.7.0 hello — valid params, a wrong type, an unknown id
// and an unknown field.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
)

// compat17Fixture answers a notice it reads as the latest message.
const compat17Fixture = `{
  "steps": [
    {"match": "[system] the download finished", "text": "Noted the download."},
    {"match": "run echo", "text": "Running it.", "tool_calls": [{"id": "call_echo", "name": "shell", "arguments": {"command": "echo tool-content-ok"}}]},
    {"after_tool": "shell", "text": "Ran it."}
  ],
  "default": {"text": "Default from the fixture."},
  "repeat": true
}`

// call17 is one call of the suite and what it must answer: the error code
// (and a piece of its message), or a result check.
type call17 struct {
	name    string
	method  string
	params  map[string]any
	code    string // "" = success
	message string
	check   func(t *testing.T, res map[string]any)
}

func (tc call17) run(t *testing.T, c client) map[string]any {
	t.Helper()
	var res map[string]any
	err := c.Call(context.Background(), tc.method, tc.params, &res)
	if tc.code != "" {
		wantCode(t, err, tc.code, tc.message)
		return nil
	}
	if err != nil {
		t.Fatalf("%s %v: %v", tc.method, tc.params, err)
	}
	if tc.check != nil {
		tc.check(t, res)
	}
	return res
}

func sessionRow(t *testing.T, c client, id string) map[string]any {
	t.Helper()
	var res struct {
		Sessions []map[string]any `json:"sessions"`
	}
	if err := c.Call(context.Background(), "session.list", map[string]any{}, &res); err != nil {
		t.Fatalf("session.list: %v", err)
	}
	for _, s := range res.Sessions {
		if s["sessionId"] == id {
			return s
		}
	}
	t.Fatalf("session %s not listed", id)
	return nil
}

func equal17(t *testing.T, res map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		got, _ := json.Marshal(res[k])
		exp, _ := json.Marshal(v)
		if string(got) != string(exp) {
			t.Fatalf("%s = %s, want %s (result %v)", k, got, exp, res)
		}
	}
}

func startCompat17(t *testing.T) (*daemon.Daemon, *wsClient) {
	t.Helper()
	d := startDaemonScript(t, t.TempDir(), daemon.Config{}, compat17Fixture)
	return d, compatHello(t, d)
}

// TestCompat17SessionPins: session.setModel, session.setEffort and
// session.rename change what session.list shows and the next turn uses.
func TestCompat17SessionPins(t *testing.T) {
	_, c := startCompat17(t)
	id := createSession(t, c, nil)
	start := sessionRow(t, c, id)
	defModel, defProvider := start["model"], start["provider"]
	unknown := "s-0000000000000000000000000"

	for _, tc := range []call17{
		{name: "setModel vendor:model", method: "session.setModel", params: map[string]any{"sessionId": id, "model": "fake:other-model"},
			check: func(t *testing.T, res map[string]any) {
				equal17(t, res, map[string]any{"model": "other-model", "provider": "fake", "pinned": true})
				equal17(t, sessionRow(t, c, id), map[string]any{"model": "other-model", "provider": "fake"})
			}},
		{name: "setModel bare model id", method: "session.setModel", params: map[string]any{"sessionId": id, "model": "llama3:8b"},
			check: func(t *testing.T, res map[string]any) {
				equal17(t, res, map[string]any{"model": "llama3:8b", "provider": "fake", "pinned": true})
			}},
		{name: "setModel bare vendor", method: "session.setModel", params: map[string]any{"sessionId": id, "model": "fake"},
			check: func(t *testing.T, res map[string]any) {
				equal17(t, res, map[string]any{"model": defModel, "provider": "fake", "pinned": true})
			}},
		{name: "setModel inherit", method: "session.setModel", params: map[string]any{"sessionId": id, "model": "inherit"},
			check: func(t *testing.T, res map[string]any) {
				equal17(t, res, map[string]any{"model": defModel, "provider": defProvider, "pinned": false})
			}},
		{name: "setModel null", method: "session.setModel", params: map[string]any{"sessionId": id, "model": nil},
			check: func(t *testing.T, res map[string]any) {
				equal17(t, res, map[string]any{"model": defModel, "pinned": false})
			}},
		{name: "setModel unconfigured vendor", method: "session.setModel", params: map[string]any{"sessionId": id, "model": "anthropic:claude-x"},
			code: "invalid_params", message: "anthropic"},
		{name: "setModel wrong type", method: "session.setModel", params: map[string]any{"sessionId": id, "model": 4}, code: "invalid_params", message: `"model"`},
		{name: "setModel unknown id", method: "session.setModel", params: map[string]any{"sessionId": unknown, "model": "m"}, code: "not_found", message: unknown},
		{name: "setModel unknown field", method: "session.setModel", params: map[string]any{"sessionId": id, "profile": "x"}, code: "invalid_params", message: `"profile"`},

		{name: "setEffort pin", method: "session.setEffort", params: map[string]any{"sessionId": id, "effort": "high"},
			check: func(t *testing.T, res map[string]any) {
				equal17(t, res, map[string]any{"sessionId": id, "effort": "high", "pinned": "high", "effortSource": "session"})
				if efs, _ := res["efforts"].([]any); !slices.Contains(efs, any("high")) || !slices.Contains(efs, any("max")) {
					t.Fatalf("efforts %v", res["efforts"])
				}
			}},
		{name: "setEffort max", method: "session.setEffort", params: map[string]any{"sessionId": id, "effort": "max"},
			check: func(t *testing.T, res map[string]any) {
				equal17(t, res, map[string]any{"effort": "max", "pinned": "max"})
			}},
		{name: "setEffort clear", method: "session.setEffort", params: map[string]any{"sessionId": id, "effort": nil},
			check: func(t *testing.T, res map[string]any) {
				equal17(t, res, map[string]any{"effort": nil, "pinned": nil, "effortSource": "default"})
			}},
		{name: "setEffort clear again", method: "session.setEffort", params: map[string]any{"sessionId": id},
			check: func(t *testing.T, res map[string]any) { equal17(t, res, map[string]any{"effort": nil}) }},
		{name: "setEffort unknown tier", method: "session.setEffort", params: map[string]any{"sessionId": id, "effort": "extreme"}, code: "invalid_params", message: `"effort"`},
		{name: "setEffort wrong type", method: "session.setEffort", params: map[string]any{"sessionId": id, "effort": true}, code: "invalid_params", message: `"effort"`},
		{name: "setEffort unknown id", method: "session.setEffort", params: map[string]any{"sessionId": unknown, "effort": "low"}, code: "not_found", message: unknown},
		{name: "setEffort unknown field", method: "session.setEffort", params: map[string]any{"sessionId": id, "effort": "low", "scope": "x"}, code: "invalid_params", message: `"scope"`},

		{name: "rename", method: "session.rename", params: map[string]any{"sessionId": id, "title": "Release notes"},
			check: func(t *testing.T, res map[string]any) {
				equal17(t, res, map[string]any{"ok": true})
				equal17(t, sessionRow(t, c, id), map[string]any{"title": "Release notes"})
			}},
		{name: "rename empty clears", method: "session.rename", params: map[string]any{"sessionId": id, "title": ""},
			check: func(t *testing.T, res map[string]any) {
				if title := sessionRow(t, c, id)["title"]; title != nil && title != "" {
					t.Fatalf("title %v after clearing", title)
				}
			}},
		{name: "rename wrong type", method: "session.rename", params: map[string]any{"sessionId": id, "title": 7}, code: "invalid_params", message: `"title"`},
		{name: "rename unknown id", method: "session.rename", params: map[string]any{"sessionId": unknown, "title": "x"}, code: "not_found", message: unknown},
		{name: "rename unknown field", method: "session.rename", params: map[string]any{"sessionId": id, "title": "x", "name": "y"}, code: "invalid_params", message: `"name"`},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, c) })
	}

	// The pins reach the next turn: it runs on the pinned model, and
	// session.rename's title survives the prompt (only an empty one is
	// named from it).
	// Each change is a model.changed event: the model and effort the next
	// turn uses.
	evs := c.Events(id)
	call17{method: "session.setModel", params: map[string]any{"sessionId": id, "model": "fake:pinned-model"}}.run(t, c)
	changed := await(t, evs, "model.changed", func(ev map[string]any) bool {
		return ev["kind"] == "model.changed" && payloadOf(ev)["model"] == "pinned-model"
	})
	equal17(t, payloadOf(changed), map[string]any{"provider": "fake", "effort": nil, "effortSource": "default"})
	call17{method: "session.setEffort", params: map[string]any{"sessionId": id, "effort": "medium"}}.run(t, c)
	changed = await(t, evs, "model.changed", func(ev map[string]any) bool {
		return ev["kind"] == "model.changed" && payloadOf(ev)["effort"] == "medium"
	})
	equal17(t, payloadOf(changed), map[string]any{"provider": "fake", "model": "pinned-model", "effortSource": "session"})
	call17{method: "session.rename", params: map[string]any{"sessionId": id, "title": "Kept"}}.run(t, c)
	turn := prompt(t, c, map[string]any{"sessionId": id, "text": "which model?"})
	usage := await(t, evs, "usage", kindIs("usage"))
	if m := payloadOf(usage)["model"]; m != "pinned-model" {
		t.Fatalf("the turn ran on model %v, want the pinned one", m)
	}
	await(t, evs, "turn.done", turnDone(turn))
	equal17(t, sessionRow(t, c, id), map[string]any{"title": "Kept", "model": "pinned-model"})
}

// TestCompat17Notice: session.notice starts no turn; the next model call
// reads the line as "[system] " + text.
func TestCompat17Notice(t *testing.T) {
	_, c := startCompat17(t)
	id := createSession(t, c, nil)
	evs := c.Events(id)
	for _, tc := range []call17{
		{name: "valid", method: "session.notice", params: map[string]any{"sessionId": id, "text": "the download finished"},
			check: func(t *testing.T, res map[string]any) { equal17(t, res, map[string]any{"ok": true}) }},
		{name: "empty text", method: "session.notice", params: map[string]any{"sessionId": id, "text": " "}, code: "invalid_params", message: "text"},
		{name: "wrong type", method: "session.notice", params: map[string]any{"sessionId": id, "text": []string{"a"}}, code: "invalid_params", message: `"text"`},
		{name: "unknown id", method: "session.notice", params: map[string]any{"sessionId": "s-0000000000000000000000000", "text": "x"}, code: "not_found", message: "s-0000000000000000000000000"},
		{name: "unknown field", method: "session.notice", params: map[string]any{"sessionId": id, "text": "x", "level": "info"}, code: "invalid_params", message: `"level"`},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, c) })
	}
	select {
	case ev := <-evs:
		t.Fatalf("session.notice emitted %v; it starts no turn", ev)
	case <-time.After(300 * time.Millisecond):
	}
	turn := prompt(t, c, map[string]any{"sessionId": id, "text": "anything new?"})
	done := await(t, evs, "message.done", kindIs("message.done"))
	if got := payloadOf(done)["text"]; got != "Noted the download." {
		t.Fatalf("the model answered %q; it did not read the notice", got)
	}
	await(t, evs, "turn.done", turnDone(turn))
	// A notice is read once.
	turn = prompt(t, c, map[string]any{"sessionId": id, "text": "and now?"})
	if got := payloadOf(await(t, evs, "message.done", kindIs("message.done")))["text"]; got != "Default from the fixture." {
		t.Fatalf("second turn answered %q; the notice was read again", got)
	}
	await(t, evs, "turn.done", turnDone(turn))
}

// TestCompat17Files: session.artifacts lists the workdir's artifacts/,
// newest first; file.complete completes paths under a session's workdir or
// a workdir, never outside it.
func TestCompat17Files(t *testing.T) {
	_, c := startCompat17(t)
	wd := t.TempDir()
	write := func(rel string, age time.Duration) {
		p := filepath.Join(wd, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("data of "+rel), 0o644); err != nil {
			t.Fatal(err)
		}
		mt := time.Now().Add(-age)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	write("artifacts/report.txt", 2*time.Hour)
	write("artifacts/charts/plot.png", time.Hour)
	write("main.go", 0)
	write("Makefile", 0)
	write("README.md", 0)
	write("docs/guide.md", 0)
	write("docs/api.md", 0)
	write("docs/data.md", 0)
	write(".env", 0)
	id := createSession(t, c, map[string]any{"workdir": wd})
	empty := createSession(t, c, nil)
	unknown := "s-0000000000000000000000000"
	paths := func(res map[string]any) []string {
		var out []string
		for _, e := range res["entries"].([]any) {
			out = append(out, e.(map[string]any)["path"].(string))
		}
		return out
	}
	wantPaths := func(t *testing.T, res map[string]any, want ...string) {
		t.Helper()
		if got := paths(res); !slices.Equal(got, want) {
			t.Fatalf("entries %v, want %v (result %v)", got, want, res)
		}
	}

	for _, tc := range []call17{
		{name: "artifacts", method: "session.artifacts", params: map[string]any{"sessionId": id},
			check: func(t *testing.T, res map[string]any) {
				real, _ := filepath.EvalSymlinks(wd)
				equal17(t, res, map[string]any{"workspaceDir": real})
				arts := res["artifacts"].([]any)
				if len(arts) != 2 {
					t.Fatalf("artifacts %v", arts)
				}
				newest, oldest := arts[0].(map[string]any), arts[1].(map[string]any)
				equal17(t, newest, map[string]any{"name": "charts/plot.png", "mimeType": "image/png",
					"path": filepath.Join(real, "artifacts", "charts", "plot.png"), "size": len("data of artifacts/charts/plot.png")})
				equal17(t, oldest, map[string]any{"name": "report.txt"})
				if _, err := time.Parse(time.RFC3339, newest["modifiedAt"].(string)); err != nil {
					t.Fatalf("modifiedAt: %v", err)
				}
			}},
		{name: "artifacts none", method: "session.artifacts", params: map[string]any{"sessionId": empty},
			check: func(t *testing.T, res map[string]any) { equal17(t, res, map[string]any{"artifacts": []any{}}) }},
		{name: "artifacts wrong type", method: "session.artifacts", params: map[string]any{"sessionId": 12}, code: "invalid_params", message: `"sessionId"`},
		{name: "artifacts unknown id", method: "session.artifacts", params: map[string]any{"sessionId": unknown}, code: "not_found", message: unknown},
		{name: "artifacts unknown field", method: "session.artifacts", params: map[string]any{"sessionId": id, "kind": "png"}, code: "invalid_params", message: `"kind"`},

		{name: "complete prefix", method: "file.complete", params: map[string]any{"sessionId": id, "query": "ma"},
			check: func(t *testing.T, res map[string]any) {
				wantPaths(t, res, "Makefile", "main.go")
				equal17(t, res, map[string]any{"truncated": false})
				equal17(t, res["entries"].([]any)[1].(map[string]any), map[string]any{"kind": "file", "size": len("data of main.go")})
			}},
		{name: "complete top level", method: "file.complete", params: map[string]any{"sessionId": id},
			check: func(t *testing.T, res map[string]any) {
				wantPaths(t, res, "artifacts/", "docs/", "Makefile", "README.md", "main.go")
				equal17(t, res["entries"].([]any)[0].(map[string]any), map[string]any{"kind": "dir", "size": nil})
			}},
		{name: "complete in a directory", method: "file.complete", params: map[string]any{"sessionId": id, "query": "docs/"},
			check: func(t *testing.T, res map[string]any) {
				wantPaths(t, res, "docs/api.md", "docs/data.md", "docs/guide.md")
			}},
		{name: "complete substring after prefix", method: "file.complete", params: map[string]any{"sessionId": id, "query": "docs/a"},
			check: func(t *testing.T, res map[string]any) { wantPaths(t, res, "docs/api.md", "docs/data.md") }},
		{name: "complete hidden", method: "file.complete", params: map[string]any{"sessionId": id, "query": ".e"},
			check: func(t *testing.T, res map[string]any) { wantPaths(t, res, ".env") }},
		{name: "complete limit", method: "file.complete", params: map[string]any{"sessionId": id, "limit": 1},
			check: func(t *testing.T, res map[string]any) {
				wantPaths(t, res, "artifacts/")
				equal17(t, res, map[string]any{"truncated": true})
			}},
		{name: "complete by workdir", method: "file.complete", params: map[string]any{"workdir": wd, "query": "READ"},
			check: func(t *testing.T, res map[string]any) { wantPaths(t, res, "README.md") }},
		{name: "complete outside the workdir", method: "file.complete", params: map[string]any{"sessionId": id, "query": "../"}, code: "invalid_params", message: "out of the workdir"},
		{name: "complete neither", method: "file.complete", params: map[string]any{"query": "a"}, code: "invalid_params", message: "workdir"},
		{name: "complete wrong type", method: "file.complete", params: map[string]any{"sessionId": id, "limit": "ten"}, code: "invalid_params", message: `"limit"`},
		{name: "complete unknown id", method: "file.complete", params: map[string]any{"sessionId": unknown}, code: "not_found", message: unknown},
		{name: "complete unknown field", method: "file.complete", params: map[string]any{"sessionId": id, "glob": "*"}, code: "invalid_params", message: `"glob"`},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, c) })
	}
}

// TestCompat17ToolContent: session.toolContent returns a recent tool
// result's content as blocks (Trellis's tools answer text).
func TestCompat17ToolContent(t *testing.T) {
	_, c := startCompat17(t)
	id := createSession(t, c, map[string]any{"mode": "auto"})
	evs := c.Events(id)
	// Enough turns first that the result is not in the first page of
	// events the daemon reads.
	for i := 0; i < 40; i++ {
		await(t, evs, "turn.done", turnDone(prompt(t, c, map[string]any{"sessionId": id, "text": "filler"})))
	}
	turn := prompt(t, c, map[string]any{"sessionId": id, "text": "run echo"})
	res := await(t, evs, "tool.result", kindIs("tool.result"))
	if p := payloadOf(res); p["callId"] != "call_echo" || p["ok"] != true || seqOf(res) <= 256 {
		t.Fatalf("tool.result %v at seq %d (want past the first page of 256)", p, seqOf(res))
	}
	await(t, evs, "turn.done", turnDone(turn))
	for _, tc := range []call17{
		{name: "valid", method: "session.toolContent", params: map[string]any{"sessionId": id, "callId": "call_echo"},
			check: func(t *testing.T, res map[string]any) {
				equal17(t, res, map[string]any{"callId": "call_echo"})
				blocks := res["content"].([]any)
				b := blocks[0].(map[string]any)
				if len(blocks) != 1 || b["type"] != "text" || !strings.Contains(b["text"].(string), "tool-content-ok") {
					t.Fatalf("content %v", blocks)
				}
			}},
		{name: "unknown call", method: "session.toolContent", params: map[string]any{"sessionId": id, "callId": "call_none"}, code: "not_found", message: "call_none"},
		{name: "wrong type", method: "session.toolContent", params: map[string]any{"sessionId": id, "callId": 3}, code: "invalid_params", message: `"callId"`},
		{name: "unknown id", method: "session.toolContent", params: map[string]any{"sessionId": "s-0000000000000000000000000", "callId": "call_echo"}, code: "not_found", message: "s-0000000000000000000000000"},
		{name: "unknown field", method: "session.toolContent", params: map[string]any{"sessionId": id, "callId": "call_echo", "raw": true}, code: "invalid_params", message: `"raw"`},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, c) })
	}
}
