package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/daemonfile"
	"github.com/trellis-run/trellis/internal/testbin"
	"github.com/trellis-run/trellis/runtime/tool/mcp/mcptest"
)

// These tests run the trellis binary as a subprocess against fresh homes,
// as a user or a script would: stdout, stderr and the exit status are the
// contract.

// binary is the trellis binary TestMain builds.
var binary string

func TestMain(m *testing.M) {
	mcptest.MaybeServe() // TestACPDelegation's editor runs this binary as its MCP server
	if len(os.Args) > 2 && os.Args[1] == replWrapArg {
		replWrap(os.Args[2], os.Args[3:]) // TestChatREPL's pane process
	}
	// One build per test run, shared with other packages (testbin).
	var err error
	if binary, err = testbin.Path(testbin.Trellis); err != nil {
		fmt.Fprintln(os.Stderr, "building trellis:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// floodText is the answer of the "flood" step: 20,000 chunks (the fake
// model sends three words per chunk), which the daemon may carry in fewer
// message.delta events, so tests count the text.
var floodText = strings.Repeat("w ", 3*20_000)

// testScript is the fake model of these tests.
var testScript = `{"steps":[
 {"match":"hello","text":"Hello from the test script, in a few chunks."},
 {"match":"flood","text":"` + floodText + `"},
 {"match":"fail","text":"Partial ","error":"upstream exploded"},
 {"match":"run ls","text":"Running it.","tool_calls":[{"name":"shell","arguments":{"command":"echo from-shell"}}]},
 {"match":"wait for go","text":"Waiting.","tool_calls":[{"name":"shell","arguments":{"command":"read l < go.fifo"}}]},
 {"after_tool":"shell","text":"That was the shell."},
 {"match":"count","text":"Counting.","tool_calls":[{"name":"shell","arguments":{"command":"seq 1 12"}}]},
 {"match":"write notes","tool_calls":[{"name":"write_file","arguments":{"path":"notes.txt","content":"one\ntwo\nthree\n"}}]},
 {"after_tool":"write_file","text":"Written."},
 {"match":"edit notes","tool_calls":[{"name":"edit_file","arguments":{"path":"notes.txt","old":"two","new":"2"}}]},
 {"after_tool":"edit_file","text":"Edited."},
 {"match":"ask me","tool_calls":[{"name":"ask_user","arguments":{"questions":[{"question":"Which colour?","options":[{"label":"Blue","description":"the brand colour"},{"label":"Green"}]},{"question":"Which browsers?","options":[{"label":"Firefox"},{"label":"Chrome"},{"label":"Safari"}],"multiple":true},{"question":"What should it be called?"}]}}]},
 {"after_tool":"ask_user","text":"Thanks for the answers."},
 {"match":"slow","text":"slow slow slow slow slow slow slow slow","delaySec":60},
 {"match":"paced","text":"` + strings.Repeat("paced ", 600) + `","delaySec":60},
 {"default":true,"text":"Default answer."}
]}`

// env is one fresh home; its daemons are stopped when the test ends.
type env struct {
	t      *testing.T
	home   string
	script string
	dir    string // working directory of the commands
}

func newEnv(t *testing.T) *env {
	t.Helper()
	root := t.TempDir()
	e := &env{t: t, home: filepath.Join(root, "home"), script: filepath.Join(root, "script.json"), dir: filepath.Join(root, "work")}
	if err := os.WriteFile(e.script, []byte(testScript), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(e.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.stopDaemon)
	return e
}

// stopDaemon stops the home's daemon with trellis stop, and kills it if
// that did not work.
func (e *env) stopDaemon() {
	info, err := daemonfile.Read(e.home)
	if err != nil {
		return
	}
	if r := e.run("", "stop"); r.code != 0 {
		e.t.Errorf("trellis stop: exit %d, stderr %s", r.code, r.stderr)
		_ = syscall.Kill(info.PID, syscall.SIGKILL)
	}
}

type result struct {
	stdout, stderr string
	code           int
}

// command builds a trellis command with the env's home and script.
func (e *env) command(ctx context.Context, args ...string) *exec.Cmd {
	args = append([]string{"--home", e.home, "--provider", "fake:" + e.script}, args...)
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = e.dir
	cmd.Env = cleanEnv()
	return cmd
}

// cleanEnv is the environment without anything that would choose another
// home or model.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "TRELLIS_") || strings.HasPrefix(name, "OPENAI_") || strings.HasPrefix(name, "ANTHROPIC_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// run runs trellis with stdin and returns what it printed and its status.
func (e *env) run(stdin string, args ...string) result {
	e.t.Helper()
	return e.runEnv(nil, stdin, args...)
}

// runEnv is run with extra environment variables.
func (e *env) runEnv(extra []string, stdin string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := e.command(ctx, args...)
	cmd.Env = append(cmd.Env, extra...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		e.t.Fatalf("trellis %v: %v", args, err)
	}
	return r
}

// jsonLines checks that every stdout line is one JSON object and returns
// them.
func jsonLines(t *testing.T, stdout string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for i, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("stdout line %d is not a JSON object: %q", i+1, line)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		t.Fatal("stdout is empty")
	}
	return out
}

var sessionLine = regexp.MustCompile(`trellis: session (s-[0-9a-f]+)`)

func sessionOf(t *testing.T, r result) string {
	t.Helper()
	m := sessionLine.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no session id on stderr: %s", r.stderr)
	}
	return m[1]
}

// TestRunStartsDaemon pins the first-run experience: no daemon runs, one is
// started in the background (stderr says so and where its log is), the
// answer is on stdout; the next command uses the same daemon.
func TestRunStartsDaemon(t *testing.T) {
	e := newEnv(t)
	// No --provider: the built-in offline demo model answers.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--home", e.home, "run", "hello")
	cmd.Dir, cmd.Env = e.dir, cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("trellis run hello: %v\nstderr: %s", err, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "Hello! I am Trellis's offline demo model.") || !strings.HasSuffix(stdout.String(), "\n") {
		t.Fatalf("stdout = %q", stdout.String())
	}
	if !strings.Contains(stderr.String(), "started the daemon") || !strings.Contains(stderr.String(), daemon.LogPath(e.home)) {
		t.Fatalf("stderr does not say a daemon started and where its log is: %s", stderr.String())
	}
	info, err := daemonfile.Read(e.home)
	if err != nil {
		t.Fatalf("no daemon runs after trellis run: %v", err)
	}

	cmd = exec.CommandContext(ctx, binary, "--home", e.home, "run", "hello")
	cmd.Dir, cmd.Env = e.dir, cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "started the daemon") {
		t.Fatalf("second run: %v, output %s", err, out)
	}
	if again, _ := daemonfile.Read(e.home); again.PID != info.PID {
		t.Fatalf("the second run changed daemons: pid %d then %d", info.PID, again.PID)
	}
}

// TestConcurrentStarts pins that commands started at once on a fresh home
// share one daemon.
func TestConcurrentStarts(t *testing.T) {
	e := newEnv(t)
	const n = 3
	results := make(chan result, n)
	for range n {
		go func() { results <- e.run("", "run", "hello") }()
	}
	started := 0
	for range n {
		r := <-results
		if r.code != 0 {
			t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
		}
		started += strings.Count(r.stderr, "started the daemon")
	}
	if started != 1 {
		t.Fatalf("%d daemons started, want 1", started)
	}
}

// TestRunModes pins that stdout holds only the protocol, one JSON object
// per line, and that a completed turn exits 0.
func TestRunModes(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		mode        string
		first, last func(m map[string]any) bool
	}{
		{"events",
			func(m map[string]any) bool { return m["kind"] == "turn.started" && m["seq"] == 1.0 },
			func(m map[string]any) bool { return m["kind"] == "turn.done" }},
		{"wire",
			func(m map[string]any) bool {
				return m["method"] == "RunBegin" && m["jsonrpc"] == "2.0" && m["id"] == nil
			},
			func(m map[string]any) bool { return m["method"] == "RunEnd" }},
		{"json",
			func(m map[string]any) bool { return m["type"] == "session" && m["cwd"] != nil },
			func(m map[string]any) bool { return m["type"] == "agent_settled" && m["aborted"] == false }},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			r := e.run("", "run", "--output", tc.mode, "hello")
			if r.code != 0 {
				t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
			}
			lines := jsonLines(t, r.stdout)
			if !tc.first(lines[0]) || !tc.last(lines[len(lines)-1]) {
				t.Fatalf("first line %v, last line %v", lines[0], lines[len(lines)-1])
			}
			if !strings.Contains(r.stdout, "Hello from the ") {
				t.Fatalf("the answer is not in the stream: %s", r.stdout)
			}
			sessionOf(t, r) // the diagnostics went to stderr
		})
	}
}

