package mcpserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/trellis-run/trellis/facade/rest"
	trellisv1 "github.com/trellis-run/trellis/proto/trellis/v1"
	"github.com/trellis-run/trellis/protocol/grpcerr"
)

// Path is where the facade serves the MCP endpoint.
const Path = "/mcp"

// interruptTimeout bounds the session.interrupt a cancelled call sends.
const interruptTimeout = 10 * time.Second

// Options are what the MCP endpoint needs from the facade.
type Options struct {
	// Conn reaches the runtime's gRPC services.
	Conn grpc.ClientConnInterface
	// Token is the daemon's token; a request bearing it, or an API key,
	// is served (as REST is).
	Token string
	// Version is the daemon's version, told to MCP clients.
	Version string
	Log     *slog.Logger
}

// Handler returns the MCP endpoint: streamable HTTP behind a bearer check
// (the daemon token or an API key). An MCP session stays with the caller
// that opened it.
func Handler(o Options) http.Handler {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	t := &tools{
		sessions: trellisv1.NewSessionServiceClient(o.Conn),
		agents:   trellisv1.NewAgentServiceClient(o.Conn),
		errs:     &grpcerr.Mapper{Log: o.Log},
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "trellis", Title: "Trellis agent runtime", Version: o.Version},
		&mcp.ServerOptions{Instructions: "Run Trellis agents on tasks (run_agent), prompt sessions (prompt_session), " +
			"and list agents and sessions. A running turn reports its events as progress; cancelling the call interrupts it."})
	t.register(server)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Logger: o.Log})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		return verifyBearer(o.Token, token)
	}
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
}

// verifyBearer accepts the daemon token, and an API key by its form: the
// runtime authenticates the key on every call made on its behalf. The
// UserID binds an MCP session to its caller (a hash: never the secret).
func verifyBearer(daemonToken, token string) (*auth.TokenInfo, error) {
	switch {
	case daemonToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(daemonToken)) == 1:
		return &auth.TokenInfo{UserID: "daemon"}, nil
	case strings.HasPrefix(token, rest.KeyPrefix):
		sum := sha256.Sum256([]byte(token))
		return &auth.TokenInfo{UserID: "key:" + hex.EncodeToString(sum[:8]), Extra: map[string]any{"key": token}}, nil
	}
	return nil, fmt.Errorf("%w: send Authorization: Bearer <the daemon's token or an API key>", auth.ErrInvalidToken)
}

// callerContext is the context of a runtime call made for the MCP request:
// on behalf of its API key, when it came with one.
func callerContext(ctx context.Context, extra *mcp.RequestExtra) context.Context {
	if extra == nil || extra.TokenInfo == nil {
		return ctx
	}
	if key, ok := extra.TokenInfo.Extra["key"].(string); ok && key != "" {
		return metadata.AppendToOutgoingContext(ctx, rest.MDOnBehalfOf, key)
	}
	return ctx
}

// tools are the MCP tools, over the runtime's services.
type tools struct {
	sessions trellisv1.SessionServiceClient
	agents   trellisv1.AgentServiceClient
	errs     *grpcerr.Mapper
}

// RunAgentIn are run_agent's arguments.
type RunAgentIn struct {
	Task    string `json:"task" jsonschema:"what the agent is to do"`
	Workdir string `json:"workdir" jsonschema:"absolute path of the directory the agent works in"`
	Agent   string `json:"agent,omitempty" jsonschema:"name of an agent definition (list_agents); empty: the default agent"`
	Mode    string `json:"mode,omitempty" jsonschema:"permission mode of the agent's session: plan, accept or auto (default: the daemon's)"`
	Model   string `json:"model,omitempty" jsonschema:"vendor:model to use instead of the agent's"`
}

// PromptSessionIn are prompt_session's arguments.
type PromptSessionIn struct {
	SessionID string `json:"sessionId" jsonschema:"the session to prompt (list_sessions)"`
	Text      string `json:"text" jsonschema:"the prompt"`
}

// TurnOut is what a turn came to.
type TurnOut struct {
	SessionID string `json:"sessionId"`
	TurnID    string `json:"turnId"`
	// Reason is turn.done's: complete, interrupted, error, denied or budget.
	Reason string `json:"reason"`
	// Text is the turn's last answer (message.done), "" when it gave none.
	Text string `json:"text"`
	// Errors are the messages of the turn's error events.
	Errors []string `json:"errors,omitempty"`
}

// ListSessionsIn are list_sessions' arguments.
type ListSessionsIn struct {
	Workdir string `json:"workdir,omitempty" jsonschema:"only the sessions of this directory"`
}

