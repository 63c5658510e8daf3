package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-run/trellis/daemon"
	"github.com/trellis-run/trellis/runtime/tool/mcp/mcptest"
)

// mcpScript is the fake model of the MCP tests: each prompt calls one MCP tool.
const mcpScript = `{"steps":[
 {"match":"shout","tool_calls":[{"name":"mcp__gosrv__shout","arguments":{"text":"hello from the model"}}]},
 {"after_tool":"mcp__gosrv__shout","text":"Shouted."},
 {"match":"everything","tool_calls":[{"name":"mcp__everything__echo","arguments":{"message":"hi everything"}}]},
 {"after_tool":"mcp__everything__echo","text":"Everything echoed."},
 {"match":"hang","tool_calls":[{"name":"mcp__gosrv__hang","arguments":{"tag":"e2e"}}]},
 {"after_tool":"mcp__gosrv__hang","text":"The hang ended."},
 {"default":true,"text":"Default answer."}
],"repeat":true}`

// everythingServer returns the command line of the npm-published MCP
// reference server installed under testdata (by .ci/run), or why it cannot run.
func everythingServer() ([]string, string) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, "node is not installed"
	}
	_, file, _, _ := runtime.Caller(0)
	entry := filepath.Join(filepath.Dir(file), "testdata", "mcp-everything", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	if _, err := os.Stat(entry); err != nil {
		return nil, "@modelcontextprotocol/server-everything is not installed: run (cd e2e/testdata/mcp-everything && npm ci)"
	}
	return []string{node, entry, "stdio"}, ""
}

