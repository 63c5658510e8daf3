package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/trellis-run/trellis/protocol/errcode"
	"github.com/trellis-run/trellis/runtime/provider/providertest"
)

// The states a running turn is in when the second prompt arrives.
const (
	busyStreaming = "streaming" // the model is mid-answer (its stream held by the test)
	busyTool      = "tool"      // a shell call blocks reading a fifo the test writes
	busyApproval  = "approval"  // the shell call waits for the origin's approval
)

// TestDoubleTexting: each whenBusy policy of session.prompt against a turn
// that is streaming text, running a tool, or waiting on an approval; checked
// on the session's event log (the significant kinds, in order) and on the
// conversation the model gets in its last request.
func TestDoubleTexting(t *testing.T) {
	cases := []struct {
		state, whenBusy string
		// log is the significant events of the session, in order.
		log string
		// model is the conversation of the model's last request.
		model string
		// steered: the second prompt joined the running turn.
		steered bool
		code    string // the second prompt's error code
	}{
		{busyStreaming, "enqueue",
			"turn.started turn.queued turn.done(complete) turn.dequeued(started) turn.started turn.done(complete)",
			"user:first | assistant:Part one. Part two. | user:second", false, ""},
		{busyStreaming, "queue",
			"turn.started turn.queued turn.done(complete) turn.dequeued(started) turn.started turn.done(complete)",
			"user:first | assistant:Part one. Part two. | user:second", false, ""},
		{busyStreaming, "reject", "turn.started turn.done(complete)",
			"user:first", false, "session_busy"},
		{busyStreaming, "interrupt", "turn.started turn.done(interrupted) turn.started turn.done(complete)",
			"user:first | assistant:Part one.  | user:second", false, ""},
		{busyStreaming, "rollback", "turn.started turn.done(interrupted) turn.rollback turn.started turn.done(complete)",
			"user:second", false, ""},
		{busyStreaming, "steer", "turn.started turn.steered turn.done(complete)",
			"user:first | assistant:Part one. Part two. | user:second", true, ""},

		{busyTool, "enqueue",
			"turn.started tool.call turn.queued tool.result(ok) turn.done(complete) turn.dequeued(started) turn.started turn.done(complete)",
			"user:first | assistant:Running.+shell | tool | assistant:ok | user:second", false, ""},
		{busyTool, "reject", "turn.started tool.call tool.result(ok) turn.done(complete)",
			"user:first | assistant:Running.+shell | tool", false, "session_busy"},
		{busyTool, "interrupt",
			"turn.started tool.call tool.result(failed) turn.done(interrupted) turn.started turn.done(complete)",
			"user:first | assistant:Running.+shell | tool | user:second", false, ""},
		{busyTool, "rollback",
			"turn.started tool.call tool.result(failed) turn.done(interrupted) turn.rollback turn.started turn.done(complete)",
			"user:second", false, ""},
		{busyTool, "steer", "turn.started tool.call tool.result(ok) turn.steered turn.done(complete)",
			"user:first | assistant:Running.+shell | tool | user:second", true, ""},

		{busyApproval, "enqueue",
			"turn.started turn.queued tool.call tool.result(ok) turn.done(complete) turn.dequeued(started) turn.started turn.done(complete)",
			"user:first | assistant:Running.+shell | tool | assistant:ok | user:second", false, ""},
		{busyApproval, "reject", "turn.started tool.call tool.result(ok) turn.done(complete)",
			"user:first | assistant:Running.+shell | tool", false, "session_busy"},
		{busyApproval, "interrupt",
			"turn.started tool.result(failed) turn.done(interrupted) turn.started turn.done(complete)",
			"user:first | assistant:Running.+shell | tool | user:second", false, ""},
		{busyApproval, "rollback",
			"turn.started tool.result(failed) turn.done(interrupted) turn.rollback turn.started turn.done(complete)",
			"user:second", false, ""},
		{busyApproval, "steer", "turn.started tool.call tool.result(ok) turn.steered turn.done(complete)",
			"user:first | assistant:Running.+shell | tool | user:second", true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.state+"/"+tc.whenBusy, func(t *testing.T) {
			wd, fifo := fifoWorkdir(t)
			// The first answer: text held mid-stream, or a shell call that
			// reads the fifo (the test writes it to let the call finish).
			hold := make(chan struct{})
			var first providertest.Reply
			switch tc.state {
			case busyStreaming:
				s := providertest.NewOpenAIStream("gpt-4.1").Text("Part one. ")
				n := len(s.Events())
				first = s.Text("Part two.").Finish("stop").Usage(10, 5).Reply()
				first.Hold, first.HoldAfter = hold, n
			default:
				first = readFifoCall()
			}
			srv := providertest.NewServer(t, first, okReply(), okReply(), okReply())
			d := startProviderDaemon(t, t.TempDir(), map[string]string{"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": srv.URL + "/v1"})
			c := helloWS(t, d)
			asked := make(chan struct{}, 1)
			approve := make(chan struct{})
			t.Cleanup(func() { close(approve) })
			c.onRequest = func(method string, params json.RawMessage) (any, *errcode.Error) {
				asked <- struct{}{}
				<-approve
				return map[string]any{"decision": "allow"}, nil
			}
			mode := "auto"
			if tc.state == busyApproval {
				mode = "accept"
			}
			id := createSession(t, c, map[string]any{"workdir": wd, "mode": mode})
			evs := c.Events(id)
			first1 := prompt(t, c, map[string]any{"sessionId": id, "text": "first"})

			var log []map[string]any
			switch tc.state {
			case busyStreaming:
				log = collect(t, evs, "message.delta", 1)
			case busyTool:
				log = collect(t, evs, "tool.call", 1)
			case busyApproval:
				log = collect(t, evs, "turn.started", 1)
				<-asked
			}
			var res struct {
				TurnID string `json:"turnId"`
			}
			err := c.Call(context.Background(), "session.prompt", map[string]any{"sessionId": id, "text": "second", "whenBusy": tc.whenBusy}, &res)
			if tc.code != "" {
				if err == nil || err.StringCode() != tc.code {
					t.Fatalf("second prompt: %v, want %s", err, tc.code)
				}
			} else if err != nil {
				t.Fatalf("second prompt: %v", err)
			}
			if tc.steered != (res.TurnID == first1) {
				t.Errorf("second prompt answered turn %s (first %s), steered=%v", res.TurnID, first1, tc.steered)
			}

			// Let the first turn go on (an interrupted one is gone).
			switch tc.state {
			case busyStreaming:
				close(hold)
			case busyTool:
				if tc.whenBusy != "interrupt" && tc.whenBusy != "rollback" {
					writeFifo(t, fifo)
				}
			case busyApproval:
				if tc.whenBusy != "interrupt" && tc.whenBusy != "rollback" {
					approve <- struct{}{}
					go writeFifo(t, fifo)
				}
			}
			turns := strings.Count(tc.log, "turn.done")
			log = append(log, collect(t, evs, "turn.done", turns)...)
			if got := significant(log); got != tc.log {
				t.Errorf("log:\n  %s\nwant\n  %s", got, tc.log)
			}
			for _, ev := range findKind(log, "turn.steered") {
				if ev["turnId"] != first1 || ev["text"] != "second" {
					t.Errorf("turn.steered %v: want the first turn %s and the text", ev, first1)
				}
			}
			reqs := srv.Requests()
			if got := conversation(t, reqs[len(reqs)-1]); got != tc.model {
				t.Errorf("the model's last request (%d of them):\n  %s\nwant\n  %s", len(reqs), got, tc.model)
			}
		})
	}
}

