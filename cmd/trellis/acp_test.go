package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/runtime/tool/mcp/mcptest"
)

// acpScript is the fake model of TestACP: a turn that reasons, streams
// text, writes a file (no approval in accept mode) and runs a command (an
// approval), and a slow turn to cancel.
var acpScript = `{"steps":[
 {"match":"write notes","reasoning":"The user wants notes.","text":"I will write the notes and read them back.",
  "tool_calls":[{"name":"write_file","id":"call_write","arguments":{"path":"notes.txt","content":"one\ntwo\n"}},
                {"name":"shell","id":"call_shell","arguments":{"command":"cat notes.txt"}}]},
 {"after_tool":"shell","text":"Written and read back."},
 {"match":"slow","text":"` + strings.Repeat("slow ", 300) + `","delaySec":60},
 {"default":true,"text":"Default answer."}
]}`

// acpSummary is what testdata/acp-client/client.mjs prints.
type acpSummary struct {
	Refused         map[string]any `json:"refused"`
	ProtocolVersion int            `json:"protocolVersion"`
	LoadSession     bool           `json:"loadSession"`
	Modes           []string       `json:"modes"`
	CurrentMode     string         `json:"currentMode"`
	Write           acpPhase       `json:"write"`
	Permissions     []struct {
		Phase      string   `json:"phase"`
		ToolCallID string   `json:"toolCallId"`
		Status     string   `json:"status"`
		Kinds      []string `json:"kinds"`
	} `json:"permissions"`
	Slow   acpPhase `json:"slow"`
	Mode   acpPhase `json:"mode"`
	Load   acpPhase `json:"load"`
	Reload acpPhase `json:"reload"`
	Resume struct {
		acpPhase
		Advertised bool `json:"advertised"`
	} `json:"resume"`
	// KilledPID is the daemon the client killed with SIGKILL before the
	// reload.
	KilledPID int `json:"killedPid"`
}

type acpPhase struct {
	StopReason   string   `json:"stopReason"`
	CurrentMode  string   `json:"currentMode"`
	UserMessages []string `json:"userMessages"`
	AgentText    string   `json:"agentText"`
	AgentChunks  int      `json:"agentChunks"`
	ThoughtText  string   `json:"thoughtText"`
	ToolCalls    []struct {
		Announced int      `json:"announced"`
		Title     string   `json:"title"`
		Kind      string   `json:"kind"`
		Statuses  []string `json:"statuses"`
		Output    string   `json:"output"`
		Diffs     []struct {
			Path    string  `json:"path"`
			OldText *string `json:"oldText"`
			NewText string  `json:"newText"`
		} `json:"diffs"`
	} `json:"toolCalls"`
	ModeUpdates []string  `json:"modeUpdates"`
	Prompt      *acpPhase `json:"prompt"`
}

// acpClient returns the node command line of the ACP client script, or why
// it cannot run.
func acpClient() ([]string, string) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, "node is not installed"
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "acp-client"))
	if err != nil {
		return nil, err.Error()
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@agentclientprotocol", "sdk")); err != nil {
		return nil, "@agentclientprotocol/sdk is not installed: run (cd cmd/trellis/testdata/acp-client && npm ci)"
	}
	return []string{node, filepath.Join(dir, "client.mjs")}, ""
}

