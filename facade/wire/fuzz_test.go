package wire_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/trellis-run/trellis/facade/wire"
)

// fuzzLog plays ops as a session would emit them: prompts that start a turn
// or queue behind it, provider calls with text, tool calls, failures, and
// turns ending for every reason, each ended turn starting the next queued
// prompt or dropping the queue. Whatever ops are, the log is one the
// runtime could store, so every rendering of it must pass the strict
// checkers.
func fuzzLog(ops []byte) []wire.Event {
	s := &script{}
	var (
		running, text string
		queue         []string
		n             int
		stepOpen      bool
		calls         []string
	)
	reasons := []string{"complete", "interrupted", "error", "budget", "denied"}
	endTurn := func(reason string, drop bool) {
		for _, c := range calls {
			s.add("tool.result", map[string]any{"callId": c, "name": "ls", "ok": false, "output": "", "error": "interrupted"})
		}
		calls, stepOpen, text = nil, false, ""
		s.done(running, reason)
		running = ""
		if drop {
			for _, q := range queue {
				s.add("turn.dequeued", map[string]any{"turnId": q, "reason": "dropped"})
				s.done(q, "interrupted")
			}
			queue = nil
		}
		if len(queue) > 0 {
			running, queue = queue[0], queue[1:]
			s.add("turn.dequeued", map[string]any{"turnId": running, "reason": "started"})
			s.start(running, "prompt "+running, true)
		}
	}
	for _, op := range ops {
		switch op % 8 {
		case 0:
			n++
			id := fmt.Sprintf("t-%d", n)
			if running == "" {
				running = id
				s.start(id, "prompt "+id, false)
			} else {
				queue = append(queue, id)
				s.add("turn.queued", map[string]any{"turnId": id, "position": len(queue), "prompt": "prompt " + id, "queued": len(queue)})
			}
		case 1:
			if running != "" && !stepOpen && len(calls) == 0 {
				s.add("step.started", map[string]any{"step": 0})
				stepOpen = true
			}
		case 2:
			if stepOpen {
				chunk := fmt.Sprintf("w%d ", op>>3)
				text += chunk
				s.add("message.delta", map[string]any{"text": chunk})
			}
		case 3, 4:
			if stepOpen {
				var tc []any
				stop := "stop"
				if op%8 == 4 {
					n++
					id := fmt.Sprintf("c-%d", n)
					calls = append(calls, id)
					tc, stop = []any{map[string]any{"id": id, "name": "ls", "args": map[string]any{}}}, "tool_use"
				}
				s.add("step.done", map[string]any{"step": 0, "text": text, "reasoning": "", "toolCalls": tc, "usage": nil, "stopReason": stop, "provider": "fake", "model": "fake-1"})
				stepOpen, text = false, ""
				for _, c := range calls {
					s.add("tool.call", map[string]any{"callId": c, "name": "ls", "args": map[string]any{}})
				}
			}
		case 5:
			if len(calls) > 0 {
				s.add("tool.result", map[string]any{"callId": calls[0], "name": "ls", "ok": op&8 != 0, "output": "a", "error": nil})
				calls = calls[1:]
			}
		case 6:
			if stepOpen {
				s.add("step.done", map[string]any{"step": 0, "text": text, "reasoning": "", "toolCalls": []any{}, "usage": nil, "stopReason": "error", "provider": "fake", "model": "fake-1"})
				s.add("error", map[string]any{"code": "provider_error", "message": "upstream returned 500"})
				endTurn("error", false)
			}
		case 7:
			if running != "" {
				endTurn(reasons[int(op>>3)%len(reasons)], op&0x80 != 0)
			}
		}
	}
	for running != "" {
		endTurn("complete", false)
	}
	return s.events
}

// FuzzRenderings renders logs fuzzLog builds in both formats: every
// rendering obeys WIRE-FORMATS.md, and a log rendered whole gives the lines
// its prefixes gave (a stream that follows the log live sends the bytes a
// replay sends).
func FuzzRenderings(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 1, 2, 3},
		{0, 1, 0, 2, 3, 7, 1, 2, 3, 7},
		{0, 1, 2, 0, 4, 5, 1, 2, 6, 1, 3, 7},
		{0, 0, 0, 1, 2, 3, 15, 1, 3, 7 | 0x80},
		{0, 1, 4, 0, 7 | 8, 1, 2, 3},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		evs := fuzzLog(ops)
		checkEvents(t, render(t, wire.FormatEvents, evs), evs)
		for _, format := range []wire.Format{wire.FormatWire, wire.FormatPi} {
			whole := render(t, format, evs)
			if format == wire.FormatWire {
				checkWire(t, whole)
			} else {
				checkPi(t, whole)
			}
			half := render(t, format, evs[:len(evs)/2])
			if !slices.Equal(half, whole[:len(half)]) {
				t.Fatalf("%s: the first half of the log renders differently alone", format)
			}
		}
	})
}
