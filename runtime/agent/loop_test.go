package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/agent"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
)

func TestTextOnly(t *testing.T) {
	f := newFixture(t, `{"contextWindow":1000,"steps":[{"default":true,"text":"Hi there!","usage":{"input":40,"output":5}}]}`, nil, nil)
	res := f.run(t, "hello")

	want := []string{
		`step.started {"step":0}`,
		`message.delta {"text":"Hi there!"}`,
		`usage {"inputTokens":40,"outputTokens":5,"provider":"fake","model":"fake-1","reasoningTokens":0,"cacheReadTokens":0,"cacheWriteTokens":0,"costMicroUsd":0,"priced":false,"turnId":"t-1"}`,
		`step.done {"step":0,"text":"Hi there!","reasoning":"","toolCalls":[],"usage":{"inputTokens":40,"outputTokens":5},"stopReason":"stop","provider":"fake","model":"fake-1"}`,
		`message.done {"text":"Hi there!","role":"assistant"}`,
		`context {"used":45,"window":1000,"percent":4.5}`,
		`turn.done {"turnId":"t-1","reason":"complete","synthetic":false}`,
	}
	checkEvents(t, f.events, want)
	if res.Reason != events.TurnDoneReasonComplete || res.Text != "Hi there!" || res.Steps != 1 ||
		res.Usage != (llm.Usage{InputTokens: 40, OutputTokens: 5}) {
		t.Errorf("Result = %+v", res)
	}
	wantHistory := `{"role":"user","text":"hello"}` + "\n" + `{"role":"assistant","text":"Hi there!"}`
	if got := historyJSON(t, f.history); got != wantHistory {
		t.Errorf("history:\n%s\nwant:\n%s", got, wantHistory)
	}
}

