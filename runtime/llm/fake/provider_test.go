package fake_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/fake"
)

func mustParse(t *testing.T, script string) *fake.Script {
	t.Helper()
	s, err := fake.Parse([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func user(text string) []llm.Message { return []llm.Message{llm.UserText(text)} }

// afterTool is a history ending in a result of tool name, after prompt.
func afterTool(prompt, name string) []llm.Message {
	return []llm.Message{
		llm.UserText(prompt),
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: name, Arguments: json.RawMessage(`{}`)}}},
		llm.ToolMessage(llm.ToolResult{CallID: "c1", Name: name, Content: "out"}),
	}
}

func call(t *testing.T, p llm.Provider, msgs []llm.Message) (llm.Response, error) {
	t.Helper()
	s, err := p.Stream(context.Background(), llm.Request{Model: fake.DefaultModel, Messages: msgs})
	if err != nil {
		return llm.Response{}, err
	}
	return llm.Collect(s)
}

func TestChoosingSteps(t *testing.T) {
	script := `{"steps":[
		{"match":"Hello","text":"greeting"},
		{"match":"list","text":"listing","tool_calls":[{"name":"shell","arguments":{"command":"ls"}}]},
		{"after_tool":"SHELL","match":"special","text":"special summary"},
		{"after_tool":"shell","text":"summary"},
		{"default":true,"text":"fallback"}
	]}`
	tests := []struct {
		name string
		msgs []llm.Message
		want string
	}{
		{"case-insensitive substring", user("well, HELLO there"), "greeting"},
		{"first match in order wins", user("hello, list files"), "greeting"},
		{"tool step", user("list files"), "listing"},
		{"after tool", afterTool("list files", "shell"), "summary"},
		{"after tool with match filter", afterTool("list the special files", "Shell"), "special summary"},
		{"after unknown tool uses default", afterTool("list files", "read_file"), "fallback"},
		{"no match uses default", user("what?"), "fallback"},
		{"empty history uses default", nil, "fallback"},
		{"latest user text counts", append(user("hello"), llm.Message{Role: llm.RoleAssistant, Text: "hi"}, llm.UserText("list")), "listing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := call(t, fake.New(mustParse(t, script)), tt.msgs)
			if err != nil || got.Text != tt.want {
				t.Fatalf("text = %q, %v; want %q", got.Text, err, tt.want)
			}
		})
	}
}

// TestNoStepPlaysEmptyAnswer: as in snowpea's fixture format, a call that no
// step matches plays the top-level default, or an empty answer without one.
func TestNoStepPlaysEmptyAnswer(t *testing.T) {
	for _, tt := range []struct{ name, script, want string }{
		{"no default", `{"steps":[{"match":"hello","text":"hi"}]}`, ""},
		{"top-level default", `{"steps":[{"match":"hello","text":"hi"}],"default":{"text":"fallback"}}`, "fallback"},
		{"default step wins over top-level", `{"steps":[{"match":"hello","text":"hi"},{"default":true,"text":"step"}],"default":{"text":"top"}}`, "step"},
		{"only a default", `{"default":{"text":"always"}}`, "always"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.New(mustParse(t, tt.script))
			for _, msgs := range [][]llm.Message{user("bye"), afterTool("hello", "shell")} {
				got, err := call(t, p, msgs)
				if err != nil || got.Text != tt.want {
					t.Errorf("text = %q, %v; want %q", got.Text, err, tt.want)
				}
			}
		})
	}
}

