package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/tool"
	"github.com/trellis-run/trellis/runtime/tool/mcp/mcptest"
)

func TestMain(m *testing.M) {
	mcptest.MaybeServe()
	os.Exit(m.Run())
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type recorder struct {
	mu sync.Mutex
	ss []Status
}

func (r *recorder) add(s Status) { r.mu.Lock(); r.ss = append(r.ss, s); r.mu.Unlock() }
func (r *recorder) states() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.ss {
		out = append(out, s.State)
	}
	return out
}

func startTestServer(t *testing.T, rec *recorder) (*Manager, string) {
	t.Helper()
	dir := t.TempDir()
	cmd, env := mcptest.Command(dir)
	m := New(Servers{"t": {Command: cmd, Env: env}}, Options{
		OnChange: rec.add,
		Backoff:  func(int) time.Duration { return 10 * time.Millisecond },
	})
	t.Cleanup(m.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m.Ensure(ctx)
	if st := m.Statuses(); len(st) != 1 || st[0].State != StateReady {
		t.Fatalf("statuses after Ensure: %+v", st)
	}
	return m, dir
}

func run(t *testing.T, m *Manager, ctx context.Context, name, args string, outDir string) tool.Result {
	t.Helper()
	res, err := m.Registry().Run(ctx, name, tool.Call{ID: "c1", Args: json.RawMessage(args), Workdir: "/", OutputDir: outDir})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func TestStdioServerTools(t *testing.T) {
	rec := &recorder{}
	m, _ := startTestServer(t, rec)
	infos := map[string]tool.Info{}
	for _, i := range m.Registry().List() {
		infos[i.Name] = i
	}
	echo, ok := infos["mcp__t__echo"]
	if !ok {
		t.Fatalf("no mcp__t__echo in %v", m.Registry().Names())
	}
	if echo.PermissionTag != approval.TagRead || echo.Source != "mcp" || echo.Server != "t" || !strings.Contains(string(echo.InputSchema), `"text"`) {
		t.Fatalf("echo info: %+v schema %s", echo, echo.InputSchema)
	}
	if infos["mcp__t__hang"].PermissionTag != approval.TagExec {
		t.Fatalf("hang (no readOnlyHint) tag %q, want exec", infos["mcp__t__hang"].PermissionTag)
	}
	if st := m.Statuses()[0]; st.ToolCount != 7 || st.Transport != "stdio" {
		t.Fatalf("status %+v", st)
	}
	ctx := context.Background()
	tests := []struct {
		name, tool, args string
		ok               bool
		want             string
	}{
		{"text result", "mcp__t__echo", `{"text":"hi"}`, true, "echo: hi"},
		{"error result", "mcp__t__fail", `{}`, false, "always fails"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, m, ctx, tc.tool, tc.args, "")
			if res.OK != tc.ok || !strings.Contains(res.Output, tc.want) {
				t.Fatalf("result %+v", res)
			}
		})
	}
	// The schema comes from the server: a bad argument fails before the call.
	if _, err := m.Registry().Run(ctx, "mcp__t__echo", tool.Call{Args: json.RawMessage(`{"text":5}`), Workdir: "/"}); err == nil {
		t.Fatal("a number for a string argument passed the schema")
	}
	// Output goes through the built-in limits; the full text is kept.
	out := t.TempDir()
	res := run(t, m, ctx, "mcp__t__big", `{}`, out)
	if !res.OK || len(res.Output) > 40_000 || !strings.Contains(res.Output, "output truncated: 200000 bytes") || res.FullOutput == "" {
		t.Fatalf("big: ok %v len %d full %q", res.OK, len(res.Output), res.FullOutput)
	}
	if b, err := os.ReadFile(res.FullOutput); err != nil || len(b) != 200_000 {
		t.Fatalf("full output: %d bytes, %v", len(b), err)
	}
}

