package pi

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Version is the session header's version.
const Version = 3

// The event types.
const (
	TypeSession             = "session"
	TypeAgentStart          = "agent_start"
	TypeAgentEnd            = "agent_end"
	TypeAgentSettled        = "agent_settled"
	TypeTurnStart           = "turn_start"
	TypeTurnEnd             = "turn_end"
	TypeMessageStart        = "message_start"
	TypeMessageUpdate       = "message_update"
	TypeMessageEnd          = "message_end"
	TypeToolExecutionStart  = "tool_execution_start"
	TypeToolExecutionUpdate = "tool_execution_update"
	TypeToolExecutionEnd    = "tool_execution_end"
	TypeQueueUpdate         = "queue_update"
	TypeCompactionStart     = "compaction_start"
	TypeCompactionEnd       = "compaction_end"
)

// The message roles.
const (
	RoleUser       = "user"
	RoleAssistant  = "assistant"
	RoleToolResult = "toolResult"
	// RoleSystem is a system message {role, content, timestamp?} that pi
	// emits (its content a string or text blocks); Trellis never renders one.
	RoleSystem = "system"
)

// The assistant stop reasons. StopPending is the stop reason of an
// assistant message that is still streaming (message_start only).
const (
	StopStop    = "stop"
	StopLength  = "length"
	StopToolUse = "toolUse"
	StopError   = "error"
	StopAborted = "aborted"
	StopPending = "pending"
)

// The content block types.
const (
	ContentText     = "text"
	ContentThinking = "thinking"
	ContentToolCall = "toolCall"
	// ContentImage is an image block {type, data (base64), mimeType}: pi
	// sends it in user and tool result content; Trellis never renders one.
	ContentImage = "image"
)

// The assistantMessageEvent types of message_update.
const (
	TextStart     = "text_start"
	TextDelta     = "text_delta"
	TextEnd       = "text_end"
	ThinkingStart = "thinking_start"
	ThinkingDelta = "thinking_delta"
	ThinkingEnd   = "thinking_end"
	ToolCallStart = "toolcall_start"
	ToolCallDelta = "toolcall_delta"
	ToolCallEnd   = "toolcall_end"
)

// Event is one line of the stream: the SessionHeader or an agent session
// event. Its JSON form is the line without its "type" member, which Type
// gives.
type Event interface {
	Type() string
}

// SessionHeader is the first line of a stream. Timestamp is ISO-8601 UTC
// with milliseconds.
type SessionHeader struct {
	Version   int    `json:"version"`
	ID        string `json:"id"`
	Timestamp string `json:"timestamp"`
	Cwd       string `json:"cwd"`
}

// AgentStart opens a run.
type AgentStart struct{}

// AgentEnd closes a run with every message that ended in it.
type AgentEnd struct {
	Messages  []Message `json:"messages"`
	WillRetry bool      `json:"willRetry"`
}

// AgentSettled follows AgentEnd once nothing more will happen for the
// prompt.
type AgentSettled struct {
	Aborted bool `json:"aborted"`
}

// TurnStart opens a turn: one provider call and its tool calls.
type TurnStart struct{}

// TurnEnd closes a turn with its assistant message and tool results.
type TurnEnd struct {
	Message     Message   `json:"message"`
	ToolResults []Message `json:"toolResults"`
}

// MessageStart opens a message.
type MessageStart struct {
	Message Message `json:"message"`
}

// MessageUpdate is one streaming step of the assistant message: only the
// increment (no partial message).
type MessageUpdate struct {
	Usage                 Usage                 `json:"usage"`
	AssistantMessageEvent AssistantMessageEvent `json:"assistantMessageEvent"`
}

// MessageEnd closes a message with its authoritative whole.
type MessageEnd struct {
	Message Message `json:"message"`
}

// ToolExecutionStart reports a tool call about to run (or answered without
// running).
type ToolExecutionStart struct {
	ToolCallID string          `json:"toolCallId"`
	ToolName   string          `json:"toolName"`
	Args       json.RawMessage `json:"args"`
}

