package wire_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/trellis-run/trellis/facade/wire"
)

// answer adds one provider call answering text, as the loop emits it.
func (s *script) answer(text string) *script {
	s.add("step.started", map[string]any{"step": 0})
	s.add("message.delta", map[string]any{"text": text})
	return s.add("step.done", map[string]any{"step": 0, "text": text, "reasoning": "", "toolCalls": []any{}, "usage": nil, "stopReason": "stop", "provider": "fake", "model": "fake-1"})
}

func (s *script) start(turnID, prompt string, queued bool) *script {
	s.add("turn.started", map[string]any{"turnId": turnID, "prompt": prompt, "queued": queued})
	return s.add("message.user", map[string]any{"text": prompt, "attachments": []any{}})
}

func (s *script) done(turnID, reason string) *script {
	return s.add("turn.done", map[string]any{"turnId": turnID, "reason": reason, "synthetic": false})
}

// piOutline is the run structure of a pi rendering: its agent_*, turn_*,
// user message and queue_update lines.
func piOutline(t *testing.T, lines []string) string {
	t.Helper()
	var out []string
	for _, l := range lines {
		var v struct {
			Type    string `json:"type"`
			Message struct {
				Role string `json:"role"`
			} `json:"message"`
			FollowUp []string `json:"followUp"`
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatal(err)
		}
		switch {
		case v.Type == "agent_start", v.Type == "turn_start", v.Type == "turn_end", v.Type == "agent_end", v.Type == "agent_settled":
			out = append(out, v.Type)
		case v.Type == "message_start" && v.Message.Role == "user":
			out = append(out, "user")
		case v.Type == "queue_update":
			out = append(out, fmt.Sprintf("queue%d", len(v.FollowUp)))
		}
	}
	return strings.Join(out, " ")
}

// TestPiQueuedPromptContinuesTheRun pins when a queued prompt is a turn of
// the run before it (pi delivers a follow-up within the same agent run) and
// when it starts a run of its own.
func TestPiQueuedPromptContinuesTheRun(t *testing.T) {
	queuedBehind := func(reason string) []wire.Event {
		s := &script{}
		s.start("t-1", "one", false)
		s.add("turn.queued", map[string]any{"turnId": "t-2", "position": 1, "prompt": "two", "queued": 1})
		s.answer("One.").done("t-1", reason)
		s.add("turn.dequeued", map[string]any{"turnId": "t-2", "reason": "started"})
		s.start("t-2", "two", true).answer("Two.").done("t-2", "complete")
		return s.events
	}
	const oneRun = "agent_start turn_start user queue1 turn_end queue0 turn_start user turn_end agent_end agent_settled"
	cases := []struct {
		name   string
		events []wire.Event
		want   string
	}{
		{"after a completed turn: one run", queuedBehind("complete"), oneRun},
		{"after the budget ran out: one run", queuedBehind("budget"), oneRun},
		{"after an interrupted turn: a run of its own", queuedBehind("interrupted"),
			"agent_start turn_start user queue1 turn_end agent_end agent_settled queue0 agent_start turn_start user turn_end agent_end agent_settled"},
		{"after a failed turn: a run of its own", queuedBehind("error"),
			"agent_start turn_start user queue1 turn_end agent_end agent_settled queue0 agent_start turn_start user turn_end agent_end agent_settled"},
		{"nothing queued: the run ends at turn.done", (&script{}).start("t-1", "one", false).answer("One.").done("t-1", "complete").events,
			"agent_start turn_start user turn_end agent_end agent_settled"},
		{"the queued prompt is removed instead: the run ends then", func() []wire.Event {
			s := &script{}
			s.start("t-1", "one", false)
			s.add("turn.queued", map[string]any{"turnId": "t-2", "position": 1, "prompt": "two", "queued": 1})
			s.answer("One.").done("t-1", "complete")
			s.add("turn.dequeued", map[string]any{"turnId": "t-2", "reason": "removed"})
			return s.events
		}(), "agent_start turn_start user queue1 turn_end agent_end agent_settled queue0"},
		{"three prompts in a row: one run of three turns", func() []wire.Event {
			s := &script{}
			s.start("t-1", "one", false)
			s.add("turn.queued", map[string]any{"turnId": "t-2", "position": 1, "prompt": "two", "queued": 1})
			s.add("turn.queued", map[string]any{"turnId": "t-3", "position": 2, "prompt": "three", "queued": 2})
			s.answer("One.").done("t-1", "complete")
			s.add("turn.dequeued", map[string]any{"turnId": "t-2", "reason": "started"})
			s.start("t-2", "two", true).answer("Two.")
			s.add("usage", map[string]any{"inputTokens": 1, "outputTokens": 1, "provider": "fake", "model": "fake-1"})
			s.done("t-2", "complete")
			s.add("turn.dequeued", map[string]any{"turnId": "t-3", "reason": "started"})
			s.start("t-3", "three", true).answer("Three.").done("t-3", "complete")
			return s.events
		}(), "agent_start turn_start user queue1 queue2 turn_end queue1 turn_start user turn_end queue0 turn_start user turn_end agent_end agent_settled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines := render(t, wire.FormatPi, c.events)
			if got := piOutline(t, lines); got != c.want {
				t.Errorf("pi outline\n got: %s\nwant: %s", got, c.want)
			}
			checkPi(t, lines)
		})
	}
}

