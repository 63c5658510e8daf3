package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	acp "github.com/coder/acp-go-sdk"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/trellis-run/trellis/client"
	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/version"
)

func newACPCmd(a *app) *cobra.Command {
	var mode string
	cmd := &cobra.Command{
		Use:   "acp",
		Short: "Serve the daemon's agent to an editor over the Agent Client Protocol (ACP) on stdio",
		Long: `trellis acp is an Agent Client Protocol agent (protocol version 1) on standard
input and output, for editors that launch agents (Zed, JetBrains IDEs, Neovim
plugins). It starts the daemon when none runs; every ACP session is a daemon
session in the editor's working directory, so it also shows in trellis sessions
and the web UI. Prompts stream the turn's text, reasoning, tool calls and diffs;
tool calls that need approval are asked in the editor; session/load replays a
stored session. With $TRELLIS_KEY set, it acts as that key's principal. Zed's
settings:

  {"agent_servers": {"Trellis": {"command": "trellis", "args": ["acp"]}}}`,
		Args: noArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains(permissionModes, mode) {
				return usageError{fmt.Errorf("--permission-mode %q: want plan, accept or auto", mode)}
			}
			return a.serveACP(cmd.Context(), mode, a.stdin, a.stdout)
		},
	}
	cmd.Flags().StringVar(&mode, "permission-mode", "accept", "what the sessions the editor creates ask about: plan, accept or auto (the editor's mode picker changes it per session)")
	return cmd
}

