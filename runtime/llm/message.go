package llm

import "encoding/json"

// Role says who produced a Message.
type Role string

// The roles of the model-facing history.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of the model-facing history of a session. It is
// persisted as JSON so that a resumed session continues its conversation.
//
// A user message carries Text. An assistant message carries Text, Reasoning
// and ToolCalls (any of them may be empty). A tool message carries exactly one
// ToolResult, answering one ToolCall of the assistant message before it.
type Message struct {
	Role       Role        `json:"role"`
	Text       string      `json:"text,omitempty"`
	Reasoning  string      `json:"reasoning,omitempty"`
	ToolCalls  []ToolCall  `json:"toolCalls,omitempty"`
	ToolResult *ToolResult `json:"toolResult,omitempty"`
}

// ToolCall is a complete request of the model to run one tool.
//
// Arguments is always valid JSON, normally an object. A provider that
// receives arguments that do not parse from its vendor passes them on as a
// JSON string, so the history stays serializable and the caller can tell the
// model its arguments were malformed.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ToolResult is the answer to one ToolCall, as the model will read it.
type ToolResult struct {
	CallID  string `json:"callId"`
	Name    string `json:"name"`
	Content string `json:"content"`
	IsError bool   `json:"isError"`
	// Images are pictures the tool returned with its text (the browser's
	// screenshots); providers send them as image content.
	Images []Image `json:"images,omitempty"`
}

// Image is one picture in a tool result. Data is the encoded image itself
// (JSON carries it as base64).
type Image struct {
	// MediaType is "image/png", "image/jpeg", "image/gif" or "image/webp",
	// the types both vendors accept.
	MediaType string `json:"mediaType"`
	Data      []byte `json:"data"`
}

// UserText returns a user message.
func UserText(text string) Message { return Message{Role: RoleUser, Text: text} }

// ToolMessage returns a tool message carrying r.
func ToolMessage(r ToolResult) Message { return Message{Role: RoleTool, ToolResult: &r} }

// ToolSpec describes a tool the model may call.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Request is one model call.
type Request struct {
	Model     string
	System    string
	Messages  []Message
	Tools     []ToolSpec
	MaxTokens int // 0 = the provider's default
	// Effort is the reasoning effort asked for: "minimal", "low",
	// "medium", "high", "max", or "" for the provider's default. OpenAI sends it
	// as reasoning_effort, Anthropic as an extended-thinking budget; the
	// fake ignores it.
	Effort string
}

// Usage counts the tokens of one model call.
type Usage struct {
	InputTokens  int `json:"inputTokens"`
	OutputTokens int `json:"outputTokens"`
	// ReasoningTokens are the output tokens the model spent reasoning (0
	// when the provider does not say).
	ReasoningTokens int `json:"reasoningTokens,omitempty"`
	// CacheReadTokens are the input tokens read from the vendor's prompt
	// cache, and CacheWriteTokens those written to it (0 when the provider
	// does not say). Both are counted in InputTokens too: vendors bill
	// them at their own prices.
	CacheReadTokens  int `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int `json:"cacheWriteTokens,omitempty"`
}

// StopReason says why the model stopped. Providers map their vendor's reasons
// onto these values.
type StopReason string

// The stop reasons.
const (
	StopEnd     StopReason = "stop"     // the answer is complete
	StopToolUse StopReason = "tool_use" // the model wants its tool calls run
	StopLength  StopReason = "length"   // MaxTokens (or the context window) was reached
	StopError   StopReason = "error"    // the vendor reported a failure in-stream
)