// fifoWorkdir makes a workdir holding the fifo go.fifo.
func fifoWorkdir(t *testing.T) (wd, fifo string) {
	wd = t.TempDir()
	fifo = filepath.Join(wd, "go.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	return wd, fifo
}

// readFifoCall is a model answer calling the shell to read go.fifo: the
// call runs until the test writes the fifo (writeFifo).
func readFifoCall() providertest.Reply {
	args, _ := json.Marshal(map[string]string{"command": "read line < go.fifo; echo got $line"})
	return providertest.NewOpenAIStream("gpt-4.1").Text("Running.").
		ToolCall(0, "call_1", "shell").ToolArgs(0, string(args)).Finish("tool_calls").Usage(10, 5).Reply()
}

// okReply is a model answer saying "ok".
func okReply() providertest.Reply {
	return providertest.NewOpenAIStream("gpt-4.1").Text("ok").Finish("stop").Usage(20, 1).Reply()
}

// TestSteerDuringToolAndQueueEdits: session.steer during a tool call joins
// the running turn (same turn id, started false, no new turn) and its text
// reaches the model's next call of that turn; prompts queued meanwhile are
// listed, removed one by one and cleared (turn.dequeued{removed} and
// turn.done{interrupted} each), and never run; on the idle session
// session.steer starts a turn.
func TestSteerDuringToolAndQueueEdits(t *testing.T) {
	wd, fifo := fifoWorkdir(t)
	srv := providertest.NewServer(t, readFifoCall(), okReply(), okReply())
	d := startProviderDaemon(t, t.TempDir(), map[string]string{"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": srv.URL + "/v1"})
	c := helloWS(t, d)
	ctx := context.Background()
	id := createSession(t, c, map[string]any{"workdir": wd, "mode": "auto"})
	evs := c.Events(id)
	first := prompt(t, c, map[string]any{"sessionId": id, "text": "first"})
	log := collect(t, evs, "tool.call", 1)

	var steer struct {
		OK      bool   `json:"ok"`
		Started bool   `json:"started"`
		TurnID  string `json:"turnId"`
	}
	if err := c.Call(ctx, "session.steer", map[string]any{"sessionId": id, "text": "also say which file"}, &steer); err != nil {
		t.Fatal(err)
	}
	if !steer.OK || steer.Started || steer.TurnID != first {
		t.Fatalf("session.steer during the tool call: %+v, want ok, not started, turn %s", steer, first)
	}
	q1 := prompt(t, c, map[string]any{"sessionId": id, "text": "queued one"})
	q2 := prompt(t, c, map[string]any{"sessionId": id, "text": "queued two"})
	q3 := prompt(t, c, map[string]any{"sessionId": id, "text": "queued three"})
	var list struct {
		Prompts []map[string]any `json:"prompts"`
	}
	if err := c.Call(ctx, "session.queue.list", map[string]any{"sessionId": id}, &list); err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, "session.queue.list", list.Prompts, fmt.Sprintf(`[
		{"turnId":%q,"position":1,"prompt":"queued one","attachments":0},
		{"turnId":%q,"position":2,"prompt":"queued two","attachments":0},
		{"turnId":%q,"position":3,"prompt":"queued three","attachments":0}]`, q1, q2, q3))
	if err := c.Call(ctx, "session.queue.remove", map[string]any{"sessionId": id, "turnId": q2}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "session.queue.remove", map[string]any{"sessionId": id, "turnId": q2}, nil); err == nil || err.StringCode() != "not_found" {
		t.Fatalf("removing %s again: %v, want not_found", q2, err)
	}
	list.Prompts = nil
	if err := c.Call(ctx, "session.queue.list", map[string]any{"sessionId": id}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Prompts) != 2 || list.Prompts[0]["turnId"] != q1 || list.Prompts[1]["turnId"] != q3 || list.Prompts[1]["position"] != 2.0 {
		t.Fatalf("queue after the removal: %v", list.Prompts)
	}
	var cleared struct {
		Removed int `json:"removed"`
	}
	if err := c.Call(ctx, "session.queue.clear", map[string]any{"sessionId": id}, &cleared); err != nil || cleared.Removed != 2 {
		t.Fatalf("session.queue.clear: %+v %v, want 2 removed", cleared, err)
	}
	writeFifo(t, fifo)
	// The removed prompts' turns end (three turn.done), then the first.
	log = append(log, collect(t, evs, "turn.done", 4)...)
	want := "turn.started tool.call turn.queued turn.queued turn.queued turn.dequeued(removed) turn.done(interrupted) " +
		"turn.dequeued(removed) turn.done(interrupted) turn.dequeued(removed) turn.done(interrupted) " +
		"tool.result(ok) turn.steered turn.done(complete)"
	if got := significant(log); got != want {
		t.Errorf("log:\n  %s\nwant\n  %s", got, want)
	}
	if done := payloadOf(log[len(log)-1]); done["turnId"] != first {
		t.Errorf("last turn.done %v, want the first turn's", done)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2 (the steered text goes into the same turn)", len(reqs))
	}
	if got, want := conversation(t, reqs[1]), "user:first | assistant:Running.+shell | tool | user:also say which file"; got != want {
		t.Errorf("the turn's second model call:\n  %s\nwant\n  %s", got, want)
	}

	// Idle: the steered text starts a turn of its own.
	steer.OK, steer.Started, steer.TurnID = false, false, ""
	if err := c.Call(ctx, "session.steer", map[string]any{"sessionId": id, "text": "and now?"}, &steer); err != nil {
		t.Fatal(err)
	}
	if !steer.OK || !steer.Started || steer.TurnID == first || steer.TurnID == "" {
		t.Fatalf("session.steer on the idle session: %+v, want a new turn started", steer)
	}
	if end := await(t, evs, "the steered turn's end", turnDone(steer.TurnID)); payloadOf(end)["reason"] != "complete" {
		t.Fatalf("steered turn ended %v", end)
	}
	if got, want := conversation(t, srv.Requests()[2]), "user:first | assistant:Running.+shell | tool | user:also say which file | assistant:ok | user:and now?"; got != want {
		t.Errorf("the steered turn's model call:\n  %s\nwant\n  %s", got, want)
	}
}

