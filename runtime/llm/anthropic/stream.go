package anthropic

import (
	"context"
	"encoding/json"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/trellis-run/trellis/runtime/llm"
)

// stream turns Messages events into llm chunks: text and thinking deltas
// pass through as they come, a tool_use block becomes one tool call when it
// stops, and message_stop ends the stream with the usage and stop reason.
type stream struct {
	p   *Provider
	ctx context.Context
	sdk *ssestream.Stream[sdk.MessageStreamEventUnion]

	llm.ChunkQueue
	tools map[int64]*toolBlock // open tool_use blocks by index
	calls int
	usage llm.Usage
	stop  string
	got   bool // an event arrived
}

type toolBlock struct {
	id, name string
	start    string // the input the block opened with
	input    strings.Builder
}

func (s *stream) Next() (llm.Chunk, error) {
	return s.Pop(func() {
		if s.sdk.Next() {
			s.Fail(s.absorb(s.sdk.Current()))
			return
		}
		if err := s.sdk.Err(); err != nil {
			s.Fail(s.p.streamError(s.ctx, err))
			return
		}
		// No message_stop: the connection ended early.
		what := "before the answer was complete"
		if !s.got {
			what = "without sending anything"
		}
		s.Fail(llm.Transient(llm.NewError(Vendor, 0, "%s: the server ended the stream %s", s.p.label, what), 0))
	})
}

func (s *stream) Close() error { return s.sdk.Close() }

// emitText emits a text or reasoning chunk unless text is empty.
func (s *stream) emitText(kind llm.ChunkKind, text string) {
	if text != "" {
		s.Push(llm.Chunk{Kind: kind, Text: text})
	}
}

func (s *stream) absorb(ev sdk.MessageStreamEventUnion) error {
	s.got = true
	switch ev.Type {
	case "message_start":
		u := ev.Message.Usage
		s.usage = llm.Usage{
			InputTokens:      int(u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens),
			OutputTokens:     int(u.OutputTokens),
			CacheReadTokens:  int(u.CacheReadInputTokens),
			CacheWriteTokens: int(u.CacheCreationInputTokens),
		}
	case "content_block_start":
		b := ev.ContentBlock
		switch b.Type {
		case "text":
			s.emitText(llm.ChunkText, b.Text)
		case "thinking":
			s.emitText(llm.ChunkReasoning, b.Thinking)
		case "tool_use":
			s.tools[ev.Index] = &toolBlock{id: b.ID, name: b.Name, start: b.JSON.Input.Raw()}
		}
	case "content_block_delta":
		d := ev.Delta
		switch d.Type {
		case "text_delta":
			s.emitText(llm.ChunkText, d.Text)
		case "thinking_delta":
			s.emitText(llm.ChunkReasoning, d.Thinking)
		case "input_json_delta":
			if b := s.tools[ev.Index]; b != nil {
				b.input.WriteString(d.PartialJSON)
			}
		}
	case "content_block_stop":
		if b := s.tools[ev.Index]; b != nil {
			delete(s.tools, ev.Index)
			s.Push(llm.Chunk{Kind: llm.ChunkToolCall, ToolCall: llm.ToolCall{ID: b.id, Name: b.name, Arguments: b.arguments()}})
			s.calls++
		}
	case "message_delta":
		if ev.Delta.StopReason != "" {
			s.stop = string(ev.Delta.StopReason)
		}
		u := ev.Usage
		// message_delta's counts are cumulative; the input ones are sent
		// by newer API versions only.
		if u.JSON.InputTokens.Valid() && u.InputTokens > 0 {
			s.usage.InputTokens = int(u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens)
			s.usage.CacheReadTokens = int(u.CacheReadInputTokens)
			s.usage.CacheWriteTokens = int(u.CacheCreationInputTokens)
		}
		if u.JSON.OutputTokens.Valid() {
			s.usage.OutputTokens = int(u.OutputTokens)
		}
	case "message_stop":
		return s.end()
	}
	return nil
}

// arguments is the assembled input; a block whose input came whole in its
// start event (as some compatible servers send it) keeps that.
func (b *toolBlock) arguments() json.RawMessage {
	in := strings.TrimSpace(b.input.String())
	if in == "" {
		in = strings.TrimSpace(b.start)
	}
	if in == "" || in == "null" {
		in = "{}"
	}
	return json.RawMessage(in)
}

// end queues the usage and the stop chunk.
func (s *stream) end() error {
	s.End()
	var stop llm.StopReason
	switch sdk.StopReason(s.stop) {
	case sdk.StopReasonToolUse:
		stop = llm.StopToolUse
	case sdk.StopReasonMaxTokens, sdk.StopReasonModelContextWindowExceeded:
		stop = llm.StopLength
	case sdk.StopReasonRefusal:
		return llm.NewError(Vendor, 0, "%s: the model declined to answer this request (stop reason: refusal)", s.p.label)
	default:
		stop = llm.StopEnd
		if s.calls > 0 {
			stop = llm.StopToolUse
		}
	}
	s.Push(llm.Chunk{Kind: llm.ChunkUsage, Usage: s.usage})
	s.Push(llm.Chunk{Kind: llm.ChunkStop, StopReason: stop})
	return nil
}
