package providertest

import "fmt"

// AnthropicStream builds one Messages stream the way Anthropic sends it:
// message_start with the input usage, content blocks (thinking with its
// signature, text, tool_use whose input arrives as input_json_delta pieces)
// each opened, filled and stopped, pings between them, then message_delta
// with the stop reason and the output usage, then message_stop.
type AnthropicStream struct {
	events []Event
	index  int
}

// NewAnthropicStream starts a stream for model whose prompt counted
// inputTokens.
func NewAnthropicStream(model string, inputTokens int) *AnthropicStream {
	return NewAnthropicCachedStream(model, inputTokens, 0, 0)
}

// NewAnthropicCachedStream starts a stream for model whose prompt counted
// inputTokens outside the prompt cache, cacheWrite tokens written to it
// and cacheRead tokens read from it (Anthropic counts the three apart).
func NewAnthropicCachedStream(model string, inputTokens, cacheWrite, cacheRead int) *AnthropicStream {
	a := &AnthropicStream{}
	a.add("message_start", fmt.Sprintf(
		`{"type":"message_start","message":{"id":"msg_01Test","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"cache_creation":{"ephemeral_5m_input_tokens":%d,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard"}}}`,
		model, inputTokens, cacheWrite, cacheRead, cacheWrite))
	return a
}

func (a *AnthropicStream) add(name, data string) *AnthropicStream {
	a.events = append(a.events, Event{Name: name, Data: data})
	return a
}

func (a *AnthropicStream) block(start string, deltas ...string) *AnthropicStream {
	i := a.index
	a.index++
	a.add("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":%s}`, i, start))
	for _, d := range deltas {
		a.add("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":%s}`, i, d))
	}
	return a.add("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i))
}

// Ping adds a ping event.
func (a *AnthropicStream) Ping() *AnthropicStream { return a.add("ping", `{"type": "ping"}`) }

// Thinking adds a thinking block streamed in parts, then its signature.
func (a *AnthropicStream) Thinking(parts ...string) *AnthropicStream {
	var deltas []string
	for _, p := range parts {
		deltas = append(deltas, fmt.Sprintf(`{"type":"thinking_delta","thinking":%s}`, quote(p)))
	}
	deltas = append(deltas, `{"type":"signature_delta","signature":"EqQBCgIYAhIMtestsignature"}`)
	return a.block(`{"type":"thinking","thinking":"","signature":""}`, deltas...)
}

// Text adds a text block streamed in parts.
func (a *AnthropicStream) Text(parts ...string) *AnthropicStream {
	var deltas []string
	for _, p := range parts {
		deltas = append(deltas, fmt.Sprintf(`{"type":"text_delta","text":%s}`, quote(p)))
	}
	return a.block(`{"type":"text","text":""}`, deltas...)
}

// ToolUse adds a tool_use block whose input arrives in fragments (the first
// delta is empty, as Anthropic sends it).
func (a *AnthropicStream) ToolUse(id, name string, fragments ...string) *AnthropicStream {
	deltas := []string{`{"type":"input_json_delta","partial_json":""}`}
	for _, f := range fragments {
		deltas = append(deltas, fmt.Sprintf(`{"type":"input_json_delta","partial_json":%s}`, quote(f)))
	}
	return a.block(fmt.Sprintf(`{"type":"tool_use","id":%q,"name":%q,"input":{}}`, id, name), deltas...)
}

// Events returns the events so far.
func (a *AnthropicStream) Events() []Event { return append([]Event(nil), a.events...) }

// Reply ends the stream: message_delta with stopReason and outputTokens,
// then message_stop.
func (a *AnthropicStream) Reply(stopReason string, outputTokens int) Reply {
	a.add("message_delta", fmt.Sprintf(
		`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, stopReason, outputTokens))
	a.add("message_stop", `{"type":"message_stop"}`)
	return Reply{Events: a.Events()}
}

// AnthropicError is an error reply in Anthropic's shape.
func AnthropicError(status int, typ, message string, header map[string]string) Reply {
	return Reply{Status: status, Header: header, Body: fmt.Sprintf(
		`{"type":"error","error":{"type":%q,"message":%s},"request_id":"req_011Test"}`, typ, quote(message))}
}

// AnthropicStreamError is the error event Anthropic sends inside a stream
// (e.g. overloaded_error).
func AnthropicStreamError(typ, message string) Event {
	return Event{Name: "error", Data: fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":%s}}`, typ, quote(message))}
}

// SplitEvery cuts s into pieces of n bytes, to stream text or JSON in the
// small fragments vendors use.
func SplitEvery(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	if s != "" || len(out) == 0 {
		out = append(out, s)
	}
	return out
}