// ToolExecutionUpdate reports a running tool's output so far.
type ToolExecutionUpdate struct {
	ToolCallID    string          `json:"toolCallId"`
	ToolName      string          `json:"toolName"`
	Args          json.RawMessage `json:"args"`
	PartialResult ToolOutput      `json:"partialResult"`
}

// ToolExecutionEnd reports a tool call's outcome.
type ToolExecutionEnd struct {
	ToolCallID string     `json:"toolCallId"`
	ToolName   string     `json:"toolName"`
	Result     ToolOutput `json:"result"`
	IsError    bool       `json:"isError"`
}

// QueueUpdate gives the whole queue of prompts waiting behind the run.
type QueueUpdate struct {
	Steering []string `json:"steering"`
	FollowUp []string `json:"followUp"`
}

// CompactionStart opens a compaction; Reason is "manual" or "threshold".
type CompactionStart struct {
	Reason string `json:"reason"`
}

// CompactionEnd closes a compaction. Result is omitted when absent.
type CompactionEnd struct {
	Reason       string          `json:"reason"`
	Result       json.RawMessage `json:"result,omitempty"`
	Aborted      bool            `json:"aborted"`
	WillRetry    bool            `json:"willRetry"`
	ErrorMessage string          `json:"errorMessage,omitempty"`
}

// CompactionResult is compaction_end's result, pi's CompactionResult:
// {summary, firstKeptEntryId, tokensBefore, details?}.
type CompactionResult struct {
	Summary          string            `json:"summary"`
	FirstKeptEntryID string            `json:"firstKeptEntryId"`
	TokensBefore     int64             `json:"tokensBefore"`
	Details          CompactionDetails `json:"details"`
}

// CompactionDetails are Trellis's figures of a compaction (pi leaves
// details to the compactor).
type CompactionDetails struct {
	TokensAfter  int64 `json:"tokensAfter"`
	SummaryChars int64 `json:"summaryChars"`
}

// ToolOutput is a tool's result (or partial result) as pi's tools return
// it: content blocks of text.
type ToolOutput struct {
	Content []Content `json:"content"`
}

// Usage is pi's token usage; Cost is 0 when unknown.
type Usage struct {
	Input       int64 `json:"input"`
	Output      int64 `json:"output"`
	CacheRead   int64 `json:"cacheRead"`
	CacheWrite  int64 `json:"cacheWrite"`
	TotalTokens int64 `json:"totalTokens"`
	Cost        Cost  `json:"cost"`
}

// Cost is a usage's price in dollars.
type Cost struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cacheRead"`
	CacheWrite float64 `json:"cacheWrite"`
	Total      float64 `json:"total"`
}

// Type implements Event.
func (SessionHeader) Type() string { return TypeSession }

// Type implements Event.
func (AgentStart) Type() string { return TypeAgentStart }

// Type implements Event.
func (AgentEnd) Type() string { return TypeAgentEnd }

// Type implements Event.
func (AgentSettled) Type() string { return TypeAgentSettled }

// Type implements Event.
func (TurnStart) Type() string { return TypeTurnStart }

// Type implements Event.
func (TurnEnd) Type() string { return TypeTurnEnd }

// Type implements Event.
func (MessageStart) Type() string { return TypeMessageStart }

// Type implements Event.
func (MessageUpdate) Type() string { return TypeMessageUpdate }

// Type implements Event.
func (MessageEnd) Type() string { return TypeMessageEnd }

// Type implements Event.
func (ToolExecutionStart) Type() string { return TypeToolExecutionStart }

// Type implements Event.
func (ToolExecutionUpdate) Type() string { return TypeToolExecutionUpdate }

// Type implements Event.
func (ToolExecutionEnd) Type() string { return TypeToolExecutionEnd }

// Type implements Event.
func (QueueUpdate) Type() string { return TypeQueueUpdate }

// Type implements Event.
func (CompactionStart) Type() string { return TypeCompactionStart }