func TestRepeat(t *testing.T) {
	tests := []struct {
		name   string
		script string
		want   []string // texts of successive calls with prompt "go"; "ERR" = provider error
	}{
		{"step repeat plays a sequence", `{"steps":[
			{"match":"go","text":"one","repeat":1},
			{"match":"go","text":"two","repeat":2},
			{"default":true,"text":"rest"}]}`,
			[]string{"one", "two", "two", "rest", "rest"}},
		{"used up without default is empty", `{"steps":[{"match":"go","text":"once","repeat":1}]}`,
			[]string{"once", "", ""}},
		{"top-level repeat loops", `{"repeat":true,"steps":[
			{"match":"go","text":"a","repeat":1},
			{"match":"go","text":"b","repeat":1}]}`,
			[]string{"a", "b", "a", "b", "a"}},
		{"limited default", `{"steps":[{"default":true,"text":"d","repeat":2}],"repeat":true}`,
			[]string{"d", "d", "d"}},
		// The snowpea fixture format: steps are played once, in order.
		{"identical prompts take the steps in turn", `{"steps":[
			{"match":"go","text":"first"},
			{"match":"go","text":"second"},
			{"match":"go","text":"third"}],"default":{"text":"top"}}`,
			[]string{"first", "second", "third", "third"}},
		{"a step with repeat true stays", `{"steps":[
			{"match":"go","text":"always","repeat":true},
			{"match":"go","text":"never"}]}`,
			[]string{"always", "always", "always"}},
		{"repeat false is once", `{"steps":[
			{"match":"go","text":"a","repeat":false},
			{"match":"go","text":"b","repeat":false}]}`,
			[]string{"a", "b", "b"}},
		{"top-level repeat starts over once all were played", `{"repeat":true,"steps":[
			{"match":"go","text":"a"},
			{"match":"go","text":"b"},
			{"default":true,"text":"d"}]}`,
			[]string{"a", "b", "a", "b"}},
		{"a matching step played stays before the defaults", `{"steps":[
			{"match":"go","text":"hi"},
			{"default":true,"text":"d"}]}`,
			[]string{"hi", "hi"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fake.New(mustParse(t, tt.script))
			var got []string
			for range tt.want {
				r, err := call(t, p, user("go"))
				if err != nil {
					got = append(got, "ERR")
					continue
				}
				got = append(got, r.Text)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStreamChunks(t *testing.T) {
	text := "The quick brown fox jumps over  the lazy dog.\nSecond line here"
	p := fake.New(mustParse(t, `{"steps":[{"default":true,"reasoning":"think about it carefully now","text":`+
		mustJSON(text)+`,"tool_calls":[{"name":"a","arguments":{"x":1}},{"id":"fixed","name":"b"}]}]}`))
	s, err := p.Stream(context.Background(), llm.Request{Messages: user("hi")})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var texts []string
	var calls []llm.ToolCall
	for {
		c, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, c.Kind.String())
		switch c.Kind {
		case llm.ChunkText:
			texts = append(texts, c.Text)
			if n := len(strings.Fields(c.Text)); n == 0 || n > 3 {
				t.Errorf("chunk %q has %d words", c.Text, n)
			}
		case llm.ChunkToolCall:
			calls = append(calls, c.ToolCall)
		case llm.ChunkStop:
			if c.StopReason != llm.StopToolUse {
				t.Errorf("stop reason = %q, want tool_use", c.StopReason)
			}
		}
	}
	if got := strings.Join(texts, ""); got != text {
		t.Errorf("text chunks add up to %q", got)
	}
	wantKinds := "reasoning reasoning text text text text tool_call tool_call usage stop"
	if got := strings.Join(kinds, " "); got != wantKinds {
		t.Errorf("chunk kinds = %s\nwant          %s", got, wantKinds)
	}
	if !regexp.MustCompile(`^call_[0-9a-f]{24}$`).MatchString(calls[0].ID) || string(calls[0].Arguments) != `{"x":1}` {
		t.Errorf("first call = %+v", calls[0])
	}
	if calls[1].ID != "fixed" || string(calls[1].Arguments) != `{}` {
		t.Errorf("second call = %+v", calls[1])
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestUsage(t *testing.T) {
	msgs := user("0123456789abcdef") // 4 + 16 = 20 bytes = 5 tokens
	tests := []struct {
		step string
		want llm.Usage
	}{
		{`{"default":true,"text":"12345678"}`, llm.Usage{InputTokens: 5, OutputTokens: 2}},
		{`{"default":true,"text":"12345678","usage":{"input":100}}`, llm.Usage{InputTokens: 100, OutputTokens: 2}},
		{`{"default":true,"text":"x","usage":{"input":7,"output":0}}`, llm.Usage{InputTokens: 7, OutputTokens: 0}},
		// reasoningTokens are output tokens too.
		{`{"default":true,"text":"12345678","reasoningTokens":4}`, llm.Usage{InputTokens: 5, OutputTokens: 6, ReasoningTokens: 4}},
		{`{"default":true,"text":"x","reasoningTokens":4,"usage":{"output":9}}`, llm.Usage{InputTokens: 5, OutputTokens: 9, ReasoningTokens: 4}},
		// Cached tokens are input tokens too: an estimate below them is raised.
		{`{"default":true,"text":"12345678","usage":{"input":100,"cacheRead":60,"cacheWrite":30}}`, llm.Usage{InputTokens: 100, OutputTokens: 2, CacheReadTokens: 60, CacheWriteTokens: 30}},
		{`{"default":true,"text":"12345678","usage":{"cacheRead":60}}`, llm.Usage{InputTokens: 60, OutputTokens: 2, CacheReadTokens: 60}},
	}
	for _, tt := range tests {
		r, err := call(t, fake.New(mustParse(t, `{"steps":[`+tt.step+`]}`)), msgs)
		if err != nil || r.Usage != tt.want {
			t.Errorf("%s: usage = %+v, %v; want %+v", tt.step, r.Usage, err, tt.want)
		}
	}
}

// TestThinking: the snowpea fixture format's "thinking" streams as the
// reasoning.
func TestThinking(t *testing.T) {
	r, err := call(t, fake.New(mustParse(t, `{"steps":[{"default":true,"thinking":"Let me think.","text":"Done."}]}`)), user("hi"))
	if err != nil || r.Reasoning != "Let me think." || r.Text != "Done." {
		t.Fatalf("got %+v, %v", r, err)
	}
}

func TestStopReasons(t *testing.T) {
	tests := []struct {
		step string
		want llm.StopReason
	}{
		{`{"default":true,"text":"x"}`, llm.StopEnd},
		{`{"default":true,"tool_calls":[{"name":"a"}]}`, llm.StopToolUse},
		{`{"default":true,"text":"x","stopReason":"length"}`, llm.StopLength},
	}
	for _, tt := range tests {
		r, err := call(t, fake.New(mustParse(t, `{"steps":[`+tt.step+`]}`)), user("x"))
		if err != nil || r.StopReason != tt.want {
			t.Errorf("%s: stop = %q, %v; want %q", tt.step, r.StopReason, err, tt.want)
		}
	}
}

func TestErrorStep(t *testing.T) {
	p := fake.New(mustParse(t, `{"steps":[{"default":true,"text":"partial answer","error":"upstream exploded"}]}`))
	r, err := call(t, p, user("x"))
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errcode.ProviderError || e.Msg != "upstream exploded" ||
		e.Data["provider"] != "fake" || e.Data["status"] != 500 {
		t.Fatalf("error = %#v", err)
	}
	if r.Text != "partial answer" {
		t.Errorf("text before the failure = %q", r.Text)
	}
}

// TestCancelEndsDelayAtOnce runs in a synctest bubble, whose clock moves
// only when every goroutine in it waits: a Next that honours the cancel
// returns with the clock where it was, one that waits out its delay first
// moves it.
func TestCancelEndsDelayAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := fake.New(mustParse(t, `{"steps":[{"default":true,"text":"slow","delaySec":30}]}`))
		ctx, cancel := context.WithCancel(context.Background())
		s, err := p.Stream(ctx, llm.Request{Messages: user("x")})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close() // a failed check leaves no goroutine waiting in the bubble
		done := make(chan error, 1)
		start := time.Now()
		go func() { _, err := s.Next(); done <- err }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Next returned (%v) before its delay or a cancel", err)
		default:
		}
		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Next error = %v, want context.Canceled", err)
			}
		default:
			t.Fatal("Next still waits after cancel")
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Next returned %v into its delay, want at the cancel", d)
		}
		if _, err := s.Next(); !errors.Is(err, context.Canceled) {
			t.Errorf("Next after failure = %v, want the same error", err)
		}
	})
}

