package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPStdio: an MCP host launches `trellis mcp` (which starts the
// daemon), lists the tools, runs an agent with progress relayed under the
// host's own token, and cancels a running call, which ends its turn.
func TestMCPStdio(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	var mu sync.Mutex
	var progress []*mcp.ProgressNotificationParams
	c := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, req.Params)
			mu.Unlock()
		}})
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: e.command(ctx, "mcp")}, nil)
	if err != nil {
		t.Fatalf("trellis mcp: %v", err)
	}
	defer cs.Close()
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

	params := &mcp.CallToolParams{Name: "run_agent", Arguments: map[string]any{"task": "hello", "workdir": e.dir, "mode": "auto"}}
	params.SetProgressToken("host-1")
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("run_agent: %v %+v", err, res)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != "Hello from the test script, in a few chunks." {
		t.Fatalf("run_agent answered %q", text)
	}
	var out struct {
		SessionID string `json:"sessionId"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil || out.SessionID == "" {
		t.Fatalf("run_agent's structured result %s has no sessionId", raw)
	}
	// Notifications are handled on goroutines of their own, possibly after
	// the answer.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n, tokensOK := len(progress), true
		for _, p := range progress {
			tokensOK = tokensOK && p.ProgressToken == "host-1"
		}
		mu.Unlock()
		if !tokensOK {
			t.Fatal("a progress notification came with another token than the host's")
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no progress notification reached the host")
		}
	}

	// Cancelling a call interrupts its turn: the session is idle again.
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "prompt_session", Arguments: map[string]any{"sessionId": out.SessionID, "text": "slow"}})
		errc <- err
	}()
	status := func() string {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_sessions", Arguments: map[string]any{"workdir": e.dir}})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var list struct {
			Sessions []struct{ Status string } `json:"sessions"`
		}
		_ = json.Unmarshal(raw, &list)
		if len(list.Sessions) != 1 {
			t.Fatalf("list_sessions: %s", raw)
		}
		return list.Sessions[0].Status
	}
	for deadline := time.Now().Add(30 * time.Second); status() != "running"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slow turn never ran")
		}
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled call returned no error")
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st := status()
		if st == "idle" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled call's turn still runs: status %s", st)
		}
	}
	if strings.Contains(e.run("", "sessions", "ls").stdout, "running") {
		t.Fatal("trellis sessions ls still shows a running session")
	}
}