// serveACP serves the ACP agent on in and out until the editor closes the
// connection.
func (a *app) serveACP(ctx context.Context, mode string, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ag := &acpAgent{ctx: ctx, mode: mode, log: a.stderr, sessions: map[string]*acpSession{}, ready: make(chan struct{})}
	c, err := a.connect(ctx, client.Options{Approve: ag.approve, ToolCall: ag.toolCall})
	if err != nil {
		return err
	}
	defer c.Close()
	defer ag.closeMCP()
	ag.c = c
	ag.conn = acp.NewAgentSideConnection(ag, out, in)
	ag.conn.SetLogger(slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	close(ag.ready)
	select {
	case <-ag.conn.Done():
	case <-ctx.Done():
	}
	return nil
}

// acpAgent is the ACP agent: each method maps an editor's request to the
// daemon's protocol; each session's events go to the editor from one
// goroutine (follow).
type acpAgent struct {
	ctx  context.Context // the command's life
	mode string          // of new sessions
	log  io.Writer       // the editor's log of the agent (stderr)
	c    *client.Client

	conn  *acp.AgentSideConnection
	ready chan struct{} // closed once conn is set

	mu       sync.Mutex
	sessions map[string]*acpSession
	// caps are the editor's capabilities (initialize): its file system
	// and terminal serve the sessions' file and shell tools (acp_tools.go).
	caps acp.ClientCapabilities
	// The editor's MCP servers (acp_mcp.go): their sessions, and each
	// session's lent tools by name.
	mcpSessions []*sdk.ClientSession
	mcpTools    map[string]map[string]acpMCPTool
}

var (
	_ acp.Agent       = (*acpAgent)(nil)
	_ acp.AgentLoader = (*acpAgent)(nil)
)

// peer is the editor's side of the connection.
func (ag *acpAgent) peer() *acp.AgentSideConnection {
	<-ag.ready
	return ag.conn
}

// acpSession is a daemon session the editor created or loaded.
type acpSession struct {
	id      string
	workdir string
	sub     *client.Subscription

	// mu orders what goes to the editor: the session's events (follow),
	// a replay (session/load) and the tool calls announced by approval
	// requests.
	mu   sync.Mutex
	tr   *acpTranslator
	sent int64 // the last seq sent to the editor
	// advanced is closed, and replaced, each time follow sends an event.
	advanced chan struct{}
	// echoes counts the prompts sent from the editor whose message.user
	// has not come back: the editor shows them already (a replay sends
	// them all).
	echoes map[string]int

	turnMu sync.Mutex
	turns  map[string]chan string // turn id → its turn.done reason, by whoever comes first
	dead   chan struct{}          // closed when the subscription ended
	err    error                  // why, set before dead closes
}

// waitSent waits until follow has sent the editor the events up to seq
// upto, the subscription ended or ctx ended.
func (s *acpSession) waitSent(ctx context.Context, upto int64) {
	for {
		s.mu.Lock()
		sent, advanced := s.sent, s.advanced
		s.mu.Unlock()
		if sent >= upto {
			return
		}
		select {
		case <-advanced:
		case <-s.dead:
			return
		case <-ctx.Done():
			return
		}
	}
}

// echo counts a prompt sent from the editor (n = 1), or one that failed
// (n = -1).
func (s *acpSession) echo(text string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.countEcho(text, n)
}

// countEcho adds n to the prompts of text waiting for their message.user.
// s.mu is held.
func (s *acpSession) countEcho(text string, n int) {
	if s.echoes[text] += n; s.echoes[text] <= 0 {
		delete(s.echoes, text)
	}
}

// turn returns the channel that receives turn turnID's turn.done reason.
func (s *acpSession) turn(turnID string) chan string {
	s.turnMu.Lock()
	defer s.turnMu.Unlock()
	ch, ok := s.turns[turnID]
	if !ok {
		ch = make(chan string, 1)
		s.turns[turnID] = ch
	}
	return ch
}

func (s *acpSession) forgetTurn(turnID string) {
	s.turnMu.Lock()
	delete(s.turns, turnID)
	s.turnMu.Unlock()
}

// Initialize answers the editor's initialize: protocol version 1, text
// prompts, session/load.
func (ag *acpAgent) Initialize(_ context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	ag.mu.Lock()
	ag.caps = p.ClientCapabilities
	ag.mu.Unlock()
	return acp.InitializeResponse{
		ProtocolVersion: acp.ProtocolVersionNumber,
		AgentCapabilities: acp.AgentCapabilities{
			LoadSession: true,
			// Text and resource links only (the baseline): no images,
			// audio or embedded resources.
			PromptCapabilities: acp.PromptCapabilities{},
			// The editor's MCP servers are not connected (the daemon
			// has no per-session MCP servers): no transport beyond the
			// baseline is advertised.
			McpCapabilities: acp.McpCapabilities{},
			// session/resume: follow a session the editor already shows,
			// replaying nothing.
			SessionCapabilities: acp.SessionCapabilities{Resume: &acp.SessionResumeCapabilities{}},
		},
		AgentInfo:   &acp.Implementation{Name: "trellis", Title: acp.Ptr("Trellis"), Version: version.Server},
		AuthMethods: []acp.AuthMethod{},
	}, nil
}

// Authenticate has nothing to do: the daemon's token (or $TRELLIS_KEY)
// authenticates the agent, and no method is advertised.
func (ag *acpAgent) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

// NewSession creates a daemon session in the editor's working directory.
func (ag *acpAgent) NewSession(ctx context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	if !filepath.IsAbs(p.Cwd) {
		return acp.NewSessionResponse{}, acp.NewInvalidParams(map[string]any{"error": fmt.Sprintf("cwd %q is not an absolute path", p.Cwd)})
	}
	sub, err := ag.c.CreateSession(ctx, client.CreateSessionParams{Workdir: p.Cwd, Mode: ag.mode})
	if err != nil {
		return acp.NewSessionResponse{}, acpError(err)
	}
	s := ag.addSession(sub.SessionID(), p.Cwd, sub)
	s.mu.Unlock()
	ag.lendTools(ctx, s)
	ag.connectMCP(ctx, s, p.McpServers)
	return acp.NewSessionResponse{SessionId: acp.SessionId(s.id), Modes: modeState(ag.mode)}, nil
}

// addSession registers a session and starts sending its events to the
// editor. It returns the session locked, so that a replay goes first.
func (ag *acpAgent) addSession(id, workdir string, sub *client.Subscription) *acpSession {
	s := &acpSession{id: id, workdir: workdir, sub: sub, tr: newACPTranslator(workdir),
		echoes: map[string]int{}, turns: map[string]chan string{}, dead: make(chan struct{}), advanced: make(chan struct{})}
	s.mu.Lock()
	ag.mu.Lock()
	ag.sessions[id] = s
	ag.mu.Unlock()
	go ag.follow(s)
	return s
}

func (ag *acpAgent) session(id acp.SessionId) (*acpSession, error) {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	s, ok := ag.sessions[string(id)]
	if !ok {
		return nil, acp.NewInvalidParams(map[string]any{"error": fmt.Sprintf("session %s was not created or loaded on this connection (session/new, session/load)", id)})
	}
	return s, nil
}

// follow sends the session's events to the editor, each once, and hands
// each turn.done to the prompt waiting for it.
func (ag *acpAgent) follow(s *acpSession) {
	for {
		ev, err := s.sub.Next(ag.ctx)
		if err != nil {
			s.err = err
			close(s.dead)
			return
		}
		s.mu.Lock()
		if ev.Kind == eventkind.MessageUser && ev.Seq > s.sent && s.echoes[ev.Text()] > 0 {
			s.countEcho(ev.Text(), -1)
			s.sent = ev.Seq
		}
		if ev.Seq > s.sent || ev.Retracted {
			ag.send(s.id, s.tr.updates(ev))
			s.sent = ev.Seq
			if ev.Retracted {
				// The log's events from this seq on replace the
				// ones received from memory: they come next.
				s.sent = ev.Seq - 1
			}
		}
		close(s.advanced)
		s.advanced = make(chan struct{})
		s.mu.Unlock()
		if ev.Kind == eventkind.TurnDone {
			var done events.TurnDoneEvent
			if ev.Decode(&done) == nil {
				select {
				case s.turn(done.TurnID) <- done.Reason:
				default:
				}
			}
		}
	}
}

// send sends updates to the editor as session/update notifications.
func (ag *acpAgent) send(sessionID string, updates []acp.SessionUpdate) {
	for _, u := range updates {
		err := ag.peer().SessionUpdate(ag.ctx, acp.SessionNotification{SessionId: acp.SessionId(sessionID), Update: u})
		if err != nil && ag.ctx.Err() == nil {
			fmt.Fprintf(ag.log, "trellis acp: session/update of %s: %v\n", sessionID, err)
		}
	}
}

// LoadSession replays a stored session to the editor, then follows it.
func (ag *acpAgent) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	id := string(p.SessionId)
	ag.mu.Lock()
	s, known := ag.sessions[id]
	ag.mu.Unlock()
	if known {
		s.mu.Lock()
	} else {
		summary, err := ag.c.Session(ctx, id)
		if err != nil {
			return acp.LoadSessionResponse{}, acpError(err)
		}
		// Subscribed from the latest stored event on: the replay
		// below sends everything up to it (and beyond), follow the
		// rest, and the seqs sent keep each event to one of the two.
		sub, err := ag.c.Subscription(ctx, id)
		if err != nil {
			return acp.LoadSessionResponse{}, acpError(err)
		}
		s = ag.addSession(id, summary.Workdir, sub)
		defer ag.connectMCP(ctx, s, p.McpServers)
		defer ag.lendTools(ctx, s) // once the replay is sent
	}
	defer s.mu.Unlock()
	mode, err := ag.replay(ctx, s, !known)
	if err != nil {
		return acp.LoadSessionResponse{}, acpError(err)
	}
	return acp.LoadSessionResponse{Modes: modeState(mode)}, nil
}

