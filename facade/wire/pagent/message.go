package pagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// JSONRPCVersion is the jsonrpc member of every line.
const JSONRPCVersion = "2.0"

// ErrInvalidLine is returned (wrapped) by DecodeEventLine for a line pagent
// would reject.
var ErrInvalidLine = errors.New("pagent: invalid event line")

// The methods, named after pagent's event classes.
const (
	MethodRunBegin       = "RunBegin"
	MethodTurnBegin      = "TurnBegin"
	MethodTextDelta      = "TextDelta"
	MethodReasoningDelta = "ReasoningDelta"
	MethodStepEnd        = "StepEnd"
	MethodToolCallBegin  = "ToolCallBegin"
	MethodToolResult     = "ToolResult"
	MethodTurnEnd        = "TurnEnd"
	MethodRunEnd         = "RunEnd"
)

// Event is one pagent event: RunBegin, TurnBegin, TextDelta,
// ReasoningDelta, StepEnd, ToolCallBegin, ToolResult, TurnEnd or RunEnd.
// Its JSON form is the line's params.
type Event interface {
	Method() string
}

// RunBegin opens a run: one prompt of the session.
type RunBegin struct {
	UserInput string `json:"user_input"`
}

// TurnBegin opens a turn: one provider call, counted from 0 in its run.
type TurnBegin struct {
	Turn int `json:"turn"`
}

// TextDelta is a non-empty chunk of the answer.
type TextDelta struct {
	Text string `json:"text"`
}

// ReasoningDelta is a non-empty chunk of the model's reasoning.
type ReasoningDelta struct {
	Text string `json:"text"`
}

// StepEnd closes a provider call with what it produced. ToolCalls is never
// nil; Usage is nil when the call reported none (it failed).
type StepEnd struct {
	Content          string     `json:"content"`
	ToolCalls        []ToolCall `json:"tool_calls"`
	ReasoningContent string     `json:"reasoning_content"`
	Usage            *Usage     `json:"usage"`
}

// ToolCallBegin announces one tool call; Arguments is the JSON text of its
// arguments.
type ToolCallBegin struct {
	ToolCallID string `json:"tool_call_id"`
	Name       string `json:"name"`
	Arguments  string `json:"arguments"`
}

// ToolResult is a tool call's outcome, as the model reads it. OK is the
// field newer pagent releases added; a line without it decodes as OK.
type ToolResult struct {
	ToolCallID string `json:"tool_call_id"`
	Name       string `json:"name"`
	Content    string `json:"content"`
	OK         bool   `json:"ok"`
}

// TurnEnd closes a turn; Stopped is true when its provider call asked for
// no tools.
type TurnEnd struct {
	Turn    int  `json:"turn"`
	Stopped bool `json:"stopped"`
}

// RunEnd closes a run, repeating the fields of its last StepEnd.
// StopReason and Error are Trellis's extra params (upstream decoders ignore
// unknown params), so that a run that failed or was interrupted does not
// look completed: StopReason is the turn.done reason ("complete",
// "error", "interrupted", "denied", "budget"; empty when decoding a line
// without it) and Error, for a run that did not complete, the message of
// its last error event (omitted when none; never omitted for "error").
type RunEnd struct {
	Content          string     `json:"content"`
	ToolCalls        []ToolCall `json:"tool_calls"`
	ReasoningContent string     `json:"reasoning_content"`
	Usage            *Usage     `json:"usage"`
	StopReason       string     `json:"stop_reason,omitempty"`
	Error            string     `json:"error,omitempty"`
}

// ToolCall is an OpenAI-style tool call.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // always "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function of a ToolCall; Arguments is JSON text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Usage is OpenAI-style token usage.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Method implements Event.
func (RunBegin) Method() string { return MethodRunBegin }

// Method implements Event.
func (TurnBegin) Method() string { return MethodTurnBegin }

// Method implements Event.
func (TextDelta) Method() string { return MethodTextDelta }

// Method implements Event.
func (ReasoningDelta) Method() string { return MethodReasoningDelta }

// Method implements Event.
func (StepEnd) Method() string { return MethodStepEnd }

// Method implements Event.
func (ToolCallBegin) Method() string { return MethodToolCallBegin }

// Method implements Event.
func (ToolResult) Method() string { return MethodToolResult }

// Method implements Event.
func (TurnEnd) Method() string { return MethodTurnEnd }

// Method implements Event.
func (RunEnd) Method() string { return MethodRunEnd }

// line is the notification's JSON form, members in pagent's order.
type line struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  Event  `json:"params"`
}