func TestInterruptCancelsOnServer(t *testing.T) {
	m, dir := startTestServer(t, &recorder{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan tool.Result, 1)
	go func() { done <- run(t, m, ctx, "mcp__t__hang", `{"tag":"x"}`, "") }()
	waitFor(t, "the call to start", func() bool { _, err := os.Stat(filepath.Join(dir, "started")); return err == nil })
	cancel()
	res := <-done
	if res.OK || !strings.Contains(res.Output, "interrupted") {
		t.Fatalf("interrupted call: %+v", res)
	}
	// notifications/cancelled reached the server: its handler's context ended.
	waitFor(t, "the server to see the cancellation", func() bool { _, err := os.Stat(filepath.Join(dir, "cancelled")); return err == nil })
	// The tagged call left one marker of each, naming the server's pid.
	started, cancelled := mcptest.Calls(dir, "started", "x"), mcptest.Calls(dir, "cancelled", "x")
	pid, _ := os.ReadFile(filepath.Join(dir, "pid"))
	if len(started) != 1 || len(cancelled) != 1 || fmt.Sprint(started[0]) != string(pid) || cancelled[0] != started[0] {
		t.Fatalf("per-call markers: started %v, cancelled %v, want one each of pid %s", started, cancelled, pid)
	}
}

func TestCallTimeout(t *testing.T) {
	dir := t.TempDir()
	cmd, env := mcptest.Command(dir)
	m := New(Servers{"t": {Command: cmd, Env: env, TimeoutSec: 0.5}}, Options{})
	t.Cleanup(m.Close)
	m.Ensure(context.Background())
	res := run(t, m, context.Background(), "mcp__t__hang", `{}`, "")
	if res.OK || !strings.Contains(res.Output, "did not answer within 500ms") {
		t.Fatalf("timed out call: %+v", res)
	}
}

func TestCrashMidCallRestarts(t *testing.T) {
	rec := &recorder{}
	m, dir := startTestServer(t, rec)
	done := make(chan tool.Result, 1)
	go func() { done <- run(t, m, context.Background(), "mcp__t__hang", `{}`, "") }()
	waitFor(t, "the call to start", func() bool { _, err := os.Stat(filepath.Join(dir, "started")); return err == nil })
	pidText, _ := os.ReadFile(filepath.Join(dir, "pid"))
	pid, _ := strconv.Atoi(string(pidText))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.OK || !strings.Contains(res.Output, "stopped during the call") {
		t.Fatalf("call to a killed server: %+v", res)
	}
	waitFor(t, "a restart", func() bool { s := m.Statuses()[0]; return s.State == StateReady && s.Restarts >= 1 })
	if r := run(t, m, context.Background(), "mcp__t__echo", `{"text":"again"}`, ""); !r.OK || r.Output != "echo: again" {
		t.Fatalf("after restart: %+v", r)
	}
	states := strings.Join(rec.states(), ",")
	if !strings.Contains(states, "failed,starting,ready") {
		t.Fatalf("state changes %s", states)
	}
}

func TestToolListChanged(t *testing.T) {
	m, _ := startTestServer(t, &recorder{})
	if _, ok := m.Registry().Lookup("mcp__t__added"); ok {
		t.Fatal("added exists before add_tool")
	}
	run(t, m, context.Background(), "mcp__t__add_tool", `{}`, "")
	waitFor(t, "tools/list_changed to add the tool", func() bool { _, ok := m.Registry().Lookup("mcp__t__added"); return ok })
	if r := run(t, m, context.Background(), "mcp__t__added", `{}`, ""); r.Output != "added says hi" {
		t.Fatalf("added: %+v", r)
	}
}

func TestStartFailure(t *testing.T) {
	rec := &recorder{}
	m := New(Servers{"bad": {Command: "/nonexistent/mcp-server"}, "off": {Command: "x", Disabled: true}}, Options{OnChange: rec.add, Backoff: func(int) time.Duration { return time.Hour }})
	t.Cleanup(m.Close)
	m.Ensure(context.Background())
	st := m.Statuses()
	if st[0].Name != "bad" || st[0].State != StateFailed || !strings.Contains(st[0].Reason, "start failed") || !strings.Contains(st[0].Reason, "/nonexistent/mcp-server") {
		t.Fatalf("bad server: %+v", st[0])
	}
	if st[1].State != StateFailed || !strings.Contains(st[1].Reason, "disabled") {
		t.Fatalf("disabled server: %+v", st[1])
	}
	if len(m.Registry().Names()) != 0 {
		t.Fatalf("tools of failed servers: %v", m.Registry().Names())
	}
}

func TestStreamableHTTPWithHeaders(t *testing.T) {
	dir := t.TempDir()
	srv := mcptest.NewServer(dir)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close) // after m.Close, which ends the open event stream
	m := New(Servers{"web": {URL: ts.URL, Headers: map[string]string{"Authorization": "Bearer s3cret"}}, "noauth": {URL: ts.URL}}, Options{Backoff: func(int) time.Duration { return time.Hour }})
	t.Cleanup(m.Close)
	m.Ensure(context.Background())
	st := m.Statuses()
	if st[1].Name != "web" || st[1].State != StateReady || st[1].Transport != "http" {
		t.Fatalf("http server: %+v", st)
	}
	if st[0].State != StateFailed || !strings.Contains(st[0].Reason, "401") && !strings.Contains(strings.ToLower(st[0].Reason), "unauthorized") {
		t.Fatalf("server without the header: %+v", st[0])
	}
	if r := run(t, m, context.Background(), "mcp__web__echo", `{"text":"over http"}`, ""); !r.OK || r.Output != "echo: over http" {
		t.Fatalf("http echo: %+v", r)
	}
}

// TestClosedServerLeavesNoProcess: a stdio server that started a process of
// its own (a wrapper script's worker, npx's node) does not leave it
// running once the server stops: when the manager closes, and when the
// server dies and is restarted.
func TestClosedServerLeavesNoProcess(t *testing.T) {
	dir := t.TempDir()
	exe, env := mcptest.Command(dir)
	// The shell starts a worker (not holding the server's pipes), then
	// becomes the server.
	script := `sleep 300 </dev/null >/dev/null 2>&1 & echo $! > "$1/worker.$$"; exec "$0"`
	m := New(Servers{"t": {Command: "sh", Args: []string{"-c", script, exe, dir}, Env: env}}, Options{
		Backoff: func(int) time.Duration { return 10 * time.Millisecond },
	})
	t.Cleanup(m.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m.Ensure(ctx)
	if st := m.Statuses(); len(st) != 1 || st[0].State != StateReady {
		t.Fatalf("statuses after Ensure: %+v", st)
	}
	workers := func() []int {
		matches, _ := filepath.Glob(filepath.Join(dir, "worker.*"))
		var pids []int
		for _, f := range matches {
			b, _ := os.ReadFile(f)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	t.Cleanup(func() {
		for _, pid := range workers() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	first := workers()
	if len(first) != 1 || !running(first[0]) {
		t.Fatalf("workers %v: the server's worker is not running", first)
	}

	// The server dies: its worker goes with it before the restart.
	pid, _ := strconv.Atoi(strings.TrimSpace(string(mustRead(t, filepath.Join(dir, "pid")))))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a restart with a new worker", func() bool { return len(workers()) == 2 && m.Statuses()[0].State == StateReady })
	if running(first[0]) {
		t.Errorf("worker %d of the dead server still runs after the restart", first[0])
	}

	m.Close()
	for _, w := range workers() {
		if running(w) {
			t.Errorf("worker %d still runs after the manager closed", w)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// running reports whether process pid runs (a zombie does not).
func running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}
