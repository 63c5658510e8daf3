package providertest

import (
	"encoding/json"
	"fmt"
)

// OpenAIStream builds one Chat Completions stream the way OpenAI sends it
// with stream_options.include_usage: every chunk carries "usage":null, the
// first delta names the role, tool calls arrive as an opening fragment
// (index, id, name, empty arguments) then argument pieces, the finish reason
// comes in a chunk with an empty delta, the usage in a last chunk with no
// choices, then [DONE].
type OpenAIStream struct {
	id, model string
	events    []Event
}

// NewOpenAIStream starts a stream for model with its role chunk.
func NewOpenAIStream(model string) *OpenAIStream {
	o := &OpenAIStream{id: "chatcmpl-Test123", model: model}
	return o.delta(`{"role":"assistant","content":"","refusal":null}`, "null")
}

func (o *OpenAIStream) chunk(choices, usage string) *OpenAIStream {
	o.events = append(o.events, Event{Data: fmt.Sprintf(
		`{"id":%q,"object":"chat.completion.chunk","created":1733000000,"model":%q,"service_tier":"default","system_fingerprint":"fp_test","choices":%s,"usage":%s,"obfuscation":"xyz"}`,
		o.id, o.model, choices, usage)})
	return o
}

func (o *OpenAIStream) delta(delta, finish string) *OpenAIStream {
	return o.chunk(fmt.Sprintf(`[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]`, delta, finish), "null")
}

// Reasoning adds a reasoning_content delta, as DeepSeek, vLLM and llama.cpp
// send it (content is null in such chunks).
func (o *OpenAIStream) Reasoning(text string) *OpenAIStream {
	return o.delta(fmt.Sprintf(`{"content":null,"reasoning_content":%s}`, quote(text)), "null")
}

// Text adds a content delta.
func (o *OpenAIStream) Text(text string) *OpenAIStream {
	return o.delta(fmt.Sprintf(`{"content":%s}`, quote(text)), "null")
}

// ToolCall opens tool call number index.
func (o *OpenAIStream) ToolCall(index int, id, name string) *OpenAIStream {
	return o.delta(fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":%q,"type":"function","function":{"name":%q,"arguments":""}}]}`,
		index, id, name), "null")
}

// ToolArgs adds a fragment of the arguments of tool call number index.
func (o *OpenAIStream) ToolArgs(index int, fragment string) *OpenAIStream {
	return o.delta(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}`, index, quote(fragment)), "null")
}

// Finish adds the chunk carrying the finish reason ("stop", "tool_calls",
// "length", "content_filter").
func (o *OpenAIStream) Finish(reason string) *OpenAIStream {
	return o.delta(`{}`, quote(reason))
}

// Usage adds the usage chunk.
func (o *OpenAIStream) Usage(prompt, completion int) *OpenAIStream {
	return o.CachedUsage(prompt, 0, completion, 0)
}

// CachedUsage adds the usage chunk of a call that read cached of its
// prompt tokens from the prompt cache and spent reasoning of its
// completion tokens reasoning.
func (o *OpenAIStream) CachedUsage(prompt, cached, completion, reasoning int) *OpenAIStream {
	return o.chunk("[]", fmt.Sprintf(
		`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":%d,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`,
		prompt, completion, prompt+completion, cached, reasoning))
}

// Events returns the events so far, without [DONE].
func (o *OpenAIStream) Events() []Event { return append([]Event(nil), o.events...) }

// Reply ends the stream with [DONE].
func (o *OpenAIStream) Reply() Reply {
	return Reply{Events: append(o.Events(), Event{Data: "[DONE]"})}
}

// OpenAIError is an error reply in OpenAI's shape.
func OpenAIError(status int, message, typ, code string, header map[string]string) Reply {
	c := "null"
	if code != "" {
		c = quote(code)
	}
	return Reply{Status: status, Header: header,
		Body: fmt.Sprintf(`{"error":{"message":%s,"type":%q,"param":null,"code":%s}}`, quote(message), typ, c)}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