// TestRunFailedTurn pins the exit status of a turn that did not complete
// (the provider failed), in every mode: non-zero, with stdout still only
// protocol lines and the reason on stderr.
func TestRunFailedTurn(t *testing.T) {
	e := newEnv(t)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			r := e.run("", "run", "--output", mode, "fail")
			if r.code != exitFailed {
				t.Fatalf("exit %d, want %d; stderr %s", r.code, exitFailed, r.stderr)
			}
			if !strings.Contains(r.stderr, "upstream exploded") || !strings.Contains(r.stderr, "reason: error") {
				t.Fatalf("stderr does not explain: %s", r.stderr)
			}
			if mode == modeText {
				if r.stdout != "Partial \n" {
					t.Fatalf("stdout = %q", r.stdout)
				}
				return
			}
			jsonLines(t, r.stdout)
		})
	}
}

// TestRunApprove pins --approve: allow and deny answer by themselves; ask
// with no terminal on stdin denies and says why. A denied tool call does
// not fail the turn (the model sees the denial), but the exit status says
// it happened.
func TestRunApprove(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		approve  string
		wantOK   bool
		wantCode int
		inStderr string
	}{
		{"allow", true, exitOK, ""},
		{"deny", false, exitDenied, "approval_denied"},
		{"ask", false, exitDenied, "stdin is not a terminal"},
	}
	for _, tc := range tests {
		t.Run(tc.approve, func(t *testing.T) {
			r := e.run("", "run", "--output", "events", "--approve", tc.approve, "run ls")
			if r.code != tc.wantCode {
				t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.inStderr) {
				t.Fatalf("stderr lacks %q: %s", tc.inStderr, r.stderr)
			}
			found := false
			for _, ev := range jsonLines(t, r.stdout) {
				if ev["kind"] == "tool.result" {
					found = true
					if ok := ev["payload"].(map[string]any)["ok"]; ok != tc.wantOK {
						t.Fatalf("tool.result %v, want ok=%v", ev["payload"], tc.wantOK)
					}
				}
			}
			if !found {
				t.Fatal("no tool.result event")
			}
		})
	}
}

