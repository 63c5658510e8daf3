package openai_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/openai"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
)

const testKey = "sk-test-0123456789abcdef"

// waits records the retry waits instead of sleeping them.
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

func newProvider(t *testing.T, srv *providertest.Server, w *waits) *openai.Provider {
	t.Helper()
	if w == nil {
		w = &waits{}
	}
	return openai.New(openai.Config{APIKey: testKey, BaseURL: srv.URL + "/v1", Model: "gpt-4o",
		Retry: llm.RetryPolicy{Sleep: w.sleep}})
}

var listDir = llm.ToolSpec{Name: "list_dir", Description: "List a directory.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}

func TestStreamAssemblesToolCallsReasoningAndUsage(t *testing.T) {
	reply := providertest.NewOpenAIStream("gpt-4o").
		Reasoning("The user wants ").Reasoning("a listing.").
		Text("Let me ").Text("look.").
		ToolCall(0, "call_A", "list_dir").ToolArgs(0, `{"pa`).ToolArgs(0, `th": "`).ToolArgs(0, `src"}`).
		ToolCall(1, "call_B", "read_file").ToolArgs(1, `{"path":"go.mod"}`).
		Finish("tool_calls").Usage(82, 17).Reply()
	srv := providertest.NewServer(t, reply)
	p := newProvider(t, srv, nil)

	req := llm.Request{
		Model:  "gpt-4o-mini",
		System: "You are Trellis.",
		Messages: []llm.Message{
			llm.UserText("what is here?"),
			{Role: llm.RoleAssistant, Text: "Checking.", Reasoning: "not sent back",
				ToolCalls: []llm.ToolCall{{ID: "call_0", Name: "list_dir", Arguments: json.RawMessage(`{"path":"."}`)}}},
			llm.ToolMessage(llm.ToolResult{CallID: "call_0", Name: "list_dir", Content: "src/\ngo.mod"}),
			llm.UserText("and in src?"),
		},
		Tools:     []llm.ToolSpec{listDir},
		MaxTokens: 1000,
	}
	s, err := p.Stream(context.Background(), req)
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
			{ID: "call_A", Name: "list_dir", Arguments: json.RawMessage(`{"path": "src"}`)},
			{ID: "call_B", Name: "read_file", Arguments: json.RawMessage(`{"path":"go.mod"}`)},
		},
		Usage: llm.Usage{InputTokens: 82, OutputTokens: 17}, StopReason: llm.StopToolUse,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("response =\n%+v\nwant\n%+v", got, want)
	}

	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer "+testKey {
		t.Errorf("request %s, auth %q", r.Path, r.Header.Get("Authorization"))
	}
	wantBody := `{
	  "messages": [
	    {"role":"system","content":"You are Trellis."},
	    {"role":"user","content":"what is here?"},
	    {"role":"assistant","content":"Checking.","tool_calls":[{"id":"call_0","type":"function","function":{"name":"list_dir","arguments":"{\"path\":\".\"}"}}]},
	    {"role":"tool","content":"src/\ngo.mod","tool_call_id":"call_0"},
	    {"role":"user","content":"and in src?"}
	  ],
	  "model": "gpt-4o-mini",
	  "max_tokens": 1000,
	  "stream": true,
	  "stream_options": {"include_usage": true},
	  "tools": [{"type":"function","function":{"name":"list_dir","description":"List a directory.",
	    "parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}]
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

func TestStreamYieldsDeltasAsTheyCome(t *testing.T) {
	srv := providertest.NewServer(t, providertest.NewOpenAIStream("gpt-4o").
		Text("a").Text("b").Finish("stop").Usage(5, 2).Reply())
	s, err := newProvider(t, srv, nil).Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var kinds []string
	for {
		c, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, c.Kind.String()+":"+c.Text+string(c.StopReason))
	}
	want := []string{"text:a", "text:b", "usage:", "stop:stop"}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("chunks %v, want %v", kinds, want)
	}
	if body := srv.Requests()[0].JSON(); body["model"] != "gpt-4o" {
		t.Errorf("default model not used: %v", body["model"])
	}
}

func TestRetries(t *testing.T) {
	ok := providertest.NewOpenAIStream("gpt-4o").Text("fine").Finish("stop").Usage(3, 1).Reply()
	tests := []struct {
		name     string
		replies  []providertest.Reply
		requests int
		waitsMin []time.Duration // lower bound of each recorded wait
		status   int             // of the error; 0 = success
		msg      []string        // substrings of the error message
	}{
		{name: "500 then success", requests: 2, waitsMin: []time.Duration{250 * time.Millisecond},
			replies: []providertest.Reply{providertest.OpenAIError(500, "The server had an error", "server_error", "", nil), ok}},
		{name: "429 honours Retry-After", requests: 2, waitsMin: []time.Duration{2 * time.Second},
			replies: []providertest.Reply{providertest.OpenAIError(429, "Rate limit reached", "requests", "rate_limit_exceeded",
				map[string]string{"Retry-After": "2"}), ok}},
		{name: "connection cut before the first token", requests: 2, waitsMin: []time.Duration{250 * time.Millisecond},
			replies: []providertest.Reply{{Events: providertest.NewOpenAIStream("gpt-4o").Events()[:1], Cut: true}, ok}},
		{name: "empty stream", requests: 2, waitsMin: []time.Duration{250 * time.Millisecond},
			replies: []providertest.Reply{{Events: []providertest.Event{{Data: "[DONE]"}}}, ok}},
		{name: "401 is not retried", requests: 1, status: 401,
			replies: []providertest.Reply{providertest.OpenAIError(401,
				"Incorrect API key provided: sk-test-********cdef. You can find your API key at https://platform.openai.com/account/api-keys.",
				"invalid_request_error", "invalid_api_key", nil)},
			msg: []string{"openai (127.0.0.1", "HTTP 401 Unauthorized", "Incorrect API key provided: [redacted]"}},
		{name: "gives up after four attempts", requests: 4, status: 503,
			replies: []providertest.Reply{
				providertest.OpenAIError(503, "overloaded", "server_error", "", nil),
				providertest.OpenAIError(503, "overloaded", "server_error", "", nil),
				providertest.OpenAIError(503, "overloaded", "server_error", "", nil),
				providertest.OpenAIError(503, "overloaded", "server_error", "", nil)},
			msg: []string{"HTTP 503", "gave up after 4 attempts"}},
		{name: "Retry-After too long fails at once", requests: 1, status: 429,
			replies: []providertest.Reply{providertest.OpenAIError(429, "quota", "insufficient_quota", "insufficient_quota",
				map[string]string{"Retry-After": "3600"})},
			msg: []string{"HTTP 429"}},
		{name: "Ollama error shape", requests: 1, status: 404,
			replies: []providertest.Reply{{Status: 404, Body: `{"error":"model \"llama9\" not found, try pulling it first"}`}},
			msg:     []string{"HTTP 404 Not Found", `model "llama9" not found`}},
		{name: "vLLM error shape", requests: 1, status: 400,
			replies: []providertest.Reply{{Status: 400, Body: `{"object":"error","message":"bad tool schema","type":"BadRequestError","param":null,"code":400}`}},
			msg:     []string{"HTTP 400", "bad tool schema"}},
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
				if err != nil || got.Text != "fine" {
					t.Fatalf("after retry: %+v, %v", got, err)
				}
				return
			}
			var e *errs.Error
			if !errors.As(err, &e) || e.Code != errcode.ProviderError || e.Data["status"] != tc.status || e.Data["provider"] != "openai" {
				t.Fatalf("error %#v, want provider_error status %d", err, tc.status)
			}
			if llm.IsTransient(err) {
				t.Error("the final error is still marked transient")
			}
			for _, m := range tc.msg {
				if !strings.Contains(e.Msg, m) {
					t.Errorf("message %q lacks %q", e.Msg, m)
				}
			}
			if strings.Contains(e.Msg, "cdef") {
				t.Errorf("message shows part of the key: %q", e.Msg)
			}
		})
	}
}

func TestContextWindowFull(t *testing.T) {
	for name, reply := range map[string]providertest.Reply{
		"openai": providertest.OpenAIError(400, "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
			"invalid_request_error", "context_length_exceeded", nil),
		"vllm":      {Status: 400, Body: `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","type":"BadRequestError","param":null,"code":400}`},
		"llama.cpp": {Status: 400, Body: `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}`},
	} {
		t.Run(name, func(t *testing.T) {
			srv := providertest.NewServer(t, reply)
			_, err := newProvider(t, srv, nil).Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
			if !errors.Is(err, llm.ErrContextWindowFull) || errs.CodeOf(err) != errcode.ProviderError {
				t.Fatalf("error %v, want ErrContextWindowFull", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "context window is full") || !strings.Contains(msg, "/compact") {
				t.Errorf("message %q", msg)
			}
			if len(srv.Requests()) != 1 {
				t.Errorf("overflow retried")
			}
		})
	}
}