func checkEvents(t *testing.T, r *recorder, want []string) {
	t.Helper()
	var got []string
	for _, e := range r.all() {
		got = append(got, e.String())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestReasoningTextAndToolCall(t *testing.T) {
	script := `{"contextWindow":1000,"steps":[
		{"match":"edit","reasoning":"Need to edit.","text":"Editing now. ",
		 "tool_calls":[{"name":"write_file","arguments":{"path":"a.txt","content":"hi"}}],"usage":{"input":100,"output":20}},
		{"after_tool":"write_file","text":"Done.","usage":{"input":150,"output":10}}]}`
	const patch = "--- a/a.txt\n+++ b/a.txt\n@@ -0,0 +1 @@\n+hi\n"
	var gated []agent.ToolCall
	f := newFixture(t, script, map[string]toolFunc{
		"write_file": func(_ context.Context, args json.RawMessage, progress func(agent.Progress)) agent.ToolResult {
			progress(agent.Progress{Chunk: "writing"})
			progress(agent.Progress{Stream: "stderr", Chunk: "warn", Truncated: true})
			return agent.ToolResult{OK: true, Output: "wrote a.txt", Diff: &events.DiffEvent{Path: "a.txt", Patch: patch}}
		},
	}, func(_ context.Context, c agent.ToolCall) error { gated = append(gated, c); return nil })
	res := f.run(t, "please edit a.txt")

	checkEvents(t, f.events, []string{
		`step.started {"step":0}`,
		`message.reasoning {"text":"Need to edit."}`,
		`message.delta {"text":"Editing now. "}`,
		`usage {"inputTokens":100,"outputTokens":20,"provider":"fake","model":"fake-1","reasoningTokens":0,"cacheReadTokens":0,"cacheWriteTokens":0,"costMicroUsd":0,"priced":false,"turnId":"t-1"}`,
		`step.done {"step":0,"text":"Editing now. ","reasoning":"Need to edit.","toolCalls":[{"id":"call_1","name":"write_file","args":{"path":"a.txt","content":"hi"}}],"usage":{"inputTokens":100,"outputTokens":20},"stopReason":"tool_use","provider":"fake","model":"fake-1"}`,
		`tool.call {"callId":"call_1","name":"write_file","args":{"path":"a.txt","content":"hi"}}`,
		`tool.progress {"callId":"call_1","name":"write_file","stream":"stdout","chunk":"writing","truncated":false}`,
		`tool.progress {"callId":"call_1","name":"write_file","stream":"stderr","chunk":"warn","truncated":true}`,
		`tool.result {"callId":"call_1","name":"write_file","ok":true,"output":"wrote a.txt","error":null}`,
		`diff {"path":"a.txt","patch":"--- a/a.txt\n+++ b/a.txt\n@@ -0,0 +1 @@\n+hi\n"}`,
		`step.started {"step":1}`,
		`message.delta {"text":"Done."}`,
		`usage {"inputTokens":150,"outputTokens":10,"provider":"fake","model":"fake-1","reasoningTokens":0,"cacheReadTokens":0,"cacheWriteTokens":0,"costMicroUsd":0,"priced":false,"turnId":"t-1"}`,
		`step.done {"step":1,"text":"Done.","reasoning":"","toolCalls":[],"usage":{"inputTokens":150,"outputTokens":10},"stopReason":"stop","provider":"fake","model":"fake-1"}`,
		`message.done {"text":"Editing now. Done.","role":"assistant"}`,
		`context {"used":160,"window":1000,"percent":16}`,
		`turn.done {"turnId":"t-1","reason":"complete","synthetic":false}`,
	})
	if res.Usage != (llm.Usage{InputTokens: 250, OutputTokens: 30}) || res.Steps != 2 {
		t.Errorf("Result = %+v", res)
	}
	if len(gated) != 1 || gated[0].TurnID != "t-1" || gated[0].CallID != "call_1" || gated[0].Name != "write_file" ||
		string(gated[0].Args) != `{"path":"a.txt","content":"hi"}` {
		t.Errorf("gate saw %+v", gated)
	}
	wantHistory := strings.Join([]string{
		`{"role":"user","text":"please edit a.txt"}`,
		`{"role":"assistant","text":"Editing now. ","reasoning":"Need to edit.","toolCalls":[{"id":"call_1","name":"write_file","arguments":{"path":"a.txt","content":"hi"}}]}`,
		`{"role":"tool","toolResult":{"callId":"call_1","name":"write_file","content":"wrote a.txt","isError":false}}`,
		`{"role":"assistant","text":"Done."}`,
	}, "\n")
	if got := historyJSON(t, f.history); got != wantHistory {
		t.Errorf("history:\n%s\nwant:\n%s", got, wantHistory)
	}
}

func TestTwoToolCallsOneFailing(t *testing.T) {
	script := `{"steps":[
		{"match":"check","tool_calls":[{"name":"read_file","arguments":{"path":"missing.txt"}},{"name":"shell","arguments":{"command":"ls"}}]},
		{"after_tool":"shell","text":"One failed."}]}`
	f := newFixture(t, script, map[string]toolFunc{
		"read_file": func(context.Context, json.RawMessage, func(agent.Progress)) agent.ToolResult {
			return agent.ToolResult{Output: "partial", Error: "missing.txt: no such file"}
		},
		"shell": okTool("a.txt\n"),
	}, nil)
	res := f.run(t, "check things")

	checkKinds(t, f.events,
		"step.started", "usage", "step.done",
		"tool.call", "tool.result",
		"tool.call", "tool.result",
		"step.started", "message.delta", "usage", "step.done",
		"message.done", "context", "turn.done")
	want := []string{
		`{"callId":"call_1","name":"read_file","ok":false,"output":"partial","error":"missing.txt: no such file"}`,
		`{"callId":"call_2","name":"shell","ok":true,"output":"a.txt\n","error":null}`,
	}
	if got := f.events.payloads("tool.result"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tool.result payloads:\n%s", strings.Join(got, "\n"))
	}
	if res.Reason != events.TurnDoneReasonComplete {
		t.Errorf("reason = %q", res.Reason)
	}
	msgs, _ := f.history.Messages(context.Background())
	if r := msgs[2].ToolResult; r == nil || !r.IsError || r.Content != "partial\n\nerror: missing.txt: no such file" {
		t.Errorf("failed tool result for the model = %+v", r)
	}
}

func TestDenials(t *testing.T) {
	denyWrites := func(_ context.Context, c agent.ToolCall) error {
		if c.Name == "write_file" {
			return errs.New(errcode.ModeDenied, "plan mode forbids write_file")
		}
		return nil
	}
	tools := map[string]toolFunc{"write_file": okTool("written"), "read_file": okTool("content")}

	t.Run("one denial continues", func(t *testing.T) {
		f := newFixture(t, `{"steps":[
			{"match":"go","tool_calls":[{"name":"write_file","arguments":{"path":"x"}},{"name":"read_file","arguments":{"path":"x"}}]},
			{"after_tool":"read_file","text":"Could not write."}]}`, tools, denyWrites)
		res := f.run(t, "go")
		checkKinds(t, f.events,
			"step.started", "usage", "step.done",
			"error", "tool.result",
			"tool.call", "tool.result",
			"step.started", "message.delta", "usage", "step.done",
			"message.done", "context", "turn.done")
		if got := f.events.payloads("error")[0]; got != `{"code":"mode_denied","message":"plan mode forbids write_file"}` {
			t.Errorf("error payload = %s", got)
		}
		if got := f.events.payloads("tool.result")[0]; got != `{"callId":"call_1","name":"write_file","ok":false,"output":"","error":"denied: plan mode forbids write_file"}` {
			t.Errorf("denied tool.result = %s", got)
		}
		if res.Reason != events.TurnDoneReasonComplete || res.Denials != 1 || len(f.tools.ran) != 1 {
			t.Errorf("Result = %+v, tools ran %d", res, len(f.tools.ran))
		}
	})

	t.Run("four denials in one answer end the turn", func(t *testing.T) {
		f := newFixture(t, `{"steps":[{"default":true,"text":"Writing.","tool_calls":[
			{"name":"write_file"},{"name":"write_file"},{"name":"write_file"},{"name":"write_file"},{"name":"read_file"}]}]}`, tools, denyWrites)
		res := f.run(t, "go")
		checkKinds(t, f.events,
			"step.started", "message.delta", "usage", "step.done",
			"error", "tool.result", "error", "tool.result", "error", "tool.result", "error", "tool.result",
			"tool.result", // the fifth call is answered without running
			"message.done", "context", "turn.done")
		results := f.events.payloads("tool.result")
		if got := results[4]; got != `{"callId":"call_5","name":"read_file","ok":false,"output":"","error":"not run: the turn ended after too many denied tool calls"}` {
			t.Errorf("skipped call result = %s", got)
		}
		if got := f.events.last().JSON; got != `{"turnId":"t-1","reason":"denied","synthetic":false}` {
			t.Errorf("turn.done = %s", got)
		}
		if res.Reason != events.TurnDoneReasonDenied || res.Denials != 4 || len(f.tools.ran) != 0 || res.Text != "Writing." {
			t.Errorf("Result = %+v, tools ran %d", res, len(f.tools.ran))
		}
		assertEveryCallAnswered(t, f.history)
	})

	t.Run("denials count across provider calls", func(t *testing.T) {
		f := newFixture(t, `{"steps":[{"default":true,"tool_calls":[{"name":"write_file"}]}]}`, tools,
			func(context.Context, agent.ToolCall) error {
				return errs.New(errcode.ApprovalTimeout, "nobody answered in time")
			})
		res := f.run(t, "go")
		if res.Reason != events.TurnDoneReasonDenied || res.Denials != 4 || res.Steps != 4 {
			t.Errorf("Result = %+v", res)
		}
		if got := f.events.payloads("error")[3]; got != `{"code":"approval_timeout","message":"nobody answered in time"}` {
			t.Errorf("error payload = %s", got)
		}
	})
}

// assertEveryCallAnswered checks that the history a resumed session sends
// to a provider pairs each tool call with one result.
func assertEveryCallAnswered(t *testing.T, h agent.History) {
	t.Helper()
	msgs, _ := h.Messages(context.Background())
	open := map[string]bool{}
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			open[c.ID] = true
		}
		if m.ToolResult != nil {
			if !open[m.ToolResult.CallID] {
				t.Errorf("result for unknown or answered call %q", m.ToolResult.CallID)
			}
			delete(open, m.ToolResult.CallID)
		}
	}
	if len(open) > 0 {
		t.Errorf("calls without a result: %v", open)
	}
}