// TestACP: an editor (the official ACP client) launches `trellis acp`,
// which starts the daemon; a prompt streams reasoning and text, a file
// write shown as a diff and a command the editor allows; a second prompt is
// cancelled mid-stream; session/set_mode changes the mode; session/load
// replays the conversation once, also in a new agent process after the
// daemon was killed with SIGKILL (the agent starts a new one); session/resume
// in a third replays nothing and follows the session.
func TestACP(t *testing.T) {
	argv, skip := acpClient()
	if skip != "" {
		t.Skip(skip)
	}
	e := newEnv(t)
	if err := os.WriteFile(e.script, []byte(acpScript), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	argv = append(argv, e.dir, binary, "--home", e.home, "--provider", "fake:"+e.script, "acp")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(cleanEnv(), "ACP_TEST_KILL_DAEMON="+filepath.Join(e.home, "daemon.json"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the ACP client: %v\nstderr:\n%s", err, stderr.String())
	}
	var s acpSummary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("the ACP client printed %q: %v\nstderr:\n%s", stdout.String(), err, stderr.String())
	}
	t.Logf("summary: %s", stdout.String())

	// JSON-RPC's invalid params, and ACP's resource not found.
	wantRefused := map[string]any{"relativeCwd": -32602.0, "unknownSession": -32602.0, "loadUnknown": -32002.0, "image": -32602.0}
	if !maps.Equal(s.Refused, wantRefused) {
		t.Errorf("refused requests answered %v, want %v", s.Refused, wantRefused)
	}
	if s.ProtocolVersion != 1 || !s.LoadSession {
		t.Errorf("initialize: protocol %d, loadSession %v; want 1, true", s.ProtocolVersion, s.LoadSession)
	}
	if want := []string{"plan", "accept", "auto"}; !slices.Equal(s.Modes, want) || s.CurrentMode != "accept" {
		t.Errorf("session/new modes %v (current %q), want %v (current accept)", s.Modes, s.CurrentMode, want)
	}

	const answer = "I will write the notes and read them back.Written and read back."
	w := s.Write
	if len(w.UserMessages) != 0 {
		t.Errorf("write prompt: the editor's own prompt came back as user messages %q", w.UserMessages)
	}
	if w.StopReason != "end_turn" || w.AgentText != answer || w.AgentChunks < 2 || w.ThoughtText != "The user wants notes." {
		t.Errorf("write prompt: stop %q, text %q in %d chunks, thought %q", w.StopReason, w.AgentText, w.AgentChunks, w.ThoughtText)
	}
	checkACPToolCalls(t, "write prompt", w, e.dir)
	if len(s.Permissions) != 1 || s.Permissions[0].ToolCallID != "call_shell" || s.Permissions[0].Status != "pending" ||
		!slices.Contains(s.Permissions[0].Kinds, "allow_once") || !slices.Contains(s.Permissions[0].Kinds, "reject_once") {
		t.Errorf("permission requests %+v, want one for call_shell (pending, allow_once … reject_once)", s.Permissions)
	}
	if got, err := os.ReadFile(filepath.Join(e.dir, "notes.txt")); err != nil || string(got) != "one\ntwo\n" {
		t.Errorf("notes.txt = %q, %v", got, err)
	}

	if s.Slow.StopReason != "cancelled" || !strings.HasPrefix(s.Slow.AgentText, "slow") {
		t.Errorf("cancelled prompt: stop %q, text %q; want cancelled after some text", s.Slow.StopReason, s.Slow.AgentText)
	}
	if !slices.Equal(s.Mode.ModeUpdates, []string{"plan"}) {
		t.Errorf("session/set_mode plan: mode updates %v", s.Mode.ModeUpdates)
	}

	l := s.Load
	if want := []string{"write notes", "slow"}; !slices.Equal(l.UserMessages, want) {
		t.Errorf("session/load replayed the user messages %q, want %q", l.UserMessages, want)
	}
	if l.AgentText != answer+s.Slow.AgentText {
		t.Errorf("session/load replayed the answers %q, want %q", l.AgentText, answer+s.Slow.AgentText)
	}
	if l.CurrentMode != "plan" || !slices.Equal(l.ModeUpdates, []string{"plan"}) {
		t.Errorf("session/load: mode %q, mode updates %v; want plan, [plan]", l.CurrentMode, l.ModeUpdates)
	}
	checkACPToolCalls(t, "session/load", l, e.dir)

	// A new agent process (the editor restarted) loads the session from a
	// new daemon (the first was killed with SIGKILL), then follows it: a
	// prompt streams its answer, with nothing replayed twice.
	if info, err := daemonfile.Read(e.home); s.KilledPID == 0 || err != nil || info.PID == s.KilledPID {
		t.Errorf("the daemon killed before the reload was %d; daemon.json now names %+v (%v): want a new daemon", s.KilledPID, info, err)
	}
	r := s.Reload
	if want := []string{"write notes", "slow"}; !slices.Equal(r.UserMessages, want) || r.AgentText != l.AgentText || r.CurrentMode != "plan" {
		t.Errorf("session/load in a new process: user messages %q, answers %q, mode %q; want %q, %q, plan", r.UserMessages, r.AgentText, r.CurrentMode, want, l.AgentText)
	}
	checkACPToolCalls(t, "session/load in a new process", r, e.dir)
	if p := r.Prompt; p == nil || p.StopReason != "end_turn" || p.AgentText != "Default answer." || len(p.UserMessages) != 0 || len(p.ToolCalls) != 0 {
		t.Errorf("a prompt after session/load in a new process: %+v, want end_turn with the answer %q only", p, "Default answer.")
	}

	// session/resume (advertised) replays nothing; the session follows.
	u := s.Resume
	if !u.Advertised || u.CurrentMode != "plan" || len(u.UserMessages) != 0 || u.AgentText != "" || len(u.ToolCalls) != 0 || len(u.ModeUpdates) != 0 {
		t.Errorf("session/resume: %+v, want it advertised, mode plan and nothing replayed", u.acpPhase)
	}
	if p := u.Prompt; p == nil || p.StopReason != "end_turn" || p.AgentText != "Default answer." || len(p.UserMessages) != 0 {
		t.Errorf("a prompt after session/resume: %+v, want end_turn with the answer %q only", p, "Default answer.")
	}
}

// checkACPToolCalls checks the tool calls of the write prompt, live or
// replayed: each announced once, the write with its diff, the command's
// output.
func checkACPToolCalls(t *testing.T, what string, p acpPhase, dir string) {
	t.Helper()
	if len(p.ToolCalls) != 2 {
		t.Fatalf("%s: tool calls %+v, want 2", what, p.ToolCalls)
	}
	write, shell := p.ToolCalls[0], p.ToolCalls[1]
	if write.Announced != 1 || write.Kind != "edit" || write.Title != "write_file notes.txt" || lastOf(write.Statuses) != "completed" {
		t.Errorf("%s: write_file call %+v", what, write)
	}
	if len(write.Diffs) != 1 || write.Diffs[0].Path != filepath.Join(dir, "notes.txt") || write.Diffs[0].OldText != nil || write.Diffs[0].NewText != "one\ntwo\n" {
		t.Errorf("%s: write_file diffs %+v, want the new file %s", what, write.Diffs, filepath.Join(dir, "notes.txt"))
	}
	if shell.Announced != 1 || shell.Kind != "execute" || lastOf(shell.Statuses) != "completed" || !strings.Contains(shell.Output, "two") {
		t.Errorf("%s: shell call %+v", what, shell)
	}
}

func lastOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// TestACPDiffContent: a diff event's patch becomes ACP diff content, the
// old and new text of its hunks.
func TestACPDiffContent(t *testing.T) {
	for _, tc := range []struct {
		name, patch string
		ok          bool
		old         *string // nil: a created file
		new         string
	}{
		{name: "created", patch: "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n", ok: true, new: "one\ntwo\n"},
		{name: "edited", patch: "--- a/n.txt\n+++ b/n.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n", ok: true,
			old: ptrTo("one\ntwo\nthree\n"), new: "one\n2\nthree\n"},
		{name: "no newline at the end", patch: "--- a/n.txt\n+++ b/n.txt\n@@ -1,2 +1,2 @@\n one\n-two\n\\ No newline at end of file\n+two\n", ok: true,
			old: ptrTo("one\ntwo"), new: "one\ntwo\n"},
		{name: "a removed line that looks like a header", patch: "--- a/n.txt\n+++ b/n.txt\n@@ -1,2 +1,1 @@\n keep\n--- rule\n", ok: true,
			old: ptrTo("keep\n-- rule\n"), new: "keep\n"},
		{name: "too large to diff (empty patch)", patch: "", ok: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := diffContent("/w/n.txt", tc.patch)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			d := c.Diff
			if d == nil || d.Path != "/w/n.txt" || d.NewText != tc.new || (d.OldText == nil) != (tc.old == nil) || (tc.old != nil && *d.OldText != *tc.old) {
				t.Fatalf("diff %+v (old %v), want new %q old %v", d, d.OldText, tc.new, tc.old)
			}
		})
	}
}