// TestRunInSession pins --session: the turn runs in the existing session
// and stdout holds only that turn's events, continuing its seqs.
func TestRunInSession(t *testing.T) {
	e := newEnv(t)
	first := e.run("", "run", "--output", "events", "hello")
	if first.code != 0 {
		t.Fatalf("exit %d, stderr %s", first.code, first.stderr)
	}
	id := sessionOf(t, first)
	firstLines := jsonLines(t, first.stdout)
	lastSeq := firstLines[len(firstLines)-1]["seq"].(float64)

	r := e.run("", "run", "--output", "events", "--session", id, "hello")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	lines := jsonLines(t, r.stdout)
	for i, ev := range lines {
		if ev["sessionId"] != id || ev["seq"] != lastSeq+float64(i+1) {
			t.Fatalf("line %d: %v, want session %s seq %v", i+1, ev, id, lastSeq+float64(i+1))
		}
	}
	if lines[0]["kind"] != "turn.started" || lines[len(lines)-1]["kind"] != "turn.done" {
		t.Fatalf("not one whole turn: %v … %v", lines[0], lines[len(lines)-1])
	}

	if r := e.run("", "run", "--session", "s-00000000", "hello"); r.code != exitFailed || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("unknown session: exit %d, stderr %s", r.code, r.stderr)
	}
}