// ResumeSession follows a session whose conversation the editor already
// shows (session/resume): nothing is replayed; the events stored after the
// call streams as session/update, each once.
func (ag *acpAgent) ResumeSession(ctx context.Context, p acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	id := string(p.SessionId)
	ag.mu.Lock()
	_, known := ag.sessions[id]
	ag.mu.Unlock()
	if !known {
		// Subscribed first, then the stored seq read: what the
		// subscription holds up to that seq was stored before the call,
		// so it is not sent, and nothing after it is missed.
		sub, err := ag.c.Subscription(ctx, id)
		if err != nil {
			return acp.ResumeSessionResponse{}, acpError(err)
		}
		summary, err := ag.c.Session(ctx, id)
		if err != nil {
			sub.Close()
			return acp.ResumeSessionResponse{}, acpError(err)
		}
		s := ag.addSession(id, summary.Workdir, sub)
		s.sent = summary.Seq
		s.mu.Unlock()
		ag.lendTools(ctx, s)
		ag.connectMCP(ctx, s, p.McpServers)
	}
	summary, err := ag.c.Session(ctx, id)
	if err != nil {
		return acp.ResumeSessionResponse{}, acpError(err)
	}
	return acp.ResumeSessionResponse{Modes: modeState(summary.Mode)}, nil
}

