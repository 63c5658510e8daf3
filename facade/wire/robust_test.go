package wire_test

import (
	"testing"

	"github.com/trellis-run/trellis/facade/wire"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/agent"
	"github.com/trellis-run/trellis/runtime/errs"
)

// TestRenderingsStayWellFormed feeds the encoders logs the golden cases do
// not cover, real (the agent loop) and hand-written (what a crash, a failed
// emit or a late subscriber leaves), and checks that every rendering still
// obeys WIRE-FORMATS.md.
func TestRenderingsStayWellFormed(t *testing.T) {
	denyWrites := func(c agent.ToolCall) error {
		if c.Name == "write_file" {
			return errs.New(errcode.ApprovalDenied, "the user said no")
		}
		return nil
	}
	cases := map[string]func(t *testing.T) []wire.Event{
		"four denials end the turn": turnCase{
			prompt: "go",
			script: `{"steps":[{"default":true,"text":"Writing.","tool_calls":[
				{"name":"write_file"},{"name":"write_file"},{"name":"write_file"},{"name":"write_file"},{"name":"read_file"}]}]}`,
			tools: tools{"write_file": ok(""), "read_file": ok("")},
			gate:  denyWrites,
		}.run,
		"long answer in many chunks": turnCase{
			prompt: "tell me",
			script: `{"steps":[{"default":true,"reasoning":"Think it through, step by step, slowly.","text":"This answer is long enough to be streamed in several chunks of a few words each.\nIt has two lines."}]}`,
		}.run,
		"interrupt while a tool runs": func(*testing.T) []wire.Event {
			s := &script{}
			s.add("turn.started", map[string]any{"turnId": "t-1", "prompt": "run", "queued": false})
			s.add("message.user", map[string]any{"text": "run", "attachments": []any{}})
			s.add("step.started", map[string]any{"step": 0})
			s.add("usage", map[string]any{"inputTokens": 1, "outputTokens": 1, "provider": "fake", "model": "fake-1"})
			s.add("step.done", map[string]any{"step": 0, "text": "", "reasoning": "", "toolCalls": []any{
				map[string]any{"id": "c1", "name": "shell", "args": map[string]any{"command": "sleep 100"}},
				map[string]any{"id": "c2", "name": "shell", "args": map[string]any{}}},
				"usage": map[string]any{"inputTokens": 1, "outputTokens": 1}, "stopReason": "tool_use", "provider": "fake", "model": "fake-1"})
			s.add("tool.call", map[string]any{"callId": "c1", "name": "shell", "args": map[string]any{"command": "sleep 100"}})
			s.add("tool.progress", map[string]any{"callId": "c1", "name": "shell", "stream": "stdout", "chunk": "started\n", "truncated": false})
			s.add("tool.result", map[string]any{"callId": "c1", "name": "shell", "ok": false, "output": "started\n", "error": "killed: interrupted"})
			s.add("tool.result", map[string]any{"callId": "c2", "name": "shell", "ok": false, "output": "", "error": "interrupted"})
			s.add("turn.done", map[string]any{"turnId": "t-1", "reason": "interrupted", "synthetic": false})
			return s.events
		},
		"joined mid-run, then a whole run": func(*testing.T) []wire.Event {
			s := &script{}
			s.add("message.delta", map[string]any{"text": "the end of "})
			s.add("tool.result", map[string]any{"callId": "c0", "name": "shell", "ok": true, "output": "", "error": nil})
			s.add("step.done", map[string]any{"step": 3, "text": "x", "reasoning": "", "toolCalls": []any{}, "usage": nil, "stopReason": "stop", "provider": "fake", "model": "fake-1"})
			s.add("turn.done", map[string]any{"turnId": "t-0", "reason": "complete", "synthetic": false})
			s.add("turn.started", map[string]any{"turnId": "t-1", "prompt": "hi", "queued": false})
			s.add("message.user", map[string]any{"text": "hi", "attachments": []any{}})
			s.add("step.started", map[string]any{"step": 0})
			s.add("message.delta", map[string]any{"text": "Hello."})
			s.add("step.done", map[string]any{"step": 0, "text": "Hello.", "reasoning": "", "toolCalls": []any{}, "usage": map[string]any{"inputTokens": 2, "outputTokens": 2}, "stopReason": "stop", "provider": "fake", "model": "fake-1"})
			s.add("message.done", map[string]any{"text": "Hello.", "role": "assistant"})
			s.add("turn.done", map[string]any{"turnId": "t-1", "reason": "complete", "synthetic": false})
			return s.events
		},
		"step.done without deltas, then a call cut off": func(*testing.T) []wire.Event {
			s := &script{}
			s.add("turn.started", map[string]any{"turnId": "t-1", "prompt": "hi", "queued": false})
			s.add("step.started", map[string]any{"step": 0})
			s.add("step.done", map[string]any{"step": 0, "text": "Said all at once.", "reasoning": "Thought at once.", "toolCalls": []any{
				map[string]any{"id": "c1", "name": "ls", "args": map[string]any{}}},
				"usage": map[string]any{"inputTokens": 3, "outputTokens": 4}, "stopReason": "tool_use", "provider": "anthropic", "model": "claude"})
			s.add("tool.result", map[string]any{"callId": "c1", "name": "ls", "ok": true, "output": "a", "error": nil})
			s.add("step.started", map[string]any{"step": 1})
			s.add("message.reasoning", map[string]any{"text": "Hmm"})
			s.add("message.delta", map[string]any{"text": "Then"})
			s.add("message.reasoning", map[string]any{"text": " again"})
			// The emitter failed: the session closes the turn.
			s.add("turn.done", map[string]any{"turnId": "t-1", "reason": "error", "synthetic": false})
			return s.events
		},
		"a run that never reached the loop, and an aborted compaction": func(*testing.T) []wire.Event {
			s := &script{}
			s.add("turn.done", map[string]any{"turnId": "t-0", "reason": "interrupted", "synthetic": true})
			s.add("compaction.started", map[string]any{"reason": "auto", "before": 9000})
			s.add("turn.started", map[string]any{"turnId": "t-1", "prompt": "hi", "queued": false})
			s.add("turn.done", map[string]any{"turnId": "t-1", "reason": "error", "synthetic": false})
			s.add("compaction", map[string]any{"before": 9000, "after": 100, "summaryChars": 10, "auto": true})
			s.add("turn.started", map[string]any{"turnId": "t-2", "prompt": "again", "queued": false})
			s.add("message.user", map[string]any{"text": "again", "attachments": []any{}})
			s.add("step.started", map[string]any{"step": 0})
			s.add("step.done", map[string]any{"step": 0, "text": "", "reasoning": "", "toolCalls": []any{}, "usage": nil, "stopReason": "error", "provider": "fake", "model": "fake-1"})
			// The error event is missing: the message still ends, with a
			// generic errorMessage.
			s.add("turn.done", map[string]any{"turnId": "t-2", "reason": "error", "synthetic": false})
			return s.events
		},
	}
	for name, events := range cases {
		t.Run(name, func(t *testing.T) {
			evs := events(t)
			checkEvents(t, render(t, wire.FormatEvents, evs), evs)
			checkWire(t, render(t, wire.FormatWire, evs))
			checkPi(t, render(t, wire.FormatPi, evs))
		})
	}
}

// Rendering is a pure function of the events: the same log renders the
// same lines, which is what lets a resumed stream skip the lines it already
// sent.
func TestRenderingIsDeterministic(t *testing.T) {
	for _, c := range goldenCases {
		evs := c.events(t)
		for _, f := range []wire.Format{wire.FormatWire, wire.FormatPi} {
			a, b := render(t, f, evs), render(t, f, evs)
			if len(a) != len(b) {
				t.Fatalf("%s/%s: %d then %d lines", c.name, f, len(a), len(b))
			}
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("%s/%s line %d differs", c.name, f, i+1)
				}
			}
		}
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]wire.Format{"events": wire.FormatEvents, "wire": wire.FormatWire, "pi": wire.FormatPi, "json": wire.FormatPi} {
		if got, err := wire.ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "text", "PI"} {
		if _, err := wire.ParseFormat(in); err == nil {
			t.Errorf("ParseFormat(%q) succeeded", in)
		}
	}
	if _, err := wire.NewEncoder("xml", wire.Header{}); err == nil {
		t.Error("NewEncoder(xml) succeeded")
	}
}