// TestRunInterrupt pins Ctrl-C: the turn is interrupted on the daemon and
// the command exits 130 after its turn.done.
func TestRunInterrupt(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := e.command(ctx, "run", "--output", "events", "slow")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	var last map[string]any
	interrupted := false
	for lines.Scan() {
		if err := json.Unmarshal(lines.Bytes(), &last); err != nil {
			t.Fatalf("not JSON: %q", lines.Text())
		}
		if last["kind"] == "step.started" && !interrupted {
			interrupted = true
			_ = cmd.Process.Signal(os.Interrupt)
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitInterrupted {
		t.Fatalf("exit %v, want %d; stderr %s", err, exitInterrupted, stderr.String())
	}
	if last["kind"] != "turn.done" || last["payload"].(map[string]any)["reason"] != "interrupted" {
		t.Fatalf("last line %v, want turn.done interrupted", last)
	}
	// The daemon is fine: nothing may say otherwise.
	if strings.Contains(stderr.String(), "unreachable") || strings.Contains(stderr.String(), "dropped") {
		t.Fatalf("Ctrl-C reported a failure: %s", stderr.String())
	}
}

// TestChat pins the conversation loop on piped input: each line is a
// prompt, an approval question reads the next line.
func TestChat(t *testing.T) {
	e := newEnv(t)
	r := e.run("run ls\ny\nhello\n/quit\nnot sent\n", "chat")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	want := "Running it.\nThat was the shell.\nHello from the test script, in a few chunks.\n"
	if r.stdout != want {
		t.Fatalf("stdout = %q, want %q", r.stdout, want)
	}
	for _, s := range []string{"needs approval", "Allow?", "● shell $ echo from-shell", "│ from-shell"} {
		if !strings.Contains(r.stderr, s) {
			t.Fatalf("stderr lacks %q: %s", s, r.stderr)
		}
	}
}

// orderScript reads a large file (allowed without asking), then runs a
// command that needs approval, in one step.
var orderScript = `{"steps":[
 {"match":"read then run","tool_calls":[{"name":"read_file","arguments":{"path":"big.txt"}},{"name":"shell","arguments":{"command":"echo from-shell"}}]},
 {"after_tool":"shell","text":"Done."},
 {"default":true,"text":"Default answer."}
]}`

// newOrderEnv is an env with orderScript and its big.txt.
func newOrderEnv(t *testing.T) *env {
	e := newEnv(t)
	if err := os.WriteFile(e.script, []byte(orderScript), 0o600); err != nil {
		t.Fatal(err)
	}
	var big strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&big, "line %04d of a file the first tool reads, long enough to weigh\n", i)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "big.txt"), []byte(big.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// checkOrder fails unless, in stderr, each rendering of read_file's output
// (its last line says how many lines it left out) comes before the line
// the approver printed for the shell call after it (ask).
func checkOrder(t *testing.T, stderr, ask string, n int) {
	t.Helper()
	rest := stderr
	for i := range n {
		out, q := strings.Index(rest, " more lines"), strings.Index(rest, ask)
		if out < 0 || q < 0 {
			t.Fatalf("turn %d: stderr lacks read_file's output or %q:\n%s", i+1, ask, stderr)
		}
		if q < out {
			t.Fatalf("turn %d: %q was printed before the output of the tool call that came before it:\n%s", i+1, ask, stderr)
		}
		rest = rest[q+len(ask):]
	}
}

// TestChatApprovalAfterOutput: an approval question comes after the lines
// of the events before its request (here the output of the call before it
// in the same step), though the request comes on its own goroutine and the
// events through the subscription.
func TestChatApprovalAfterOutput(t *testing.T) {
	e := newOrderEnv(t)
	const turns = 5
	r := e.run(strings.Repeat("read then run\ny\n", turns)+"/quit\n", "chat")
	if r.code != 0 || strings.Count(r.stdout, "Done.") != turns {
		t.Fatalf("exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	checkOrder(t, r.stderr, "needs approval", turns)
}

// TestRunRefusalAfterOutput: trellis run with stdin not a terminal refuses
// an approval, and says so after the lines of the events before it.
func TestRunRefusalAfterOutput(t *testing.T) {
	e := newOrderEnv(t)
	for range 5 {
		r := e.run("", "run", "read then run")
		if r.code != exitDenied {
			t.Fatalf("exit %d, want %d; stderr %s", r.code, exitDenied, r.stderr)
		}
		checkOrder(t, r.stderr, "trellis: denied shell", 1)
	}
}

// TestChatAnswersQuestions: the agent's questions (ask_user) are asked in
// chat one line each (a number, numbers, or words), and what was answered
// is what the tool returned to the model.
func TestChatAnswersQuestions(t *testing.T) {
	e := newEnv(t)
	r := e.run("ask me\n2\n1, 3\nThe Big Button\n/quit\n", "chat")
	if r.code != 0 || !strings.Contains(r.stdout, "Thanks for the answers.") {
		t.Fatalf("exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	for _, s := range []string{"the agent asks: Which colour?", "1. Blue — the brand colour", "2. Green", "the agent asks: What should it be called?"} {
		if !strings.Contains(r.stderr, s) {
			t.Fatalf("stderr lacks %q: %s", s, r.stderr)
		}
	}
	// The tool's result, as the chat renders it, is what the model was told.
	for _, s := range []string{"│ A: Green", "│ A: Firefox, Safari", "│ A: The Big Button"} {
		if !strings.Contains(r.stderr, s) {
			t.Fatalf("ask_user's result lacks %q: %s", s, r.stderr)
		}
	}
}

// TestSessionsCommands pins ls, show and rm.
func TestSessionsCommands(t *testing.T) {
	e := newEnv(t)
	id := sessionOf(t, e.run("", "run", "hello"))

	r := e.run("", "sessions", "ls")
	if r.code != 0 || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "hello") {
		t.Fatalf("ls: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	r = e.run("", "sessions", "ls", "--json")
	var listed struct {
		Sessions []struct{ SessionID string } `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed.Sessions) != 1 || listed.Sessions[0].SessionID != id {
		t.Fatalf("ls --json: %v %s", err, r.stdout)
	}

	r = e.run("", "sessions", "show", id)
	if r.code != 0 || !regexp.MustCompile(`^> hello\nHello from the test script, in a few chunks.\n─ fake/fake-1 · \d+ tokens in, \d+ out · 1 model call · \$0\n\n$`).MatchString(r.stdout) {
		t.Fatalf("show: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	r = e.run("", "sessions", "show", "--output", "wire", id)
	if lines := jsonLines(t, r.stdout); r.code != 0 || lines[0]["method"] != "RunBegin" {
		t.Fatalf("show --mode wire: exit %d, stdout %s", r.code, r.stdout)
	}

	r = e.run("", "sessions", "rm", id)
	if r.code != 0 || !strings.Contains(r.stdout, "deleted "+id) {
		t.Fatalf("rm: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	if r := e.run("", "sessions", "ls", "--all"); strings.Contains(r.stdout, id) {
		t.Fatalf("still listed after rm: %s", r.stdout)
	}
	if r := e.run("", "sessions", "rm", id); r.code != exitFailed {
		t.Fatalf("rm again: exit %d, want %d", r.code, exitFailed)
	}
}

// TestApprovalsStatusStop pins approvals ls, status and stop, and that the
// commands that only inspect do not start a daemon.
func TestApprovalsStatusStop(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{{"status"}, {"approvals", "ls"}, {"sessions", "ls"}} {
		if r := e.run("", args...); r.code != exitFailed || !strings.Contains(r.stderr, "no daemon is running") {
			t.Fatalf("%v with no daemon: exit %d, stderr %s", args, r.code, r.stderr)
		}
	}
	if _, err := daemonfile.Read(e.home); !errors.Is(err, daemonfile.ErrNoDaemon) {
		t.Fatalf("an inspecting command started a daemon: %v", err)
	}

	e.run("", "run", "hello")
	info, err := daemonfile.Read(e.home)
	if err != nil {
		t.Fatal(err)
	}
	r := e.run("", "status")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("pid %d", info.PID)) {
		t.Fatalf("status: exit %d, stdout %s", r.code, r.stdout)
	}
	r = e.run("", "approvals", "ls")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "REQUEST") {
		t.Fatalf("approvals ls: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	if r := e.run("", "approvals", "allow", "ap-0000"); r.code != exitFailed || !strings.Contains(r.stderr, "not_found") {
		t.Fatalf("allow an unknown request: exit %d, stderr %s", r.code, r.stderr)
	}

	r = e.run("", "stop")
	if r.code != 0 || !strings.Contains(r.stderr, "stopped the daemon") {
		t.Fatalf("stop: exit %d, stderr %s", r.code, r.stderr)
	}
	if _, err := os.Stat(daemonfile.Path(e.home)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("daemon.json after stop: %v", err)
	}
	if processAlive(info.PID) {
		t.Fatalf("pid %d still runs after stop", info.PID)
	}
	if r := e.run("", "stop"); r.code != 0 || !strings.Contains(r.stderr, "no daemon is running") {
		t.Fatalf("stop with no daemon: exit %d, stderr %s", r.code, r.stderr)
	}
}

// TestUsage pins exit status 2 for a bad command line, before any daemon
// is started.
func TestUsage(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{
		{"run"},
		{"run", "--output", "xml", "hello"},
		{"run", "--approve", "maybe", "hello"},
		{"run", "--bogus", "hello"},
		{"bogus"},
		{"sessions", "show"},
		{"sessions", "rm"},
		{"usage", "--by", "week"},
		{"usage", "--since", "yesterday"},
		{"usage", "--until", "2026-13-01"},
	} {
		r := e.run("", args...)
		if r.code != exitUsage || r.stdout != "" || r.stderr == "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and a message", args, r.code, r.stdout, r.stderr, exitUsage)
		}
	}
	if _, err := daemonfile.Read(e.home); !errors.Is(err, daemonfile.ErrNoDaemon) {
		t.Fatalf("a bad command line started a daemon: %v", err)
	}
}

// TestRunQueuedBehindAnotherTurn pins that a run prints only its own turn:
// a prompt queued behind a running turn shows turn.queued, and when an
// interrupt drops it, turn.dequeued and turn.done, none of the running
// turn's events.
func TestRunQueuedBehindAnotherTurn(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	running := e.command(ctx, "run", "--output", "events", "slow")
	runningOut, err := running.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	first := bufio.NewScanner(runningOut)
	sessionID := ""
	for first.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(first.Bytes(), &ev); err != nil {
			t.Fatalf("not JSON: %q", first.Text())
		}
		sessionID, _ = ev["sessionId"].(string)
		if ev["kind"] == "step.started" {
			break
		}
	}

	queued := e.command(ctx, "run", "--output", "events", "--session", sessionID, "hello")
	queuedOut, err := queued.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var queuedErr bytes.Buffer
	queued.Stderr = &queuedErr
	if err := queued.Start(); err != nil {
		t.Fatal(err)
	}
	second := bufio.NewScanner(queuedOut)
	var lines []map[string]any
	for second.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(second.Bytes(), &ev); err != nil {
			t.Fatalf("not JSON: %q", second.Text())
		}
		lines = append(lines, ev)
		if ev["kind"] == "turn.queued" {
			_ = running.Process.Signal(os.Interrupt)
		}
	}
	_, _ = io.Copy(io.Discard, runningOut)
	for _, cmd := range []*exec.Cmd{running, queued} {
		var exit *exec.ExitError
		if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != exitInterrupted {
			t.Fatalf("%v: %v, want exit %d", cmd.Args, err, exitInterrupted)
		}
	}
	var kinds []string
	for _, ev := range lines {
		kinds = append(kinds, ev["kind"].(string))
	}
	if got := strings.Join(kinds, " "); got != "turn.queued turn.dequeued turn.done" {
		t.Fatalf("the queued run printed %s", got)
	}
	// The dropped prompt is said, not silently lost.
	if !strings.Contains(queuedErr.String(), "the queued prompt was dropped before it ran") {
		t.Fatalf("the queued run's stderr does not say its prompt was dropped: %s", queuedErr.String())
	}
	turnID := lines[0]["payload"].(map[string]any)["turnId"]
	for _, ev := range lines {
		if ev["payload"].(map[string]any)["turnId"] != turnID {
			t.Fatalf("an event of another turn: %v", ev)
		}
	}
}

// waitIdle waits (bounded) until session id runs no turn, as trellis
// sessions ls reports it.
func (e *env) waitIdle(id string) {
	e.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s := e.summaries()[id]
		if s != nil && s["running"] != true {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("session %s still runs a turn after 60 s: %v", id, s)
		}
	}
}

// waitWriteBlocked waits (bounded) until a thread of process pid is
// blocked writing to a pipe (its wchan, as the kernel reports it): the
// reader at the other end holds it up.
func waitWriteBlocked(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", pid))
		for _, task := range tasks {
			if b, err := os.ReadFile(task); err == nil && strings.Contains(string(b), "pipe_write") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d is not blocked writing to a pipe after 60 s", pid)
		}
	}
}

// TestSlowReaderGetsEveryDelta pins issue 20's rule for the CLI: a reader
// of its stdout that pauses, in the middle of a 20,000-chunk turn, until
// the daemon has ended the turn and the CLI is blocked on its full stdout
// slows the CLI down and loses nothing: every run prints every event, in
// order, with the whole text, and exits 0 (half the runs with
// GOMAXPROCS=1, where dropped notifications used to hang the CLI forever).
func TestSlowReaderGetsEveryDelta(t *testing.T) {
	e := newEnv(t)
	startDaemonProc(t, e, 0)
	if r := e.run("", "run", "hello"); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for i := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := e.command(ctx, "run", "--output", "events", "flood")
		if i%2 == 0 {
			cmd.Env = append(cmd.Env, "GOMAXPROCS=1")
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		lastSeq, paused := 0.0, false
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("run %d: stdout line is not JSON: %q", i, sc.Text())
			}
			seq, _ := m["seq"].(float64)
			if seq != lastSeq+1 {
				t.Fatalf("run %d: seq %v follows %v", i, seq, lastSeq)
			}
			lastSeq = seq
			if m["kind"] == "message.delta" {
				chunk, _ := m["payload"].(map[string]any)["text"].(string)
				text.WriteString(chunk)
			}
			if text.Len() >= len(floodText)/10 && !paused {
				// The slow reader: it reads nothing more until the daemon
				// has ended the turn and the CLI is held up writing to a
				// full pipe, so the rest of the turn waits in the CLI.
				paused = true
				e.waitIdle(m["sessionId"].(string))
				waitWriteBlocked(t, cmd.Process.Pid)
			}
		}
		err = cmd.Wait()
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v after %d bytes of text; stderr %s", i, err, text.Len(), stderr.String())
		}
		if text.String() != floodText {
			t.Fatalf("run %d: %d bytes of text printed, want the %d of the answer", i, text.Len(), len(floodText))
		}
	}
}

// TestDaemonSettingsMismatch pins that a running daemon started with
// another --provider or --store is reported, with the exact difference and
// how to restart it, instead of being used silently.
func TestDaemonSettingsMismatch(t *testing.T) {
	e := newEnv(t)
	if r := e.run("", "run", "hello"); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	other := filepath.Join(t.TempDir(), "other.json")
	r := e.run("", "--provider", "fake:"+other, "run", "hello")
	want := fmt.Sprintf("was started with --provider %q (you asked for %q)", "fake:"+e.script, "fake:"+other)
	if r.code != exitFailed || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "trellis --home "+e.home+" stop") || !strings.Contains(r.stderr, "--home DIR") {
		t.Fatalf("exit %d, stderr:\n%s\nwant it to contain %s", r.code, r.stderr, want)
	}
	r = e.run("", "--store", "postgres://u:secret@127.0.0.1:1/db", "run", "hello")
	if r.code != exitFailed || !strings.Contains(r.stderr, `--store "sqlite" (you asked for "postgres://u@127.0.0.1:1/db")`) || strings.Contains(r.stderr, "secret") {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r := e.run("", "run", "hello"); r.code != 0 { // the same settings still work
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}

// TestPrincipalsAndKeys: the admin CLI makes a principal and a key (the
// key printed once, alone on stdout), lists it without its secret,
// refuses an unknown role, and revokes the key.
func TestPrincipalsAndKeys(t *testing.T) {
	e := newEnv(t)
	e.run("", "run", "hello")
	if r := e.run("", "principals", "create", "alice", "--role", "root"); r.code != exitFailed || !strings.Contains(r.stderr, "invalid_params") {
		t.Fatalf("unknown role: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := e.run("", "principals", "create", "alice", "--role", "member"); r.code != 0 || !strings.Contains(r.stdout, "alice") {
		t.Fatalf("create: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	r := e.run("", "keys", "create", "alice", "--name", "laptop")
	secret := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(secret, "trk_") || strings.Contains(secret, "\n") {
		t.Fatalf("keys create: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	r = e.run("", "keys", "ls", "alice")
	if r.code != 0 || !strings.Contains(r.stdout, "laptop") || strings.Contains(r.stdout, secret) {
		t.Fatalf("keys ls: exit %d, stdout %s", r.code, r.stdout)
	}
	keyID := strings.Fields(strings.Split(r.stdout, "\n")[1])[0]
	// With TRELLIS_KEY the CLI acts as alice (a member): sessions yes,
	// principals no.
	asAlice := func(args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := e.command(ctx, args...)
		cmd.Env = append(cmd.Env, "TRELLIS_KEY="+secret)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), stderr.String()
		}
		return 0, stderr.String()
	}
	if code, stderr := asAlice("sessions", "ls"); code != 0 {
		t.Fatalf("sessions ls as alice: exit %d, %s", code, stderr)
	}
	if code, stderr := asAlice("principals", "ls"); code != exitFailed || !strings.Contains(stderr, "forbidden") {
		t.Fatalf("principals ls as alice: exit %d, %s", code, stderr)
	}
	if r := e.run("", "keys", "revoke", keyID); r.code != 0 || !strings.Contains(r.stderr, "revoked "+keyID) {
		t.Fatalf("keys revoke: exit %d, stderr %s", r.code, r.stderr)
	}
	r = e.run("", "principals", "ls")
	if r.code != 0 || !strings.Contains(r.stdout, "builtin-admin") || !strings.Contains(r.stdout, "member") {
		t.Fatalf("principals ls: exit %d, stdout %s", r.code, r.stdout)
	}
	// A budget for all alice's sessions: set, refused when negative, cleared.
	if r := e.run("", "principals", "budget", "alice", "--cost-micro-usd", "5000000"); r.code != 0 || !strings.Contains(r.stdout, "budget cost $5.000000; its sessions spent $0.000000, 0 tokens") {
		t.Fatalf("principals budget: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	if r := e.run("", "principals", "budget", "alice", "--tokens", "-1"); r.code != exitFailed || !strings.Contains(r.stderr, "maxTokens") {
		t.Fatalf("principals budget --tokens -1: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := e.run("", "principals", "budget", "alice"); r.code != 0 || !strings.Contains(r.stdout, "no budget") {
		t.Fatalf("principals budget (clear): exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	if r := e.run("", "principals", "rm", "nobody"); r.code != exitFailed || !strings.Contains(r.stderr, "no principal is named") {
		t.Fatalf("rm unknown: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := e.run("", "principals", "rm", "alice"); r.code != 0 {
		t.Fatalf("rm: exit %d, stderr %s", r.code, r.stderr)
	}

	// A service limited to agents and workdirs: shown, replaced, cleared.
	if r := e.run("", "principals", "create", "ci", "--role", "member", "--kind", "service", "--agent", "a1", "--workdir", "/srv/ci/"); r.code != 0 ||
		!strings.Contains(r.stdout, "agents a1\tworkdirs /srv/ci") {
		t.Fatalf("create a limited service: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	if r := e.run("", "principals", "create", "bob", "--role", "member", "--agent", "a1"); r.code != exitFailed || !strings.Contains(r.stderr, "only service principals") {
		t.Fatalf("a human with limits: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := e.run("", "principals", "update", "ci", "--workdir", "relative/dir"); r.code != exitFailed || !strings.Contains(r.stderr, "not an absolute path") {
		t.Fatalf("a relative workdir: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := e.run("", "principals", "update", "ci", "--agent", "a1", "--clear-agents"); r.code != exitUsage {
		t.Fatalf("--agent with --clear-agents: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := e.run("", "principals", "update", "ci", "--agent", "a2", "--agent", "a3", "--clear-workdirs"); r.code != 0 || !strings.Contains(r.stdout, "agents a2,a3\tworkdirs *") {
		t.Fatalf("update the limits: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	r = e.run("", "principals", "ls")
	if r.code != 0 || !strings.Contains(r.stdout, "AGENTS") || !regexp.MustCompile(`ci\s+service\s+member\s+\S+\s+a2,a3\s+\*`).MatchString(r.stdout) {
		t.Fatalf("principals ls with limits: exit %d, stdout %s", r.code, r.stdout)
	}
}

// TestSessionsExportImportArchive pins sessions export, import, archive,
// unarchive and ls --archived: a session exported, deleted and imported
// comes back under its id; importing it again, or a damaged file, fails
// and says why; an archived session is listed apart, found by an id
// prefix and exported.
func TestSessionsExportImportArchive(t *testing.T) {
	e := newEnv(t)
	id := sessionOf(t, e.run("", "run", "hello"))
	file := filepath.Join(t.TempDir(), "s.jsonl")
	if r := e.run("", "sessions", "export", id, "-o", file); r.code != 0 || !strings.Contains(r.stdout, id+" exported to "+file) {
		t.Fatalf("export: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	prefix := id[:len(id)-4]
	if r := e.run("", "sessions", "archive", prefix); r.code != 0 || !strings.Contains(r.stdout, id+" archived") {
		t.Fatalf("archive by an id prefix: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	// Archived first, as docs/export.md advises for a consistent file.
	archivedFile := filepath.Join(t.TempDir(), "archived.jsonl")
	if r := e.run("", "sessions", "export", id, "-o", archivedFile); r.code != 0 || !strings.Contains(r.stdout, id+" exported to ") {
		t.Fatalf("export of the archived session: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	if r := e.run("", "sessions", "ls", "--all"); strings.Contains(r.stdout, id) {
		t.Fatalf("ls lists the archived session: %s", r.stdout)
	}
	if r := e.run("", "sessions", "ls", "--archived"); r.code != 0 || !strings.Contains(r.stdout, id) {
		t.Fatalf("ls --archived: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	if r := e.run("", "sessions", "unarchive", prefix); r.code != 0 || !strings.Contains(r.stdout, id+" unarchived") {
		t.Fatalf("unarchive by an id prefix: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	if r := e.run("", "sessions", "import", file); r.code != exitFailed || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("import of an existing id: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := e.run("", "sessions", "rm", id); r.code != 0 {
		t.Fatalf("rm: exit %d, stderr %s", r.code, r.stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	damaged := filepath.Join(t.TempDir(), "damaged.jsonl")
	if err := os.WriteFile(damaged, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.run("", "sessions", "import", damaged); r.code != exitFailed || !strings.Contains(r.stderr, "not a valid trellis session file") {
		t.Fatalf("import of a truncated file: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := e.run("", "sessions", "import", file); r.code != 0 || !strings.Contains(r.stdout, "imported "+id) {
		t.Fatalf("import: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	if r := e.run("", "sessions", "ls"); !strings.Contains(r.stdout, id) {
		t.Fatalf("ls after import: %s", r.stdout)
	}
}

// TestSessionsForkAndRewind pins trellis sessions fork and rewind: a fork
// at an event says what the new session got; a rewind to before the first
// turn leaves no history; bad seqs are the daemon's invalid_params.
func TestSessionsForkAndRewind(t *testing.T) {
	e := newEnv(t)
	id := sessionOf(t, e.run("", "run", "hello"))
	dir := filepath.Join(t.TempDir(), "fork")
	r := e.run("", "sessions", "fork", id, "--at", "1", "--workdir", dir)
	want := regexp.MustCompile(`^s-[0-9a-f]+: a fork of ` + id + ` at seq 1, with 0 messages of history and no files \(no checkpoint at or before that event\), in ` + regexp.QuoteMeta(dir) + "\n$")
	if r.code != 0 || !want.MatchString(r.stdout) {
		t.Fatalf("fork: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Errorf("the fork's workdir: %v", err)
	}
	r = e.run("", "sessions", "rewind", id, "--at", "0")
	want = regexp.MustCompile(`^` + id + ` rewound to seq 0: 0 messages of history and its files left as they are \(no checkpoint at or before that event\) \(session.rewound at seq \d+\)` + "\n$")
	if r.code != 0 || !want.MatchString(r.stdout) {
		t.Fatalf("rewind: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	if r := e.run("", "sessions", "show", id); r.code != 0 || !strings.Contains(r.stdout, "─ rewound to event 0: the model no longer reads events 1 to ") {
		t.Errorf("sessions show after the rewind: exit %d, stdout %q", r.code, r.stdout)
	}
	for _, args := range [][]string{{"sessions", "fork", id, "--at", "100000"}, {"sessions", "rewind", id, "--at", "-1"}} {
		if r := e.run("", args...); r.code == 0 || !strings.Contains(r.stderr, "is not in the log of session") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	if r := e.run("", "sessions", "fork", id); r.code != exitUsage {
		t.Errorf("fork without --at: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestSessionsPrune pins sessions prune: with --keep-latest 1 a dry run
// names the two older sessions of the workdir and deletes nothing; the
// real run deletes them and keeps the newest; without a rule (and none in
// the daemon) it fails and says why.
func TestSessionsPrune(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for range 3 {
		ids = append(ids, sessionOf(t, e.run("", "run", "hello")))
	}
	r := e.run("", "sessions", "prune", "--keep-latest", "1", "--dry-run")
	if r.code != 0 || !strings.Contains(r.stdout, "would delete "+ids[0]) || !strings.Contains(r.stdout, "would delete "+ids[1]) ||
		strings.Contains(r.stdout, ids[2]) || !strings.Contains(r.stdout, "not among the 1 latest of its workdir") ||
		!strings.Contains(r.stdout, "dry run: 2 sessions would be deleted") {
		t.Fatalf("prune --dry-run: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	if r := e.run("", "sessions", "ls", "--all"); !strings.Contains(r.stdout, ids[0]) || !strings.Contains(r.stdout, ids[1]) {
		t.Fatalf("the dry run deleted sessions: %s", r.stdout)
	}
	r = e.run("", "sessions", "prune", "--keep-latest", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "deleted "+ids[0]) || !strings.Contains(r.stdout, "deleted "+ids[1]) ||
		!strings.Contains(r.stdout, "2 sessions deleted") || !strings.Contains(r.stdout, "policy: keep the 1 latest per workdir") {
		t.Fatalf("prune: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	r = e.run("", "sessions", "ls", "--all")
	if strings.Contains(r.stdout, ids[0]) || strings.Contains(r.stdout, ids[1]) || !strings.Contains(r.stdout, ids[2]) {
		t.Fatalf("ls after prune: %s", r.stdout)
	}
	if r := e.run("", "sessions", "prune", "--dry-run"); r.code != exitFailed || !strings.Contains(r.stderr, "no retention rule") {
		t.Fatalf("prune without a rule: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
}