// replay sends the session's stored events to the editor, and returns the
// session's mode. s.mu is held. fresh: the session was not followed
// before, so its translator learns the replayed tool calls (a turn under
// way goes on live).
func (ag *acpAgent) replay(ctx context.Context, s *acpSession, fresh bool) (string, error) {
	tr := newACPTranslator(s.workdir)
	if fresh {
		tr = s.tr
	}
	var mode string
	for after := int64(0); ; {
		var page struct {
			Mode   string            `json:"mode"`
			Events []json.RawMessage `json:"events"`
			More   bool              `json:"more"`
		}
		if err := ag.c.Call(ctx, "session.resume", map[string]any{"sessionId": s.id, "afterSeq": after}, &page); err != nil {
			return "", err
		}
		mode = page.Mode
		for _, raw := range page.Events {
			var ev client.Event
			if err := json.Unmarshal(raw, &ev); err != nil {
				return "", fmt.Errorf("session.resume: %w", err)
			}
			ag.send(s.id, tr.updates(ev))
			after = ev.Seq
			s.sent = max(s.sent, ev.Seq)
		}
		if !page.More || len(page.Events) == 0 {
			return mode, nil
		}
	}
}

// Prompt runs a turn and answers when it ended; its events reach the
// editor through follow.
func (ag *acpAgent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	s, err := ag.session(p.SessionId)
	if err != nil {
		return acp.PromptResponse{}, err
	}
	text, err := promptText(p.Prompt)
	if err != nil {
		return acp.PromptResponse{}, err
	}
	s.echo(text, 1)
	turnID, err := ag.c.Prompt(ctx, s.id, text)
	if err != nil {
		s.echo(text, -1)
		return acp.PromptResponse{}, acpError(err)
	}
	done := s.turn(turnID)
	defer s.forgetTurn(turnID)
	select {
	case reason := <-done:
		return acp.PromptResponse{StopReason: stopReason(reason)}, nil
	case <-s.dead:
		return acp.PromptResponse{}, acpError(s.err)
	case <-ctx.Done():
	}
	// session/cancel (or the editor cancelled the request): interrupt the
	// turn, and answer once it ended, after its last events.
	if err := ag.c.Interrupt(ag.ctx, s.id); err != nil {
		fmt.Fprintf(ag.log, "trellis acp: interrupt %s: %v\n", s.id, err)
	}
	select {
	case reason := <-done:
		return acp.PromptResponse{StopReason: stopReason(reason)}, nil
	case <-s.dead:
		return acp.PromptResponse{}, acpError(s.err)
	}
}

// promptText is the text of a prompt: its text blocks, and the resources it
// links to by their URI.
func promptText(blocks []acp.ContentBlock) (string, error) {
	var parts []string
	for _, b := range blocks {
		switch {
		case b.Text != nil:
			parts = append(parts, b.Text.Text)
		case b.ResourceLink != nil:
			parts = append(parts, b.ResourceLink.Uri)
		default:
			return "", acp.NewInvalidParams(map[string]any{"error": "this agent takes text and resource links only (promptCapabilities)"})
		}
	}
	text := strings.Join(parts, "\n")
	if strings.TrimSpace(text) == "" {
		return "", acp.NewInvalidParams(map[string]any{"error": "the prompt is empty"})
	}
	return text, nil
}

// stopReason maps a turn.done reason to ACP's.
func stopReason(reason string) acp.StopReason {
	switch reason {
	case events.TurnDoneReasonInterrupted:
		return acp.StopReasonCancelled
	case events.TurnDoneReasonBudget:
		return acp.StopReasonMaxTurnRequests
	}
	// complete; denied (the person's denials ended it, as they were
	// shown); error (its error event went to the editor as text).
	return acp.StopReasonEndTurn
}

// Cancel interrupts the session's turn (the Prompt waiting for it answers
// cancelled once it ended).
func (ag *acpAgent) Cancel(ctx context.Context, p acp.CancelNotification) error {
	s, err := ag.session(p.SessionId)
	if err != nil {
		return err
	}
	return acpError(ag.c.Interrupt(ctx, s.id))
}

// SetSessionMode changes the session's mode (session.setMode).
func (ag *acpAgent) SetSessionMode(ctx context.Context, p acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	s, err := ag.session(p.SessionId)
	if err != nil {
		return acp.SetSessionModeResponse{}, err
	}
	err = ag.c.Call(ctx, "session.setMode", map[string]any{"sessionId": s.id, "mode": string(p.ModeId)}, nil)
	return acp.SetSessionModeResponse{}, acpError(err)
}

