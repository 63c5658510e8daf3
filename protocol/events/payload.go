package events

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The turn.done reasons.
const (
	ReasonComplete    = "complete"
	ReasonInterrupted = "interrupted"
	ReasonError       = "error"
	ReasonDenied      = "denied"
	ReasonBudget      = "budget"
)

// The step.done stop reasons.
const (
	StopEnd     = "stop"
	StopToolUse = "tool_use"
	StopLength  = "length"
	StopError   = "error"
	StopAborted = "aborted"
)

// TurnStarted is the payload of turn.started.
type TurnStarted struct {
	TurnID string `json:"turnId"`
	Prompt string `json:"prompt"`
	Queued bool   `json:"queued"`
}

// MessageUser is the payload of message.user.
type MessageUser struct {
	Text string `json:"text"`
}

// Text is the payload of message.delta, message.reasoning and message.done.
type Text struct {
	Text string `json:"text"`
}

// ToolCall is the payload of tool.call.
type ToolCall struct {
	CallID string          `json:"callId"`
	Name   string          `json:"name"`
	Args   json.RawMessage `json:"args"`
}

// ToolProgress is the payload of tool.progress.
type ToolProgress struct {
	CallID    string `json:"callId"`
	Name      string `json:"name"`
	Stream    string `json:"stream"`
	Chunk     string `json:"chunk"`
	Truncated bool   `json:"truncated"`
}

// ToolResult is the payload of tool.result; Error is nil when OK.
type ToolResult struct {
	CallID string  `json:"callId"`
	Name   string  `json:"name"`
	OK     bool    `json:"ok"`
	Output string  `json:"output"`
	Error  *string `json:"error"`
}

// Content is what the model reads of a tool result, as the agent loop
// builds it: the output, or the error, or both.
func (r ToolResult) Content() string {
	if r.OK {
		return r.Output
	}
	msg := "the tool failed"
	if r.Error != nil && *r.Error != "" {
		msg = *r.Error
	}
	if r.Output != "" {
		return r.Output + "\n\nerror: " + msg
	}
	return msg
}

// Error is the payload of error.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// TurnQueued is the payload of turn.queued. Prompt is not in PROTOCOL.md §7;
// it is read when a server sends it.
type TurnQueued struct {
	TurnID   string `json:"turnId"`
	Position int    `json:"position"`
	Prompt   string `json:"prompt,omitempty"`
}

// TurnDequeued is the payload of turn.dequeued.
type TurnDequeued struct {
	TurnID string `json:"turnId"`
	Reason string `json:"reason"`
}

// TurnDone is the payload of turn.done.
type TurnDone struct {
	TurnID    string `json:"turnId"`
	Reason    string `json:"reason"`
	Synthetic bool   `json:"synthetic"`
}

// CompactionStarted is the payload of compaction.started.
type CompactionStarted struct {
	Reason string `json:"reason"` // "manual" or "auto"
	Before int64  `json:"before"`
}

// Compaction is the payload of compaction.
type Compaction struct {
	Before       int64  `json:"before"`
	After        int64  `json:"after"`
	SummaryChars int64  `json:"summaryChars"`
	Auto         bool   `json:"auto"`
	Summary      string `json:"summary,omitempty"` // the summary text, when one was made
}

// StepStarted is the payload of step.started.
type StepStarted struct {
	Step int `json:"step"`
}

// StepDone is the payload of step.done: everything one provider call
// produced. Usage is nil when the call failed.
type StepDone struct {
	Step       int            `json:"step"`
	Text       string         `json:"text"`
	Reasoning  string         `json:"reasoning"`
	ToolCalls  []StepToolCall `json:"toolCalls"`
	Usage      *Usage         `json:"usage"`
	StopReason string         `json:"stopReason"`
	Provider   string         `json:"provider"`
	Model      string         `json:"model"`
}

// StepToolCall is one tool call of a step; Args is a JSON object.
type StepToolCall struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// Usage counts the tokens of one provider call.
type Usage struct {
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
}

// DecodePayload decodes e's payload into v, naming the event on failure.
// The error wraps ErrInvalidEvent.
func DecodePayload(e Event, v any) error {
	p := bytes.TrimSpace(e.Payload)
	if len(p) == 0 || string(p) == "null" {
		return fmt.Errorf("%w: %s (seq %d) has no payload", ErrInvalidEvent, e.Kind, e.Seq)
	}
	if err := json.Unmarshal(p, v); err != nil {
		return fmt.Errorf("%w: %s (seq %d) payload: %v", ErrInvalidEvent, e.Kind, e.Seq, err)
	}
	return nil
}

// ArgsJSON returns args as compact JSON text, {} when empty.
func ArgsJSON(args json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, args); err != nil || b.Len() == 0 {
		return "{}"
	}
	return b.String()
}
