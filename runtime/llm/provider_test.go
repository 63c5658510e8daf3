package llm_test

import (
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
)

func TestMessageJSON(t *testing.T) {
	msgs := []llm.Message{
		llm.UserText("list files"),
		{Role: llm.RoleAssistant, Text: "Let me look.", Reasoning: "need ls",
			ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "list_dir", Arguments: json.RawMessage(`{"path":"."}`)}}},
		llm.ToolMessage(llm.ToolResult{CallID: "call_1", Name: "list_dir", Content: "a.txt", IsError: false}),
	}
	data, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	const want = `[{"role":"user","text":"list files"},` +
		`{"role":"assistant","text":"Let me look.","reasoning":"need ls","toolCalls":[{"id":"call_1","name":"list_dir","arguments":{"path":"."}}]},` +
		`{"role":"tool","toolResult":{"callId":"call_1","name":"list_dir","content":"a.txt","isError":false}}]`
	if string(data) != want {
		t.Errorf("JSON =\n%s\nwant\n%s", data, want)
	}
	var back []llm.Message
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, msgs) {
		t.Errorf("round trip = %+v, want %+v", back, msgs)
	}
}

// sliceStream plays fixed chunks and then err (io.EOF when nil).
type sliceStream struct {
	chunks []llm.Chunk
	err    error
	closed bool
}

func (s *sliceStream) Next() (llm.Chunk, error) {
	if len(s.chunks) == 0 {
		if s.err != nil {
			return llm.Chunk{}, s.err
		}
		return llm.Chunk{}, io.EOF
	}
	c := s.chunks[0]
	s.chunks = s.chunks[1:]
	return c, nil
}

func (s *sliceStream) Close() error { s.closed = true; return nil }

func TestCollect(t *testing.T) {
	call := llm.ToolCall{ID: "c1", Name: "shell", Arguments: json.RawMessage(`{}`)}
	s := &sliceStream{chunks: []llm.Chunk{
		{Kind: llm.ChunkReasoning, Text: "think "},
		{Kind: llm.ChunkText, Text: "Hello "},
		{Kind: llm.ChunkReasoning, Text: "more"},
		{Kind: llm.ChunkText, Text: "world"},
		{Kind: llm.ChunkToolCall, ToolCall: call},
		{Kind: llm.ChunkUsage, Usage: llm.Usage{InputTokens: 3, OutputTokens: 4}},
		{Kind: llm.ChunkStop, StopReason: llm.StopToolUse},
	}}
	got, err := llm.Collect(s)
	if err != nil {
		t.Fatal(err)
	}
	want := llm.Response{Text: "Hello world", Reasoning: "think more", ToolCalls: []llm.ToolCall{call},
		Usage: llm.Usage{InputTokens: 3, OutputTokens: 4}, StopReason: llm.StopToolUse}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Collect = %+v, want %+v", got, want)
	}
	if !s.closed {
		t.Error("Collect did not close the stream")
	}

	boom := llm.NewError("vendor", 502, "bad gateway")
	got, err = llm.Collect(&sliceStream{chunks: []llm.Chunk{{Kind: llm.ChunkText, Text: "par"}}, err: boom})
	if !errors.Is(err, boom) || got.Text != "par" {
		t.Errorf("Collect on failure = %+v, %v", got, err)
	}
}

func TestNewError(t *testing.T) {
	err := llm.NewError("openai", 429, "rate limited: %s", "slow down")
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errcode.ProviderError || e.Msg != "rate limited: slow down" ||
		e.Data["provider"] != "openai" || e.Data["status"] != 429 {
		t.Errorf("NewError = %#v", err)
	}
}

func TestEstimates(t *testing.T) {
	if got := llm.EstimateTokens(""); got != 0 {
		t.Errorf("EstimateTokens(\"\") = %d", got)
	}
	if got := llm.EstimateTokens("12345"); got != 2 {
		t.Errorf("EstimateTokens(5 bytes) = %d, want 2", got)
	}
	req := llm.Request{System: "sys!", Messages: []llm.Message{llm.UserText("abcd")}}
	if got := llm.EstimateRequestTokens(req); got != 3 { // 4 + len("user") + 4 = 12 bytes
		t.Errorf("EstimateRequestTokens = %d, want 3", got)
	}
	// An image counts as a screenshot's tokens, not as its bytes.
	shot := llm.ToolMessage(llm.ToolResult{CallID: "c", Name: "b", Images: []llm.Image{{MediaType: "image/png", Data: make([]byte, 1<<20)}}})
	text := llm.ToolMessage(llm.ToolResult{CallID: "c", Name: "b"})
	withImage := llm.EstimateRequestTokens(llm.Request{Messages: []llm.Message{shot}})
	without := llm.EstimateRequestTokens(llm.Request{Messages: []llm.Message{text}})
	if d := withImage - without; d < 1000 || d > 3000 {
		t.Errorf("an image adds %d tokens to the estimate, want a screenshot's (1000 to 3000)", d)
	}
}

func TestChunkKindString(t *testing.T) {
	if got := llm.ChunkToolCall.String(); got != "tool_call" {
		t.Errorf("String = %q", got)
	}
	if got := llm.ChunkKind(99).String(); got != "ChunkKind(99)" {
		t.Errorf("String = %q", got)
	}
}