func TestFailuresAfterTheFirstToken(t *testing.T) {
	tests := map[string]struct {
		reply providertest.Reply
		msg   string
	}{
		"connection cut": {providertest.Reply{Events: providertest.NewOpenAIStream("gpt-4o").Text("par").Events(), Cut: true},
			"connection to the model server failed"},
		"error chunk": {providertest.Reply{Events: append(providertest.NewOpenAIStream("gpt-4o").Text("par").Events(),
			providertest.Event{Data: `{"error":{"message":"upstream overloaded","type":"server_error","code":"server_error"}}`})},
			"upstream overloaded"},
		"content filter": {providertest.NewOpenAIStream("gpt-4o").Text("par").Finish("content_filter").Reply(),
			"content filter"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := providertest.NewServer(t, tc.reply)
			s, err := newProvider(t, srv, nil).Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
			if err != nil {
				t.Fatal(err)
			}
			got, err := llm.Collect(s)
			if got.Text != "par" || errs.CodeOf(err) != errcode.ProviderError || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %+v, %v; want the text so far and a provider_error saying %q", got, err, tc.msg)
			}
			if llm.IsTransient(err) {
				t.Error("a failure after the first token is marked transient")
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests: a failure after the first token was retried", n)
			}
		})
	}
}

func TestInterruptClosesTheRequest(t *testing.T) {
	srv := providertest.NewServer(t, providertest.Reply{Events: providertest.NewOpenAIStream("gpt-4o").Text("thinking...").Events(), Hang: true})
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

func TestCancelDuringRetryWait(t *testing.T) {
	// The SDK's own environment defaults must not override the config.
	t.Setenv("OPENAI_API_KEY", "sk-from-the-environment")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	// The server asks for the longest wait honoured: had Stream waited it
	// out, it would have sent a second request.
	srv := providertest.NewServer(t, providertest.OpenAIError(503, "busy", "server_error", "", map[string]string{"Retry-After": "60"}))
	p := openai.New(openai.Config{BaseURL: srv.URL + "/v1"})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := p.Stream(ctx, llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
	if !errors.Is(err, context.DeadlineExceeded) || len(srv.Requests()) != 1 {
		t.Fatalf("err %v after %d requests, want the deadline after 1", err, len(srv.Requests()))
	}
	if auth := srv.Requests()[0].Header.Get("Authorization"); auth != "" {
		t.Errorf("no key configured, yet Authorization %q was sent", auth)
	}
}

func TestModelsAndContextWindow(t *testing.T) {
	p := openai.New(openai.Config{})
	if p.Name() != "openai" || p.DefaultModel() != openai.DefaultModel || p.Models()[0] != openai.DefaultModel || len(p.Models()) < 3 {
		t.Errorf("name %q default %q models %v", p.Name(), p.DefaultModel(), p.Models())
	}
	for model, want := range map[string]int{
		"gpt-4o": 128000, "gpt-4o-mini-2024-07-18": 128000, "gpt-4.1": 1047576, "gpt-4.1-nano": 1047576, "o3": 200000,
		"o4-mini": 200000, "gpt-4": 8192, "openai/gpt-4o": 128000, "llama3.1:8b": 0, "": 1047576,
	} {
		if got := p.ContextWindow(model); got != want {
			t.Errorf("ContextWindow(%q) = %d, want %d", model, got, want)
		}
	}
	local := openai.New(openai.Config{BaseURL: "http://localhost:11434/v1/", Model: "qwen3", Models: []string{"llama3.1", "qwen3"}, ContextWindow: 32768})
	if got := local.Models(); !reflect.DeepEqual(got, []string{"qwen3", "llama3.1"}) {
		t.Errorf("Models = %v", got)
	}
	if local.ContextWindow("qwen3") != 32768 {
		t.Errorf("configured window ignored")
	}
	if got := llm.EndpointLabel("openai", "http://localhost:11434/v1", openai.DefaultBaseURL); got != "openai (localhost:11434)" {
		t.Errorf("EndpointLabel = %q", got)
	}
}

// FuzzToolCallFragments checks that arguments cut anywhere, into any number
// of fragments, are assembled back whole.
func FuzzToolCallFragments(f *testing.F) {
	f.Add(`{"path": "src", "n": 3}`, uint8(3))
	f.Add(`{"command":"ls -la | grep \"x\""}`, uint8(1))
	f.Add(`{}`, uint8(7))
	f.Fuzz(func(t *testing.T, args string, size uint8) {
		if !json.Valid([]byte(args)) || !utf8.ValidString(args) || strings.TrimSpace(args) == "" || size == 0 {
			t.Skip()
		}
		st := providertest.NewOpenAIStream("gpt-4o").ToolCall(0, "call_1", "shell")
		for _, frag := range providertest.SplitEvery(args, int(size)) {
			st.ToolArgs(0, frag)
		}
		srv := providertest.NewServer(t, st.Finish("tool_calls").Reply())
		s, err := newProvider(t, srv, nil).Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("x")}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := llm.Collect(s)
		if err != nil || len(got.ToolCalls) != 1 || string(got.ToolCalls[0].Arguments) != strings.TrimSpace(args) {
			t.Fatalf("args %q: got %+v, %v", args, got.ToolCalls, err)
		}
	})
}

// The lean chunk decoding reads reasoning under both names servers use,
// ignores null fields and choices other than 0, and takes the usage chunk.
func TestStreamReasoningNamesAndNulls(t *testing.T) {
	ev := func(data string) providertest.Event { return providertest.Event{Data: data} }
	srv := providertest.NewServer(t, providertest.Reply{Events: []providertest.Event{
		ev(`{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning":"think "},"finish_reason":null}],"usage":null}`),
		ev(`{"id":"x","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"more"},"finish_reason":null}],"usage":null}`),
		ev(`{"id":"x","choices":[{"index":1,"delta":{"content":"other choice"}},{"index":0,"delta":{"content":"ans\u00e9"}}],"usage":null}`),
		ev(`{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`),
		ev(`{"id":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`),
		ev(`[DONE]`),
	}})
	s, err := newProvider(t, srv, nil).Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	for {
		c, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s:%s%s%d/%d", c.Kind, c.Text, c.StopReason, c.Usage.InputTokens, c.Usage.OutputTokens))
	}
	want := []string{"reasoning:think 0/0", "reasoning:more0/0", "text:ansé0/0", "usage:3/4", "stop:stop0/0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("chunks %q, want %q", got, want)
	}
}

// TestEffort: llm.Request.Effort is sent as reasoning_effort, and nothing
// is sent without it.
func TestEffort(t *testing.T) {
	for _, effort := range []string{"high", "max", ""} {
		srv := providertest.NewServer(t, providertest.NewOpenAIStream("gpt-4o").Text("ok").Finish("stop").Usage(1, 1).Reply())
		p := newProvider(t, srv, nil)
		s, err := p.Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}, Effort: effort})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := llm.Collect(s); err != nil {
			t.Fatal(err)
		}
		body := srv.WaitRequests(t, 1, 30*time.Second)[0].JSON()
		got, present := body["reasoning_effort"]
		if effort == "" && present || effort != "" && got != effort {
			t.Errorf("effort %q: reasoning_effort = %v (present %v)", effort, got, present)
		}
	}
}