// Type implements Event.
func (CompactionEnd) Type() string { return TypeCompactionEnd }

// Message is a user, assistant or tool result message; Role says which, and
// which fields it has:
//   - user: Content (text blocks), Timestamp;
//   - assistant: Content, API, Provider, Model, Usage, StopReason,
//     ErrorMessage (only when StopReason is "error"), Timestamp;
//   - toolResult: ToolCallID, ToolName, Content (text blocks), IsError,
//     Timestamp.
//
// Timestamp is in milliseconds since the epoch.
type Message struct {
	Role         string
	Content      []Content
	API          string
	Provider     string
	Model        string
	Usage        Usage
	StopReason   string
	ErrorMessage string
	ToolCallID   string
	ToolName     string
	IsError      bool
	Timestamp    int64
}

type userMessage struct {
	Role      string    `json:"role"`
	Content   []Content `json:"content"`
	Timestamp int64     `json:"timestamp"`
}

type assistantMessage struct {
	Role         string    `json:"role"`
	Content      []Content `json:"content"`
	API          string    `json:"api"`
	Provider     string    `json:"provider"`
	Model        string    `json:"model"`
	Usage        Usage     `json:"usage"`
	StopReason   string    `json:"stopReason"`
	ErrorMessage string    `json:"errorMessage,omitempty"`
	Timestamp    int64     `json:"timestamp"`
}

type toolResultMessage struct {
	Role       string    `json:"role"`
	ToolCallID string    `json:"toolCallId"`
	ToolName   string    `json:"toolName"`
	Content    []Content `json:"content"`
	IsError    bool      `json:"isError"`
	Timestamp  int64     `json:"timestamp"`
}

type systemMessage struct {
	Role      string    `json:"role"`
	Content   []Content `json:"content"`
	Timestamp int64     `json:"timestamp,omitempty"`
}

// flexMessage reads user and system content as pi types it: a string (one
// text block) or an array of blocks.
type flexMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Timestamp int64           `json:"timestamp"`
}

func decodeFlexContent(raw json.RawMessage) ([]Content, error) {
	b := bytes.TrimSpace(raw)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, err
		}
		return []Content{{Type: ContentText, Text: s}}, nil
	}
	var out []Content
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

var messageKeys = map[string][]string{
	RoleUser:       {"role", "content", "timestamp"},
	RoleSystem:     {"role", "content"},
	RoleAssistant:  {"role", "content", "api", "provider", "model", "usage", "stopReason", "timestamp"},
	RoleToolResult: {"role", "toolCallId", "toolName", "content", "isError", "timestamp"},
}

// MarshalJSON renders m with the fields of its role.
func (m Message) MarshalJSON() ([]byte, error) {
	content := m.Content
	if content == nil {
		content = []Content{}
	}
	switch m.Role {
	case RoleUser:
		return json.Marshal(userMessage{m.Role, content, m.Timestamp})
	case RoleAssistant:
		msg := ""
		if m.StopReason == StopError {
			msg = m.ErrorMessage
		}
		return json.Marshal(assistantMessage{m.Role, content, m.API, m.Provider, m.Model, m.Usage, m.StopReason, msg, m.Timestamp})
	case RoleToolResult:
		return json.Marshal(toolResultMessage{m.Role, m.ToolCallID, m.ToolName, content, m.IsError, m.Timestamp})
	case RoleSystem:
		return json.Marshal(systemMessage{m.Role, content, m.Timestamp})
	}
	return nil, fmt.Errorf("pi: message role %q", m.Role)
}

