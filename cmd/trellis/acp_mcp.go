package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	acp "github.com/coder/acp-go-sdk"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/trellis-run/trellis/client"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/version"
)

// The MCP servers an editor passes with a session (session/new, load,
// resume) run where the editor runs: trellis acp starts or reaches them
// itself (stdio, or HTTP when the editor's entry is one) and lends their
// tools to the session as mcp__SERVER__TOOL (tool.register), the names the
// daemon gives its own servers' tools. The model calls them like any tool,
// approvals apply by their read-only hint, and a call comes back here
// (tool.call) and goes to the server.

// acpMCPTool is one lent MCP tool: its server's session and remote name.
type acpMCPTool struct {
	cs     *sdk.ClientSession
	server string
	remote string
}

// mcpToolName is the model's name of a server's tool: letters, digits, _
// and -, at most 64 characters (as the daemon names its MCP tools).
func mcpToolName(server, remote string) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
				return r
			}
			return '_'
		}, s)
	}
	name := "mcp__" + strings.ReplaceAll(clean(server), "__", "_") + "__" + clean(remote)
	if len(name) > 64 {
		name = name[:64]
	}
	return name
}

// mcpTransport is the transport of an editor's MCP server entry.
func mcpTransport(s acp.McpServer) (string, sdk.Transport, error) {
	switch {
	case s.Stdio != nil:
		cmd := exec.Command(s.Stdio.Command, s.Stdio.Args...)
		cmd.Env = os.Environ()
		for _, e := range s.Stdio.Env {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
		cmd.Stderr = nil // the server's log is not the editor's protocol
		return s.Stdio.Name, &sdk.CommandTransport{Command: cmd}, nil
	case s.Http != nil:
		return s.Http.Name, &sdk.StreamableClientTransport{Endpoint: s.Http.Url, HTTPClient: headerClient(s.Http.Headers)}, nil
	case s.Sse != nil:
		return s.Sse.Name, nil, fmt.Errorf("MCP server %s: the SSE transport is not supported (stdio and HTTP are)", s.Sse.Name)
	}
	return "", nil, fmt.Errorf("an MCP server entry with no transport")
}

// connectMCP connects the editor's MCP servers for session s and lends
// their tools to it. A server that cannot be reached is reported on the
// editor's log and left out; the session goes on without it.
func (ag *acpAgent) connectMCP(ctx context.Context, s *acpSession, servers []acp.McpServer) {
	if len(servers) == 0 {
		return
	}
	var lent []*trellisv1.LentTool
	tools := map[string]acpMCPTool{}
	for _, srv := range servers {
		name, transport, err := mcpTransport(srv)
		if err != nil {
			fmt.Fprintf(ag.log, "trellis acp: %v\n", err)
			continue
		}
		c := sdk.NewClient(&sdk.Implementation{Name: "trellis-acp", Version: version.Server}, nil)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cs, err := c.Connect(cctx, transport, nil)
		cancel()
		if err != nil {
			fmt.Fprintf(ag.log, "trellis acp: MCP server %s: %v; its tools are not lent to session %s\n", name, err, s.id)
			continue
		}
		ag.mu.Lock()
		ag.mcpSessions = append(ag.mcpSessions, cs)
		ag.mu.Unlock()
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				fmt.Fprintf(ag.log, "trellis acp: MCP server %s: list tools: %v\n", name, err)
				break
			}
			lname := mcpToolName(name, t.Name)
			desc := t.Description
			if desc == "" {
				desc = t.Name
			}
			tag := "exec" // a tool that does not say it only reads may act
			if t.Annotations != nil && t.Annotations.ReadOnlyHint {
				tag = "read"
			}
			schema := &structpb.Struct{}
			if raw, err := json.Marshal(t.InputSchema); err == nil {
				if err := schema.UnmarshalJSON(raw); err != nil {
					schema = &structpb.Struct{}
				}
			}
			if len(schema.GetFields()) == 0 {
				schema, _ = structpb.NewStruct(map[string]any{"type": "object"})
			}
			lent = append(lent, &trellisv1.LentTool{Name: lname, Description: desc + " (MCP server " + name + ", run by the editor's agent)",
				InputSchema: schema, Permission: tag})
			tools[lname] = acpMCPTool{cs: cs, server: name, remote: t.Name}
		}
	}
	if len(lent) == 0 {
		return
	}
	id := s.id
	if _, err := ag.c.Calls().ToolRegister(ctx, &trellisv1.RegisterToolsRequest{SessionId: &id, Tools: lent}); err != nil {
		fmt.Fprintf(ag.log, "trellis acp: the editor's MCP servers' tools are not lent to session %s: %v\n", id, err)
		return
	}
	ag.mu.Lock()
	if ag.mcpTools == nil {
		ag.mcpTools = map[string]map[string]acpMCPTool{}
	}
	ag.mcpTools[id] = tools
	ag.mu.Unlock()
}

// mcpCall runs a call of a lent MCP tool on its server; ok is false when
// the name is not one.
func (ag *acpAgent) mcpCall(ctx context.Context, call client.ToolCall) (client.ToolReply, bool) {
	ag.mu.Lock()
	t, ok := ag.mcpTools[call.SessionID][call.Name]
	ag.mu.Unlock()
	if !ok {
		return client.ToolReply{}, false
	}
	var args map[string]any
	if len(call.Arguments) > 0 {
		if err := json.Unmarshal(call.Arguments, &args); err != nil {
			return failed("%s: arguments: %v", call.Name, err), true
		}
	}
	res, err := t.cs.CallTool(ctx, &sdk.CallToolParams{Name: t.remote, Arguments: args})
	if err != nil {
		return failed("MCP server %s: %s: %v", t.server, t.remote, err), true
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		} else if raw, err := json.Marshal(c); err == nil {
			b.Write(raw)
		}
	}
	return client.ToolReply{Output: b.String(), IsError: res.IsError}, true
}

// closeMCP ends the editor's MCP servers' sessions (their processes).
func (ag *acpAgent) closeMCP() {
	ag.mu.Lock()
	sessions := ag.mcpSessions
	ag.mcpSessions = nil
	ag.mu.Unlock()
	for _, cs := range sessions {
		cs.Close()
	}
}

// headerClient is an HTTP client that sends the editor's headers for an
// MCP server (an API key, say) with every request.
func headerClient(headers []acp.HttpHeader) *http.Client {
	if len(headers) == 0 {
		return nil
	}
	return &http.Client{Transport: headerTransport{headers: headers, next: http.DefaultTransport}}
}

type headerTransport struct {
	headers []acp.HttpHeader
	next    http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for _, kv := range h.headers {
		r.Header.Set(kv.Name, kv.Value)
	}
	return h.next.RoundTrip(r)
}