// SessionOut is one session of list_sessions.
type SessionOut struct {
	SessionID string `json:"sessionId"`
	Title     string `json:"title,omitempty"`
	Workdir   string `json:"workdir"`
	Mode      string `json:"mode"`
	Status    string `json:"status"`
	Agent     string `json:"agent,omitempty"`
	// LastActivityAt is RFC 3339, "" before the first turn.
	LastActivityAt string `json:"lastActivityAt,omitempty"`
}

// ListSessionsOut is list_sessions' result.
type ListSessionsOut struct {
	Sessions []SessionOut `json:"sessions"`
}

// AgentOut is one agent definition of list_agents.
type AgentOut struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// ListAgentsOut is list_agents' result.
type ListAgentsOut struct {
	Agents []AgentOut `json:"agents"`
}

func (t *tools) register(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "run_agent", Title: "Run an agent on a task",
		Description: "Starts a session in workdir with the named agent (or the default one), gives it the task and waits " +
			"for the turn's end; answers with the agent's last message. Each event of the turn is reported as progress; " +
			"cancelling the call interrupts the turn. Tool calls that need approval wait for the session's approvers."},
		t.runAgent)
	mcp.AddTool(s, &mcp.Tool{Name: "prompt_session", Title: "Prompt a session",
		Description: "Sends text to an existing session (queued behind a running turn) and waits for that turn's end; " +
			"answers with its last message. Each event of the turn is reported as progress; cancelling the call interrupts the turn."},
		t.promptSession)
	mcp.AddTool(s, &mcp.Tool{Name: "list_sessions", Title: "List sessions",
		Description: "The daemon's sessions the caller may read, with their status and last activity.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		t.listSessions)
	mcp.AddTool(s, &mcp.Tool{Name: "list_agents", Title: "List agents",
		Description: "The named agent definitions run_agent can run.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		t.listAgents)
}

func (t *tools) runAgent(ctx context.Context, req *mcp.CallToolRequest, in RunAgentIn) (*mcp.CallToolResult, TurnOut, error) {
	if strings.TrimSpace(in.Task) == "" {
		return nil, TurnOut{}, errors.New("run_agent needs a task: the text the agent is to work on")
	}
	if !filepath.IsAbs(in.Workdir) {
		return nil, TurnOut{}, fmt.Errorf("run_agent needs workdir, an absolute path (got %q)", in.Workdir)
	}
	cctx := callerContext(ctx, req.Extra)
	create := &trellisv1.CreateSessionRequest{Workdir: in.Workdir}
	if in.Agent != "" {
		create.Agent = &in.Agent
	}
	if in.Mode != "" {
		create.Mode = &in.Mode
	}
	if in.Model != "" {
		create.Model = &in.Model
	}
	created, err := t.sessions.CreateSession(cctx, create)
	if err != nil {
		return nil, TurnOut{}, t.callError(ctx, "session.create", err)
	}
	return t.turn(ctx, req, created.GetSessionId(), in.Task)
}

func (t *tools) promptSession(ctx context.Context, req *mcp.CallToolRequest, in PromptSessionIn) (*mcp.CallToolResult, TurnOut, error) {
	if in.SessionID == "" || strings.TrimSpace(in.Text) == "" {
		return nil, TurnOut{}, errors.New("prompt_session needs sessionId (see list_sessions) and text")
	}
	return t.turn(ctx, req, in.SessionID, in.Text)
}

// turn prompts the session and follows its events to the turn's end.
func (t *tools) turn(ctx context.Context, req *mcp.CallToolRequest, sessionID, text string) (*mcp.CallToolResult, TurnOut, error) {
	cctx := callerContext(ctx, req.Extra)
	// Subscribed before the prompt: every event of the turn is stored
	// after the replay this stream starts with.
	sctx, cancel := context.WithCancel(cctx)
	defer cancel()
	stream, err := t.sessions.Subscribe(sctx, &trellisv1.SubscribeRequest{SessionId: sessionID, Typed: true})
	if err != nil {
		return nil, TurnOut{}, t.callError(ctx, "session events", err)
	}
	prompted, err := t.sessions.Prompt(cctx, &trellisv1.PromptRequest{SessionId: sessionID, Text: text})
	if err != nil {
		return nil, TurnOut{}, t.callError(ctx, "session.prompt", err)
	}
	out := TurnOut{SessionID: sessionID, TurnID: prompted.GetTurnId()}
	p := progress{req: req}
	running := false // between the turn's turn.started and its turn.done
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				t.interrupt(ctx, req, sessionID, out.TurnID)
				return nil, TurnOut{}, fmt.Errorf("cancelled: turn %s of session %s was interrupted", out.TurnID, sessionID)
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("the session's event stream ended before the turn did")
			}
			return nil, TurnOut{}, t.callError(ctx, "session events", err)
		}
		ev := resp.GetEvent()
		if ev == nil {
			continue
		}
		switch {
		case ev.GetTurnStarted() != nil:
			running = ev.GetTurnStarted().GetTurnId() == out.TurnID
		case ev.GetTurnDone() != nil && ev.GetTurnDone().GetTurnId() == out.TurnID:
			out.Reason = ev.GetTurnDone().GetReason()
			p.report(ctx, "turn.done: "+out.Reason)
			return turnResult(out), out, nil
		}
		if !running {
			continue
		}
		switch {
		case ev.GetMessageDone() != nil:
			out.Text = ev.GetMessageDone().GetText()
		case ev.GetError() != nil:
			out.Errors = append(out.Errors, ev.GetError().GetCode()+": "+ev.GetError().GetMessage())
		}
		p.report(ctx, describe(ev))
	}
}