// EncodeEventLine renders ev as one line:
// {"jsonrpc":"2.0","method":<name>,"params":{...}} and a newline. Nil
// tool_calls render as [].
func EncodeEventLine(ev Event) ([]byte, error) {
	switch e := ev.(type) {
	case nil:
		return nil, errors.New("pagent: nil event")
	case StepEnd:
		e.ToolCalls = nonNil(e.ToolCalls)
		ev = e
	case *StepEnd:
		c := *e
		c.ToolCalls = nonNil(c.ToolCalls)
		ev = c
	case RunEnd:
		e.ToolCalls = nonNil(e.ToolCalls)
		ev = e
	case *RunEnd:
		c := *e
		c.ToolCalls = nonNil(c.ToolCalls)
		ev = c
	}
	b, err := json.Marshal(line{JSONRPC: JSONRPCVersion, Method: ev.Method(), Params: ev})
	if err != nil {
		return nil, fmt.Errorf("pagent: encode %s: %w", ev.Method(), err)
	}
	return append(b, '\n'), nil
}

func nonNil(calls []ToolCall) []ToolCall {
	if calls == nil {
		return []ToolCall{}
	}
	return calls
}

// required lists each method's required params. ToolResult's ok is
// optional (older producers do not send it), and so are StepEnd's and
// RunEnd's usage and reasoning_content: pagent documents usage as present
// only when known, and its encoder omits what it does not have.
var required = map[string][]string{
	MethodRunBegin:       {"user_input"},
	MethodTurnBegin:      {"turn"},
	MethodTextDelta:      {"text"},
	MethodReasoningDelta: {"text"},
	MethodStepEnd:        {"content", "tool_calls"},
	MethodToolCallBegin:  {"tool_call_id", "name", "arguments"},
	MethodToolResult:     {"tool_call_id", "name", "content"},
	MethodTurnEnd:        {"turn", "stopped"},
	MethodRunEnd:         {"content", "tool_calls"},
}

// DecodeEventLine decodes one line the way pagent's decode_event_line does:
// it rejects an id, a jsonrpc other than "2.0", a missing or unknown method,
// params that are not an object, and missing required params (and, being
// typed, params of the wrong JSON type). Unknown params are ignored. The
// error wraps ErrInvalidLine.
func DecodeEventLine(b []byte) (Event, error) {
	obj, err := object(b)
	if err != nil {
		return nil, err
	}
	if _, ok := obj["id"]; ok {
		return nil, invalid("a notification has no id")
	}
	var version, method string
	if err := str(obj, "jsonrpc", &version); err != nil {
		return nil, err
	}
	if version != JSONRPCVersion {
		return nil, invalid("jsonrpc is %q, want %q", version, JSONRPCVersion)
	}
	if err := str(obj, "method", &method); err != nil {
		return nil, err
	}
	keys, ok := required[method]
	if !ok {
		return nil, invalid("unknown method %q", method)
	}
	raw, ok := obj["params"]
	if !ok {
		return nil, invalid("%s: params is missing", method)
	}
	params, err := object(raw)
	if err != nil {
		return nil, invalid("%s: params must be an object", method)
	}
	for _, k := range keys {
		if _, ok := params[k]; !ok {
			return nil, invalid("%s: params.%s is missing", method, k)
		}
	}
	var ev Event
	switch method {
	case MethodRunBegin:
		ev, err = decode[RunBegin](raw)
	case MethodTurnBegin:
		ev, err = decode[TurnBegin](raw)
	case MethodTextDelta:
		ev, err = decode[TextDelta](raw)
	case MethodReasoningDelta:
		ev, err = decode[ReasoningDelta](raw)
	case MethodStepEnd:
		var e StepEnd
		e, err = decode[StepEnd](raw)
		e.ToolCalls = nonNil(e.ToolCalls)
		ev = e
	case MethodToolCallBegin:
		ev, err = decode[ToolCallBegin](raw)
	case MethodToolResult:
		e := ToolResult{OK: true}
		if err = json.Unmarshal(raw, &e); err != nil {
			err = invalid("%s: %v", method, err)
		}
		ev = e
	case MethodTurnEnd:
		ev, err = decode[TurnEnd](raw)
	case MethodRunEnd:
		var e RunEnd
		e, err = decode[RunEnd](raw)
		e.ToolCalls = nonNil(e.ToolCalls)
		ev = e
	}
	if err != nil {
		return nil, err
	}
	return ev, nil
}

func decode[T Event](raw json.RawMessage) (T, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, invalid("%s: %v", v.Method(), err)
	}
	return v, nil
}

// object decodes one JSON object and nothing after it.
func object(b []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil {
		return nil, invalid("%v", err)
	}
	if obj == nil {
		return nil, invalid("not an object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid("trailing data after the object")
	}
	return obj, nil
}

func str(obj map[string]json.RawMessage, key string, dst *string) error {
	raw, ok := obj[key]
	if !ok {
		return invalid("%s is missing", key)
	}
	if err := json.Unmarshal(raw, dst); err != nil || string(raw) == "null" {
		return invalid("%s must be a string", key)
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidLine, fmt.Sprintf(format, args...))
}