func TestBudget(t *testing.T) {
	f := newFixture(t, `{"steps":[{"default":true,"text":"again","tool_calls":[{"name":"read_file"}]}]}`,
		map[string]toolFunc{"read_file": okTool("x")}, nil)
	f.loop.Settings.MaxToolRounds = 3
	res := f.run(t, "loop forever")

	round := []string{"step.started", "message.delta", "usage", "step.done", "tool.call", "tool.result"}
	var want []string
	for range 3 {
		want = append(want, round...)
	}
	checkKinds(t, f.events, append(want, "message.done", "context", "turn.done")...)
	if res.Reason != events.TurnDoneReasonBudget || res.Steps != 3 || res.Text != "againagainagain" {
		t.Errorf("Result = %+v", res)
	}
	if got := f.events.last().JSON; got != `{"turnId":"t-1","reason":"budget","synthetic":false}` {
		t.Errorf("turn.done = %s", got)
	}
}

func TestDefaultBudget(t *testing.T) {
	f := newFixture(t, `{"steps":[{"default":true,"tool_calls":[{"name":"read_file"}]}]}`,
		map[string]toolFunc{"read_file": okTool("x")}, nil)
	res := f.run(t, "loop forever")
	if res.Reason != events.TurnDoneReasonBudget || res.Steps != agent.DefaultMaxToolRounds {
		t.Errorf("Result = %+v", res)
	}
}