// turnResult is a finished turn as a tool result: its answer as text, an
// error result when the turn did not complete.
func turnResult(out TurnOut) *mcp.CallToolResult {
	text := out.Text
	if out.Reason != "complete" {
		text = fmt.Sprintf("the turn ended %s", out.Reason)
		if len(out.Errors) > 0 {
			text += ": " + strings.Join(out.Errors, "; ")
		}
		if out.Text != "" {
			text += "\n\n" + out.Text
		}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: out.Reason != "complete"}
}

// interrupt stops the turn of a cancelled call.
func (t *tools) interrupt(ctx context.Context, req *mcp.CallToolRequest, sessionID, turnID string) {
	ictx, cancel := context.WithTimeout(callerContext(context.WithoutCancel(ctx), req.Extra), interruptTimeout)
	defer cancel()
	if _, err := t.sessions.Interrupt(ictx, &trellisv1.InterruptRequest{SessionId: sessionID}); err != nil {
		t.errs.Log.Warn("mcp: a cancelled call's turn could not be interrupted", "sessionId", sessionID, "turnId", turnID, "err", err)
	}
}

func (t *tools) listSessions(ctx context.Context, req *mcp.CallToolRequest, in ListSessionsIn) (*mcp.CallToolResult, ListSessionsOut, error) {
	list := &trellisv1.ListSessionsRequest{}
	if in.Workdir != "" {
		list.Workdir = &in.Workdir
	}
	resp, err := t.sessions.ListSessions(callerContext(ctx, req.Extra), list)
	if err != nil {
		return nil, ListSessionsOut{}, t.callError(ctx, "session.list", err)
	}
	out := ListSessionsOut{Sessions: []SessionOut{}}
	for _, s := range resp.GetSessions() {
		out.Sessions = append(out.Sessions, SessionOut{SessionID: s.GetSessionId(), Title: s.GetTitle(), Workdir: s.GetWorkdir(),
			Mode: s.GetMode(), Status: s.GetStatus(), Agent: s.GetAgent(), LastActivityAt: s.GetLastActivityAt()})
	}
	return nil, out, nil
}

func (t *tools) listAgents(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, ListAgentsOut, error) {
	resp, err := t.agents.ListAgents(callerContext(ctx, req.Extra), &trellisv1.ListAgentsRequest{})
	if err != nil {
		return nil, ListAgentsOut{}, t.callError(ctx, "agent.list", err)
	}
	out := ListAgentsOut{Agents: []AgentOut{}}
	for _, a := range resp.GetAgents() {
		out.Agents = append(out.Agents, AgentOut{Name: a.GetName(), Description: a.GetDescription()})
	}
	return nil, out, nil
}

// callError turns a runtime error into the tool's error: the protocol's
// code and message, which say what to do.
func (t *tools) callError(ctx context.Context, what string, err error) error {
	e := t.errs.FromError(ctx, err)
	return fmt.Errorf("%s: %s: %s", what, e.StringCode(), e.Message)
}

// progress reports a turn's events to a caller that asked for progress.
type progress struct {
	req *mcp.CallToolRequest
	n   float64
}

func (p *progress) report(ctx context.Context, msg string) {
	token := p.req.Params.GetProgressToken()
	if token == nil {
		return
	}
	p.n++
	// A notification that cannot be sent (the caller went away) ends
	// nothing: the cancellation, if any, comes through ctx.
	_ = p.req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: p.n, Message: msg})
}

// describe is one line about an event of the turn, for a progress
// notification.
func describe(ev *trellisv1.SessionEvent) string {
	switch {
	case ev.GetMessageDelta() != nil:
		return ev.GetMessageDelta().GetText()
	case ev.GetToolCall() != nil:
		return "tool " + ev.GetToolCall().GetName() + " called"
	case ev.GetToolResult() != nil:
		r := ev.GetToolResult()
		if r.GetOk() {
			return "tool " + r.GetName() + " done"
		}
		return "tool " + r.GetName() + " failed: " + r.GetError()
	case ev.GetError() != nil:
		return "error " + ev.GetError().GetCode() + ": " + ev.GetError().GetMessage()
	}
	return ev.GetKind()
}
