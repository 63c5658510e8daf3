// Package mcptest is a real MCP server built with the Go SDK for the tests
// of the MCP client: a test binary re-runs itself as the server (see
// MaybeServe), so the tests need no separate build.
package mcptest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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

type peekArgs struct {
	Paths []string `json:"paths" jsonschema:"files to read"`
}

type hangArgs struct {
	Tag string `json:"tag,omitempty" jsonschema:"written to the started marker and naming the call's own markers"`
}

// callMarker writes, for one call of hang tagged tag, the marker
// DIR/KIND.TAG.N (N unique) holding the server's pid, so that servers
// sharing dir leave one file per call; nothing when tag is empty or not a
// plain file name.
func callMarker(dir, kind, tag string) {
	if tag == "" || filepath.Base(tag) != tag || strings.ContainsAny(tag, `/\*?[`) {
		return
	}
	// Written under a hidden name, then renamed: a marker is never seen
	// empty.
	f, err := os.CreateTemp(dir, "."+kind+"."+tag+".")
	if err != nil {
		return
	}
	fmt.Fprint(f, ID())
	f.Close()
	_ = os.Rename(f.Name(), filepath.Join(dir, filepath.Base(f.Name())[1:]))
}

// ID is how the server names itself in its markers and its pid file: its
// pid, or, as process 1 of a PID namespace of its own (a sandboxed server,
// which cannot know its pid outside), that namespace's inode number, which
// is larger than any pid; HostPid maps either to the pid the tests see.
func ID() int {
	if os.Getpid() == 1 {
		if link, err := os.Readlink("/proc/self/ns/pid"); err == nil {
			var ino int
			if _, err := fmt.Sscanf(link, "pid:[%d]", &ino); err == nil {
				return ino
			}
		}
	}
	return os.Getpid()
}

// HostPid returns the pid, in the caller's PID namespace, of the server
// whose ID is id (0 when no running process has it).
func HostPid(id int) int {
	if id < 1<<22 { // a pid (pid_max is at most 2^22)
		return id
	}
	want := fmt.Sprintf("pid:[%d]", id)
	entries, _ := os.ReadDir("/proc")
	best := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && link == want && (best == 0 || pid < best) {
			best = pid // the namespace's first process, its init
		}
	}
	return best
}

// Calls returns the IDs in the KIND.TAG.* markers under dir (kind is
// "started" or "cancelled"), one per call of hang tagged tag that a server
// writing there started or saw cancelled.
func Calls(dir, kind, tag string) []int {
	paths, _ := filepath.Glob(filepath.Join(dir, kind+"."+tag+".*"))
	var pids []int
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(string(b)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Serve runs the test server on t until the client goes away. Tools:
// echo (read-only), hang (blocks until cancelled; writes DIR/started and,
// when cancelled, DIR/cancelled; with a tag, also one marker per call, see
// Calls), fail (an error result), add_tool (adds
// the tool "added", which makes the server send tools/list_changed).
func Serve(ctx context.Context, dir string, t sdk.Transport) error {
	_ = os.WriteFile(filepath.Join(dir, "pid"), []byte(fmt.Sprint(ID())), 0o600)
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
			// The call's own marker first: a test that sees DIR/started or
			// DIR/cancelled finds the call's marker written too.
			callMarker(dir, "started", a.Tag)
			_ = os.WriteFile(filepath.Join(dir, "started"), []byte(a.Tag), 0o600)
			<-ctx.Done()
			callMarker(dir, "cancelled", a.Tag)
			_ = os.WriteFile(filepath.Join(dir, "cancelled"), []byte(a.Tag), 0o600)
			return nil, nil, ctx.Err()
		})
	sdk.AddTool(s, &sdk.Tool{Name: "peek", Description: "Report what the server can see: the files asked for, every process's command line, its environment.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *sdk.CallToolRequest, a peekArgs) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: peek(a.Paths)}}}, nil, nil
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

// peek reads paths and lists every visible process's command line and the
// server's environment, as a server trying to reach the daemon would.
func peek(paths []string) string {
	var b strings.Builder
	for _, p := range paths {
		if raw, err := os.ReadFile(p); err != nil {
			fmt.Fprintf(&b, "read %s: %v\n", p, err)
		} else {
			fmt.Fprintf(&b, "read %s: %q\n", p, raw)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	fmt.Fprintf(&b, "processes: %d\n", len(procs))
	for _, p := range procs {
		if raw, err := os.ReadFile(p); err == nil {
			fmt.Fprintf(&b, "%s: %s\n", p, strings.ReplaceAll(string(raw), "\x00", " "))
		}
	}
	fmt.Fprintf(&b, "environment: %s\n", strings.Join(os.Environ(), " "))
	return b.String()
}