func TestProviderError(t *testing.T) {
	t.Run("failure mid-stream", func(t *testing.T) {
		f := newFixture(t, `{"steps":[{"default":true,"text":"Let me","error":"upstream returned 500"}]}`, nil, nil)
		res := f.run(t, "hi")
		checkEvents(t, f.events, []string{
			`step.started {"step":0}`,
			`message.delta {"text":"Let me"}`,
			`step.done {"step":0,"text":"Let me","reasoning":"","toolCalls":[],"usage":null,"stopReason":"error","provider":"fake","model":"fake-1"}`,
			`error {"code":"provider_error","message":"upstream returned 500"}`,
			`turn.done {"turnId":"t-1","reason":"error","synthetic":false}`,
		})
		if res.Reason != events.TurnDoneReasonError {
			t.Errorf("reason = %q", res.Reason)
		}
	})
	t.Run("failure before streaming", func(t *testing.T) {
		f := newFixture(t, `{"steps":[{"default":true}]}`, nil, nil)
		f.loop.Provider = &cannedProvider{} // Stream itself fails
		f.run(t, "something else")
		checkKinds(t, f.events, "step.started", "step.done", "error", "turn.done")
		if got := f.events.payloads("error")[0]; !strings.HasPrefix(got, `{"code":"provider_error","message":"the canned provider failed: no canned response left`) {
			t.Errorf("error payload = %s", got)
		}
	})
	t.Run("plain error and error stop reason", func(t *testing.T) {
		p := &cannedProvider{responses: []canned{
			{chunks: []llm.Chunk{{Kind: llm.ChunkText, Text: "a"}}, err: errors.New("connection reset")},
		}}
		f := newFixture(t, `{"steps":[{"default":true}]}`, nil, nil)
		f.loop.Provider = p
		f.run(t, "hi")
		if got := f.events.payloads("error")[0]; got != `{"code":"provider_error","message":"the canned provider failed: connection reset"}` {
			t.Errorf("error payload = %s", got)
		}

		f = newFixture(t, `{"steps":[{"default":true}]}`, nil, nil)
		f.loop.Provider = &cannedProvider{responses: []canned{{chunks: []llm.Chunk{{Kind: llm.ChunkStop, StopReason: llm.StopError}}}}}
		if res := f.run(t, "hi"); res.Reason != events.TurnDoneReasonError {
			t.Errorf("stop reason error: Result = %+v", res)
		}
	})
}

