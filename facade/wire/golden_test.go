package wire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/trellis-run/trellis/facade/wire"
	"github.com/trellis-run/trellis/proto/trellis/v1/eventkind"
	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/agent"
	"github.com/trellis-run/trellis/runtime/errs"
	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/llm/fake"
)

var update = flag.Bool("update", false, "rewrite testdata/*.txtar")

// The session every golden stream belongs to.
const (
	sessionID = "s-0123456789abcdef"
	turnID    = "t-1"
)

var (
	epoch  = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	header = wire.Header{SessionID: sessionID, Timestamp: epoch, Cwd: "/home/dev/project", Provider: "fake", Model: "fake-1"}
)

// log is an in-memory session event log: the agent loop's Emitter, with seq
// and ts assigned as the runtime does (ts deterministic: 10 ms per event).
type log struct {
	mu     sync.Mutex
	events []wire.Event
	onEmit func(kind string)
}

func (l *log) Emit(_ context.Context, kind string, payload any) error {
	b, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	l.mu.Lock()
	seq := int64(len(l.events) + 1)
	l.events = append(l.events, wire.Event{SessionID: sessionID, Seq: seq, Kind: kind, Payload: b, TS: epoch.Add(time.Duration(seq) * 10 * time.Millisecond)})
	hook := l.onEmit
	l.mu.Unlock()
	if hook != nil {
		hook(kind)
	}
	return nil
}

func (l *log) all() []wire.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]wire.Event(nil), l.events...)
}

// tools is an in-memory agent.Tools.
type tools map[string]func(progress func(agent.Progress)) agent.ToolResult

func (t tools) Specs(context.Context) []llm.ToolSpec {
	var specs []llm.ToolSpec
	for name := range t {
		specs = append(specs, llm.ToolSpec{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)})
	}
	return specs
}

func (t tools) Run(_ context.Context, call agent.ToolCall, progress func(agent.Progress)) agent.ToolResult {
	if f, ok := t[call.Name]; ok {
		return f(progress)
	}
	return agent.ToolResult{Error: "unknown tool " + call.Name}
}

func ok(output string) func(func(agent.Progress)) agent.ToolResult {
	return func(func(agent.Progress)) agent.ToolResult { return agent.ToolResult{OK: true, Output: output} }
}

type gate func(call agent.ToolCall) error

func (g gate) Authorize(_ context.Context, call agent.ToolCall) error { return g(call) }

// turnCase is one prompt answered by the real agent loop on a fake script.
type turnCase struct {
	script    string
	prompt    string
	tools     tools
	gate      gate
	maxRounds int
	interrupt bool // cancel the turn as soon as its first provider call starts
	// interruptOn cancels the turn when an event of this kind is emitted
	// (message.delta: mid-text; tool.call: mid-tool).
	interruptOn string
}

