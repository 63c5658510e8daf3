package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/protocol/events"
	"github.com/trellis-run/trellis/runtime/agent"
	"github.com/trellis-run/trellis/runtime/errs"
)

// The Guard is asked right before each tool run and each provider call:
// once it refuses, the tool does not start and no provider call is made,
// and the turn ends with the guard's error.
func TestGuardStopsToolRunAndProviderCall(t *testing.T) {
	script := `{"steps":[
		{"match":"go","tool_calls":[{"name":"shell","arguments":{"command":"touch marker"}}]},
		{"after_tool":"shell","text":"done"}]}`
	var ran atomic.Int32
	f := newFixture(t, script, map[string]toolFunc{
		"shell": func(ctx context.Context, args json.RawMessage, progress func(agent.Progress)) agent.ToolResult {
			ran.Add(1)
			return agent.ToolResult{OK: true, Output: "ran"}
		},
	}, nil)
	var asked atomic.Int32
	deposed := errs.New(errcode.LeaseLost, "this daemon no longer holds the lease")
	// The first provider call is allowed; the tool run after it is not.
	f.loop.Guard = func() error {
		if asked.Add(1) == 1 {
			return nil
		}
		return deposed
	}
	res := f.run(t, "go")
	if ran.Load() != 0 {
		t.Fatalf("the tool ran %d time(s) after the guard refused", ran.Load())
	}
	if res.Reason != events.TurnDoneReasonError || res.Steps != 1 {
		t.Fatalf("Result = %+v, want reason error after 1 step", res)
	}
	errsSeen := f.events.payloads("error")
	if len(errsSeen) != 1 || !strings.Contains(errsSeen[0], `"code":"lease_lost"`) {
		t.Fatalf("error events = %v, want one lease_lost", errsSeen)
	}
	results := f.events.payloads("tool.result")
	if len(results) != 1 || !strings.Contains(results[0], `"ok":false`) || !strings.Contains(results[0], "not run") {
		t.Fatalf("tool.result = %v, want one failed not-run result", results)
	}

	// Refused from the start: no provider call at all.
	g := newFixture(t, script, nil, nil)
	g.loop.Guard = func() error { return deposed }
	res = g.run(t, "go")
	if res.Reason != events.TurnDoneReasonError || len(g.events.payloads("message.delta")) != 0 || len(g.events.payloads("tool.call")) != 0 {
		t.Fatalf("Result = %+v, events %v: want an error before any provider output", res, g.events.kinds())
	}
	if errsSeen := g.events.payloads("error"); len(errsSeen) != 1 || !strings.Contains(errsSeen[0], `"code":"lease_lost"`) {
		t.Fatalf("error events = %v, want one lease_lost", errsSeen)
	}
}