func TestInterruptDuringLongDelay(t *testing.T) {
	// The answer would take an hour: Run returns only if the interrupt
	// ends the wait.
	f := newFixture(t, `{"steps":[{"default":true,"text":"a slow answer that never comes","delaySec":3600}]}`, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	f.events.onEmit = func(kind string) {
		if kind == eventkind.StepStarted {
			close(started)
		}
	}
	type outcome struct {
		res agent.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := f.loop.Run(ctx, agent.Turn{ID: "t-1", Prompt: "take your time"})
		done <- outcome{res, err}
	}()
	<-started
	cancel()
	if o := <-done; o.err != nil || o.res.Reason != events.TurnDoneReasonInterrupted {
		t.Errorf("Run = %+v, %v", o.res, o.err)
	}
	checkEvents(t, f.events, []string{
		`step.started {"step":0}`,
		`step.done {"step":0,"text":"","reasoning":"","toolCalls":[],"usage":null,"stopReason":"aborted","provider":"fake","model":"fake-1"}`,
		`turn.done {"turnId":"t-1","reason":"interrupted","synthetic":false}`,
	})
}

func TestInterruptDuringTool(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFixture(t, `{"steps":[{"default":true,"tool_calls":[{"name":"shell","arguments":{"command":"sleep 100"}},{"name":"shell"}]}]}`,
		map[string]toolFunc{"shell": func(ctx context.Context, _ json.RawMessage, progress func(agent.Progress)) agent.ToolResult {
			progress(agent.Progress{Chunk: "started\n"})
			cancel() // the interrupt arrives while the tool runs
			<-ctx.Done()
			return agent.ToolResult{Output: "started\n", Error: "killed: interrupted"}
		}}, nil)
	res, err := f.loop.Run(ctx, agent.Turn{ID: "t-1", Prompt: "run it"})
	if err != nil || res.Reason != events.TurnDoneReasonInterrupted {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	checkKinds(t, f.events,
		"step.started", "usage", "step.done",
		"tool.call", "tool.progress", "tool.result",
		"tool.result", // the second call never ran
		"turn.done")
	if got := f.events.payloads("tool.result")[1]; got != `{"callId":"call_2","name":"shell","ok":false,"output":"","error":"interrupted"}` {
		t.Errorf("skipped call result = %s", got)
	}
	if len(f.tools.ran) != 1 {
		t.Errorf("tools ran %d times", len(f.tools.ran))
	}
	assertEveryCallAnswered(t, f.history)
}

func TestInterruptDuringApproval(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFixture(t, `{"steps":[{"default":true,"tool_calls":[{"name":"shell"}]}]}`,
		map[string]toolFunc{"shell": okTool("")},
		func(ctx context.Context, _ agent.ToolCall) error {
			cancel() // the person is still deciding when the interrupt comes
			<-ctx.Done()
			return errs.New(errcode.ApprovalDenied, "the turn was interrupted")
		})
	res, err := f.loop.Run(ctx, agent.Turn{ID: "t-1", Prompt: "run it"})
	if err != nil || res.Reason != events.TurnDoneReasonInterrupted || res.Denials != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	checkKinds(t, f.events, "step.started", "usage", "step.done", "tool.result", "turn.done")
	assertEveryCallAnswered(t, f.history)
}

func TestInterruptBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := newFixture(t, `{"steps":[{"default":true,"text":"x"}]}`, nil, nil)
	res, err := f.loop.Run(ctx, agent.Turn{ID: "t-1", Prompt: "hi"})
	if err != nil || res.Reason != events.TurnDoneReasonInterrupted {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	checkKinds(t, f.events, "turn.done")
}

func TestLongAnswerDeltasAddUp(t *testing.T) {
	answer := "This answer is long enough to be streamed in several chunks of a few words each.\nIt has two lines."
	f := newFixture(t, `{"steps":[{"match":"tools","tool_calls":[{"name":"read_file"}],"text":"First part. "},
		{"after_tool":"read_file","text":`+mustJSON(answer)+`}]}`, map[string]toolFunc{"read_file": okTool("x")}, nil)
	res := f.run(t, "use tools")
	var sum strings.Builder
	for _, p := range f.events.payloads(eventkind.MessageDelta) {
		var tp events.MessageDeltaEvent
		if err := json.Unmarshal([]byte(p), &tp); err != nil {
			t.Fatal(err)
		}
		sum.WriteString(tp.Text)
	}
	want := "First part. " + answer
	if sum.String() != want || res.Text != want {
		t.Errorf("deltas = %q, result = %q", sum.String(), res.Text)
	}
	if got := f.events.payloads(eventkind.MessageDone)[0]; got != `{"text":`+mustJSON(want)+`,"role":"assistant"}` {
		t.Errorf("message.done = %s", got)
	}
	if n := len(f.events.payloads(eventkind.MessageDelta)); n < 5 {
		t.Errorf("only %d deltas", n)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestHistoryContinuesAcrossTurns(t *testing.T) {
	f := newFixture(t, `{"steps":[{"match":"list","tool_calls":[{"name":"list_dir"}]},
		{"after_tool":"list_dir","text":"Listed."},{"default":true,"text":"Sure."}]}`,
		map[string]toolFunc{"list_dir": okTool("a.txt")}, nil)
	f.run(t, "list files")
	var seen []llm.Message
	f.loop.Provider = &recordingProvider{Provider: f.loop.Provider, seen: &seen}
	f.run(t, "thanks")
	if len(seen) != 5 || seen[0].Text != "list files" || seen[2].ToolResult == nil || seen[3].Text != "Listed." || seen[4].Text != "thanks" {
		t.Errorf("second turn sent %+v", seen)
	}
	msgs, _ := f.history.Messages(context.Background())
	if len(msgs) != 6 || msgs[5].Text != "Sure." {
		t.Errorf("history after two turns = %+v", msgs)
	}
}

type recordingProvider struct {
	llm.Provider
	seen *[]llm.Message
}

func (p *recordingProvider) Stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	*p.seen = append([]llm.Message(nil), req.Messages...)
	return p.Provider.Stream(ctx, req)
}

func TestSettingsReachTheProvider(t *testing.T) {
	p := &cannedProvider{responses: []canned{{chunks: []llm.Chunk{{Kind: llm.ChunkText, Text: "ok"}}}}}
	f := newFixture(t, `{"steps":[{"default":true}]}`, map[string]toolFunc{"read_file": okTool("")}, nil)
	f.loop.Provider = p
	f.loop.Settings = agent.Settings{Model: "m-1", System: "be brief", MaxTokens: 99}
	f.run(t, "hi")
	req := p.requests[0]
	if req.Model != "m-1" || req.System != "be brief" || req.MaxTokens != 99 || len(req.Tools) != 1 || req.Tools[0].Name != "read_file" {
		t.Errorf("request = %+v", req)
	}
	// No usage from the vendor: estimated from the system prompt, history and
	// tool specs (51 bytes). No context window: null.
	if got := f.events.payloads(eventkind.Usage)[0]; got != `{"inputTokens":13,"outputTokens":1,"provider":"canned","model":"m-1","reasoningTokens":0,"cacheReadTokens":0,"cacheWriteTokens":0,"costMicroUsd":0,"priced":false,"turnId":"t-1"}` {
		t.Errorf("usage = %s", got)
	}
	if got := f.events.payloads(eventkind.Context)[0]; got != `{"used":14,"window":null,"percent":null}` {
		t.Errorf("context = %s", got)
	}
}

func TestInvalidArguments(t *testing.T) {
	p := &cannedProvider{responses: []canned{
		{chunks: []llm.Chunk{
			{Kind: llm.ChunkToolCall, ToolCall: llm.ToolCall{ID: "c1", Name: "shell", Arguments: json.RawMessage(`{"command": "ls"`)}},
			{Kind: llm.ChunkToolCall, ToolCall: llm.ToolCall{Name: "shell", Arguments: json.RawMessage(`  `)}},
			{Kind: llm.ChunkToolCall, ToolCall: llm.ToolCall{ID: "c3", Name: "shell", Arguments: json.RawMessage(`[1]`)}},
		}},
		{chunks: []llm.Chunk{{Kind: llm.ChunkText, Text: "retrying"}}},
	}}
	f := newFixture(t, `{"steps":[{"default":true}]}`, map[string]toolFunc{"shell": okTool("ran")}, nil)
	f.loop.Provider = p
	res := f.run(t, "hi")
	if res.Reason != events.TurnDoneReasonComplete || len(f.tools.ran) != 1 || string(f.tools.ran[0].Args) != `{}` {
		t.Fatalf("Result = %+v, ran %+v", res, f.tools.ran)
	}
	results := f.events.payloads(eventkind.ToolResult)
	if results[0] != `{"callId":"c1","name":"shell","ok":false,"output":"","error":"invalid arguments: expected a JSON object, got \"{\\\"command\\\": \\\"ls\\\"\""}` {
		t.Errorf("malformed args result = %s", results[0])
	}
	if !strings.Contains(results[2], `"ok":false`) {
		t.Errorf("array args result = %s", results[2])
	}
	var step events.StepDoneEvent
	if err := json.Unmarshal([]byte(f.events.payloads(eventkind.StepDone)[0]), &step); err != nil {
		t.Fatal(err)
	}
	if string(step.ToolCalls[0].Args) != `{}` || !strings.HasPrefix(step.ToolCalls[1].ID, "call-") {
		t.Errorf("step.done tool calls = %+v", step.ToolCalls)
	}
	// The history stays serializable: the malformed arguments are kept as a JSON string.
	if got := historyJSON(t, f.history); !strings.Contains(got, `"arguments":"{\"command\": \"ls\""`) {
		t.Errorf("history = %s", got)
	}
	assertEveryCallAnswered(t, f.history)
}

func TestEmitterFailure(t *testing.T) {
	f := newFixture(t, `{"steps":[{"default":true,"text":"hi","tool_calls":[{"name":"shell"}]}]}`,
		map[string]toolFunc{"shell": okTool("")}, nil)
	f.events.failOn = eventkind.Usage
	_, err := f.loop.Run(context.Background(), agent.Turn{ID: "t-1", Prompt: "x"})
	if !errors.Is(err, errEmit) {
		t.Fatalf("Run error = %v, want the emitter's error", err)
	}
	checkKinds(t, f.events, "step.started", "message.delta")
	if len(f.tools.ran) != 0 {
		t.Error("a tool ran after the event log failed")
	}
}

// TestToolCallNotRecorded: a call whose tool.call the log did not store
// does not run, whatever the store's error; the history answers every call
// of the step; a held tool.call (the clients saw it) gets its failed
// tool.result, an unrecorded one nothing more.
func TestToolCallNotRecorded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		shown bool
		want  []string
	}{
		{name: "lease lost", err: errs.New(errcode.Overloaded, "another daemon took the session over"),
			want: []string{"step.started", "usage", "step.done"}},
		{name: "held", err: errs.New(errcode.StoreUnavailable, "the store cannot write"), shown: true,
			want: []string{"step.started", "usage", "step.done", "tool.call", "tool.result"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, `{"steps":[{"default":true,"tool_calls":[{"name":"shell"},{"name":"shell"}]}]}`,
				map[string]toolFunc{"shell": okTool("")}, nil)
			f.events.failOn, f.events.failErr, f.events.failShown = eventkind.ToolCall, tc.err, tc.shown
			res, err := f.loop.Run(context.Background(), agent.Turn{ID: "t-1", Prompt: "x"})
			if !errors.Is(err, tc.err) || res.Reason != events.TurnDoneReasonError {
				t.Fatalf("Run = %+v, %v; want reason error and the emitter's error", res, err)
			}
			if len(f.tools.ran) != 0 {
				t.Fatalf("%d tool(s) ran although the tool.call was not stored", len(f.tools.ran))
			}
			checkKinds(t, f.events, tc.want...)
			if tc.shown {
				got := f.events.payloads(eventkind.ToolResult)[0]
				if !strings.Contains(got, `"callId":"call_1"`) || !strings.Contains(got, `"ok":false`) || !strings.Contains(got, "not run") {
					t.Errorf("tool.result = %s", got)
				}
			}
			assertEveryCallAnswered(t, f.history)
		})
	}
}

