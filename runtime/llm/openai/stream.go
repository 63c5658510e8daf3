package openai

import (
	"context"
	"encoding/json"
	"io"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/trellis-run/trellis/runtime/llm"
)

// reasoningFields are the delta fields that carry reasoning text:
// reasoning_content (DeepSeek, vLLM, llama.cpp) and reasoning (OpenRouter,
// newer vLLM).
var reasoningFields = []string{"reasoning_content", "reasoning"}

// stream turns Chat Completions chunks into llm chunks. Text and reasoning
// pass through as they come; tool calls are assembled from their fragments
// (keyed by index, a new id at an index starting a new call) and yielded at
// the end with the usage and the stop reason.
type stream struct {
	p   *Provider
	ctx context.Context
	sdk *ssestream.Stream[sdk.ChatCompletionChunk]

	pending []llm.Chunk
	calls   map[int64]*callBuilder
	order   []*callBuilder
	usage   *llm.Usage
	finish  string
	got     bool // a chunk arrived
	done    bool // the end is queued
	err     error
}

type callBuilder struct {
	id, name string
	args     strings.Builder
}

func (s *stream) Next() (llm.Chunk, error) {
	for len(s.pending) == 0 {
		if s.err != nil {
			return llm.Chunk{}, s.err
		}
		if s.done {
			return llm.Chunk{}, io.EOF
		}
		if !s.sdk.Next() {
			if err := s.sdk.Err(); err != nil {
				s.err = s.p.streamError(s.ctx, err)
			} else {
				s.err = s.end()
			}
			s.done = true
			continue
		}
		s.absorb(s.sdk.Current())
	}
	c := s.pending[0]
	s.pending = s.pending[1:]
	return c, nil
}

func (s *stream) Close() error { return s.sdk.Close() }

func (s *stream) absorb(chunk sdk.ChatCompletionChunk) {
	s.got = true
	if chunk.JSON.Usage.Valid() {
		s.usage = &llm.Usage{InputTokens: int(chunk.Usage.PromptTokens), OutputTokens: int(chunk.Usage.CompletionTokens)}
	}
	for _, choice := range chunk.Choices {
		if choice.Index != 0 {
			continue // we ask for one choice
		}
		d := choice.Delta
		for _, field := range reasoningFields {
			if text := extraText(d.JSON.ExtraFields, field); text != "" {
				s.pending = append(s.pending, llm.Chunk{Kind: llm.ChunkReasoning, Text: text})
				break
			}
		}
		if d.Content != "" {
			s.pending = append(s.pending, llm.Chunk{Kind: llm.ChunkText, Text: d.Content})
		}
		if d.Refusal != "" {
			s.pending = append(s.pending, llm.Chunk{Kind: llm.ChunkText, Text: d.Refusal})
		}
		for _, tc := range d.ToolCalls {
			b := s.call(tc)
			if b.id == "" {
				b.id = tc.ID
			}
			if b.name == "" {
				b.name = tc.Function.Name
			}
			b.args.WriteString(tc.Function.Arguments)
		}
		if choice.FinishReason != "" {
			s.finish = choice.FinishReason
		}
	}
}

// call returns the builder a fragment belongs to.
func (s *stream) call(tc sdk.ChatCompletionChunkChoiceDeltaToolCall) *callBuilder {
	b := s.calls[tc.Index]
	if b == nil || (tc.ID != "" && b.id != "" && tc.ID != b.id) {
		b = &callBuilder{}
		s.calls[tc.Index] = b
		s.order = append(s.order, b)
	}
	return b
}

// end queues the tool calls, the usage and the stop chunk, or returns why
// the stream cannot be trusted.
func (s *stream) end() error {
	if !s.got {
		return llm.Transient(llm.NewError(Vendor, 0, "%s: the server ended the stream without sending anything", s.p.label), 0)
	}
	if s.finish == "content_filter" {
		return llm.NewError(Vendor, 0, "%s: the answer was withheld by the provider's content filter", s.p.label)
	}
	for _, b := range s.order {
		args := strings.TrimSpace(b.args.String())
		if args == "" {
			args = "{}"
		}
		s.pending = append(s.pending, llm.Chunk{Kind: llm.ChunkToolCall,
			ToolCall: llm.ToolCall{ID: b.id, Name: b.name, Arguments: json.RawMessage(args)}})
	}
	if s.usage != nil {
		s.pending = append(s.pending, llm.Chunk{Kind: llm.ChunkUsage, Usage: *s.usage})
	}
	s.pending = append(s.pending, llm.Chunk{Kind: llm.ChunkStop, StopReason: s.stopReason()})
	return nil
}

func (s *stream) stopReason() llm.StopReason {
	switch s.finish {
	case "tool_calls", "function_call":
		return llm.StopToolUse
	case "length":
		return llm.StopLength
	case "stop":
		return llm.StopEnd
	}
	if len(s.order) > 0 {
		return llm.StopToolUse
	}
	return llm.StopEnd
}

// extraText decodes a string field the SDK does not know ("" when absent,
// null or not a string).
func extraText(fields map[string]respjson.Field, name string) string {
	f, ok := fields[name]
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal([]byte(f.Raw()), &s) != nil {
		return ""
	}
	return s
}
