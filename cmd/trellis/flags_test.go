package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/version"
)

// These tests pin the flag vocabulary trellis run and trellis chat share
// (--output, --permission-mode, --model, --continue, --session) and the
// messages of a bad command line.

// summaries returns session.list's rows (closed ones included) by id, as
// trellis sessions ls --json prints them.
func (e *env) summaries() map[string]map[string]any {
	e.t.Helper()
	r := e.run("", "sessions", "ls", "--all", "--json")
	var listed struct {
		Sessions []map[string]any `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || r.code != 0 {
		e.t.Fatalf("sessions ls --json: exit %d, %v, stdout %s, stderr %s", r.code, err, r.stdout, r.stderr)
	}
	out := map[string]map[string]any{}
	for _, s := range listed.Sessions {
		out[s["sessionId"].(string)] = s
	}
	return out
}

// usageOf returns the input tokens of the usage event in a run's
// --output events lines, and checks that every line is of session id.
func usageOf(t *testing.T, r result, id string) float64 {
	t.Helper()
	in := -1.0
	for _, ev := range jsonLines(t, r.stdout) {
		if ev["sessionId"] != id {
			t.Fatalf("event of session %v, want %s: %v", ev["sessionId"], id, ev)
		}
		if ev["kind"] == "usage" {
			in, _ = ev["payload"].(map[string]any)["inputTokens"].(float64)
		}
	}
	if in < 0 {
		t.Fatalf("no usage event with an input count: %s", r.stdout)
	}
	return in
}

// TestBadCommandLines pins what a mistyped command line prints: one line
// that names what is wrong or missing (a suggestion for a typo), exit
// status 2, and no daemon started.
func TestBadCommandLines(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		args   []string
		stderr string // the whole of it
	}{
		{[]string{"sesions"}, `trellis: unknown command "sesions" for trellis; did you mean sessions? (see trellis --help)` + "\n"},
		{[]string{"sessions", "lss"}, `trellis: unknown command "lss" for trellis sessions; did you mean ls? (see trellis sessions --help)` + "\n"},
		{[]string{"run"}, `trellis: run needs a PROMPT: trellis run "fix the tests"` + "\n"},
		{[]string{"sessions", "show"}, "trellis: sessions show needs a SESSION: trellis sessions show s-1a2b (trellis sessions ls lists them)\n"},
		{[]string{"sessions", "rename", "s-1"}, `trellis: sessions rename needs a SESSION and a NAME: trellis sessions rename s-1a2b "flaky tests"` + "\n"},
		{[]string{"keys", "revoke"}, "trellis: keys revoke needs KEY: usage: trellis keys revoke KEY [flags]\n"},
		{[]string{"run", "--permission-mode", "yolo", "hi"}, `trellis: --permission-mode "yolo": want plan, accept or auto` + "\n"},
		{[]string{"chat", "--permission-mode", "yolo"}, `trellis: --permission-mode "yolo": want plan, accept or auto` + "\n"},
		{[]string{"jobs", "schedule", "@daily", "hello", "--permission-mode", "yolo"}, `trellis: --permission-mode "yolo": want plan, accept or auto` + "\n"},
		{[]string{"run", "--output", "plan", "hi"}, `trellis: --output "plan": plan is a permission mode, give it with --permission-mode plan (--output takes text, json, wire, events)` + "\n"},
		{[]string{"run", "--output", "xml", "hi"}, `trellis: --output "xml": want one of text, json, wire, events` + "\n"},
		{[]string{"run", "--session", "s-1", "--continue", "hi"}, "trellis: --session and --continue both choose the session: give one of them\n"},
		{[]string{"chat", "--agent", "reviewer", "--continue"}, "trellis: --agent starts a new session from a definition; an existing session (--session, --continue) keeps its own\n"},
		{[]string{"daemon", "--bogus"}, "trellis: flag provided but not defined: -bogus (trellis daemon --help lists the flags)\n"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := e.run("", tc.args...)
			if r.code != exitUsage || r.stdout != "" || r.stderr != tc.stderr {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and stderr %q", r.code, r.stdout, r.stderr, exitUsage, tc.stderr)
			}
		})
	}
	if _, err := daemonfile.Read(e.home); !errors.Is(err, daemonfile.ErrNoDaemon) {
		t.Fatalf("a bad command line started a daemon: %v", err)
	}
}

// TestVersion pins trellis --version: the version system.hello reports
// (trellis status shows the running daemon's), and the protocol's.
func TestVersion(t *testing.T) {
	e := newEnv(t)
	want := "trellis " + version.Server + " (protocol " + version.Protocol + ")\n"
	for _, args := range [][]string{{"--version"}, {"daemon", "--version"}} {
		if r := e.run("", args...); r.code != 0 || r.stdout != want || r.stderr != "" {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q; want %q", args, r.code, r.stdout, r.stderr, want)
		}
	}
	e.run("", "run", "hello")
	if r := e.run("", "status"); !strings.HasPrefix(r.stdout, "daemon "+version.Server+" (protocol "+version.Protocol+")") {
		t.Fatalf("the daemon reports another version than trellis --version: %s", r.stdout)
	}
}

// TestOutputFlag pins --output, its synonym --format, and --mode, its old
// name: each prints the chosen format; only --mode adds a deprecation note
// on stderr.
func TestOutputFlag(t *testing.T) {
	e := newEnv(t)
	const note = "trellis: --mode is deprecated: use --output, which takes the same values (plan, accept and auto are --permission-mode's)\n"
	for _, flag := range []string{"--output", "--format", "--mode"} {
		t.Run(flag, func(t *testing.T) {
			r := e.run("", "run", flag, "events", "hello")
			if r.code != 0 {
				t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
			}
			if lines := jsonLines(t, r.stdout); lines[0]["kind"] != "turn.started" || lines[len(lines)-1]["kind"] != "turn.done" {
				t.Fatalf("not one turn's events: %s", r.stdout)
			}
			if got := strings.Contains(r.stderr, note); got != (flag == "--mode") {
				t.Fatalf("deprecation note on stderr: %v, want %v; stderr %s", got, flag == "--mode", r.stderr)
			}
		})
	}
	if r := e.run("", "run", "--help"); strings.Contains(r.stdout, "--mode string") || !strings.Contains(r.stdout, "--output string") {
		t.Fatalf("run --help should show --output and not the deprecated --mode:\n%s", r.stdout)
	}
}

// TestPermissionModeAndModel pins that --permission-mode and --model reach
// the session: a new one is created with them, an existing one
// (--session) is changed; session.list shows them, and plan mode really
// refuses a file write.
func TestPermissionModeAndModel(t *testing.T) {
	e := newEnv(t)
	plan := e.run("", "run", "--permission-mode", "plan", "--output", "events", "write notes")
	if plan.code != exitDenied || !strings.Contains(plan.stderr, "mode_denied") {
		t.Fatalf("write in plan mode: exit %d, want %d with mode_denied; stderr %s", plan.code, exitDenied, plan.stderr)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "notes.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("plan mode wrote notes.txt: %v", err)
	}
	planID := sessionOf(t, plan)
	planProvider := e.summaries()[planID]["provider"]

	model := e.run("", "run", "--model", "fake:other-model", "hello")
	if model.code != 0 {
		t.Fatalf("--model: exit %d, stderr %s", model.code, model.stderr)
	}
	modelID := sessionOf(t, model)
	if !strings.Contains(model.stderr, "fake/other-model") {
		t.Fatalf("the turn did not use the model: %s", model.stderr)
	}

	// On an existing session the flags change it.
	if r := e.run("", "run", "--session", planID, "--permission-mode", "accept", "--model", "renamed-model", "hello"); r.code != 0 {
		t.Fatalf("--session with --permission-mode and --model: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := e.run("", "run", "--permission-mode", "auto", "--session", modelID, "hello"); r.code != 0 {
		t.Fatalf("--session with --permission-mode auto: exit %d, stderr %s", r.code, r.stderr)
	}

	rows := e.summaries()
	tests := []struct {
		id, mode string
		provider any
		model    string
	}{
		{planID, "accept", planProvider, "renamed-model"}, // a bare model id keeps the provider
		{modelID, "auto", "fake", "other-model"},
	}
	for _, tc := range tests {
		s := rows[tc.id]
		if s["mode"] != tc.mode || s["provider"] != tc.provider || s["model"] != tc.model {
			t.Errorf("session %s: mode %v, provider %v, model %v; want %s, %v, %s", tc.id, s["mode"], s["provider"], s["model"], tc.mode, tc.provider, tc.model)
		}
	}
}

// TestContinue pins --continue: the last session used in the working
// directory (not a newer one elsewhere) goes on, and its model sees the
// history; with none there, it says so.
func TestContinue(t *testing.T) {
	e := newEnv(t)
	if r := e.run("", "run", "--continue", "hello"); r.code != exitFailed || !strings.Contains(r.stderr, "no session to continue in "+e.dir) {
		t.Fatalf("--continue with no session: exit %d, stderr %s", r.code, r.stderr)
	}
	older := e.run("", "run", "--output", "events", "hello")
	olderID := sessionOf(t, older)
	first := e.run("", "run", "--output", "events", "hello")
	id := sessionOf(t, first)
	firstIn := usageOf(t, first, id)
	other := filepath.Join(e.dir, "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if r := e.run("", "run", "--workdir", other, "hello"); r.code != 0 { // newer, in another workdir
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}

	next := e.run("", "run", "--continue", "--output", "events", "hello")
	if next.code != 0 || !strings.Contains(next.stderr, "trellis: session "+id+" (continued)") {
		t.Fatalf("--continue: exit %d, stderr %s; want session %s continued", next.code, next.stderr, id)
	}
	// The same prompt costs more input: the model read the first turn too.
	if in := usageOf(t, next, id); in <= firstIn {
		t.Fatalf("input tokens %v, not more than the first turn's %v: the history was not sent", in, firstIn)
	}

	// Using the older session makes it the last one.
	if r := e.run("", "run", "--session", olderID, "hello"); r.code != 0 {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	if r := e.run("", "chat", "--continue"); r.code != 0 || !strings.Contains(r.stderr, "chatting in session "+olderID) {
		t.Fatalf("chat --continue: exit %d, stderr %s; want session %s", r.code, r.stderr, olderID)
	}
}

// TestSessionByPrefixOrName pins --session: an id, a unique prefix of it,
// or a name set by trellis sessions rename; a prefix or name several
// sessions share is refused with the candidates listed.
func TestSessionByPrefixOrName(t *testing.T) {
	e := newEnv(t)
	// Each is named after its first prompt until renamed.
	ids := []string{
		sessionOf(t, e.run("", "run", "hello")),
		sessionOf(t, e.run("", "run", "hello")),
		sessionOf(t, e.run("", "run", "hello")),
	}
	a, b := ids[0], ids[1]
	// The shortest prefix of a that no other id shares.
	n := len("s-") + 1
	for strings.HasPrefix(ids[1], a[:n]) || strings.HasPrefix(ids[2], a[:n]) {
		n++
	}
	if r := e.run("", "sessions", "rename", b[:len(b)-2], "flaky tests"); r.code != 0 || r.stdout != b+` is named "flaky tests"`+"\n" {
		t.Fatalf("rename: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}

	candidate := `\n  s-[0-9a-f]+  \S+  .+`
	tests := []struct {
		ref    string
		want   string // the session the run goes to; "" = refused
		code   int
		stderr *regexp.Regexp
	}{
		{a, a, 0, nil},
		{a[:n], a, 0, regexp.MustCompile(`trellis: session ` + a + "\n")},
		{"flaky tests", b, 0, regexp.MustCompile(`trellis: session ` + b + "\n")},
		{"s-", "", exitUsage, regexp.MustCompile(`^trellis: 3 session ids start with "s-"; give more of the id:` + strings.Repeat(candidate, 3) + "\n$")},
		{"hello", "", exitUsage, regexp.MustCompile(`^trellis: 2 sessions are named "hello"; give the id \(or a unique prefix of it\) of one:` + strings.Repeat(candidate, 2) + "\n$")},
		{"s-nothing", "", exitFailed, regexp.MustCompile(`^trellis: session "s-nothing" not found: no session has that id, id prefix or name \(trellis sessions ls lists them\)\n$`)},
	}
	for _, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			r := e.run("", "run", "--session", tc.ref, "--output", "events", "hello")
			if tc.stderr != nil && !tc.stderr.MatchString(r.stderr) {
				t.Fatalf("stderr %q does not match %q", r.stderr, tc.stderr)
			}
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", r.code, tc.code, r.stderr)
			}
			if tc.want == "" {
				if r.stdout != "" {
					t.Fatalf("stdout %q; want nothing", r.stdout)
				}
				return
			}
			usageOf(t, r, tc.want) // every event is of the wanted session
		})
	}
	if r := e.run("", "sessions", "ls"); !regexp.MustCompile(`(?m)^` + b + ` +flaky tests +idle`).MatchString(r.stdout) {
		t.Fatalf("sessions ls does not show the name:\n%s", r.stdout)
	}
	// sessions show takes the same references.
	if r := e.run("", "sessions", "show", "flaky tests"); r.code != 0 || !strings.HasPrefix(r.stdout, "> hello\n") {
		t.Fatalf("sessions show NAME: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
}

// TestAgentFlag pins --agent: the new session is created from the agent
// definition (session.list names it, and its model is the definition's
// unless --model says otherwise); an unknown one is refused with the
// daemon's reason.
func TestAgentFlag(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(e.home, "agents")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	def := "---\nname: \"reviewer\"\ndescription: \"Reviews diffs.\"\nmodel: \"reviewer-model\"\n---\nReview the diff.\n"
	if err := os.WriteFile(filepath.Join(dir, "reviewer.md"), []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args  []string
		model string
	}{
		{[]string{"--agent", "reviewer"}, "reviewer-model"},
		{[]string{"--agent", "reviewer", "--model", "chosen-model"}, "chosen-model"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := e.run("", append(append([]string{"run"}, tc.args...), "hello")...)
			if r.code != 0 {
				t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
			}
			s := e.summaries()[sessionOf(t, r)]
			if s["agent"] != "reviewer" || s["model"] != tc.model {
				t.Fatalf("session agent %v, model %v; want reviewer, %s", s["agent"], s["model"], tc.model)
			}
		})
	}
	before := len(e.summaries())
	if r := e.run("", "run", "--agent", "nosuch", "hello"); r.code != exitFailed || !strings.Contains(r.stderr, "trellis: --agent nosuch: not_found: no agent named nosuch") {
		t.Fatalf("unknown agent: exit %d, stderr %s", r.code, r.stderr)
	}
	// A --model the daemon refuses leaves no session behind.
	if r := e.run("", "run", "--model", "anthropic:claude-sonnet-4-5", "hello"); r.code != exitFailed || !strings.Contains(r.stderr, "trellis: --model anthropic:claude-sonnet-4-5: invalid_params: provider anthropic is not configured") {
		t.Fatalf("unconfigured vendor: exit %d, stderr %s", r.code, r.stderr)
	}
	if after := len(e.summaries()); after != before {
		t.Fatalf("%d sessions after the refused runs, %d before", after, before)
	}
}

// TestDaemonConfigFile: trellis daemon takes trellisd's --config and its
// config check, the same code as trellisd.
func TestDaemonConfigFile(t *testing.T) {
	e := newEnv(t)
	for name, content := range map[string]string{"good.toml": "port = 7500\nlog-level = \"warn\"\n", "bad.toml": "port = \"7500\"\nlog-level = \"loud\"\n"} {
		if err := os.WriteFile(filepath.Join(e.dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const problems = "bad.toml:1: port: want an integer, not the string \"7500\"\nbad.toml:2: log-level \"loud\": want debug, info, warn or error\n"
	tests := []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"daemon", "config", "check", "--config", "good.toml"}, 0, "ok\n", ""},
		{[]string{"daemon", "config", "check", "--config", "bad.toml"}, exitFailed, "", problems},
		{[]string{"daemon", "--config", "bad.toml"}, exitUsage, "", "trellis: " + problems},
		{[]string{"daemon", "config"}, exitUsage, "", "trellis daemon config: want check or print, e.g. trellis daemon config check --config trellisd.toml\n"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := e.run("", tc.args...)
			if r.code != tc.code || r.stdout != tc.stdout || r.stderr != tc.stderr {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
	if _, err := daemonfile.Read(e.home); !errors.Is(err, daemonfile.ErrNoDaemon) {
		t.Fatalf("a config command started a daemon: %v", err)
	}
}