func TestCloseEndsDelay(t *testing.T) {
	p := fake.New(mustParse(t, `{"steps":[{"default":true,"delaySec":30}]}`))
	s, err := p.Stream(context.Background(), llm.Request{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.Next(); done <- err }()
	s.Close()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Errorf("Next after Close = %v, want io.EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the wait")
	}
}

func TestCancelledBeforeStream(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := fake.New(nil).Stream(ctx, llm.Request{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Stream on cancelled ctx = %v", err)
	}
}

// TestDelayIsSpread: a step's delay is spread over its chunks, so they
// arrive one by one and the last at the whole delay. The bubble's clock
// moves only by the stream's own timers, so the times are exact.
func TestDelayIsSpread(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := fake.New(mustParse(t, `{"steps":[{"default":true,"text":"a b c d e f","delaySec":0.2}]}`))
		s, err := p.Stream(context.Background(), llm.Request{Model: fake.DefaultModel, Messages: user("x")})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var at []time.Duration
		for {
			if _, err := s.Next(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			at = append(at, time.Since(start))
		}
		if len(at) < 2 || at[0] <= 0 || at[0] >= 200*time.Millisecond || slices.Max(at) != 200*time.Millisecond || !slices.IsSorted(at) {
			t.Errorf("chunks arrived at %v, want spread over the 0.2 s, the last at 0.2 s", at)
		}
	})
}