func TestHistoryFailure(t *testing.T) {
	f := newFixture(t, `{"steps":[{"default":true,"text":"hi"}]}`, nil, nil)
	f.loop.History = &failingHistory{MemoryHistory: agent.NewMemoryHistory(), ok: 1} // the user message fits
	res, err := f.loop.Run(context.Background(), agent.Turn{ID: "t-1", Prompt: "x"})
	if !errors.Is(err, errDisk) || res.Reason != events.TurnDoneReasonError {
		t.Fatalf("Run = %+v, %v; want the history's error", res, err)
	}
	checkKinds(t, f.events, "step.started", "message.delta", "usage", "step.done", "error", "turn.done")
	if got := f.events.payloads(eventkind.Error)[0]; !strings.HasPrefix(got, `{"code":"internal",`) {
		t.Errorf("error = %s", got)
	}
	if got := f.events.last().JSON; got != `{"turnId":"t-1","reason":"error","synthetic":false}` {
		t.Errorf("turn.done = %s", got)
	}
}

func TestMissingDependency(t *testing.T) {
	l := &agent.Loop{}
	if _, err := l.Run(context.Background(), agent.Turn{ID: "t-1"}); !errors.Is(err, agent.ErrMissingDependency) {
		t.Errorf("Run = %v", err)
	}
}

