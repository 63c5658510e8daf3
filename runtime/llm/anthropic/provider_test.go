package anthropic_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/anthropic"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
)

const testKey = "sk-ant-api03-test0123456789"

type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.d = append(w.d, d)
	w.mu.Unlock()
	return ctx.Err()
}

func newProvider(t *testing.T, srv *providertest.Server, w *waits) *anthropic.Provider {
	t.Helper()
	if w == nil {
		w = &waits{}
	}
	return anthropic.New(anthropic.Config{APIKey: testKey, BaseURL: srv.URL, Retry: llm.RetryPolicy{Sleep: w.sleep}})
}

func TestStreamAssemblesToolUseThinkingAndUsage(t *testing.T) {
	reply := providertest.NewAnthropicStream("claude-sonnet-4-5-20250929", 472).
		Thinking("The user wants ", "a listing.").Ping().
		Text("Let me ", "look.").
		ToolUse("toolu_A", "list_dir", providertest.SplitEvery(`{"path": "src"}`, 4)...).
		ToolUse("toolu_B", "read_file", `{"path":"go.mod"}`).
		Reply("tool_use", 89)
	srv := providertest.NewServer(t, reply)
	req := llm.Request{
		System: "You are Trellis.",
		Messages: []llm.Message{
			llm.UserText("what is here?"),
			{Role: llm.RoleAssistant, Text: "Checking.", Reasoning: "not sent back", ToolCalls: []llm.ToolCall{
				{ID: "toolu_0", Name: "list_dir", Arguments: json.RawMessage(`{"path":"."}`)},
				{ID: "toolu_1", Name: "shell", Arguments: json.RawMessage(`{"command":"false"}`)},
			}},
			llm.ToolMessage(llm.ToolResult{CallID: "toolu_0", Name: "list_dir", Content: "src/"}),
			llm.ToolMessage(llm.ToolResult{CallID: "toolu_1", Name: "shell", Content: "exit 1", IsError: true}),
			llm.UserText("and in src?"),
		},
		Tools: []llm.ToolSpec{{Name: "list_dir", Description: "List a directory.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`)}},
	}
	s, err := newProvider(t, srv, nil).Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := llm.Collect(s)
	if err != nil {
		t.Fatal(err)
	}
	want := llm.Response{
		Text: "Let me look.", Reasoning: "The user wants a listing.",
		ToolCalls: []llm.ToolCall{
			{ID: "toolu_A", Name: "list_dir", Arguments: json.RawMessage(`{"path": "src"}`)},
			{ID: "toolu_B", Name: "read_file", Arguments: json.RawMessage(`{"path":"go.mod"}`)},
		},
		Usage: llm.Usage{InputTokens: 472, OutputTokens: 89}, StopReason: llm.StopToolUse,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("response =\n%+v\nwant\n%+v", got, want)
	}

	r := srv.Requests()[0]
	// anthropic-sdk-go v2 sends the API key as a bearer token.
	if r.Path != "/v1/messages" || r.Header.Get("Authorization") != "Bearer "+testKey || r.Header.Get("Anthropic-Version") == "" {
		t.Errorf("request %s, authorization %q, anthropic-version %q", r.Path, r.Header.Get("Authorization"), r.Header.Get("Anthropic-Version"))
	}
	wantBody := `{
	  "max_tokens": 8192,
	  "model": "claude-sonnet-4-5",
	  "stream": true,
	  "system": [{"type":"text","text":"You are Trellis."}],
	  "messages": [
	    {"role":"user","content":[{"type":"text","text":"what is here?"}]},
	    {"role":"assistant","content":[
	      {"type":"text","text":"Checking."},
	      {"type":"tool_use","id":"toolu_0","name":"list_dir","input":{"path":"."}},
	      {"type":"tool_use","id":"toolu_1","name":"shell","input":{"command":"false"}}]},
	    {"role":"user","content":[
	      {"type":"tool_result","tool_use_id":"toolu_0","content":[{"type":"text","text":"src/"}],"is_error":false},
	      {"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"exit 1"}],"is_error":true},
	      {"type":"text","text":"and in src?"}]}
	  ],
	  "tools": [{"name":"list_dir","description":"List a directory.",
	    "input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}}]
	}`
	var wantJSON map[string]any
	if err := json.Unmarshal([]byte(wantBody), &wantJSON); err != nil {
		t.Fatal(err)
	}
	if body := r.JSON(); !reflect.DeepEqual(body, wantJSON) {
		gotJSON, _ := json.MarshalIndent(body, "", "  ")
		t.Errorf("request body =\n%s", gotJSON)
	}
}

func TestRetries(t *testing.T) {
	ok := providertest.NewAnthropicStream("claude-sonnet-4-5", 10).Text("fine").Reply("end_turn", 2)
	tests := []struct {
		name     string
		replies  []providertest.Reply
		requests int
		waitsMin []time.Duration
		status   int
		msg      []string
	}{
		{name: "529 overloaded then success", requests: 2, waitsMin: []time.Duration{250 * time.Millisecond},
			replies: []providertest.Reply{providertest.AnthropicError(529, "overloaded_error", "Overloaded", nil), ok}},
		{name: "429 honours Retry-After", requests: 2, waitsMin: []time.Duration{3 * time.Second},
			replies: []providertest.Reply{providertest.AnthropicError(429, "rate_limit_error", "Number of requests has exceeded your rate limit",
				map[string]string{"Retry-After": "3"}), ok}},
		{name: "overloaded event before the first token", requests: 2, waitsMin: []time.Duration{250 * time.Millisecond},
			replies: []providertest.Reply{{Events: append(providertest.NewAnthropicStream("claude-sonnet-4-5", 10).Events(),
				providertest.AnthropicStreamError("overloaded_error", "Overloaded"))}, ok}},
		{name: "cut before the first token", requests: 2, waitsMin: []time.Duration{250 * time.Millisecond},
			replies: []providertest.Reply{{Events: providertest.NewAnthropicStream("claude-sonnet-4-5", 10).Events(), Cut: true}, ok}},
		{name: "401 is not retried", requests: 1, status: 401,
			replies: []providertest.Reply{providertest.AnthropicError(401, "authentication_error", "invalid x-api-key", nil)},
			msg:     []string{"anthropic (127.0.0.1", "HTTP 401 Unauthorized: invalid x-api-key"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := providertest.NewServer(t, tc.replies...)
			w := &waits{}
			s, err := newProvider(t, srv, w).Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
			if n := len(srv.Requests()); n != tc.requests {
				t.Errorf("%d requests, want %d", n, tc.requests)
			}
			for i, min := range tc.waitsMin {
				if i >= len(w.d) || w.d[i] < min || w.d[i] > 2*min+time.Second {
					t.Errorf("waits %v, want wait %d ≥ %v", w.d, i, min)
				}
			}
			if tc.status == 0 {
				if err != nil {
					t.Fatal(err)
				}
				got, err := llm.Collect(s)
				if err != nil || got.Text != "fine" || got.Usage != (llm.Usage{InputTokens: 10, OutputTokens: 2}) || got.StopReason != llm.StopEnd {
					t.Fatalf("after retry: %+v, %v", got, err)
				}
				return
			}
			var e *errs.Error
			if !errors.As(err, &e) || e.Code != errcode.ProviderError || e.Data["status"] != tc.status || e.Data["provider"] != "anthropic" {
				t.Fatalf("error %#v, want provider_error status %d", err, tc.status)
			}
			for _, m := range tc.msg {
				if !strings.Contains(e.Msg, m) {
					t.Errorf("message %q lacks %q", e.Msg, m)
				}
			}
		})
	}
}

func TestContextWindowFull(t *testing.T) {
	srv := providertest.NewServer(t, providertest.AnthropicError(400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum", nil))
	_, err := newProvider(t, srv, nil).Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
	if !errors.Is(err, llm.ErrContextWindowFull) || !strings.Contains(err.Error(), "/compact") || !strings.Contains(err.Error(), "208310") {
		t.Fatalf("error %v, want ErrContextWindowFull", err)
	}
}

func TestFailuresAfterTheFirstToken(t *testing.T) {
	start := func() *providertest.AnthropicStream {
		return providertest.NewAnthropicStream("claude-sonnet-4-5", 10).Text("par")
	}
	tests := map[string]struct {
		reply providertest.Reply
		msg   string
	}{
		"overloaded event": {providertest.Reply{Events: append(start().Events(), providertest.AnthropicStreamError("overloaded_error", "Overloaded"))},
			"mid-stream (overloaded_error): Overloaded"},
		"cut":             {providertest.Reply{Events: start().Events(), Cut: true}, "connection to the model server failed"},
		"no message_stop": {providertest.Reply{Events: start().Events()}, "before the answer was complete"},
		"refusal":         {start().Reply("refusal", 3), "declined"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := providertest.NewServer(t, tc.reply)
			s, err := newProvider(t, srv, nil).Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
			if err != nil {
				t.Fatal(err)
			}
			got, err := llm.Collect(s)
			if got.Text != "par" || errs.CodeOf(err) != errcode.ProviderError || !strings.Contains(err.Error(), tc.msg) || llm.IsTransient(err) {
				t.Fatalf("got %+v, %v; want the text so far and a final provider_error saying %q", got, err, tc.msg)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests", n)
			}
		})
	}
}

func TestInterruptClosesTheRequest(t *testing.T) {
	// The SDK's own environment defaults must not override the config.
	t.Setenv("ANTHROPIC_API_KEY", "sk-from-the-environment")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	srv := providertest.NewServer(t, providertest.Reply{
		Events: providertest.NewAnthropicStream("claude-sonnet-4-5", 10).Text("thinking...").Events()[:3], Hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := newProvider(t, srv, nil).Stream(ctx, llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if c, err := s.Next(); err != nil || c.Text != "thinking..." {
		t.Fatalf("first chunk %+v, %v", c, err)
	}
	if auth := srv.Requests()[0].Header.Get("Authorization"); auth != "Bearer "+testKey {
		t.Errorf("Authorization %q", auth)
	}
	cancel()
	if _, err := s.Next(); !errors.Is(err, context.Canceled) {
		t.Errorf("Next after cancel: %v", err)
	}
	select {
	case <-srv.ClientGone():
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not see the request end")
	}
}

func TestModels(t *testing.T) {
	p := anthropic.New(anthropic.Config{BaseURL: "https://proxy.example.com/v1/"})
	if p.Name() != "anthropic" || p.DefaultModel() != anthropic.DefaultModel || len(p.Models()) < 2 {
		t.Errorf("name %q default %q models %v", p.Name(), p.DefaultModel(), p.Models())
	}
	if p.ContextWindow("claude-opus-4-1") != 200000 || p.ContextWindow("") != 200000 || p.ContextWindow("other") != 0 {
		t.Error("context windows")
	}
	if w := anthropic.New(anthropic.Config{ContextWindow: 1000000}).ContextWindow("claude-sonnet-4-5"); w != 1000000 {
		t.Errorf("configured window ignored: %d", w)
	}
}

// TestEffort: llm.Request.Effort becomes an extended-thinking budget, with
// max_tokens above it.
func TestEffort(t *testing.T) {
	for effort, budget := range map[string]float64{"medium": 8192, "max": 32768} {
		srv := providertest.NewServer(t, providertest.NewAnthropicStream("claude-sonnet-4-5-20250929", 5).Text("ok").Reply("end_turn", 1))
		p := newProvider(t, srv, nil)
		s, err := p.Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}, Effort: effort, MaxTokens: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := llm.Collect(s); err != nil {
			t.Fatal(err)
		}
		body := srv.WaitRequests(t, 1, 30*time.Second)[0].JSON()
		thinking, _ := body["thinking"].(map[string]any)
		if thinking["type"] != "enabled" || thinking["budget_tokens"] != budget {
			t.Fatalf("effort %s: thinking = %v", effort, body["thinking"])
		}
		if mt, _ := body["max_tokens"].(float64); mt <= budget {
			t.Fatalf("effort %s: max_tokens %v is not above the budget", effort, body["max_tokens"])
		}
	}
}

// TestCachedUsage: the prompt cache's reads and writes, which Anthropic
// counts apart from input_tokens, are in InputTokens and each in its own
// field.
func TestCachedUsage(t *testing.T) {
	srv := providertest.NewServer(t, providertest.NewAnthropicCachedStream("claude-sonnet-4-5", 12, 2048, 30000).Text("ok").Reply("end_turn", 7))
	s, err := newProvider(t, srv, nil).Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := llm.Collect(s)
	if err != nil {
		t.Fatal(err)
	}
	want := llm.Usage{InputTokens: 12 + 2048 + 30000, OutputTokens: 7, CacheReadTokens: 30000, CacheWriteTokens: 2048}
	if got.Usage != want {
		t.Errorf("usage %+v, want %+v", got.Usage, want)
	}
}

// A tool result's images travel inside its tool_result block as base64
// image blocks after the text.
func TestToolResultImages(t *testing.T) {
	srv := providertest.NewServer(t, providertest.NewAnthropicStream("claude-sonnet-4-5-20250929", 5).Text("ok").Reply("end_turn", 1))
	p := newProvider(t, srv, nil)
	msgs := []llm.Message{
		llm.UserText("look"),
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "browser", Arguments: json.RawMessage(`{"action":"screenshot"}`)}}},
		llm.ToolMessage(llm.ToolResult{CallID: "c1", Name: "browser", Content: "a screenshot", Images: []llm.Image{{MediaType: "image/png", Data: []byte("PNG")}}}),
	}
	s, err := p.Stream(context.Background(), llm.Request{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := llm.Collect(s); err != nil {
		t.Fatal(err)
	}
	body := srv.WaitRequests(t, 1, 30*time.Second)[0].JSON()
	sent, _ := body["messages"].([]any)
	blocks, _ := sent[2].(map[string]any)["content"].([]any)
	result, _ := blocks[0].(map[string]any)
	content, _ := result["content"].([]any)
	if result["type"] != "tool_result" || len(content) != 2 {
		t.Fatalf("tool result block = %v", result)
	}
	src, _ := content[1].(map[string]any)["source"].(map[string]any)
	if src["type"] != "base64" || src["media_type"] != "image/png" || src["data"] != base64.StdEncoding.EncodeToString([]byte("PNG")) {
		t.Fatalf("image block = %v", content[1])
	}
}