// UnmarshalJSON decodes a message, requiring the fields of its role.
func (m *Message) UnmarshalJSON(b []byte) error {
	var head struct {
		Role string `json:"role"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return err
	}
	keys, ok := messageKeys[head.Role]
	if !ok {
		return fmt.Errorf("message role %q", head.Role)
	}
	if err := requireKeys(b, keys...); err != nil {
		return fmt.Errorf("%s message: %w", head.Role, err)
	}
	var out Message
	switch head.Role {
	case RoleUser, RoleSystem:
		var v flexMessage
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		content, err := decodeFlexContent(v.Content)
		if err != nil {
			return fmt.Errorf("%s message content: %w", head.Role, err)
		}
		out = Message{Role: v.Role, Content: content, Timestamp: v.Timestamp}
	case RoleAssistant:
		var v assistantMessage
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		out = Message{Role: v.Role, Content: v.Content, API: v.API, Provider: v.Provider, Model: v.Model,
			Usage: v.Usage, StopReason: v.StopReason, ErrorMessage: v.ErrorMessage, Timestamp: v.Timestamp}
	case RoleToolResult:
		var v toolResultMessage
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		out = Message{Role: v.Role, ToolCallID: v.ToolCallID, ToolName: v.ToolName, Content: v.Content,
			IsError: v.IsError, Timestamp: v.Timestamp}
	}
	*m = out
	return nil
}

// Content is one content block: text (Text), thinking (Thinking),
// toolCall (ID, Name, Arguments: a JSON object) or image (Data: base64,
// MimeType).
type Content struct {
	Type      string
	Text      string
	Thinking  string
	ID        string
	Name      string
	Arguments json.RawMessage
	Data      string
	MimeType  string
}

type imageContent struct {
	Type     string `json:"type"`
	Data     string `json:"data"`
	MimeType string `json:"mimeType"`
}

type textContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type thinkingContent struct {
	Type     string `json:"type"`
	Thinking string `json:"thinking"`
}

type toolCallContent struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

var contentKeys = map[string][]string{
	ContentText:     {"type", "text"},
	ContentThinking: {"type", "thinking"},
	ContentToolCall: {"type", "id", "name", "arguments"},
	ContentImage:    {"type", "data", "mimeType"},
}

// MarshalJSON renders c with the fields of its type.
func (c Content) MarshalJSON() ([]byte, error) {
	switch c.Type {
	case ContentText:
		return json.Marshal(textContent{c.Type, c.Text})
	case ContentThinking:
		return json.Marshal(thinkingContent{c.Type, c.Thinking})
	case ContentToolCall:
		args := c.Arguments
		if len(bytes.TrimSpace(args)) == 0 {
			args = json.RawMessage("{}")
		}
		return json.Marshal(toolCallContent{c.Type, c.ID, c.Name, args})
	case ContentImage:
		return json.Marshal(imageContent{c.Type, c.Data, c.MimeType})
	}
	return nil, fmt.Errorf("pi: content type %q", c.Type)
}

// UnmarshalJSON decodes a content block, requiring the fields of its type.
func (c *Content) UnmarshalJSON(b []byte) error {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return err
	}
	keys, ok := contentKeys[head.Type]
	if !ok {
		return fmt.Errorf("content type %q", head.Type)
	}
	if err := requireKeys(b, keys...); err != nil {
		return fmt.Errorf("%s content: %w", head.Type, err)
	}
	var v struct {
		Text      string          `json:"text"`
		Thinking  string          `json:"thinking"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Data      string          `json:"data"`
		MimeType  string          `json:"mimeType"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if head.Type == ContentToolCall && !isObject(v.Arguments) {
		return fmt.Errorf("toolCall content: arguments must be an object")
	}
	*c = Content{Type: head.Type, Text: v.Text, Thinking: v.Thinking, ID: v.ID, Name: v.Name, Arguments: v.Arguments,
		Data: v.Data, MimeType: v.MimeType}
	return nil
}

// AssistantMessageEvent is the increment a message_update carries:
//   - text_start, thinking_start: ContentIndex;
//   - text_delta, thinking_delta, toolcall_delta: ContentIndex, Delta;
//   - text_end, thinking_end: ContentIndex, Content (the block's whole text);
//   - toolcall_start: ContentIndex, ID, ToolName;
//   - toolcall_end: ContentIndex, ToolCall.
type AssistantMessageEvent struct {
	Type         string
	ContentIndex int
	Delta        string
	Content      string
	ID           string
	ToolName     string
	ToolCall     Content
}

var ameKeys = map[string][]string{
	TextStart:     {"type", "contentIndex"},
	TextDelta:     {"type", "contentIndex", "delta"},
	TextEnd:       {"type", "contentIndex", "content"},
	ThinkingStart: {"type", "contentIndex"},
	ThinkingDelta: {"type", "contentIndex", "delta"},
	ThinkingEnd:   {"type", "contentIndex", "content"},
	ToolCallStart: {"type", "contentIndex", "id", "toolName"},
	ToolCallDelta: {"type", "contentIndex", "delta"},
	ToolCallEnd:   {"type", "contentIndex", "toolCall"},
}

// MarshalJSON renders e with the fields of its type.
func (e AssistantMessageEvent) MarshalJSON() ([]byte, error) {
	switch e.Type {
	case TextStart, ThinkingStart:
		return json.Marshal(struct {
			Type         string `json:"type"`
			ContentIndex int    `json:"contentIndex"`
		}{e.Type, e.ContentIndex})
	case TextDelta, ThinkingDelta, ToolCallDelta:
		return json.Marshal(struct {
			Type         string `json:"type"`
			ContentIndex int    `json:"contentIndex"`
			Delta        string `json:"delta"`
		}{e.Type, e.ContentIndex, e.Delta})
	case TextEnd, ThinkingEnd:
		return json.Marshal(struct {
			Type         string `json:"type"`
			ContentIndex int    `json:"contentIndex"`
			Content      string `json:"content"`
		}{e.Type, e.ContentIndex, e.Content})
	case ToolCallStart:
		return json.Marshal(struct {
			Type         string `json:"type"`
			ContentIndex int    `json:"contentIndex"`
			ID           string `json:"id"`
			ToolName     string `json:"toolName"`
		}{e.Type, e.ContentIndex, e.ID, e.ToolName})
	case ToolCallEnd:
		return json.Marshal(struct {
			Type         string  `json:"type"`
			ContentIndex int     `json:"contentIndex"`
			ToolCall     Content `json:"toolCall"`
		}{e.Type, e.ContentIndex, e.ToolCall})
	}
	return nil, fmt.Errorf("pi: assistantMessageEvent type %q", e.Type)
}

// UnmarshalJSON decodes an increment, requiring the fields of its type; a
// partial member is refused (the JSON mode never sends one).
func (e *AssistantMessageEvent) UnmarshalJSON(b []byte) error {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return err
	}
	keys, ok := ameKeys[head.Type]
	if !ok {
		return fmt.Errorf("assistantMessageEvent type %q", head.Type)
	}
	if err := requireKeys(b, keys...); err != nil {
		return fmt.Errorf("%s: %w", head.Type, err)
	}
	var v struct {
		ContentIndex int      `json:"contentIndex"`
		Delta        string   `json:"delta"`
		Content      string   `json:"content"`
		ID           string   `json:"id"`
		ToolName     string   `json:"toolName"`
		ToolCall     *Content `json:"toolCall"`
		Partial      any      `json:"partial"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.Partial != nil {
		return fmt.Errorf("%s: a partial message is not sent in JSON mode", head.Type)
	}
	out := AssistantMessageEvent{Type: head.Type, ContentIndex: v.ContentIndex, Delta: v.Delta, Content: v.Content, ID: v.ID, ToolName: v.ToolName}
	if v.ToolCall != nil {
		if v.ToolCall.Type != ContentToolCall {
			return fmt.Errorf("%s: toolCall has type %q", head.Type, v.ToolCall.Type)
		}
		out.ToolCall = *v.ToolCall
	}
	*e = out
	return nil
}

// requireKeys checks that the JSON object b has every key.
func requireKeys(b []byte, keys ...string) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	if obj == nil {
		return fmt.Errorf("not an object")
	}
	for _, k := range keys {
		if _, ok := obj[k]; !ok {
			return fmt.Errorf("%s is missing", k)
		}
	}
	return nil
}

func isObject(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{'
}