// writeFifo lets the shell call reading fifo finish.
func writeFifo(t *testing.T, fifo string) {
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Error(err)
		return
	}
	fmt.Fprintln(f, "go")
	f.Close()
}

// significant lists the turn-level events of a log: kinds, with the reason
// of turn.done and turn.dequeued and the outcome of tool.result.
func significant(log []map[string]any) string {
	var out []string
	for _, ev := range log {
		p := payloadOf(ev)
		switch k := fmt.Sprint(ev["kind"]); k {
		case "turn.started", "turn.queued", "turn.steered", "turn.rollback", "tool.call":
			out = append(out, k)
		case "turn.done", "turn.dequeued":
			out = append(out, fmt.Sprintf("%s(%v)", k, p["reason"]))
		case "tool.result":
			outcome := "failed"
			if p["ok"] == true {
				outcome = "ok"
			}
			out = append(out, "tool.result("+outcome+")")
		}
	}
	return strings.Join(out, " ")
}

// conversation renders the messages of a Chat Completions request but the
// system prompt: role:content, an assistant's tool calls as +name.
func conversation(t *testing.T, r providertest.Request) string {
	var out []string
	for _, m := range messages(t, r) {
		role := fmt.Sprint(m["role"])
		switch role {
		case "system":
			continue
		case "tool":
			out = append(out, "tool")
			continue
		}
		s := role + ":" + fmt.Sprint(m["content"])
		if calls, _ := m["tool_calls"].([]any); len(calls) > 0 {
			for _, c := range calls {
				fn, _ := c.(map[string]any)["function"].(map[string]any)
				s += "+" + fmt.Sprint(fn["name"])
			}
		}
		out = append(out, s)
	}
	return strings.Join(out, " | ")
}
