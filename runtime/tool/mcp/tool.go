package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/approval"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/tool"
)

// Prefix starts the name of every MCP tool: mcp__SERVER__TOOL.
const Prefix = "mcp__"

// maxToolName is the longest tool name the model APIs accept.
const maxToolName = 64

// ToolName is the name the model calls a server's tool by: remote names
// are kept to letters, digits, _ and -, and cut at 64 characters.
func ToolName(server, remote string) string {
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, remote)
	name := Prefix + server + "__" + clean
	if len(name) > maxToolName {
		name = name[:maxToolName]
	}
	return name
}

// mcpTool is one tool of a server, as the registry holds it.
type mcpTool struct {
	srv    *server
	name   string
	remote string
	desc   string
	tag    approval.Tag
	schema json.RawMessage
}

func newTool(s *server, t *sdk.Tool) *mcpTool {
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	if desc == "" && t.Annotations != nil {
		desc = t.Annotations.Title
	}
	if desc == "" {
		desc = t.Name
	}
	// The permission tag comes from the server's own annotation: a tool
	// that says it only reads is a read tool; anything else may act.
	tag := approval.TagExec
	if t.Annotations != nil && t.Annotations.ReadOnlyHint {
		tag = approval.TagRead
	}
	schema := json.RawMessage(`{"type":"object"}`)
	if t.InputSchema != nil {
		if b, err := json.Marshal(t.InputSchema); err == nil && len(b) > 2 && b[0] == '{' {
			schema = b
		}
	}
	return &mcpTool{srv: s, name: ToolName(s.name, t.Name), remote: t.Name,
		desc: desc + " (MCP server " + s.name + ")", tag: tag, schema: schema}
}

func (t *mcpTool) Name() string                  { return t.name }
func (t *mcpTool) Description() string           { return t.desc }
func (t *mcpTool) Tag() approval.Tag             { return t.tag }
func (t *mcpTool) InputSchema() json.RawMessage  { return t.schema }
func (t *mcpTool) Origin() (source, name string) { return "mcp", t.srv.name }

// State implements tool.Stater: a server that crashed keeps its tools
// listed, inactive with the reason, until it is ready again.
func (t *mcpTool) State() tool.State {
	st := t.srv.status()
	if st.State == StateReady {
		return tool.State{Active: true}
	}
	reason := fmt.Sprintf("MCP server %s is %s", t.srv.name, st.State)
	if st.Reason != "" {
		reason += ": " + st.Reason
	}
	return tool.State{Active: false, Reason: reason, Code: errcode.ToolInactive}
}

// Run implements tool.Tool: tools/call with the call's timeout; ctx's end
// (an interrupt) cancels the request on the server.
func (t *mcpTool) Run(ctx context.Context, call tool.Call) (tool.Result, error) {
	t.srv.mu.Lock()
	cs := t.srv.session
	t.srv.mu.Unlock()
	if cs == nil {
		return tool.Failed("MCP server %s is not connected (%s); try again when it is ready", t.srv.name, t.srv.status().State), nil
	}
	var args map[string]any
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return tool.Result{}, errs.New(errcode.InvalidParams, "arguments for %s are not a JSON object: %v", t.name, err)
	}
	timeout := t.srv.cfg.callTimeout()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: t.remote, Arguments: args})
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return tool.Failed("%s was interrupted (the MCP server was told to cancel the call)", t.name), nil
		case cctx.Err() != nil:
			return tool.Failed("%s did not answer within %v; the call was cancelled", t.name, timeout), nil
		case !isJSONRPCError(err):
			// Not the server's answer but the connection failing (a
			// crashed process, an HTTP server gone): the loop restarts it.
			_ = cs.Close()
			return tool.Failed("MCP server %s stopped during the call (%v); it is being restarted", t.srv.name, err), nil
		}
		return tool.Failed("%s failed: %v", t.name, err), nil
	}
	text := renderContent(res)
	capped, full := tool.CapOutput(text, "mcp", call.ID, call.OutputDir)
	out := tool.Result{OK: !res.IsError, Output: capped, FullOutput: full}
	if res.IsError {
		out.Error = firstLine(text)
		if out.Error == "" {
			out.Error = t.name + " reported an error"
		}
	}
	return out, nil
}

// isJSONRPCError reports whether err is the server's JSON-RPC error answer.
func isJSONRPCError(err error) bool {
	var je *jsonrpc.Error
	return errors.As(err, &je)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}

// renderContent turns a tool result into the text the model sees: text
// as is, other content described, structured content as JSON when there
// is no text.
func renderContent(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s %s]", c.Name, c.URI))
		case *sdk.EmbeddedResource:
			if c.Resource == nil {
				continue
			}
			if c.Resource.Text != "" {
				parts = append(parts, fmt.Sprintf("[resource %s]\n%s", c.Resource.URI, c.Resource.Text))
			} else {
				parts = append(parts, fmt.Sprintf("[resource %s %s, %d bytes]", c.Resource.URI, c.Resource.MIMEType, len(c.Resource.Blob)))
			}
		default:
			if b, err := json.Marshal(c); err == nil {
				parts = append(parts, string(b))
			}
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}