func TestMemoryHistoryCopies(t *testing.T) {
	h := agent.NewMemoryHistory(llm.UserText("a"))
	msgs, _ := h.Messages(context.Background())
	msgs[0].Text = "changed"
	if again, _ := h.Messages(context.Background()); again[0].Text != "a" {
		t.Error("Messages shares its slice")
	}
}

func TestToolProgressFromGoroutines(t *testing.T) {
	var late func(agent.Progress)
	f := newFixture(t, `{"steps":[{"match":"run","tool_calls":[{"name":"shell"}]},{"after_tool":"shell","text":"ok"}]}`,
		map[string]toolFunc{"shell": func(_ context.Context, _ json.RawMessage, progress func(agent.Progress)) agent.ToolResult {
			var wg sync.WaitGroup
			for _, stream := range []string{"stdout", "stderr"} {
				wg.Go(func() {
					for range 50 {
						progress(agent.Progress{Stream: stream, Chunk: "x"})
					}
				})
			}
			wg.Wait()
			late = progress
			return agent.ToolResult{OK: true}
		}}, nil)
	f.run(t, "run")
	if n := len(f.events.payloads(eventkind.ToolProgress)); n != 100 {
		t.Errorf("%d tool.progress events, want 100", n)
	}
	before := len(f.events.all())
	late(agent.Progress{Chunk: "after the tool returned"})
	if after := len(f.events.all()); after != before {
		t.Error("progress after the tool returned was emitted")
	}
}

