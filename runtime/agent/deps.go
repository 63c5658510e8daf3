package agent

import (
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/llm"
)

// Emitter records one session event. The caller assigns seq and ts, appends
// the event to the durable log and fans it out. The loop passes a context that
// is not cancelled by an interrupt, so the events that close a turn land.
type Emitter interface {
	Emit(ctx context.Context, kind string, payload any) error
}

// ToolCall is one call the model asked for, as Tools and Gate see it.
type ToolCall struct {
	TurnID string
	CallID string
	Name   string
	Args   json.RawMessage // a JSON object
}

// Progress is a piece of a running tool's output.
type Progress struct {
	Stream    string // "stdout" or "stderr"
	Chunk     string
	Truncated bool
}

// ToolResult is what a tool call produced. A tool that fails, including on
// invalid arguments, returns OK false and a message in Error; that is data
// for the model, not a failure of the turn.
type ToolResult struct {
	OK     bool
	Output string
	Error  string
	Diff   *events.DiffEvent // set when the tool changed a file
	// Images go to the model with the result (not in tool.result, whose
	// Output says what they are).
	Images []llm.Image
	// Code, on a call that failed because the tool is unavailable
	// (tool_inactive, search_provider_unavailable, ...), is that protocol
	// error code: the client also gets it as an error event before the
	// tool.result. Empty for a tool's own failure.
	Code string
}

// Tools lists the tools of a session and runs them.
type Tools interface {
	// Specs returns the tools offered to the model for this turn.
	Specs(ctx context.Context) []llm.ToolSpec
	// Run runs one call. It may call progress from any goroutine until it
	// returns, and must return promptly once ctx is cancelled.
	Run(ctx context.Context, call ToolCall, progress func(Progress)) ToolResult
}

// WorkdirChanger is an optional capability of Tools: whether a tool may
// change the session's workdir (a write or exec tool), so that the loop's
// Checkpoints records the workdir before it runs. Tools without it have
// no such tool.
type WorkdirChanger interface {
	ChangesWorkdir(name string) bool
}

// Checkpoints records a session's workdir (docs/workspaces.md) at the
// points of a turn where it may be about to change or has changed. It
// reports its own failures (as events) and never stops the turn.
type Checkpoints interface {
	// BeforeTool is asked right before call runs, once it is allowed and
	// its tool.call stored, for a tool that may change the workdir.
	BeforeTool(ctx context.Context, call ToolCall)
	// TurnEnd is asked once as a turn that ran such a tool ends, before
	// its message.done (or its turn.done when it has none).
	TurnEnd(ctx context.Context, turnID string)
}

// Gate authorizes one tool call before it runs. It returns nil to allow it,
// or an error carrying an errs code (mode_denied, approval_denied,
// approval_timeout) whose message says why. It may block while a person
// decides, and must return once ctx is cancelled.
type Gate interface {
	Authorize(ctx context.Context, call ToolCall) error
}

// History is a session's model-facing conversation, persisted so a resumed
// session continues it. The loop reads it once per turn and appends each
// message as soon as it exists.
type History interface {
	Messages(ctx context.Context) ([]llm.Message, error)
	Append(ctx context.Context, msgs ...llm.Message) error
}

// MemoryHistory is a History kept in memory, for ephemeral sessions and
// tests. It is safe for concurrent use.
type MemoryHistory struct {
	mu   sync.Mutex
	msgs []llm.Message
}

// NewMemoryHistory returns a history holding msgs.
func NewMemoryHistory(msgs ...llm.Message) *MemoryHistory {
	return &MemoryHistory{msgs: slices.Clone(msgs)}
}

// Messages returns a copy of the conversation.
func (h *MemoryHistory) Messages(context.Context) ([]llm.Message, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.msgs), nil
}

// Append adds msgs at the end.
func (h *MemoryHistory) Append(_ context.Context, msgs ...llm.Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, msgs...)
	return nil
}
