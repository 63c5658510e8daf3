package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/version"
)

func newMCPCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve the daemon's agents and sessions as MCP tools on stdio, for MCP hosts that launch servers",
		Long: `trellis mcp is an MCP server on standard input and output: the stdio form of the
daemon's MCP endpoint (/mcp). It starts the daemon when none runs, and serves the
daemon's tools (run_agent, prompt_session, list_sessions, list_agents) with their
progress notifications and cancellation. With $TRELLIS_KEY set, calls run as that
key's principal. An MCP host's configuration:

  {"mcpServers": {"trellis": {"command": "trellis", "args": ["mcp"]}}}`,
		Args: noArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.serveMCP(cmd.Context(), &mcp.StdioTransport{})
		},
	}
}

// bearer adds the daemon's token (or an API key) to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// serveMCP serves, on local, the tools of the daemon's MCP endpoint: each
// call is made upstream, its progress relayed, its cancellation passed on.
func (a *app) serveMCP(ctx context.Context, local mcp.Transport) error {
	info, err := a.ensureDaemon(ctx)
	if err != nil {
		return err
	}
	base, _, hc, err := client.BaseURLs(info)
	if err != nil {
		return err
	}
	token := info.Token
	if key := os.Getenv(keyEnv); key != "" {
		token = key
	}
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	r := &mcpRelay{calls: map[string]relayedCall{}}
	up := mcp.NewClient(&mcp.Implementation{Name: "trellis-mcp", Version: version.Server},
		&mcp.ClientOptions{ProgressNotificationHandler: r.progress})
	upstream, err := up.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token: token, next: next}}}, nil)
	if err != nil {
		return fmt.Errorf("connect to the daemon's MCP endpoint (%s/mcp): %w", base, err)
	}
	defer upstream.Close()
	tools, err := upstream.ListTools(ctx, nil)
	if err != nil {
		return fmt.Errorf("list the daemon's MCP tools: %w", err)
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "trellis", Title: "Trellis agent runtime", Version: version.Server}, nil)
	for _, tool := range tools.Tools {
		server.AddTool(tool, r.forward(upstream, tool.Name))
	}
	return server.Run(ctx, local)
}

// mcpRelay maps the progress tokens of calls made upstream back to the
// local calls they were made for.
type mcpRelay struct {
	next  atomic.Int64
	mu    sync.Mutex
	calls map[string]relayedCall // upstream progress token → the local call
}

type relayedCall struct {
	session *mcp.ServerSession
	token   any
}

func (r *mcpRelay) forward(upstream *mcp.ClientSession, name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		params := &mcp.CallToolParams{Name: name, Arguments: req.Params.Arguments}
		if token := req.Params.GetProgressToken(); token != nil {
			id := "relay-" + strconv.FormatInt(r.next.Add(1), 10)
			r.mu.Lock()
			r.calls[id] = relayedCall{session: req.Session, token: token}
			r.mu.Unlock()
			defer func() {
				r.mu.Lock()
				delete(r.calls, id)
				r.mu.Unlock()
			}()
			params.SetProgressToken(id)
		}
		// ctx ends when the host cancels the call: the upstream call is
		// cancelled with it, which interrupts the turn.
		return upstream.CallTool(ctx, params)
	}
}

func (r *mcpRelay) progress(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
	id, _ := req.Params.ProgressToken.(string)
	r.mu.Lock()
	call, ok := r.calls[id]
	r.mu.Unlock()
	if !ok {
		return
	}
	p := *req.Params
	p.ProgressToken = call.token
	_ = call.session.NotifyProgress(ctx, &p)
}