func TestWithCallIDs(t *testing.T) {
	n := 0
	p := fake.New(mustParse(t, `{"steps":[{"default":true,"tool_calls":[{"name":"a"},{"name":"b"}]}]}`),
		fake.WithCallIDs(func() string { n++; return fmt.Sprintf("call_%d", n) }))
	r, err := call(t, p, nil)
	if err != nil || r.ToolCalls[0].ID != "call_1" || r.ToolCalls[1].ID != "call_2" {
		t.Errorf("calls = %+v, %v", r.ToolCalls, err)
	}
}

func TestDemo(t *testing.T) {
	p, err := fake.Open("")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "fake" {
		t.Errorf("Name = %q", p.Name())
	}
	if w := p.(llm.ContextWindower).ContextWindow(fake.DefaultModel); w != fake.DefaultContextWindow {
		t.Errorf("ContextWindow = %d", w)
	}
	if m := p.(llm.ModelLister); m.DefaultModel() != fake.DefaultModel || len(m.Models()) != 1 {
		t.Errorf("models = %q %v", m.DefaultModel(), m.Models())
	}

	r, err := call(t, p, user("Hello!"))
	if err != nil || !strings.HasPrefix(r.Text, "Hello!") || len(r.ToolCalls) != 0 {
		t.Errorf("greeting = %+v, %v", r, err)
	}
	for _, prompt := range []string{"please list files", "Demo"} {
		r, err = call(t, p, user(prompt))
		if err != nil || len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != "list_dir" ||
			string(r.ToolCalls[0].Arguments) != `{"path":"."}` || r.Reasoning == "" || r.StopReason != llm.StopToolUse {
			t.Errorf("%q = %+v, %v", prompt, r, err)
		}
	}
	r, err = call(t, p, afterTool("list files", "list_dir"))
	if err != nil || !strings.Contains(r.Text, "working directory") || len(r.ToolCalls) != 0 {
		t.Errorf("summary = %+v, %v", r, err)
	}
	r, err = call(t, p, user("what is the meaning of life"))
	if err != nil || !strings.Contains(r.Text, "demo model") {
		t.Errorf("default = %+v, %v", r, err)
	}
}

func TestOpenPath(t *testing.T) {
	if _, err := fake.Open("/nonexistent/script.json"); errs.CodeOf(err) != errcode.InvalidParams {
		t.Errorf("Open(missing) = %v", err)
	}
}

func TestConcurrentStreams(t *testing.T) {
	p := fake.New(mustParse(t, `{"steps":[{"match":"x","text":"one two three four","repeat":50},{"default":true,"text":"d"}]}`))
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	for range 100 {
		wg.Go(func() {
			s, err := p.Stream(context.Background(), llm.Request{Messages: user("x")})
			if err != nil {
				t.Error(err)
				return
			}
			r, err := llm.Collect(s)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			counts[r.Text]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if counts["one two three four"] != 50 || counts["d"] != 50 {
		t.Errorf("counts = %v", counts)
	}
}