// TestCachedUsage: prompt_tokens_details.cached_tokens, as OpenAI streams
// it in the usage chunk, is the usage's CacheReadTokens (of InputTokens).
func TestCachedUsage(t *testing.T) {
	srv := providertest.NewServer(t, providertest.NewOpenAIStream("o4-mini").Text("ok").Finish("stop").CachedUsage(2006, 1920, 300, 256).Reply())
	s, err := newProvider(t, srv, nil).Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.UserText("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := llm.Collect(s)
	if err != nil {
		t.Fatal(err)
	}
	want := llm.Usage{InputTokens: 2006, OutputTokens: 300, ReasoningTokens: 256, CacheReadTokens: 1920}
	if got.Usage != want {
		t.Errorf("usage %+v, want %+v", got.Usage, want)
	}
}

// A tool result's images follow the run of tool messages as one user
// message of image_url parts (tool messages carry text only).
func TestToolResultImages(t *testing.T) {
	srv := providertest.NewServer(t, providertest.NewOpenAIStream("gpt-4o").Text("ok").Finish("stop").Usage(1, 1).Reply())
	p := newProvider(t, srv, nil)
	msgs := []llm.Message{
		llm.UserText("look"),
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
			{ID: "c1", Name: "browser", Arguments: json.RawMessage(`{"action":"screenshot"}`)},
			{ID: "c2", Name: "read_file", Arguments: json.RawMessage(`{"path":"a"}`)},
		}},
		llm.ToolMessage(llm.ToolResult{CallID: "c1", Name: "browser", Content: "a screenshot", Images: []llm.Image{{MediaType: "image/png", Data: []byte("PNG")}}}),
		llm.ToolMessage(llm.ToolResult{CallID: "c2", Name: "read_file", Content: "text"}),
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
	var roles []string
	for _, m := range sent {
		roles = append(roles, m.(map[string]any)["role"].(string))
	}
	if want := []string{"user", "assistant", "tool", "tool", "user"}; !reflect.DeepEqual(roles, want) {
		t.Fatalf("roles = %v, want %v", roles, want)
	}
	parts, _ := sent[4].(map[string]any)["content"].([]any)
	if len(parts) != 2 {
		t.Fatalf("image message content = %v", sent[4])
	}
	img, _ := parts[1].(map[string]any)["image_url"].(map[string]any)
	if img["url"] != "data:image/png;base64,"+base64.StdEncoding.EncodeToString([]byte("PNG")) {
		t.Fatalf("image part = %v", parts[1])
	}
}