// run plays c as the session service does (turn.started, message.user, the
// loop) and returns the events.
func (c turnCase) run(t *testing.T) []wire.Event {
	t.Helper()
	s, err := fake.Parse([]byte(c.script))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	p := fake.New(s, fake.WithCallIDs(func() string { n++; return fmt.Sprintf("call_%d", n) }))
	g := c.gate
	if g == nil {
		g = func(agent.ToolCall) error { return nil }
	}
	l := &log{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	on := c.interruptOn
	if c.interrupt {
		on = eventkind.StepStarted
	}
	if on != "" {
		l.onEmit = func(kind string) {
			if kind == on {
				cancel()
			}
		}
	}
	bg := context.Background()
	_ = l.Emit(bg, eventkind.TurnStarted, events.TurnStartedEvent{TurnID: turnID, Prompt: c.prompt})
	_ = l.Emit(bg, eventkind.MessageUser, events.MessageUserEvent{Text: c.prompt, Attachments: []events.AttachmentRef{}})
	loop := agent.Loop{
		Provider: p, Tools: c.tools, Gate: g, Emitter: l, History: agent.NewMemoryHistory(),
		Settings: agent.Settings{MaxToolRounds: c.maxRounds},
	}
	if c.tools == nil {
		loop.Tools = tools{}
	}
	if _, err := loop.Run(ctx, agent.Turn{ID: turnID, Prompt: c.prompt}); err != nil {
		t.Fatal(err)
	}
	return l.all()
}

// script builds events by hand, for what the loop alone does not produce
// (commands, the queue, compaction, a crash).
type script struct{ events []wire.Event }

func (s *script) add(kind string, payload any) *script {
	b, _ := json.Marshal(payload)
	seq := int64(len(s.events) + 1)
	s.events = append(s.events, wire.Event{SessionID: sessionID, Seq: seq, Kind: kind, Payload: b, TS: epoch.Add(time.Duration(seq) * 10 * time.Millisecond)})
	return s
}

type goldenCase struct {
	name    string
	comment string // what the case pins
	events  func(t *testing.T) []wire.Event
}

var goldenCases = []goldenCase{
	{"text_only", "One provider call answering with text only.", turnCase{
		prompt: "hello",
		script: `{"steps":[{"default":true,"text":"Hi there, how can I help you today?","usage":{"input":40,"output":9}}]}`,
	}.run},
	{"reasoning_text_tool", "Reasoning, text and one tool call (with progress and a diff), then the answer.", turnCase{
		prompt: "please edit a.txt",
		script: `{"steps":[
			{"match":"edit","reasoning":"The user wants a.txt changed.","text":"Editing it now. ",
			 "tool_calls":[{"name":"write_file","arguments":{"path":"a.txt","content":"hi"}}],"usage":{"input":100,"output":20}},
			{"after_tool":"write_file","text":"Done: a.txt says hi.","usage":{"input":150,"output":10}}]}`,
		tools: tools{"write_file": func(progress func(agent.Progress)) agent.ToolResult {
			progress(agent.Progress{Chunk: "writing a.txt\n"})
			progress(agent.Progress{Stream: "stderr", Chunk: "warning: new file\n"})
			return agent.ToolResult{OK: true, Output: "wrote a.txt", Diff: &events.DiffEvent{Path: "a.txt", Patch: "--- a/a.txt\n+++ b/a.txt\n@@ -0,0 +1 @@\n+hi\n"}}
		}},
	}.run},
	{"two_tools_one_failing", "Two tool calls in one answer, the first failing with partial output.", turnCase{
		prompt: "check things",
		script: `{"steps":[
			{"match":"check","tool_calls":[{"name":"read_file","arguments":{"path":"missing.txt"}},{"name":"shell","arguments":{"command":"ls"}}],"usage":{"input":30,"output":12}},
			{"after_tool":"shell","text":"One of them failed.","usage":{"input":60,"output":5}}]}`,
		tools: tools{
			"read_file": func(func(agent.Progress)) agent.ToolResult {
				return agent.ToolResult{Output: "partial", Error: "missing.txt: no such file"}
			},
			"shell": ok("a.txt\nb.txt\n"),
		},
	}.run},
	{"provider_error", "The provider fails mid-stream: step.done{error} then the error event.", turnCase{
		prompt: "hi",
		script: `{"steps":[{"default":true,"text":"Let me think about","error":"upstream returned 500"}]}`,
	}.run},
	{"budget", "The tool-round budget (2 provider calls) runs out while the model still calls tools.", turnCase{
		prompt:    "loop forever",
		maxRounds: 2,
		script:    `{"steps":[{"default":true,"text":"Once more.","tool_calls":[{"name":"read_file","arguments":{"path":"x"}}],"usage":{"input":10,"output":3}}]}`,
		tools:     tools{"read_file": ok("x")},
	}.run},
	{"denied", "A denied tool call (no tool.call event) next to an allowed one.", turnCase{
		prompt: "go",
		script: `{"steps":[
			{"match":"go","tool_calls":[{"name":"write_file","arguments":{"path":"x"}},{"name":"read_file","arguments":{"path":"x"}}],"usage":{"input":20,"output":8}},
			{"after_tool":"read_file","text":"I could not write.","usage":{"input":40,"output":4}}]}`,
		tools: tools{"write_file": ok("written"), "read_file": ok("content")},
		gate: func(c agent.ToolCall) error {
			if c.Name == "write_file" {
				return errs.New(errcode.ModeDenied, "plan mode forbids write_file")
			}
			return nil
		},
	}.run},
	{"interrupted", "An interrupt during the first provider call: step.done{aborted}, turn.done{interrupted}.", turnCase{
		prompt:    "take your time",
		script:    `{"steps":[{"default":true,"text":"a slow answer","delaySec":30}]}`,
		interrupt: true,
	}.run},
	{"interrupted_mid_text", "An interrupt after the first text chunk: the streamed text is kept, the run ends interrupted.", turnCase{
		prompt:      "tell me a long story",
		script:      `{"steps":[{"default":true,"text":"Once upon a time there was a daemon that never slept and always answered","delaySec":1}]}`,
		interruptOn: eventkind.MessageDelta,
	}.run},
	{"interrupted_mid_tool", "An interrupt while a tool runs: the tool is cut off; pi ends with an aborted assistant message.", turnCase{
		prompt: "run the tests",
		script: `{"steps":[{"match":"tests","text":"Running them.","tool_calls":[{"name":"shell","arguments":{"command":"go test ./..."}}],"usage":{"input":12,"output":6}},{"after_tool":"shell","text":"never said"}]}`,
		tools: tools{"shell": func(func(agent.Progress)) agent.ToolResult {
			return agent.ToolResult{Error: "interrupted: the process group was killed"}
		}},
		interruptOn: eventkind.ToolCall,
	}.run},
	{"compaction", "A manual compaction that made a summary, as session.compact emits it, then a prompt.", compaction},
	{"queued_prompt", "A prompt queued behind a running turn (turn.queued carries its text), then run after it.", queuedPrompt},
	{"session_lifecycle", "Hand-written: a compaction, a command's answer (deltas without a provider call), a queued " +
		"prompt that runs and one that is dropped, an error before any provider call, and a turn left open by a crash " +
		"(closed by a synthetic turn.done) with a tool call still running.", lifecycle},
}

func compaction(*testing.T) []wire.Event {
	s := &script{}
	s.add("compaction.started", map[string]any{"reason": "manual", "before": 5400})
	s.add("compaction", map[string]any{"before": 5400, "after": 900, "summaryChars": 41, "auto": false,
		"summary": "The user asked for a refactor of a.go."})
	s.add("turn.started", map[string]any{"turnId": "t-1", "prompt": "go on", "queued": false})
	s.add("message.user", map[string]any{"text": "go on", "attachments": []any{}})
	s.add("step.started", map[string]any{"step": 0})
	s.add("message.delta", map[string]any{"text": "Continuing."})
	s.add("step.done", map[string]any{"step": 0, "text": "Continuing.", "reasoning": "", "toolCalls": []any{}, "usage": map[string]any{"inputTokens": 900, "outputTokens": 3}, "stopReason": "stop", "provider": "fake", "model": "fake-1"})
	s.add("turn.done", map[string]any{"turnId": "t-1", "reason": "complete", "synthetic": false})
	return s.events
}

func queuedPrompt(*testing.T) []wire.Event {
	s := &script{}
	s.add("turn.started", map[string]any{"turnId": "t-1", "prompt": "first", "queued": false})
	s.add("message.user", map[string]any{"text": "first", "attachments": []any{}})
	s.add("step.started", map[string]any{"step": 0})
	s.add("turn.queued", map[string]any{"turnId": "t-2", "position": 1, "prompt": "second, when you are done"})
	s.add("message.delta", map[string]any{"text": "One."})
	s.add("step.done", map[string]any{"step": 0, "text": "One.", "reasoning": "", "toolCalls": []any{}, "usage": map[string]any{"inputTokens": 3, "outputTokens": 1}, "stopReason": "stop", "provider": "fake", "model": "fake-1"})
	s.add("turn.done", map[string]any{"turnId": "t-1", "reason": "complete", "synthetic": false})
	s.add("turn.dequeued", map[string]any{"turnId": "t-2", "reason": "started"})
	s.add("turn.started", map[string]any{"turnId": "t-2", "prompt": "second, when you are done", "queued": true})
	s.add("message.user", map[string]any{"text": "second, when you are done", "attachments": []any{}})
	s.add("step.started", map[string]any{"step": 0})
	s.add("message.delta", map[string]any{"text": "Two."})
	s.add("step.done", map[string]any{"step": 0, "text": "Two.", "reasoning": "", "toolCalls": []any{}, "usage": map[string]any{"inputTokens": 6, "outputTokens": 1}, "stopReason": "stop", "provider": "fake", "model": "fake-1"})
	s.add("turn.done", map[string]any{"turnId": "t-2", "reason": "complete", "synthetic": false})
	return s.events
}

func lifecycle(*testing.T) []wire.Event {
	s := &script{}
	// Events before the first turn.started render in pi only when they are
	// session-level (compaction); wire has nothing for them.
	s.add("mode.changed", map[string]any{"mode": "plan"})
	s.add("compaction.started", map[string]any{"reason": "manual", "before": 1200})
	s.add("compaction", map[string]any{"before": 1200, "after": 300, "summaryChars": 512, "auto": false})
	// A built-in command: its answer has no provider call.
	s.add("turn.started", map[string]any{"turnId": "t-1", "prompt": "/help", "queued": false})
	s.add("message.user", map[string]any{"text": "/help", "attachments": []any{}})
	s.add("message.delta", map[string]any{"text": "Commands:\n  /help"})
	s.add("message.done", map[string]any{"text": "Commands:\n  /help", "role": "assistant"})
	s.add("turn.done", map[string]any{"turnId": "t-1", "reason": "complete", "synthetic": false})
	// A turn with two prompts queued behind it; the second is dropped.
	s.add("turn.started", map[string]any{"turnId": "t-2", "prompt": "hello", "queued": false})
	s.add("message.user", map[string]any{"text": "hello", "attachments": []any{}})
	s.add("step.started", map[string]any{"step": 0})
	s.add("turn.queued", map[string]any{"turnId": "t-3", "position": 1, "prompt": "and then?"})
	s.add("message.delta", map[string]any{"text": "Hi!"})
	s.add("turn.queued", map[string]any{"turnId": "t-4", "position": 2})
	s.add("usage", map[string]any{"inputTokens": 5, "outputTokens": 1, "provider": "fake", "model": "fake-1"})
	s.add("step.done", map[string]any{"step": 0, "text": "Hi!", "reasoning": "", "toolCalls": []any{}, "usage": map[string]any{"inputTokens": 5, "outputTokens": 1}, "stopReason": "stop", "provider": "fake", "model": "fake-1"})
	s.add("message.done", map[string]any{"text": "Hi!", "role": "assistant"})
	s.add("context", map[string]any{"used": 6, "window": 1000, "percent": 0.6})
	s.add("turn.done", map[string]any{"turnId": "t-2", "reason": "complete", "synthetic": false})
	s.add("turn.dequeued", map[string]any{"turnId": "t-3", "reason": "started"})
	// The dequeued prompt fails before any provider call.
	s.add("turn.started", map[string]any{"turnId": "t-3", "prompt": "and then?", "queued": true})
	s.add("message.user", map[string]any{"text": "and then?", "attachments": []any{}})
	s.add("error", map[string]any{"code": "invalid_params", "message": "provider nope cannot be opened"})
	s.add("turn.done", map[string]any{"turnId": "t-3", "reason": "error", "synthetic": false})
	s.add("turn.dequeued", map[string]any{"turnId": "t-4", "reason": "dropped"})
	s.add("turn.done", map[string]any{"turnId": "t-4", "reason": "interrupted", "synthetic": false})
	// A turn cut off by a crash while its tool ran; the restart closes it.
	s.add("turn.started", map[string]any{"turnId": "t-5", "prompt": "run ls", "queued": false})
	s.add("message.user", map[string]any{"text": "run ls", "attachments": []any{}})
	s.add("step.started", map[string]any{"step": 0})
	s.add("message.reasoning", map[string]any{"text": "List the files."})
	s.add("message.delta", map[string]any{"text": "Running ls."})
	s.add("usage", map[string]any{"inputTokens": 7, "outputTokens": 3, "provider": "fake", "model": "fake-1"})
	s.add("step.done", map[string]any{"step": 0, "text": "Running ls.", "reasoning": "List the files.", "toolCalls": []any{map[string]any{"id": "call_9", "name": "shell", "args": map[string]any{"command": "ls"}}}, "usage": map[string]any{"inputTokens": 7, "outputTokens": 3}, "stopReason": "tool_use", "provider": "fake", "model": "fake-1"})
	s.add("tool.call", map[string]any{"callId": "call_9", "name": "shell", "args": map[string]any{"command": "ls"}})
	s.add("tool.progress", map[string]any{"callId": "call_9", "name": "shell", "stream": "stdout", "chunk": "a.txt\n", "truncated": false})
	s.add("turn.done", map[string]any{"turnId": "t-5", "reason": "interrupted", "synthetic": true})
	return s.events
}

// render encodes evs in format f, checking that every encoder call
// succeeds.
func render(t *testing.T, f wire.Format, evs []wire.Event) []string {
	t.Helper()
	enc, err := wire.NewEncoder(f, header)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	begin, err := enc.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range begin {
		out = append(out, string(l))
	}
	for _, ev := range evs {
		lines, err := enc.Encode(ev)
		if err != nil {
			t.Fatalf("%s: encode seq %d (%s): %v", f, ev.Seq, ev.Kind, err)
		}
		for _, l := range lines {
			out = append(out, string(l))
		}
	}
	return out
}

// TestGolden renders each case in the three formats, checks each rendering
// against WIRE-FORMATS.md with the strict checkers, and compares it with
// testdata/<case>.txtar (rewritten with -update).
func TestGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			evs := c.events(t)
			got := &txtar.Archive{Comment: []byte(c.comment + "\n")}
			for _, f := range []wire.Format{wire.FormatEvents, wire.FormatWire, wire.FormatPi} {
				lines := render(t, f, evs)
				switch f {
				case wire.FormatEvents:
					checkEvents(t, lines, evs)
				case wire.FormatWire:
					checkWire(t, lines)
				case wire.FormatPi:
					checkPi(t, lines)
				}
				got.Files = append(got.Files, txtar.File{Name: string(f) + ".jsonl", Data: []byte(strings.Join(lines, ""))})
			}
			path := filepath.Join("testdata", c.name+".txtar")
			data := txtar.Format(got)
			if *update {
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(data, want) {
				wantAr := txtar.Parse(want)
				for i, f := range got.Files {
					if i >= len(wantAr.Files) || !bytes.Equal(f.Data, wantAr.Files[i].Data) {
						t.Errorf("%s differs from %s (run with -update to accept):\n%s", f.Name, path, firstDiff(string(f.Data), fileData(wantAr, f.Name)))
					}
				}
				if !bytes.Equal(got.Comment, wantAr.Comment) {
					t.Errorf("comment differs from %s", path)
				}
			}
		})
	}
}

func fileData(a *txtar.Archive, name string) string {
	for _, f := range a.Files {
		if f.Name == name {
			return string(f.Data)
		}
	}
	return ""
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n got: %s\nwant: %s", i+1, gl, wl)
		}
	}
	return "(no line differs)"
}
