package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/trellis-run/trellis/daemon"
)

// bearerTransport adds an Authorization header to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpProgress collects the progress notifications an MCP client receives.
type mcpProgress struct {
	mu   sync.Mutex
	msgs []string
}

func (p *mcpProgress) handle(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	p.msgs = append(p.msgs, req.Params.Message)
	p.mu.Unlock()
}

func (p *mcpProgress) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.msgs)
}

// mcpSession connects an MCP client (the go-sdk's) to the daemon's /mcp
// with token.
func mcpSession(t *testing.T, d *daemon.Daemon, token string) (*mcp.ClientSession, *mcpProgress) {
	t.Helper()
	p := &mcpProgress{}
	client := mcp.NewClient(&mcp.Implementation{Name: "trellis-e2e", Version: "1"}, &mcp.ClientOptions{ProgressNotificationHandler: p.handle})
	transport := &mcp.StreamableClientTransport{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/mcp", d.HTTPPort()),
		HTTPClient: &http.Client{Transport: bearerTransport{token}}}
	cs, err := client.Connect(t.Context(), transport, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, p
}

// callTool calls a tool with a progress token and returns its text and
// structured result.
func callTool(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, map[string]any, bool, error) {
	t.Helper()
	params := &mcp.CallToolParams{Name: name, Arguments: args}
	params.SetProgressToken("p-" + name)
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		return "", nil, false, err
	}
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	var structured map[string]any
	if res.StructuredContent != nil {
		raw, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(raw, &structured)
	}
	return strings.Join(text, "\n"), structured, res.IsError, nil
}

// TestMCPServer: an MCP client lists Trellis's tools, runs an agent to the
// end of its turn with progress notifications, prompts the session again,
// gets an approval answered by the session's approvers as usual, and
// cancels a running call, which interrupts its turn; a call made with a
// key runs as the key's principal.
func TestMCPServer(t *testing.T) {
	d := startDaemon(t)
	ctx := t.Context()

	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/mcp", d.HTTPPort()), "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /mcp without a token: status %d, want 401", resp.StatusCode)
	}

	cs, progress := mcpSession(t, d, d.Token())
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if want := []string{"list_agents", "list_sessions", "prompt_session", "run_agent"}; !slices.Equal(names, want) {
		t.Fatalf("tools = %v, want %v", names, want)
	}

	wd := t.TempDir()
	text, out, isErr, err := callTool(ctx, t, cs, "run_agent", map[string]any{"task": "hello", "workdir": wd, "mode": "accept"})
	if err != nil || isErr {
		t.Fatalf("run_agent: %v %q", err, text)
	}
	if want := "Hello from the scripted model, streamed in small chunks."; text != want || out["text"] != want || out["reason"] != "complete" {
		t.Fatalf("run_agent answered %q %v, want %q, complete", text, out, want)
	}
	sessionID, _ := out["sessionId"].(string)
	// The client hands notifications to its handler on goroutines of their
	// own: they may be handled after the call's answer.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got := progress.all()
		if slices.Contains(got, "turn.started") && slices.Contains(got, "turn.done: complete") && strings.Contains(strings.Join(got, ""), "Hello from the scripted") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("progress notifications %q lack the turn's start, its streamed text or its end", got)
		}
	}

	_, list, _, err := callTool(ctx, t, cs, "list_sessions", map[string]any{"workdir": wd})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := list["sessions"].([]any); len(s) != 1 || s[0].(map[string]any)["sessionId"] != sessionID {
		t.Fatalf("list_sessions %v, want the one session %s", list, sessionID)
	}

	// A call that needs approval waits for the session's approvers: this
	// session has no origin connection, so the unattended queue, answered
	// by a WebSocket client.
	ws := helloWS(t, d)
	done := make(chan string, 1)
	go func() {
		text, _, _, err := callTool(ctx, t, cs, "prompt_session", map[string]any{"sessionId": sessionID, "text": "run ls"})
		if err != nil {
			text = err.Error()
		}
		done <- text
	}()
	var pending struct {
		Requests []struct {
			RequestID string `json:"requestId"`
		} `json:"requests"`
	}
	for deadline := time.Now().Add(30 * time.Second); len(pending.Requests) == 0; time.Sleep(20 * time.Millisecond) {
		if err := ws.Call(ctx, "approval.list", map[string]any{"sessionId": sessionID}, &pending); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the prompt's shell call was never put to the approvers")
		}
	}
	if err := ws.Call(ctx, "approval.respond", map[string]any{"requestId": pending.Requests[0].RequestID, "decision": "allow"}, nil); err != nil {
		t.Fatal(err)
	}
	if text := <-done; !strings.HasSuffix(text, "That was the listing.") {
		t.Fatalf("prompt_session answered %q, want the answer after the allowed ls", text)
	}

	// Cancelling a running call interrupts its turn.
	cctx, cancel := context.WithCancel(ctx)
	before := len(progress.all())
	errc := make(chan error, 1)
	go func() {
		_, _, _, err := callTool(cctx, t, cs, "prompt_session", map[string]any{"sessionId": sessionID, "text": "slow"})
		errc <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); !slices.ContainsFunc(progress.all()[before:], func(m string) bool { return strings.Contains(m, "slow") }); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slow turn reported no progress")
		}
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a cancelled call returned no error")
	}
	var resumed struct {
		Events []map[string]any `json:"events"`
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := ws.Call(ctx, "session.resume", map[string]any{"sessionId": sessionID}, &resumed); err != nil {
			t.Fatal(err)
		}
		dones := findKind(resumed.Events, "turn.done")
		if len(dones) == 3 {
			if r := dones[2]["reason"]; r != "interrupted" {
				t.Fatalf("the cancelled call's turn ended %v, want interrupted", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled call's turn did not end: %d turn.done", len(dones))
		}
	}

	// A key's calls run as its principal: a viewer may not start a session.
	_, key := makePrincipal(t, ws, "watcher", "viewer")
	kcs, _ := mcpSession(t, d, key)
	text, _, isErr, err = callTool(ctx, t, kcs, "run_agent", map[string]any{"task": "hello", "workdir": wd})
	if err != nil || !isErr || !strings.Contains(text, "forbidden") {
		t.Fatalf("run_agent with a viewer's key: %v %v %q, want a forbidden tool error", err, isErr, text)
	}
	// An MCP session stays with its caller: the key cannot use the token's.
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/mcp", d.HTTPPort()),
		strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the token's MCP session used with a key: status %d, want 403", resp.StatusCode)
	}
}
