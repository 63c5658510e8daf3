package agent_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/agent"
)

// steerBox is what a session keeps for a turn: messages steered into it
// and the loop's requests for them.
type steerBox struct {
	mu      sync.Mutex
	pending []agent.Steer
	asked   []bool // the ending argument of each request
}

func (b *steerBox) send(text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = append(b.pending, agent.Steer{Text: text, Principal: &events.PrincipalRef{ID: "p-1", Name: "ana"}})
}

func (b *steerBox) take(ending bool) []agent.Steer {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked = append(b.asked, ending)
	out := b.pending
	b.pending = nil
	return out
}

// TestSteered: text steered into a turn reaches the model at its next call
// of the same turn, as a user message after the tool results, with
// turn.steered right before that call; text that arrives while the model
// answers without tools gives the turn one more call instead of ending it.
func TestSteered(t *testing.T) {
	script := `{"steps":[
		{"match":"run","text":"Running.","tool_calls":[{"name":"work"}]},
		{"match":"also","text":"Noted."},
		{"match":"hello","text":"Hi."}]}`
	cases := []struct {
		name, prompt string
		// inTool: the text is steered from inside the tool call; else
		// when the first model answer is done.
		inTool  bool
		kinds   []string
		history string
		asked   []bool
	}{
		{
			name: "during a tool call", prompt: "run it", inTool: true,
			kinds: []string{"step.started", "message.delta", "usage", "step.done", "tool.call", "tool.result",
				"turn.steered", "step.started", "message.delta", "usage", "step.done", "message.done", "context", "turn.done"},
			history: `{"role":"user","text":"run it"}` + "\n" +
				`{"role":"assistant","text":"Running.","toolCalls":[{"id":"call_1","name":"work","arguments":{}}]}` + "\n" +
				`{"role":"tool","toolResult":{"callId":"call_1","name":"work","content":"worked","isError":false}}` + "\n" +
				`{"role":"user","text":"also check the logs"}` + "\n" +
				`{"role":"assistant","text":"Noted."}`,
			asked: []bool{false, false, true},
		},
		{
			name: "while the model answers", prompt: "hello",
			kinds: []string{"step.started", "message.delta", "usage", "step.done",
				"turn.steered", "step.started", "message.delta", "usage", "step.done", "message.done", "context", "turn.done"},
			history: `{"role":"user","text":"hello"}` + "\n" + `{"role":"assistant","text":"Hi."}` + "\n" +
				`{"role":"user","text":"also check the logs"}` + "\n" + `{"role":"assistant","text":"Noted."}`,
			asked: []bool{false, true, false, true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			box := &steerBox{}
			f := newFixture(t, script, map[string]toolFunc{
				"work": func(context.Context, json.RawMessage, func(agent.Progress)) agent.ToolResult {
					box.send("also check the logs")
					return agent.ToolResult{OK: true, Output: "worked"}
				},
			}, nil)
			if !tc.inTool {
				f.events.onEmit = func(kind string) {
					if kind == "step.done" && len(f.events.payloads("step.done")) == 1 {
						box.send("also check the logs")
					}
				}
			}
			res, err := f.loop.Run(context.Background(), agent.Turn{ID: "t-1", Prompt: tc.prompt, Steered: box.take})
			if err != nil || res.Reason != events.TurnDoneReasonComplete {
				t.Fatalf("Run: %+v %v", res, err)
			}
			checkKinds(t, f.events, tc.kinds...)
			if got := f.events.payloads("turn.steered"); len(got) != 1 || got[0] != `{"turnId":"t-1","text":"also check the logs","principal":{"id":"p-1","name":"ana"}}` {
				t.Errorf("turn.steered %v", got)
			}
			if got := historyJSON(t, f.history); got != tc.history {
				t.Errorf("history:\n%s\nwant:\n%s", got, tc.history)
			}
			if len(box.asked) != len(tc.asked) {
				t.Fatalf("asked %v, want %v", box.asked, tc.asked)
			}
			for i := range tc.asked {
				if box.asked[i] != tc.asked[i] {
					t.Errorf("asked %v, want %v", box.asked, tc.asked)
				}
			}
		})
	}
}
