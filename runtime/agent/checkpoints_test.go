package agent_test

import (
	"context"
	"testing"

	"github.com/trellis-run/trellis/runtime/agent"
)

// changerTools are fakeTools whose "write" tool may change the workdir.
type changerTools struct{ *fakeTools }

func (changerTools) ChangesWorkdir(name string) bool { return name == "write" }

// checkpointLog records the loop's checkpoint asks as events of the same
// recorder, so that their place among the turn's events shows.
type checkpointLog struct{ r *recorder }

func (c checkpointLog) BeforeTool(ctx context.Context, call agent.ToolCall) {
	_ = c.r.Emit(ctx, "checkpoint", map[string]string{"before": call.Name, "callId": call.CallID})
}

func (c checkpointLog) TurnEnd(ctx context.Context, turnID string) {
	_ = c.r.Emit(ctx, "checkpoint", map[string]string{"turnEnd": turnID})
}

// TestCheckpointsAsked: the loop asks for a checkpoint right before each
// call of a tool that may change the workdir (after its tool.call), not
// before other tools, and once at the end of a turn that ran one, before
// its message.done; a turn that ran none asks nothing.
func TestCheckpointsAsked(t *testing.T) {
	script := `{"steps":[
		{"match":"change","tool_calls":[{"name":"read","arguments":{}},{"name":"write","arguments":{}},{"name":"write","arguments":{}}]},
		{"match":"look","tool_calls":[{"name":"read","arguments":{}}]},
		{"after_tool":"write","text":"Changed.","repeat":true},
		{"after_tool":"read","text":"Looked.","repeat":true}]}`
	f := newFixture(t, script, map[string]toolFunc{"read": okTool("r"), "write": okTool("w")}, nil)
	f.loop.Tools = changerTools{f.tools}
	f.loop.Checkpoints = checkpointLog{f.events}
	f.run(t, "change it")
	checkKinds(t, f.events,
		"step.started", "usage", "step.done",
		"tool.call", "tool.result",
		"tool.call", "checkpoint", "tool.result",
		"tool.call", "checkpoint", "tool.result",
		"step.started", "message.delta", "usage", "step.done",
		"checkpoint", "message.done", "context", "turn.done")
	want := `{"before":"write","callId":"call_2"} {"before":"write","callId":"call_3"} {"turnEnd":"t-1"}`
	if got := joinPayloads(f.events.payloads("checkpoint")); got != want {
		t.Errorf("checkpoints %s, want %s", got, want)
	}

	g := newFixture(t, script, map[string]toolFunc{"read": okTool("r"), "write": okTool("w")}, nil)
	g.loop.Tools = changerTools{g.tools}
	g.loop.Checkpoints = checkpointLog{g.events}
	g.run(t, "look around")
	if got := g.events.payloads("checkpoint"); len(got) != 0 {
		t.Errorf("a turn that ran no changing tool asked for checkpoints %v", got)
	}
}

func joinPayloads(p []string) string {
	out := ""
	for i, s := range p {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}