// TestWireProviderErrorEndsAfterTheDeltas pins what a pagent client sees of
// a failed provider call: the deltas, then RunEnd with the error, as
// pagent's own run raises after them (no StepEnd, no TurnEnd for that call).
func TestWireProviderErrorEndsAfterTheDeltas(t *testing.T) {
	failed := func(s *script) *script {
		s.add("step.started", map[string]any{"step": 1})
		s.add("message.delta", map[string]any{"text": "Half"})
		s.add("step.done", map[string]any{"step": 1, "text": "Half an answer", "reasoning": "", "toolCalls": []any{}, "usage": nil, "stopReason": "error", "provider": "fake", "model": "fake-1"})
		s.add("error", map[string]any{"code": "provider_error", "message": "upstream returned 500"})
		return s.done("t-1", "error")
	}
	cases := []struct {
		name   string
		events []wire.Event
		want   []string
	}{
		{"the first call fails", failed((&script{}).start("t-1", "hi", false)).events,
			[]string{"RunBegin", "TurnBegin", "TextDelta Half", "TextDelta  an answer", `RunEnd  error upstream returned 500`}},
		{"a later call fails: RunEnd repeats the last StepEnd", func() []wire.Event {
			s := (&script{}).start("t-1", "hi", false)
			s.add("step.started", map[string]any{"step": 0})
			s.add("step.done", map[string]any{"step": 0, "text": "Looking.", "reasoning": "", "toolCalls": []any{map[string]any{"id": "c1", "name": "ls", "args": map[string]any{}}}, "usage": nil, "stopReason": "tool_use", "provider": "fake", "model": "fake-1"})
			s.add("tool.call", map[string]any{"callId": "c1", "name": "ls", "args": map[string]any{}})
			s.add("tool.result", map[string]any{"callId": "c1", "name": "ls", "ok": true, "output": "a", "error": nil})
			return failed(s).events
		}(), []string{"RunBegin", "TurnBegin", "TextDelta Looking.", "StepEnd Looking.", "ToolCallBegin", "ToolResult", "TurnEnd",
			"TurnBegin", "TextDelta Half", "TextDelta  an answer", "RunEnd Looking. error upstream returned 500"}},
		{"the run fails with a call open", func() []wire.Event {
			s := (&script{}).start("t-1", "hi", false)
			s.add("step.started", map[string]any{"step": 0})
			s.add("message.delta", map[string]any{"text": "Cut"})
			return s.done("t-1", "error").events
		}(), []string{"RunBegin", "TurnBegin", "TextDelta Cut", "RunEnd  error the run failed; the event log has no error message"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines := render(t, wire.FormatWire, c.events)
			checkWire(t, lines)
			var got []string
			for _, l := range lines {
				var v struct {
					Method string `json:"method"`
					Params struct {
						Text, Content, Error string
						StopReason           string `json:"stop_reason"`
					} `json:"params"`
				}
				if err := json.Unmarshal([]byte(l), &v); err != nil {
					t.Fatal(err)
				}
				s := v.Method
				switch v.Method {
				case "TextDelta":
					s += " " + v.Params.Text
				case "StepEnd":
					s += " " + v.Params.Content
				case "RunEnd":
					s += " " + v.Params.Content + " " + v.Params.StopReason + " " + v.Params.Error
				}
				got = append(got, s)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("wire lines\n got: %q\nwant: %q", got, c.want)
			}
		})
	}
}