func ptrTo(s string) *string { return &s }

// acpFSScript is the fake model of TestACPDelegation: a read, a write and
// a command, each the session's own tool.
var acpFSScript = `{"steps":[
 {"match":"read the draft","tool_calls":[{"name":"read_file","id":"call_read","arguments":{"path":"draft.md"}}]},
 {"after_tool":"read_file","text":"Read it."},
 {"match":"save the draft","tool_calls":[{"name":"write_file","id":"call_write","arguments":{"path":"draft.md","content":"draft v3\n"}}]},
 {"after_tool":"write_file","text":"Saved it."},
 {"match":"run in the terminal","tool_calls":[{"name":"shell","id":"call_shell","arguments":{"command":"echo hi"}}]},
 {"after_tool":"shell","text":"Ran it."},
 {"match":"ask the editor's server","tool_calls":[{"name":"mcp__edsrv__echo","id":"call_mcp","arguments":{"text":"from the editor's server"}}]},
 {"after_tool":"mcp__edsrv__echo","text":"Asked it."},
 {"default":true,"text":"Default answer."}
]}`

// TestACPDelegation: an editor that advertises fs.readTextFile,
// fs.writeTextFile and terminal serves the session's read_file, write_file
// and shell: the model reads the editor's unsaved buffer (not the file on
// disk), the write goes to the editor (the disk is untouched), and the
// command runs in the editor's terminal (created, waited for, read,
// released).
func TestACPDelegation(t *testing.T) {
	argv, skip := acpClient()
	if skip != "" {
		t.Skip(skip)
	}
	argv[1] = filepath.Join(filepath.Dir(argv[1]), "client-fs.mjs")
	e := newEnv(t)
	if err := os.WriteFile(e.script, []byte(acpFSScript), 0o600); err != nil {
		t.Fatal(err)
	}
	draft := filepath.Join(e.dir, "draft.md")
	if err := os.WriteFile(draft, []byte("draft v1, as saved on disk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	argv = append(argv, e.dir, binary, "--home", e.home, "--provider", "fake:"+e.script, "acp", "--permission-mode", "auto")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// The editor passes an MCP server of its own (this test binary, as
	// mcptest's server), which trellis acp starts and lends to the session.
	markers := t.TempDir()
	exe, env := mcptest.Command(markers)
	var envList []map[string]string
	for k, v := range env {
		envList = append(envList, map[string]string{"name": k, "value": v})
	}
	mcpServers, _ := json.Marshal([]map[string]any{{"name": "edsrv", "command": exe, "args": []string{}, "env": envList}})
	cmd.Env = append(cleanEnv(), "ACP_TEST_MCP="+string(mcpServers))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the ACP client: %v\nstderr:\n%s", err, stderr.String())
	}
	var s struct {
		Stops   []string          `json:"stops"`
		Outputs map[string]string `json:"outputs"`
		Served  []map[string]any  `json:"served"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("the ACP client printed %q: %v\nstderr:\n%s", stdout.String(), err, stderr.String())
	}
	t.Logf("summary: %s", stdout.String())
	if !slices.Equal(s.Stops, []string{"end_turn", "end_turn", "end_turn", "end_turn"}) {
		t.Errorf("stop reasons %v", s.Stops)
	}
	// What the model read is the tool's result, shown to the editor too.
	if out := s.Outputs["call_read"]; !strings.Contains(out, "UNSAVED BUFFER: draft v2") || strings.Contains(out, "as saved on disk") {
		t.Errorf("read_file gave the model %q, want the editor's unsaved buffer", out)
	}
	// The editor's MCP server ran the call (started by trellis acp).
	if out := s.Outputs["call_mcp"]; out != "echo: from the editor's server" {
		t.Errorf("the editor's MCP server's echo gave the model %q", out)
	}
	if pid, err := os.ReadFile(filepath.Join(markers, "pid")); err != nil || len(pid) == 0 {
		t.Errorf("the editor's MCP server never started: %v", err)
	}
	if out := s.Outputs["call_shell"]; !strings.Contains(out, "printed in the editor's terminal") {
		t.Errorf("shell gave the model %q, want the editor terminal's output", out)
	}
	var methods []string
	for _, m := range s.Served {
		methods = append(methods, m["method"].(string))
		switch m["method"] {
		case "fs/read_text_file":
			if m["path"] != draft {
				t.Errorf("fs/read_text_file of %v, want %s", m["path"], draft)
			}
		case "fs/write_text_file":
			if m["path"] != draft || m["content"] != "draft v3\n" {
				t.Errorf("fs/write_text_file %v", m)
			}
		case "terminal/create":
			if m["command"] != "bash" || m["cwd"] != e.dir || !slices.Equal(anyStrings(m["args"]), []string{"-c", "echo hi"}) {
				t.Errorf("terminal/create %v", m)
			}
		}
	}
	want := []string{"fs/read_text_file", "fs/write_text_file", "terminal/create", "terminal/wait_for_exit", "terminal/output", "terminal/release"}
	if !slices.Equal(methods, want) {
		t.Errorf("the editor served %v, want %v", methods, want)
	}
	if got, _ := os.ReadFile(draft); string(got) != "draft v1, as saved on disk\n" {
		t.Errorf("draft.md on disk = %q: the write did not go through the editor", got)
	}
}

func anyStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestACPInWorkdir: a delegated tool's path resolves inside the session's
// workdir, as the built-ins' paths do.
func TestACPInWorkdir(t *testing.T) {
	for _, tc := range []struct {
		path, want string
		ok         bool
	}{
		{"a.txt", "/w/a.txt", true},
		{"sub/../b.txt", "/w/b.txt", true},
		{"/w/c/d.txt", "/w/c/d.txt", true},
		{".", "/w", true},
		{"../etc/passwd", "", false},
		{"/etc/passwd", "", false},
		{"/w2/x", "", false},
		{"..", "", false},
		{" ", "", false},
	} {
		got, err := inWorkdir("/w", tc.path)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("inWorkdir(/w, %q) = %q, %v; want %q, ok %v", tc.path, got, err, tc.want, tc.ok)
		}
	}
}