// startMCPDaemon starts a daemon whose --mcp-config names the Go SDK test
// server (this test binary) and, when installed, server-everything.
func startMCPDaemon(t *testing.T) (*daemon.Daemon, string, bool) {
	t.Helper()
	home, markers := t.TempDir(), t.TempDir()
	script := filepath.Join(home, "script.json")
	if err := os.WriteFile(script, []byte(mcpScript), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, env := mcptest.Command(markers)
	servers := map[string]any{"gosrv": map[string]any{"command": cmd, "env": env}}
	everything, why := everythingServer()
	if why == "" {
		servers["everything"] = map[string]any{"command": everything[0], "args": everything[1:]}
	} else {
		t.Logf("SKIPPING the server-everything part: %s", why)
	}
	raw, _ := json.Marshal(map[string]any{"mcpServers": servers})
	cfgPath := filepath.Join(t.TempDir(), "claude_desktop_config.json")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(context.Background(), daemon.Config{Home: home, Provider: "fake:" + script, MCPConfig: cfgPath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d, markers, why == ""
}

type mcpServerState struct {
	Name      string `json:"name"`
	Scope     string `json:"scope"`
	Transport string `json:"transport"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
	ToolCount int    `json:"toolCount"`
	Restarts  int    `json:"restarts"`
}

func TestMCPServersTools(t *testing.T) {
	d, markers, withEverything := startMCPDaemon(t)
	c := helloWS(t, d)
	a := &approver{reply: map[string]any{"decision": "allow"}}
	c.onRequest = a.handle
	ctx := context.Background()

	// Lazy: nothing runs before a turn or tool.list needs the tools.
	var servers struct {
		Servers []mcpServerState `json:"servers"`
	}
	if err := c.Call(ctx, "mcp.list", map[string]any{}, &servers); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers.Servers {
		if s.State != "idle" {
			t.Fatalf("server %s is %s before any use, want idle", s.Name, s.State)
		}
	}

	var list struct {
		Tools []struct {
			Name          string         `json:"name"`
			PermissionTag string         `json:"permissionTag"`
			State         string         `json:"state"`
			Source        string         `json:"source"`
			Server        string         `json:"server"`
			InputSchema   map[string]any `json:"inputSchema"`
		} `json:"tools"`
	}
	if err := c.Call(ctx, "tool.list", map[string]any{}, &list); err != nil {
		t.Fatal(err)
	}
	tools := map[string]int{}
	for i, tl := range list.Tools {
		tools[tl.Name] = i
	}
	want := []struct{ name, tag, server, prop string }{
		{"mcp__gosrv__echo", "read", "gosrv", "text"},
		{"mcp__gosrv__shout", "exec", "gosrv", "text"},
		{"mcp__gosrv__hang", "exec", "gosrv", "tag"},
	}
	if withEverything {
		want = append(want, struct{ name, tag, server, prop string }{"mcp__everything__echo", "read", "everything", "message"})
	}
	for _, w := range want {
		i, ok := tools[w.name]
		if !ok {
			t.Fatalf("tool.list lacks %s: %v", w.name, tools)
		}
		tl := list.Tools[i]
		props, _ := tl.InputSchema["properties"].(map[string]any)
		if tl.PermissionTag != w.tag || tl.Source != "mcp" || tl.Server != w.server || tl.State != "active" || props[w.prop] == nil {
			t.Fatalf("%s: %+v", w.name, tl)
		}
	}
	if err := c.Call(ctx, "mcp.list", map[string]any{}, &servers); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers.Servers {
		if s.State != "ready" || s.ToolCount == 0 || s.Transport != "stdio" {
			t.Fatalf("after tool.list: %+v", s)
		}
	}

	id := createSession(t, c, map[string]any{"mode": "accept"})

	// An exec MCP tool asks in accept mode, then runs.
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "shout it"}, nil)
	evs := collect(t, c.Events(id), "turn.done", 1)
	if a.count() != 1 || a.asked[0]["tool"] != "mcp__gosrv__shout" || a.asked[0]["permissionTag"] != "exec" {
		t.Fatalf("approvals asked: %v", a.asked)
	}
	res := findKind(evs, "tool.result")
	if len(res) != 1 || res[0]["ok"] != true || res[0]["output"] != "HELLO FROM THE MODEL" {
		t.Fatalf("shout result: %v (events %v)", res, eventKinds(evs))
	}

	if withEverything {
		c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "everything"}, nil)
		evs = collect(t, c.Events(id), "turn.done", 1)
		res = findKind(evs, "tool.result")
		if len(res) != 1 || res[0]["ok"] != true || !strings.Contains(res[0]["output"].(string), "hi everything") {
			t.Fatalf("server-everything echo: %v", res)
		}
	} else {
		t.Log("server-everything part skipped (see above)")
	}

	// Killing the server mid-call: a failed tool.result, then a restart.
	c.Call(ctx, "session.prompt", map[string]any{"sessionId": id, "text": "hang now"}, nil)
	waitFile(t, filepath.Join(markers, "started"))
	pidText, _ := os.ReadFile(filepath.Join(markers, "pid"))
	serverID, err := strconv.Atoi(string(pidText))
	if err != nil {
		t.Fatal(err)
	}
	// The server runs sandboxed, process 1 of a PID namespace of its own.
	pid := mcptest.HostPid(serverID)
	if pid == 0 {
		t.Fatalf("no process is the MCP server %d", serverID)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	evs = collect(t, c.Events(id), "turn.done", 1)
	res = findKind(evs, "tool.result")
	if len(res) != 1 || res[0]["ok"] != false || !strings.Contains(res[0]["output"].(string), "stopped during the call") {
		t.Fatalf("result of a call whose server was killed: %v", res)
	}
	deadline := time.After(60 * time.Second)
	for {
		select {
		case f := <-c.notes:
			if f.Method != "mcp.changed" {
				continue
			}
			var p struct {
				Server mcpServerState `json:"server"`
			}
			_ = json.Unmarshal(f.Params, &p)
			if p.Server.Name == "gosrv" && p.Server.State == "ready" && p.Server.Restarts >= 1 {
				return
			}
		case <-deadline:
			t.Fatal("no mcp.changed {gosrv ready, restarts ≥ 1} within 60 s after the kill")
		}
	}
}

// waitFile waits (generously) for a file to exist.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within 60 s", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
