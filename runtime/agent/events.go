package agent

import (
	"encoding/json"

	"github.com/trellis-run/trellis/runtime/llm"
)

// The reasons a turn ends with (turn.done).
const (
	ReasonComplete    = "complete"
	ReasonInterrupted = "interrupted"
	ReasonError       = "error"
	ReasonDenied      = "denied"
	ReasonBudget      = "budget"
)

// StopAborted is the step.done stop reason of a provider call cut short by an
// interrupt; the others are the llm.StopReason values.
const StopAborted = "aborted"

// TurnStartedPayload is the payload of turn.started.
type TurnStartedPayload struct {
	TurnID string `json:"turnId"`
	Prompt string `json:"prompt"`
	Queued bool   `json:"queued"`
}

// UserMessagePayload is the payload of message.user. Attachments is never
// nil in an emitted event.
type UserMessagePayload struct {
	Text        string          `json:"text"`
	Attachments []AttachmentRef `json:"attachments"`
	// Principal sent the prompt (nil: no principal did, e.g. a job).
	Principal *PrincipalRef `json:"principal,omitempty"`
}

// PrincipalRef names the principal who acted, in the payloads of the
// events of user-originated actions.
type PrincipalRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// AttachmentRef names one attachment of a user message.
type AttachmentRef struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// TextPayload is the payload of message.delta and message.reasoning: one
// non-empty chunk.
type TextPayload struct {
	Text string `json:"text"`
}

// MessageDonePayload is the payload of message.done: the whole answer text
// of the turn, the concatenation of its message.delta chunks.
type MessageDonePayload struct {
	Text string `json:"text"`
	Role string `json:"role"` // always "assistant"
}

// ToolCallPayload is the payload of tool.call. Args is a JSON object.
type ToolCallPayload struct {
	CallID string          `json:"callId"`
	Name   string          `json:"name"`
	Args   json.RawMessage `json:"args"`
}

// ToolProgressPayload is the payload of tool.progress.
type ToolProgressPayload struct {
	CallID    string `json:"callId"`
	Name      string `json:"name"`
	Stream    string `json:"stream"`
	Chunk     string `json:"chunk"`
	Truncated bool   `json:"truncated"`
}

// ToolResultPayload is the payload of tool.result. Error is null when OK.
type ToolResultPayload struct {
	CallID string  `json:"callId"`
	Name   string  `json:"name"`
	OK     bool    `json:"ok"`
	Output string  `json:"output"`
	Error  *string `json:"error"`
}

// Diff is the payload of diff: the unified diff of a file a tool changed.
type Diff struct {
	Path  string `json:"path"`
	Patch string `json:"patch"`
}

// UsagePayload is the payload of usage, one per completed provider call.
type UsagePayload struct {
	InputTokens  int    `json:"inputTokens"`
	OutputTokens int    `json:"outputTokens"`
	Provider     string `json:"provider"`
	Model        string `json:"model"`
}

// ContextPayload is the payload of context: the tokens the conversation
// occupies after the turn (input plus output of its last provider call), the
// model's window and the share used in percent (one decimal), null when the
// window is unknown.
type ContextPayload struct {
	Used    int      `json:"used"`
	Window  *int     `json:"window"`
	Percent *float64 `json:"percent"`
}

// ErrorPayload is the payload of error; Code is a protocol error code.
type ErrorPayload struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// TurnDonePayload is the payload of turn.done.
type TurnDonePayload struct {
	TurnID    string `json:"turnId"`
	Reason    string `json:"reason"`
	Synthetic bool   `json:"synthetic"`
	// Principal interrupted the turn (reason interrupted); nil otherwise,
	// and when no principal did (shutdown, a lost lease).
	Principal *PrincipalRef `json:"principal,omitempty"`
}

// StepStartedPayload is the payload of step.started; Step counts the turn's
// provider calls from 0.
type StepStartedPayload struct {
	Step int `json:"step"`
}

// StepDonePayload is the payload of step.done: everything one provider call
// produced. Text and Reasoning are the concatenations of its deltas;
// ToolCalls are the calls the loop goes on to handle (each gets exactly one
// tool.result), never null; Usage is null when the call failed. StopReason is
// an llm.StopReason, or "aborted".
type StepDonePayload struct {
	Step       int            `json:"step"`
	Text       string         `json:"text"`
	Reasoning  string         `json:"reasoning"`
	ToolCalls  []StepToolCall `json:"toolCalls"`
	Usage      *llm.Usage     `json:"usage"`
	StopReason string         `json:"stopReason"`
	Provider   string         `json:"provider"`
	Model      string         `json:"model"`
}

// StepToolCall is one tool call of a step; Args is a JSON object ({} when
// the model sent arguments that are not one).
type StepToolCall struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}