// The session methods that are not advertised (sessionCapabilities).

func (ag *acpAgent) ListSessions(context.Context, acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	return acp.ListSessionsResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionList)
}

func (ag *acpAgent) CloseSession(context.Context, acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	return acp.CloseSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionClose)
}

func (ag *acpAgent) SetSessionConfigOption(context.Context, acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return acp.SetSessionConfigOptionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionSetConfigOption)
}

// The ACP permission options of an approval request.
const (
	acpAllowOnce   = "allow-once"
	acpAllowAlways = "allow-always"
	acpReject      = "reject"
)

// approve asks the editor about a tool call (session/request_permission),
// after announcing the call.
func (ag *acpAgent) approve(ctx context.Context, req client.ApprovalRequest) client.ApprovalAnswer {
	ag.mu.Lock()
	s, ok := ag.sessions[req.SessionID]
	ag.mu.Unlock()
	if !ok {
		return client.ApprovalAnswer{Decision: "deny", Reason: "the editor did not open this session"}
	}
	// The request came after its turn's events: the editor sees them
	// first (the write before the command that asks).
	s.waitSent(ctx, s.sub.Received())
	s.mu.Lock()
	announce, call := s.tr.pending(req)
	ag.send(s.id, announce)
	s.mu.Unlock()
	options := []acp.PermissionOption{{OptionId: acpAllowOnce, Name: "Allow once", Kind: acp.PermissionOptionKindAllowOnce}}
	if pattern := cmp.Or(req.Pattern, req.ScopeHint); pattern != "" {
		options = append(options, acp.PermissionOption{OptionId: acpAllowAlways, Name: "Always allow " + pattern + " in this project", Kind: acp.PermissionOptionKindAllowAlways})
	}
	options = append(options, acp.PermissionOption{OptionId: acpReject, Name: "Reject", Kind: acp.PermissionOptionKindRejectOnce})
	resp, err := ag.peer().RequestPermission(ctx, acp.RequestPermissionRequest{SessionId: acp.SessionId(s.id), ToolCall: call, Options: options})
	switch {
	case err != nil:
		return client.ApprovalAnswer{Decision: "deny", Reason: "the editor did not answer: " + err.Error()}
	case resp.Outcome.Selected == nil:
		return client.ApprovalAnswer{Decision: "deny", Reason: "the prompt was cancelled in the editor"}
	}
	switch resp.Outcome.Selected.OptionId {
	case acpAllowOnce:
		return client.ApprovalAnswer{Decision: "allow", Scope: "once"}
	case acpAllowAlways:
		return client.ApprovalAnswer{Decision: "allow", Scope: "project"}
	}
	return client.ApprovalAnswer{Decision: "deny", Reason: "rejected in the editor"}
}

// modeState is the session/new and session/load answer's modes.
func modeState(current string) *acp.SessionModeState {
	return &acp.SessionModeState{CurrentModeId: acp.SessionModeId(current), AvailableModes: []acp.SessionMode{
		{Id: "plan", Name: "Plan", Description: acp.Ptr("Reads files and the network; asks before commands; refuses file writes")},
		{Id: "accept", Name: "Accept edits", Description: acp.Ptr("Reads and writes files; asks before commands, network and configuration")},
		{Id: "auto", Name: "Auto", Description: acp.Ptr("Does everything without asking, except configuration changes")},
	}}
}

// acpResourceNotFound is ACP's error code of an unknown resource (a session).
const acpResourceNotFound = -32002

// acpError maps a daemon's error to an ACP request error: the daemon's
// invalid_params and not_found stay the editor's mistakes, anything else
// is an internal error with the daemon's message.
func acpError(err error) error {
	if err == nil {
		return nil
	}
	data := map[string]any{"error": err.Error()}
	if code := client.CodeOf(err); code != "" {
		data["code"] = code
	}
	switch client.CodeOf(err) {
	case errcode.InvalidParams:
		return acp.NewInvalidParams(data)
	case errcode.NotFound:
		return &acp.RequestError{Code: acpResourceNotFound, Message: "Resource not found", Data: data}
	}
	var re *acp.RequestError
	if errors.As(err, &re) {
		return re
	}
	return acp.NewInternalError(data)
}
