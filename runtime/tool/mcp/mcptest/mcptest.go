// Package mcptest is a real MCP server built with the Go SDK for the tests
// of the MCP client: a test binary re-runs itself as the server (see
// MaybeServe), so the tests need no separate build.
package mcptest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// EnvServe is set (to a directory for marker files) when a test binary
// runs as the server.
const EnvServe = "TRELLIS_MCPTEST_SERVE"

// MaybeServe runs the server on stdin/stdout and exits when EnvServe is
// set; a TestMain calls it first.
func MaybeServe() {
	dir := os.Getenv(EnvServe)
	if dir == "" {
		return
	}
	if err := Serve(context.Background(), dir, &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Command returns the command and environment that run this test binary as
// the server, writing its marker files (pid, cancelled) under dir.
func Command(dir string) (command string, env map[string]string) {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return exe, map[string]string{EnvServe: dir}
}

type echoArgs struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

type hangArgs struct {
	Tag string `json:"tag,omitempty" jsonschema:"written to the started marker"`
}

// Serve runs the test server on t until the client goes away. Tools:
// echo (read-only), hang (blocks until cancelled; writes DIR/started and,
// when cancelled, DIR/cancelled), fail (an error result), add_tool (adds
// the tool "added", which makes the server send tools/list_changed).
func Serve(ctx context.Context, dir string, t sdk.Transport) error {
	_ = os.WriteFile(filepath.Join(dir, "pid"), []byte(fmt.Sprint(os.Getpid())), 0o600)
	fmt.Fprintln(os.Stderr, "mcptest server starting")
	return NewServer(dir).Run(ctx, t)
}

// NewServer returns the test server (see Serve) to run on any transport.
func NewServer(dir string) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "mcptest", Version: "1.0.0"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echo the text back.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *sdk.CallToolRequest, a echoArgs) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + a.Text}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "shout", Description: "Return the text in capitals (no read-only hint: it needs approval)."},
		func(_ context.Context, _ *sdk.CallToolRequest, a echoArgs) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.ToUpper(a.Text)}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "hang", Description: "Block until cancelled."},
		func(ctx context.Context, _ *sdk.CallToolRequest, a hangArgs) (*sdk.CallToolResult, any, error) {
			_ = os.WriteFile(filepath.Join(dir, "started"), []byte(a.Tag), 0o600)
			<-ctx.Done()
			_ = os.WriteFile(filepath.Join(dir, "cancelled"), []byte(a.Tag), 0o600)
			return nil, nil, ctx.Err()
		})
	sdk.AddTool(s, &sdk.Tool{Name: "fail", Description: "Always fails."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return nil, nil, fmt.Errorf("this tool always fails")
		})
	sdk.AddTool(s, &sdk.Tool{Name: "big", Description: "Return a large text."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("0123456789", 20_000)}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "add_tool", Description: "Add the tool named added."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			sdk.AddTool(s, &sdk.Tool{Name: "added", Description: "A tool added at run time.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
				func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
					return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "added says hi"}}}, nil, nil
				})
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "added"}}}, nil, nil
		})
	return s
}