// TestUnavailableToolReportsItsCode: a call that fails because its tool is
// unavailable (ToolResult.Code) gets an error event with that code right
// before its failed tool.result; a tool's own failure gets none, and the
// turn goes on either way.
func TestUnavailableToolReportsItsCode(t *testing.T) {
	f := newFixture(t, `{"steps":[
		{"match":"go","tool_calls":[{"id":"c1","name":"web_search"},{"id":"c2","name":"broken"}]},
		{"after_tool":"broken","text":"ok"}]}`, map[string]toolFunc{
		"web_search": func(context.Context, json.RawMessage, func(agent.Progress)) agent.ToolResult {
			return agent.ToolResult{Error: "no search provider", Output: "no search provider", Code: errcode.SearchProviderUnavailable}
		},
		"broken": func(context.Context, json.RawMessage, func(agent.Progress)) agent.ToolResult {
			return agent.ToolResult{Error: "it broke", Output: "it broke"}
		},
	}, nil)
	res := f.run(t, "go")
	if got := f.events.payloads(eventkind.Error); len(got) != 1 || got[0] != `{"code":"search_provider_unavailable","message":"no search provider"}` {
		t.Fatalf("error events %q, want one with the tool's code", got)
	}
	kinds := strings.Join(f.events.kinds(), " ")
	if !strings.Contains(kinds, "tool.call error tool.result tool.call tool.result") || res.Reason != events.TurnDoneReasonComplete {
		t.Fatalf("events %s, reason %s", kinds, res.Reason)
	}
}

// fixedPrices prices every call of model "m-1" at a dollar per million
// tokens of each kind.
type fixedPrices struct{}

func (fixedPrices) Cost(vendor, model string, u llm.Usage) (int64, bool) {
	if model != "m-1" {
		return 0, false
	}
	return int64(u.InputTokens + u.OutputTokens), true
}

// TestUsageIsPriced: each usage event carries its cached tokens, the cost
// the Pricer gives and its turn; the Result sums them.
func TestUsageIsPriced(t *testing.T) {
	u := llm.Usage{InputTokens: 300, OutputTokens: 40, ReasoningTokens: 8, CacheReadTokens: 200, CacheWriteTokens: 50}
	p := &cannedProvider{responses: []canned{
		{chunks: []llm.Chunk{{Kind: llm.ChunkToolCall, ToolCall: llm.ToolCall{ID: "c1", Name: "read_file", Arguments: json.RawMessage(`{}`)}}, {Kind: llm.ChunkUsage, Usage: u}}},
		{chunks: []llm.Chunk{{Kind: llm.ChunkText, Text: "ok"}, {Kind: llm.ChunkUsage, Usage: u}}},
	}}
	f := newFixture(t, `{"steps":[{"default":true}]}`, map[string]toolFunc{"read_file": okTool("")}, nil)
	f.loop.Provider, f.loop.Prices = p, fixedPrices{}
	f.loop.Settings = agent.Settings{Model: "m-1"}
	res := f.run(t, "hi")
	want := `{"inputTokens":300,"outputTokens":40,"provider":"canned","model":"m-1","reasoningTokens":8,"cacheReadTokens":200,"cacheWriteTokens":50,"costMicroUsd":340,"priced":true,"turnId":"t-1"}`
	if got := f.events.payloads(eventkind.Usage); len(got) != 2 || got[0] != want || got[1] != want {
		t.Errorf("usage events %v, want two of %s", got, want)
	}
	if res.CostMicroUSD != 680 || res.Usage != (llm.Usage{InputTokens: 600, OutputTokens: 80, ReasoningTokens: 16, CacheReadTokens: 400, CacheWriteTokens: 100}) {
		t.Errorf("result %+v", res)
	}
}
