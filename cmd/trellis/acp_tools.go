package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/trellis-run/trellis/client"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
)

// The editor's file system and terminal: when the editor's initialize
// advertises fs.readTextFile, fs.writeTextFile or terminal, each session
// the editor creates or loads gets read_file, write_file or shell lent by
// this agent (tool.register with replace), and their calls run through the
// editor (fs/read_text_file sees its unsaved buffers, fs/write_text_file
// writes through it, terminal/create runs the command in its terminal).
// Paths stay inside the session's workdir, as the built-ins' do.

// acpShellTimeout bounds a delegated shell call when the model gives no
// timeoutSec (the built-in's default).
const acpShellTimeout = 120 * time.Second

// delegated names the built-ins the editor's capabilities serve.
func delegated(caps acp.ClientCapabilities) map[string]bool {
	return map[string]bool{"read_file": caps.Fs.ReadTextFile, "write_file": caps.Fs.WriteTextFile, "shell": caps.Terminal}
}

// lendTools lends the session the tools the editor serves; a failure is
// told to the editor's log (the daemon's own tools then run).
func (ag *acpAgent) lendTools(ctx context.Context, s *acpSession) {
	ag.mu.Lock()
	want := delegated(ag.caps)
	ag.mu.Unlock()
	if !want["read_file"] && !want["write_file"] && !want["shell"] {
		return
	}
	id := s.id
	list, err := ag.c.Calls().ToolList(ctx, &trellisv1.ListToolsRequest{SessionId: &id})
	if err != nil {
		fmt.Fprintf(ag.log, "trellis acp: the editor's file system and terminal are not used in session %s: %v\n", id, err)
		return
	}
	var tools []*trellisv1.LentTool
	for _, t := range list.GetTools() {
		if !want[t.GetName()] || t.GetSource() != "builtin" {
			continue
		}
		lt := &trellisv1.LentTool{Name: t.GetName(), Description: t.GetDescription() + " (Runs in the editor: it sees the editor's unsaved changes.)",
			InputSchema: t.GetInputSchema(), Permission: t.GetPermissionTag(), Replace: new(true)}
		if t.GetName() == "shell" {
			lt.TimeoutSec = new(int32(660)) // the built-in's longest timeoutSec, and a margin
		}
		tools = append(tools, lt)
	}
	if len(tools) == 0 {
		return
	}
	if _, err := ag.c.Calls().ToolRegister(ctx, &trellisv1.RegisterToolsRequest{SessionId: &id, Tools: tools}); err != nil {
		fmt.Fprintf(ag.log, "trellis acp: the editor's file system and terminal are not used in session %s: %v\n", id, err)
	}
}

// toolCall runs a call of a lent tool through the editor.
func (ag *acpAgent) toolCall(ctx context.Context, call client.ToolCall) client.ToolReply {
	if reply, ok := ag.mcpCall(ctx, call); ok {
		return reply
	}
	s, err := ag.session(acp.SessionId(call.SessionID))
	if err != nil {
		return client.ToolReply{Output: "the editor does not have session " + call.SessionID + " open", IsError: true}
	}
	var args struct {
		Path       string  `json:"path"`
		Offset     float64 `json:"offset"`
		Limit      float64 `json:"limit"`
		Content    string  `json:"content"`
		Command    string  `json:"command"`
		TimeoutSec float64 `json:"timeoutSec"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil {
		return failed("%s: arguments: %v", call.Name, err)
	}
	peer := ag.peer()
	sid := acp.SessionId(s.id)
	switch call.Name {
	case "read_file":
		path, err := inWorkdir(s.workdir, args.Path)
		if err != nil {
			return failed("read_file: %v", err)
		}
		req := acp.ReadTextFileRequest{SessionId: sid, Path: path}
		if args.Offset >= 1 {
			req.Line = new(int(args.Offset))
		}
		if args.Limit >= 1 {
			req.Limit = new(int(args.Limit))
		}
		res, err := peer.ReadTextFile(ctx, req)
		if err != nil {
			return failed("read_file %s: the editor answered: %v", args.Path, err)
		}
		return client.ToolReply{Output: res.Content}
	case "write_file":
		path, err := inWorkdir(s.workdir, args.Path)
		if err != nil {
			return failed("write_file: %v", err)
		}
		if _, err := peer.WriteTextFile(ctx, acp.WriteTextFileRequest{SessionId: sid, Path: path, Content: args.Content}); err != nil {
			return failed("write_file %s: the editor answered: %v", args.Path, err)
		}
		return client.ToolReply{Output: fmt.Sprintf("Wrote %d bytes to %s (through the editor).", len(args.Content), args.Path)}
	case "shell":
		return ag.terminal(ctx, sid, s.workdir, args.Command, args.TimeoutSec)
	}
	return failed("%s is not a tool this editor serves", call.Name)
}

// terminal runs command in the editor's terminal and returns its output
// and exit status; a command past its timeout is killed.
func (ag *acpAgent) terminal(ctx context.Context, sid acp.SessionId, workdir, command string, timeoutSec float64) client.ToolReply {
	peer := ag.peer()
	limit := 1 << 20
	term, err := peer.CreateTerminal(ctx, acp.CreateTerminalRequest{SessionId: sid, Command: "bash", Args: []string{"-c", command}, Cwd: &workdir, OutputByteLimit: &limit})
	if err != nil {
		return failed("shell: the editor could not start the command: %v", err)
	}
	ref := struct {
		sid acp.SessionId
		id  string
	}{sid, term.TerminalId}
	defer func() {
		_, _ = peer.ReleaseTerminal(context.WithoutCancel(ctx), acp.ReleaseTerminalRequest{SessionId: ref.sid, TerminalId: ref.id})
	}()
	timeout := acpShellTimeout
	if timeoutSec >= 1 {
		timeout = time.Duration(timeoutSec) * time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	exit, werr := peer.WaitForTerminalExit(wctx, acp.WaitForTerminalExitRequest{SessionId: sid, TerminalId: term.TerminalId})
	if werr != nil {
		_, _ = peer.KillTerminal(context.WithoutCancel(ctx), acp.KillTerminalRequest{SessionId: sid, TerminalId: term.TerminalId})
	}
	out, err := peer.TerminalOutput(context.WithoutCancel(ctx), acp.TerminalOutputRequest{SessionId: sid, TerminalId: term.TerminalId})
	if err != nil {
		return failed("shell: the editor did not give the command's output: %v", err)
	}
	text := out.Output
	if out.Truncated {
		text += "\n[the editor kept only the end of the output]"
	}
	switch {
	case werr != nil:
		return failed("%s\n[the command did not end within %s and was killed]", text, timeout)
	case exit.Signal != nil:
		return failed("%s\n[killed by signal %s]", text, *exit.Signal)
	case exit.ExitCode != nil && *exit.ExitCode != 0:
		return failed("%s\n[exit code %d]", text, *exit.ExitCode)
	}
	return client.ToolReply{Output: text}
}

// inWorkdir resolves a tool's path (relative to the workdir, or absolute
// inside it) to the absolute path the editor takes.
func inWorkdir(workdir, path string) (string, error) {
	if strings.TrimSpace(path) == "" {
		return "", fmt.Errorf("path is empty")
	}
	abs := path
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(workdir, abs)
	}
	abs = filepath.Clean(abs)
	rel, err := filepath.Rel(workdir, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("path %s is outside the session's workdir %s", path, workdir)
	}
	return abs, nil
}

func failed(format string, args ...any) client.ToolReply {
	return client.ToolReply{Output: fmt.Sprintf(format, args...), IsError: true}
}
