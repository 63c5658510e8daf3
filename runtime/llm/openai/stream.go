package openai

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/trellis-run/trellis/runtime/llm"
)

// stream turns Chat Completions chunks into llm chunks. Text and reasoning
// pass through as they come; tool calls are assembled from their fragments
// (keyed by index, a new id at an index starting a new call) and yielded at
// the end with the usage and the stop reason.
type stream struct {
	p   *Provider
	ctx context.Context
	sdk *chunkReader

	llm.ChunkQueue
	calls  map[int64]*callBuilder
	order  []*callBuilder
	usage  *llm.Usage
	finish string
	got    bool // a chunk arrived
}

type callBuilder struct {
	id, name string
	args     strings.Builder
}

func (s *stream) Next() (llm.Chunk, error) {
	return s.Pop(func() {
		if s.sdk.Next() {
			s.absorb(s.sdk.Current())
			return
		}
		if err := s.sdk.Err(); err != nil {
			s.Fail(s.p.streamError(s.ctx, err))
		} else {
			s.Fail(s.end())
		}
		s.End()
	})
}

func (s *stream) Close() error { return s.sdk.Close() }

// leanChunk is the part of a Chat Completions chunk the stream reads
// (decodeLean, else encoding/json; see chunkReader).
type leanChunk struct {
	Choices []leanChoice `json:"choices"`
	Usage   *leanUsage   `json:"usage"`
}

// leanUsage is the part of a chunk's usage the stream reads.
type leanUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// Of the completion tokens, those spent reasoning (o-series, and
	// compatible servers that report them).
	CompletionDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
	// Of the prompt tokens, those read from OpenAI's prompt cache (which
	// writes the cache at no extra price, so reports no cache writes).
	PromptDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type leanChoice struct {
	Index int64 `json:"index"`
	Delta struct {
		Content          string         `json:"content"`
		Refusal          string         `json:"refusal"`
		ReasoningContent string         `json:"reasoning_content"`
		Reasoning        string         `json:"reasoning"`
		ToolCalls        []leanToolCall `json:"tool_calls"`
	} `json:"delta"`
	FinishReason string `json:"finish_reason"`
}

type leanToolCall struct {
	Index    int64  `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func (s *stream) absorb(chunk leanChunk) {
	s.got = true
	if chunk.Usage != nil {
		s.usage = &llm.Usage{InputTokens: int(chunk.Usage.PromptTokens), OutputTokens: int(chunk.Usage.CompletionTokens),
			ReasoningTokens: int(chunk.Usage.CompletionDetails.ReasoningTokens), CacheReadTokens: int(chunk.Usage.PromptDetails.CachedTokens)}
	}
	for _, choice := range chunk.Choices {
		if choice.Index != 0 {
			continue // we ask for one choice
		}
		d := choice.Delta
		// reasoning_content (DeepSeek, vLLM, llama.cpp) first, then
		// reasoning (OpenRouter, newer vLLM).
		if text := d.ReasoningContent; text != "" {
			s.Push(llm.Chunk{Kind: llm.ChunkReasoning, Text: text})
		} else if text := d.Reasoning; text != "" {
			s.Push(llm.Chunk{Kind: llm.ChunkReasoning, Text: text})
		}
		if d.Content != "" {
			s.Push(llm.Chunk{Kind: llm.ChunkText, Text: d.Content})
		}
		if d.Refusal != "" {
			s.Push(llm.Chunk{Kind: llm.ChunkText, Text: d.Refusal})
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
func (s *stream) call(tc leanToolCall) *callBuilder {
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
		s.Push(llm.Chunk{Kind: llm.ChunkToolCall,
			ToolCall: llm.ToolCall{ID: b.id, Name: b.name, Arguments: json.RawMessage(args)}})
	}
	if s.usage != nil {
		s.Push(llm.Chunk{Kind: llm.ChunkUsage, Usage: *s.usage})
	}
	s.Push(llm.Chunk{Kind: llm.ChunkStop, StopReason: s.stopReason()})
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
